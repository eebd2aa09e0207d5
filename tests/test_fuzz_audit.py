"""The safe-by-default audit (issues 19 and 26), a bounded run for CI: fuzzed options, config
values and corrupt model directories through ``fit`` and ``plan`` (in-process CLI), the MCP
``fit`` tool and ``options.<Job>.parse``; every other command with random arguments, and the
files the tool reads made special or corrupt (``tests/infra/fuzz_commands.py``, in its sandbox).

Each run must end in a result or an error id of the documented set
(``tests.infra.fuzz.KNOWN_ERRORS``), in bounded time (5 s; a run is stopped after 20 s and
counted as a hang), with no traceback and no "Internal error". About 200 examples in all;
``bench/fuzz_audit.py`` runs the larger campaign and prints the audit figures.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from instinct_serve.options import FitRequest, PlanOptions, declared
from tests.infra import fuzz
from tests.infra import fuzz_commands as fc

FUZZ = settings(
    deadline=timedelta(seconds=fuzz.LIMIT_S),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


def assert_correct(outcome: fuzz.Outcome, codes: tuple[int, ...] = (0, 1, 2, 3)) -> None:
    problems = outcome.problems(codes)
    assert not problems, outcome.describe() + "\n" + outcome.stderr[-2000:]


# -- corrupt model directories -----------------------------------------------------------


@settings(FUZZ, max_examples=60)
@given(entries=fuzz.model_dirs())
def test_corrupt_model_directories_fit(entries: dict[str, fuzz.Entry]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = fuzz.build_dir(Path(tmp), entries)
        outcome = fuzz.run_cli(["fit", str(folder), "--gpu", "mi300x", "--json"])
    # a result (0: fits, 1: does not fit) or a specific error: bad input 2, failure 1
    assert_correct(outcome, codes=(0, 1, 2))
    if outcome.code != 0:
        assert outcome.error_id or "verdict" in outcome.doc


@settings(FUZZ, max_examples=25)
@given(entries=fuzz.model_dirs())
def test_corrupt_model_directories_plan(entries: dict[str, fuzz.Entry]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = fuzz.build_dir(Path(tmp), entries)
        outcome = fuzz.run_cli(["plan", str(folder), "--gpu", "mi300x", "--json"])
    assert_correct(outcome, codes=(0, 1, 2))


@settings(FUZZ, max_examples=15)
@given(entries=fuzz.model_dirs())
def test_corrupt_model_directories_mcp_fit(entries: dict[str, fuzz.Entry]) -> None:
    pytest.importorskip("mcp")
    with tempfile.TemporaryDirectory() as tmp:
        folder = fuzz.build_dir(Path(tmp), entries)
        outcome = fuzz.run_mcp("fit", {"model": str(folder), "gpu": "mi300x"})
    assert_correct(outcome, codes=(0, 1, 2))


# -- config values -----------------------------------------------------------------------


@settings(FUZZ, max_examples=40)
@given(job=st.sampled_from(["fit", "plan"]), doc=fuzz.config_docs())
def test_config_values(job: str, doc: dict[str, Any]) -> None:
    """A real config.json with one to four values replaced by anything JSON can hold."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_bytes(fuzz.dumps(doc))
        outcome = fuzz.run_cli([job, tmp, "--gpu", "mi300x", "--json"])
    assert_correct(outcome, codes=(0, 1, 2))


# -- options -----------------------------------------------------------------------------

JOBS = {"fit": FitRequest, "plan": PlanOptions}
cli_values = st.one_of(
    fuzz.texts,
    fuzz.numbers.map(str),
    st.sampled_from(["-1", "0", "nan", "inf", "1e999", "9" * 60, "32k", "A=B", "0,0", "\x1b"]),
)


@st.composite
def raw_options(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    job = draw(st.sampled_from(sorted(JOBS)))
    names = [name for name, _spec, _default in declared(JOBS[job])]
    raw = draw(
        st.dictionaries(
            st.sampled_from(names),
            st.one_of(fuzz.json_values, cli_values),
            min_size=1,
            max_size=3,
        )
    )
    return job, raw


@settings(FUZZ, max_examples=40)
@given(case=raw_options())
def test_options_parse(case: tuple[str, dict[str, Any]]) -> None:
    """What an MCP client may send: options, or a UsageError with a known id."""
    job, raw = case
    outcome = fuzz.run_parse(JOBS[job].parse, raw)
    assert_correct(outcome, codes=(0, 2))


@st.composite
def cli_runs(draw: st.DrawFn) -> list[str]:
    job = draw(st.sampled_from(sorted(JOBS)))
    specs = [
        (name, spec) for name, spec, _d in declared(JOBS[job]) if spec.cli and not spec.positional
    ]
    argv = [job, "Qwen/Qwen3-8B", "--json"]
    picked = draw(st.lists(st.sampled_from(specs), min_size=1, max_size=3))
    if not {name for name, _spec in picked} & {"gpu", "gfx", "vram_gb", "vram_gib"}:
        argv += ["--gpu", "mi300x"]
    for name, spec in picked:
        flag = spec.spelling(name).split("/")[0]
        if spec.kind in ("bool", "tristate"):
            argv.append(flag)
        else:
            argv += [flag, draw(cli_values)]
    return argv


@settings(FUZZ, max_examples=25)
@given(argv=cli_runs())
def test_options_on_the_command_line(argv: list[str]) -> None:
    assert_correct(fuzz.run_cli(argv))


# -- every command, and the files it reads (issue 26) ------------------------------------


@pytest.fixture
def box(tmp_path: Path) -> Iterator[fc.Sandbox]:
    """The sandbox, one per test (a hypothesis test shares it between its examples)."""
    with fc.sandbox(tmp_path / "sandbox") as sandbox:
        yield sandbox


TABLE = fc.commands()


def test_every_command_is_in_the_table() -> None:
    """A new command is fuzzed without a change to the harness (bench and cache included)."""
    from instinct_serve.cli.main import COMMANDS

    paths = {c.path for c in TABLE}
    assert {p[0] for p in paths} == set(COMMANDS) - {"mcp"}
    assert {("bench", "run"), ("bench", "compare"), ("cache", "prune"), ("cache", "ls")} <= paths


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_every_command(box: fc.Sandbox, data: st.DataObject) -> None:
    argv = data.draw(fc.command_runs(box, TABLE))
    assert_correct(fc.run_command(argv))


@pytest.mark.parametrize("kind", fc.SPECIAL_NAMES)
@pytest.mark.parametrize("place", sorted(fc.PLACES))
def test_special_files_where_the_tool_reads(box: fc.Sandbox, place: str, kind: str) -> None:
    """A FIFO, a link to /dev/zero, a link loop, a 10 GB sparse file or a directory where a
    cache, record, key, store or log file should be: an answer, never a hang."""
    for outcome in fc.run_file_case(box, place, kind, b""):
        assert_correct(outcome)


@settings(FUZZ, max_examples=25)
@given(case=fc.file_runs())
def test_corrupt_files_where_the_tool_reads(box: fc.Sandbox, case: tuple[str, str, bytes]) -> None:
    for outcome in fc.run_file_case(box, *case):
        assert_correct(outcome)


# -- the audit's table -------------------------------------------------------------------


def test_known_errors_are_specific() -> None:
    """The documented set holds no catch-all: a bug can never pass as a known error."""
    for generic in ("internal_error", "failed", "internal_plan_error", "not_ready"):
        assert not fuzz.known_error(generic)
    assert fuzz.known_error("bad_model_config") and fuzz.known_error("bad_tp")


def test_a_finding_is_reported() -> None:
    """The checks fire: an internal error, a slow run and an unknown id are findings."""
    slow = fuzz.Outcome("cli", ["fit"], code=0, seconds=fuzz.LIMIT_S + 1)
    internal = fuzz.Outcome("cli", ["fit", "--json"], code=1, stderr="Internal error: X")
    odd = fuzz.Outcome("cli", ["fit", "--json"], code=2, error_id="whatever", doc={"error": {}})
    for outcome in (slow, internal, odd):
        assert outcome.problems()
    assert fuzz.Outcome("cli", ["fit", "--json"], code=2, error_id="bad_config").problems() == []


@pytest.mark.parametrize(
    ("argv", "error_id"),
    [
        (["fit", "Qwen/Qwen3-8B", "--gpu", "mi300x", "--gpu-count", "1000000000"], "bad_gpu_count"),
        (["serve", "Qwen/Qwen3-8B", "--gpu", "mi300x", "--timeout", "nan"], "bad_timeout_s"),
        (["serve", "Qwen/Qwen3-8B", "--gpu", "mi300x", "--timeout", "inf"], "bad_timeout_s"),
    ],
)
def test_the_audits_option_findings_are_refused(argv: list[str], error_id: str) -> None:
    """The audit's --gpu-count 1000000000 (out of memory) and --timeout nan (never timed
    out): refused by options.py before anything runs."""
    outcome = fuzz.run_cli([*argv, "--json"])
    assert (outcome.code, outcome.error_id) == (2, error_id)
    assert outcome.seconds < fuzz.LIMIT_S
