"""Help that fits a screen: the long commands (``serve``, ``plan``, ``pull``) show their
options grouped (what, where, how), each with the first sentence of its help, the rest of
them by name only, then two or three examples. ``--help-all`` prints click's full help
(every option's whole text, the ``--json`` stream).

The groups are data (``SECTIONS``, by the options' parameter names); an option not in a
group of its command is "advanced". ``tests/test_help.py`` keeps every ``--help`` within
80 lines at 80 columns.
"""

from __future__ import annotations

from typing import Any

import click

from instinct_serve.options.spec import first_sentence

Sections = tuple[tuple[str, tuple[str, ...]], ...]

SECTIONS: dict[str, Sections] = {
    "serve": (
        ("What to serve", ("precision", "max_model_len", "engine", "image", "features")),
        ("Where", ("host_spec", "gpu", "gpu_count", "gpus", "port", "name", "public", "hosts")),
        ("How", ("tp", "objective", "replicas", "yes", "detach", "replace", "upgrade")),
        ("Output", ("as_json",)),
    ),
    "plan": (
        ("What to plan", ("precision", "max_model_len", "image", "features")),
        ("Where", ("host_spec", "gpu", "gpu_count", "gpus", "port", "public", "hosts")),
        ("How", ("tp", "objective", "replicas")),
        ("Output", ("fmt", "as_list", "as_json")),
    ),
    "pull": (
        ("What to fetch", ("precision", "image", "features")),
        ("Where", ("host_spec", "gpu", "hf_cache")),
        ("Output", ("as_json",)),
    ),
}

EXAMPLES: dict[str, tuple[str, ...]] = {
    "serve": (
        "instinct serve meta-llama/Llama-3.1-8B-Instruct",
        "instinct serve Qwen/Qwen3.5-9B --host user@gpu-box --port 8001 --yes",
        "instinct serve MODEL --engine native --gpus 0,1 --yes -- --max-num-seqs 64",
    ),
    "plan": (
        "instinct plan Qwen/Qwen3.5-9B",
        "instinct plan deepseek-ai/DeepSeek-R1 --gpu mi300x --list",
        "instinct plan MODEL --format docker > run.sh",
    ),
    "pull": (
        "instinct pull Qwen/Qwen3.5-9B",
        "instinct pull MODEL --host user@gpu-box --json",
    ),
}

_ADVANCED = {
    "serve": "Advanced (--help-all: what each does)",
    "plan": "Advanced (--help-all: what each does)",
    "pull": "Also taken: they shape the plan fetched for (--help-all)",
}


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())


def _names(formatter: click.HelpFormatter, names: list[str]) -> None:
    """Option names as a paragraph, never broken at a hyphen (``--env-literal``)."""
    import textwrap

    indent = " " * formatter.current_indent
    width = max((formatter.width or 80) - formatter.current_indent, 20)
    lines = textwrap.wrap(", ".join(names), width, break_on_hyphens=False)
    formatter.write("".join(f"{indent}{line}\n" for line in lines))


class GroupedCommand(click.Command):
    """A command whose ``--help`` fits a screen (``SECTIONS``); ``--help-all``: all of it."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if ctx.meta.get("help_all") or self.name not in SECTIONS:
            super().format_help(ctx, formatter)
            return
        self.format_usage(ctx, formatter)
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(_first_paragraph(self.help))
        params = {p.name: p for p in self.get_params(ctx) if isinstance(p, click.Option)}
        shown: set[str] = set()
        for title, names in SECTIONS[self.name]:
            rows = []
            for name in names:
                param = params.get(name)
                if param is None or param.hidden:
                    continue
                record = param.get_help_record(ctx)
                if record is not None:
                    rows.append((record[0], first_sentence(record[1])))
                    shown.add(name)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [
            p.opts[-1] if p.opts[-1].startswith("--") else p.opts[0]
            for name, p in params.items()
            if name not in shown and not p.hidden and not {"--help", "--help-all"} & set(p.opts)
        ]
        if rest:
            with formatter.section(_ADVANCED[self.name]):
                _names(formatter, rest)
        with formatter.section("Examples"):
            for line in EXAMPLES[self.name]:
                formatter.write_text(line)


def _show_all(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    ctx.meta["help_all"] = True
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit()


def help_all_option(func: Any) -> Any:
    """``--help-all``: every option with its whole help (the grouped ``--help`` is short)."""
    return click.option(
        "--help-all",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_show_all,
        help="Every option with its whole help, and the details of --json.",
    )(func)
