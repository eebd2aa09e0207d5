"""GPU profiles: consistent with the detection tables and with real captures."""

from __future__ import annotations

import re

import pytest

from instinct_serve.errors import UsageError
from instinct_serve.hardware import amdsmi, gfx
from instinct_serve.hardware.profiles import (
    GFX_TARGETS,
    IMAGE_GFX_TARGETS,
    PARTITIONED,
    PROFILES,
    UPSTREAM_HARDWARE,
    get_profile,
    product_families,
    products,
)
from instinct_serve.options import TargetOptions, option_of
from tests.hardware.conftest import MIB, fixture


@pytest.mark.parametrize("key", sorted(PROFILES))
def test_profile_agrees_with_the_detection_tables(key: str) -> None:
    profile = PROFILES[key]
    assert gfx.from_name(profile.market_name) == profile.gfx_version
    named = [d for d in gfx.DEVICES.values() if d.name == profile.market_name]
    assert named and {d.gfx for d in named} == {profile.gfx_version}
    assert profile.source
    inv = profile.inventory()
    assert (inv.gpu_count, inv.gfx_version, inv.source) == (
        profile.default_count,
        profile.gfx_version,
        "profile",
    )
    if profile.vram_mib is None:  # no public figure: the source says so, plans need --vram-gb
        assert "no public" in profile.source and inv.vram_bytes is None
    else:
        assert profile.vram_mib > 0 and inv.vram_bytes == profile.vram_mib * MIB


@pytest.mark.parametrize("key", sorted(k for k, p in PROFILES.items() if p.partitioning))
def test_partition_modes_obey_amds_rules(key: str) -> None:
    """SPX/NPS1 first (the mode after boot or a reload); each mode splits the XCDs evenly;
    no more memory partitions than compute partitions (AMD SMI partition guide)."""
    part = PROFILES[key].partitioning
    assert part is not None and part.source
    assert part.compute_units % part.xcds == 0
    assert part.modes[0] == ("SPX", 1, ("NPS1",))
    assert part.modes[-1].name == "CPX" and part.modes[-1].partitions == part.xcds
    for mode in part.modes:
        assert part.xcds % mode.partitions == 0, mode
        assert all(int(nps.removeprefix("NPS")) <= mode.partitions for nps in mode.memory)
        assert "NPS1" in mode.memory  # every mode runs unified (NPS1) on these GPUs


def test_gfx90a_gpus_have_no_partition_modes() -> None:
    assert PROFILES["mi250x"].partitioning is None and PROFILES["mi210"].partitioning is None


def test_mi300x_matches_the_real_amd_smi_capture() -> None:
    parsed = amdsmi.parse_static(fixture("amd-smi_default_view_8xMI300X_rocm7.0.0_changelog.txt"))
    assert {g.vram_total_bytes for g in parsed.gpus} == {PROFILES["mi300x"].vram_bytes}


def test_mi350x_matches_the_kfd_capture() -> None:
    bank = re.search(
        r"^size_in_bytes (\d+)$", fixture("kfd_topology_properties_excerpts.txt"), re.M
    )
    assert bank is not None
    assert int(bank.group(1)) == PROFILES["mi350x"].vram_bytes


@pytest.mark.parametrize(
    "name", ["mi300x", "MI300X", "mi-300x", "AMD Instinct MI300X", "instinct_mi300x"]
)
def test_loose_names(name: str) -> None:
    assert get_profile(name).key == "mi300x"


def test_unknown_profile_and_bad_count() -> None:
    with pytest.raises(UsageError) as exc:
        get_profile("mi999")
    assert exc.value.id == "unknown_gpu_profile" and "mi355x" in (exc.value.fix or "")
    with pytest.raises(UsageError) as nvidia:  # not "did you mean an MI": what it is
        get_profile("H100")
    assert nvidia.value.id == "not_amd_gpu" and "NVIDIA" in nvidia.value.message
    assert "vllm/vllm-openai" in (nvidia.value.fix or "")
    assert PROFILES["mi355x"].inventory(2).gpu_count == 2
    with pytest.raises(UsageError):
        PROFILES["mi355x"].inventory(0)


def test_the_lists_in_help_and_fix_texts_derive_from_the_table() -> None:
    """Profiles (what the tool plans for) and the image's gfx targets (what it has kernels
    for) are two lists; the texts that name GPUs read them instead of repeating them."""
    assert products(PARTITIONED) == ["MI300X", "MI325X", "MI300A", "MI308X", "MI350X", "MI355X"]
    assert products(UPSTREAM_HARDWARE) == ["MI300X", "MI325X", "MI355X"]
    assert product_families() == "MI300X/MI325X/MI300A/MI308X, MI350X/MI355X, MI250X/MI210"
    assert "(gfx942, gfx950, gfx90a)" in option_of(TargetOptions, "gfx").help
    assert IMAGE_GFX_TARGETS == GFX_TARGETS  # today; a new profile need not be in the image
