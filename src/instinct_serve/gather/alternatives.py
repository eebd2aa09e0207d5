"""Smaller checkpoints that fit, for ``fit`` and ``plan`` alike (the recipe's other variants,
the provider's and AMD's quantized siblings on the Hub), each verified with ``estimate``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from instinct_serve.errors import InstinctError
from instinct_serve.fit.precision import precision_from_name

if TYPE_CHECKING:
    from instinct_serve.fit.alternatives import Alternative
    from instinct_serve.fit.catalog_link import LaunchContext
    from instinct_serve.fit.estimate import FitOptions, HardwareSpec

MAX_ALTERNATIVES = 8


def find_alternatives(
    model_id: str,
    ctx: LaunchContext,
    hw: HardwareSpec,
    opts: FitOptions,
    meta_notes: tuple[str, ...] = (),
) -> tuple[list[Alternative], list[str]]:
    """Smaller checkpoints that fit: the recipe's other variants, the provider's and AMD's
    quantized siblings on the Hub; each verified with ``estimate``, ranked. Also returns
    why a candidate was skipped."""
    from instinct_serve.fit.alternatives import Candidate, alternatives, precision_supported
    from instinct_serve.gather.model_meta import load_model_meta, quantized_siblings

    wanted: list[tuple[str, str | None, str]] = [
        (mid, prec, "recipe_variant") for mid, prec, _key in ctx.variants if mid != model_id
    ]
    hub_down = any(n.startswith("Hub unreachable") for n in meta_notes)
    for mid in [] if hub_down else quantized_siblings(model_id):
        origin = "amd" if mid.lower().startswith("amd/") else "provider"
        wanted.append((mid, precision_from_name(mid), origin))
    seen: set[str] = set()
    candidates: list[Candidate] = []
    skipped: list[str] = []
    for mid, prec, origin in wanted:
        if mid in seen or len(candidates) >= MAX_ALTERNATIVES:
            continue
        seen.add(mid)
        precision = prec or precision_from_name(mid) or "bf16"
        if not precision_supported(precision, ctx.unsupported_precisions):
            skipped.append(f"{mid}: {precision} is not supported on this GPU")
            continue
        try:
            meta = load_model_meta(mid)
        except InstinctError as exc:
            skipped.append(f"{mid}: {exc.message}")
            continue
        candidates.append(Candidate(mid, precision, origin, meta, ctx.context_length))
    ranked = alternatives(
        candidates,
        hw,
        opts,
        native_precisions=ctx.native_precisions,
        unsupported_precisions=ctx.unsupported_precisions,
    )
    return ranked, skipped
