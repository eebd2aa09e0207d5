"""The CLI's words in an answer, rewritten for an MCP caller: tools and arguments.

The runtime's fixes and notes are written for a person at a terminal (`instinct logs -f
NAME`, `--timeout`, `serve it again with --replace`). Where an error carries its own
``agent_fix`` that is used (``errors.InstinctError``); everything else an MCP answer says
passes through ``for_agent`` here, one rule for every tool:

- a quoted command, `` `instinct CMD ARGS` ``, becomes the tool that covers ``CMD`` (the
  ``cli`` column of ``server.TOOLS``) with its arguments, e.g. ``the `logs` tool
  (name=NAME)``; a command no tool covers is for the user to run, and says so;
- a flag, ``--replace`` or ``--timeout``, becomes the argument of that name, when a tool
  takes one (``--enforce-eager`` in a diagnosis is vLLM's flag, for ``extra_args``).

Only the prose of an answer is rewritten (``PROSE`` keys: fixes, notes, warnings, next steps), never
data such as a rendered launch command or a log line.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PROSE = frozenset({"fix", "next", "notes", "warnings", "commands", "hint"})
COMMAND = re.compile(r"`instinct ([^`]+)`")
FLAG = re.compile(r"(?<![\w`-])--([a-z][a-z0-9-]*)(?![\w-])")
ALIASES = {"--timeout": "timeout_s", "--env": "extra_env", "--all": "all"}


@dataclass(frozen=True)
class Vocabulary:
    """What the MCP server offers: tool -> the CLI commands it covers, and the arguments."""

    tools: Mapping[str, tuple[str, ...]]
    arguments: frozenset[str]


def for_agent(doc: Any, vocabulary: Vocabulary, key: str = "") -> Any:
    """``doc`` with the prose under ``PROSE`` keys in an MCP caller's words."""
    if isinstance(doc, dict):
        return {k: for_agent(v, vocabulary, k) for k, v in doc.items()}
    if isinstance(doc, list):
        return [for_agent(v, vocabulary, key) for v in doc]
    if isinstance(doc, str) and key in PROSE:
        return words(doc, vocabulary)
    return doc


def words(text: str, vocabulary: Vocabulary) -> str:
    """One text in an MCP caller's words (the module's rules)."""
    tools = vocabulary.tools
    by_command = {command: tool for tool, commands in tools.items() for command in commands}
    text = COMMAND.sub(lambda m: _command(m.group(1), by_command), text)
    if text.startswith("instinct ") and "`" not in text:  # a bare command (``commands``)
        text = _command(text[len("instinct ") :], by_command)

    def flag(match: re.Match[str]) -> str:
        name = _argument(match.group(0))
        return f"`{name}`" if name in vocabulary.arguments else match.group(0)

    return FLAG.sub(flag, text)


def _command(line: str, by_command: Mapping[str, str]) -> str:
    try:
        argv = shlex.split(line)
    except ValueError:
        argv = line.split()
    if not argv:
        return "`instinct`"
    two = " ".join(argv[:2])
    name, rest = (two, argv[2:]) if two in by_command else (argv[0], argv[1:])
    tool = by_command.get(name)
    if tool is None:  # no tool does it: the user does, at a terminal
        return f"`instinct {line}` (for the user to run; no tool does it)"
    arguments = []
    positional = "names" if tool == "stop" else "name"
    i = 0
    while i < len(rest):
        word = rest[i]
        if word in ("-f", "--follow"):
            i += 1
            continue  # the tool returns the recent lines; call it again for more
        if word.startswith("--"):
            value = rest[i + 1] if i + 1 < len(rest) and not rest[i + 1].startswith("-") else None
            arg = _argument(word)
            arguments.append(f"{arg}={value}" if value is not None else f"{arg}=true")
            i += 2 if value is not None else 1
            continue
        arguments.append(f"{positional}={word}")
        i += 1
    shown = f" ({', '.join(arguments)})" if arguments else ""
    return f"the `{tool}` tool{shown}"


def _argument(flag: str) -> str:
    return ALIASES.get(flag) or flag.lstrip("-").replace("-", "_")
