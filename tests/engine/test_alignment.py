"""The torch alignment rule and its lines (pure)."""

from __future__ import annotations

from instinct_serve.engine.alignment import alignment_disabled, decide
from instinct_serve.engine.install import plugin_repins

SDK = "2.12.0+rocm10.0.0"
ENGINE = "2.12.0+gitabc123"


def test_already_the_sdk_build() -> None:
    a = decide(installed=SDK, target=SDK, installed_runs_kernel=None, disabled=False)
    assert a.action == "aligned" and a.final == SDK and not a.changes_torch
    assert a.line().startswith("torch_alignment: aligned (torch==2.12.0+rocm10.0.0")


def test_a_torch_that_runs_a_kernel_is_kept_whoever_installed_it() -> None:
    a = decide(installed=ENGINE, target=SDK, installed_runs_kernel=True, disabled=False)
    assert a.action == "kept" and a.final == ENGINE
    other = decide(
        installed="2.11.0+rocm10.0.0", target=SDK, installed_runs_kernel=True, disabled=False
    )
    assert "release 2.11.0, not 2.12.0" in other.reason


def test_a_torch_that_cannot_run_a_kernel_moves_to_the_sdk_build() -> None:
    a = decide(
        installed=ENGINE,
        target=SDK,
        installed_runs_kernel=False,
        disabled=False,
        kernel_error="HIP error: invalid device function",
    )
    assert a.action == "realigned" and a.final == SDK and a.changes_torch
    assert a.line() == (
        f"torch_alignment: realigned torch=={ENGINE} -> torch=={SDK} (it cannot run a GPU "
        "kernel against this SDK: HIP error: invalid device function)"
    )
    assert (
        decide(installed=None, target=SDK, installed_runs_kernel=None, disabled=False).action
        == "realigned"
    )


def test_disabled_keeps_what_is_there_and_names_both() -> None:
    a = decide(installed=ENGINE, target=SDK, installed_runs_kernel=False, disabled=True)
    assert a.action == "disabled" and a.final == ENGINE
    assert a.to_dict()["line"] == (
        "torch_alignment: disabled by INSTINCT_DISABLE_TORCH_ALIGNMENT (would have installed "
        f"torch=={SDK}; kept torch=={ENGINE})"
    )


def test_set_means_on_whatever_the_value() -> None:
    assert alignment_disabled({"INSTINCT_DISABLE_TORCH_ALIGNMENT": ""})
    assert alignment_disabled({"INSTINCT_DISABLE_TORCH_ALIGNMENT": "0"})
    assert not alignment_disabled({})


def test_plugin_repins_follow_their_base_package() -> None:
    installed = {
        "torch": SDK,
        "torchvision": "0.27.0+rocm10.0.0",
        "amd-torch-device-gfx942": "2.13.0+rocm10.0.0",
        "amd-torch-device-gfx1201": SDK,
        "amd-torchvision-device-gfx942": "0.28.0+rocm10.0.0",
        "amd-torch-device-notes": "1.0",  # not a gfx plugin
    }
    assert plugin_repins(installed) == {
        "amd-torch-device-gfx942": SDK,
        "amd-torchvision-device-gfx942": "0.27.0+rocm10.0.0",
    }
    assert plugin_repins({"amd-torchvision-device-gfx942": "1"}) == {}  # no base: left alone
