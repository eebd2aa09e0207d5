"""``instinct bench``: a bounded concurrency sweep with the server's own benchmark client
(``vllm bench serve``, ``sglang.bench_serving``), stored under
the endpoint's plan hash; ``instinct bench compare A B`` puts two runs side by side.

    instinct bench [NAME] --concurrency 1,4,16 --requests 64 --input-len 512 --output-len 128
    instinct bench compare 3f2a9c1d 7b41e0aa      # plan hashes (latest run of each) or files
    instinct bench list
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from instinct_serve.cli.common import emit, get_host, host_option, json_option
from instinct_serve.observe import bench as model

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.observe.bench import BenchRun, Point


class DefaultGroup(click.Group):
    """A group whose first argument, when it is not a subcommand, goes to ``run``."""

    default_command = "run"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@click.group("bench", cls=DefaultGroup)
def bench() -> None:
    """Benchmark a running endpoint with its server's own client (`vllm bench serve`,
    SGLang's `sglang.bench_serving`; a sweep over concurrency), store the results under its
    plan hash, and compare two plans.

    \b
    instinct bench [NAME] --concurrency 1,4,16 --requests 64
    instinct bench compare PLAN_HASH_A PLAN_HASH_B     (or two result files)
    instinct bench list
    """


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _step_line(level: int, point: Point | None, error: dict[str, Any] | None) -> str:
    if point is None:
        why = (error or {}).get("message", "failed")
        return f"concurrency {level}: {why}"
    ttft = point.latency_ms.get("ttft", {})
    itl = point.latency_ms.get("itl", {})
    return (
        f"concurrency {level}: {_fmt(point.output_throughput)} output tok/s, "
        f"{_fmt(point.request_throughput, 2)} req/s, TTFT p50 {_fmt(ttft.get('p50'))} ms, "
        f"ITL p50 {_fmt(itl.get('p50'))} ms ({point.completed} ok, {point.failed} failed)"
    )


def render_reference(con: Console, doc: dict[str, Any]) -> None:
    from rich.markup import escape

    from instinct_serve.observe.reference_points import describe

    where = f"{doc['gpus'] or '?'}x {str(doc['gpu'] or 'unknown GPU').upper()}"
    con.print(f"against AMD's published numbers ({where}; {escape(doc['source'])}):")
    for row in doc["points"]:
        con.print("  " + escape(describe(row)))


def render_run(con: Console, run: BenchRun) -> None:
    """One run: a row per concurrency, with throughput bars."""
    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows

    table = Rows(
        [
            Column("CONC", right=True),
            Column("OUTPUT TOK/S", right=True),
            Column("", drop=2),
            Column("REQ/S", right=True, drop=1),
            Column("TTFT p50/p99", right=True),
            Column("ITL p50/p99", right=True),
            Column("OK", right=True),
        ],
        f"{run.endpoint or '-'} ({run.model or '-'}), plan {run.key}"
        + (f", by {run.client}" if run.client else ""),
    )
    top = model.scale_max([p.output_throughput for p in run.points])
    for p in run.points:
        ttft, itl = p.latency_ms.get("ttft", {}), p.latency_ms.get("itl", {})
        table.add(
            str(p.concurrency),
            _fmt(p.output_throughput),
            f"[cyan]{model.bar(p.output_throughput, top)}[/]",
            _fmt(p.request_throughput, 2),
            f"{_fmt(ttft.get('p50'))}/{_fmt(ttft.get('p99'))}",
            f"{_fmt(itl.get('p50'))}/{_fmt(itl.get('p99'))}",
            f"{p.completed}/{p.requests}" if p.requests else str(p.completed),
        )
    table.print(con)
    for error in run.errors:
        con.print(f"[red]concurrency {error.get('concurrency')}:[/] {escape(error['message'])}")
    if run.path:
        con.print(f"stored: {escape(run.path)}")


@bench.command("run")
@click.argument("name", required=False)
@click.option(
    "--concurrency",
    default=",".join(str(c) for c in model.DEFAULT_CONCURRENCY),
    show_default=True,
    help="Comma-separated concurrency levels, one step each (at most 16).",
)
@click.option(
    "--requests",
    type=click.IntRange(min=1, max=model.MAX_REQUESTS),
    default=None,
    help="Requests per step [default: 4 x concurrency, at least 16].",
)
@click.option(
    "--input-len",
    type=click.IntRange(min=1, max=1_000_000),
    default=model.DEFAULT_INPUT_LEN,
    show_default=True,
    help="Prompt tokens per request (random dataset).",
)
@click.option(
    "--output-len",
    type=click.IntRange(min=1, max=1_000_000),
    default=model.DEFAULT_OUTPUT_LEN,
    show_default=True,
    help="Generated tokens per request (--ignore-eos: exactly this many).",
)
@click.option(
    "--step-timeout",
    type=click.FloatRange(min=5, max=86_400),
    default=model.DEFAULT_STEP_TIMEOUT_S,
    show_default=True,
    help="Wall-clock limit of each step, in seconds.",
)
@click.option(
    "--vllm",
    "vllm_path",
    metavar="PATH",
    default=None,
    help="The vllm executable on the host to run `vllm bench serve` with, whatever the "
    "server [default: the server's own client, from the endpoint's image or native install].",
)
@click.option(
    "--tokenizer",
    metavar="NAME_OR_PATH",
    default=None,
    help="Tokenizer for the random prompts, on the host [default: the endpoint's model].",
)
@click.option(
    "--api-key-env",
    metavar="NAME",
    default=None,
    help="Environment variable (here) holding the endpoint's API key, if it has one.",
)
@click.option(
    "--gpu",
    "gpu_name",
    metavar="GPU",
    default=None,
    help="GPU model for the comparison with AMD's published points (mi300x, mi325x, "
    "mi355x) [default: the endpoint's plan's].",
)
@click.option("--no-save", is_flag=True, help="Do not store the run.")
@host_option
@json_option
def run(
    name: str | None,
    concurrency: str,
    requests: int | None,
    input_len: int,
    output_len: int,
    step_timeout: float,
    vllm_path: str | None,
    tokenizer: str | None,
    api_key_env: str | None,
    gpu_name: str | None,
    no_save: bool,
    host_spec: str | None,
    as_json: bool,
) -> int:
    """Benchmark NAME (or the only running endpoint): one step of its server's client per
    concurrency level, each bounded by --requests and --step-timeout."""
    from instinct_serve.runtime import bench as runner

    settings = model.Settings(
        concurrency=tuple(model.parse_concurrency(concurrency)),
        requests=requests,
        input_len=input_len,
        output_len=output_len,
        step_timeout_s=step_timeout,
    )
    api_key = runner.api_key_from(api_key_env)
    host = get_host(host_spec)
    endpoint = runner.resolve(host, name)

    if not as_json:
        sys.stderr.write(
            f"benchmarking {endpoint.name} ({endpoint.model}) on {host.name}: concurrency "
            f"{concurrency}, {input_len} in / {output_len} out tokens\n"
        )
    with StepProgress(settings, as_json) as steps:
        result, reference = runner.sweep(
            host,
            endpoint,
            settings,
            vllm=vllm_path,
            api_key=api_key,
            tokenizer=tokenizer,
            gpu_name=gpu_name,
            store=not no_save,
            on_step=steps.done,
            on_start=steps.start,
        )

    def human(con: Console) -> None:
        render_run(con, result)
        render_reference(con, reference)

    doc = result.to_dict() | {"reference": reference}
    if as_json:  # JSON Lines: the step events, then the result
        _line({"event": "result", **doc})
    else:
        emit(doc, False, human)
    return 0 if result.points and not result.errors else 1


def _line(doc: dict[str, Any]) -> None:
    import json

    from instinct_serve.jsonio import to_jsonable

    sys.stdout.write(json.dumps(to_jsonable(doc), ensure_ascii=False) + "\n")
    sys.stdout.flush()


class StepProgress:
    """The sweep as it goes: on a terminal a status line while a step runs and its figures
    when it ends; with --json one ``{"event": "step", ...}`` line per step on stdout."""

    def __init__(self, settings: model.Settings, as_json: bool) -> None:
        self.settings, self.as_json = settings, as_json
        self.total = len(settings.concurrency)
        self.index = 0
        self._status: Any = None
        self._spinner: Any = None

    def __enter__(self) -> StepProgress:
        from instinct_serve.cli.common import progress

        self._spinner = progress("benchmarking", enabled=not self.as_json)
        self._status = self._spinner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._spinner.__exit__(*exc)

    def start(self, level: int, index: int, total: int) -> None:
        self.index = index
        requests = self.settings.requests_for(level)
        self._status(
            f"step {index}/{total}: concurrency {level}, {requests} requests "
            f"(at most {self.settings.step_timeout_s:g} s)"
        )

    def done(self, level: int, point: Point | None, error: dict[str, Any] | None) -> None:
        import time

        if self.as_json:
            event = model.step_event(self.index, self.total, level, point, error)
            _line(event | {"ts": round(time.time(), 3)})
            return
        sys.stderr.write(f"[{self.index}/{self.total}] {_step_line(level, point, error)}\n")
        sys.stderr.flush()


def render_compare(con: Console, doc: dict[str, Any]) -> None:
    """Both runs per concurrency: A and B with their bars (the first to go on a narrow
    terminal), and B's change."""
    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows

    a, b = doc["a"], doc["b"]
    con.print(
        f"A: plan {escape(str(a['plan_hash']))} {escape(str(a['endpoint'] or a['path']))} "
        f"{escape(str(a['started_at']))}\n"
        f"B: plan {escape(str(b['plan_hash']))} {escape(str(b['endpoint'] or b['path']))} "
        f"{escape(str(b['started_at']))}"
    )
    for item in doc["compared"]:
        key, label, higher = item["key"], item["label"], item["higher_is_better"]
        values = [side for row in doc["steps"] for side in (row[key]["a"], row[key]["b"])]
        top = model.scale_max(values)
        table = Rows(
            [
                Column("CONC", right=True),
                Column("A", right=True),
                Column("", drop=1),
                Column("B", right=True),
                Column("", drop=1),
                Column("B VS A", right=True),
            ],
            label,
        )
        for row in doc["steps"]:
            cell = row[key]
            delta = cell["delta_pct"]
            colour = "white"
            if delta is not None and delta != 0:
                colour = "green" if (delta > 0) == higher else "red"
            table.add(
                str(row["concurrency"]),
                _fmt(cell["a"]),
                f"[blue]{model.bar(cell['a'], top, 24)}[/]",
                _fmt(cell["b"]),
                f"[magenta]{model.bar(cell['b'], top, 24)}[/]",
                "-" if delta is None else f"[{colour}]{delta:+.1f}%[/]",
            )
        table.print(con)


@bench.command("compare")
@click.argument("a")
@click.argument("b")
@json_option
def compare(a: str, b: str, as_json: bool) -> int:
    """Compare two stored runs: A and B are plan hashes (a unique prefix; the latest run of
    each) or result files (`instinct bench` or `vllm bench serve --save-result`)."""
    from instinct_serve.runtime import bench as runner

    doc = model.compare(runner.load(a), runner.load(b))
    emit(doc, as_json, lambda con: render_compare(con, doc))
    return 0


@bench.command("list")
@json_option
def list_runs(as_json: bool) -> int:
    """The stored runs, oldest first."""
    from instinct_serve.runtime import bench as runner

    runs = runner.stored()
    root = str(runner.store_root())
    items: list[dict[str, Any]] = [
        {
            "plan_hash": r.plan_hash,
            "endpoint": r.endpoint,
            "model": r.model,
            "started_at": r.started_at,
            "concurrency": [p.concurrency for p in r.points],
            "path": r.path,
        }
        for r in runs
    ]
    doc = {"root": root, "runs": items}

    def human(con: Console) -> None:
        from rich.markup import escape

        from instinct_serve.cli.tables import Column, Rows

        if not runs:
            con.print(f"No stored benchmark in {escape(root)}.")
            return
        table = Rows(
            [
                Column("PLAN", key=True),
                Column("ENDPOINT", key=True),
                Column("MODEL", key=True, drop=2),
                Column("STARTED", drop=1),
                Column("CONCURRENCY"),
            ],
            f"Benchmarks in {root}",
        )
        for item in items:
            table.add(
                escape(str(item["plan_hash"])),
                escape(str(item["endpoint"])),
                escape(str(item["model"])),
                escape(item["started_at"]),
                ",".join(str(c) for c in item["concurrency"]),
            )
        table.print(con)

    emit(doc, as_json, human)
    return 0
