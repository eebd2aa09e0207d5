"""The upgrade's fingerprint gate (``runtime.upgrade_gate``) on its own: what it compares,
what it does not, and the running endpoint's record standing in when it cannot be reached
(real records in a temporary data directory, a port nothing listens on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from instinct_serve.hosts import LocalHost
from instinct_serve.observe import fingerprint as fp
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import fingerprints
from instinct_serve.runtime.upgrade_gate import compare
from tests.infra.ports import free_port

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def plan(
    name: str, *, model: str = MODEL, args: tuple[str, ...] = (), server: str = "vllm"
) -> LaunchPlan:
    return LaunchPlan(
        server=server,
        model=model,
        requested_model=model,
        image="vllm/vllm-openai-rocm:v0.26.0",
        container_name=name,
        port=free_port(),
        vllm_args=list(args),
        gfx_version="gfx942",
    )


def taken(shift: float) -> fp.Fingerprint:
    scores = fp.ProbeScores.of("short", [-2.0 - (i % 5) * 0.3 + shift for i in range(60)])
    return fp.Fingerprint((scores,), fp.GreedyRun.of("a b", list(range(32)), [-0.5] * 32))


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalHost:
    monkeypatch.setenv("INSTINCT_DATA_DIR", str(tmp_path / "data"))
    return LocalHost()


def record(host: LocalHost, launch: LaunchPlan, shift: float) -> None:
    fingerprints.record(
        host, launch.container_name, launch, taken(shift), fp.Check(None), image_digest=None
    )


def test_an_unreachable_running_endpoint_is_judged_by_its_record(host: LocalHost) -> None:
    old, cand = plan("ep"), plan("ep-next")
    record(host, old, 0.0)
    record(host, cand, 0.1)
    gate = compare(host, old, cand, seconds=2)
    assert not gate.live and not gate.refused
    assert gate.why.startswith("within tolerance: moved at most 0.100 (segment)")
    record(host, cand, 2.0)
    gate = compare(host, old, cand, seconds=2)
    assert gate.refused and gate.verdict is not None and gate.verdict.failure == "drift"
    assert "short: moved 2.000" in gate.why


def test_other_checkpoints_precisions_or_missing_records_are_not_compared(
    host: LocalHost,
) -> None:
    old = plan("ep")
    record(host, old, 0.0)
    other = plan("ep-next", model="Qwen/Qwen3-8B")
    record(host, other, 3.0)
    assert compare(host, old, other, seconds=2).why.endswith("checkpoint or precision changes")
    fp16 = plan("ep-next", args=("--dtype", "float16"))
    assert compare(host, old, fp16, seconds=2).why.endswith("checkpoint or precision changes")
    quantized = plan("ep-next", args=("--quantization", "fp8"))
    assert compare(host, old, quantized, seconds=2).verdict is None
    unrecorded = plan("ep-other")
    assert "candidate has no fingerprint" in compare(host, old, unrecorded, seconds=2).why
    fresh = plan("ep-fresh")
    record(host, plan("ep-fresh-next"), 0.0)
    gate = compare(host, fresh, plan("ep-fresh-next"), seconds=2)
    assert gate.verdict is None and "running endpoint has no fingerprint" in gate.why


def test_another_server_and_another_kv_cache_dtype_are_compared(host: LocalHost) -> None:
    # vLLM's plan with the model's KV dtype, SGLang's as AMD runs it: an fp8_e4m3 cache
    old = plan("ep")
    cand = plan("ep-next", server="sglang", args=("--kv-cache-dtype", "fp8_e4m3"))
    record(host, old, 0.0)
    record(host, cand, 0.1)
    gate = compare(host, old, cand, seconds=2)
    assert not gate.refused and gate.verdict is not None and gate.verdict.compared
    assert gate.why.startswith("within tolerance: moved at most 0.100 (segment) / 0.100 (tail)")
    assert gate.why.endswith(" nats a token (vLLM → SGLang, KV cache auto → fp8_e4m3)")
    record(host, cand, 3.0)  # an fp8 cache kernel that computes something else
    gate = compare(host, old, cand, seconds=2)
    assert gate.refused and "short: moved 3.000" in gate.why
    # vLLM's `fp8` cache is SGLang's `fp8_e4m3`: only the server differs
    old_fp8 = plan("ep", args=("--kv-cache-dtype", "fp8"))
    record(host, cand, 0.1)
    assert compare(host, old_fp8, cand, seconds=2).why.endswith("nats a token (vLLM → SGLang)")
