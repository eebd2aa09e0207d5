"""A large model (100 GB+ of weights) is left loading by ``serve``; the next ``serve`` of
the same plan waits for it, warms it up and probes it, and from then on ``serve`` and
``ps`` report what was proven, for this very run of the container only."""

from __future__ import annotations

import json

import pytest

from tests.infra.ports import free_port
from tests.serve.conftest import Serve, docker, run_cli

pytestmark = pytest.mark.docker

LARGE = "meta-llama/Llama-3.3-70B-Instruct"  # 141 GB of bf16 weights: serve detaches


def proven(name: str) -> dict[str, object] | None:
    ps = run_cli(["ps", "--json", "--no-health"])
    assert ps.returncode == 0, ps.explain()
    rows = {row["name"]: row for row in json.loads(ps.stdout)["endpoints"]}
    verified: dict[str, object] | None = rows[name]["verified"]
    return verified


def test_a_detached_large_model_is_proven_by_the_next_serve(serve: Serve) -> None:
    port, name = free_port(), serve.name("large")
    image = serve.double(load_s=4.0)
    first = serve(model=LARGE, port=port, name=name, image=image)
    assert first.returncode == 0, first.explain()
    assert first.result["status"] == "loading"
    assert first.result["endpoint"]["coherence"] is None
    assert proven(name) is None  # /health alone proves nothing yet

    second = serve(model=LARGE, port=port, name=name, image=image)
    assert second.returncode == 0, second.explain()
    result = second.result
    assert result["status"] in ("ready", "reused"), result  # caught loading, or just ready
    assert result["endpoint"]["coherence"]["verdict"] == "coherent"
    assert result["endpoint"]["warmup_latency_s"] is not None
    assert "warming_up" in second.phases and "coherence_probe" in second.phases
    shown = proven(name)
    assert shown is not None and shown["coherence"] == "coherent"

    third = serve(model=LARGE, port=port, name=name, image=image)
    assert third.returncode == 0 and third.result["status"] == "reused", third.explain()
    assert third.result["endpoint"]["coherence"]["verdict"] == "coherent"
    assert "warming_up" not in third.phases  # the record answers: no second warm-up

    # a restart is a new run of the container: what was proven is no longer about it
    assert docker("restart", "-t", "2", name).returncode == 0
    assert proven(name) is None
    run_cli(["stop", "--yes", name, "--json"])
