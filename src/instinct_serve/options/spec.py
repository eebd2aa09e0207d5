"""How an option is declared, converted and bounded: ``Opt``, ``opt`` and ``JobOptions``.

A job's options type (``options.jobs``, ``options.cluster``) is a dataclass whose fields
carry an ``Opt``; ``JobOptions.parse`` turns what a person typed or an agent sent into the
typed options with the same conversions, bounds and error ids (``bad_<option>``, exit 2)
whoever the caller is. Every number is bounded here, before any arithmetic sees it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar

from instinct_serve.errors import UsageError
from instinct_serve.names import CONTAINER_NAME, ENV_NAME_RULE, is_env_name
from instinct_serve.units import token_count

Kind = Literal[
    "text",  # a string (stripped, bounded)
    "int",  # a whole number
    "float",  # a finite number
    "tokens",  # a context length: 32768, 32k, 32K
    "bool",  # a flag
    "tristate",  # --x/--no-x with "unset" meaning the default
    "choice",  # one of ``choices``
    "gpu",  # a GPU profile or a gfx target (hardware.profiles)
    "indices",  # device indices: "0,1" or [0, 1]
    "env",  # NAME=VALUE items or a mapping (a bare NAME goes to ``names_into``)
    "names",  # environment variable names (passed by name: the value stays outside)
    "texts",  # a repeatable string option
    "args",  # arguments passed to `vllm serve` as they are
]

MAX_TEXT = 4096
MAX_ITEMS = 64


class Opt(NamedTuple):
    """How one option is spelled, converted, bounded and explained."""

    kind: Kind
    help: str
    flag: str = ""  # the CLI spelling; "" means --<name with dashes>
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # (low, high] instead of [low, high]
    check: Callable[[Any], str | None] | None = None  # extra rule: the problem, or None
    max_length: int = 512
    fix: str = ""
    cli: bool = True  # offered on the command line
    mcp: bool = True  # offered to agents
    hidden: bool = False  # on the command line but not in --help (tests, chroots)
    error_id: str = ""  # "" means bad_<name>
    short: str | None = None  # a one-letter alias, e.g. -y
    positional: bool = False
    names_into: str = ""  # kind "env": the field that takes the bare NAME items
    agent_help: str = ""  # the help in an MCP caller's words, where ``help`` names flags

    def described(self, agent: bool = False) -> str:
        return self.agent_help if agent and self.agent_help else self.help

    def spelling(self, name: str) -> str:
        return self.flag or "--" + name.replace("_", "-")


def first_sentence(text: str) -> str:
    """An option's help up to its first full stop outside parentheses (not ``e.g.``),
    without click's ``[default: ...]``: the CLI's grouped --help (the whole text is
    ``--help-all``'s) and the MCP schema's descriptions."""
    text = re.sub(r"\s*\[default: [^\]]*\]", "", " ".join(text.split()))
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        end = i + 1 == len(text) or text[i + 1] == " "
        if char == "." and depth == 0 and end and not text[: i + 1].endswith(_ABBREVIATIONS):
            return text[: i + 1]
    return text.rstrip(".") + "."


_ABBREVIATIONS = ("e.g.", "i.e.", "...", "etc.")


def opt(default: Any = None, **spec: Any) -> Any:
    """A dataclass field carrying its ``Opt`` (``field(default=..., metadata=...)``)."""
    meta = {"opt": Opt(**spec)}
    if isinstance(default, (list, dict)):
        factory: Callable[[], Any] = list if isinstance(default, list) else dict
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def option_of(cls: type, name: str) -> Opt:
    for f in fields(cls):
        if f.name == name:
            return f.metadata["opt"]  # type: ignore[no-any-return]
    raise KeyError(name)


def declared(cls: type) -> list[tuple[str, Opt, Any]]:
    """(name, Opt, default) of every option field of ``cls``, in declaration order."""
    out = []
    for f in fields(cls):
        spec = f.metadata.get("opt")
        if spec is None:
            continue
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
        out.append((f.name, spec, default))
    return out


# ----------------------------------------------------------------------------- checks


def _power_of_two(value: int) -> str | None:
    if value & (value - 1):
        return "is not a power of two (use 1, 2, 4, 8, ...)"
    return None


def _container_name(value: str) -> str | None:
    if not CONTAINER_NAME.fullmatch(value):
        return "is not a container name (letters, digits, '_', '.', '-'; 128 at most)"
    return None


# NCCL_SOCKET_IFNAME syntax: comma-separated prefixes, "^" to exclude, "=" for an exact name.
IFNAME_LIST = re.compile(r"\^?=?[A-Za-z0-9_.:-]{1,15}(?:,=?[A-Za-z0-9_.:-]{1,15}){0,15}")


def _ifname(value: str) -> str | None:
    if not IFNAME_LIST.fullmatch(value):
        return "is not an interface name or NCCL_SOCKET_IFNAME list (eth0, ib0, ^lo,docker)"
    return None


# ----------------------------------------------------------------------------- conversion


def choice_of(text: str, choices: tuple[str, ...] | list[str]) -> str | None:
    """The choice ``text`` names, whatever its case (``FP8``, ``Throughput``, ``V1``,
    ``ROCM`` are ``fp8``, ``throughput``, ``v1``, ``rocm``); None for none of them. The one
    rule for choices: the options of every job, and the CLI's own (``cli.common.choice``)."""
    folded = text.strip().casefold()
    return next((c for c in choices if c.casefold() == folded), None)


T = TypeVar("T")


def _fail(name: str, spec: Opt, value: Any, problem: str, fix: str | None = None) -> UsageError:
    shown = value if isinstance(value, str) else repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    flag = spec.spelling(name).split("/")[0]
    return UsageError(
        f"{flag} {shown}: {problem}",
        fix=fix or spec.fix or _default_fix(flag, spec),
        id=spec.error_id or f"bad_{name}",
        details={"option": name},
    )


def _default_fix(flag: str, spec: Opt) -> str:
    if spec.choices:
        return f"use {flag} with one of: " + ", ".join(spec.choices)
    if spec.low is not None or spec.high is not None:
        left = "(" if spec.low_open else "["
        return f"use {flag} with a value in {left}{_fmt(spec.low)}, {_fmt(spec.high)}]"
    return f"see `instinct --help` for {flag}"


def _number(name: str, spec: Opt, value: Any, integral: bool) -> int | float:
    if isinstance(value, bool):
        raise _fail(name, spec, value, "is not a number")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 40:
            raise _fail(name, spec, value, "is not a number")
        try:
            number: int | float = int(text) if integral else float(text)
        except ValueError:
            raise _fail(
                name, spec, value, "is not a whole number" if integral else "is not a number"
            ) from None
    elif isinstance(value, (int, float)):
        number = value
    else:
        raise _fail(name, spec, value, "is not a number")
    if isinstance(number, float):
        if not math.isfinite(number):
            raise _fail(name, spec, value, "is not a finite number")
        if integral:
            if not number.is_integer():
                raise _fail(name, spec, value, "is not a whole number")
            number = int(number)
    _bounds(name, spec, value, number)
    return number


def _bounds(name: str, spec: Opt, value: Any, number: float) -> None:
    low, high = spec.low, spec.high
    too_low = low is not None and (number <= low if spec.low_open else number < low)
    too_high = high is not None and number > high
    if too_low or too_high:
        left = "(" if spec.low_open else "["
        span = f"{left}{_fmt(low)}, {_fmt(high)}]"
        raise _fail(name, spec, value, f"is outside {span}")


def _fmt(bound: float | None) -> str:
    if bound is None:
        return "..."
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _text(name: str, spec: Opt, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(name, spec, value, "is not text")
    text = value.strip()
    if not text:
        raise _fail(name, spec, value, "is empty")
    if len(text) > spec.max_length:
        raise _fail(name, spec, value, f"is longer than {spec.max_length} characters")
    if any(ord(c) < 32 for c in text):
        raise _fail(name, spec, value, "contains control characters")
    return text


def _items(name: str, spec: Opt, value: Any) -> list[Any]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) > MAX_ITEMS:
        raise _fail(name, spec, f"({len(items)} items)", f"takes at most {MAX_ITEMS}")
    return items


_NOT_ENV_NAME = f"is not an environment variable name ({ENV_NAME_RULE})"


def _env_items(name: str, spec: Opt, value: Any) -> tuple[dict[str, str], list[str]]:
    """``NAME=VALUE`` items (or a mapping) and the bare ``NAME`` items (passed by name: the
    value is taken from the caller's environment at launch, never written down)."""
    pairs: list[tuple[Any, Any]] = []
    bare: list[str] = []
    if isinstance(value, Mapping):
        pairs = list(value.items())
    else:
        for item in _items(name, spec, value):
            key, sep, val = str(item).partition("=")
            if sep:
                pairs.append((key, val))
            elif spec.names_into:
                if not is_env_name(key):
                    raise _fail(name, spec, key, _NOT_ENV_NAME)
                bare.append(key)
            else:
                raise _fail(name, spec, item, "use NAME=VALUE")
    env: dict[str, str] = {}
    for key, val in pairs:
        if not is_env_name(key):
            raise _fail(name, spec, key, _NOT_ENV_NAME)
        if not isinstance(val, str) or len(val) > MAX_TEXT or "\0" in val:
            raise _fail(name, spec, key, "has a value that is not text (or is too long)")
        env[key] = val
    if len(env) + len(bare) > MAX_ITEMS:
        raise _fail(name, spec, "", f"takes at most {MAX_ITEMS} variables")
    return env, list(dict.fromkeys(bare))


_LIST_KINDS = ("indices", "env", "names", "texts", "args")


def _convert(name: str, spec: Opt, value: Any) -> Any:
    kind = spec.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise _fail(name, spec, value, "is a flag: true or false")
    if kind == "tristate":
        if value is None or isinstance(value, bool):
            return value
        raise _fail(name, spec, value, "is true, false or unset")
    if kind == "int":
        number = _number(name, spec, value, integral=True)
        problem = spec.check(number) if spec.check else None
        if problem:
            raise _fail(name, spec, value, problem)
        return number
    if kind == "float":
        return float(_number(name, spec, value, integral=False))
    if kind == "tokens":
        if isinstance(value, bool):
            raise _fail(name, spec, value, "is not a number of tokens")
        count = value if isinstance(value, int) else token_count(str(value))
        if count is None:
            raise _fail(name, spec, value, "use a number of tokens such as 32768, 32k or 32K")
        _bounds(name, spec, value, count)
        return count
    if kind == "choice":
        text = _text(name, spec, value)
        found = choice_of(text, spec.choices)
        if found is None:
            raise _fail(name, spec, value, "is not one of " + ", ".join(spec.choices))
        return found
    if kind in _LIST_KINDS:
        return _convert_items(name, spec, value)
    text = _text(name, spec, value)
    if kind == "gpu":
        from instinct_serve.hardware.profiles import get_profile

        try:
            get_profile(text)
        except UsageError as exc:
            if exc.id == "not_amd_gpu":  # an NVIDIA name: say so, with its own id
                raise UsageError(
                    f"{spec.spelling(name)} {text}: {exc.message}",
                    fix=exc.fix,
                    id=exc.id,
                    details={"option": name},
                ) from None
            raise _fail(name, spec, value, "is not a GPU this tool plans for", exc.fix) from None
        return text
    problem = spec.check(text) if spec.check else None
    if problem:
        raise _fail(name, spec, value, problem)
    return text


def _convert_items(name: str, spec: Opt, value: Any) -> Any:
    """The kinds that take several values (``_LIST_KINDS``)."""
    kind = spec.kind
    if kind == "indices":
        raw = value.split(",") if isinstance(value, str) else _items(name, spec, value)
        raw = [r.strip() if isinstance(r, str) else r for r in raw]
        raw = [r for r in raw if r != ""]
        if not raw:
            raise _fail(name, spec, value, "needs device indices such as 0,1")
        indices = [_number(name, spec, r, integral=True) for r in raw]
        if len(indices) > MAX_ITEMS:
            raise _fail(name, spec, value, f"lists more than {MAX_ITEMS} devices")
        if len(set(indices)) != len(indices):
            raise _fail(name, spec, value, "lists a device twice")
        return [int(i) for i in indices]
    if kind == "env":
        return _env_items(name, spec, value)[0]
    if kind == "names":
        names: list[str] = []
        for item in _items(name, spec, value):
            if not is_env_name(item):
                raise _fail(name, spec, item, _NOT_ENV_NAME)
            if item not in names:
                names.append(item)
        return names
    if kind == "texts":
        return [_text(name, spec, item) for item in _items(name, spec, value)]
    args = []  # kind "args"
    for item in _items(name, spec, value) if not isinstance(value, (list, tuple)) else value:
        if not isinstance(item, str) or len(item) > MAX_TEXT or "\0" in item:
            raise _fail(name, spec, item, "is not an argument")
        args.append(item)
    if len(args) > 4 * MAX_ITEMS:
        raise _fail(name, spec, "", f"takes at most {4 * MAX_ITEMS} arguments")
    return args


OptionsT = TypeVar("OptionsT", bound="JobOptions")


@dataclass
class JobOptions:
    """Base of the per-job options types: ``parse`` and the cross-field rules."""

    job: ClassVar[str] = ""

    @classmethod
    def parse(cls: type[OptionsT], raw: Mapping[str, Any]) -> OptionsT:
        """The typed options from raw values (CLI strings or JSON values), validated.

        ``None`` (or a missing key) means the default. Unknown keys are refused.
        """
        known = {name: (spec, default) for name, spec, default in declared(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise UsageError(
                f"unknown option(s) for {cls.job}: {', '.join(unknown)}",
                fix=f"see `instinct {cls.job} --help`",
                id="unknown_option",
            )
        values: dict[str, Any] = {}
        for name, (spec, _default) in known.items():
            value = raw.get(name)
            if value is None or (
                spec.kind in ("text", "texts", "args", "env", "names") and not value
            ):
                continue  # unset (an empty text or list is unset too): the default
            if spec.kind == "env" and spec.names_into:
                values[name], bare = _env_items(name, spec, value)
                if bare:
                    merged = [*values.get(spec.names_into, []), *bare]
                    values[spec.names_into] = list(dict.fromkeys(merged))
            elif spec.kind == "names":
                merged = [*values.get(name, []), *_convert(name, spec, value)]
                values[name] = list(dict.fromkeys(merged))
            else:
                values[name] = _convert(name, spec, value)
        options = cls(**values)
        options.check()
        return options

    def check(self) -> None:
        """Rules across fields (subclasses extend)."""

    def argv(self) -> list[str]:
        """The command-line flags that give these options again (the ones set away from
        their default), for a command the tool writes for later (a systemd unit)."""
        out: list[str] = []
        for name, spec, default in declared(type(self)):
            value = getattr(self, name)
            if not spec.cli or spec.positional or value == default:
                continue
            if spec.kind not in ("int", "float", "text", "tokens", "choice", "bool"):
                raise NotImplementedError(f"{name}: {spec.kind} options are not re-rendered")
            flag = spec.spelling(name).split("/")[0]
            out += (
                [flag]
                if spec.kind == "bool"
                else [flag, f"{value:g}" if isinstance(value, float) else str(value)]
            )
        return out

    @classmethod
    def error_for(cls, name: str, value: Any, problem: str) -> UsageError:
        """The error of option ``name`` (for callers that convert values themselves, such
        as the MCP server's input models): the same id and fix as ``parse`` gives."""
        for field_name, spec, _default in declared(cls):
            if field_name == name:
                return _fail(name, spec, value, problem)
        return UsageError(f"{name}: {problem}", id="bad_input")
