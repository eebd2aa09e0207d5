"""``instinct plan``: the exact launch command for a model, and why each piece is there.

The plan options are one decorator (``plan_options``) so ``serve`` and the MCP server take
exactly the same options; ``plan_options_from_kwargs`` turns them into ``PlanOptions``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from instinct_serve.cli.common import TokenCount, emit, get_host, host_option, warn

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.plan.assemble import PlanResult
    from instinct_serve.plan.planner import PlanOptions

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_MODEL = "Qwen/Qwen3.5-9B"  # same as plan.planner.DEFAULT_MODEL (kept import-free)
FORMATS = ("summary", "json", "docker", "shell", "native", "compose", "k8s")


def _parse_gpus(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip() != ""]
    except ValueError:
        raise click.BadParameter("use device indices such as 0,1") from None


def _parse_env(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in value:
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: use NAME=VALUE")
        env[key] = val
    return env


def plan_options(func: F) -> F:
    """Every option that shapes a plan (shared by plan, serve and the MCP server)."""
    options = [
        click.argument("model", required=False, default=None),
        click.argument("extra_args", nargs=-1, type=click.UNPROCESSED),
        click.option(
            "--gpu",
            metavar="PROFILE|GFX",
            help="Plan for a GPU without detecting it: mi300x, mi325x, mi300a, "
            "mi350x, mi355x, mi250x, mi210 (or a gfx target).",
        ),
        click.option("--gfx", metavar="GFX", help="GPU architecture (gfx942, gfx950, gfx90a)."),
        click.option("--vram-gb", type=float, help="VRAM per GPU in GB (10^9 bytes)."),
        click.option("--gpu-count", type=click.IntRange(min=1), help="Number of GPUs."),
        click.option(
            "--gpus",
            callback=_parse_gpus,
            metavar="0,1",
            help="Use only these GPUs (sets HIP_VISIBLE_DEVICES).",
        ),
        click.option(
            "--tp",
            type=click.IntRange(min=1),
            help="Tensor-parallel size (default: the smallest that fits).",
        ),
        click.option(
            "--port",
            type=click.IntRange(1, 65535),
            default=8000,
            show_default=True,
            help="Port of the endpoint.",
        ),
        click.option("--image", help="Container image (default: newest vllm/vllm-openai-rocm)."),
        click.option("--precision", help="Force a variant's precision (bf16, fp8, mxfp4, ...)."),
        click.option(
            "--feature",
            "features",
            multiple=True,
            metavar="NAME",
            help="Enable an opt-in recipe feature (repeatable).",
        ),
        click.option(
            "--max-model-len",
            type=TokenCount(),
            help="Context length, e.g. 32768 or 32k (default: the model's, capped by KV room).",
        ),
        click.option(
            "--kv-cache-dtype",
            type=click.Choice(["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"]),
            help="KV cache dtype (fp8 halves KV memory).",
        ),
        click.option(
            "--gpu-memory-utilization",
            type=float,
            help="Fraction of each GPU's memory vLLM may use, in (0, 1].",
        ),
        click.option(
            "--hf-cache",
            metavar="DIR",
            help="Hugging Face cache to mount (default: HF_HUB_CACHE, HF_HOME or "
            "~/.cache/huggingface).",
        ),
        click.option(
            "--env",
            "extra_env",
            multiple=True,
            callback=_parse_env,
            metavar="NAME=VALUE",
            help="Extra environment variable (repeatable).",
        ),
        click.option("--name", help="Container name (default: vllm-<model>)."),
        click.option("--force", is_flag=True, help="Launch even when memory is too tight."),
        host_option,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def plan_options_from_kwargs(kwargs: dict[str, Any], *, engine: str = "docker") -> PlanOptions:
    """``PlanOptions`` from the click keyword arguments of ``plan_options``."""
    from instinct_serve.plan.planner import PlanOptions

    model = kwargs.get("model")
    extra = list(kwargs.get("extra_args") or ())
    if model and model.startswith("-"):  # `instinct plan -- --flag`: no model given
        extra.insert(0, model)
        model = None
    return PlanOptions(
        model=model or DEFAULT_MODEL,
        gpu=kwargs.get("gpu"),
        gfx=kwargs.get("gfx"),
        vram_gb=kwargs.get("vram_gb"),
        gpu_count=kwargs.get("gpu_count"),
        gpus=kwargs.get("gpus"),
        tp=kwargs.get("tp"),
        port=kwargs.get("port") or 8000,
        image=kwargs.get("image"),
        precision=kwargs.get("precision"),
        features=list(kwargs.get("features") or ()) or None,
        max_model_len=kwargs.get("max_model_len"),
        kv_cache_dtype=kwargs.get("kv_cache_dtype"),
        gpu_memory_utilization=kwargs.get("gpu_memory_utilization"),
        hf_cache=kwargs.get("hf_cache"),
        force=bool(kwargs.get("force")),
        engine=engine,
        name=kwargs.get("name"),
        extra_args=extra,
        extra_env=dict(kwargs.get("extra_env") or {}),
    )


def summary_rows(result: PlanResult) -> list[tuple[str, str]]:
    """The table a user approves before launch (also used by ``serve``)."""
    plan = result.plan
    fit = plan.fit or {}
    rows = [
        (
            "Model",
            plan.model
            + (f"  (asked: {plan.requested_model})" if plan.requested_model != plan.model else ""),
        )
    ]
    rows.append(("Match", f"{plan.match_kind}: {plan.match_explanation}"))
    variant_reason = next((r.why for r in plan.reasons if r.item == "variant"), "")
    rows.append(("Precision", f"{plan.precision or 'as stored'} - {variant_reason}"))
    if plan.weight_memory_gb is not None:
        per_gpu = fit.get("weight_memory_per_gpu_gib")
        rows.append(
            (
                "Weights",
                f"{plan.weight_memory_gb:.1f} GB"
                + (f" ({per_gpu:.1f} GiB per GPU)" if per_gpu is not None else ""),
            )
        )
    vram = (
        f"{plan.vram_gb_per_gpu * 1e9 / 2**30:.0f} GiB = {plan.vram_gb_per_gpu:.0f} GB"
        if plan.vram_gb_per_gpu
        else "unknown VRAM"
    )
    rows.append(
        (
            "GPUs",
            f"{plan.gpu_count}x {plan.gpu_name or 'GPU'} ({plan.gfx_version}, "
            f"{vram} each; {result.hardware_source})",
        )
    )
    rows.append(("Tensor parallel", str(plan.tensor_parallel_size)))
    if plan.max_model_len:
        ctx = f"{plan.max_model_len:,} tokens"
        if plan.context_limited:
            ctx += f" (limited by KV room; model max {plan.native_max_model_len:,})"
    elif plan.native_max_model_len:
        ctx = f"{plan.native_max_model_len:,} tokens (the model's full context)"
    else:
        ctx = "the model's default"
    rows.append(("Max context", ctx))
    if plan.verdict:
        rows.append(("Fit", f"{plan.verdict}: {fit.get('verdict_reason', '')}"))
    rows.append(("Port", f"{plan.port}  (http://localhost:{plan.port}/v1)"))
    rows.append(("Image", plan.image))
    rows.append(("Container", plan.container_name))
    return rows


def print_summary(con: Console, result: PlanResult, title: str = "Launch plan") -> None:
    from rich.table import Table

    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in summary_rows(result):
        table.add_row(key, value)
    con.print(table)
    for message in result.plan.warnings:
        con.print(f"[yellow]![/] {message}")


def make_plan_from_cli(
    kwargs: dict[str, Any], *, engine: str = "docker", fallback_gpu: bool = False
) -> PlanResult:
    """Shared by ``plan`` and ``serve``: options → host → plan."""
    from instinct_serve.plan.assemble import make_plan

    opts = plan_options_from_kwargs(kwargs, engine=engine)
    host = get_host(kwargs.get("host_spec"))
    if fallback_gpu and host.is_local:
        opts.default_gpu = "mi300x"
    return make_plan(opts, host)


@click.command("plan")
@plan_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="summary",
    show_default=True,
    help="What to print.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def plan(fmt: str, as_json: bool, **kwargs: Any) -> int:
    """Print the exact launch command for MODEL (default: Qwen/Qwen3.5-9B).

    \b
    Without --gpu, the GPUs of the host (or --host) are detected; on a machine with no AMD
    GPU the plan is made for an MI300X profile. Arguments after `--` are passed to
    `vllm serve` as they are, e.g.:  instinct plan MODEL -- --max-num-seqs 64
    \b
    Formats: summary (default: the table and a shell line), json, docker (argv, one per
    line), shell, native (`vllm serve` with exports), compose, k8s (Deployment + Service).
    """
    from instinct_serve.plan.render import render, shell_line

    fmt = "json" if as_json else fmt
    result = make_plan_from_cli(
        kwargs, engine="native" if fmt == "native" else "docker", fallback_gpu=True
    )
    if fmt == "json":
        emit(result, True)
        return 0
    if fmt != "summary":
        for message in result.plan.warnings:
            warn(message)
        sys.stdout.write(render(result.plan, fmt))
        return 0

    def human(con: Console) -> None:
        print_summary(con, result)
        con.print()
        con.print("[bold]Command[/] (instinct plan --format docker|native|compose|k8s for more):")
        con.print(shell_line(result.plan), markup=False, soft_wrap=True)

    emit(result, False, human)
    return 0
