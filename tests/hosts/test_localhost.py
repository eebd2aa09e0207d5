"""LocalHost against the real machine: processes, files, PATH, timeouts, environment."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from instinct_serve.errors import UsageError
from instinct_serve.hosts import Host, LocalHost

from .argv_audit import recorded_argv


@pytest.fixture
def host() -> LocalHost:
    return LocalHost()


def test_is_a_host(host: LocalHost) -> None:
    assert isinstance(host, Host)
    assert (host.name, host.is_local, host.address) == ("local", True, "127.0.0.1")


def test_run_captures_both_streams_and_status(host: LocalHost) -> None:
    result = host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.ok and not result.timed_out
    assert result.argv == ("sh", "-c", "echo out; echo err >&2; exit 3")
    assert result.duration_s >= 0


def test_run_success_and_input(host: LocalHost) -> None:
    result = host.run(["cat"], input="line 1\nline 2\n")
    assert result.ok and result.stdout == "line 1\nline 2\n"


def test_stdin_is_not_inherited(host: LocalHost) -> None:
    # Without input, the child must see EOF at once instead of waiting on our terminal.
    result = host.run(["cat"], timeout=5)
    assert result.ok and result.stdout == ""


def test_argv_is_not_a_shell_string(host: LocalHost, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    arg = f"x; touch {marker}; $(touch {marker}) `touch {marker}`"
    result = host.run(["printf", "%s", arg])
    assert result.stdout == arg
    assert not marker.exists()
    with pytest.raises(TypeError):
        host.run("echo hi")  # a str is a Sequence[str]: refused at run time
    with pytest.raises(TypeError):
        host.run([])


def test_missing_executable_is_127(host: LocalHost, tmp_path: Path) -> None:
    result = host.run(["instinct-no-such-tool-xyz", "--help"])
    assert result.returncode == 127 and "not found" in result.stderr
    assert host.run([str(tmp_path / "absent")]).returncode == 127
    assert host.run([str(tmp_path / "absent" / "deeper")]).returncode == 127


def test_not_executable_is_126(host: LocalHost, tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    if os.geteuid() == 0 and os.access(script, os.X_OK):
        pytest.skip("root may execute anything here")
    result = host.run([str(script)])
    assert result.returncode == 126


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (reaped later by init) no longer runs
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_timeout_kills_the_whole_process_tree(host: LocalHost) -> None:
    start = time.monotonic()
    result = host.run(["sh", "-c", "sleep 30 & echo $!; wait"], timeout=0.5)
    elapsed = time.monotonic() - start
    assert result.timed_out and result.returncode == 124 and not result.ok
    assert "timed out after 0.5 s" in result.stderr
    assert elapsed < 10
    grandchild = int(result.stdout.split()[0])
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "the background sleep survived the timeout"


def test_env_is_added_to_the_inherited_environment(host: LocalHost) -> None:
    value = "a b 'c' \"d\" $HOME `x` ; \\"
    result = host.run(
        ["sh", "-c", 'printf %s "$INSTINCT_T"; [ -n "$PATH" ]'], env={"INSTINCT_T": value}
    )
    assert result.ok and result.stdout == value


def test_env_values_never_reach_argv(host: LocalHost) -> None:
    secret = "hf_SENTINEL_local_7f3a"
    with recorded_argv() as seen:
        result = host.run(["sh", "-c", 'printf %s "$HF_TOKEN"'], env={"HF_TOKEN": secret})
    assert result.stdout == secret
    assert seen and all(secret not in " ".join(argv) for argv in seen)


@pytest.mark.parametrize(
    "env", [{"1BAD": "x"}, {"BAD-NAME": "x"}, {"": "x"}, {"OK": "two\nlines"}, {"OK": "nul\0"}]
)
def test_bad_env_is_refused(host: LocalHost, env: dict[str, str]) -> None:
    with pytest.raises(UsageError) as info:
        host.run(["true"], env=env)
    assert info.value.id == "bad_env"


def test_read_text_and_exists(host: LocalHost, tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("hello\nwörld\n")
    assert host.read_text(str(path)) == "hello\nwörld\n"
    assert host.exists(str(path)) and host.exists(str(tmp_path))
    assert host.read_text(str(tmp_path / "missing")) is None
    assert host.read_text(str(tmp_path)) is None  # a directory is not a text file
    assert not host.exists(str(tmp_path / "missing"))


def test_which(host: LocalHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "bin" / "instinct-fake-tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho fake\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    assert host.which("instinct-fake-tool") == str(tool)
    assert host.run(["instinct-fake-tool"]).stdout == "fake\n"
    assert host.which("instinct-no-such-tool-xyz") is None


def test_spawn_streams_merged_output(host: LocalHost) -> None:
    proc = host.spawn(["sh", "-c", 'echo one; echo two >&2; printf %s "$X"'], env={"X": "three"})
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert out.splitlines() == ["one", "two", "three"]
    assert isinstance(proc, subprocess.Popen)


def test_output_bytes_arrive_unchanged(host: LocalHost) -> None:
    # No newline translation (progress bars write \r), invalid UTF-8 is replaced, not fatal.
    result = host.run(["printf", "a\\r\\nb\\rc\\377"])
    assert result.stdout == "a\r\nb\rc\ufffd"
