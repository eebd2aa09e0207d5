"""Known-bad stacks: a log line that a row of the validated-stack table names
(``catalog.stacks``, ``data/validated_stacks.json``), cited with the row's public source
and fix. A row applies only where what is known of the launch (gfx, model, image or vLLM
version, environment, flags) is in its scope, so a generic line such as "Memory access
fault" cites a row only for the model and GPU it was reported on. The table is the one
plans use (``catalog.stacks.table_for``: a newer synced table, else the shipped one)."""

from __future__ import annotations

from typing import Any

from instinct_serve.catalog.stacks import Launch, StackRow, StackTable, table_for
from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules.common import at_hit, gfx_of
from instinct_serve.diagnose.scan import Scan


def _launch(ctx: DiagnoseContext) -> Launch:
    return Launch(
        image=ctx.image,
        gfx=gfx_of(ctx) or None,
        model_ids=(ctx.model,) if ctx.model else (),
        env=dict(ctx.env),
        args=tuple(ctx.args),
        vllm_version=ctx.vllm_version,
        env_known=bool(ctx.env),
    )


def _retry(row: StackRow) -> RetryHint | None:
    hint: RetryHint = {}
    if row.fix_env:
        hint["set_env"] = dict(row.fix_env)
    if row.fix_args:
        hint["add_args"] = list(row.fix_args)
    return hint or None


def build_known_bad_stack(ctx: DiagnoseContext, row: StackRow | None = None, **at: Any) -> Finding:
    if row is None:  # never reported without a row; kept total for the registry
        return Finding(
            id="known_bad_stack",
            title="A known-bad stack",
            cause="This image, GPU and model are a known-bad combination.",
            fix="See the validated-stack table (data/validated_stacks.json).",
            **at,
        )
    return Finding(
        id="known_bad_stack",
        title=f"Known-bad stack: {row.feature} ({row.id})",
        cause=f"{row.symptom} Source: {row.source}",
        fix=row.fix,
        retry=_retry(row),
        details={"stack": row.to_dict(), "source": row.source},
        **at,
    )


def _table() -> StackTable:
    """The table plans use: the synced one in the recipes cache when newer, else shipped."""
    from instinct_serve.catalog.store import load_catalog

    return table_for(load_catalog())


def known_bad_rows(ctx: DiagnoseContext) -> list[StackRow]:
    """The known-bad rows whose scope holds for this launch, whatever its log says."""
    launch = _launch(ctx)
    return [row for row in _table().rows if row.known_bad and row.matches(launch)]


def retry_of(row: StackRow) -> RetryHint | None:
    """The row's fix as a relaunch hint (its environment and flags), if it has one."""
    return _retry(row)


def _known_bad(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    if ctx.sglang:
        return None  # the table's rows are vLLM stacks (images, vLLM versions)
    launch = _launch(ctx)
    for row, pattern in _table().with_logs():
        if not row.known_bad or not row.matches(launch):
            continue
        hit, count = scan.first(pattern, errorish=False, search=True)
        if hit is not None:
            return build_known_bad_stack(ctx, row, **at_hit(hit, count))
    return None


RULES = (
    Rule(
        "known_bad_stack",
        92,
        build_known_bad_stack,
        _known_bad,
        words(r"known[- ]bad (?:stack|image|combination)"),
    ),
)
