"""The safe-by-default audit (issues 19 and 26): fuzz every command and count what goes wrong.

Six campaigns, generated with hypothesis (``tests/infra/fuzz.py``), run in this process
through the CLI's entry point (``cli.main.main``) and the MCP server's handler, offline and
with the caches in a temporary directory:

- options: ``instinct fit|plan`` with random values for one to three options (numbers,
  NaN, inf, huge, negative, unicode, control characters), a quarter without ``--json``;
- parse: ``FitRequest.parse`` / ``PlanOptions.parse`` with random JSON values (what an MCP
  client sends);
- config values: ``fit|plan DIR`` where DIR holds a real config.json with one to four
  values replaced;
- corrupt directories: ``fit DIR`` on damaged model directories (config.json, safetensors
  headers, index; files that are directories, FIFOs, link loops, unreadable), every third
  also ``plan DIR --gpu mi300x`` and every fifth the MCP ``fit`` tool;
- commands: every leaf command of ``instinct`` (``bench`` and ``cache`` included) with random
  arguments and options, special paths among the values (``tests/infra/fuzz_commands.py``);
- files: the places the tool reads (recipes cache, plan records, journal, proof records, key
  files, native state, bench store, compile cache meta, ``diagnose --log``, ``recipes
  import``) made a FIFO, a link to ``/dev/zero``, a link loop, a 10 GB sparse file, a
  directory, truncated JSON, random bytes or JSON of the wrong shape, then every command
  that reads the place.

The last two run in a sandbox (no Docker, network, ssh, HOME or stdin of this machine) and
accept any registered error id (``error_ids``) but ``internal_error``.

A run is correct when it ends in a result or in an error id of the documented set
(``KNOWN_ERRORS``) within 5 s, with no traceback and no "Internal error". Prints the figures
(runs, tracebacks, internal errors, hangs, slow runs) and the runs by outcome; exit 1 if
anything was found.

Run: .venv/bin/python bench/fuzz_audit.py [--cli-runs 2000] [--dirs 1000] [--commands 1500]
[--files 400] [--seed N] (``--cli-runs`` is split between the options and the config-values
campaigns; a files case runs every command that reads its place, two or three on average.)
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tests.infra import fuzz  # noqa: E402
from tests.infra import fuzz_commands as fc  # noqa: E402

GPU_OPTIONS = {"gpu", "gfx", "vram_gb", "vram_gib", "gpu_count", "gpus", "sysfs_root"}
CLI_TEXT = st.one_of(
    fuzz.texts,
    fuzz.numbers.map(str),
    st.sampled_from(
        [
            "-1",
            "0",
            "nan",
            "inf",
            "-inf",
            "1e999",
            "0x10",
            "32k",
            "9" * 60,
            "mi300x",
            "gfx942",
            "A=B",
            "HF_TOKEN=x",
            "BAD-NAME=1",
            "0,1",
            "0,0",
            "1024",
            "--json",
            "fp8",
            "\x1b[31m",
        ]
    ),
)


class Tally:
    """Outcomes of one campaign."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.outcomes: list[fuzz.Outcome] = []

    def add(self, outcome: fuzz.Outcome) -> None:
        self.outcomes.append(outcome)

    def figures(self) -> dict[str, Any]:
        runs = self.outcomes
        return {
            "runs": len(runs),
            "tracebacks": sum(o.traceback for o in runs),
            "internal_errors": sum(o.internal_error for o in runs),
            "hangs": sum(o.hang for o in runs),
            "slow": sum(o.seconds > fuzz.LIMIT_S and not o.hang for o in runs),
            "findings": sum(bool(o.problems()) for o in runs),
            "max_s": round(max((o.seconds for o in runs), default=0.0), 2),
        }

    def by_label(self) -> collections.Counter[str]:
        return collections.Counter(o.label for o in self.outcomes)


def run(
    strategy: st.SearchStrategy[Any], count: int, seed: int, body: Callable[[Any], None]
) -> None:
    """``body`` on ``count`` values drawn from ``strategy`` (generation only: no shrinking)."""
    if count < 1:
        return

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def campaign(value: Any) -> None:
        body(value)

    campaign()


@st.composite
def cli_option_runs(draw: st.DrawFn) -> list[str]:
    """``fit|plan MODEL`` with one to three options given random values."""
    from instinct_serve.options import FitRequest, PlanOptions, declared

    job = draw(st.sampled_from(["fit", "plan"]))
    cls = FitRequest if job == "fit" else PlanOptions
    specs = [(n, s) for n, s, _d in declared(cls) if s.cli and not s.positional]
    picked = draw(
        st.lists(st.sampled_from(specs), min_size=1, max_size=3, unique_by=lambda p: p[0])
    )
    model = draw(st.sampled_from(["Qwen/Qwen3-8B", "Qwen/Qwen3.5-9B", "openai/gpt-oss-120b"]))
    argv = [job, model]
    if not any(name in GPU_OPTIONS for name, _s in picked):
        argv += ["--gpu", "mi300x"]
    for name, spec in picked:
        flag = spec.spelling(name).split("/")[0]
        if spec.kind == "bool":
            argv.append(flag)
        elif spec.kind == "tristate":
            argv.append(draw(st.sampled_from(spec.spelling(name).split("/"))))
        else:
            for _ in range(draw(st.integers(min_value=1, max_value=2))):
                argv += [flag, draw(CLI_TEXT)]
    if draw(st.integers(min_value=0, max_value=3)):
        argv.append("--json")
    if draw(st.integers(min_value=0, max_value=5)) == 0:
        argv += ["--", *draw(st.lists(CLI_TEXT, max_size=4))]
    return argv


@st.composite
def parse_runs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    from instinct_serve.options import FitRequest, PlanOptions, declared

    job = draw(st.sampled_from(["fit", "plan"]))
    cls = FitRequest if job == "fit" else PlanOptions
    names = [n for n, _s, _d in declared(cls)]
    raw = draw(
        st.dictionaries(
            st.one_of(st.sampled_from(names), st.sampled_from(names), st.text(max_size=8)),
            st.one_of(fuzz.json_values, CLI_TEXT),
            min_size=1,
            max_size=3,
        )
    )
    if job == "fit" and draw(st.booleans()):
        raw.setdefault("model", "Qwen/Qwen3-8B")
    return job, raw


def command_campaigns(base: Path, args: argparse.Namespace) -> list[Tally]:
    """The commands and files campaigns, in their sandbox."""
    commands = Tally("commands (CLI, every command)")
    files = Tally("special and corrupt files (CLI readers)")
    with fc.sandbox(base / "sandbox") as box:
        table = fc.commands()
        run(
            fc.command_runs(box, table),
            args.commands,
            args.seed,
            lambda argv: commands.add(fc.run_command(argv, hang_s=args.hang_s)),
        )

        def file_one(case: tuple[str, str, bytes]) -> None:
            for outcome in fc.run_file_case(box, *case, hang_s=args.hang_s):
                files.add(outcome)

        run(fc.file_runs(), args.files, args.seed, file_one)
    return [commands, files]


def command_of(outcome: fuzz.Outcome, paths: set[tuple[str, ...]]) -> str:
    """The command a run exercised (``cache prune``, ``bench run``, ``mcp``, ``parse``)."""
    if outcome.surface != "cli" or not isinstance(outcome.args, list):
        return outcome.surface
    words = tuple(a for a in outcome.args if not a.startswith("[fz:"))
    for size in (2, 1):
        if words[:size] in paths:
            return " ".join(words[:size])
    if words[:1] == ("bench",):
        return "bench run"  # bench's default subcommand
    return words[0] if words else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli-runs", type=int, default=2000)
    parser.add_argument("--dirs", type=int, default=1000)
    parser.add_argument("--commands", type=int, default=1500)
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--show", type=int, default=15, help="findings to describe")
    parser.add_argument(
        "--hang-s", type=float, default=fuzz.HANG_S, help="stop a run after this long (a hang)"
    )
    args = parser.parse_args()

    import instinct_serve

    print(f"auditing {Path(instinct_serve.__file__).parent} (seed {args.seed})")
    tallies: list[Tally] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fuzz-audit-") as tmp:
        base = Path(tmp)
        with fuzz.isolated_env(base):
            from instinct_serve.options import FitRequest, PlanOptions

            options = Tally("options (CLI)")
            tallies.append(options)
            run(
                cli_option_runs(),
                args.cli_runs // 2,
                args.seed,
                lambda a: options.add(fuzz.run_cli(a, hang_s=args.hang_s)),
            )

            parsed = Tally("options (parse)")
            tallies.append(parsed)

            def parse_one(value: tuple[str, dict[str, Any]]) -> None:
                job, raw = value
                cls = FitRequest if job == "fit" else PlanOptions
                parsed.add(fuzz.run_parse(cls.parse, raw))

            run(parse_runs(), args.cli_runs // 2, args.seed, parse_one)

            values = Tally("config values (CLI)")
            tallies.append(values)
            counter = [0]

            def config_one(value: tuple[str, dict[str, Any]]) -> None:
                job, doc = value
                counter[0] += 1
                folder = base / f"cfg{counter[0]}"
                folder.mkdir()
                (folder / "config.json").write_bytes(fuzz.dumps(doc))
                values.add(
                    fuzz.run_cli(
                        [job, str(folder), "--gpu", "mi300x", "--json"], hang_s=args.hang_s
                    )
                )

            run(
                st.tuples(st.sampled_from(["fit", "plan"]), fuzz.config_docs()),
                args.cli_runs - args.cli_runs // 2,
                args.seed,
                config_one,
            )

            dirs = Tally("corrupt directories (CLI fit, plan; MCP fit)")
            tallies.append(dirs)

            def dir_one(entries: dict[str, fuzz.Entry]) -> None:
                counter[0] += 1
                folder = fuzz.build_dir(base / f"dir{counter[0]}", entries)
                dirs.add(
                    fuzz.run_cli(
                        ["fit", str(folder), "--gpu", "mi300x", "--json"], hang_s=args.hang_s
                    )
                )
                if counter[0] % 3 == 0:
                    dirs.add(
                        fuzz.run_cli(
                            ["plan", str(folder), "--gpu", "mi300x", "--json"], hang_s=args.hang_s
                        )
                    )
                if counter[0] % 5 == 0:
                    dirs.add(
                        fuzz.run_mcp(
                            "fit", {"model": str(folder), "gpu": "mi300x"}, hang_s=args.hang_s
                        )
                    )

            run(fuzz.model_dirs(), args.dirs, args.seed, dir_one)
            tallies += command_campaigns(base, args)

    findings = [o for t in tallies for o in t.outcomes if o.problems()]
    total = {
        key: sum(t.figures()[key] for t in tallies)
        for key in ("runs", "tracebacks", "internal_errors", "hangs", "slow", "findings")
    }
    print(
        f"\n{'campaign':48} {'runs':>6} {'tracebacks':>10} {'internal':>9} {'hangs':>6}"
        f" {'slow':>5} {'max s':>6}"
    )
    for t in tallies:
        f = t.figures()
        print(
            f"{t.name:48} {f['runs']:>6} {f['tracebacks']:>10} {f['internal_errors']:>9} "
            f"{f['hangs']:>6} {f['slow']:>5} {f['max_s']:>6}"
        )
    print(
        f"{'total':48} {total['runs']:>6} {total['tracebacks']:>10} "
        f"{total['internal_errors']:>9} {total['hangs']:>6} {total['slow']:>5}"
    )
    print("\nruns per command (every campaign)")
    paths = {c.path for c in fc.commands()}
    per_command = collections.Counter(command_of(o, paths) for t in tallies for o in t.outcomes)
    for name, n in sorted(per_command.items()):
        print(f"  {n:6}  {name}")
    for t in tallies:
        print(f"\n{t.name}: runs by outcome")
        for label, n in t.by_label().most_common():
            print(f"  {n:6}  {label}")
    if findings:
        print(f"\n{len(findings)} finding(s); the first {min(args.show, len(findings))}:")
        for outcome in findings[: args.show]:
            print("  - " + outcome.describe()[:3000])
    print(f"\n{time.monotonic() - started:.0f} s")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
