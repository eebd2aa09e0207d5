"""``instinct pull MODEL``: fetch a plan's image and weights at once (``runtime.fetch``).

The plan is the one ``serve`` would make (same options), so the image pulled and the HF
cache filled are the ones the launch uses. Progress goes to stderr (``--json``: JSON Lines
on stdout, ``{"event": "progress", ...}`` then ``{"event": "result", ...}``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from instinct_serve.cli.common import console, get_host, host_option
from instinct_serve.cli.help import GroupedCommand, help_all_option
from instinct_serve.cli.options import options_for, parse_cli
from instinct_serve.options import PlanOptions


def _gb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e9:.2f} GB"


@click.command("pull", cls=GroupedCommand)
@help_all_option
@options_for(PlanOptions)
@host_option
@click.option("--json", "as_json", is_flag=True, help="JSON Lines: progress, then the result.")
def pull(as_json: bool, host_spec: str | None, **kwargs: Any) -> int:
    """Fetch MODEL's image and weights in parallel, as `serve` would use them.

    \b
    The image is pulled by the host's docker while the weights download into the HF cache
    the plan mounts, after a disk check sized from both. Run it again after an interruption:
    finished layers and files are kept and only the rest is fetched. HF_ENDPOINT, HF_TOKEN and
    HF_HUB_OFFLINE are honoured (offline: the cache is only checked).
    """
    from instinct_serve.gather.plan import plan_for
    from instinct_serve.runtime.docker_backend import DockerBackend
    from instinct_serve.runtime.fetch import Fetcher, Span

    opts = parse_cli(PlanOptions, kwargs, engine="docker")
    host = get_host(host_spec)
    result = plan_for(opts, host, fallback_gpu=True)
    plan = result.plan
    backend = DockerBackend(host) if plan.launcher == "docker" else None
    fetcher = Fetcher(host, plan, backend)
    err = console(stderr=True)
    shown: dict[str, str] = {}

    def progress(what: str, span: Span) -> None:
        layers = fetcher.layers
        done = sum(1 for s in layers.values() if s in ("Pull complete", "Already exists"))
        if as_json:
            doc = {"event": "progress", "ts": round(time.time(), 3), "what": what}
            doc.update(span.to_dict())
            if what == "image":
                doc.update(layers=len(layers), layers_done=done)
            sys.stdout.write(json.dumps(doc) + "\n")
            sys.stdout.flush()
            return
        if what == "image":
            line = f"image {plan.image}: {span.status}"
            if layers:
                line += f", {done}/{len(layers)} layers"
        else:
            line = f"weights {plan.model}: {span.status}, {_gb(span.done_bytes)}"
            line += f" of {_gb(span.total_bytes)}"
        if span.detail:
            line += f" ({span.detail})"
        if shown.get(what) != line:
            shown[what] = line
            err.print(line, markup=False, highlight=False)

    report = fetcher.run(progress)
    doc = {"event": "result", "model": plan.model, "image": plan.image, **report.to_dict()}
    if as_json:
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    out = console()
    out.print(
        f"Fetched {plan.model} and {plan.image} on {host.name}: "
        f"image {report.image.status}, weights {report.weights.status}"
        + (f", {report.overlap_s:.1f} s in parallel" if report.overlap_s else ""),
        markup=False,
    )
    return 0
