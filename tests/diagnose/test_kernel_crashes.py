"""AMD kernel crashes told apart by their own evidence, each with the fix that addresses it.

The real logs are the public corpus (tests/fixtures/logs/public); the near misses change one
thing of a real log (the kernel's frame gone, the crash after capture ended, a frame of
another library) to show that a rule keys on its signature, not on a keyword nearby.
"""

from __future__ import annotations

import pytest

from instinct_serve.diagnose import FINDING_IDS, DiagnoseContext, Finding, diagnose
from instinct_serve.diagnose.rules.crash import KERNEL_SIGNATURES
from tests.diagnose.logs import real_log

CRASH = "!!!!!!! Segfault encountered !!!!!!!"
V1_KV = (
    "(EngineCore_DP0 pid=7) INFO 05-25 14:42:35 [kv_cache_utils.py:849] GPU KV cache size: "
    "305,808 tokens"
)
OOM = (
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 191.98 GiB of which 1.00 GiB is free."
)


def public(name: str) -> str:
    return real_log(f"public/{name}")


def primary(text: str, ctx: DiagnoseContext | None = None) -> Finding:
    finding = diagnose(text, ctx).primary
    assert finding is not None, "no finding"
    return finding


SAMPLER = "01_aiter_sampler_segfault_mi300x_warmup.log"


def test_aiter_sampler_crash_is_the_sampler_not_fp4bmm_even_on_gfx942() -> None:
    # The case: a gfx942 crash once read as the FP4BMM default; the frame names the
    # sampler, whose switch is the fix (ROCm/aiter#4830, vllm-project/vllm#43331).
    for ctx in (None, DiagnoseContext(gfx="gfx942")):
        diagnosis = diagnose(public(SAMPLER), ctx)
        assert diagnosis.ids == ["aiter_sampler_segfault"]
        finding = diagnosis.findings[0]
        assert finding.retry == {"set_env": {"VLLM_ROCM_USE_AITER_SAMPLER": "0"}}
        assert finding.auto_retry and finding.line_no == 1
        assert "--enforce-eager does not avoid it" in finding.cause


def test_a_flashinfer_sampler_frame_is_not_the_aiter_sampler() -> None:
    # Same function name in flashinfer (CUDA), without AITER's JIT hash suffix.
    frame = '  File "<unknown>", line 0, in flashinfer::sampling::top_k_top_p_sampling_from_probs'
    text = f"{CRASH}\n{frame}\n"
    assert primary(text).id == "gpu_kernel_crash"


def test_a_sampler_frame_without_a_crash_is_nothing() -> None:
    text = public(SAMPLER).replace(CRASH, "INFO 08-18 01:02:03 [sampler.py:1] warm-up done")
    assert diagnose(text).findings == ()


def test_aiter_fmoe_fault_offers_the_moe_switch_then_the_batch_size() -> None:
    finding = primary(public("03_aiter_fmoe_memory_access_fault_mi355x_minimax_m2.5.log"))
    assert finding.id == "aiter_moe_kernel_fault" and finding.auto_retry
    assert finding.retry == {"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}}
    assert finding.alternatives == ({"add_args": ["--max-num-batched-tokens", "4096"]},)


def test_an_fmoe_kernel_loaded_long_before_the_fault_is_no_evidence() -> None:
    lines = public("03_aiter_fmoe_memory_access_fault_mi355x_minimax_m2.5.log").splitlines()
    fault = next(i for i, line in enumerate(lines) if line.startswith("Memory access fault"))
    filler = [
        f"(Worker_TP{i} pid=9{i}) INFO 05-25 14:43:0{i} [gpu_worker.py:1] step" for i in range(7)
    ]
    text = "\n".join(lines[:fault] + filler + lines[fault:])
    assert primary(text, DiagnoseContext(gfx="gfx950")).id == "gpu_kernel_crash"


def test_moe_without_a_gemm_instance_turns_aiter_moe_off() -> None:
    finding = primary(public("13_aiter_moe_ck_stage2_no_gemm_instance_hy3_fp8.log"))
    assert finding.id == "aiter_moe_no_kernel_for_shape" and finding.auto_retry
    assert finding.retry == {"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}}
    # the same CK words about a dense GEMM are not the MoE path
    dense = "RuntimeError: gemm_a8w8 ... device_gemm does not support this GEMM problem"
    assert diagnose(dense).findings == ()


def test_ck_tile_rmsnorm_crash_turns_aiter_rmsnorm_off_or_aiter_off_a_consumer_gpu() -> None:
    text = public("05_aiter_rmsnorm_ck_tile_segfault_gfx1201.log")
    instinct = primary(text, DiagnoseContext(gfx="gfx942"))
    assert instinct.id == "aiter_rmsnorm_unsupported_arch"
    assert instinct.retry == {"set_env": {"VLLM_ROCM_USE_AITER_RMSNORM": "0"}}
    radeon = primary(text, DiagnoseContext(gfx="gfx1201"))
    assert radeon.retry == {"set_env": {"VLLM_ROCM_USE_AITER": "0"}}
    assert radeon.alternatives == ({"set_env": {"VLLM_ROCM_USE_AITER_RMSNORM": "0"}},)


def test_aiter_mla_head_count_gives_the_tp_that_fits_and_the_mla_switch() -> None:
    text = public("08_aiter_mla_nhead32_tp4_deepseek_r1.log")
    ctx = DiagnoseContext(args=["--tensor-parallel-size", "4"], gpu_count=8)
    finding = primary(text, ctx)
    assert finding.id == "aiter_mla_unsupported_heads" and finding.auto_retry
    assert finding.retry == {"set_env": {"VLLM_ROCM_USE_AITER_MLA": "0"}}
    assert finding.alternatives == ({"tensor_parallel_size": 8},)  # 128 heads / 8 = 16
    assert finding.details["heads_per_gpu"] == 32 and "--tensor-parallel-size 8" in finding.fix
    # The V1 wording (vllm/v1/attention/backends/mla/rocm_aiter_mla.py), three lines.
    v1 = "\n".join(
        [
            "AssertionError: Aiter MLA only supports 16 or 128 number of heads.",
            "Provided 32 number of heads.",
            "Try adjusting tensor_parallel_size value.",
        ]
    )
    assert primary(v1).details["heads_per_gpu"] == 32


def test_an_nhead_assertion_outside_mla_is_not_aiter_mla() -> None:
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/app/other/attention.py", line 9, in forward',
            "    assert nhead in table",
            "AssertionError: nhead=32 not supported",
        ]
    )
    assert all(f.id != "aiter_mla_unsupported_heads" for f in diagnose(text).findings)


@pytest.mark.parametrize(
    "name",
    [
        "06_rocm_attn_illegal_address_full_graph_capture_llama3.2-1b.log",
        "07_triton_attn_full_graph_capture_memory_fault_step3.5_tp4.log",
    ],
)
def test_a_fault_in_full_graph_capture_retries_piecewise_not_eager(name: str) -> None:
    finding = primary(public(name))
    assert finding.id == "attn_full_graph_capture_fault" and finding.auto_retry
    assert finding.retry == {"add_args": ["--compilation-config", '{"cudagraph_mode":"PIECEWISE"}']}
    assert finding.alternatives == ({"add_args": ["--enforce-eager"]},)
    # the plan's own compilation config is kept, cudagraph_mode replaced
    ctx = DiagnoseContext(args=["--compilation-config", '{"level": 3, "cudagraph_mode": "FULL"}'])
    merged = primary(public(name), ctx).retry
    assert merged == {
        "add_args": ["--compilation-config", '{"level":3,"cudagraph_mode":"PIECEWISE"}']
    }


def test_a_fault_after_capture_ended_is_not_a_full_capture_fault() -> None:
    lines = public("07_triton_attn_full_graph_capture_memory_fault_step3.5_tp4.log").splitlines()
    fault = next(i for i, line in enumerate(lines) if line.startswith("Memory access fault"))
    done = (
        "(Worker_TP0 pid=3098) INFO 02-24 02:39:40 [gpu_model_runner.py:1] Graph capturing "
        "finished in 6 secs, took 0.50 GiB"
    )
    text = "\n".join([*lines[:fault], done, *lines[fault:]])
    assert primary(text).id == "gpu_kernel_crash"
    piecewise = (
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  10%|█ | 5/51 "
        "[00:00<00:05,  9.00it/s]"
    )
    text = "\n".join([*lines[:fault], piecewise, *lines[fault:]])
    assert primary(text).id == "gpu_kernel_crash"


@pytest.mark.parametrize(
    "name",
    [
        "09_ray_multinode_nccl_segfault_in_capture_model_v0.8.4.log",
        "10_ray_tp16_kv_sized_then_nccl_segfault_v0.8.4.log",
    ],
)
def test_nccl_proxy_segfault_is_not_a_model_kernel(name: str) -> None:
    diagnosis = diagnose(public(name))
    assert diagnosis.ids == ["nccl_proxy_segfault"]
    assert diagnosis.facts["phase_reached"] == "capturing_graphs"
    assert diagnosis.findings[0].retry is None  # version unknown: no V0 to fall back to
    old = primary(public(name), DiagnoseContext(vllm_version="0.8.4"))
    assert old.retry == {"set_env": {"VLLM_USE_V1": "0"}} and not old.auto_retry


def test_a_crash_in_graph_replay_is_retried_eager() -> None:
    # vllm-project/vllm#35293 (GLM-5-FP8, H200): the stack as published, its first frames
    frames = [
        '  File "<unknown>", line 0, in cuGraphLaunch',
        '  File "<unknown>", line 0, in cudaGraphLaunch',
        '  File "<unknown>", line 0, in at::cuda::CUDAGraph::replay()',
    ]
    diagnosis = diagnose("\n".join([CRASH, *frames]), DiagnoseContext(gfx="gfx942"))
    assert diagnosis.ids == ["graph_replay_crash"]  # not the gfx942 FP4BMM guess
    finding = diagnosis.findings[0]
    assert finding.retry == {"add_args": ["--enforce-eager"]} and finding.auto_retry
    # the same frames quoted before the crash line (another process's stack) are not its own
    assert primary("\n".join([*frames, CRASH])).id == "gpu_kernel_crash"


def test_dsv4_sparse_mla_warmup_crash_names_the_fixing_image() -> None:
    finding = primary(public("04_dsv4_sparse_mla_warmup_segfault_rocm.log"))
    assert finding.id == "dsv4_sparse_mla_warmup_segfault"
    assert "57328" in finding.fix and finding.retry is None


def test_graph_capture_failure_without_its_exception_is_reported_not_retried() -> None:
    finding = primary(public("11_mi50_pp2_tp4_kv_sized_then_full_graph_capture_fails.log"))
    assert finding.id == "graph_capture_failed" and not finding.auto_retry
    assert finding.details["full_graphs"] is True
    assert finding.retry == {"add_args": ["--compilation-config", '{"cudagraph_mode":"PIECEWISE"}']}


def test_split_hsa_line_is_still_a_kernel_crash() -> None:
    # The ROCr queue-abort line carries the crash even when the terminal cut the HSA status.
    finding = primary(public("14_hsa_memory_aperture_violation_mi300x_v1_runtime.log"))
    assert finding.id == "gpu_kernel_crash" and finding.line_no == 1


def test_gfx942_guess_without_a_named_kernel_is_not_retried_by_itself() -> None:
    finding = primary(CRASH, DiagnoseContext(gfx="gfx942"))
    assert finding.id == "fp4bmm_gfx942" and not finding.auto_retry
    assert finding.details["evidence"] == "gfx942 only"
    explicit = primary("RuntimeError: MXFP4 quantization is not supported on gfx942")
    assert explicit.auto_retry  # the FP4 line itself is evidence


# --------------------------------------------------------------------------- the phase decides


def test_an_oom_right_after_v1_sized_its_kv_cache_is_a_graph_capture_oom() -> None:
    # V1 captures graphs next, printing nothing first: the last line seen says profiling.
    assert primary("\n".join([V1_KV, OOM])).id == "oom_graph_capture"
    eager = "INFO 05-25 14:42:30 [core.py:1] config: enforce_eager=True, ..."
    assert primary("\n".join([eager, V1_KV, OOM])).id == "oom_profiling"
    v0 = "INFO 05-25 14:42:35 [executor_base.py:1] # GPU blocks: 1478, # CPU blocks: 2048"
    assert primary("\n".join([v0, OOM])).id == "oom_profiling"


def test_every_kernel_signature_proves_a_registered_finding() -> None:
    assert {sig.finding for sig in KERNEL_SIGNATURES} <= set(FINDING_IDS)
    assert all(sig.where and set(sig.where) <= {"stack", "before"} for sig in KERNEL_SIGNATURES)
