"""Exact stored parameter counts from ``config.json`` tensor shapes, for known families.

Used when a model has no safetensors metadata to read (a local directory with only a
config, a Hub repo of ``.bin`` files), to split a Hub per-dtype total into the parts vLLM
may skip (vision tower with ``--language-model-only``, MTP layers without speculative
decoding), and to build the shipped metadata. Each family is written from its checkpoint
layout and checked in the tests against published per-dtype totals (DeepSeek-V3's
``BF16``/``F8_E4M3``/``F32`` counts, gpt-oss's ``BF16``/``U8`` counts, Llama's ``BF16``
total, Qwen3.5-9B's index ``total_size``), so a family is either exact or refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.dtypes import dtype_bytes

LANGUAGE = "language"
VISION = "vision"
MTP = "mtp"


class UnsupportedArchitecture(Exception):
    """The family's tensor layout is not modelled: fall back to other metadata."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class ParamCount:
    """Stored elements per safetensors dtype, split by component."""

    components: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, component: str, dtype: str, n: int) -> None:
        if n:
            bucket = self.components.setdefault(component, {})
            bucket[dtype] = bucket.get(dtype, 0) + n

    @property
    def dtype_counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for counts in self.components.values():
            for dtype, n in counts.items():
                total[dtype] = total.get(dtype, 0) + n
        return dict(sorted(total.items()))

    def component_bytes(self) -> dict[str, int]:
        return {name: dtype_bytes(counts) for name, counts in self.components.items()}

    @property
    def total_bytes(self) -> int:
        return dtype_bytes(self.dtype_counts)


def _float_dtype(cfg: ModelConfig) -> str:
    return {"float16": "F16", "float32": "F32"}.get(cfg.dtype_name, "BF16")


@dataclass(frozen=True)
class _Linears:
    """How a checkpoint stores its linear layers: plain floats or FP8 with block scales."""

    weight_dtype: str
    fp8_block: tuple[int, int] | None = None

    @classmethod
    def of(cls, cfg: ModelConfig) -> _Linears:
        method = cfg.quant_method
        base = _float_dtype(cfg)
        if method is None or method == "mxfp4":
            return cls(base)
        if method == "fp8":
            block = cfg.quantization_config.get("weight_block_size")
            if isinstance(block, list) and len(block) == 2:
                return cls("F8_E4M3", (int(block[0]), int(block[1])))
        raise UnsupportedArchitecture(f"quantization {method!r} is not modelled from shapes")


class _Counter:
    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        self.out = ParamCount()
        self.float = _float_dtype(cfg)
        self.linears = _Linears.of(cfg)

    def raw(self, n: int, component: str = LANGUAGE, dtype: str | None = None) -> None:
        self.out.add(component, dtype or self.float, n)

    def linear(
        self,
        out: int,
        inp: int,
        *,
        component: str = LANGUAGE,
        bias: bool = False,
        quantized: bool = True,
        count: int = 1,
    ) -> None:
        """``count`` identical ``out x inp`` projections (experts are counted at once, never
        one by one: the work stays proportional to the layers, not to layers x experts)."""
        lin = self.linears
        if quantized and lin.fp8_block is not None:
            self.out.add(component, lin.weight_dtype, count * out * inp)
            bo, bi = lin.fp8_block
            self.out.add(component, "F32", count * _cdiv(out, bo) * _cdiv(inp, bi))
        else:
            self.out.add(component, self.float, count * out * inp)
        if bias:
            self.out.add(component, self.float, count * out)

    def mlp(self, hidden: int, inter: int, component: str = LANGUAGE, count: int = 1) -> None:
        self.linear(inter, hidden, component=component, count=count)
        self.linear(inter, hidden, component=component, count=count)
        self.linear(hidden, inter, component=component, count=count)


# -- families ----------------------------------------------------------------------------


def _standard(c: _Counter) -> None:
    """Llama / Mistral / Qwen2 / Qwen3 / Qwen3-MoE decoders (GQA, SwiGLU, RMSNorm)."""
    cfg = c.cfg
    h, n_layers, heads, kv, d = (
        cfg.hidden_size,
        cfg.num_layers,
        cfg.num_attention_heads,
        cfg.num_kv_heads,
        cfg.head_dim,
    )
    vocab = cfg.vocab_size
    inter = cfg.intermediate_size
    if vocab is None or inter is None:
        raise UnsupportedArchitecture("config lacks vocab_size or intermediate_size")
    mt = cfg.text_model_type
    qkv_bias = mt.startswith("qwen2") or bool(cfg.get("attention_bias", "qkv_bias"))
    o_bias = bool(cfg.get("attention_bias")) and not mt.startswith("qwen2")
    qk_norm = mt.startswith("qwen3")
    mlp_bias = bool(cfg.get("mlp_bias"))
    experts = cfg.num_experts
    moe_inter = cfg.moe_intermediate_size or inter
    step = cfg.get_int("decoder_sparse_step", default=1) or 1
    dense_only = set(cfg.get("mlp_only_layers", default=[]) or [])
    c.raw(vocab * h)
    for i in range(n_layers):
        c.raw(2 * h)
        c.linear(heads * d, h, bias=qkv_bias)
        c.linear(kv * d, h, bias=qkv_bias)
        c.linear(kv * d, h, bias=qkv_bias)
        c.linear(h, heads * d, bias=o_bias)
        if qk_norm:
            c.raw(2 * d)
        sparse = experts and i not in dense_only and (i + 1) % step == 0
        if sparse:
            c.linear(experts, h, quantized=False)
            c.mlp(h, moe_inter, count=experts)
            if mt.startswith("qwen2_moe"):
                c.mlp(h, cfg.shared_expert_intermediate_size)
                c.linear(1, h, quantized=False)
        else:
            c.linear(inter, h, bias=mlp_bias)
            c.linear(inter, h, bias=mlp_bias)
            c.linear(h, inter, bias=mlp_bias)
    c.raw(h)
    if not cfg.tie_word_embeddings:
        c.linear(vocab, h, quantized=False)


def _gpt_oss(c: _Counter) -> None:
    """gpt-oss: attention with sinks and biases, MXFP4 experts stored as U8 blocks+scales."""
    cfg = c.cfg
    h, n_layers, heads, kv, d = (
        cfg.hidden_size,
        cfg.num_layers,
        cfg.num_attention_heads,
        cfg.num_kv_heads,
        cfg.head_dim,
    )
    vocab = cfg.vocab_size or 0
    experts = cfg.num_experts
    inter = cfg.intermediate_size or 0
    mxfp4 = cfg.quant_method == "mxfp4"
    c.raw(vocab * h)
    for _ in range(n_layers):
        c.raw(2 * h)
        c.linear(heads * d, h, bias=True, quantized=False)
        c.linear(kv * d, h, bias=True, quantized=False)
        c.linear(kv * d, h, bias=True, quantized=False)
        c.linear(h, heads * d, bias=True, quantized=False)
        c.raw(heads)  # attention sinks
        c.linear(experts, h, bias=True, quantized=False)  # router
        gate_up, down = experts * 2 * inter * h, experts * h * inter
        if mxfp4:
            c.raw(gate_up // 2 + down // 2, dtype="U8")  # FP4 pairs per byte
            c.raw(gate_up // 32 + down // 32, dtype="U8")  # E8M0 scale per 32 values
        else:
            c.raw(gate_up + down)
        c.raw(experts * (2 * inter + h))  # expert biases
    c.raw(h)
    if not cfg.tie_word_embeddings:
        c.raw(vocab * h)


def _deepseek_layer(c: _Counter, layer: int, component: str) -> None:
    cfg = c.cfg
    h = cfg.hidden_size
    heads = cfg.num_attention_heads
    q_rank = cfg.get_int("q_lora_rank")
    kv_rank = cfg.require_int("kv_lora_rank")
    rope = cfg.require_int("qk_rope_head_dim")
    nope = cfg.require_int("qk_nope_head_dim")
    v_dim = cfg.require_int("v_head_dim")
    if q_rank:
        c.linear(q_rank, h, component=component)
        c.raw(q_rank, component)
        c.linear(heads * (nope + rope), q_rank, component=component)
    else:
        c.linear(heads * (nope + rope), h, component=component)
    c.linear(kv_rank + rope, h, component=component)
    c.raw(kv_rank, component)
    c.linear(heads * (nope + v_dim), kv_rank, component=component)
    c.linear(h, heads * v_dim, component=component)
    c.raw(2 * h, component)
    first_dense = cfg.get_int("first_k_dense_replace", default=0) or 0
    freq = cfg.get_int("moe_layer_freq", default=1) or 1
    experts = cfg.num_experts
    if experts and layer >= first_dense and layer % freq == 0:
        moe_inter = cfg.require_int("moe_intermediate_size")
        c.mlp(h, moe_inter, component, count=experts)
        shared = cfg.get_int("n_shared_experts", default=0) or 0
        if shared:
            c.mlp(h, moe_inter * shared, component)
        c.linear(experts, h, component=component, quantized=False)
        if cfg.get("topk_method") == "noaux_tc":
            c.raw(experts, component, dtype="F32")  # e_score_correction_bias
    else:
        c.mlp(h, cfg.require_int("intermediate_size"), component)


def _deepseek(c: _Counter) -> None:
    """DeepSeek V2/V3/R1, Kimi K2: MLA, MoE, FP8 block scales, MTP layers after the last."""
    cfg = c.cfg
    h, vocab = cfg.hidden_size, cfg.vocab_size or 0
    n_layers = cfg.num_layers
    c.raw(vocab * h)
    for i in range(n_layers):
        _deepseek_layer(c, i, LANGUAGE)
    c.raw(h)
    if not cfg.tie_word_embeddings:
        c.linear(vocab, h, quantized=False)
    for j in range(cfg.mtp_layers):
        _deepseek_layer(c, n_layers + j, MTP)
        c.raw(2 * h, MTP)  # enorm, hnorm
        c.linear(h, 2 * h, component=MTP, quantized=False)  # eh_proj (BF16 in the checkpoint)
        c.raw(h, MTP)  # shared_head.norm
        c.raw(2 * vocab * h, MTP)  # shared_head.head and its own embed_tokens


def _gdn_layer(c: _Counter, component: str) -> None:
    """Gated DeltaNet mixer (Qwen3-Next, Qwen3.5); A_log and the gated norm are F32."""
    cfg = c.cfg
    h = cfg.hidden_size
    k_heads = cfg.require_int("linear_num_key_heads")
    v_heads = cfg.require_int("linear_num_value_heads")
    k_dim = cfg.require_int("linear_key_head_dim")
    v_dim = cfg.require_int("linear_value_head_dim")
    kernel = cfg.require_int("linear_conv_kernel_dim")
    key, value = k_heads * k_dim, v_heads * v_dim
    c.linear(2 * key + value, h, component=component)  # in_proj_qkv
    c.linear(value, h, component=component)  # in_proj_z
    c.linear(2 * v_heads, h, component=component, quantized=False)  # in_proj_b, in_proj_a
    c.raw((2 * key + value) * kernel, component)  # conv1d
    c.raw(v_heads, component)  # dt_bias
    c.raw(v_heads + v_dim, component, dtype="F32")  # A_log, gated RMSNorm weight
    c.linear(h, value, component=component)  # out_proj


def _gated_attention(c: _Counter, component: str) -> None:
    cfg = c.cfg
    h, heads, kv, d = cfg.hidden_size, cfg.num_attention_heads, cfg.num_kv_heads, cfg.head_dim
    gate = 2 if cfg.get("attn_output_gate", default=True) else 1
    c.linear(heads * d * gate, h, component=component)
    c.linear(kv * d, h, component=component)
    c.linear(kv * d, h, component=component)
    c.linear(h, heads * d, component=component)
    c.raw(2 * d, component)  # q_norm, k_norm


def _qwen_next_mlp(c: _Counter, component: str) -> None:
    cfg = c.cfg
    h = cfg.hidden_size
    experts = cfg.num_experts
    if experts:
        c.linear(experts, h, component=component, quantized=False)
        c.mlp(h, cfg.require_int("moe_intermediate_size"), component, count=experts)
        shared = cfg.shared_expert_intermediate_size
        if shared:
            c.mlp(h, shared, component)
            c.linear(1, h, component=component, quantized=False)  # shared_expert_gate
    else:
        c.mlp(h, cfg.require_int("intermediate_size"), component)


def _qwen_vision(c: _Counter) -> None:
    """Qwen3-VL / Qwen3.5 vision tower: ViT blocks with biases, patch merger(s)."""
    vc = c.cfg.tower_configs.get("vision_config")
    if not vc:
        return
    depth, vh, vi = int(vc["depth"]), int(vc["hidden_size"]), int(vc["intermediate_size"])
    out = int(vc.get("out_hidden_size") or c.cfg.hidden_size)
    merge = int(vc.get("spatial_merge_size", 2))
    patch, temporal = int(vc.get("patch_size", 16)), int(vc.get("temporal_patch_size", 2))
    channels = int(vc.get("in_channels", 3))
    c.raw(vh * channels * temporal * patch * patch + vh, VISION)  # patch_embed conv + bias
    if vc.get("num_position_embeddings"):
        c.raw(int(vc["num_position_embeddings"]) * vh, VISION)
    per_block = 4 * vh + (3 * vh * vh + 3 * vh) + (vh * vh + vh) + (vi * vh + vi) + (vh * vi + vh)
    c.raw(depth * per_block, VISION)
    merged = vh * merge * merge

    def merger(norm_dim: int) -> None:
        c.raw(2 * norm_dim + merged * merged + merged + out * merged + out, VISION)

    merger(vh)
    for _ in vc.get("deepstack_visual_indexes") or []:
        merger(merged)


def _qwen_hybrid(c: _Counter) -> None:
    """Qwen3-Next and Qwen3.5 (dense or MoE): GDN + gated attention, MTP, vision tower."""
    cfg = c.cfg
    h, vocab, n_layers = cfg.hidden_size, cfg.vocab_size or 0, cfg.num_layers
    kinds = _qwen_layer_kinds(cfg)
    c.raw(vocab * h)
    for kind in kinds:
        c.raw(2 * h)
        if kind == "linear_attention":
            _gdn_layer(c, LANGUAGE)
        else:
            _gated_attention(c, LANGUAGE)
        _qwen_next_mlp(c, LANGUAGE)
    c.raw(h)
    if not cfg.tie_word_embeddings:
        c.linear(vocab, h, quantized=False)
    mtp = cfg.mtp_layers
    if mtp:
        c.linear(h, 2 * h, component=MTP, quantized=False)  # mtp.fc
        c.raw(3 * h, MTP)  # pre_fc_norm_embedding, pre_fc_norm_hidden, final norm
        if cfg.get("mtp_use_dedicated_embeddings"):
            c.raw(vocab * h, MTP)
        for _ in range(mtp):
            c.raw(2 * h, MTP)
            _gated_attention(c, MTP)
            _qwen_next_mlp(c, MTP)
    _qwen_vision(c)
    if len(kinds) != n_layers:
        raise UnsupportedArchitecture("layer_types does not match num_hidden_layers")


def _qwen_layer_kinds(cfg: ModelConfig) -> list[str]:
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return [str(t) for t in types]
    interval = cfg.get_int("full_attention_interval", default=4) or 4
    return [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention"
        for i in range(cfg.num_layers)
    ]


_FAMILIES = {
    "llama": _standard,
    "mistral": _standard,
    "qwen2": _standard,
    "qwen3": _standard,
    "qwen3_moe": _standard,
    "gpt_oss": _gpt_oss,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "qwen3_next": _qwen_hybrid,
    "qwen3_5": _qwen_hybrid,
    "qwen3_5_text": _qwen_hybrid,
    "qwen3_5_moe": _qwen_hybrid,
    "qwen3_5_moe_text": _qwen_hybrid,
}


def count_parameters(config: Mapping[str, Any]) -> ParamCount:
    """Stored elements per dtype and component, or ``UnsupportedArchitecture``."""
    cfg = ModelConfig(config)
    family = _FAMILIES.get(cfg.model_type) or _FAMILIES.get(cfg.text_model_type)
    if family is None:
        raise UnsupportedArchitecture(f"model_type {cfg.model_type!r} is not modelled")
    if cfg.is_multimodal and family is not _qwen_hybrid:
        raise UnsupportedArchitecture("this family's vision tower is not modelled")
    counter = _Counter(cfg)
    try:
        family(counter)
    except KeyError as exc:
        raise UnsupportedArchitecture(f"config lacks {exc.args[0]!r}") from exc
    return counter.out


def supported_model_types() -> list[str]:
    return sorted(_FAMILIES)
