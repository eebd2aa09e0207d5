"""``hardware.target.resolve_target``: the one resolver fit, plan, serve and MCP share."""

from __future__ import annotations

import pytest

from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.hardware.inventory import Gpu, GpuInventory
from instinct_serve.hardware.profiles import PROFILES
from instinct_serve.hardware.target import catalog_key, needs_detection, resolve_target
from instinct_serve.options import PlanOptions

MI300X = PROFILES["mi300x"]


def detected(n: int = 8, gfx: str = "gfx942") -> GpuInventory:
    gpus = [
        Gpu(i, "AMD Instinct MI300X", gfx, vram_total_bytes=MI300X.vram_bytes, market_name=None)
        for i in range(n)
    ]
    return GpuInventory(gpus=gpus, source="amd-smi")


def never() -> GpuInventory:
    raise AssertionError("detection must not run")


def opts(**kw: object) -> PlanOptions:
    return PlanOptions.parse(kw)


def test_a_named_gpu_or_gfx_needs_no_host() -> None:
    by_name = resolve_target(opts(gpu="mi325x", gpu_count=2), never)
    assert by_name.source == "profile" and by_name.inventory.gpu_count == 2
    by_gfx = resolve_target(opts(gpu="gfx950"), never)
    assert by_gfx.inventory.gfx_version == "gfx950"
    assert "assuming AMD Instinct MI350X" in by_gfx.notes[0]
    assert resolve_target(opts(gfx="gfx942"), never).inventory.gfx_version == "gfx942"


def test_manual_vram_and_count_need_no_host_and_override_memory() -> None:
    manual = resolve_target(opts(vram_gb=80, gpu_count=2), never)
    assert manual.source == "manual" and manual.inventory.gpu_count == 2
    assert manual.inventory.vram_bytes == 80 * 10**9
    assert not needs_detection(opts(vram_gib=64, gpu_count=1))
    profile = resolve_target(opts(gpu="mi300x", vram_gib=96), never)
    assert profile.inventory.vram_bytes == 96 * 2**30
    assert any("VRAM per GPU set to 96 GiB" in n for n in profile.notes)


def test_detection_with_count_and_indices() -> None:
    first_two = resolve_target(opts(gpu_count=2), detected)
    assert [g.index for g in first_two.inventory.gpus] == [0, 1]
    picked = resolve_target(opts(gpus=[5, 2]), detected)
    assert [g.index for g in picked.inventory.gpus] == [5, 2]
    with pytest.raises(UsageError) as err:
        resolve_target(opts(gpus=[9]), detected)
    assert err.value.id == "bad_gpus"
    with pytest.raises(UsageError) as err:
        resolve_target(opts(gpu_count=16), detected, host_name="gpu-box")
    assert err.value.id == "bad_gpu_count" and "gpu-box has 8" in err.value.message


def test_no_gpu_falls_back_only_when_the_command_allows_it() -> None:
    with pytest.raises(NotReadyError) as err:
        resolve_target(opts(), GpuInventory, host_name="gpu-box")
    assert err.value.id == "no_gpu" and "gpu-box" in err.value.message
    assert "mi300x" in (err.value.fix or "")
    fallback = resolve_target(opts(), GpuInventory, default_gpu="mi300x")
    assert fallback.source == "profile" and fallback.inventory.gpu_count == 8
    assert "no AMD GPU detected" in fallback.notes[0]
    # manual VRAM without a count on a machine without GPUs: one GPU of that size
    lone = resolve_target(opts(vram_gb=24), GpuInventory)
    assert lone.source == "manual" and lone.inventory.gpu_count == 1


def test_the_catalog_key_is_the_profile_when_the_name_says_it() -> None:
    assert catalog_key(detected()) == "mi300x"
    odd = GpuInventory(gpus=[Gpu(0, "Some GPU", "gfx950")])
    assert catalog_key(odd) == "gfx950"


def test_mixed_gpus_are_said() -> None:
    mixed = detected(2)
    mixed.gpus[1] = Gpu(1, "AMD Instinct MI355X", "gfx950", vram_total_bytes=2**38)
    assert "the GPUs differ" in resolve_target(opts(), lambda: mixed).notes[-1]
