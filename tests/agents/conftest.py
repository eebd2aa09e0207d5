"""A real MCP client session against ``instinct mcp`` started as a subprocess.

``run_session(scenario, env)`` starts ``python -m instinct_serve mcp`` (the test
interpreter: the venv's) through the SDK's stdio client, initializes a ``ClientSession``
and runs ``scenario(client)`` in it, bounded in time. ``client.call(tool, args)`` returns a
``Call`` with the structured document, the text content, the error flag, the exit code
from ``_meta`` and the progress notifications received. The server's stderr is kept in a
file so a failing test can show it (and the secret tests can search it).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, TextContent

from tests.infra.paths import LOGS, REPO
from tests.serve.conftest import gpu_root, serve  # noqa: F401  (fixtures of the docker tests)

T = TypeVar("T")

SESSION_TIMEOUT_S = 90.0
EXIT_CODE_META = "instinct-serve/exit_code"
FIXTURE_LOGS = LOGS


@dataclass
class Call:
    """One tool call's result, unpacked."""

    tool: str
    result: CallToolResult
    progress: list[tuple[float, float | None, str | None]] = field(default_factory=list)

    @property
    def doc(self) -> dict[str, Any]:
        doc = self.result.structured_content
        assert isinstance(doc, dict), self.result
        return doc

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.result.content if isinstance(c, TextContent))

    @property
    def is_error(self) -> bool:
        return self.result.is_error

    @property
    def error(self) -> dict[str, Any]:
        assert self.is_error, f"{self.tool} did not fail: {self.text[:2000]}"
        error = self.doc["error"]
        assert isinstance(error, dict)
        return error

    @property
    def exit_code(self) -> int | None:
        meta = self.result.meta or {}
        code = meta.get(EXIT_CODE_META)
        return int(code) if code is not None else None

    def everything(self) -> str:
        """All a client sees of this call: text, structured content, _meta, progress."""
        return "\n".join(
            [
                self.text,
                json.dumps(self.result.structured_content),
                json.dumps(self.result.meta),
                json.dumps(self.progress),
            ]
        )


class Client:
    """The session, with calls recorded."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.calls: list[Call] = []

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> Call:
        received: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            received.append((progress, total, message))

        result = await self.session.call_tool(
            tool, dict(arguments or {}), progress_callback=on_progress
        )
        call = Call(tool, result, received)
        self.calls.append(call)
        return call

    async def confirmed(self, tool: str, arguments: Mapping[str, Any]) -> Call:
        """What an agent does once the user agreed: the summary first (no confirm), then
        the same call with confirm=true and the summary's hashes (plan_hash for serve,
        change_hash for what a call stops or removes). The summary is the call returned
        when it already failed (an error: nothing to approve)."""
        args = {k: v for k, v in arguments.items() if k not in ("confirm", "change_hash")}
        summary = await self.call(tool, {**args, "confirm": False})
        if summary.is_error or ("done" not in summary.doc and "plan_hash" not in summary.doc):
            return summary  # nothing to approve: the call already did (or refused) it
        hashes = {k: summary.doc[k] for k in ("plan_hash", "change_hash") if k in summary.doc}
        return await self.call(tool, {**args, **hashes, "confirm": True})


def server_env(**overrides: str) -> dict[str, str]:
    """This test's environment (fake PATH, isolated caches, offline Hub) plus overrides."""
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env.pop("INSTINCT_DEBUG", None)
    env.update(overrides)
    return env


def run_session(
    scenario: Callable[[Client], Awaitable[T]],
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = SESSION_TIMEOUT_S,
    stderr_path: Path | None = None,
) -> T:
    """Run ``scenario`` in a fresh MCP session with a fresh ``instinct mcp`` process."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "instinct_serve", "mcp"],
        env=dict(env) if env is not None else server_env(),
        cwd=str(REPO),
    )

    async def main() -> T:
        with anyio.fail_after(timeout):
            err_file = stderr_path or Path(os.devnull)
            with open(err_file, "a", encoding="utf-8") as errlog:
                async with (
                    stdio_client(params, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    return await scenario(Client(session))

    return anyio.run(main)


@pytest.fixture
def stderr_log(tmp_path: Path) -> Path:
    """Where the server's stderr goes (shown by assertions that need it)."""
    return tmp_path / "mcp-server.stderr"
