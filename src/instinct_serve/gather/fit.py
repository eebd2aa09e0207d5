"""``instinct fit`` minus printing: resolve the GPUs (``hardware.target``), read the model's
metadata (``gather.model_meta``), then fit it (``fit.estimate``) and look for checkpoints
that fit when it does not. The CLI and the MCP ``fit`` tool both call ``fit_request``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from instinct_serve import servers
from instinct_serve.errors import InstinctError
from instinct_serve.fit.catalog_link import FitAnswer, LaunchContext, fit_options, launch_context
from instinct_serve.fit.overhead_table import normalise_platform
from instinct_serve.fit.served import ServerLaunch
from instinct_serve.gather.alternatives import find_alternatives
from instinct_serve.gather.detect import resolve_on
from instinct_serve.hardware.target import Target, catalog_key

if TYPE_CHECKING:
    from instinct_serve.fit.alternatives import Alternative
    from instinct_serve.fit.estimate import FitOptions, FitReport, HardwareSpec
    from instinct_serve.fit.estimated import EstimatedFit
    from instinct_serve.hosts import Host
    from instinct_serve.options import FitRequest

# A machine with no GPU fits for this profile, as ``plan`` does (with a note saying so).
FALLBACK_GPU = "mi300x"


def hardware_spec(target: Target) -> HardwareSpec:
    """The estimator's view of the resolved GPUs (smallest VRAM when they differ)."""
    from instinct_serve.fit.estimate import HardwareSpec

    inv = target.inventory
    if target.source == "manual":
        vram = inv.gpus[0].vram_total_bytes if inv.gpus else None
        return HardwareSpec(vram or 0, inv.gpu_count, None, "GPU", "manual")
    source = "profile" if target.source == "profile" else f"detect ({inv.source})"
    spec = HardwareSpec.from_inventory(inv, source=source)
    if inv.gfx_version in ("unknown", "mixed"):
        kinds = sorted({g.gfx_version for g in inv.gpus})
        spec = HardwareSpec(
            spec.vram_bytes, spec.gpu_count, kinds[0] if kinds else None, spec.name, spec.source
        )
    return spec


def fit_request(
    req: FitRequest,
    host: Host,
    *,
    fallback: bool = True,
    stage: Callable[[str], AbstractContextManager[Any]] | None = None,
) -> tuple[FitAnswer, list[str]]:
    """Fit ``req.model`` on the GPUs ``req`` names, or detects on ``host`` (reached only
    when detection is needed).

    ``fallback``: with no GPU found on a local host, fit for an MI300X node (as ``plan``).
    Returns the answer and the notes about the hardware.
    """
    target = resolve_on(
        req,
        lambda: host,
        sysfs_root=req.sysfs_root,
        default_gpu=FALLBACK_GPU if fallback and host.is_local else None,
    )
    hw = hardware_spec(target)
    platform = normalise_platform(req.platform) or hw.platform
    if target.source == "manual" and req.device_name:
        hw = replace(hw, name=req.device_name)
    hw = replace(hw, platform=platform)
    kwargs = req.estimate_kwargs()
    planned = None if req.tp is not None else plan_decision(req, host, target)
    if planned is not None:
        kwargs["tp"] = planned.tp
    kind = servers.get(req.server)
    answer = fit_model(
        req.model,
        hw,
        gpu=None if target.source == "manual" else catalog_key(target.inventory),
        revision=req.revision,
        alternatives=not req.no_alternatives,
        stage=stage,
        recipe_flags=kind.vocabulary == "vllm",
        **kwargs,
    )
    if planned is not None:
        answer = planned.apply(answer, same_launch=not (req.vllm_version or req.platform))
    base = answer.report or answer.estimated
    if base is not None:  # the server's own answer (vLLM's: the report itself)
        launch = ServerLaunch(
            planned.args if planned is not None else (),
            req.gpu_memory_utilization,
            req.max_model_len,
            req.kv_cache_dtype,
        )
        answer.served = kind.memory_model(base, launch)
        if answer.served is not base and answer.alternatives:  # judged by the server's model
            from instinct_serve.fit.alternatives import judged

            yours = replace(launch, args=())  # the plan was made for the asked-for checkpoint
            answer.alternatives = judged(
                answer.alternatives, lambda report: kind.memory_model(report, yours)
            )
    return answer, target.notes


@dataclass(frozen=True)
class PlanDecision:
    """What ``instinct plan`` decides for the same inputs: its TP, context and why."""

    tp: int
    context: int | None  # the plan's --max-model-len (None: vLLM's default, the native)
    why: str
    report: FitReport | None  # the plan's fit of its own launch, at that TP
    args: tuple[str, ...] = ()  # the plan's argv, in its server's words

    def apply(self, answer: FitAnswer, *, same_launch: bool) -> FitAnswer:
        """The fit at the plan's TP, said to be the plan's; with the plan's own launch
        (``same_launch``: no --vllm-version/--platform "what if") the plan's fit itself."""
        note = f"TP {self.tp}: the plan's choice for these inputs ({self.why})"
        if self.context:
            note += f"; context {self.context:,} as the plan launches it"
        answer.tp_asked = False
        if same_launch and self.report is not None and answer.report is not None:
            self.report.hardware = answer.report.hardware  # as fit resolved it
            self.report.notes = list(dict.fromkeys([*answer.report.notes, *self.report.notes]))
            answer.report = self.report
        done = answer.report or answer.estimated
        if done is not None:
            done.notes.insert(0, note)
        return answer


def plan_decision(req: FitRequest, host: Host, target: Target) -> PlanDecision | None:
    """The plan ``instinct plan`` makes for ``req``'s model on the GPUs fit resolved (the
    planner's own decision, not a copy of it); None when it refuses or the GPUs were given
    by hand (fit then chooses the TP itself)."""
    from dataclasses import fields

    from instinct_serve.gather.plan import make_plan
    from instinct_serve.options import PlanOptions
    from instinct_serve.options.jobs import SizingOptions

    if target.source == "manual":
        return None
    shared = {f.name: getattr(req, f.name) for f in fields(SizingOptions)}
    try:
        opts = PlanOptions(**shared, model=req.model, server=req.server)
        result = make_plan(opts, host, target=target)
    except InstinctError as exc:
        if exc.id == "bad_server":  # no launch of this server here: fit's answer is a what-if
            title = servers.get(req.server).title if req.server in servers.names() else req.server
            target.notes.append(
                f"`instinct plan --server {req.server}` refuses this: {exc.message}; what "
                f"follows is {title}'s memory model only"
            )
        return None
    plan = result.plan
    why = next(
        (r.why for r in plan.reasons if r.item.startswith("--tensor-parallel-size")),
        "the planner's",
    )
    return PlanDecision(
        plan.tensor_parallel_size, plan.max_model_len, why, result.fit, tuple(plan.vllm_args)
    )


def close_matches(model_id: str) -> list[str]:
    """Catalog ids near ``model_id`` for "not found" errors (empty when unavailable)."""
    try:
        from instinct_serve.catalog import close_matches as catalog_close

        return list(catalog_close(model_id, 5))
    except Exception:
        return []


# metadata errors an estimate from the recipe stands in for (offline, the Hub refusing)
_ESTIMABLE = ("model_metadata_unavailable", "hub_refused")


def _estimated(
    exc: InstinctError, model: str, ctx: LaunchContext, hw: HardwareSpec, opts: FitOptions
) -> EstimatedFit | None:
    """The ``estimated`` fit of a catalog model whose metadata cannot be had here."""
    from instinct_serve.fit.estimated import estimated_fit

    if exc.id not in _ESTIMABLE or not ctx.parameter_count:
        return None
    # the precision of this very checkpoint (a recipe id matches its default variant, which
    # may be another checkpoint: dots3-note-prev is bf16, its default variant the -fp8 one)
    own = [p for mid, p, _key in ctx.variants if mid.lower() == model.lower()]
    return estimated_fit(
        model,
        parameter_count=ctx.parameter_count,
        precision=own[0] if own else ctx.precision,
        hw=hw,
        utilization=opts.gpu_memory_utilization,
        vllm_version=opts.vllm_version,
        tp=opts.tp,
    )


def fit_model(
    model: str,
    hw: HardwareSpec,
    *,
    gpu: str | None = None,
    revision: str | None = None,
    alternatives: bool = True,
    stage: Callable[[str], AbstractContextManager[Any]] | None = None,
    recipe_flags: bool = True,
    **options: Any,
) -> FitAnswer:
    """Fit MODEL (a Hub id or a local directory) on ``hw``: the one path of the CLI and MCP.

    ``gpu`` names the profile for the catalog lookup (else the detected gfx); ``options``
    are ``fit_options``'s; ``stage`` wraps the slow steps (a spinner in the CLI);
    ``recipe_flags`` False: the recipe's vLLM flags and environment are not the launch's (a
    server that does not speak vLLM's command line).
    """
    from contextlib import nullcontext

    from instinct_serve.fit.estimate import estimate
    from instinct_serve.gather.model_dir import is_local_dir
    from instinct_serve.gather.model_meta import load_model_meta

    def step(text: str) -> AbstractContextManager[Any]:
        return stage(text) if stage is not None else nullcontext()

    is_dir = is_local_dir(model)
    ctx = (launch_context(model, gpu or hw.gfx_version) if not is_dir else None) or (
        LaunchContext()
    )
    if not recipe_flags and (ctx.launch_args or ctx.env):
        ctx.launch_args, ctx.env = [], {}
        ctx.notes.append("the recipe's vLLM flags are not this server's: not applied")
    opts, option_notes = fit_options(ctx, **options)
    with step(f"Reading metadata of {model}"):
        try:
            meta = load_model_meta(model, revision=revision, suggest=close_matches)
        except InstinctError as exc:
            rough = _estimated(exc, model, ctx, hw, opts)
            if rough is None:
                raise
            rough.notes[:0] = [*option_notes, *ctx.notes, exc.message]
            return FitAnswer(None, ctx, [], [], options.get("tp") is not None, rough)
    report = estimate(meta, hw, opts)
    report.notes = option_notes + ctx.notes + report.notes
    alts: list[Alternative] = []
    skipped: list[str] = []
    if not report.fits and report.verdict != "needs_tp" and alternatives and not is_dir:
        with step("Looking for checkpoints that fit"):
            alts, skipped = find_alternatives(model, ctx, hw, opts, meta.notes)
    return FitAnswer(report, ctx, alts, skipped, tp_asked=options.get("tp") is not None)
