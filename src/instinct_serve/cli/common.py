"""Shared CLI pieces: the ``--json``/``--host`` options, JSON encoding and output.

A command computes one document (a dict, dataclass or pydantic model), then calls
``emit``: stable JSON on stdout with ``--json``, else the command's rich renderer. Commands
*return* their exit code from the click callback; ``main`` exits with it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from instinct_serve.jsonio import dumps, to_jsonable  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.hosts import Host
    from instinct_serve.runtime.confirm import Change

F = TypeVar("F", bound=Callable[..., Any])


def json_option(func: F) -> F:
    """``--json``: machine-readable output with stable keys."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print stable JSON instead of the human view."
    )(func)


def host_option(func: F) -> F:
    """``--host``: act on a remote machine over ssh."""
    return click.option(
        "--host",
        "host_spec",
        metavar="[USER@]HOST[:PORT]",
        default=None,
        help="Run on this host over ssh (default: $ROCM_SSH_HOST, else this machine; "
        "'local' forces this machine).",
    )(func)


def hosts_option(func: F) -> F:
    """``--hosts``: the nodes of a multi-node group (``serve --hosts``), as one endpoint."""
    return click.option(
        "--hosts",
        "hosts_spec",
        metavar="H1,H2",
        default=None,
        help="The nodes of a multi-node group (as given to serve --hosts).",
    )(func)


def choice(values: Sequence[str]) -> click.Choice[str]:
    """A click choice of ``values`` matched whatever the case (``JSON``, ``Zsh``): the CLI's
    own choices follow the options' rule (``options.spec.choice_of``)."""
    return click.Choice(list(values), case_sensitive=False)


def get_host(host_spec: str | None) -> Host:
    from instinct_serve.hosts import resolve_host

    return resolve_host(host_spec)


def console(stderr: bool = False) -> Console:
    """A rich console (imported lazily: the JSON path never pays for rich). Through a pipe
    or into a file nothing is wrapped: a line of text stays one line (``grep`` finds it)."""
    from rich.console import Console

    con = Console(stderr=stderr, highlight=False, soft_wrap=False)
    con.soft_wrap = not con.is_terminal
    return con


def emit(doc: Any, as_json: bool, human: Callable[[Console], None] | None = None) -> None:
    """Print the document: JSON to stdout, or the human view through ``human``."""
    if as_json or human is None:
        sys.stdout.write(dumps(doc) + "\n")
        sys.stdout.flush()
        return
    human(console())


_SAID: set[str] = set()  # the warnings this command printed (``new_command`` empties it)


def new_command() -> None:
    """A command starts (``cli.main.main``): nothing said yet."""
    _SAID.clear()


def first_time(message: str) -> bool:
    """Whether ``message`` is new to this command: a warning is printed once per run (serve
    shows the plan's, then its launch would repeat them)."""
    if message in _SAID:
        return False
    _SAID.add(message)
    return True


def warn(message: str, as_json: bool = False) -> None:
    """A warning on stderr (never on stdout, which may carry JSON), once per command; a
    ``Reminder`` only when it is due (``reminder_due``)."""
    if not first_time(message) or not reminder_due(message):
        return
    if as_json:
        sys.stderr.write(f"warning: {message}\n")
    else:
        console(stderr=True).print(f"[yellow]warning:[/] {message}")


def reminder_due(message: str) -> bool:
    """Whether to print ``message`` now: a plain warning always; a ``Reminder`` when its
    key was not printed in the last ``every_h`` hours (``cache_dir()/reminders.json``, also
    across the plans of one serve). Unreadable or unwritable state: printed."""
    import json
    import time

    from instinct_serve.errors import Reminder
    from instinct_serve.paths import cache_dir

    if not isinstance(message, Reminder):
        return True
    path = cache_dir() / "reminders.json"
    try:
        shown = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        last = shown.get(message.key) if isinstance(shown, dict) else None
        if isinstance(last, int | float) and time.time() - last < message.every_h * 3600:
            return False
        shown = (shown if isinstance(shown, dict) else {}) | {message.key: time.time()}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(shown), encoding="utf-8")
    except (OSError, ValueError):
        pass
    return True


def require_terminal(what: str, fix: str, details: dict[str, Any] | None = None) -> None:
    """Refuse (exit 2, ``confirmation_required``) when nobody can answer a question: no
    hang on a prompt that a script or an agent never sees."""
    if not sys.stdin.isatty():
        from instinct_serve.errors import UsageError

        raise UsageError(
            f"{what} needs a confirmation, and standard input is not a terminal",
            fix=fix,
            id="confirmation_required",
            details=details or {},
        )


def yes_option(func: F) -> F:
    """``--yes``: what a destructive command would ask is answered yes."""
    return click.option(
        "--yes", "-y", is_flag=True, help="Do not ask: the summary is taken as approved."
    )(func)


def confirm_change(change: Change, yes: bool, question: str = "Go ahead?") -> None:
    """The CLI side of ``runtime.confirm``'s rule: nothing to touch, or ``--yes``, goes on;
    else the summary (what is touched and kept) on stderr and a y/N question; without a
    terminal it is refused, the summary in the error's details."""
    if change.empty or yes:
        return
    require_terminal(
        change.action,
        "review what it touches (`instinct ps --everyone`; the summary is in the error's "
        "details with --json), then rerun with --yes",
        {"change": change.to_dict()},
    )
    con = console(stderr=True)
    for line in change.lines():
        con.print(line, markup=False, highlight=False, soft_wrap=True)
    if not click.confirm(question, default=False, err=True):
        raise click.exceptions.Abort()


@contextmanager
def progress(message: str, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr while long work runs; yields a function to update its text.

    Disabled (a no-op) with ``--json`` or when stderr is not a terminal.
    """
    if not enabled or not sys.stderr.isatty():
        yield lambda _text: None
        return
    con = console(stderr=True)
    with con.status(message) as status:
        yield lambda text: status.update(text)


def print_wrapped(con: Console, text: str, indent: str = "", first: str | None = None) -> None:
    """``text`` wrapped to the console at spaces only: a model id, path or URL is never
    cut mid-word (a word longer than the line stays whole on its own line)."""
    import textwrap

    if not con.is_terminal:  # a pipe: one line, never wrapped
        con.print((first if first is not None else indent) + text, markup=False, soft_wrap=True)
        return
    lines = textwrap.wrap(
        text,
        width=max(20, con.width),
        initial_indent=indent if first is None else first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    for line in lines or [first or indent]:
        con.print(line, markup=False, highlight=False, soft_wrap=True)


def phase_text(phase: str, message: str) -> str:
    """``phase message`` as rich markup, the phase in bold; where the message starts with
    the phase's own word (``runtime.events.phase_label``), that word is the bold one."""
    from rich.markup import escape

    from instinct_serve.runtime.events import phase_label

    label = phase_label(phase, message)
    if label is not None:
        return f"[bold]{escape(label)}[/]" + (f" {escape(message)}" if message else "")
    head = re.match(r"\W*\w+", message)
    cut = head.end() if head else 0
    return f"[bold]{escape(message[:cut])}[/]{escape(message[cut:])}"
