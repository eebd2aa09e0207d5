"""``instinct plan --list``: every precision x TP the target could run, ranked, and why the
plan took the one it took (the NIM profile list, for AMD GPUs).

Each row is one checkpoint (a recipe variant, or the requested checkpoint) at one TP: its
weights per GPU, the KV cache tokens, how many full-context requests fit at once, and the
fit's verdict; a row that cannot start says why (no kernel for its precision, a TP the
kernels reject, not enough memory).

On GPUs with partition modes (MI300X, MI325X, MI300A, MI308X, MI350X, MI355X) the
``partition_modes`` rows put the current mode and the others side by side for the plan's
checkpoint: the logical GPUs and their memory, the smallest TP that fits, how many
endpoints of it the host holds, and the exact commands that switch to the mode (printed,
never run: ``instinct partition set MODE --yes`` runs them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import InstinctError, UsageError

if TYPE_CHECKING:
    from instinct_serve.catalog.config import AmdConfig
    from instinct_serve.fit.catalog_link import LaunchContext
    from instinct_serve.fit.estimate import FitReport, HardwareSpec
    from instinct_serve.gather.plan import Setting, _Sizer
    from instinct_serve.hardware.inventory import GpuInventory
    from instinct_serve.hardware.partitions import Layout
    from instinct_serve.hosts import Host
    from instinct_serve.options import PlanOptions
    from instinct_serve.plan.constraints import Shape


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
    size_basis: str | None = None  # exact | config | estimated (fit.meta.SIZE_BASES)
    chosen: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ModeChoice:
    """One partition mode of the target's GPUs for the plan's checkpoint."""

    mode: str  # "CPX/NPS4"
    current: bool
    partitions_per_gpu: int
    logical_gpus: int
    memory_per_device_gb: float | None
    memory_per_device_gib: float | None
    model_id: str
    tp: int | None  # the smallest TP that fits; None: none does
    replicas: int  # endpoints of that TP the host holds in this mode
    verdict: str | None
    why_not: str | None = None
    commands: list[str] = field(default_factory=list)  # to switch to it; [] when current
    steps: list[dict[str, Any]] = field(default_factory=list)

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
    partition_modes: list[ModeChoice] = field(default_factory=list)
    references: list[dict[str, Any]] = field(default_factory=list)  # AMD's (gather.reference)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "target": self.target,
            "objective": self.objective,
            "chosen_why": self.chosen_why,
            "plan_error": self.plan_error,
            "choices": [c.to_dict() for c in self.choices],
            "partition_modes": [m.to_dict() for m in self.partition_modes],
            "warnings": self.warnings,
            "references": self.references,
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


def plan_choices(
    opts: PlanOptions, host: Host | None = None, inventory: GpuInventory | None = None
) -> ChoiceList:
    """Every checkpoint x TP for ``opts`` on its target, ranked; the plan's pick first.
    ``inventory``: GPUs the caller already detected (else the host is asked)."""
    from instinct_serve.gather.plan import _fit_inputs, _Sizer, setting
    from instinct_serve.gather.reference import reference_rows

    base = setting(opts, host, inventory)
    inv, match = base.inventory, base.match
    first = inv.gpus[0] if inv.gpus else None
    target = f"{inv.gpu_count}x {(first.market_name or first.name) if first else 'GPU'}"
    listing = ChoiceList(opts.model, target, opts.objective, warnings=list(base.warnings))
    chosen = _plans_pick(listing, opts, host, inventory)
    hw, ctx = _fit_inputs(inv, base.hardware_source, match, base.gpu_key, base.overrides)
    sizer = _Sizer(hw, ctx, opts)
    candidates: list[tuple[str, str | None, str | None]] = []
    recipe = match.recipe
    if recipe is not None and match.kind != "base_model":
        candidates = [(v.model_id, v.precision, v.key) for v in recipe.variants.values()]
    else:
        from instinct_serve.fit.precision import checkpoint_precision

        meta = sizer.meta(match.model_id)
        precision, _where = checkpoint_precision(
            match.model_id, meta.config if meta is not None else None
        )
        candidates = [(match.model_id, precision, match.variant_key)]
    for candidate in candidates:
        listing.choices += _candidate_rows(opts, base, candidate, sizer, chosen)
    listing.choices.sort(key=_rank)
    served = next((c for c in candidates if chosen and c[0] == chosen[0]), candidates[0])
    listing.partition_modes = _mode_rows(opts, base, served, hw, ctx)
    listing.references = reference_rows([*(c[0] for c in candidates), opts.model], base.gpu_key)
    return listing


def _plans_pick(
    listing: ChoiceList, opts: PlanOptions, host: Host | None, inventory: GpuInventory | None
) -> tuple[str, int] | None:
    """The checkpoint and TP the plan takes (and why, on ``listing``), or None with the
    plan's error on ``listing``."""
    from instinct_serve.gather.plan import make_plan

    try:
        plan = make_plan(opts, host, inventory).plan
    except InstinctError as exc:
        listing.plan_error = exc.to_dict()
        return None
    listing.chosen_why = next(
        (r.why for r in plan.reasons if r.item.startswith("--tensor-parallel-size")),
        f"TP {plan.tensor_parallel_size}: one GPU fits it",
    )
    return (plan.model, plan.tensor_parallel_size)


def _candidate_rows(
    opts: PlanOptions,
    base: Setting,
    candidate: tuple[str, str | None, str | None],
    sizer: _Sizer,
    chosen: tuple[str, int] | None,
) -> list[Choice]:
    """One checkpoint at every power-of-two TP up to the GPUs there are."""
    from instinct_serve.gather.plan import checkpoint_kv
    from instinct_serve.gather.sizing import model_shape
    from instinct_serve.hardware.partitions import layout
    from instinct_serve.plan.constraints import Situation, tp_problems

    model_id, precision, key = candidate
    inv, ctx, recipe = base.inventory, sizer.ctx, base.match.recipe
    status = base.gfx_cfg.precision.status(precision)
    amd = _variant_config(opts, base, key, ctx)
    sizer.reports.clear()
    meta = sizer.meta(model_id)
    checkpoint_kv(ctx, opts, model_id, meta)  # sized with the KV dtype the plan takes
    shape = model_shape(meta)
    situation = Situation(
        env=dict(amd.env), vllm_version=ctx.vllm_version, partitions_per_gpu=layout(inv).per_gpu
    )
    rows: list[Choice] = []
    tp = 1
    while tp <= inv.gpu_count:
        row = Choice(model_id, precision, key, tp, status, None, False)
        problems = tp_problems(tp, shape, situation)
        report = None if problems else _report(sizer, model_id, tp)
        if report is None and meta is None and not problems:
            count = recipe.parameter_count if recipe is not None else None
            _estimated_row(row, count, sizer.hw, sizer)
            _stated_row(row, opts, base, sizer)
        if report is not None:
            row.size_basis = report.meta.size_basis
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
        rows.append(row)
        tp *= 2
    return rows


def _variant_config(
    opts: PlanOptions, base: Setting, key: str | None, ctx: LaunchContext
) -> AmdConfig:
    """The AMD configuration of one variant; the fit's launch context follows it."""
    from instinct_serve.catalog import amd_config
    from instinct_serve.gather.plan import follow_config

    amd = amd_config(
        base.match, base.gpu_key, variant=key, overrides=base.overrides,
        strategies=base.catalog.strategies,
    )  # fmt: skip
    follow_config(ctx, amd, opts)
    return amd


def _estimated_row(
    row: Choice, parameter_count: str | None, hw: HardwareSpec, sizer: _Sizer
) -> None:
    """A row with no metadata: ``fit.estimated`` at the row's TP (the recipe's parameter
    count x the precision), said to be an estimate; no KV figures."""
    from instinct_serve.fit.estimated import estimated_fit

    opts = sizer.options(None)
    rough = estimated_fit(
        row.model_id,
        parameter_count=parameter_count,
        precision=row.precision,
        hw=hw,
        utilization=opts.gpu_memory_utilization,
        vllm_version=opts.vllm_version,
        tp=row.tp,
    )
    if rough is None:
        return
    row.size_basis = rough.size_basis
    row.weights_per_gpu_gib = round(rough.per_gpu_bytes / 2**30, 1)
    if rough.remaining_bytes <= 0:
        row.why_not = rough.verdict_reason


def _stated_row(row: Choice, opts: PlanOptions, base: Setting, sizer: _Sizer) -> None:
    """A row with no metadata whose recipe states more VRAM than its TP's GPUs hold is
    ruled out as the plan rules it out (the stated VRAM is trusted before a count)."""
    from instinct_serve.gather.sizing import rough_of

    recipe = base.match.recipe
    var = recipe.variants.get(row.variant or "") if recipe is not None else None
    if row.why_not or var is None or not var.vram_minimum_gb:
        return
    stated = rough_of(opts, base.inventory, sizer, None, None, var.vram_minimum_gb).stated
    if stated is not None and stated.gpus > row.tp:
        row.why_not = f"{stated.why}: {stated.gpus} GPUs at least, more than TP {row.tp}"


def _report(sizer: _Sizer, model_id: str, tp: int) -> FitReport | None:
    """The fit at ``tp``, or None when the estimator refuses that TP for the model (more
    logical GPUs than heads: 64 CPX partitions)."""
    try:
        return sizer.report(model_id, tp)
    except UsageError:
        return None


def _mode_rows(
    opts: PlanOptions,
    base: Setting,
    served: tuple[str, str | None, str | None],
    hw: HardwareSpec,
    ctx: LaunchContext,
) -> list[ModeChoice]:
    """The target's partition modes for one checkpoint: the current mode first."""
    from instinct_serve.hardware.partitions import check_mode, layout, paired

    where = layout(base.inventory)
    part = where.product.partitioning if where.product is not None else None
    if part is None:
        return []
    model_id, _precision, key = served
    amd = _variant_config(opts, base, key, ctx)
    modes = paired(part)
    current = None
    if where.mode is not None:
        current = check_mode(part, where.mode) if where.mode.memory is None else where.mode
        modes = [current, *(m for m in modes if m != current)]
    sizing = _ModeSizing(opts, hw, ctx, model_id, dict(amd.env))
    return [
        sizing.row(where, part, mode, current is not None and mode == current) for mode in modes
    ]


@dataclass
class _ModeSizing:
    """Sizes the served checkpoint in each partition mode (its shape read once)."""

    opts: PlanOptions
    hw: HardwareSpec
    ctx: LaunchContext
    model_id: str
    env: dict[str, str]
    shape: Shape | None = None

    def row(self, where: Layout, part: Any, mode: Any, here: bool) -> ModeChoice:
        """One mode: its logical GPUs and their memory, the commands that switch to it, and
        the smallest TP that fits with the endpoints of it the host holds."""
        from dataclasses import replace

        from instinct_serve.gather.plan import _Sizer
        from instinct_serve.gather.sizing import model_shape
        from instinct_serve.hardware.inventory import gb, gib
        from instinct_serve.hardware.partitions import replicas, switch_steps
        from instinct_serve.plan.constraints import Situation, tp_problems

        k = next(m.partitions for m in part.modes if m.name == mode.compute)
        if here:
            groups = where.groups
        else:
            groups = [list(range(g * k, g * k + k)) for g in range(where.physical_gpus)]
        devices = sum(len(g) for g in groups)
        mem = where.memory_per_device if here else where.device_memory(k)
        steps = [] if here else switch_steps(part, where.mode, mode)
        row = ModeChoice(
            mode=mode.label,
            current=here,
            partitions_per_gpu=k,
            logical_gpus=devices,
            memory_per_device_gb=gb(mem) if mem else None,
            memory_per_device_gib=gib(mem) if mem else None,
            model_id=self.model_id,
            tp=None,
            replicas=0,
            verdict=None,
            commands=[s.shell for s in steps],
            steps=[s.to_dict() for s in steps],
        )
        if not mem:
            row.why_not = "the memory of a logical GPU is not known (--vram-gb)"
            return row
        sizer = _Sizer(replace(self.hw, vram_bytes=mem, gpu_count=devices), self.ctx, self.opts)
        meta = sizer.meta(self.model_id)
        if meta is None:
            row.why_not = sizer.problems.get(self.model_id, "the model could not be sized")
            return row
        if self.shape is None:
            self.shape = model_shape(meta)
        situation = Situation(env=dict(self.env), vllm_version=self.ctx.vllm_version,
                              partitions_per_gpu=k)  # fmt: skip
        tp, last = 1, None
        while tp <= devices:
            problems = tp_problems(tp, self.shape, situation)
            report = None if problems else _report(sizer, self.model_id, tp)
            if report is not None:
                last = report
                if report.fits:
                    row.tp, row.verdict = tp, report.verdict
                    row.replicas = len(replicas(groups, tp))
                    return row
            tp *= 2
        row.verdict = last.verdict if last is not None else None
        row.why_not = last.verdict_reason if last is not None else f"no TP up to {devices} fits"
        return row
