"""Every CLI command is reachable through MCP (a tool or a resource) or listed as CLI-only,
with a reason, in docs/mcp.md (issue 30). The commands come from the click group itself;
the tools' commands from ``TOOLS``' ``cli`` column; nothing here is a copied list."""

from __future__ import annotations

import re
from pathlib import Path

import click

from instinct_serve.agents.server import RESOURCES, TOOLS
from instinct_serve.cli.main import COMMANDS, _build_group

DOCS = Path(__file__).resolve().parents[2] / "docs" / "mcp.md"


def cli_commands() -> list[str]:
    """Every command a user runs: the leaves of the click group (``recipes sync``, ...)."""
    group = _build_group()
    ctx = click.Context(group, info_name="instinct")
    found: list[str] = []
    for name in COMMANDS:
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            sub = click.Context(command, info_name=name, parent=ctx)
            found += [f"{name} {s}" for s in command.list_commands(sub)]
        else:
            found.append(name)
    return found


def cli_only() -> dict[str, str]:
    """docs/mcp.md's "CLI only" table: command -> why."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## CLI only", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `([a-z -]+)` \| (.+?) \|$", section, re.M))


def test_every_command_is_a_tool_or_listed_cli_only_with_a_reason() -> None:
    commands = cli_commands()
    by_tool = {command for tool in TOOLS.values() for command in tool.cli}
    by_resource = {name for name, _about, _mime in RESOURCES.values()}
    listed = cli_only()
    reachable = by_tool | by_resource
    assert by_tool <= set(commands), by_tool - set(commands)  # no tool names a ghost
    assert set(listed) <= set(commands), set(listed) - set(commands)
    assert not reachable & set(listed), reachable & set(listed)  # one answer per command
    missing = [c for c in commands if c not in reachable and c not in listed]
    assert not missing, f"neither a tool nor listed CLI-only in docs/mcp.md: {missing}"
    assert all(len(why.split()) >= 4 for why in listed.values()), listed
    covered = [c for c in commands if c in reachable]
    print(f"MCP covers {len(covered)} of {len(commands)} commands")
    assert len(covered) >= 18


def test_the_docs_table_of_tools_names_every_tool() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Which command is which tool", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in TOOLS if f"`{name}`" not in section]
    assert not missing, missing
