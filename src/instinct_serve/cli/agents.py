"""``instinct mcp`` (the MCP server on stdio) and ``instinct skill`` (the agent guide)."""

from __future__ import annotations

import re
import shlex
import sys

import click

from instinct_serve.errors import NotReadyError


@click.command("mcp")
def mcp() -> None:
    """Run the MCP server for AI agents over stdio (stdin/stdout carry the protocol).

    \b
    Register it with an MCP client, e.g.:
      {"mcpServers": {"instinct": {"command": "instinct", "args": ["mcp"]}}}
    Tools: detect, check, recipes_search, recipes_show, recipes_sync, fit,
    plan, serve (confirm=true to launch), rollback, status, logs, metrics,
    bench, cache, partition, stop, diagnose; resource: the skill guide.
    Each takes an optional host (user@host) and returns the same JSON as the
    command's --json; errors are {"error": {id, message, fix}}. Commands with
    no tool, and why: docs/mcp.md.
    """
    try:
        from instinct_serve.agents.server import main
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("mcp"):
            raise
        raise NotReadyError(
            f"the MCP SDK is not installed ({exc.name})",
            fix=f"install it into this environment: {shlex.join(_mcp_install())} "
            "(from a clone, `pip install '.[mcp]'` does the same)",
            id="mcp_sdk_missing",
        ) from exc
    main()


def _mcp_install() -> list[str]:
    """The pip command that adds the ``mcp`` extra's requirement to this interpreter
    (read from the installed package's metadata, so it matches pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        reqs = requires("instinct-serve") or []
    except PackageNotFoundError:
        reqs = []
    wanted = [
        r.split(";")[0].strip() for r in reqs if re.search(r"extra\s*==\s*['\"]mcp['\"]", r)
    ] or ["mcp"]
    return [sys.executable, "-m", "pip", "install", *wanted]


@click.command("skill")
def skill() -> None:
    """Print the agent skill guide (SKILL.md): how an agent should drive instinct-serve."""
    from instinct_serve.agents import skill_text

    sys.stdout.write(skill_text())
