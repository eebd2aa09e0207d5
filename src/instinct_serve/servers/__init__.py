"""The inference servers this tool can plan, launch and prove: a registry of ``ServerKind``s.

A kind is named by a ``"module:attribute"`` reference and loaded when first asked for: the
built-in ones from ``BUILTIN``, any other from the entry-point group ``instinct_serve.servers``
of an installed distribution (``[project.entry-points."instinct_serve.servers"]`` in its
``pyproject.toml``: ``sglang = "my_package.sglang:KIND"``). Adding a server is adding one
module that answers ``servers.kind.ServerKind``, plus that entry point when it lives outside
this package. Loading by reference keeps this module free of the kinds' own imports (the log
reader, the fit), so ``options`` can list the names at no cost.

``LaunchPlan.server`` names the plan's kind (``"vllm"`` by default); ``of(plan)`` gives it.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING, cast

from instinct_serve.errors import UsageError
from instinct_serve.servers.kind import Routes, ServerKind

if TYPE_CHECKING:
    from instinct_serve.plan.model import LaunchPlan

__all__ = ["BUILTIN", "DEFAULT", "GROUP", "Routes", "ServerKind", "get", "names", "of"]

DEFAULT = "vllm"
GROUP = "instinct_serve.servers"
BUILTIN: dict[str, str] = {
    "vllm": "instinct_serve.servers.vllm:VLLM",
    "sglang": "instinct_serve.servers.sglang:SGLANG",
}

_loaded: dict[str, ServerKind] = {}


def _plugged() -> dict[str, str]:
    """``name -> "module:attribute"`` of the kinds installed distributions register (a
    built-in name cannot be taken over: the first of each name wins)."""
    found: dict[str, str] = {}
    for entry in metadata.entry_points(group=GROUP):
        if entry.name not in BUILTIN:
            found.setdefault(entry.name, entry.value)
    return found


def names() -> tuple[str, ...]:
    """Every server a plan may name: the built-in ones first, then the registered ones."""
    return (*BUILTIN, *sorted(_plugged()))


def _load(reference: str) -> object:
    module, _, attribute = reference.partition(":")
    value: object = importlib.import_module(module)
    for part in attribute.split(".") if attribute else []:
        value = getattr(value, part)
    return value


def get(name: str = DEFAULT) -> ServerKind:
    """The kind called ``name``; ``UsageError`` (``bad_server``) when none is."""
    if name in _loaded:
        return _loaded[name]
    reference = BUILTIN.get(name) or _plugged().get(name)
    if reference is None:
        raise UsageError(
            f"no inference server called {name!r}",
            fix="use one of: " + ", ".join(names()),
            id="bad_server",
            details={"server": name},
        )
    try:
        loaded = _load(reference)
    except (ImportError, AttributeError) as exc:
        raise UsageError(
            f"the inference server {name!r} ({reference}) cannot be loaded: {exc}",
            fix=f"reinstall the package that registers it under {GROUP}",
            id="bad_server",
            details={"server": name},
        ) from exc
    if getattr(loaded, "name", None) != name:
        raise UsageError(
            f"{reference} is registered as the server {name!r} but calls itself "
            f"{getattr(loaded, 'name', None)!r}",
            fix="make the entry point's name and the kind's name the same",
            id="bad_server",
            details={"server": name},
        )
    _loaded[name] = cast("ServerKind", loaded)  # its members are its author's promise
    return _loaded[name]


def of(plan: LaunchPlan) -> ServerKind:
    """The kind of server ``plan`` launches."""
    return get(plan.server)
