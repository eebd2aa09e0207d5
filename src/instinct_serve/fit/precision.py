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


def precision_from_name(model_id: str) -> str | None:
    """``Qwen3-8B-FP8`` -> ``fp8``; None when the name says nothing."""
    name = model_id.rsplit("/", 1)[-1]
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
    text = config.get("text_config")
    quant = config.get("quantization_config") or (
        text.get("quantization_config") if isinstance(text, Mapping) else None
    )
    if not isinstance(quant, Mapping):
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
