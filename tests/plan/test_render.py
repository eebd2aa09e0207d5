"""Renderers: shell round-trips, compose and Kubernetes objects, secrets by name only."""

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
    k8s_objects,
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
    assert "x-instinct-serve-unmapped-flags" not in doc
    assert compose_service(sample_plan(docker_flags=["--weird"]))[
        "x-instinct-serve-unmapped-flags"
    ] == ["--weird"]


def _validate_k8s(obj: dict[str, Any]) -> Any:
    """Deserialize into the official client's typed models: unknown kinds or wrong field
    types fail, as the API server would reject them."""
    kubernetes = pytest.importorskip("kubernetes")
    api = kubernetes.client.ApiClient()
    kind = {
        "Deployment": "V1Deployment",
        "Service": "V1Service",
        "PersistentVolumeClaim": "V1PersistentVolumeClaim",
    }[obj["kind"]]

    return api.deserialize(json.dumps(obj), kind, "application/json")


def test_k8s_objects_are_valid_kubernetes_objects() -> None:
    docs = list(
        yaml.safe_load_all(render(sample_plan(tensor_parallel_size=2, gpu_indices=[0, 1]), "k8s"))
    )
    kinds = [d["kind"] for d in docs]
    assert kinds == ["PersistentVolumeClaim", "Deployment", "Service"]
    typed = [_validate_k8s(d) for d in docs]
    deployment = typed[1]
    container = deployment.spec.template.spec.containers[0]
    assert container.resources.limits == {"amd.com/gpu": "2"}
    assert container.startup_probe.http_get.path == "/health"
    assert container.startup_probe.failure_threshold * container.startup_probe.period_seconds >= 600
    assert container.readiness_probe.http_get.path == "/health"
    assert container.liveness_probe.http_get.path == "/health"
    env = {e.name: e for e in container.env}
    assert env["HF_TOKEN"].value is None
    assert env["HF_TOKEN"].value_from.secret_key_ref.name == "hf-token"
    # the device plugin assigns GPUs: no device-restricting env inside the pod
    assert "HIP_VISIBLE_DEVICES" not in env
    volumes = {v.name: v for v in deployment.spec.template.spec.volumes}
    assert volumes["dshm"].empty_dir.medium == "Memory"
    assert volumes["hf-cache"].persistent_volume_claim.claim_name == typed[0].metadata.name
    assert typed[2].spec.ports[0].port == 8000


def test_k8s_rejects_malformed_object() -> None:
    """The validator used above is not a rubber stamp."""
    bad = k8s_objects(sample_plan())[1]
    bad["spec"]["template"]["spec"]["containers"][0].pop("name")
    with pytest.raises(ValueError):
        _validate_k8s(bad)


@pytest.mark.parametrize("fmt", ["json", "docker", "shell", "native", "compose", "k8s"])
def test_no_format_contains_a_token_value(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = "hf_SENTINEL_should_never_appear_1234"
    monkeypatch.setenv("HF_TOKEN", sentinel)
    assert sentinel not in render(sample_plan(), fmt)


def test_the_native_script_prints_the_bind_serve_launches() -> None:
    """``plan --format native`` shows what ``serve --engine native`` runs: 127.0.0.1 unless
    the arguments name a --host (vLLM's own default is every interface)."""
    plan = sample_plan(vllm_args=["--port", "8000"])
    argv = shlex.split(native_script(plan).strip().splitlines()[-1])
    assert argv[3:] == ["--host", "127.0.0.1", "--port", "8000"]
    opened = sample_plan(vllm_args=["--port", "8000", "--host", "0.0.0.0"])
    argv = shlex.split(native_script(opened).strip().splitlines()[-1])
    assert argv[3:] == ["--port", "8000", "--host", "0.0.0.0"]
