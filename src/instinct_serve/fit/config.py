"""A typed view of a Hugging Face ``config.json``, the way vLLM reads it.

Multimodal checkpoints keep the language model under ``text_config`` (Qwen3.5, Qwen3-VL,
Gemma 3, Llama 4, ...) or ``llm_config`` (InternVL); vLLM sizes the KV cache from that
sub-config, so every accessor reads the merged text view: the top level first, overlaid by
the text sub-config (``tie_word_embeddings`` and ``quantization_config`` often stay on top).

Every number the estimator reads is checked once, when the view is built (``check_config``):
whole numbers are ints (or integral floats), never booleans, within the bounds of
``INT_LIMITS``; floats are finite and positive; lists and strings have the shape and length
the estimator expects. A violation is a ``UsageError`` with the id ``bad_model_config`` that
names the key and its value, so no later arithmetic can hang, overflow or divide by zero on
a corrupt or hostile config. The bounds are the largest values of published checkpoints
times a margin (the figure next to each), far above any real model and far below what
would make a per-layer loop or a float conversion misbehave.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from instinct_serve.errors import UsageError
from instinct_serve.fit.dtypes import torch_dtype_bytes

_TEXT_KEYS = ("text_config", "llm_config", "language_config")
_TOWER_KEYS = ("vision_config", "audio_config", "vision_tower_config", "speech_config")

# -- bounds ------------------------------------------------------------------------------
# The largest published values (config.json of the checkpoints named), and the margin.
MAX_LAYERS = 1024  # Llama 3.1 405B: 126 decoder layers, Nemotron-H: 118; ~8x
MAX_MTP_LAYERS = 64  # MTP modules: 1 in DeepSeek-V3, Qwen3.5, GLM-4.5; 64x
MAX_HIDDEN = 1 << 17  # 131,072: Llama 3.1 405B 16,384, PaLM 18,432; ~7x
MAX_INTERMEDIATE = 1 << 20  # 1,048,576: Llama 3.1 405B 53,248, PaLM 73,728; ~14x
MAX_HEADS = 1024  # attention (or SSM) heads: DeepSeek-V3 and Llama 3.1 405B 128; 8x
MAX_HEAD_DIM = 1 << 13  # 8,192: Gemma 2/3 and Qwen3-Next 256, MLA qk_nope 128; 32x
MAX_RANK = 1 << 16  # MLA latent ranks: DeepSeek-V3 kv_lora_rank 512, q_lora_rank 1,536; ~40x
MAX_VOCAB = 1 << 22  # 4,194,304: Gemma 3 262,208; 16x
MAX_POSITIONS = 1 << 26  # 67,108,864 tokens: Llama 4 Scout 10,485,760; 6.4x (= --max-model-len)
MAX_EXPERTS = 4096  # routed experts: Qwen3-Next 512, Kimi K2 384; 8x
MAX_SHARED_EXPERTS = 256  # DeepSeek-V3, Kimi K2: 1; Qwen2-MoE: 1 (as a size); 256x
MAX_SMALL = 64  # conv kernels (4), expansion factors (2), merge/temporal sizes (2), channels (3)
MAX_PATCH = 1024  # vision patch size: 14-16; 64x
MAX_BLOCK = 1 << 16  # fp8 weight_block_size: [128, 128] in DeepSeek-V3, Qwen3 FP8; 512x
MAX_ROPE_FACTOR = 1024.0  # rope_scaling.factor: 8 (Llama 3.1), 32 (Kimi K2), 40 (DeepSeek-V3)
MAX_LIST = MAX_LAYERS + MAX_MTP_LAYERS  # per-layer lists (layer_types, mlp_only_layers, ...)
MAX_TEXT = 256  # names: dtypes, model types, layer kinds

# key -> (lowest, highest). Zero is allowed where the code reads 0 as "none"/"the default".
INT_LIMITS: dict[str, tuple[int, int]] = {
    # depth
    "num_hidden_layers": (1, MAX_LAYERS),
    "n_layer": (1, MAX_LAYERS),
    "num_layers": (1, MAX_LAYERS),
    "num_nextn_predict_layers": (0, MAX_MTP_LAYERS),
    "mtp_num_hidden_layers": (0, MAX_MTP_LAYERS),
    "first_k_dense_replace": (0, MAX_LAYERS),
    "moe_layer_freq": (0, MAX_LAYERS),
    "decoder_sparse_step": (0, MAX_LAYERS),
    "full_attention_interval": (0, MAX_LAYERS),
    "attn_layer_period": (1, MAX_LAYERS),  # a modulus: never 0
    "attn_layer_offset": (0, MAX_LAYERS),
    "sliding_window_pattern": (0, MAX_LAYERS),
    "no_rope_layer_interval": (0, MAX_LAYERS),
    # widths
    "hidden_size": (1, MAX_HIDDEN),
    "d_model": (1, MAX_HIDDEN),
    "n_embd": (1, MAX_HIDDEN),
    "intermediate_size": (1, MAX_INTERMEDIATE),
    "ffn_dim": (1, MAX_INTERMEDIATE),
    "ffn_hidden_size": (1, MAX_INTERMEDIATE),
    "n_inner": (1, MAX_INTERMEDIATE),
    "moe_intermediate_size": (1, MAX_INTERMEDIATE),
    "shared_expert_intermediate_size": (0, MAX_INTERMEDIATE),
    "mamba_intermediate_size": (1, MAX_INTERMEDIATE),
    # heads
    "num_attention_heads": (1, MAX_HEADS),
    "n_head": (1, MAX_HEADS),
    "num_heads": (1, MAX_HEADS),
    "num_key_value_heads": (1, MAX_HEADS),
    "num_kv_heads": (1, MAX_HEADS),
    "multi_query_group_num": (1, MAX_HEADS),
    "linear_num_key_heads": (1, MAX_HEADS),
    "linear_num_value_heads": (1, MAX_HEADS),
    "mamba_num_heads": (1, MAX_HEADS),
    "n_groups": (0, MAX_HEADS),
    "mamba_n_groups": (0, MAX_HEADS),
    # head and state dims
    "head_dim": (1, MAX_HEAD_DIM),
    "head_size": (1, MAX_HEAD_DIM),
    "v_head_dim": (1, MAX_HEAD_DIM),
    "qk_rope_head_dim": (1, MAX_HEAD_DIM),
    "qk_nope_head_dim": (1, MAX_HEAD_DIM),
    "linear_key_head_dim": (1, MAX_HEAD_DIM),
    "linear_value_head_dim": (1, MAX_HEAD_DIM),
    "mamba_head_dim": (1, MAX_HEAD_DIM),
    "ssm_state_size": (1, MAX_HEAD_DIM),
    "mamba_d_state": (1, MAX_HEAD_DIM),
    "state_size": (1, MAX_HEAD_DIM),
    "kv_lora_rank": (1, MAX_RANK),
    "q_lora_rank": (0, MAX_RANK),
    # recurrent kernels
    "linear_conv_kernel_dim": (0, MAX_SMALL),
    "mamba_d_conv": (0, MAX_SMALL),
    "conv_kernel": (0, MAX_SMALL),
    "mamba_expand": (0, MAX_SMALL),
    "expand": (0, MAX_SMALL),
    # vocabulary and context
    "vocab_size": (1, MAX_VOCAB),
    "padded_vocab_size": (1, MAX_VOCAB),
    "max_position_embeddings": (1, MAX_POSITIONS),
    "max_sequence_length": (1, MAX_POSITIONS),
    "seq_length": (1, MAX_POSITIONS),
    "n_positions": (1, MAX_POSITIONS),
    "sliding_window": (0, MAX_POSITIONS),  # 0: no window
    "attention_chunk_size": (0, MAX_POSITIONS),
    # mixture of experts
    "num_experts": (0, MAX_EXPERTS),
    "n_routed_experts": (0, MAX_EXPERTS),
    "num_local_experts": (0, MAX_EXPERTS),
    "num_experts_per_tok": (0, MAX_EXPERTS),
    "experts_per_token": (0, MAX_EXPERTS),
    "moe_topk": (0, MAX_EXPERTS),
    "n_shared_experts": (0, MAX_SHARED_EXPERTS),
}

# The vision tower's numbers (``vision_config``), read for Qwen-VL towers and the encoder
# profile.
TOWER_INT_LIMITS: dict[str, tuple[int, int]] = {
    "depth": (1, MAX_LAYERS),
    "hidden_size": (1, MAX_HIDDEN),
    "intermediate_size": (1, MAX_INTERMEDIATE),
    "out_hidden_size": (1, MAX_HIDDEN),
    "spatial_merge_size": (0, MAX_SMALL),
    "patch_size": (1, MAX_PATCH),
    "temporal_patch_size": (1, MAX_SMALL),
    "in_channels": (1, MAX_SMALL),
    "num_position_embeddings": (0, MAX_INTERMEDIATE),
}

# Per-layer lists: key -> whether the items are layer kinds (text) or whole numbers.
_LIST_KEYS = {
    "layer_types": "text",
    "layers_block_type": "text",
    "mlp_only_layers": "int",
    "no_rope_layers": "int",
}
_TEXT_VALUE_KEYS = (
    "torch_dtype",
    "dtype",
    "mamba_ssm_dtype",
    "mamba_ssm_cache_dtype",
    "model_type",
    "hybrid_override_pattern",
)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(key: str, value: Any, problem: str) -> UsageError:
    return UsageError(
        f"config.json: {key} = {_shown(value)} {problem}",
        fix="check the model's config.json (re-download it, or correct the value); "
        "instinct-serve refuses values no published model has",
        id="bad_model_config",
        details={"key": key, "value": _shown(value)},
    )


def _kind(value: Any) -> str:
    return {
        bool: "a boolean",
        str: "text",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def checked_int(key: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int within [low, high], or ``bad_model_config``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(key, value, f"is {_kind(value)}, not a whole number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _bad(key, value, "is not a finite number")
        if not value.is_integer():
            raise _bad(key, value, "is not a whole number")
    if not low <= value <= high:
        raise _bad(key, value, f"is outside [{low}, {high:,}]")
    return int(value)


def checked_float(key: str, value: Any, high: float) -> float:
    """``value`` as a finite float in (0, high], or ``bad_model_config``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(key, value, f"is {_kind(value)}, not a number")
    if not math.isfinite(value):
        raise _bad(key, value, "is not a finite number")
    if not 0 < value <= high:
        raise _bad(key, value, f"is outside (0, {high:g}]")
    return float(value)


def _check_list(key: str, value: Any, items: str) -> None:
    if not isinstance(value, list):
        raise _bad(key, value, f"is {_kind(value)}, not a list")
    if len(value) > MAX_LIST:
        raise _bad(key, f"({len(value)} items)", f"has more than {MAX_LIST} items")
    for item in value:
        if items == "int":
            checked_int(key, item, 0, MAX_LIST)
        elif not isinstance(item, str) or len(item) > MAX_TEXT:
            raise _bad(key, item, "is not a layer kind name")


def _check_per_layer(key: str, value: list[Any], low: int, high: int) -> None:
    """A list of per-layer values of a number (some families write one per layer): each
    within the number's bounds, at most ``MAX_LIST`` of them. The estimator does not model
    per-layer values: the accessors read the key as absent, as vLLM's defaults would."""
    if len(value) > MAX_LIST:
        raise _bad(key, f"({len(value)} items)", f"has more than {MAX_LIST} items")
    for item in value:
        checked_int(key, item, low, high)


def _check_text(key: str, value: Any, longest: int) -> None:
    if not isinstance(value, str):
        raise _bad(key, value, f"is {_kind(value)}, not text")
    if len(value) > longest:
        raise _bad(key, value, f"is longer than {longest} characters")


def check_config(
    text: Mapping[str, Any], quantization: Mapping[str, Any], top: Mapping[str, Any]
) -> None:
    """Check every value the estimator (and the planner, through ``ModelMeta.config``)
    reads: ``text`` is the merged text view, ``top`` the whole config (identity keys and the
    towers). Raise ``bad_model_config`` on the first value out of bounds or of the wrong
    type."""
    for view in (top, text):
        for key in ("model_type",):
            if view.get(key) is not None:
                _check_text(key, view[key], MAX_TEXT)
        archs = view.get("architectures")
        if archs is not None:
            if not isinstance(archs, list) or len(archs) > MAX_SMALL:
                raise _bad("architectures", archs, "is not a list of class names")
            for arch in archs:
                _check_text("architectures", arch, MAX_TEXT)
    for key, (low, high) in INT_LIMITS.items():
        value = text.get(key)
        if isinstance(value, list):  # per-layer values (OpenELM's heads, Hunyuan's top-k):
            _check_per_layer(key, value, low, high)  # bounded, then read as absent
        elif value is not None:
            checked_int(key, value, low, high)
    for key, items in _LIST_KEYS.items():
        value = text.get(key)
        if value is not None:
            _check_list(key, value, items)
    for key in _TEXT_VALUE_KEYS:
        value = text.get(key)
        if value is not None:
            _check_text(key, value, MAX_LIST if key == "hybrid_override_pattern" else MAX_TEXT)
    for key in ("rope_scaling", "rope_parameters"):
        rope = text.get(key)
        if isinstance(rope, Mapping) and rope.get("factor") is not None:
            checked_float(f"{key}.factor", rope["factor"], MAX_ROPE_FACTOR)
    block = quantization.get("weight_block_size")
    if block is not None:
        name = "quantization_config.weight_block_size"
        if not isinstance(block, list) or len(block) != 2:
            raise _bad(name, block, "is not a pair of block sizes such as [128, 128]")
        for size in block:
            checked_int(name, size, 1, MAX_BLOCK)
    vision = top.get("vision_config")
    if isinstance(vision, Mapping):
        for key, (low, high) in TOWER_INT_LIMITS.items():
            value = vision.get(key)
            if value is not None:
                checked_int(f"vision_config.{key}", value, low, high)
        deepstack = vision.get("deepstack_visual_indexes")
        if deepstack is not None:
            name = "vision_config.deepstack_visual_indexes"
            if not isinstance(deepstack, list) or len(deepstack) > MAX_SMALL:
                raise _bad(name, deepstack, f"is not a list of at most {MAX_SMALL} layers")
            for item in deepstack:
                checked_int(name, item, 0, MAX_LAYERS)
    # head_dim defaults to hidden_size // num_attention_heads: it must not be 0
    if text.get("head_dim") is None and text.get("head_size") is None:
        hidden = _first(text, "hidden_size", "d_model", "n_embd")
        heads = _first(text, "num_attention_heads", "n_head", "num_heads")
        scalars = not isinstance(hidden, list) and not isinstance(heads, list)  # per-layer: absent
        if hidden is not None and heads is not None and scalars and int(hidden) < int(heads):
            raise _bad(
                "hidden_size",
                hidden,
                f"is smaller than num_attention_heads ({heads}): the head size would be 0",
            )


def _first(text: Mapping[str, Any], *keys: str) -> Any:
    return next((text[k] for k in keys if text.get(k) is not None), None)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


class ModelConfig:
    """Read-only accessors over ``config.json`` with vLLM's defaults."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw: dict[str, Any] = dict(raw)
        merged = {k: v for k, v in raw.items() if k not in _TEXT_KEYS}
        for key in _TEXT_KEYS:
            sub = raw.get(key)
            if isinstance(sub, Mapping) and ("num_hidden_layers" in sub or "hidden_size" in sub):
                merged.update(sub)
                break
        self.text: dict[str, Any] = merged
        check_config(merged, self.quantization_config, self.raw)

    # -- generic access ------------------------------------------------------------------
    def get(self, *keys: str, default: Any = None) -> Any:
        """The first present, non-null value among ``keys`` in the text view."""
        for key in keys:
            value = self.text.get(key)
            if value is not None:
                return value
        return default

    def get_int(self, *keys: str, default: int | None = None) -> int | None:
        for key in keys:
            value = _as_int(self.text.get(key))
            if value is not None:
                return value
        return default

    def require_int(self, *keys: str) -> int:
        value = self.get_int(*keys)
        if value is None:
            raise KeyError(keys[0])
        return value

    # -- identity ------------------------------------------------------------------------
    @property
    def model_type(self) -> str:
        return str(self.raw.get("model_type") or self.text.get("model_type") or "")

    @property
    def text_model_type(self) -> str:
        return str(self.text.get("model_type") or self.model_type)

    @property
    def architectures(self) -> list[str]:
        arch = self.raw.get("architectures") or self.text.get("architectures") or []
        return [str(a) for a in arch] if isinstance(arch, list) else []

    # -- shapes --------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return self.require_int("num_hidden_layers", "n_layer", "num_layers")

    @property
    def hidden_size(self) -> int:
        return self.require_int("hidden_size", "d_model", "n_embd")

    @property
    def num_attention_heads(self) -> int:
        return self.require_int("num_attention_heads", "n_head", "num_heads")

    @property
    def num_kv_heads(self) -> int:
        """``num_key_value_heads`` (GQA), else MQA/GLM variants, else MHA."""
        value = self.get_int("num_key_value_heads", "num_kv_heads", "multi_query_group_num")
        if value is None and self.text.get("multi_query") is True:
            value = 1
        return value if value is not None else self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """vLLM's ``get_head_size``: ``head_dim`` when set, else hidden / heads."""
        value = self.get_int("head_dim", "head_size")
        return value if value is not None else self.hidden_size // self.num_attention_heads

    @property
    def vocab_size(self) -> int | None:
        return self.get_int("vocab_size", "padded_vocab_size")

    @property
    def intermediate_size(self) -> int | None:
        return self.get_int("intermediate_size", "ffn_dim", "ffn_hidden_size", "n_inner")

    @property
    def tie_word_embeddings(self) -> bool:
        value = self.text.get("tie_word_embeddings")
        if value is None:
            value = self.raw.get("tie_word_embeddings")
        return bool(value) if value is not None else False

    @property
    def dtype_bytes(self) -> int:
        return torch_dtype_bytes(self.get("torch_dtype", "dtype"))

    @property
    def dtype_name(self) -> str:
        return str(self.get("torch_dtype", "dtype", default="bfloat16")).removeprefix("torch.")

    @property
    def max_position_embeddings(self) -> int | None:
        return self.get_int(
            "max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"
        )

    # -- MoE -----------------------------------------------------------------------------
    @property
    def num_experts(self) -> int:
        return self.get_int("num_experts", "n_routed_experts", "num_local_experts", default=0) or 0

    @property
    def experts_per_token(self) -> int:
        return self.get_int("num_experts_per_tok", "experts_per_token", "moe_topk", default=0) or 0

    @property
    def moe_intermediate_size(self) -> int | None:
        return self.get_int("moe_intermediate_size") or (
            self.intermediate_size if self.num_experts else None
        )

    @property
    def shared_expert_intermediate_size(self) -> int:
        value = self.get_int("shared_expert_intermediate_size")
        if value is not None:
            return value
        shared = self.get_int("n_shared_experts", default=0) or 0
        return shared * (self.moe_intermediate_size or 0)

    # -- MLA / MTP -----------------------------------------------------------------------
    @property
    def uses_mla(self) -> bool:
        return self.get_int("kv_lora_rank") is not None

    @property
    def mtp_layers(self) -> int:
        return self.get_int("num_nextn_predict_layers", "mtp_num_hidden_layers", default=0) or 0

    # -- quantization --------------------------------------------------------------------
    @property
    def quantization_config(self) -> dict[str, Any]:
        qc = self.raw.get("quantization_config") or self.text.get("quantization_config")
        return dict(qc) if isinstance(qc, Mapping) else {}

    @property
    def quant_method(self) -> str | None:
        method = self.quantization_config.get("quant_method")
        return str(method).lower() if method else None

    # -- towers --------------------------------------------------------------------------
    @property
    def tower_configs(self) -> dict[str, dict[str, Any]]:
        """Vision/audio encoder configs present at the top level."""
        return {
            key: dict(value)
            for key in _TOWER_KEYS
            if isinstance(value := self.raw.get(key), Mapping)
        }

    @property
    def is_multimodal(self) -> bool:
        return bool(self.tower_configs)
