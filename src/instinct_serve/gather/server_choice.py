"""Which server a plan launches (``--server vllm|sglang|auto``), decided with what only
gather holds: AMD's reference configs as loaded (the synced copy or the snapshot) and the
validated-stack table of the catalog. The decision itself is ``plan.sglang.choose_server``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from instinct_serve.catalog.reference import SGLANG
from instinct_serve.errors import InstinctError

if TYPE_CHECKING:
    from instinct_serve.catalog.reference import References
    from instinct_serve.gather.plan import Setting
    from instinct_serve.options import PlanOptions
    from instinct_serve.plan.reference import ReferenceChoice
    from instinct_serve.plan.sglang import ServerChoice


def decide_server(opts: PlanOptions, base: Setting, model_id: str, on_cpu: bool) -> ServerChoice:
    """``--server``: as asked, or (``auto``) as AMD's reference configs run this model on this
    GPU, unless the validated-stack table refuses the SGLang config's launch here."""
    from instinct_serve import servers
    from instinct_serve.gather.reference import load_references
    from instinct_serve.options.spec import choice_of
    from instinct_serve.plan.reference import wanted
    from instinct_serve.plan.sglang import choose_server

    refs, _warnings = load_references()
    models = (model_id, opts.model.strip())
    requested = choice_of(opts.server, ("auto", *servers.names())) or opts.server  # any case
    refused = None
    if requested == "auto" and not on_cpu:
        refused = _sglang_refused(refs, base, models, wanted(opts))
    return choose_server(
        requested,
        refs,
        models,
        None if on_cpu else base.gpu_key,
        refused=refused,
        on_cpu=on_cpu,
        wanted=wanted(opts),
        nodes=opts.nodes,
    )


def _sglang_refused(
    refs: References, base: Setting, models: tuple[str, str], wanted: tuple[str | None, str]
) -> str | None:
    """Why the validated-stack table refuses AMD's SGLang config here (None: it does not)."""
    from instinct_serve.catalog.stacks import Launch, table_for
    from instinct_serve.plan.stacks import check_stack

    for model in dict.fromkeys(models):
        config = refs.followed(model, base.gpu_key, *wanted, framework=SGLANG)
        if config is None:
            continue
        launch = Launch(
            image=config.image,
            gfx=base.gfx_cfg.gfx,
            model_ids=models,
            env=config.env,
            args=config.args,
        )
        check = check_stack(table_for(base.catalog), launch, pinned=True)
        return check.refusals[0].message if check.refusals else None
    return None


def decided(opts: PlanOptions, server: ServerChoice | None) -> PlanOptions:
    """``opts`` naming the server decided (``auto`` resolved), a copy when it differs."""
    if server is None or server.name == opts.server:
        return opts
    out = copy.copy(opts)
    out.server = server.name
    return out


def sglang_image(
    opts: PlanOptions, reference: ReferenceChoice | None, *, on_cpu: bool = False
) -> tuple[str, str]:
    """An SGLang plan's image: ``--image``, else the one AMD's config runs (the ROCm build
    for the GPU family: ``-mi30x`` for MI300X/MI325X, ``-mi35x`` for MI355X). A CPU plan
    runs natively (a CPU-only engine) and names the repository's ``latest``, unused."""
    if opts.image:
        return opts.image, "--image given"
    if on_cpu:
        from instinct_serve import servers

        return f"{servers.get(SGLANG).image_repository}:latest", (
            "not used: a CPU-only SGLang serves natively, without a container"
        )
    config = reference.config if reference is not None else None
    if config is not None:
        return config.image, (
            f"the image AMD's reference config {config.name} runs ({config.runner}: the SGLang "
            "ROCm build for this GPU family)"
        )
    baseline = reference.baseline if reference is not None else None
    if baseline is None:  # require_config refused it already
        raise InstinctError("an SGLang plan without its config", id="internal_plan_error")
    return baseline.image, (
        f"the newest SGLang image AMD's reference configs run on {baseline.runner} "
        f"({baseline.name}; AMD has no SGLang config for this model)"
    )
