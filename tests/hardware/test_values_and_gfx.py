"""The pure leaf helpers: sizes and units, PCI addresses, gfx targets, version strings."""

from __future__ import annotations

import pytest

from instinct_serve.hardware import gfx, rocm
from instinct_serve.hardware.values import (
    Unparsable,
    as_int,
    bdf_from_location,
    extract_json,
    normalize_bdf,
    to_bytes,
)

MIB = 2**20


@pytest.mark.parametrize(
    ("value", "default", "expected"),
    [
        ({"value": 196592, "unit": "MB"}, "B", 196592 * MIB),  # amd-smi "MB" are MiB
        ({"value": 196592, "unit": "MiB"}, "B", 196592 * MIB),
        ({"value": "196592", "unit": "MB"}, "B", 196592 * MIB),
        ({"value": 2, "unit": "GB"}, "B", 2 * 2**30),
        ({"value": 64, "unit": "KB"}, "B", 64 * 1024),
        ({"value": "N/A", "unit": "MB"}, "B", None),
        ({"value": 1, "unit": "parsecs"}, "B", None),
        (196592, "MB", 196592 * MIB),  # old amd-smi: bare numbers, MB implied
        ("206141652992", "B", 206141652992),  # rocm-smi: bytes as strings
        ("196592 MB", "B", 196592 * MIB),  # human-readable amd-smi
        ("201310208 KB", "B", 196592 * MIB),  # rocminfo pool size
        ("2.5 GB", "B", round(2.5 * 2**30)),
        ("N/A", "MB", None),
        (None, "MB", None),
        (True, "MB", None),
        (-1, "MB", None),
        (float("nan"), "MB", None),
        ([1], "MB", None),
    ],
)
def test_to_bytes(value: object, default: str, expected: int | None) -> None:
    assert to_bytes(value, default) == expected


def test_as_int() -> None:
    assert as_int("0x74a1") == 0x74A1
    assert as_int("29857") == 29857
    assert as_int(3.0) == 3
    odd: list[object] = ["N/A", "0xZZ", 3.5, True, None, []]
    assert [as_int(v) for v in odd] == [None] * 6


def test_pci_addresses() -> None:
    assert normalize_bdf("0000:C9:00.0") == "0000:c9:00.0"
    assert normalize_bdf("c9:00.0") == "0000:c9:00.0"
    assert normalize_bdf("N/A") is None and normalize_bdf("0000:c9:00") is None
    assert bdf_from_location(0, 9728) == "0000:26:00.0"  # rocminfo BDFID of MI300X GPU 0
    assert bdf_from_location(0, 37632) == "0000:93:00.0"
    assert bdf_from_location(1, (0x0C << 8) | (0x1F << 3) | 7) == "0001:0c:1f.7"


@pytest.mark.parametrize(
    ("number", "target"),
    [
        (90402, "gfx942"),
        (90010, "gfx90a"),
        (90500, "gfx950"),
        (90008, "gfx908"),
        (90006, "gfx906"),
        (100300, "gfx1030"),
        (110001, "gfx1101"),
        (120001, "gfx1201"),
        (0, None),
        (None, None),
        (91600, None),
    ],
)
def test_gfx_from_kfd_number(number: int | None, target: str | None) -> None:
    assert gfx.from_target_version(number) == target


def test_gfx_strings() -> None:
    assert gfx.normalize("gfx942:sramecc+:xnack-") == "gfx942"
    assert gfx.normalize("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-") == "gfx90a"
    assert gfx.normalize("GFX1100") == "gfx1100"
    assert gfx.normalize("gfx9010") is None  # rocm-smi's rendering of gfx90a
    assert gfx.demangle("gfx9010") == "gfx90a"
    assert gfx.demangle("gfx9012") == "gfx90c"
    assert gfx.demangle("gfx942") is None and gfx.demangle("N/A") is None


def test_gfx_resolution_order() -> None:
    assert gfx.resolve("gfx942", 0x7408, "MI250X") == ("gfx942", None)  # the field wins
    target, note = gfx.resolve("gfx9010", 0x7408, None)
    assert target == "gfx90a" and note and "'gfx9010'" in note
    assert gfx.resolve("gfx9010", None, None)[0] == "gfx90a"  # demangled
    assert gfx.resolve(None, None, "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2")[0] == "gfx90a"
    assert gfx.resolve(None, None, "MI308X")[0] == "gfx942"
    assert gfx.resolve(None, None, "AMD Instinct MI355X")[0] == "gfx950"
    assert gfx.resolve("N/A", None, "Some GPU") == ("unknown", None)


def test_product_names() -> None:
    assert gfx.product_name(0x74A2, "MI308X", "gfx942") == "AMD Instinct MI308X"
    assert gfx.product_name(None, "MI308X", "gfx942") == "AMD Instinct MI308X"
    assert gfx.product_name(None, "Instinct MI210", "gfx90a") == "AMD Instinct MI210"
    assert gfx.product_name(None, "Radeon RX 7900 XT", "gfx1100") == "Radeon RX 7900 XT"
    assert gfx.product_name(None, None, "gfx1101") == "AMD GPU (gfx1101)"


def test_version_sources() -> None:
    assert rocm.from_amd_smi_version('{"rocm_version": "6.4.1"}') == "6.4.1"
    assert rocm.from_amd_smi_version('[{"tool": "AMDSMI Tool", "rocm_version": "N/A"}]') is None
    assert rocm.from_info_file("6.4.0-47\n") == "6.4.0"
    assert rocm.from_info_file("garbage\n") is None and rocm.from_info_file("") is None
    assert rocm.from_rocm_path("/opt/rocm-6.2.4") == "6.2.4"
    assert rocm.from_rocm_path("/opt/rocm") is None
    assert rocm.from_hip_version("6.4.43482-0f2d60242") == "6.4"


def test_extract_json_skips_noise_and_rejects_fragments() -> None:
    assert extract_json('warning: x\n{"a": [1]}\ntrailer\n') == {"a": [1]}
    with pytest.raises(Unparsable, match="more than one"):
        extract_json("[1]\n[2, 3]\n")
    assert extract_json('{"a": 1}\n[WARNING] amdsmi: something\n') == {"a": 1}
    with pytest.raises(Unparsable):  # the second document runs off the end
        extract_json('{"gpu": 0}\n{"gpu": 1, "asic": {\n')
    # a nested, complete object inside a truncated document is not the document
    with pytest.raises(Unparsable):
        extract_json('{\n  "gpu_data": [\n    {"gpu": 0},\n{"gpu": 1}\n')
    with pytest.raises(Unparsable):
        extract_json("no json here")
    with pytest.raises(Unparsable):
        extract_json("[" * 100_000)
