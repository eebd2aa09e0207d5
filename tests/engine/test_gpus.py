"""``--gpu auto|N``, ``--gpus``, ``--gpu-memory-utilization`` and the OOM hint.

Selection runs over inventories that the real detector builds from captured amd-smi output
(fake ``amd-smi`` on PATH) and from a temporary sysfs tree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from instinct_serve.engine.gpus import (
    oom_hint,
    select,
    select_on_host,
)
from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.gather.detect import AMD_SMI_METRIC, AMD_SMI_STATIC
from instinct_serve.hardware.inventory import GpuInventory
from instinct_serve.hosts import LocalHost
from tests.hardware import sysfs_tree
from tests.infra.fakebin import FakeBin, load_fixture
from tests.infra.paths import LOGS, SMI

SAMPLES = Path(__file__).resolve().parent.parent / "hardware" / "samples"
STATIC = " ".join(AMD_SMI_STATIC)
METRIC = " ".join(AMD_SMI_METRIC)
MIB = 2**20


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    path.mkdir()
    return path


@pytest.fixture
def tools(fakebin: FakeBin) -> FakeBin:
    for name in ("amd-smi", "rocm-smi", "rocminfo", "hipconfig"):
        fakebin.missing(name)
    return fakebin


def busy_metric(used_mib: dict[int, int]) -> str:
    """The MI300X x8 ``metric --mem-usage`` sample with some GPUs made busy."""
    doc = json.loads((SAMPLES / "amd-smi_metric_mem-usage_MI300X_x8_gpu_data.json").read_text())
    for entry in doc["gpu_data"]:
        used = used_mib.get(entry["gpu"])
        if used is not None:
            usage = entry["mem_usage"]
            total = usage["total_vram"]["value"]
            usage["used_vram"]["value"] = used
            usage["free_vram"]["value"] = total - used
    return json.dumps(doc)


# --- selection over amd-smi ----------------------------------------------------------


def test_auto_picks_the_gpu_with_the_most_free_vram(tools: FakeBin, root: Path) -> None:
    used = {i: 150_000 for i in range(8)}
    used[5] = 2_000
    used[3] = 10_000
    tools.add(
        "amd-smi",
        {
            STATIC: (SAMPLES / "amd-smi_static_MI300X_x8_gpu_data.json").read_text(),
            METRIC: busy_metric(used),
        },
    )
    selection, inventory = select_on_host(LocalHost(), sysfs_root=str(root))

    assert inventory.source == "amd-smi"
    assert selection.indexes == [5]
    assert selection.env == {"HIP_VISIBLE_DEVICES": "5"}
    assert selection.low_free == []  # 2 GB used of 192: vLLM's 0.9 fits


def test_an_explicit_busy_gpu_gets_the_low_free_vram_note(tools: FakeBin, root: Path) -> None:
    tools.add(
        "amd-smi",
        {
            STATIC: (SAMPLES / "amd-smi_static_MI300X_x8_gpu_data.json").read_text(),
            METRIC: busy_metric({2: 100_000}),
        },
    )
    selection, _ = select_on_host(LocalHost(), indexes=[2], sysfs_root=str(root))

    assert selection.indexes == [2]
    [note] = selection.low_free
    assert note.startswith("GPU 2 is busy: 97.7 GiB of 192.0 GiB already in use")
    assert "--gpu-memory-utilization to 0.47 or less" in note  # (192-97.7)/192 - 0.02
    with_half = select(
        select_on_host(LocalHost(), indexes=[2], sysfs_root=str(root))[1],
        indexes=[2],
        utilization=0.45,
    )
    assert with_half.low_free == []


def test_captured_default_view_ranks_equal_gpus_by_index(tools: FakeBin, root: Path) -> None:
    tools.add(
        "amd-smi",
        {STATIC: load_fixture(SMI / "amd-smi_default_view_8xMI300X_rocm7.0.0_changelog.txt")},
    )
    selection, inventory = select_on_host(LocalHost(), sysfs_root=str(root))

    assert inventory.gpu_count == 8 and selection.telemetry
    assert selection.indexes == [0]


def test_gpus_group_sets_tensor_parallelism(tools: FakeBin, root: Path) -> None:
    tools.add(
        "amd-smi",
        {STATIC: load_fixture(SMI / "amd-smi_default_view_8xMI300X_rocm7.0.0_changelog.txt")},
    )
    selection, _ = select_on_host(LocalHost(), indexes=[4, 5], sysfs_root=str(root))

    assert selection.visible_devices == "4,5"
    assert selection.tensor_parallel_size == 2
    with pytest.raises(UsageError) as err:
        select_on_host(LocalHost(), indexes=[7, 8], sysfs_root=str(root))
    assert "no GPU with index 8" in err.value.message and err.value.id == "bad_gpus"


# --- selection over sysfs ------------------------------------------------------------


def test_sysfs_counters_select_on_a_single_gpu_host(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(root, [sysfs_tree.mi300x(0, vram_used_bytes=150_000 * MIB)])
    selection, inventory = select_on_host(LocalHost(), sysfs_root=str(root))

    assert inventory.source == "sysfs"
    assert selection.telemetry and selection.indexes == [0]
    assert selection.low_free and "GPU 0 is busy" in selection.low_free[0]


def test_sysfs_counters_are_not_trusted_to_rank_several_gpus(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(
        root,
        [
            sysfs_tree.mi300x(0, vram_used_bytes=190_000 * MIB),
            sysfs_tree.mi300x(1, vram_used_bytes=1_000 * MIB),
        ],
    )
    selection, inventory = select_on_host(LocalHost(), sysfs_root=str(root))

    assert inventory.source == "sysfs" and inventory.gpu_count == 2
    assert not selection.telemetry
    assert selection.indexes == [0]  # not GPU 1, although its counters look freer
    assert "card numbering need not match HIP" in selection.notes[0]
    assert selection.low_free == []  # untrusted counters say nothing about GPU 0


def test_no_gpu_is_not_ready() -> None:
    with pytest.raises(NotReadyError) as err:
        select(GpuInventory())
    assert err.value.id == "no_gpu"


# --- OOM hint ------------------------------------------------------------------------


def test_oom_hint_names_the_retries_and_quotes_the_line(tools: FakeBin, root: Path) -> None:
    tools.add(
        "amd-smi",
        {
            STATIC: (SAMPLES / "amd-smi_static_MI300X_x8_gpu_data.json").read_text(),
            METRIC: busy_metric({0: 180_000, 6: 1_000}),
        },
    )
    selection, inventory = select_on_host(LocalHost(), indexes=[0], sysfs_root=str(root))
    log = (LOGS / "02_oom_during_cuda_graph_capture.log").read_text()

    hint = oom_hint(log, selection, inventory)

    assert hint is not None
    assert "--gpu-memory-utilization 0.5" in hint
    assert "--gpus 6" in hint
    assert "instinct diagnose --symptom '" in hint
    assert "RuntimeError: CUDA error: out of memory" in hint


def test_no_oom_no_hint() -> None:
    healthy = (LOGS / "09c_healthy_startup_V1_excerpts.log").read_text()
    assert oom_hint(healthy) is None


def test_an_unquotable_oom_line_falls_back_to_the_canonical_symptom() -> None:
    hint = oom_hint("ERROR it's a HIP out of memory\n")
    assert hint is not None
    assert "--symptom 'torch.OutOfMemoryError: HIP out of memory'" in hint
