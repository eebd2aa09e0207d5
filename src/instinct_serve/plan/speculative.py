"""Speculative decoding as an opt-in (pure): ``--speculative-mtp N`` (the model's own MTP
layers) or ``--speculative-eagle3 N`` (a draft model of its own, named by AMD's EAGLE3
reference config for the model and GPU). A ``--speculative-config`` already asking exactly
that (an AMD config followed) is kept as it is; otherwise the plan writes it, with why.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from instinct_serve.errors import UsageError
from instinct_serve.vllm_args import mtp_tokens, speculative_config

if TYPE_CHECKING:
    from instinct_serve.options import PlanOptions
    from instinct_serve.plan.builder import PlanBuilder
    from instinct_serve.plan.reference import ReferenceChoice


def speculative(b: PlanBuilder, opts: PlanOptions, reference: ReferenceChoice | None) -> None:
    """The planner step for the two opt-ins (one at a time)."""
    if opts.speculative_mtp and opts.speculative_eagle3:
        raise UsageError(
            "--speculative-mtp and --speculative-eagle3 both given",
            fix="choose one speculative method",
        )
    if opts.speculative_mtp:
        _mtp(b, opts.speculative_mtp)
    elif opts.speculative_eagle3:
        _eagle3(b, opts, opts.speculative_eagle3, reference)


def _mtp(b: PlanBuilder, tokens: int) -> None:
    if mtp_tokens(speculative_config(b.args.argv())) == tokens:
        return
    b.flag(
        ["--speculative-config", json.dumps(_mtp_doc(tokens))],
        "--speculative-mtp",
        f"given by you: MTP speculative decoding, {tokens} draft tokens",
    )


def eagle3_config(
    opts: PlanOptions, tokens: int, reference: ReferenceChoice | None
) -> tuple[dict[str, object], str]:
    """The EAGLE3 ``--speculative-config`` the plan launches and the reference config whose
    draft model it uses; an error naming the flag to pass when no draft is known."""
    config = reference.config if reference is not None else None
    draft = config.speculative_draft if config and config.speculative_method == "eagle3" else None
    if draft is None or config is None:
        raise UsageError(
            f"no EAGLE3 draft model is known for {opts.model}: AMD publishes no EAGLE3 "
            "reference config for it on this GPU",
            fix="name the draft yourself after --: --speculative-config "
            f'\'{{"method": "eagle3", "model": "DRAFT", "num_speculative_tokens": {tokens}}}\'',
            id="no_eagle3_draft",
        )
    return {"method": "eagle3", "model": draft, "num_speculative_tokens": tokens}, config.name


def planned_args(opts: PlanOptions, reference: ReferenceChoice | None) -> list[str]:
    """The ``--speculative-config`` an opt-in launches (for the validated-stack table, which
    looks at the launch before the planner writes it); none without an opt-in."""
    if opts.speculative_mtp:
        return ["--speculative-config", json.dumps(_mtp_doc(opts.speculative_mtp))]
    if opts.speculative_eagle3:
        doc, _name = eagle3_config(opts, opts.speculative_eagle3, reference)
        return ["--speculative-config", json.dumps(doc)]
    return []


def _mtp_doc(tokens: int) -> dict[str, object]:
    return {"method": "mtp", "num_speculative_tokens": tokens}


def _eagle3(
    b: PlanBuilder, opts: PlanOptions, tokens: int, reference: ReferenceChoice | None
) -> None:
    want, name = eagle3_config(opts, tokens, reference)
    have = speculative_config(b.args.argv()) or {}
    same = str(have.get("method", "")).lower() == "eagle3" and all(
        have.get(key) == want[key] for key in ("model", "num_speculative_tokens")
    )
    if not same:
        b.flag(
            ["--speculative-config", json.dumps(want)],
            "--speculative-eagle3",
            f"given by you: EAGLE3 speculative decoding, {tokens} draft tokens, with the draft "
            f"model of AMD's reference config {name}",
        )
    b.reason(
        "EAGLE3 draft",
        "--speculative-eagle3",
        f"{want['model']} is downloaded and loaded beside the model at start-up; the fit "
        "does not size it (its weights and KV come out of the KV cache room)",
    )
