"""Take an endpoint's fingerprint (``observe.fingerprint``) over HTTP, bounded in tokens and
seconds.

Three requests to the completions route, one after the other (never concurrent with each
other, so a check costs a busy endpoint one request's slot at a time): the short and the
long probe teacher-forced (``max_tokens``: 1 and the server's ``Routes.scoring``: vLLM's
``prompt_logprobs``: 0 with ``return_token_ids``, SGLang's ``echo`` with ``logprobs``),
then the greedy run (``logprobs``: 0, ``ignore_eos``, ``GREEDY_TOKENS`` tokens). A server
that ignores them answers without the fields, which is ``fingerprint_failed``.

The long probe is bounded by ``Budget.long_tokens`` (``fingerprint.long_budget``: a share
of the plan's context); the server counts the tokens, and one that says the prompt is too
long for its context is asked once more with half. The whole fingerprint is bounded by
``Budget.seconds``: each request gets what is left.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from instinct_serve.errors import InstinctError
from instinct_serve.observe import fingerprint as fp
from instinct_serve.runtime.health import VLLM_ROUTES, normalize_base_url
from instinct_serve.servers import Routes

DEFAULT_SECONDS = 60.0


@dataclass(frozen=True)
class Budget:
    """What one fingerprint may cost: the long probe's tokens, the whole run's seconds."""

    long_tokens: int
    seconds: float = DEFAULT_SECONDS
    long_words: int = 0  # the long probe's words a copy, to match another fingerprint

    @classmethod
    def for_context(
        cls, max_model_len: int | None, *, cap: int = fp.MAX_LONG_TOKENS, seconds: float = 0
    ) -> Budget:
        return cls(fp.long_budget(max_model_len, cap), seconds or DEFAULT_SECONDS)


class _Session:
    """One fingerprint's requests: a client, the deadline, the tokens spent."""

    def __init__(self, base_url: str, model: str, api_key: str | None, routes: Routes) -> None:
        self.url = normalize_base_url(base_url) + routes.completions
        self.scoring = dict(routes.scoring)
        self.model = model
        self.prompt_tokens: int | None = None  # as the last answer counted them
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(trust_env=False, headers=headers)
        self.tokens = 0

    def post(self, body: dict[str, Any], deadline: float) -> tuple[int, dict[str, Any]]:
        """(status, JSON body); the answer's usage counted."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timeout(self.url)
        try:
            response = self.http.post(self.url, json={"model": self.model, **body}, timeout=left)
        except httpx.TimeoutException as exc:
            raise _timeout(self.url) from exc
        except httpx.HTTPError as exc:
            raise InstinctError(
                f"the fingerprint's request to {self.url} failed: {type(exc).__name__}: {exc}",
                fix="read the server log (`instinct logs NAME`); did the server crash?",
                id="fingerprint_failed",
            ) from exc
        try:
            doc = response.json()
        except ValueError:
            doc = {}
        if not isinstance(doc, dict):
            doc = {}
        usage = doc.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("total_tokens"), int):
            self.tokens += usage["total_tokens"]
        prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        self.prompt_tokens = prompt if isinstance(prompt, int) and prompt > 0 else None
        return response.status_code, doc

    def choice(self, body: dict[str, Any], deadline: float) -> dict[str, Any]:
        status, doc = self.post(body, deadline)
        if status != 200:
            raise _failed(self.url, status, doc)
        try:
            choice = doc["choices"][0]
        except (KeyError, IndexError, TypeError):
            choice = None
        if not isinstance(choice, dict):
            raise _failed(self.url, status, doc)
        return choice


def _timeout(url: str) -> InstinctError:
    return InstinctError(
        f"the fingerprint of {url} ran out of its time bound",
        fix="the endpoint is busy or slow: raise the bound, or check it again later",
        id="fingerprint_timeout",
    )


def _failed(url: str, status: int, doc: dict[str, Any]) -> InstinctError:
    error = doc.get("error")
    said = error.get("message") if isinstance(error, dict) else error or doc.get("detail")
    return InstinctError(
        f"{url} answered the fingerprint's request with HTTP {status}: {str(said or '')[:300]}",
        fix="read the server log (`instinct logs NAME`)",
        id="fingerprint_failed",
        details={"status_code": status},
    )


def _too_long(exc: InstinctError) -> bool:
    return exc.details.get("status_code") == 400 and "context" in exc.message.lower()


def _score(session: _Session, probe: fp.ProbeText, deadline: float) -> fp.ProbeScores:
    body = {"prompt": probe.text, "max_tokens": 1, "temperature": 0.0, **session.scoring}
    choice = session.choice(body, deadline)
    try:
        values = fp.prompt_scores(choice, prompt_tokens=session.prompt_tokens)
    except ValueError as exc:
        asked = ", ".join(f"{k}={v}" for k, v in session.scoring.items())
        raise InstinctError(
            f"{session.url} answered without prompt log-probabilities: it cannot be fingerprinted",
            fix=f"the server should return them when asked ({asked}); check the server and "
            "version, or serve with --no-fingerprint",
            id="fingerprint_failed",
        ) from exc
    return fp.ProbeScores.of(probe.name, values, words=probe.half)


def _greedy(session: _Session, deadline: float) -> fp.GreedyRun:
    body = {
        "prompt": fp.GREEDY_PROMPT,
        "max_tokens": fp.GREEDY_TOKENS,
        "temperature": 0.0,
        "logprobs": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    choice = session.choice(body, deadline)
    try:
        return fp.greedy_run(choice)
    except ValueError as exc:
        raise InstinctError(
            f"{session.url} answered the greedy run without log-probabilities",
            fix="the server should return them (`logprobs`); check the server and version",
            id="fingerprint_failed",
        ) from exc


def take(
    base_url: str,
    model: str,
    budget: Budget,
    *,
    api_key: str | None = None,
    routes: Routes = VLLM_ROUTES,
) -> fp.Fingerprint:
    """The fingerprint of the endpoint at ``base_url`` serving ``model``, within ``budget``."""
    start = time.monotonic()
    deadline = start + budget.seconds
    session = _Session(base_url, model, api_key, routes)
    scores: list[fp.ProbeScores] = []
    with session.http:
        for probe in fp.probes(budget.long_tokens, words=budget.long_words):
            try:
                scores.append(_score(session, probe, deadline))
            except InstinctError as exc:
                if probe.name != "long" or not _too_long(exc):
                    raise
                shorter = fp.probes(budget.long_tokens // 2)[1:]
                if shorter:
                    scores.append(_score(session, shorter[0], deadline))
        greedy = _greedy(session, deadline)
    return fp.Fingerprint(
        scores=tuple(scores),
        greedy=greedy,
        cost_tokens=session.tokens,
        cost_s=time.monotonic() - start,
    )
