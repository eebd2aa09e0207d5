"""``engine install vllm`` against a real PEP 503 index on 127.0.0.1, driving the real uv.

The indexes are stocked like AMD's ROCm 10.0 ones: rotating dev tags, a newer
flash-attn / amd-aiter that conflicts with what vLLM pins, vLLM's own torch build beside
the SDK's, device plugins that drifted ahead of torch, and a 403 for every project the
vendor index does not host.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from instinct_serve.engine.install import install_vllm, plan_target
from instinct_serve.engine.uvtool import Uv
from instinct_serve.errors import NotReadyError
from instinct_serve.hosts import LocalHost
from tests.engine.conftest import (
    ENGINE_TORCH,
    SDK_TORCH,
    SDK_TORCHVISION,
    STATIC_TORCH,
    STATIC_VLLM,
    UV,
    VLLM_DEV,
    Vendor,
)
from tests.infra.cli import run_instinct
from tests.infra.ssh import free_port


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_instinct(args, timeout=300)  # stdin empty, as DEVNULL


def managed_python() -> Path:
    return Path(os.environ["INSTINCT_DATA_DIR"]) / "engines" / "vllm" / "venv" / "bin" / "python"


def freeze(python: Path) -> dict[str, str]:
    return Uv(LocalHost(), str(UV)).freeze(str(python))


def test_install_discovers_pins_and_realigns_torch_and_plugins(
    vendor: Vendor, wheels: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor.stock_rocm10(wheels)
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())
    monkeypatch.setenv("INSTINCT_TEST_FAKE_GPU_BUILD", "rocm10.0.0")  # only the SDK build runs

    proc = run_cli("engine", "install", "vllm", "--rocm", "10.0", "--yes", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)

    pins = {p["name"]: p for p in doc["pins"]}
    assert pins["vllm"]["version"] == VLLM_DEV  # newest 0.27.* dev tag, not 0.28 or older
    # vLLM pins flash-attn 2.8.3 / amd-aiter 0.1.5.post2; the newer builds would conflict
    assert pins["flash-attn"]["version"] == "2.8.3"
    assert pins["amd-aiter"]["version"] == "0.1.5.post2"
    assert "served by the vLLM index" in pins["flash-attn"]["how"]
    assert pins["torch"]["version"] == SDK_TORCH
    assert pins["torchvision"]["version"] == SDK_TORCHVISION

    installed = freeze(managed_python())
    assert installed["vllm"] == VLLM_DEV
    assert installed["flash-attn"] == "2.8.3"
    assert installed["amd-aiter"] == "0.1.5.post2"
    assert installed["torch"] == SDK_TORCH  # vLLM's own build was replaced by the SDK's
    assert installed["torchvision"] == SDK_TORCHVISION
    # the drifted plugins (2.13.0 / 0.28.0 from the vLLM index) follow their base again
    assert installed["amd-torch-device-gfx942"] == SDK_TORCH
    assert installed["amd-torchvision-device-gfx942"] == SDK_TORCHVISION
    assert installed["lm-format-enforcer"] == "0.10.1"  # PyPI-only, through the 403

    align = doc["torch_alignment"]
    assert align["action"] == "realigned"
    assert align["installed"] == ENGINE_TORCH and align["final"] == SDK_TORCH
    assert doc["lines"][0].startswith(
        f"torch_alignment: realigned torch=={ENGINE_TORCH} -> torch=={SDK_TORCH}"
    )
    assert any(line.startswith("device_check (before): failed") for line in doc["lines"])
    assert doc["lines"][-1].startswith("device_check: ok")
    assert doc["ready"] is True

    # the vendor index was asked for the PyPI-only project and said 403; PyPI answered
    assert ("lm-format-enforcer", 403) in set(vendor.server.asked(vendor.vllm.name))
    assert ("lm-format-enforcer", 200) in set(vendor.server.asked(vendor.pypi.name))
    root = Path(os.environ["INSTINCT_DATA_DIR"]) / "engines" / "vllm"
    assert "ignore-error-codes = [403]" in (root / "uv.toml").read_text()
    manifest = json.loads((root / "engine.json").read_text())
    assert manifest["installed"]["torch"] == SDK_TORCH

    # discovery now finds the managed environment and calls it usable
    detected = run_cli("engine", "detect", "--json")
    assert detected.returncode == 0, detected.stdout + detected.stderr
    engine = json.loads(detected.stdout)["engine"]
    assert engine["source"] == "managed" and engine["usable"] is True
    assert engine["vllm_version"] == VLLM_DEV
    assert engine["torch_rocm"] == "10.0"
    assert engine["hip_library"]["origin"] == "torch wheel"


def test_disabled_alignment_keeps_vllms_torch_and_says_what_it_would_have_done(
    vendor: Vendor, wheels: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor.stock_rocm10(wheels)
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())
    monkeypatch.setenv("INSTINCT_DISABLE_TORCH_ALIGNMENT", "")  # set, even empty, means on

    target = plan_target(LocalHost(), "10.0")
    report = install_vllm(LocalHost(), target)

    assert report.alignment is not None and report.alignment.action == "disabled"
    assert report.lines()[0] == (
        "torch_alignment: disabled by INSTINCT_DISABLE_TORCH_ALIGNMENT (would have installed "
        f"torch=={SDK_TORCH}; kept torch=={ENGINE_TORCH})"
    )
    assert report.installed["torch"] == ENGINE_TORCH
    assert report.device_check is not None and not report.device_check.ok
    assert report.lines()[-1].startswith("device_check: failed")
    # no plugin build exists for vLLM's own torch: reported, not silently left
    assert any("amd-torch-device-gfx942" in w for w in report.warnings)


def test_a_torch_that_runs_a_kernel_is_kept(
    vendor: Vendor, wheels: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    vendor.stock_rocm10(wheels)
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())
    monkeypatch.setenv("INSTINCT_TEST_FAKE_GPU_BUILD", "gitabc123")  # vLLM's build works

    report = install_vllm(LocalHost(), plan_target(LocalHost(), "10.0"))

    assert report.alignment is not None and report.alignment.action == "kept"
    assert report.installed["torch"] == ENGINE_TORCH
    assert report.lines()[0].startswith(f"torch_alignment: kept torch=={ENGINE_TORCH}")
    assert report.device_check is not None and report.device_check.ok


def test_dry_run_resolves_without_touching_the_host(
    vendor: Vendor, wheels: dict[str, Path]
) -> None:
    vendor.stock_rocm10(wheels)
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())

    proc = run_cli("engine", "install", "vllm", "--rocm", "10.0", "--dry-run", "--json")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["dry_run"] is True
    assert {p["name"]: p["version"] for p in doc["pins"]}["vllm"] == VLLM_DEV
    assert not managed_python().exists()
    assert not list(Path("/tmp").glob("instinct-engine-dry-run.*/venv/bin/python"))
    downloads = [f for f, status in vendor.server.asked(vendor.vllm.name) if f.endswith(".whl")]
    assert all(not f.startswith("vllm-0.28") for f in downloads)


def test_a_conflicting_flash_attn_on_the_vendor_index_fails_before_installing(
    vendor: Vendor, wheels: dict[str, Path]
) -> None:
    # vLLM asks for flash-attn 2.8.3, but only PyPI has that build; the vLLM index has 2.8.4
    vendor.vllm.add(
        wheels["vllm"],
        wheels["flash-attn-2.8.4"],
        wheels["amd-aiter-0.1.5.post2"],
        wheels["engine-torch"],
        wheels["engine-torchvision"],
        wheels["plugin-torch-drifted"],
        wheels["plugin-vision-drifted"],
    )
    vendor.torch.add(wheels["sdk-torch"], wheels["sdk-torchvision"])
    vendor.pypi.add(wheels["lmfe"], wheels["flash-attn-2.8.3"])
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())

    # with flash-attn on the vendor index, uv's first-index rule never reaches PyPI's 2.8.3:
    # the dependency resolve itself fails, and says so before anything is installed
    with pytest.raises(NotReadyError) as err:
        install_vllm(LocalHost(), plan_target(LocalHost(), "10.0"), dry_run=True)
    assert err.value.id == "pin_unresolved"
    assert "flash-attn" in err.value.message


def test_vllm_without_kernel_requirements_takes_the_series_and_says_why(
    vendor: Vendor, wheels: dict[str, Path]
) -> None:
    vendor.vllm.add(
        wheels["vllm-no-kernels"],
        wheels["flash-attn-2.8.3"],
        wheels["flash-attn-2.8.4"],
        wheels["amd-aiter-0.1.5.post2"],
        wheels["amd-aiter-0.1.6"],
        wheels["engine-torch"],
    )
    vendor.torch.add(wheels["sdk-torch"], wheels["sdk-torchvision"])
    vendor.pypi.add(wheels["lmfe"])
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())

    report = install_vllm(LocalHost(), plan_target(LocalHost(), "10.0"), dry_run=True)

    flash = report.pin("flash-attn")
    assert flash is not None and flash.version == "2.8.4"
    assert "series match 2.8.*" in flash.how and "does not require flash-attn" in flash.how


def test_an_index_serving_another_rocm_line_fails_closed(
    vendor: Vendor, wheels: dict[str, Path]
) -> None:
    vendor.vllm.add(wheels["vllm-other-line"])  # only a +rocm10.1.0 build in the 0.27 series
    vendor.vllm.add(wheels["flash-attn-2.8.3"], wheels["amd-aiter-0.1.5.post2"])
    vendor.vllm.add(wheels["engine-torch"], wheels["engine-torchvision"])
    vendor.vllm.add(wheels["plugin-torch-drifted"], wheels["plugin-vision-drifted"])
    vendor.torch.add(wheels["sdk-torch"], wheels["sdk-torchvision"])
    vendor.pypi.add(wheels["lmfe"])
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())

    with pytest.raises(NotReadyError) as err:
        install_vllm(LocalHost(), plan_target(LocalHost(), "10.0"))

    assert err.value.id == "rocm_build_mismatch"
    assert "ROCm 10.1" in err.value.message and "ROCm 10.0" in err.value.message
    assert not (managed_python().parent / "vllm").exists()  # nothing was installed


def test_python_tag_mismatch_names_the_required_tag(
    vendor: Vendor, wheels: dict[str, Path]
) -> None:
    vendor.stock_rocm10(wheels)
    vendor.write_pins(vendor.discovery_row(python_tag="cp314"), vendor.static_row())

    proc = run_cli("engine", "install", "vllm", "--rocm", "10.0", "--yes", "--json")

    assert proc.returncode == 3
    error = json.loads(proc.stdout)["error"]
    assert error["id"] == "python_tag_mismatch"
    assert "cp314" in error["message"] and "3.14" in error["fix"]


def test_static_row_installs_the_exact_pin_and_the_torch_it_pins(
    vendor: Vendor, wheels: dict[str, Path]
) -> None:
    vendor.vllm.add(wheels["static-vllm"], wheels["static-torch"])
    vendor.pypi.add(wheels["lmfe"], wheels["cuda-torch"])
    vendor.write_pins(vendor.static_row(rocm="7.0"), default="7.0")

    report = install_vllm(LocalHost(), plan_target(LocalHost(), "7.0.2"))

    assert report.target.route == "static"
    assert report.installed["vllm"] == STATIC_VLLM
    assert report.installed["torch"] == STATIC_TORCH
    assert report.alignment is not None and report.alignment.action == "aligned"


def test_unknown_minor_inside_a_discovery_major_fails_closed(vendor: Vendor) -> None:
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())

    proc = run_cli("engine", "install", "vllm", "--rocm", "10.2", "--yes", "--json")

    assert proc.returncode == 3
    error = json.loads(proc.stdout)["error"]
    assert error["id"] == "rocm_discovery_unpinned"
    assert "10.2" in error["message"] and "INSTINCT_VLLM_ROCM_INDEX_URL" in error["fix"]


def test_install_without_yes_on_a_non_interactive_stdin_refuses(vendor: Vendor) -> None:
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())

    proc = run_cli("engine", "install", "vllm", "--rocm", "10.0")

    assert proc.returncode == 2
    assert "--yes" in proc.stderr
    assert not managed_python().exists()


def test_an_unreachable_index_says_so(vendor: Vendor, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = f"http://127.0.0.1:{free_port()}/simple/"
    vendor.write_pins(
        vendor.discovery_row(vllm_index_url=closed, torch_index_url=closed),
        vendor.static_row(),
    )
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")

    with pytest.raises(NotReadyError) as err:
        install_vllm(LocalHost(), plan_target(LocalHost(), "10.0"), dry_run=True)

    assert err.value.id == "index_unreachable"
    assert closed in err.value.message and "proxy" in (err.value.fix or "")
