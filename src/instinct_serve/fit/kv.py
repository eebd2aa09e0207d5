"""KV-cache layout per TP rank, following vLLM's ``kv_cache_interface`` specs.

Every decoder layer becomes one spec (``FullAttentionSpec``, ``SlidingWindowSpec``,
``ChunkedLocalAttentionSpec``, ``MLAAttentionSpec`` or ``MambaSpec``). Pages hold
``block_size`` tokens; hybrid models raise the attention block size until an attention page
is at least one recurrent-state page, then pad the state page to match
(``HybridAttentionMambaModelConfig``). Mixed layer types share one pool of blocks through
groups of ``group_size`` layers (``get_kv_cache_groups``), and a request holds, per group,
``cdiv(len, block)`` blocks for full/MLA layers, ``cdiv(min(window-1+mnbt, len), block)+1``
for sliding-window layers and one (two with prefix caching) for recurrent layers.

The known mistakes this module avoids, each pinned by a test: an MLA latent is one vector
per layer (no factor 2) and is never divided by TP; GQA heads are replicated, not divided,
when TP exceeds ``num_key_value_heads``; sliding-window and linear-attention layers are
not charged per token of context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from instinct_serve.errors import UsageError
from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.dtypes import torch_dtype_bytes


class LayerKind(StrEnum):
    FULL = "full_attention"
    SLIDING = "sliding_window"
    CHUNKED = "chunked_local_attention"
    MLA = "mla"
    MAMBA = "mamba"  # any recurrent state: gated delta net, Mamba1/2

    @property
    def grows_with_context(self) -> bool:
        return self in (LayerKind.FULL, LayerKind.MLA)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class AttentionGeometry:
    """K/V shapes of an attention layer before TP (MLA: one latent, no V)."""

    num_kv_heads: int
    head_size: int
    head_size_v: int
    mla: bool = False

    def kv_heads_per_rank(self, tp: int) -> int:
        """vLLM ``get_num_kv_heads``: MLA keeps 1 on every rank; GQA replicates past TP."""
        if self.mla:
            return 1
        return max(1, self.num_kv_heads // tp)

    def bytes_per_token(self, tp: int, dtype_bytes: int) -> int:
        heads = self.kv_heads_per_rank(tp)
        if self.mla:
            return heads * self.head_size * dtype_bytes
        return heads * (self.head_size + self.head_size_v) * dtype_bytes


@dataclass(frozen=True)
class RecurrentGeometry:
    """Per-sequence state of a linear-attention/SSM layer (``MambaSpec`` shapes)."""

    family: str  # gated_delta_net | mamba2 | mamba1
    conv_channels: int  # divided by TP
    conv_width: int  # kernel - 1
    state_heads: int  # divided by TP
    state_inner: tuple[int, ...]  # per-head state dims
    conv_dtype_bytes: int
    state_dtype_bytes: int

    def page_bytes(self, tp: int, num_speculative_tokens: int = 0) -> int:
        conv = (self.conv_channels // tp) * (self.conv_width + num_speculative_tokens)
        state = self.state_heads // tp
        for dim in self.state_inner:
            state *= dim
        return conv * self.conv_dtype_bytes + state * self.state_dtype_bytes


@dataclass(frozen=True)
class LayerSpec:
    kind: LayerKind
    attention: AttentionGeometry | None = None
    recurrent: RecurrentGeometry | None = None
    window: int | None = None  # sliding window or attention chunk size


@dataclass(frozen=True)
class ModelLayers:
    """The KV-relevant description of a model: one spec per layer that holds a cache."""

    layers: tuple[LayerSpec, ...]
    model_dtype_bytes: int
    num_attention_heads: int
    notes: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for layer in self.layers:
            out[layer.kind.value] = out.get(layer.kind.value, 0) + 1
        return out

    @property
    def attention_kind(self) -> str:
        """A one-line name for humans: ``hybrid (gated_delta_net + full_attention)``..."""
        counts = self.counts()
        families = sorted({s.recurrent.family for s in self.layers if s.recurrent})
        kinds = [k for k in counts if k != LayerKind.MAMBA.value] + families
        if families:
            return "hybrid (" + " + ".join(kinds) + ")"
        if len(kinds) > 1:
            return " + ".join(kinds)
        if kinds == [LayerKind.FULL.value]:
            geo = next(s.attention for s in self.layers if s.attention)
            if geo.num_kv_heads == 1:
                return "full_attention (MQA)"
            if geo.num_kv_heads < self.num_attention_heads:
                return "full_attention (GQA)"
            return "full_attention (MHA)"
        return kinds[0] if kinds else "none"

    def bytes_per_token_by_kind(self, dtype_bytes: int | None = None) -> dict[str, int]:
        """Whole-model bytes per token of each attention kind, before TP."""
        size = dtype_bytes or self.model_dtype_bytes
        out: dict[str, int] = {}
        for layer in self.layers:
            if layer.attention is not None:
                out[layer.kind.value] = out.get(layer.kind.value, 0) + (
                    layer.attention.bytes_per_token(1, size)
                )
        return out

    def context_bytes_per_token(self, dtype_bytes: int | None = None) -> int:
        """What grows with context: full-attention and MLA layers only (whole model)."""
        by_kind = self.bytes_per_token_by_kind(dtype_bytes)
        return sum(v for k, v in by_kind.items() if LayerKind(k).grows_with_context)

    def recurrent_state_bytes(self, tp: int = 1, num_speculative_tokens: int = 0) -> int:
        return sum(
            s.recurrent.page_bytes(tp, num_speculative_tokens) for s in self.layers if s.recurrent
        )

    @property
    def has_recurrent(self) -> bool:
        return any(s.recurrent for s in self.layers)

    @property
    def uses_mla(self) -> bool:
        return any(s.kind is LayerKind.MLA for s in self.layers)


# -- from config.json --------------------------------------------------------------------

_FULL_NAMES = {"full_attention", "attention", "global_attention", "global"}
_SLIDING_NAMES = {"sliding_attention", "sliding_window", "local_attention", "local", "swa"}
_LINEAR_NAMES = {"linear_attention", "mamba", "mamba2", "gated_delta_net", "ssm"}
_CHUNKED_NAMES = {"chunked_attention", "chunked_local_attention"}


def _attention_geometry(cfg: ModelConfig) -> AttentionGeometry:
    if cfg.uses_mla:
        latent = cfg.require_int("kv_lora_rank") + cfg.require_int("qk_rope_head_dim")
        return AttentionGeometry(num_kv_heads=1, head_size=latent, head_size_v=0, mla=True)
    d = cfg.head_dim
    dv = cfg.get_int("v_head_dim", default=d) or d
    return AttentionGeometry(num_kv_heads=cfg.num_kv_heads, head_size=d, head_size_v=dv)


def _recurrent_geometry(cfg: ModelConfig) -> RecurrentGeometry | None:
    model_bytes = cfg.dtype_bytes
    ssm_dtype = cfg.get("mamba_ssm_dtype", "mamba_ssm_cache_dtype")
    ssm_bytes = torch_dtype_bytes(str(ssm_dtype)) if ssm_dtype else model_bytes
    if ssm_dtype and str(ssm_dtype).lower() in ("float32", "torch.float32"):
        ssm_bytes = 4
    if cfg.get_int("linear_num_value_heads") is not None:  # gated delta net
        k_heads = cfg.require_int("linear_num_key_heads")
        v_heads = cfg.require_int("linear_num_value_heads")
        k_dim = cfg.require_int("linear_key_head_dim")
        v_dim = cfg.require_int("linear_value_head_dim")
        kernel = cfg.get_int("linear_conv_kernel_dim", default=4) or 4
        return RecurrentGeometry(
            family="gated_delta_net",
            conv_channels=2 * k_heads * k_dim + v_heads * v_dim,
            conv_width=kernel - 1,
            state_heads=v_heads,
            state_inner=(v_dim, k_dim),
            conv_dtype_bytes=model_bytes,
            state_dtype_bytes=ssm_bytes,
        )
    if cfg.get_int("mamba_num_heads") is not None:  # Mamba2 (Nemotron-H, Bamba, Granite 4)
        heads = cfg.require_int("mamba_num_heads")
        head_dim = cfg.require_int("mamba_head_dim")
        d_state = cfg.require_int("ssm_state_size", "mamba_d_state")
        groups = cfg.get_int("n_groups", "mamba_n_groups", default=1) or 1
        kernel = cfg.get_int("conv_kernel", "mamba_d_conv", default=4) or 4
        return RecurrentGeometry(
            family="mamba2",
            conv_channels=heads * head_dim + 2 * groups * d_state,
            conv_width=kernel - 1,
            state_heads=heads,
            state_inner=(head_dim, d_state),
            conv_dtype_bytes=model_bytes,
            state_dtype_bytes=ssm_bytes,
        )
    if cfg.get_int("mamba_d_state") is not None or cfg.model_type in ("jamba", "mamba"):
        expand = cfg.get_int("mamba_expand", "expand", default=2) or 2
        inner = cfg.get_int("mamba_intermediate_size", default=expand * cfg.hidden_size)
        assert inner is not None
        d_state = cfg.get_int("mamba_d_state", "state_size", default=16) or 16
        kernel = cfg.get_int("mamba_d_conv", "conv_kernel", default=4) or 4
        return RecurrentGeometry(
            family="mamba1",
            conv_channels=inner,
            conv_width=kernel - 1,
            state_heads=inner,
            state_inner=(d_state,),
            conv_dtype_bytes=model_bytes,
            state_dtype_bytes=ssm_bytes,
        )
    return None


def _layer_kinds(cfg: ModelConfig) -> tuple[list[str], list[str]]:
    """Per-layer kind names (``full``/``sliding``/``chunked``/``linear``/``none``) + notes."""
    n = cfg.num_layers
    notes: list[str] = []
    types = cfg.get("layer_types", "layers_block_type")
    if isinstance(types, list) and len(types) == n:
        kinds = []
        for t in types:
            name = str(t).lower()
            if name in _FULL_NAMES:
                kinds.append("full")
            elif name in _SLIDING_NAMES:
                kinds.append("sliding")
            elif name in _LINEAR_NAMES:
                kinds.append("linear")
            elif name in _CHUNKED_NAMES:
                kinds.append("chunked")
            else:
                kinds.append("full")
                notes.append(f"unknown layer type {t!r} counted as full attention")
        return kinds, notes
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and len(pattern) == n:  # Nemotron-H: M mamba, * attention
        return [{"M": "linear", "*": "full"}.get(ch, "none") for ch in pattern], notes
    if cfg.get_int("full_attention_interval") and cfg.get_int("linear_num_value_heads"):
        interval = cfg.require_int("full_attention_interval")
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(n)], notes
    if cfg.get_int("attn_layer_period") is not None:  # Jamba
        period = cfg.require_int("attn_layer_period")
        offset = cfg.get_int("attn_layer_offset", default=0) or 0
        return ["full" if i % period == offset else "linear" for i in range(n)], notes
    window = cfg.get_int("sliding_window")
    if cfg.get_int("attention_chunk_size"):  # Llama 4: RoPE layers use chunked local attention
        nope = cfg.get("no_rope_layers")
        if isinstance(nope, list) and len(nope) == n:
            return ["chunked" if int(x) else "full" for x in nope], notes
        step = cfg.get_int("no_rope_layer_interval", default=4) or 4
        return ["full" if (i + 1) % step == 0 else "chunked" for i in range(n)], notes
    if window and cfg.model_type.startswith("gemma3"):
        step = cfg.get_int("sliding_window_pattern", default=6) or 6
        return ["full" if (i + 1) % step == 0 else "sliding" for i in range(n)], notes
    if window and cfg.model_type.startswith("gemma2"):
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)], notes
    if window and cfg.get("use_sliding_window", default=True) is not False:
        if cfg.model_type.startswith(("qwen2", "qwen3")):
            return ["full"] * n, notes  # Qwen only slides when use_sliding_window is true
        return ["sliding"] * n, notes
    return ["full"] * n, notes


def describe_layers(config: ModelConfig, *, include_mtp: bool = False) -> ModelLayers:
    """One ``LayerSpec`` per cache-holding layer, MTP layers added when they are loaded."""
    kinds, notes = _layer_kinds(config)
    attention = _attention_geometry(config)
    recurrent = _recurrent_geometry(config) if "linear" in kinds else None
    window = config.get_int("sliding_window")
    chunk = config.get_int("attention_chunk_size")
    specs: list[LayerSpec] = []
    for kind in kinds:
        if kind == "none":
            continue
        if kind == "linear":
            if recurrent is None:
                notes.append("recurrent layer without state dims: counted as full attention")
                specs.append(LayerSpec(LayerKind.FULL, attention=attention))
            else:
                specs.append(LayerSpec(LayerKind.MAMBA, recurrent=recurrent))
        elif kind == "sliding" and window:
            specs.append(LayerSpec(LayerKind.SLIDING, attention=attention, window=window))
        elif kind == "chunked" and chunk:
            specs.append(LayerSpec(LayerKind.CHUNKED, attention=attention, window=chunk))
        else:
            full = LayerKind.MLA if attention.mla else LayerKind.FULL
            specs.append(LayerSpec(full, attention=attention))
    if include_mtp:
        full = LayerKind.MLA if attention.mla else LayerKind.FULL
        specs.extend(LayerSpec(full, attention=attention) for _ in range(config.mtp_layers))
    if not specs:
        raise UsageError(
            "config.json describes no attention or recurrent layer (its layer types or "
            "hybrid_override_pattern leave none): there is no KV cache to size",
            fix="check that the model is a decoder LLM with a complete config.json",
            id="bad_model_config",
            details={"key": "layer_types"},
        )
    return ModelLayers(tuple(specs), config.dtype_bytes, config.num_attention_heads, tuple(notes))


# -- the per-rank layout -----------------------------------------------------------------


@dataclass(frozen=True)
class KvGroupType:
    kind: LayerKind
    window: int | None
    layers: int
    groups: int


@dataclass(frozen=True)
class KvLayout:
    """How one TP rank pages its KV cache (the same on every rank)."""

    tp: int
    block_size: int
    page_bytes: int  # one layer's page: block_size tokens (or one padded recurrent state)
    group_size: int
    types: tuple[KvGroupType, ...]
    attention_bytes_per_token: int  # one attention layer, this rank
    recurrent_page_bytes: int  # unpadded state of one recurrent layer, this rank
    recurrent_blocks_per_request: int
    max_num_batched_tokens: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def num_groups(self) -> int:
        return sum(t.groups for t in self.types)

    def blocks_per_request(self, length: int) -> int:
        """Blocks one request of ``length`` tokens holds, summed over groups."""
        bs, total = self.block_size, 0
        for t in self.types:
            if t.kind in (LayerKind.FULL, LayerKind.MLA):
                per = _cdiv(length, bs)
            elif t.kind is LayerKind.SLIDING:
                assert t.window is not None
                per = _cdiv(min(t.window - 1 + self.max_num_batched_tokens, length), bs) + 1
            elif t.kind is LayerKind.CHUNKED:
                assert t.window is not None
                per = _cdiv(min(t.window + self.max_num_batched_tokens, length), bs)
            else:
                per = self.recurrent_blocks_per_request
            total += per * t.groups
        return total

    def bytes_for_request(self, length: int) -> int:
        """vLLM's ``_max_memory_usage_bytes_from_groups``: padding layers included."""
        return self.page_bytes * self.group_size * self.blocks_per_request(length)

    def num_blocks(self, available_bytes: int) -> int:
        if available_bytes <= 0 or self.page_bytes <= 0 or self.group_size <= 0:
            return 0
        return available_bytes // self.page_bytes // self.group_size

    def max_concurrency(self, num_blocks: int, length: int) -> float:
        per_request = self.blocks_per_request(length)
        return num_blocks / per_request if per_request > 0 else 0.0

    def max_model_len(self, available_bytes: int, upper: int) -> int:
        """Longest request that fits, by bisection like vLLM's estimate (0 if none)."""
        if self.bytes_for_request(1) > available_bytes:
            return 0
        lo, hi = 1, upper
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.bytes_for_request(mid) <= available_bytes:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def kv_tokens(self, num_blocks: int, length: int, formula: str) -> int:
        """The "GPU KV cache size: N tokens" figure for a vLLM version's formula."""
        if formula == "blocks":
            return num_blocks // self.num_groups * self.block_size
        return int(self.max_concurrency(num_blocks, length) * length)


def kv_layout(
    layers: ModelLayers,
    *,
    tp: int,
    kv_dtype_bytes: int,
    max_num_batched_tokens: int,
    block_size: int | None = None,
    recurrent_blocks_per_request: int = 1,
    num_speculative_tokens: int = 0,
    group_rule_1_5: bool = True,
) -> KvLayout:
    """Page size, block size and groups of one rank, as vLLM derives them."""
    notes: list[str] = []
    attn_specs = [s for s in layers.layers if s.attention is not None]
    rec_specs = [s for s in layers.layers if s.recurrent is not None]
    mla = layers.uses_mla
    attn_1tok = max(
        (s.attention.bytes_per_token(tp, kv_dtype_bytes) for s in attn_specs if s.attention),
        default=0,
    )
    if (
        len({s.attention.bytes_per_token(tp, kv_dtype_bytes) for s in attn_specs if s.attention})
        > 1
    ):
        notes.append("attention layers of different page sizes: the largest is used")
    rec_page = max(
        (s.recurrent.page_bytes(tp, num_speculative_tokens) for s in rec_specs if s.recurrent),
        default=0,
    )
    bs = block_size or (64 if mla else 16)
    if rec_page and attn_1tok:
        align = 64 if mla else 16
        bs = max(bs, align * _cdiv(rec_page, align * attn_1tok))
        if bs * attn_1tok < rec_page:
            bs = _cdiv(rec_page, attn_1tok)
        page = bs * attn_1tok
    elif attn_1tok:
        page = bs * attn_1tok
    else:  # attention-free recurrent model
        page = rec_page
    # group layers by (kind, window)
    buckets: dict[tuple[LayerKind, int | None], int] = {}
    for s in layers.layers:
        key = (s.kind, s.window if s.kind in (LayerKind.SLIDING, LayerKind.CHUNKED) else None)
        buckets[key] = buckets.get(key, 0) + 1
    counts = list(buckets.values())
    if len(counts) == 1:
        group_size = counts[0]
    else:
        lo, hi = min(counts), max(counts)
        group_size = hi if group_rule_1_5 and hi < 1.5 * lo else lo
    types = tuple(
        KvGroupType(kind, window, n, _cdiv(n, group_size)) for (kind, window), n in buckets.items()
    )
    padded = sum(t.groups for t in types) * group_size - len(layers.layers)
    if padded:
        notes.append(
            f"{padded} padding layer(s) fill the KV cache groups of {group_size} (as in vLLM)"
        )
    return KvLayout(
        tp=tp,
        block_size=bs,
        page_bytes=page,
        group_size=group_size,
        types=types,
        attention_bytes_per_token=attn_1tok,
        recurrent_page_bytes=rec_page,
        recurrent_blocks_per_request=recurrent_blocks_per_request + num_speculative_tokens
        if rec_page
        else 0,
        max_num_batched_tokens=max_num_batched_tokens,
        notes=tuple(notes),
    )
