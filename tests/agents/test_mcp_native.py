"""``serve`` with ``engine: native`` through MCP: no Docker, the fake ``vllm`` executable (the
test double) found through ``INSTINCT_VLLM_COMMAND``, the same ``runtime.prepare`` path as
``instinct serve --engine native``; then ``status``, ``logs`` and ``stop`` of the process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.agents.conftest import Call, Client, run_session, server_env
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import MODEL


def test_native_serve_through_mcp(tmp_path: Path, gpu_root: Path) -> None:
    exe = install_fake_vllm(tmp_path / "bin")
    env = server_env(INSTINCT_VLLM_COMMAND=str(exe), VLLM_DOUBLE_LOAD_S="0.3")
    port = free_port()
    name = f"mcp-native-{port}"
    args: dict[str, Any] = {
        "model": MODEL,
        "engine": "native",
        "gpu": "mi300x",
        "gpus": [0],
        "port": port,
        "name": name,
        "root": str(gpu_root),
        "timeout_s": 60,
        "warmup_timeout_s": 30,
    }

    async def scenario(client: Client) -> list[Call]:
        summary = await client.call("serve", args)
        confirmed = {**args, "confirm": True, "plan_hash": summary.doc["plan_hash"]}
        return [
            summary,
            await client.call("serve", confirmed),
            await client.call("status", {}),
            await client.call("logs", {"name": name, "tail": 40}),
            await client.confirmed("stop", {"names": [name]}),
        ]

    try:
        summary, served, status, logs, stop = run_session(scenario, env, timeout=180)
    finally:
        if launcher.load(LocalHost(), name) is not None:
            launcher.stop(LocalHost(), name)

    assert summary.doc["launched"] is False and summary.doc["plan"]["engine"] == "native"
    assert any("vllm serve" in step for step in summary.doc["confirm_would"])
    assert not any("pull" in step for step in summary.doc["confirm_would"])

    assert not served.is_error, served.text[-3000:]
    doc = served.doc
    assert doc["status"] == "ready" and doc["engine"] == "native", doc
    assert doc["endpoint"]["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert doc["endpoint"]["image"] is None
    messages = [message or "" for _v, _t, message in served.progress]
    for phase in ("checking", "planning", "loading_weights", "ready"):
        assert any(m.startswith(f"{phase}:") for m in messages), (phase, messages)

    rows = {row["name"]: row for row in status.doc["endpoints"]}
    assert rows[name]["engine"] == "native" and rows[name]["health"] == "healthy"
    assert logs.doc["engine"] == "native"
    assert any("Application startup complete" in line for line in logs.doc["lines"])
    assert stop.doc["stopped"][0]["name"] == name and stop.doc["stopped"][0]["was_running"]
    status_after = launcher.status(LocalHost(), name)
    assert status_after is None or not status_after.running
