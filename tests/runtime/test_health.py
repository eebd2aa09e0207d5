"""Health, models, warm-up and coherence probes against real local HTTP servers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from instinct_serve.errors import InstinctError
from instinct_serve.runtime.health import (
    CHAT_PROBE,
    HealthSample,
    WaitOutcome,
    coherence_probe,
    judge_coherence,
    list_models,
    normalize_base_url,
    probe_health,
    wait_healthy,
    warmup,
)
from tests.infra.docker import LocalDouble
from tests.infra.ports import free_port

StartDouble = Callable[..., LocalDouble]


def test_normalize_base_url() -> None:
    for url in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/"):
        assert normalize_base_url(url) == "http://h:1"


def test_probe_health_reports_a_refused_connection() -> None:
    sample = probe_health(f"http://127.0.0.1:{free_port()}", timeout=2)
    assert sample.status_code is None and not sample.ok
    assert sample.error == "connection refused"


def test_wait_healthy_returns_within_2_5_s_of_the_server_turning_healthy(
    vllm_double_local: StartDouble,
) -> None:
    double = vllm_double_local(env={"VLLM_DOUBLE_LOAD_S": "4"})
    samples: list[HealthSample] = []
    result = wait_healthy(
        double.base_url,
        timeout=30,
        still_running=lambda: double.proc.poll() is None,
        on_sample=samples.append,
    )
    returned = time.time()
    assert result.outcome is WaitOutcome.HEALTHY and result.healthy
    assert any(s.status_code == 503 for s in samples)  # loading was observed, then 200
    assert samples[-1].status_code == 200
    assert returned - double.healthy_at() <= 2.5
    assert result.polls == len(samples) >= 2


def test_a_refused_connection_while_loading_is_normal(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(env={"VLLM_DOUBLE_BIND": "late", "VLLM_DOUBLE_LOAD_S": "2.5"})
    samples: list[HealthSample] = []
    result = wait_healthy(double.base_url, timeout=30, interval=0.5, on_sample=samples.append)
    assert result.healthy
    assert samples[0].error == "connection refused"


def test_a_dead_server_ends_the_wait_at_once(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(
        mode="die", env={"VLLM_DOUBLE_LOAD_S": "1", "VLLM_DOUBLE_EXIT_CODE": "5"}
    )
    start = time.monotonic()
    result = wait_healthy(
        double.base_url, timeout=120, still_running=lambda: double.proc.poll() is None
    )
    assert result.outcome is WaitOutcome.CONTAINER_EXITED
    assert time.monotonic() - start < 1 + 2 + 1.5  # its life, one poll interval, slack
    assert double.proc.returncode == 5


def test_cancel_is_honoured_between_polls(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(mode="hang_in_graph_capture")
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    start = time.monotonic()
    result = wait_healthy(double.base_url, timeout=60, interval=5, cancelled=stop.is_set)
    assert result.outcome is WaitOutcome.CANCELLED
    assert time.monotonic() - start < 1.5


def test_timeout_when_the_server_never_turns_healthy(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(mode="hang_in_graph_capture")
    start = time.monotonic()
    result = wait_healthy(double.base_url, timeout=1.5, interval=0.5)
    assert result.outcome is WaitOutcome.TIMEOUT
    assert result.last is not None and result.last.status_code == 503
    assert 1.5 <= time.monotonic() - start < 4
    assert result.to_dict()["last"] == "HTTP 503"


def test_models_warmup_and_coherence_on_a_healthy_double(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(
        "org/model",
        args=["--served-model-name", "model"],
        env={"VLLM_DOUBLE_FIRST_REQUEST_S": "1.0"},
    )
    assert wait_healthy(double.base_url, timeout=30, interval=0.2).healthy
    models = list_models(double.base_url + "/v1")
    assert [(m.id, m.root, m.max_model_len) for m in models] == [("model", "org/model", 131072)]
    first = warmup(double.base_url, "model", use_chat=True, timeout=30)
    assert first.latency_s >= 1.0  # the first request carries the "kernel compilation"
    assert first.text and first.endpoint == "/v1/chat/completions"
    again = warmup(double.base_url, "model", use_chat=False, timeout=30)
    assert again.latency_s < 1.0 and again.endpoint == "/v1/completions"
    for use_chat in (True, False):
        probe = coherence_probe(double.base_url, "model", use_chat=use_chat)
        assert probe.ok and probe.verdict.verdict == "coherent", probe.to_dict()
        assert "Paris" in probe.completion.text


@pytest.mark.parametrize("salad", ["multilingual", "exclaim", "repeat"])
def test_an_incoherent_endpoint_is_caught(vllm_double_local: StartDouble, salad: str) -> None:
    double = vllm_double_local(mode="incoherent", env={"VLLM_DOUBLE_SALAD": salad})
    assert wait_healthy(double.base_url, timeout=30, interval=0.2).healthy
    warm = warmup(double.base_url, double.model, use_chat=True)  # warm-up alone passes...
    assert warm.text
    probe = coherence_probe(double.base_url, double.model, use_chat=True)
    assert not probe.ok  # ...the probe does not
    assert probe.verdict.verdict == "incoherent_output"
    assert probe.to_dict()["reasons"]


def test_warmup_errors_carry_the_servers_message(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(env={"VLLM_DOUBLE_FIRST_REQUEST_S": "3"})
    assert wait_healthy(double.base_url, timeout=30, interval=0.2).healthy
    with pytest.raises(InstinctError) as wrong:
        warmup(double.base_url, "not-served", use_chat=True)
    assert wrong.value.id == "warmup_failed"
    assert "The model `not-served` does not exist." in wrong.value.message
    with pytest.raises(InstinctError) as slow:
        warmup(double.base_url, double.model, use_chat=True, timeout=0.5)
    assert slow.value.id == "warmup_timeout"


def test_a_base_model_without_chat_template_needs_completions(
    vllm_double_local: StartDouble,
) -> None:
    double = vllm_double_local(env={"VLLM_DOUBLE_NO_CHAT_TEMPLATE": "1"})
    assert wait_healthy(double.base_url, timeout=30, interval=0.2).healthy
    with pytest.raises(InstinctError) as chat:
        warmup(double.base_url, double.model, use_chat=True)
    assert "chat template" in chat.value.message and "/v1/completions" in (chat.value.fix or "")
    assert warmup(double.base_url, double.model, use_chat=False).text
    assert coherence_probe(double.base_url, double.model, use_chat=False).ok


def test_api_key(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(args=["--api-key", "k3y"])
    assert wait_healthy(double.base_url, timeout=30, interval=0.2).healthy
    with pytest.raises(InstinctError) as denied:
        list_models(double.base_url)
    assert denied.value.id == "endpoint_error" and "401" in denied.value.message
    assert list_models(double.base_url, api_key="k3y")[0].id == double.model


def test_a_port_that_is_not_vllm(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/models").respond_with_data("<html>hi</html>")
    with pytest.raises(InstinctError) as exc:
        list_models(httpserver.url_for("/"))
    assert exc.value.id == "endpoint_error"
    with pytest.raises(InstinctError) as gone:
        list_models(f"http://127.0.0.1:{free_port()}")
    assert gone.value.id == "endpoint_unreachable"


def test_coherence_probe_retries_without_template_kwargs(httpserver: HTTPServer) -> None:
    """Servers that reject the unknown ``chat_template_kwargs`` field are asked again."""
    bodies: list[dict[str, object]] = []

    def handler(request: Request) -> Response:
        body = json.loads(request.data)
        bodies.append(body)
        if "chat_template_kwargs" in body:
            error = {"error": {"message": "extra fields not permitted", "code": 400}}
            return Response(json.dumps(error), status=400, content_type="application/json")
        answer = {"choices": [{"message": {"content": "Paris."}, "finish_reason": "stop"}]}
        return Response(json.dumps(answer), content_type="application/json")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handler)
    probe = coherence_probe(httpserver.url_for("/"), "m", use_chat=True)
    assert probe.verdict.verdict == "coherent"
    assert len(bodies) == 2
    assert bodies[1]["messages"] == [{"role": "user", "content": CHAT_PROBE}]
    assert bodies[1]["temperature"] == 0.0


# --------------------------------------------------------------------------- judge_coherence


@pytest.mark.parametrize(
    "text",
    [
        "Paris",
        "Paris.",
        " Paris. It is also the largest city in France.",
        "The capital of France is **Paris**.",
        "<think>\nThe user asks about France. Its capital is well known.\n</think>\n\nParis",
        "paris",
    ],
)
def test_coherent_answers(text: str) -> None:
    assert judge_coherence(text).verdict == "coherent"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("   \n ", "empty output"),
        ("!!!!!!!!!!!!!!!!!!!!!!!!", "repeated 24 times"),
        ("the the the the the the the the", "repeated 8 times"),
        ("Paris Paris Paris Paris Paris Paris", "repeated 6 times"),
        ("ungeachtet Принимая zyst \u8bf7\u95ee ometric \u05e9\u05dc\u05d5\u05dd", "scripts"),
        ("Par\ufffd\ufffdis", "replacement"),
        ("\x00\x01\x02\x03 Paris", "non-printable"),
        ("Lyon", "does not contain 'Paris'"),
        ("I think it is a beautiful city with many museums.", "does not contain"),
    ],
)
def test_incoherent_answers(text: str, reason: str) -> None:
    verdict = judge_coherence(text)
    assert verdict.verdict == "incoherent_output" and not verdict.ok
    assert any(reason in r for r in verdict.reasons), verdict.reasons


def test_a_reasoning_model_cut_off_while_thinking_is_inconclusive() -> None:
    cut = "<think>\nOkay, the user is asking for the capital of France. Let me"
    assert judge_coherence(cut).verdict == "inconclusive"
    assert judge_coherence("", reasoning="The user asks about France, so").verdict == (
        "inconclusive"
    )
    assert judge_coherence("Paris", reasoning="France's capital is well known.").ok


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_no_answer_is_never_judged_coherent(text: str) -> None:
    verdict = judge_coherence(text)
    if "paris" not in text.lower():
        assert verdict.verdict != "coherent"
