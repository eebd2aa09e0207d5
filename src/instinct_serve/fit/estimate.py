"""The pure estimator: ``estimate(meta, hw, opts) -> FitReport``; data in, data out.

Per GPU (every TP rank is sized alike)::

    budget        = gpu_memory_utilization x VRAM
    remaining_kv  = budget - weights_per_rank - (activation peak + non-torch [+ graphs])
    KV layout     = vLLM's specs per layer kind, groups and block size (``kv.py``)

``recommended_max_model_len`` is the longest request that fits the remaining memory,
capped by the native context (recipe or config), rounded down to the block size.
``min_tp_required`` is the smallest power-of-two TP that divides the heads and leaves at
least 2 GB for KV. Verdicts: ``safe`` (>= 6 GB left for KV), ``tight`` (2-6 GB: launch,
retry with ``--enforce-eager`` if graph capture runs out of memory), ``too_tight``
(< 2 GB), ``needs_tp`` (more GPUs than asked for, and they are present) and
``does_not_fit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from instinct_serve.errors import UsageError
from instinct_serve.fit.config import MAX_POSITIONS, ModelConfig
from instinct_serve.fit.dtypes import kv_cache_dtype_bytes
from instinct_serve.fit.kv import KvLayout, LayerKind, ModelLayers, describe_layers, kv_layout
from instinct_serve.fit.meta import ModelMeta
from instinct_serve.fit.overhead import CudagraphConfig, Overhead, estimate_overhead, topology
from instinct_serve.fit.overhead_table import runner_model, terms
from instinct_serve.fit.sglang import SglangMemory
from instinct_serve.fit.vllm import ENGINES, VllmBehaviour, behaviour, v0_chunks_by_default
from instinct_serve.fit.weights import MOE_ALIGNMENT, WeightEstimate, estimate_weights

GB = 10**9
GIB = 2**30
SAFE_BYTES = 6 * GB
TIGHT_BYTES = 2 * GB
MAX_TP = 64
FALLBACK_CONTEXT = 4096

VERDICTS = ("safe", "tight", "too_tight", "needs_tp", "does_not_fit")


def in_gb(n: float) -> float:
    return round(n / GB, 2)


def in_gib(n: float) -> float:
    return round(n / GIB, 2)


@dataclass(frozen=True)
class HardwareSpec:
    """The GPUs to fit on: VRAM per GPU as the driver reports it, and how many."""

    vram_bytes: int
    gpu_count: int = 1
    gfx_version: str | None = None
    name: str = "GPU"
    source: str = "manual"  # profile | detect | manual
    platform: str = "rocm"  # rocm | cuda | cpu (overhead_table.PLATFORMS)
    gpus_per_node: int | None = None  # None: every GPU on one node

    def __post_init__(self) -> None:
        if self.vram_bytes <= 0:
            raise UsageError("GPU memory must be positive", id="bad_vram")
        if self.gpu_count < 1:
            raise UsageError("--gpu-count must be at least 1", id="bad_gpu_count")

    @classmethod
    def from_inventory(cls, inventory: Any, source: str = "detect") -> HardwareSpec:
        """From a ``GpuInventory`` (detect or a ``--gpu`` profile)."""
        vram = inventory.vram_bytes
        if not vram or not inventory.gpu_count:
            raise UsageError(
                "no GPU memory figure to fit against",
                fix="pass --gpu mi300x (a profile) or --vram-gb, or run on the GPU host",
                id="no_gpu_memory",
            )
        first = inventory.gpus[0]
        return cls(
            vram_bytes=int(vram),
            gpu_count=int(inventory.gpu_count),
            gfx_version=inventory.gfx_version,
            name=str(first.market_name or first.name),
            source=source,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gfx_version": self.gfx_version,
            "gpu_count": self.gpu_count,
            "vram_per_gpu_bytes": self.vram_bytes,
            "vram_per_gpu_gb": in_gb(self.vram_bytes),
            "vram_per_gpu_gib": in_gib(self.vram_bytes),
            "source": self.source,
        }


# FitOptions fields bounded as the options of ``instinct fit`` are (``options.FitRequest``).
_BOUNDED = (
    "tp",
    "pipeline_parallel_size",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
    "block_size",
    "speculative_mtp",
)


@dataclass(frozen=True)
class FitOptions:
    """The launch being sized; None means "vLLM's default for this model and version"."""

    tp: int | None = None
    max_model_len: int | None = None
    native_max_model_len: int | None = None  # the recipe's context_length
    native_source: str | None = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float | None = None
    vllm_version: str | None = None
    v0_engine: bool | None = None  # None: from the version, platform and engine/env below
    engine: str | None = None  # "v0" | "v1" (``VLLM_USE_V1`` spelled as an option)
    use_v1_env: str | None = None  # the launch's VLLM_USE_V1
    v2_model_runner: bool = False  # VLLM_USE_V2_MODEL_RUNNER=1: profiles no sampler, no graphs
    estimate_graphs: bool = True  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 turns it off
    pipeline_parallel_size: int = 1
    kv_cache_memory_bytes: int | None = None  # --kv-cache-memory: vLLM skips the profile
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    block_size: int | None = None
    enforce_eager: bool = False
    language_model_only: bool = False
    speculative_mtp: int = 0  # MTP draft tokens; loads the MTP layers
    enable_prefix_caching: bool = False  # hybrid models: two state blocks per request
    moe_alignment: tuple[int, int] | None = None  # default: the platform's
    sampler_bytes_per_logit: int | None = None
    cudagraph: CudagraphConfig | None = None  # --compilation-config's graph keys
    env: tuple[tuple[str, str], ...] = ()  # the launch's environment (overhead_table rows)

    def __post_init__(self) -> None:
        """The bounds of ``options.FitRequest`` hold here too: these values also come from
        launch flags (a recipe's, a plan's ``-- ARGS``) and the catalog, not only from
        ``parse``. A violation has the option's own error id (``bad_<option>``)."""
        from instinct_serve.options import FitRequest, option_of

        for name in _BOUNDED:
            value = getattr(self, name)
            if value is None:
                continue
            spec = option_of(FitRequest, name)
            whole = isinstance(value, int) and not isinstance(value, bool)
            if not whole:
                raise FitRequest.error_for(name, value, "is not a whole number")
            if not (spec.low or 0) <= value <= (spec.high or value):
                raise FitRequest.error_for(name, value, f"is outside [{spec.low:g}, {spec.high:g}]")
        if self.engine is not None and self.engine not in ENGINES:
            raise UsageError(
                f"--engine {self.engine!r} is not one of {', '.join(ENGINES)}",
                fix="use --engine v0 or --engine v1 (or leave it out: from the vLLM version)",
                id="bad_engine",
            )
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes < 0:
            raise UsageError(
                "--kv-cache-memory must not be negative",
                fix="give bytes, e.g. 8G",
                id="bad_kv_cache_memory",
            )
        if self.tp is not None and self.tp & (self.tp - 1):
            raise UsageError("--tp must be a power of two", id="bad_tp")
        util = self.gpu_memory_utilization
        if util is not None and (
            isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1
        ):
            raise UsageError(
                f"--gpu-memory-utilization {util!r} is not in (0, 1]",
                fix="use a fraction such as 0.9",
                id="bad_gpu_memory_utilization",
            )
        native = self.native_max_model_len
        if native is not None and (
            isinstance(native, bool)
            or not isinstance(native, int)
            or not 0 <= native <= MAX_POSITIONS
        ):
            raise UsageError(
                f"the recipe's context_length {native!r} is outside [0, {MAX_POSITIONS}]",
                fix="correct the recipe (or run `instinct recipes sync`), or pass --max-model-len",
                id="bad_context_length",
            )


@dataclass(frozen=True)
class _TpEval:
    tp: int
    weights: WeightEstimate
    overhead: Overhead
    budget_bytes: int
    remaining_bytes: int
    layout: KvLayout
    max_len: int  # longest request that fits (capped by the native/requested cap)
    requested_len: int | None = None

    @property
    def holds_requested(self) -> bool:
        return self.requested_len is None or self.max_len >= self.requested_len

    @property
    def headroom(self) -> str:
        if self.remaining_bytes >= SAFE_BYTES:
            return "safe"
        if self.remaining_bytes >= TIGHT_BYTES:
            return "tight"
        if self.remaining_bytes > 0 and self.max_len > 0:
            return "too_tight"
        return "none"

    @property
    def fits(self) -> bool:
        return self.headroom in ("safe", "tight") and self.holds_requested


@dataclass
class FitReport:
    """The full answer; ``to_dict`` carries the stable JSON keys of DESIGN.md."""

    model_id: str
    meta: ModelMeta
    hardware: HardwareSpec
    options: FitOptions
    vllm: VllmBehaviour
    layers: ModelLayers
    tp: int
    weights: WeightEstimate
    overhead: Overhead
    layout: KvLayout
    budget_bytes: int
    gpu_memory_utilization: float
    utilization_source: str
    remaining_bytes: int
    native_max_model_len: int
    native_source: str
    recommended_max_model_len: int
    context_limited: bool
    requested_max_model_len: int | None
    requested_fits: bool | None
    max_seq_len_fp8_kv: int
    min_tp_required: int | None
    min_tp_unbounded: int | None
    kv_tokens: int
    kv_num_blocks: int
    max_concurrency: float
    verdict: str
    verdict_reason: str
    headroom: str
    notes: list[str] = field(default_factory=list)
    sglang: SglangMemory | None = None  # ``fit --server sglang``: SGLang's sizing (fit/sglang.py)

    @property
    def fits(self) -> bool:
        return self.verdict in ("safe", "tight")

    @property
    def weights_fit(self) -> bool:
        return self.remaining_bytes > 0

    @property
    def kv_cache_bytes_per_token(self) -> int:
        return self.layers.context_bytes_per_token(2)

    def per_gpu(self) -> dict[str, Any]:
        """The budget of one GPU: weights | overhead | KV | outside vLLM's share."""
        vram = self.hardware.vram_bytes
        weights = self.weights.per_rank_bytes
        overhead = self.overhead.total_bytes
        kv = max(0, self.remaining_bytes)
        over = max(0, -self.remaining_bytes)
        return {
            "vram_bytes": vram,
            "budget_bytes": self.budget_bytes,
            "weights_bytes": weights,
            "overhead_bytes": overhead,
            "kv_cache_bytes": kv,
            "over_budget_bytes": over,
            "outside_budget_bytes": vram - self.budget_bytes,
            "weights_gb": in_gb(weights),
            "weights_gib": in_gib(weights),
            "overhead_gb": in_gb(overhead),
            "overhead_gib": in_gib(overhead),
            "kv_cache_gb": in_gb(kv),
            "kv_cache_gib": in_gib(kv),
            "outside_budget_gb": in_gb(vram - self.budget_bytes),
            "outside_budget_gib": in_gib(vram - self.budget_bytes),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model_id,
            "source": self.meta.source,
            "metadata": self._metadata_doc(),
            "architecture": next(iter(ModelConfig(self.meta.config).architectures), None),
            "attention_kind": self.layers.attention_kind,
            "attention": self._attention_doc(),
            **self._weights_doc(),
            "overhead": self._overhead_doc(),
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "gpu_memory_utilization_source": self.utilization_source,
            "budget_per_gpu_gb": in_gb(self.budget_bytes),
            "budget_per_gpu_gib": in_gib(self.budget_bytes),
            "remaining_for_kv_bytes": self.remaining_bytes,
            "remaining_for_kv_gb": in_gb(self.remaining_bytes),
            "remaining_for_kv_gib": in_gib(self.remaining_bytes),
            "per_gpu": self.per_gpu(),
            "kv_cache": self._kv_doc(),
            "fit": self._fit_doc(),
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "hardware": self.hardware.to_dict(),
            "vllm": self._vllm_doc(),
            "options": self._options_doc(),
            "notes": list(self.notes),
            **({"server": "sglang", "sglang": self.sglang.to_dict()} if self.sglang else {}),
        }

    def _metadata_doc(self) -> dict[str, Any]:
        return {
            "size_basis": self.meta.size_basis,
            "source": self.meta.source,
            "weights_source": self.meta.weights_source,
            "detail": self.meta.source_detail,
            "revision": self.meta.revision,
            "components_source": self.meta.components_source,
            "gated": self.meta.gated,
        }

    def _attention_doc(self) -> dict[str, Any]:
        lay = self.layout
        sliding = [s for s in self.layers.layers if s.kind is LayerKind.SLIDING]
        sliding_tokens = 0
        if sliding and sliding[0].window:
            sliding_tokens = min(
                sliding[0].window - 1 + lay.max_num_batched_tokens,
                self.recommended_max_model_len or self.native_max_model_len,
            )
        sliding_bytes = sum(
            s.attention.bytes_per_token(1, 2) * sliding_tokens for s in sliding if s.attention
        )
        return {
            "layers_by_kind": self.layers.counts(),
            "kv_cache_bytes_per_token_by_kind": self.layers.bytes_per_token_by_kind(2),
            "block_size": lay.block_size,
            "page_size_bytes": lay.page_bytes,
            "kv_cache_groups": lay.num_groups,
            "group_size": lay.group_size,
            "sliding_window_tokens_per_seq": sliding_tokens,
            "sliding_window_bytes_per_seq": sliding_bytes,
            "recurrent_state_bytes_per_seq": self.layers.recurrent_state_bytes(
                1, self.options.speculative_mtp
            ),
            "recurrent_state_blocks_per_seq": lay.recurrent_blocks_per_request
            * sum(t.groups for t in lay.types if t.kind is LayerKind.MAMBA),
        }

    def _weights_doc(self) -> dict[str, Any]:
        """The flat weight and KV-per-token keys (between ``attention`` and ``overhead``)."""
        w, lay = self.weights, self.layout
        kv_per_token_gpu = sum(
            lay.attention_bytes_per_token for s in self.layers.layers if s.kind.grows_with_context
        )
        return {
            "checkpoint_bytes": w.checkpoint_bytes,
            "checkpoint_gb": in_gb(w.checkpoint_bytes),
            "weight_memory_bytes": w.loaded_bytes,
            "weight_memory_gb": in_gb(w.loaded_bytes),
            "weight_memory_gib": in_gib(w.loaded_bytes),
            "weights_skipped_bytes": w.skipped,
            "weight_memory_per_gpu_bytes": w.per_rank_bytes,
            "weight_memory_per_gpu_gb": in_gb(w.per_rank_bytes),
            "weight_memory_per_gpu_gib": in_gib(w.per_rank_bytes),
            "weight_replicated_per_gpu_bytes": w.replicated_bytes_per_rank,
            "weight_padding_per_gpu_bytes": w.padding_bytes_per_rank,
            "kv_cache_bytes_per_token": self.kv_cache_bytes_per_token,
            "kv_cache_bytes_per_token_per_gpu": kv_per_token_gpu,
            "kv_cache_dtype": self.options.kv_cache_dtype,
        }

    def _overhead_doc(self) -> dict[str, Any]:
        o = self.overhead
        return {
            "method": o.method,
            "activation_peak_bytes": o.activation_bytes,
            "activation_peak_gib": in_gib(o.activation_bytes),
            "forward_bytes": o.forward_bytes,
            "sampler_bytes": o.sampler_bytes,
            "encoder_bytes": o.encoder_bytes,
            "non_torch_bytes": o.non_torch_bytes,
            "non_torch_gib": in_gib(o.non_torch_bytes),
            "graph_bytes": o.graph_bytes,
            "graph_gib": in_gib(o.graph_bytes),
            "graph_captures": {"piecewise": o.graph_captures[0], "full": o.graph_captures[1]},
            "total_bytes": o.total_bytes,
            "total_gb": in_gb(o.total_bytes),
            "total_gib": in_gib(o.total_bytes),
            "max_num_batched_tokens": o.max_num_batched_tokens,
            "max_num_seqs": o.max_num_seqs,
            "notes": list(o.notes),
            "terms": o.table.to_dict() if o.table else None,
        }

    def _kv_doc(self) -> dict[str, Any]:
        return {
            "tokens": self.kv_tokens,
            "num_blocks": self.kv_num_blocks,
            "max_concurrency": round(self.max_concurrency, 2),
            "at_max_model_len": self.requested_max_model_len or self.recommended_max_model_len,
            "reproduces": f'"GPU KV cache size: N tokens" of vLLM {self.vllm.version}: '
            + self.vllm.kv_tokens_text,
        }

    def _fit_doc(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "weights_fit": self.weights_fit,
            "recommended_max_model_len": self.recommended_max_model_len,
            "native_max_model_len": self.native_max_model_len,
            "native_max_model_len_source": self.native_source,
            "context_limited": self.context_limited,
            "requested_max_model_len": self.requested_max_model_len,
            "requested_max_model_len_fits": self.requested_fits,
            "min_tp_required": self.min_tp_required,
            "min_tp_if_more_gpus": self.min_tp_unbounded,
            "max_seq_len_fp8_kv": self.max_seq_len_fp8_kv,
            "headroom": self.headroom,
        }

    def _vllm_doc(self) -> dict[str, Any]:
        return {
            "version": self.vllm.version,
            "engine": "V0" if self.vllm.v0_engine else "V1",
            "engine_basis": self.vllm.engine_note,
            "graph_memory_in_budget": self.vllm.graph_memory_in_budget,
            "kv_tokens_formula": self.vllm.kv_tokens_text,
        }

    def _options_doc(self) -> dict[str, Any]:
        return {
            "kv_cache_dtype": self.options.kv_cache_dtype,
            "language_model_only": self.options.language_model_only,
            "speculative_mtp": self.options.speculative_mtp,
            "enforce_eager": self.options.enforce_eager,
            "enable_prefix_caching": self.options.enable_prefix_caching,
        }


# -- the estimator -----------------------------------------------------------------------


def _pipeline_stage(w: WeightEstimate, cfg: ModelConfig, tp: int, pp: int) -> WeightEstimate:
    """The weights of the largest pipeline stage: its share of the decoder layers plus one
    vocabulary matrix (the first stage's embedding or the last stage's lm_head)."""
    vocab = (cfg.vocab_size or 0) * cfg.hidden_size * cfg.dtype_bytes
    vocab_rank = -(-vocab // tp)
    layers_rank = max(0, w.per_rank_bytes - w.replicated_bytes_per_rank - 2 * vocab_rank)
    if cfg.tie_word_embeddings:
        layers_rank = max(0, w.per_rank_bytes - w.replicated_bytes_per_rank - vocab_rank)
    per_rank = -(-layers_rank // pp) + vocab_rank + w.replicated_bytes_per_rank
    note = (
        f"pipeline parallel {pp}: the largest stage holds 1/{pp} of the layers + one vocab matrix"
    )
    return replace(w, per_rank_bytes=per_rank, notes=(*w.notes, note))


def _tp_allowed(cfg: ModelConfig, layers: ModelLayers, tp: int) -> bool:
    """vLLM's divisibility rules: heads split evenly, KV heads split or replicated evenly."""
    try:
        heads = cfg.num_attention_heads
    except KeyError:
        return tp == 1
    if heads % tp:
        return False
    if not layers.uses_mla:
        kv = cfg.num_kv_heads
        if (kv % tp) if tp <= kv else (tp % kv):
            return False
    for spec in layers.layers:
        rec = spec.recurrent
        if rec is not None and (rec.state_heads % tp or rec.conv_channels % tp):
            return False
    return True


def _gib_value(text: str | None) -> int:
    """``VLLM_CPU_KVCACHE_SPACE``'s GiB in bytes (0: unset or not a number)."""
    try:
        return max(0, int(float(text or "") * GIB))
    except ValueError:
        return 0


def _native_len(cfg: ModelConfig, opts: FitOptions) -> tuple[int, str]:
    if opts.native_max_model_len:
        return opts.native_max_model_len, opts.native_source or "recipe"
    if cfg.max_position_embeddings:
        return cfg.max_position_embeddings, "config.json max_position_embeddings"
    return FALLBACK_CONTEXT, "default (config has no max_position_embeddings)"


class _Estimator:
    def __init__(self, meta: ModelMeta, hw: HardwareSpec, opts: FitOptions) -> None:
        self.meta, self.hw, self.opts = meta, hw, opts
        self.cfg = ModelConfig(meta.config)
        self.vllm = behaviour(
            opts.vllm_version,
            v0_engine=opts.v0_engine,
            platform=hw.platform,
            engine=opts.engine,
            use_v1_env=opts.use_v1_env,
        )
        try:
            self.layers = describe_layers(self.cfg, include_mtp=opts.speculative_mtp > 0)
            self.hidden = self.cfg.hidden_size  # the weight terms (replication, padding) need it
        except KeyError as exc:
            raise UsageError(
                f"config.json of {meta.model_id} lacks {exc.args[0]!r}: cannot size it",
                fix="check that the model is a decoder LLM with a complete config.json",
                id="config_incomplete",
            ) from exc
        self.native, self.native_source = _native_len(self.cfg, opts)
        self.cap = max(opts.max_model_len or 0, self.native)
        self.target = opts.max_model_len or self.native
        chunked = (
            v0_chunks_by_default(
                hw.platform,
                self.target,
                sliding_window=any(s.kind is LayerKind.SLIDING for s in self.layers.layers),
                mla=self.layers.uses_mla,
                multimodal=self.cfg.is_multimodal,
            )
            and not opts.speculative_mtp
        )
        self.mnbt, self.seqs = self.vllm.batch_defaults(
            hw.vram_bytes, self.target, hw.name, v0_chunked_prefill=chunked
        )
        self.pp = opts.pipeline_parallel_size
        self.stage_layers = self.layers
        if self.pp > 1:  # the first stage holds the most layers; KV blocks are the minimum
            per_stage = -(-len(self.layers.layers) // self.pp)
            self.stage_layers = replace(self.layers, layers=self.layers.layers[:per_stage])
        if opts.max_num_batched_tokens:
            self.mnbt = opts.max_num_batched_tokens
        if opts.max_num_seqs:
            self.seqs = opts.max_num_seqs
        if opts.gpu_memory_utilization is not None:
            self.util = opts.gpu_memory_utilization
            self.util_source = "given"
        else:
            self.util = self.vllm.default_gpu_memory_utilization
            self.util_source = self.vllm.utilization_note
        self.kv_bytes = kv_cache_dtype_bytes(opts.kv_cache_dtype, self.cfg.dtype_bytes)
        self.env = dict(opts.env)
        if opts.v2_model_runner:
            self.env.setdefault("VLLM_USE_V2_MODEL_RUNNER", "1")
        self.terms = terms(
            self.vllm.version,
            hw.platform,
            self.env,
            v0_engine=self.vllm.v0_engine,
            model=runner_model(self.cfg, self.layers.layers),
        )
        self.alignment = opts.moe_alignment or MOE_ALIGNMENT.get(
            "rocm" if hw.platform == "rocm" else "cuda_marlin"
        )
        self.attention_layers = sum(
            1 for s in self.layers.layers if s.attention is not None and not s.attention.mla
        )
        self._cache: dict[int, _TpEval] = {}

    def layout(self, tp: int, kv_bytes: int) -> KvLayout:
        rec_blocks = 2 if self.opts.enable_prefix_caching else 1
        return kv_layout(
            self.stage_layers,
            tp=tp,
            kv_dtype_bytes=kv_bytes,
            max_num_batched_tokens=self.mnbt,
            block_size=self.opts.block_size,
            recurrent_blocks_per_request=rec_blocks,
            num_speculative_tokens=self.opts.speculative_mtp,
            group_rule_1_5=self.vllm.group_rule_1_5,
        )

    def evaluate(self, tp: int) -> _TpEval:
        if tp in self._cache:
            return self._cache[tp]
        opts = self.opts
        weights = estimate_weights(
            self.meta,
            self.cfg,
            tp=tp,
            attention_layers=self.attention_layers,
            language_model_only=opts.language_model_only,
            load_mtp=opts.speculative_mtp > 0,
            moe_alignment=self.alignment,
        )
        if self.pp > 1:
            weights = _pipeline_stage(weights, self.cfg, tp, self.pp)
        node = self.hw.gpus_per_node or self.hw.gpu_count
        overhead = estimate_overhead(
            self.cfg,
            tp=tp,
            max_num_batched_tokens=self.mnbt,
            max_num_seqs=self.seqs,
            include_vision=self.cfg.is_multimodal and not opts.language_model_only,
            enforce_eager=opts.enforce_eager,
            table=self.terms,
            platform=self.hw.platform,
            sampler_bytes_per_logit=opts.sampler_bytes_per_logit,
            graphs_estimated=opts.estimate_graphs and self.terms.graphs_profiled,
            num_speculative_tokens=opts.speculative_mtp,
            cudagraph=opts.cudagraph,
            topology=topology(self.hw.name, across_nodes=tp * self.pp > node),
            weights_bytes=weights.per_rank_bytes,
        )
        budget = int(self.hw.vram_bytes * self.util)
        remaining = budget - weights.per_rank_bytes - overhead.total_bytes
        if opts.kv_cache_memory_bytes is not None:  # vLLM skips the memory profile
            remaining = opts.kv_cache_memory_bytes
        elif self.hw.platform == "cpu" and _gib_value(self.env.get("VLLM_CPU_KVCACHE_SPACE")):
            remaining = _gib_value(self.env["VLLM_CPU_KVCACHE_SPACE"])  # cpu_worker.py
        layout = self.layout(tp, self.kv_bytes)
        max_len = layout.max_model_len(remaining, self.cap) if remaining > 0 else 0
        ev = _TpEval(tp, weights, overhead, budget, remaining, layout, max_len, opts.max_model_len)
        self._cache[tp] = ev
        return ev

    def candidates(self) -> list[int]:
        out, tp = [], 1
        while tp <= MAX_TP:
            if _tp_allowed(self.cfg, self.layers, tp):
                out.append(tp)
            tp *= 2
        return out or [1]

    def _choose_tp(self) -> tuple[int, int | None, int | None]:
        """The TP to report (asked, else the smallest that fits here, else the most GPUs
        present), the smallest that fits on the GPUs present, and with more of them."""
        opts = self.opts
        cands = self.candidates()
        if opts.tp is not None and opts.tp not in cands:
            raise UsageError(
                f"--tp {opts.tp} does not divide the model's attention heads evenly",
                fix="use one of: " + ", ".join(str(t) for t in cands if t <= max(8, opts.tp)),
                id="bad_tp_for_model",
            )
        min_unbounded = next((t for t in cands if self.evaluate(t).fits), None)
        present = [t for t in cands if t <= self.hw.gpu_count]
        min_required = next((t for t in present if self.evaluate(t).fits), None)
        if opts.tp is not None:
            tp = opts.tp
        elif min_required is not None:
            tp = min_required
        else:
            tp = present[-1] if present else 1
        return tp, min_required, min_unbounded

    def _recommended_len(self, ev: _TpEval) -> int:
        """The longest context that fits at ``ev``'s TP, capped by the native one and
        rounded down to the block size."""
        if ev.max_len <= 0:
            return 0
        rec = min(ev.max_len, self.native)
        if rec < self.native:
            rec = max(ev.layout.block_size, rec // ev.layout.block_size * ev.layout.block_size)
            rec = min(rec, ev.max_len)
        return rec

    def run(self) -> FitReport:
        opts, hw = self.opts, self.hw
        tp, min_required, min_unbounded = self._choose_tp()
        ev = self.evaluate(tp)
        notes: list[str] = list(self.meta.notes) + list(self.layers.notes)
        notes += list(ev.weights.notes) + list(ev.layout.notes)
        if opts.tp is not None and opts.tp > hw.gpu_count:
            notes.append(f"--tp {opts.tp} asks for more GPUs than the {hw.gpu_count} present")
        verdict, reason = self._verdict(ev, min_required, min_unbounded)
        rec = self._recommended_len(ev)
        limited = rec < self.native
        requested = opts.max_model_len
        requested_fits = None if requested is None else ev.max_len >= requested
        if requested and requested > self.native:
            notes.append(
                f"--max-model-len {requested} exceeds the native {self.native} "
                f"({self.native_source}); vLLM needs VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
            )
        fp8_layout = self.layout(tp, 1)
        fp8_len = (
            fp8_layout.max_model_len(ev.remaining_bytes, self.cap) if ev.remaining_bytes > 0 else 0
        )
        fp8_len = min(fp8_len, self.native)
        length = requested if requested and requested_fits else rec
        num_blocks = ev.layout.num_blocks(ev.remaining_bytes)
        tokens = (
            ev.layout.kv_tokens(num_blocks, length, self.vllm.kv_tokens_formula) if length else 0
        )
        concurrency = ev.layout.max_concurrency(num_blocks, length) if length else 0.0
        if self.cfg.is_multimodal and not opts.language_model_only:
            notes.append("vision/audio tower loaded (pass --language-model-only for text only)")
        return FitReport(
            model_id=self.meta.model_id,
            meta=self.meta,
            hardware=hw,
            options=opts,
            vllm=self.vllm,
            layers=self.layers,
            tp=tp,
            weights=ev.weights,
            overhead=ev.overhead,
            layout=ev.layout,
            budget_bytes=ev.budget_bytes,
            gpu_memory_utilization=self.util,
            utilization_source=self.util_source,
            remaining_bytes=ev.remaining_bytes,
            native_max_model_len=self.native,
            native_source=self.native_source,
            recommended_max_model_len=rec,
            context_limited=limited,
            requested_max_model_len=requested,
            requested_fits=requested_fits,
            max_seq_len_fp8_kv=fp8_len,
            min_tp_required=min_required,
            min_tp_unbounded=min_unbounded,
            kv_tokens=tokens,
            kv_num_blocks=num_blocks,
            max_concurrency=concurrency,
            verdict=verdict,
            verdict_reason=reason,
            headroom=ev.headroom,
            notes=notes,
        )

    def _verdict(
        self, ev: _TpEval, min_required: int | None, min_unbounded: int | None
    ) -> tuple[str, str]:
        left = f"{in_gb(ev.remaining_bytes)} GB left for KV cache per GPU at TP {ev.tp}"
        count = self.hw.gpu_count
        if ev.tp > count:
            return "does_not_fit", (
                f"TP {ev.tp} needs {ev.tp} GPUs and {count} are present; at TP {ev.tp}: " + left
            )
        if ev.fits and (self.opts.tp is not None or ev.tp == 1):
            if ev.headroom == "safe":
                return "safe", left
            return "tight", left + " (if graph capture runs out of memory, add --enforce-eager)"
        if ev.fits:  # TP was chosen for the user
            return "needs_tp", f"does not fit one GPU; TP {ev.tp} fits: " + left
        if min_required is not None and min_required > ev.tp:
            return "needs_tp", f"{left}; TP {min_required} fits on the GPUs present"
        if ev.headroom in ("safe", "tight") and not ev.holds_requested:
            need = ev.layout.bytes_for_request(ev.requested_len or 0)
            return "does_not_fit", (
                f"--max-model-len {ev.requested_len} needs {in_gb(need)} GB of KV cache per GPU, "
                f"{left}; the longest that fits is {ev.max_len}"
            )
        if ev.headroom == "too_tight":
            return "too_tight", left + " (under 2 GB: a few requests at most)"
        more = (
            f"; TP {min_unbounded} would fit with {min_unbounded} such GPUs"
            if min_unbounded is not None and min_unbounded > self.hw.gpu_count
            else ""
        )
        return "does_not_fit", (
            f"weights {in_gib(ev.weights.per_rank_bytes)} GiB + overhead "
            f"{in_gib(ev.overhead.total_bytes)} GiB per GPU leave {in_gb(ev.remaining_bytes)} GB "
            f"of the {in_gib(ev.budget_bytes)} GiB budget at TP {ev.tp}{more}"
        )


def estimate(meta: ModelMeta, hw: HardwareSpec, opts: FitOptions | None = None) -> FitReport:
    """Size ``meta`` on ``hw`` with the launch ``opts``; pure: no I/O."""
    return _Estimator(meta, hw, opts or FitOptions()).run()
