"""The vLLM test double held to the real thing: its API-server lines, routes, answers and
error shapes must be those of the real vLLM 0.32 as captured (``real-vllm-cpu/``), so the
double every fast serve test runs against cannot drift into fiction.

Fast (a double on the host and the captured files; no real engine). The double's engine
start-up lines are replayed from a real ROCm GPU log of an older vLLM (``09_...``); that
they are verbatim real is ``tests/runtime/test_vllm_double.py``'s test. Here: what the double
adds itself, and the phases the tool reads from both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from instinct_serve.diagnose.phases import track
from tests.infra import vllm_double
from tests.infra.docker import LocalDouble, start_local_double
from tests.realvllm import captured

# The real capture served a local directory under its path; vLLM hides paths in error
# messages ("<path>"), so the double serves a path too.
MODEL = "/root/models/SmolLM2-135M-Instruct"
REAL_MODEL = "$CACHE/models/SmolLM2-135M-Instruct"  # as responses.json records it


@pytest.fixture(scope="module")
def double() -> Iterator[LocalDouble]:
    """One double for the module, serving as the captured real server did (API key, 2048)."""
    d = start_local_double(
        MODEL, env={"VLLM_API_KEY": captured.API_KEY}, args=["--max-model-len", "2048"]
    )
    try:
        d.healthy_at()
        yield d
    finally:
        d.stop()


def _replay(double: LocalDouble, item: dict[str, Any]) -> httpx.Response:
    req = item["request"]
    headers = dict(req.get("headers") or {})
    if headers.get("authorization") == "Bearer <the key>":
        headers["authorization"] = f"Bearer {captured.API_KEY}"
    body = req.get("body")
    url = f"{double.base_url}{req['path']}"
    if isinstance(body, str):  # sent raw (invalid JSON)
        return httpx.request(req["method"], url, content=body.encode(), headers=headers)
    if isinstance(body, dict) and body.get("model") == REAL_MODEL:
        body = {**body, "model": MODEL}
    return httpx.request(req["method"], url, json=body, headers=headers, timeout=30)


def _body(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return resp.text


# Everything the double serves, exchange by exchange; /metrics (text) is held to the real
# families in test_double_metrics_match_real.py.
EXCHANGES = [name for name in captured.responses() if name != "metrics"]


@pytest.mark.parametrize("name", EXCHANGES)
def test_each_answer_has_the_real_status_and_shape(double: LocalDouble, name: str) -> None:
    real = captured.responses()[name]
    resp = _replay(double, real)
    assert resp.status_code == real["status"], (name, _body(resp))
    got = _body(resp)
    assert ("json" if isinstance(got, dict | list) else "text") == real["body_kind"]
    if real["body_kind"] == "json":
        assert resp.headers.get("content-type") == real["content_type"]
        assert captured.shape(got) == captured.shape(real["body"]), name
    else:
        assert got == real["body"] == ""


@pytest.mark.parametrize(
    "name",
    [
        n
        for n, item in captured.responses().items()
        if item["status"] >= 400 and isinstance(item["body"], dict)
    ],
)
def test_errors_say_what_the_real_server_says(double: LocalDouble, name: str) -> None:
    real = captured.responses()[name]["body"]
    got = _replay(double, captured.responses()[name]).json()
    if isinstance(real.get("error"), dict):
        for key in ("type", "param", "code"):
            assert got["error"][key] == real["error"][key], (name, key)
        if real["error"]["type"] == "Bad Request":  # request validation: a pydantic dump
            assert got["error"]["message"].startswith("1 validation error:\n  {'type': ")
            assert real["error"]["message"].startswith("1 validation error:\n  {'type': ")
        else:
            assert got["error"]["message"] == real["error"]["message"]
    else:
        assert got == real  # {"error": "Unauthorized"}, {"detail": "Not Found"}


def test_success_bodies_carry_the_real_values_the_tool_reads(double: LocalDouble) -> None:
    for name in ("chat_capital_of_france", "completion_capital_of_france", "models"):
        real = captured.responses()[name]["body"]
        got = _replay(double, captured.responses()[name]).json()
        assert got["object"] == real["object"]
        if name == "models":
            card, real_card = got["data"][0], real["data"][0]
            assert card["id"] == MODEL and real_card["id"] == REAL_MODEL
            assert card["max_model_len"] == real_card["max_model_len"] == 2048
            continue
        assert got["model"] == MODEL and real["model"] == REAL_MODEL
        assert got["choices"][0]["finish_reason"] in ("stop", "length")
        assert got["system_fingerprint"].startswith("vllm-")
        assert real["system_fingerprint"].startswith("vllm-0.32.0-")


def test_the_double_serves_real_routes_with_their_methods() -> None:
    real = captured.routes(captured.text(captured.EAGER_LOG))
    for route, method in vllm_double.ROUTES:
        assert route in real, route
        assert method in real[route], (route, real[route])


def test_the_api_server_lines_are_the_real_ones(double: LocalDouble) -> None:
    real = {captured.normalise(line) for line in captured.text(captured.EAGER_LOG).splitlines()}
    own = [
        line
        for _, line in double.lines
        if "[entry.py:" in line or "[launcher.py:" in line or line.startswith("INFO:     ")
    ]
    own = [line for line in own if ' - "' not in line]  # access-log lines of our requests
    assert len(own) >= len(vllm_double.ROUTES) + 5
    assert [line for line in own if captured.normalise(line) not in real] == []


def test_the_tool_reads_the_same_end_of_start_up_from_both(double: LocalDouble) -> None:
    """The phases the tracker takes from the API-server lines: the same in the same order."""

    def tail(lines: list[str]) -> list[str]:
        phases = [e.phase for e in track(lines)]
        start = phases.index("starting_server")
        return list(dict.fromkeys(phases[start:]))

    real = captured.text(captured.EAGER_LOG).splitlines()
    real = real[: next(i for i, s in enumerate(real) if "Application startup complete" in s) + 1]
    assert tail([line for _, line in double.lines]) == tail(real) == ["starting_server", "ready"]


def test_the_tool_reads_the_server_address_from_both(double: LocalDouble) -> None:
    """vLLM 0.32's "Starting vLLM server on URL" (not 0.1x's "... API server ...") gives the
    address in both, the real log and the double's."""
    real = track(captured.text(captured.EAGER_LOG).splitlines())[-1].figures
    own = track([line for _, line in double.lines])[-1].figures
    assert real["api_url"].startswith("http://127.0.0.1:")
    assert own["api_url"].startswith("http://") and own["api_url"].rsplit(":", 1)[1].isdigit()
