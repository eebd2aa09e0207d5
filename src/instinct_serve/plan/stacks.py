"""The validated-stack table applied to a plan (pure): the known-bad rows it matches are
refused (``plan: refuse``; ``--force`` launches anyway) or warned about (``plan: warn``),
and where the image is the planner's own choice, a refused default is replaced by the
newest known-good image for the GPU and model (``catalog.stacks``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from instinct_serve.catalog.stacks import Launch, StackRow, StackTable
from instinct_serve.plan.refusals import Refusal


@dataclass
class StackCheck:
    image: str
    image_reason: str | None = None  # set when the image was replaced
    refusals: list[Refusal] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _refusal(row: StackRow, launch: Launch, good: StackRow | None) -> Refusal:
    model = launch.model_ids[0] if launch.model_ids else "this model"
    fix = row.fix.rstrip(".")
    if good is not None and good.image != launch.image:
        fix += f"; or --image {good.image} (known good: {good.source})"
    return Refusal(
        "known_bad_stack",
        f"{launch.image} on {launch.gfx} with {model} is a known-bad stack "
        f"({row.id}): {row.symptom}",
        fix,
        row.source,
        {"stack": row.to_dict(), "known_good_image": good.image if good else None},
    )


def _warning(row: StackRow) -> str:
    return f"known-bad stack {row.id} ({row.source}): {row.symptom} Fix: {row.fix}"


def check_stack(table: StackTable, launch: Launch, *, pinned: bool) -> StackCheck:
    """What the table says about ``launch``; ``pinned``: the image was given (--image or the
    recipe), so it is refused, never swapped."""
    check = StackCheck(image=launch.image or "")
    refused = table.known_bad(launch, plan=("refuse",))
    good = table.newest_good(launch) if refused else None
    if refused and good is not None and not pinned:
        swapped = replace(launch, image=good.image)
        if not table.known_bad(swapped, plan=("refuse",)):
            check.image = swapped.image or check.image
            check.image_reason = (
                f"the newest known-good image for {launch.gfx} and this model "
                f"({good.id}, {good.source}); the default {launch.image} is a known-bad "
                f"stack here ({refused[0].id}, {refused[0].source})"
            )
            launch, refused = swapped, []
    check.refusals = [_refusal(row, launch, good) for row in refused]
    check.warnings = [_warning(row) for row in table.known_bad(launch, plan=("warn",))]
    return check
