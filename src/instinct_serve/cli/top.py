"""``instinct top``: live load, KV cache, latency, throughput and tokens per watt.

Reads each endpoint's vLLM ``/metrics`` (``runtime.observe``) and the host's GPUs
(``amd-smi metric``). ``--once`` prints one reading taken over ``--interval`` seconds;
otherwise the view refreshes every ``--interval`` seconds, at most ``--count`` times (or
until Ctrl-C). With ``--json``: one document (``--once``), else one JSON object per refresh
(JSON Lines).
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from instinct_serve.cli.common import emit, get_host, host_option, json_option

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from instinct_serve.hosts import Host
    from instinct_serve.runtime.observe import Observer

DEFAULT_INTERVAL_S = 2.0
DEFAULT_COUNT = 300  # ten minutes at the default interval


def _ms(block: Any, key: str) -> str:
    if not isinstance(block, dict) or block.get(key) is None:
        return "-"
    value = float(block[key])
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _num(value: Any, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def render(doc: dict[str, Any], con: Console) -> RenderableType:
    """The rich view of one ``top`` document (whole lines when ``con`` is not a terminal)."""
    from rich.console import Group
    from rich.markup import escape
    from rich.text import Text

    from instinct_serve.cli.tables import Column, Rows

    parts: list[RenderableType] = []
    windows = [(e.get("metrics") or {}).get("window_s") for e in doc["endpoints"]]
    scope = "over the last refresh" if any(windows) else "since start"
    power = any(e.get("power_w") is not None for e in doc["endpoints"])
    columns = [
        Column("NAME", key=True),
        Column("RUN/WAIT", right=True, drop=2),
        Column("KV%", right=True),
        Column("HIT%", right=True, drop=3),
        Column("REQ/S", right=True, drop=1),
        Column("TOK/S", right=True),
        Column("TTFT p50/99", right=True),
        Column("ITL p50/99", right=True),
    ]
    if power:
        columns += [Column("W", right=True, drop=4), Column("TOK/S/W", right=True)]
    table = Rows(columns, f"Endpoints on {doc['host']}  {doc.get('at') or ''}".rstrip())
    for ep in doc["endpoints"]:
        m = ep.get("metrics")
        if m is None or ep["status"] != "ok":
            why = escape(ep.get("error") or ep["status"])
            table.add(escape(ep["name"]), f"[red]{why}[/]", *[""] * (len(columns) - 2))
            continue
        ttft, itl = m.get("ttft_ms"), m.get("itl_ms")
        table.add(
            escape(ep["name"]),
            f"{_num(m.get('requests_running'), '{}')}/{_num(m.get('requests_waiting'), '{}')}",
            _num(m.get("kv_cache_usage_pct")),
            _num(m.get("prefix_cache_hit_rate_pct")),
            _num(m.get("requests_per_s"), "{:.2f}"),
            f"{_num(m.get('prompt_tokens_per_s'), '{:.0f}')}/"
            f"{_num(m.get('generation_tokens_per_s'), '{:.0f}')}",
            f"{_ms(ttft, 'p50')}/{_ms(ttft, 'p99')}",
            f"{_ms(itl, 'p50')}/{_ms(itl, 'p99')}",
            *(
                [_num(ep.get("power_w"), "{:.0f}"), _num(ep.get("tokens_per_watt"), "{:.3f}")]
                if power
                else []
            ),
        )
    parts.append(table.renderable(con))
    parts.append(Text(f"latencies in ms, {scope}; tok/s prompt/generated", style="dim"))
    if doc["gpus"]:
        gpus = Rows(
            [Column(c, right=True) for c in ("GPU", "POWER W", "GFX %", "VRAM GiB")],
            "GPUs (amd-smi)",
        )
        for gpu in doc["gpus"]:
            used, total = gpu.get("vram_used_gib"), gpu.get("vram_total_gib")
            vram = f"{_num(used)}/{_num(total)}" if total is not None else _num(used)
            gpus.add(
                str(gpu["index"]),
                _num(gpu.get("power_w"), "{:.0f}"),
                _num(gpu.get("gfx_activity_pct"), "{:.0f}"),
                vram,
            )
        parts.append(gpus.renderable(con))
    totals = doc["totals"]
    line = Text()
    line.append(f"total: {_num(totals['generation_tokens_per_s'])} generated tok/s")
    if totals["power_w"] is not None:
        line.append(f" at {totals['power_w']:.0f} W")
    if totals["tokens_per_watt"] is not None:
        line.append(f" = {totals['tokens_per_watt']:.3f} tok/s per W")
    parts.append(line)
    if doc.get("gpu_problem"):
        parts.append(Text(f"GPUs: {doc['gpu_problem']}", style="yellow"))
    for note in doc.get("notes") or []:
        parts.append(Text(note, style="dim"))
    return Group(*parts)


@click.command("top")
@click.argument("names", nargs=-1)
@click.option("--once", is_flag=True, help="One reading (over --interval seconds), then exit.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0, max=60),
    default=DEFAULT_INTERVAL_S,
    show_default=True,
    help="Seconds between scrapes (rates and latencies cover this window; 0 with --once: a "
    "single scrape, latencies since start).",
)
@click.option(
    "--count",
    type=click.IntRange(min=1, max=100_000),
    default=DEFAULT_COUNT,
    show_default=True,
    help="Refreshes before exiting (without --once).",
)
@click.option("--no-gpu", is_flag=True, help="Do not run amd-smi (no power, no tokens per watt).")
@host_option
@json_option
def top(
    names: tuple[str, ...],
    once: bool,
    interval: float,
    count: int,
    no_gpu: bool,
    host_spec: str | None,
    as_json: bool,
) -> int:
    """Live metrics of endpoints (all of `instinct ps`, or NAMES): requests running and
    waiting, KV cache use, prefix-cache hits, TTFT and inter-token latency p50/p99,
    tokens/s, GPU power and memory, tokens per watt. Reads vLLM's /metrics (any version)
    and amd-smi."""
    from instinct_serve.runtime.observe import Observer, observe_once

    host = get_host(host_spec)
    if once:
        doc = observe_once(host, names, interval, gpus=not no_gpu)
        data = doc.to_dict()
        emit(data, as_json, lambda con: con.print(render(data, con), soft_wrap=not con.is_terminal))
        return 0 if doc.ok else 1
    if not as_json and interval <= 0:
        interval = DEFAULT_INTERVAL_S
    return _loop(host, names, interval, count, not no_gpu, as_json, Observer)


def _loop(
    host: Host,
    names: tuple[str, ...],
    interval: float,
    count: int,
    gpus: bool,
    as_json: bool,
    observer: type[Observer],
) -> int:
    from instinct_serve.cli.common import console

    con = console()
    live = None
    ok = True
    try:
        with observer(host, names, gpus=gpus) as obs:
            if not as_json:
                from rich.live import Live

                live = Live(console=con, auto_refresh=False, transient=False)
                live.start()
            deadline = time.monotonic()
            for i in range(count):
                doc = obs.refresh()
                data = doc.to_dict()
                ok = doc.ok
                if as_json:
                    sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
                    sys.stdout.flush()
                else:
                    assert live is not None
                    live.update(render(data, con), refresh=True)
                if i + 1 < count:
                    deadline += max(interval, 0.05)
                    time.sleep(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:
        return 130
    finally:
        if live is not None:
            live.stop()
    return 0 if ok else 1
