"""Property tests: no input crashes a parser, and truncation never passes for a smaller host."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from instinct_serve.gather.detect import detect
from instinct_serve.hardware import amdsmi, rocm, rocminfo, rocmsmi, sysfs
from instinct_serve.hardware.values import Unparsable
from instinct_serve.hosts import LocalHost
from tests.hardware.conftest import ROCM_QUERY, STATIC, TOOLS, fixture, sample
from tests.infra.fakebin import write_fake

PARSERS: list[Callable[[str], Any]] = [
    amdsmi.parse_static,
    amdsmi.parse_metric,
    amdsmi.parse_partition,
    amdsmi.parse_text,
    rocmsmi.parse,
    rocminfo.parse,
    lambda text: sysfs.parse(sysfs.parse_dump(text)),
    rocm.from_amd_smi_version,
]

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["N/A", "0x74a1", "gfx9010", "196592 MB", "gfx942", "SPX", "0000:0c:00.0"]),
)
json_keys = st.one_of(
    st.text(max_size=8),
    st.sampled_from(
        [
            "gpu",
            "gpu_data",
            "asic",
            "vram",
            "size",
            "value",
            "unit",
            "bus",
            "bdf",
            "mem_usage",
            "total_vram",
            "used_vram",
            "partition",
            "market_name",
            "device_id",
            "target_graphics_version",
            "vram_size_mb",
            "card0",
            "Card Series",
            "GFX Version",
            "VRAM Total Memory (B)",
            "rocm_version",
        ]
    ),
)
json_docs = st.recursive(
    json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(json_keys, inner, max_size=5)
    ),
    max_leaves=25,
)


def _no_crash(parser: Callable[[str], Any], text: str) -> None:
    with contextlib.suppress(Unparsable):
        parser(text)


@settings(max_examples=150, deadline=None)
@given(doc=json_docs, noise=st.text(max_size=40))
def test_random_json_never_crashes_a_parser(doc: Any, noise: str) -> None:
    text = noise + "\n" + json.dumps(doc, indent=2)
    for parser in PARSERS:
        _no_crash(parser, text)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=300))
def test_random_text_never_crashes_a_parser(text: str) -> None:
    for parser in PARSERS:
        _no_crash(parser, text)


FULL_STATIC = [
    sample("amd-smi_static_MI300X_x8_gpu_data.json"),
    sample("amd-smi_static_MI300X_x8_list.json"),
    sample("amd-smi_static_MI355X_x8_gpu_data.json"),
    "\n".join(json.dumps(g) for g in json.loads(sample("amd-smi_static_MI300X_x8_list.json"))),
]


@settings(max_examples=200, deadline=None)
@given(which=st.integers(0, len(FULL_STATIC) - 1), data=st.data())
def test_truncated_static_is_all_or_nothing(which: int, data: st.DataObject) -> None:
    """A cut amd-smi output gives every GPU or none: never a partial count. Except where
    nothing can tell: output of one JSON document per GPU line cut exactly at the end of a
    line (its newline lost too) is a smaller host's whole output, so such cuts are left out
    (``assume``); a cut anywhere else in it is refused."""
    full = FULL_STATIC[which]
    cut = data.draw(st.integers(0, len(full.rstrip()) - 1))
    assume(full[cut : cut + 1] != "\n")
    try:
        parsed = amdsmi.parse_static(full[:cut])
    except Unparsable:
        return
    assert len(parsed.gpus) == 8


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_truncated_captures_never_crash(data: st.DataObject) -> None:
    name = data.draw(
        st.sampled_from(
            [
                "amd-smi_default_view_8xMI300X_rocm7.0.0_changelog.txt",
                "rocm-smi_MI300X_x4_concise_and_full.txt",
                "rocminfo_MI300X_x4_gfx942.txt",
                "rocm-smi_productname_use_meminfo_vram_RX7900XT.txt",
            ]
        )
    )
    text = fixture(name)
    cut = data.draw(st.integers(0, len(text)))
    for parser in PARSERS:
        _no_crash(parser, text[:cut])


@pytest.fixture(scope="module")
def fuzz_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bin dir and an empty root shared by the examples (hypothesis reuses the fixture)."""
    base = tmp_path_factory.mktemp("fuzz")
    for name in TOOLS:
        write_fake(base / "bin", name, {}, default=("", f"{name}: command not found\n", 127))
    write_fake(base / "bin", "rocm-smi", {ROCM_QUERY: sample("rocm-smi_MI300X_x4.json")})
    (base / "root").mkdir()
    return base


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(output=st.one_of(st.text(max_size=200), json_docs.map(json.dumps)))
def test_detect_falls_through_on_any_amd_smi_output(
    output: str, fuzz_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setenv("PATH", f"{fuzz_host / 'bin'}{os.pathsep}{os.environ['PATH']}")
    write_fake(fuzz_host / "bin", "amd-smi", {STATIC: output})
    inv = detect(LocalHost(), sysfs_root=str(fuzz_host / "root"))
    if inv.source == "amd-smi":  # the fuzzer built a valid amd-smi answer: fine too
        assert inv.gpu_count > 0
        return
    assert (inv.source, inv.gpu_count) == ("rocm-smi", 4)
    assert inv.warnings[0].startswith("amd-smi ")
    assert inv.warnings[0].endswith("; used rocm-smi")
