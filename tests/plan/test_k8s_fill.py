"""Copies on one cold compile cache take turns on Kubernetes: the first pod fills the key, the
others wait in an init container until it has served, then start warm (``plan.k8s_cache``).

The render tests check where the wait is (several copies and a compile cache only) and that
the waiting pod and the filler's readiness probe name the same marker in the volume. The
script tests run the rendered init container's own command, as the kubelet expands it, with
real shells (``/bin/sh``, and busybox's where installed) against a temporary directory as
the volume, several processes at once.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from instinct_serve.options import KubernetesOptions
from instinct_serve.plan import kubernetes
from instinct_serve.plan.caches import FILL_SCRIPT, FILLED_MARKER, layout_for
from instinct_serve.plan.k8s_cache import FILL_CONTAINER, fill_wait_s
from instinct_serve.plan.model import LaunchPlan, startup_budget_s
from tests.plan.test_kubernetes import (
    IMAGE,
    _probe,
    container,
    expand,
    objects,
    plan_for,
    pod_templates,
)

OWNER_ENV = "INSTINCT_FILL_OWNER"


def inits(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in template["spec"].get("initContainers", [])}


def volume_path(mounts: list[dict[str, Any]], path: str) -> str:
    """Where ``path`` of a container lands in the cache volume, through its subPath mounts."""
    for mount in mounts:
        if mount["name"] == "cache" and path.startswith(mount["mountPath"] + "/"):
            return mount["subPath"] + path[len(mount["mountPath"]) :]
    raise AssertionError(f"{path} is on no mount of the cache volume")


# ----------------------------------------------------------------------------- rendering


@pytest.mark.parametrize(
    ("options", "waits"),
    [
        ({}, False),
        ({"replicas": 2}, True),
        ({"autoscale": True}, True),  # the autoscaler adds copies onto the same volume
        ({"nodes": 2}, False),  # one copy: its ranks start together, none may wait
        ({"nodes": 2, "replicas": 2}, True),
    ],
)
def test_only_several_copies_wait_for_the_filler(options: dict[str, Any], waits: bool) -> None:
    plan = plan_for(tensor_parallel_size=2 * options.get("nodes", 1))
    docs = objects(plan, **options)  # validated against the API's and the CRDs' schemas
    for role, template in pod_templates(docs).items():
        names = list(inits(template))
        # the wait first: only the filler seeds AITER, the others find it seeded
        assert names == ([FILL_CONTAINER] if waits else []) + ["seed-aiter-jit"], role
        if role != "worker":
            probe = container(template)["readinessProbe"]["exec"]["command"]
            assert probe[-1].endswith(FILLED_MARKER) == waits
            assert probe[3:6] == ["8000", "Qwen/Qwen3-8B", "generate"]
    header = kubernetes.header(plan, KubernetesOptions(**options))
    assert (FILL_CONTAINER in header) == waits
    if waits:
        assert f"at most {fill_wait_s(plan)} s" in header


def test_without_a_compile_cache_nothing_waits() -> None:
    docs = objects(plan_for(cache=None), replicas=3)
    (template,) = pod_templates(docs).values()
    assert "initContainers" not in template["spec"]
    probe = container(template)["readinessProbe"]["exec"]["command"]
    assert probe[2] == kubernetes.READY_SCRIPT and len(probe) == 6


def test_a_cpu_plan_waits_on_vllms_cache_alone() -> None:
    layout = layout_for("/srv/compile-cache", "cpu", IMAGE, None, cpu=True)
    docs = objects(plan_for(cache=layout), replicas=2)
    (template,) = pod_templates(docs).values()
    (wait,) = inits(template).values()  # no AITER to seed
    assert wait["command"][-2:] == [f"vllm/{FILLED_MARKER}", "vllm"]


def test_the_waiting_pod_looks_where_the_filler_marks(tmp_path: Path) -> None:
    """The marker the filler's readiness probe writes (a path in its vLLM container) and the
    one the init container waits for (a path under its mount of the key) are one file."""
    plan = plan_for()
    assert plan.cache is not None
    for options in ({"replicas": 3}, {"nodes": 2, "replicas": 2}):
        docs = objects(plan_for(tensor_parallel_size=2 * options.get("nodes", 1)), **options)
        templates = pod_templates(docs)
        serving = templates.get("single") or templates["leader"]
        vllm = container(serving)
        probe = vllm["readinessProbe"]["exec"]["command"]
        written = volume_path(vllm["volumeMounts"], probe[-1])
        for role, template in templates.items():
            wait = inits(template)[FILL_CONTAINER]
            command = wait["command"]
            assert command[:2] == ["sh", "-c"] and expand(command[2], {}) == FILL_SCRIPT
            mount, marker = command[4], command[8]
            assert volume_path(wait["volumeMounts"], f"{mount}/{marker}") == written, role
            assert command[9:] == list(plan.cache.warm_names) == ["vllm", "triton"]
            assert command[6] == str(startup_budget_s(plan) + 900)  # the filler's budget
            (env,) = wait["env"]
            field = env["valueFrom"]["fieldRef"]["fieldPath"]
            if role == "single":  # a pod is the owner
                assert (command[5], field) == (f"$({OWNER_ENV})", "metadata.name")
            else:  # a group is: its leader and workers start together
                assert command[5] == f"group-$({OWNER_ENV})"
                assert field == "metadata.labels['leaderworkerset.sigs.k8s.io/group-index']"


def test_the_fillers_readiness_probe_writes_the_marker(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    plan = plan_for(vllm_args=["--port", str(httpserver.port)], port=httpserver.port)
    (template,) = pod_templates(objects(plan, replicas=2)).values()
    command = list(container(template)["readinessProbe"]["exec"]["command"])
    filled = tmp_path / "vllm" / FILLED_MARKER
    filled.parent.mkdir()
    command[-1] = str(filled)
    listed = {"data": [{"id": "Qwen/Qwen3-8B"}]}
    httpserver.expect_ordered_request("/v1/models").respond_with_json({"data": []})
    done = _probe(command, tmp_path / "warm")
    assert done.returncode != 0 and not filled.exists()  # not serving yet: not filled
    httpserver.expect_ordered_request("/v1/models").respond_with_json(listed)
    httpserver.expect_ordered_request("/v1/completions").respond_with_json({"choices": []})
    done = _probe(command, tmp_path / "warm")
    assert done.returncode == 0, done.stderr
    assert filled.is_file() and (tmp_path / "warm").is_file()
    httpserver.check_assertions()


# ----------------------------------------------------------------------------- the script

SHELLS = [["/bin/sh"]] + ([["busybox", "sh"]] if shutil.which("busybox") else [])


@cache
def rendered_wait() -> tuple[str, ...]:
    (template,) = pod_templates(objects(plan_for(), replicas=3)).values()
    return tuple(inits(template)[FILL_CONTAINER]["command"])


def wait_command(shell: list[str], key_dir: Path, owner: str, bound: int) -> list[str]:
    """The rendered init container's command as the kubelet runs it (``$$`` -> ``$``, the
    owner variable filled in), on ``key_dir`` as the volume, with a short poll."""
    command = [expand(a, {OWNER_ENV: owner}) for a in rendered_wait()]
    command[4], command[6], command[7] = str(key_dir), str(bound), "0.1"
    return [*shell, *command[1:]]


def start(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 10) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out


def wait_for(predicate: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_one_pod_fills_and_the_others_wait_until_it_has_served(
    shell: list[str], tmp_path: Path
) -> None:
    key = tmp_path / "gfx942-ab12ab12ab12"
    procs = {f"pod-{i}": start(wait_command(shell, key, f"pod-{i}", 60)) for i in range(4)}
    try:
        wait_for(lambda: any(p.poll() is not None for p in procs.values()))
        time.sleep(0.5)  # several polls: nobody else gets through
        through = [name for name, p in procs.items() if p.poll() is not None]
        assert len(through) == 1, through
        (filler,) = through
        assert "fills it" in finish(procs[filler])
        assert (key / ".instinct-fill" / "lock" / "owner").read_text().split()[1] == filler
        # the filler's first compiled kernel: still compiling, the others keep waiting
        (key / "triton").mkdir()
        (key / "triton" / "kernel.json").write_text("{}")
        time.sleep(0.5)
        waiting = [p for name, p in procs.items() if name != filler]
        assert all(p.poll() is None for p in waiting)
        # its readiness probe marks the cache filled: all start from it
        (key / "vllm").mkdir()
        (key / "vllm" / FILLED_MARKER).touch()
        for proc in waiting:
            assert "compile cache warm after" in finish(proc)
        # a later pod (a restart, a scale-up) passes at once
        assert "has served from it" in finish(start(wait_command(shell, key, "pod-9", 60)), 5)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_warm_cache_passes_at_once(shell: list[str], tmp_path: Path) -> None:
    """Filled before the gate (a single pod served from it first): no lock, no wait."""
    (tmp_path / "vllm" / "torch_compile_cache").mkdir(parents=True)
    began = time.monotonic()
    out = finish(start(wait_command(shell, tmp_path, "pod-a", 60)))
    assert "holds a compile" in out and time.monotonic() - began < 20  # not the 60 s bound
    assert not (tmp_path / ".instinct-fill").exists()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_stale_lock_is_taken_over_by_one_pod(shell: list[str], tmp_path: Path) -> None:
    """A pod killed while filling left its lock: past the bound one waiter fills instead."""
    lock = tmp_path / ".instinct-fill" / "lock"
    lock.mkdir(parents=True)
    (lock / "owner").write_text(f"{int(time.time()) - 120} pod-killed\n")
    procs = [start(wait_command(shell, tmp_path, f"pod-{i}", 60)) for i in range(3)]
    try:
        wait_for(lambda: any(p.poll() is not None for p in procs))
        time.sleep(0.5)
        (taker,) = [p for p in procs if p.poll() is not None]
        out = finish(taker)
        assert "pod-killed is" in out and "taking it over" in out and "fills it" in out
        assert (lock / "owner").read_text().split()[1] != "pod-killed"
        assert all(p.poll() is None for p in procs if p is not taker)  # they wait for it
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_wait_is_bounded(shell: list[str], tmp_path: Path) -> None:
    # a lock with no owner yet (its pod died between the mkdir and the write): stale after
    # the bound from the waiter's own start
    (tmp_path / ".instinct-fill" / "lock").mkdir(parents=True)
    began = time.monotonic()
    out = finish(start(wait_command(shell, tmp_path, "pod-a", 2)))
    assert "a pod is" in out and "fills it" in out
    assert 0.9 < time.monotonic() - began < 20  # whole seconds of `date +%s`; a busy host
    # a holder whose clock runs ahead never looks stale: the waiter starts cold
    other = tmp_path / "other"
    (other / ".instinct-fill" / "lock").mkdir(parents=True)
    (other / ".instinct-fill" / "lock" / "owner").write_text(f"{int(time.time()) + 999} pod-b")
    out = finish(start(wait_command(shell, other, "pod-a", 2)))
    assert "for pod-b to fill the compile cache: starting cold" in out
    # its own lock (an init container run again in the same pod): on with the fill
    out = finish(start(wait_command(shell, other, "pod-b", 60)), 5)
    assert "pod-b took the fill lock before" in out


def test_the_plans_cache_key_names_the_directory(tmp_path: Path) -> None:
    plan: LaunchPlan = plan_for()
    assert plan.cache is not None
    (template,) = pod_templates(objects(plan, replicas=2)).values()
    (mount,) = inits(template)[FILL_CONTAINER]["volumeMounts"]
    assert mount["subPath"] == f"compile/{plan.cache.key}"


@pytest.mark.parametrize(
    "files",
    [
        [],
        ["vllm/"],  # an empty directory is no compile
        ["miopen/kernel.db"],  # MIOpen's tuning alone is not what a first start compiles
        ["vllm/torch_compile_cache/ab12/model.py"],
        ["triton/XYZ/kernel.hsaco"],
    ],
)
def test_the_pod_and_the_host_agree_on_a_warm_cache(files: list[str], tmp_path: Path) -> None:
    """One rule: the init container passes at once exactly where a replica group on docker
    would start every replica at once (``runtime.cache_seed.cache_is_warm``)."""
    from instinct_serve.hosts import LocalHost
    from instinct_serve.runtime.cache_seed import cache_is_warm

    plan = plan_for(cache=layout_for(str(tmp_path), "gfx942", IMAGE, "sha256:" + "ab" * 32))
    assert plan.cache is not None
    for rel in files:
        path = Path(plan.cache.directory) / rel
        if rel.endswith("/"):
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True)
            path.write_text("compiled")
    warm = cache_is_warm(LocalHost(), plan)
    assert warm == any(not rel.endswith("/") and not rel.startswith("miopen") for rel in files)
    out = finish(start(wait_command(["/bin/sh"], Path(plan.cache.directory), "pod-a", 60)), 5)
    assert ("holds a compile" in out) == warm and ("fills it" in out) == (not warm)
