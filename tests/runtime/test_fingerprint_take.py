"""Taking a fingerprint over HTTP (``runtime.fingerprint``) from the vLLM double on
127.0.0.1: healthy and deterministic, and each fault it can be told to show is named."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from instinct_serve.errors import InstinctError
from instinct_serve.observe import fingerprint as fp
from instinct_serve.runtime.fingerprint import Budget, take
from tests.infra.docker import LocalDouble

StartDouble = Callable[..., LocalDouble]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BUDGET = Budget(long_tokens=512, seconds=20)


def ready(double: LocalDouble) -> LocalDouble:
    double.wait_for("healthy at", timeout=20)
    return double


def test_a_healthy_double_gives_the_same_fingerprint_every_time(
    vllm_double_local: StartDouble,
) -> None:
    double = ready(vllm_double_local(MODEL))
    first = take(double.base_url, MODEL, BUDGET)
    again = take(double.base_url, MODEL, BUDGET)
    assert [s.name for s in first.scores] == ["short", "long"]
    long = first.probe("long")
    # the first prompt token has no score
    assert long is not None and long.words == 170 and long.tokens == 2 * 170 - 1
    assert long.copy_gain is not None and long.copy_gain > fp.MIN_COPY_GAIN
    assert first.greedy is not None and first.greedy.tokens == fp.GREEDY_TOKENS
    assert first.cost_tokens > 2 * 170 and 0 < first.cost_s < BUDGET.seconds
    verdict = fp.check(again, first)
    assert verdict.ok and verdict.compared, verdict.reasons
    assert verdict.distances["short"].segment == 0.0


def test_nan_after_n_tokens_is_named_nan(vllm_double_local: StartDouble) -> None:
    double = ready(vllm_double_local(MODEL, env={"VLLM_DOUBLE_NAN_AFTER": "3"}))
    verdict = fp.check(take(double.base_url, MODEL, BUDGET))
    assert verdict.failure == "nan"
    assert "greedy tokens have NaN" in " ".join(verdict.reasons)
    # the AITER switch clears it (the fallback a relaunch applies)
    cleared = vllm_double_local(
        MODEL, env={"VLLM_DOUBLE_NAN_AFTER": "3", "VLLM_ROCM_USE_AITER": "0"}
    )
    assert fp.check(take(ready(cleared).base_url, MODEL, BUDGET)).ok


def test_garbage_past_a_context_length_is_named_long_context(
    vllm_double_local: StartDouble,
) -> None:
    healthy = take(ready(vllm_double_local(MODEL)).base_url, MODEL, BUDGET)
    double = ready(vllm_double_local(MODEL, env={"VLLM_DOUBLE_GARBAGE_PAST": "200"}))
    broken = take(double.base_url, MODEL, BUDGET)
    alone = fp.check(broken)
    assert alone.failure == "long_context", alone.reasons
    against = fp.check(broken, healthy)
    assert against.failure == "long_context"
    assert against.distances["short"].segment == 0.0  # the short prompt is fine


def test_drift_after_a_time_is_named_drift(vllm_double_local: StartDouble) -> None:
    env = {"VLLM_DOUBLE_DRIFT_AFTER_S": "1.5"}
    double = ready(vllm_double_local(MODEL, env=env))
    reference = take(double.base_url, MODEL, BUDGET)
    time.sleep(1.6)
    later = fp.check(take(double.base_url, MODEL, BUDGET), reference)
    assert later.failure == "drift"
    assert later.distances["short"].segment == pytest.approx(2.0)


def test_the_long_probe_is_shortened_once_when_the_context_is_smaller(
    vllm_double_local: StartDouble,
) -> None:
    double = ready(vllm_double_local(MODEL, args=["--max-model-len", "300"]))
    taken = take(double.base_url, MODEL, BUDGET)  # 340 tokens do not fit: 170 do
    long = taken.probe("long")
    assert long is not None and long.tokens == 2 * 85 - 1
    assert fp.check(taken).ok


def test_an_unknown_model_or_a_dead_port_is_a_named_error(
    vllm_double_local: StartDouble,
) -> None:
    double = ready(vllm_double_local(MODEL))
    with pytest.raises(InstinctError) as info:
        take(double.base_url, "not/served", BUDGET)
    assert info.value.id == "fingerprint_failed" and "HTTP 404" in info.value.message
    double.stop()
    with pytest.raises(InstinctError) as info:
        take(double.base_url, MODEL, BUDGET)
    assert info.value.id == "fingerprint_failed"
