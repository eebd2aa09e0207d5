"""The persistent compile caches in every rendering (``plan.caches``): docker, the shell
line a real ``sh`` runs, native, compose (Kubernetes: test_kubernetes), the key, ``off``, and
the seed script run by a real python against a stand-in ``aiter`` package."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions
from instinct_serve.plan.caches import (
    COMPILE_CACHES,
    SEED_MARKER,
    SEED_SCRIPT,
    cache_key,
    layout_for,
    seed_argv,
)
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.plan.render import compose_service, docker_argv, native_env, render
from tests.plan.test_render import _recorders, _run_sh, sample_plan

IMAGE = "vllm/vllm-openai-rocm:v0.22.0"
DIGEST = "sha256:" + "ab12" * 16
ROOT = "/srv/cc"


def cached_plan(**over: Any) -> LaunchPlan:
    return sample_plan(cache=layout_for(ROOT, "gfx942", IMAGE, DIGEST), image=IMAGE, **over)


def test_key_is_gfx_and_image_digest_then_reference_then_native() -> None:
    assert cache_key("gfx942", IMAGE, DIGEST) == "gfx942-ab12ab12ab12"
    other = cache_key("gfx950", IMAGE, DIGEST)
    assert other == "gfx950-ab12ab12ab12"  # another architecture: its own directory
    ref = cache_key("gfx942", IMAGE, None)  # not pulled yet: the reference, re-keyed later
    assert ref.startswith("gfx942-ref-") and ref != cache_key("gfx942", IMAGE + "x", None)
    pinned = cache_key("gfx942", "repo/img@sha256:" + "cd34" * 16, None)
    assert pinned == "gfx942-cd34cd34cd34"
    assert cache_key("gfx942", IMAGE, DIGEST, engine="native") == "gfx942-native"


def test_docker_argv_mounts_every_cache_and_points_its_variables_there() -> None:
    plan = cached_plan()
    argv = docker_argv(plan)
    volumes = [argv[i + 1] for i, a in enumerate(argv) if a == "-v"]
    envs = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    for cache in COMPILE_CACHES:
        assert f"{ROOT}/gfx942-ab12ab12ab12/{cache.name}:{cache.container_path}" in volumes
        for variable in cache.variables:
            assert f"{variable}={cache.container_path}" in envs
    assert argv.index(IMAGE) > max(i for i, a in enumerate(argv) if a in ("-v", "-e"))


def test_a_variable_the_plan_sets_itself_is_the_plans() -> None:
    plan = cached_plan(env={"VLLM_CACHE_ROOT": "/mine"})
    envs = [a for a in docker_argv(plan) if a.startswith("VLLM_CACHE_ROOT=")]
    assert envs == ["VLLM_CACHE_ROOT=/mine"]


def test_off_mounts_nothing() -> None:
    argv = docker_argv(sample_plan())
    assert not any("compile" in a or a.startswith("TRITON_CACHE_DIR=") for a in argv)
    assert seed_argv(None, IMAGE) is None


def test_native_env_points_at_the_host_directories_without_aiter() -> None:
    plan = sample_plan(cache=layout_for(ROOT, "gfx942", IMAGE, None, engine="native"))
    env = native_env(plan)
    assert env["VLLM_CACHE_ROOT"] == f"{ROOT}/gfx942-native/vllm"
    assert env["TRITON_CACHE_DIR"] == f"{ROOT}/gfx942-native/triton"
    assert env["MIOPEN_USER_DB_PATH"] == f"{ROOT}/gfx942-native/miopen"
    # the user's own AITER keeps its modules in its package directory
    assert "AITER_JIT_DIR" not in env
    assert f"export VLLM_CACHE_ROOT={ROOT}/gfx942-native/vllm" in render(plan, "native")


def test_compose_mounts_the_caches_and_seeds_aiter_before_vllm() -> None:
    plan = cached_plan()
    doc = compose_service(plan)
    services = doc["services"]
    svc = services[plan.container_name]
    key_dir = f"{ROOT}/gfx942-ab12ab12ab12"
    for cache in COMPILE_CACHES:
        assert f"{key_dir}/{cache.name}:{cache.container_path}" in svc["volumes"]
    assert "AITER_JIT_DIR=/root/.cache/aiter-jit" in svc["environment"]
    seeder = f"{plan.container_name}-seed-aiter"
    assert svc["depends_on"] == {seeder: {"condition": "service_completed_successfully"}}
    seed = services[seeder]
    assert seed["image"] == IMAGE and seed["entrypoint"] == ["python3"]
    assert seed["command"] == ["-c", SEED_SCRIPT, "/seed"]
    assert seed["volumes"] == [f"{key_dir}/aiter:/seed"]
    assert yaml.safe_load(render(plan, "compose")) == doc  # what is printed is this


def test_shell_format_runs_the_seed_then_the_container(tmp_path: Path) -> None:
    """A real sh runs the printed text: the seeding ``docker run --rm``, then the serve."""
    bin_dir, record = _recorders(tmp_path)
    plan = cached_plan()
    done = _run_sh(render(plan, "shell"), bin_dir, record, tmp_path)
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    seed = seed_argv(plan.cache, IMAGE)
    assert seed is not None
    assert [c["argv"] for c in calls] == [seed[1:], docker_argv(plan)[1:]]
    assert shlex.split(render(plan, "shell").split(" &&\n")[1]) == docker_argv(plan)


def test_make_plan_default_root_and_off() -> None:
    plan = make_plan(PlanOptions(gpu="mi300x", hf_cache="/srv/hf")).plan
    assert plan.cache is not None
    assert plan.cache.root == f"{os.environ['INSTINCT_CACHE_DIR']}/compile-cache"
    assert plan.cache.key.startswith("gfx942-")
    assert any(r.source == "compile cache" for r in plan.reasons)
    off = make_plan(PlanOptions(gpu="mi300x", hf_cache="/srv/hf", compile_cache="off")).plan
    assert off.cache is None and not any(r.source == "compile cache" for r in off.reasons)
    assert off.plan_hash != plan.plan_hash  # a different launch, a different plan


def _fake_aiter(site: Path) -> Path:
    jit = site / "aiter" / "jit"
    jit.mkdir(parents=True)
    (site / "aiter" / "__init__.py").write_text("raise SystemExit('aiter must not be imported')\n")
    (jit / "module_moe.so").write_bytes(b"\x7fELF prebuilt moe")
    (jit / "module_gemm.so").write_bytes(b"\x7fELF prebuilt gemm")
    (jit / "core.py").write_text("# not a module\n")
    return jit


def _seed(dest: Path, site: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", SEED_SCRIPT, str(dest)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": str(site)},
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_seed_script_copies_the_prebuilt_modules_once(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_aiter(site)
    dest = tmp_path / "cache" / "aiter"
    first = _seed(dest, site)
    assert first["seeded"] == "now" and first["copied"] == 2
    assert (dest / "module_moe.so").read_bytes() == b"\x7fELF prebuilt moe"
    assert not (dest / "core.py").exists() and (dest / SEED_MARKER).is_file()
    (dest / "module_moe.so").write_bytes(b"rebuilt by AITER for this GPU")
    second = _seed(dest, site)
    assert second == {"seeded": "before", "copied": 0}
    assert (dest / "module_moe.so").read_bytes() == b"rebuilt by AITER for this GPU"


def test_seed_script_without_aiter_marks_the_directory(tmp_path: Path) -> None:
    dest = tmp_path / "aiter"
    result = _seed(dest, tmp_path / "empty-site")
    assert result["seeded"] == "now" and result["copied"] == 0
    assert (dest / SEED_MARKER).is_file()


def test_a_cpu_plan_keeps_vllms_cache_only() -> None:
    layout = layout_for(ROOT, "cpu", IMAGE, None, engine="native", cpu=True)
    assert layout.names == ("vllm",)
    docker = layout_for(ROOT, "cpu", IMAGE, DIGEST, cpu=True)
    assert docker.names == ("vllm",) and seed_argv(docker, IMAGE) is None
