"""SGLang plans: which server a plan launches (``--server vllm|sglang|auto``), and the
SGLang planner vocabulary, written from AMD's own SGLang reference config.

Pure. ``choose_server`` decides the server: ``auto`` follows AMD's reference configs for
the model and GPU (a vLLM config keeps vLLM; an SGLang config, and none on vLLM, gives
SGLang unless the validated-stack table refuses its launch); anything else is what was
asked for. ``follow`` is the planner's SGLang step: the config's environment and literal
flags exactly as its launch script sets them, TP/EP/DP as its search-space row runs them
(``--tensor-parallel-size``, ``--ep-size``, ``--dp-size`` with ``--enable-dp-attention``),
then your options in SGLang's words and your arguments after ``--``. An SGLang plan has
no recipe layer: AMD's config is its whole configuration, and its image is the config's
(``lmsysorg/sglang:*-rocm*-mi30x`` / ``-mi35x``, the build for the GPU family).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from instinct_serve import vllm_args
from instinct_serve.catalog.reference import SGLANG, VLLM
from instinct_serve.errors import UsageError

if TYPE_CHECKING:
    from instinct_serve.catalog.reference import ReferenceConfig, References
    from instinct_serve.fit.estimate import FitReport
    from instinct_serve.options import PlanOptions
    from instinct_serve.plan.builder import PlanBuilder
    from instinct_serve.plan.decisions import TpDecision
    from instinct_serve.plan.reference import ReferenceChoice

AUTO = "auto"
# Your options in SGLang's words (``sglang/srt/server_args.py``): vLLM's name -> SGLang's.
OPTION_FLAGS = {
    "max_model_len": "--context-length",
    "gpu_memory_utilization": "--mem-fraction-static",
    "kv_cache_dtype": "--kv-cache-dtype",
}


# What a launch script's condition on a variable is, where the plan can say it.
CONDITIONS = {
    "HSA_NO_SCRATCH_RECLAIM": " (a MEC firmware older than 177, which cannot reclaim scratch "
    "memory: `rocm-smi --showfw`)",
}


@dataclass(frozen=True)
class ServerChoice:
    """The server a plan launches, and why (the plan's ``server`` reason)."""

    name: str
    why: str
    source: str  # "--server" or "AMD reference ..."
    said: bool = True  # a reason of the plan; a vLLM plan as every plan was before says none

    @property
    def stated(self) -> bool:
        return self.said and bool(self.why)


def choose_server(
    requested: str,
    refs: References,
    models: tuple[str, ...],
    gpu: str | None,
    *,
    refused: str | None = None,
    on_cpu: bool = False,
    wanted: tuple[str | None, str] = (None, ""),
    nodes: int = 1,
) -> ServerChoice:
    """The server for ``requested`` (``auto``, ``vllm``, ``sglang`` or a registered one).
    ``models``: the checkpoint served, then the one named; ``refused``: why the
    validated-stack table refuses the SGLang config's launch here (``auto`` keeps vLLM);
    ``wanted``: the speculative method and AMD scenario asked for (``plan.reference.wanted``)."""
    if requested == SGLANG and nodes > 1:
        raise UsageError(
            "SGLang across nodes is not planned yet (its --nnodes, --node-rank and "
            "--dist-init-addr): instinct plans SGLang on one node, as AMD's single-node configs "
            "run it",
            fix="use --server vllm to span nodes, or one node's GPUs for SGLang",
            id="bad_server",
            details={"server": SGLANG, "option": "hosts"},
        )
    if requested != AUTO:
        return ServerChoice(requested, "asked for with --server", "--server", requested != VLLM)
    if nodes > 1:
        return ServerChoice(VLLM, "auto: a plan across nodes is vLLM's", "--server auto", False)
    if on_cpu or gpu is None:
        return ServerChoice(VLLM, "auto: a CPU plan is vLLM's CPU backend", "--server auto", False)
    for model in dict.fromkeys(models):
        vllm = refs.followed(model, gpu, *wanted)
        if vllm is not None:
            return ServerChoice(
                VLLM,
                f"auto: AMD's reference config {vllm.name} runs {model} on {gpu.upper()} with vLLM",
                f"AMD reference {vllm.name}",
                said=refs.followed(model, gpu, *wanted, framework=SGLANG) is not None,
            )
        sglang = refs.followed(model, gpu, *wanted, framework=SGLANG)
        if sglang is not None and refused:
            return ServerChoice(
                VLLM,
                f"auto: AMD's reference config {sglang.name} runs SGLang, but {refused}; "
                "vLLM instead",
                "validated stacks",
            )
        if sglang is not None:
            return ServerChoice(
                SGLANG,
                f"auto: AMD's reference config {sglang.name} runs {model} on {gpu.upper()} with "
                f"SGLang ({sglang.precision}, {sglang.image}), and AMD publishes no vLLM config "
                "for it",
                f"AMD reference {sglang.name}",
            )
    return ServerChoice(
        VLLM,
        f"auto: AMD publishes no reference config for this model on {gpu.upper()}; vLLM, the "
        "default",
        "--server auto",
        said=False,
    )


def require_config(
    choice: ReferenceChoice | None,
    model: str,
    gpu: str | None,
    baseline: ReferenceConfig | None,
    gpus: tuple[str, ...] = (),
) -> ReferenceChoice:
    """What an SGLang plan follows: AMD's SGLang config for the model, else (``baseline``)
    SGLang's own defaults on the newest image AMD runs SGLang with on this GPU. Refused
    (``bad_server``) where AMD runs SGLang on no config of this GPU (``gpus``: those it
    does): there is no ROCm build of SGLang for it to take."""
    from instinct_serve.plan.reference import ReferenceChoice

    if choice is not None and choice.config is not None:
        return choice
    if baseline is None or gpu is None:
        where = gpu.upper() if gpu else "this target"
        raise UsageError(
            f"no SGLang build for {where}: AMD runs SGLang (its lmsysorg/sglang ROCm images) "
            f"on {', '.join(g.upper() for g in gpus) or 'no GPU'} only, and instinct plans "
            "SGLang from those",
            fix="use --server vllm (or auto)",
            id="bad_server",
            details={"server": SGLANG, "model": model, "gpu": gpu},
        )
    others = choice.others if choice is not None else []
    return ReferenceChoice(gpu=gpu, others=others, baseline=baseline)


def refuse_public(opts: PlanOptions) -> None:
    """An SGLang endpoint open to the network is refused: SGLang reads its API key only from
    ``--api-key``, which would put the key in the process arguments."""
    if opts.public:
        raise UsageError(
            "--public is not offered for SGLang: SGLang takes its API key only as --api-key, "
            "which would show the key in the process list",
            fix="serve SGLang on 127.0.0.1 (without --public) behind your own proxy, or use "
            "--server vllm",
            id="bad_server",
            details={"server": SGLANG, "option": "public"},
        )


def follow(
    b: PlanBuilder, choice: ReferenceChoice | None, opts: PlanOptions, tp: TpDecision
) -> None:
    """The SGLang planner step: the config's env and flags, its parallelism, your options,
    the port and your arguments after ``--`` (each later one wins). ``choice`` is None only
    on a CPU (no AMD config applies there: ``plan.cpu.on_cpu``); without a config of its own
    it names the ``baseline`` whose image the plan takes (``_defaults``)."""
    if choice is not None and choice.config is not None:
        _from_config(b, choice, opts)
    else:
        if choice is not None:
            _defaults(b, choice)
        _your_env(b, opts)
    _parallelism(b, choice, tp)
    _yours(b, opts)
    if choice is not None and choice.config is not None:
        for name in choice.config.varies:
            b.reason(name, choice.source, "set per benchmark run by the script: not followed")


def _from_config(b: PlanBuilder, choice: ReferenceChoice, opts: PlanOptions) -> None:
    """AMD's config's environment (yours wins) and literal flags."""
    config = choice.config
    assert config is not None  # follow checked
    why = f"from AMD's reference config {config.name} ({config.script or config.file})"
    yours = {*opts.env_literal, *opts.env_by_name, *opts.extra_env}
    for key, value in config.env.items():
        if key not in yours:
            b.set_env(key, value, choice.source, why)
    for key, value in config.conditional_env.items():
        if key not in yours and key not in config.env:
            b.reason(
                f"{key}={value}",
                choice.source,
                f"the launch script ({config.script}) sets it only under a condition it tests "
                f"on the host or per run{CONDITIONS.get(key, '')}; not set: give --env-literal "
                f"{key}={value} where the condition holds",
            )
    _your_env(b, opts)
    if not config.script:
        b.warn(
            f"AMD's reference config {config.name} names no launch script in the snapshot: "
            "its environment and flags are not known, only its TP and image"
        )
    for unit in vllm_args.units(config.args):
        if unit.name is not None:
            b.flag(unit.tokens, choice.source, why)


def _defaults(b: PlanBuilder, choice: ReferenceChoice) -> None:
    """A model AMD runs no SGLang config of (``--server sglang``): SGLang's own defaults for
    everything but the TP, on the image of ``choice.baseline``. Said as a warning: nobody has
    benchmarked this launch."""
    baseline = choice.baseline
    assert baseline is not None  # require_config gave one
    b.warn(
        f"AMD publishes no SGLang config for this model on {choice.gpu.upper()}: planned with "
        f"SGLang's own defaults on the image AMD's newest SGLang config runs ({baseline.name}); "
        "no AMD setting (AITER, the attention backend, the KV cache dtype) is assumed. "
        "`--server vllm` plans from the vLLM recipe instead"
    )


def _your_env(b: PlanBuilder, opts: PlanOptions) -> None:
    for key, value in opts.env_literal.items():
        b.override_env(key, value, "--env-literal", "given by you, not secret: written as is")


def _yours(b: PlanBuilder, opts: PlanOptions) -> None:
    """Your options in SGLang's words, the port, the metrics switch, your arguments."""
    for option, flag in OPTION_FLAGS.items():
        value = getattr(opts, option)
        if value is not None and value != "":
            b.flag(
                [flag, f"{value:g}" if isinstance(value, float) else str(value)],
                f"--{option.replace('_', '-')}",
                "given by you",
            )
    b.flag(
        ["--port", str(opts.port)],
        "planner",
        "the server's port inside the container, published as the same port on the host",
    )
    b.flag(
        ["--enable-metrics"],
        "planner",
        "SGLang serves /metrics (the sglang: families instinct top reads) only when asked",
    )
    if opts.extra_args:
        b.flag(list(opts.extra_args), "arguments after --", "given by you")


def _parallelism(b: PlanBuilder, choice: ReferenceChoice | None, tp: TpDecision) -> None:
    """TP as decided (the row's unless ``--tp``), EP and DP-attention as the row runs them."""
    b.flag(["--tensor-parallel-size", str(tp.tp)], "planner", tp.why, setter="planner (fit)")
    row = choice.row if choice is not None else None
    if choice is None or row is None or row.tp != tp.tp:
        return
    why = f"AMD's reference config {choice.config.name if choice.config else ''}: {row.label()}"
    if row.ep > 1:
        b.flag(["--ep-size", str(row.ep)], choice.source, why)
    if row.dp_attn:
        b.flag(["--dp-size", str(row.tp), "--enable-dp-attention"], choice.source, why)


def memory(b: PlanBuilder, fit: FitReport | None) -> FitReport | None:
    """An SGLang plan's fit figures as SGLang sizes them (``fit.sglang``): the planned
    flags (``launch_from_args``: ``--mem-fraction-static``, else SGLang's default for the GPU
    and TP, ``--kv-cache-dtype``, ``--chunked-prefill-size``, ...), its KV pool and
    ``max_total_num_tokens``, as a reason; the report returned carries them."""
    if fit is None:
        return None
    from instinct_serve.fit.sglang import from_report, launch_from_args

    mem = from_report(fit, launch_from_args(b.args.argv()))
    pool = max(0, mem.kv_pool_bytes) / 2**30
    b.reason(
        "KV pool",
        "fit (SGLang)",
        f"{mem.max_total_num_tokens:,} tokens ({pool:.1f} GiB per GPU) at "
        f"--mem-fraction-static {mem.mem_fraction_static:g}: SGLang's pool is the free memory "
        f"before loading x the fraction - the weights ({mem.weights_bytes / 2**30:.1f} GiB)"
        + ("; " + "; ".join(mem.notes) if mem.notes else ""),
    )
    return replace(fit, sglang=mem)
