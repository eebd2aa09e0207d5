"""`instinct plan` against vllm-project/recipes' own AMD renderings of the same snapshot.

For every page upstream's JSON API publishes for an AMD GPU (a recipe or a promoted variant,
on mi300x / mi325x / mi355x: the recommended strategy at its node count, default features
on), plan the same model on the same GPU and GPU count offline (the shipped snapshot) and
compare:

  (a) the checkpoint served        (b) vLLM flags (behaviour only: not --port/--host/order;
  (c) the environment                  ``--model X`` = positional; ``--a_b`` = ``--a-b``)
  (d) TP                           (e) node count        (f) refusals, both ways

Flags and env are compared on the same checkpoint: when we pick another one, the comparison
is redone with the checkpoint upstream serves, so a variant choice is counted once (under
checkpoint), not again in every flag it brings. Every difference gets a kind and a category
with its reason: ``ours`` (a deliberate choice of our data or planner), ``scope`` (outside
what instinct plans: a second node), ``upstream`` (an upstream quirk; ours is right),
``defect`` (a decision upstream makes that the planner should learn, the upstream rule
quoted) or ``unexplained``.

Run: .venv/bin/python bench/plan_vs_upstream.py [--limit N] [--model TEXT] [--json]
     [--rerender] (re-render from tests/data/vllm-recipes instead of the vendored JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.plan.upstream_render import (  # noqa: E402
    NotRendered,
    Rendering,
    load_corpus,
    load_document,
    render_all,
)

VENDORED = ROOT / "tests" / "data" / "upstream_rendered_amd.json"

IGNORED_FLAGS = {"--port", "--host"}
# parallelism: compared as TP and node count, not as flags
PARALLEL_FLAGS = {
    "--tensor-parallel-size",
    "--data-parallel-size",
    "--data-parallel-size-local",
    "--data-parallel-address",
    "--data-parallel-start-rank",
    "--pipeline-parallel-size",
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--headless",
}
ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-dp": "--data-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-q": "--quantization",
}
REFERENCE_SOURCE = "AMD reference "  # plan.reference: AMD's own launch wins over the recipe
OURS, SCOPE, UPSTREAM, DEFECT, UNEXPLAINED = "ours", "scope", "upstream", "defect", "unexplained"
KINDS = {
    OURS: "a deliberate choice of our data or planner (its reason quoted)",
    SCOPE: "outside what instinct plans (more than one node)",
    UPSTREAM: "an upstream quirk or data error; ours is right",
    DEFECT: "a decision upstream makes that our planner should learn",
    UNEXPLAINED: "no known cause",
}


# --------------------------------------------------------------------------- our planner


@dataclass
class Ours:
    """What our planner did for one request (a plan, or a refusal)."""

    ok: bool
    model: str | None = None
    variant: str | None = None
    tp: int | None = None
    tp_reason: str = ""
    variant_reason: str = ""  # why our planner served this checkpoint
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    vram_gb_per_gpu: float | None = None  # what our fit and TP rule see (10^9 bytes)
    arg_sources: dict[str, str] = field(default_factory=dict)  # flag -> our layer
    env_sources: dict[str, str] = field(default_factory=dict)  # variable -> our layer
    env_reasons: dict[str, str] = field(default_factory=dict)
    override_reasons: dict[str, str] = field(default_factory=dict)  # our layer -> reason
    removed: dict[str, str] = field(default_factory=dict)  # flag our overrides drop -> why
    error_id: str | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    # flag or variable -> why, for what AMD's reference config decided (plan.reference)
    reference: dict[str, str] = field(default_factory=dict)


PlanFn = Callable[..., Ours]


def load_planner() -> PlanFn:
    """Our planner behind one function (repoint the imports here if the modules move).

    ``plan(model, gpu, gpu_count, **options)`` → ``Ours``; a refusal (``InstinctError``) is
    a result, not an exception.
    """
    from instinct_serve.errors import InstinctError
    from instinct_serve.gather.plan import make_plan
    from instinct_serve.options import PlanOptions

    def plan(model: str, gpu: str, gpu_count: int, **options: Any) -> Ours:
        try:
            result = make_plan(PlanOptions(model=model, gpu=gpu, gpu_count=gpu_count, **options))
        except InstinctError as exc:
            return Ours(ok=False, error_id=exc.id, error=exc.message)
        p = result.plan
        ours = Ours(
            ok=True,
            model=p.model,
            variant=p.variant,
            tp=p.tensor_parallel_size,
            args=list(p.vllm_args),
            env=dict(p.env),
            image=p.image,
            vram_gb_per_gpu=p.vram_gb_per_gpu,
            warnings=list(p.warnings),
        )
        for reason in p.reasons:
            item = reason.item
            if reason.source.startswith(REFERENCE_SOURCE):
                key = item.split(" ", 1)[0].split("=", 1)[0]
                ours.reference[normal_flag(key) if key.startswith("-") else key] = (
                    f"{reason.source}: {reason.why}"
                )
            if item.startswith("-"):
                flag = normal_flag(item.split(" ", 1)[0].split("=", 1)[0])
                ours.arg_sources.setdefault(flag, reason.source)
                if flag == "--tensor-parallel-size":
                    ours.tp_reason = reason.why
            elif item == "variant":
                ours.variant_reason = reason.why
            elif "=" in item:
                key = item.split("=", 1)[0]
                ours.env_sources[key] = reason.source
                ours.env_reasons[key] = reason.why
        ours.override_reasons, ours.removed = _our_overrides(p.gfx_version, p.model, result)
        return ours

    return plan


def _our_overrides(gfx: str, model: str, result: Any) -> tuple[dict[str, str], dict[str, str]]:
    """Our gpu_overrides model overrides for this plan: layer name → reason, and the flags
    they remove → reason. Empty when the data cannot be read (the harness stays usable)."""
    try:
        from instinct_serve.catalog.overrides import load_gpu_overrides

        ids = [model]
        if result.match.recipe is not None:
            ids.append(result.match.recipe.model_id)
        overrides = load_gpu_overrides().config(gfx).overrides_for(*ids)
    except Exception:  # the harness must not break when internals move
        return {}, {}
    layers = {f"gpu model_override {o.match!r} ({gfx})": o.reason for o in overrides}
    removed = {normal_flag(r.flag): o.reason for o in overrides for r in o.remove_args}
    return layers, removed


def configure_offline(tmp: Path) -> None:
    """Plan offline from the shipped snapshot: no Hub, fresh cache and data directories."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["INSTINCT_CACHE_DIR"] = str(tmp / "cache")
    os.environ["INSTINCT_DATA_DIR"] = str(tmp / "data")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        os.environ.pop(name, None)


# --------------------------------------------------------------------------- argv


def normal_flag(flag: str) -> str:
    flag = ALIASES.get(flag, flag)
    return "--" + flag[2:].replace("_", "-") if flag.startswith("--") else flag


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def flag_map(argv: Iterable[str]) -> dict[str, str]:
    """Flags that change behaviour → value (last wins; a bare flag → ""). ``--model X`` and
    the positional model are dropped (the checkpoint is compared on its own)."""
    tokens = list(argv)
    if tokens[:2] == ["vllm", "serve"]:
        tokens = tokens[3:]
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not _is_flag(tok):
            i += 1
            continue
        name, eq, value = tok.partition("=")
        name = normal_flag(name)
        if not eq:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and not _is_flag(nxt):
                value = nxt
                i += 1
            else:
                value = ""
        i += 1
        if name in IGNORED_FLAGS or name == "--model":
            continue
        out[name] = value
    return out


def same_value(a: str | None, b: str | None) -> bool:
    """Equal as strings, or as JSON (``{"a": 1}`` = ``{"a":1}``), or as numbers."""
    if a == b:
        return True
    if a is None or b is None:
        return False
    for parse in (json.loads, float):
        try:
            if parse(a) == parse(b):
                return True
        except (ValueError, TypeError):
            continue
    return False


# --------------------------------------------------------------------------- comparison


@dataclass
class Difference:
    aspect: str  # checkpoint | flag | env | tp | nodes | refusal | image
    item: str
    upstream: str | None
    ours: str | None
    kind: str  # ours | scope | defect | unexplained
    category: str
    reason: str


@dataclass
class Comparison:
    page: str
    recipe: str
    hardware: str
    requested: str  # what we asked our planner for
    upstream_model: str | None
    upstream_variant: str | None
    upstream_strategy: str | None
    upstream_nodes: int | None
    upstream_tp: int | None
    ours_model: str | None = None
    ours_tp: int | None = None
    ours_error: str | None = None
    flags_compared: bool = False
    flags_identical: bool = False
    env_identical: bool = False
    flags_faithful: bool = False  # no flag difference other than deliberate ones (ours)
    env_faithful: bool = False
    tp_status: str = ""  # equal | explained | unexplained | n/a
    upstream_renders: bool = True  # False: an AMD GPU upstream gives no page
    differences: list[Difference] = field(default_factory=list)

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.differences if d.kind == UNEXPLAINED]


def _diff(
    aspect: str, item: str, up: Any, ours: Any, kind: str, category: str, reason: str
) -> Difference:
    return Difference(
        aspect,
        item,
        None if up is None else str(up),
        None if ours is None else str(ours),
        kind,
        category,
        reason,
    )


def _same_model(a: str | None, b: str | None) -> bool:
    return (a or "").lower() == (b or "").lower()


def compare(r: Rendering, plan: PlanFn) -> Comparison:
    """One upstream page against our plan of the same request."""
    requested = r.page if r.derived_from else r.recipe_model_id
    c = Comparison(
        page=r.page,
        recipe=r.recipe,
        hardware=r.hardware,
        requested=requested,
        upstream_model=r.model_id,
        upstream_variant=r.variant,
        upstream_strategy=r.strategy,
        upstream_nodes=r.node_count,
        upstream_tp=r.tp,
    )
    first = plan(requested, r.hardware, r.gpu_count)
    c.ours_model, c.ours_tp, c.ours_error = first.model, first.tp, first.error
    if r.node_count > 1 and first.ok and _same_model(first.model, r.model_id):
        c.differences.append(_node_difference(r, first))  # else: counted under checkpoint
    if not first.ok:
        c.differences.append(_refusal(r, first))
    else:
        c.differences += _image_differences(r, first)
        if not _same_model(first.model, r.model_id):
            c.differences.append(_checkpoint_difference(r, first))
        elif first.variant and first.variant != r.variant:
            c.differences.append(_variant_difference(r, first))
        tp_diff = _tp_difference(r, first)
        if tp_diff is not None:
            c.differences.append(tp_diff)
    c.tp_status = _tp_status(c, r)

    # flags and env on the checkpoint upstream serves
    same = first if first.ok and _same_model(first.model, r.model_id) else None
    if same is None:
        same = plan(r.model_id, r.hardware, r.gpu_count)
    if not same.ok and r.tp and r.tp <= r.gpu_count:
        same = plan(r.model_id, r.hardware, r.gpu_count, tp=r.tp, force=True)
    if same.ok:
        c.flags_compared = True
        flag_diffs = _flag_differences(r, same)
        env_diffs = _env_differences(r, same)
        c.flags_identical = not flag_diffs
        c.env_identical = not env_diffs
        c.flags_faithful = all(d.kind == OURS for d in flag_diffs)
        c.env_faithful = all(d.kind == OURS for d in env_diffs)
        c.differences += flag_diffs + env_diffs
    return c


def compare_unrendered(m: NotRendered, plan: PlanFn, gpu_count: int = 8) -> Comparison | None:
    """An AMD GPU upstream gives no page: do we plan it anyway? None when we refuse too."""
    ours = plan(m.model_id, m.hardware, gpu_count)
    c = Comparison(
        page=m.model_id,
        recipe=m.recipe,
        hardware=m.hardware,
        requested=m.model_id,
        upstream_model=None,
        upstream_variant=m.variant,
        upstream_strategy=None,
        upstream_nodes=None,
        upstream_tp=None,
        ours_model=ours.model,
        ours_tp=ours.tp,
        ours_error=ours.error,
        upstream_renders=False,
        tp_status="n/a",
    )
    if not ours.ok:
        return None
    c.differences.append(_upstream_refusal(m, ours))
    return c


# --------------------------------------------------------------------------- classification


def _node_difference(r: Rendering, ours: Ours) -> Difference:
    need = f"{r.vram_minimum_gb:g} GB" if r.vram_minimum_gb else "its GPU floor"
    return _diff(
        "nodes",
        "node_count",
        r.node_count,
        f"1 (TP {ours.tp})",
        DEFECT,
        "multi_node_planned_on_one",
        f"upstream renders {r.strategy} on {r.node_count} nodes x {r.gpu_count} GPUs (TP "
        f"{r.tp}): the variant needs {need}, more than one {r.hardware} node "
        "(build-recipes-api.mjs buildVariantRendering: !fitsSingleNode(vram_minimum_gb > "
        "profile vram_gb) and a multi_node_* strategy → 2 nodes; nodesForStrategy for "
        "strategy_min_gpus); we plan it on one node instead of refusing",
    )


def _refusal(r: Rendering, ours: Ours) -> Difference:
    err = f"{ours.error_id}: {ours.error}"
    if r.node_count > 1 and ours.error_id == "does_not_fit":
        return _diff(
            "refusal",
            "plan",
            "renders",
            err,
            SCOPE,
            "refused_multi_node",
            "upstream needs more than one node for this model; we plan one node and say it "
            "does not fit",
        )
    if ours.error_id == "blacklisted":
        return _diff(
            "refusal",
            "plan",
            "renders",
            err,
            OURS,
            "refused_blacklisted",
            "our blacklist says this model is not an LLM endpoint: " + (ours.error or ""),
        )
    if ours.error_id == "needs_newer_vllm":
        return _diff(
            "refusal",
            "plan",
            "renders",
            err,
            DEFECT,
            "refused_needs_newer_vllm",
            f"upstream renders it with {r.docker_image} (model.nightly_required → "
            "vllm/vllm-openai-rocm:nightly, command-synthesis.js computeDockerMeta); we only "
            "know released tags and refuse a recipe newer than them",
        )
    if ours.error_id == "needs_nightly":
        return _diff(
            "refusal",
            "plan",
            "renders",
            err,
            OURS,
            "refused_needs_nightly",
            f"upstream renders it with {r.docker_image}; we refuse the release image and offer "
            "the nightly tag explicitly (issue 13: a moving tag is the user's choice)",
        )
    if ours.error_id in ("does_not_fit", "too_tight"):
        return _diff(
            "refusal",
            "plan",
            "renders",
            err,
            DEFECT,
            "refused_fit_disagrees",
            f"upstream renders one {r.hardware} node (TP {r.tp}); our fit refuses it",
        )
    return _diff(
        "refusal",
        "plan",
        "renders",
        err,
        UNEXPLAINED,
        f"refused_{ours.error_id}",
        "we refuse a model upstream renders",
    )


def _upstream_refusal(m: NotRendered, ours: Ours) -> Difference:
    reason = m.reason
    if "meta.hardware" in reason:
        cat = "upstream_marks_unsupported"
    elif "precision" in reason:
        cat = "upstream_precision_gate"
    elif "supported_hardware" in reason:
        cat = "upstream_variant_hardware"
    elif "omni" in reason:
        cat = "upstream_omni"
    else:
        cat = "upstream_not_rendered"
    if cat == "upstream_precision_gate" and ours.model != m.model_id:
        return _diff(
            "refusal",
            "plan",
            "no page",
            f"plans {ours.model} TP {ours.tp}",
            OURS,
            "variant_for_amd",
            f"upstream gives {m.hardware} no page for the {m.model_id} default ({reason}); we "
            f"serve the recipe's variant that runs here, {ours.model} (its own page upstream)",
        )
    warned = [w for w in ours.warnings if m.hardware in w or "unsupported" in w]
    return _diff(
        "refusal",
        "plan",
        "no page",
        f"plans {ours.model} TP {ours.tp}",
        DEFECT,
        cat,
        f"upstream gives {m.hardware} no page: {reason}; we plan it"
        + (f" (warning only: {'; '.join(warned)[:160]})" if warned else ""),
    )


def _image_differences(r: Rendering, ours: Ours) -> list[Difference]:
    up, mine = r.docker_image, ours.image or ""
    if up == mine:
        return []
    if any(ch.isspace() for ch in up):
        return [
            _diff(
                "image",
                "docker_image",
                up,
                mine,
                UPSTREAM,
                "upstream_invalid_image",
                "upstream's docker_image is not an image reference (a recipe typo, e.g. "
                "'docker pull …' pasted into variants.<v>.hardware_overrides.<gpu>.docker_image)",
            )
        ]
    if up == "vllm/vllm-openai-rocm:latest" and mine.startswith("vllm/vllm-openai-rocm:v"):
        return [
            _diff(
                "image",
                "docker_image",
                up,
                mine,
                OURS,
                "image_release_pinned",
                "we pin the newest vllm/vllm-openai-rocm release the catalog knows instead of "
                ":latest, so a plan (and its hash) does not drift",
            )
        ]
    if up.endswith(":nightly"):
        return [
            _diff(
                "image",
                "docker_image",
                up,
                mine,
                DEFECT,
                "nightly_image",
                "the recipe sets model.nightly_required: true, so upstream serves "
                "vllm/vllm-openai-rocm:nightly (command-synthesis.js computeDockerMeta)",
            )
        ]
    return [
        _diff(
            "image",
            "docker_image",
            up,
            mine,
            DEFECT,
            "image_pin",
            "upstream pins this image for the GPU (variant.hardware_overrides.<gpu>."
            "docker_image > variant/model docker_image.amd; computeDockerMeta)",
        )
    ]


def _checkpoint_difference(r: Rendering, ours: Ours) -> Difference:
    up = "upstream renders variants.default on the recipe page whatever the fit"
    if "does not fit here" in ours.variant_reason:
        return _diff(
            "checkpoint",
            "model",
            r.model_id,
            ours.model,
            OURS,
            "variant_fits_here",
            f"{up}; the default does not fit this node, and our plan takes the first fitting "
            f"row of its own `plan --list` (issue 27): {ours.variant_reason}",
        )
    if "served as named" in ours.variant_reason:
        return _diff(
            "checkpoint",
            "model",
            r.model_id,
            ours.model,
            OURS,
            "named_checkpoint",
            f"{up}, a dated release of the checkpoint named; we serve the checkpoint named "
            f"and only suggest the dated one (issue 27): {ours.variant_reason}",
        )
    why = (
        f"upstream serves the '{r.variant}' variant's checkpoint on this page "
        "(build-recipes-api.mjs renders variants.default on the recipe page and each variant "
        "on its own page, whatever the fit); "
    )
    return _diff(
        "checkpoint",
        "model",
        r.model_id,
        ours.model,
        DEFECT,
        "variant_selection",
        why + f"we chose variant {ours.variant!r}",
    )


def _variant_difference(r: Rendering, ours: Ours) -> Difference:
    return _diff(
        "variant",
        "variant",
        r.variant,
        ours.variant,
        UPSTREAM,
        "shared_checkpoint_page",
        f"several variants of {r.recipe} name the checkpoint {r.model_id}; each writes the "
        "same page and the last one's stays (build-recipes-api.mjs renderAndWriteVariant "
        "clears the page folder first), while we take the first",
    )


def _tp_difference(r: Rendering, ours: Ours) -> Difference | None:
    if r.node_count > 1:
        return None  # counted under nodes
    up = r.tp if r.tp is not None else r.dp
    if up == ours.tp:
        return None
    if ours.tp_reason.startswith("AMD's reference config"):
        return _diff(
            "tp", "tensor_parallel_size", up, ours.tp, OURS, "amd_reference_config", ours.tp_reason
        )
    if not _same_model(ours.model, r.model_id):
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            DEFECT,
            "tp_follows_checkpoint",
            "a different checkpoint was chosen (see checkpoint)",
        )
    share = r.vram_minimum_gb
    per_gpu = None
    rule = r.tp_rule
    ours_why = f"; ours: {ours.tp_reason}" if ours.tp_reason else ""
    if rule in ("variant.tp", "strategy_overrides.tp"):
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            DEFECT,
            "tp_recipe_declared",
            f"the recipe declares TP {up} for {r.hardware} ({rule}; command-synthesis.js "
            f"resolveSingleNodeTp: variant.tp > strategy_overrides.single_node_tp.tp, capped "
            f"at the node's GPUs){ours_why}",
        )
    if rule.startswith("args:"):
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            DEFECT,
            "tp_recipe_args",
            f"the recipe's {rule[5:]} passes --tensor-parallel-size {up}, which wins over the "
            f"strategy's TP (dedupeArgs keeps the last occurrence; hardware overrides come "
            f"after the parallelism flags){ours_why}",
        )
    if rule == "strategy_full_node":
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            DEFECT,
            "tp_strategy_full_node",
            f"the default strategy is {r.strategy}: TEP/DEP take the whole node "
            f"(resolveSingleNodeTp){ours_why}",
        )
    up_share = r.node_vram_gb / r.gpu_count if r.node_vram_gb and r.gpu_count else None
    if (
        rule == "autofit_full_node"
        and share
        and up_share
        and ours.vram_gb_per_gpu
        and up_share < share <= ours.vram_gb_per_gpu
    ):
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            DEFECT,
            "tp_vram_units",
            f"vram_minimum_gb {share:g} is above upstream's per-GPU share ({up_share:g} GB: "
            f"taxonomy vram_gb {r.node_vram_gb:g} / {r.gpu_count}) but within ours "
            f"({ours.vram_gb_per_gpu:g} GB), so upstream spans the node and we take one GPU: "
            f"apply autoFitTp with the taxonomy's figures{ours_why}",
        )
    if rule == "autofit_full_node":
        per_gpu = f"{r.gpu_count} GPUs"
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            DEFECT,
            "tp_autofit_binary",
            f"vram_minimum_gb {share:g} exceeds one GPU's share of the node, so upstream uses "
            f"the whole node ({per_gpu}); its auto-fit is binary: 1 or all GPUs, never 2/4 "
            f"(autoFitTp){ours_why}",
        )
    if rule == "autofit_one_gpu" and ours.tp > up and "full context" in ours_why:
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            OURS,
            "tp_full_context",
            f"vram_minimum_gb {share:g} fits one GPU (upstream TP 1), but at TP 1 the KV room "
            f"does not hold the model's full context: our latency rule grows TP until it "
            f"does{ours_why}",
        )
    if rule == "autofit_one_gpu" and ours.tp > up and "estimate" in ours_why:
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            OURS,
            "tp_estimate_headroom",
            f"vram_minimum_gb {share:g} fits one GPU's memory (upstream TP 1); our estimate of "
            f"the weights leaves less than the KV share we require on one GPU at vLLM's "
            f"utilization{ours_why}",
        )
    if rule == "autofit_one_gpu":
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            DEFECT,
            "tp_autofit_one_gpu",
            f"vram_minimum_gb {share:g} fits one GPU, so upstream uses TP 1 (autoFitTp){ours_why}",
        )
    if rule == "no_vram_hint_full_node":
        return _diff(
            "tp",
            "tensor_parallel_size",
            up,
            ours.tp,
            DEFECT,
            "tp_no_vram_hint",
            f"the variant states no vram_minimum_gb, so upstream spans the node (autoFitTp)"
            f"{ours_why}",
        )
    return _diff(
        "tp",
        "tensor_parallel_size",
        up,
        ours.tp,
        UNEXPLAINED,
        "tp_unknown_rule",
        f"upstream TP {up} ({rule}){ours_why}",
    )


def _tp_status(c: Comparison, r: Rendering) -> str:
    tps = [d for d in c.differences if d.aspect in ("tp", "nodes")]
    if c.ours_tp is None and not tps:
        return "n/a"
    if not tps:
        return "equal"
    return "unexplained" if any(d.kind == UNEXPLAINED for d in tps) else "explained"


def _flag_differences(r: Rendering, ours: Ours) -> list[Difference]:
    up = {k: v for k, v in flag_map(r.argv).items() if k not in PARALLEL_FLAGS}
    mine = {k: v for k, v in flag_map(ours.args).items() if k not in PARALLEL_FLAGS}
    up_src = {normal_flag(k): v for k, v in r.arg_sources.items()}
    out: list[Difference] = []
    for name in sorted(set(up) | set(mine)):
        a, b = up.get(name), mine.get(name)
        if a is not None and b is not None and same_value(a, b):
            continue
        out.append(
            _classify_flag(r, ours, name, a, b, up_src.get(name), ours.arg_sources.get(name))
        )
    return out


def _classify_flag(
    r: Rendering,
    ours: Ours,
    name: str,
    up: str | None,
    mine: str | None,
    up_src: str | None,
    our_src: str | None,
) -> Difference:
    def d(kind: str, cat: str, why: str) -> Difference:
        return _diff("flag", name, up, mine, kind, cat, why)

    if name in ours.reference:
        return d(OURS, "amd_reference_config", ours.reference[name])
    if our_src and our_src in ours.override_reasons:
        return d(OURS, "our_model_override", ours.override_reasons[our_src])
    if mine is None and name in ours.removed:
        return d(OURS, "our_model_override", ours.removed[name])
    if our_src == "planner" and name == "--distributed-executor-backend":
        return d(OURS, "planner_executor_backend", "MoE across several GPUs: mp workers")
    if our_src == "planner" and name == "--enable-auto-tool-choice":
        return d(OURS, "planner_auto_tool_choice", "a tool-call parser is set")
    if our_src in ("fit", "planner (fit)"):
        return d(
            OURS,
            "planner_fit",
            "our fit sized the context to the KV cache room (upstream sets no length)",
        )
    if up_src and ours.variant and ours.variant != r.variant and up_src.startswith("variants."):
        return d(UPSTREAM, "shared_checkpoint_page", f"from upstream's {up_src} (see variant)")
    if up_src and up_src.startswith("strategies/multi_node"):
        return d(SCOPE, "multi_node_strategy", f"upstream's {up_src}: a multi-node launch")
    if up_src and up_src.startswith(("strategies/", "strategy_overrides.")):
        return d(
            DEFECT,
            "strategy_layer",
            f"upstream's {up_src} sets it for the default strategy {r.strategy} "
            "(command-synthesis.js buildArgs steps 3-5); our AMD config has no strategy layer",
        )
    if up_src and up_src.startswith("features."):
        return d(
            DEFECT,
            "feature_args",
            f"upstream's {up_src} (default features: all minus opt_in_features minus "
            "hardware_opt_in_features[gpu]; build-recipes-api.mjs defaultFeaturesFor)",
        )
    return d(UNEXPLAINED, "flag", f"upstream {up_src or '-'}; ours {our_src or '-'}")


def _env_differences(r: Rendering, ours: Ours) -> list[Difference]:
    out: list[Difference] = []
    for key in sorted(set(r.env) | set(ours.env)):
        a, b = r.env.get(key), ours.env.get(key)
        if a == b:
            continue
        up_src, our_src = r.env_sources.get(key), ours.env_sources.get(key)

        def d(kind: str, cat: str, why: str, key: str = key, a: Any = a, b: Any = b) -> Difference:
            return _diff("env", key, a, b, kind, cat, why)

        if key in ours.reference:
            out.append(d(OURS, "amd_reference_config", ours.reference[key]))
        elif our_src and our_src in ours.override_reasons:
            out.append(d(OURS, "our_model_override", ours.override_reasons[our_src]))
        elif a is None and our_src and our_src.startswith("gpu env_defaults"):
            out.append(d(OURS, "our_gfx_env_default", ours.env_reasons.get(key, our_src)))
        elif up_src and up_src.startswith("strategies/multi_node"):
            out.append(d(SCOPE, "multi_node_strategy", f"upstream's {up_src}: a multi-node launch"))
        elif up_src and up_src.startswith(("strategies/", "strategy_overrides.")):
            out.append(
                d(
                    DEFECT,
                    "strategy_layer",
                    f"upstream's {up_src} sets it for {r.strategy}; our AMD config has no "
                    "strategy layer",
                )
            )
        else:
            out.append(d(UNEXPLAINED, "env", f"upstream {up_src or '-'}; ours {our_src or '-'}"))
    return out


# --------------------------------------------------------------------------- driver


def renderings(rerender: bool = False) -> tuple[list[Rendering], list[NotRendered]]:
    if rerender or not VENDORED.exists():
        return render_all(load_corpus())
    return load_document(VENDORED)


def select(
    items: list[Rendering], model: str | None = None, limit: int | None = None
) -> list[Rendering]:
    if model:
        want = model.lower()
        items = [r for r in items if want in r.page.lower() or want in r.recipe.lower()]
    return items[:limit] if limit else items


def run(
    items: list[Rendering],
    missing: list[NotRendered],
    plan: PlanFn,
) -> list[Comparison]:
    out = [compare(r, plan) for r in items]
    seen: set[tuple[str, str]] = set()
    for m in missing:
        if (m.model_id.lower(), m.hardware) in seen:
            continue  # a parent page and a variant page can share a checkpoint
        seen.add((m.model_id.lower(), m.hardware))
        c = compare_unrendered(m, plan)
        if c is not None:
            out.append(c)
    return out


def summary(comparisons: list[Comparison]) -> dict[str, Any]:
    rendered = [c for c in comparisons if c.upstream_renders]
    flagged = [c for c in rendered if c.flags_compared]
    by_cat: dict[tuple[str, str, str], int] = Counter()
    for c in comparisons:
        for d in c.differences:
            by_cat[(d.kind, d.aspect, d.category)] += 1
    tp = Counter(c.tp_status for c in rendered)
    return {
        "renderings_compared": len(rendered),
        "flags_env_compared": len(flagged),
        "flags_identical": sum(c.flags_identical for c in flagged),
        "env_identical": sum(c.env_identical for c in flagged),
        "flags_and_env_identical": sum(c.flags_identical and c.env_identical for c in flagged),
        "flags_faithful": sum(c.flags_faithful for c in flagged),
        "env_faithful": sum(c.env_faithful for c in flagged),
        "flags_and_env_faithful": sum(c.flags_faithful and c.env_faithful for c in flagged),
        "checkpoint_equal": sum(
            1 for c in rendered if c.ours_model and _same_model(c.ours_model, c.upstream_model)
        ),
        "we_refuse": sum(1 for c in rendered if c.ours_error),
        "tp": dict(tp),
        "upstream_no_page_we_plan": len(comparisons) - len(rendered),
        "differences": [
            {"kind": k, "aspect": a, "category": cat, "count": n}
            for (k, a, cat), n in sorted(by_cat.items(), key=lambda kv: (kv[0][0], -kv[1]))
        ],
        "unexplained": sum(len(c.unexplained) for c in comparisons),
    }


def print_table(s: dict[str, Any], comparisons: list[Comparison], examples: int = 3) -> None:
    n = s["renderings_compared"]
    m = s["flags_env_compared"]
    print("instinct plan vs vllm-project/recipes AMD renderings")
    print(f"  renderings compared           {n}")
    print(f"  checkpoint equal              {s['checkpoint_equal']}/{n}")
    print(f"  we refuse (they render)       {s['we_refuse']}/{n}")
    print(f"  flags+env compared            {m} (same checkpoint)")
    print(f"    flags identical             {s['flags_identical']}/{m}")
    print(f"    env identical               {s['env_identical']}/{m}")
    print(f"    both identical              {s['flags_and_env_identical']}/{m}")
    print(
        f"    faithful (only ours differ) flags {s['flags_faithful']}, env {s['env_faithful']}, "
        f"both {s['flags_and_env_faithful']} of {m}"
    )
    tp = s["tp"]
    print(
        f"  TP equal / explained / unexpl {tp.get('equal', 0)} / {tp.get('explained', 0)} / "
        f"{tp.get('unexplained', 0)}  (n/a {tp.get('n/a', 0)})"
    )
    print(f"  no upstream page, we plan     {s['upstream_no_page_we_plan']}")
    print()
    print(f"  {'kind':<12}{'aspect':<11}{'category':<30}{'count':>6}")
    examples_by: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for c in comparisons:
        for d in c.differences:
            key = (d.kind, d.aspect, d.category)
            if len(examples_by[key]) < examples:
                examples_by[key].append(
                    f"{c.page} @ {c.hardware}: {d.item} upstream={d.upstream!r} "
                    f"ours={d.ours!r} — {d.reason}"
                )
    for row in s["differences"]:
        print(f"  {row['kind']:<12}{row['aspect']:<11}{row['category']:<30}{row['count']:>6}")
        if row["kind"] in (DEFECT, UNEXPLAINED):
            for ex in examples_by[(row["kind"], row["aspect"], row["category"])]:
                print(f"      e.g. {ex[:300]}")
    print()
    print(f"  unexplained differences       {s['unexplained']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, help="compare the first N renderings only")
    parser.add_argument("--model", help="only pages whose id contains this text")
    parser.add_argument("--json", action="store_true", help="the full list as JSON")
    parser.add_argument("--rerender", action="store_true", help="re-render from the corpus")
    parser.add_argument("--examples", type=int, default=3, help="examples per category")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plan-vs-upstream-") as tmp:
        configure_offline(Path(tmp))
        items, missing = renderings(args.rerender)
        chosen = select(items, args.model, args.limit)
        pages = {r.recipe for r in chosen}
        if args.model or args.limit:
            missing = [m for m in missing if m.recipe in pages]
        comparisons = run(chosen, missing, load_planner())
    s = summary(comparisons)
    if args.json:
        json.dump(
            {"summary": s, "comparisons": [asdict(c) for c in comparisons]},
            sys.stdout,
            indent=1,
            sort_keys=True,
        )
        print()
    else:
        print_table(s, comparisons, args.examples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
