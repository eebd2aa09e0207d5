"""A vLLM argv as units: what ``--flag`` is set to, whether it is there, and edits to it.

vLLM parses its command line with argparse, so one option can be written ``--flag value``
or ``--flag=value``, a boolean is a bare ``--flag`` (``BooleanOptionalAction`` adds its
negation ``--no-flag``), and when an option is given twice the last one wins. This module
is the one place that reads and edits such an argv; every part of instinct-serve (recipes,
the planner, serve's retry hints, diagnose's context, docker's own argv) goes through it.

An argv is cut into *units* (``units``): ``--flag value`` (a flag followed by a token that
is not a flag), ``--flag=value``, a bare ``--flag``, or a positional token (``name`` None).
A token is a flag when argparse would take it for one: it starts with ``-`` and is not a
negative number (``--n -1`` gives ``-1`` to ``--n``). Without vLLM's parser at hand, a
boolean flag directly followed by a positional token reads as ``--flag token``; vLLM's own
argv (``vllm serve MODEL --flags...``) puts positionals first, where this cannot happen.

Pure functions: lists in, new lists out; the input is never modified.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

# argparse's own test (``ArgumentParser._negative_number_matcher``)
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")

__all__ = [
    "Unit",
    "dedupe",
    "enabled",
    "has",
    "is_flag",
    "negation",
    "remove",
    "set_flag",
    "units",
    "value",
]


class Unit(NamedTuple):
    """One option with its value (``["--x", "1"]``, ``["--x=1"]``, ``["--x"]``) or one
    positional token (``name`` None)."""

    name: str | None
    tokens: list[str]

    @property
    def value(self) -> str | None:
        """The option's value; ``""`` for a bare flag; None for a positional token."""
        if self.name is None:
            return None
        if len(self.tokens) > 1:
            return self.tokens[1]
        return self.tokens[0].partition("=")[2]


def is_flag(token: str) -> bool:
    """``--x``, ``-x`` and ``--x=v`` are flags; as for argparse, a negative number (``-1``,
    ``-0.5``), a lone ``-`` and a token with a space before any ``=`` are values."""
    if not token.startswith("-") or token == "-":
        return False
    name, equals, _ = token.partition("=")
    if equals and " " not in name:
        return True
    return not _NEGATIVE_NUMBER.match(token) and " " not in token


def units(args: Iterable[str]) -> list[Unit]:
    """Group an argv into units: ``--x v`` and ``--x=v`` both have the name ``--x``."""
    tokens = list(args)
    out: list[Unit] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not is_flag(token):
            out.append(Unit(None, [token]))
        elif "=" not in token and i + 1 < len(tokens) and not is_flag(tokens[i + 1]):
            out.append(Unit(token, [token, tokens[i + 1]]))
            i += 1
        else:
            out.append(Unit(token.split("=", 1)[0], [token]))
        i += 1
    return out


def value(args: Iterable[str], *names: str, last: bool = True) -> str | None:
    """The value given to any of ``names`` (aliases such as ``-tp``): the last occurrence
    (argparse's rule), or the first with ``last=False``. ``""`` for a bare flag, None when
    absent."""
    found: str | None = None
    for unit in units(args):
        if unit.name is not None and unit.name in names:
            found = unit.value
            if not last:
                break
    return found


def has(args: Iterable[str], *names: str) -> bool:
    """Whether any of ``names`` is given, with or without a value."""
    return any(unit.name in names for unit in units(args) if unit.name is not None)


def negation(name: str) -> str:
    """``--x`` <-> ``--no-x`` (argparse's ``BooleanOptionalAction``)."""
    if name.startswith("--no-"):
        return "--" + name[len("--no-") :]
    return "--no-" + name[2:] if name.startswith("--") else name


def enabled(args: Iterable[str], name: str) -> bool | None:
    """A boolean option's state: True for ``--x``, False for ``--no-x``, the last one
    winning; None when neither is given."""
    state: bool | None = None
    off = negation(name)
    for unit in units(args):
        if unit.name == name:
            state = True
        elif unit.name == off and off != name:
            state = False
    return state


def remove(args: Iterable[str], name: str, value_prefix: str | None = None) -> list[str]:
    """``args`` without ``name`` (and its value) wherever it appears; with
    ``value_prefix``, only the occurrences whose value starts with it."""
    out: list[str] = []
    for unit in units(args):
        if unit.name == name:
            given = unit.value or ""
            if value_prefix is None or given.startswith(value_prefix):
                continue
        out.extend(unit.tokens)
    return out


def set_flag(args: Iterable[str], name: str, new_value: str | None = None) -> list[str]:
    """``args`` with every ``name`` replaced by one ``name new_value`` (a bare ``name``
    when ``new_value`` is None) at the end. Setting a boolean drops its negation too, so
    ``--enforce-eager`` replaces ``--no-enforce-eager``."""
    kept = remove(args, name)
    if new_value is None:
        kept = remove(kept, negation(name))
        return [*kept, name]
    return [*kept, name, new_value]


def dedupe(args: Iterable[str]) -> list[str]:
    """The last occurrence of each option wins (argparse's rule; upstream renders recipes
    this way); positional tokens stay. ``--block-size 16`` then ``--block-size=64`` are
    the same option."""
    all_units = units(args)
    seen: set[str] = set()
    keep: list[list[str]] = []
    for unit in reversed(all_units):
        if unit.name is not None:
            if unit.name in seen:
                continue
            seen.add(unit.name)
        keep.append(unit.tokens)
    return [token for tokens in reversed(keep) for token in tokens]


def speculative_config(args: Iterable[str]) -> dict[str, object] | None:
    """The ``--speculative-config`` JSON object of ``args`` (None: absent, or not a JSON
    object: vLLM refuses that itself at start-up)."""
    import json

    text = value(args, "--speculative-config")
    try:
        doc = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def mtp_tokens(doc: dict[str, object] | None) -> object:
    """The draft tokens of an MTP ``--speculative-config`` (``doc``): 0 for none or another
    method (EAGLE3 drafts with a model of its own), its ``num_speculative_tokens`` as given
    (1 when unset) otherwise; the caller checks it is a number."""
    if doc is None or "mtp" not in str(doc.get("method", "")).lower():
        return 0
    return doc.get("num_speculative_tokens") or 1
