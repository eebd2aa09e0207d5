"""HTTP probes of an OpenAI-compatible vLLM endpoint: health, models, warm-up, coherence.

Ready means more than ``/health`` 200: the model must be listed by ``/v1/models``, a first
completion must come back (it compiles kernels: tens of seconds on gfx942, minutes with
JIT builds, hence the generous timeouts), and a greedy probe with a known answer must not
come back as garbage, because the most common failure on Instinct GPUs is a healthy
endpoint that returns word salad (broken AITER / all-reduce / MXFP4 kernels).

``base_url`` is the server root, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is
accepted). Proxies from the environment are ignored: the endpoint is on the host or at the
end of our own ssh tunnel, and a ``HTTP_PROXY`` would only break the probe.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

import httpx

from instinct_serve.errors import InstinctError
from instinct_serve.gather.http import HttpErrors, get
from instinct_serve.plan.model import WARMUP_TIMEOUT_S
from instinct_serve.servers import Routes

VLLM_ROUTES = Routes()  # the routes a caller who knows no server kind probes (vLLM's)

DEFAULT_POLL_S = 2.0
DEFAULT_WARMUP_TIMEOUT_S = float(WARMUP_TIMEOUT_S)  # first request: kernel compilation, JITs
DEFAULT_PROBE_TIMEOUT_S = 120.0

CHAT_PROBE = "What is the capital of France? Answer with one word."
COMPLETION_PROBE = "The capital of France is"
PROBE_EXPECTED = ("Paris",)
WARMUP_PROMPT = "Hello! Please introduce yourself in one sentence."


def normalize_base_url(base_url: str) -> str:
    """``http://h:p``, whatever of ``/``, ``/v1``, ``/v1/`` the caller appended."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _client(timeout: float, api_key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(timeout=timeout, trust_env=False, headers=headers)


# --------------------------------------------------------------------------- /health


@dataclass(frozen=True)
class HealthSample:
    """One ``GET /health``: the status code, or why there was none."""

    status_code: int | None
    error: str | None = None  # "connection refused", "timed out", ...
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status_code == 200

    def describe(self) -> str:
        if self.status_code is not None:
            return f"HTTP {self.status_code}"
        return self.error or "no answer"


class WaitOutcome(StrEnum):
    HEALTHY = "healthy"
    CONTAINER_EXITED = "container_exited"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class WaitResult:
    """How ``wait_healthy`` ended."""

    outcome: WaitOutcome
    elapsed_s: float
    polls: int
    last: HealthSample | None

    @property
    def healthy(self) -> bool:
        return self.outcome is WaitOutcome.HEALTHY

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "elapsed_s": round(self.elapsed_s, 2),
            "polls": self.polls,
            "last": None if self.last is None else self.last.describe(),
        }


def probe_health(
    base_url: str,
    *,
    timeout: float = 3.0,
    client: httpx.Client | None = None,
    routes: Routes = VLLM_ROUTES,
) -> HealthSample:
    """One ``GET /health`` (the server's health route). Refused connections and 503 are
    normal while a model loads."""
    url = normalize_base_url(base_url) + routes.health
    own = client is None
    http = client or _client(timeout, None)
    start = time.monotonic()
    try:
        response = http.get(url, timeout=timeout)
        return HealthSample(response.status_code, None, time.monotonic() - start)
    except httpx.ConnectError as exc:
        text = str(exc).lower()
        why = "connection refused" if "refused" in text else f"cannot connect ({exc})"
        return HealthSample(None, why, time.monotonic() - start)
    except httpx.TimeoutException:
        return HealthSample(None, f"timed out after {timeout:g} s", time.monotonic() - start)
    except httpx.HTTPError as exc:  # reset, closed mid-response: the server is (re)starting
        return HealthSample(None, f"{type(exc).__name__}: {exc}", time.monotonic() - start)
    finally:
        if own:
            http.close()


def wait_healthy(
    base_url: str,
    *,
    timeout: float,
    still_running: Callable[[], bool] | None = None,
    cancelled: Callable[[], bool] | None = None,
    interval: float = DEFAULT_POLL_S,
    request_timeout: float = 3.0,
    on_sample: Callable[[HealthSample], None] | None = None,
    routes: Routes = VLLM_ROUTES,
) -> WaitResult:
    """Poll ``/health`` every ``interval`` seconds until it answers 200.

    Ends early when ``still_running()`` says the server process is gone (checked before
    every poll, so a dead container ends the wait within one interval instead of at the
    timeout) or ``cancelled()`` turns true (checked every 0.1 s while sleeping). A 503 or a
    refused connection just means "still loading". Ctrl-C propagates as usual.

    ``still_running`` runs once per interval; ``Docker.inspect_state`` costs one docker call
    (one ssh round trip remotely). A cheaper signal is the ``docker logs -f`` follower still
    running (it ends when the container stops); confirm with ``inspect_state`` when it ends,
    since over ssh it can also end with the connection.
    """
    start = time.monotonic()
    deadline = start + timeout
    polls = 0
    last: HealthSample | None = None
    with _client(request_timeout, None) as http:
        while True:
            cycle_start = time.monotonic()  # the cadence includes still_running()'s own cost
            if cancelled is not None and cancelled():
                return WaitResult(WaitOutcome.CANCELLED, time.monotonic() - start, polls, last)
            if still_running is not None and not still_running():
                outcome = WaitOutcome.CONTAINER_EXITED
                return WaitResult(outcome, time.monotonic() - start, polls, last)
            last = probe_health(base_url, timeout=request_timeout, client=http, routes=routes)
            polls += 1
            if on_sample is not None:
                on_sample(last)
            if last.ok:
                return WaitResult(WaitOutcome.HEALTHY, time.monotonic() - start, polls, last)
            if time.monotonic() >= deadline:
                return WaitResult(WaitOutcome.TIMEOUT, time.monotonic() - start, polls, last)
            wake = min(cycle_start + interval, deadline)
            while (now := time.monotonic()) < wake:
                if cancelled is not None and cancelled():
                    break
                time.sleep(min(0.1, wake - now))


# --------------------------------------------------------------------------- /v1/models


@dataclass(frozen=True)
class ServedModel:
    """One entry of ``/v1/models``."""

    id: str
    root: str | None = None
    max_model_len: int | None = None
    owned_by: str | None = None


def _server_message(response: httpx.Response) -> str:
    """The error text of a vLLM/OpenAI error body, whichever shape this version uses."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason_phrase
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        for key in ("message", "detail"):
            if body.get(key):
                return str(body[key])
    return str(body)[:300]


_MODELS_ERRORS = HttpErrors(
    unreachable=lambda url, exc: InstinctError(
        f"cannot reach {url}: {exc}",
        fix="check that the server is up (`instinct ps`, `instinct logs NAME`)",
        id="endpoint_unreachable",
    ),
    status=lambda url, response: InstinctError(
        f"GET {url} answered HTTP {response.status_code}: {_server_message(response)}",
        fix="read the server log (`instinct logs NAME`)",
        id="endpoint_error",
    ),
)


def list_models(
    base_url: str,
    *,
    timeout: float = 10.0,
    api_key: str | None = None,
    routes: Routes = VLLM_ROUTES,
) -> list[ServedModel]:
    """The served model names (``--served-model-name``, else the model id)."""
    url = normalize_base_url(base_url) + routes.models
    with _client(timeout, api_key) as http:
        response = get(http, url, _MODELS_ERRORS)
    try:
        data = response.json()["data"]
        return [
            ServedModel(
                id=str(m["id"]),
                root=m.get("root"),
                max_model_len=m.get("max_model_len"),
                owned_by=m.get("owned_by"),
            )
            for m in data
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise InstinctError(
            f"GET {url} did not return an OpenAI model list",
            fix="is this port really a vLLM server? check --port",
            id="endpoint_error",
        ) from exc


# --------------------------------------------------------------------------- completions


@dataclass(frozen=True)
class CompletionResult:
    """One non-streamed completion and how long it took."""

    text: str
    latency_s: float
    endpoint: str  # "/v1/chat/completions" | "/v1/completions"
    finish_reason: str | None
    completion_tokens: int | None
    reasoning: str | None = None  # reasoning_content, when a reasoning parser is on

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "latency_s": round(self.latency_s, 3),
            "endpoint": self.endpoint,
            "finish_reason": self.finish_reason,
            "completion_tokens": self.completion_tokens,
        }


def complete(
    base_url: str,
    model: str,
    prompt: str,
    *,
    use_chat: bool,
    max_tokens: int = 16,
    temperature: float = 0.0,
    timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    api_key: str | None = None,
    extra: dict[str, Any] | None = None,
    error_id: str = "completion_failed",
    timeout_id: str = "completion_timeout",
    routes: Routes = VLLM_ROUTES,
) -> CompletionResult:
    """One completion: chat for instruct models, ``/v1/completions`` for base models
    without a chat template (vLLM rejects chat requests for those)."""
    path = routes.chat if use_chat else routes.completions
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "temperature": temperature}
    if use_chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body.update(extra or {})
    url = normalize_base_url(base_url) + path
    start = time.monotonic()
    try:
        with _client(timeout, api_key) as http:
            response = http.post(url, json=body)
    except httpx.TimeoutException as exc:
        raise InstinctError(
            f"no answer from {path} within {timeout:g} s",
            fix="the first request compiles kernels (minutes with JIT builds): raise the "
            "warm-up timeout, and watch `instinct logs -f NAME`",
            id=timeout_id,
        ) from exc
    except httpx.HTTPError as exc:
        raise InstinctError(
            f"{path} failed: {type(exc).__name__}: {exc} (did the server crash?)",
            fix="read the server log (`instinct logs NAME`) or run `instinct diagnose`",
            id=error_id,
        ) from exc
    latency = time.monotonic() - start
    if response.status_code != 200:
        raise InstinctError(
            f"{path} answered HTTP {response.status_code}: {_server_message(response)}",
            fix="read the server log (`instinct logs NAME`)"
            + (
                "; a base model without a chat template needs /v1/completions"
                if use_chat and response.status_code == 400
                else ""
            ),
            id=error_id,
            details={"status_code": response.status_code},
        )
    try:
        doc = response.json()
        choice = doc["choices"][0]
        if use_chat:
            message = choice.get("message") or {}
            text = message.get("content") or ""
            reasoning = message.get("reasoning_content") or message.get("reasoning")
        else:
            text, reasoning = choice.get("text") or "", None
        usage = doc.get("usage") or {}
        tokens = usage.get("completion_tokens")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise InstinctError(
            f"{path} returned a response that is not an OpenAI completion",
            fix="is this port really a vLLM server? check --port",
            id=error_id,
        ) from exc
    return CompletionResult(
        text=str(text),
        latency_s=latency,
        endpoint=path,
        finish_reason=choice.get("finish_reason"),
        completion_tokens=tokens if isinstance(tokens, int) else None,
        reasoning=str(reasoning) if reasoning else None,
    )


def warmup(
    base_url: str,
    model: str,
    *,
    use_chat: bool,
    timeout: float = DEFAULT_WARMUP_TIMEOUT_S,
    max_tokens: int = 16,
    api_key: str | None = None,
    routes: Routes = VLLM_ROUTES,
) -> CompletionResult:
    """The first request, which compiles kernels; its latency is worth reporting.

    Errors have id ``warmup_failed`` (or ``warmup_timeout``).
    """
    return complete(
        base_url,
        model,
        WARMUP_PROMPT,
        use_chat=use_chat,
        max_tokens=max_tokens,
        timeout=timeout,
        api_key=api_key,
        error_id="warmup_failed",
        timeout_id="warmup_timeout",
        routes=routes,
    )


# --------------------------------------------------------------------------- coherence

Verdict = Literal["coherent", "incoherent_output", "inconclusive"]

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class CoherenceVerdict:
    """``judge_coherence``'s answer: ``incoherent_output`` means the endpoint is broken."""

    verdict: Verdict
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.verdict != "incoherent_output"


def _script(char: str) -> str:
    """The Unicode script of a letter, from its name ("LATIN SMALL LETTER A" -> LATIN)."""
    try:
        name = unicodedata.name(char)
    except ValueError:
        return "UNKNOWN"
    first = name.split(" ", 1)[0]
    return "CJK" if first in ("CJK", "HIRAGANA", "KATAKANA") else first


def _garbage_reasons(text: str) -> list[str]:
    reasons: list[str] = []
    chars = [c for c in text if not c.isspace()]
    bad = sum(
        1
        for c in text
        if c == "\ufffd"
        or (unicodedata.category(c) in ("Cc", "Cs", "Co", "Cn") and c not in "\n\r\t")
    )
    if bad >= 2 or (chars and bad / len(chars) > 0.05):
        reasons.append(f"{bad} non-printable or replacement characters")
    letters = [c for c in text if c.isalpha()]
    if len(letters) >= 6:
        scripts = Counter(_script(c) for c in letters)
        major = sorted(s for s, n in scripts.items() if n / len(letters) >= 0.1)
        if len(major) >= 3:
            reasons.append(f"letters from {len(major)} unrelated scripts ({', '.join(major)})")
    longest, run, prev = 0, 0, ""
    for c in chars:
        run = run + 1 if c == prev else 1
        prev = c
        longest = max(longest, run)
    if longest >= 10:
        reasons.append(f"one character repeated {longest} times in a row")
    words = re.findall(r"\w+|[^\w\s]+", text.lower())
    same, best, last = 0, 0, None
    for w in words:
        same = same + 1 if w == last else 1
        last = w
        best = max(best, same)
    if best >= 4:
        reasons.append(f"a word repeated {best} times in a row")
    elif len(words) >= 12 and len(set(words)) / len(words) < 0.35:
        reasons.append(f"only {len(set(words))} distinct words out of {len(words)}")
    return reasons


def judge_coherence(
    text: str, expected: str | Sequence[str] = PROBE_EXPECTED, *, reasoning: str | None = None
) -> CoherenceVerdict:
    """Is this greedy answer to a known-answer prompt plausible model output?

    Pure. ``incoherent_output`` for empty output, non-printable or replacement characters,
    letters from several unrelated scripts, degenerate repetition, or a fluent answer
    without the expected word. ``inconclusive`` when a reasoning model was still thinking
    when ``max_tokens`` ran out (no answer, but nothing broken either).
    """
    wanted = [expected] if isinstance(expected, str) else list(expected)
    full = text + ("\n" + reasoning if reasoning else "")
    if not full.strip():
        return CoherenceVerdict("incoherent_output", ("empty output",))
    reasons = _garbage_reasons(full)
    if reasons:
        return CoherenceVerdict("incoherent_output", tuple(reasons))
    answer = _THINK_BLOCK.sub(" ", text)
    still_thinking = bool(re.search(r"<think>", answer, re.IGNORECASE))
    if still_thinking:
        answer = answer[: answer.lower().index("<think>")]
    for word in wanted:
        if re.search(rf"(?<!\w){re.escape(word)}(?!\w)", answer, re.IGNORECASE):
            return CoherenceVerdict("coherent")
    if still_thinking or (not answer.strip() and (reasoning or "<think>" in text.lower())):
        return CoherenceVerdict(
            "inconclusive", ("the model was still reasoning when max_tokens ran out",)
        )
    return CoherenceVerdict(
        "incoherent_output", (f"the answer does not contain {' or '.join(map(repr, wanted))}",)
    )


@dataclass(frozen=True)
class CoherenceResult:
    """The coherence probe: what was asked, what came back, and the verdict."""

    verdict: CoherenceVerdict
    prompt: str
    expected: tuple[str, ...]
    completion: CompletionResult

    @property
    def ok(self) -> bool:
        return self.verdict.ok

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.verdict,
            "ok": self.ok,
            "reasons": list(self.verdict.reasons),
            "prompt": self.prompt,
            "expected": list(self.expected),
            "text": self.completion.text,
            "latency_s": round(self.completion.latency_s, 3),
            "endpoint": self.completion.endpoint,
        }


def coherence_probe(
    base_url: str,
    model: str,
    *,
    use_chat: bool,
    timeout: float = DEFAULT_PROBE_TIMEOUT_S,
    max_tokens: int = 32,
    api_key: str | None = None,
    routes: Routes = VLLM_ROUTES,
) -> CoherenceResult:
    """Ask a greedy known-answer question and judge the answer (``judge_coherence``).

    Chat requests ask the template not to think (``enable_thinking: false``, honoured by
    Qwen3-style templates and ignored by others); a server that rejects the extra field
    is asked again without it.
    """
    prompt = CHAT_PROBE if use_chat else COMPLETION_PROBE
    kwargs: dict[str, Any] = {
        "use_chat": use_chat,
        "max_tokens": max_tokens,
        "timeout": timeout,
        "api_key": api_key,
        "error_id": "coherence_probe_failed",
        "timeout_id": "coherence_probe_timeout",
        "routes": routes,
    }
    if use_chat:
        try:
            result = complete(
                base_url,
                model,
                prompt,
                extra={"chat_template_kwargs": {"enable_thinking": False}},
                **kwargs,
            )
        except InstinctError as exc:
            if exc.details.get("status_code") != 400:
                raise
            result = complete(base_url, model, prompt, **kwargs)
    else:
        result = complete(base_url, model, prompt, **kwargs)
    verdict = judge_coherence(result.text, PROBE_EXPECTED, reasoning=result.reasoning)
    return CoherenceResult(verdict, prompt, PROBE_EXPECTED, result)
