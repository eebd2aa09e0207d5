"""Build small, real wheels for the engine tests (no build backend: a wheel is a zip).

The wheels stand in for AMD's vendor builds: the same project names, the same rotating
dev-tag versions (``0.27.1.dev5+rocm10.0.0.gf46a9dfe2.d20260826``), real dependency
metadata, so ``uv`` resolves and installs them exactly as it would the real ones. The fake
``torch`` answers what a ROCm, CUDA or CPU build would (``torch.version.hip`` /
``torch.version.cuda``) and runs a "GPU kernel" only when ``INSTINCT_TEST_FAKE_GPU_BUILD``
names its build, which is how a test says which torch can open the (absent) device.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import sysconfig
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


def interpreter_tag() -> str:
    """``cp311`` for the interpreter running the tests (the managed venv uses the same)."""
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def platform_tag() -> str:
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def binary_tag(python_tag: str | None = None) -> str:
    tag = python_tag or interpreter_tag()
    return f"{tag}-{tag}-{platform_tag()}"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Wheel:
    """One wheel to build: project, version, dependencies and files."""

    name: str
    version: str
    requires: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)  # console_scripts name -> target
    tag: str = "py3-none-any"

    @property
    def filename(self) -> str:
        dist = re.sub(r"[-.]+", "_", self.name)
        return f"{dist}-{self.version}-{self.tag}.whl"

    def build(self, out_dir: Path) -> Path:
        dist = re.sub(r"[-.]+", "_", self.name)
        info = f"{dist}-{self.version}.dist-info"
        metadata = [
            "Metadata-Version: 2.1",
            f"Name: {self.name}",
            f"Version: {self.version}",
            *(f"Requires-Dist: {req}" for req in self.requires),
        ]
        entries: dict[str, bytes] = {
            path: text.encode() for path, text in sorted(self.files.items())
        }
        entries[f"{info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
        pure = "true" if self.tag.endswith("none-any") else "false"
        entries[f"{info}/WHEEL"] = (
            f"Wheel-Version: 1.0\nGenerator: instinct-tests\nRoot-Is-Purelib: {pure}\n"
            f"Tag: {self.tag}\n"
        ).encode()
        if self.scripts:
            lines = "".join(f"{k} = {v}\n" for k, v in self.scripts.items())
            entries[f"{info}/entry_points.txt"] = f"[console_scripts]\n{lines}".encode()
        record = []
        for path, data in entries.items():
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}")
        record.append(f"{info}/RECORD,,")
        entries[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / self.filename
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
            for path, data in entries.items():
                zf.writestr(path, data)
        return target


FAKE_TORCH = '''\
"""A stand-in for a {kind} build of torch: only what the probes and device check touch."""
import os

__version__ = {version!r}


class version:  # noqa: N801 - torch.version is a module in the real package
    hip = {hip!r}
    cuda = {cuda!r}


def _gpu_ok():
    wanted = os.environ.get("INSTINCT_TEST_FAKE_GPU_BUILD", "")
    return bool(wanted) and wanted in __version__ and version.hip is not None


class _Tensor:
    def __init__(self, values):
        self.values = list(values)

    def __add__(self, other):
        return _Tensor(a + b for a, b in zip(self.values, other.values))

    def sum(self):
        return _Tensor([sum(self.values)])

    def item(self):
        return self.values[0]


class _Cuda:
    @staticmethod
    def is_available():
        return _gpu_ok()

    @staticmethod
    def device_count():
        return 1 if _gpu_ok() else 0

    @staticmethod
    def get_device_name(index=0):
        return "AMD Instinct MI300X (test build)"


cuda = _Cuda()


def ones(n, device=None):
    if device is not None and str(device).startswith("cuda") and not _gpu_ok():
        raise RuntimeError("HIP error: invalid device function")
    return _Tensor([1.0] * n)
'''


def torch_wheel(version: str, *, kind: str = "rocm", requires: list[str] | None = None) -> Wheel:
    """A torch whose ``torch.version`` says ROCm (``hip``), CUDA or CPU, as real builds do."""
    hip = "10.0.40000-test" if kind == "rocm" else None
    cuda = "12.8" if kind == "cuda" else None
    files = {"torch/__init__.py": FAKE_TORCH.format(kind=kind, version=version, hip=hip, cuda=cuda)}
    if kind == "rocm":
        files["torch/lib/libamdhip64.so"] = ""  # ROCm wheels bundle the HIP runtime here
    return Wheel("torch", version, requires or [], files, tag=binary_tag())


def plain_wheel(name: str, version: str, requires: list[str] | None = None) -> Wheel:
    module = re.sub(r"[-.]+", "_", name)
    return Wheel(
        name,
        version,
        requires or [],
        {f"{module}/__init__.py": f"__version__ = {version!r}\n"},
    )


FAKE_VLLM_CLI = '''\
"""``vllm``: prints its version, or serves /health like ``vllm serve`` once it is up."""
import http.server
import json
import sys

from vllm import __version__


def main():
    args = sys.argv[1:]
    if args[:1] == ["--version"]:
        print(__version__)
        return 0
    if args[:1] != ["serve"]:
        print("usage: vllm serve MODEL [--port N]", file=sys.stderr)
        return 2
    port = int(args[args.index("--port") + 1]) if "--port" in args else 8000

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"" if self.path == "/health" else json.dumps({"data": []}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            body = json.dumps(
                {"model": request.get("model"), "choices": [{"index": 0, "text": " Paris."}]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    print(f"INFO: Started server process; Uvicorn running on http://0.0.0.0:{port}", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    return 0
'''


def vllm_wheel(version: str, requires: list[str]) -> Wheel:
    files = {
        "vllm/__init__.py": f"__version__ = {version!r}\n",
        "vllm/cli.py": FAKE_VLLM_CLI,
    }
    return Wheel("vllm", version, requires, files, {"vllm": "vllm.cli:main"}, tag=binary_tag())
