"""GPU power, activity and memory from amd-smi JSON: every envelope, units, N/A, garbage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from instinct_serve.hardware.values import Unparsable
from instinct_serve.observe.gpu import parse_metric, tokens_per_watt, total_power, watts
from tests.infra.fakebin import load_fixture
from tests.infra.paths import FIXTURES, SMI

SAMPLES = Path(__file__).parent / "samples"
MI300X = SAMPLES / "amd-smi_metric_power_mem-usage_usage_MI300X_x8_gpu_data.json"
POWER = (734, 652, 376, 234, 219, 295, 367, 434)  # the ROCm 7.0.0 8x MI300X default view
MIB = 2**20


def test_eight_mi300x_in_the_gpu_data_envelope() -> None:
    gpus = parse_metric(MI300X.read_text())
    assert [g.index for g in gpus] == list(range(8))
    assert tuple(g.power_w for g in gpus) == POWER
    assert [g.gfx_activity_pct for g in gpus] == [98, 83, 34, 12, 11, 23, 36, 47]
    assert {g.vram_used_bytes for g in gpus} == {4976 * MIB}
    assert {g.vram_total_bytes for g in gpus} == {196592 * MIB}
    assert total_power(gpus) == sum(POWER)
    assert total_power(gpus, [1]) == 652 and total_power(gpus, [0, 7]) == 734 + 434
    assert total_power(gpus, [9]) is None
    assert gpus[0].to_dict()["vram_total_gib"] == 191.98


def test_the_old_list_envelope_of_the_rocm_6_1_changelog() -> None:
    gpus = parse_metric(
        load_fixture(
            FIXTURES / "metrics" / "amd-smi_metric_power_json_OLD-list_changelog_rocm6.1.txt"
        )
    )
    assert len(gpus) == 1
    assert gpus[0].index == 0 and gpus[0].power_w == 10.0
    assert gpus[0].gfx_activity_pct is None and gpus[0].vram_used_bytes is None


def test_the_same_records_as_a_list_a_bare_object_and_bare_numbers() -> None:
    records = json.loads(MI300X.read_text())["gpu_data"]
    assert parse_metric(json.dumps(records)) == parse_metric(MI300X.read_text())
    assert parse_metric(json.dumps(records[3]))[0].power_w == 234
    bare = {"gpu": 2, "power": {"average_socket_power": 94}, "mem_usage": {"used_vram": 1024}}
    gpu = parse_metric(json.dumps([bare]))[0]
    assert gpu.power_w == 94 and gpu.vram_used_bytes == 1024 * MIB


@pytest.mark.parametrize(
    ("leaf", "expected"),
    [
        ({"value": 140, "unit": "W"}, 140.0),
        ({"value": 140500, "unit": "mW"}, 140.5),
        ({"value": "N/A", "unit": "W"}, None),
        ("N/A", None),
        ("717 W", 717.0),
        (94, 94.0),
        (None, None),
        (True, None),
        ({"value": 5, "unit": "V"}, None),
        ({"value": -1, "unit": "W"}, None),
    ],
)
def test_power_leaves(leaf: object, expected: float | None) -> None:
    assert watts(leaf) == expected


def test_a_partitioned_socket_reports_power_once() -> None:
    """CPX/DPX: the second partition of a socket says N/A (ROCm/amdsmi issue 134)."""
    doc = {
        "gpu_data": [
            {"gpu": 0, "power": {"socket_power": {"value": 300, "unit": "W"}}},
            {"gpu": 1, "power": {"socket_power": "N/A"}},
        ]
    }
    gpus = parse_metric(json.dumps(doc))
    assert [g.power_w for g in gpus] == [300.0, None]
    assert total_power(gpus) == 300.0 and total_power(gpus, [1]) is None


@pytest.mark.parametrize(
    "name",
    [
        "amd-smi_metric_json_NEW-gpu_data_RX7800XT_tail_excerpt.txt",
        "amd-smi_metric_usage_json_OLD-list_RadeonProW7700_excerpt.txt",
    ],
)
def test_truncated_outputs_are_unparsable(name: str) -> None:
    with pytest.raises(Unparsable):
        parse_metric(load_fixture(SMI / name))


def test_garbage_and_cpu_only() -> None:
    with pytest.raises(Unparsable):
        parse_metric("amd-smi: command failed")
    with pytest.raises(Unparsable):
        parse_metric('{"something": 1}')
    assert parse_metric('{"cpu_data": [{"cpu": 0}]}') == []


def test_tokens_per_watt() -> None:
    assert tokens_per_watt(3311.0, 3311.0) == 1.0
    assert tokens_per_watt(None, 100.0) is None and tokens_per_watt(10.0, 0.0) is None
