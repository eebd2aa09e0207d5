"""``instinct fit MODEL``: will it fit, with how much context, on how many GPUs?

Options are ``options.FitRequest``'s; the GPUs come from ``hardware.target`` (a profile,
VRAM and count by hand, else what ``detect`` finds on ``--host``). The launch follows the catalog
(recipe context length, AMD flags such as ``--gpu-memory-utilization``, the image's vLLM
version) unless a flag here says otherwise. The full report is printed even when the
model does not fit; the exit status is then 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from instinct_serve.cli.common import emit, get_host, host_option, json_option, progress, warn
from instinct_serve.cli.options import options_for, parse_cli
from instinct_serve.errors import ExitCode
from instinct_serve.options import FitRequest

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.fit.alternatives import Alternative
    from instinct_serve.fit.catalog_link import FitAnswer
    from instinct_serve.fit.estimate import FitReport
    from instinct_serve.fit.estimated import EstimatedFit
    from instinct_serve.fit.sglang_answer import SglangFit


@click.command("fit")
@options_for(FitRequest)
@json_option
@host_option
def fit(as_json: bool, host_spec: str | None, **kwargs: Any) -> int:
    """Will MODEL fit? Weights, KV cache per token, context and GPUs needed.

    MODEL is a Hugging Face id (org/name) or a local model directory. Weights come from
    safetensors metadata (local headers, the HF cache, the Hub, or metadata shipped for
    common models), never from downloading them; the KV cache follows vLLM's own specs
    per attention kind. Without --gpu, the GPUs of the host (or --host) are detected; on a
    machine with no AMD GPU the fit is for an MI300X node. Exit status 1 when it does not
    fit.
    """
    from instinct_serve.gather.fit import fit_request

    req = parse_cli(FitRequest, kwargs)
    answer, notes = fit_request(
        req,
        get_host(host_spec),
        stage=lambda text: progress(text, enabled=not as_json),
    )
    for note in notes:
        warn(note, as_json)
    emit(answer.to_dict(), as_json, lambda con: _view(con, answer))
    return int(ExitCode.FAILED if answer.failed else ExitCode.OK)


def _view(con: Console, answer: FitAnswer) -> None:
    """The human view of the answer fit gives: vLLM's report, a server's own, an estimate."""
    from instinct_serve.fit.estimate import FitReport
    from instinct_serve.fit.estimated import EstimatedFit
    from instinct_serve.fit.sglang_answer import SglangFit

    done = answer.answer
    if isinstance(done, FitReport):
        render(con, done, answer.alternatives)
    elif isinstance(done, SglangFit):
        render_sglang(con, done)
        if answer.alternatives:
            _print_alternatives(con, answer.alternatives)
    elif isinstance(done, EstimatedFit):
        render_estimated(con, done)


# -- human view --------------------------------------------------------------------------

_VERDICT_STYLE = {
    "safe": "bold green",
    "tight": "bold yellow",
    "too_tight": "bold red",
    "needs_tp": "bold cyan",
    "does_not_fit": "bold red",
}


_BASIS_TEXT = {  # fit.meta.SIZE_BASES
    "exact": "exact (read from the weights)",
    "config": "from config.json shapes",
    "estimated": "estimated (parameter count x precision)",
}

_SOURCE_TEXT = {
    "local_dir": "local directory",
    "hf_cache": "Hugging Face cache",
    "hub": "the Hub",
    "hub_cache": "cached Hub answer",
    "shipped": "shipped with instinct-serve",
    "config": "config.json",
}
_WEIGHTS_TEXT = {
    "safetensors_headers": "safetensors headers",
    "hub_safetensors": "the Hub's safetensors counts",
    "index_total_size": "the index total_size",
    "config_shapes": "config tensor shapes",
    "shipped": "shipped per-dtype counts",
}


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def budget_bar(report: FitReport, width: int = 56) -> list[tuple[str, str, int, int]]:
    """Segments (label, style, bytes, cells) of one GPU: weights | overhead | KV | outside.

    Scaled to the GPU's memory, or to the demand when weights and overhead exceed it.
    """
    g = report.per_gpu()
    parts = [
        ("weights", "magenta", g["weights_bytes"]),
        ("overhead", "yellow", g["overhead_bytes"]),
        ("KV cache", "green", g["kv_cache_bytes"]),
        ("outside budget", "bright_black", g["outside_budget_bytes"]),
    ]
    return _segments(parts, g["vram_bytes"], width)


def _segments(
    parts: list[tuple[str, str, int]], vram: int, width: int = 56
) -> list[tuple[str, str, int, int]]:
    total = max(1, vram, sum(n for _, _, n in parts))
    return [
        (label, style, n, max(1, round(width * n / total)) if n > 0 else 0)
        for label, style, n in parts
    ]


def render_estimated(con: Console, rough: EstimatedFit) -> None:
    """An answer with no metadata: the weights estimated from the recipe, said so."""
    from rich.markup import escape

    hw = rough.hardware
    con.print(f"[bold]{escape(rough.model_id)}[/]  [dim]size: {_BASIS_TEXT['estimated']}[/]")
    con.print(
        f"{hw.gpu_count} x {escape(hw.name)} ({_gib(hw.vram_bytes)} each), "
        f"{escape(rough.server_title or 'vLLM ' + rough.vllm_version)}, TP {rough.tp}"
    )
    con.print(
        f"weights   ~{rough.weight_bytes / 1e9:.0f} GB ({rough.parameter_count} x "
        f"{escape(rough.precision)}), ~{_gib(rough.per_gpu_bytes)} per GPU"
    )
    style = _VERDICT_STYLE.get(rough.verdict, "bold")
    con.print(f"[{style}]verdict: {rough.verdict}[/] (estimate) - {escape(rough.verdict_reason)}")
    for note in rough.notes:
        con.print(f"[dim]note: {escape(note)}[/]")


def _print_head(con: Console, report: FitReport) -> None:
    """The model and how its size is known."""
    from rich.markup import escape

    meta = report.meta
    where = _SOURCE_TEXT.get(meta.source, meta.source)
    weights_from = _WEIGHTS_TEXT.get(meta.weights_source, meta.weights_source)
    con.print(
        f"[bold]{escape(report.model_id)}[/]  "
        f"[dim]size: {_BASIS_TEXT[meta.size_basis]}; metadata: {where}; "
        f"weights from {weights_from}[/]"
    )


def render(con: Console, report: FitReport, alts: list[Alternative]) -> None:
    from rich.markup import escape
    from rich.text import Text

    from instinct_serve.cli.tables import Column, Rows

    d = report.to_dict()
    _print_head(con, report)
    con.print(
        f"{report.hardware.gpu_count} x {escape(report.hardware.name)} "
        f"({_gib(report.hardware.vram_bytes)} = {report.hardware.vram_bytes / 1e9:.1f} GB each), "
        f"vLLM {report.vllm.version}, TP {report.tp}"
    )
    table = Rows([Column("", key=True), Column("", prose=True)], header=False)
    w = report.weights
    table.add("attention", escape(report.layers.attention_kind))
    table.add(
        "weights",
        f"{w.loaded_bytes / 1e9:.2f} GB loaded ({_gib(w.loaded_bytes)}), "
        f"{_gib(w.per_rank_bytes)} per GPU",
    )
    table.add(
        "KV cache / token",
        f"{report.kv_cache_bytes_per_token:,} B whole model at bf16 "
        f"({d['kv_cache_bytes_per_token_per_gpu']:,} B per GPU as configured)",
    )
    o = report.overhead
    table.add(
        "overhead / GPU",
        f"{_gib(o.total_bytes)}: activations {_gib(o.activation_bytes)} ({o.method}), "
        f"non-torch {_gib(o.non_torch_bytes)}, graphs {_gib(o.graph_bytes)}",
    )
    table.add(
        "budget / GPU",
        f"{report.gpu_memory_utilization:g} x VRAM = {_gib(report.budget_bytes)}; "
        f"left for KV: {report.remaining_bytes / 1e9:.2f} GB ({_gib(report.remaining_bytes)})",
    )
    context = f"{report.recommended_max_model_len:,} tokens"
    if report.context_limited:
        context += f" (native {report.native_max_model_len:,}: limited by KV room)"
    table.add("max context", context)
    table.add("max context, fp8 KV", f"{report.max_seq_len_fp8_kv:,} tokens")
    table.add(
        "KV cache size",
        f"{report.kv_tokens:,} tokens, {report.max_concurrency:.2f}x concurrency "
        f"(as vLLM {report.vllm.version} logs it)",
    )
    mt = report.min_tp_required
    table.add("min TP", str(mt) if mt else f"none on {report.hardware.gpu_count} GPU(s)")
    table.print(con)
    _print_budget_bar(con, report)
    style = _VERDICT_STYLE.get(report.verdict, "bold")
    con.print(
        Text.assemble(("verdict: ", "bold"), (report.verdict, style), f"  {report.verdict_reason}")
    )
    for note in report.notes:
        con.print(f"[dim]- {escape(note)}[/]")
    if alts:
        _print_alternatives(con, alts)


def _print_budget_bar(con: Console, report: FitReport) -> None:
    _print_bar(con, budget_bar(report), report.remaining_bytes, "budget")


def _print_bar(
    con: Console, segments: list[tuple[str, str, int, int]], left: int, share: str
) -> None:
    """One GPU's memory as a bar of its parts, with a legend (and how far over, if over)."""
    from rich.text import Text

    bar = Text("per GPU ")
    for _label, style, _n, cells in segments:
        bar.append("█" * cells, style=style)
    if left < 0:
        bar.append(f"  {-left / 2**30:.1f} GiB over {share}", style="bold red")
    con.print(bar)
    legend = Text("        ")
    for label, style, n_bytes, _cells in segments:
        legend.append("■ ", style=style)
        legend.append(f"{label} {_gib(n_bytes)}  ")
    con.print(legend)


def render_sglang(con: Console, fit: SglangFit) -> None:
    """``fit --server sglang``: SGLang's own answer (its pool, context and verdict)."""
    from rich.markup import escape
    from rich.text import Text

    from instinct_serve.cli.tables import Column, Rows

    report, mem, hw = fit.report, fit.memory, fit.report.hardware
    _print_head(con, report)
    con.print(
        f"{hw.gpu_count} x {escape(hw.name)} ({_gib(hw.vram_bytes)} = {hw.vram_bytes / 1e9:.1f} "
        f"GB each), {fit.title} {fit.version}, TP {fit.tp}"
    )
    table = Rows([Column("", key=True), Column("", prose=True)], header=False)
    table.add("attention", escape(report.layers.attention_kind))
    table.add(
        "weights",
        f"{report.weights.loaded_bytes / 1e9:.2f} GB loaded ({_gib(report.weights.loaded_bytes)}), "
        f"{_gib(mem.weights_bytes)} per GPU",
    )
    table.add(
        "KV cache / token",
        f"{report.kv_cache_bytes_per_token:,} B whole model at bf16 "
        f"({mem.cell_bytes:,} B per GPU as SGLang launches it)",
    )
    table.add(
        "static fraction",
        f"--mem-fraction-static {mem.mem_fraction_static:g} "
        + ("(given)" if mem.reserved_mib == 0 else f"({escape(mem.fraction_source)})"),
    )
    table.add(
        "KV pool / GPU",
        f"{_gib(max(0, mem.kv_pool_bytes))} = {_gib(mem.pre_load_bytes)} free before loading x "
        f"{mem.mem_fraction_static:g} - weights; outside the static share "
        f"{_gib(mem.slack_bytes)} (activations, graphs)",
    )
    context = f"{fit.max_context:,} tokens"
    if fit.max_total_num_tokens < fit.context_length:
        context += f" (context {fit.context_length:,}: limited by the KV pool)"
    table.add("max context", context + f" [{escape(fit.context_source)}]")
    table.add("max context, fp8 KV", f"{fit.max_seq_len_fp8_kv:,} tokens")
    table.add(
        "KV cache size",
        f"{fit.max_total_num_tokens:,} tokens, "
        f"{fit.max_total_num_tokens / fit.context_length:.2f}x concurrency "
        f"(max_total_num_tokens, as SGLang {fit.version} logs it)",
    )
    mt = fit.min_tp_required
    table.add("min TP", str(mt) if mt else f"none on {hw.gpu_count} GPU(s)")
    table.print(con)
    g = fit.per_gpu()
    parts = [
        ("before loading", "yellow", g["before_loading_bytes"]),
        ("weights", "magenta", g["weights_bytes"]),
        ("KV pool", "green", g["kv_cache_bytes"]),
        ("outside static share", "bright_black", g["outside_static_bytes"]),
    ]
    _print_bar(con, _segments(parts, hw.vram_bytes), mem.kv_pool_bytes, "the static share")
    style = _VERDICT_STYLE.get(fit.verdict, "bold")
    con.print(Text.assemble(("verdict: ", "bold"), (fit.verdict, style), f"  {fit.verdict_reason}"))
    for note in fit.notes:
        con.print(f"[dim]- {escape(note)}[/]")


def _print_alternatives(con: Console, alts: list[Alternative]) -> None:
    """The smaller checkpoints that may fit, as a table."""
    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows

    alt_table = Rows(
        [
            Column("MODEL", key=True),
            Column("PRECISION"),
            Column("VERDICT"),
            Column("TP", right=True),
            Column("WEIGHTS GB", right=True, drop=1),
            Column("MAX CONTEXT", right=True),
        ],
        "Checkpoints that may fit instead",
    )
    for a in alts:
        got = a.figures()  # the server's own verdict where it answered
        alt_table.add(
            escape(a.candidate.model_id),
            a.candidate.precision + ("" if a.native_precision else " (emulated)"),
            got["verdict"],
            str(got["tp"]),
            f"{a.report.weights.loaded_bytes / 1e9:.1f}",
            f"{got['recommended_max_model_len']:,}",
        )
    alt_table.print(con)
