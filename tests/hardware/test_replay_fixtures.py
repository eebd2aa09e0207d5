"""Every captured output in tests/fixtures/smi replayed through fake tools on PATH.

Complete captures must give the right gfx, count and VRAM; the ones cut short
(``[... TRUNCATED ...]``) must give what they hold or fall through with a warning.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from instinct_serve.gather.detect import detect, detect_rocm_version
from instinct_serve.hardware.inventory import GpuInventory
from instinct_serve.hosts import LocalHost
from tests.hardware import sysfs_tree
from tests.hardware.conftest import METRIC, MIB, ROCM_QUERY, STATIC, VERSION, fixture, sample
from tests.hardware.sysfs_tree import GpuSpec
from tests.infra.fakebin import FakeBin, strip_provenance
from tests.infra.paths import SMI

COVERED: set[str] = set()


def covers(*names: str) -> None:
    COVERED.update(names)


def inventory(root: Path) -> GpuInventory:
    return detect(LocalHost(), sysfs_root=str(root))


# --- amd-smi -----------------------------------------------------------------------------

covers("amd-smi_default_view_8xMI300X_rocm7.0.0_changelog.txt")


def test_default_view_8x_mi300x(tools: FakeBin, root: Path) -> None:
    """The only complete amd-smi capture of Instinct GPUs: a table, read as text."""
    tools.add("amd-smi", {STATIC: fixture("amd-smi_default_view_8xMI300X_rocm7.0.0_changelog.txt")})
    inv = inventory(root)
    assert (inv.source, inv.gfx_version, inv.gpu_count) == ("amd-smi", "gfx942", 8)
    assert inv.vram_bytes == 196592 * MIB
    assert inv.to_dict()["vram_gib"] == 191.98
    assert [g.bdf for g in inv.gpus][:3] == ["0000:0c:00.0", "0000:22:00.0", "0000:38:00.0"]
    assert {g.vram_used_bytes for g in inv.gpus} == {4976 * MIB}
    assert {g.partition for g in inv.gpus} == {"SPX/NPS1"}
    assert {g.name for g in inv.gpus} == {"AMD Instinct MI300X"}
    assert any("printed text instead of JSON" in w for w in inv.warnings)
    assert not inv.mixed and inv.hint is None


covers("amd-smi_list_and_static_asic_text_MI308X_changelog.txt")


def test_list_and_static_text_mi308x(tools: FakeBin, root: Path) -> None:
    """``list`` then ``static --asic`` (GPU 0 only): the GPU with ASIC data is read."""
    tools.add(
        "amd-smi", {STATIC: fixture("amd-smi_list_and_static_asic_text_MI308X_changelog.txt")}
    )
    inv = inventory(root)
    assert inv.source == "amd-smi"
    assert [(g.name, g.gfx_version, g.bdf) for g in inv.gpus] == [
        ("AMD Instinct MI308X", "gfx942", "0000:23:00.0")
    ]
    assert inv.gpus[0].market_name == "MI308X"  # older amd-smi: no "AMD Instinct" prefix
    assert inv.gpus[0].vram_total_bytes is None  # not in this capture, nor in sysfs here


covers("amd-smi_list_and_static_text_MI210_excerpt.txt")


def test_truncated_static_text_mi210_yields_what_it_holds(tools: FakeBin, root: Path) -> None:
    tools.add("amd-smi", {STATIC: fixture("amd-smi_list_and_static_text_MI210_excerpt.txt")})
    inv = inventory(root)
    assert [(g.name, g.gfx_version) for g in inv.gpus] == [("AMD Instinct MI210", "gfx90a")]
    assert inv.gpus[0].bdf == "0000:23:00.0"  # the AI_NIC block after it is not a GPU


covers("amd-smi_static_text_MI350X_gfx950_excerpt.txt")


def test_truncated_static_text_mi350x(tools: FakeBin, root: Path) -> None:
    tools.add("amd-smi", {STATIC: fixture("amd-smi_static_text_MI350X_gfx950_excerpt.txt")})
    inv = inventory(root)
    assert [(g.name, g.gfx_version, g.bdf) for g in inv.gpus] == [
        ("AMD Instinct MI350X", "gfx950", "0000:05:00.0")
    ]


def test_truncated_static_text_mi350x_vram_filled_from_sysfs(tools: FakeBin, root: Path) -> None:
    """The excerpt stops before VRAM; the kernel's view supplies it (matched by PCI address)."""
    sysfs_tree.build(
        root,
        [GpuSpec(90500, 0x75A0, "0000:05:00.0", 128, 309220868096, 283 * MIB, card=1)],
    )
    tools.add("amd-smi", {STATIC: fixture("amd-smi_static_text_MI350X_gfx950_excerpt.txt")})
    inv = inventory(root)
    assert inv.source == "amd-smi"
    assert inv.gpus[0].vram_total_bytes == 309220868096
    assert inv.gpus[0].vram_used_bytes == 283 * MIB
    assert any("taken from sysfs" in w for w in inv.warnings)


covers(
    "amd-smi_static_json_NEW-gpu_data_RX7800XT_excerpt.txt",
    "amd-smi_static_limit_json_NEW-gpu_data_changelog_example.txt",
    "amdsmi_python_asic_info_MI308X_excerpt.txt",
)


@pytest.mark.parametrize(
    "name",
    [
        "amd-smi_static_json_NEW-gpu_data_RX7800XT_excerpt.txt",  # JSON cut inside "bus"
        "amd-smi_static_limit_json_NEW-gpu_data_changelog_example.txt",  # "..." elisions
        "amdsmi_python_asic_info_MI308X_excerpt.txt",  # Python reprs, not JSON
    ],
)
def test_broken_static_json_falls_through_to_sysfs(tools: FakeBin, root: Path, name: str) -> None:
    sysfs_tree.build(root, [GpuSpec(110001, 0x747E, "0000:03:00.0", 128, 16368 * MIB, card=0)])
    tools.add("amd-smi", {STATIC: fixture(name)})
    inv = inventory(root)
    assert (inv.source, inv.gfx_version, inv.gpu_count) == ("sysfs", "gfx1101", 1)
    assert inv.warnings[0].startswith("amd-smi output unparsable")
    assert inv.warnings[0].endswith("; used sysfs")
    assert "rocm-smi not found; used sysfs" in inv.warnings


covers(
    "amd-smi_metric_json_NEW-gpu_data_RX7800XT_tail_excerpt.txt",
    "amd-smi_metric_usage_json_OLD-list_RadeonProW7700_excerpt.txt",
)


@pytest.mark.parametrize(
    "name",
    [
        "amd-smi_metric_json_NEW-gpu_data_RX7800XT_tail_excerpt.txt",
        "amd-smi_metric_usage_json_OLD-list_RadeonProW7700_excerpt.txt",
    ],
)
def test_broken_metric_output_leaves_used_vram_unknown(
    tools: FakeBin, root: Path, name: str
) -> None:
    tools.add(
        "amd-smi",
        {STATIC: sample("amd-smi_static_MI300X_x8_gpu_data.json"), METRIC: fixture(name)},
    )
    inv = inventory(root)
    assert (inv.source, inv.gpu_count, inv.vram_bytes) == ("amd-smi", 8, 196592 * MIB)
    assert all(g.vram_used_bytes is None for g in inv.gpus)
    assert "amd-smi metric output unparsable; used VRAM unknown" in inv.warnings


covers("amd-smi_version_outputs.txt")


def _version_lines() -> list[str]:
    text = fixture("amd-smi_version_outputs.txt")
    return [line for line in text.splitlines() if "ROCm version:" in line]


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (0, "6.4.0"),
        (1, None),
        (2, None),
        (3, "6.1.2"),
        (4, "7.2.0"),
        (5, "7.13.0"),
        (6, "7.14.0"),
        (7, "7.14.0"),
    ],
)
def test_every_amd_smi_version_shape(
    tools: FakeBin, root: Path, index: int, expected: str | None
) -> None:
    lines = _version_lines()
    assert len(lines) == 8
    tools.add("amd-smi", {VERSION: lines[index] + "\n"})
    assert detect_rocm_version(LocalHost(), str(root)) == expected


def test_version_na_falls_through_to_the_info_file(tools: FakeBin, root: Path) -> None:
    (root / "opt/rocm/.info").mkdir(parents=True)
    (root / "opt/rocm/.info/version").write_text("6.2.0-66\n")
    tools.add("amd-smi", {VERSION: _version_lines()[1] + "\n"})  # ROCm version: N/A
    assert detect_rocm_version(LocalHost(), str(root)) == "6.2.0"
    assert tools.calls("amd-smi") == [["version", "--json"]]


# --- rocm-smi ----------------------------------------------------------------------------

covers("rocm-smi_productname_use_meminfo_vram_RX7900XT.txt")


def test_rocm_smi_json_after_csv(tools: FakeBin, root: Path) -> None:
    """The capture holds the CSV form first, then the JSON: the JSON is found and read."""
    tools.add(
        "rocm-smi", {ROCM_QUERY: fixture("rocm-smi_productname_use_meminfo_vram_RX7900XT.txt")}
    )
    inv = inventory(root)
    assert (inv.source, inv.gfx_version, inv.gpu_count) == ("rocm-smi", "gfx1100", 1)
    assert inv.vram_bytes == 21458059264
    assert inv.gpus[0].vram_used_bytes == 27856896
    assert inv.gpus[0].name == "Radeon RX 7900 XT"
    assert "amd-smi not found; used rocm-smi" in inv.warnings


covers("rocm-smi_showproductname_json_MI250X.json")


def test_rocm_smi_mi250x_mangled_gfx(tools: FakeBin, root: Path) -> None:
    """rocm-smi prints gfx90a as "gfx9010"; the PCI id (0x7408) says what it is."""
    tools.add("rocm-smi", {ROCM_QUERY: fixture("rocm-smi_showproductname_json_MI250X.json")})
    inv = inventory(root)
    assert (inv.source, inv.gfx_version, inv.gpu_count) == ("rocm-smi", "gfx90a", 1)
    gpu = inv.gpus[0]
    assert gpu.name == "AMD Instinct MI250X"
    assert gpu.market_name == "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2"
    assert gpu.vram_total_bytes is None  # --showproductname only: no memory in this capture
    assert any("'gfx9010'" in w for w in inv.warnings)


def test_rocm_smi_mi250x_vram_from_sysfs_by_order(tools: FakeBin, root: Path) -> None:
    sysfs_tree.build(root, [GpuSpec(90010, 0x7408, "0000:c9:00.0", 128, 65520 * MIB, card=0)])
    tools.add("rocm-smi", {ROCM_QUERY: fixture("rocm-smi_showproductname_json_MI250X.json")})
    inv = inventory(root)
    assert (inv.source, inv.gfx_version, inv.vram_bytes) == ("rocm-smi", "gfx90a", 65520 * MIB)
    assert inv.gpus[0].bdf == "0000:c9:00.0"


covers("rocm-smi_MI300X_x4_concise_and_full.txt")


def test_rocm_smi_text_mi300x_x4(tools: FakeBin, root: Path) -> None:
    """``rocm-smi`` and ``rocm-smi -a`` text: four MI300X, no VRAM size in the capture."""
    tools.add("rocm-smi", {ROCM_QUERY: fixture("rocm-smi_MI300X_x4_concise_and_full.txt")})
    inv = inventory(root)
    assert (inv.source, inv.gfx_version, inv.gpu_count) == ("rocm-smi", "gfx942", 4)
    assert [g.bdf for g in inv.gpus] == [
        "0000:26:00.0",
        "0000:46:00.0",
        "0000:65:00.0",
        "0000:85:00.0",
    ]
    assert {g.partition for g in inv.gpus} == {"SPX/NPS1"}
    assert inv.vram_bytes is None
    assert any("printed text instead of JSON" in w for w in inv.warnings)


# --- rocminfo ----------------------------------------------------------------------------

covers("rocminfo_MI300X_x4_gfx942.txt")


def test_rocminfo_mi300x_x4(tools: FakeBin, root: Path) -> None:
    tools.add("rocminfo", {"": fixture("rocminfo_MI300X_x4_gfx942.txt")})
    inv = inventory(root)
    assert (inv.source, inv.gfx_version, inv.gpu_count) == ("rocminfo", "gfx942", 4)
    assert inv.vram_bytes == 196592 * MIB  # 201310208 KB coarse-grained pool
    assert inv.gpus[0].bdf == "0000:26:00.0"  # BDFID 9728, as rocm-smi says for GPU 0
    assert {g.name for g in inv.gpus} == {"AMD Instinct MI300X"}
    assert inv.warnings[:2] == [
        "amd-smi not found; used rocminfo",
        "rocm-smi not found; used rocminfo",
    ]


covers("rocminfo_MI250X_gfx90a_excerpt.txt")


def test_rocminfo_truncated_mi250x(tools: FakeBin, root: Path) -> None:
    tools.add("rocminfo", {"": fixture("rocminfo_MI250X_gfx90a_excerpt.txt")})
    inv = inventory(root)
    assert [(g.name, g.gfx_version, g.bdf) for g in inv.gpus] == [
        ("AMD Instinct MI250X/MI250", "gfx90a", "0000:93:00.0")
    ]


# --- sysfs ---------------------------------------------------------------------------------

covers("kfd_topology_properties_excerpts.txt")


def test_kfd_excerpts_as_a_mixed_host(tools: FakeBin, root: Path) -> None:
    """The three KFD excerpts written as nodes of one host: three different GPUs."""
    raw = (SMI / "kfd_topology_properties_excerpts.txt").read_text(encoding="utf-8")
    # The "# (n)" provenance lines separate the three excerpts; each part is then stripped.
    parts = [strip_provenance(p) for p in re.split(r"^# \(\d\)", raw, flags=re.M)[1:]]
    assert len(parts) == 3
    text = parts[0]
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    # (1) MI300X: only the gfx line was quoted.
    mi300x = re.search(r"^gfx_target_version (\d+)$", text, re.M)
    assert mi300x is not None
    (nodes / "4").mkdir(parents=True)
    (nodes / "4/properties").write_text(mi300x.group(0) + "\n")
    # (2) MI350X: the quoted node and mem bank lines; the PR text gives gfx_target_version.
    block = parts[1]
    node_lines = [ln for ln in block.splitlines() if re.fullmatch(r"[a-z_0-9]+ \d+", ln)]
    (nodes / "5/mem_banks/0").mkdir(parents=True)
    props = [ln for ln in node_lines if not ln.startswith(("size_in_bytes", "width", "mem_clk"))]
    bank = [ln for ln in node_lines if ln.startswith(("size_in_bytes", "width", "mem_clk"))]
    (nodes / "5/properties").write_text("\n".join([*props, "gfx_target_version 90500"]) + "\n")
    (nodes / "5/mem_banks/0/properties").write_text("\n".join(["heap_type 1", *bank]) + "\n")
    # (3) Radeon VII: rocprofv3's "key : value" dump back into sysfs's "key value" lines.
    dump = parts[2]
    pairs = re.findall(r"^(\w+)\s+:\s+(\d+)\s*$", dump, re.M)
    (nodes / "6").mkdir(parents=True)
    (nodes / "6/properties").write_text("".join(f"{k} {v}\n" for k, v in pairs))

    inv = inventory(root)
    assert inv.source == "sysfs"
    assert [g.gfx_version for g in inv.gpus] == ["gfx942", "gfx950", "gfx906"]
    assert (inv.gfx_version, inv.mixed) == ("mixed", True)
    assert inv.gpus[1].name == "AMD Instinct MI350X"  # device_id 30112 = 0x75a0
    assert inv.gpus[1].vram_total_bytes == 309220868096  # 294896 MiB
    assert inv.vram_bytes == 309220868096  # the only GPU whose size the excerpts show
    assert inv.to_dict()["gfx_version"] == "mixed"


def test_every_fixture_is_replayed() -> None:
    on_disk = {p.name for p in SMI.iterdir() if p.is_file()}
    assert on_disk - COVERED == set()
