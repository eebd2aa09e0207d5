"""Remediation commands never break: a user's line is quoted only when it fits intact."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from instinct_serve.diagnose import (
    DiagnoseContext,
    diagnose,
    diagnose_symptom,
    quotable,
    quote_line,
)
from instinct_serve.diagnose.shell import issue_search
from tests.diagnose.logs import log_names, real_log

CANONICAL = "vLLM ROCm engine startup failure"

HOSTILE = [
    "It's broken",
    "line one\nline two",
    "$(rm -rf ~)",
    "`reboot`",
    "a; rm -rf / #",
    "\x1b[31mred\x1b[0m",
    "tab\tseparated",
    "unicode\u2028separator",
    "nul\x00byte",
    "x" * 500,
    "  leading and trailing  ",
    "'",
    "",
    "--help",
    "Segmentation fault (core dumped) in 'aiter' $(id)",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_never_breaks_the_command(text: str) -> None:
    command = issue_search(text, CANONICAL)
    argv = shlex.split(command)
    assert argv[:6] == ["gh", "search", "issues", "--repo", "vllm-project/vllm", "--"]
    assert len(argv) == 7
    assert argv[6] == (text if quotable(text) else CANONICAL)


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: HIP error: invalid device function",
        "ValueError: Unknown quantization method: gptq. Must be one of [awq]",
        "Memory access fault by GPU node-5 (Agent handle: 0x460e3a50) on address 0x7ec4dfe0e000.",
        "$HOME and `backticks` and $(subshells) are literal inside single quotes",
    ],
)
def test_a_quotable_line_is_quoted_whole(text: str) -> None:
    assert quotable(text)
    assert shlex.split(quote_line(text, CANONICAL)) == [text]


def test_an_unsafe_canonical_text_is_refused() -> None:
    with pytest.raises(ValueError, match="canonical"):
        quote_line("fine", "it's not safe")


@given(st.text(max_size=400))
def test_any_text_gives_one_intact_argument(text: str) -> None:
    argv = shlex.split(issue_search(text, CANONICAL))
    assert argv[6] in (text, CANONICAL)
    assert len(argv) == 7


def test_crash_line_with_a_quote_falls_back_to_the_canonical_symptom() -> None:
    line = "Segmentation fault (core dumped) in 'fused_moe' $(curl evil)"
    finding = diagnose(line, DiagnoseContext(gfx="gfx950")).primary
    assert finding is not None and finding.id == "gpu_kernel_crash"
    argv = shlex.split(finding.commands[0])
    assert argv[-1] == "ROCm segmentation fault illegal instruction"


def test_crash_line_that_fits_is_searched_verbatim_without_its_log_prefix() -> None:
    line = (
        "(Worker_TP2 pid=3100) ERROR 02-24 02:39:34 [core.py:1] Memory access fault by GPU node-5 "
        "(Agent handle: 0x460e3a50) on address 0x7ec4dfe0e000. Reason: Write access to a "
        "read-only page."
    )
    finding = diagnose(line, DiagnoseContext(gfx="gfx950")).primary
    assert finding is not None
    assert shlex.split(finding.commands[0])[-1].startswith("Memory access fault by GPU node-5")


@pytest.mark.parametrize("name", log_names())
def test_every_command_of_every_fixture_log_parses(name: str) -> None:
    diagnosis = diagnose(real_log(name))
    commands = [*diagnosis.commands, *(c for f in diagnosis.findings for c in f.commands)]
    for command in commands:
        assert shlex.split(command)


def test_unmatched_log_searches_its_last_error_line() -> None:
    log = "INFO starting\nRuntimeError: something nobody has seen before\n"
    diagnosis = diagnose(log)
    assert not diagnosis.matched
    assert diagnosis.last_error == "RuntimeError: something nobody has seen before"
    assert shlex.split(diagnosis.commands[0])[-1] == diagnosis.last_error


def test_unmatched_symptom_with_a_quote_uses_the_canonical_text() -> None:
    diagnosis = diagnose_symptom("it's weird")
    assert shlex.split(diagnosis.commands[0])[-1] == CANONICAL
