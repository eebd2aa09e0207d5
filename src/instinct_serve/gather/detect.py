"""Adapter: the GPU inventory of a host, from amd-smi, else rocm-smi, else rocminfo, else sysfs.

Each source falls through to the next when its tool is missing, fails, hangs (amd-smi can:
every command runs under a timeout) or prints something unparsable; the reason is kept in
``GpuInventory.warnings`` ("amd-smi not found; used rocm-smi"). All I/O goes through the
``Host``, so a remote host over ssh is the same code path; the parsing is pure and lives in
``amdsmi``, ``rocmsmi``, ``rocminfo``, ``sysfs`` and ``rocm``.

The argv constants below are what the tools are asked; tests key their fake executables
on them (``" ".join(AMD_SMI_STATIC)``).
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from instinct_serve.hardware import amdsmi, rocm, rocminfo, rocmsmi, sysfs
from instinct_serve.hardware.build import Parsed
from instinct_serve.hardware.inventory import Gpu, GpuInventory
from instinct_serve.hardware.reconcile import fill, needs_sysfs
from instinct_serve.hardware.values import Unparsable
from instinct_serve.hosts import Host, Result

if TYPE_CHECKING:
    from instinct_serve.hardware.target import Target
    from instinct_serve.options import TargetOptions

AMD_SMI = "amd-smi"
ROCM_SMI = "rocm-smi"
ROCMINFO = "rocminfo"
HIPCONFIG = "hipconfig"
AMD_SMI_STATIC = ("static", "--asic", "--bus", "--vram", "--json")
AMD_SMI_METRIC = ("metric", "--mem-usage", "--json")
AMD_SMI_PARTITION = ("static", "--partition", "--json")
AMD_SMI_VERSION = ("version", "--json")
ROCM_SMI_QUERY = ("--showproductname", "--showbus", "--showmeminfo", "vram", "--json")
HIPCONFIG_ROCMPATH = ("--rocmpath",)
HIPCONFIG_VERSION = ("--version",)

TOOL_TIMEOUT_S = 20.0  # amd-smi can hang on a wedged GPU; nothing here should take long
NO_GPU_HINT = "no AMD GPU found: is the amdgpu driver loaded? (lsmod | grep amdgpu)"


class _Tools:
    """Runs ROCm tools on the host: finds them (PATH, then <root>/opt/rocm/bin), applies
    the timeout, remembers a tool that hung so it is not waited on twice."""

    def __init__(self, host: Host, root: str, timeout_s: float) -> None:
        self.host = host
        self.root = root or "/"
        self.timeout_s = timeout_s
        self._exe: dict[str, str | None] = {}
        self._hung: set[str] = set()

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *(p.lstrip("/") for p in parts))

    def usable(self, tool: str) -> bool:
        return tool not in self._hung and self._exe.get(tool, tool) is not None

    def run(self, tool: str, args: Sequence[str]) -> tuple[str | None, str | None]:
        """``(stdout, None)`` on success, ``(None, reason)`` otherwise."""
        if tool in self._hung:
            return None, f"{tool} skipped (it timed out before)"
        known = self._exe.get(tool, "")
        if known is None:
            return None, f"{tool} not found"
        candidates = [known] if known else [tool, self.path("opt/rocm/bin", tool)]
        for exe in candidates:
            result = self.host.run([exe, *args], timeout=self.timeout_s)
            if result.returncode == 127 and not result.timed_out:
                continue
            self._exe[tool] = exe
            if result.timed_out:
                self._hung.add(tool)
                return None, f"{tool} timed out after {self.timeout_s:g} s"
            if result.returncode != 0:
                command = " ".join([tool, *args])
                return None, f"{command} exited {result.returncode}{_why(result)}"
            return result.stdout, None
        self._exe[tool] = None
        return None, f"{tool} not found"


def _why(result: Result) -> str:
    """The last line the tool printed about its failure, for the warning."""
    text = result.stderr if result.stderr.strip() else result.stdout
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f": {lines[-1][:200]}" if lines else ""


def _from_amd_smi(tools: _Tools) -> tuple[Parsed | None, str | None]:
    out, failure = tools.run(AMD_SMI, AMD_SMI_STATIC)
    if out is None:
        return None, failure
    try:
        parsed = amdsmi.parse_static(out)
    except Unparsable as exc:
        return None, str(exc)
    if not parsed.gpus:
        return None, "amd-smi reported no GPU"
    out, _ = tools.run(AMD_SMI, AMD_SMI_METRIC)
    if out is not None:
        try:
            parsed.gpus = amdsmi.with_usage(parsed.gpus, amdsmi.parse_metric(out))
        except Unparsable:
            parsed.notes.append("amd-smi metric output unparsable; used VRAM unknown")
    out, _ = tools.run(AMD_SMI, AMD_SMI_PARTITION)  # optional: older amd-smi lacks it
    if out is not None:
        with contextlib.suppress(Unparsable):
            parsed.gpus = amdsmi.with_partitions(parsed.gpus, amdsmi.parse_partition(out))
    return parsed, None


def _from_tool(
    tools: _Tools, tool: str, args: Sequence[str], parse: Callable[[str], Parsed]
) -> tuple[Parsed | None, str | None]:
    out, failure = tools.run(tool, args)
    if out is None:
        return None, failure
    try:
        parsed = parse(out)
    except Unparsable as exc:
        return None, str(exc) if str(exc).startswith(tool) else f"{tool} output unparsable ({exc})"
    if not parsed.gpus:
        return None, f"{tool} reported no GPU"
    return parsed, None


def _from_rocm_smi(tools: _Tools) -> tuple[Parsed | None, str | None]:
    return _from_tool(tools, ROCM_SMI, ROCM_SMI_QUERY, rocmsmi.parse)


def _from_rocminfo(tools: _Tools) -> tuple[Parsed | None, str | None]:
    return _from_tool(tools, ROCMINFO, (), rocminfo.parse)


def _from_sysfs(tools: _Tools) -> tuple[Parsed | None, str | None]:
    result = tools.host.run(
        ["sh", "-c", sysfs.DUMP_SCRIPT, "sh", tools.root], timeout=tools.timeout_s
    )
    if not result.ok:
        return None, f"sysfs unreadable (exit {result.returncode}{_why(result)})"
    parsed = sysfs.parse(sysfs.parse_dump(result.stdout))
    if not parsed.gpus:
        return None, f"no AMD GPU in {tools.path('sys/class/kfd/kfd/topology')}"
    return parsed, None


_SOURCES: tuple[tuple[str, Callable[[_Tools], tuple[Parsed | None, str | None]]], ...] = (
    (AMD_SMI, _from_amd_smi),
    (ROCM_SMI, _from_rocm_smi),
    (ROCMINFO, _from_rocminfo),
    ("sysfs", _from_sysfs),
)


def detect(host: Host, sysfs_root: str = "/", *, timeout_s: float = TOOL_TIMEOUT_S) -> GpuInventory:
    """The GPUs of ``host``; ``sysfs_root`` prefixes /sys and /opt/rocm (tests, chroots).

    Never raises for a missing or broken tool (that is what the warnings are for); an ssh
    failure raises ``HostError`` from the host.
    """
    tools = _Tools(host, sysfs_root, timeout_s)
    failures: list[str] = []
    notes: list[str] = []
    gpus: list[Gpu] = []
    source = "none"
    for name, attempt in _SOURCES:
        parsed, failure = attempt(tools)
        if parsed is None:
            failures.append(failure or f"{name} gave no answer")
            continue
        gpus, source = parsed.gpus, name
        notes.extend(parsed.notes)
        break
    if gpus and source != "sysfs" and needs_sysfs(gpus):
        parsed, _ = _from_sysfs(tools)
        if parsed is not None:
            gpus, filled = fill(gpus, parsed.gpus)
            notes.extend(filled)
    warnings = [f"{f}; used {source}" if gpus else f for f in failures] + notes
    return GpuInventory(
        gpus=gpus,
        rocm_version=_rocm_version(tools),
        source=source if gpus else "none",
        warnings=warnings,
        hint=None if gpus else NO_GPU_HINT,
    )


def detect_rocm_version(
    host: Host, root: str = "/", *, timeout_s: float = TOOL_TIMEOUT_S
) -> str | None:
    """The host's ROCm version ("6.4.0"), or None when no source knows it.

    Sources in order: ``amd-smi version``, ``<root>/opt/rocm/.info/version``, ``hipconfig``.
    """
    return _rocm_version(_Tools(host, root, timeout_s))


def _rocm_version(tools: _Tools) -> str | None:
    if tools.usable(AMD_SMI):
        out, _ = tools.run(AMD_SMI, AMD_SMI_VERSION)
        version = rocm.from_amd_smi_version(out) if out is not None else None
        if version:
            return version
    version = rocm.from_info_file(tools.host.read_text(tools.path("opt/rocm/.info/version")))
    if version:
        return version
    out, _ = tools.run(HIPCONFIG, HIPCONFIG_ROCMPATH)
    if out and out.strip():
        install = out.strip().splitlines()[-1].strip()
        version = rocm.from_info_file(
            tools.host.read_text(tools.path(install, ".info/version"))
        ) or rocm.from_rocm_path(install)
        if version:
            return version
    if tools.usable(HIPCONFIG):
        out, _ = tools.run(HIPCONFIG, HIPCONFIG_VERSION)
        return rocm.from_hip_version(out) if out is not None else None
    return None


def resolve_on(
    opts: TargetOptions,
    host: Callable[[], Host],
    *,
    sysfs_root: str = "/",
    default_gpu: str | None = None,
) -> Target:
    """``hardware.target.resolve_target`` with detection on ``host()``, which is only
    reached when detection is needed (fitting for a named GPU needs no host)."""
    from instinct_serve.hardware.target import needs_detection, resolve_target

    if not needs_detection(opts):
        return resolve_target(opts, None, default_gpu=default_gpu)
    target = host()
    return resolve_target(
        opts,
        lambda: detect(target, sysfs_root=sysfs_root),
        host_name=target.name,
        default_gpu=default_gpu,
    )
