"""``fit --server sglang``'s answer: SGLang's own pool decides the verdict, the TP and the
context (``fit.served``'s model for SGLang; ``servers.sglang`` names it).

fit's estimator sizes the weights per rank and the KV layers at each TP (one weight model for
both servers); ``fit.sglang`` turns them into SGLang's pool (``max_total_num_tokens``). Here,
from sglang 0.5.23's source:

- **Context** (``configs/model_config.py`` ``_derive_context_length``): ``--context-length``
  (your ``--max-model-len``) when given, refused at start-up above the context derived from
  config.json (``fit.sglang.derived_context_length``) unless
  ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``; else the derived one. The recipe's context
  is vLLM's and is not used.
- **Longest request** (``managers/tp_worker.py`` ``get_worker_info``): ``max_req_len =
  min(context_len - 1, max_total_num_tokens - 1)``. A pool smaller than the context starts
  with a warning (long requests are refused when served); a pool of no token does not start
  ("Memory pool size is too small").
- **Verdict**, in fit's words: ``safe`` with at least 6 GB of pool per GPU and a full-length
  request held, ``tight`` with 2-6 GB or a pool shorter than the context, ``too_tight`` under
  2 GB, ``needs_tp`` when the TP was chosen for you, ``does_not_fit`` when the weights leave
  no pool, the context asked for is longer than the pool or the model's, or the TP needs
  more GPUs than are present.
- **TP**: the one given or planned (an SGLang plan's, ``plan.sglang``), else the smallest
  that fits on the GPUs present.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import UsageError
from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.estimate import (
    GB,
    MAX_TP,
    SAFE_BYTES,
    TIGHT_BYTES,
    FitReport,
    estimate,
    in_gb,
    in_gib,
)
from instinct_serve.fit.estimated import EstimatedFit, Share, estimated_fit
from instinct_serve.fit.sglang import (
    CONTEXT_BYTES,
    GIB,
    MIB,
    SGLANG_VERSION,
    SglangLaunch,
    SglangMemory,
    cell_bytes,
    default_fraction,
    derived_context_length,
    from_report,
    launch_from_args,
)

if TYPE_CHECKING:
    from instinct_serve.fit.served import ServerLaunch

__all__ = ["SglangFit", "sglang_answer"]

TITLE = "SGLang"
LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


@dataclass(frozen=True)
class _AtTp:
    """SGLang's sizing at one TP."""

    report: FitReport  # fit's weights and KV layers at this TP
    memory: SglangMemory
    context: int  # the context_len SGLang runs with
    requested: int | None  # --context-length given
    derived: int  # the context SGLang derives from config.json

    @property
    def tokens(self) -> int:
        return self.memory.max_total_num_tokens

    @property
    def headroom(self) -> str:
        pool = self.memory.kv_pool_bytes
        if pool <= 0 or self.tokens <= 1:
            return "none"
        return "safe" if pool >= SAFE_BYTES else "tight" if pool >= TIGHT_BYTES else "too_tight"

    @property
    def holds_requested(self) -> bool:
        return self.requested is None or self.tokens >= self.requested

    @property
    def refused(self) -> bool:
        """A --context-length above the derived one: SGLang does not start (unless told)."""
        return self.requested is not None and self.requested > self.derived

    @property
    def fits(self) -> bool:
        return self.headroom in ("safe", "tight") and self.holds_requested and not self.refused


@dataclass
class SglangFit:
    """``fit``'s answer for an SGLang launch (``to_dict``: the fit JSON's keys where SGLang has
    the figure, its own under ``sglang``; no vLLM figure)."""

    report: FitReport  # fit's sizing at this TP (weights, KV layers, hardware, metadata)
    memory: SglangMemory
    context_length: int
    context_source: str
    derived_context_length: int
    requested_context_length: int | None
    kv_cache_dtype: str  # --kv-cache-dtype as SGLang is launched (auto: the model's dtype)
    max_seq_len_fp8_kv: int
    min_tp_required: int | None
    min_tp_unbounded: int | None
    verdict: str
    verdict_reason: str
    headroom: str
    notes: list[str] = field(default_factory=list)

    server = "sglang"
    title = TITLE
    version = SGLANG_VERSION

    @property
    def fits(self) -> bool:
        return self.verdict in ("safe", "tight")

    @property
    def tp(self) -> int:
        return self.report.tp

    @property
    def max_total_num_tokens(self) -> int:
        return self.memory.max_total_num_tokens

    @property
    def max_context(self) -> int:
        """The longest context a request may have: the context, or the pool when shorter."""
        return max(0, min(self.context_length, self.max_total_num_tokens))

    @property
    def max_req_len(self) -> int:
        """SGLang's own figure: ``min(context_len - 1, max_total_num_tokens - 1)``."""
        return max(0, min(self.context_length, self.max_total_num_tokens) - 1)

    def per_gpu(self) -> dict[str, Any]:
        """One GPU as SGLang shares it: before loading | weights | KV pool | outside the
        static share (activations, graphs)."""
        m, vram = self.memory, self.report.hardware.vram_bytes
        parts = {
            "vram_bytes": vram,
            "before_loading_bytes": vram - m.pre_load_bytes,
            "weights_bytes": m.weights_bytes,
            "kv_cache_bytes": max(0, m.kv_pool_bytes),
            "outside_static_bytes": m.slack_bytes,
            "over_static_bytes": max(0, -m.kv_pool_bytes),
        }
        return {**parts, **{k.replace("_bytes", "_gib"): in_gib(v) for k, v in parts.items()}}

    def to_dict(self) -> dict[str, Any]:
        r, m = self.report, self.memory
        doc = r.to_dict()
        pool = max(0, m.kv_pool_bytes)
        tokens = self.max_total_num_tokens
        kept = ("model", "source", "metadata", "architecture", "attention_kind", "hardware")
        weights = [k for k in doc if k.startswith(("weight_", "weights_", "checkpoint_"))]
        return {
            "server": self.server,
            **{k: doc[k] for k in (*kept[:5], *weights)},
            "kv_cache_bytes_per_token": r.kv_cache_bytes_per_token,
            "kv_cache_bytes_per_token_per_gpu": m.cell_bytes,
            "kv_cache_dtype": self.kv_cache_dtype,
            "remaining_for_kv_bytes": m.kv_pool_bytes,
            "remaining_for_kv_gb": in_gb(m.kv_pool_bytes),
            "remaining_for_kv_gib": in_gib(m.kv_pool_bytes),
            "per_gpu": self.per_gpu(),
            "kv_cache": {
                "tokens": tokens,
                "pool_gib": in_gib(pool),
                "max_concurrency": round(tokens / self.context_length, 2),
                "at_max_model_len": self.context_length,
                "reproduces": f'"KV Cache is allocated. #tokens: N" (max_total_num_tokens) of '
                f"SGLang {SGLANG_VERSION}",
            },
            "fit": self._fit_doc(),
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "hardware": doc["hardware"],
            "sglang": {
                **m.to_dict(),
                "context_length": self.context_length,
                "context_length_source": self.context_source,
                "max_req_len": self.max_req_len,
            },
            "notes": list(self.notes),
        }

    def _fit_doc(self) -> dict[str, Any]:
        requested = self.requested_context_length
        return {
            "tp": self.tp,
            "weights_fit": self.memory.kv_pool_bytes > 0,
            "recommended_max_model_len": self.max_context,
            "native_max_model_len": self.derived_context_length,
            "native_max_model_len_source": self.context_source,
            "context_limited": self.max_total_num_tokens < self.context_length,
            "requested_max_model_len": requested,
            "requested_max_model_len_fits": None if requested is None else self.fits,
            "min_tp_required": self.min_tp_required,
            "min_tp_if_more_gpus": self.min_tp_unbounded,
            "max_seq_len_fp8_kv": self.max_seq_len_fp8_kv,
            "headroom": self.headroom,
        }


class _Sizer:
    """SGLang's sizing of one launch at each TP the model allows."""

    def __init__(self, report: FitReport, launch: SglangLaunch) -> None:
        self.base, self.launch = report, launch
        self.derived, self.derived_source = derived_context_length(
            ModelConfig(report.meta.config).text
        )
        self._cache: dict[int, _AtTp | None] = {}

    def at(self, tp: int) -> _AtTp | None:
        """SGLang's sizing at ``tp``; None where the model's heads do not split ``tp`` ways."""
        if tp not in self._cache:
            base = self.base
            try:
                report = (
                    base
                    if tp == base.tp
                    else estimate(base.meta, base.hardware, replace(base.options, tp=tp))
                )
            except UsageError:  # bad_tp_for_model
                self._cache[tp] = None
            else:
                self._cache[tp] = self._size(report)
        return self._cache[tp]

    def _size(self, report: FitReport) -> _AtTp:
        memory = from_report(report, self.launch)
        requested = self.launch.context_length
        return _AtTp(report, memory, requested or self.derived, requested, self.derived)

    def candidates(self) -> list[int]:
        tps = [1 << i for i in range(MAX_TP.bit_length()) if 1 << i <= MAX_TP]
        return [t for t in tps if self.at(t) is not None]


def sglang_answer(base: FitReport | EstimatedFit, launch: ServerLaunch) -> SglangFit | EstimatedFit:
    """SGLang's answer for ``base``'s model and GPUs: at its TP when it was given or planned,
    else at the smallest TP that fits on the GPUs present. An estimate made without metadata
    (``fit.estimated``) is made again in SGLang's static share."""
    if isinstance(base, EstimatedFit):
        return sglang_estimated(base, launch)
    report = base
    sized = launch_from_args(
        launch.args,
        mem_fraction_static=launch.gpu_memory_utilization,
        context_length=launch.max_model_len,
        kv_cache_dtype=launch.kv_cache_dtype,
    )
    sizer = _Sizer(report, sized)
    tps = sizer.candidates()
    count = report.hardware.gpu_count

    def fitting(t: int) -> bool:
        at = sizer.at(t)
        return at is not None and at.fits

    min_unbounded = next((t for t in tps if fitting(t)), None)
    min_required = next((t for t in tps if t <= count and fitting(t)), None)
    fixed = report.options.tp is not None
    present = [t for t in tps if t <= count] or [1]
    tp = report.tp if fixed else (min_required or present[-1])
    at = sizer.at(tp)
    assert at is not None  # the report's TP, or one of the candidates
    verdict, reason = _verdict(at, sizer, fixed, min_required, min_unbounded, count)
    fp8_cell = cell_bytes(at.report.layers, tp, 1)
    fp8_len = min(at.context, max(0, at.memory.kv_pool_bytes) // fp8_cell) if fp8_cell else 0
    notes = [*report.notes, *at.report.notes, *at.memory.notes]
    return SglangFit(
        report=at.report,
        memory=at.memory,
        context_length=at.context,
        context_source=("--context-length" if at.requested is not None else sizer.derived_source),
        derived_context_length=sizer.derived,
        requested_context_length=at.requested,
        kv_cache_dtype=sized.kv_cache_dtype or "auto",
        max_seq_len_fp8_kv=int(fp8_len),
        min_tp_required=min_required,
        min_tp_unbounded=min_unbounded,
        verdict=verdict,
        verdict_reason=reason,
        headroom=at.headroom,
        notes=list(dict.fromkeys(notes)),
    )


def sglang_estimated(rough: EstimatedFit, launch: ServerLaunch) -> EstimatedFit:
    """The weights-only estimate (no config.json here) in SGLang's static share: the free
    memory before loading x the fraction (given, or SGLang's default for the GPU and TP)."""
    given = launch_from_args(launch.args, mem_fraction_static=launch.gpu_memory_utilization)
    hw = rough.hardware
    pre = hw.vram_bytes - CONTEXT_BYTES.get(hw.platform, CONTEXT_BYTES["cuda"])

    def share(tp: int) -> Share:
        fraction = given.mem_fraction_static
        if fraction is None:
            fraction = default_fraction(
                hw.vram_bytes / MIB, tp, given, mla=False, platform=hw.platform
            )[0]
        return Share(
            "sglang",
            f"{TITLE} {SGLANG_VERSION}",
            SGLANG_VERSION,
            fraction,
            int(pre * fraction),
            0,
            f"static share ({fraction:g} x {pre / GIB:.1f} GiB free before loading)",
        )

    again = estimated_fit(
        rough.model_id,
        parameter_count=rough.parameter_count,
        precision=rough.precision,
        hw=hw,
        tp=rough.tp if rough.tp_given else None,
        share=share,
    )
    assert again is not None  # the same parameter count and precision gave ``rough``
    note = (
        "SGLang's KV pool (max_total_num_tokens) needs the KV bytes per token from "
        "config.json: neither its tokens nor the context SGLang derives are checked"
    )
    return replace(again, notes=list(dict.fromkeys([*rough.notes, *again.notes, note])))


def _verdict(
    at: _AtTp,
    sizer: _Sizer,
    fixed: bool,
    min_required: int | None,
    min_unbounded: int | None,
    count: int,
) -> tuple[str, str]:
    m, tp = at.memory, at.report.tp
    pool = (
        f"SGLang's KV pool {in_gib(max(0, m.kv_pool_bytes))} GiB per GPU at TP {tp} "
        f"(--mem-fraction-static {m.mem_fraction_static:g}): {m.max_total_num_tokens:,} tokens"
    )
    if tp > count:
        return "does_not_fit", f"TP {tp} needs {tp} GPUs and {count} are present; {pool}"
    if at.refused:
        return "does_not_fit", (
            f"--context-length {at.requested:,} is longer than the model's "
            f"{sizer.derived:,} ({sizer.derived_source}): SGLang refuses to start unless "
            f"{LONGER_CONTEXT_ENV}=1"
        )
    short = ""
    if at.tokens < at.context:
        short = (
            f", fewer than the context length {at.context:,}: a full-length request cannot be "
            f"served (SGLang warns at start-up); give --max-model-len {at.tokens:,} or less "
            "(SGLang's --context-length), or more memory"
        )
    if at.fits and (fixed or tp == 1):
        if at.headroom == "safe" and not short:
            return "safe", pool
        if short:
            return "tight", pool + short
        return "tight", pool + f" (under {SAFE_BYTES // GB} GB of pool: few long requests)"
    if at.fits:
        return "needs_tp", f"does not fit one GPU; TP {tp} fits: {pool}{short}"
    if min_required is not None and min_required > tp:
        return "needs_tp", f"{pool}; TP {min_required} fits on the GPUs present"
    if at.headroom in ("safe", "tight") and not at.holds_requested:
        return "does_not_fit", (
            f"--max-model-len {at.requested:,} (SGLang's --context-length) is longer than "
            f"{pool}; SGLang refuses such requests"
        )
    if at.headroom == "too_tight":
        return "too_tight", pool + " (under 2 GB: a few requests at most)"
    more = (
        f"; TP {min_unbounded} would fit with {min_unbounded} such GPUs"
        if min_unbounded is not None and min_unbounded > count
        else ""
    )
    return "does_not_fit", (
        f"weights {in_gib(m.weights_bytes)} GiB per GPU leave no KV pool in SGLang's static "
        f"share ({m.mem_fraction_static:g} x {in_gib(m.pre_load_bytes)} GiB free before "
        f"loading) at TP {tp}: SGLang refuses to start{more}"
    )
