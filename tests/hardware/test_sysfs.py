"""Detection from a temporary sysfs root (no ROCm tool on the host)."""

from __future__ import annotations

from pathlib import Path

from instinct_serve.gather.detect import NO_GPU_HINT, detect
from instinct_serve.hardware.inventory import GpuInventory
from instinct_serve.hosts import LocalHost
from tests.hardware import sysfs_tree
from tests.hardware.conftest import MIB, STATIC, sample
from tests.hardware.sysfs_tree import GpuSpec, mi300x, mi355x
from tests.infra.fakebin import FakeBin


def inventory(root: Path) -> GpuInventory:
    return detect(LocalHost(), sysfs_root=str(root))


def test_eight_mi300x_and_cpu_nodes(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(root, [mi300x(i) for i in range(8)], cpu_nodes=2)
    inv = inventory(root)
    doc = inv.to_dict()
    assert (doc["source"], doc["gfx_version"], doc["gpu_count"]) == ("sysfs", "gfx942", 8)
    assert doc["vram_gib"] == 191.98 and doc["vram_gb"] == 206.14
    assert doc["gpus"][0]["bdf"] == "0000:0c:00.0"
    assert doc["gpus"][7]["bdf"] == "0000:df:00.0"
    assert {g["partition"] for g in doc["gpus"]} == {"SPX/NPS1"}
    assert {g["name"] for g in doc["gpus"]} == {"AMD Instinct MI300X"}
    assert inv.gpus[0].vram_used_bytes == 4976 * MIB
    assert doc["warnings"][:3] == [
        "amd-smi not found; used sysfs",
        "rocm-smi not found; used sysfs",
        "rocminfo not found; used sysfs",
    ]


def test_mixed_gpus(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(root, [mi300x(0), mi300x(1), mi355x(2), mi355x(3)])
    doc = inventory(root).to_dict()
    assert (doc["gfx_version"], doc["mixed"], doc["gpu_count"]) == ("mixed", True, 4)
    assert [g["gfx_version"] for g in doc["gpus"]] == ["gfx942"] * 2 + ["gfx950"] * 2
    assert [g["name"] for g in doc["gpus"]][1:3] == ["AMD Instinct MI300X", "AMD Instinct MI355X"]
    assert doc["vram_gib"] == 191.98  # the smallest GPU sets the pace of a TP group


def test_matches_drm_by_pci_address_when_render_node_is_absent(tools: FakeBin, root: Path) -> None:
    """A KFD node whose render minor has no renderD entry still finds its card by BDF."""
    sysfs_tree.build(root, [mi300x(0, render_minor=200, vram_used_bytes=123 * MIB)])
    (root / "sys/class/drm/renderD200").rename(root / "sys/class/drm/renderD999")
    inv = inventory(root)
    assert inv.gpus[0].vram_used_bytes == 123 * MIB
    assert inv.gpus[0].partition == "SPX/NPS1"


def test_cpx_partitions_use_the_kfd_share(tools: FakeBin, root: Path) -> None:
    """In CPX/NPS1 each of the 8 partitions is a GPU with 1/8 of the memory (KFD banks)."""
    share = 196592 * MIB // 8
    parts = [
        GpuSpec(
            90402,
            0x74A1,
            "0000:0c:00.0",  # partitions share the PCI function
            128 + i,
            196592 * MIB,
            bank_bytes=share,
            card=i + 1,
            compute_partition="CPX",
            memory_partition="NPS1",
        )
        for i in range(8)
    ]
    sysfs_tree.build(root, parts)
    inv = inventory(root)
    assert inv.gpu_count == 8
    assert inv.vram_bytes == share
    assert {g.partition for g in inv.gpus} == {"CPX/NPS1"}


def test_partitioned_tool_answer_is_corrected_from_kfd(tools: FakeBin, root: Path) -> None:
    """amd-smi says CPX but reports the whole device per partition: KFD's share wins."""
    import json

    share = 196592 * MIB // 8
    doc = json.loads(sample("amd-smi_static_MI300X_x8_gpu_data.json"))
    for gpu in doc["gpu_data"]:
        gpu["partition"] = {"accelerator_partition": "CPX", "memory_partition": "NPS1"}
    sysfs_tree.build(root, [mi300x(i, bank_bytes=share) for i in range(8)])
    tools.add("amd-smi", {STATIC: json.dumps(doc)})
    inv = inventory(root)
    assert inv.source == "amd-smi"
    assert inv.vram_bytes == share
    assert any("partitioned (CPX/NPS1)" in w for w in inv.warnings)


def test_drm_devices_without_kfd(tools: FakeBin, root: Path) -> None:
    """amdgpu bound but no KFD node: GPUs listed, with a warning that ROCm cannot use them."""
    sysfs_tree.build(root, [mi300x(0)], cpu_nodes=1)
    kfd = root / "sys/class/kfd"
    for path in sorted(kfd.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    inv = inventory(root)
    assert (inv.source, inv.gpu_count, inv.gfx_version) == ("sysfs", 1, "gfx942")
    assert inv.gpus[0].bdf == "0000:0c:00.0"
    assert any("no KFD compute node" in w for w in inv.warnings)


def test_no_gpu_host(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(root, [], cpu_nodes=2)
    inv = inventory(root)
    doc = inv.to_dict()
    assert doc["gfx_version"] == "unknown" and doc["gpu_count"] == 0 and doc["gpus"] == []
    assert doc["vram_gb"] is None and doc["source"] == "none"
    assert doc["hint"] == NO_GPU_HINT
    assert doc["warnings"][:3] == ["amd-smi not found", "rocm-smi not found", "rocminfo not found"]
    assert doc["warnings"][3].startswith("no AMD GPU in ")


def test_dangling_and_foreign_entries_are_skipped(tools: FakeBin, root: Path) -> None:
    """A card whose device link dangles and a non-AMD VGA card do not disturb detection."""
    sysfs_tree.build(root, [mi300x(0)])
    drm = root / "sys/class/drm"
    (drm / "card9").mkdir()
    (drm / "card9/device").symlink_to(root / "nowhere")
    (drm / "card0/device").mkdir(parents=True)  # a BMC's VGA (ASPEED), as on most servers
    (drm / "card0/device/vendor").write_text("0x1a03\n")
    (drm / "card0/device/uevent").write_text("DRIVER=ast\nPCI_SLOT_NAME=0000:02:00.0\n")
    inv = inventory(root)
    assert [(g.bdf, g.gfx_version) for g in inv.gpus] == [("0000:0c:00.0", "gfx942")]


def test_root_with_spaces_and_quotes(tools: FakeBin, tmp_path: Path) -> None:
    """The root reaches the dump script as an argument, never spliced into its text."""
    root = tmp_path / "my root's; $(echo x)"
    sysfs_tree.build(root, [mi355x(0)])
    inv = inventory(root)
    assert (inv.source, inv.gpu_count, inv.gfx_version) == ("sysfs", 1, "gfx950")
