"""Loaded weight bytes per TP rank, from the stored bytes.

"Model loading took X GiB" is what torch allocated for the weights on one rank. It differs
from the checkpoint bytes in four known ways, each applied here from the config:

1. skipped tensors: MTP layers (unless MTP speculation is on), vision/audio towers with
   ``--language-model-only``, an ``lm_head`` duplicate of tied embeddings;
2. sharding: everything splits over TP except what vLLM replicates on every rank -
   K/V projections once TP exceeds the KV heads (each rank keeps one head), the MLA
   ``q_a``/``kv_a`` projections, MoE router gates, norms - and the vocabulary is padded
   to 64 rows before it is split;
3. kernel padding: MXFP4 MoE weights are padded per rank to the kernel alignment
   (``round_up(intermediate / tp, a_i)``, ``round_up(hidden, a_h)``): 256/256 on ROCm
   with AITER/CK, 128/256 with Marlin on CUDA. gpt-oss-120b: 65.25 GB stored, 68.59 GiB
   loaded on MI300X (68.7 logged);
4. small buffers (rotary caches, sinks) are not modelled (< 0.1 GiB).
"""

from __future__ import annotations

from dataclasses import dataclass

from instinct_serve.errors import InstinctError
from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.meta import ModelMeta

MOE_ALIGNMENT = {"rocm": (256, 256), "cuda_marlin": (128, 256)}


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


@dataclass(frozen=True)
class WeightEstimate:
    checkpoint_bytes: int
    loaded_bytes: int  # whole model after skipped parts, before sharding
    per_rank_bytes: int
    skipped: dict[str, int]
    replicated_bytes_per_rank: int
    padding_bytes_per_rank: int
    notes: tuple[str, ...] = ()


def _linear_bytes(cfg: ModelConfig) -> float:
    method = cfg.quant_method
    if method in ("fp8", "compressed-tensors", "fbgemm_fp8", "quark"):
        return 1.0
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        return 0.5
    return float(cfg.dtype_bytes)


def _replicated_extra(cfg: ModelConfig, tp: int, attention_layers: int) -> int:
    """Bytes per rank above an even 1/tp split, for what vLLM replicates."""
    if tp == 1:
        return 0
    h = cfg.hidden_size
    lin = _linear_bytes(cfg)
    if cfg.quant_method == "mxfp4":  # gpt-oss keeps attention and router in bf16
        lin = float(cfg.dtype_bytes)
    extra = 0.0
    share = 1 - 1 / tp
    if cfg.uses_mla:
        q_rank = cfg.get_int("q_lora_rank", default=0) or 0
        latent = cfg.require_int("kv_lora_rank") + cfg.require_int("qk_rope_head_dim")
        extra += cfg.num_layers * h * (q_rank + latent) * lin * share
    else:
        kv = cfg.num_kv_heads
        if tp > kv:
            per_layer = 2 * h * cfg.head_dim * lin
            extra += attention_layers * per_layer * (1 - kv / tp)
    if cfg.num_experts:
        extra += cfg.num_layers * cfg.num_experts * h * cfg.dtype_bytes * share
    extra += (2 * cfg.num_layers + 1) * h * cfg.dtype_bytes * share
    vocab = cfg.vocab_size or 0
    n_embed = 1 if cfg.tie_word_embeddings else 2
    extra += (_round_up(vocab, 64) - vocab) * h * cfg.dtype_bytes * n_embed / tp
    return int(extra)


def _mxfp4_expert_bytes(experts: int, inter: int, hidden: int) -> int:
    """One layer of gpt-oss MXFP4 experts: FP4 pairs + E8M0 scales + bf16 biases."""
    gate_up = 2 * inter * hidden
    down = hidden * inter
    return experts * (
        gate_up // 2 + gate_up // 32 + 2 * (2 * inter) + down // 2 + down // 32 + 2 * hidden
    )


def _moe_padding(cfg: ModelConfig, tp: int, alignment: tuple[int, int] | None) -> int:
    if alignment is None or cfg.quant_method != "mxfp4" or not cfg.num_experts:
        return 0
    inter = cfg.intermediate_size or 0
    h = cfg.hidden_size
    a_i, a_h = alignment
    per_rank_inter = inter // tp
    padded = _mxfp4_expert_bytes(cfg.num_experts, _round_up(per_rank_inter, a_i), _round_up(h, a_h))
    plain = _mxfp4_expert_bytes(cfg.num_experts, per_rank_inter, h)
    return cfg.num_layers * (padded - plain)


def estimate_weights(
    meta: ModelMeta,
    cfg: ModelConfig,
    *,
    tp: int,
    attention_layers: int,
    language_model_only: bool,
    load_mtp: bool,
    moe_alignment: tuple[int, int] | None,
) -> WeightEstimate:
    stored = meta.checkpoint_bytes
    if stored is None:
        raise InstinctError(
            f"the weight size of {meta.model_id} is unknown: no safetensors metadata, and "
            f"its architecture ({cfg.model_type or 'unknown'}) is not modelled from shapes",
            fix="pass a local model directory with its *.safetensors files, or go online "
            "so the Hub's safetensors metadata can be read",
            id="weights_unknown",
        )
    notes: list[str] = []
    skipped: dict[str, int] = {}
    parts = meta.component_bytes
    if parts.get("mtp") and not load_mtp:
        skipped["mtp"] = parts["mtp"]
    if parts.get("vision") and language_model_only:
        skipped["vision"] = parts["vision"]
    if parts.get("tied_lm_head"):
        skipped["tied_lm_head"] = parts["tied_lm_head"]
    if language_model_only and cfg.is_multimodal and "vision" not in parts:
        notes.append("vision tower size unknown: --language-model-only saving not counted")
    loaded = stored - sum(skipped.values())
    replicated = _replicated_extra(cfg, tp, attention_layers)
    padding = _moe_padding(cfg, tp, moe_alignment)
    if padding:
        a_i, a_h = moe_alignment or (0, 0)
        notes.append(
            f"MXFP4 MoE weights padded to the kernel alignment (intermediate/tp to {a_i}, "
            f"hidden to {a_h}): +{padding / 2**30:.2f} GiB per GPU"
        )
    per_rank = -(-loaded // tp) + replicated + padding
    return WeightEstimate(
        checkpoint_bytes=stored,
        loaded_bytes=loaded,
        per_rank_bytes=per_rank,
        skipped=skipped,
        replicated_bytes_per_rank=replicated,
        padding_bytes_per_rank=padding,
        notes=tuple(notes),
    )
