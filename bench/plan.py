"""Wall time of `instinct plan Qwen/Qwen3.5-9B --gpu mi300x --json`, end to end, against a bare
interpreter (`python -c pass`). Prints the medians and the ratio (target: under 4x).

Run: .venv/bin/python bench/plan.py [--runs N]
Bytecode is compiled first and HF_HUB_OFFLINE=1 is set, so the figure is the installed,
offline planning path (the shipped snapshot and metadata), not compilation or the network.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def median_ms(argv: list[str], runs: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["HF_HUB_OFFLINE"] = "1"
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "src")],
        env=env,
        stdout=subprocess.DEVNULL,
        check=False,
    )
    plan = [
        sys.executable,
        "-m",
        "instinct_serve",
        "plan",
        "Qwen/Qwen3.5-9B",
        "--gpu",
        "mi300x",
        "--json",
    ]
    median_ms(plan, 2, env)  # warm the page cache
    bare = median_ms([sys.executable, "-c", "pass"], args.runs, env)
    planned = median_ms(plan, args.runs, env)
    # The floor no plan can go under: the CLI framework and the dataclass machinery alone.
    floor = median_ms([sys.executable, "-c", "import click, dataclasses"], args.runs, env)
    ratio = planned / bare
    print(f"python -c pass            {bare:7.1f} ms  1.00x")
    print(f"import click, dataclasses {floor:7.1f} ms  {floor / bare:.2f}x  (the floor)")
    print(f"instinct plan ... --json  {planned:7.1f} ms  {ratio:.2f}x")
    print(f"target < 4x: {'met' if ratio < 4 else 'not met'} ({ratio:.2f}x, median of {args.runs})")


if __name__ == "__main__":
    main()
