"""The SGLang test double (``sglang_double.py``) for tests: on the host, and in a test image.

``start_local_sglang_double(...)`` runs it as a host process (``LocalDouble``, as the vLLM
double's ``start_local_double``). ``sglang_test_image(base, env)`` derives, from the
registry-free vLLM test image (``tests/infra/docker.py``), an image laid out as the
``lmsysorg/sglang`` ROCm images are for the planner's argv: no entrypoint, and
``python3 -m sglang.launch_server ...`` runs the double (a two-file ``sglang`` package on
``PYTHONPATH``), with the captured real SGLang files it replays beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.infra.docker import LocalDouble, TestImage, derived_test_image
from tests.infra.ports import free_port

HERE = Path(__file__).resolve().parent
DOUBLE = HERE / "sglang_double.py"
FIXTURES = HERE.parent / "fixtures" / "sglang"
REPLAYED = ("real_cpu_start_2.log", "real_cpu_metrics_2.txt")
SHIM = "/opt/sglang-shim"
_LAUNCH_SERVER = (
    "# TEST DOUBLE of SGLang: `python3 -m sglang.launch_server ...` runs\n"
    "# tests/infra/sglang_double.py\n"
    "import runpy, sys\n"
    "sys.argv[0] = '/opt/vllm-double/sglang_double.py'\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def sglang_test_image(base: TestImage, env: Mapping[str, str] | None = None) -> str:
    """The SGLang test image (module docstring), with ``SGLANG_DOUBLE_*`` defaults."""
    files = {
        "/opt/vllm-double/sglang_double.py": DOUBLE.read_bytes(),
        f"{SHIM}/sglang/__init__.py": b"# TEST DOUBLE of SGLang (tests/infra/sglang_infra.py)\n",
        f"{SHIM}/sglang/launch_server.py": _LAUNCH_SERVER.encode(),
    }
    for name in REPLAYED:
        files[f"/opt/vllm-double/sglang/{name}"] = (FIXTURES / name).read_bytes()
    values = {"PYTHONPATH": SHIM, **(env or {})}
    return derived_test_image(base, values, files, entrypoint=[])


def start_local_sglang_double(
    model_path: str,
    *,
    served: str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> LocalDouble:
    """The double on the host, listening on 127.0.0.1 (``--enable-metrics`` on)."""
    port = port or free_port()
    argv = [sys.executable, str(DOUBLE), "--model-path", model_path, "--port", str(port)]
    if served:
        argv += ["--served-model-name", served]
    argv += ["--host", "127.0.0.1", "--enable-metrics", *args]
    full_env = {**os.environ, "SGLANG_DOUBLE_LOAD_S": "0.3", **(env or {})}
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
    )
    double = LocalDouble(proc, port, served or model_path)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            double.lines.append((time.time(), line.rstrip("\n")))

    double.reader = threading.Thread(target=read, name=f"sglang-double-{proc.pid}", daemon=True)
    double.reader.start()
    return double
