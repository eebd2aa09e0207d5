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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve import __version__
from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.hardware.partitions import Layout, endpoints, spanning_warning
from instinct_serve.names import is_env_name
from instinct_serve.options import PlanOptions
from instinct_serve.plan.decisions import (
    FIT_OK,
    TpDecision,
    VariantChoice,
    choose_tp,
    choose_variant,
)
from instinct_serve.plan.labels import managed_labels
from instinct_serve.plan.model import (
    API_KEY_ENV,
    DEFAULT_PORT,
    FitSummary,
    LaunchPlan,
    Mount,
    Reason,
)
from instinct_serve.plan.refusals import Refusal
from instinct_serve.plan.replicas import GroupInputs, decide_group, with_router_image
from instinct_serve.units import token_count
from instinct_serve.vllm_args import Unit
from instinct_serve.vllm_args import units as arg_units

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


# ----------------------------------------------------------------- argument helpers


@dataclass
class ArgMerge:
    """Merge argv from sources in precedence order; remember who set what."""

    units: dict[str, tuple[list[str], str]] = field(default_factory=dict)  # name → (tokens, src)
    order: list[str] = field(default_factory=list)
    positional: list[str] = field(default_factory=list)
    history: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # name → (src, val)

    def add(self, args: Iterable[str], source: str) -> None:
        for name, tokens in arg_units(list(args)):
            if name is None:
                self.positional.extend(tokens)
                continue
            self.history.setdefault(name, []).append((source, Unit(name, tokens).value or ""))
            if name not in self.units:
                self.order.append(name)
            self.units[name] = (tokens, source)

    def remove(self, name: str) -> None:
        if name in self.units:
            del self.units[name]
            self.order.remove(name)

    def has(self, name: str) -> bool:
        return name in self.units

    def value(self, name: str) -> str | None:
        return Unit(name, self.units[name][0]).value if name in self.units else None

    def source(self, name: str) -> str | None:
        return self.units[name][1] if name in self.units else None

    def argv(self) -> list[str]:
        out = list(self.positional)
        for name in self.order:
            out.extend(self.units[name][0])
        return out

    def conflicts(self) -> list[dict[str, Any]]:
        found = []
        for name, seen in self.history.items():
            if len({value for _src, value in seen}) > 1 and name in self.units:
                found.append(
                    {
                        "flag": name,
                        "values": [{"source": src, "value": val} for src, val in seen],
                        "winner": {"source": self.units[name][1], "value": self.value(name)},
                    }
                )
        return found


# ---------------------------------------------------------------- pure decisions


def container_name(model_id: str, port: int) -> str:
    """``vllm-<model-slug>`` (plus the port when not the default, so two can coexist)."""
    base = model_id.rsplit("/", 1)[-1].lower()
    slug = re.sub(r"[^a-z0-9]+", "-", base).strip("-")[:48] or "model"
    return f"vllm-{slug}" if port == DEFAULT_PORT else f"vllm-{slug}-{port}"


def _env_with_conflicts(
    amd: AmdConfig,
    reasons: list[Reason],
    conflicts: list[dict[str, Any]],
    why: dict[str, str],
) -> dict[str, str]:
    """The AMD env, with a reason per variable and every overridden value reported."""
    seen: dict[str, list[tuple[str, str]]] = {}
    for layer in amd.layers:
        for key, value in layer.env.items():
            seen.setdefault(key, []).append((layer.name, value))
    env: dict[str, str] = {}
    for key, value in amd.env.items():
        source = amd.env_sources.get(key, "recipe")
        if key in DEVICE_ENV and value.strip() == "":
            reasons.append(Reason(key, source, "dropped: an empty value hides every GPU"))
            continue
        env[key] = value
        explained = why.get(key) if source.startswith("gpu ") else None
        reasons.append(Reason(f"{key}={value}", source, explained or f"set by the {source}"))
        values = seen.get(key, [])
        if len({v for _s, v in values}) > 1:
            conflicts.append(
                {
                    "env": key,
                    "values": [{"source": s, "value": v} for s, v in values],
                    "winner": {"source": source, "value": value},
                }
            )
    return env


def build_plan(inp: PlanInputs) -> LaunchPlan:
    """Decide every flag. Raises ``InstinctError`` for plans that must not launch."""
    opts, amd, fit = inp.options, inp.amd, inp.fit
    reasons: list[Reason] = []
    warnings = list(inp.warnings)
    conflicts: list[dict[str, Any]] = []
    gpu_count = inp.inventory.gpu_count

    _refuse(inp)
    if inp.tp is None:
        raise InstinctError("the plan has no TP decision", id="internal_plan_error")
    tp, tp_why = inp.tp.tp, inp.tp.why
    _guard_fit(inp)

    for refusal in inp.refusals:  # only here with --force
        warnings.append(f"--force: launching although {refusal.message}")
        reasons.append(Reason(f"forced past {refusal.id}", refusal.source, refusal.message))
    # --- hardware and docker flags
    reasons.append(Reason("model", inp.match.kind, inp.match.explanation))
    reasons.append(Reason("variant", "planner", inp.variant.reason))
    docker_flags: list[str] = []
    for flag, why in inp.docker_flags:
        docker_flags.append(flag)
        reasons.append(Reason(flag, "gpu_overrides.docker_flags", why))

    # --- environment
    env = _env_with_conflicts(amd, reasons, conflicts, inp.env_reasons)
    for key, value in opts.extra_env.items():
        if key in env and env[key] != value:
            conflicts.append(
                {
                    "env": key,
                    "values": [
                        {"source": amd.env_sources.get(key, "recipe"), "value": env[key]},
                        {"source": "--env", "value": value},
                    ],
                    "winner": {"source": "--env", "value": value},
                }
            )
        env[key] = value
        reasons.append(Reason(f"{key}={value}", "--env", "given by you"))
    gpu_indices = None
    if opts.gpus is not None:
        gpu_indices = list(opts.gpus)
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
        reasons.append(
            Reason(
                f"HIP_VISIBLE_DEVICES={env['HIP_VISIBLE_DEVICES']}",
                "--gpus",
                "restricts vLLM to these GPUs (HIP_VISIBLE_DEVICES only: vLLM is deprecating "
                "CUDA_VISIBLE_DEVICES on ROCm)",
            )
        )
        for other in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
            if other in env:
                env.pop(other)
                reasons.append(Reason(other, "--gpus", "dropped: HIP_VISIBLE_DEVICES decides"))
    partitions = None
    if inp.partitions is not None:
        partitions = endpoints(inp.partitions, tp)
        first_set = partitions["replica_gpus"][0] if partitions["replica_gpus"] else None
        if inp.partitions.partitioned and tp > 1 and gpu_indices is None and first_set:
            gpu_indices = list(first_set)
            env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
            reasons.append(
                Reason(
                    f"HIP_VISIBLE_DEVICES={env['HIP_VISIBLE_DEVICES']}",
                    "partitions",
                    "the TP group on the partitions of one GPU (or whole GPUs), never a GPU "
                    "split between groups",
                )
            )
        spanning = spanning_warning(inp.partitions, tp)
        if spanning:
            warnings.append(spanning)
    secrets = ["HF_TOKEN"]  # vLLM and huggingface_hub read it; the value stays outside
    reasons.append(
        Reason(
            "--env HF_TOKEN",
            "planner",
            "passed by name: docker copies it from your environment, so the "
            "token never appears in the command line or in this output",
        )
    )
    for key in opts.env_by_name:
        if key in env:
            env.pop(key)
            reasons.append(Reason(key, "--env", "passed by name: your value replaces this one"))
        if key not in secrets:
            secrets.append(key)
            reasons.append(
                Reason(
                    f"--env {key}",
                    "--env",
                    "passed by name: its value is taken from your environment at launch and "
                    "never written in the plan, an argument or a label",
                )
            )
    api_key = _api_key(opts, secrets, reasons)

    _check_env(env)

    # --- vLLM arguments
    merge = ArgMerge()
    for layer in amd.layers:
        if layer.args:
            merge.add(layer.args, layer.name)
    # our gfx model overrides may remove args: honour the merged result
    final_amd = {name for name, _t in arg_units(list(amd.args)) if name}
    for name in list(merge.units):
        if name not in final_amd:
            merge.remove(name)
    for name in merge.order:
        reasons.append(
            Reason(
                " ".join(merge.units[name][0]),
                merge.units[name][1],
                "from the recipe / AMD configuration",
            )
        )
    if merge.has("--tool-call-parser") and not merge.has("--enable-auto-tool-choice"):
        merge.add(["--enable-auto-tool-choice"], "planner")
        reasons.append(
            Reason(
                "--enable-auto-tool-choice",
                "planner",
                "a tool-call parser is set; let the model decide when to call "
                "tools (OpenAI tool_choice=auto)",
            )
        )

    if tp > 1 or merge.has("--tensor-parallel-size"):
        merge.add(["--tensor-parallel-size", str(tp)], "planner (fit)")
        reasons.append(Reason(f"--tensor-parallel-size {tp}", "planner", tp_why))
    if inp.tp.need_why:
        reasons.append(Reason("tp minimum", "fit", inp.tp.need_why))
    for skipped in inp.tp.skipped:
        reasons.append(Reason("tp constraint", "kernels", skipped))
    if tp > 1 and inp.is_moe and not merge.has("--distributed-executor-backend"):
        merge.add(["--distributed-executor-backend", "mp"], "planner")
        reasons.append(
            Reason(
                "--distributed-executor-backend mp",
                "planner",
                "MoE across several GPUs: multiprocessing workers (no Ray needed on one node)",
            )
        )

    max_len: int | None = None
    context_limited = False
    if opts.max_model_len is not None:
        max_len = opts.max_model_len
        merge.add(["--max-model-len", str(max_len)], "--max-model-len")
        reasons.append(Reason(f"--max-model-len {max_len}", "--max-model-len", "given by you"))
    elif fit is not None and fit.context_limited:
        max_len = fit.recommended_max_model_len
        context_limited = True
        merge.add(["--max-model-len", str(max_len)], "planner (fit)")
        gain = ""
        fp8_len = fit.max_seq_len_fp8_kv
        if fp8_len > max_len and not merge.has("--kv-cache-dtype") and not opts.kv_cache_dtype:
            gain = (
                "; --kv-cache-dtype fp8 would fit the full context"
                if fp8_len >= fit.native_max_model_len
                else f"; --kv-cache-dtype fp8 would hold {fp8_len} ({fp8_len / max_len:.1f}x)"
            )
        warnings.append(
            f"context limited to {max_len} of {fit.native_max_model_len} tokens by the KV "
            f"cache room{gain}"
        )
        reasons.append(
            Reason(
                f"--max-model-len {max_len}",
                "fit",
                f"the KV cache room holds {max_len} tokens, less than the "
                f"model's {fit.native_max_model_len}{gain}",
            )
        )
        if not merge.has("--gpu-memory-utilization") and opts.gpu_memory_utilization is None:
            util = f"{fit.gpu_memory_utilization:g}"
            merge.add(["--gpu-memory-utilization", util], "planner (fit)")
            reasons.append(
                Reason(
                    f"--gpu-memory-utilization {util}",
                    "fit",
                    "the context limit was sized at this utilization; pinning it keeps vLLM "
                    "and the estimate in agreement whatever the image's default",
                )
            )
    elif merge.has("--max-model-len"):
        recipe_len = merge.value("--max-model-len") or ""
        max_len = int(recipe_len) if recipe_len.isdigit() else None
    if opts.kv_cache_dtype:
        merge.add(["--kv-cache-dtype", opts.kv_cache_dtype], "--kv-cache-dtype")
        reasons.append(
            Reason(f"--kv-cache-dtype {opts.kv_cache_dtype}", "--kv-cache-dtype", "given by you")
        )
    if opts.gpu_memory_utilization is not None:
        merge.add(
            ["--gpu-memory-utilization", f"{opts.gpu_memory_utilization:g}"],
            "--gpu-memory-utilization",
        )
        reasons.append(
            Reason(
                f"--gpu-memory-utilization {opts.gpu_memory_utilization:g}",
                "--gpu-memory-utilization",
                "given by you",
            )
        )
    merge.add(["--port", str(opts.port)], "planner")
    reasons.append(
        Reason(
            f"--port {opts.port}",
            "planner",
            "the server's port inside the container, published as the same port on the host",
        )
    )
    if opts.extra_args:
        merge.add(opts.extra_args, "arguments after --")
        reasons.append(Reason(" ".join(opts.extra_args), "arguments after --", "given by you"))
    _check_args(merge, opts)
    # The plan's figure is what will run: a recipe's or an after-`--` --max-model-len counts.
    merged_len = token_count(merge.value("--max-model-len") or "")
    if merged_len is not None:
        max_len = merged_len
    native = fit.native_max_model_len if fit else None
    if max_len and native and max_len > native and env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1":
        warnings.append(
            f"--max-model-len {max_len} exceeds the model's {native} tokens "
            f"({fit.native_source if fit else 'config'}): vLLM refuses to start unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (--env), and positions past it are untrained "
            f"unless RoPE scaling is configured; use {native} or less"
        )
    conflicts.extend(merge.conflicts())
    for conflict in merge.conflicts():
        warnings.append(
            f"{conflict['flag']} set to different values; {conflict['winner']['source']} wins "
            f"({conflict['winner']['value']})"
        )

    # --- image, mounts, names
    reasons.append(Reason(inp.image, "image", inp.image_reason))
    if inp.image_problem:
        warnings.append(
            f"{inp.image_problem} (the symptom is 'Engine core initialization failed' at startup)"
        )
    mounts = [inp.hf_mount] if inp.hf_mount is not None else []
    if inp.hf_mount is not None:
        reasons.append(Reason(f"-v {inp.hf_mount.docker_arg()}", "hf cache", inp.hf_mount_reason))
    for key in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        if env.get(key, None) == "":
            env.pop(key)
    if fit is None and inp.fit_problem:
        basis = f"; TP {tp} rests on an estimate ({inp.tp.need_why})" if inp.tp.need_why else ""
        warnings.append(
            f"no exact size for the model: {inp.fit_problem}{basis}; the context limit is the "
            "model's own, unchecked against the KV room"
        )
    if fit is not None and fit.verdict == "tight":
        warnings.append(
            "memory is tight: if graph capture runs out of memory, serve relaunches once with "
            "--enforce-eager"
        )
    warnings.extend(amd.warnings)

    name = opts.name or container_name(inp.variant.model_id, opts.port)
    first = inp.inventory.gpus[0] if inp.inventory.gpus else None
    plan = LaunchPlan(
        model=inp.variant.model_id,
        requested_model=opts.model,
        image=inp.image,
        container_name=name,
        port=opts.port,
        engine=opts.engine,
        docker_flags=docker_flags,
        mounts=mounts,
        env=env,
        secret_env=secrets,
        vllm_args=merge.argv(),
        tensor_parallel_size=tp,
        max_model_len=max_len,
        precision=inp.variant.precision,
        variant=inp.variant.key,
        gpu_indices=gpu_indices,
        gpu_count=gpu_count,
        match_kind=inp.match.kind,
        match_explanation=inp.match.explanation,
        gfx_version=inp.inventory.gfx_version,
        gpu_name=(first.market_name or first.name) if first else "",
        vram_gb_per_gpu=round(inp.inventory.vram_bytes / 1e9, 2)
        if inp.inventory.vram_bytes
        else None,
        weight_memory_gb=round(fit.weights.loaded_bytes / 1e9, 2) if fit else None,
        native_max_model_len=fit.native_max_model_len if fit else amd.context_length,
        context_limited=context_limited,
        verdict=fit.verdict if fit else None,
        reasons=reasons,
        warnings=_unique(warnings),
        conflicts=conflicts,
        fit=FitSummary.of(fit) if fit else None,
        recipe_cross_check=inp.cross_check,
        partitions=partitions,
        public=opts.public,
        api_key=api_key,
    )
    decide_group(
        plan,
        GroupInputs(
            options=opts,
            gpu_count=gpu_count,
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
    return plan


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _api_key(opts: PlanOptions, secrets: list[str], reasons: list[Reason]) -> str | None:
    """Where the endpoint's API key comes from, if it has one (``LaunchPlan.api_key``)."""
    if API_KEY_ENV in opts.env_by_name:
        reasons.append(
            Reason(
                f"--env {API_KEY_ENV}",
                "--env",
                "vLLM requires this key (Authorization: Bearer) on /v1/*; serve's own probes "
                "send it too",
            )
        )
        return "environment"
    if not opts.public:
        return None
    secrets.append(API_KEY_ENV)
    reasons.append(
        Reason(
            f"--env {API_KEY_ENV}",
            "--public",
            "an endpoint open to the network needs a key: serve generates one, keeps it in a "
            "file only you can read on the host, and passes it by name",
        )
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


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _refuse(inp: PlanInputs) -> None:
    """Stop a plan that cannot run here (``plan.refusals``), unless ``--force``."""
    if not inp.refusals:
        return
    if not inp.options.force:
        first = inp.refusals[0]
        raise InstinctError(
            first.message,
            fix=first.fix + " (or --force to launch anyway)",
            id=first.id,
            details={
                "source": first.source,
                "refusals": [
                    {"id": r.id, "message": r.message, "fix": r.fix, "source": r.source}
                    for r in inp.refusals
                ],
                **(first.details or {}),
            },
        )


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
