"""Shared pieces of the detection tests: tool keys, an isolated host, sample loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from instinct_serve.gather.detect import (
    AMD_SMI_METRIC,
    AMD_SMI_PARTITION,
    AMD_SMI_STATIC,
    AMD_SMI_VERSION,
    HIPCONFIG_ROCMPATH,
    HIPCONFIG_VERSION,
    ROCM_SMI_QUERY,
)
from tests.infra.fakebin import FakeBin, load_fixture
from tests.infra.paths import SMI

SAMPLES = Path(__file__).resolve().parent / "samples"

STATIC = " ".join(AMD_SMI_STATIC)
METRIC = " ".join(AMD_SMI_METRIC)
PARTITION = " ".join(AMD_SMI_PARTITION)
VERSION = " ".join(AMD_SMI_VERSION)
ROCM_QUERY = " ".join(ROCM_SMI_QUERY)
HIP_ROCMPATH = " ".join(HIPCONFIG_ROCMPATH)
HIP_VERSION = " ".join(HIPCONFIG_VERSION)
TOOLS = ("amd-smi", "rocm-smi", "rocminfo", "hipconfig")
MIB = 2**20


def sample(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def fixture(name: str) -> str:
    return load_fixture(SMI / name)


@pytest.fixture
def tools(fakebin: FakeBin) -> FakeBin:
    """Every ROCm tool absent (shadowing real ones on a ROCm dev box); tests add fakes."""
    for name in TOOLS:
        fakebin.missing(name)
    return fakebin


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty host root: no /sys GPU nodes, no /opt/rocm."""
    path = tmp_path / "root"
    path.mkdir()
    return path
