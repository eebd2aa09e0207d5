"""The vLLM pin table (``data/engine_pins.json``) and which row a ROCm SDK gets (pure).

The table is data, not code: each row says where its wheels come from and why. Resolution
follows three rules, in order:

1. ``INSTINCT_VLLM_ROCM_INDEX_URL`` set: install from that index alone. A published
   ``https://wheels.vllm.ai/rocm/<version>/<abi>`` URL pins ``vllm==<version>+<abi>``;
   any other URL discovers the newest ``vllm`` that index serves (only that index is
   asked, so the resolver can never fall through to PyPI's CUDA build).
2. A row for the SDK's ``major.minor``: use it.
3. No row: the default row, **unless** a discovery row shares the SDK's major (ROCm 10.x
   today). Guessing a static pin there would install an ABI-incompatible build, so the
   install fails closed, naming the detected version and the override.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from instinct_serve.engine.versions import Series, parse_series, python_request
from instinct_serve.errors import NotReadyError, UsageError

INDEX_OVERRIDE_ENV = "INSTINCT_VLLM_ROCM_INDEX_URL"
PINS_OVERRIDE_ENV = "INSTINCT_ENGINE_PINS"
VLLM_ROCM_INDEX_PREFIX = "https://wheels.vllm.ai/rocm"

Route = Literal["static", "discovery", "override"]
# Packages a row may give a version series for (the torch stack and vLLM's ROCm kernels).
SERIES_PACKAGES = ("vllm", "flash-attn", "amd-aiter", "torch", "torchvision", "torchaudio")
TORCH_STACK = ("torch", "torchvision", "torchaudio")


@dataclass(frozen=True)
class PinRow:
    """One ROCm ``major.minor`` line of the table."""

    rocm: Series
    route: Literal["static", "discovery"]
    python_tag: str
    vllm_index_url: str
    torch_index_url: str
    vllm_exact: str | None = None
    series: dict[str, str | None] = field(default_factory=dict)
    source: str = ""
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rocm": str(self.rocm),
            "route": self.route,
            "python_tag": self.python_tag,
            "vllm_exact": self.vllm_exact,
            "vllm_index_url": self.vllm_index_url,
            "torch_index_url": self.torch_index_url,
            "series": dict(self.series),
            "source": self.source,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class PinTable:
    rows: tuple[PinRow, ...]
    default: Series
    origin: str = "builtin"

    def row(self, series: Series) -> PinRow | None:
        return next((r for r in self.rows if r.rocm == series), None)

    @property
    def default_row(self) -> PinRow:
        row = self.row(self.default)
        assert row is not None  # checked by parse_pin_table
        return row

    @property
    def discovery_majors(self) -> frozenset[int]:
        return frozenset(r.rocm.major for r in self.rows if r.route == "discovery")


def _bad_table(origin: str, why: str) -> UsageError:
    return UsageError(
        f"the pin table {origin} is invalid: {why}",
        fix=f"fix the file or unset {PINS_OVERRIDE_ENV} to use the built-in table",
        id="bad_pin_table",
    )


def parse_pin_table(doc: Any, origin: str = "builtin") -> PinTable:
    """Validate the JSON document: a broken table must fail loudly, never half-load."""
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise _bad_table(origin, "expected an object with a 'rows' list")
    rows: list[PinRow] = []
    for n, raw in enumerate(doc["rows"]):
        where = f"row {n}"
        if not isinstance(raw, dict):
            raise _bad_table(origin, f"{where} is not an object")
        series = parse_series(str(raw.get("rocm", "")))
        if series is None:
            raise _bad_table(origin, f"{where}: 'rocm' must be major.minor")
        route = raw.get("route")
        if route not in ("static", "discovery"):
            raise _bad_table(origin, f"{where} (ROCm {series}): route must be static|discovery")
        tag = str(raw.get("python_tag", ""))
        try:
            python_request(tag)
        except ValueError:
            raise _bad_table(origin, f"ROCm {series}: python_tag {tag!r} is not cpXY") from None
        pkg_series = raw.get("series") or {}
        if not isinstance(pkg_series, dict) or any(
            k not in SERIES_PACKAGES or (v is not None and not isinstance(v, str))
            for k, v in pkg_series.items()
        ):
            raise _bad_table(origin, f"ROCm {series}: 'series' maps {SERIES_PACKAGES} to X.Y")
        exact = raw.get("vllm_exact")
        if route == "static" and not exact:
            raise _bad_table(origin, f"ROCm {series}: a static row needs vllm_exact")
        if route == "discovery" and not pkg_series.get("vllm"):
            raise _bad_table(origin, f"ROCm {series}: a discovery row needs series.vllm")
        for key in ("vllm_index_url", "torch_index_url"):
            if not str(raw.get(key, "")).startswith(("http://", "https://", "file://")):
                raise _bad_table(origin, f"ROCm {series}: {key} must be a URL")
        if any(r.rocm == series for r in rows):
            raise _bad_table(origin, f"ROCm {series} appears twice")
        rows.append(
            PinRow(
                rocm=series,
                route=route,
                python_tag=tag,
                vllm_index_url=str(raw["vllm_index_url"]),
                torch_index_url=str(raw["torch_index_url"]),
                vllm_exact=str(exact) if exact else None,
                series={str(k): v for k, v in pkg_series.items()},
                source=str(raw.get("source", "")),
                reason=str(raw.get("reason", "")),
            )
        )
    default = parse_series(str(doc.get("default_row", "")))
    if default is None or not any(r.rocm == default for r in rows):
        raise _bad_table(origin, "'default_row' must name one of the rows")
    if next(r for r in rows if r.rocm == default).route != "static":
        raise _bad_table(origin, "the default row must be a static pin")
    return PinTable(tuple(rows), default, origin)


def load_pin_table(path: str | Path | None = None) -> PinTable:
    """The shipped table, or the JSON file at ``path``."""
    if path is None:
        text = resources.files("instinct_serve.data").joinpath("engine_pins.json").read_text()
        origin = "builtin"
    else:
        origin = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise _bad_table(origin, exc.strerror or str(exc)) from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad_table(origin, f"not JSON ({exc})") from exc
    return parse_pin_table(doc, origin)


@dataclass(frozen=True)
class InstallTarget:
    """What one install will do: the route, the indexes and the requirement specs."""

    rocm: Series | None  # None only with the index override and an unknown SDK
    rocm_detected: str
    route: Route
    python_tag: str
    vllm_index_url: str
    torch_index_url: str
    vllm_spec: str  # "vllm==0.18.0+rocm700" (exact) or "vllm==0.27.*" / "vllm" (to discover)
    series: dict[str, str | None]
    row: PinRow | None
    notes: tuple[str, ...] = ()

    @property
    def vllm_is_exact(self) -> bool:
        return self.vllm_spec.startswith("vllm==") and not self.vllm_spec.endswith(".*")

    def to_dict(self) -> dict[str, Any]:
        return {
            "rocm": str(self.rocm) if self.rocm else None,
            "rocm_detected": self.rocm_detected,
            "route": self.route,
            "python_tag": self.python_tag,
            "vllm_index_url": self.vllm_index_url,
            "torch_index_url": self.torch_index_url,
            "vllm_spec": self.vllm_spec,
            "series": dict(self.series),
            "row": self.row.to_dict() if self.row else None,
            "notes": list(self.notes),
        }


_RELEASE_INDEX = re.compile(
    re.escape(VLLM_ROCM_INDEX_PREFIX) + r"/([0-9][0-9A-Za-z.\-_]*)/(rocm[0-9A-Za-z.\-_]+)/?$"
)


def vllm_build_from_index_url(url: str) -> str | None:
    """``https://wheels.vllm.ai/rocm/0.18.0/rocm700`` -> ``0.18.0+rocm700``; else None."""
    match = _RELEASE_INDEX.match(url.strip())
    return f"{match.group(1)}+{match.group(2)}" if match else None


def _override_target(
    table: PinTable,
    row: PinRow | None,
    series: Series | None,
    rocm_version: str | None,
    override: str,
) -> InstallTarget:
    """The target when INSTINCT_VLLM_ROCM_INDEX_URL names the index: vLLM and torch from it only."""
    if not override.startswith(("http://", "https://", "file://")):
        raise UsageError(
            f"{INDEX_OVERRIDE_ENV}={override!r} is not a URL",
            fix="set it to a PEP 503 index URL, e.g. https://wheels.vllm.ai/rocm/0.18.0/rocm700",
            id="bad_index_override",
        )
    build = vllm_build_from_index_url(override)
    base = row or table.default_row
    notes: list[str] = [
        f"{INDEX_OVERRIDE_ENV} is set: vLLM and its torch come from {override} only"
    ]
    if build is None:
        notes.append("the newest vllm that index serves is discovered and pinned")
    if series is None:
        notes.append("the SDK version is unknown, so +rocmX.Y builds are not checked against it")
    return InstallTarget(
        rocm=series,
        rocm_detected=rocm_version or "unknown",
        route="override",
        python_tag=base.python_tag,
        vllm_index_url=override,
        torch_index_url=override,
        vllm_spec=f"vllm=={build}" if build else "vllm",
        series={},
        row=None,
        notes=tuple(notes),
    )


def resolve_target(
    table: PinTable, rocm_version: str | None, index_override: str | None = None
) -> InstallTarget:
    """Pick the row (or override route) for the SDK version; see the module docstring."""
    override = (index_override or "").strip() or None
    series = parse_series(rocm_version)
    if series is None and override is None:
        raise NotReadyError(
            "cannot pick a vLLM build: the host's ROCm version is unknown"
            + (f" ({rocm_version!r} is not a version)" if rocm_version else ""),
            fix=f"pass --rocm X.Y, or set {INDEX_OVERRIDE_ENV} to a vLLM ROCm wheel index",
            id="rocm_version_unknown",
        )
    row = table.row(series) if series else None
    if override is not None:
        return _override_target(table, row, series, rocm_version, override)
    assert series is not None
    notes = []
    if row is None:
        if series.major in table.discovery_majors:
            known = ", ".join(str(r.rocm) for r in table.rows if r.rocm.major == series.major)
            raise NotReadyError(
                f"ROCm {rocm_version} has no vLLM pin: ROCm {series.major}.x builds are "
                f"only known through live discovery for {known}, and guessing the default "
                f"pin (vllm=={table.default_row.vllm_exact}) would install an "
                "ABI-incompatible build",
                fix=f"set {INDEX_OVERRIDE_ENV} to the vLLM wheel index for ROCm {series} "
                "and rerun, or add a row for it to the pin table "
                f"({PINS_OVERRIDE_ENV}=your-table.json)",
                id="rocm_discovery_unpinned",
                details={"rocm_version": rocm_version, "discovery_rows": known},
            )
        row = table.default_row
        notes.append(
            f"ROCm {series} has no row in the pin table; using the default pin "
            f"(built for ROCm {row.rocm})"
        )
    if row.route == "static":
        assert row.vllm_exact is not None
        spec = f"vllm=={row.vllm_exact}"
    else:
        spec = f"vllm=={row.series['vllm']}.*"
    return InstallTarget(
        rocm=series,
        rocm_detected=rocm_version or str(series),
        route=row.route,
        python_tag=row.python_tag,
        vllm_index_url=row.vllm_index_url,
        torch_index_url=row.torch_index_url,
        vllm_spec=spec,
        series=dict(row.series),
        row=row,
        notes=tuple(notes),
    )
