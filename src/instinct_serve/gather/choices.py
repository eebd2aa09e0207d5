"""``instinct plan --list``: every precision x TP the target could run, ranked, and why the
plan took the one it took (the NIM profile list, for AMD GPUs).

Each row is one checkpoint (a recipe variant, or the requested checkpoint) at one TP: its
weights per GPU, the KV cache tokens, how many full-context requests fit at once, and the
fit's verdict; a row that cannot start says why (no kernel for its precision, a TP the
kernels reject, not enough memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import InstinctError

if TYPE_CHECKING:
    from instinct_serve.hosts import Host
    from instinct_serve.options import PlanOptions


@dataclass
class Choice:
    model_id: str
    precision: str | None
    variant: str | None
    tp: int
    status: str  # native | emulated | unsupported | unknown (the precision on this gfx)
    verdict: str | None  # the fit's, or None when the model could not be sized
    feasible: bool
    why_not: str | None = None
    weights_per_gpu_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_model_len: int | None = None
    full_context_concurrency: float | None = None
    chosen: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ChoiceList:
    model: str
    target: str
    objective: str
    choices: list[Choice] = field(default_factory=list)
    chosen_why: str | None = None
    plan_error: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "target": self.target,
            "objective": self.objective,
            "chosen_why": self.chosen_why,
            "plan_error": self.plan_error,
            "choices": [c.to_dict() for c in self.choices],
            "warnings": self.warnings,
        }


def _rank(choice: Choice) -> tuple[int, int, int, float, int]:
    status_rank = {"native": 0, "emulated": 1, "unknown": 2, "unsupported": 3}
    return (
        0 if choice.chosen else 1,
        0 if choice.feasible else 1,
        status_rank.get(choice.status, 2),
        -(choice.full_context_concurrency or 0.0),
        choice.tp,
    )


def plan_choices(opts: PlanOptions, host: Host | None = None) -> ChoiceList:
    """Every checkpoint x TP for ``opts`` on its target, ranked; the plan's pick first."""
    from instinct_serve.catalog import amd_config
    from instinct_serve.fit.precision import checkpoint_precision
    from instinct_serve.gather.plan import _fit_inputs, _Sizer, make_plan, setting
    from instinct_serve.plan.constraints import Shape, Situation, tp_problems

    base = setting(opts, host)
    inv, match = base.inventory, base.match
    first = inv.gpus[0] if inv.gpus else None
    target = f"{inv.gpu_count}x {(first.market_name or first.name) if first else 'GPU'}"
    listing = ChoiceList(opts.model, target, opts.objective, warnings=list(base.warnings))
    chosen: tuple[str, int] | None = None
    try:
        plan = make_plan(opts, host).plan
        chosen = (plan.model, plan.tensor_parallel_size)
        listing.chosen_why = next(
            (r.why for r in plan.reasons if r.item.startswith("--tensor-parallel-size")),
            f"TP {plan.tensor_parallel_size}: one GPU fits it",
        )
    except InstinctError as exc:
        listing.plan_error = exc.to_dict()

    hw, ctx = _fit_inputs(inv, base.hardware_source, match, base.gpu_key, base.overrides)
    sizer = _Sizer(hw, ctx, opts)
    candidates: list[tuple[str, str | None, str | None]] = []
    recipe = match.recipe
    if recipe is not None and match.kind != "base_model":
        candidates = [(v.model_id, v.precision, v.key) for v in recipe.variants.values()]
    else:
        meta = sizer.meta(match.model_id)
        precision, _where = checkpoint_precision(
            match.model_id, meta.config if meta is not None else None
        )
        candidates = [(match.model_id, precision, match.variant_key)]
    support = base.gfx_cfg.precision
    for model_id, precision, key in candidates:
        status = support.status(precision)
        amd = amd_config(
            match,
            base.gpu_key,
            variant=key,
            overrides=base.overrides,
            strategies=base.catalog.strategies,
        )
        ctx.launch_args = [*amd.args, *opts.extra_args]
        sizer.reports.clear()
        meta = sizer.meta(model_id)
        shape = None
        if meta is not None:
            from instinct_serve.fit.config import ModelConfig

            try:
                shape = Shape.of(ModelConfig(meta.config))
            except Exception:  # an odd config: no constraint rather than no list
                shape = None
        situation = Situation(env=dict(amd.env), vllm_version=ctx.vllm_version)
        tp = 1
        while tp <= inv.gpu_count:
            row = Choice(model_id, precision, key, tp, status, None, False)
            problems = tp_problems(tp, shape, situation)
            report = sizer.report(model_id, tp)
            if report is not None:
                row.verdict = report.verdict
                row.weights_per_gpu_gib = round(report.weights.per_rank_bytes / 2**30, 1)
                row.kv_cache_tokens = report.kv_tokens
                row.max_model_len = report.recommended_max_model_len
                native = report.native_max_model_len or 0
                if native and report.kv_tokens:
                    row.full_context_concurrency = round(report.kv_tokens / native, 2)
            if status == "unsupported":
                row.why_not = f"{precision} has no kernel on {base.gfx_cfg.gfx}"
            elif problems:
                row.why_not = problems[0][1]
            elif report is not None and not report.fits:
                row.why_not = report.verdict_reason
            row.feasible = row.why_not is None and (report is None or report.fits)
            row.chosen = chosen == (model_id, tp)
            listing.choices.append(row)
            tp *= 2
    listing.choices.sort(key=_rank)
    return listing
