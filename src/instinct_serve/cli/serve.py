"""``instinct serve``: detect, check, plan, confirm, launch, wait, warm up, connect.

The work lives in ``runtime.prepare`` (check, plan, backend; shared with the MCP tool)
and ``runtime.serve`` (``Deployer``); this module parses the options, asks for
confirmation, handles signals, and renders the progress events: a rich status line on a
terminal, one line per phase otherwise, or JSON Lines with ``--json`` (see the command
help for the stream format).
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from instinct_serve.cli.common import (
    console,
    first_time,
    get_host,
    host_option,
    phase_text,
    reminder_due,
    require_terminal,
)
from instinct_serve.cli.help import GroupedCommand, help_all_option
from instinct_serve.cli.options import options_for, parse_cli
from instinct_serve.cli.plan import print_summary
from instinct_serve.errors import ExitCode, InstinctError
from instinct_serve.options import ServeOptions

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

    from instinct_serve.credentials import Redactor
    from instinct_serve.plan.model import PlanResult
    from instinct_serve.runtime.backend import Backend
    from instinct_serve.runtime.confirm import Change
    from instinct_serve.runtime.deploying import Deploying
    from instinct_serve.runtime.documents import ServeOutcome
    from instinct_serve.runtime.events import PhaseUpdate, ServeEvent

# Phases that come with a figure worth a line of its own even off a terminal.
_KEY_MESSAGES = ("KV cache:", "weights loaded", "graphs captured", "engine initialised")


class _Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: clean up what this run launched, then exit 143."""


# --------------------------------------------------------------------------- rendering


class ServeView:
    """Renders serve's events: JSON Lines on stdout, or human lines / a status on stderr.

    Everything it prints goes through the same redaction as the MCP server's results
    (``credentials.Redactor``: the caller's secrets, the token file, token-shaped text,
    and once a deployer runs, the values it passes by name and the endpoint's API key)."""

    def __init__(self, as_json: bool) -> None:
        from instinct_serve.credentials import Redactor

        self.as_json = as_json
        self.tty = sys.stderr.isatty()
        self.err: Console | None = None if as_json else console(stderr=True)
        self._status: Status | None = None
        self._last_phase: str | None = None
        self._default = Redactor.default()
        self.deployer: Deploying | None = None

    @property
    def redact(self) -> Redactor:
        return self.deployer.redact if self.deployer is not None else self._default

    def _markup(self, text: str) -> str:
        """Rich markup, redacted (the ``[redacted]`` mark escaped: it is not a style)."""
        from instinct_serve.credentials import REDACTED

        return self.redact.text(text).replace(REDACTED, "\\" + REDACTED)

    # -- JSON Lines

    def _line(self, doc: dict[str, Any]) -> None:
        doc = self.redact(doc)
        sys.stdout.write(json.dumps(doc, ensure_ascii=False, default=str) + "\n")
        sys.stdout.flush()

    # -- events

    def event(self, event: ServeEvent) -> None:
        if self.as_json:
            self._line(event.to_dict())
            return
        assert self.err is not None
        from rich.markup import escape

        from instinct_serve.runtime import events as ev

        if isinstance(event, ev.PhaseUpdate):
            self._phase(event)
            return
        if isinstance(event, ev.WarningEvent) and not (
            first_time(event.message) and reminder_due(event.message)
        ):
            return  # said already (the plan shown for approval), or not due (recipes' age)
        if isinstance(event, ev.Launched):
            line = f"[green]→[/] launched {escape(event.container)}"
        elif isinstance(event, ev.Healthy):
            line = f"[green]✓[/] /health answers 200 after {event.elapsed_s} s"
        elif isinstance(event, ev.WarmedUp):
            line = f"[green]✓[/] first request answered in {event.latency_s} s"
        elif isinstance(event, ev.CoherenceChecked):
            line = (
                f"[green]✓[/] coherence probe: {escape(event.verdict)}"
                if event.verdict != "incoherent_output"
                else f"[red]✗[/] coherence probe: incoherent output {escape(repr(event.text))}"
            )
        else:
            text = escape(str(getattr(event, "message", "")))
            marks = {
                ev.Relaunching: "[yellow]↻[/]",
                ev.Stalled: "[yellow]![/]",
                ev.Replaced: "[yellow]↻[/]",
                ev.Reused: "[green]✓[/]",
                ev.Attached: "[cyan]·[/]",
                ev.Note: "[cyan]·[/]",
                ev.WarningEvent: "[yellow]warning:[/]",
            }
            line = f"{marks.get(type(event), '·')} {text}"
        self.print(line)

    def _phase(self, event: PhaseUpdate) -> None:
        progress = event.progress
        pct = f" {progress * 100:.0f}%" if isinstance(progress, float) and progress < 1 else ""
        text = self._markup(phase_text(event.phase, event.message) + pct)
        if self.tty:
            assert self.err is not None
            if self._status is None:
                self._status = self.err.status(text)
                self._status.start()
            else:
                self._status.update(text)
            if event.phase != self._last_phase:
                self.err.print(f"[dim]·[/] {text}")
        elif event.phase != self._last_phase or any(k in event.message for k in _KEY_MESSAGES):
            self.print(f"· {text}")
        self._last_phase = event.phase

    def print(self, text: str) -> None:
        if self.err is not None:
            self.err.print(self._markup(text))

    def pause(self) -> None:
        """Stop the status line (before a prompt or the final output)."""
        if self._status is not None:
            self._status.stop()
            self._status = None

    # -- prompts

    def confirm_plan(self, result: PlanResult, change: Change | None = None) -> None:
        """Show the plan (and with ``--replace`` what it stops and removes: ``change``) and
        ask; refuse (exit 2) when nobody can answer."""
        self.pause()
        details = {"change": change.to_dict()} if change is not None and not change.empty else {}
        require_terminal(
            "serve",
            "review the plan with `instinct plan ...`, then rerun serve with --yes",
            details,
        )
        con = console(stderr=True)
        print_summary(con, result)
        if change is not None and not change.empty:  # --replace: what goes, said first
            for line in change.lines():
                con.print(line, markup=False, highlight=False, soft_wrap=True)
        if not click.confirm("Launch it?", default=True, err=True):
            raise click.exceptions.Abort()

    def confirm_fn(self) -> Callable[[str], bool] | None:
        if not sys.stdin.isatty():
            return None

        def ask(question: str) -> bool:
            self.pause()
            return bool(click.confirm(question, default=False, err=True))

        return ask

    # -- the end

    def result(self, outcome: ServeOutcome) -> None:
        self.pause()
        if self.as_json:
            self._line(outcome.to_dict())
            return
        if outcome.endpoint is not None and outcome.status in ("ready", "reused"):
            self._ready(outcome)
        elif outcome.status == "loading":
            self._loading(outcome)
        else:
            self._failure(outcome)

    def _notes(self, con: Console, outcome: ServeOutcome) -> None:
        from rich.markup import escape

        for relaunch in outcome.relaunches:
            con.print(
                f"[yellow]↻[/] relaunched with {escape(', '.join(relaunch.changes))} "
                f"({escape(relaunch.finding)}: {escape(relaunch.title)})"
            )

    def _ready(self, outcome: ServeOutcome) -> None:
        from rich.markup import escape

        from instinct_serve.cli.tables import Column, Rows

        endpoint = outcome.endpoint
        assert endpoint is not None
        con = console()
        title = "Endpoint ready" if outcome.status == "ready" else "Endpoint already running"
        table = Rows([Column("", key=True), Column("", prose=True)], title, header=False)
        context = f"{endpoint.max_model_len:,} tokens" if endpoint.max_model_len else "default"
        if outcome.plan.context_limited and outcome.plan.native_max_model_len:
            context += f" (limited; the model allows {outcome.plan.native_max_model_len:,})"
        rows = [
            ("Model", endpoint.model),
            ("Base URL", endpoint.base_url),
            ("Container" if endpoint.engine == "docker" else "Process", endpoint.container),
            ("Host", endpoint.host),
            ("Tensor parallel", str(endpoint.tensor_parallel_size)),
            ("Max context", context),
        ]
        if endpoint.image:
            rows.append(("Image", endpoint.image))
        if endpoint.warmup_latency_s is not None:
            rows.append(("First request", f"{endpoint.warmup_latency_s:.2f} s (warm-up)"))
        if endpoint.coherence is not None:
            rows.append(("Coherence", str(endpoint.coherence.get("verdict"))))
        rows.append(
            (
                "Listens on",
                "every interface (--public)"
                if endpoint.bind_address == "0.0.0.0"
                else f"{endpoint.bind_address} only",
            )
        )
        if endpoint.tunnel:
            rows.append(("Tunnel", f"{endpoint.tunnel}  (then use the Base URL here)"))
        if endpoint.api_key_file:
            rows.append(
                (
                    "API key",
                    f"in {endpoint.api_key_file} on {endpoint.host} (readable only by you; "
                    f"sent as Authorization: Bearer)",
                )
            )
        elif endpoint.api_key_env:
            rows.append(("API key", f"yours, from ${endpoint.api_key_env}"))
        for key, value in rows:
            table.add(f"[bold]{key}[/]", escape(self.redact.text(value)))
        table.print(con)
        self._notes(con, outcome)
        con.print("\n[bold]Try it:[/]")
        con.print(self.redact.text(endpoint.curl), markup=False, highlight=False, soft_wrap=True)

    def _loading(self, outcome: ServeOutcome) -> None:
        from rich.markup import escape

        con = console()
        endpoint = outcome.endpoint
        name = endpoint.container if endpoint else outcome.plan.container_name
        phase = str(outcome.phase).replace("_", " ")
        con.print(f"[cyan]·[/] {escape(name)} is loading (phase: {escape(phase)})")
        for note in outcome.notes[-1:]:
            con.print(f"  {escape(note)}")
        if endpoint is not None:
            con.print(f"  it will serve at {escape(endpoint.base_url)}")

    def _failure(self, outcome: ServeOutcome) -> None:
        from rich.markup import escape

        con = console(stderr=True)
        failure = outcome.failure
        if outcome.status == "interrupted":
            con.print("[yellow]Interrupted.[/] " + escape(" ".join(outcome.notes[-1:])))
            return
        if failure is None:
            con.print(f"[red]✗[/] serve ended with status {outcome.status}")
            return
        self._notes(con, outcome)
        red = self.redact.text
        con.print(f"[red]✗ {escape(failure.id)}[/]  [bold]{escape(failure.title)}[/]")
        if failure.line:
            con.print(f"  [dim]line:[/] {escape(red(failure.line.strip()[:300]))}")
        con.print(f"  [bold]cause:[/] {escape(red(failure.cause))}")
        con.print(f"  [bold]fix:[/]   {escape(red(failure.fix))}")
        if failure.left:
            con.print(f"  [dim]{escape(failure.container or '')}: {escape(failure.left)}[/]")
        for command in failure.commands:
            con.print(f"  [dim]$[/] [cyan]{escape(command)}[/]")
        if failure.log_tail:
            con.print("  [dim]log tail:[/]")
            for line in failure.log_tail[-15:]:
                con.print(f"    [dim]{escape(red(line[:240]))}[/]")

    def error(self, exc: InstinctError) -> None:
        """An error before or outside the deployment, as the stream's final line."""
        self.pause()
        self._line({"event": "result", "ok": False, "status": "error", "error": exc.to_dict()})


# --------------------------------------------------------------------------- steps


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (an agent or a supervisor ending us) cleans up like Ctrl-C."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (embedded use): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """No second Ctrl-C in the middle of the cleanup of the first."""
    try:
        old = [(s, signal.signal(s, signal.SIG_IGN)) for s in (signal.SIGINT, signal.SIGTERM)]
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        for sig, handler in old:
            signal.signal(sig, handler)


def _run(
    deployer: Deploying,
    result: PlanResult,
    yes: bool,
    view: ServeView,
    replacing: Callable[[], Change] | None = None,
) -> ServeOutcome:
    try:
        with _sigterm_as_interrupt():
            outcome = deployer.reuse()
            if outcome is None:
                deployer.preflight()
                if not yes:  # --replace: what it would stop and remove, in the summary
                    view.confirm_plan(result, replacing() if replacing else None)
                outcome = deployer.deploy()
            return outcome
    except KeyboardInterrupt as exc:
        signum = signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT
        view.pause()
        with _signals_ignored():
            raise deployer.interrupted(signum) from None
    except Exception as exc:
        with _signals_ignored():
            removed = deployer.abandon()
        if removed and isinstance(exc, InstinctError):
            exc.details["removed"] = removed
            exc.message += f" (stopped and removed {removed}, which this run had launched)"
        raise
    finally:
        deployer.close()


# --------------------------------------------------------------------------- command


@click.command("serve", cls=GroupedCommand)
@help_all_option
@options_for(ServeOptions)
@host_option
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: events, then the result.")
def serve(as_json: bool, host_spec: str | None, **kwargs: Any) -> int:
    """Launch MODEL as an OpenAI-compatible endpoint, wait until it is healthy, warm it
    up, check that it answers sensibly, and print how to connect.

    \b
    Idempotent: an endpoint of the same plan that already runs is reused (or followed
    while it loads). An instinct-serve endpoint holding the port is replaced only with
    --replace (or your yes, for the same model); anything else on the port or name is
    never touched: serve stops with an error naming it.
    \b
    Known failures are handled once, automatically: out of memory while capturing
    graphs and a graph-capture hang relaunch with --enforce-eager, garbage output
    relaunches with the kernel override that fixes it; other failures are diagnosed
    (cause and fix) from the log. Ctrl-C stops and removes what this run launched.
    \b
    Examples:
      instinct serve meta-llama/Llama-3.1-8B-Instruct
      instinct serve Qwen/Qwen3.5-9B --host user@gpu-box --port 8001 --yes
      instinct serve MODEL --engine native --gpus 0,1 --yes -- --max-num-seqs 64
    \b
    --json prints JSON Lines on stdout, one object per line:
      {"event": "phase", "phase": "loading_weights", "message": ..., "progress": 0.5,
       "figures": {...}, "ts": ...}   startup phases (checking, planning, pulling_image,
                                      launching, downloading_weights, loading_weights,
                                      compiling, profiling, capturing_graphs,
                                      starting_server, ready, warming_up,
                                      coherence_probe, failed)
      {"event": "launched" | "healthy" | "warmup" | "coherence" | "relaunch" |
       "stalled" | "replaced" | "reused" | "attached" | "note" | "warning", ...}
      {"event": "result", "ok": true|false, "status": "ready" | "reused" | "loading" |
       "failed" | "timeout" | "interrupted" | "error", "endpoint": {base_url, model,
       container, tp, max_model_len, image, warmup_latency_s, coherence, curl},
       "failure": {id, title, cause, fix, line, exit_code, log_tail, ...},
       "error": {id, message, fix}, ...}   always the last line
    Exit codes: 0 ready (or reused, or loading with --detach), 1 failed, 2 bad usage,
    3 host not ready, 130 interrupted.
    """
    view = ServeView(as_json)
    try:
        opts = parse_cli(ServeOptions, kwargs)
        from instinct_serve.cli.multinode import hosts_of, serve_hosts
        from instinct_serve.runtime.secret_env import give

        give(opts.extra_env)  # --env NAME=VALUE: this run's launches pass it by name

        hosts = hosts_of(opts.hosts, host_spec)
        if hosts is not None:
            with _sigterm_as_interrupt():  # SIGTERM removes what it started, as Ctrl-C does
                code = serve_hosts(view, opts, hosts)
            if code is not None:
                return code
            # one node holds the model: that node's serve, as with --host
            opts, host_spec = dataclasses.replace(opts, hosts=None), hosts[0].name
        return _serve(view, opts, host_spec)
    except InstinctError as exc:
        if not as_json:
            raise
        view.error(exc)
        return int(exc.exit_code)
    except click.exceptions.Abort:
        view.pause()
        view.print("Not launched.")
        return int(ExitCode.FAILED)


def _serve(view: ServeView, opts: ServeOptions, host_spec: str | None) -> int:
    from instinct_serve.runtime.deploying import Interrupted
    from instinct_serve.runtime.prepare import prepare, serve_settings

    host = get_host(host_spec)
    engine = opts.engine
    settings = serve_settings(opts)
    yes = opts.yes
    prepared = prepare(host, opts.plan_options(), engine=engine, sink=view.event, root=opts.root)
    if opts.upgrade:
        if not yes and not settings.replace:  # with --replace it is refused: no question
            view.confirm_plan(prepared.result)
        outcome = prepared.upgrade(settings, view.event)
        view.result(outcome)
        return outcome.exit_code
    deployer = prepared.deployer(settings, view.event, view.confirm_fn())
    view.deployer = deployer
    replacing = None
    if settings.replace:
        from functools import partial

        from instinct_serve.runtime.confirm import replace_change

        replacing = partial(replace_change, host, prepared.result.plan, prepared.backend)
    try:
        outcome = _run(deployer, prepared.result, yes, view, replacing)
    except Interrupted as stop:
        outcome = stop.outcome
        view.result(outcome)
        return 128 + int(stop.signum)
    if engine == "native" and outcome.failure is not None and outcome.failure.container:
        _native_oom_hint(prepared.backend, outcome, prepared.result)
    view.result(outcome)
    return outcome.exit_code


def _native_oom_hint(backend: Backend, outcome: ServeOutcome, result: PlanResult) -> None:
    from instinct_serve.engine.gpus import oom_hint

    assert outcome.failure is not None and outcome.failure.container is not None
    hint = oom_hint(backend.log_text(outcome.failure.container, 2000), None, result.inventory)
    if hint:
        outcome.notes.append(hint)
        outcome.failure.fix += " " + hint
