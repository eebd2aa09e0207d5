"""The fake-executable plugin itself: answers, defaults, logs, timeouts, absence."""

from __future__ import annotations

import subprocess

from tests.infra.fakebin import FakeBin, Reply, strip_provenance


def run(*argv: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def test_answers_by_argv_and_logs_every_call(fakebin: FakeBin) -> None:
    fakebin.add(
        "tool",
        {
            "a --json": '{"x": 1}\n',
            "b": ("out", 3),
            "c d": ("out", "err\n", 4),
            "arg with space": "spaced\n",
        },
    )
    assert run("tool", "a", "--json").stdout == '{"x": 1}\n'
    b = run("tool", "b")
    assert (b.stdout, b.returncode) == ("out", 3)
    c = run("tool", "c", "d")
    assert (c.stdout, c.stderr, c.returncode) == ("out", "err\n", 4)
    assert run("tool", "arg with space").stdout == "spaced\n"
    unknown = run("tool", "zzz")
    assert unknown.returncode == 2 and "no answer for: zzz" in unknown.stderr
    assert fakebin.calls("tool") == [
        ["a", "--json"],
        ["b"],
        ["c", "d"],
        ["arg with space"],
        ["zzz"],
    ]


def test_default_answer_and_replacement_clears_the_log(fakebin: FakeBin) -> None:
    fakebin.add("tool", {}, default=("fallback", 0))
    assert run("tool", "anything").stdout == "fallback"
    fakebin.add("tool", {"x": "new"})
    assert fakebin.calls("tool") == []
    assert run("tool", "x").stdout == "new"


def test_missing_tool_exits_127(fakebin: FakeBin) -> None:
    fakebin.missing("amd-smi")
    result = run("amd-smi", "static")
    assert result.returncode == 127 and "command not found" in result.stderr
    assert fakebin.calls("never-added") == []


def test_delay_lets_callers_test_their_timeouts(fakebin: FakeBin) -> None:
    fakebin.add("slow", {"go": Reply(stdout="late", delay_s=5)})
    try:
        run("slow", "go", timeout=0.5)
    except subprocess.TimeoutExpired:
        pass
    else:  # pragma: no cover - the fake must have slept
        raise AssertionError("the fake answered before its delay")


def test_strip_provenance_drops_only_hash_lines() -> None:
    text = '# source: x\n{\n  "a": 1\n}\n# NOTE: y\n[... TRUNCATED ...]\n'
    assert strip_provenance(text) == '{\n  "a": 1\n}\n[... TRUNCATED ...]\n'
