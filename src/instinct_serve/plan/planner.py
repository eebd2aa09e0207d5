"""The planner: a pure function from (hardware, catalog match, AMD config, fit, options) to a
``LaunchPlan``, with a ``Reason`` for every flag, variable, mount and choice.

Nothing here does I/O. ``gather.plan`` gathers the inputs (detect, catalog, Hub metadata,
the host's HF cache layout) and calls ``build_plan``; tests call it with hand-made inputs.

Argument precedence, lowest first (the last value of a flag wins, and every flag set to two
different values is reported in ``conflicts``):

    AMD config layers (gfx env defaults < recipe base < variant < hardware overrides
      < features < our gfx model overrides; merged by ``catalog.amd_config``)
    planner decisions (TP, executor backend, --max-model-len, --port)
    user options (--max-model-len, --kv-cache-dtype, --gpu-memory-utilization, --tp)
    user pass-through arguments (after ``--``)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from instinct_serve import __version__, servers
from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.hardware.partitions import Layout, endpoints, spanning_warning
from instinct_serve.names import is_env_name
from instinct_serve.options import PlanOptions, launcher
from instinct_serve.plan.builder import ArgMerge, PlanBuilder
from instinct_serve.plan.caches import CACHE_VARIABLES
from instinct_serve.plan.decisions import (
    FIT_OK,
    TpDecision,
    VariantChoice,
    choose_tp,
    choose_variant,
)
from instinct_serve.plan.labels import managed_labels
from instinct_serve.plan.model import (
    DEFAULT_PORT,
    Assigned,
    Conflict,
    FitSummary,
    LaunchPlan,
    Mount,
)
from instinct_serve.plan.reference import ReferenceChoice
from instinct_serve.plan.reference import follow as follow_reference
from instinct_serve.plan.refusals import Refusal
from instinct_serve.plan.replicas import GroupInputs, decide_group, with_router_image
from instinct_serve.plan.sglang import ServerChoice
from instinct_serve.plan.speculative import speculative
from instinct_serve.units import token_count

__all__ = [
    "FIT_OK",
    "ArgMerge",
    "PlanInputs",
    "TpDecision",
    "VariantChoice",
    "build_plan",
    "choose_tp",
    "choose_variant",
    "container_name",
]

if TYPE_CHECKING:
    from instinct_serve.catalog.config import AmdConfig
    from instinct_serve.catalog.matching import Match
    from instinct_serve.fit.estimate import FitReport
    from instinct_serve.hardware.inventory import GpuInventory

DEVICE_ENV = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
# The variables the plan reads to size or check itself (plan.cpu, fit.catalog_link,
# plan.constraints, the context and devices steps here, plan.caches.CACHE_VARIABLES): a
# value passed by name is not in the plan, so these are given with --env-literal.
PLAN_ENV = (
    "VLLM_CPU_KVCACHE_SPACE",
    "VLLM_USE_V1",
    "VLLM_USE_V2_MODEL_RUNNER",
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS",
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "VLLM_ROCM_USE_AITER",
    *DEVICE_ENV,
)


@dataclass
class PlanInputs:
    """What ``assemble`` gathered; ``build_plan`` turns it into a plan without I/O."""

    options: PlanOptions
    inventory: GpuInventory
    match: Match
    amd: AmdConfig
    variant: VariantChoice
    docker_flags: list[tuple[str, str]]  # (flag as one string, reason)
    image: str
    image_reason: str
    hf_mount: Mount | None = None
    hf_mount_reason: str = ""
    fit: FitReport | None = None
    fit_problem: str | None = None  # why there is no fit report
    is_moe: bool = False
    moe_density: float | None = None  # experts active per token / experts (MoE only)
    tp: TpDecision | None = None  # decided by gather (it needs the fits at several TPs)
    refusals: list[Refusal] = field(default_factory=list)
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    image_problem: str | None = None  # the image is older than the recipe needs
    warnings: list[str] = field(default_factory=list)
    tool_version: str = ""
    cross_check: dict[str, Any] | None = None
    env_reasons: dict[str, str] = field(default_factory=dict)  # our data's reason per variable
    partitions: Layout | None = None  # how the GPUs sit as partitions (hardware.partitions)
    reference: ReferenceChoice | None = None  # AMD's reference config (plan.reference)
    kv_fp8_why: str = ""  # the checkpoint ships fp8 KV scales: --kv-cache-dtype fp8, why
    server: ServerChoice | None = None  # which server, and why (``plan.sglang.choose_server``)


# ---------------------------------------------------------------- pure decisions


def container_name(model_id: str, port: int, server: str = servers.DEFAULT) -> str:
    """``vllm-<model-slug>`` (``sglang-...`` for an SGLang plan; plus the port when not the
    default, so two can coexist)."""
    base = model_id.rsplit("/", 1)[-1].lower()
    slug = re.sub(r"[^a-z0-9]+", "-", base).strip("-")[:48] or "model"
    return f"{server}-{slug}" if port == DEFAULT_PORT else f"{server}-{slug}-{port}"


def build_plan(inp: PlanInputs) -> LaunchPlan:
    """Decide every flag. Raises ``InstinctError`` for plans that must not launch.

    The steps below run in this order (the order of the plan's reasons and warnings)."""
    tp = _decided_tp(inp)
    b = PlanBuilder(warnings=list(inp.warnings))
    _forced(b, inp)
    _hardware(b, inp)
    if inp.server is not None and inp.server.stated:
        b.reason("server", inp.server.source, inp.server.why)
    if servers.get(inp.options.server).vocabulary == "sglang":
        return _build_sglang(b, inp, tp)
    _environment(b, inp)
    gpu_indices, partitions = _devices(b, inp, tp.tp)
    api_key = _secrets(b, inp.options)
    _check_env(b.env)
    _recipe_args(b, inp.amd)
    follow_reference(b, inp.reference, inp.options, inp.image)
    _checkpoint_kv(b, inp)
    _parallelism(b, inp, tp)
    max_len, context_limited = _context(b, inp)
    _user_args(b, inp.options, inp.reference)
    _check_args(b.args, inp.options)
    max_len = _planned_length(b, inp, max_len)
    b.flag_conflicts()
    mounts = _image_and_mounts(b, inp, tp)
    plan = _assemble(
        b,
        inp,
        mounts=mounts,
        tensor_parallel_size=tp.tp,
        max_model_len=max_len,
        context_limited=context_limited,
        gpu_indices=gpu_indices,
        partitions=partitions,
        api_key=api_key,
    )
    _group(plan, inp)
    return plan


def _build_sglang(b: PlanBuilder, inp: PlanInputs, tp: TpDecision) -> LaunchPlan:
    """An SGLang plan (``plan.sglang``): AMD's SGLang config is its configuration (no recipe
    layer); the devices, secrets, image, mounts and group as for any plan."""
    from instinct_serve.plan.reference import other_servers_line
    from instinct_serve.plan.sglang import follow, memory, refuse_public

    refuse_public(inp.options)
    gpu_indices, partitions = _devices(b, inp, tp.tp)
    api_key = _secrets(b, inp.options)
    # gather refused an SGLang plan without a config, but on a CPU (``plan.cpu.on_cpu``)
    line = other_servers_line(inp.reference) if inp.reference is not None else None
    if line:
        b.reason("other servers", "AMD reference", line)
    follow(b, inp.reference, inp.options, tp)
    inp = replace(inp, fit=memory(b, inp.fit))
    _check_env(b.env)
    b.flag_conflicts()
    b.reason(inp.image, "image", inp.image_reason)
    mounts = [inp.hf_mount] if inp.hf_mount is not None else []
    if inp.hf_mount is not None:
        b.reason(f"-v {inp.hf_mount.docker_arg()}", "hf cache", inp.hf_mount_reason)
    plan = _assemble(
        b,
        inp,
        mounts=mounts,
        tensor_parallel_size=tp.tp,
        max_model_len=inp.options.max_model_len,
        context_limited=False,
        gpu_indices=gpu_indices,
        partitions=partitions,
        api_key=api_key,
    )
    _group(plan, inp)
    return plan


def _decided_tp(inp: PlanInputs) -> TpDecision:
    """Refuse what must not launch here; the TP decision gather made."""
    _refuse(inp)
    if inp.tp is None:
        raise InstinctError("the plan has no TP decision", id="internal_plan_error")
    _guard_fit(inp)
    return inp.tp


def _forced(b: PlanBuilder, inp: PlanInputs) -> None:
    """What ``--force`` launched past (``inp.refusals`` is only non-empty with it)."""
    for refusal in inp.refusals:
        b.warn(f"--force: launching although {refusal.message}")
        b.reason(f"forced past {refusal.id}", refusal.source, refusal.message)


# --- hardware and docker flags


def _hardware(b: PlanBuilder, inp: PlanInputs) -> None:
    b.reason("model", inp.match.kind, inp.match.explanation)
    b.reason("variant", "planner", inp.variant.reason)
    for flag, why in inp.docker_flags:
        b.docker_flag(flag, "gpu_overrides.docker_flags", why)


# --- environment


def _environment(b: PlanBuilder, inp: PlanInputs) -> None:
    """The AMD env, with a reason per variable and every overridden value reported, then
    the user's ``--env`` values over it."""
    amd, why = inp.amd, inp.env_reasons
    seen: dict[str, list[Assigned]] = {}
    for layer in amd.layers:
        for key, value in layer.env.items():
            seen.setdefault(key, []).append(Assigned(layer.name, value))
    for key, value in amd.env.items():
        source = amd.env_sources.get(key, "recipe")
        if key in DEVICE_ENV and value.strip() == "":
            b.drop_env(key, source, "dropped: an empty value hides every GPU")
            continue
        explained = why.get(key) if source.startswith("gpu ") else None
        b.set_env(key, value, source, explained or f"set by the {source}")
        values = seen.get(key, [])
        if len({v.value for v in values}) > 1:
            b.conflicts.append(Conflict("env", key, tuple(values), Assigned(source, value)))
    for key, value in inp.options.env_literal.items():
        b.override_env(key, value, "--env-literal", "given by you, not secret: written as is")


def _devices(
    b: PlanBuilder, inp: PlanInputs, tp: int
) -> tuple[list[int] | None, dict[str, Any] | None]:
    """The GPUs vLLM sees (``--gpus``, else a TP group's partitions) and the partition
    layout's endpoints."""
    gpu_indices = None
    if inp.options.gpus is not None:
        gpu_indices = list(inp.options.gpus)
        b.set_env(
            "HIP_VISIBLE_DEVICES",
            ",".join(str(i) for i in gpu_indices),
            "--gpus",
            "restricts vLLM to these GPUs (HIP_VISIBLE_DEVICES only: vLLM is deprecating "
            "CUDA_VISIBLE_DEVICES on ROCm)",
        )
        for other in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
            if other in b.env:
                b.drop_env(other, "--gpus", "dropped: HIP_VISIBLE_DEVICES decides")
    if inp.partitions is None:
        return gpu_indices, None
    partitions = endpoints(inp.partitions, tp)
    first_set = partitions["replica_gpus"][0] if partitions["replica_gpus"] else None
    if inp.partitions.partitioned and tp > 1 and gpu_indices is None and first_set:
        gpu_indices = list(first_set)
        b.set_env(
            "HIP_VISIBLE_DEVICES",
            ",".join(str(i) for i in gpu_indices),
            "partitions",
            "the TP group on the partitions of one GPU (or whole GPUs), never a GPU "
            "split between groups",
        )
    spanning = spanning_warning(inp.partitions, tp)
    if spanning:
        b.warn(spanning)
    return gpu_indices, partitions


def _secrets(b: PlanBuilder, opts: PlanOptions) -> str | None:
    """The variables passed by name; returns where the API key comes from (if any)."""
    # vLLM and huggingface_hub read it; the value stays outside
    b.secret(
        "HF_TOKEN",
        "planner",
        "passed by name: docker copies it from your environment, so the "
        "token never appears in the command line or in this output",
    )
    for key in opts.extra_env:
        if key in PLAN_ENV or key in CACHE_VARIABLES:
            raise UsageError(
                f"{key} shapes the plan, and a value passed by name (--env {key}=...) is not in it",
                fix=f"give it with --env-literal {key}=VALUE (written in the plan)",
                id="bad_env",
                details={"option": "extra_env", "name": key},
            )
    for key in dict.fromkeys([*opts.env_by_name, *opts.extra_env]):
        if key in b.env:
            b.drop_env(key, "--env", "passed by name: your value replaces this one")
        where = (
            "the value given on the command line is placed in the environment of the "
            "launching process for this run"
            if key in opts.extra_env
            else "its value is taken from your environment at launch"
        )
        b.secret(
            key,
            "--env",
            f"passed by name: {where}, and never written in the plan, an argument or a label",
        )
    return _api_key(b, opts)


# --- vLLM arguments


def _recipe_args(b: PlanBuilder, amd: AmdConfig) -> None:
    """The AMD configuration's arguments (our gfx model overrides may remove some: the
    merged result decides), and what a tool-call parser needs."""
    b.layered_args(amd.layers, amd.args, "from the recipe / AMD configuration")
    if b.args.has("--tool-call-parser") and not b.args.has("--enable-auto-tool-choice"):
        b.flag(
            ["--enable-auto-tool-choice"],
            "planner",
            "a tool-call parser is set; let the model decide when to call "
            "tools (OpenAI tool_choice=auto)",
        )


def _checkpoint_kv(b: PlanBuilder, inp: PlanInputs) -> None:
    """A checkpoint made for an fp8 KV cache (``amd/*-FP8-KV``, a ``kv_cache_scheme``) gets
    it: without the flag vLLM keeps the KV in bf16 and holds half the tokens."""
    if inp.kv_fp8_why and not b.args.has("--kv-cache-dtype"):
        b.flag(
            ["--kv-cache-dtype", "fp8"],
            "checkpoint",
            f"{inp.kv_fp8_why}; bf16 KV would hold half the tokens",
        )


def _parallelism(b: PlanBuilder, inp: PlanInputs, decision: TpDecision) -> None:
    tp = decision.tp
    if tp > 1 or b.args.has("--tensor-parallel-size"):
        b.flag(["--tensor-parallel-size", str(tp)], "planner", decision.why, setter="planner (fit)")
    if decision.need_why:
        b.reason("tp minimum", "fit", decision.need_why)
    for skipped in decision.skipped:
        b.reason("tp constraint", "kernels", skipped)
    if tp > 1 and inp.is_moe and not b.args.has("--distributed-executor-backend"):
        b.flag(
            ["--distributed-executor-backend", "mp"],
            "planner",
            "MoE across several GPUs: multiprocessing workers (no Ray needed on one node)",
        )


def _context(b: PlanBuilder, inp: PlanInputs) -> tuple[int | None, bool]:
    """The context length: yours, else the fit's when the KV room limits it (with the
    utilization it was sized at), else the recipe's. Returns it and whether the fit capped it."""
    opts, fit = inp.options, inp.fit
    if opts.max_model_len is not None:
        max_len = opts.max_model_len
        b.flag(["--max-model-len", str(max_len)], "--max-model-len", "given by you")
        return max_len, False
    if fit is None or not fit.context_limited:
        recipe_len = b.args.value("--max-model-len") or ""
        return (int(recipe_len) if recipe_len.isdigit() else None), False
    max_len = fit.recommended_max_model_len
    gain = ""
    fp8_len = fit.max_seq_len_fp8_kv
    if fp8_len > max_len and not b.args.has("--kv-cache-dtype") and not opts.kv_cache_dtype:
        gain = (
            "; --kv-cache-dtype fp8 would fit the full context"
            if fp8_len >= fit.native_max_model_len
            else f"; --kv-cache-dtype fp8 would hold {fp8_len} ({fp8_len / max_len:.1f}x)"
        )
    b.warn(
        f"context limited to {max_len} of {fit.native_max_model_len} tokens by the KV "
        f"cache room{gain}"
    )
    b.flag(
        ["--max-model-len", str(max_len)],
        "fit",
        f"the KV cache room holds {max_len} tokens, less than the "
        f"model's {fit.native_max_model_len}{gain}",
        setter="planner (fit)",
    )
    if not b.args.has("--gpu-memory-utilization") and opts.gpu_memory_utilization is None:
        b.flag(
            ["--gpu-memory-utilization", f"{fit.gpu_memory_utilization:g}"],
            "fit",
            "the context limit was sized at this utilization; pinning it keeps vLLM "
            "and the estimate in agreement whatever the image's default",
            setter="planner (fit)",
        )
    return max_len, True


def _user_args(b: PlanBuilder, opts: PlanOptions, reference: ReferenceChoice | None) -> None:
    """Your options, the port, then your arguments after ``--`` (the highest precedence)."""
    if opts.kv_cache_dtype:
        b.flag(["--kv-cache-dtype", opts.kv_cache_dtype], "--kv-cache-dtype", "given by you")
    if opts.gpu_memory_utilization is not None:
        b.flag(
            ["--gpu-memory-utilization", f"{opts.gpu_memory_utilization:g}"],
            "--gpu-memory-utilization",
            "given by you",
        )
    speculative(b, opts, reference)
    b.flag(
        ["--port", str(opts.port)],
        "planner",
        "the server's port inside the container, published as the same port on the host",
    )
    if opts.extra_args:
        b.flag(list(opts.extra_args), "arguments after --", "given by you")


def _planned_length(b: PlanBuilder, inp: PlanInputs, max_len: int | None) -> int | None:
    """The plan's figure is what will run: a recipe's or an after-`--` --max-model-len
    counts; past the model's own length it is warned about."""
    merged_len = token_count(b.args.value("--max-model-len") or "")
    if merged_len is not None:
        max_len = merged_len
    fit = inp.fit
    native = fit.native_max_model_len if fit else None
    allowed = b.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1"
    if max_len and native and max_len > native and not allowed:
        b.warn(
            f"--max-model-len {max_len} exceeds the model's {native} tokens "
            f"({fit.native_source if fit else 'config'}): vLLM refuses to start unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (--env), and positions past it are untrained "
            f"unless RoPE scaling is configured; use {native} or less"
        )
    return max_len


# --- image, mounts, names


def _image_and_mounts(b: PlanBuilder, inp: PlanInputs, tp: TpDecision) -> list[Mount]:
    """The image and the HF cache mount with their reasons, and the warnings about the
    launch as a whole."""
    fit = inp.fit
    b.reason(inp.image, "image", inp.image_reason)
    if inp.image_problem:
        b.warn(
            f"{inp.image_problem} (the symptom is 'Engine core initialization failed' at startup)"
        )
    mounts = [inp.hf_mount] if inp.hf_mount is not None else []
    if inp.hf_mount is not None:
        b.reason(f"-v {inp.hf_mount.docker_arg()}", "hf cache", inp.hf_mount_reason)
    for key in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        if b.env.get(key, None) == "":
            b.env.pop(key)
    if fit is None and inp.fit_problem:
        basis = f"; TP {tp.tp} rests on an estimate ({tp.need_why})" if tp.need_why else ""
        b.warn(
            f"no exact size for the model: {inp.fit_problem}{basis}; the context limit is the "
            "model's own, unchecked against the KV room"
        )
    if fit is not None and fit.verdict == "tight":
        b.warn(
            "memory is tight: if graph capture runs out of memory, serve relaunches once with "
            "--enforce-eager"
        )
    b.warnings.extend(inp.amd.warnings)
    return mounts


def _assemble(b: PlanBuilder, inp: PlanInputs, **decided: Any) -> LaunchPlan:
    """The plan of what was recorded and ``decided``, with the hardware and fit it was made
    for."""
    opts, amd, fit, inv = inp.options, inp.amd, inp.fit, inp.inventory
    first = inv.gpus[0] if inv.gpus else None
    return b.plan(
        model=inp.variant.model_id,
        requested_model=opts.model,
        image=inp.image,
        container_name=opts.name
        or container_name(inp.variant.model_id, opts.port, _name_prefix(opts.server)),
        port=opts.port,
        launcher=launcher(opts.engine),
        server=servers.get(opts.server).name,  # bad_server unless the registry has it
        precision=inp.variant.precision,
        variant=inp.variant.key,
        gpu_count=inv.gpu_count,
        match_kind=inp.match.kind,
        match_explanation=inp.match.explanation,
        gfx_version=inv.gfx_version,
        gpu_name=(first.market_name or first.name) if first else "",
        vram_gb_per_gpu=round(inv.vram_bytes / 1e9, 2) if inv.vram_bytes else None,
        weight_memory_gb=round(fit.weights.loaded_bytes / 1e9, 2) if fit else None,
        native_max_model_len=fit.native_max_model_len if fit else amd.context_length,
        verdict=fit.verdict if fit else None,
        fit=FitSummary.of(fit) if fit else None,
        recipe_cross_check=inp.cross_check,
        public=opts.public,
        **decided,
    )


def _group(plan: LaunchPlan, inp: PlanInputs) -> None:
    """Copies of the endpoint over the GPUs left (``plan.replicas``), then the labels."""
    opts = inp.options
    decide_group(
        plan,
        GroupInputs(
            options=opts,
            gpu_count=inp.inventory.gpu_count,
            layout=inp.partitions,
            is_moe=inp.is_moe,
            moe_density=inp.moe_density,
        ),
    )
    with_router_image(plan, opts.router_image)
    plan.labels = managed_labels(
        model=plan.model,
        port=plan.port,
        plan_hash=plan.plan_hash,
        version=inp.tool_version or __version__,
    )


def _name_prefix(server: str) -> str:
    """The endpoint's name starts with its server: ``vllm-``, ``sglang-`` (another registered
    kind speaks vLLM's line: ``vllm-``, as before it named its server)."""
    return server if server in servers.BUILTIN else servers.DEFAULT


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _api_key(b: PlanBuilder, opts: PlanOptions) -> str | None:
    """Where the endpoint's API key comes from, if it has one (``LaunchPlan.api_key``)."""
    kind = servers.get(opts.server)
    if kind.api_key_env in opts.env_by_name:
        b.reason(
            f"--env {kind.api_key_env}",
            "--env",
            f"{kind.title} requires this key (Authorization: Bearer) on /v1/*; serve's own probes "
            "send it too",
        )
        return "environment"
    if not opts.public:
        return None
    b.secret(
        kind.api_key_env,
        "--public",
        "an endpoint open to the network needs a key: serve generates one, keeps it in a "
        "file only you can read on the host, and passes it by name",
    )
    return "generated"


def _check_env(env: dict[str, str]) -> None:
    """Refuse a plan whose environment could not be written safely: a name that is not a
    variable name (a recipe or override file can say anything), a NUL byte, or a
    credential with its value written down."""
    from instinct_serve.credentials import is_secret_name, looks_like_token

    for key, value in env.items():
        if not is_env_name(key):
            raise UsageError(
                f"the plan's environment has an invalid variable name {key!r}",
                fix="variable names are letters, digits and '_' (not starting with a digit); "
                "correct the recipe or override file that sets it",
                id="bad_env_name",
                details={"name": key},
            )
        if "\0" in value:
            raise UsageError(
                f"the value of {key} contains a NUL byte",
                fix="correct the recipe or override file that sets it",
                id="bad_env_value",
                details={"name": key},
            )
        if is_secret_name(key) or looks_like_token(value):
            raise UsageError(
                f"the plan would write the value of {key}, a credential",
                fix=f"remove it from the recipe or override file; export {key} and pass it by "
                f"name: --env {key}",
                id="secret_in_args",
                details={"name": key},
            )


def _check_args(merge: ArgMerge, opts: PlanOptions) -> None:
    """The native route listens on 127.0.0.1 unless ``--public``: an argument that opens
    it to the network without a key is refused."""
    host = merge.value("--host")
    if opts.engine != "native" or host is None or opts.public or host in LOOPBACK_HOSTS:
        return
    raise UsageError(
        f"--host {host} would open the endpoint to the network without an API key",
        fix="use --public: it listens on every interface and requires a key (yours with "
        "--env VLLM_API_KEY, else a generated one)",
        id="bad_extra_args",
        details={"option": "extra_args", "flag": "--host"},
    )


def _refuse(inp: PlanInputs) -> None:
    """Stop a plan that cannot run here (``plan.refusals``), unless ``--force``."""
    from instinct_serve.plan.refusals import refuse

    refuse(inp.refusals, force=inp.options.force)


def _guard_fit(inp: PlanInputs) -> None:
    """Refuse what will not start: does not fit, too tight (unless --force)."""
    fit, opts = inp.fit, inp.options
    if fit is None:
        return
    details = {"fit": FitSummary.of(fit).to_dict(), "alternatives": inp.alternatives}
    alt_text = ", ".join(a["model"] for a in inp.alternatives[:3]) if inp.alternatives else ""
    if fit.requested_fits is False and fit.recommended_max_model_len > 0:
        if opts.force:
            return
        asked, native = fit.requested_max_model_len or 0, fit.native_max_model_len
        raise InstinctError(
            f"--max-model-len {asked} exceeds both the model's {native} tokens and the KV "
            "cache room"
            if asked > native
            else f"--max-model-len {asked} does not fit in the KV cache room "
            f"(about {fit.recommended_max_model_len} tokens fit)",
            fix=f"use --max-model-len {fit.recommended_max_model_len} or less, "
            "--kv-cache-dtype fp8, or more GPUs",
            id="max_model_len_too_large",
            details=details,
        )
    if fit.verdict in ("does_not_fit", "needs_tp"):
        if fit.verdict == "needs_tp" and opts.tp is not None:
            fix = f"drop --tp {opts.tp}: the weights need TP {fit.min_tp_required}"
        elif fit.min_tp_unbounded:
            fix = f"use a host with {fit.min_tp_unbounded} such GPUs" + (
                f", or a smaller checkpoint: {alt_text}"
                if alt_text
                else ", or a quantized checkpoint (--precision)"
            )
        else:
            fix = f"try {alt_text}" if alt_text else "use a quantized checkpoint or more GPUs"
        raise InstinctError(
            f"{fit.model_id} does not fit on {inp.inventory.gpu_count}x "
            f"{_gpu_label(inp.inventory)}: {fit.verdict_reason}",
            fix=fix,
            id="does_not_fit",
            details=details,
        )
    if fit.verdict == "too_tight" and not opts.force:
        raise InstinctError(
            f"{fit.model_id} leaves almost no room for the KV cache: {fit.verdict_reason}",
            fix="pass --max-model-len with a smaller value, --kv-cache-dtype fp8, more GPUs "
            "(--tp), or --force to launch anyway" + (f"; or try {alt_text}" if alt_text else ""),
            id="too_tight",
            details=details,
        )


def _gpu_label(inventory: GpuInventory) -> str:
    if not inventory.gpus:
        return "GPU"
    gpu = inventory.gpus[0]
    return str(gpu.market_name or gpu.name)
