"""How long after the server turns healthy does ``instinct serve`` say so? (figures, not a test)

The vLLM test double loads for a random time (``VLLM_DOUBLE_LOAD_S`` uniform in 1.5-6 s,
passed with ``--env``), then prints ``vllm-double: healthy at <epoch>`` the moment its
``/health`` turns 200. ``serve --json`` runs against it; the bench stamps each JSON line as
it arrives and prints, per run and as medians:

* detect: arrival of serve's ``healthy`` event minus the double's healthy moment;
* ready: arrival of the final ``result`` line (after ``/v1/models``, the warm-up request
  and the coherence probe) minus the same moment.

Target: median ready delay under 2.5 s (a 60 s poll loop averages 30 s). The docker route
(default) needs a Docker daemon and root for the ``/dev/kfd`` stand-ins; ``--engine
native`` runs the double as a fake ``vllm`` executable on this machine instead.

    .venv/bin/python bench/ready_latency.py [--runs 10] [--engine docker|native]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import stat
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.infra.docker import (  # noqa: E402
    DEVICE_STANDINS,
    _docker_version,
    build_test_image,
    free_port,
)
from tests.infra.fakeroot import build_gpu_root  # noqa: E402
from tests.infra.vllm_double import install_fake_vllm  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TARGET_S = 2.5


def standins() -> list[str]:
    """Create the /dev/kfd and render node stand-ins the docker flags need (root only)."""
    made = []
    for path in DEVICE_STANDINS:
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            made.append(path)
    return made


def healthy_at_docker(name: str) -> float | None:
    out = subprocess.run(["docker", "logs", name], capture_output=True, text=True, timeout=60)
    return _healthy_at(out.stdout + out.stderr)


def _healthy_at(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("vllm-double: healthy at"):
            return float(line.split("healthy at", 1)[1].split()[0])
    return None


def one_run(argv: list[str], env: dict[str, str]) -> tuple[float | None, float | None, str]:
    """(healthy event arrival, result arrival, the result's status)."""
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    healthy = done = None
    status = "?"
    for line in proc.stdout:
        now = time.time()
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        if doc.get("event") == "healthy":
            healthy = now
        if doc.get("event") == "result":
            done, status = now, str(doc.get("status"))
    proc.wait(timeout=120)
    return healthy, done, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--engine", choices=["docker", "native"], default="docker")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        build_gpu_root(root)
        env = dict(os.environ)
        env.update(
            {
                "INSTINCT_DATA_DIR": f"{tmp}/data",
                "INSTINCT_CACHE_DIR": f"{tmp}/cache",
                "HF_HUB_OFFLINE": "1",
            }
        )
        made: list[str] = []
        common = ["--gpu", "mi300x", "--root", str(root), "--yes", "--json", "--timeout", "60"]
        if args.engine == "docker":
            if _docker_version() is None:
                sys.exit(
                    "no Docker daemon answers: start one (as root: `dockerd >/tmp/dockerd.log "
                    "2>&1 &`) or run with --engine native"
                )
            made = standins()
            image = build_test_image().tag
            common += ["--image", image, "--hf-cache", f"{tmp}/hf"]
        else:
            env["INSTINCT_VLLM_COMMAND"] = str(install_fake_vllm(Path(tmp) / "bin"))
            common += ["--engine", "native"]
        detect, ready = [], []
        print(f"{args.runs} runs, engine {args.engine}; delays after the double turned healthy")
        print(f"{'run':>4} {'load_s':>7} {'detect_s':>9} {'ready_s':>8}  status")
        try:
            for run in range(1, args.runs + 1):
                load = round(rng.uniform(1.5, 6.0), 2)
                name = f"bench-ready-{uuid.uuid4().hex[:8]}"
                argv = [sys.executable, "-m", "instinct_serve", "serve", MODEL, *common]
                argv += ["--port", str(free_port()), "--name", name]
                argv += ["--env", f"VLLM_DOUBLE_LOAD_S={load}"]
                try:
                    healthy, done, status = one_run(argv, env)
                    if args.engine == "docker":
                        at = healthy_at_docker(name)
                    else:
                        log = Path(tmp) / "data" / "native" / name / "log"
                        at = _healthy_at(log.read_text()) if log.exists() else None
                finally:
                    cleanup = ["stop", "--yes", name]
                    subprocess.run(
                        [sys.executable, "-m", "instinct_serve", *cleanup],
                        env=env,
                        capture_output=True,
                        timeout=120,
                    )
                if at is None or healthy is None or done is None:
                    print(f"{run:>4} {load:>7} {'-':>9} {'-':>8}  {status} (no measurement)")
                    continue
                detect.append(healthy - at)
                ready.append(done - at)
                print(f"{run:>4} {load:>7} {healthy - at:>9.3f} {done - at:>8.3f}  {status}")
        finally:
            for path in made:
                os.unlink(path)
        if not ready:
            raise SystemExit("no run produced a measurement")
        med_detect, med_ready = statistics.median(detect), statistics.median(ready)
        print(f"median detect delay: {med_detect:.3f} s (max {max(detect):.3f} s)")
        verdict = "OK" if med_ready < TARGET_S else "OVER TARGET"
        print(
            f"median ready delay:  {med_ready:.3f} s (max {max(ready):.3f} s); "
            f"target < {TARGET_S} s: {verdict}"
        )


if __name__ == "__main__":
    main()
