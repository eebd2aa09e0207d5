"""The ``instinct`` command: a lazy click group and the error boundary.

Subcommand modules are imported only when that subcommand runs, and ``--version`` is
answered before click is imported at all, so start-up stays close to a bare interpreter.
Every ``InstinctError`` becomes a one-line message (or a JSON error document with
``--json``) and its exit code; nothing a user types produces a traceback.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not `from typing import`: typing costs ~5 ms on the --version path

if TYPE_CHECKING:
    from typing import Any, NoReturn

# name -> (module, attribute, one-line help). The help is here so `instinct --help` lists
# every command without importing any of them.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "detect": ("instinct_serve.cli.detect", "detect", "Detect the AMD GPUs of the host."),
    "check": (
        "instinct_serve.cli.check",
        "check",
        "Check that the host can serve (docker, devices, groups, ...).",
    ),
    "recipes": ("instinct_serve.cli.recipes", "recipes", "List, show and sync the model recipes."),
    "fit": (
        "instinct_serve.cli.fit",
        "fit",
        "Will this model fit? Memory, context and GPUs needed.",
    ),
    "plan": ("instinct_serve.cli.plan", "plan", "Print the exact launch command for a model."),
    "pull": (
        "instinct_serve.cli.pull",
        "pull",
        "Fetch a model's image and weights in parallel, ahead of serve.",
    ),
    "serve": ("instinct_serve.cli.serve", "serve", "Launch, health-check and warm up an endpoint."),
    "partition": (
        "instinct_serve.cli.partition",
        "partition",
        "Show the GPUs' partition mode (CPX, NPS4...) or change it (--yes).",
    ),
    "ps": ("instinct_serve.cli.containers", "ps", "List the endpoints this tool runs on the host."),
    "logs": ("instinct_serve.cli.containers", "logs", "Show (or follow) an endpoint's log."),
    "stop": ("instinct_serve.cli.containers", "stop", "Stop endpoints this tool started."),
    "watch": (
        "instinct_serve.cli.watch",
        "watch",
        "Supervise an endpoint: health-check, restart with backoff, re-prove.",
    ),
    "rollback": (
        "instinct_serve.cli.watch",
        "rollback",
        "Serve an endpoint's last good plan again (after serve --upgrade).",
    ),
    "cache": (
        "instinct_serve.cli.cache",
        "cache",
        "List or prune the compile caches kept per image and gfx.",
    ),
    "top": ("instinct_serve.cli.top", "top", "Live load, latency, tokens/s and tokens per watt."),
    "bench": ("instinct_serve.cli.bench", "bench", "Benchmark an endpoint; compare two plans."),
    "diagnose": (
        "instinct_serve.cli.diagnose",
        "diagnose",
        "Explain a failing log or symptom and how to fix it.",
    ),
    "engine": (
        "instinct_serve.cli.engine",
        "engine",
        "Native vLLM without Docker: detect, install, check.",
    ),
    "mcp": ("instinct_serve.cli.agents", "mcp", "Run the MCP server (stdio) for AI agents."),
    "skill": ("instinct_serve.cli.agents", "skill", "Print the agent skill guide (SKILL.md)."),
    "completion": (
        "instinct_serve.cli.completion",
        "completion",
        "Print the shell completion script.",
    ),
}


def _version() -> str:
    from instinct_serve import __version__

    return __version__


def _build_group() -> Any:
    import importlib

    import click

    class LazyGroup(click.Group):
        """A group whose subcommands are imported on first use."""

        def list_commands(self, ctx: click.Context) -> list[str]:
            return list(COMMANDS)

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            entry = COMMANDS.get(cmd_name)
            if entry is None:
                return None
            module = importlib.import_module(entry[0])
            command: click.Command = getattr(module, entry[1])
            return command

        def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
            rows = [(name, entry[2]) for name, entry in COMMANDS.items()]
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    @click.group(
        cls=LazyGroup,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    )
    @click.version_option(_version(), "--version", "-V", prog_name="instinct")
    def cli() -> None:
        """Serve Hugging Face models as OpenAI-compatible vLLM endpoints on AMD Instinct GPUs.

        \b
        Typical session:
          instinct detect                      # what GPUs are here
          instinct check                       # can this host serve?
          instinct fit Qwen/Qwen3.5-9B         # will it fit?
          instinct plan Qwen/Qwen3.5-9B        # the exact docker run
          instinct serve Qwen/Qwen3.5-9B       # launch, wait, warm up

        Every command takes --json for stable machine-readable output and --host
        user@host to act on a remote machine over ssh.
        """

    return cli


def _wants_json(argv: list[str]) -> bool:
    from itertools import pairwise

    lowered = [a.lower() for a in argv]
    pairs = pairwise(lowered)
    return "--json" in argv or "--format=json" in lowered or ("--format", "json") in pairs


def _fail(exc: Any, argv: list[str]) -> NoReturn:
    """Print an InstinctError the way users and agents expect, and exit with its code."""
    from instinct_serve.errors import InstinctError

    assert isinstance(exc, InstinctError)
    if _wants_json(argv):
        import json

        sys.stdout.write(json.dumps({"error": exc.to_dict()}, indent=2) + "\n")
    else:
        sys.stderr.write(f"Error: {exc.message}\n")
        if exc.fix:
            sys.stderr.write(f"Fix: {exc.fix}\n")
    sys.exit(int(exc.exit_code))


def _usage_error(exc: Any) -> Any:
    """A click usage error (unknown option, missing argument, bad choice) as an
    ``InstinctError``: ``Error: ...`` and ``Fix: ...`` on stderr as every other error, and
    ``{"error": ...}`` on stdout with ``--json``."""
    from instinct_serve.errors import UsageError

    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "instinct"
    message = exc.format_message()
    return UsageError(
        message[:1].lower() + message[1:],
        fix=f"see `{command} --help`",
        id="bad_usage",
    )


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["-V"]):  # fast path: no click, no rich
        sys.stdout.write(f"instinct, version {_version()}\n")
        return

    import click

    from instinct_serve.cli.common import new_command
    from instinct_serve.errors import InstinctError

    new_command()  # warnings are said once per command, and this is a new one
    cli = _build_group()
    try:
        rv = cli.main(args=args, prog_name="instinct", standalone_mode=False)
    except InstinctError as exc:
        _fail(exc, args)
    except click.exceptions.Abort:
        sys.stderr.write("Aborted.\n")
        sys.exit(130)
    except click.UsageError as exc:  # click's own (no such option, bad choice): ours too
        _fail(_usage_error(exc), args)
    except click.ClickException as exc:
        if _wants_json(args):
            _fail(_usage_error(exc), args)
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(1)
    except Exception as exc:  # a bug, not bad input: say so without a wall of text
        if os.environ.get("INSTINCT_DEBUG"):
            raise
        sys.stderr.write(
            f"Internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in instinct-serve; rerun with INSTINCT_DEBUG=1 for the traceback "
            "and report it.\n"
        )
        sys.exit(1)
    sys.exit(int(rv) if isinstance(rv, int) else 0)
