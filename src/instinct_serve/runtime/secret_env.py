"""The variables a plan passes by name (``HF_TOKEN``, every ``--env``), read on this machine
for the launch.

They reach the server only through the environment of the launching process (``docker run
--env NAME`` copies the value from the docker CLI's environment; over ssh the values travel
on stdin; the native route's process inherits them): never an argument, a plan or a log line.

A value comes from this process's environment, or from the command line of this run
(``--env NAME=VALUE``: ``give``), which wins. A relaunch of a running endpoint (``watch``,
``serve --upgrade``, ``rollback``) also finds the values that endpoint was given
(``inherit``, read from its container or process by the backend), below both: the user who
passed ``--env NAME=VALUE`` once is not asked to export it for every later relaunch. Given
and inherited values live in context variables: a CLI run is one context, and each MCP tool
call runs in a copy of the server's context, so one call's values never reach another's
launch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from types import MappingProxyType

from instinct_serve.paths import hf_token_file, read_regular

TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")

_GIVEN: ContextVar[Mapping[str, str]] = ContextVar(
    "instinct_given_env", default=MappingProxyType({})
)


_INHERITED: ContextVar[Mapping[str, str]] = ContextVar(
    "instinct_inherited_env", default=MappingProxyType({})
)


def inherit(values: Mapping[str, str]) -> None:
    """The values the endpoint a relaunch replaces was given (see the module docstring):
    used for the names this run neither was given nor finds in its environment."""
    _INHERITED.set({**_INHERITED.get(), **values})


def pick(pairs: Sequence[str], names: Sequence[str]) -> dict[str, str]:
    """``NAME=VALUE`` entries of an environment (a container's ``Config.Env``, a process's
    environ) kept for ``names``."""
    wanted, found = set(names), {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if sep and key in wanted and value and "\n" not in value:
            found[key] = value
    return found


def give(values: Mapping[str, str]) -> None:
    """The values of this run's ``--env NAME=VALUE``: the launches of this context pass
    them by name, as if they were in this process's environment."""
    _GIVEN.set({**_GIVEN.get(), **values})


def given() -> dict[str, str]:
    """The values ``give`` placed in this context (for redaction, never for output)."""
    return dict(_GIVEN.get())


def local_secrets(names: Sequence[str]) -> dict[str, str]:
    """Values for the plan's names passed by name: a value given on this run's command
    line, else this process's environment, else (for the Hub token) the file ``hf auth
    login`` writes, else the value the endpoint a relaunch replaces had (``inherit``).
    Never printed, never in an argv."""
    found: dict[str, str] = {}
    values = _GIVEN.get()
    for name in names:
        if name in values:
            found[name] = values[name]  # given: even empty, it wins over the environment
            continue
        value = os.environ.get(name, "").strip()
        if not value and name in TOKEN_NAMES:
            try:
                value = read_regular(hf_token_file(), 4096).decode("utf-8", "replace").strip()
            except OSError:
                value = ""
        if not value:
            value = _INHERITED.get().get(name, "")
        if value and "\n" not in value:
            found[name] = value
    return found
