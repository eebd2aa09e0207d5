"""SGLang's own memory model: the static fraction, the KV pool, the graph reserve.

Pure (data in, data out). Written from sglang 0.5.23's source (the release the real-SGLang
tier installs); each step names its file and function:

- **Static fraction** (``arg_groups/memory_hook.py`` ``_handle_gpu_memory_settings``): unless
  ``--mem-fraction-static`` is given, ``round((gpu_mem - reserved) / gpu_mem, 3)`` with
  ``gpu_mem`` the device's memory in MiB and ``reserved`` (MiB) = 512 + 1.5 x
  ``max(chunked_prefill_size, 2048)`` + ``tp x pp / 8 x 1024`` + the graph reserve, at least
  10 GiB on devices over 60 GiB. ``chunked_prefill_size`` and the decode graphs' ``max_bs``
  default by device memory and TP (``CAPACITY_BANDS``).
- **Graph reserve** (same file, ``reserve_for_graph_mb``): 2 MiB per decode batch size up to
  ``max_bs`` when decode graphs are on; DP attention adds 3 (and 1.5 more over 300) x
  ``max_bs`` x the DP size; prefill graphs (off by default: ``PhaseConfig.backend`` is
  ``disabled``) add 8 MiB per captured size, 1.5 GiB with MLA. Graph memory is not charged
  when it is captured: it lives in the ``1 - fraction`` share.
- **KV pool** (``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``, then
  ``model_executor/pool_configurator.py`` ``calculate_pool_sizes``): ``rest = free after
  loading - pre_model_load_memory x (1 - fraction)``; ``pre_model_load_memory`` is the free
  memory once torch.distributed is up (``bootstrap.measure_pre_model_load_memory``, the
  log's "Load weight begin. avail mem"). So the pool is ``pre x fraction - weights``, and
  ``max_total_num_tokens = rest // cell_size``, rounded down to the page size.
- **Cell size** (``pool_configurator.py`` ``_compute_cell_size``): MHA/GQA ``kv_heads_per_rank
  x (head_dim + v_head_dim) x layers x kv_dtype_bytes`` (``get_num_kv_heads``: heads // TP,
  at least 1); MLA ``(kv_lora_rank + qk_rope_head_dim) x layers x kv_dtype_bytes``
  (``kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim``), the same on every rank.
  Sliding-window layers are sized as full layers here (SGLang's hybrid SWA pool splits
  memory between two pools by ``swa_full_tokens_ratio``: not modelled, noted).

What the source cannot say is the memory in use before the weights load (the CUDA/HIP context,
and at TP > 1 the collectives' buffers): ``CONTEXT_BYTES`` per platform, from the calibration
logs of ``tests/fixtures/sglang/fit_cases.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve.fit.kv import ModelLayers

if TYPE_CHECKING:
    from instinct_serve.fit.estimate import FitReport

GIB = 1 << 30
MIB = 1 << 20
SGLANG_VERSION = "0.5.23"
# Free memory lost before "Load weight begin" on one GPU (context, allocator, runtime):
# total - "avail mem" of the calibration logs. CUDA: H100 80GB, 79.19 - 78.59 GiB (sglang PR
# #4760); ROCm: MI300X, 191.98 - 191.33 GiB (AUGMXNT/MI300-testing). CPU: SGLang's CPU backend
# reads the host's free memory; no GPU context.
CONTEXT_BYTES = {"cuda": int(0.60 * GIB), "rocm": int(0.65 * GIB), "cpu": 0}
# _handle_gpu_memory_settings: (device MiB below, chunked_prefill_size, max_bs at TP < 4,
# max_bs at TP >= 4); the last band has no upper bound.
CAPACITY_BANDS: tuple[tuple[int | None, int, int, int], ...] = (
    (20 * 1024, 2048, 8, 8),  # T4, 4080
    (35 * 1024, 4096, 48, 160),  # A10, 4090, 5090
    (60 * 1024, 4096, 32, 160),  # A100 40GB, L40
    (90 * 1024, 8192, 256, 512),  # H100, A100 80GB
    (160 * 1024, 8192, 256, 512),  # H20, H200
    (None, 16384, 512, 512),  # B200, MI300X and larger
)
FLOOR_RESERVED_MIB = 10 * 1024  # devices over 60 GiB reserve at least this
# On the CPU device the decode graphs' max_bs is ``torch_compile_max_bs`` (default 32), and the
# device memory is the host's per NUMA node (``get_cpu_memory_capacity``).
CPU_MAX_BS = 32
DEFAULT_MAX_PREFILL_TOKENS = 16384  # server_args max_prefill_tokens


@dataclass(frozen=True)
class SglangLaunch:
    """The SGLang flags that shape memory (None: SGLang's default)."""

    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    dp_attention_size: int = 1  # --dp-size with --enable-dp-attention
    prefill_graph_sizes: int = 0  # captured prefill graphs (off by default)
    pp: int = 1
    page_size: int = 1
    max_total_tokens: int | None = None  # --max-total-tokens caps the pool
    kv_cache_dtype: str | None = None  # --kv-cache-dtype (None: fit's, else the model's)
    context_length: int | None = None  # --context-length (None: derived from config.json)


def launch_from_args(args: Iterable[str], **yours: Any) -> SglangLaunch:
    """The memory-shaping flags of an SGLang argv (a plan's ``vllm_args``: AMD's config, your
    options in SGLang's words, your ``-- ARGS``); ``yours`` (``SglangLaunch`` fields) stand
    where the argv says nothing. A value that does not parse is SGLang's to refuse: left out."""
    from instinct_serve import vllm_args

    argv = list(args)

    def number(kind: Callable[[str], Any], *flags: str) -> Any:
        text = vllm_args.value(argv, *flags)
        try:
            return kind(text) if text else None
        except ValueError:
            return None

    dp = number(int, "--dp-size", "--dp", "--data-parallel-size") or 1
    found = {
        "mem_fraction_static": number(float, "--mem-fraction-static"),
        "chunked_prefill_size": number(int, "--chunked-prefill-size"),
        "cuda_graph_max_bs": number(int, "--cuda-graph-max-bs"),
        "disable_cuda_graph": vllm_args.has(argv, "--disable-cuda-graph") or None,
        "dp_attention_size": dp if vllm_args.has(argv, "--enable-dp-attention") else None,
        "pp": number(int, "--pp-size", "--pp", "--pipeline-parallel-size"),
        "page_size": number(int, "--page-size"),
        "max_total_tokens": number(int, "--max-total-tokens"),
        "kv_cache_dtype": vllm_args.value(argv, "--kv-cache-dtype") or None,
        "context_length": number(int, "--context-length"),
    }
    given = {k: v for k, v in yours.items() if v is not None}
    return SglangLaunch(**{**given, **{k: v for k, v in found.items() if v is not None}})


# ``get_context_length`` (srt/utils/hf_transformers/common.py): the first of these keys, times
# the rope factor unless the rope scaling names its original length or is Llama 3's.
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
DEFAULT_CONTEXT_LENGTH = 2048


def derived_context_length(text_config: Mapping[str, Any]) -> tuple[int, str]:
    """The context SGLang derives from config.json (``ModelConfig._derive_context_length``
    without ``--context-length``), and which key gave it."""
    rope = text_config.get("rope_scaling")
    factor: float = 1
    if isinstance(rope, Mapping) and rope:
        factor = rope.get("factor", 1) or 1
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in CONTEXT_LENGTH_KEYS:
        value = text_config.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            scaled = f" x rope factor {factor:g}" if factor != 1 else ""
            return int(factor * value), f"config.json {key}{scaled} (SGLang's get_context_length)"
    return DEFAULT_CONTEXT_LENGTH, "SGLang's default (config.json names no context length)"


@dataclass(frozen=True)
class SglangMemory:
    """One rank's memory as SGLang sizes it (bytes unless named)."""

    mem_fraction_static: float
    fraction_source: str
    reserved_mib: float  # the default fraction's reserve (0 when the fraction is given)
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    pre_load_bytes: int  # "Load weight begin. avail mem"
    weights_bytes: int
    slack_bytes: int  # pre_load x (1 - fraction): activations, graphs, everything else
    kv_pool_bytes: int
    cell_bytes: int  # KV bytes per token on this rank
    max_total_num_tokens: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return self.kv_pool_bytes > 0 and self.max_total_num_tokens > 0

    def to_dict(self) -> dict[str, object]:
        def gib(n: int) -> float:
            return round(n / GIB, 2)

        return {
            "server": "sglang",
            "version_modelled": SGLANG_VERSION,
            "mem_fraction_static": self.mem_fraction_static,
            "fraction_source": self.fraction_source,
            "reserved_mib": round(self.reserved_mib, 1),
            "chunked_prefill_size": self.chunked_prefill_size,
            "cuda_graph_max_bs": self.cuda_graph_max_bs,
            "pre_load_gib": gib(self.pre_load_bytes),
            "weights_gib": gib(self.weights_bytes),
            "slack_gib": gib(self.slack_bytes),
            "kv_pool_gib": gib(self.kv_pool_bytes),
            "kv_bytes_per_token": self.cell_bytes,
            "max_total_num_tokens": self.max_total_num_tokens,
            "notes": list(self.notes),
        }


def capacity_defaults(gpu_mib: float | None, tp: int, platform: str = "rocm") -> tuple[int, int]:
    """(chunked_prefill_size, decode max_bs) SGLang picks for the device's memory and TP
    (``_handle_gpu_memory_settings``; 4096 / 160 when the memory is unknown)."""
    if gpu_mib is None:
        return 4096, 160
    for upper, chunk, small, large in CAPACITY_BANDS:
        if upper is None or gpu_mib < upper:
            return chunk, (CPU_MAX_BS if platform == "cpu" else small if tp < 4 else large)
    raise AssertionError("CAPACITY_BANDS ends with an unbounded band")


def graph_reserve_mib(launch: SglangLaunch, max_bs: int, *, mla: bool) -> float:
    """``reserve_for_graph_mb``: decode graphs, DP-attention padding, prefill graphs."""
    reserved = 0.0
    if not launch.disable_cuda_graph:
        reserved += max_bs * 2
    if launch.dp_attention_size > 1:
        reserved += max_bs * launch.dp_attention_size * 3
        if max_bs > 300:
            reserved += max_bs * launch.dp_attention_size * 1.5
    if launch.prefill_graph_sizes and not launch.disable_cuda_graph:
        reserved += 1.5 * 1024 if mla else launch.prefill_graph_sizes * 8
    return reserved


def default_fraction(
    gpu_mib: float, tp: int, launch: SglangLaunch, *, mla: bool, platform: str = "rocm"
) -> tuple[float, float, int, int]:
    """(mem_fraction_static, reserved MiB, chunked_prefill_size, max_bs) by
    ``_handle_gpu_memory_settings`` for a device of ``gpu_mib`` MiB."""
    chunk, max_bs = capacity_defaults(gpu_mib, tp, platform)
    chunk = launch.chunked_prefill_size or chunk
    max_bs = launch.cuda_graph_max_bs or max_bs
    tokens = max(chunk, 2048) if chunk > 0 else max(DEFAULT_MAX_PREFILL_TOKENS, 2048)
    reserved = 512 + tokens * 1.5 + tp * launch.pp / 8 * 1024
    reserved += graph_reserve_mib(launch, max_bs, mla=mla)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, FLOOR_RESERVED_MIB)
    return round((gpu_mib - reserved) / gpu_mib, 3), reserved, chunk, max_bs


def cell_bytes(layers: ModelLayers, tp: int, kv_dtype_bytes: int) -> int:
    """KV bytes per token on one rank (``_compute_cell_size``): every cache-holding
    attention layer, MHA/GQA heads split over TP (at least one), MLA latent whole."""
    return sum(
        spec.attention.bytes_per_token(tp, kv_dtype_bytes)
        for spec in layers.layers
        if spec.attention is not None
    )


def estimate_sglang(
    *,
    vram_bytes: int,
    platform: str,
    tp: int,
    weights_bytes: int,
    layers: ModelLayers,
    kv_dtype_bytes: int,
    launch: SglangLaunch | None = None,
    pre_load_bytes: int | None = None,
) -> SglangMemory:
    """One rank as SGLang sizes it. ``weights_bytes``: loaded weights per rank;
    ``pre_load_bytes``: the free memory before loading when known (a log's
    "Load weight begin" figure), else ``vram - CONTEXT_BYTES[platform]``."""
    launch = launch or SglangLaunch()
    mla = layers.uses_mla
    gpu_mib = vram_bytes / MIB
    chunk, max_bs = capacity_defaults(gpu_mib, tp, platform)
    if launch.mem_fraction_static is not None:
        fraction, reserved, source = launch.mem_fraction_static, 0.0, "--mem-fraction-static"
        chunk = launch.chunked_prefill_size or chunk
        max_bs = launch.cuda_graph_max_bs or max_bs
    else:
        fraction, reserved, chunk, max_bs = default_fraction(
            gpu_mib, tp, launch, mla=mla, platform=platform
        )
        source = (
            f"SGLang's default: (device {gpu_mib:.0f} MiB - reserved {reserved:.0f} MiB) / "
            "device (_handle_gpu_memory_settings)"
        )
    pre = pre_load_bytes
    if pre is None:
        pre = vram_bytes - CONTEXT_BYTES.get(platform, CONTEXT_BYTES["cuda"])
    slack = int(pre * (1 - fraction))
    pool = pre - weights_bytes - slack
    cell = cell_bytes(layers, tp, kv_dtype_bytes)
    notes: list[str] = []
    tokens = max(0, pool) // cell if cell else 0
    tokens = tokens // launch.page_size * launch.page_size
    if launch.max_total_tokens is not None and launch.max_total_tokens < tokens:
        tokens = launch.max_total_tokens
        notes.append(f"--max-total-tokens {launch.max_total_tokens} caps the pool")
    if any(spec.window for spec in layers.layers if spec.attention is not None):
        notes.append(
            "sliding-window layers sized as full layers: SGLang's hybrid SWA pool "
            "(swa_full_tokens_ratio) is not modelled; the token count is a lower bound"
        )
    if layers.has_recurrent:
        notes.append("recurrent (Mamba/GDN) state pools are not modelled")
    if pool <= 0:
        notes.append(
            "the weights leave no memory for the KV cache under this fraction "
            "(SGLang refuses to start: raise --mem-fraction-static or the TP)"
        )
    return SglangMemory(
        mem_fraction_static=fraction,
        fraction_source=source,
        reserved_mib=reserved,
        chunked_prefill_size=chunk,
        cuda_graph_max_bs=max_bs,
        pre_load_bytes=pre,
        weights_bytes=weights_bytes,
        slack_bytes=slack,
        kv_pool_bytes=pool,
        cell_bytes=cell,
        max_total_num_tokens=tokens,
        notes=tuple(notes),
    )


def from_report(
    report: FitReport,
    launch: SglangLaunch | None = None,
    *,
    pre_load_bytes: int | None = None,
    kv_cache_dtype: str | None = None,
) -> SglangMemory:
    """SGLang's sizing of what ``fit`` sized for vLLM: the same GPU, TP, loaded weights per
    rank and KV layers (one weight model for both servers), SGLang's fraction and pool.
    ``kv_cache_dtype``: SGLang's ``--kv-cache-dtype`` (else the launch's, else SGLang's
    ``auto``; a vLLM recipe's ``--kv-cache-dtype`` is not SGLang's)."""
    from instinct_serve.fit.dtypes import kv_cache_dtype_bytes

    launch = launch or SglangLaunch()
    dtype = kv_cache_dtype or launch.kv_cache_dtype or "auto"  # SGLang's default: the model's
    kv_bytes = kv_cache_dtype_bytes(dtype, report.layers.model_dtype_bytes)
    return estimate_sglang(
        vram_bytes=report.hardware.vram_bytes,
        platform=report.hardware.platform,
        tp=report.tp,
        weights_bytes=report.weights.per_rank_bytes,
        layers=report.layers,
        kv_dtype_bytes=kv_bytes,
        launch=launch,
        pre_load_bytes=pre_load_bytes,
    )
