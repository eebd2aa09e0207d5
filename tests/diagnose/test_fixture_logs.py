"""``diagnose`` on every real captured log: the expected primary finding, and its evidence."""

from __future__ import annotations

import pytest

from instinct_serve.diagnose import DiagnoseContext, diagnose
from tests.diagnose.logs import blocks, log_names, real_lines, real_log

EXPECTED_PRIMARY: dict[str, str | None] = {
    "01_engine_core_init_failed_flashinfer_jit_cause.log": "jit_build_failed",
    "02_oom_during_cuda_graph_capture.log": "oom_graph_capture",
    "03_gated_repo_401.log": "gated_repo",
    "04_hip_invalid_device_function_vllm_serve.log": "no_kernel_image",
    "06_libtorch_cuda_so_cannot_open_on_rocm_torch.log": "libtorch_cuda_import",
    "07_model_architecture_not_supported.log": "unsupported_architecture",
    "08b_max_model_len_exceeds_kv_cache_V1.log": "max_model_len_exceeds_kv",
    "09_healthy_startup_MI300X_Llama-3.1-8B-Instruct_fp16_gmu0.9_vllm0.9.2dev_V0.log": None,
    # 09c is four excerpts; block (D) is a failed start (checked separately below).
    "09c_healthy_startup_V1_excerpts.log": "engine_core_init_failed",
    # 09d: memory-figure excerpts only (fit accuracy corpus); block B's later failure is cut.
    "09d_startup_figures_excerpts.log": None,
}


def test_every_fixture_log_has_an_expectation() -> None:
    assert sorted(EXPECTED_PRIMARY) == log_names()


@pytest.mark.parametrize("name", sorted(EXPECTED_PRIMARY))
def test_primary_finding_of_each_log(name: str) -> None:
    diagnosis = diagnose(real_log(name))
    expected = EXPECTED_PRIMARY[name]
    if expected is None:
        assert diagnosis.findings == ()
        assert not diagnosis.matched
        return
    assert diagnosis.primary is not None
    assert diagnosis.primary.id == expected
    # The evidence is a real line of that log, at the line number reported.
    lines = real_log(name).split("\n")
    assert diagnosis.primary.line_no is not None
    assert lines[diagnosis.primary.line_no - 1].rstrip() == diagnosis.primary.line


def test_log01_root_cause_outranks_the_engine_core_wrapper() -> None:
    diagnosis = diagnose(real_log("01_engine_core_init_failed_flashinfer_jit_cause.log"))
    assert diagnosis.ids == ["jit_build_failed", "engine_core_init_failed"]
    root, wrapper = diagnosis.findings
    assert "ninja" in (root.line or "") and "flashinfer" in (root.line or "")
    assert root.details["component"] == "flashinfer"
    # The failing build is flashinfer's sampler: fall back to PyTorch's sampler.
    assert root.retry == {"set_env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"}}
    assert wrapper.generic and not root.generic
    assert "RuntimeError: Engine core initialization failed" in (wrapper.line or "")
    # The quoted source line `raise RuntimeError("Engine core initialization failed. "` is
    # code from the traceback, not the error: the wrapper is the exception line itself.
    assert "raise RuntimeError" not in (wrapper.line or "")


def test_log02_graph_capture_oom_is_retried_with_enforce_eager() -> None:
    finding = diagnose(real_log("02_oom_during_cuda_graph_capture.log")).primary
    assert finding is not None
    assert finding.line and finding.line.endswith("RuntimeError: CUDA error: out of memory")
    assert finding.retry == {"add_args": ["--enforce-eager"]}
    assert finding.auto_retry


def test_log02_alternative_lowers_the_utilisation_the_plan_used() -> None:
    ctx = DiagnoseContext(args=("--gpu-memory-utilization", "0.95"))
    finding = diagnose(real_log("02_oom_during_cuda_graph_capture.log"), ctx).primary
    assert finding is not None
    assert finding.alternatives == ({"gpu_memory_utilization": 0.9},)


@pytest.mark.parametrize(
    ("block", "variant", "repo"),
    [
        ("B", "token_missing", "meta-llama/Llama-3.2-1B-Instruct"),
        ("C", "token_missing", "meta-llama/Llama-2-7b"),
        ("D", "license_not_accepted", "meta-llama/Meta-Llama-3-8B-Instruct"),
    ],
)
def test_log03_gated_repo_tells_token_missing_from_licence_not_accepted(
    block: str, variant: str, repo: str
) -> None:
    finding = diagnose(blocks("03_gated_repo_401.log")[block]).primary
    assert finding is not None and finding.id == "gated_repo"
    assert finding.details == {"variant": variant, "repo": repo}
    assert f"https://huggingface.co/{repo}" in finding.fix


def test_log03_whole_file_takes_the_first_gated_error() -> None:
    finding = diagnose(real_log("03_gated_repo_401.log")).primary
    assert finding is not None
    assert finding.line == "OSError: You are trying to access a gated repo."
    assert finding.details["variant"] == "token_missing"
    assert finding.occurrences >= 3


def test_log03_token_set_but_rejected_says_so() -> None:
    log = blocks("03_gated_repo_401.log")["B"]
    finding = diagnose(log, DiagnoseContext(hf_token_set=True)).primary
    assert finding is not None
    assert "although HF_TOKEN was set" in finding.cause


def test_log04_names_the_rocm_image_and_the_consumer_gpu() -> None:
    finding = diagnose(
        real_log("04_hip_invalid_device_function_vllm_serve.log"), DiagnoseContext(gfx="gfx1100")
    ).primary
    assert finding is not None
    assert finding.line == "RuntimeError: HIP error: invalid device function"
    assert "vllm/vllm-openai-rocm" in finding.fix
    assert "PYTORCH_ROCM_ARCH=gfx1100" in finding.fix


def test_log06_counts_every_libtorch_cuda_line() -> None:
    finding = diagnose(real_log("06_libtorch_cuda_so_cannot_open_on_rocm_torch.log")).primary
    assert finding is not None
    assert finding.occurrences == 3
    assert finding.details["library"] == "libtorch_cuda.so"
    assert finding.retry is None  # no tvm_ffi frame: only the image is wrong


def test_log07_names_the_architecture() -> None:
    finding = diagnose(real_log("07_model_architecture_not_supported.log")).primary
    assert finding is not None
    assert finding.details["architectures"] == "'Qwen3ForCausalLM'"


def test_log07_with_a_known_too_old_image_says_vllm_too_old_first() -> None:
    ctx = DiagnoseContext(vllm_version="0.8.5", min_vllm_version="0.9.0")
    diagnosis = diagnose(real_log("07_model_architecture_not_supported.log"), ctx)
    assert diagnosis.ids == ["vllm_too_old", "unsupported_architecture"]
    assert "0.9.0" in diagnosis.findings[0].cause


@pytest.mark.parametrize(("block", "fits"), [("A", 50512), ("B", 34736)])
def test_log08b_uses_the_length_the_log_says_fits(block: str, fits: int) -> None:
    finding = diagnose(blocks("08b_max_model_len_exceeds_kv_cache_V1.log")[block]).primary
    assert finding is not None and finding.id == "max_model_len_exceeds_kv"
    assert finding.retry == {"max_model_len": fits}
    assert finding.auto_retry
    assert finding.details["max_model_len"] == 262144
    assert f"--max-model-len {fits}" in finding.fix


def test_log08b_old_wording_estimates_a_length_proportionally() -> None:
    finding = diagnose(blocks("08b_max_model_len_exceeds_kv_cache_V1.log")["C"]).primary
    assert finding is not None
    assert finding.details["approximate"] is True
    fits = finding.details["max_fitting_len"]
    # 1048576 tokens need 24.00 GiB, 9.97 GiB are available: at most 435,589 tokens fit.
    assert 0.9 * 1048576 * 9.97 / 24.00 < fits < 1048576 * 9.97 / 24.00
    assert fits % 1024 == 0
    assert "about the largest length" in finding.fix


def test_log09_healthy_startup_has_no_finding_and_keeps_the_tail() -> None:
    name = "09_healthy_startup_MI300X_Llama-3.1-8B-Instruct_fp16_gmu0.9_vllm0.9.2dev_V0.log"
    diagnosis = diagnose(real_log(name))
    assert not diagnosis.matched and diagnosis.primary is None
    assert diagnosis.tail[-1] == real_lines(name)[-1].strip()
    assert len(diagnosis.tail) == 40
    assert diagnosis.facts["vllm_version"] == "0.9.2.dev364+gb432b7a28"
    assert diagnosis.facts["phase_reached"] == "starting_server"
    doc = diagnosis.to_dict()
    assert doc["matched"] is False and doc["healthy"] is True
    assert doc["message"] == "no failure in this log: the start-up reached starting server"


@pytest.mark.parametrize("block", ["A", "B", "C"])
def test_log09c_healthy_excerpts_have_no_finding(block: str) -> None:
    assert diagnose(blocks("09c_healthy_startup_V1_excerpts.log")[block]).findings == ()


def test_log09c_failed_excerpt_is_only_the_generic_wrapper() -> None:
    diagnosis = diagnose(blocks("09c_healthy_startup_V1_excerpts.log")["D"])
    assert diagnosis.ids == ["engine_core_init_failed"]
    finding = diagnosis.findings[0]
    assert finding.generic
    assert finding.details["last_phase"] == "profiling"
    assert "look" not in finding.id and "earlier" in finding.cause
    assert len(finding.details["common_causes"]) >= 4
