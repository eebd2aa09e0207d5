"""Fake executables on PATH that replay captured outputs: the real process boundary.

Code under test runs ``amd-smi``, ``rocm-smi``, ``docker``... as real subprocesses (through
``Host``); these fakes answer with text captured from real machines, so parsers and
fall-through logic are exercised exactly as in production, with no monkeypatching of our
own functions. Usage::

    def test_x(fakebin):
        fakebin.add("amd-smi", {
            "static --asic --bus --vram --json": load_fixture(SMI / "x.json"),  # stdout, rc 0
            "version --json": ("not json", 1),                # stdout, rc
            "metric --mem-usage --json": ("", "boom", 2),      # stdout, stderr, rc
            "list --json": Reply(stdout="[]", delay_s=5),      # sleeps first (timeouts)
        }, default=("", 0))          # any other argv (else: rc 2 and a message on stderr)
        fakebin.missing("rocm-smi")  # exits 127 like a shell's "command not found"
        ...
        assert fakebin.calls("amd-smi")[0] == ["static", "--asic", "--bus", "--vram", "--json"]

Keys are the arguments after the program name joined by single spaces. Each fake is a
small Python script (``sys.executable`` in its shebang, or an ``sh`` wrapper when that
path cannot be a shebang) reading its answers from a JSON table next to it and appending
every call's argv to a log. The bin directory is prepended to ``PATH`` for the test, so
subprocesses (``instinct ... --json`` run as a child) see the fakes too. ``write_fake``
works without pytest (``bench/`` uses it).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Reply:
    """One answer of a fake: what it prints, its exit status, how long it takes first."""

    stdout: str = ""
    stderr: str = ""
    returncode: int = 0
    delay_s: float = 0.0


Response = str | tuple[str, int] | tuple[str, str, int] | Reply

_SCRIPT = r"""
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
name = os.path.basename(__file__)
name = name[:-3] if name.endswith(".py") else name
argv = sys.argv[1:]
with open(os.path.join(here, "." + name + ".calls"), "a", encoding="utf-8") as log:
    log.write(json.dumps(argv) + "\n")
with open(os.path.join(here, "." + name + ".json"), encoding="utf-8") as fh:
    table = json.load(fh)
reply = table["responses"].get(" ".join(argv), table["default"])
if reply is None:
    sys.stderr.write(name + ": fake has no answer for: " + " ".join(argv) + "\n")
    sys.exit(2)
if reply["delay_s"]:
    time.sleep(reply["delay_s"])
sys.stdout.write(reply["stdout"])
sys.stderr.write(reply["stderr"])
sys.stdout.flush()
sys.exit(reply["returncode"])
"""


def as_reply(response: Response) -> Reply:
    """Normalize the short forms (``str``, ``(stdout, rc)``, ``(stdout, stderr, rc)``)."""
    if isinstance(response, Reply):
        return response
    if isinstance(response, str):
        return Reply(stdout=response)
    if len(response) == 2:
        return Reply(stdout=response[0], returncode=response[1])
    if len(response) == 3:
        return Reply(stdout=response[0], stderr=response[1], returncode=response[2])
    raise TypeError(f"not a fake response: {response!r}")


def write_fake(
    bin_dir: Path,
    name: str,
    responses: Mapping[str, Response],
    default: Response | None = None,
) -> Path:
    """Write executable ``bin_dir/name`` answering ``responses``; returns its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    table = {
        "responses": {key: asdict(as_reply(value)) for key, value in responses.items()},
        "default": asdict(as_reply(default)) if default is not None else None,
    }
    (bin_dir / f".{name}.json").write_text(json.dumps(table), encoding="utf-8")
    exe = bin_dir / name
    python = sys.executable
    if len(python) < 120 and not any(c.isspace() for c in python):
        exe.write_text(f"#!{python} -S\n{_SCRIPT}", encoding="utf-8")
    else:  # too long or spaced for a shebang line: go through sh
        script = bin_dir / f"{name}.py"
        script.write_text(_SCRIPT, encoding="utf-8")
        exe.write_text(
            f'#!/bin/sh\nexec {shlex.quote(python)} -S {shlex.quote(str(script))} "$@"\n',
            encoding="utf-8",
        )
    exe.chmod(0o755)
    return exe


def strip_provenance(text: str) -> str:
    """A captured output without the ``#`` provenance lines added when it was collected."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("#"))


def load_fixture(path: Path | str) -> str:
    """A fixture file's text with its provenance lines stripped."""
    return strip_provenance(Path(path).read_text(encoding="utf-8"))


class FakeBin:
    """A directory of fake executables placed first on PATH (see the module docstring)."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        bin_dir.mkdir(parents=True, exist_ok=True)

    def add(
        self,
        name: str,
        responses: Mapping[str, Response],
        default: Response | None = None,
    ) -> Path:
        """Install (or replace) fake ``name``; clears its call log."""
        (self.bin_dir / f".{name}.calls").unlink(missing_ok=True)
        return write_fake(self.bin_dir, name, responses, default)

    def missing(self, name: str) -> Path:
        """A ``name`` that behaves as absent (exit 127), shadowing any real one on PATH.

        Its calls are still logged, so a test can check a tool was (not) looked for.
        """
        return self.add(name, {}, default=("", f"{name}: command not found\n", 127))

    def calls(self, name: str) -> list[list[str]]:
        """The argv (after the program name) of every call of fake ``name``, in order."""
        log = self.bin_dir / f".{name}.calls"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def fakebin(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeBin]:
    """Fake executables first on PATH for this test (and its subprocesses)."""
    bin_dir = tmp_path_factory.mktemp("fakebin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    yield FakeBin(bin_dir)
