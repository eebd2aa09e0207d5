"""The tool's log readers against the REAL vLLM 0.32 logs captured in ``real-vllm-cpu/``:
``instinct diagnose --log FILE --json`` must name the right cause for each real failure, and
the start-up phase tracker must follow the real lines. Fast (captured files, no engine); the
live reproductions are in the ``realvllm`` tier (test_failures_real.py).

What these logs taught the tool is recorded in tests/realvllm/TODO-tool-fixes.md.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from instinct_serve.diagnose.phases import PhaseTracker, track
from tests.realvllm import captured
from tests.serve.conftest import run_cli


def diagnose(name: str) -> dict[str, object]:
    run = run_cli(["diagnose", "--log", str(captured.path(name)), "--json"], timeout=60)
    assert run.returncode in (0, 1), run.explain()
    doc: dict[str, object] = json.loads(run.stdout)
    return doc


# (file, the diagnosis it must get) for every captured real failure
FAILURES = [
    ("10_max_model_len_exceeds_model_context.log", "max_model_len_exceeds_model"),
    ("11_kv_cache_space_zero.log", "kv_cache_no_memory"),
    ("12_kv_cache_too_small_for_max_model_len.log", "max_model_len_exceeds_kv"),
    ("13_unknown_architecture.log", "unsupported_architecture"),
    ("14_missing_model_directory.log", "repo_not_found"),
    ("15_port_already_in_use.log", "port_in_use"),
    ("16_compiled_without_cxx_compiler.log", "jit_build_failed"),
    ("17_docker_default_shm_64m_too_small.log", "shm_too_small"),
    ("18_pp2_eager_first_request_kills_engine.log", "pp_rank_without_warmup"),
    ("20_eager_logprobs_without_cxx_compiler.log", "jit_build_failed"),
]


@pytest.mark.parametrize(("name", "expected"), FAILURES)
def test_each_real_failure_gets_its_diagnosis(name: str, expected: str) -> None:
    doc = diagnose(name)
    assert doc["matched"] is True and doc["primary"] == expected, (doc["primary"], doc["findings"])


def _finding(name: str, finding_id: str) -> dict[str, Any]:
    doc = diagnose(name)
    findings: list[dict[str, Any]] = doc["findings"]  # type: ignore[assignment]
    return next(f for f in findings if f["id"] == finding_id)


def test_a_missing_model_directory_says_the_path_does_not_exist() -> None:
    finding = _finding("14_missing_model_directory.log", "repo_not_found")
    assert finding["title"] == "Model directory not found"
    assert finding["details"]["variant"] == "missing_path"
    assert finding["details"]["path"].endswith("/no-such-model-dir")
    assert "HFValidationError" in finding["line"] and finding["retry"] is None


def test_no_cxx_compiler_is_fixed_by_eager_mode() -> None:
    finding = _finding("16_compiled_without_cxx_compiler.log", "jit_build_failed")
    assert finding["details"]["component"] == "torch.compile (inductor)"
    assert "InvalidCxxCompiler: No working C++ compiler found" in finding["line"]
    assert finding["retry"] == {
        "add_args": ["--enforce-eager"],
        "set_env": {"TORCHDYNAMO_DISABLE": "1"},
    }
    assert finding["auto_retry"] and "g++" in finding["fix"]


def test_an_eager_engine_without_compiler_dies_on_logprobs_and_gets_no_compilation_at_all() -> None:
    """Eager mode alone is no fix: the first logprobs request compiles the sampler's ranks
    and kills the engine (real-vllm-cpu/20); the retry turns torch.compile off as well."""
    finding = _finding("20_eager_logprobs_without_cxx_compiler.log", "jit_build_failed")
    assert "enforce_eager=True" in captured.text("20_eager_logprobs_without_cxx_compiler.log")
    assert finding["retry"]["set_env"] == {"TORCHDYNAMO_DISABLE": "1"}
    assert "first request that asks for logprobs" in finding["cause"]


def test_a_pipeline_rank_without_warm_up_names_the_compiled_mode_that_fixes_it() -> None:
    """Eager + PP 2 on the CPU build: healthy, then the first request kills the engine (rank
    1's assertion, rank 0's KeyError). The finding is the assertion, not the KeyError or the
    API server's EngineDeadError, and its fix is the compiled mode without a compiler."""
    finding = _finding("18_pp2_eager_first_request_kills_engine.log", "pp_rank_without_warmup")
    assert "assert self.intermediate_tensors is not None" in finding["line"]
    assert "Worker_PP1" in finding["line"]
    assert '--compilation-config \'{"mode":2,"backend":"eager"}\'' in finding["fix"]
    assert "--enforce-eager" in finding["fix"] and finding["retry"] is None


def test_the_shm_finding_carries_the_real_figures() -> None:
    finding = _finding("17_docker_default_shm_64m_too_small.log", "shm_too_small")
    assert finding["details"] == {"required_mib": 160.0, "free_mib": 64.0}
    assert "--ipc=host" in finding["fix"]


def test_no_kv_memory_on_the_cpu_backend_names_the_cpu_kv_space() -> None:
    """vLLM's own message speaks of gpu_memory_utilization "despite its name"; the CPU
    backend's KV cache is VLLM_CPU_KVCACHE_SPACE GiB of RAM (0 in this run)."""
    finding = _finding("11_kv_cache_space_zero.log", "kv_cache_no_memory")
    assert finding["details"] == {"backend": "cpu", "kv_cache_space_gib": 0.0}
    assert finding["retry"] == {"set_env": {"VLLM_CPU_KVCACHE_SPACE": "1"}}
    assert "VLLM_CPU_KVCACHE_SPACE" in finding["fix"]
    assert "Raise --gpu-memory-utilization" not in finding["fix"]


def test_the_max_model_len_finding_carries_the_models_real_limit() -> None:
    doc = diagnose("10_max_model_len_exceeds_model_context.log")
    finding = doc["findings"][0]  # type: ignore[index]
    assert finding["retry"] == {"max_model_len": 8192} and finding["auto_retry"] is True


@pytest.mark.parametrize(
    "name",
    [
        captured.EAGER_LOG,
        captured.COMPILED_COLD_LOG,
        captured.COMPILED_WARM_LOG,
        "19_pp2_compiled_eager_backend_answers.log",
    ],
)
def test_healthy_real_logs_have_no_finding(name: str) -> None:
    doc = diagnose(name)
    assert doc["matched"] is False and doc["findings"] == []


def _startup(name: str) -> list[str]:
    lines = captured.text(name).splitlines()
    end = next(i for i, s in enumerate(lines) if "Application startup complete" in s)
    return lines[: end + 1]


def test_the_real_eager_start_up_is_followed_to_ready() -> None:
    events = track(_startup(captured.EAGER_LOG))
    phases = list(dict.fromkeys(e.phase for e in events))
    assert phases[0] == "starting" and phases[-1] == "ready"
    for phase in ("loading_weights", "starting_server"):
        assert phase in phases
    assert "failed" not in phases
    figures = events[-1].figures
    assert figures["vllm_version"] == "0.32.0" and figures["max_model_len"] == 2048
    assert figures["engine"] == "V1" and figures["weights_load_s"] > 0
    assert figures["init_engine_s"] > 0


def test_the_real_cpu_kv_cache_line_is_read() -> None:
    events = track(_startup(captured.EAGER_LOG))
    assert "profiling" in [e.phase for e in events]
    assert events[-1].figures["kv_cache_tokens"] == 46592
    assert events[-1].figures["max_concurrency"] == 22.75


def test_the_real_server_address_is_read() -> None:
    events = track(_startup(captured.EAGER_LOG))
    assert events[-1].figures["api_url"].startswith("http://127.0.0.1:")


def test_the_real_compilation_is_a_compiling_phase() -> None:
    events = track(_startup(captured.COMPILED_COLD_LOG))
    compiling = [e.message for e in events if e.phase == "compiling"]
    assert compiling == ["torch.compile: warming up the model", "torch.compile: warm-up done"]
    phases = list(dict.fromkeys(e.phase for e in events))
    assert phases.index("loading_weights") < phases.index("compiling") < phases.index("ready")


def test_a_compile_cache_that_fails_to_load_is_reported() -> None:
    events = track(_startup(captured.COMPILED_WARM_LOG))
    compiling = [e.message for e in events if e.phase == "compiling"]
    assert "compile cache failed to load: compiling again" in compiling


@pytest.mark.parametrize(
    "name",
    [
        captured.EAGER_LOG,  # SIGTERM to the process group (as `instinct stop` sends it)
        "04_healthy_eager_sigterm_to_the_api_server_only.log",  # as `docker stop`, `kill`
        "05_healthy_eager_sigterm_logs_engine_dead_error.log",  # the same, another run
        captured.COMPILED_COLD_LOG,  # compiled, SIGTERM: EngineDeadError in the teardown too
    ],
)
def test_a_clean_sigterm_shutdown_is_not_a_failure(name: str) -> None:
    """vLLM 0.32's shutdown races: some runs log `AsyncLLM output_handler failed` and
    `EngineDeadError` after `[shutdown] API server: shutdown triggered` (05), some not."""
    text = captured.text(name)
    assert "[shutdown] API server: shutdown triggered" in text
    events = track(text.splitlines())
    assert "failed" not in [e.phase for e in events]


@pytest.mark.parametrize(
    "name",
    [
        "11_kv_cache_space_zero.log",
        "12_kv_cache_too_small_for_max_model_len.log",
        "16_compiled_without_cxx_compiler.log",
    ],
)
def test_an_engine_core_failure_is_seen_as_failed_at_once(name: str) -> None:
    """The tracker sees the failure when it is logged, whether or not the processes exit
    (serve ends its wait on it: TODO-tool-fixes.md item 5), and for good."""
    tracker = PhaseTracker()
    for number, line in enumerate(captured.text(name).splitlines()):
        tracker.feed(line, now=float(number))
        if tracker.failed_for_good:
            break
    assert tracker.failed_for_good and tracker.failed_line is not None
