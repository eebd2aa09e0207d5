"""The fingerprint on the real dockerd path: a container whose answers are right on a short
prompt but garbage past a context length is caught at start-up, named ``long_context``,
relaunched once with the AITER switch, proven, and recorded with its image's digest."""

from __future__ import annotations

import json

from instinct_serve import paths
from tests.serve.conftest import Serve, inspect


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
