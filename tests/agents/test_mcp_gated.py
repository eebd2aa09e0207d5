"""A gated model and no token: stopped before anything is launched, the fix in the caller's
words (issue 30). The Hub is the local HTTP double of the fit tests (``tests.fit.hubserver``:
the model's info says gated, its config.json answers 401 without a token, as the Hub does);
no HF_TOKEN in the environment and no token file."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from instinct_serve.errors import NotReadyError
from tests.agents.conftest import Call, Client, run_session, server_env
from tests.fit.conftest import hub
from tests.fit.hubserver import LLAMA, serve_model
from tests.infra.fakebin import FakeBin

__all__ = ["hub"]  # the fixture, used by name
GATED = "meta-llama/Llama-3.1-8B-Instruct"  # shipped metadata stands in for its config
OPEN = "Qwen/Qwen3-8B"


@pytest.fixture
def no_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no `hf auth login` file


def test_check_and_the_serve_summary_stop_a_gated_model_without_a_token(
    hub: HTTPServer, no_token: None, fakebin: FakeBin
) -> None:
    serve_model(hub, GATED, LLAMA, {"BF16": 8_030_261_248}, gated=True)
    fakebin.add("docker", {}, default=("", 0))  # records every call

    async def scenario(client: Client) -> list[Call]:
        return [
            await client.call("check", {"model": GATED}),
            await client.call("serve", {"model": GATED, "gpu": "mi300x"}),
        ]

    check, summary = run_session(scenario, server_env(HF_HUB_OFFLINE="0"))
    token = next(c for c in check.doc["checks"] if c["id"] == "hf_token")
    assert token["status"] == "error" and token["details"]["model_gated"] is True
    assert check.exit_code == 3
    for fix in (token["fix"], summary.error["fix"]):  # an MCP caller exports nothing
        assert "MCP server" in fix and "export" not in fix, fix
    assert summary.error["id"] == "gated_model" and summary.exit_code == 3
    assert summary.error["details"]["license_url"].endswith(f"/{GATED}")
    assert "plan_hash" not in summary.text  # no summary to approve
    assert [c for c in fakebin.calls("docker") if c and c[0] == "run"] == []


def test_the_launch_path_refuses_it_in_the_clis_words(hub: HTTPServer, no_token: None) -> None:
    """``runtime.prepare.require_token``, as the CLI's serve reaches it after planning (a
    catalog name the host check could not tell gated); with a token, or an open model, it
    passes."""
    from instinct_serve.gather.plan import plan_for
    from instinct_serve.hosts import resolve_host
    from instinct_serve.options import PlanOptions
    from instinct_serve.runtime.prepare import require_token

    serve_model(hub, GATED, LLAMA, {"BF16": 8_030_261_248}, gated=True)
    serve_model(hub, OPEN, LLAMA, {"BF16": 8_030_261_248})
    host = resolve_host("local")
    gated = plan_for(PlanOptions.parse({"model": GATED, "gpu": "mi300x"}), host, fallback_gpu=True)
    with pytest.raises(NotReadyError) as err:
        require_token(gated)
    assert err.value.id == "gated_model"
    assert "export HF_TOKEN" in (err.value.fix or "")  # the CLI's words
    assert "MCP server" in (err.value.agent_fix or "")
    opened = plan_for(PlanOptions.parse({"model": OPEN, "gpu": "mi300x"}), host, fallback_gpu=True)
    require_token(opened)  # not gated: nothing to refuse


def test_a_token_in_the_environment_lets_it_through(
    hub: HTTPServer, no_token: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from instinct_serve.gather.plan import plan_for
    from instinct_serve.hosts import resolve_host
    from instinct_serve.options import PlanOptions
    from instinct_serve.runtime.prepare import require_token

    serve_model(hub, GATED, LLAMA, {"BF16": 8_030_261_248}, gated=True)
    host = resolve_host("local")
    result = plan_for(PlanOptions.parse({"model": GATED, "gpu": "mi300x"}), host, fallback_gpu=True)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)
    require_token(result)


def test_the_hub_is_asked_at_the_endpoint_of_now_not_of_import(
    hub: HTTPServer, no_token: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """huggingface_hub copies HF_ENDPOINT when it is first imported; a process (a test
    worker, a long-lived MCP server) whose environment changed after that still asks the
    endpoint its environment names now."""
    from huggingface_hub import constants

    from instinct_serve.checks.hub import model_is_gated

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    serve_model(hub, GATED, LLAMA, {"BF16": 8_030_261_248}, gated=True)
    assert model_is_gated(GATED) is True
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert model_is_gated(GATED) is None  # offline: unknown, never a network call
