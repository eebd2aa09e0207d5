"""GPU partitions (``hardware.partitions``): the mode, the logical GPUs and their memory, the
replica layout, and the exact amd-smi commands, from real detection paths (sysfs trees,
amd-smi replays) and from inventories shaped like what amd-smi prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from instinct_serve.errors import UsageError
from instinct_serve.gather.detect import detect
from instinct_serve.hardware.inventory import Gpu, GpuInventory
from instinct_serve.hardware.partitions import (
    Mode,
    Step,
    layout,
    normalize,
    paired,
    replicas,
    spanning_warning,
    splits_a_gpu,
    switch_steps,
)
from instinct_serve.hardware.profiles import PROFILES, Partitioning
from instinct_serve.hardware.target import resolve_target
from instinct_serve.hosts import LocalHost
from instinct_serve.options import PlanOptions
from tests.hardware import sysfs_tree
from tests.hardware.conftest import MIB
from tests.hardware.sysfs_tree import mi300x, mi355x, partitioned
from tests.infra.fakebin import FakeBin

MI300X = PROFILES["mi300x"].partitioning
MI355X = PROFILES["mi355x"].partitioning
MI300X_CPX_SHARE = 196592 * MIB // 8  # = 25767706624 B, KFD's figure in ROCm issue 4750


def cpx_host(root: Path, memory: str = "NPS4", gpus: int = 8) -> Path:
    """8x MI300X in CPX: 64 KFD nodes, 8 per physical GPU."""
    specs = [p for g in range(gpus) for p in partitioned(mi300x(g), 8, "CPX", memory, 128 + 8 * g)]
    return sysfs_tree.build(root, specs)


def amd_smi_cpx(whole_memory: bool = True) -> GpuInventory:
    """What amd-smi shows for 2x MI300X in CPX/NPS4: the mode on partition 0 only ("N/A" on
    the others), the PCI function numbering the partition, the whole GPU's memory on each."""
    gpus = [
        Gpu(
            index=8 * g + p,
            name="AMD Instinct MI300X",
            gfx_version="gfx942",
            vram_total_bytes=196592 * MIB if whole_memory else None,
            bdf=f"0000:{0x0C + 0x16 * g:02x}:00.{p}",
            partition="CPX/NPS4" if p == 0 else None,
        )
        for g in range(2)
        for p in range(8)
    ]
    return GpuInventory(gpus=gpus, source="amd-smi")


# ------------------------------------------------------------------ reading the mode


def test_mode_labels() -> None:
    assert Mode.parse("CPX/NPS4") == Mode("CPX", "NPS4")
    assert Mode.parse("cpx") == Mode("CPX")
    assert Mode.parse("N/A") is None and Mode.parse(None) is None
    assert Mode("DPX", "NPS2").label == "DPX/NPS2" and Mode("CPX").label == "CPX"


def test_eight_mi300x_in_cpx_nps4_from_sysfs(tools: FakeBin, root: Path) -> None:
    """64 logical GPUs of 24 GiB (the KFD share), 8 per physical GPU, in HIP order."""
    inv = detect(LocalHost(), sysfs_root=str(cpx_host(root)))
    assert inv.gpu_count == 64 and inv.vram_bytes == MI300X_CPX_SHARE
    assert {g.compute_units for g in inv.gpus} == {38}  # one XCD of 38 CUs each
    where = layout(inv)
    assert where.mode == Mode("CPX", "NPS4")
    assert (where.per_gpu, where.physical_gpus, where.partitioned) == (8, 8, True)
    assert where.groups[0] == list(range(8)) and where.groups[7] == list(range(56, 64))
    assert where.physical_memory == 196592 * MIB
    assert where.device_memory(1) == 196592 * MIB  # the same GPUs in SPX
    doc = where.to_dict()
    assert (doc["logical_gpus"], doc["memory_per_device_gib"]) == (64, 24.0)


def test_eight_mi300x_in_spx(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(root, [mi300x(i) for i in range(8)])
    where = layout(detect(LocalHost(), sysfs_root=str(root)))
    assert where.mode == Mode("SPX", "NPS1") and not where.partitioned
    assert where.groups == [[i] for i in range(8)]


def test_eight_mi355x_in_cpx(tools: FakeBin, root: Path) -> None:
    """MI355X: 8 XCDs of 32 CUs, 288 GB: CPX gives 64 GPUs of 36 GiB."""
    specs = [p for g in range(8) for p in partitioned(mi355x(g), 8, "CPX", "NPS1", 128 + 8 * g)]
    inv = detect(LocalHost(), sysfs_root=str(sysfs_tree.build(root, specs)))
    where = layout(inv)
    assert where.mode == Mode("CPX", "NPS1") and where.per_gpu == 8
    assert {g.compute_units for g in inv.gpus} == {32}
    assert inv.vram_bytes == 294896 * MIB // 8
    assert where.to_dict()["memory_per_device_gib"] == 36.0


def test_partitions_printing_n_a_take_their_gpus_mode() -> None:
    """amd-smi prints the mode on partition 0 only; the PCI function numbers partitions."""
    where = layout(amd_smi_cpx())
    assert where.mode == Mode("CPX", "NPS4")
    assert where.groups == [list(range(8)), list(range(8, 16))]


def test_the_mode_is_read_from_compute_units_when_no_label_says_it() -> None:
    """An MI308X partition with 20 of the GPU's 80 CUs is one of 4: CPX (NPS1, its only
    memory mode)."""
    gpu = Gpu(0, "AMD Instinct MI308X", "gfx942", bdf="0000:23:00.0", compute_units=20)
    where = layout(GpuInventory(gpus=[gpu]))
    assert where.mode == Mode("CPX", "NPS1") and where.per_gpu == 4 and where.groups == [[0]]
    whole = Gpu(0, "AMD Instinct MI308X", "gfx942", compute_units=80)
    assert layout(GpuInventory(gpus=[whole])).mode == Mode("SPX", "NPS1")


def test_no_addresses_group_consecutive_runs() -> None:
    gpus = [Gpu(i, "AMD Instinct MI300X", "gfx942", partition="DPX/NPS2") for i in range(16)]
    where = layout(GpuInventory(gpus=gpus))
    assert where.per_gpu == 2 and where.groups[:2] == [[0, 1], [2, 3]]


def test_mixed_modes_are_said() -> None:
    gpus = [
        Gpu(0, "AMD Instinct MI300X", "gfx942", bdf="0000:0c:00.0", partition="SPX/NPS1"),
        Gpu(1, "AMD Instinct MI300X", "gfx942", bdf="0000:22:00.0", partition="CPX/NPS1"),
    ]
    assert "different partition modes" in layout(GpuInventory(gpus=gpus)).notes[0]


# ------------------------------------------------------------------ per-partition memory


def test_a_partition_reporting_the_whole_gpu_gets_its_share() -> None:
    inv, notes = normalize(amd_smi_cpx())
    assert {g.vram_total_bytes for g in inv.gpus} == {MI300X_CPX_SHARE}
    assert {g.partition for g in inv.gpus} == {"CPX/NPS4"}
    assert any("whole GPU's memory" in n and "1/8" in n for n in notes)
    assert any("14 partition(s) reported no mode" in n for n in notes)
    missing, notes = normalize(amd_smi_cpx(whole_memory=False))
    assert missing.vram_bytes == MI300X_CPX_SHARE and any("no memory" in n for n in notes)


def test_the_kfd_share_and_unpartitioned_gpus_stay() -> None:
    spx = GpuInventory(gpus=[Gpu(0, "AMD Instinct MI300X", "gfx942", 196592 * MIB)])
    assert normalize(spx) == (spx, [])
    shared = [
        Gpu(i, "AMD Instinct MI300X", "gfx942", MI300X_CPX_SHARE, partition="CPX/NPS4")
        for i in range(8)
    ]
    inv, _ = normalize(GpuInventory(gpus=shared))
    assert inv.vram_bytes == MI300X_CPX_SHARE


def test_the_target_plans_a_cpx_partition_with_its_memory_not_the_profiles() -> None:
    """A detected MI300X partition is named "AMD Instinct MI300X" like the whole GPU: the
    profile's 192 GiB must not reach the plan; each partition has 24 GiB."""
    target = resolve_target(PlanOptions.parse({}), amd_smi_cpx)
    assert target.inventory.gpu_count == 16
    assert target.inventory.vram_bytes == MI300X_CPX_SHARE
    assert any("1/8 of an AMD Instinct MI300X" in n for n in target.notes)
    picked = resolve_target(PlanOptions.parse({"gpus": [8, 9]}), amd_smi_cpx)
    assert picked.inventory.vram_bytes == MI300X_CPX_SHARE
    assert {g.partition for g in picked.inventory.gpus} == {"CPX/NPS4"}


# ------------------------------------------------------------------ endpoints on partitions


def test_replica_layouts() -> None:
    cpx = [list(range(g * 8, g * 8 + 8)) for g in range(8)]
    assert len(replicas(cpx, 1)) == 64 and replicas(cpx, 1)[9] == [9]
    assert replicas(cpx, 2)[:2] == [[0, 1], [2, 3]] and len(replicas(cpx, 2)) == 32
    assert replicas(cpx, 8) == cpx  # one endpoint per physical GPU, on its 8 partitions
    assert replicas(cpx, 16) == [list(range(i, i + 16)) for i in range(0, 64, 16)]
    spx = [[i] for i in range(8)]
    assert replicas(spx, 1) == spx
    assert replicas(spx, 2) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert replicas(spx, 8) == [list(range(8))] and replicas(spx, 16) == []
    mi300a_cpx = [list(range(g * 6, g * 6 + 6)) for g in range(4)]
    assert replicas(mi300a_cpx, 4) == [
        [0, 1, 2, 3],
        [6, 7, 8, 9],
        [12, 13, 14, 15],
        [18, 19, 20, 21],
    ]
    with pytest.raises(UsageError):
        replicas(spx, 0)


def test_a_tp_group_never_splits_a_gpu_between_groups() -> None:
    assert not splits_a_gpu(4, 8) and not splits_a_gpu(16, 8) and not splits_a_gpu(8, 1)
    assert splits_a_gpu(8, 6)  # MI300A in CPX: 6 + 2 of the next GPU


def test_one_model_on_a_whole_gpus_partitions_is_advised_against() -> None:
    where = layout(amd_smi_cpx())
    assert spanning_warning(where, 4) is None
    whole = spanning_warning(where, 8)
    assert whole is not None and "all of a GPU's CPX partitions" in whole and "TP 1" in whole
    two = spanning_warning(where, 16)
    assert two is not None and "2 GPUs'" in two and "TP 2" in two


# ------------------------------------------------------------------ changing the mode


def shells(current: Mode | None, target: Mode, part: object = MI300X) -> list[str]:
    return [s.shell for s in switch_steps(part, current, target)]  # type: ignore[arg-type]


def test_spx_to_cpx_nps4_keeps_every_step_valid() -> None:
    """CPX first (it runs with NPS1), then NPS4, the driver reload NPS needs, and CPX again
    (a reload puts the GPUs back in SPX)."""
    assert shells(Mode("SPX", "NPS1"), Mode("CPX")) == [
        "sudo amd-smi set --gpu all --compute-partition CPX",
        "sudo amd-smi set --gpu all --memory-partition NPS4",
        "sudo modprobe -r amdgpu",
        "sudo modprobe amdgpu",
        "sudo amd-smi set --gpu all --compute-partition CPX",
    ]
    steps = switch_steps(MI300X, Mode("SPX", "NPS1"), Mode("CPX", "NPS4"))  # type: ignore[arg-type]
    assert steps[1].argv == ("amd-smi", "set", "--gpu", "all", "--memory-partition", "NPS4")
    assert steps[1].input == "Y\n"  # pre-7.0 amd-smi asks before an NPS change
    assert "every GPU" in steps[1].why


def test_back_to_spx_and_same_memory_changes() -> None:
    assert shells(Mode("CPX", "NPS4"), Mode("SPX")) == [
        "sudo amd-smi set --gpu all --memory-partition NPS1",
        "sudo modprobe -r amdgpu",
        "sudo modprobe amdgpu",
        "sudo amd-smi set --gpu all --compute-partition SPX",
    ]
    assert shells(Mode("SPX", "NPS1"), Mode("CPX", "NPS1")) == [
        "sudo amd-smi set --gpu all --compute-partition CPX"
    ]
    assert shells(Mode("CPX", "NPS4"), Mode("CPX", "NPS4")) == []
    # no MI300X compute mode takes both NPS2 and NPS4: by way of NPS1
    assert shells(Mode("DPX", "NPS2"), Mode("CPX", "NPS4")) == [
        "sudo amd-smi set --gpu all --memory-partition NPS1",
        "sudo modprobe -r amdgpu",
        "sudo modprobe amdgpu",
        "sudo amd-smi set --gpu all --compute-partition CPX",
        "sudo amd-smi set --gpu all --memory-partition NPS4",
        "sudo modprobe -r amdgpu",
        "sudo modprobe amdgpu",
        "sudo amd-smi set --gpu all --compute-partition CPX",
    ]
    unknown = shells(None, Mode("CPX", "NPS4"))
    assert unknown[0].endswith("--memory-partition NPS4") and unknown[-1].endswith("CPX")


def test_invalid_modes_are_refused_with_the_valid_ones() -> None:
    with pytest.raises(UsageError) as err:
        switch_steps(MI300X, None, Mode("SPX", "NPS4"))  # type: ignore[arg-type]
    assert err.value.id == "bad_partition_mode" and "NPS1" in (err.value.fix or "")
    with pytest.raises(UsageError) as err:
        switch_steps(MI355X, None, Mode("CPX", "NPS4"))  # type: ignore[arg-type]
    assert "NPS1 or NPS2" in (err.value.fix or "")
    with pytest.raises(UsageError) as err:
        switch_steps(MI300X, None, Mode("TPX"))  # type: ignore[arg-type]
    assert "SPX, DPX, QPX, CPX" in (err.value.fix or "")


def test_amds_pairings() -> None:
    assert [m.label for m in paired(MI300X)] == ["SPX/NPS1", "DPX/NPS2", "QPX/NPS1", "CPX/NPS4"]  # type: ignore[arg-type]
    assert [m.label for m in paired(MI355X)][-1] == "CPX/NPS1"  # type: ignore[arg-type]
    mi300a = PROFILES["mi300a"].partitioning
    assert mi300a is not None
    assert [m.label for m in paired(mi300a)] == ["SPX/NPS1", "TPX/NPS1", "CPX/NPS1"]


def _run(part: Partitioning, state: Mode, steps: list[Step]) -> Mode:
    """Replay the steps on a model of the GPU: a compute mode is set only with a memory mode
    it takes; a memory mode only with a compute mode that takes it, pending until the driver
    reloads; a reload comes back in SPX (CPX when the memory mode needs it)."""
    compute, memory, pending = state.compute, state.memory, None
    takes = {m.name: m.memory for m in part.modes}
    for step in steps:
        argv = step.argv
        if argv[:2] == ("amd-smi", "set") and argv[-2] == "--compute-partition":
            assert memory in takes[argv[-1]], (argv, memory)
            compute = argv[-1]
        elif argv[:2] == ("amd-smi", "set") and argv[-2] == "--memory-partition":
            assert argv[-1] in takes[compute], (argv, compute)
            pending = argv[-1]
        elif argv == ("modprobe", "amdgpu"):
            memory, pending = pending or memory, None
            compute = "SPX" if memory in takes["SPX"] else part.modes[-1].name
        else:
            assert argv == ("modprobe", "-r", "amdgpu"), argv
    return Mode(compute, memory)


@pytest.mark.parametrize("key", sorted(k for k, p in PROFILES.items() if p.partitioning))
def test_every_switch_arrives_through_valid_modes(key: str) -> None:
    part = PROFILES[key].partitioning
    assert part is not None
    modes = [Mode(m.name, nps) for m in part.modes for nps in m.memory]
    for start in modes:
        for target in modes:
            steps = switch_steps(part, start, target)
            assert _run(part, start, steps) == target, (start, target, steps)
            assert (steps == []) == (start == target)
