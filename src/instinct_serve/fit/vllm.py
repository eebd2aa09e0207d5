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
  2048/256; v0.28 adds 16384 batched tokens for devices of 160 GiB or more.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from instinct_serve.errors import UsageError

# The ROCm image the AMD skill resolved (vllm/vllm-openai-rocm:v0.22.0, 2026-06); the
# planner should pass the version of the image it launches.
DEFAULT_VLLM_VERSION = "0.22.0"

GIB = 2**30


@dataclass(frozen=True)
class VllmBehaviour:
    version: str
    v0_engine: bool
    default_gpu_memory_utilization: float
    utilization_note: str
    graph_memory_in_budget: bool
    kv_tokens_formula: str  # "blocks" | "concurrency"
    group_rule_1_5: bool

    def batch_defaults(
        self, vram_bytes: int, max_model_len: int, device_name: str = ""
    ) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) vLLM picks for the API server."""
        if self.v0_engine:  # no chunked prefill: the profile runs a full-length batch
            return max(max_model_len, 2048), 256
        if vram_bytes >= 70 * GIB and "A100" not in device_name:
            big = vram_bytes >= 160 * GIB and Version(self.version) >= Version("0.28")
            return (16384 if big else 8192), 1024
        return 2048, 256

    @property
    def kv_tokens_text(self) -> str:
        if self.kv_tokens_formula == "blocks":
            return "num_blocks // kv_cache_groups * block_size (vLLM <= 0.19)"
        return "int(max_concurrency * max_model_len) (vLLM >= 0.20)"


def behaviour(version: str | None = None, *, v0_engine: bool = False) -> VllmBehaviour:
    """The behaviour of ``version`` (default ``DEFAULT_VLLM_VERSION``)."""
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
    graphs = base >= Version("0.21") and not v0_engine
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
    )
