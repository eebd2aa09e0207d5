"""Renderers: shell round-trips, compose, secrets by name only (Kubernetes: test_kubernetes)."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from instinct_serve.plan.model import LaunchPlan, Mount
from instinct_serve.plan.render import (
    compose_service,
    docker_argv,
    native_script,
    render,
    shell_line,
)

AMD_FLAGS = [
    "--group-add=video",
    "--group-add=render",
    "--cap-add=SYS_PTRACE",
    "--security-opt seccomp=unconfined",
    "--device /dev/kfd",
    "--device /dev/dri",
    "--ipc=host",
]

SPEC_CONFIG = json.dumps({"method": "mtp", "num_speculative_tokens": 2})


def sample_plan(**over: Any) -> LaunchPlan:
    plan = LaunchPlan(
        model="Qwen/Qwen3.5-9B",
        requested_model="Qwen/Qwen3.5-9B",
        image="vllm/vllm-openai-rocm:v0.22.0",
        container_name="vllm-qwen3-5-9b",
        port=8000,
        docker_flags=list(AMD_FLAGS),
        mounts=[Mount("/home/u/.cache/huggingface", "/root/.cache/huggingface")],
        env={"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_FP4BMM": "0"},
        secret_env=["HF_TOKEN"],
        vllm_args=["--speculative-config", SPEC_CONFIG, "--port", "8000"],
        labels={"instinct-serve.managed": "true", "instinct-serve.model": "Qwen/Qwen3.5-9B"},
        weight_memory_gb=19.3,
    )
    for key, value in over.items():
        setattr(plan, key, value)
    return plan


def test_docker_argv_has_every_part_in_order() -> None:
    argv = docker_argv(sample_plan())
    assert argv[:5] == ["docker", "run", "-d", "--name", "vllm-qwen3-5-9b"]
    # multi-word flags become two tokens, single ones stay whole
    i = argv.index("--security-opt")
    assert argv[i + 1] == "seccomp=unconfined"
    assert argv[argv.index("--device") + 1] == "/dev/kfd"
    assert "--ipc=host" in argv
    assert argv[argv.index("-p") + 1] == "8000:8000"
    assert argv[argv.index("-v") + 1] == "/home/u/.cache/huggingface:/root/.cache/huggingface"
    image_at = argv.index("vllm/vllm-openai-rocm:v0.22.0")
    assert argv[image_at + 1] == "Qwen/Qwen3.5-9B"  # vllm serve's positional model
    # the secret goes by name only: `--env HF_TOKEN`, never `HF_TOKEN=...`
    assert argv[argv.index("--env") + 1] == "HF_TOKEN"
    assert not any(a.startswith("HF_TOKEN=") for a in argv)
    # labels precede the image (docker options), engine args follow it
    assert argv.index("--label") < image_at


def test_shell_line_round_trips_json_args() -> None:
    plan = sample_plan()
    line = shell_line(plan)
    assert "\n" not in line
    assert shlex.split(line) == docker_argv(plan)
    # the JSON of --speculative-config survives the shell intact
    parsed = shlex.split(line)
    assert json.loads(parsed[parsed.index("--speculative-config") + 1])["method"] == "mtp"


hostile = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(model=hostile, value=hostile, arg=hostile)
def test_shell_line_round_trips_hostile_values(model: str, value: str, arg: str) -> None:
    plan = sample_plan(model=model, env={"X": value}, vllm_args=["--chat-template", arg])
    assert shlex.split(shell_line(plan)) == docker_argv(plan)


def test_native_script_exports_env_and_restricts_gpus() -> None:
    plan = sample_plan(gpu_indices=[2, 3], env={"A": "x y; rm -rf /"})
    text = native_script(plan)
    lines = text.strip().splitlines()
    assert "export A='x y; rm -rf /'" in lines
    assert "export HIP_VISIBLE_DEVICES=2,3" in lines
    assert shlex.split(lines[-1])[:3] == ["vllm", "serve", "Qwen/Qwen3.5-9B"]
    assert not any(line.startswith("export HF_TOKEN") for line in lines)


def test_compose_maps_amd_flags_to_service_keys() -> None:
    doc = yaml.safe_load(render(sample_plan(), "compose"))
    svc = doc["services"]["vllm-qwen3-5-9b"]
    assert svc["devices"] == ["/dev/kfd", "/dev/dri"]
    assert svc["group_add"] == ["video", "render"]
    assert svc["cap_add"] == ["SYS_PTRACE"]
    assert svc["security_opt"] == ["seccomp=unconfined"]
    assert svc["ipc"] == "host"
    assert svc["command"][0] == "Qwen/Qwen3.5-9B"
    assert "HF_TOKEN" in svc["environment"]  # by name: compose takes it from the shell
    plan = sample_plan()
    # the endpoint's labels and the ones a Prometheus docker_sd job discovers /metrics by
    assert svc["labels"]["prometheus.io/scrape"] == "true"
    assert svc["labels"]["prometheus.io/port"] == str(plan.port)
    assert all(svc["labels"][k] == v for k, v in plan.labels.items())
    assert "x-instinct-serve-unmapped-flags" not in doc
    assert compose_service(sample_plan(docker_flags=["--weird"]))[
        "x-instinct-serve-unmapped-flags"
    ] == ["--weird"]


@pytest.mark.parametrize("fmt", ["json", "docker", "shell", "native", "compose", "k8s"])
def test_no_format_contains_a_token_value(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = "hf_SENTINEL_should_never_appear_1234"
    monkeypatch.setenv("HF_TOKEN", sentinel)
    assert sentinel not in render(sample_plan(), fmt)


def test_yaml_has_no_anchors_even_for_shared_dicts() -> None:
    from instinct_serve.plan.render import to_yaml

    shared = {"app": "x"}
    text = to_yaml([{"a": shared, "b": shared}, {"c": shared}])
    assert "&id" not in text and "*id" not in text
    assert list(yaml.safe_load_all(text)) == [{"a": shared, "b": shared}, {"c": shared}]
    script = to_yaml({"script": "import os\nprint(os.getpid())\n"})
    assert script == "script: |\n  import os\n  print(os.getpid())\n"
