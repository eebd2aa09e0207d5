"""Source fall-through: hangs, failures, odd install paths; where the ROCm version comes from."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from instinct_serve.gather.detect import detect, detect_rocm_version
from instinct_serve.hosts import LocalHost
from tests.hardware import sysfs_tree
from tests.hardware.conftest import (
    HIP_ROCMPATH,
    HIP_VERSION,
    ROCM_QUERY,
    STATIC,
    VERSION,
    sample,
)
from tests.hardware.sysfs_tree import mi300x
from tests.infra.fakebin import FakeBin, Reply, write_fake


def test_hung_amd_smi_times_out_and_is_not_asked_again(tools: FakeBin, root: Path) -> None:
    tools.add("amd-smi", {}, default=Reply(stdout="{}", delay_s=30))
    tools.add("rocm-smi", {ROCM_QUERY: sample("rocm-smi_MI300X_x4.json")})
    start = time.monotonic()
    inv = detect(LocalHost(), sysfs_root=str(root), timeout_s=1.0)
    assert time.monotonic() - start < 10
    assert (inv.source, inv.gpu_count, inv.gfx_version) == ("rocm-smi", 4, "gfx942")
    assert inv.vram_bytes == 206141652992
    assert inv.warnings[0] == "amd-smi timed out after 1 s; used rocm-smi"
    assert tools.calls("amd-smi") == [["static", "--asic", "--bus", "--vram", "--json"]]


def test_failing_amd_smi_reports_its_last_words(tools: FakeBin, root: Path) -> None:
    tools.add(
        "amd-smi",
        {STATIC: ("", "ERROR:root:Unable to detect any GPU devices, check amdgpu version\n", 255)},
    )
    sysfs_tree.build(root, [mi300x(0)])
    inv = detect(LocalHost(), sysfs_root=str(root))
    assert inv.source == "sysfs"
    assert inv.warnings[0] == (
        "amd-smi static --asic --bus --vram --json exited 255: ERROR:root:Unable to detect "
        "any GPU devices, check amdgpu version; used sysfs"
    )


@pytest.mark.parametrize("answer", ['{"gpu_data": []}', '{"cpu_data": [{"cpu": 0}]}', "[]"])
def test_amd_smi_reporting_no_gpu_falls_through(tools: FakeBin, root: Path, answer: str) -> None:
    tools.add("amd-smi", {STATIC: answer + "\n"})
    tools.add("rocm-smi", {ROCM_QUERY: "{}\n"})
    sysfs_tree.build(root, [mi300x(0)])
    inv = detect(LocalHost(), sysfs_root=str(root))
    assert inv.source == "sysfs"
    assert inv.warnings[:2] == [
        "amd-smi reported no GPU; used sysfs",
        "rocm-smi reported no GPU; used sysfs",
    ]


def test_tool_in_opt_rocm_bin_when_not_on_path(tools: FakeBin, root: Path) -> None:
    """Over ssh a non-login shell often lacks /opt/rocm/bin on PATH: it is tried too."""
    bin_dir = root / "opt/rocm/bin"
    write_fake(
        bin_dir,
        "amd-smi",
        {
            STATIC: sample("amd-smi_static_MI355X_x8_gpu_data.json"),
            VERSION: sample("amd-smi_version_rocm7.0.0.json"),
        },
    )
    inv = detect(LocalHost(), sysfs_root=str(root))
    assert (inv.source, inv.gpu_count, inv.rocm_version) == ("amd-smi", 8, "7.0.0")
    log = (bin_dir / ".amd-smi.calls").read_text().splitlines()
    assert log[0] == '["static", "--asic", "--bus", "--vram", "--json"]'
    assert tools.calls("amd-smi")[0] == ["static", "--asic", "--bus", "--vram", "--json"]


def test_rocm_version_from_the_info_file(tools: FakeBin, root: Path) -> None:
    (root / "opt/rocm/.info").mkdir(parents=True)
    (root / "opt/rocm/.info/version").write_text("6.4.1-111\n")
    assert detect_rocm_version(LocalHost(), str(root)) == "6.4.1"
    assert tools.calls("hipconfig") == []


def test_rocm_version_from_hipconfig_rocmpath(tools: FakeBin, root: Path) -> None:
    install = root / "opt/rocm-6.3.3"
    (install / ".info").mkdir(parents=True)
    (install / ".info/version").write_text("6.3.3-74\n")
    tools.add("hipconfig", {HIP_ROCMPATH: "/opt/rocm-6.3.3"})
    assert detect_rocm_version(LocalHost(), str(root)) == "6.3.3"


def test_rocm_version_from_the_install_path_name(tools: FakeBin, root: Path) -> None:
    tools.add("hipconfig", {HIP_ROCMPATH: "/opt/rocm-6.2.4\n"})
    assert detect_rocm_version(LocalHost(), str(root)) == "6.2.4"


def test_rocm_version_from_the_hip_version(tools: FakeBin, root: Path) -> None:
    tools.add("hipconfig", {HIP_ROCMPATH: "/opt/rocm\n", HIP_VERSION: "6.4.43482-0f2d60242"})
    assert detect_rocm_version(LocalHost(), str(root)) == "6.4"


def test_rocm_version_unknown(tools: FakeBin, root: Path) -> None:
    assert detect_rocm_version(LocalHost(), str(root)) is None
    assert tools.calls("amd-smi") == [["version", "--json"]]
    assert tools.calls("hipconfig") == [["--rocmpath"]]  # missing: not asked twice


def test_detect_reads_the_version_once_amd_smi_is_known_missing(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(root, [mi300x(0)])
    (root / "opt/rocm/.info").mkdir(parents=True)
    (root / "opt/rocm/.info/version").write_text("7.0.2\n")
    inv = detect(LocalHost(), sysfs_root=str(root))
    assert inv.rocm_version == "7.0.2"
    assert tools.calls("amd-smi") == [["static", "--asic", "--bus", "--vram", "--json"]]
