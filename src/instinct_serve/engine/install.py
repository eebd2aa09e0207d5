"""``instinct engine install vllm``: a managed uv venv pinned to the host's ROCm SDK.

Steps (each a real ``uv`` call on the host):

1. pick the pin-table row for the SDK's major.minor (``pins.resolve_target``);
2. create the venv on the row's interpreter and refuse a different Python tag;
3. resolve every pin with ``uv pip install --dry-run --reinstall``: vLLM (exact, or the
   newest of its series on a discovery row), then what that exact vLLM pulls in with its
   dependencies (through the generated ``uv.toml``), from which flash-attn / amd-aiter are
   taken when the vLLM index itself serves them (else the row's series, with the reason);
   torch is the SDK's build of the release vLLM pins, else the row's torch series;
4. require every ``+rocmX.Y`` local version to name the SDK's major.minor;
5. install the torch stack (``--no-deps``, torch index only), then vLLM, flash-attn and
   amd-aiter with full dependencies (``uv.toml``: the vendor index first, its 403 for a
   project it does not host ignored, so PyPI-only dependencies fall through);
6. torch alignment (``alignment.py``), then re-pin torchvision / torchaudio and every
   ``amd-torch-device-gfx*`` / ``amd-torchvision-device-gfx*`` plugin to its base
   package's installed release: a drifted plugin only fails at serve time, with a HIP
   "Cannot find Symbol";
7. a device check and a manifest (``engine.json``) beside the venv.

``--dry-run`` does 1-4 in a scratch venv that is removed afterwards.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.engine import alignment as align
from instinct_serve.engine import hostfs
from instinct_serve.engine.discovery import managed_root, windows_refusal
from instinct_serve.engine.pins import (
    INDEX_OVERRIDE_ENV,
    PINS_OVERRIDE_ENV,
    InstallTarget,
    PinTable,
    load_pin_table,
    resolve_target,
)
from instinct_serve.engine.probe import DeviceCheck, ProbeError, run_probe
from instinct_serve.engine.uvtool import (
    Uv,
    UvError,
    describe_failure,
    find_uv,
    network_failure,
    normalize,
)
from instinct_serve.engine.versions import local_rocm_series, python_request, release
from instinct_serve.errors import NotReadyError
from instinct_serve.hosts import Host, Result

PYTHON_OVERRIDE_ENV = "INSTINCT_ENGINE_PYTHON"
MANIFEST = "engine.json"
UV_CONFIG = "uv.toml"
PLUGIN_PREFIXES = {"amd-torch-device-": "torch", "amd-torchvision-device-": "torchvision"}
KERNEL_PACKAGES = ("flash-attn", "amd-aiter")


@dataclass
class Pin:
    """One resolved requirement and how it was chosen."""

    name: str
    version: str
    index_url: str
    how: str

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "index_url": self.index_url,
            "how": self.how,
        }


@dataclass
class InstallReport:
    """Everything ``engine install`` decided and did (the JSON document of the command)."""

    host: str
    target: InstallTarget
    root: str
    venv: str
    python_tag: str | None = None
    dry_run: bool = False
    pins: list[Pin] = field(default_factory=list)
    repinned: list[str] = field(default_factory=list)
    alignment: align.Alignment | None = None
    device_check_before: DeviceCheck | None = None
    device_check: DeviceCheck | None = None
    installed: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    manifest: str | None = None

    def pin(self, name: str) -> Pin | None:
        return next((p for p in self.pins if p.name == name), None)

    def lines(self) -> list[str]:
        """The ``torch_alignment:`` / ``device_check:`` lines users and scripts grep for."""
        out: list[str] = []
        if self.alignment:
            out.append(self.alignment.line())
        if self.device_check_before and self.alignment and self.alignment.changes_torch:
            out.append(
                self.device_check_before.line().replace(
                    "device_check:", "device_check (before):", 1
                )
            )
        if self.device_check:
            out.append(self.device_check.line())
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "dry_run": self.dry_run,
            "target": self.target.to_dict(),
            "root": self.root,
            "venv": self.venv,
            "python": hostfs.join(self.venv, "bin", "python"),
            "vllm_command": hostfs.join(self.venv, "bin", "vllm"),
            "python_tag": self.python_tag,
            "pins": [p.to_dict() for p in self.pins],
            "repinned": list(self.repinned),
            "torch_alignment": self.alignment.to_dict() if self.alignment else None,
            "device_check_before": self.device_check_before.to_dict()
            if self.device_check_before
            else None,
            "device_check": self.device_check.to_dict() if self.device_check else None,
            "installed": dict(self.installed),
            "lines": self.lines(),
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "manifest": self.manifest,
        }


def detect_rocm(host: Host) -> str | None:
    """The host SDK's ROCm version (amd-smi, /opt/rocm/.info/version, hipconfig)."""
    from instinct_serve.gather.detect import detect_rocm_version

    return detect_rocm_version(host)


def uv_config(vllm_index_url: str) -> str:
    """The ``uv.toml`` for the full install: the vendor index first, its 403 not fatal.

    AMD's CDN-backed indexes answer 403 (not 404) for a project they do not host; uv
    treats that as fatal unless ``ignore-error-codes`` says otherwise, and there is no CLI
    flag for it. The index goes here rather than on ``--extra-index-url`` because uv does
    not merge a CLI copy of the same URL with this entry. PyPI (or ``UV_DEFAULT_INDEX``)
    stays the default index behind it.
    """
    url = vllm_index_url.replace("\\", "\\\\").replace('"', '\\"')
    return (
        "# Written by `instinct engine install vllm`: the vLLM index first; a 403 there\n"
        "# means 'not hosted here', so uv falls through to the default index (PyPI).\n"
        "[[index]]\n"
        'name = "vllm-rocm"\n'
        f'url = "{url}"\n'
        "ignore-error-codes = [403]\n"
    )


def check_python_tag(tag: str, required: str, python: str) -> None:
    if tag != required:
        raise NotReadyError(
            f"the vLLM wheels for this ROCm line are published for {required} only, but "
            f"{python} is {tag or 'unknown'}",
            fix=f"use a Python {python_request(required)} interpreter ({required}): remove "
            f"the managed venv and rerun, or set {PYTHON_OVERRIDE_ENV} to a "
            f"python{python_request(required)}",
            id="python_tag_mismatch",
            details={"required": required, "found": tag},
        )


def check_rocm_locals(pins: list[Pin], target: InstallTarget) -> None:
    """Every ``+rocmX.Y`` build must be for the SDK's line: an index serving two ROCm lines
    must never put the other line's wheel onto this SDK."""
    if target.rocm is None:
        return
    for pin in pins:
        line = local_rocm_series(pin.version)
        if line is not None and line != target.rocm:
            raise NotReadyError(
                f"{pin.spec} from {pin.index_url} is built for ROCm {line}, but the SDK is "
                f"ROCm {target.rocm}: the index serves another ROCm line's wheels",
                fix=f"set {INDEX_OVERRIDE_ENV} to the index for ROCm {target.rocm}, or "
                "install with --rocm matching the SDK",
                id="rocm_build_mismatch",
                details={"pin": pin.spec, "sdk": str(target.rocm), "build": str(line)},
            )


def plugin_base(name: str) -> str | None:
    for prefix, base in PLUGIN_PREFIXES.items():
        if name.startswith(prefix) and re.match(r"gfx[0-9a-z-]+$", name[len(prefix) :]):
            return base
    return None


def plugin_repins(installed: Mapping[str, str]) -> dict[str, str]:
    """``{plugin: version}`` for every device plugin whose version differs from its base
    package's installed version (pure). A plugin without its base is left alone."""
    out: dict[str, str] = {}
    for name, version in installed.items():
        base = plugin_base(name)
        if base and base in installed and installed[base] != version:
            out[name] = installed[base]
    return out


class _Session:
    """One install on one host: the uv runner, the venv and the report being filled in."""

    def __init__(
        self,
        host: Host,
        uv: Uv,
        target: InstallTarget,
        report: InstallReport,
        python: str,
        config: str,
        progress: Callable[[str], None],
    ) -> None:
        self.host, self.uv, self.target, self.report = host, uv, target, report
        self.python, self.config, self.progress = python, config, progress

    def discover(self, spec: str, index_url: str, what: str) -> str | None:
        found, result = self.uv.dry_run(self.python, [spec], index_url=index_url)
        name = normalize(re.split(r"[=<>!~ ]", spec, maxsplit=1)[0])
        if not result.ok or name not in found:
            self.report.notes.append(f"{what}: {spec} did not resolve on {index_url}")
            return None
        return found[name]

    def must_discover(self, spec: str, index_url: str) -> str:
        found, result = self.uv.dry_run(self.python, [spec], index_url=index_url)
        name = normalize(re.split(r"[=<>!~ ]", spec, maxsplit=1)[0])
        if not result.ok or name not in found:
            unreachable = network_failure(result)
            raise NotReadyError(
                (
                    f"cannot reach {index_url} to resolve {spec}:\n"
                    if unreachable
                    else f"{index_url} has no build of {spec} for {self.report.python_tag}:\n"
                )
                + describe_failure(result),
                fix=_resolve_fix(result, index_url),
                id="index_unreachable" if unreachable else "pin_unresolved",
            )
        return found[name]

    def resolve(self) -> None:
        """Pin vLLM, the kernel packages and the torch stack (``report.pins``)."""
        vllm = self._pin_vllm()
        deps = self._vllm_deps(vllm)
        self._pin_kernels(vllm, deps)
        self._pin_torch(vllm, deps)
        check_rocm_locals(self.report.pins, self.target)

    def _pin_vllm(self) -> str:
        """The vLLM release: the row's exact pin, or the newest of its series on the index."""
        t, pins = self.target, self.report.pins
        self.progress("resolving vLLM")
        if t.vllm_is_exact:
            vllm = t.vllm_spec.split("==", 1)[1]
            how = "exact pin from the table" if t.route == "static" else "pinned by the index URL"
        else:
            vllm = self.must_discover(t.vllm_spec, t.vllm_index_url)
            how = f"newest {t.vllm_spec} on the vLLM index"
        pins.append(Pin("vllm", vllm, t.vllm_index_url, how))
        return vllm

    def _vllm_deps(self, vllm: str) -> dict[str, str]:
        """What ``vllm==VERSION`` pulls in, resolved by uv against the row's indexes."""
        t = self.target
        self.progress(f"resolving what vllm=={vllm} pulls in")
        deps, result = self.uv.dry_run(
            self.python,
            [f"vllm=={vllm}"],
            config_file=self.config,
            no_deps=False,
            prerelease="if-necessary",
        )
        if not result.ok:
            raise NotReadyError(
                f"vllm=={vllm} and its dependencies do not resolve:\n{describe_failure(result)}",
                fix=_resolve_fix(result, t.vllm_index_url),
                id="index_unreachable" if network_failure(result) else "pin_unresolved",
            )
        return deps

    def _pin_kernels(self, vllm: str, deps: dict[str, str]) -> None:
        """The kernel packages: vLLM's resolution where the vLLM index serves it, else the
        row's series."""
        t, pins = self.target, self.report.pins
        series = t.series
        for name in KERNEL_PACKAGES:
            wanted = deps.get(name)
            if wanted and self.discover(f"{name}=={wanted}", t.vllm_index_url, name):
                pins.append(
                    Pin(
                        name,
                        wanted,
                        t.vllm_index_url,
                        f"what vllm=={vllm} resolves to (served by the vLLM index)",
                    )
                )
                continue
            prefix = series.get(name)
            if prefix:
                version = self.must_discover(f"{name}=={prefix}.*", t.vllm_index_url)
                reason = (
                    f"vllm=={vllm} resolves {name}=={wanted} from another index"
                    if wanted
                    else f"vllm=={vllm} does not require {name}"
                )
                pins.append(
                    Pin(
                        name,
                        version,
                        t.vllm_index_url,
                        f"series match {prefix}.* on the vLLM index ({reason})",
                    )
                )
            elif wanted:
                self.report.notes.append(
                    f"{name}=={wanted} is left to vLLM's resolution: the vLLM index does not "
                    "serve it and the row names no series"
                )

    def _pin_torch(self, vllm: str, deps: dict[str, str]) -> None:
        """torch, torchvision and torchaudio: the SDK index's builds of what vLLM pins."""
        t, pins, series = self.target, self.report.pins, self.target.series
        how = ""
        self.progress("resolving the torch stack")
        engine_torch = deps.get("torch")
        torch: str | None = None
        if engine_torch:
            torch = self.discover(f"torch=={release(engine_torch)}", t.torch_index_url, "torch")
            if torch:
                how = (
                    "the SDK index's build of the torch release vLLM pins "
                    f"({release(engine_torch)})"
                )
        if torch is None and series.get("torch"):
            torch = self.must_discover(f"torch=={series['torch']}.*", t.torch_index_url)
            how = f"newest torch {series['torch']}.* on the torch index"
            if engine_torch:
                self.report.warnings.append(
                    f"vllm=={vllm} pins torch {release(engine_torch)}, which the torch index "
                    f"does not serve; using torch=={torch}"
                )
        if torch is None and engine_torch:
            torch, how = engine_torch, "the torch vllm pins (no SDK build found)"
        if torch is None:
            raise NotReadyError(
                f"cannot tell which torch to install with vllm=={vllm}: it pins none and the "
                "pin table row names no torch series",
                fix=f"add a torch series to the row ({PINS_OVERRIDE_ENV})",
                id="pin_unresolved",
            )
        pins.append(Pin("torch", torch, t.torch_index_url, how))
        for name in ("torchvision", "torchaudio"):
            prefix = series.get(name)
            if prefix:
                version = self.must_discover(f"{name}=={prefix}.*", t.torch_index_url)
                pins.append(
                    Pin(name, version, t.torch_index_url, f"newest {prefix}.* on the torch index")
                )
            elif name in deps:
                found = self.discover(f"{name}=={release(deps[name])}", t.torch_index_url, name)
                if found:
                    pins.append(
                        Pin(
                            name,
                            found,
                            t.torch_index_url,
                            "the SDK index's build of the release vLLM pulls in "
                            f"({release(deps[name])})",
                        )
                    )
                else:
                    pins.append(Pin(name, deps[name], t.vllm_index_url, "what vLLM pulls in"))

    def install(self, disabled: bool) -> None:
        t, r = self.target, self.report
        stack = [p for p in r.pins if p.name in ("torch", "torchvision", "torchaudio")]
        self.progress("installing the torch stack")
        self.uv.install(
            self.python,
            [p.spec for p in stack],
            index_url=t.torch_index_url,
            no_deps=True,
            reinstall=[p.name for p in stack],
        )
        main = [p for p in r.pins if p.name in ("vllm", *KERNEL_PACKAGES)]
        self.progress("installing vLLM (this can take a while)")
        self.uv.install(
            self.python,
            [p.spec for p in main],
            config_file=self.config,
            reinstall=[p.name for p in main],
        )

        installed = self.uv.freeze(self.python)
        torch_pin = r.pin("torch")
        assert torch_pin is not None
        current = installed.get("torch")
        before: DeviceCheck | None = None
        if current != torch_pin.version:
            self.progress("checking the torch vLLM installed on the GPU")
            before = self.device_check()
        r.device_check_before = before
        r.alignment = align.decide(
            installed=current,
            target=torch_pin.version,
            installed_runs_kernel=before.ok if before else None,
            disabled=disabled,
            kernel_error=before.error if before else None,
        )
        stack_repin: dict[str, str] = {}
        if r.alignment.action in ("aligned", "realigned"):
            for p in stack:
                if installed.get(p.name) != p.version:
                    stack_repin[p.name] = p.version
        if stack_repin:
            self.repin(stack_repin)
        final = dict(installed)
        final.update(stack_repin)
        plugins = plugin_repins(final)
        if plugins:
            try:
                self.repin(plugins)
            except UvError as exc:
                if r.alignment.action in ("aligned", "realigned"):
                    raise
                # torch is not the SDK's build (kept or opted out): its plugins may not
                # exist on the torch index at all. Say so; the device check says the rest.
                r.warnings.append(
                    "could not re-pin "
                    + ", ".join(f"{k}=={v}" for k, v in sorted(plugins.items()))
                    + f" to follow torch=={final.get('torch')} ({exc.message.splitlines()[-1]});"
                    " a plugin ahead of its base fails at serve time with HIP 'Cannot find "
                    "Symbol'"
                )
        r.installed = self.uv.freeze(self.python)
        drift = plugin_repins(r.installed)
        if drift:
            r.warnings.append(
                "device plugins differ from their base package: "
                + ", ".join(f"{k} (base {v})" for k, v in sorted(drift.items()))
            )
        self.progress("running a kernel with the final torch")
        r.device_check = self.device_check()

    def repin(self, pins: Mapping[str, str]) -> None:
        """Reinstall exactly these versions, without dependencies, from the torch index."""
        self.progress("re-pinning " + ", ".join(sorted(pins)))
        specs = [f"{n}=={v}" for n, v in sorted(pins.items())]
        self.uv.install(
            self.python,
            specs,
            index_url=self.target.torch_index_url,
            no_deps=True,
            reinstall=sorted(pins),
        )
        self.report.repinned.extend(specs)

    def device_check(self) -> DeviceCheck:
        try:
            probe = run_probe(self.host, self.python, device_check=True)
        except ProbeError as exc:
            return DeviceCheck(ok=False, error=str(exc))
        if probe.device is None:
            return DeviceCheck(
                ok=False, error=probe.torch_import_error or "torch is not a ROCm build"
            )
        return probe.device


def _resolve_fix(result: Result, index_url: str) -> str:
    if network_failure(result):
        return (
            f"the host cannot reach {index_url} (or PyPI): check DNS, proxy (HTTPS_PROXY) "
            "and firewall; nothing was installed"
        )
    return (
        f"check the index URL (pin table or {INDEX_OVERRIDE_ENV}) and that it serves this ROCm "
        "line, and that PyPI has vLLM's other dependencies; nothing was installed (no "
        "unpinned or CPU fallback)"
    )


def _python_tag(host: Host, python: str) -> str:
    result = host.run(
        [python, "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"], timeout=60
    )
    return result.stdout.strip() if result.ok else ""


def load_table(env: Mapping[str, str]) -> PinTable:
    path = env.get(PINS_OVERRIDE_ENV, "").strip()
    return load_pin_table(path or None)


def plan_target(
    host: Host, rocm: str | None, env: Mapping[str, str] | None = None
) -> InstallTarget:
    """The pin-table decision for this host (no uv, no changes)."""
    env = os.environ if env is None else env
    if hostfs.platform_name(host) == "windows":
        raise windows_refusal()
    detected = rocm if rocm is not None else detect_rocm(host)
    return resolve_target(load_table(env), detected, env.get(INDEX_OVERRIDE_ENV))


def install_vllm(
    host: Host,
    target: InstallTarget,
    *,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    progress: Callable[[str], None] = lambda _text: None,
) -> InstallReport:
    """Resolve (and unless ``dry_run``, install) vLLM for ``target`` on ``host``."""
    env = os.environ if env is None else env
    uv = Uv(host, find_uv(host))
    root = managed_root(host)
    venv = hostfs.join(root, "venv")
    report = InstallReport(host.name, target, root, venv, dry_run=dry_run)
    report.notes.extend(target.notes)
    python_choice = env.get(PYTHON_OVERRIDE_ENV, "").strip() or python_request(target.python_tag)

    scratch: str | None = None
    if dry_run:
        made = host.run(["mktemp", "-d", "/tmp/instinct-engine-dry-run.XXXXXX"], timeout=30)
        if not made.ok:
            raise NotReadyError(
                f"cannot create a scratch directory on {host.name}",
                fix="check /tmp",
                id="mktemp_failed",
            )
        scratch = made.stdout.strip()
        work_venv, config = hostfs.join(scratch, "venv"), hostfs.join(scratch, UV_CONFIG)
    else:
        hostfs.makedirs(host, root)
        work_venv, config = venv, hostfs.join(root, UV_CONFIG)
    python = hostfs.join(work_venv, "bin", "python")
    try:
        if not host.run(["test", "-x", python], timeout=30).ok:
            progress(f"creating the venv on Python {python_choice}")
            made_venv = uv.venv(work_venv, python_choice)
            if not made_venv.ok:
                raise NotReadyError(
                    f"uv could not create a Python {python_choice} venv at {work_venv}:\n"
                    + describe_failure(made_venv),
                    fix=f"the wheels need {target.python_tag}: install Python "
                    f"{python_request(target.python_tag)} (or allow uv to download it), or "
                    f"set {PYTHON_OVERRIDE_ENV}",
                    id="venv_failed",
                )
        report.python_tag = _python_tag(host, python)
        check_python_tag(report.python_tag, target.python_tag, python)
        hostfs.write_text(host, config, uv_config(target.vllm_index_url))
        session = _Session(host, uv, target, report, python, config, progress)
        session.resolve()
        if dry_run:
            return report
        session.install(align.alignment_disabled(env))
        report.manifest = hostfs.join(root, MANIFEST)
        hostfs.write_text(host, report.manifest, json.dumps(_manifest(report), indent=2) + "\n")
        return report
    finally:
        if scratch:
            hostfs.remove_tree(host, scratch, inside="/tmp")


def _manifest(report: InstallReport) -> dict[str, Any]:
    doc = report.to_dict()
    doc["schema"] = 1
    doc["installed_at"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    return doc


def read_manifest(host: Host) -> dict[str, Any] | None:
    text = host.read_text(hostfs.join(managed_root(host), MANIFEST))
    if not text:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None
