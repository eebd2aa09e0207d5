"""Cold vs warm start to ready through the persistent compile caches (figures, not a test).

``instinct serve`` starts an endpoint on the real dockerd, ``instinct stop`` removes it, and
the same serve runs again: the second start mounts the compile cache the first one filled.
The engine is the vLLM TEST DOUBLE, whose torch.compile is SIMULATED: it sleeps
``--compile-s`` and writes a marker into ``VLLM_CACHE_ROOT`` when that holds none, and
"loads" it in ``--warm-s`` when it does (defaults 8 s and 1 s: the ratio of vLLM's
torch.compile cold vs warm, 43 s vs about 5 s, vllm-project/vllm#44881). So the figures
show that the cache survives the container and that serve's phases see the difference, not
how fast a real compile is; with a real image (``--image``) they are real.

Per round it prints, cold then warm: start to ready (serve's invocation to its ``result``
line) and the compile phase (the ``compiling`` phase event to the next phase).

    .venv/bin/python bench/restart.py [--rounds 2] [--compile-s 8] [--warm-s 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.infra.docker import _docker_version, build_test_image, free_port  # noqa: E402
from tests.infra.fakeroot import build_gpu_root  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CLI = [sys.executable, "-m", "instinct_serve"]


def serve_once(argv: list[str], env: dict[str, str]) -> tuple[float, float | None, str]:
    """(start to ready in s, compile phase in s or None, result status)."""
    start = time.monotonic()
    out = subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600
    )
    ready = time.monotonic() - start
    events = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    last = events[-1] if events else {}
    status = str(last.get("status") or last.get("error", {}).get("id") or "?")
    phases = [e for e in events if e.get("event") == "phase"]
    compile_s = None
    begin = next((i for i, e in enumerate(phases) if e["phase"] == "compiling"), None)
    if begin is not None:
        after = next((e for e in phases[begin:] if e["phase"] != "compiling"), None)
        if after is not None:
            compile_s = float(after["ts"]) - float(phases[begin]["ts"])
    return ready, compile_s, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compile-s", type=float, default=8.0)
    parser.add_argument("--warm-s", type=float, default=1.0)
    parser.add_argument("--image", default=None, help="a real vLLM image (default: the double)")
    args = parser.parse_args()
    if _docker_version() is None:
        sys.exit("no Docker daemon answers: this bench needs one")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        build_gpu_root(root)
        env = dict(os.environ)
        env.update(
            INSTINCT_DATA_DIR=f"{tmp}/data", INSTINCT_CACHE_DIR=f"{tmp}/cache", HF_HUB_OFFLINE="1"
        )
        image = args.image or build_test_image().tag
        if not args.image:
            print(f"image {image}: the TEST DOUBLE, its compile is simulated")
        print(f"{'round':>5} {'start':>5} {'ready_s':>8} {'compile_s':>10}  status")
        totals: dict[str, list[float]] = {"cold": [], "warm": []}
        for round_ in range(1, args.rounds + 1):
            cache = Path(tmp) / f"compile-cache-{round_}"  # a fresh cache each round
            name = f"bench-restart-{uuid.uuid4().hex[:8]}"
            argv = [*CLI, "serve", MODEL, "--gpu", "mi300x", "--root", str(root), "--yes"]
            argv += ["--json", "--image", image, "--hf-cache", f"{tmp}/hf", "--name", name]
            argv += ["--port", str(free_port()), "--compile-cache", str(cache)]
            argv += ["--env", "VLLM_DOUBLE_LOAD_S=0.5"]
            argv += ["--env", f"VLLM_DOUBLE_COMPILE_S={args.compile_s}"]
            argv += ["--env", f"VLLM_DOUBLE_WARM_COMPILE_S={args.warm_s}"]
            try:
                for start in ("cold", "warm"):
                    ready, compile_s, status = serve_once(argv, env)
                    subprocess.run([*CLI, "stop", name], env=env, capture_output=True, timeout=120)
                    totals[start].append(ready)
                    shown = f"{compile_s:.2f}" if compile_s is not None else "-"
                    print(f"{round_:>5} {start:>5} {ready:>8.2f} {shown:>10}  {status}")
            finally:
                subprocess.run([*CLI, "stop", name], env=env, capture_output=True, timeout=120)
        cold, warm = totals["cold"], totals["warm"]
        mean_cold, mean_warm = sum(cold) / len(cold), sum(warm) / len(warm)
        print(
            f"start to ready: cold {mean_cold:.2f} s, warm {mean_warm:.2f} s "
            f"(saved {mean_cold - mean_warm:.2f} s per restart)"
        )


if __name__ == "__main__":
    main()
