"""The input schemas an agent loads (``tools/list``): lean, so the whole list stays small.

Pydantic's schema of ``agents.inputs`` carries what an agent does not need to call a tool
well: a ``title`` per property, ``anyOf [X, null]`` with ``default: null`` for every optional
input, GPU ``examples`` the description already lists, and the CLI's full option help. The
lean schema keeps the names, types, bounds an agent can meet (not the guards against
runaway values), choices, defaults that say something, required inputs and
the first sentence of each description, with the CLI's ``--flag`` spellings written as the
tool's argument names. Validation is still the pydantic model's (``null`` is still accepted).
"""

from __future__ import annotations

import re
from typing import Any

from instinct_serve.names import CONTAINER_NAME
from instinct_serve.options.spec import first_sentence

DROPPED = ("title", "examples")
FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")


def described_once(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lean schemas of the tool list, in order, each input's description given at its
    first appearance only: an input of the same name and description in a later tool
    (``serve`` takes every ``plan`` input) means what it meant there (``INSTRUCTIONS``)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for schema in schemas:
        lean = lean_schema(schema)
        for name, prop in lean["properties"].items():
            key = (name, prop.get("description", ""))
            if key in seen:
                del prop["description"]
            seen.add(key)
        out.append(lean)
    return out


def lean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The object schema of a tool's input, lean (see the module's docstring)."""
    out: dict[str, Any] = {
        "type": "object",
        "properties": {name: _lean(prop) for name, prop in schema["properties"].items()},
        "additionalProperties": False,
    }
    if schema.get("required"):
        out["required"] = list(schema["required"])
    return out


def _lean(prop: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in prop.items() if k not in DROPPED and not _guard(k, v)}
    variants = out.pop("anyOf", None)
    if variants is not None:
        kept = [_lean(v) for v in variants if v.get("type") != "null"]
        if all(set(v) == {"type"} for v in kept):  # [integer, string]: one "type" list
            kept = [{"type": [v["type"] for v in kept]}] if len(kept) > 1 else kept
        out = {**kept[0], **out} if len(kept) == 1 else {"anyOf": kept, **out}
    if "default" in out and out["default"] in (None, False, "", [], {}):
        del out["default"]  # what leaving the input out means anyway
    if isinstance(out.get("items"), dict):
        out["items"] = _lean(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _lean(out["additionalProperties"])
    if out.get("description"):
        out["description"] = brief(out["description"])
    return out


def _guard(key: str, value: Any) -> bool:
    """A bound only a runaway or hostile value meets (it guards the server, which enforces
    it), not one an agent has to know: a length of 255 or more, a maximum of 100,000 or
    more, the container-name pattern (no leading '-': no option smuggling)."""
    if key == "maxLength":
        return bool(value >= GUARD_LENGTH)
    if key == "pattern":
        return bool(value == f"^{CONTAINER_NAME.pattern}$")
    return key == "maximum" and value >= GUARD_MAXIMUM


GUARD_LENGTH = 255
GUARD_MAXIMUM = 100_000


def brief(text: str) -> str:
    """An input's description for an agent: the first sentence, flags as argument names
    (``--env-literal`` is ``env_literal``); past ``LONG`` characters, without its asides
    in parentheses."""
    text = FLAG.sub(lambda m: m.group(1).replace("-", "_"), first_sentence(text))
    if len(text) > LONG:
        text = ASIDE.sub("", text)
    return text


LONG = 60
ASIDE = re.compile(r" \((?:[^()]|\([^()]*\))*\)")
