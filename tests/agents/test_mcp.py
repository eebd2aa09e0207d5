"""``instinct mcp`` through a real MCP client session (the SDK's stdio client).

The server is the real ``instinct mcp`` subprocess; the outside world is faked only at the
process boundary (a fake ``docker`` on PATH replaying ``docker inspect``/``ps``/``logs``
answers and recording every call). The documents are compared with the CLI's ``--json``
output for the same arguments: the MCP tools must not drift from the commands.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp.shared.exceptions import MCPError

from tests.agents.conftest import FIXTURE_LOGS, Call, Client, run_session, server_env
from tests.infra.fakebin import FakeBin

TOOLS = {
    "detect",
    "check",
    "recipes_search",
    "recipes_show",
    "fit",
    "plan",
    "serve",
    "rollback",
    "status",
    "logs",
    "metrics",
    "stop",
    "diagnose",
}
DEFAULT_MODEL = "Qwen/Qwen3.5-9B"
MANAGED_LABEL = "instinct-serve.managed"
OOM_LOG = FIXTURE_LOGS / "02_oom_during_cuda_graph_capture.log"


def cli_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, Any]:
    """``instinct ARGS`` (the same interpreter) and its JSON stdout."""
    out = subprocess.run(
        [sys.executable, "-m", "instinct_serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env or server_env(),
    )
    assert out.stdout.strip(), f"no stdout; stderr:\n{out.stderr[-3000:]}"
    return out.returncode, json.loads(out.stdout)


def container_doc(name: str, *, managed: bool, port: int = 8000) -> dict[str, Any]:
    """A ``docker inspect`` element, as the daemon returns it (trimmed to what we read)."""
    labels = {"maintainer": "someone"}
    if managed:
        labels.update(
            {
                MANAGED_LABEL: "true",
                "instinct-serve.model": "Qwen/Qwen3.5-9B",
                "instinct-serve.port": str(port),
                "instinct-serve.plan-hash": "0123456789ab",
            }
        )
    return {
        "Id": (name.encode().hex() * 64)[:64],
        "Name": f"/{name}",
        "Created": "2026-01-01T10:00:00.123456789Z",
        "RestartCount": 0,
        "State": {
            "Status": "running",
            "Running": True,
            "ExitCode": 0,
            "OOMKilled": False,
            "Error": "",
            "StartedAt": "2026-01-01T10:00:01.5Z",
            "FinishedAt": "0001-01-01T00:00:00Z",
            "Pid": 4242,
        },
        "Config": {"Image": "vllm/vllm-openai-rocm:v0.27.1", "Labels": labels},
        "HostConfig": {"NetworkMode": "bridge"},
        "NetworkSettings": {
            "Ports": {f"{port}/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]}
        },
    }


def fake_docker(fakebin: FakeBin, answers: dict[str, str | tuple[str, str, int]]) -> None:
    """A docker CLI that answers ``answers`` and fails (like a missing container) otherwise."""
    fakebin.add(
        "docker",
        answers,
        default=("", "Error: No such container: unknown\n", 1),
    )


def destructive_calls(fakebin: FakeBin) -> list[list[str]]:
    return [c for c in fakebin.calls("docker") if c and c[0] in ("stop", "rm", "kill", "run")]


# --------------------------------------------------------------------------- listing


def test_lists_the_tools_with_flat_validated_schemas() -> None:
    async def scenario(client: Client) -> Any:
        return await client.session.list_tools()

    listed = run_session(scenario)
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert "host" in schema["properties"], tool.name  # every tool takes a host
        assert tool.description
    serve = tools["serve"].input_schema["properties"]
    assert serve["confirm"]["default"] is False
    assert serve["port"]["maximum"] == 65535
    plan_props = set(tools["plan"].input_schema["properties"])
    assert plan_props <= set(serve)  # serve takes every plan option
    assert tools["logs"].input_schema["properties"]["tail"]["maximum"] == 500
    for acting in ("stop", "rollback"):
        annotations = tools[acting].annotations
        assert annotations is not None and annotations.destructive_hint is True
    assert serve["upgrade"]["default"] is False
    rollback = tools["rollback"].input_schema
    assert rollback["required"] == ["name"]
    assert rollback["properties"]["timeout_s"]["minimum"] >= 1
    assert tools["plan"].annotations is not None
    assert tools["plan"].annotations.read_only_hint is True
    # inputs for tests and chroots are accepted but not offered (issue 30)
    for tool in tools.values():
        hidden = {"root", "sysfs_root"} & set(tool.input_schema["properties"])
        assert not hidden, (tool.name, hidden)


def test_test_only_inputs_are_accepted_though_not_in_the_schema() -> None:
    from instinct_serve.agents.inputs import DetectInput, ServeInput

    assert ServeInput(root="/chroot").root == "/chroot"
    assert DetectInput(sysfs_root="/fixture").sysfs_root == "/fixture"


# --------------------------------------------------------------------------- documents


def test_detect_plan_fit_and_recipes_are_the_cli_json_documents(
    tmp_path: Path, fakebin: FakeBin
) -> None:
    for tool in ("amd-smi", "rocm-smi", "rocminfo"):  # no GPU, even on a GPU machine
        fakebin.missing(tool)

    async def scenario(client: Client) -> list[Call]:
        return [
            await client.call("plan", {"gpu": "mi300x"}),
            await client.call("fit", {"model": DEFAULT_MODEL, "gpu": "mi300x"}),
            await client.call("recipes_show", {"model": DEFAULT_MODEL, "gpu": "mi300x"}),
            await client.call("detect", {"sysfs_root": str(tmp_path)}),
        ]

    plan, fit, recipe, detect = run_session(scenario)

    assert not plan.is_error and plan.exit_code == 0
    assert plan.doc["model"] == DEFAULT_MODEL
    assert plan.doc["gfx_version"] == "gfx942" and plan.doc["port"] == 8000
    assert plan.doc["hardware_source"] == "profile"
    assert json.loads(plan.text) == plan.doc  # the text content is the same document
    assert cli_json("plan", "--gpu", "mi300x", "--json") == (0, plan.doc)

    assert not fit.is_error and fit.doc["verdict"] == "safe"
    assert cli_json("fit", DEFAULT_MODEL, "--gpu", "mi300x", "--json") == (0, fit.doc)

    assert recipe.doc["match"]["match"] == "exact" and recipe.doc["amd"]["gpu"] == "mi300x"
    # the shipped snapshot is old: an agent is told so in the document, not only on stderr
    assert any("`instinct recipes sync`" in w for w in recipe.doc["warnings"])
    code, doc = cli_json("recipes", "show", DEFAULT_MODEL, "--gpu", "mi300x", "--json")
    assert (code, doc) == (0, recipe.doc)

    assert detect.doc["gpu_count"] == 0 and detect.exit_code == 3 and not detect.is_error
    assert cli_json("detect", "--sysfs-root", str(tmp_path), "--json") == (3, detect.doc)


def test_fit_verdict_that_fails_keeps_the_cli_exit_code_and_is_not_an_error() -> None:
    async def scenario(client: Client) -> Call:
        return await client.call(
            "fit", {"model": "Qwen/Qwen3-235B-A22B-Instruct-2507", "gpu": "mi300x", "tp": 1}
        )

    fit = run_session(scenario)
    assert fit.doc["verdict"] in ("needs_tp", "does_not_fit")
    assert fit.exit_code == 1 and not fit.is_error  # an answer, not a failed call


def test_serve_without_confirm_returns_the_summary_and_runs_nothing(fakebin: FakeBin) -> None:
    fakebin.add("docker", {}, default=("", 0))  # records every call; must see none

    async def scenario(client: Client) -> list[Call]:
        return [
            await client.call("serve", {"gpu": "mi300x"}),
            await client.call("plan", {"gpu": "mi300x"}),
        ]

    serve, plan = run_session(scenario)
    assert not serve.is_error and serve.exit_code == 0
    doc = serve.doc
    assert doc["confirmed"] is False and doc["launched"] is False
    items = {row["item"]: row["value"] for row in doc["summary"]}
    assert items["Model"] == DEFAULT_MODEL and items["Tensor parallel"] == "1"
    assert items["Container"] == plan.doc["container_name"]
    assert doc["plan"]["plan_hash"] == plan.doc["plan_hash"]
    assert any("confirm=true" in doc["next"] for _ in [0])
    assert any("launch container" in step for step in doc["confirm_would"])
    assert not serve.progress
    assert fakebin.calls("docker") == []  # no check, no docker ps, no docker run


# --------------------------------------------------------------------------- diagnose


def test_diagnose_a_fixture_log_a_symptom_and_an_unmatched_log() -> None:
    text = OOM_LOG.read_text(encoding="utf-8")

    async def scenario(client: Client) -> list[Call]:
        return [
            await client.call("diagnose", {"log_text": text}),
            await client.call("diagnose", {"symptom": "out of memory during graph capture"}),
            await client.call("diagnose", {"log_text": "INFO all good\nINFO still fine\n"}),
        ]

    log, symptom, unmatched = run_session(scenario)
    assert not log.is_error and log.exit_code == 0
    assert log.doc["primary"] == "oom_graph_capture"
    assert log.doc["findings"][0]["retry"] == {"add_args": ["--enforce-eager"]}
    assert cli_json("diagnose", "--log", str(OOM_LOG), "--json") == (0, log.doc)
    assert symptom.doc["primary"] == "oom_graph_capture"
    assert unmatched.doc["matched"] is False and unmatched.exit_code == 1
    assert not unmatched.is_error


# --------------------------------------------------------------------------- bad input


BAD_ARGUMENTS: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("plan", {"gpu": "mi300x", "port": 70000}, "bad_port", "port"),
    ("serve", {"gpu": "mi300x", "port": 0, "confirm": True}, "bad_port", "port"),
    ("plan", {"gpu": "mi300x", "port": "http"}, "bad_port", "port"),
    ("plan", {"gpu": "mi999"}, "unknown_gpu_profile", None),
    ("fit", {"model": DEFAULT_MODEL, "gpu": "mi300x", "tp": 3}, "bad_tp", "tp"),
    ("plan", {"gpu": "mi300x", "gpus_count": 2}, "bad_input", "gpus_count"),
    ("plan", {"gpu": "mi300x", "gpu_count": 16}, "bad_gpu_count", "gpu_count"),  # 2 nodes
    ("plan", {"gpu": "mi300x", "host": "-oProxyCommand=x"}, "bad_host", None),
    ("diagnose", {"symptom": "oom", "log_text": "x"}, "bad_input", "(arguments)"),
    ("diagnose", {"log_text": "   "}, "bad_input", "(arguments)"),
    ("stop", {}, "bad_input", "(arguments)"),
    ("logs", {"name": "x", "tail": 501}, "bad_input", "tail"),
    ("logs", {"name": "--all"}, "bad_input", "name"),
    ("plan", {"gpu": "mi300x", "extra_env": {"HF_TOKEN": "abcdefgh1"}}, "secret_in_args", None),
    (
        "serve",
        {"gpu": "mi300x", "extra_env": {"VLLM_API_KEY": "abcdefgh2"}},
        "secret_in_args",
        None,
    ),
]


def test_bad_arguments_are_structured_errors() -> None:
    async def scenario(client: Client) -> list[Call]:
        return [await client.call(tool, arguments) for tool, arguments, _, _ in BAD_ARGUMENTS]

    calls = run_session(scenario)
    for call, (tool, _arguments, error_id, field) in zip(calls, BAD_ARGUMENTS, strict=True):
        error = call.error
        assert error["id"] == error_id, (tool, error)
        assert error["message"] and error["fix"], (tool, error)
        assert call.exit_code == 2, (tool, error)
        if field is not None:  # an option's own error, or pydantic's about the arguments
            where = error["details"].get("option") or error["details"]["errors"][0]["field"]
            assert where == field, (tool, error)
        assert "Traceback" not in call.text
        assert "abcdefgh" not in call.everything()  # rejected values are not echoed
        if error["id"] == "bad_gpu_count":  # in the caller's words: arguments, not flags
            assert "`hosts`" in error["fix"] and "`gpu_count` to 8" in error["fix"], error
            assert "--" not in error["fix"], error


def test_an_unknown_tool_is_a_protocol_error() -> None:
    async def scenario(client: Client) -> str:
        try:
            await client.call("docker_run", {})
        except MCPError as exc:
            return exc.message
        raise AssertionError("an unknown tool was accepted")

    assert "unknown tool 'docker_run'" in run_session(scenario)


# --------------------------------------------------------------------------- containers


def test_containers_not_started_by_instinct_serve_are_refused(fakebin: FakeBin) -> None:
    foreign = json.dumps([container_doc("web", managed=False)])
    fake_docker(fakebin, {"inspect --type container web": foreign})

    async def scenario(client: Client) -> list[Call]:
        return [
            await client.call("stop", {"names": ["web"]}),
            await client.call("logs", {"name": "web"}),
            await client.call("diagnose", {"container": "web"}),
            await client.call("stop", {"names": ["nothing-here"]}),
        ]

    stop, logs, diagnose, missing = run_session(scenario)
    for call in (stop, logs, diagnose):
        assert call.error["id"] == "not_managed", call.text
        assert call.exit_code == 1
    assert missing.error["id"] == "not_found"
    calls = fakebin.calls("docker")
    assert calls and all(c[0] == "inspect" for c in calls), calls  # never logs/stop/rm


def test_status_and_logs_of_a_managed_endpoint_are_bounded(fakebin: FakeBin) -> None:
    name = "vllm-qwen3-5-9b"
    doc = container_doc(name, managed=True)
    long_line = "INFO " + "x" * 400
    log_lines = [f"2026-01-01T10:{i // 60:02d}:{i % 60:02d}.5Z {long_line} {i}" for i in range(500)]
    fake_docker(
        fakebin,
        {
            f"ps -q --no-trunc -a --filter label={MANAGED_LABEL}=true": doc["Id"] + "\n",
            f"inspect --type container {doc['Id']}": json.dumps([doc]),
            f"inspect --type container {name}": json.dumps([doc]),
            f"logs --timestamps --tail 500 {name}": "\n".join(log_lines) + "\n",
            f"logs --timestamps --tail 3 {name}": "\n".join(log_lines[-3:]) + "\n",
        },
    )

    async def scenario(client: Client) -> list[Call]:
        return [
            await client.call("status", {"no_health": True, "everyone": True}),
            await client.call("logs", {"name": name, "tail": 500}),
            await client.call("logs", {"name": name, "tail": 3}),
        ]

    status, big, small = run_session(scenario)
    assert [e["name"] for e in status.doc["endpoints"]] == [name]
    assert status.doc["endpoints"][0]["model"] == "Qwen/Qwen3.5-9B"
    code, cli_doc = cli_json("ps", "--no-health", "--json", "--everyone")  # no owner label
    for row in [*cli_doc["endpoints"], *status.doc["endpoints"]]:
        assert row.pop("uptime_s") > 0  # seconds since StartedAt: differs between calls
    assert (code, cli_doc) == (0, status.doc)

    assert big.doc["truncated"] == {"max_bytes": 64 * 1024}
    assert sum(len(line) + 1 for line in big.doc["lines"]) <= 64 * 1024
    assert big.doc["lines"][-1].endswith(" 499")  # the end is kept
    assert len(big.doc["lines"]) < 500
    assert small.doc == {
        "name": name,
        "engine": "docker",
        "lines": [f"{long_line} {i}" for i in (497, 498, 499)],
    }
    assert cli_json("logs", name, "--tail", "3", "--json") == (0, small.doc)
    assert destructive_calls(fakebin) == []


# --------------------------------------------------------------------------- secrets


def test_no_tool_output_contains_a_secret(fakebin: FakeBin, stderr_log: Path) -> None:
    """A sentinel HF_TOKEN in the server's environment (not token-shaped, so only the
    value-based redaction can catch it) and a token-shaped one pasted by the agent."""
    sentinel = "sentinel-Token-Value-7f3a9c2e51"
    pasted = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
    name = "vllm-qwen3-5-9b"
    doc = container_doc(name, managed=True)
    fake_docker(
        fakebin,
        {
            f"ps -q --no-trunc -a --filter label={MANAGED_LABEL}=true": doc["Id"] + "\n",
            f"inspect --type container {doc['Id']}": json.dumps([doc]),
            f"inspect --type container {name}": json.dumps([doc]),
            f"logs --timestamps --tail 200 {name}": f"HF_TOKEN={sentinel}\nstarted\n",
            f"logs --timestamps --tail 5000 {name}": f"token {sentinel}\nRuntimeError: boom\n",
            "info --format {{json .}}": '{"ServerVersion": "27.0"}',
        },
    )
    log_text = OOM_LOG.read_text(encoding="utf-8") + f"\nHF_TOKEN={sentinel} {pasted}\n"

    async def scenario(client: Client) -> list[Call]:
        return [
            await client.call("detect", {}),
            await client.call("check", {"model": DEFAULT_MODEL, "port": 8123}),
            await client.call("recipes_show", {"model": DEFAULT_MODEL}),
            await client.call("fit", {"model": DEFAULT_MODEL, "gpu": "mi300x"}),
            await client.call("plan", {"gpu": "mi300x"}),
            await client.call(
                "plan", {"gpu": "mi300x", "extra_env": {"HUGGING_FACE_HUB_TOKEN": sentinel}}
            ),
            await client.call("plan", {"gpu": "mi300x", "extra_env": {"HF_TOKEN": sentinel}}),
            await client.call("serve", {"gpu": "mi300x"}),
            await client.call("status", {"no_health": True}),
            await client.call("logs", {"name": name}),
            await client.call("diagnose", {"container": name}),
            await client.call("diagnose", {"log_text": log_text}),
            await client.call("diagnose", {"symptom": f"401 with token {sentinel} {pasted}"}),
            await client.call("stop", {"names": [f"x{sentinel}"[:60]]}),
        ]

    env = server_env(HF_TOKEN=sentinel)
    calls = run_session(scenario, env, stderr_path=stderr_log)
    assert len(calls) == 14
    leaked = [c.tool for c in calls if sentinel in c.everything() or pasted in c.everything()]
    assert leaked == []
    assert calls[5].error["id"] == calls[6].error["id"] == "secret_in_args"
    # the redaction left a mark where the secrets were
    assert "[redacted]" in calls[9].text and "[redacted]" in calls[11].text
    assert sentinel not in stderr_log.read_text(encoding="utf-8")
    assert destructive_calls(fakebin) == []
