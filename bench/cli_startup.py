"""CLI start-up cost against a bare interpreter (a figure-printing benchmark, not a test).

Prints the median wall time of ``python -c pass``, ``instinct --version`` and
``instinct detect --json`` (a fake amd-smi replaying the 8x MI300X sample, first on PATH,
and an empty sysfs root), with each one's ratio to the bare interpreter. Target:
``--version`` under 3x (it is answered before click is imported). ``detect`` also pays
for the four fake amd-smi processes it starts, each a Python interpreter of its own.

    .venv/bin/python bench/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.infra.fakebin import write_fake  # noqa: E402

from instinct_serve.gather.detect import (  # noqa: E402
    AMD_SMI_METRIC,
    AMD_SMI_PARTITION,
    AMD_SMI_STATIC,
    AMD_SMI_VERSION,
)

SAMPLES = REPO / "tests/hardware/samples"


def read(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def median_ms(argv: list[str], runs: int, env: dict[str, str]) -> float:
    subprocess.run(argv, env=env, capture_output=True, check=True)  # warm the page cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, check=False)
        times.append((time.perf_counter() - start) * 1000)
        if proc.returncode not in (0, 3):
            raise SystemExit(f"{argv} failed ({proc.returncode}): {proc.stderr.decode()}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    instinct = str(Path(sys.executable).with_name("instinct"))
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir, root = Path(tmp) / "bin", Path(tmp) / "root"
        root.mkdir()
        write_fake(
            bin_dir,
            "amd-smi",
            {
                " ".join(AMD_SMI_STATIC): read("amd-smi_static_MI300X_x8_gpu_data.json"),
                " ".join(AMD_SMI_METRIC): read("amd-smi_metric_mem-usage_MI300X_x8_gpu_data.json"),
                " ".join(AMD_SMI_PARTITION): read(
                    "amd-smi_static_partition_MI300X_x8_gpu_data.json"
                ),
                " ".join(AMD_SMI_VERSION): read("amd-smi_version_rocm7.0.0.json"),
            },
        )
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        fake_only = median_ms([str(bin_dir / "amd-smi"), "version", "--json"], args.runs, env)
        cases = [
            ("python -c pass", [sys.executable, "-c", "pass"]),
            ("instinct --version", [instinct, "--version"]),
            ("instinct detect --json", [instinct, "detect", "--json", "--sysfs-root", str(root)]),
        ]
        results = [(label, median_ms(argv, args.runs, env)) for label, argv in cases]
    base = results[0][1]
    print(f"median of {args.runs} runs ({sys.platform}, Python {sys.version.split()[0]})")
    for label, ms in results:
        print(f"  {label:<26} {ms:8.1f} ms  {ms / base:5.2f}x")
    print(f"  (one fake amd-smi call: {fake_only:.1f} ms; detect makes 4)")
    ratio = results[1][1] / base
    print(f"--version target < 3x: {'met' if ratio < 3 else 'MISSED'} ({ratio:.2f}x)")


if __name__ == "__main__":
    main()
