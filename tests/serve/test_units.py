"""The pure parts of serve: retry hints applied to a plan, labels, the curl line, secrets,
outcome exit codes (no daemon needed)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime.backend import LABEL_FIXES, ExitInfo, launch_labels
from instinct_serve.runtime.documents import Endpoint, ServeOutcome, curl_command
from instinct_serve.runtime.retry import apply_retry
from instinct_serve.runtime.secret_env import local_secrets
from instinct_serve.runtime.settings import ServeSettings, detaches, startup_timeout_s


def plan(**over: object) -> LaunchPlan:
    base = LaunchPlan(
        model="org/model",
        requested_model="org/model",
        image="vllm/vllm-openai-rocm:v0.27.1",
        container_name="vllm-model",
        port=8000,
        vllm_args=["--port", "8000", "--max-num-seqs", "256"],
        env={"VLLM_ROCM_USE_AITER": "1"},
        weight_memory_gb=16.0,
    )
    for key, value in over.items():
        setattr(base, key, value)
    return base


def test_add_args_appends_once() -> None:
    original = plan()
    new, changes = apply_retry(original, {"add_args": ["--enforce-eager"]})
    assert new.vllm_args[-1] == "--enforce-eager" and changes == ["--enforce-eager"]
    assert "--enforce-eager" not in original.vllm_args  # the original is untouched
    again, none = apply_retry(new, {"add_args": ["--enforce-eager"]})
    assert none == [] and again.vllm_args.count("--enforce-eager") == 1


def test_add_args_with_a_value_replaces_the_option() -> None:
    new, changes = apply_retry(plan(), {"add_args": ["--max-num-seqs", "64"]})
    assert new.vllm_args.count("--max-num-seqs") == 1
    assert new.vllm_args[new.vllm_args.index("--max-num-seqs") + 1] == "64"
    assert changes == ["--max-num-seqs 64"]


def test_set_env_and_options() -> None:
    hint = {
        "set_env": {"VLLM_ROCM_USE_AITER": "0"},
        "max_model_len": 32768,
        "gpu_memory_utilization": 0.85,
        "max_num_seqs": 128,
    }
    new, changes = apply_retry(plan(), hint)  # type: ignore[arg-type]
    assert new.env["VLLM_ROCM_USE_AITER"] == "0" and new.max_model_len == 32768
    args = new.vllm_args
    assert args[args.index("--max-model-len") + 1] == "32768"
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.85"
    assert args[args.index("--max-num-seqs") + 1] == "128" and args.count("--max-num-seqs") == 1
    assert changes == [
        "VLLM_ROCM_USE_AITER=0",
        "--max-model-len 32768",
        "--gpu-memory-utilization 0.85",
        "--max-num-seqs 128",
    ]


def test_retry_edits_go_through_every_argv_form() -> None:
    equals = plan(vllm_args=["--max-num-seqs=256", "--no-enforce-eager"])
    new, changes = apply_retry(
        equals, {"add_args": ["--enforce-eager", "--max-num-seqs", "64"], "max_num_seqs": 64}
    )
    assert new.vllm_args == ["--enforce-eager", "--max-num-seqs", "64"]
    assert changes == ["--enforce-eager", "--max-num-seqs 64"]
    same, none = apply_retry(new, {"add_args": ["--max-num-seqs=64"]})
    assert none == [] and same.vllm_args == new.vllm_args


def test_labels_keep_the_requested_plan_hash_across_relaunches() -> None:
    requested = plan()
    requested.labels = launch_labels(requested, [])
    first_hash = requested.labels[LABEL_PLAN_HASH]
    assert first_hash == requested.plan_hash
    relaunched, _ = apply_retry(requested, {"add_args": ["--enforce-eager"]})
    assert relaunched.plan_hash != first_hash
    labels = launch_labels(relaunched, ["oom_graph_capture"])
    assert labels[LABEL_PLAN_HASH] == first_hash
    assert labels[LABEL_FIXES] == "oom_graph_capture"
    assert labels["instinct-serve.managed"] == "true" and labels["instinct-serve.port"] == "8000"


def _endpoint(use_chat: bool, api_key: str | None = None) -> Endpoint:
    return Endpoint(
        base_url="http://gpu-box:8000/v1",
        model="org/it's-a-model",
        container="vllm-model",
        engine="docker",
        host="gpu-box",
        port=8000,
        tensor_parallel_size=2,
        max_model_len=32768,
        image="img",
        use_chat=use_chat,
        api_key_env=api_key,
    )


def test_curl_uses_the_exact_values_and_quotes_them() -> None:
    chat = shlex.split(curl_command(_endpoint(True)))
    assert chat[:3] == ["curl", "-sS", "http://gpu-box:8000/v1/chat/completions"]
    body = json.loads(chat[chat.index("-d") + 1])
    assert body["model"] == "org/it's-a-model" and body["messages"]
    plain = shlex.split(curl_command(_endpoint(False)))
    assert plain[2] == "http://gpu-box:8000/v1/completions"
    assert "prompt" in json.loads(plain[plain.index("-d") + 1])
    keyed = curl_command(_endpoint(True, "VLLM_API_KEY"))
    assert 'Authorization: Bearer $VLLM_API_KEY"' in keyed  # by name, never the value


def test_secrets_from_env_then_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("hf_from_file\n")
    monkeypatch.setenv("HF_TOKEN_PATH", str(token))
    assert local_secrets(["HF_TOKEN"]) == {"HF_TOKEN": "hf_from_file"}
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    assert local_secrets(["HF_TOKEN", "OTHER_SECRET"]) == {"HF_TOKEN": "hf_from_env"}
    monkeypatch.delenv("HF_TOKEN")
    token.unlink()
    assert local_secrets(["HF_TOKEN"]) == {}


def test_detach_and_timeouts_scale_with_weights() -> None:
    small, large = plan(weight_memory_gb=16.0), plan(weight_memory_gb=140.0)
    assert not detaches(small, ServeSettings()) and detaches(large, ServeSettings())
    assert detaches(small, ServeSettings(detach=True))
    assert not detaches(large, ServeSettings(detach=False))
    assert startup_timeout_s(large) > startup_timeout_s(small) >= 600


def test_outcome_exit_codes() -> None:
    base = plan()
    assert ServeOutcome("ready", "local", "docker", base).exit_code == 0
    assert ServeOutcome("loading", "local", "docker", base).exit_code == 0
    assert ServeOutcome("failed", "local", "docker", base).exit_code == 1
    assert ServeOutcome("timeout", "local", "docker", base).exit_code == 1
    assert ServeOutcome("interrupted", "local", "docker", base).exit_code == 130
    doc = ServeOutcome("ready", "local", "docker", base).to_dict()
    assert doc["event"] == "result" and doc["ok"] is True and doc["plan_hash"] == base.plan_hash


def test_exit_descriptions() -> None:
    assert ExitInfo(1).describe() == "exited with code 1"
    assert "SIGKILL" in ExitInfo(137).describe()
    assert "out-of-memory killer" in ExitInfo(137, oom_killed=True).describe()


def test_a_foreign_port_holder_is_refused_in_the_callers_words() -> None:
    """The CLI's fix names --port; an MCP caller's (``to_dict(agent=True)``, what the
    server returns) names the tool argument ``port`` and no flag."""
    import pytest

    from instinct_serve.errors import NotReadyError
    from instinct_serve.hosts import LocalHost
    from instinct_serve.runtime.backend import Occupant
    from instinct_serve.runtime.claim import refuse_foreign

    with pytest.raises(NotReadyError) as info:
        refuse_foreign(LocalHost(), plan(), [Occupant("nginx (pid 42)", managed=False)])
    assert info.value.id == "port_in_use" and "--port 8001" in str(info.value.to_dict()["fix"])
    agent = info.value.to_dict(agent=True)
    assert "`port` (e.g. 8001)" in agent["fix"] and "--" not in agent["fix"]
    assert agent["message"] == info.value.message  # the same failure, told another way
