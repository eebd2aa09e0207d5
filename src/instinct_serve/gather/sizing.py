"""How big the model is and the TP it takes, for ``gather.plan``: the fit at each TP when
the metadata is known, else the rough size (``catalog.rough``: the recipe's stated VRAM,
then a parameter count; never a MoE's active count read from its name), the recipe's own TP
and the kernel constraints (``plan.decisions.choose_tp``). The rough size also answers for
the variant choice when no metadata is known (``variant_fits``), as ``plan --list`` does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from instinct_serve.errors import UsageError
from instinct_serve.plan.planner import TpDecision, VariantChoice, choose_tp

if TYPE_CHECKING:
    from collections.abc import Callable

    from instinct_serve.catalog.config import AmdConfig
    from instinct_serve.catalog.matching import Match
    from instinct_serve.catalog.rough import RoughSize
    from instinct_serve.fit.catalog_link import LaunchContext
    from instinct_serve.fit.meta import ModelMeta
    from instinct_serve.gather.plan import _Sizer
    from instinct_serve.hardware.inventory import GpuInventory
    from instinct_serve.options import PlanOptions
    from instinct_serve.plan.constraints import Shape, Situation
    from instinct_serve.plan.refusals import Refusal


def recipe_tp(match: Match, variant: VariantChoice, amd: AmdConfig, gpus: int) -> int | None:
    """The TP the recipe documents for this GPU, as upstream renders it: a
    ``--tensor-parallel-size`` in its merged AMD args wins (the last flag wins), then
    tensor+expert parallel's whole node (single_node_tep: "TP must be set to GPU count"),
    then the variant's or strategy's declared ``tp``. None for a base-model match whose
    checkpoint is another precision than the recipe's variants (their shapes differ)."""
    from instinct_serve import vllm_args
    from instinct_serve.catalog.config import default_strategy

    recipe = match.recipe
    if recipe is None or (match.kind == "base_model" and variant.vram_minimum_gb is None):
        return None
    given = None
    for layer in amd.layers:  # upstream's order: only a flag after its parallel flag wins
        value = vllm_args.value(layer.args, "--tensor-parallel-size", "-tp")
        if value is not None:
            given = value if _after_parallel_flag(layer.name) else None
    if given and given.isdigit():
        return int(given)
    if default_strategy(recipe) == "single_node_tep" and gpus > 1:
        return 1 << (gpus.bit_length() - 1)
    return recipe.declared_tp(variant.key or "default", amd.hardware_id)


def _after_parallel_flag(layer: str) -> bool:
    """Whether upstream applies this layer's args after its own ``--tensor-parallel-size``
    (command-synthesis.js: base, variant, the variant's per-GPU override and the strategy
    come before it; strategy overrides, AMD hardware overrides and features after)."""
    return "hardware_overrides.amd" in layer or layer.startswith(
        ("strategy_overrides.", "feature ", "gpu ")
    )


def model_shape(meta: ModelMeta | None) -> Shape | None:
    """The shape the kernel constraints check (``plan.constraints``), or None: an odd
    config means no constraint rather than no plan."""
    if meta is None:
        return None
    from instinct_serve.fit.config import ModelConfig
    from instinct_serve.plan.constraints import Shape

    try:
        return Shape.of(ModelConfig(meta.config))
    except Exception:
        return None


def rough_of(
    opts: PlanOptions,
    inv: GpuInventory,
    sizer: _Sizer,
    params: str | None,
    precision: str | None,
    vram_minimum_gb: float | None,
    count_from: str = "the recipe's parameter count",
    unsized: str = "",
) -> RoughSize:
    """``catalog.rough.rough_size`` on the plan's GPUs at the utilization it sizes with."""
    from instinct_serve.catalog.rough import rough_size

    return rough_size(
        parameter_count=params,
        precision=precision,
        vram_minimum_gb=vram_minimum_gb,
        vram_bytes=inv.vram_bytes or 0,
        gpu_count=inv.gpu_count,
        utilization=opts.gpu_memory_utilization
        or sizer.options(None).gpu_memory_utilization
        or 0.9,
        count_from=count_from,
        unsized_why=unsized,
    )


def variant_fits(
    opts: PlanOptions, inv: GpuInventory, sizer: _Sizer, match: Match
) -> Callable[[str], str | None]:
    """The fit verdict of a checkpoint for choosing the variant: the fit's when its
    metadata is known, else the rough size's (``ESTIMATED_FIT`` or ``ESTIMATED_NO_FIT``, as
    ``plan --list`` rows say), None when nothing is known."""
    from instinct_serve.plan.decisions import ESTIMATED_FIT, ESTIMATED_NO_FIT

    def verdict(model_id: str) -> str | None:
        exact = sizer.verdict(model_id)
        recipe = match.recipe
        if exact is not None or recipe is None or sizer.meta(model_id) is not None:
            return exact
        var = next((v for v in recipe.variants.values() if v.model_id == model_id), None)
        if var is None:
            return None
        rough = rough_of(
            opts, inv, sizer, recipe.parameter_count, var.precision, var.vram_minimum_gb
        )
        known = rough.preferred()
        if not known:
            return None
        return ESTIMATED_FIT if known[0].tp is not None else ESTIMATED_NO_FIT

    return verdict


def _count_from_name(model_id: str) -> tuple[str | None, str, str]:
    """(count, what says so, why there is none): the name's count, never a MoE's active
    count (``Llama-4-Maverick-17B-128E``: 17B active of ~400B) taken for its size."""
    from instinct_serve.catalog.rough import moe_active_count_from_name, parameter_count_from_name

    moe = moe_active_count_from_name(model_id)
    if moe is not None:
        active, experts = moe
        why = (
            f"its name's {active} is the active count of a {experts}-expert MoE, not its "
            "total, and no metadata says the total offline"
        )
        return None, "its name's count", why
    return parameter_count_from_name(model_id), "its name's count", ""


def _named_moe(match: Match, model_id: str) -> bool:
    """A MoE by what is known without metadata: the recipe's architecture, else its name
    (``-A22B``, ``17B-128E``, ``8x7B``)."""
    from instinct_serve.catalog.rough import is_moe_name

    recipe = match.recipe
    if recipe is not None and "moe" in str(recipe.architecture or "").lower():
        return True
    return is_moe_name(model_id)


def _situation(opts: PlanOptions, amd: AmdConfig, ctx: LaunchContext, per_gpu: int) -> Situation:
    from instinct_serve.plan.constraints import Situation

    return Situation(
        env=dict(amd.env) | opts.env_literal,
        vllm_version=ctx.vllm_version,
        partitions_per_gpu=per_gpu,
    )


def tp_rules(
    opts: PlanOptions,
    sizer: _Sizer,
    model_id: str,
    amd: AmdConfig,
    ctx: LaunchContext,
    per_gpu: int = 1,
) -> Callable[[int], list[tuple[str, str]]]:
    """The kernel and sharding rules (``plan.constraints.tp_problems``) as the plan's TP was
    checked with them, for a TP decided later (a multi-node split's TP per node)."""
    from instinct_serve.plan.constraints import tp_problems

    shape = model_shape(sizer.meta(model_id))
    situation = _situation(opts, amd, ctx, per_gpu)
    return lambda tp: tp_problems(tp, shape, situation)


def decide_tp(
    opts: PlanOptions,
    inv: GpuInventory,
    sizer: _Sizer,
    variant: VariantChoice,
    match: Match,
    amd: AmdConfig,
    ctx: LaunchContext,
    found_refusals: list[Refusal],
    recipe_tp: int | None,
    per_gpu: int = 1,
) -> TpDecision:
    """``plan.decisions.choose_tp`` with the fits, the rough size and the model's shape."""
    from instinct_serve.plan.refusals import refuse

    meta = sizer.meta(variant.model_id)
    shape = model_shape(meta)
    params, count_from, unsized = None, "the recipe's parameter count", ""
    if meta is None:  # no metadata: the recipe's count (the legacy entry's, the name's)
        if match.recipe is not None:
            params = match.recipe.parameter_count
        elif match.legacy is not None:
            params, count_from = match.legacy.parameter_count, "the catalog's parameter count"
        else:
            params, count_from, unsized = _count_from_name(variant.model_id)
    rough = rough_of(
        opts, inv, sizer, params, variant.precision, variant.vram_minimum_gb, count_from, unsized
    )._replace(moe=_named_moe(match, variant.model_id))
    situation = _situation(opts, amd, ctx, per_gpu)
    first = inv.gpus[0] if inv.gpus else None
    try:
        return choose_tp(
            opts,
            gpu_count=inv.gpu_count,
            fit_at=lambda tp: sizer.report(variant.model_id, tp),
            recipe_tp=recipe_tp,
            rough=rough,
            shape=shape,
            situation=situation,
            gpu_label=(first.market_name or first.name) if first else "GPU",
        )
    except UsageError as exc:  # what cannot run here at all is said before its size
        if exc.id == "unsized_model":
            refuse(found_refusals, force=opts.force)
        raise
