"""Plans that must not launch, found before a byte is downloaded: weights with no kernel on
this GPU, a GPU the recipe marks unsupported, a recipe that needs a nightly vLLM, a
known-bad stack of the validated-stack table (``plan.stacks``).

Each rule has a stable id, says what to do instead (another variant, the nightly tag), and
cites where the fact comes from. ``--force`` turns a refusal into a warning. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from instinct_serve import vllm_args

if TYPE_CHECKING:
    from instinct_serve.catalog.matching import Match
    from instinct_serve.catalog.overrides import PrecisionSupport

NIGHTLY_IMAGE = "vllm/vllm-openai-rocm:nightly"
# Most fundamental first: the first refusal is the one a user is told.
PRIORITY = (
    "unsupported_precision",
    "variant_not_for_gpu",
    "gpu_unsupported_by_recipe",
    "unsupported_quantization",
    "needs_nightly",
    "known_bad_stack",
)
PRECISION_SOURCE = "data/gpu_overrides.json precision table for {gfx}"


class Refusal(NamedTuple):
    """Why this plan would not start here, what to do, and the source of the rule."""

    id: str
    message: str
    fix: str
    source: str
    details: dict[str, Any] | None = None


def refuse(found: list[Refusal], *, force: bool) -> None:
    """Raise the first refusal (its fix offers ``--force``); nothing with ``force``."""
    from instinct_serve.errors import InstinctError

    if not found or force:
        return
    first = found[0]
    raise InstinctError(
        first.message,
        fix=first.fix + " (or --force to launch anyway)",
        id=first.id,
        details={
            "source": first.source,
            "refusals": [
                {"id": r.id, "message": r.message, "fix": r.fix, "source": r.source} for r in found
            ],
            **(first.details or {}),
        },
    )


class Target(NamedTuple):
    """What the rules look at."""

    gfx: str
    hw_id: str | None  # upstream's GPU id (mi300x) when the GPU is one of them
    precision: str | None  # the served checkpoint's
    precision_from: str  # where that precision was read
    model_id: str
    support: PrecisionSupport
    args: list[str]  # the merged vLLM arguments
    image: str
    image_pinned: bool  # --image, or an image the recipe pins: never second-guessed


def _alternatives(match: Match, support: PrecisionSupport, model_id: str) -> list[str]:
    recipe = match.recipe
    if recipe is None:
        return []
    out = []
    for var in recipe.variants.values():
        if var.model_id != model_id and support.status(var.precision) in ("native", "emulated"):
            out.append(f"{var.model_id} ({var.precision}, --precision {var.precision})")
    return out


def refusals(target: Target, match: Match) -> list[Refusal]:
    """Every reason this plan cannot run on the target, most fundamental first."""
    found: list[Refusal] = []
    support = target.support
    source = PRECISION_SOURCE.format(gfx=target.gfx)
    status = support.status(target.precision)
    if status == "unsupported":
        alts = _alternatives(match, support, target.model_id)
        found.append(
            Refusal(
                "unsupported_precision",
                f"{target.model_id} stores {target.precision} weights ({target.precision_from}), "
                f"which have no kernel on {target.gfx}",
                "serve " + alts[0]
                if alts
                else f"use a checkpoint in a precision {target.gfx} runs: "
                + ", ".join(sorted(support.native)),
                source,
                {"precision": target.precision, "alternatives": alts},
            )
        )
    quant = vllm_args.value(target.args, "--quantization")
    if quant and status != "unsupported" and support.status(quant) == "unsupported":
        found.append(
            Refusal(
                "unsupported_quantization",
                f"--quantization {quant} has no kernel on {target.gfx}",
                "drop the flag or serve a checkpoint in a precision this GPU runs",
                source,
                {"quantization": quant},
            )
        )
    recipe, hw = match.recipe, target.hw_id
    if recipe is not None and hw is not None:
        if recipe.hardware_status(hw) == "unsupported":
            found.append(
                Refusal(
                    "gpu_unsupported_by_recipe",
                    f"the recipe {recipe.model_id} marks {hw} as unsupported",
                    "use one of the GPUs the recipe verifies" + _verified(recipe),
                    f"vllm-project/recipes {recipe.source_path or recipe.model_id}: "
                    f"meta.hardware.{hw}",
                )
            )
        variant = match.variant
        if variant is not None and not variant.supports_hardware(hw):
            alts = _alternatives(match, support, variant.model_id)
            found.append(
                Refusal(
                    "variant_not_for_gpu",
                    f"variant {variant.key} of {recipe.model_id} lists only "
                    f"{', '.join(variant.supported_hardware or [])}, not {hw}",
                    "serve " + alts[0] if alts else "serve another variant of the recipe",
                    f"vllm-project/recipes {recipe.source_path or recipe.model_id}: "
                    f"variants.{variant.key}.supported_hardware",
                )
            )
        if recipe.nightly_required and not target.image_pinned and "nightly" not in target.image:
            found.append(
                Refusal(
                    "needs_nightly",
                    f"{recipe.model_id} needs a nightly vLLM (model.nightly_required), and "
                    f"{target.image} is a release",
                    f"pass --image {NIGHTLY_IMAGE} (a moving tag: pin its digest for "
                    "repeatable launches)",
                    f"vllm-project/recipes {recipe.source_path or recipe.model_id}: "
                    "model.nightly_required",
                    {"image": NIGHTLY_IMAGE},
                )
            )
    order = list(PRIORITY)
    return sorted(found, key=lambda r: order.index(r.id))


def _verified(recipe: Any) -> str:
    from instinct_serve.hardware.profiles import UPSTREAM_HARDWARE

    ok = [hw for hw in UPSTREAM_HARDWARE if recipe.hardware_status(hw) == "verified"]
    return f" ({', '.join(ok)})" if ok else ""
