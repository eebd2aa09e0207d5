"""Access for AI agents: an MCP server (``instinct mcp``) and a skill guide (``instinct skill``).

The server (``agents.server``) exposes the CLI's core as MCP tools with the same JSON
documents as ``--json``; ``SKILL.md`` (package data) tells an agent how to use them. Both
import the MCP SDK only in ``agents.server``, so the guide works without the ``mcp`` extra.
"""

from __future__ import annotations

from importlib import resources


def skill_text() -> str:
    """The agent skill guide shipped with the package."""
    return resources.files("instinct_serve.agents").joinpath("SKILL.md").read_text(encoding="utf-8")
