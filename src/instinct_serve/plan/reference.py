"""Following AMD's reference config (``catalog.reference``) for the model and GPU planned.

Pure. ``choose`` picks the config and its search-space row for the GPUs there are;
``reference_tp`` gives the TP decision the row states (unless ``--tp``); ``follow`` is the
planner step that writes the config's environment and flags into the plan, each with the
config's name as its reason, after the recipe's (so the reference wins over the recipe) and
before the planner's decisions and the user's options (which win over the reference).
A config for another server (SGLang, ATOM) is named in one line and never launched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from instinct_serve import vllm_args
from instinct_serve.catalog.reference import (
    BENCHMARK_ONLY,
    SGLANG,
    VLLM,
    ParallelRow,
    ReferenceConfig,
    References,
)
from instinct_serve.errors import UsageError
from instinct_serve.plan.decisions import TpDecision

if TYPE_CHECKING:
    from instinct_serve.options import PlanOptions
    from instinct_serve.plan.builder import PlanBuilder
    from instinct_serve.plan.refusals import Refusal

SERVER_TITLES = {"sglang": "SGLang", "atom": "ATOM", "vllm": "vLLM"}
PLANNABLE = (VLLM, SGLANG)  # the servers instinct plans from AMD's configs (``--server``)


@dataclass
class ReferenceChoice:
    """The vLLM config followed (if any), its row, and AMD's configs on other servers."""

    gpu: str
    config: ReferenceConfig | None = None
    row: ParallelRow | None = None
    others: list[ReferenceConfig] = field(default_factory=list)
    overruled: list[str] = field(default_factory=list)  # refusals the config answers
    # no config of the planned server for this model: the one whose image it takes
    # (``References.newest_image``), its flags and env not followed
    baseline: ReferenceConfig | None = None

    @property
    def source(self) -> str:
        return f"AMD reference {self.config.name}" if self.config else "AMD reference"


def usable_row(config: ReferenceConfig, gpu_count: int) -> ParallelRow | None:
    """The first search-space row that fits the GPUs there are. A vLLM plan lists
    DP-attention rows without following them (its replicas fill the GPUs instead); an
    SGLang plan follows them (``--dp-size N --enable-dp-attention``, SGLang's own)."""
    dp_attention = config.framework == SGLANG
    for row in config.rows:
        if row.tp <= gpu_count and (dp_attention or not row.dp_attn):
            return row
    return None


SCENARIOS = {"agentic": "agentic-coding"}  # --workload → AMD's benchmark scenario


def wanted(opts: PlanOptions) -> tuple[str | None, str]:
    """The speculative method (``--speculative-mtp``/``--speculative-eagle3``) and AMD's
    scenario (``--workload``) a plan asks its reference config for."""
    method = "mtp" if opts.speculative_mtp else "eagle3" if opts.speculative_eagle3 else None
    return method, SCENARIOS.get(opts.workload, "")


def choose(
    refs: References,
    model: str,
    gpu: str,
    gpu_count: int,
    speculative: str | None = None,
    scenario: str = "",
    framework: str = VLLM,
) -> ReferenceChoice | None:
    """AMD's configs for ``model`` on ``gpu`` (None when AMD publishes none); ``speculative``:
    the method the plan opted into (a config of that method comes first); ``scenario``:
    AMD's benchmark scenario of the workload (``agentic-coding``); ``framework``: the server
    planned (its config is followed, the others are named)."""
    config = refs.followed(model, gpu, speculative, scenario, framework)
    others = refs.other_servers(model, gpu, framework)
    if config is None and not others:
        return None
    row = usable_row(config, gpu_count) if config is not None else None
    return ReferenceChoice(gpu=gpu, config=config, row=row, others=others)


def reference_tp(choice: ReferenceChoice | None, opts: PlanOptions, tp: TpDecision) -> TpDecision:
    """The row's TP over the planner's own choice, unless ``--tp`` was given."""
    if choice is None or choice.config is None or choice.row is None or opts.tp is not None:
        return tp
    if choice.row.tp == tp.tp:
        return TpDecision(
            tp.tp,
            f"{tp.why}; AMD's reference {choice.config.name} runs TP {tp.tp} too",
            tp.need,
            tp.need_why,
            tp.skipped,
        )
    return TpDecision(
        choice.row.tp,
        f"AMD's reference config {choice.config.name} runs {choice.row.label()} on "
        f"{choice.gpu.upper()} (the planner alone would pick TP {tp.tp})",
        tp.need,
        tp.need_why,
        tp.skipped,
    )


def unsized_tp(error: UsageError, choice: ReferenceChoice | None) -> TpDecision:
    """A model that could not be sized (``unsized_model``) runs at the TP AMD's reference
    config states for it; any other refusal, or no config row, stands."""
    if error.id != "unsized_model" or choice is None or choice.config is None:
        raise error
    if choice.row is None:
        raise error
    return TpDecision(
        choice.row.tp,
        f"{error.message.split(':')[0]}; AMD's reference config {choice.config.name} runs "
        f"{choice.row.label()} on {choice.gpu.upper()}",
        None,
        "",
    )


OVERRULED = ("gpu_unsupported_by_recipe",)


def overrule(refusals: list[Refusal], choice: ReferenceChoice | None) -> list[Refusal]:
    """The refusals left once AMD's own vLLM config for this model and GPU is counted: a
    recipe that marks the GPU unsupported is answered by AMD running it (said in the
    plan's reasons)."""
    if choice is None or choice.config is None:
        return refusals
    kept = []
    for refusal in refusals:
        if refusal.id in OVERRULED:
            choice.overruled.append(refusal.message)
        else:
            kept.append(refusal)
    return kept


def other_servers_line(choice: ReferenceChoice) -> str | None:
    """One line naming AMD's configs on another server (never launched by instinct)."""
    if not choice.others:
        return None
    names = ", ".join(
        f"{SERVER_TITLES.get(c.framework, c.framework)} ({c.name})" for c in choice.others
    )
    lead = "also runs" if choice.config is not None else "runs"
    head = f"AMD's reference for {choice.others[0].model} on {choice.gpu.upper()} {lead} {names}"
    plannable = [c for c in choice.others if c.framework in PLANNABLE]
    if not plannable:
        return f"{head}; instinct plans vLLM only and does not launch it"
    rest = [c for c in choice.others if c.framework not in PLANNABLE]
    followed = plannable[0]
    line = f"{head}; --server {followed.framework} follows {followed.name}"
    if rest:
        titles = ", ".join(dict.fromkeys(SERVER_TITLES.get(c.framework, c.framework) for c in rest))
        line += f" (instinct does not launch {titles})"
    return line


def image_line(config: ReferenceConfig, image: str) -> tuple[str, bool]:
    """Whether the plan's image is of the reference's family (repository), and the line."""
    theirs, ours = config.image.rsplit(":", 1)[0], image.rsplit(":", 1)[0]
    if theirs == ours:
        return f"{ours}, the image family of AMD's reference {config.name} ({config.image})", True
    return (
        f"AMD's reference {config.name} runs {config.image}; this plan runs {image} "
        "(another image family)",
        False,
    )


def follow(b: PlanBuilder, choice: ReferenceChoice | None, opts: PlanOptions, image: str) -> None:
    """The planner step: the config's env and flags (yours win), its EP, its image family,
    the other servers' line."""
    if choice is None:
        return
    line = other_servers_line(choice)
    if line:
        b.reason("other servers", "AMD reference", line)
        if choice.config is None:
            b.warn(line)
    config = choice.config
    if config is None:
        return
    for message in choice.overruled:
        b.reason("recipe support", choice.source, f"{message}, but AMD runs {config.name} on it")
    line, same = image_line(config, image)
    b.reason("image family", choice.source, line)
    if not same:
        b.warn(line)
    yours = {*opts.env_literal, *opts.env_by_name, *opts.extra_env}
    why = f"from AMD's reference config {config.name} ({config.script or config.file})"
    for key, value in config.env.items():
        if key not in yours:
            b.set_env(key, value, choice.source, why)
    for unit in vllm_args.units(config.args):
        if unit.name in BENCHMARK_ONLY:
            b.reason(unit.name, choice.source, f"not followed: {BENCHMARK_ONLY[unit.name]}")
        elif unit.name is not None:
            b.flag(unit.tokens, choice.source, why)
    _expert_parallel(b, choice, opts, why)
    if choice.row is None:
        b.warn(
            f"AMD's reference config {config.name} runs at TP {config.rows[0].tp}, more "
            "GPUs than this plan has: its flags are followed, its TP is not"
        )


def _expert_parallel(b: PlanBuilder, choice: ReferenceChoice, opts: PlanOptions, why: str) -> None:
    """EP as the row runs it: on with EP > 1, off (a recipe's flag removed) with EP 1."""
    row = choice.row
    if row is None or opts.tp is not None:
        return
    if row.ep > 1:
        b.flag(["--enable-expert-parallel"], choice.source, f"{why}: {row.label()}")
    elif b.args.has("--enable-expert-parallel"):
        b.args.remove("--enable-expert-parallel")
        b.reason(
            "--enable-expert-parallel",
            choice.source,
            f"removed: AMD's reference config {choice.config.name if choice.config else ''} "
            f"runs {row.label()} without expert parallelism",
        )
