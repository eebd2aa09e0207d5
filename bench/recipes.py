#!/usr/bin/env python3
"""Catalog benchmarks: print figures, assert nothing (targets are in the output).

    .venv/bin/python bench/recipes.py [--runs N]

* full corpus parse (YAML + validation of tests/data/vllm-recipes): target < 1 s;
* cache load in a fresh process (import + read + index of a 173-recipe cache): < 50 ms;
* the planning hot path (import, load, lookup, AMD view) against a bare interpreter;
* a full ``recipes sync`` from a local git clone and a local Docker Hub-shaped server.

Fresh processes run with bytecode caching on (into a temporary PYTHONPYCACHEPREFIX) so the
figures are those of an installed package, not of recompiling every module.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
CORPUS = REPO / "tests" / "data" / "vllm-recipes"


def fresh_env(cache_dir: str, pycache: str) -> dict[str, str]:
    env = dict(os.environ, INSTINCT_CACHE_DIR=cache_dir, PYTHONPYCACHEPREFIX=pycache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(REPO / "src")
    return env


def in_process_ms(code: str, env: dict[str, str], runs: int) -> list[float]:
    """Time ``code`` inside fresh interpreters (ms), after one warm-up run."""
    wrapper = (
        "import time\n_t = time.perf_counter()\n"
        + code
        + "\nprint((time.perf_counter() - _t) * 1000)"
    )
    out = []
    for i in range(runs + 1):
        res = subprocess.run(
            [sys.executable, "-c", wrapper], env=env, capture_output=True, text=True, check=True
        )
        if i:
            out.append(float(res.stdout.strip().splitlines()[-1]))
    return out


def wall_ms(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for i in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        if i:
            out.append((time.perf_counter() - start) * 1000)
    return out


def fmt(values: list[float]) -> str:
    return f"min {min(values):7.1f}  median {statistics.median(values):7.1f}"


def bench_parse(runs: int) -> None:
    from instinct_serve.catalog.parse import parse_corpus

    start = time.perf_counter()
    parse_corpus(CORPUS)  # first run pays pydantic model building
    first = time.perf_counter() - start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = parse_corpus(CORPUS)
        times.append(time.perf_counter() - start)
    n = len(result.recipes)
    print(
        f"full corpus parse ({n} recipes, in process): first {first * 1000:.0f} ms, "
        f"then {fmt([t * 1000 for t in times])} ms   [target < 1000 ms]"
    )


def bench_loads(runs: int, tmp: str) -> None:
    from instinct_serve.catalog.overrides import data_text
    from instinct_serve.catalog.store import SNAPSHOT_FILE

    cache_dir = os.path.join(tmp, "cache")
    os.makedirs(cache_dir)
    doc = json.loads(data_text(SNAPSHOT_FILE))
    doc["source"] = "git"
    with open(os.path.join(cache_dir, "recipes_cache.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, separators=(",", ":"))
    env = fresh_env(cache_dir, os.path.join(tmp, "pyc"))
    empty_env = fresh_env(os.path.join(tmp, "nocache"), os.path.join(tmp, "pyc"))
    load = (
        "from instinct_serve.catalog import load_catalog\nc = load_catalog()\nassert len(c) == 173"
    )
    cold = fmt(in_process_ms(load, env, runs))
    print(f"cache load, fresh process (import + read + index): {cold} ms   [target < 50 ms]")
    print(
        f"snapshot load, fresh process:                     "
        f"{fmt(in_process_ms(load, empty_env, runs))} ms"
    )
    hot = (
        "from instinct_serve.catalog import amd_config, ensure_servable, load_catalog, lookup,"
        " staleness_warning\nc = load_catalog()\nstaleness_warning(c)\n"
        "m = ensure_servable(lookup('Qwen/Qwen3.5-9B', c), c.docker_image)\n"
        "amd_config(m, 'mi300x')"
    )
    print(
        f"hot path (import, load, lookup, gate, AMD view):  {fmt(in_process_ms(hot, env, runs))} ms"
    )
    cli = "import click, instinct_serve.cli.common, instinct_serve.errors\n"
    marginal = [
        a - b
        for a, b in zip(
            in_process_ms(cli + hot, env, runs), in_process_ms(cli, env, runs), strict=True
        )
    ]
    print(f"hot path on top of the CLI's own imports (click):  {fmt(marginal)} ms")
    bare = wall_ms([sys.executable, "-c", "pass"], env, runs)
    hot_wall = wall_ms([sys.executable, "-c", hot], env, runs)
    print(
        f"python -c pass: {fmt(bare)} ms;  same hot path as a process: {fmt(hot_wall)} ms "
        f"(x{min(hot_wall) / min(bare):.1f} of bare)"
    )


def bench_sync(tmp: str) -> None:
    from instinct_serve.gather.recipes_sync import sync

    repo = Path(tmp) / "recipes"
    shutil.copytree(CORPUS, repo)
    git_env = dict(
        os.environ,
        GIT_AUTHOR_NAME="b",
        GIT_AUTHOR_EMAIL="b@example.invalid",
        GIT_COMMITTER_NAME="b",
        GIT_COMMITTER_EMAIL="b@example.invalid",
    )
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "corpus"]):
        subprocess.run(["git", "-C", str(repo), *args], env=git_env, check=True)

    pages = [
        ["nightly", "latest"] + [f"nightly-{i:040x}" for i in range(98)],
        ["v0.27.1", "v0.26.0", "v0.9.2"],
    ]

    class Hub(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = 2 if "page=2" in self.path else 1
            # relative next link (same origin), as Docker Hub's absolute one would be
            nxt = f"{self.path.split('?')[0]}?page_size=100&page=2" if page == 1 else None
            body = json.dumps({"next": nxt, "results": [{"name": n} for n in pages[page - 1]]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["INSTINCT_CACHE_DIR"] = os.path.join(tmp, "sync-cache")
    try:
        hub_url = f"http://127.0.0.1:{server.server_address[1]}"
        for label in ("first sync (clone)", "second sync (fetch)"):
            report = sync(repo_url=repo.as_uri(), hub_url=hub_url)
            t = report.timings_s
            print(
                f"{label}: total {t['total_s']:.2f} s (git {t['git_s']:.2f}, parse "
                f"{t['parse_s']:.2f}, hub {t['hub_s']:.2f}, write {t['write_s']:.2f}); "
                f"{report.model_count} recipes, {report.docker_image}"
            )
    finally:
        server.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="instinct-bench-") as tmp:
        bench_parse(max(3, args.runs // 2))
        bench_loads(args.runs, tmp)
        bench_sync(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
