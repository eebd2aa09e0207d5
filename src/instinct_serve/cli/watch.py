"""``instinct watch`` (supervise one endpoint, or print/write its systemd unit) and
``instinct rollback`` (serve the last good plan again). The work is in ``runtime.watch``
and ``runtime.upgrade``; this module parses options and prints events."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import click

from instinct_serve.cli.common import confirm_change, console, get_host, host_option, yes_option
from instinct_serve.cli.options import options_for, parse_cli
from instinct_serve.errors import UsageError
from instinct_serve.options import RollbackOptions, WatchOptions

UNIT_DIR = Path("~/.config/systemd/user")


def unit_name(name: str) -> str:
    return f"instinct-watch-{name}.service"


def systemd_unit(name: str, argv: list[str]) -> str:
    """A user unit that runs ``instinct watch NAME`` (``argv``) and is restarted if the
    watch itself dies. Secrets are not written here: a relaunch needs the variables the
    plan passes by name (HF_TOKEN, ...), which the unit reads from an optional
    environment file only you can read."""
    return (
        "[Unit]\n"
        f"Description=instinct watch {name}: restart and re-prove the vLLM endpoint\n"
        "After=network-online.target docker.service\n"
        "Wants=network-online.target\n\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={shlex.join(argv)}\n"
        "# HF_TOKEN=... (chmod 600): only needed to relaunch a gated model\n"
        "EnvironmentFile=-%h/.config/instinct-serve/watch.env\n"
        "Restart=on-failure\n"
        "RestartSec=30\n\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def _instinct_argv() -> list[str]:
    found = shutil.which("instinct")
    return [found] if found else [sys.executable, "-m", "instinct_serve"]


def _printer(as_json: bool) -> Any:
    def show(doc: dict[str, Any]) -> None:
        if as_json:
            sys.stdout.write(json.dumps(doc, default=str) + "\n")
            sys.stdout.flush()
            return
        extra = {k: v for k, v in doc.items() if k not in ("event", "kind", "at") and v}
        words = " ".join(f"{k}={v}" for k, v in extra.items())
        console(stderr=True).print(f"{doc['at']} {doc['kind']} {words}", markup=False)

    return show


@click.command("watch")
@click.argument("name", required=False)
@options_for(WatchOptions)
@click.option("--systemd", is_flag=True, help="Print a systemd user unit that runs this watch.")
@click.option("--write", is_flag=True, help="With --systemd: write it to ~/.config/systemd/user.")
@click.option("--root", default="", hidden=True, help="Stand-in device tree (tests), as serve's.")
@host_option
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: one event per line.")
def watch(
    name: str | None,
    systemd: bool,
    write: bool,
    root: str,
    host_spec: str | None,
    as_json: bool,
    **kwargs: Any,
) -> int:
    """Supervise endpoint NAME: health-check it, restart it with backoff when it dies or
    hangs (once with the known fix of its diagnosis), warm it up and probe it again after
    any restart, and record each event (`instinct ps` shows restarts and the last failure).

    Docker's restart policy restarts a crash by itself (on-failure, 3 times); watch
    covers the rest: a clean exit, a crash the policy gave up on, a hang, a native
    endpoint (no daemon), and the proof after a restart. It ends when the endpoint is
    removed (`instinct stop`), or gives up (exit 1) after --max-restarts in a row.

    \b
    Examples:
      instinct watch vllm-qwen3-5-9b
      instinct watch vllm-qwen3-5-9b --systemd --write  # a systemd --user unit
    """
    from instinct_serve.runtime.settings import ServeSettings
    from instinct_serve.runtime.watch import Watcher, WatchSettings, backend_for, only_endpoint

    opts = parse_cli(WatchOptions, kwargs)
    host = get_host(host_spec)
    if write and not systemd:
        raise UsageError("--write goes with --systemd", fix="add --systemd", id="bad_usage")
    name = name or only_endpoint(host)
    if systemd:
        argv = [*_instinct_argv(), "watch", name, *opts.argv()]
        if host_spec:
            argv += ["--host", host_spec]
        text = systemd_unit(name, argv)
        if not write:
            sys.stdout.write(text)
            return 0
        path = UNIT_DIR.expanduser() / unit_name(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        con = console()
        con.print(f"wrote {path}", markup=False)
        con.print(
            f"enable it: systemctl --user daemon-reload && systemctl --user enable --now "
            f"{unit_name(name)}  (and `loginctl enable-linger` to keep it after logout)",
            markup=False,
        )
        return 0
    settings = WatchSettings(
        interval_s=opts.interval_s,
        backoff_s=opts.backoff_s,
        unhealthy_after=opts.unhealthy_after,
        max_restarts=opts.max_restarts,
        max_checks=opts.max_checks,
        duration_s=opts.duration_s,
        canary_s=opts.canary_s,
        canary_tokens=opts.canary_tokens,
        serve=ServeSettings(timeout_s=opts.timeout_s),
    )
    watcher = Watcher(host, name, backend_for(host, name, root), settings, sink=_printer(as_json))
    previous = signal.signal(signal.SIGTERM, _terminated)  # `systemctl stop`: exit 130
    try:
        return watcher.run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@click.command("rollback")
@click.argument("name")
@options_for(RollbackOptions)
@click.option("--root", default="", hidden=True, help="Stand-in device tree (tests), as serve's.")
@yes_option
@host_option
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: events, then the result.")
def rollback(
    name: str, root: str, yes: bool, host_spec: str | None, as_json: bool, **kwargs: Any
) -> int:
    """Serve NAME's last good plan again (the one `serve --upgrade` replaced): it is
    proven beside the current endpoint on a spare port, as `serve --upgrade` proves, and
    only then switched in (a failed rollback leaves the current one serving); the current
    plan becomes the last good one (a second rollback undoes the first). What it replaces
    is shown and asked about first; --yes answers for you."""
    from instinct_serve.cli.serve import ServeView
    from instinct_serve.runtime.confirm import rollback_change
    from instinct_serve.runtime.rollback import rollback as run_rollback
    from instinct_serve.runtime.settings import ServeSettings

    opts = parse_cli(RollbackOptions, kwargs)
    host = get_host(host_spec)
    confirm_change(rollback_change(host, name), yes, "Roll back?")
    view = ServeView(as_json)
    settings = ServeSettings(timeout_s=opts.timeout_s)
    outcome = run_rollback(host, name, settings, view.event, device_root=root)
    view.result(outcome)
    return outcome.exit_code
