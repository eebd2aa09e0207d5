"""The planner's decisions that matter most on a real GPU: which checkpoint, and which TP.

* The checkpoint asked for is the checkpoint served. A recipe found through a base-model
  match (``Qwen3-8B-AWQ`` -> the ``Qwen3-8B`` recipe) lends its flags and env, from the
  variant of the same precision when it has one; the weights, their precision and their
  size are the requested repository's.
* TP follows an objective. ``latency`` (the default): the TP the recipe states for this GPU
  when it does; else the smallest TP that holds the model's full context (or the one asked
  for) with safe headroom, growing up to the GPUs there are. ``throughput``: the smallest TP
  with safe headroom, leaving GPUs for more replicas. Every TP obeys the kernel constraints
  (``plan.constraints``) and is at least what the weights need: from the fit when the
  metadata is known (safetensors headers: the real bytes of mixed FP8/FP4 layers), else from
  the recipe's stated VRAM, then a parameter count (``catalog.rough``; never a MoE's active
  count read from its name). Without metadata the context is unchecked: a MoE takes the
  smallest TP that leaves half of each GPU to the KV cache, and the reason says how much is
  left. When nothing sizes the model, ``--tp`` is required: never a blind TP 1.

Pure: the fits at each TP come in through a callable the adapter builds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.plan.constraints import Shape, Situation, tp_problems
from instinct_serve.plan.model import FitSummary

if TYPE_CHECKING:
    from instinct_serve.catalog.matching import Match
    from instinct_serve.catalog.rough import RoughSize
    from instinct_serve.fit.estimate import FitReport
    from instinct_serve.options import PlanOptions

FIT_OK = ("safe", "tight")
# no metadata: the rough size (``catalog.rough``) fits the GPUs, or does not
ESTIMATED_FIT, ESTIMATED_NO_FIT = "estimated_fit", "estimated_does_not_fit"
OBJECTIVES = ("latency", "throughput")


@dataclass
class VariantChoice:
    """The checkpoint to serve and where its flags come from."""

    key: str | None  # the recipe variant whose flags and env apply
    model_id: str  # the checkpoint served
    precision: str | None
    reason: str
    vram_minimum_gb: float | None = None  # the recipe's stated total VRAM need
    precision_from: str = "the recipe"  # where the precision was read


def _choice(var: Any, reason: str) -> VariantChoice:
    return VariantChoice(
        var.key, var.model_id, var.precision, reason, var.vram_minimum_gb, "the recipe's variant"
    )


def choose_variant(
    match: Match,
    precision_status: Callable[[str | None], str],
    fits: Callable[[str], str | None],
    forced: str | None,
    checkpoint: tuple[str | None, str] = (None, ""),
) -> VariantChoice:
    """Pick the checkpoint to serve and the variant whose flags apply.

    ``precision_status(p)``: native/emulated/unsupported/unknown on this gfx; ``fits(id)``:
    a fit verdict (None when unknown), computed lazily; ``checkpoint``: the requested
    checkpoint's own precision and where it was read (its config, else its name).
    Order: the checkpoint the user named (a variant's id, or a base-model match, served as
    asked); ``--precision``; the default variant when it fits; else the variant that fits
    with a native precision, then an emulated one.
    """
    recipe = match.recipe
    own, own_from = checkpoint
    if recipe is None or not recipe.variants:
        precision = match.legacy.precision if match.legacy is not None else own
        where = "the legacy entry" if match.legacy is not None else own_from
        return VariantChoice(
            None, match.model_id, precision, "the model has no variants", None, where
        )
    if match.kind == "base_model":
        return _as_asked(match, recipe, forced, own, own_from)
    variants = list(recipe.variants.values())
    if forced:
        return _forced(recipe, variants, forced, precision_status)
    if match.kind == "variant" and match.variant is not None:
        var = match.variant
        return _choice(var, f"you asked for the {var.precision or var.key} checkpoint")
    named = _named(recipe, variants, precision_status)
    if named is not None:
        return named
    return _fitting(variants, recipe.default_variant, precision_status, fits)


_DATED = re.compile(r"-\d{4}(?:\d{2}){0,2}$")  # a dated release: -0731, -2507, -20250731


def _named(
    recipe: Any, variants: list[Any], precision_status: Callable[[str | None], str]
) -> VariantChoice | None:
    """The recipe's own checkpoint, named, when its default serves a dated release of it
    (``deepseek-ai/DeepSeek-V4-Flash`` -> ``-0731``): the checkpoint named is served (its
    variant's flags), and the dated one is only suggested. None when that does not apply."""
    default = recipe.default_variant
    newer, named = default.model_id, recipe.model_id
    if not (newer.lower().startswith(named.lower()) and _DATED.fullmatch(newer[len(named) :])):
        return None
    own = [v for v in variants if v.model_id.lower() == recipe.model_id.lower()]
    if not own or precision_status(own[0].precision) == "unsupported":
        return None
    var = own[0]
    return _choice(
        var,
        f"you named {recipe.model_id}: it is served as named ({var.key} variant, "
        f"{var.precision or 'its precision'}); the recipe's default is the dated release "
        f"{newer}, served when you name it",
    )


def _as_asked(
    match: Match, recipe: Any, forced: str | None, own: str | None, own_from: str
) -> VariantChoice:
    """A base-model match: the checkpoint asked for, with the flags of the recipe's variant
    of its precision (else its default)."""
    variants = list(recipe.variants.values())
    default = recipe.default_variant
    same = [v for v in variants if own and (v.precision or "").lower() == own]
    lent = same[0] if same else default
    if forced and own and forced.strip().lower() != own:
        raise UsageError(
            f"{match.model_id} stores {own} weights ({own_from}); --precision {forced} "
            f"names another checkpoint",
            fix=f"drop --precision, or name the {forced} checkpoint itself "
            f"(`instinct recipes show {recipe.model_id}` lists them)",
            id="conflicting_precision",
        )
    lends = f"its {lent.precision} variant's" if same else f"its default ({lent.key}) variant's"
    if own is None:  # neither its config nor its name says: a release of the same line
        own, own_from = lent.precision, f"assumed from the recipe's {lent.key} variant"
        how = own_from
    else:
        how = f"read from {own_from}"
    return VariantChoice(
        lent.key,
        match.model_id,
        own,
        f"you asked for {match.model_id}: it is served as asked ({own or 'its precision'}, "
        f"{how}); the recipe {recipe.model_id} lends {lends} flags and env",
        lent.vram_minimum_gb if same or own == lent.precision else None,
        own_from,
    )


def _forced(
    recipe: Any, variants: list[Any], forced: str, precision_status: Callable[[str | None], str]
) -> VariantChoice:
    """``--precision``: the variant of that precision, refused when it cannot run here."""
    want = forced.strip().lower()
    chosen = [v for v in variants if (v.precision or "").lower() == want]
    if not chosen:
        have = sorted({(v.precision or "?") for v in variants})
        raise UsageError(
            f"{recipe.model_id} has no {forced} variant",
            fix="available precisions: " + ", ".join(have),
            id="unknown_precision",
        )
    var = chosen[0]
    if precision_status(var.precision) == "unsupported":
        raise UsageError(
            f"{var.precision} weights do not run on this GPU ({var.model_id})",
            fix="pick another --precision (NVFP4 is an NVIDIA-only format)",
            id="unsupported_precision",
        )
    return _choice(var, f"--precision {forced} selects variant {var.key!r}")


def _fitting(
    variants: list[Any],
    default: Any,
    precision_status: Callable[[str | None], str],
    fits: Callable[[str], str | None],
) -> VariantChoice:
    """The default variant when it runs and fits; else one that fits, native precisions
    before emulated ones."""

    def status(v: Any) -> str:
        return precision_status(v.precision)

    default_status = status(default)
    if default_status != "unsupported":
        verdict = fits(default.model_id)
        if verdict in (None, ESTIMATED_FIT, *FIT_OK):
            how = (
                "fits"
                if verdict in FIT_OK
                else "is the recipe default (its fit could not be checked)"
            )
            return _choice(
                default,
                f"default variant ({default.precision or 'default precision'}, "
                f"{default_status} here) {how}",
            )
    # an estimate stands in for a fit only against an estimate (an exact verdict, a context
    # too long say, is not overturned by a checkpoint whose context is unchecked)
    by_estimate = default_status == "unsupported" or fits(default.model_id) in (
        None,
        ESTIMATED_NO_FIT,
    )
    ranked = sorted(
        (v for v in variants if v is not default and status(v) in ("native", "emulated")),
        key=lambda v: 0 if status(v) == "native" else 1,
    )
    for var in ranked:  # the first fitting row of ``plan --list``
        verdict = fits(var.model_id)
        if verdict in FIT_OK or (verdict == ESTIMATED_FIT and by_estimate):
            why = (
                f"the default {default.precision or 'variant'} does not fit here; "
                f"{var.precision} is {status(var)} on this GPU and fits"
                + (" (by its estimated size)" if verdict == ESTIMATED_FIT else "")
            )
            if default_status == "unsupported":
                why = f"the default {default.precision} does not run on ROCm; {var.precision} fits"
            return _choice(var, why)
    if default_status == "unsupported" and ranked:
        var = ranked[0]
        return _choice(
            var,
            f"the default {default.precision} does not run on ROCm; {var.precision} is "
            f"{status(var)} here (its fit could not be checked)",
        )
    return _choice(
        default, "no variant fits; keeping the recipe default (see the fit and alternatives)"
    )


# ----------------------------------------------------------------------------- TP


@dataclass
class TpDecision:
    """The TP, why, what the weights need, and which TPs were ruled out and why."""

    tp: int
    why: str
    need: int | None  # the smallest TP the weights (or the recipe's VRAM) need
    need_why: str
    skipped: list[str] = field(default_factory=list)

    def reasons(self) -> list[str]:
        return [self.why, *([self.need_why] if self.need_why else []), *self.skipped]


def _powers(limit: int) -> list[int]:
    out, tp = [], 1
    while tp <= limit:
        out.append(tp)
        tp *= 2
    return out


def _full(report: FitReport | None) -> bool:
    """Holds the full context (or the requested one) with safe headroom."""
    if report is None:
        return False
    return (
        report.verdict == "safe"
        and (
            report.requested_fits if report.requested_max_model_len else not report.context_limited
        )
        is not False
    )


def _label(count: int) -> str:
    return f"{count} GPU{'s' if count != 1 else ''}"


def choose_tp(
    options: PlanOptions,
    *,
    gpu_count: int,
    fit_at: Callable[[int], FitReport | None],
    recipe_tp: int | None,
    rough: RoughSize | None,
    shape: Shape | None,
    situation: Situation,
    gpu_label: str = "GPU",
) -> TpDecision:
    """The tensor-parallel size of the launch (see the module doc). Raises to refuse.

    On partitions (``situation.partitions_per_gpu`` > 1) ``latency`` grows the TP only up
    to one GPU's partitions, or to what the weights need: a TP group across GPUs' partitions
    is what AMD advises against (``hardware.partitions``)."""
    skipped: list[str] = []
    allowed: list[int] = []
    for tp in _powers(gpu_count):
        problems = tp_problems(tp, shape, situation)
        if problems:
            skipped.append(f"TP {tp} ruled out: {problems[0][1]}")
        else:
            allowed.append(tp)
    if options.tp is not None:
        _check_given(options, gpu_count, allowed, shape, situation)
        return TpDecision(options.tp, "--tp given", None, "", skipped)

    need, need_why, exact = _need(fit_at, rough)
    if need is None and not allowed:
        raise InstinctError("no TP satisfies the model's constraints", id="no_valid_tp")
    if need is None:
        why = (rough.unsized_why if rough is not None else "") or (
            "no metadata, no parameter count, no stated VRAM"
        )
        raise UsageError(
            f"{options.model} could not be sized ({why}): the tensor-parallel size cannot "
            "be chosen safely",
            fix="pass --tp N, or make the model's config readable (HF_TOKEN for a gated "
            "model, HF_ENDPOINT for a mirror, or a local directory)",
            id="unsized_model",
        )
    fitting = [tp for tp in allowed if tp >= need]
    if not fitting:
        raise _too_large(options, gpu_count, need, need_why, skipped, fit_at(1), gpu_label)
    need_of = _Need(need, need_why, skipped)
    if getattr(options, "objective", "latency") != "latency":
        return _throughput(fitting, fit_at, need_of)
    per_gpu = situation.partitions_per_gpu
    grow = fitting
    if per_gpu > 1:
        grow = [tp for tp in fitting if tp <= max(per_gpu, need)] or fitting[:1]
    if recipe_tp is not None and recipe_tp in fitting:
        return need_of.decide(recipe_tp, f"the recipe's TP for this GPU ({recipe_tp})")
    stated = rough.stated if rough is not None else None
    if stated is not None and rough is not None and rough.stated_spans_gpus:
        # the recipe's own command for this GPU spans the node when its stated VRAM is
        # more than one GPU holds (upstream autoFitTp: 1 or all GPUs, never between)
        tp = grow[-1]
        why = (
            f"latency: the recipe's command for this GPU spans the node (TP {tp}): "
            f"{stated.why}, more than one GPU holds"
        )
        return need_of.decide(tp, why)
    if not exact:
        return need_of.decide(*_estimated(need, [tp for tp in grow if tp >= need], rough))
    for tp in (candidates := [tp for tp in grow if tp >= need]):
        if _full(fit_at(tp)):
            why = f"latency: the smallest TP that holds the full context with safe headroom ({tp})"
            return need_of.decide(tp, why)
    tp = candidates[-1]
    why = f"latency: no TP holds the full context with safe headroom; TP {tp} holds the most"
    if per_gpu > 1 and len(grow) < len(fitting):
        why += f" on one GPU's {per_gpu} partitions"
    return need_of.decide(tp, why)


# Without metadata the context cannot be checked: leave at least this share of each GPU's
# budget to the KV cache (AMD serves ~400B MoE checkpoints at TP 2-8, not at the TP whose
# weights alone fit)
KV_SHARE_UNCHECKED = 0.5


def _estimated(need: int, candidates: list[int], rough: RoughSize | None) -> tuple[int, str]:
    """The TP from an estimate (the recipe's stated VRAM, a parameter count): at least
    ``need``; for a MoE (AMD serves the big ones wide), the smallest that also leaves
    ``KV_SHARE_UNCHECKED`` of each GPU for the KV cache by the estimated weights, saying how
    much is left."""
    known = rough.weights if rough is not None else None
    if known is None or not known.budget or not candidates:
        return need, f"latency: the smallest TP the estimate allows ({need})"

    def room(tp: int) -> str:
        return f"about {known.kv_room(tp) / 1e9:.0f} GB per GPU"

    unchecked = "the context cannot be checked without the model's config"
    for tp in candidates:
        enough = known.kv_room(tp) >= known.budget * KV_SHARE_UNCHECKED
        if tp == candidates[0] and (enough or rough is None or not rough.moe):  # or dense
            return tp, (
                f"latency: the smallest TP the estimate allows ({tp}); by the estimated "
                f"weights it leaves {room(tp)} for the KV cache ({unchecked})"
            )
        if enough:
            return tp, (
                f"latency: {unchecked}: by the estimated weights TP {tp} leaves {room(tp)} for "
                f"the KV cache, at least half of what vLLM may use (TP {need} leaves "
                f"only {room(need)})"
            )
    tp = candidates[-1]
    return tp, (
        f"latency: {unchecked}: by the estimated weights TP {tp} leaves the most for the KV "
        f"cache, {room(tp)} (less than half of what vLLM may use: the context may be cut)"
    )


@dataclass(frozen=True)
class _Need:
    """What every automatic TP decision carries: the weights' need and the TPs ruled out."""

    need: int
    why: str
    skipped: list[str]

    def decide(self, tp: int, why: str) -> TpDecision:
        return TpDecision(tp, why, self.need, self.why, self.skipped)


def _check_given(
    options: PlanOptions,
    gpu_count: int,
    allowed: list[int],
    shape: Shape | None,
    situation: Situation,
) -> None:
    """``--tp``: at most the GPUs there are, and one the kernels take (unless ``--force``)."""
    assert options.tp is not None
    if options.tp > gpu_count:
        raise UsageError(
            f"--tp {options.tp} needs {options.tp} GPUs, but {gpu_count} are available",
            fix=f"use --tp {_powers(gpu_count)[-1]} or more GPUs",
            id="tp_exceeds_gpus",
        )
    problems = tp_problems(options.tp, shape, situation)
    if problems and not options.force:
        raise UsageError(
            f"--tp {options.tp}: {problems[0][1]}",
            fix=f"use one of {', '.join(map(str, allowed)) or 'none'} (or --force)",
            id="tp_not_allowed",
            details={"allowed": allowed},
        )


def _too_large(
    options: PlanOptions,
    gpu_count: int,
    need: int,
    need_why: str,
    skipped: list[str],
    first: FitReport | None,
    gpu_label: str,
) -> InstinctError:
    """No allowed TP holds the weights: the GPUs it would take, what was ruled out."""
    gpus = need if need < 1 << 20 else None
    return InstinctError(
        f"{options.model} needs {need_why}; this host has {_label(gpu_count)} "
        f"({gpu_label})" + (f"; ruled out: {'; '.join(skipped)}" if skipped else ""),
        fix=(f"use a host with {gpus} such GPUs" if gpus else "use a larger host")
        + " (or several nodes: `--hosts h1,h2`), a smaller or quantized "
        "checkpoint (`instinct plan --list`), or --tp with --force",
        id="does_not_fit",
        details={
            "need_tp": gpus,
            "gpu_count": gpu_count,
            "skipped": skipped,
            "fit": FitSummary.of(first).to_dict() if first is not None else None,
        },
    )


def _throughput(
    fitting: list[int], fit_at: Callable[[int], FitReport | None], need: _Need
) -> TpDecision:
    """The smallest TP with safe headroom: the GPUs left serve more replicas."""
    for tp in fitting:
        report = fit_at(tp)
        if report is None or report.verdict == "safe":
            why = f"throughput: the smallest TP with safe headroom ({tp}), GPUs left for replicas"
            return need.decide(tp, why)
    return need.decide(fitting[0], f"throughput: the smallest TP that fits ({fitting[0]})")


def _need(
    fit_at: Callable[[int], FitReport | None], rough: RoughSize | None
) -> tuple[int | None, str, bool]:
    """The smallest TP the weights need, what says so, and whether it is exact (from the
    fit) rather than an estimate. Without metadata or a count, the recipe's stated VRAM is
    the only size there is."""
    report = fit_at(1)
    if report is not None:
        weights = f"{report.weights.loaded_bytes / 1e9:.0f} GB of weights"
        if report.requested_fits is False and report.weights_fit:
            # the weights fit: the requested length alone is too long (refused with its own
            # id once the TP is chosen, unless --force)
            return 1, f"TP 1 for {weights} (the requested length aside)", True
        if report.min_tp_required is not None:
            return report.min_tp_required, f"TP {report.min_tp_required} for {weights}", True
        if report.min_tp_unbounded is not None:
            need = report.min_tp_unbounded
            return need, f"TP {need} ({_label(need)}) for {weights}", True
        return 1 << 30, f"more GPUs than any node has for {weights}", True
    # no metadata: the sizes in the order trusted (``RoughSize.preferred``: the recipe's
    # stated VRAM, then a parameter count). AMD's reference config's TP for this model and
    # GPU is applied over whatever this gives (``plan.reference.reference_tp``, unless --tp).
    for known in rough.preferred() if rough is not None else ():
        if known.tp is not None:
            return known.tp, f"TP {known.tp}: {known.why}", False
        tp = 1 << max(known.gpus - 1, 1).bit_length()  # the power of two that holds it
        return tp, f"TP {tp} ({_label(known.gpus)} at least): {known.why}", False
    return None, "", False
