"""``instinct detect`` end to end: the CLI's entry point, in-process (``run_instinct``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.hardware import sysfs_tree
from tests.hardware.conftest import METRIC, PARTITION, STATIC, VERSION, sample
from tests.hardware.sysfs_tree import mi300x, mi355x
from tests.infra import tables
from tests.infra.cli import run_instinct
from tests.infra.fakebin import FakeBin


def instinct(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "160", "NO_COLOR": "1"}
    return run_instinct(args, env=env, timeout=60)


def test_json_with_gpus_exits_0(tools: FakeBin, root: Path) -> None:
    tools.add(
        "amd-smi",
        {
            STATIC: sample("amd-smi_static_MI300X_x8_gpu_data.json"),
            METRIC: sample("amd-smi_metric_mem-usage_MI300X_x8_gpu_data.json"),
            PARTITION: sample("amd-smi_static_partition_MI300X_x8_gpu_data.json"),
            VERSION: sample("amd-smi_version_rocm7.0.0.json"),
        },
    )
    result = instinct("detect", "--json", "--sysfs-root", str(root))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["gfx_version"], doc["gpu_count"], doc["vram_gb"]) == ("gfx942", 8, 206.14)
    assert (doc["rocm_version"], doc["source"], doc["mixed"]) == ("7.0.0", "amd-smi", False)
    assert set(doc["gpus"][0]) >= {
        "index",
        "name",
        "market_name",
        "gfx_version",
        "vram_total_gb",
        "vram_used_gb",
        "bdf",
        "partition",
    }
    assert result.stderr == ""


def test_json_without_gpus_exits_3_and_still_prints(tools: FakeBin, root: Path) -> None:
    result = instinct("detect", "--json", "--sysfs-root", str(root))
    assert result.returncode == 3
    doc = json.loads(result.stdout)
    assert (doc["gfx_version"], doc["gpu_count"], doc["source"]) == ("unknown", 0, "none")
    assert "lsmod | grep amdgpu" in doc["hint"]
    assert "amd-smi not found" in doc["warnings"]


def test_human_view_mixed_host(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(root, [mi300x(0), mi355x(1)])
    result = instinct("detect", "--sysfs-root", str(root))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "AMD Instinct MI300X" in out and "AMD Instinct MI355X" in out
    assert "192 GiB (206.1 GB)" in out and "288 GiB (309.2 GB)" in out
    assert (
        "2 GPUs, mixed: 1 x AMD Instinct MI300X (gfx942), 1 x AMD Instinct MI355X (gfx950)" in out
    )
    assert "smallest VRAM 192 GiB (206.1 GB); ROCm unknown; source: sysfs" in out
    assert "amd-smi not found; used sysfs" in result.stderr  # warnings on stderr only
    assert "amd-smi not found" not in out


def test_human_view_no_gpu_exits_3(tools: FakeBin, root: Path) -> None:
    result = instinct("detect", "--sysfs-root", str(root))
    assert result.returncode == 3
    assert "No AMD GPU found." in result.stdout
    assert "lsmod | grep amdgpu" in result.stderr


def test_bad_host_is_a_usage_error_without_traceback(tools: FakeBin) -> None:
    result = instinct("detect", "--json", "--host", "-oProxyCommand=evil")
    assert result.returncode == 2
    assert json.loads(result.stdout)["error"]["id"] == "bad_host"
    assert "Traceback" not in result.stderr


def test_the_gpu_table_through_a_pipe_and_at_80_columns(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(root, [mi300x(0), mi355x(1)])
    env = {**os.environ, "COLUMNS": "80"}
    piped = run_instinct(["detect", "--sysfs-root", str(root)], env=env).stdout
    tables.one_line(piped, "0000:15:00.0", "AMD Instinct MI355X", "gfx950", "288 GiB (309.2 GB)")
    tables.one_line(piped, "NAME", "GFX", "VRAM TOTAL", "PCI", "PARTITION")
    tty = {**env, "TTY_COMPATIBLE": "1"}
    shown = run_instinct(["detect", "--sysfs-root", str(root)], env=tty).stdout
    tables.fits(shown, "AMD Instinct MI355X", "288 GiB (309.2 GB)")
