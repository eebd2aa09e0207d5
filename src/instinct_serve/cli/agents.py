"""``instinct mcp`` (the MCP server on stdio) and ``instinct skill`` (the agent guide)."""

from __future__ import annotations

import sys

import click

from instinct_serve.errors import NotReadyError


@click.command("mcp")
def mcp() -> None:
    """Run the MCP server for AI agents over stdio (stdin/stdout carry the protocol).

    \b
    Register it with an MCP client, e.g.:
      {"mcpServers": {"instinct": {"command": "instinct", "args": ["mcp"]}}}
    Tools: detect, check, recipes_show, fit, plan, serve (confirm=true to launch),
    status, logs, stop, diagnose. Each takes an optional host (user@host) and returns the
    same JSON as the command's --json; errors are {"error": {id, message, fix}}.
    """
    try:
        from instinct_serve.agents.server import main
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("mcp"):
            raise
        raise NotReadyError(
            f"the MCP SDK is not installed ({exc.name})",
            fix="pip install 'instinct-serve[mcp]'",
            id="mcp_sdk_missing",
        ) from exc
    main()


@click.command("skill")
def skill() -> None:
    """Print the agent skill guide (SKILL.md): how an agent should drive instinct-serve."""
    from instinct_serve.agents import skill_text

    sys.stdout.write(skill_text())
