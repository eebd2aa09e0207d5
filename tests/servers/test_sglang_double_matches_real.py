"""The SGLang test double held to the real SGLang 0.5.23 as captured (``tests/fixtures/sglang``,
``tests/infra/capture_real_sglang.py``): its start-up lines, the moment it turns ready, each
answer's status and shape, SGLang's own error wording, where it differs from vLLM (an unknown
model is served), its streams, and its ``/metrics`` families, so the double every SGLang serve
test runs against cannot drift into fiction.

Fast: a double on the host and the captured files; no real engine.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from functools import cache
from typing import Any

import httpx
import pytest

from instinct_serve import servers
from instinct_serve.errors import InstinctError
from instinct_serve.observe import fingerprint as fp
from instinct_serve.observe.prom import parse
from instinct_serve.observe.vllm import snapshot
from instinct_serve.runtime.fingerprint import Budget, take
from instinct_serve.servers import Routes
from tests.infra.docker import LocalDouble
from tests.infra.sglang_double import CAPTURED_MODEL_DIR
from tests.infra.sglang_infra import FIXTURES, start_local_sglang_double

SERVED = "HuggingFaceTB/SmolLM2-135M-Instruct"  # as the capture's server was started
MODEL_DIR = "/models/SmolLM2-135M-Instruct"
READY = "The server is fired up and ready to roll!"


@cache
def real() -> dict[str, dict[str, Any]]:
    doc = json.loads((FIXTURES / "responses.json").read_text(encoding="utf-8"))
    return {item["name"]: item for item in doc["exchanges"]}


@pytest.fixture(scope="module")
def double() -> Iterator[LocalDouble]:
    """One double, started as the captured real server was (its context is 8192)."""
    d = start_local_sglang_double(MODEL_DIR, served=SERVED, args=["--context-length", "8192"])
    try:
        d.wait_for(READY)
        yield d
    finally:
        d.stop()


def replay(double: LocalDouble, name: str) -> httpx.Response:
    req = real()[name]["request"]
    url = double.base_url + req["path"]
    body = req["body"]
    if isinstance(body, dict) and str(body.get("prompt", "")).startswith("<'word' x "):
        count = int(body["prompt"].split(" x ")[1].rstrip(">"))
        body = {**body, "prompt": " ".join(["word"] * count)}
    if isinstance(body, str):  # sent raw (invalid JSON)
        return httpx.request(req["method"], url, content=body.encode(), headers=req["headers"])
    return httpx.request(req["method"], url, json=body, headers=req["headers"], timeout=30)


def differences(got: Any, want: Any, where: str = "") -> list[str]:
    """Where two JSON values differ in structure: keys, nesting and value kinds (a null on
    either side matches any kind: the real server's nulls depend on how a reply ended)."""
    if got is None or want is None:
        return []
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: {type(got).__name__}, not an object"]
        out = [f"{where}: keys {sorted(set(got) ^ set(want))}"] if set(got) != set(want) else []
        for key in set(got) & set(want):
            out += differences(got[key], want[key], f"{where}.{key}")
        return out
    if isinstance(want, list):
        if not isinstance(got, list):
            return [f"{where}: {type(got).__name__}, not a list"]
        return differences(got[0], want[0], f"{where}[0]") if got and want else []
    number = (int, float)
    if isinstance(want, number) and not isinstance(want, bool):
        ok = isinstance(got, number) and not isinstance(got, bool)
    else:
        ok = type(got) is type(want)
    return [] if ok else [f"{where}: {type(got).__name__}, not {type(want).__name__}"]


JSON_EXCHANGES = [n for n, item in real().items() if item["body_kind"] == "json"]


@pytest.mark.parametrize("name", JSON_EXCHANGES)
def test_each_answer_has_the_real_status_and_shape(double: LocalDouble, name: str) -> None:
    want = real()[name]
    resp = replay(double, name)
    assert resp.status_code == want["status"], (name, resp.text[:500])
    assert resp.headers.get("content-type") == want["content_type"]
    got = resp.json()
    if name == "generate_prompt_logprobs":  # the double's meta_info: the fields that matter
        assert set(got) == set(want["body"])
        assert set(got["meta_info"]) <= set(want["body"]["meta_info"])
        got, want_body = got["meta_info"], want["body"]["meta_info"]
        for key in ("input_token_logprobs", "output_token_logprobs"):
            assert differences(got[key], want_body[key]) == [], key
        return
    assert differences(got, want["body"]) == [], name


def test_health_answers_200_with_an_empty_body_and_no_content_type(double: LocalDouble) -> None:
    for name in ("health", "health_generate"):
        resp = replay(double, name)
        assert real()[name]["status"] == resp.status_code == 200
        assert real()[name]["body"] == resp.text == ""
        assert real()[name]["content_type"] is resp.headers.get("content-type") is None


def test_an_unknown_model_is_served_anyway_and_its_name_echoed(double: LocalDouble) -> None:
    """Where SGLang differs from vLLM (404): the request's name comes back."""
    for name in ("chat_unknown_model", "completion_unknown_model"):
        want = real()[name]
        got = replay(double, name).json()
        assert got["model"] == want["body"]["model"] == want["request"]["body"]["model"]
        assert want["body"]["model"] != SERVED


def _masked(text: str) -> str:
    return re.sub(r"\d+", "N", text)


def test_errors_say_what_the_real_server_says(double: LocalDouble) -> None:
    for name in ("completion_prompt_too_long", "chat_max_tokens_too_large"):
        want, got = real()[name]["body"], replay(double, name).json()
        assert _masked(got["message"]) == _masked(want["message"]), name
        assert (got["object"], got["type"], got["code"]) == ("error", "BadRequestError", 400)
    # the over-long prompt's count is the real one: 9192 words are 9192 tokens in both
    got = replay(double, "completion_prompt_too_long").json()["message"]
    assert got == real()["completion_prompt_too_long"]["body"]["message"]
    for name in ("chat_messages_missing", "chat_invalid_json"):
        want, got = real()[name]["body"], replay(double, name).json()
        kind = re.match(r"1 validation error:\n  \{'type': '(\w+)'", want["message"])
        assert kind is not None and want["type"] == got["type"] == "Bad Request"
        assert got["message"].startswith(f"1 validation error:\n  {{'type': '{kind.group(1)}'")
    for name in ("version", "unknown_route"):
        assert replay(double, name).json() == real()[name]["body"] == {"detail": "Not Found"}


def events(text: str) -> list[Any]:
    out: list[Any] = []
    for block in text.strip().split("\n\n"):
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


@pytest.mark.parametrize("name", ["completion_stream", "chat_stream"])
def test_the_streams_have_the_real_events(double: LocalDouble, name: str) -> None:
    """First, middle, finishing and usage events: each in the real one's shape; then DONE."""
    want = events(real()[name]["body"])
    resp = replay(double, name)
    assert resp.headers["content-type"] == real()[name]["content_type"]
    got = events(resp.text)
    assert got[-1] == want[-1] == "[DONE]"
    assert got[-2]["choices"] == want[-2]["choices"] == []  # the usage event
    assert differences(got[-2], want[-2]) == []

    def kind(index: int, event: dict[str, Any]) -> tuple[bool, bool]:
        return index == 0, bool(event["choices"][0]["finish_reason"])

    real_kinds = {kind(i, e): e for i, e in reversed(list(enumerate(want[:-2])))}
    got_kinds = [kind(i, e) for i, e in enumerate(got[:-2])]
    assert got_kinds.count((False, True)) == 1 and set(got_kinds) <= set(real_kinds)
    for i, event in enumerate(got[:-2]):
        assert differences(event, real_kinds[kind(i, event)]) == [], (i, event)
    assert set(got[0]) == set(want[0]) and got[0]["id"] == got[-2]["id"]


def test_echo_with_logprobs_gives_the_prompts_log_probabilities(double: LocalDouble) -> None:
    """The real server gives them (while it logs that echo and logprobs do not mix)."""
    want = real()["completion_echo_logprobs"]["body"]["choices"][0]
    got = replay(double, "completion_echo_logprobs").json()["choices"][0]
    assert want["text"].startswith("The capital of France is") and got["text"].startswith(
        "The capital of France is"
    )
    assert want["logprobs"]["token_logprobs"][0] is None is got["logprobs"]["token_logprobs"][0]
    assert want["logprobs"]["tokens"][:5] == ["The", " capital", " of", " France", " is"]
    assert got["logprobs"]["tokens"][:5] == ["The", " capital", " of", " France", " is"]


# --------------------------------------------------------------------------- the log


_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")


def normalise(line: str) -> str:
    line = _STAMP.sub("[T] ", line)
    line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:P", line)
    line = re.sub(r"'port': \d+", "'port': P", line)
    line = re.sub(r"process \[\d+\]", "process [N]", line)
    line = line.replace(CAPTURED_MODEL_DIR, "MODEL")  # first: it ends as MODEL_DIR does
    return line.replace(MODEL_DIR, "MODEL")


def real_log() -> list[str]:
    return (FIXTURES / "real_cpu_start_2.log").read_text(encoding="utf-8").splitlines()


def test_every_start_up_line_is_a_real_one(double: LocalDouble) -> None:
    own = [line for _, line in double.lines if not line.startswith("sglang-double:")]
    own = own[: next(i for i, s in enumerate(own) if READY in s) + 1]
    known = {normalise(line) for line in real_log()}
    assert [line for line in own if normalise(line) not in known] == []
    assert len(own) >= 60  # the whole start-up, not a token line


def test_the_tool_reads_the_same_phases_from_both(double: LocalDouble) -> None:
    def phases(lines: list[str]) -> list[str]:
        tracker = servers.get("sglang").tracker()
        seen = [e.phase for line in lines if (e := tracker.feed(line)) is not None]
        return list(dict.fromkeys(seen))

    real_lines = real_log()
    real_lines = real_lines[: next(i for i, s in enumerate(real_lines) if READY in s) + 1]
    own = [line for _, line in double.lines]
    assert phases(own) == phases(real_lines)
    assert phases(own)[-1] == "ready" and "loading_weights" in phases(own)


def test_health_turns_200_with_the_ready_line_not_before() -> None:
    """503 while SGLang warms itself up (it listens before it is ready), then 200 at the
    moment "fired up and ready to roll" is printed; nothing listens before uvicorn's line."""
    d = start_local_sglang_double(MODEL_DIR, env={"SGLANG_DOUBLE_LOAD_S": "1.0"})
    try:
        codes: list[tuple[int, bool]] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                code = httpx.get(d.base_url + "/health", timeout=2).status_code
            except httpx.TransportError:
                code = 0
            codes.append((code, READY in d.output()))
            if code == 200:
                break
            time.sleep(0.02)
        assert codes[0][0] == 0 and codes[-1][0] == 200, codes
        assert all(code != 200 for code, _ in codes[:-1])
        d.wait_for(READY, timeout=1.0)  # printed with the turn to 200
        listening = next(i for i, (code, _) in enumerate(codes) if code)
        assert not any(seen for _, seen in codes[:listening])
    finally:
        d.stop()


# --------------------------------------------------------------------------- /metrics


def families(text: str) -> dict[str, tuple[str, str]]:
    return {name: (f.type, f.help) for name, f in parse(text).families.items()}


def test_metrics_have_every_real_family_with_its_type_help_labels_and_buckets(
    double: LocalDouble,
) -> None:
    want_text = (FIXTURES / "real_cpu_metrics_2.txt").read_text(encoding="utf-8")
    replay(double, "completion_capital_of_france")
    replay(double, "completion_stream")
    got_text = httpx.get(double.base_url + "/metrics", timeout=10).text
    assert families(got_text) == families(want_text)
    assert len(families(got_text)) >= 80
    assert all(name.startswith("sglang:") for name in families(got_text))
    got, want = parse(got_text).samples, parse(want_text).samples
    for name in ("sglang:time_to_first_token_seconds", "sglang:prompt_tokens_total"):
        mine = [s for s in got if s.name.startswith(name)]
        theirs = [s for s in want if s.name.startswith(name)]
        assert {tuple(sorted(s.labels)) for s in mine} == {tuple(sorted(s.labels)) for s in theirs}
        assert {s.label("le") for s in mine} == {s.label("le") for s in theirs}, name


def test_top_reads_the_doubles_own_counts(double: LocalDouble) -> None:
    table = servers.get("sglang").metric_names
    before = snapshot(httpx.get(double.base_url + "/metrics").text, time.monotonic(), table)
    replay(double, "completion_capital_of_france")
    now = snapshot(httpx.get(double.base_url + "/metrics").text, time.monotonic(), table)
    assert now.prefix == "sglang:" and [c for c in table if c not in now.names] == []
    assert (now.counters["requests_finished"] or 0) == (
        before.counters["requests_finished"] or 0
    ) + 1
    assert (now.counters["generation_tokens"] or 0) > (before.counters["generation_tokens"] or 0)
    assert now.gauges["running"] == 0.0 and now.histograms["ttft"] is not None


# --------------------------------------------------------------------------- the fingerprint


def test_the_real_echo_answer_gives_the_prompts_scores_and_not_the_generated_one() -> None:
    """SGLang's ``echo`` + ``logprobs`` answer lists the prompt's tokens, then the generated
    one: the fingerprint keeps the prompt's (``usage.prompt_tokens``), the first has none."""
    body = real()["completion_echo_logprobs"]["body"]
    listed = body["choices"][0]["logprobs"]["token_logprobs"]
    assert body["usage"]["prompt_tokens"] == 5 and len(listed) == 6
    scores = fp.prompt_scores(body["choices"][0], prompt_tokens=body["usage"]["prompt_tokens"])
    assert scores == listed[1:5]
    # the same numbers as the native /generate's input_token_logprobs (the real capture)
    native = real()["generate_prompt_logprobs"]["body"]["meta_info"]["input_token_logprobs"]
    assert scores == [entry[0] for entry in native[1:]]


def test_the_fingerprint_is_taken_as_sglang_asks_for_it(double: LocalDouble) -> None:
    routes = servers.get("sglang").routes
    assert dict(routes.scoring) == {"echo": True, "logprobs": 1}
    taken = take(double.base_url, SERVED, Budget(long_tokens=256, seconds=30), routes=routes)
    assert [s.name for s in taken.scores] == ["short", "long"]
    assert taken.greedy is not None
    verdict = fp.check(taken, None, platform="cpu", need_long=True)
    assert verdict.ok, verdict.reasons


def test_vllms_scoring_parameters_get_no_prompt_scores_from_sglang(double: LocalDouble) -> None:
    """What SGLang does with vLLM's ``prompt_logprobs``: ignores it; the fingerprint says so."""
    with pytest.raises(InstinctError) as caught:
        take(double.base_url, SERVED, Budget(long_tokens=0, seconds=30), routes=Routes())
    assert caught.value.id == "fingerprint_failed"
    assert "prompt_logprobs=0" in (caught.value.fix or "")
