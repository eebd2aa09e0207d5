"""Gather what the planner needs (the adapters' half of ``plan``): hardware from a profile or
``detect``, the catalog match and merged AMD config, model metadata and the fit, the host's
HF cache layout. Then call the pure ``build_plan``.

``make_plan`` is what ``instinct plan``, ``instinct serve`` and the MCP server call. With a
CPU target (``hardware.target.cpu_target``: the native engine is CPU-only) the plan is
made for vLLM's CPU backend (``plan.cpu``): the model's configuration without the GPU's.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve.catalog.reference import SGLANG
from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.gather.reference import reference_for
from instinct_serve.gather.server_choice import decide_server, decided, sglang_image
from instinct_serve.gather.sizing import decide_tp as _decide_tp
from instinct_serve.gather.sizing import recipe_tp as _recipe_tp
from instinct_serve.gather.sizing import tp_rules, variant_fits
from instinct_serve.hardware.partitions import layout
from instinct_serve.hardware.target import CPU_SOURCE, Target, catalog_key
from instinct_serve.options import PlanOptions
from instinct_serve.plan.model import CONTAINER_HF_CACHE, LaunchPlan, Mount, PlanResult, Reason
from instinct_serve.plan.planner import (
    PlanInputs,
    TpDecision,
    VariantChoice,
    build_plan,
    choose_variant,
)
from instinct_serve.plan.reference import ReferenceChoice, overrule, reference_tp, unsized_tp
from instinct_serve.plan.stacks import StackCheck

if TYPE_CHECKING:
    from instinct_serve.catalog.config import AmdConfig
    from instinct_serve.catalog.matching import Match
    from instinct_serve.catalog.store import Catalog
    from instinct_serve.fit.catalog_link import LaunchContext
    from instinct_serve.fit.estimate import FitOptions, FitReport, HardwareSpec
    from instinct_serve.fit.meta import ModelMeta
    from instinct_serve.hardware.inventory import GpuInventory
    from instinct_serve.hosts import Host
    from instinct_serve.plan.refusals import Refusal
    from instinct_serve.plan.sglang import ServerChoice


# Used only if a synced cache has no resolved tag (Docker Hub was unreachable during sync).
FALLBACK_IMAGE = "vllm/vllm-openai-rocm:latest"
# A CPU plan reads the catalog's configuration of the model as for this GPU (the reference
# of upstream's AMD recipes), then keeps only the model's layers (``plan.cpu.cpu_config``).
CPU_CATALOG_GPU = "mi300x"
CPU_MEMORY_FALLBACK = 64 * 2**30  # when /proc/meminfo cannot be read


# ------------------------------------------------------------------------ hardware


def resolve_hardware(
    opts: PlanOptions, host: Host | None, inventory: GpuInventory | None = None
) -> Target:
    """The GPUs to plan for (``hardware.target``): ``--gpu``/``--gfx`` and manual VRAM need
    no host; else ``inventory`` when the caller already detected, else ``detect`` on the
    host. ``opts.default_gpu`` is used when detection finds nothing (``instinct plan`` on a
    laptop); without it no GPU is an error (exit 3)."""
    from instinct_serve.hardware.target import resolve_target

    if host is None:
        from instinct_serve.hosts import LocalHost

        host = LocalHost()
    target = host

    def detected() -> GpuInventory:
        if inventory is not None:
            return inventory
        from instinct_serve.gather.detect import detect  # only when no GPU is named

        return detect(target)

    return resolve_target(
        opts,
        detected,
        host_name=target.name,
        default_gpu=opts.default_gpu,
        refuse_unsupported=not opts.force,
    )


def host_memory_bytes(host: Host) -> int | None:
    """The host's RAM (``MemTotal`` of ``/proc/meminfo``), or None."""
    text = host.read_text("/proc/meminfo")
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if name == "MemTotal" and words and words[0].isdigit():
            return int(words[0]) * 1024  # kB
    return None


def cpu_plan_target(opts: PlanOptions, host: Host) -> Target:
    """The target of a CPU-only engine on ``host``: its CPU, with its RAM."""
    from instinct_serve import servers
    from instinct_serve.hardware.target import cpu_target

    memory = host_memory_bytes(host)
    where = "this machine" if host.is_local else host.name
    named = opts.server if opts.server in servers.names() else servers.DEFAULT
    target = cpu_target(
        opts,
        memory_bytes=memory or CPU_MEMORY_FALLBACK,
        host_name=where,
        server=servers.get(named).title,
    )
    if memory is None:
        target.notes.append(
            f"the RAM of {host.name} is unknown (/proc/meminfo unreadable): sized for "
            f"{CPU_MEMORY_FALLBACK // 2**30} GiB"
        )
    return target


# ------------------------------------------------------------------------ HF cache


def resolve_hf_mount(opts: PlanOptions, host: Host | None) -> tuple[Mount, str]:
    """The host directory to mount as the container's HF cache, and why.

    The host's cache by huggingface_hub's rules (``paths.hf_locations`` of the host's
    environment): a hub cache named by ``HF_HUB_CACHE`` (or its legacy name) mounts on the
    container's ``.../huggingface/hub``; otherwise the HF home (``HF_HOME``, else
    ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``) mounts on the container's
    HF home. ``--hf-cache DIR`` (or an ``HF_HOME``) holding ``models--*`` at its root is a hub
    cache and mounts on the hub directory.
    """
    from instinct_serve.paths import HF_ENV_NAMES, expand_path, hf_locations

    if host is None:
        from instinct_serve.hosts import LocalHost

        host = LocalHost()
    env = host.env(HF_ENV_NAMES)
    if host.is_local and not env.get("HOME"):
        env["HOME"] = os.path.expanduser("~")
    places = hf_locations(env)
    hub_dir = CONTAINER_HF_CACHE + "/hub"
    if opts.hf_cache:
        path, origin = expand_path(opts.hf_cache, env), "--hf-cache"
    elif places.hub_cache_from in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        return (
            Mount(places.hub_cache, hub_dir),
            f"{places.hub_cache_from} is set: the shared hub cache is mounted where vLLM looks "
            "for models",
        )
    elif places.home_from == "HF_HOME":
        path, origin = places.home, "HF_HOME"
    else:
        where = "$XDG_CACHE_HOME/huggingface" if places.home_from == "XDG_CACHE_HOME" else ""
        return (
            Mount(places.home, CONTAINER_HF_CACHE),
            "your Hugging Face cache"
            + (f" ({where})" if where else "")
            + ": weights download once and are reused by every launch",
        )
    if _has_models_at_root(path, host):
        return (
            Mount(path, hub_dir),
            f"{origin} holds models--* at its root (a hub cache): mounted on the hub directory",
        )
    return (
        Mount(path, CONTAINER_HF_CACHE),
        f"{origin} is an HF home (models under hub/): mounted on the container's HF home",
    )


def _has_models_at_root(path: str, host: Host | None) -> bool:
    if host is None or host.is_local:
        try:
            return any(e.startswith("models--") for e in os.listdir(path))
        except OSError:
            return False
    result = host.run(
        ["sh", "-c", 'for d in "$1"/models--*; do [ -d "$d" ] && exit 0; done; exit 1', "sh", path],
        timeout=30,
    )
    return result.ok


# ------------------------------------------------------------------------ fit


@dataclass
class _Sizer:
    """Loads metadata and runs the estimator, memoised per model id."""

    hw: HardwareSpec
    ctx: LaunchContext
    opts: PlanOptions
    reports: dict[str, FitReport | None] = field(default_factory=dict)
    metas: dict[str, ModelMeta] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    def options(self, tp: int | None) -> FitOptions:
        from instinct_serve.fit.catalog_link import fit_options

        fopts, _notes = fit_options(
            self.ctx,
            tp=tp,
            max_model_len=self.opts.max_model_len,
            kv_cache_dtype=self.opts.kv_cache_dtype,
            gpu_memory_utilization=self.opts.gpu_memory_utilization,
            speculative_mtp=self.opts.speculative_mtp,
        )
        return fopts

    def meta(self, model_id: str) -> ModelMeta | None:
        if model_id in self.metas:
            return self.metas[model_id]
        if model_id in self.problems:
            return None
        from instinct_serve.gather.model_dir import is_local_dir
        from instinct_serve.gather.model_meta import load_model_meta

        try:
            meta = load_model_meta(model_id)
        except InstinctError as exc:
            if is_local_dir(model_id):
                raise  # the user's own directory is broken: its own id (bad_model_config...)
            self.problems[model_id] = exc.message
            return None
        self.metas[model_id] = meta
        return meta

    def report(self, model_id: str, tp: int | None = None) -> FitReport | None:
        key = f"{model_id}@{tp}"
        if key not in self.reports:
            meta = self.meta(model_id)
            if meta is None:
                self.reports[key] = None
            else:
                from instinct_serve.fit.estimate import estimate

                self.reports[key] = estimate(meta, self.hw, self.options(tp))
        return self.reports[key]

    def verdict(self, model_id: str) -> str | None:
        """The fit verdict of a launch at the TP the plan would pick (not always TP 1)."""
        report = self.report(model_id, self.opts.tp)
        if report is None:
            return None
        if self.opts.tp is None and report.verdict == "needs_tp" and report.min_tp_required:
            report = self.report(model_id, report.min_tp_required) or report
        return report.verdict


def _is_moe(meta: ModelMeta | None, amd: AmdConfig, match: Match) -> bool:
    if meta is not None:
        from instinct_serve.fit.config import ModelConfig

        try:
            if ModelConfig(meta.config).num_experts > 0:
                return True
        except Exception:  # an odd config must not stop planning
            pass
    recipe = match.recipe
    return bool(recipe is not None and "moe" in str(recipe.architecture or "").lower())


def _moe_density(meta: ModelMeta | None) -> float | None:
    """The share of experts a token activates (``num_experts_per_tok / num_experts``), when
    the config says both: what decides expert parallelism (``plan.replicas``)."""
    if meta is None:
        return None
    from instinct_serve.fit.config import ModelConfig

    try:
        config = ModelConfig(meta.config)
        experts, active = config.num_experts, config.experts_per_token
    except Exception:  # an odd config must not stop planning
        return None
    return active / experts if experts > 0 and active > 0 else None


# ------------------------------------------------------------------------ entry point


@dataclass
class Setting:
    """What every planning question starts from: the catalog, the GPUs, the model's match
    and the gfx's configuration."""

    catalog: Catalog
    inventory: GpuInventory
    hardware_source: str
    warnings: list[str]
    match: Match
    overrides: Any
    gpu_key: str
    gfx_cfg: Any


def setting(
    opts: PlanOptions,
    host: Host | None = None,
    inventory: GpuInventory | None = None,
    target: Target | None = None,
) -> Setting:
    """Validate, load the catalog, resolve the GPUs (``target`` when the caller resolved
    them: a CPU target) and the model (refusing a blacklisted one): the first half of
    ``make_plan`` and of ``plan --list``."""
    from instinct_serve.catalog import (
        ensure_servable,
        load_catalog,
        load_gpu_overrides,
        lookup,
        staleness_warning,
    )
    from instinct_serve.catalog.matching import check_model_id

    opts.validate()
    model = opts.model.strip()
    catalog = load_catalog()
    if not os.path.isdir(model):
        check_model_id(model, catalog)
    hardware = target or resolve_hardware(opts, host, inventory)
    one_node(opts, hardware)
    inv, warnings = hardware.inventory, list(hardware.notes)
    warnings.extend(catalog.warnings)
    stale = staleness_warning(catalog)
    if stale:
        warnings.append(stale)
    match = lookup(model, catalog)
    ensure_servable(match)  # blacklisted → refused with reason and alternative
    overrides = load_gpu_overrides()
    gpu_key = CPU_CATALOG_GPU if hardware.cpu else catalog_key(inv)
    gfx_cfg = overrides.config(_gfx_of(gpu_key, inv))
    return Setting(catalog, inv, hardware.source, warnings, match, overrides, gpu_key, gfx_cfg)


def one_node(opts: PlanOptions, hardware: Target) -> None:
    """Refuse a named GPU's count beyond what one node of it holds (16 MI300X are two
    nodes) unless the plan spans nodes (``opts.nodes``): one container cannot use them."""
    from instinct_serve.hardware.profiles import get_profile

    spec = opts.gpu_spec or opts.default_gpu
    if opts.nodes > 1 or not hardware.source.startswith("profile") or not spec:
        return
    profile = get_profile(spec)
    count, most = hardware.inventory.gpu_count, profile.per_node
    if most is None or count <= most:
        return
    span = (
        f"with --hosts, --gpu-count is one node's GPUs: use {most} or less"
        if opts.hosts
        else f"span nodes with --hosts H1,H2,... (rank 0 first; {most} GPUs each), or use "
        f"--gpu-count {most} or less"
    )
    raise UsageError(
        f"{count} GPUs: one {profile.product} node holds {most}, and an endpoint runs on one node",
        fix=span,
        agent_fix=f"set `gpu_count` to {most} or less (one node); more GPUs are several "
        "nodes, which these tools do not start: the user serves them from a terminal",
        id="bad_gpu_count",
        details={"option": "gpu_count", "gpus_per_node": most, "gpu_count": count},
    )


def make_plan(
    opts: PlanOptions,
    host: Host | None = None,
    inventory: GpuInventory | None = None,
    target: Target | None = None,
) -> PlanResult:
    """Everything ``instinct plan`` does, minus printing. Raises InstinctError to refuse.

    ``target``: the hardware when the caller resolved it (``cpu_plan_target`` for a
    CPU-only engine: the plan is then vLLM's CPU backend's, ``plan.cpu``)."""
    on_cpu = target is not None and target.cpu
    if on_cpu:  # no device is picked on a CPU: --gpus does not apply (the target says so)
        opts = copy.copy(opts)
        opts.gpus = None
    base = setting(opts, host, inventory, target)
    chosen = _configure(opts, base, on_cpu)
    inputs = _inputs(opts, base, chosen, on_cpu, host)
    plan = build_plan(inputs)
    fit = chosen.fit
    if on_cpu:  # the CPU backend of the plan's server (vLLM's or SGLang's)
        from instinct_serve.plan.cpu import on_cpu as for_cpu
        from instinct_serve.servers.kind import CpuFigures

        for_cpu(
            plan,
            CpuFigures(
                kv_bytes_per_token=fit.kv_cache_bytes_per_token if fit is not None else None,
                native_max_model_len=fit.native_max_model_len if fit is not None else None,
                weight_bytes=fit.weights.loaded_bytes if fit is not None else None,
                memory_bytes=base.inventory.vram_bytes,
            ),
        )
    else:
        _cross_check(plan, base.catalog, base.match, chosen.amd)
    if opts.engine == "docker" and _local_model_dir(plan.model, host):
        _mount_model_dir(plan)
    _compile_cache(plan, opts, host)
    return PlanResult(
        plan=plan,
        inventory=base.inventory,
        match=base.match,
        fit=inputs.fit,
        hardware_source=base.hardware_source,
        warnings=plan.warnings,
        tp_problems=tp_rules(opts, chosen.sizer, chosen.variant.model_id, chosen.amd, chosen.ctx),
    )


@dataclass
class _Chosen:
    """The checkpoint and its configuration, with the sizer and launch context they set."""

    hw: HardwareSpec
    ctx: LaunchContext
    sizer: _Sizer
    variant: VariantChoice
    amd: AmdConfig
    tp: TpDecision | None = None  # decided with the image known (``_inputs``)
    fit: FitReport | None = None  # at that TP
    reference: ReferenceChoice | None = None  # AMD's reference config (gather.reference)
    kv_fp8_why: str = ""  # the checkpoint means its KV cache in fp8, and why
    server: ServerChoice | None = None  # the server launched, and why (``decide_server``)


def _configure(opts: PlanOptions, base: Setting, on_cpu: bool) -> _Chosen:
    """The variant to serve and its AMD configuration (the CPU's model layers on a CPU);
    the fit's launch context follows them."""
    from instinct_serve.catalog import amd_config
    from instinct_serve.fit.precision import checkpoint_precision

    match, gpu_key, overrides = base.match, base.gpu_key, base.overrides
    strategies = base.catalog.strategies
    features = None  # the recipe's defaults plus opt-ins asked for
    if opts.features:
        defaults = amd_config(match, gpu_key, overrides=overrides, strategies=strategies)
        features = list(dict.fromkeys([*defaults.features, *opts.features]))
    hw, ctx = _fit_inputs(base.inventory, base.hardware_source, match, gpu_key, overrides)
    sizer = _Sizer(hw, ctx, opts)
    requested_meta = sizer.meta(match.model_id) if match.kind in ("base_model", "generic") else None
    checkpoint = checkpoint_precision(
        match.model_id, requested_meta.config if requested_meta is not None else None
    )
    fits = variant_fits(opts, base.inventory, sizer, match)
    variant = choose_variant(match, base.gfx_cfg.precision.status, fits, opts.precision, checkpoint)
    served_meta = sizer.meta(variant.model_id)
    amd = amd_config(
        match,
        gpu_key,
        variant=variant.key,
        features=features,
        overrides=overrides,
        model_config=served_meta.config if served_meta is not None else None,
        strategies=strategies,
    )
    if on_cpu:
        from instinct_serve.plan.cpu import cpu_config

        amd = cpu_config(amd)
    follow_config(ctx, amd, opts)
    kv_why = "" if on_cpu else checkpoint_kv(ctx, opts, variant.model_id, served_meta)
    server = decide_server(opts, base, variant.model_id, on_cpu)
    reference = (
        None
        if on_cpu
        else reference_for(
            opts,
            amd,
            variant.model_id,
            gpu_key,
            base.inventory.gpu_count,
            ctx,
            SGLANG if server.name == SGLANG else "vllm",
        )
    )
    if server.name == SGLANG and not on_cpu:  # on a CPU: SGLang's CPU backend, no config
        from instinct_serve.gather.reference import load_references
        from instinct_serve.plan.sglang import require_config

        refs, _warnings = load_references()
        baseline = refs.newest_image(gpu_key)
        reference = require_config(reference, variant.model_id, gpu_key, baseline, refs.gpus())
    ctx.context_length = amd.context_length or ctx.context_length
    sizer.reports.clear()
    return _Chosen(
        hw, ctx, sizer, variant, amd, reference=reference, kv_fp8_why=kv_why, server=server
    )


def checkpoint_kv(
    ctx: LaunchContext, opts: PlanOptions, model_id: str, meta: ModelMeta | None
) -> str:
    """When the checkpoint ships fp8 KV scales (``fit.precision.fp8_kv_cache``) and neither
    you nor the recipe set ``--kv-cache-dtype``: the launch (and so the fit) takes
    ``--kv-cache-dtype fp8``; returns why ("" when not)."""
    from instinct_serve import vllm_args
    from instinct_serve.fit.precision import fp8_kv_cache

    why = fp8_kv_cache(model_id, meta.config if meta is not None else None)
    if not why or opts.kv_cache_dtype or vllm_args.value(ctx.launch_args, "--kv-cache-dtype"):
        return ""
    ctx.launch_args = [*ctx.launch_args, "--kv-cache-dtype", "fp8"]
    return why


def follow_config(ctx: LaunchContext, amd: AmdConfig, opts: PlanOptions) -> None:
    """The fit sizes the launch as configured: its arguments and environment (the user's
    after the configuration's; VLLM_USE_V1 and the like change the memory)."""
    ctx.launch_args = [*amd.args, *opts.extra_args]
    ctx.env = {**amd.env, **opts.env_literal}
    ctx.flags_origin = "the plan's flags (the recipe's and yours)"


def _image(opts: PlanOptions, amd: AmdConfig, catalog: Catalog) -> tuple[str, str]:
    """The image and why: ``--image``, the recipe's pin, else the catalog's newest."""
    if opts.image:
        return opts.image, "--image given"
    if amd.image:
        return amd.image, "pinned by the recipe for AMD GPUs"
    return catalog.docker_image or FALLBACK_IMAGE, (
        f"the newest vllm/vllm-openai-rocm release known to the catalog ({catalog.source}"
        + (f", fetched {catalog.fetched_at[:10]}" if catalog.fetched_at else "")
        + ")"
    )


def _refusals(opts: PlanOptions, base: Setting, chosen: _Chosen, image: str) -> list[Refusal]:
    """What must not launch here (refused unless ``--force``: ``plan.refusals``)."""
    from instinct_serve.plan import refusals

    variant, amd = chosen.variant, chosen.amd
    return refusals.refusals(
        refusals.Target(
            gfx=base.gfx_cfg.gfx,
            hw_id=amd.hardware_id,
            precision=variant.precision,
            precision_from=variant.precision_from,
            model_id=variant.model_id,
            support=base.gfx_cfg.precision,
            args=chosen.ctx.launch_args,
            image=image,
            image_pinned=bool(opts.image or amd.image),
        ),
        base.match,
    )


def _stack_check(
    opts: PlanOptions, base: Setting, chosen: _Chosen, image: str, reason: str
) -> StackCheck:
    """The validated-stack table on this launch (``plan.stacks``): refusals, warnings, and
    the newest known-good image in place of a refused default."""
    from instinct_serve.catalog.stacks import Launch, table_for
    from instinct_serve.plan.speculative import planned_args
    from instinct_serve.plan.stacks import check_stack

    launch = Launch(
        image=image,
        gfx=base.gfx_cfg.gfx,
        model_ids=(chosen.variant.model_id, base.match.model_id, opts.model),
        env=chosen.ctx.env,
        args=[*chosen.ctx.launch_args, *planned_args(opts, chosen.reference)],
    )
    check = check_stack(
        table_for(base.catalog), launch, pinned=bool(opts.image or chosen.amd.image)
    )
    check.image_reason = check.image_reason or reason
    return check


def _server_image(
    opts: PlanOptions, base: Setting, chosen: _Chosen
) -> tuple[StackCheck, str | None]:
    """The image (the validated-stack table's word on it) and what is wrong with it: an
    SGLang plan's is AMD's config's, a vLLM plan's the recipe's or the catalog's newest."""
    from instinct_serve.catalog.matching import vllm_gate

    if opts.server == SGLANG:
        return StackCheck(
            *sglang_image(opts, chosen.reference, on_cpu=base.hardware_source == CPU_SOURCE)
        ), None
    stack = _stack_check(opts, base, chosen, *_image(opts, chosen.amd, base.catalog))
    return stack, vllm_gate(base.match, stack.image)


def _inputs(
    opts: PlanOptions, base: Setting, chosen: _Chosen, on_cpu: bool, host: Host | None
) -> PlanInputs:
    """Everything ``build_plan`` decides from: the image, what must not launch here, the
    TP, the fit at it (and smaller checkpoints when it does not fit), the HF cache mount.
    The TP and the fit are also kept on ``chosen``."""
    from instinct_serve import __version__
    from instinct_serve.catalog.matching import image_version

    match, inv, variant, amd, ctx = (
        base.match,
        base.inventory,
        chosen.variant,
        chosen.amd,
        chosen.ctx,
    )
    opts = decided(opts, chosen.server)
    stack, image_problem = _server_image(opts, base, chosen)
    image, image_reason = stack.image, stack.image_reason or ""
    version = image_version(image)
    if version:
        ctx.vllm_version = ".".join(str(p) for p in version)
    # AMD's reference overrules the recipe's refusals (it runs it); a known-bad stack stays
    found_refusals = [
        *overrule(_refusals(opts, base, chosen, image), chosen.reference),
        *stack.refusals,
    ]
    # TP: from the objective, the fits at each TP, the recipe, the kernel constraints; on
    # partitions (CPX...) the recipe's per-GPU TP, stated for whole GPUs, does not apply
    where = layout(inv)
    recipe_tp = _recipe_tp(match, variant, amd, inv.gpu_count)
    if where.partitioned:
        recipe_tp = None
    sizer = chosen.sizer
    try:
        tp = _decide_tp(
            opts, inv, sizer, variant, match, amd, ctx, found_refusals, recipe_tp, where.per_gpu
        )
    except UsageError as exc:  # unsized: AMD's config states the TP it runs
        tp = unsized_tp(exc, chosen.reference)
    tp = reference_tp(chosen.reference, opts, tp)
    fit = chosen.fit = sizer.report(variant.model_id, tp.tp)
    chosen.tp = tp
    alternatives: list[dict[str, Any]] = []
    if fit is not None and not fit.fits and not on_cpu:
        from instinct_serve.gather.alternatives import find_alternatives

        alts, _skipped = find_alternatives(variant.model_id, ctx, chosen.hw, sizer.options(tp.tp))
        alternatives = [a.to_dict() for a in alts]
    hf_mount, hf_reason = resolve_hf_mount(opts, host) if opts.engine == "docker" else (None, "")
    meta = sizer.metas.get(variant.model_id)
    return PlanInputs(
        options=opts,
        inventory=inv,
        match=match,
        amd=amd,
        variant=variant,
        docker_flags=[]  # a CPU-only engine runs natively, and opens no GPU device
        if on_cpu
        else [(" ".join(f.argv), f.reason) for f in base.overrides.docker_flags],
        image=image,
        image_reason=image_reason,
        hf_mount=hf_mount,
        hf_mount_reason=hf_reason,
        fit=None if on_cpu else fit,  # the CPU's own sizing replaces it (plan.cpu.on_cpu)
        fit_problem=None if on_cpu else sizer.problems.get(variant.model_id),
        is_moe=_is_moe(meta, amd, match),
        moe_density=_moe_density(meta),
        tp=tp,
        refusals=found_refusals,
        alternatives=alternatives,
        image_problem=image_problem,
        warnings=[*base.warnings, *stack.warnings],
        tool_version=__version__,
        env_reasons=_env_reasons(base.gfx_cfg, variant.model_id, match),
        partitions=where if inv.gpus else None,
        reference=chosen.reference,
        kv_fp8_why=chosen.kv_fp8_why,
        server=chosen.server,
    )


def _local_model_dir(model: str, host: Host | None) -> bool:
    """The model is a directory on the host (served from a path, not a Hub id)."""
    if not os.path.isabs(model):
        return False
    if host is None or host.is_local:
        return os.path.isdir(model)
    return host.run(["test", "-d", model], timeout=30).ok


def _mount_model_dir(plan: LaunchPlan) -> None:
    """A local model directory is mounted read-only at the same path in the container,
    where ``vllm serve DIR`` looks for it (without it vLLM takes the path for a Hub id)."""
    from instinct_serve.plan.labels import LABEL_PLAN_HASH

    mount = Mount(plan.model, plan.model, read_only=True)
    if mount in plan.mounts:
        return
    plan.mounts.append(mount)
    plan.reasons.append(
        Reason(
            f"-v {mount.docker_arg()}",
            "model directory",
            "the model is a local directory: mounted read-only at the same path, where vLLM "
            "in the container reads it",
        )
    )
    plan.labels[LABEL_PLAN_HASH] = plan.plan_hash


def _compile_cache(plan: LaunchPlan, opts: PlanOptions, host: Host | None) -> None:
    """The persistent compile caches (``plan.caches``) on the host, with their reason."""
    from instinct_serve.gather.caches import resolve_compile_cache
    from instinct_serve.plan.labels import LABEL_PLAN_HASH

    if host is None:
        from instinct_serve.hosts import LocalHost

        host = LocalHost()
    plan.cache = resolve_compile_cache(opts.compile_cache, host, plan)
    if plan.cache is None:
        return
    names = ", ".join(c.name for c in plan.cache.dirs)
    plan.reasons.append(
        Reason(
            f"compile caches {plan.cache.directory}",
            "compile cache",
            f"{names} kept on the host per image digest and gfx ({plan.cache.key}): a restart, "
            "a relaunch with a fix or an upgrade to the same image skips the compilation its "
            "predecessor did (--compile-cache off to leave them in the container)",
        )
    )
    plan.labels[LABEL_PLAN_HASH] = plan.plan_hash


def _env_reasons(gfx_cfg: Any, model_id: str, match: Match) -> dict[str, str]:
    """Why our own data sets each variable (gfx defaults, then model overrides)."""
    why = {key: d.reason for key, d in gfx_cfg.env_defaults.items()}
    ids = [model_id] + ([match.recipe.model_id] if match.recipe is not None else [])
    for over in gfx_cfg.overrides_for(*ids):
        why.update({key: over.reason for key in over.env})
    return why


def _gfx_of(gpu_key: str, inv: GpuInventory) -> str:
    if gpu_key.startswith("gfx"):
        return gpu_key
    from instinct_serve.hardware.profiles import get_profile

    return get_profile(gpu_key).gfx_version


def _fit_inputs(
    inv: GpuInventory, source: str, match: Match, gpu_key: str, overrides: Any
) -> tuple[HardwareSpec, LaunchContext]:
    from instinct_serve.fit.catalog_link import LaunchContext
    from instinct_serve.fit.estimate import HardwareSpec

    hw = HardwareSpec.from_inventory(inv, source)
    prec = overrides.config(_gfx_of(gpu_key, inv)).precision
    ctx = LaunchContext(
        recipe_model_id=match.recipe.model_id if match.recipe else None,
        match_kind=match.kind,
        native_precisions=sorted(prec.native),
        unsupported_precisions=sorted(prec.unsupported),
    )
    if match.recipe is not None:
        ctx.context_length = match.recipe.context_length
        ctx.variants = [(v.model_id, v.precision, v.key) for v in match.recipe.variants.values()]
    return hw, ctx


def _cross_check(plan: LaunchPlan, catalog: Catalog, match: Match, amd: AmdConfig) -> None:
    """Compare with upstream's own rendered AMD command for this checkpoint (the variant's
    own page when the catalog has one) when synced from the recipes API."""
    if match.recipe is None or not amd.hardware_id:
        return
    rendered = catalog.rendered(plan.model, amd.hardware_id)
    if rendered is None and plan.model == match.recipe.model_id:
        rendered = catalog.rendered(match.recipe.model_id, amd.hardware_id)
    if rendered is None:
        return
    from instinct_serve.catalog import compare_with_rendered

    own = {k for k, src in amd.env_sources.items() if src.startswith("gpu ")}
    diffs = compare_with_rendered(
        plan.vllm_args, plan.env, rendered.argv, rendered.env, own_env=own
    )
    plan.recipe_cross_check = {"hardware": amd.hardware_id, "differences": diffs}
    if diffs:
        plan.warnings.append(
            f"differs from the recipes site's {amd.hardware_id} command in {len(diffs)} "
            "place(s) that change behaviour: see recipe_cross_check"
        )


def plan_for(opts: PlanOptions, host: Host, *, fallback_gpu: bool = False) -> PlanResult:
    """``make_plan`` as the CLI and MCP ``plan`` call it: with ``fallback_gpu`` a local host
    without GPUs plans for an MI300X node."""
    if fallback_gpu and host.is_local:
        opts.default_gpu = "mi300x"
    return make_plan(opts, host)
