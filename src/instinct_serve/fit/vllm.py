"""What changes with the vLLM version: defaults, what the budget subtracts, the log figure.

Each threshold is a release where the behaviour is documented or visible in a published log:

- CUDA/HIP graph memory is estimated during profiling and subtracted from the KV budget
  since v0.21.0 (the log says "CUDA graph memory profiling is enabled (default since
  v0.21.0)"); before, graphs came out of the ``1 - gpu_memory_utilization`` headroom.
- "GPU KV cache size: N tokens" printed ``num_blocks // num_groups * block_size`` up to
  v0.19 (vllm#40691: Qwen3.5-27B logs 290,864 tokens with 33.04x concurrency at 32,768)
  and ``int(max_concurrency * max_model_len)`` in later releases.
- ``gpu_memory_utilization`` defaulted to 0.9 through v0.19 (v0.10-v0.19 docs); current
  docs say 0.92. The release of that change is not pinned down; it is taken to be v0.21,
  the release that moved graph memory inside the budget. Pass the value the launch uses.
- Batch defaults (``get_batch_defaults``): devices of 70 GiB or more (but not A100s) run
  ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024 in the API server, others
  2048/256; v0.28 adds 16384 batched tokens for devices of 160 GiB or more. With defaults,
  ``max_num_batched_tokens <= max_num_seqs x max_model_len`` and ``max_num_seqs <=
  max_num_batched_tokens`` (``_set_default_max_num_seqs_and_batched_tokens_args``).
- Engine: V1 is the default on CUDA from v0.8.0 ("V1 is now enabled by default"); ROCm
  builds fell back to V0 through 0.9.x (the 0.9.0.1 log: "rocm is experimental on
  VLLM_USE_V1=1. Falling back to V0 Engine"; the 0.9.2 MI300X logs are V0); V0 is gone from
  0.11. ``VLLM_USE_V1=0/1`` chooses where both exist.
- Collective (NCCL/RCCL) buffers count in the budget's non-torch memory while vLLM measured
  it from a snapshot taken before the distributed init: every V0 release, and V1 until PR
  #25359 (0.11.0). This and the graph-memory release come from ``overhead_table`` (one
  table of every overhead term by version and platform).
- V0 profiles ``max_num_batched_tokens`` tokens, which is ``max(max_model_len, 2048)`` unless
  chunked prefill is on; V0 turns it on by itself only on CUDA for a context over 32K with no
  sliding window, MLA, multimodal or speculative model (``_set_default_args_v0``, which
  excludes ROCm), and then batches 2048 tokens (512 before v0.6.4).
- CUDA graph capture sizes (``_set_cudagraph_sizes``, v0.11+): ``[1, 2, 4] + range(8, 256, 8)
  + range(256, top + 1, 16)`` up to ``top = min(max_num_seqs x q x 2, 512,
  max_num_batched_tokens)`` with ``q = 1 + num_speculative_tokens``; with speculation each size
  is rounded up to a multiple of ``q`` (``adjust_cudagraph_sizes_for_spec_decode``). PIECEWISE
  graphs take every size, FULL (uniform decode) graphs those up to ``max_num_seqs x q``. Logs
  agree: 256 seqs print "PIECEWISE=51 (largest=512), FULL=35 (largest=256)" (vllm#39559), 8
  seqs "PIECEWISE=5 (largest=16), FULL=4 (largest=8)", 4 seqs with 2 MTP tokens
  "PIECEWISE=5 (largest=24), FULL=3 (largest=9)". Releases of 2026-07 on capture more sizes
  (one logs PIECEWISE=76 at largest 512); the count is then a lower bound.
  ``--compilation-config`` keys ``cudagraph_capture_sizes``, ``max_cudagraph_capture_size`` and
  ``cudagraph_mode`` change the sizes and which modes are captured.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from instinct_serve.errors import UsageError

# The newest vLLM release (v0.33.0, 2026-11: gpustack/runner v0.1.32.post4 ships its CUDA 13.0
# and ROCm 7.2 images), the default where the launch's image gives no version; a plan passes
# its image's version (``catalog_link.launch_context``).
DEFAULT_VLLM_VERSION = "0.33.0"

GIB = 2**30


V1_DEFAULT_FROM = {"cuda": Version("0.8.0"), "rocm": Version("0.10.0")}
V0_REMOVED_IN = Version("0.11.0")
ENGINES = ("v0", "v1")


@dataclass(frozen=True)
class VllmBehaviour:
    version: str
    v0_engine: bool
    default_gpu_memory_utilization: float
    utilization_note: str
    graph_memory_in_budget: bool
    kv_tokens_formula: str  # "blocks" | "concurrency"
    group_rule_1_5: bool
    engine_note: str = ""
    collectives_in_budget: bool = False  # NCCL/RCCL buffers count as non-torch (module doc)

    def batch_defaults(
        self,
        vram_bytes: int,
        max_model_len: int,
        device_name: str = "",
        *,
        v0_chunked_prefill: bool = False,
    ) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) vLLM picks for the API server.

        ``v0_chunked_prefill``: V0 would turn chunked prefill on by itself (see
        ``v0_chunks_by_default``)."""
        if self.v0_engine:
            if v0_chunked_prefill:
                old = Version(Version(self.version).base_version) < Version("0.6.4")
                return (512 if old else 2048), 256
            return max(max_model_len, 2048), 256  # the profile runs a full-length batch
        if vram_bytes >= 70 * GIB and "a100" not in device_name.lower():
            big = vram_bytes >= 160 * GIB and Version(self.version) >= Version("0.28")
            mnbt, seqs = (16384 if big else 8192), 1024
        else:
            mnbt, seqs = 2048, 256
        mnbt = min(mnbt, seqs * max(1, max_model_len))
        return mnbt, min(seqs, mnbt)

    def before(self, release: str) -> bool:
        """This version is older than ``release`` (pre-releases of it count as older)."""
        return Version(Version(self.version).base_version) < Version(release)

    @property
    def kv_tokens_text(self) -> str:
        if self.kv_tokens_formula == "blocks":
            return "num_blocks // kv_cache_groups * block_size (vLLM <= 0.19)"
        return "int(max_concurrency * max_model_len) (vLLM >= 0.20)"


CUDAGRAPH_MAX_CAPTURE_SIZE = 512


CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def cudagraph_capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    *,
    given_sizes: tuple[int, ...] | None = None,
    max_capture_size: int | None = None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(PIECEWISE sizes, FULL decode sizes) vLLM captures (see the module doc).

    ``given_sizes`` / ``max_capture_size``: ``--compilation-config``'s
    ``cudagraph_capture_sizes`` (deduplicated, those up to ``max_num_batched_tokens``) and
    ``max_cudagraph_capture_size`` (replaces ``min(max_num_seqs x q x 2, 512)``)."""
    q = 1 + max(0, num_speculative_tokens)
    if given_sizes is not None:
        sizes = sorted({s for s in given_sizes if 0 < s <= max_num_batched_tokens})
    else:
        default_top = min(max_num_seqs * q * 2, CUDAGRAPH_MAX_CAPTURE_SIZE)
        top = min(max_capture_size or default_top, max_num_batched_tokens)
        if top < 1:
            return (), ()
        sizes = [s for s in (1, 2, 4) if s <= top]
        if top >= 8:
            sizes += range(8, min(top + 1, 256), 8)
        if top >= 256:
            sizes += range(256, top + 1, 16)
    if q > 1:
        sizes = sorted({-(-s // q) * q for s in sizes})
    piecewise = tuple(sizes)
    full = tuple(s for s in piecewise if s <= max_num_seqs * q)
    return piecewise, full


def cudagraph_counts(
    mode: str | None, piecewise: tuple[int, ...], full: tuple[int, ...]
) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs captured under ``cudagraph_mode`` (default
    FULL_AND_PIECEWISE): FULL captures every size as full graphs, FULL_DECODE_ONLY only the
    uniform-decode sizes, PIECEWISE no full graphs, NONE nothing."""
    mode = (mode or "FULL_AND_PIECEWISE").upper()
    if mode == "NONE":
        return 0, 0
    if mode == "PIECEWISE":
        return len(piecewise), 0
    if mode == "FULL":
        return 0, len(piecewise)
    if mode == "FULL_DECODE_ONLY":
        return 0, len(full)
    return len(piecewise), len(full)


def v0_chunks_by_default(
    platform: str, max_model_len: int, *, sliding_window: bool, mla: bool, multimodal: bool
) -> bool:
    """Whether V0 turns chunked prefill on by itself (``_set_default_args_v0``)."""
    return (
        platform == "cuda" and max_model_len > 32768 and not (sliding_window or mla or multimodal)
    )


def select_engine(
    version: Version, platform: str, engine: str | None, use_v1_env: str | None
) -> tuple[bool, str]:
    """(V0?, why): ``engine`` ("v0"/"v1") wins, then ``VLLM_USE_V1``, then the default."""
    base = Version(version.base_version)
    if base >= V0_REMOVED_IN:
        return False, f"V1: the only engine from vLLM {V0_REMOVED_IN}"
    if engine in ENGINES:
        return engine == "v0", f"{engine.upper()}: as given"
    if use_v1_env is not None and use_v1_env.strip() in ("0", "1"):
        v0 = use_v1_env.strip() == "0"
        return v0, f"{'V0' if v0 else 'V1'}: VLLM_USE_V1={use_v1_env.strip()}"
    first = V1_DEFAULT_FROM.get(platform, V1_DEFAULT_FROM["rocm"])
    if base < first:
        return True, f"V0: the default of vLLM {base} on {platform} (V1 from {first})"
    return False, f"V1: the default on {platform} from vLLM {first}"


def behaviour(
    version: str | None = None,
    *,
    v0_engine: bool | None = None,
    platform: str = "rocm",
    engine: str | None = None,
    use_v1_env: str | None = None,
) -> VllmBehaviour:
    """The behaviour of ``version`` (default ``DEFAULT_VLLM_VERSION``) on ``platform``.

    The engine: ``v0_engine`` when given, else ``select_engine``."""
    text = (version or DEFAULT_VLLM_VERSION).strip().lstrip("v")
    try:
        ver = Version(text)
    except InvalidVersion as exc:
        raise UsageError(
            f"invalid vLLM version {version!r}",
            fix="use a release number such as 0.22.0",
            id="bad_vllm_version",
        ) from exc
    base = Version(ver.base_version)
    if v0_engine is None:
        v0_engine, engine_note = select_engine(ver, platform, engine, use_v1_env)
    else:
        engine_note = "V0: as given" if v0_engine else "V1: as given"
    from instinct_serve.fit.overhead_table import select

    graphs = select("graphs", str(base), platform).value == "estimate" and not v0_engine
    util = 0.92 if graphs else 0.9
    note = (
        "0.92: the current vLLM default (assumed since v0.21, when graph memory moved "
        "into the budget)"
        if graphs
        else "0.9: the vLLM default up to v0.19"
    )
    return VllmBehaviour(
        version=str(ver),
        v0_engine=v0_engine,
        default_gpu_memory_utilization=util,
        utilization_note=note,
        graph_memory_in_budget=graphs,
        kv_tokens_formula="concurrency" if base >= Version("0.20") and not v0_engine else "blocks",
        group_rule_1_5=base >= Version("0.20"),
        engine_note=engine_note,
        collectives_in_budget=v0_engine
        or select("collectives", str(base), platform).value == "in_budget",
    )
