"""``instinct partition show|set`` end to end: the console script as a subprocess, the GPUs
from a sysfs tree, and fake ``amd-smi``, ``modprobe``, ``id`` and ``sudo`` on PATH that log
the exact argv they were run with. Without ``--yes`` nothing is run."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.hardware import sysfs_tree
from tests.hardware.sysfs_tree import mi300x, partitioned
from tests.hardware.test_cli import instinct
from tests.infra import tables
from tests.infra.cli import run_instinct
from tests.infra.fakebin import FakeBin

SET = ["set", "--gpu", "all"]


def spx_host(root: Path) -> str:
    """2x MI300X in SPX/NPS1 (a host root of its own under ``root``)."""
    path = root / "spx"
    if not path.exists():
        sysfs_tree.build(path, [mi300x(i) for i in range(2)])
    return str(path)


def cpx_host(root: Path) -> str:
    """2x MI300X in CPX/NPS4: 16 logical GPUs."""
    path = root / "cpx"
    if not path.exists():
        specs = [p for g in range(2) for p in partitioned(mi300x(g), 8, "CPX", "NPS4", 128 + 8 * g)]
        sysfs_tree.build(path, specs)
    return str(path)


def fake_admin(tools: FakeBin, uid: str = "0", fail_memory: bool = False) -> None:
    """amd-smi answering only ``set`` (detection falls through to sysfs), modprobe, id."""
    memory = ("", "NPS change refused: GPU busy\n", 1) if fail_memory else "ok\n"
    tools.add(
        "amd-smi",
        {
            "set --gpu all --compute-partition CPX": "ACCELERATOR_PARTITION: set to CPX\n",
            "set --gpu all --compute-partition SPX": "ACCELERATOR_PARTITION: set to SPX\n",
            "set --gpu all --memory-partition NPS4": memory,
            "set --gpu all --memory-partition NPS1": memory,
        },
    )
    tools.add("modprobe", {"-r amdgpu": "", "amdgpu": ""})
    tools.add("id", {"-u": f"{uid}\n"})
    tools.add("sudo", {}, default=("", 0))


def sets(tools: FakeBin) -> list[list[str]]:
    return [c for c in tools.calls("amd-smi") if c[:1] == ["set"]]


def test_show_reads_the_mode_and_lists_the_others(tools: FakeBin, root: Path) -> None:
    result = instinct("partition", "show", "--json", "--sysfs-root", cpx_host(root))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["gpu"], doc["mode"], doc["physical_gpus"], doc["logical_gpus"]) == (
        "AMD Instinct MI300X",
        "CPX/NPS4",
        2,
        16,
    )
    modes = {m["mode"]: m for m in doc["modes"]}
    assert modes["CPX/NPS4"]["current"] and modes["CPX/NPS4"]["commands"] == []
    assert modes["SPX/NPS1"]["memory_per_device_gib"] == 191.98
    assert modes["SPX/NPS1"]["commands"][-1] == "sudo amd-smi set --gpu all --compute-partition SPX"


def test_set_without_yes_prints_and_runs_nothing(tools: FakeBin, root: Path) -> None:
    fake_admin(tools)
    result = instinct("partition", "set", "CPX", "--json", "--sysfs-root", spx_host(root))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["current"], doc["target"], doc["applied"]) == ("SPX/NPS1", "CPX/NPS4", False)
    assert [s["command"] for s in doc["steps"]] == [
        "sudo amd-smi set --gpu all --compute-partition CPX",
        "sudo amd-smi set --gpu all --memory-partition NPS4",
        "sudo modprobe -r amdgpu",
        "sudo modprobe amdgpu",
        "sudo amd-smi set --gpu all --compute-partition CPX",
    ]
    assert sets(tools) == [] and tools.calls("modprobe") == [] and tools.calls("sudo") == []
    human = instinct("partition", "set", "CPX", "--sysfs-root", spx_host(root))
    assert "add --yes to run these" in human.stdout and sets(tools) == []


def test_set_yes_as_root_runs_the_exact_argv_in_order(tools: FakeBin, root: Path) -> None:
    fake_admin(tools, uid="0")
    result = instinct(
        "partition", "set", "CPX/NPS4", "--yes", "--json", "--sysfs-root", spx_host(root)
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["applied"] and doc["failed"] is None and all(r["ok"] for r in doc["ran"])
    assert sets(tools) == [
        [*SET, "--compute-partition", "CPX"],
        [*SET, "--memory-partition", "NPS4"],
        [*SET, "--compute-partition", "CPX"],
    ]
    assert tools.calls("modprobe") == [["-r", "amdgpu"], ["amdgpu"]]
    assert tools.calls("sudo") == []


def test_set_yes_not_as_root_goes_through_sudo_n(tools: FakeBin, root: Path) -> None:
    fake_admin(tools, uid="1000")
    result = instinct("partition", "set", "SPX", "--yes", "--json", "--sysfs-root", cpx_host(root))
    assert result.returncode == 0, result.stderr
    assert tools.calls("sudo") == [
        ["-n", "amd-smi", *SET, "--memory-partition", "NPS1"],
        ["-n", "modprobe", "-r", "amdgpu"],
        ["-n", "modprobe", "amdgpu"],
        ["-n", "amd-smi", *SET, "--compute-partition", "SPX"],
    ]
    assert sets(tools) == []  # only through sudo


def test_a_failing_step_stops_the_change(tools: FakeBin, root: Path) -> None:
    fake_admin(tools, fail_memory=True)
    result = instinct("partition", "set", "CPX", "--yes", "--json", "--sysfs-root", spx_host(root))
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert doc["failed"] == "sudo amd-smi set --gpu all --memory-partition NPS4"
    assert doc["ran"][-1]["output"] == "NPS change refused: GPU busy"
    assert len(sets(tools)) == 2 and tools.calls("modprobe") == []  # no reload after a failure
    assert "failed:" in result.stderr


def test_invalid_modes_and_already_there(tools: FakeBin, root: Path) -> None:
    fake_admin(tools)
    bad = instinct(
        "partition", "set", "SPX", "--memory", "NPS4", "--json", "--sysfs-root", spx_host(root)
    )
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["error"]["id"] == "bad_partition_mode"
    there = instinct("partition", "set", "CPX", "--yes", "--json", "--sysfs-root", cpx_host(root))
    assert there.returncode == 0 and json.loads(there.stdout)["steps"] == []
    assert sets(tools) == []


def test_the_mode_table_through_a_pipe_and_at_80_columns(tools: FakeBin, root: Path) -> None:
    args = ["partition", "show", "--sysfs-root", cpx_host(root)]
    env = {**os.environ, "COLUMNS": "80"}
    piped = run_instinct(args, env=env).stdout
    tables.one_line(piped, "now   CPX/NPS4", "16")
    tables.one_line(piped, "MODE", "LOGICAL GPUS", "MEMORY EACH")
    tables.fits(run_instinct(args, env={**env, "TTY_COMPATIBLE": "1"}).stdout, "SPX/NPS1")
