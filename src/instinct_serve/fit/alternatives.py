"""Smaller checkpoints that fit where the asked-for one does not: each candidate sized with
the same estimator (``fit.estimate``), unsupported precisions dropped, ranked. Pure; the
candidates are gathered by ``gather.alternatives.find_alternatives``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import UsageError
from instinct_serve.fit.estimate import FitOptions, FitReport, HardwareSpec, estimate, in_gb
from instinct_serve.fit.meta import ModelMeta

if TYPE_CHECKING:
    from instinct_serve.fit.served import ServerFit


@dataclass(frozen=True)
class Candidate:
    """A checkpoint that could replace the asked-for one (a recipe variant, a quantization)."""

    model_id: str
    precision: str
    origin: str  # recipe_variant | provider | amd
    meta: ModelMeta
    native_max_model_len: int | None = None


@dataclass(frozen=True)
class Alternative:
    candidate: Candidate
    report: FitReport
    native_precision: bool
    served: ServerFit | None = None  # the server's own answer (``fit.served``), when not vLLM's

    def figures(self) -> dict[str, Any]:
        """verdict, tp, min TP, KV room and context: the server's own where it answered."""
        if self.served is None:
            r = self.report
            return {
                "verdict": r.verdict,
                "tp": r.tp,
                "min_tp_required": r.min_tp_required,
                "remaining_for_kv_gb": in_gb(r.remaining_bytes),
                "recommended_max_model_len": r.recommended_max_model_len,
            }
        doc = self.served.to_dict()
        fit = doc["fit"]
        return {
            "verdict": doc["verdict"],
            "tp": fit["tp"],
            "min_tp_required": fit["min_tp_required"],
            "remaining_for_kv_gb": doc["remaining_for_kv_gb"],
            "recommended_max_model_len": fit["recommended_max_model_len"],
        }

    def to_dict(self) -> dict[str, Any]:
        got = self.figures()
        return {
            "model": self.candidate.model_id,
            "precision": self.candidate.precision,
            "origin": self.candidate.origin,
            "native_precision": self.native_precision,
            "verdict": got["verdict"],
            "tp": got["tp"],
            "min_tp_required": got["min_tp_required"],
            "weight_memory_gb": in_gb(self.report.weights.loaded_bytes),
            "remaining_for_kv_gb": got["remaining_for_kv_gb"],
            "recommended_max_model_len": got["recommended_max_model_len"],
            "metadata_source": self.report.meta.source,
        }


def judged(
    alts: Sequence[Alternative], answer: Callable[[FitReport], ServerFit]
) -> list[Alternative]:
    """The alternatives as another server answers for them (its verdict, TP and context),
    ranked again by its verdicts."""
    out = [replace(a, served=answer(a.report)) for a in alts]
    out.sort(
        key=lambda a: (
            _RANK.get(a.figures()["verdict"], 9),
            not a.native_precision,
            a.figures()["tp"],
            -a.figures()["recommended_max_model_len"],
        )
    )
    return out


_RANK = {"safe": 0, "tight": 1, "needs_tp": 2, "too_tight": 3, "does_not_fit": 4}
PRECISION_ALIASES = {
    "fp8": ("fp8", "fp8_ocp", "fp8_fnuz"),
    "w8a8": ("int8",),
    "int8": ("int8",),
    "int4": ("int4",),
    "fp4": ("nvfp4",),
}


def precision_supported(precision: str, unsupported: Iterable[str]) -> bool:
    names = PRECISION_ALIASES.get(precision.lower(), (precision.lower(),))
    blocked = {u.lower() for u in unsupported}
    return not any(n in blocked for n in names)


def alternatives(
    candidates: Sequence[Candidate],
    hw: HardwareSpec,
    opts: FitOptions,
    native_precisions: Iterable[str] | None = None,
    unsupported_precisions: Iterable[str] = ("nvfp4",),
) -> list[Alternative]:
    """Each candidate sized with the same estimator; unsupported precisions dropped.

    Ranked: fits first (safe, tight, then needing more GPUs), native precision before
    emulated, then fewer GPUs, then the longest context and the most KV room.
    """
    native = {p.lower() for p in native_precisions} if native_precisions is not None else None
    out: list[Alternative] = []
    for cand in candidates:
        if not precision_supported(cand.precision, unsupported_precisions):
            continue
        cand_opts = replace(
            opts,
            native_max_model_len=cand.native_max_model_len or opts.native_max_model_len,
            tp=None,
        )
        try:
            report = estimate(cand.meta, hw, cand_opts)
        except UsageError:
            continue
        aliases = PRECISION_ALIASES.get(cand.precision.lower(), (cand.precision.lower(),))
        is_native = native is None or any(a in native for a in aliases)
        out.append(Alternative(cand, report, is_native))
    out.sort(
        key=lambda a: (
            _RANK.get(a.report.verdict, 9),
            not a.native_precision,
            a.report.tp,
            -a.report.recommended_max_model_len,
            -a.report.remaining_bytes,
        )
    )
    return out
