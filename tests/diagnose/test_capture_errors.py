"""HIP's stream-capture errors (``diagnose.capture_errors``): a capture that HIP refused is a
failed graph capture in the capture phase, with the fix in the words of the server that ran.

The real logs are the calibration split of the public corpus (tests/fixtures/logs/public:
``18`` vllm-project/vllm#41622, ``19`` ROCm/hip#3876); the other lines are HIP's own messages
(ROCm/clr hip_error.cpp) and the hipBLASLt line ROCm/ATOM#1506 published. The near misses keep
the words and change what makes them evidence (the level, the error itself).
"""

from __future__ import annotations

import pytest

from instinct_serve.diagnose import DiagnoseContext, Finding, diagnose
from instinct_serve.diagnose.capture_errors import CAPTURE_ERRORS, CaptureError, capture_error_in
from tests.diagnose.logs import real_log

LORA = real_log("public/18_rocm_watchdog_hip_captured_event_lora_tp8_llama3.3-70b.log")
WATCHDOG = real_log("public/19_rocm_watchdog_stream_capture_unsupported_rocm7_vllm.log")
VLLM = DiagnoseContext(server="vllm")
SGLANG = DiagnoseContext(server="sglang")
LLAMA = "meta-llama/Llama-3.3-70B-Instruct"
# ROCm/ATOM#1506 (DeepSeek-V4, gfx950, HIP 7.2.53211): hipBLASLt's own wording of the error
HIPBLASLT = (
    "Hip error: 'operation not permitted when stream is capturing'(900) at hipblaslt.cpp:147"
)


def primary(text: str, ctx: DiagnoseContext) -> Finding:
    finding = diagnose(text, ctx).primary
    assert finding is not None, "no finding"
    return finding


@pytest.mark.parametrize("error", CAPTURE_ERRORS, ids=lambda e: e.name)
def test_each_capture_error_is_read_by_its_message_and_by_its_name(error: CaptureError) -> None:
    name, message = error.name, error.message
    assert capture_error_in(f"RuntimeError: HIP error: {message}") == error
    assert capture_error_in(f"Search for `{name}' in https://rocm.docs.amd.com/ for more") == error
    cuda = name.replace("hipError", "cudaError")  # PyTorch's CUDA spelling of the same error
    assert capture_error_in(f"Search for `{cuda}' in https://docs.nvidia.com/") == error


def test_near_miss_capture_words_that_are_no_hip_error() -> None:
    assert capture_error_in("Capturing CUDA graphs (decode, FULL): 100%|##| 51/51") is None
    assert capture_error_in("HIP error: an illegal memory access was encountered") is None
    assert capture_error_in("hipErrorStreamCaptureSomethingNew") is None  # not HIP's table


def test_the_watchdogs_capture_error_on_rocm_is_a_failed_capture() -> None:
    diagnosis = diagnose(WATCHDOG, VLLM)
    finding = diagnosis.primary
    assert finding is not None and finding.id == "graph_capture_failed"
    assert finding.line_no == 1  # the watchdog's line, not the "Search for" one
    assert finding.details == {
        "full_graphs": False,
        "hip_error": "hipErrorStreamCaptureUnsupported",
        "watchdog": True,
    }
    assert finding.retry == {"add_args": ["--enforce-eager"]} and finding.auto_retry
    assert "ROCm 7.2.1" in finding.fix and "AMD_LOG_LEVEL=4" in finding.fix
    assert "--disable-cuda-graph" not in finding.fix
    assert "pytorch/pytorch#177309" in finding.cause
    assert diagnosis.facts["phase_reached"] == "capturing_graphs"  # from the error's own words


def test_the_same_error_of_an_sglang_launch_names_sglangs_flag() -> None:
    diagnosis = diagnose(WATCHDOG, SGLANG)
    finding = diagnosis.primary
    assert finding is not None and finding.id == "graph_capture_failed"
    assert diagnosis.facts["phase_reached"] == "capturing_graphs"  # SGLang's tracker reads it
    assert finding.retry == {"add_args": ["--disable-cuda-graph"]} and finding.auto_retry
    assert "--disable-cuda-graph" in finding.fix and "--enforce-eager" not in finding.fix
    assert "ROCm 7.2.1" in finding.fix
    assert finding.details == {"hip_error": "hipErrorStreamCaptureUnsupported", "watchdog": True}


def test_the_abort_that_follows_is_the_same_failure_not_a_kernel_crash() -> None:
    log = WATCHDOG + "\nFatal Python error: Aborted\n"
    ids = [f.id for f in diagnose(log, SGLANG).findings]
    assert ids[0] == "graph_capture_failed" and "gpu_kernel_crash" in ids[1:]


def test_lora_capture_crash_cites_its_known_bad_row_where_lora_is_on() -> None:
    lora = DiagnoseContext(server="vllm", model=LLAMA, args=("--enable-lora", "-tp", "8"))
    ids = [f.id for f in diagnose(LORA, lora).findings]
    assert ids[:2] == ["known_bad_stack", "graph_capture_failed"]
    # without LoRA the row does not apply: HIP's error is the cause
    plain = DiagnoseContext(server="vllm", model=LLAMA, args=("-tp", "8"))
    finding = primary(LORA, plain)
    assert finding.id == "graph_capture_failed"
    assert finding.details["hip_error"] == "hipErrorCapturedEvent"
    assert finding.details["watchdog"] is True


def test_a_library_handle_refused_during_capture_is_not_the_watchdog() -> None:
    diagnosis = diagnose(HIPBLASLT + "\n", VLLM)
    finding = diagnosis.primary
    assert finding is not None and finding.id == "graph_capture_failed"
    assert finding.details["watchdog"] is False
    assert "hipBLASLt" in finding.cause and "ROCm 7.2.1" not in finding.fix
    assert diagnosis.facts["phase_reached"] == "capturing_graphs"


def test_near_miss_a_warning_that_quotes_the_error_is_no_finding() -> None:
    line = (
        "(EngineCore_DP0 pid=7) WARNING 05-04 03:41:42 [utils.py:267] retrying: HIP error: "
        "operation not permitted when stream is capturing"
    )
    assert diagnose(line + "\n", VLLM).findings == ()
