"""Version arithmetic: ROCm series in every spelling, local tags, comparisons."""

from __future__ import annotations

import pytest

from instinct_serve.engine.versions import (
    Series,
    at_least,
    local_rocm_series,
    parse_series,
    python_request,
    release,
    require_series,
    split_local,
)
from instinct_serve.errors import UsageError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7.0.2", Series(7, 0)),
        ("10.0.0a20260423", Series(10, 0)),
        ("7.0.51831-a3e329ad8", Series(7, 0)),
        ("v6.4", Series(6, 4)),
        ("7.13.0rc1", Series(7, 13)),
        ("seven", None),
        ("7", None),
        (None, None),
    ],
)
def test_parse_series(text: str | None, expected: Series | None) -> None:
    assert parse_series(text) == expected


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("2.9.0+rocm7.0", Series(7, 0)),
        ("2.9.0+rocm7.0.2", Series(7, 0)),
        ("0.27.1.dev5+rocm10.0.0.gf46a9dfe2.d20260826", Series(10, 0)),
        ("0.18.0+rocm700", Series(7, 0)),
        ("0.26.0+rocm723", Series(7, 2)),
        ("0.30.0+rocm100", Series(10, 0)),
        ("0.30.0+rocm1001", Series(10, 0)),
        ("2.12.0+gitabc123", None),
        ("2.12.0+cu128", None),
        ("2.12.0", None),
        ("2.12.0+rocmX", None),
    ],
)
def test_local_rocm_series(version: str, expected: Series | None) -> None:
    assert local_rocm_series(version) == expected


def test_split_and_release() -> None:
    assert split_local("2.9.0+rocm7.0") == ("2.9.0", "rocm7.0")
    assert split_local("2.9.0") == ("2.9.0", None)
    assert release("0.27.1.dev5+rocm10.0.0.g1") == "0.27.1.dev5"


@pytest.mark.parametrize(
    ("installed", "minimum", "expected"),
    [
        ("0.11.0", "0.10.2", True),
        ("0.10.2", "0.11.0", False),
        ("0.27.1.dev5+rocm10.0.0.g1", "0.27.1", True),  # a dev build of the release counts
        ("0.18.0+rocm700", "0.18", True),
        ("0.9.2", "nightly", None),
        ("garbage", "0.1", None),
    ],
)
def test_at_least(installed: str, minimum: str, expected: bool | None) -> None:
    assert at_least(installed, minimum) is expected


def test_python_request_and_require_series() -> None:
    assert python_request("cp314") == "3.14"
    with pytest.raises(ValueError):
        python_request("py3")
    assert require_series("7.0") == Series(7, 0)
    with pytest.raises(UsageError):
        require_series("latest")
