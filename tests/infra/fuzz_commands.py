"""Fuzzing every command of ``instinct`` (issue 26), and the files the tool reads.

Two campaigns beside ``tests/infra/fuzz.py``'s fit and plan ones, shared by
``tests/test_fuzz_audit.py`` (CI-sized) and ``bench/fuzz_audit.py`` (the audit's figures):

- commands: every leaf command (read from the click tree, so a new one is fuzzed without a
  change here), with random positional arguments and one to three of its options given random
  values, special paths among them (a FIFO, a link to ``/dev/zero``, a link loop, a 10 GB
  sparse file, a directory, a 10,000-character name, ``../..``);
- files: one place the tool reads (recipes cache, plan record, journal, proof record, API key
  file, native process state, bench store, compile cache ``meta.json``, ``diagnose --log``,
  ``recipes import``) made a FIFO, a device, a loop, a sparse file, a directory, truncated
  JSON, random bytes or JSON of the wrong shape, then the commands that read it.

Both run in this process (``fuzz.run_cli``) in ``sandbox``: nothing they do can reach this
machine's Docker (``DOCKER_HOST`` names a socket nobody listens on), the network (proxies
on a closed port), another host (ssh's ``ProxyCommand`` is ``false``), the user's files
(``HOME``, the tool's directories and the working directory are the sandbox's) or stdin. A
few options are left out because they act on the machine for real or never end by design
(``UNSAFE``). A correct answer ends in a result or a registered error id
(``error_ids.ERRORS``, ``internal_error`` excepted) within the bound: ``known_command_error``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from tests.infra import fuzz

# The MCP server reads stdin until it closes (its tools: ``fuzz.run_mcp``).
SKIP_COMMANDS = {("mcp",)}
# Options that act on this machine for real whatever the sandbox (a fix, a partition
# change, an install, a device check, a systemd unit): never given.
UNSAFE = {"--auto-fix", "--device-check"}
UNSAFE_BY_COMMAND = {
    ("partition", "set"): {"--yes"},
    ("engine", "install"): {"--yes"},
    ("watch",): {"--write"},
}
# Given always: ``top`` is a live view until Ctrl-C without --once.
FORCED = {("top",): ["--once"]}
# Generic ids: a run that ends in one of these is a finding.
GENERIC = {"internal_error", "internal_plan_error"}
NAME = "fz-endpoint"
PLAN_HASH = "0123456789abcdef"


def known_command_error(error_id: str | None) -> bool:
    """A registered id (``error_ids``), never a catch-all."""
    from instinct_serve.error_ids import lookup

    return bool(error_id) and error_id not in GENERIC and lookup(str(error_id)) is not None


# ------------------------------------------------------------------------ the command table


@dataclass(frozen=True)
class Command:
    """One leaf command: its path, positional arguments and options (click's own params)."""

    path: tuple[str, ...]
    arguments: tuple[tuple[str, int], ...]  # (name, nargs: -1 for any)
    options: tuple[tuple[str, str, tuple[str, ...]], ...]  # (flag, kind, choices)
    has_json: bool


def _walk(cmd: Any, path: tuple[str, ...]) -> Iterator[Command]:
    import click

    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, (*path, name))
        return
    arguments = tuple(
        (p.name or "arg", p.nargs) for p in cmd.params if isinstance(p, click.Argument)
    )
    options = []
    for p in cmd.params:
        if not isinstance(p, click.Option) or p.opts[0] in ("--json", "--help"):
            continue
        kind = "flag" if p.is_flag else type(p.type).__name__
        choices = tuple(str(c) for c in getattr(p.type, "choices", ()) or ())
        options.append((p.opts[0], kind, choices))
    has_json = any(isinstance(p, click.Option) and "--json" in p.opts for p in cmd.params)
    yield Command(path, arguments, tuple(options), has_json)


def commands() -> list[Command]:
    """Every leaf command of ``instinct`` (``cli.main.COMMANDS``), the unfuzzable left out."""
    from instinct_serve.cli.main import COMMANDS

    out: list[Command] = []
    for name, (module, attr, _help) in COMMANDS.items():
        out += _walk(getattr(importlib.import_module(module), attr), (name,))
    return [c for c in out if c.path not in SKIP_COMMANDS]


# ------------------------------------------------------------------------ the sandbox

SPECIAL_NAMES = ("fifo", "zero", "loop", "sparse", "dir")


@dataclass
class Sandbox:
    """Where a campaign runs: its directories and the special files the values point at."""

    root: Path

    @property
    def special(self) -> Path:
        return self.root / "special"

    def special_paths(self) -> list[str]:
        return [str(self.special / n) for n in SPECIAL_NAMES]


def make_special(path: Path, kind: str) -> None:
    """``path`` as one thing that is not a small regular file (or a damaged one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "sparse":
        with path.open("wb") as fh:
            fh.truncate(10 * 2**30)  # 10 GB of hole
    elif kind == "dir":
        path.mkdir()
    else:
        raise ValueError(kind)


@contextlib.contextmanager
def sandbox(root: Path) -> Iterator[Sandbox]:
    """``fuzz.isolated_env`` plus no Docker, no network, no ssh and a private HOME and cwd."""
    root.mkdir(parents=True, exist_ok=True)
    ssh_config = root / "ssh_config"
    ssh_config.write_text("Host *\n  ProxyCommand false\n  BatchMode yes\n")
    home = root / "home"
    home.mkdir(exist_ok=True)
    box = Sandbox(root)
    for kind in SPECIAL_NAMES:
        if not (box.special / kind).exists() and not (box.special / kind).is_symlink():
            make_special(box.special / kind, kind)
    cwd = os.getcwd()
    with fuzz.isolated_env(root):
        os.environ.update(
            {
                "HOME": str(home),
                "DOCKER_HOST": f"unix://{root}/no-docker.sock",
                "INSTINCT_SSH_CONFIG": str(ssh_config),
                "INSTINCT_SSH_MULTIPLEX": "0",
                "HTTP_PROXY": "http://127.0.0.1:9",
                "HTTPS_PROXY": "http://127.0.0.1:9",
                "http_proxy": "http://127.0.0.1:9",
                "https_proxy": "http://127.0.0.1:9",
                "NO_PROXY": "",
                "GIT_TERMINAL_PROMPT": "0",
                "COLUMNS": "120",
            }
        )
        for name in ("INSTINCT_VLLM_COMMAND", "INSTINCT_VLLM_PYTHON", "XDG_RUNTIME_DIR"):
            os.environ.pop(name, None)
        os.chdir(root)
        try:
            yield box
        finally:
            os.chdir(cwd)


# ------------------------------------------------------------------------ command runs

WORDS = st.sampled_from(
    [
        "",
        "-",
        "local",
        NAME,
        PLAN_HASH,
        "Qwen/Qwen3-8B",
        "mi300x",
        "gfx942",
        "..",
        "../..",
        "/",
        "/etc",
        "/dev/null",
        "*",
        "[a-z]",
        "x" * 10_000,
        "a/" * 3000,
        "-1",
        "0",
        "nan",
        "1e999",
        "9" * 60,
        "A=B",
        "HF_TOKEN=x",
        "user@host:22",
        "\x1b[31m",
        "é",
    ]
)


def values(box: Sandbox) -> st.SearchStrategy[str]:
    return st.one_of(WORDS, st.sampled_from(box.special_paths()), fuzz.texts, fuzz.numbers.map(str))


@st.composite
def command_runs(draw: st.DrawFn, box: Sandbox, table: list[Command]) -> list[str]:
    """One command with random positional arguments and one to three random options."""
    cmd = draw(st.sampled_from(table))
    value = values(box)
    argv = list(cmd.path)
    for _name, nargs in cmd.arguments:
        count = draw(st.integers(0, 2)) if nargs == -1 else draw(st.sampled_from([1, 1, 1, 0]))
        argv += [draw(value) for _ in range(count)]
    unsafe = UNSAFE | UNSAFE_BY_COMMAND.get(cmd.path, set())
    usable = [o for o in cmd.options if o[0] not in unsafe]
    if usable:
        picked = draw(st.lists(st.sampled_from(usable), max_size=3, unique_by=lambda o: o[0]))
        for flag, kind, choices in picked:
            if kind == "flag":
                argv.append(flag)
            elif choices and draw(st.booleans()):
                argv += [flag, draw(st.sampled_from(choices))]
            else:
                argv += [flag, draw(value)]
    argv += FORCED.get(cmd.path, [])
    if cmd.has_json and draw(st.integers(0, 3)):
        argv.append("--json")
    # execve cannot pass a NUL byte: no command line holds one (MCP strings may: run_mcp)
    return [a.replace("\x00", "") for a in argv]


def run_command(argv: list[str], *, hang_s: float = fuzz.HANG_S) -> fuzz.Outcome:
    """``fuzz.run_cli`` of a command run, judged by the registered ids."""
    outcome = fuzz.run_cli(argv, hang_s=hang_s)
    outcome.known = known_command_error
    return outcome


# ------------------------------------------------------------------------ the files it reads

# where (relative to the sandbox: cache/, data/, or the sandbox itself) and what reads it
PLACES: dict[str, tuple[str, list[list[str]]]] = {
    "recipes cache": (
        "instinct-cache/recipes_cache.json",
        [
            ["plan", "Qwen/Qwen3-8B", "--gpu", "mi300x", "--json"],
            ["recipes", "list", "--json"],
            ["recipes", "show", "Qwen/Qwen3-8B", "--json"],
            ["fit", "Qwen/Qwen3-8B", "--gpu", "mi300x", "--json"],
        ],
    ),
    "plan record": (
        f"instinct-data/plans/{NAME}.json",
        [["ps", "--json"], ["rollback", NAME, "--json"], ["stop", NAME, "--json"]],
    ),
    "journal": (
        f"instinct-data/events/{NAME}.jsonl",
        [["ps", "--json"], ["rollback", NAME, "--json"]],
    ),
    "proof record": (f"instinct-data/verified/{NAME}.json", [["ps", "--json"]]),
    "key file": (
        f"instinct-data/keys/{NAME}",
        [["ps", "--json"], ["bench", NAME, "--json"], ["top", NAME, "--once", "--json"]],
    ),
    "native state": (
        f"instinct-data/native/{NAME}/state.json",
        [["ps", "--json"], ["logs", NAME, "--json"], ["stop", NAME, "--json"]],
    ),
    "bench store": (
        f"instinct-data/bench/{PLAN_HASH}/20260101T000000.json",
        [["bench", "list", "--json"], ["bench", "compare", PLAN_HASH, PLAN_HASH, "--json"]],
    ),
    "compile cache meta": (
        "instinct-cache/compile-cache/gfx942-000000000000/meta.json",
        [["cache", "ls", "--json"], ["cache", "prune", "--all", "--json"]],
    ),
    "compile cache root": ("instinct-cache/compile-cache", [["cache", "ls", "--json"]]),
    "diagnose log": ("input.log", [["diagnose", "--log", "{path}", "--json"]]),
    "recipes import": ("import.json", [["recipes", "import", "{path}", "--json"]]),
}
KINDS = (*SPECIAL_NAMES, "truncated", "bytes", "json", "empty")


@st.composite
def file_runs(draw: st.DrawFn) -> tuple[str, str, bytes]:
    """A place, a kind of damage, and the bytes for the kinds that are files."""
    place = draw(st.sampled_from(sorted(PLACES)))
    kind = draw(st.sampled_from(KINDS))
    data = b""
    if kind == "truncated":
        doc = {"schema": 1, "current": {"model": "m"}, "kind": "restarted", "points": [1]}
        text = fuzz.dumps(draw(st.one_of(st.just(doc), fuzz.json_values)))
        data = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    elif kind == "bytes":
        data = draw(st.binary(max_size=256))
    elif kind == "json":
        data = fuzz.dumps(draw(fuzz.json_values))
    return place, kind, data


def plant(root: Path, place: str, kind: str, data: bytes) -> Path:
    """Put the damaged thing at ``place`` under ``root`` (parents made as the tool would)."""
    path = root / PLACES[place][0]
    if place == "compile cache meta":
        (path.parent / "vllm").mkdir(parents=True, exist_ok=True)
    if kind in SPECIAL_NAMES:
        make_special(path, kind)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return path


def clear(root: Path) -> None:
    """Remove what a file run planted and what its commands wrote."""
    for name in ("instinct-cache", "instinct-data", "input.log", "import.json"):
        target = root / name
        if target.is_symlink() or target.is_file() or target.is_fifo():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target, ignore_errors=True)


def run_file_case(
    box: Sandbox, place: str, kind: str, data: bytes, *, hang_s: float = fuzz.HANG_S
) -> list[fuzz.Outcome]:
    """Every command that reads ``place``, with ``place`` damaged as ``kind``."""
    clear(box.root)
    path = plant(box.root, place, kind, data)
    outcomes = []
    try:
        for argv in PLACES[place][1]:
            argv = [a.replace("{path}", str(path)) for a in argv]
            outcome = run_command(argv, hang_s=hang_s)
            outcome.args = [f"[fz: {place}: {kind}]", *argv]
            outcomes.append(outcome)
    finally:
        clear(box.root)
    return outcomes
