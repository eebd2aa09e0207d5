"""The precision a checkpoint is stored in: from its config's ``quantization_config`` (what vLLM
reads), else from its name (``Qwen3-8B-FP8``), else its float dtype. The names are the
catalog's (``data/gpu_overrides.json`` ``precision``), so the planner can ask whether a gfx
target runs them natively, emulated, or not at all."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_QUANT_NAME = (
    (re.compile(r"nvfp4", re.I), "nvfp4"),
    (re.compile(r"mxfp4", re.I), "mxfp4"),
    (re.compile(r"mxfp8", re.I), "mxfp8"),
    (re.compile(r"fp8", re.I), "fp8"),
    (re.compile(r"awq|gptq|int4|w4a16", re.I), "int4"),
    (re.compile(r"w8a8|int8", re.I), "int8"),
)


# NVIDIA's ModelOpt releases spell NVFP4 as plain ``-FP4`` (nvidia/DeepSeek-R1-0528-FP4)
_NVIDIA_FP4 = re.compile(r"(?<![a-z])fp4(?![a-z0-9])", re.I)


def precision_from_name(model_id: str) -> str | None:
    """``Qwen3-8B-FP8`` -> ``fp8``, ``nvidia/DeepSeek-R1-FP4`` -> ``nvfp4``; None when the
    name says nothing."""
    org, _, name = model_id.rpartition("/")
    if org.lower() == "nvidia" and _NVIDIA_FP4.search(name):
        return "nvfp4"
    for pattern, precision in _QUANT_NAME:
        if pattern.search(name):
            return precision
    return None


def precision_from_config(config: Mapping[str, Any]) -> str | None:
    """The stored precision from a ``config.json``; None when it says nothing special.

    ``quant_method`` as vLLM dispatches on it: ``fp8``, ``mxfp4``, AWQ/GPTQ (int4 unless
    ``bits`` says 8), ``compressed-tensors`` (its weight groups: 8-bit float = fp8, 8-bit int
    = int8, 4-bit ``nvfp4-pack-quantized`` = nvfp4, 4-bit int = int4), ``modelopt``
    (``quant_algo``), bitsandbytes, and vendor formats that only run on their hardware
    (Ascend's ``ascend``)."""
    quant = _quantization(config)
    if quant is None:
        return None
    method = str(quant.get("quant_method") or "").lower()
    if method in ("fp8", "ptpc_fp8", "fbgemm_fp8"):
        return "fp8"
    if method in ("mxfp4", "mxfp8", "mxfp6"):
        return method
    if method in ("awq", "awq_marlin", "gptq", "gptq_marlin", "marlin"):
        return "int8" if quant.get("bits") == 8 else "int4"
    if method == "bitsandbytes":
        return "int8" if quant.get("load_in_8bit") else "int4"
    if method == "modelopt":
        algo = str(quant.get("quant_algo") or "").upper()
        return "nvfp4" if "FP4" in algo else "fp8" if "FP8" in algo else None
    if method == "compressed-tensors":
        fmt = str(quant.get("format") or "").lower()
        if "nvfp4" in fmt:
            return "nvfp4"
        groups = quant.get("config_groups")
        for group in groups.values() if isinstance(groups, Mapping) else ():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if not isinstance(weights, Mapping):
                continue
            bits, kind = weights.get("num_bits"), str(weights.get("type") or "")
            if bits == 8:
                return "fp8" if kind == "float" else "int8"
            if bits == 4:
                return "nvfp4" if kind == "float" else "int4"
        return None
    if method in ("ascend", "npu"):
        return "ascend"
    return method or None


def _quantization(config: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The ``quantization_config`` of a config (or of its ``text_config``)."""
    if config is None:
        return None
    text = config.get("text_config")
    quant = config.get("quantization_config") or (
        text.get("quantization_config") if isinstance(text, Mapping) else None
    )
    return quant if isinstance(quant, Mapping) else None


_FP8_KV_NAME = re.compile(r"fp8-kv(?![a-z0-9])", re.I)


def fp8_kv_cache(model_id: str, config: Mapping[str, Any] | None) -> str | None:
    """Why a checkpoint's KV cache is meant to be fp8 (``--kv-cache-dtype fp8``: it ships the
    KV scales, and bf16 KV holds half the tokens), or None. Its name (AMD's
    ``amd/Llama-3.1-70B-Instruct-FP8-KV``), else its ``quantization_config``: a
    compressed-tensors ``kv_cache_scheme``, ModelOpt's ``kv_cache_quant_algo`` FP8, Quark's
    ``kv_cache_group``."""
    if _FP8_KV_NAME.search(model_id.rsplit("/", 1)[-1]):
        return "its name says FP8-KV: the checkpoint ships fp8 KV-cache scales"
    quant = _quantization(config)
    if quant is None:
        return None
    export = quant.get("export")
    if quant.get("kv_cache_scheme"):
        key = "kv_cache_scheme"
    elif "FP8" in str(quant.get("kv_cache_quant_algo") or "").upper():
        key = "kv_cache_quant_algo"
    elif isinstance(export, Mapping) and export.get("kv_cache_group"):
        key = "export.kv_cache_group"
    else:
        return None
    return f"its config.json quantization_config has a {key}: the checkpoint ships fp8 KV scales"


def checkpoint_precision(model_id: str, config: Mapping[str, Any] | None) -> tuple[str | None, str]:
    """(precision, where it was read): the config first, then the name; (None, "") when
    neither says (a plain float checkpoint: its dtype decides, bf16 or fp16)."""
    if config is not None:
        found = precision_from_config(config)
        if found:
            return found, "its config.json quantization_config"
    found = precision_from_name(model_id)
    if found:
        return found, "its name"
    if config is not None:
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "").lower()
        if dtype in ("bfloat16", "float16"):
            return ("bf16" if dtype == "bfloat16" else "fp16"), "its config.json dtype"
    return None, ""
