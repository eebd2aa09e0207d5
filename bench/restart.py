"""Cold vs warm start to ready through the persistent compile caches (figures, not a test).

``instinct serve`` starts an endpoint on the real dockerd, ``instinct stop`` removes it, and
the same serve runs again: the second start mounts the compile cache the first one filled.
The engine is the vLLM TEST DOUBLE, whose torch.compile is SIMULATED: it sleeps
``--compile-s`` and writes a marker into ``VLLM_CACHE_ROOT`` when that holds none, and
"loads" it in ``--warm-s`` when it does (defaults 8 s and 1 s: the ratio of vLLM's
torch.compile cold vs warm, 43 s vs about 5 s, vllm-project/vllm#44881). So the figures
show that the cache survives the container and that serve's phases see the difference, not
how fast a real compile is.

``--real`` runs the REAL vLLM instead: the CPU build of the ``realvllm`` test tier (set up
by ``tests/infra/setup_real_vllm.sh``) serving SmolLM2-135M compiled (no
``--enforce-eager``) with ``--engine native``, its ``VLLM_CACHE_ROOT`` the plan's cache
directory. Natively because the tier's image has no C++ compiler: torch.compile fails in it
and serve relaunches eager. There the figures are vLLM's own torch.compile, cold and from
the kept cache (about 5 min a round on 2 cores; no Docker needed). This CPU build cannot
load its AOT artifact back, so the warm start re-traces and only Inductor's kernels come
from the cache (tests/realvllm/test_compile_cache_real.py explains it): the gain is smaller
than a GPU build's.

Per round it prints, cold then warm: start to ready (serve's invocation to its ``result``
line) and the compile phase (the ``compiling`` phase event to the next phase).

    .venv/bin/python bench/restart.py [--rounds 2] [--compile-s 8] [--warm-s 1] [--real]
"""

from __future__ import annotations

import argparse
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
from tests.serve.conftest import Run, parse_lines  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CLI = [sys.executable, "-m", "instinct_serve"]


def serve_once(argv: list[str], env: dict[str, str]) -> tuple[float, float | None, str]:
    """(start to ready in s, compile phase in s or None, result status)."""
    start = time.monotonic()
    out = subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900
    )
    ready = time.monotonic() - start
    run = Run(argv, out.returncode, out.stdout, out.stderr, parse_lines(out.stdout))
    last = run.events[-1] if run.events else {}
    status = str(last.get("status") or last.get("error", {}).get("id") or "?")
    compile_s = run.phase_s("compiling")
    return ready, compile_s, status


def real_argv(tmp: str, env: dict[str, str]) -> list[str]:
    """``serve`` of the realvllm tier's model, natively, compiled (or exit, saying how to set
    the tier up); ``env`` gets what finds its vLLM."""
    from tests.infra.realvllm import KV_CACHE_GIB, load_setup, why_unavailable

    setup = load_setup()
    reason = why_unavailable(setup)
    if setup is None or reason is not None:
        sys.exit(reason or "the real vLLM is not set up")
    print(f"the REAL vLLM {setup.vllm_version} (CPU build), native, compiled")
    env.update(INSTINCT_VLLM_COMMAND=str(setup.vllm), INSTINCT_ALLOW_CPU_ENGINE="1")
    argv = ["serve", str(setup.model_dir), "--engine", "native", "--timeout", "600"]
    return [*argv, "--env-literal", f"VLLM_CPU_KVCACHE_SPACE={KV_CACHE_GIB}"]


def double_argv(tmp: str, args: argparse.Namespace) -> list[str]:
    """``serve`` of the double's image (built here) with its simulated compile times."""
    image = build_test_image().tag
    print(f"image {image}: the TEST DOUBLE, its compile is simulated")
    root = Path(tmp) / "root"
    build_gpu_root(root)
    argv = ["serve", MODEL, "--gpu", "mi300x", "--root", str(root), "--image", image]
    argv += ["--hf-cache", f"{tmp}/hf", "--env", "VLLM_DOUBLE_LOAD_S=0.5"]
    argv += ["--env", f"VLLM_DOUBLE_COMPILE_S={args.compile_s}"]
    return [*argv, "--env", f"VLLM_DOUBLE_WARM_COMPILE_S={args.warm_s}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compile-s", type=float, default=8.0)
    parser.add_argument("--warm-s", type=float, default=1.0)
    parser.add_argument(
        "--real", action="store_true", help="the real vLLM of the realvllm tier (not the double)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="passed to serve's --env (the server's environment)",
    )
    parser.add_argument(
        "--logs", default=None, help="keep each start's server log in this directory"
    )
    args = parser.parse_args()
    if args.logs:
        Path(args.logs).mkdir(parents=True, exist_ok=True)
    if not args.real and _docker_version() is None:
        sys.exit("no Docker daemon answers: the double's bench needs one (or use --real)")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env.update(
            INSTINCT_DATA_DIR=f"{tmp}/data", INSTINCT_CACHE_DIR=f"{tmp}/cache", HF_HUB_OFFLINE="1"
        )
        base = real_argv(tmp, env) if args.real else double_argv(tmp, args)
        print(f"{'round':>5} {'start':>5} {'ready_s':>8} {'compile_s':>10}  status")
        totals: dict[str, list[float]] = {"cold": [], "warm": []}
        for round_ in range(1, args.rounds + 1):
            cache = Path(tmp) / f"compile-cache-{round_}"  # a fresh cache each round
            name = f"bench-restart-{uuid.uuid4().hex[:8]}"
            argv = [*CLI, *base, "--yes", "--json", "--name", name, "--port", str(free_port())]
            argv += [a for item in args.env for a in ("--env", item)]
            argv += ["--compile-cache", str(cache), "--", "--max-model-len", "2048"]
            try:
                for start in ("cold", "warm"):
                    ready, compile_s, status = serve_once(argv, env)
                    if args.logs:
                        logs = subprocess.run(
                            [*CLI, "logs", name, "--tail", "2000"],
                            env=env,
                            capture_output=True,
                            text=True,
                            timeout=120,
                        )
                        Path(args.logs, f"{name}-{start}.log").write_text(logs.stdout)
                    subprocess.run(
                        [*CLI, "stop", "--yes", name], env=env, capture_output=True, timeout=120
                    )
                    totals[start].append(ready)
                    shown = f"{compile_s:.2f}" if compile_s is not None else "-"
                    print(f"{round_:>5} {start:>5} {ready:>8.2f} {shown:>10}  {status}")
            finally:
                subprocess.run(
                    [*CLI, "stop", "--yes", name], env=env, capture_output=True, timeout=120
                )
        cold, warm = totals["cold"], totals["warm"]
        mean_cold, mean_warm = sum(cold) / len(cold), sum(warm) / len(warm)
        print(
            f"start to ready: cold {mean_cold:.2f} s, warm {mean_warm:.2f} s "
            f"(saved {mean_cold - mean_warm:.2f} s per restart)"
        )


if __name__ == "__main__":
    main()
