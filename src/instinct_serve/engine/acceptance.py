"""``instinct engine acceptance --model M``: prove the managed engine serves on this GPU.

For a real GPU host, not CI. It refuses external vLLM overrides (the point is to check the
environment ``engine install`` built), requires a usable managed engine whose torch runs a
kernel (``gpu_required``), launches ``vllm serve`` through the native launcher on the
freest GPU, waits for ``/health``, asks ``/v1/completions`` for a few tokens, and reads
``/proc/PID/maps`` of every process of the launch to verify that the HIP runtime and BLAS
libraries were loaded from inside the managed environment (not from some other ROCm on
the host). It always stops what it started. HTTP goes through the engine's own Python on
the host, so ``--host`` needs no tunnel.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.engine import launcher
from instinct_serve.engine.discovery import EXTERNAL_VARS, discover, require_usable
from instinct_serve.engine.gpus import oom_hint, select_on_host
from instinct_serve.engine.models import resolve_model
from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.hosts import Host

CHECKED_LIBS = ("libamdhip64", "librocblas", "libhipblas", "libhipblaslt")
REQUIRED_LIBS = ("libamdhip64",)  # BLAS loads lazily on some builds: checked when mapped

_HTTP = r"""
import json, sys, urllib.request, urllib.error
url, body = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
req = urllib.request.Request(url, data=body.encode() if body else None,
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=float(sys.argv[3]) if len(sys.argv) > 3 else 5) as r:
        print(json.dumps({"status": r.status, "body": r.read().decode("utf-8", "replace")}))
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "body": e.read().decode("utf-8", "replace")}))
except Exception as e:
    print(json.dumps({"status": 0, "body": "%s: %s" % (type(e).__name__, e)}))
"""


@dataclass
class Check:
    id: str
    ok: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "ok": self.ok, "message": self.message}


@dataclass
class AcceptanceReport:
    host: str
    model: str
    checks: list[Check] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)
    log_tail: str = ""
    hint: str | None = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def add(self, id: str, ok: bool, message: str) -> bool:
        self.checks.append(Check(id, ok, message))
        return ok

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "model": self.model,
            "passed": self.passed,
            "checks": [c.to_dict() for c in self.checks],
            "libraries": list(self.libraries),
            "hint": self.hint,
            "log_tail": self.log_tail,
        }


def http(
    host: Host, python: str, url: str, body: dict[str, Any] | None = None, timeout: float = 5.0
) -> tuple[int, str]:
    args = [python, "-c", _HTTP, url, json.dumps(body) if body is not None else "", str(timeout)]
    result = host.run(args, timeout=timeout + 30)
    try:
        doc = json.loads(result.stdout.strip().splitlines()[-1])
        return int(doc["status"]), str(doc["body"])
    except (ValueError, IndexError, KeyError, TypeError):
        return 0, (result.stderr or result.stdout).strip()


def library_verdict(maps_paths: list[str], prefix: str) -> tuple[bool, str, list[str]]:
    """Pure: are the ROCm libraries mapped by the launch all inside ``prefix``?"""
    libs = sorted({p for p in maps_paths if p.rsplit("/", 1)[-1].startswith(CHECKED_LIBS)})
    root = prefix.rstrip("/") + "/"
    outside = [p for p in libs if not p.startswith(root)]
    missing = [
        n for n in REQUIRED_LIBS if not any(p.rsplit("/", 1)[-1].startswith(n) for p in libs)
    ]
    if missing:
        return False, f"no {', '.join(missing)} mapped by the server processes", libs
    if outside:
        return False, "loaded from outside the managed environment: " + ", ".join(outside), libs
    return True, f"{len(libs)} HIP/BLAS libraries, all under {prefix}", libs


def mapped_paths(host: Host, pids: list[int]) -> list[str]:
    paths: list[str] = []
    for pid in pids:
        text = host.read_text(f"/proc/{pid}/maps") or ""
        for line in text.splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                paths.append(parts[5].strip())
    return paths


def run_acceptance(
    host: Host,
    model: str,
    *,
    port: int = 8765,
    timeout_s: float = 900.0,
    sysfs_root: str = "/",
    progress: Callable[[str], None] = lambda _t: None,
) -> AcceptanceReport:
    report = AcceptanceReport(host.name, model)
    overrides = host.env(EXTERNAL_VARS)
    if any(v.strip() for v in overrides.values()):
        raise UsageError(
            "acceptance checks the managed engine, but an external vLLM override is set: "
            + ", ".join(k for k, v in overrides.items() if v.strip()),
            fix="unset it for this run (install first with `instinct engine install vllm`)",
            id="external_override",
        )
    progress("checking the managed engine")
    engine = require_usable(discover(host, device_check=True))
    if not engine.managed or engine.python is None:
        raise NotReadyError(
            f"the vLLM found ({engine.source}) is not the managed environment",
            fix="run `instinct engine install vllm` first",
            id="not_managed",
        )
    device = engine.probe.device if engine.probe else None
    report.add(
        "engine", True, f"managed vLLM {engine.to_dict()['vllm_version']} at {engine.vllm_command}"
    )
    if not report.add(
        "device_check",
        bool(device and device.ok),
        device.line() if device else "device check did not run",
    ):
        return report
    source = resolve_model(host, model)
    selection, _inventory = select_on_host(host, sysfs_root=sysfs_root)
    report.add("gpu", True, f"HIP_VISIBLE_DEVICES={selection.visible_devices}")
    argv = launcher.vllm_serve_argv(
        engine.vllm_command, source.path or source.hub_id or model, port=port, bind="127.0.0.1"
    )
    name = f"acceptance-{port}"
    old = launcher.status(host, name)
    if old is not None and old.running:
        launcher.stop(host, name)
    progress("starting vllm serve")
    proc = launcher.launch(host, name, argv, env=selection.env, meta={"model": model, "port": port})
    base = f"http://127.0.0.1:{port}"
    try:
        healthy = _wait_healthy(host, name, engine.python, base, timeout_s, progress)
        if not report.add(
            "health",
            healthy,
            "/health answered 200" if healthy else "the server never became healthy",
        ):
            return report
        progress("asking /v1/completions")
        code, text = _complete(host, engine.python, base, argv[2])
        report.add(
            "completion",
            code == 200 and bool(text.strip()),
            f"HTTP {code}: {text.strip()[:80]!r}" if code == 200 else f"HTTP {code}",
        )
        prefix = engine.python.rsplit("/bin/", 1)[0]  # the managed venv
        ok, message, libs = library_verdict(
            mapped_paths(host, launcher.group_pids(host, proc)), prefix
        )
        report.libraries = libs
        report.add("libraries", ok, message)
        return report
    finally:
        log = launcher.read_log(host, name)
        report.log_tail = "\n".join(log.splitlines()[-30:])
        if not report.passed:
            report.hint = oom_hint(log)
        launcher.stop(host, name)


def _wait_healthy(
    host: Host,
    name: str,
    python: str,
    base: str,
    timeout_s: float,
    progress: Callable[[str], None],
) -> bool:
    """Poll ``/health`` until it answers 200, the server exits, or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 2) + 2):
        status = launcher.status(host, name)
        if status is None or not status.running:
            return False
        if http(host, python, f"{base}/health")[0] == 200:
            return True
        if time.monotonic() > deadline:
            return False
        progress(f"waiting for /health ({int(deadline - time.monotonic())} s left)")
        time.sleep(2)
    return False


def _complete(host: Host, python: str, base: str, model: str) -> tuple[int, str]:
    """One short greedy completion: the HTTP status and the text ("" if none came back)."""
    code, body = http(
        host,
        python,
        f"{base}/v1/completions",
        {
            "model": model,
            "prompt": "The capital of France is",
            "max_tokens": 8,
            "temperature": 0,
        },
        timeout=120,
    )
    text = ""
    with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
        text = str(json.loads(body)["choices"][0]["text"])
    return code, text
