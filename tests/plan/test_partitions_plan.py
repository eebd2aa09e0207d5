"""Planning on partitioned GPUs (issue 16): 8x MI300X and 8x MI355X unpartitioned, 8x MI300X
in CPX/NPS4 from a sysfs tree (64 logical GPUs), and the MI308X CPX capture replayed through
a fake amd-smi. The plan uses each partition's own memory, keeps a TP group on one GPU's
partitions, says how many endpoints the host holds (``partitions.replica_gpus``), and
``plan --list`` puts the modes side by side with the exact commands to switch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from instinct_serve.errors import InstinctError
from instinct_serve.gather.choices import ChoiceList, plan_choices
from instinct_serve.gather.detect import detect
from instinct_serve.gather.plan import make_plan
from instinct_serve.hardware.inventory import GpuInventory
from instinct_serve.hosts import LocalHost
from instinct_serve.options import PlanOptions
from instinct_serve.plan.model import LaunchPlan
from tests.hardware import sysfs_tree
from tests.hardware.conftest import STATIC, fixture
from tests.hardware.sysfs_tree import GpuSpec, mi300x, partitioned
from tests.infra.fakebin import FakeBin

MIB = 2**20
HF = "/srv/hf-cache"
SMALL = "Qwen/Qwen3-8B"  # 16 GB of bf16 weights: one 24 GiB CPX partition holds it
LARGE = "meta-llama/Llama-3.3-70B-Instruct"  # 141 GB: a whole MI300X's 8 CPX partitions
CPX_SHARE = 196592 * MIB // 8
TO_CPX_NPS4 = [
    "sudo amd-smi set --gpu all --compute-partition CPX",
    "sudo amd-smi set --gpu all --memory-partition NPS4",
    "sudo modprobe -r amdgpu",
    "sudo modprobe amdgpu",
    "sudo amd-smi set --gpu all --compute-partition CPX",
]
TO_SPX = [
    "sudo amd-smi set --gpu all --memory-partition NPS1",
    "sudo modprobe -r amdgpu",
    "sudo modprobe amdgpu",
    "sudo amd-smi set --gpu all --compute-partition SPX",
]


def opts(**kw: Any) -> PlanOptions:
    kw.setdefault("hf_cache", HF)
    return PlanOptions(**kw)


def plan(inventory: GpuInventory | None = None, **kw: Any) -> LaunchPlan:
    return make_plan(opts(**kw), inventory=inventory).plan


def modes(listing: ChoiceList) -> dict[str, Any]:
    return {m.mode: m for m in listing.partition_modes}


@pytest.fixture
def cpx_inventory(tools: FakeBin, root: Path) -> GpuInventory:
    """8x MI300X in CPX/NPS4 as the kernel shows them: 64 KFD nodes of 24 GiB."""
    specs = [p for g in range(8) for p in partitioned(mi300x(g), 8, "CPX", "NPS4", 128 + 8 * g)]
    return detect(LocalHost(), sysfs_root=str(sysfs_tree.build(root, specs)))


# ------------------------------------------------------------------ unpartitioned nodes


@pytest.mark.parametrize(("gpu", "gib"), [("mi300x", 191.98), ("mi355x", 287.98)])
def test_eight_unpartitioned_gpus_hold_eight_tp1_endpoints(gpu: str, gib: float) -> None:
    p = plan(gpu=gpu, model=SMALL)
    assert p.tensor_parallel_size == 1 and p.gpu_indices is None
    part = p.partitions
    assert part is not None
    assert (part["mode"], part["partitioned"], part["memory_per_device_gib"]) == (
        "SPX/NPS1",
        False,
        gib,
    )
    assert part["replica_gpus"] == [[i] for i in range(8)] and part["replicas"] == 8
    assert part["note"].startswith("8 endpoint(s) of TP 1")


def test_a_larger_tp_on_unpartitioned_gpus_takes_runs_of_gpus() -> None:
    p = plan(gpu="mi300x", model=LARGE)  # latency: TP 2 holds the full context
    assert p.partitions is not None and p.tensor_parallel_size == 2
    assert p.partitions["replica_gpus"] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_plan_list_on_eight_mi300x_puts_every_mode_side_by_side() -> None:
    rows = modes(plan_choices(opts(gpu="mi300x", model=SMALL)))
    assert list(rows) == ["SPX/NPS1", "DPX/NPS2", "QPX/NPS1", "CPX/NPS4"]
    spx, cpx = rows["SPX/NPS1"], rows["CPX/NPS4"]
    assert spx.current and spx.commands == [] and (spx.tp, spx.replicas) == (1, 8)
    assert not cpx.current and cpx.commands == TO_CPX_NPS4
    assert (cpx.logical_gpus, cpx.memory_per_device_gib) == (64, 24.0)
    assert (cpx.tp, cpx.replicas, cpx.verdict) == (1, 64, "tight")
    assert rows["QPX/NPS1"].commands == ["sudo amd-smi set --gpu all --compute-partition QPX"]
    assert rows["DPX/NPS2"].memory_per_device_gib == 95.99
    assert "NPS2" in rows["DPX/NPS2"].steps[1]["command"]
    large = modes(plan_choices(opts(gpu="mi300x", model=LARGE)))
    assert (large["SPX/NPS1"].tp, large["SPX/NPS1"].replicas) == (1, 8)
    assert (large["CPX/NPS4"].tp, large["CPX/NPS4"].replicas) == (8, 8)


def test_plan_list_on_eight_mi355x() -> None:
    rows = modes(plan_choices(opts(gpu="mi355x", model=SMALL)))
    assert list(rows) == ["SPX/NPS1", "DPX/NPS2", "QPX/NPS1", "CPX/NPS1"]
    cpx = rows["CPX/NPS1"]
    assert (cpx.logical_gpus, cpx.memory_per_device_gib, cpx.tp, cpx.replicas) == (
        64,
        36.0,
        1,
        64,
    )
    assert cpx.commands == ["sudo amd-smi set --gpu all --compute-partition CPX"]


def test_gpus_without_partition_modes_list_none() -> None:
    assert plan_choices(opts(gpu="mi250x", model=SMALL)).partition_modes == []


# ------------------------------------------------------------------ 8x MI300X in CPX/NPS4


def test_cpx_plan_uses_the_partitions_memory(cpx_inventory: GpuInventory) -> None:
    """One endpoint per partition (TP 1: 16 GB of weights in 24 GiB). The plan's image (vLLM
    0.27.1) runs Qwen3-8B, a dense model, on the V2 model runner, which charges no graph
    estimate (overhead_table ``runner``): TP 1 leaves enough for a safe verdict."""
    p = plan(cpx_inventory, model=SMALL, tp=1)
    assert p.vram_gb_per_gpu == round(CPX_SHARE / 1e9, 2) == 25.77
    assert p.gpu_count == 64 and p.tensor_parallel_size == 1 and p.verdict == "safe"
    assert p.gpu_indices is None  # TP 1: vLLM takes the first visible partition
    part = p.partitions
    assert part is not None
    assert (part["mode"], part["physical_gpus"], part["partitions_per_gpu"]) == ("CPX/NPS4", 8, 8)
    assert part["replicas"] == 64 and part["replica_gpus"][9] == [9]
    assert part["gpu_groups"][1] == list(range(8, 16))
    assert "64 logical GPUs of 24 GiB on 8 GPU(s)" in part["note"]
    # throughput: the smallest TP with safe headroom, here one partition per replica
    roomy = plan(cpx_inventory, model=SMALL, objective="throughput")
    assert roomy.tensor_parallel_size == 1 and roomy.partitions is not None
    assert roomy.partitions["replica_gpus"][:2] == [[0], [1]]
    assert roomy.partitions["replicas"] == 64


def test_cpx_tp_groups_stay_on_one_gpus_partitions(cpx_inventory: GpuInventory) -> None:
    p = plan(cpx_inventory, model=SMALL)  # latency: more than one partition holds more context
    part = p.partitions
    assert part is not None
    tp = p.tensor_parallel_size
    assert 1 < tp <= 8
    groups = [set(g) for g in part["gpu_groups"]]
    assert all(any(set(r) <= g for g in groups) for r in part["replica_gpus"])
    assert part["replicas"] == 64 // tp
    assert p.gpu_indices == part["replica_gpus"][0]
    assert p.env["HIP_VISIBLE_DEVICES"] == ",".join(map(str, part["replica_gpus"][0]))


def test_a_model_needing_a_whole_gpu_takes_its_eight_partitions(
    cpx_inventory: GpuInventory,
) -> None:
    """Latency grows the TP to one GPU's partitions, not to all 64; AMD's advice against
    partitioning for one model is said, with the SPX alternative."""
    p = plan(cpx_inventory, model=LARGE)
    assert p.tensor_parallel_size == 8 and p.gpu_indices == list(range(8))
    assert p.partitions is not None and p.partitions["replicas"] == 8
    assert any("all of a GPU's CPX partitions" in w and "TP 1" in w for w in p.warnings)


def test_plan_list_on_a_cpx_host_offers_spx_back(cpx_inventory: GpuInventory) -> None:
    rows = modes(plan_choices(opts(model=SMALL), inventory=cpx_inventory))
    assert next(iter(rows)) == "CPX/NPS4" and rows["CPX/NPS4"].current
    assert rows["CPX/NPS4"].commands == []
    spx = rows["SPX/NPS1"]
    assert spx.commands == TO_SPX and spx.memory_per_device_gib == 191.98
    assert (spx.tp, spx.replicas) == (1, 8)


def test_recipe_tp_for_whole_gpus_is_not_used_on_partitions(cpx_inventory: GpuInventory) -> None:
    """The 235B recipe states TP 8 for an MI300X node (whole GPUs); on 24 GiB partitions the
    weights decide: more than one GPU's partitions, groups of whole GPUs."""
    p = plan(cpx_inventory, model="Qwen/Qwen3-235B-A22B-Instruct-2507")
    assert p.tensor_parallel_size % 8 == 0 and p.tensor_parallel_size > 8
    assert p.partitions is not None
    assert all(len(r) == p.tensor_parallel_size for r in p.partitions["replica_gpus"])
    assert any("GPUs' CPX partitions" in w for w in p.warnings)


# ------------------------------------------------------------------ the MI308X capture


MI308X_SHARE = 48 * 2**30  # the fixture's KFD figure: MI308X memory has no public source


def mi308x_host(fakebin: FakeBin, root: Path, kfd_memory: bool = True) -> GpuInventory:
    """amd-smi replays the MI308X capture (20 of 80 CUs, no mode, no memory); sysfs has
    the partition's KFD memory bank, without the partition files (older kernels)."""
    fakebin.add(
        "amd-smi", {STATIC: fixture("amd-smi_list_and_static_asic_text_MI308X_changelog.txt")}
    )
    if kfd_memory:
        sysfs_tree.build(
            root,
            [GpuSpec(90402, 0x74A2, "0000:23:00.0", 128, 4 * MI308X_SHARE,
                     bank_bytes=MI308X_SHARE, simd_count=80, card=1)],
        )  # fmt: skip
    return detect(LocalHost(), sysfs_root=str(root))


def test_mi308x_cpx_capture_plans_one_partition(tools: FakeBin, root: Path) -> None:
    inv = mi308x_host(tools, root)
    assert inv.gpus[0].compute_units == 20 and inv.gpus[0].partition is None
    p = plan(inv, model=SMALL)
    assert p.vram_gb_per_gpu == round(MI308X_SHARE / 1e9, 2)
    assert p.tensor_parallel_size == 1
    part = p.partitions
    assert part is not None
    assert (part["mode"], part["partitions_per_gpu"], part["replica_gpus"]) == (
        "CPX/NPS1",
        4,
        [[0]],
    )
    rows = modes(plan_choices(opts(model=SMALL), inventory=inv))
    assert list(rows) == ["CPX/NPS1", "SPX/NPS1"]
    assert rows["SPX/NPS1"].commands == ["sudo amd-smi set --gpu all --compute-partition SPX"]
    assert rows["SPX/NPS1"].memory_per_device_gib == 192.0  # 4 partitions' shares


def test_mi308x_without_a_memory_figure_is_not_guessed(tools: FakeBin, root: Path) -> None:
    inv = mi308x_host(tools, root, kfd_memory=False)
    assert inv.gpus[0].vram_total_bytes is None
    with pytest.raises(InstinctError) as err:
        plan(inv, model=SMALL)
    assert err.value.id == "no_gpu_memory"
    named = make_plan(opts(model=SMALL, gpu="mi308x", vram_gb=40)).plan
    assert named.vram_gb_per_gpu == 40.0


def test_the_summary_says_the_partitions_only_when_partitioned(
    cpx_inventory: GpuInventory,
) -> None:
    from instinct_serve.plan.summary import summary_rows

    cpx = dict(summary_rows(make_plan(opts(model=SMALL, tp=1), inventory=cpx_inventory)))
    assert cpx["Partitions"].startswith("CPX/NPS4: 64 logical GPUs of 24 GiB")
    assert "64 endpoint(s), one per partition" in cpx["Partitions"]
    assert "Partitions" not in dict(summary_rows(make_plan(opts(model=SMALL, gpu="mi300x"))))
