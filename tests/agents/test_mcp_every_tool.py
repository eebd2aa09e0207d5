"""Every MCP tool through one real ClientSession over stdio (issue 30).

One ``instinct mcp`` process, one endpoint served on the real dockerd from the vLLM test
double and shared by the calls that need one: serve, status, logs, metrics, bench (a fake
``vllm`` replaying a real ``vllm bench serve`` result), diagnose, an upgrade, its rollback
and stop; the read-only tools beside them; recipes_sync last, against local HTTP servers
shaped like the recipes API and Docker Hub. Every answer's prose names tools, not commands.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from instinct_serve.agents.server import TOOLS
from instinct_serve.agents.wording import PROSE
from tests.agents.conftest import Call, Client, run_session, server_env
from tests.agents.test_mcp_docker import serve_args
from tests.catalog.conftest import api_documents, second_server, serve_api, serve_tag_pages
from tests.infra.ports import free_port
from tests.observe.test_bench_cli import FAKE, OUTPUT, RESULT
from tests.serve.conftest import MODEL, Serve, inspect

pytestmark = pytest.mark.docker
__all__ = ["second_server"]  # the fixture, used by name


def prose(doc: Any, key: str = "") -> list[str]:
    """Every text an answer says to its caller (``wording.PROSE`` keys)."""
    if isinstance(doc, dict):
        return [t for k, v in doc.items() for t in prose(v, k)]
    if isinstance(doc, list):
        return [t for v in doc for t in prose(v, key)]
    return [doc] if isinstance(doc, str) and key in PROSE else []


def test_every_tool_through_one_session(
    serve: Serve, tmp_path: Path, httpserver: HTTPServer, second_server: HTTPServer
) -> None:
    name, port = serve.name("mcp-all"), free_port()
    serve.names.append(f"{name}-next")
    args = serve_args(serve, name, port, serve.double())
    args.pop("confirm")
    new_image = serve.double(VLLM_DOUBLE_SALAD="repeat")
    vllm = tmp_path / "bench-bin" / "vllm"
    vllm.parent.mkdir()
    vllm.write_text(f"#!{sys.executable}\n{FAKE}")
    vllm.chmod(0o755)
    env = server_env(
        FAKE_BENCH_LOG=str(tmp_path / "bench.jsonl"),
        FAKE_BENCH_RESULT=str(RESULT),
        FAKE_BENCH_OUTPUT=str(OUTPUT),
    )
    serve_api(httpserver, api_documents(limit=3))
    serve_tag_pages(second_server, [["v0.30.0", "nightly"]])
    sysfs = tmp_path / "no-gpu"
    sysfs.mkdir()
    target = {"model": MODEL, "gpu": "mi300x"}

    async def scenario(client: Client) -> dict[str, Call]:
        c: dict[str, Call] = {}
        c["detect"] = await client.call("detect", {"sysfs_root": str(sysfs)})
        c["partition"] = await client.call("partition", {"sysfs_root": str(sysfs)})
        c["check"] = await client.call("check", {"port": port, "root": str(serve.root)})
        c["recipes_search"] = await client.call(
            "recipes_search", {"query": "llama 3.1 8b instruct", "gpu": "mi300x"}
        )
        c["recipes_show"] = await client.call("recipes_show", target)
        c["fit"] = await client.call("fit", target)
        c["plan"] = await client.call("plan", {**target, "format": "shell"})
        c["plan_list"] = await client.call("plan", {**target, "list": True})
        c["serve"] = await client.confirmed("serve", args)
        c["status"] = await client.call("status", {})
        c["logs"] = await client.call("logs", {"name": name, "tail": 20})
        c["metrics"] = await client.call("metrics", {"names": [name], "window_s": 0, "gpu": False})
        c["bench"] = await client.call(
            "bench",
            {"name": name, "concurrency": [1, 2], "requests": 4, "vllm": str(vllm), "save": False},
        )
        c["cache"] = await client.call("cache", {})
        c["diagnose"] = await client.call("diagnose", {"container": name})
        c["upgrade"] = await client.confirmed(
            "serve", {**args, "image": new_image, "upgrade": True}
        )
        c["rollback"] = await client.confirmed("rollback", {"name": name, "root": str(serve.root)})
        c["stop"] = await client.confirmed("stop", {"names": [name]})
        c["recipes_sync"] = await client.call(
            "recipes_sync",
            {
                "source": "api",
                "api_url": httpserver.url_for("/"),
                "hub_url": second_server.url_for("/"),
            },
        )
        return c

    calls = run_session(scenario, env, timeout=300)
    assert {call.tool for call in calls.values()} == set(TOOLS)  # every tool, once at least

    for key, call in calls.items():
        assert "internal_error" not in call.text, (key, call.text[-2000:])
        said = [t for t in prose(call.doc) if "`instinct " in t and "for the user" not in t]
        assert not said, (key, said)  # tools and arguments, not commands

    assert calls["detect"].doc["gpu_count"] == 0 and calls["detect"].exit_code == 3
    assert calls["check"].doc["ready"] is True, calls["check"].text[-2000:]
    assert calls["partition"].error["id"] == "no_gpu"  # a structured answer: no GPU here
    assert calls["recipes_search"].doc["results"][0]["model_id"] == MODEL
    assert calls["recipes_show"].doc["match"]["match"] == "exact"
    assert calls["fit"].doc["verdict"] == "safe"
    rendered = calls["plan"].doc["rendered"]
    assert rendered["format"] == "shell" and "docker run" in rendered["text"]
    assert calls["plan_list"].doc["choices"], calls["plan_list"].text[-2000:]

    served = calls["serve"].doc
    assert served["status"] == "ready", calls["serve"].text[-3000:]
    assert served["endpoint"]["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert any(m and m.startswith("ready:") for _v, _t, m in calls["serve"].progress)
    rows = {row["name"]: row for row in calls["status"].doc["endpoints"]}
    assert rows[name]["health"] == "healthy"
    assert any("Application startup complete" in line for line in calls["logs"].doc["lines"])
    assert calls["metrics"].doc["endpoints"][0]["name"] == name, calls["metrics"].text[-2000:]

    bench = calls["bench"]
    assert not bench.is_error, bench.text[-3000:]
    assert [p["concurrency"] for p in bench.doc["points"]] == [1, 2]
    steps = [m for _v, _t, m in bench.progress if m and m.startswith("step:")]
    assert len(steps) == 2 and "steps=2" in steps[-1], bench.progress  # one event per step

    assert "caches" in calls["cache"].doc, calls["cache"].text
    assert calls["diagnose"].doc["healthy"] is True, calls["diagnose"].text[-2000:]
    assert calls["upgrade"].doc["status"] == "ready", calls["upgrade"].text[-3000:]
    assert calls["rollback"].doc["status"] == "ready", calls["rollback"].text[-3000:]
    assert calls["stop"].doc["stopped"][0]["name"] == name, calls["stop"].text
    assert inspect(name) is None
    sync = calls["recipes_sync"]
    assert not sync.is_error and sync.doc["source"] == "api", sync.text[-2000:]
    assert json.loads(sync.text) == sync.doc
