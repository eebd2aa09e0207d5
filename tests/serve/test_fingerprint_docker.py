"""The fingerprint on the real dockerd path: a container whose answers are right on a short
prompt but garbage past a context length is caught at start-up, named ``long_context``,
relaunched once with the AITER switch, proven, and recorded with its image's digest; one
that drifts while serving is caught by ``watch``'s canary and relaunched the same way; a
replica group's upgrade whose new replicas compute something else keeps the router on the
old ones."""

from __future__ import annotations

import json
import time

from instinct_serve import paths
from tests.infra.docker import TestImage
from tests.infra.ports import free_port, free_port_run
from tests.serve.conftest import Serve, inspect, parse_lines, run_cli
from tests.serve.test_group_upgrade import ids


def test_garbage_past_a_context_length_is_caught_and_relaunched_with_the_fallback(
    serve: Serve,
) -> None:
    name = serve.name("fp")
    image = serve.double("healthy", VLLM_DOUBLE_GARBAGE_PAST="1000")
    run = serve(image=image, name=name)
    assert run.returncode == 0, run.explain()
    [relaunch] = run.of("relaunch")
    assert relaunch["finding"] == "wrong_output"
    assert relaunch["title"].endswith(": long_context")
    assert relaunch["changes"] == ["VLLM_ROCM_USE_AITER=0"]
    assert [e["verdict"] for e in run.of("coherence")] == ["coherent", "coherent"]
    endpoint = run.result["endpoint"]
    assert endpoint["fingerprint"]["ok"] is True
    info = inspect(name)
    assert info is not None and "VLLM_ROCM_USE_AITER=0" in info["Config"]["Env"]
    doc = json.loads((paths.data_dir() / "fingerprints" / f"{name}.json").read_text())
    assert doc["image"] == image and doc["image_digest"].startswith("sha256:")
    assert doc["image_digest"] == info["Image"]
    long = next(s for s in doc["fingerprint"]["scores"] if s["name"] == "long")
    assert long["tokens"] > 1000 and long["copy_gain"] > 1.0


def test_watch_catches_drift_in_service_and_relaunches_the_container_with_the_fallback(
    serve: Serve,
) -> None:
    name = serve.name("fpw")
    image = serve.double("healthy", VLLM_DOUBLE_DRIFT_AFTER_S="4")
    run = serve(image=image, port=free_port(), name=name)
    assert run.returncode == 0, run.explain()
    first = inspect(name)
    assert first is not None
    time.sleep(4.2)
    bounded = ["--interval", "0.3", "--canary", "1", "--for", "12", "--timeout", "60"]
    watch = run_cli(["watch", name, *bounded, "--root", str(serve.root), "--json"], timeout=150)
    assert watch.returncode == 0, watch.explain()
    events = parse_lines(watch.stdout)
    kinds = [e["kind"] for e in events]
    failed = next(e for e in events if e["kind"] == "canary_failed")
    assert failed["failure"] == "drift"
    relaunched = next(e for e in events if e["kind"] == "relaunched")
    assert relaunched["fixes"] == ["wrong_output"] and relaunched["status"] == "ready"
    assert "canary_passed" in kinds[kinds.index("recovered") :], kinds
    info = inspect(name)
    assert info is not None and info["Id"] != first["Id"]
    assert "VLLM_ROCM_USE_AITER=0" in info["Config"]["Env"]
    saved = next(e for e in events if e["kind"] == "crash_log")
    assert saved["saved"]  # the drifted container's log was kept beside the journal


def test_a_group_candidate_that_computes_something_else_does_not_get_the_router(
    serve: Serve, router_test_image: TestImage
) -> None:
    port, name = free_port_run(3), serve.name("fpg")
    old_names = [f"{name}-r{i}" for i in range(2)]
    new_names = [f"{name}-next-r{i}" for i in range(2)]
    serve.names.extend(old_names + new_names)
    common = ["--gpu-count", "4", "--replicas", "2", "--router-image", router_test_image.tag]
    first = serve(*common, "--gpus", "0,1", image=serve.double(load_s=0.5), name=name, port=port)
    assert first.returncode == 0, first.explain()
    before = ids([name, *old_names])
    config = paths.data_dir() / "groups" / f"{name}.haproxy.cfg"
    config_before = config.read_text()
    # no reference for the checkpoint (records lost): each new replica passes its own
    # checks; the comparison with what the group serves now sees the drift
    for ref in (paths.data_dir() / "fingerprints" / "references").glob("*.json"):
        ref.unlink()
    drifted = serve.double(load_s=0.5, VLLM_DOUBLE_DRIFT_AFTER_S="0", VLLM_DOUBLE_FAULT_FIX="none")
    run = serve("--upgrade", *common, "--gpus", "2,3", image=drifted, name=name, port=port)
    assert run.returncode == 1, run.explain()
    failure = run.result["failure"]
    assert failure["id"] == "wrong_output", failure
    assert "something else than the running endpoint: drift" in failure["title"]
    assert any("still serves the old plan, untouched" in n for n in run.result["notes"])
    assert ids([name, *old_names]) == before
    assert config.read_text() == config_before
    kept = [info for info in (inspect(n) for n in new_names) if info is not None]
    assert len(kept) == 1 and not kept[0]["State"]["Running"]  # the one compared, for its log
