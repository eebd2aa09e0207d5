"""``serve`` with ``confirm`` through MCP, against the real dockerd and the vLLM test double.

The same setup as ``tests/serve`` (the registry-free test image, a check root where the GPU
checks pass, stand-in device nodes in a temp root): one session serves, sees the startup
phases as progress notifications, lists, tails and stops the endpoint; another cancels a
serve mid-start and the container it launched is removed.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from tests.agents.conftest import Call, Client, run_session
from tests.infra.ports import free_port
from tests.serve.conftest import MODEL, Serve, inspect

pytestmark = pytest.mark.docker


def serve_args(serve: Serve, name: str, port: int, image: str) -> dict[str, Any]:
    """The MCP twin of ``Serve.args`` (the same options as the CLI tests)."""
    return {
        "model": MODEL,
        "gpu": "mi300x",
        "image": image,
        "hf_cache": str(serve.hf_cache),
        "port": port,
        "name": name,
        "root": str(serve.root),
        "warmup_timeout_s": 30,
        "timeout_s": 60,
        "confirm": True,
    }


def test_confirmed_serve_reports_progress_then_status_logs_and_stop(serve: Serve) -> None:
    name, port = serve.name("mcp"), free_port()
    args = serve_args(serve, name, port, serve.double())

    async def scenario(client: Client) -> list[Call]:
        stale = await client.call("serve", {**args, "plan_hash": "0123456789abcdef"})
        assert stale.error["id"] == "plan_changed" and inspect(name) is None, stale.text
        summary = await client.call("serve", {**args, "confirm": False})
        args["plan_hash"] = summary.doc["plan_hash"]
        return [
            await client.call("serve", args),
            await client.call("status", {}),
            await client.call("logs", {"name": name, "tail": 50}),
            await client.call("serve", args),
            await client.confirmed("stop", {"names": [name]}),
            await client.call("status", {"no_health": True}),
        ]

    served, status, logs, again, stop, after = run_session(scenario, timeout=240)

    assert not served.is_error, served.text[-3000:]
    doc = served.doc
    assert doc["ok"] is True and doc["status"] == "ready" and served.exit_code == 0
    endpoint = doc["endpoint"]
    assert endpoint["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert endpoint["model"] == MODEL and endpoint["container"] == name
    assert endpoint["coherence"]["verdict"] == "coherent" and endpoint["curl"]
    values = [value for value, _total, _message in served.progress]
    assert values == sorted(values) and len(set(values)) == len(values)  # only grows
    messages = [message or "" for _v, _t, message in served.progress]
    for phase in ("checking", "planning", "launching", "loading_weights", "ready"):
        assert any(m.startswith(f"{phase}:") for m in messages), (phase, messages)

    rows = {row["name"]: row for row in status.doc["endpoints"]}
    assert rows[name]["health"] == "healthy" and rows[name]["port"] == port
    assert any("Application startup complete" in line for line in logs.doc["lines"])
    assert again.doc["status"] == "reused"  # idempotent: the same plan is not relaunched
    assert stop.doc["stopped"] == [
        {"name": name, "engine": "docker", "model": MODEL, "removed": True, "was_running": True}
    ]
    assert stop.doc["not_stopped"] == []
    assert name not in {row["name"] for row in after.doc["endpoints"]}
    assert inspect(name) is None


async def cancel_once_launched(
    client: Client, args: dict[str, Any], container: str
) -> tuple[bool, float]:
    """Call ``serve`` with ``args`` and cancel the request (the client gives up:
    notifications/cancelled) once ``container`` is launched: whether it existed then, and
    how long it took to be gone (at most 60 s; the session and server stay alive meanwhile)."""
    launched = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if (message or "").startswith("launched") and container in (message or ""):
            launched.set()

    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await client.session.call_tool("serve", args, progress_callback=on_progress)

        tg.start_soon(call)
        with anyio.fail_after(60):
            await launched.wait()
        existed = inspect(container) is not None
        tg.cancel_scope.cancel()
    start = time.monotonic()
    while inspect(container) is not None and time.monotonic() - start < 60:
        await anyio.sleep(0.5)
    return existed, time.monotonic() - start


def _hash(summary: Call) -> dict[str, Any]:
    return {"plan_hash": summary.doc["plan_hash"]}


def test_cancelling_a_serve_removes_what_it_launched(serve: Serve) -> None:
    name, port = serve.name("mcp-cancel"), free_port()
    args = serve_args(serve, name, port, serve.double(load_s=4))

    async def scenario(client: Client) -> tuple[bool, float]:
        summary = await client.call("serve", {**args, "confirm": False})
        return await cancel_once_launched(client, {**args, **_hash(summary)}, name)

    existed, waited = run_session(scenario, timeout=180)
    assert existed, "the container was running when the request was cancelled"
    assert inspect(name) is None, f"still there after {waited:.0f} s"


def test_an_agent_walks_a_large_model_to_a_coherent_answer(serve: Serve) -> None:
    """A 141 GB model through MCP: serve returns once loading is confirmed (``loading``);
    the same serve again waits for it, warms it up and probes it; status then shows what
    was proven. What an agent does after ``loading`` (SKILL.md)."""
    name, port = serve.name("mcp-large"), free_port()
    args = {
        **serve_args(serve, name, port, serve.double(load_s=4)),
        "model": "meta-llama/Llama-3.3-70B-Instruct",
    }

    async def scenario(client: Client) -> list[Call]:
        summary = await client.call("serve", {**args, "confirm": False})
        args["plan_hash"] = summary.doc["plan_hash"]
        assert summary.doc["plan"]["weight_memory_gb"] >= 100, summary.doc["plan"]
        return [
            await client.call("serve", args),
            await client.call("serve", args),
            await client.call("status", {}),
            await client.confirmed("stop", {"names": [name]}),
        ]

    loading, proven, status, _stop = run_session(scenario, timeout=300)
    assert not loading.is_error and loading.doc["status"] == "loading", loading.text[-2000:]
    assert loading.doc["endpoint"]["coherence"] is None
    assert not proven.is_error, proven.text[-3000:]
    assert proven.doc["status"] in ("ready", "reused") and proven.exit_code == 0
    assert proven.doc["endpoint"]["coherence"]["verdict"] == "coherent"
    rows = {row["name"]: row for row in status.doc["endpoints"]}
    assert rows[name]["verified"]["coherence"] == "coherent"
    assert inspect(name) is None


def test_an_agent_upgrades_an_endpoint_and_rolls_it_back(serve: Serve) -> None:
    """serve with upgrade=true, as the CLI's ``serve --upgrade``: the summary says what an
    upgrade does; a bad new plan leaves the running endpoint untouched (same container);
    a good one is swapped in; the rollback tool returns to the old plan."""
    name, port = serve.name("mcp-up"), free_port()
    serve.names.append(f"{name}-next")
    old_image, new_image = serve.double(), serve.double(VLLM_DOUBLE_SALAD="repeat")
    bad_image = serve.double("incoherent")
    args = serve_args(serve, name, port, old_image)
    ids: dict[str, str | None] = {}

    def container_id() -> str | None:
        info = inspect(name)
        return None if info is None else str(info["Id"])

    async def scenario(client: Client) -> list[Call]:
        first = await client.confirmed("serve", args)
        ids["first"] = container_id()
        upgrade = {**args, "upgrade": True}
        summary = await client.call("serve", {**upgrade, "image": new_image, "confirm": False})
        bad = await client.confirmed("serve", {**upgrade, "image": bad_image})
        ids["after_bad"] = container_id()
        good = await client.confirmed("serve", {**upgrade, "image": new_image})
        ids["after_good"] = container_id()
        rollback = {"name": name, "root": str(serve.root)}
        asked = await client.call("rollback", rollback)
        ids["after_asked"] = container_id()
        back = await client.confirmed("rollback", rollback)
        again = await client.call("rollback", {"name": f"{name}-none", "root": str(serve.root)})
        return [first, summary, bad, good, asked, back, again]

    first, summary, bad, good, asked, back, none = run_session(scenario, timeout=300)
    assert first.doc["status"] == "ready", first.text[-3000:]
    assert any("beside it on a spare port" in step for step in summary.doc["confirm_would"])
    assert summary.doc["launched"] is False and ids["first"] is not None

    assert bad.is_error and bad.doc["status"] == "failed", bad.text[-3000:]
    assert any("still serves the old plan, untouched" in n for n in bad.doc["notes"])
    assert ids["after_bad"] == ids["first"]

    assert not good.is_error and good.doc["status"] == "ready", good.text[-3000:]
    assert good.doc["endpoint"]["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert ids["after_good"] not in (None, ids["first"])

    # the rollback without confirm: the summary of what it replaces, nothing changed
    assert not asked.is_error and asked.doc["done"] is False, asked.text[-3000:]
    touched = {item["name"] for item in asked.doc["change"]["touch"]}
    assert name in touched and ids["after_asked"] == ids["after_good"]
    kept = asked.doc["change"]["keep"][0]
    assert kept["kind"] == "plan" and asked.doc["change_hash"] == asked.doc["change"]["change_hash"]
    assert not back.is_error and back.doc["status"] == "ready", back.text[-3000:]
    info = inspect(name)
    assert info is not None and info["Config"]["Image"] == old_image
    assert none.is_error and none.error["id"] == "no_last_good", none.text


def test_cancelling_an_upgrade_removes_the_candidate_and_keeps_the_endpoint(serve: Serve) -> None:
    """A cancelled ``serve`` with upgrade=true: the new plan's container (NAME-next) is
    removed, as Ctrl-C does on the command line; the running endpoint is untouched."""
    name, port = serve.name("mcp-upcancel"), free_port()
    candidate = f"{name}-next"
    serve.names.append(candidate)
    args = serve_args(serve, name, port, serve.double())
    upgrade = {**args, "image": serve.double(load_s=4), "upgrade": True}

    async def scenario(client: Client) -> tuple[Call, str | None, bool, float]:
        first = await client.confirmed("serve", args)
        info = inspect(name)
        before = None if info is None else str(info["Id"])
        summary = await client.call("serve", {**upgrade, "confirm": False})
        existed, waited = await cancel_once_launched(
            client, {**upgrade, **_hash(summary)}, candidate
        )
        return first, before, existed, waited

    first, before, existed, waited = run_session(scenario, timeout=240)
    assert first.doc["status"] == "ready", first.text[-3000:]
    assert existed, "the candidate was running when the request was cancelled"
    assert inspect(candidate) is None, f"the candidate is still there after {waited:.0f} s"
    info = inspect(name)
    assert info is not None and info["State"]["Running"] and str(info["Id"]) == before
