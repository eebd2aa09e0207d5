"""The built full-shape amd-smi samples (see samples/README.md), through fake amd-smi."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from instinct_serve.gather.detect import detect
from instinct_serve.hosts import LocalHost
from tests.hardware.conftest import (
    METRIC,
    MIB,
    PARTITION,
    ROCM_QUERY,
    STATIC,
    VERSION,
    sample,
)
from tests.infra.fakebin import FakeBin

MI300X_BDFS = [f"0000:{b}:00.0" for b in ("0c", "22", "38", "5c", "9f", "af", "bf", "df")]


@pytest.mark.parametrize("shape", ["gpu_data", "list"])
def test_mi300x_x8_full(tools: FakeBin, root: Path, shape: str) -> None:
    tools.add(
        "amd-smi",
        {
            STATIC: sample(f"amd-smi_static_MI300X_x8_{shape}.json"),
            METRIC: sample(f"amd-smi_metric_mem-usage_MI300X_x8_{shape}.json"),
            PARTITION: sample(f"amd-smi_static_partition_MI300X_x8_{shape}.json"),
            VERSION: sample("amd-smi_version_rocm7.0.0.json"),
        },
    )
    inv = detect(LocalHost(), sysfs_root=str(root))
    doc = inv.to_dict()
    assert doc["gfx_version"] == "gfx942"
    assert doc["gpu_count"] == 8
    assert doc["vram_gb"] == 206.14 and doc["vram_gib"] == 191.98
    assert doc["rocm_version"] == "7.0.0"
    assert doc["source"] == "amd-smi" and doc["mixed"] is False
    assert doc["warnings"] == [] and doc["hint"] is None
    assert [g["bdf"] for g in doc["gpus"]] == MI300X_BDFS
    first = doc["gpus"][0]
    assert first["name"] == "AMD Instinct MI300X"
    assert first["vram_used_gb"] == round(4976 * MIB / 1e9, 2)
    assert first["partition"] == "SPX/NPS1"
    # the old shape names the part "MI300X" and has no gfx field: the PCI id decides
    assert first["market_name"] == ("AMD Instinct MI300X" if shape == "gpu_data" else "MI300X")
    assert [c[0] for c in tools.calls("amd-smi")] == ["static", "metric", "static", "version"]
    assert tools.calls("rocm-smi") == []  # amd-smi answered: nothing else is asked


@pytest.mark.parametrize("shape", ["gpu_data", "list"])
def test_mi355x_x8(tools: FakeBin, root: Path, shape: str) -> None:
    tools.add(
        "amd-smi",
        {
            STATIC: sample(f"amd-smi_static_MI355X_x8_{shape}.json"),
            METRIC: sample("amd-smi_metric_mem-usage_MI355X_x8_gpu_data.json"),
        },
    )
    inv = detect(LocalHost(), sysfs_root=str(root))
    assert (inv.gfx_version, inv.gpu_count, inv.vram_bytes) == ("gfx950", 8, 294896 * MIB)
    assert {g.name for g in inv.gpus} == {"AMD Instinct MI355X"}
    assert {g.vram_used_bytes for g in inv.gpus} == {283 * MIB}
    assert inv.to_dict()["vram_gib"] == 287.98
    # no partition answer (older amd-smi): partition unknown, sysfs has nothing to add
    assert {g.partition for g in inv.gpus} == {None}


def test_single_gpu_printed_as_a_bare_object(tools: FakeBin, root: Path) -> None:
    """Old amd-smi printed one object, not a list, when there was one GPU."""
    one = json.loads(sample("amd-smi_static_MI300X_x8_list.json"))[0]
    tools.add("amd-smi", {STATIC: json.dumps(one, indent=4)})
    inv = detect(LocalHost(), sysfs_root=str(root))
    assert (inv.gpu_count, inv.gfx_version, inv.vram_bytes) == (1, "gfx942", 196592 * MIB)


def test_one_object_per_gpu_is_refused_not_undercounted(tools: FakeBin, root: Path) -> None:
    """Objects back to back (never seen from amd-smi, but a cut between two would pass
    for a smaller host): refused whole, complete or cut, and the next source answers."""
    gpus = json.loads(sample("amd-smi_static_MI300X_x8_list.json"))
    text = "\n".join(json.dumps(g, indent=4) for g in gpus)
    tools.add("rocm-smi", {ROCM_QUERY: sample("rocm-smi_MI300X_x4.json")})
    for output in (text, text[: len(text) - 40]):
        tools.add("amd-smi", {STATIC: output})
        inv = detect(LocalHost(), sysfs_root=str(root))
        assert (inv.source, inv.gpu_count) == ("rocm-smi", 4)
        assert inv.warnings[0] == (
            "amd-smi output unparsable (more than one JSON document in the output); used rocm-smi"
        )


def test_python_warnings_before_the_json(tools: FakeBin, root: Path) -> None:
    noise = (
        "/usr/lib/python3.14/site-packages/amdsmi/amdsmi_interface.py:3569: SyntaxWarning: "
        "'return' in a 'finally' block\n  return return_dictionary\n"
    )
    tools.add("amd-smi", {STATIC: noise + sample("amd-smi_static_MI355X_x8_gpu_data.json")})
    inv = detect(LocalHost(), sysfs_root=str(root))
    assert (inv.gpu_count, inv.gfx_version) == (8, "gfx950")


def test_na_values_and_missing_blocks(tools: FakeBin, root: Path) -> None:
    doc = json.loads(sample("amd-smi_static_MI300X_x8_gpu_data.json"))
    doc["gpu_data"][0]["vram"] = {"type": "N/A", "vendor": "N/A", "size": "N/A"}
    doc["gpu_data"][1]["asic"]["target_graphics_version"] = "N/A"
    doc["gpu_data"][2]["bus"] = "N/A"
    tools.add("amd-smi", {STATIC: json.dumps(doc)})
    inv = detect(LocalHost(), sysfs_root=str(root))
    assert inv.gpus[0].vram_total_bytes is None
    assert inv.gpus[1].gfx_version == "gfx942"  # from the PCI id
    assert inv.gpus[2].bdf is None
    assert inv.vram_bytes == 196592 * MIB  # the GPUs whose size is known
    assert not inv.mixed and inv.gfx_version == "gfx942"  # an unknown size is no difference


def test_metric_supplies_total_when_static_lacks_it(tools: FakeBin, root: Path) -> None:
    doc = json.loads(sample("amd-smi_static_MI355X_x8_gpu_data.json"))
    for gpu in doc["gpu_data"]:
        del gpu["vram"]
    tools.add(
        "amd-smi",
        {
            STATIC: json.dumps(doc),
            METRIC: sample("amd-smi_metric_mem-usage_MI355X_x8_gpu_data.json"),
        },
    )
    inv = detect(LocalHost(), sysfs_root=str(root))
    assert inv.vram_bytes == 294896 * MIB


def test_mixed_models_on_one_host(tools: FakeBin, root: Path) -> None:
    a = json.loads(sample("amd-smi_static_MI300X_x8_gpu_data.json"))["gpu_data"][:2]
    b = json.loads(sample("amd-smi_static_MI355X_x8_gpu_data.json"))["gpu_data"][:2]
    for i, gpu in enumerate(b, start=2):
        gpu["gpu"] = i
    tools.add("amd-smi", {STATIC: json.dumps({"gpu_data": a + b})})
    doc = detect(LocalHost(), sysfs_root=str(root)).to_dict()
    assert doc["gfx_version"] == "mixed" and doc["mixed"] is True
    assert [g["gfx_version"] for g in doc["gpus"]] == ["gfx942", "gfx942", "gfx950", "gfx950"]
    assert doc["vram_gib"] == 191.98  # the smallest GPU's
