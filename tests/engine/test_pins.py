"""The pin table: the shipped data is valid and every row says where it comes from; the
row choice follows the static / default / discovery fail-closed / override rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from instinct_serve.engine.pins import load_pin_table, parse_pin_table, resolve_target
from instinct_serve.engine.versions import Series
from instinct_serve.errors import NotReadyError, UsageError


def test_shipped_table_is_valid_and_documented() -> None:
    table = load_pin_table()
    assert table.default_row.route == "static"
    assert {str(r.rocm) for r in table.rows} >= {"7.0", "7.2", "10.0", "10.1"}
    assert table.discovery_majors == frozenset({10})
    for row in table.rows:
        assert row.source and row.reason, row.rocm
        assert row.vllm_index_url.startswith("https://")
    discovery = table.row(Series(10, 0))
    assert discovery is not None and discovery.python_tag == "cp314"
    assert discovery.series["vllm"] == "0.27" and discovery.series["flash-attn"] == "2.8"


@pytest.mark.parametrize(
    ("rocm", "route", "spec"),
    [
        ("7.0.2", "static", "vllm==0.18.0+rocm700"),
        ("7.2.3", "static", "vllm==0.26.0+rocm723"),
        ("10.0.0a20260423", "discovery", "vllm==0.27.*"),
        ("10.1.0", "discovery", "vllm==0.29.*"),
    ],
)
def test_rows_by_major_minor(rocm: str, route: str, spec: str) -> None:
    target = resolve_target(load_pin_table(), rocm)
    assert (target.route, target.vllm_spec) == (route, spec)
    assert target.rocm_detected == rocm


def test_unknown_minor_outside_discovery_majors_takes_the_default_with_a_note() -> None:
    target = resolve_target(load_pin_table(), "6.4.1")
    assert target.vllm_spec == "vllm==0.26.0+rocm723"
    assert "no row" in target.notes[0] and "7.2" in target.notes[0]


def test_unknown_minor_inside_a_discovery_major_fails_closed() -> None:
    with pytest.raises(NotReadyError) as err:
        resolve_target(load_pin_table(), "10.2.0")
    assert err.value.id == "rocm_discovery_unpinned"
    assert "10.2.0" in err.value.message
    assert "INSTINCT_VLLM_ROCM_INDEX_URL" in (err.value.fix or "")


def test_the_override_wins_and_pins_what_a_release_url_names() -> None:
    url = "https://wheels.vllm.ai/rocm/0.18.0/rocm700"
    target = resolve_target(load_pin_table(), "10.2.0", url)  # even in the fail-closed case
    assert target.route == "override"
    assert target.vllm_spec == "vllm==0.18.0+rocm700"
    assert target.vllm_index_url == target.torch_index_url == url
    other = resolve_target(load_pin_table(), "10.0", "https://mirror.example/vllm/simple/")
    assert other.vllm_spec == "vllm" and other.python_tag == "cp314"
    unknown = resolve_target(load_pin_table(), None, url)
    assert unknown.rocm is None and any("not checked" in n for n in unknown.notes)
    with pytest.raises(UsageError):
        resolve_target(load_pin_table(), "7.0", "not a url")


def test_unknown_rocm_without_override_is_not_ready() -> None:
    with pytest.raises(NotReadyError) as err:
        resolve_target(load_pin_table(), None)
    assert err.value.id == "rocm_version_unknown" and "--rocm" in (err.value.fix or "")


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda d: d.update(default_row="9.9"), "default_row"),
        (lambda d: d["rows"][0].update(route="magic"), "route"),
        (lambda d: d["rows"][0].update(python_tag="py3"), "python_tag"),
        (lambda d: d["rows"][0].update(vllm_exact=None), "vllm_exact"),
        (lambda d: d["rows"][2]["series"].update(vllm=None), "series.vllm"),
        (lambda d: d["rows"].append(dict(d["rows"][0])), "twice"),
        (lambda d: d["rows"][0].update(vllm_index_url="ftp://x"), "URL"),
        (lambda d: d.update(default_row="10.0"), "static"),
    ],
)
def test_broken_tables_fail_loudly(mutate: object, why: str) -> None:
    doc = json.loads(
        (
            Path(__file__).resolve().parents[2] / "src/instinct_serve/data/engine_pins.json"
        ).read_text()
    )
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(UsageError) as err:
        parse_pin_table(doc, "test")
    assert err.value.id == "bad_pin_table" and why in err.value.message


def test_a_missing_or_invalid_table_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        load_pin_table(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError):
        load_pin_table(bad)
