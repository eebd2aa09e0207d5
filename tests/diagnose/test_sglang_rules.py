"""SGLang's failures under the same finding ids as vLLM's, in SGLang's words: each rule with its
real log (tests/fixtures/logs/public, the calibration split) and a near miss that must not fire
it; the server named by the caller or read from the log."""

from __future__ import annotations

from instinct_serve.diagnose import DiagnoseContext, diagnose
from instinct_serve.diagnose.logline import split_message
from tests.diagnose.logs import real_log

SGLANG = DiagnoseContext(server="sglang")
KV_POOL = real_log("public/40_sglang_kv_pool_negative_deepseek_r1_dp8_mi300x.log")
CAPTURE = real_log("public/41_sglang_capture_invalidated_aiter_allreduce_hy3_mi300x.log")
NCCL = real_log("public/42_sglang_nccl_unhandled_system_error_init.log")
HIP_OOM = real_log("public/43_sglang_hip_oom_aiter_workspace_after_kv_pool_mi325x.log")
# SGLang's own line (model_runner.py raises it when the profiled KV pool is <= 0)
NOT_ENOUGH = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
# The first part of SGLang's capture exception as sgl-project/sglang#5285 published it (8x H20;
# the stored copy of the line stops after "95.00")
CAPTURE_OOM = (
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. "
    "GPU 7 has a total capacity of 95.00 GiB"
)


# --------------------------------------------------------------------------- the server


def test_sglang_log_prefix_is_taken_off_and_has_no_level() -> None:
    assert split_message("[2025-07-02 07:41:59 DP0 TP0] Load weight end.") == (
        "Load weight end.",
        None,
    )
    assert split_message("[22:30:32 TP0] Memory pool end. avail mem=22.83 GB") == (
        "Memory pool end. avail mem=22.83 GB",
        None,
    )
    # uvicorn under SGLang's prefix keeps its level; aiter's logger is not SGLang's
    assert split_message("[2026-01-12 02:47:09] INFO:     Started server process [49]")[1] == "INFO"
    assert split_message("[2025-12-18 06:00:39] WARNING core.py:622: x") == ("x", "WARNING")


def test_the_server_is_read_from_an_sglang_log_and_named_in_the_facts() -> None:
    assert diagnose(KV_POOL).facts["server"] == "sglang"
    assert "server" not in diagnose(HIP_OOM).facts  # a bare exception says nothing of it
    assert diagnose(HIP_OOM, SGLANG).facts["server"] == "sglang"


# --------------------------------------------------------------------------- KV pool


def test_a_negative_profiled_pool_is_no_room_for_the_kv_cache() -> None:
    diagnosis = diagnose(KV_POOL)
    finding = diagnosis.primary
    assert finding is not None and finding.id == "kv_cache_no_memory"
    assert finding.occurrences == 8  # one per DP rank
    assert "--mem-fraction-static" in finding.fix and "--gpu-memory-utilization" not in finding.fix
    assert diagnosis.facts["phase_reached"] == "profiling"


def test_sglangs_not_enough_memory_line_and_the_fraction_the_plan_set() -> None:
    finding = diagnose(NOT_ENOUGH).primary
    assert finding is not None and finding.id == "kv_cache_no_memory"
    assert finding.retry == {"add_args": ["--mem-fraction-static", "0.85"]}
    low = DiagnoseContext(server="sglang", args=("--mem-fraction-static", "0.2"))
    raised = diagnose(NOT_ENOUGH, low).primary
    assert raised is not None and "(--mem-fraction-static 0.2)" in raised.cause
    high = DiagnoseContext(server="sglang", args=("--mem-fraction-static", "0.95"))
    at_top = diagnose(NOT_ENOUGH, high).primary
    assert at_top is not None and at_top.retry is None  # no higher fraction to offer
    assert "more GPUs (--tp)" in at_top.fix


def test_near_miss_a_profiled_pool_that_fits_or_is_followed_by_the_pool() -> None:
    fits = (
        "[2025-07-02 07:41:59 TP0] max_total_tokens=131072 is larger than the profiled value "
        "50756. Use the profiled value instead.\n"
    )
    assert diagnose(fits).findings == ()
    # a non-positive profile the start-up went past (the pool was allocated after it)
    went_on = (
        "[2026-02-11 06:45:01] max_total_tokens=20480 is larger than the profiled value "
        "-89624. Use the profiled value instead.\n"
        "[2026-02-11 06:45:02] KV Cache is allocated. #tokens: 20480, K size: 1.2 GB, V size: "
        "1.2 GB\n"
    )
    assert diagnose(went_on).findings == ()


def test_vllms_kv_error_keeps_vllms_words() -> None:
    line = (
        "ERROR 01-30 03:18:12 [core.py:1] ValueError: No available memory for the cache "
        "blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    )
    finding = diagnose(line).primary
    assert finding is not None and finding.id == "kv_cache_no_memory"
    assert "--gpu-memory-utilization" in finding.fix
    assert "--mem-fraction-static" not in finding.fix


# --------------------------------------------------------------------------- graphs


def test_sglangs_capture_exception_is_a_failed_capture_with_sglangs_fix() -> None:
    diagnosis = diagnose(CAPTURE)
    finding = diagnosis.primary
    assert finding is not None and finding.id == "graph_capture_failed"
    assert finding.retry == {"add_args": ["--disable-cuda-graph"]}
    assert finding.alternatives == ({"set_env": {"SGLANG_USE_AITER_AR": "false"}},)
    assert "--enforce-eager" not in finding.fix
    assert diagnosis.facts["phase_reached"] == "capturing_graphs"


def test_near_miss_a_capture_that_ran_out_of_memory_is_the_memory_finding() -> None:
    finding = diagnose(CAPTURE_OOM).primary
    assert finding is not None and finding.id == "oom_graph_capture"
    assert "--cuda-graph-max-bs" in finding.fix and "--disable-cuda-graph" in finding.fix
    assert finding.retry == {"add_args": ["--cuda-graph-max-bs", "16"]}
    # without HIP's invalidation words the AITER all-reduce switch is not offered
    other = diagnose("Exception: Capture cuda graph failed: invalid argument\n").primary
    assert other is not None and other.id == "graph_capture_failed"
    assert other.alternatives == ()


def test_near_miss_the_capture_milestones_are_no_failure() -> None:
    log = (
        "[2025-03-08 12:29:21 TP0] Capture cuda graph begin. This can take up to several "
        "minutes.\n[2025-03-08 12:29:28 TP0] Capture cuda graph end. Time elapsed: 7.23 s. "
        "avail mem=0.53 GB. mem usage=0.93 GB.\n"
    )
    diagnosis = diagnose(log)
    assert diagnosis.findings == () and diagnosis.healthy
    assert diagnosis.facts["phase_reached"] == "capturing_graphs"


# --------------------------------------------------------------------------- memory, NCCL


def test_a_bare_hip_oom_of_an_sglang_launch_leads_with_the_static_fraction() -> None:
    finding = diagnose(HIP_OOM, SGLANG).primary
    assert finding is not None and finding.id == "out_of_memory"
    assert finding.fix.startswith("Lower --mem-fraction-static")
    # the same lines with no server named: vLLM's words
    vllm = diagnose(HIP_OOM).primary
    assert vllm is not None and vllm.id == "out_of_memory"
    assert "--mem-fraction-static" not in vllm.fix


def test_nccl_init_failure_of_sglang_names_its_tp_flag() -> None:
    finding = diagnose(NCCL).primary
    assert finding is not None and finding.id == "rccl_error"
    assert "--tp 1" in finding.fix and "--tensor-parallel-size" not in finding.fix
    assert "ncclCommInitRank" in finding.cause


def test_near_miss_ncclcomminitrank_progress_is_no_failure() -> None:
    line = (
        "node17-2:36748:36748 [0] NCCL INFO ncclCommInitRank comm 0xaa2f160 rank 0 nranks 8 "
        "cudaDev 0 nvmlDev 0 busId 8000 commId 0x551d06754c6bacf2 - Init START\n"
    )
    assert diagnose(line).findings == ()


# --------------------------------------------------------------------------- crashes, search


def test_a_crash_of_an_sglang_launch_offers_sglangs_switches() -> None:
    crash = "Fatal Python error: Segmentation fault\n"
    finding = diagnose(crash, SGLANG).primary
    assert finding is not None and finding.id == "gpu_kernel_crash"
    assert finding.retry == {"add_args": ["--disable-cuda-graph"]}
    assert "VLLM_" not in finding.fix and "--enforce-eager" not in finding.fix
    assert "--repo sgl-project/sglang" in finding.commands[0]
    vllm = diagnose(crash).primary  # no server named, none in the log: vLLM's switches
    assert vllm is not None and "--enforce-eager" in vllm.fix


def test_an_unmatched_sglang_log_searches_sglangs_tracker() -> None:
    log = "[2025-03-10 10:00:00 TP0] Load weight begin. avail mem=191.33 GB\nKeyError: lm_head\n"
    diagnosis = diagnose(log)
    assert diagnosis.findings == ()
    assert diagnosis.commands == (
        "gh search issues --repo sgl-project/sglang -- 'KeyError: lm_head'",
    )


def test_the_mcp_tool_takes_the_server_as_the_cli_does() -> None:
    from instinct_serve.agents.core import diagnose as mcp_diagnose
    from instinct_serve.agents.inputs import DiagnoseInput

    doc = mcp_diagnose(DiagnoseInput(log_text=HIP_OOM, server="sglang")).doc
    assert doc["primary"] == "out_of_memory"
    assert doc["findings"][0]["fix"].startswith("Lower --mem-fraction-static")
