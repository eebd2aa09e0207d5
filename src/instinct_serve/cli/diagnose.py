"""``instinct diagnose``: explain a failing vLLM log or a pasted symptom, and how to fix it.

The log comes from a file (``--log``), standard input (``-``), an endpoint on the host
(``--container``: a container's ``docker logs`` or a native process's log file, over
``--host``; ``runtime.diagnosis``) or one pasted line (``--symptom``). Exit 0 when a known
cause was found or the log shows no failure (``healthy``: no error line, some start-up
progress), 1 when nothing matched (the tail of the log is shown), 2 for bad input.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from instinct_serve.cli.common import emit, get_host, host_option, json_option
from instinct_serve.errors import ExitCode, InstinctError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.diagnose import DiagnoseContext, Diagnosis, Finding

MAX_LOG_BYTES = 64 * 2**20


def _read_remote_file(path: str, host_spec: str) -> str:
    host = get_host(host_spec)
    text = host.read_text(path)
    if text is None:
        raise UsageError(
            f"no readable log file {path} on {host.name}", fix="check the path", id="log_not_found"
        )
    return text[-MAX_LOG_BYTES:]


def _read_file(path: str) -> str:
    file = Path(path)
    if not file.exists():
        raise UsageError(f"no such log file: {path}", fix="check the path", id="log_not_found")
    if not file.is_file():
        raise UsageError(f"not a file: {path}", fix="pass a log file", id="log_not_found")
    from instinct_serve.paths import read_regular

    try:  # the end of a large log: that is where failures are
        data = read_regular(file, MAX_LOG_BYTES, tail=True)
    except OSError as exc:
        raise UsageError(
            f"cannot read {path}: {exc.strerror}", fix="check its permissions", id="log_unreadable"
        ) from exc
    # NUL runs (a hole a crash left, a sparse file) are no text: never one endless line
    return data.translate(None, b"\0").decode("utf-8", errors="replace")


def _diagnose_container(name: str, host_spec: str | None, context: DiagnoseContext) -> Diagnosis:
    """Any container the user names (not only ours), or a native process of ours."""
    from instinct_serve.runtime.diagnosis import diagnose_endpoint

    try:
        return diagnose_endpoint(get_host(host_spec), name, context, managed_only=False)
    except InstinctError as exc:
        if exc.id == "container_not_found":
            raise UsageError(exc.message, fix=exc.fix, id=exc.id) from exc
        raise


def _finding_view(con: Console, finding: Finding, primary: bool) -> None:
    from rich.markup import escape

    colour = "red" if not finding.generic else "yellow"
    marker = "→" if primary else "·"
    con.print(f"{marker} [bold {colour}]{finding.id}[/]  [bold]{escape(finding.title)}[/]")
    if finding.line is not None:
        where = f"line {finding.line_no}" if finding.line_no else "symptom"
        more = f" (x{finding.occurrences})" if finding.occurrences > 1 else ""
        con.print(f"  [dim]{where}{more}:[/] {escape(finding.line.strip()[:400])}")
    con.print(f"  [bold]cause:[/] {escape(finding.cause)}")
    con.print(f"  [bold]fix:[/]   {escape(finding.fix)}")
    if finding.retry:
        con.print(f"  [bold]retry:[/] [cyan]{escape(_hint_text(finding))}[/]")
    for command in finding.commands:
        con.print(f"  [dim]$[/] [cyan]{escape(command)}[/]")


def _hint_text(finding: Finding) -> str:
    parts = []
    for hint in (finding.retry, *finding.alternatives):
        if not hint:
            continue
        words = [*hint.get("add_args", [])]
        words += [f"{k}={v}" for k, v in hint.get("set_env", {}).items()]
        if "max_model_len" in hint:
            words.append(f"--max-model-len {hint['max_model_len']}")
        if "gpu_memory_utilization" in hint:
            words.append(f"--gpu-memory-utilization {hint['gpu_memory_utilization']}")
        if "max_num_seqs" in hint:
            words.append(f"--max-num-seqs {hint['max_num_seqs']}")
        if "tensor_parallel_size" in hint:
            words.append(f"--tensor-parallel-size {hint['tensor_parallel_size']}")
        parts.append(" ".join(shlex.quote(word) for word in words))  # paste-ready
    text = "  or  ".join(parts)
    return text + ("  (serve retries with the first one by itself)" if finding.auto_retry else "")


def render(diagnosis: Diagnosis) -> Callable[[Console], None]:
    def show(con: Console) -> None:
        from rich.markup import escape
        from rich.panel import Panel

        if diagnosis.matched:
            for i, finding in enumerate(diagnosis.findings):
                if i:
                    con.print()
                _finding_view(con, finding, primary=i == 0)
            return
        what = "log" if diagnosis.source == "log" else "symptom"
        if diagnosis.healthy:
            phase = str(diagnosis.facts.get("phase_reached", "starting")).replace("_", " ")
            con.print(f"[green]No failure in this log:[/] the start-up reached {phase}.")
        else:
            con.print(f"[yellow]No known failure pattern matched this {what}.[/]")
        if diagnosis.last_error:
            con.print(f"Last error line: {escape(diagnosis.last_error[:400])}")
        if diagnosis.tail and diagnosis.source == "log":
            con.print(
                Panel(
                    escape("\n".join(diagnosis.tail)),
                    title=f"last {len(diagnosis.tail)} lines",
                    title_align="left",
                )
            )
        for command in diagnosis.commands:
            con.print(f"Search upstream: [cyan]{escape(command)}[/]")

    return show


@click.command()
@click.argument("stdin_marker", metavar="[-]", required=False)
@click.option(
    "--log",
    "log_file",
    metavar="FILE",
    help="Read the log from this file (on the --host when one is given explicitly).",
)
@click.option(
    "--container",
    metavar="NAME",
    help="Read the log of this container (or native endpoint) on the host.",
)
@click.option("--symptom", metavar="TEXT", help="Explain one pasted line or sentence.")
@click.option("--gfx", metavar="GFX", help="The GPU's gfx target (gfx942...), to sharpen fixes.")
@click.option("--model", metavar="MODEL", help="The model that was served.")
@click.option("--vllm-version", metavar="VERSION", help="The vLLM version that ran.")
@click.option(
    "--server",
    type=click.Choice(["vllm", "sglang"]),
    help="The server that wrote the log (read from the log when it shows): fixes name its flags.",
)
@json_option
@host_option
def diagnose(
    stdin_marker: str | None,
    log_file: str | None,
    container: str | None,
    symptom: str | None,
    gfx: str | None,
    model: str | None,
    vllm_version: str | None,
    server: str | None,
    as_json: bool,
    host_spec: str | None,
) -> int:
    """Explain a failing vLLM or SGLang log or symptom: cause, fix and the line that proves it.

    \b
    Examples:
      instinct diagnose --log vllm.log
      docker logs my-endpoint 2>&1 | instinct diagnose -
      instinct diagnose --container instinct-qwen3-8b --host gpu01
      instinct diagnose --symptom "out of memory during graph capture"
      instinct diagnose --log sglang.log --server sglang
    """
    from instinct_serve.diagnose import DiagnoseContext, diagnose_symptom
    from instinct_serve.diagnose import diagnose as run_diagnose

    if stdin_marker not in (None, "-"):
        raise UsageError(
            f"unexpected argument {stdin_marker!r}",
            fix="use --log FILE, --container NAME, --symptom TEXT or - for standard input",
            id="bad_input",
        )
    sources = [s for s in (log_file, container, symptom, stdin_marker) if s is not None and s != ""]
    if len(sources) != 1:
        raise UsageError(
            "give exactly one input: --log FILE, --container NAME, --symptom TEXT or -",
            fix="e.g. instinct diagnose --log vllm.log",
            id="bad_input",
        )
    context = DiagnoseContext(gfx=gfx, model=model, vllm_version=vllm_version, server=server)
    if symptom is not None:
        result = diagnose_symptom(symptom, context)
    elif container is not None:
        result = _diagnose_container(container, host_spec, context)
    else:
        if log_file is not None:
            # An explicit --host means the file is on that host; otherwise it is local.
            remote = host_spec is not None and not get_host(host_spec).is_local
            text = _read_remote_file(log_file, host_spec or "") if remote else _read_file(log_file)
        else:
            text = sys.stdin.read()
        if not text.strip():
            raise UsageError("the log is empty", fix="check the log source", id="empty_log")
        result = run_diagnose(text, context)
    emit(result, as_json, render(result))
    return int(ExitCode.OK if result.matched or result.healthy else ExitCode.FAILED)
