"""The acceptance harness (the real check needs a GPU host; see docs/engine.md).

Run here against a managed environment built by the real install from the test index,
whose stand-in torch "runs a kernel" and whose stand-in ``vllm serve`` answers /health and
/v1/completions: every step runs for real, and the library check must then fail, because
nothing maps a HIP runtime. That is the check that proves libraries on a real host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from instinct_serve.engine import launcher
from instinct_serve.engine.acceptance import library_verdict, run_acceptance
from instinct_serve.engine.install import install_vllm, plan_target
from instinct_serve.errors import UsageError
from instinct_serve.gather.detect import AMD_SMI_METRIC, AMD_SMI_STATIC
from instinct_serve.hosts import LocalHost
from tests.engine.conftest import Vendor
from tests.infra.fakebin import FakeBin
from tests.infra.ssh import free_port

SAMPLES = Path(__file__).resolve().parent.parent / "hardware" / "samples"


def test_library_verdict() -> None:
    venv = "/data/engines/vllm/venv"
    inside = [
        f"{venv}/lib/python3.12/site-packages/torch/lib/libamdhip64.so.7",
        f"{venv}/lib/python3.12/site-packages/torch/lib/librocblas.so.5",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ]
    ok, message, libs = library_verdict(inside, venv)
    assert ok and len(libs) == 2 and venv in message
    outside = [*inside, "/opt/rocm-7.0.0/lib/libhipblaslt.so.1"]
    ok, message, _ = library_verdict(outside, venv)
    assert not ok and "/opt/rocm-7.0.0/lib/libhipblaslt.so.1" in message
    ok, message, _ = library_verdict(["/usr/lib/libc.so.6"], venv)
    assert not ok and "no libamdhip64 mapped" in message
    ok, _, _ = library_verdict([f"{venv}2/lib/libamdhip64.so"], venv)  # a sibling dir
    assert not ok


def test_acceptance_runs_every_step_against_the_managed_engine(
    vendor: Vendor,
    wheels: dict[str, Path],
    fakebin: FakeBin,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vendor.stock_rocm10(wheels)
    vendor.write_pins(vendor.discovery_row(), vendor.static_row())
    monkeypatch.setenv("INSTINCT_TEST_FAKE_GPU_BUILD", "rocm10.0.0")
    install_vllm(LocalHost(), plan_target(LocalHost(), "10.0"))
    fakebin.add(
        "amd-smi",
        {
            " ".join(AMD_SMI_STATIC): (
                SAMPLES / "amd-smi_static_MI300X_x8_gpu_data.json"
            ).read_text(),
            " ".join(AMD_SMI_METRIC): (
                SAMPLES / "amd-smi_metric_mem-usage_MI300X_x8_gpu_data.json"
            ).read_text(),
        },
    )
    root = tmp_path / "root"
    root.mkdir()
    port = free_port()

    report = run_acceptance(
        LocalHost(), "facebook/opt-125m", port=port, timeout_s=60, sysfs_root=str(root)
    )

    checks = {c.id: c for c in report.checks}
    assert [c.id for c in report.checks] == [
        "engine",
        "device_check",
        "gpu",
        "health",
        "completion",
        "libraries",
    ]
    assert all(checks[i].ok for i in ("engine", "device_check", "gpu", "health", "completion"))
    assert "Paris" in checks["completion"].message
    assert not checks["libraries"].ok and "no libamdhip64 mapped" in checks["libraries"].message
    assert not report.passed
    st = launcher.status(LocalHost(), f"acceptance-{port}")
    assert st is not None and not st.running  # it stopped what it started


def test_acceptance_refuses_external_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCM_CLI_VLLM_COMMAND", "/opt/other/bin/vllm")
    with pytest.raises(UsageError) as err:
        run_acceptance(LocalHost(), "facebook/opt-125m")
    assert err.value.id == "external_override" and "ROCM_CLI_VLLM_COMMAND" in err.value.message
