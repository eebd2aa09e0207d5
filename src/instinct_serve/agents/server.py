"""``instinct mcp``: the Model Context Protocol server (stdio) over the CLI's core.

Built on the official SDK's low-level ``Server`` (mcp 2.x) rather than its decorator
layer, because the tools' contracts are ours to keep: the input schema is the pydantic
model of ``agents.inputs`` (flat, ``additionalProperties: false``), a validation failure is
a tool result with a structured ``{"error": {id, message, fix, details}}`` document (not a
protocol error an agent cannot read), and the output is exactly the ``--json`` document,
both as text and as ``structuredContent``. The CLI's exit code for that document travels
in the result's ``_meta`` (``instinct-serve/exit_code``).

Every core call is blocking (subprocesses, ssh, HTTP), so it runs in a worker thread and
the event loop keeps answering; ``serve`` forwards its startup events as MCP progress
notifications and stops (removing what it launched) when the request is cancelled.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from instinct_serve import __version__
from instinct_serve.agents import core, inputs
from instinct_serve.agents.safety import MAX_DOCUMENT, Redactor, bound, secret_values
from instinct_serve.agents.schema import described_once
from instinct_serve.agents.wording import Vocabulary, for_agent
from instinct_serve.errors import ExitCode, InstinctError

log = logging.getLogger("instinct_serve.mcp")

SERVER_NAME = "instinct-serve"
EXIT_CODE_META = "instinct-serve/exit_code"
SKILL_URI = "instinct-serve://skill"  # the skill guide, as a resource
INSTRUCTIONS = (
    "Serve Hugging Face models as OpenAI-compatible vLLM endpoints on AMD Instinct GPUs. "
    "Sequence: detect -> check -> fit -> plan -> serve (show the summary to the user, then "
    "call again with confirm=true) -> use the endpoint's base_url. On a failure, diagnose. "
    "status/logs/stop act only on endpoints instinct-serve started. stop, rollback and serve "
    "with replace first return what they would stop and remove (change, change_hash): show it, "
    "then call again with confirm=true and that change_hash. An input without a description "
    "means what it means in an earlier tool. Errors come back as "
    '{"error": {"id", "message", "fix"}}: act on the id, tell the user the fix. The full '
    f"guide is the resource {SKILL_URI}."
)


@dataclass(frozen=True)
class Tool:
    """One MCP tool: its contract and the core function behind it."""

    name: str
    title: str
    description: str
    input_model: type[inputs.ToolInput]
    run: Callable[..., core.Outcome]
    read_only: bool = True
    destructive: bool = False
    streams_events: bool = False  # run(inp, sink, cancelled) instead of run(inp)
    cli: tuple[str, ...] = ()  # the CLI commands this tool covers

    def describe(self, input_schema: dict[str, Any]) -> types.Tool:
        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=input_schema,
            annotations=types.ToolAnnotations(
                read_only_hint=self.read_only,
                destructive_hint=self.destructive,
                idempotent_hint=self.read_only,
                open_world_hint=True,
            ),
        )


# One row per tool: name, title, what an agent reads, the input, the body, and the CLI
# commands it covers (docs/mcp.md lists the commands no tool covers, and why).
TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "detect",
            "Detect AMD GPUs",
            "The host's AMD GPUs: gfx target, VRAM, count, ROCm. exit_code 3: no GPU.",
            inputs.DetectInput,
            core.detect,
            cli=("detect",),
        ),
        Tool(
            "check",
            "Check the host",
            "Can the host serve (docker, devices, groups, HF token, disk, port)?",
            inputs.CheckInput,
            core.check,
            read_only=False,
            cli=("check",),
        ),
        Tool(
            "recipes_search",
            "Find recipes by name",
            "Catalog models a few words mean (a family, not an org/name id), ranked.",
            inputs.RecipesSearchInput,
            core.recipes_search,
            cli=("recipes search",),
        ),
        Tool(
            "recipes_show",
            "Show a model's recipe",
            "A model's vLLM recipe; with gpu, the merged AMD view (args, env, image).",
            inputs.RecipesShowInput,
            core.recipes_show,
            cli=("recipes show",),
        ),
        Tool(
            "recipes_sync",
            "Refresh the recipes",
            "Fetch the newest vLLM recipes, ROCm image and AMD reference configs (network).",
            inputs.RecipesSyncInput,
            core.recipes_sync,
            read_only=False,
            cli=("recipes sync",),
        ),
        Tool(
            "fit",
            "Will the model fit?",
            "Weights, KV per token, max context, minimum TP and a verdict (safe, tight, "
            "too_tight, needs_tp, does_not_fit).",
            inputs.FitInput,
            core.fit,
            cli=("fit",),
        ),
        Tool(
            "plan",
            "Plan a launch",
            "The exact launch and why (launches nothing); list: the ranked alternatives; "
            "format: the launch as text.",
            inputs.PlanInput,
            core.plan,
            cli=("plan",),
        ),
        Tool(
            "serve",
            "Serve a model",
            "Without confirm: the summary to show the user. With confirm=true and its "
            "plan_hash: check, launch (progress), health, warm-up, coherence; returns base_url "
            "or the diagnosed failure. Other inputs: as in plan.",
            inputs.ServeInput,
            core.serve,
            read_only=False,
            streams_events=True,
            cli=("serve",),
        ),
        Tool(
            "rollback",
            "Roll back an upgrade",
            "Serve an endpoint's last good plan again (after an upgrade). Without confirm: "
            "what it would replace; then confirm=true with its change_hash.",
            inputs.RollbackInput,
            core.rollback,
            read_only=False,
            destructive=True,
            streams_events=True,
            cli=("rollback",),
        ),
        Tool(
            "status",
            "List endpoints",
            "The endpoints instinct-serve started on the host (at most 100), with health.",
            inputs.StatusInput,
            core.status,
            cli=("ps",),
        ),
        Tool(
            "logs",
            "Endpoint log tail",
            f"The last lines (at most {inputs.MAX_LOG_LINES}, 64 KB) of an endpoint's log.",
            inputs.LogsInput,
            core.logs,
            cli=("logs",),
        ),
        Tool(
            "metrics",
            "Endpoint metrics",
            "One reading of load, KV use, latencies, tokens/s and tokens per watt.",
            inputs.MetricsInput,
            core.metrics,
            cli=("top",),
        ),
        Tool(
            "bench",
            "Benchmark an endpoint",
            "The server's benchmark client per concurrency level (progress per step) next to AMD's "
            "published points; minutes of load on the endpoint.",
            inputs.BenchInput,
            core.bench,
            read_only=False,
            streams_events=True,
            cli=("bench run",),
        ),
        Tool(
            "cache",
            "List compile caches",
            "The compile caches serve keeps per image and gfx: size, image, last use, users.",
            inputs.CacheInput,
            core.cache,
            cli=("cache ls",),
        ),
        Tool(
            "partition",
            "GPU partition modes",
            "The GPUs' compute and memory partition modes (SPX, CPX, NPS1, ...) and the others.",
            inputs.PartitionInput,
            core.partition,
            cli=("partition show",),
        ),
        Tool(
            "stop",
            "Stop endpoints",
            "Stop and remove endpoints instinct-serve started. Without confirm: what it would "
            "stop; then confirm=true with its change_hash.",
            inputs.StopInput,
            core.stop,
            read_only=False,
            destructive=True,
            cli=("stop",),
        ),
        Tool(
            "diagnose",
            "Diagnose a failure",
            "Why a vLLM launch failed and the fix, from log text, an endpoint or a symptom.",
            inputs.DiagnoseInput,
            core.diagnose,
            cli=("diagnose",),
        ),
    )
}


# What ``agents.wording`` rewrites the CLI's words into: the tools and their arguments
# (fit's own inputs reproduce a vLLM profile: there a flag is vLLM's, not an argument).
VOCABULARY = Vocabulary(
    tools={tool.name: tool.cli for tool in TOOLS.values()},
    arguments=frozenset(
        name
        for tool in TOOLS.values()
        if tool.name != "fit"
        for name in tool.input_model.model_fields
    ),
)

# --------------------------------------------------------------------------- results


def _error_doc(exc: BaseException) -> tuple[dict[str, Any], int]:
    if isinstance(exc, InstinctError):
        return exc.to_dict(agent=True), int(exc.exit_code)
    if isinstance(exc, ValidationError):
        problems = [
            {"field": ".".join(str(p) for p in err["loc"]) or "(arguments)", "problem": err["msg"]}
            for err in exc.errors()
        ]
        first = problems[0] if problems else {"field": "(arguments)", "problem": "invalid"}
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        doc = {
            "id": "bad_input",
            "message": f"invalid argument {first['field']}: {first['problem']}{more}",
            "fix": "correct the arguments (see the tool's input schema) and call again",
            "details": {"errors": problems},
        }
        return doc, int(ExitCode.USAGE)
    doc = {
        "id": "internal_error",
        "message": f"{type(exc).__name__}: {exc}",
        "fix": "this is a bug in instinct-serve; the server's stderr has the traceback",
    }
    return doc, int(ExitCode.FAILED)


def _result(doc: dict[str, Any], exit_code: int, *, is_error: bool) -> types.CallToolResult:
    """The same document as text and as structured content, redacted and bounded."""
    safe = bound(Redactor(secret_values())(for_agent(doc, VOCABULARY)))
    text = json.dumps(safe, indent=2, ensure_ascii=False)
    if len(text) > MAX_DOCUMENT:
        return _result(
            {
                "error": {
                    "id": "output_too_large",
                    "message": f"the result has {len(text):,} characters, over the "
                    f"{MAX_DOCUMENT:,} an MCP result may carry",
                    "fix": "narrow the request (fewer log lines, a symptom instead of a log)",
                }
            },
            int(ExitCode.FAILED),
            is_error=True,
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=safe,
        is_error=is_error,
        _meta={EXIT_CODE_META: exit_code},
    )


def error_result(exc: BaseException) -> types.CallToolResult:
    """``{"error": {...}}``, as the CLI prints with ``--json``, marked as an error."""
    doc, code = _error_doc(exc)
    return _result({"error": doc}, code, is_error=True)


# --------------------------------------------------------------------------- progress


class Progress:
    """Forwards serve's event dicts (from a worker thread) as MCP progress notifications.

    The progress value counts events (it must only grow); the message is the phase and its
    text, e.g. ``loading_weights: Loading safetensors 40%``.
    """

    def __init__(self, ctx: ServerRequestContext[Any, Any], token: Any) -> None:
        self.ctx = ctx
        self.token = token
        self.count = 0
        self.cancelled = threading.Event()

    def __call__(self, event: dict[str, Any]) -> None:
        self.count += 1
        kind = str(event.get("event") or "event")
        label = str(event.get("phase") or kind) if kind == "phase" else kind
        text = str(event.get("message") or "") or ", ".join(
            f"{key}={value}"
            for key, value in event.items()
            if key not in ("event", "ts") and isinstance(value, str | int | float)
        )
        # "phase_id: message": the stable id first, for an agent to branch on
        message = Redactor(secret_values()).text(f"{label}: {text}" if text else label)[:500]
        try:
            anyio.from_thread.run(
                partial(self.ctx.session.report_progress, float(self.count), None, message),
                token=self.token,
            )
        except Exception as exc:  # a closed stream must not kill the deployment
            log.debug("progress notification not sent: %s", exc)


# --------------------------------------------------------------------------- handlers


async def list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=tool_list())


def tool_list() -> list[types.Tool]:
    """What ``tools/list`` returns: every tool, its lean schema (``agents.schema``)."""
    schemas = described_once([tool.input_model.model_json_schema() for tool in TOOLS.values()])
    return [tool.describe(schema) for tool, schema in zip(TOOLS.values(), schemas, strict=True)]


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    tool = TOOLS.get(params.name)
    if tool is None:
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"unknown tool {params.name!r}; the tools are: {', '.join(TOOLS)}",
        )
    try:
        inp = tool.input_model.model_validate(params.arguments or {})
    except ValidationError as exc:
        as_option = (
            tool.input_model.option_error(exc)
            if issubclass(tool.input_model, inputs.JobInput)
            else None
        )
        return error_result(as_option or exc)
    progress: Progress | None = None
    if tool.streams_events:
        progress = Progress(ctx, anyio.lowlevel.current_token())
        run = partial(tool.run, inp, progress, progress.cancelled.is_set)
    else:
        run = partial(tool.run, inp)
    try:
        outcome = await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        if progress is not None:
            progress.cancelled.set()  # the thread goes on to clean up what it launched
        raise
    except (InstinctError, ValidationError) as exc:
        return error_result(exc)
    except Exception as exc:
        log.exception("tool %s failed", tool.name)
        return error_result(exc)
    return _result(outcome.doc, outcome.exit_code, is_error=outcome.failed)


# The resources: what an agent reads, not calls (the skill guide, ``instinct skill``).
RESOURCES = {SKILL_URI: ("skill", "How an agent drives instinct-serve (SKILL.md)", "text/markdown")}


async def list_resources(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[
            types.Resource(uri=uri, name=name, description=about, mime_type=mime)
            for uri, (name, about, mime) in RESOURCES.items()
        ]
    )


async def read_resource(
    ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    from instinct_serve.agents import skill_text

    if str(params.uri) not in RESOURCES:
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"unknown resource {params.uri!s}; the resources are: {', '.join(RESOURCES)}",
        )
    text = skill_text()
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=SKILL_URI, text=text, mime_type="text/markdown")]
    )


def build_server() -> Server[Any]:
    """The low-level server with the tools registered."""
    return Server(
        SERVER_NAME,
        version=__version__,
        title="instinct-serve",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )


async def serve_stdio() -> None:
    """Serve one client over this process's stdin/stdout until it disconnects."""
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    """Entry point of ``instinct mcp``."""
    logging.basicConfig(level=logging.WARNING, format="instinct mcp: %(levelname)s %(message)s")
    anyio.run(serve_stdio)
