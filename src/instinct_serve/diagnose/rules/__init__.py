"""The known failures: how each one shows in a vLLM log, and what to do about it.

Every failure has two halves, written side by side: a ``build_*`` function that writes the
finding from what is known (used for logs and for pasted symptoms alike) and a detector
that finds the evidence in a ``Scan``. Each failure family is a module here that lists its
own ``RULES`` (``diagnose.registry``): each failure's stable id, its rank (specificity: a
root cause outranks the wrapper error that reports it, e.g. a flashinfer JIT build failure
outranks "Engine core initialization failed"), builder, detector and the words of a pasted
symptom. ``ORDER`` below is the one place that orders them all. Wording comes from real
vLLM, PyTorch, huggingface_hub, docker and ROCm output (see tests/fixtures/logs and the
near-miss tests).
"""

from __future__ import annotations

from instinct_serve.diagnose.registry import Registry, in_order
from instinct_serve.diagnose.rules import (
    distributed,
    fingerprint,
    graphs,
    host,
    hub,
    images,
    kernels,
    memory,
    model_config,
    process,
    signals,
    stacks,
)

# Every known failure, registered once. The order is the order symptoms are tried in (the
# specific before the general) and breaks ties between findings of equal rank on one line.
ORDER: tuple[str, ...] = (
    "graph_capture_hang",
    "incoherent_output",
    "wrong_output",
    "oom_sampler_warmup",
    "oom_graph_capture",
    "oom_weights",
    "oom_profiling",
    "gpu_memory_busy",
    "kv_cache_no_memory",
    "max_model_len_exceeds_model",
    "max_model_len_exceeds_kv",
    "out_of_memory",
    "gated_repo",
    "repo_not_found",
    "trust_remote_code_required",
    "fp4bmm_gfx942",
    "aiter_sampler_segfault",
    "aiter_moe_kernel_fault",
    "aiter_moe_no_kernel_for_shape",
    "aiter_rmsnorm_unsupported_arch",
    "aiter_mla_unsupported_heads",
    "dsv4_sparse_mla_warmup_segfault",
    "nccl_proxy_segfault",
    "pp_rank_without_warmup",
    "known_bad_stack",
    "attn_full_graph_capture_fault",
    "graph_replay_crash",
    "graph_capture_failed",
    "gpu_kernel_crash",
    "no_kernel_image",
    "libtorch_cuda_import",
    "cuda_visible_devices_empty",
    "kfd_permission",
    "no_gpu_visible",
    "port_in_use",
    "vllm_too_old",
    "unsupported_architecture",
    "unknown_quantization",
    "quantization_unsupported",
    "disk_full",
    "shm_too_small",
    "hf_hub_unreachable",
    "tp_not_divisible",
    "jit_build_failed",
    "lscpu_missing",
    "unknown_argument",
    "rccl_error",
    "worker_died",
    "engine_core_init_failed",
)

_FAMILY_RULES = (
    *memory.RULES,
    *hub.RULES,
    *model_config.RULES,
    *images.RULES,
    *kernels.RULES,
    *graphs.RULES,
    *distributed.RULES,
    *host.RULES,
    *process.RULES,
    *signals.RULES,
    *fingerprint.RULES,
    *stacks.RULES,
)
REGISTRY = Registry(in_order(ORDER, _FAMILY_RULES))

FINDING_IDS: tuple[str, ...] = REGISTRY.ids  # every id a finding can have

__all__ = ["FINDING_IDS", "ORDER", "REGISTRY"]
