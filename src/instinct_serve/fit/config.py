"""A typed view of a Hugging Face ``config.json``, the way vLLM reads it.

Multimodal checkpoints keep the language model under ``text_config`` (Qwen3.5, Qwen3-VL,
Gemma 3, Llama 4, ...) or ``llm_config`` (InternVL); vLLM sizes the KV cache from that
sub-config, so every accessor reads the merged text view: the top level first, overlaid by
the text sub-config (``tie_word_embeddings`` and ``quantization_config`` often stay on top).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from instinct_serve.fit.dtypes import torch_dtype_bytes

_TEXT_KEYS = ("text_config", "llm_config", "language_config")
_TOWER_KEYS = ("vision_config", "audio_config", "vision_tower_config", "speech_config")


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
