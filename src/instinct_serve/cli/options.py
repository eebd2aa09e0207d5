"""Click options generated from the options types of ``instinct_serve.options``.

The CLI declares no option of fit, plan or serve by hand: ``options_for(FitRequest)`` turns
each declared field into a click argument or option (its flag, metavar, help and default),
and ``parse_cli`` hands what click collected to the type's own ``parse``. Click only
splits the command line; every value is converted and checked by ``parse``, so a bad value
gets the same error id here as from the MCP server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from instinct_serve.options import JobOptions, Opt, declared

F = TypeVar("F", bound=Callable[..., Any])
O = TypeVar("O", bound=JobOptions)  # noqa: E741


def _complete(spec: Opt, name: str) -> Callable[..., list[str]] | None:
    if spec.kind == "choice":
        choices = spec.choices

        def choice(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
            return [c for c in choices if c.startswith(incomplete)]

        return choice
    if spec.kind == "gpu":

        def gpu(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
            from instinct_serve.hardware.profiles import GFX_TARGETS, PROFILES

            keys = [*PROFILES, *GFX_TARGETS]
            return [k for k in keys if k.startswith(incomplete.lower())]

        return gpu
    return None


def _help(spec: Opt, default: Any) -> str:
    text = spec.help
    if spec.kind == "choice":
        text += " One of: " + ", ".join(spec.choices) + "."
    if spec.kind not in ("bool", "tristate") and default not in (None, "", [], {}):
        text += f"  [default: {default}]"
    return text


def _param(name: str, spec: Opt, default: Any) -> Callable[[F], F]:
    if spec.positional:
        if spec.kind == "args":
            return click.argument(name, nargs=-1, type=click.UNPROCESSED)
        required = default in ("", None)
        return click.argument(name, required=required, default=None)
    flag = spec.spelling(name)
    decls = [flag] + ([spec.short] if spec.short else []) + [name]
    common: dict[str, Any] = {"help": _help(spec, default), "hidden": spec.hidden}
    if spec.kind == "bool":
        return click.option(*decls, is_flag=True, default=False, **common)
    if spec.kind == "tristate":
        return click.option(*decls, default=None, **common)
    if spec.kind in ("texts", "env"):
        return click.option(*decls, multiple=True, metavar=spec.metavar, **common)
    return click.option(
        *decls,
        default=None,
        metavar=spec.metavar or name.upper(),
        shell_complete=_complete(spec, name),
        **common,
    )


def options_for(cls: type[JobOptions], *, skip: tuple[str, ...] = ()) -> Callable[[F], F]:
    """A decorator adding every CLI option of ``cls`` (in declaration order)."""
    params = [
        _param(name, spec, default)
        for name, spec, default in declared(cls)
        if spec.cli and name not in skip
    ]

    def apply(func: F) -> F:
        for param in reversed(params):
            func = param(func)
        return func

    return apply


def parse_cli(cls: type[O], kwargs: dict[str, Any], **fixed: Any) -> O:
    """The typed options from click's keyword arguments (other keys are ignored).

    ``instinct plan -- --max-num-seqs 64`` (no model) leaves click a first "model" that is
    a flag: it goes back to the arguments for vLLM. ``fixed`` sets fields that are not
    options (the engine a command implies).
    """
    names = {name for name, spec, _d in declared(cls) if spec.cli}
    raw = {k: v for k, v in kwargs.items() if k in names}
    model = raw.get("model")
    if "extra_args" in names and isinstance(model, str) and model.startswith("-"):
        raw["extra_args"] = (model, *(raw.get("extra_args") or ()))
        raw["model"] = None
    options = cls.parse(raw)
    for key, value in fixed.items():
        setattr(options, key, value)
    if fixed:
        options.check()
    return options
