"""A fingerprint of what an endpoint computes, independent of how good the model is.

``serve``'s coherence probe (``runtime.health``) catches an endpoint that answers garbage
from its first token. The wrong-output failures AMD users report most take other shapes:
NaN logits after a correct first token (vllm#51580), garbage only past some context length
(vllm#40018, #46856), kernels that regress with an image (aiter#1455). This module is the
pure core of a check that sees them: data in, data out, no I/O (the HTTP adapter is
``runtime.fingerprint``, the records ``runtime.fingerprints``).

What is measured (``probes``), through the completions API:

- ``short``: a fixed paragraph scored teacher-forced: the log-probability the endpoint
  gives each of its tokens (vLLM's ``prompt_logprobs``);
- ``long``: a fixed sequence of common words, seeded, written twice. Scored the same way
  it is an induction test: a model predicts the second copy better than the first, or, where
  it does not copy across that distance (a small model at thousands of tokens), about as
  well; a second copy scored far worse than the first means later positions compute
  garbage, the long-context failure seen without a reference. Milder breaks (a wrong RoPE
  scaling) move the long probe away from its reference of the same checkpoint.
  Its length is bounded in tokens by the caller (what the plan's context affords);
- ``greedy``: a short greedy continuation with its log-probabilities (``ignore_eos``: a
  fixed number of tokens): NaN/inf, or a stream of one repeated token, in decoding.

A fingerprint is kept compact (``ProbeScores``: segment means and the last tokens, not every
token), recorded when an endpoint is first proven, and compared (``compare``) with a
reference of the same checkpoint and precision, within a tolerance per platform
(``data/fingerprint_tolerances.json``, from measurement). Named failures, most specific
first: ``nan``, ``repetition``, ``long_context``, ``drift`` (``FAILURES``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

SCHEMA = 1
Failure = Literal["nan", "repetition", "long_context", "drift"]
FAILURES: tuple[Failure, ...] = ("nan", "repetition", "long_context", "drift")
FAILURE_TEXT: dict[Failure, str] = {
    "nan": "NaN or infinite log-probabilities",
    "repetition": "a stream of one repeated token",
    "long_context": "the long prompt diverges (attention across its length is broken)",
    "drift": "the scores moved beyond the platform's tolerance",
}

SHORT_TEXT = (
    "The river runs through the old town, past the market and the church, and on to the "
    "sea. In the morning the fishermen bring their boats back to the harbour, and by noon "
    "the square is full of people who have come to buy bread, fruit and fresh fish."
)
GREEDY_PROMPT = "The history of the city began"
GREEDY_TOKENS = 32  # decoded greedily, ignore_eos: a fixed number of tokens
# the long prompt: common English words, one token each in the usual BPE vocabularies
_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "number night point home water room mother area money story fact month lot right study "
    "book eye job word business issue side kind head house service friend father power hour "
    "game line end member law car city community name team minute idea body information back "
    "parent face level office door health person art war history party result change morning "
    "reason research girl moment air teacher force education"
)
_WORDS = tuple(_WORD_TEXT.split())
LONG_SEED = 29
WORDS_PER_TOKEN = 2 / 3  # budget in words for a token bound (<= 1.5 tokens a word)
MIN_LONG_TOKENS = 64  # below this the long probe says nothing: skipped
MAX_LONG_TOKENS = 4096  # the default bound; the caller's budget may be lower
LONG_SHARE = 0.5  # of the context the plan affords
SEGMENTS = 8  # segment means kept of each scored probe
TAIL = 32  # the last tokens' log-probabilities kept of each scored probe
REPEAT_RUN = 12  # this many equal tokens in a row: a stream of one repeated token
# nats a token: the second copy may score worse than the first by at most this much. A model
# that copies scores it far better; one that does not copy across the distance scores it as
# the first (SmolLM2-135M on CPU: +1.52 at 1,024 tokens, +0.64 at 2,048, -0.06 at 4,096,
# measured on the real vLLM 0.32); only positions that compute garbage score it below what
# no context at all predicts. How well a model copies is its quality, not its arithmetic:
# a long probe that copies less than its reference is the reference's to see (``check``).
MIN_COPY_GAIN = -1.0
VLLM_NEG_INF = -9999.0  # vLLM clamps -inf log-probabilities to this


# --------------------------------------------------------------------------- probes


@dataclass(frozen=True)
class ProbeText:
    """One teacher-forced probe: its name and text (``half``: the long probe's words per copy)."""

    name: str
    text: str
    half: int = 0


def long_text(words: int) -> str:
    """``words`` seeded common words, then the same words again (two copies, one ``.``)."""
    rng = random.Random(LONG_SEED)
    half = " ".join(rng.choice(_WORDS) for _ in range(max(1, words)))
    return f"{half}. {half}"


def long_budget(max_model_len: int | None, cap: int = MAX_LONG_TOKENS) -> int:
    """The long probe's bound in tokens: ``LONG_SHARE`` of the context, at most ``cap``;
    0 (no long probe) when that is under ``MIN_LONG_TOKENS``."""
    context = max_model_len or cap
    tokens = min(cap, int(context * LONG_SHARE))
    return tokens if tokens >= MIN_LONG_TOKENS else 0


def probes(long_tokens: int, *, words: int = 0) -> list[ProbeText]:
    """The teacher-forced probes for a long-probe bound of ``long_tokens`` (0: short only),
    or with ``words`` words in each copy of the long probe (another fingerprint's length)."""
    found = [ProbeText("short", SHORT_TEXT)]
    if words:
        found.append(ProbeText("long", long_text(words), words))
    elif long_tokens >= MIN_LONG_TOKENS:
        half = max(8, int(long_tokens * WORDS_PER_TOKEN) // 2)
        found.append(ProbeText("long", long_text(half), half))
    return found


def probe_set_id() -> str:
    """Names the probe texts: fingerprints of other texts are not compared."""
    blob = json.dumps([SCHEMA, SHORT_TEXT, GREEDY_PROMPT, GREEDY_TOKENS, LONG_SEED, _WORDS])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


# --------------------------------------------------------------------------- scores


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > VLLM_NEG_INF


def _mean(values: Sequence[float]) -> float | None:
    good = [v for v in values if finite(v)]
    return sum(good) / len(good) if good else None


def _segments(values: Sequence[float], count: int = SEGMENTS) -> list[float | None]:
    if not values:
        return []
    count = min(count, len(values))
    bounds = [round(i * len(values) / count) for i in range(count + 1)]
    return [_r(_mean(values[a:b])) for a, b in itertools.pairwise(bounds)]


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass(frozen=True)
class ProbeScores:
    """One teacher-forced probe, kept compact: how many tokens the endpoint scored, the
    means of ``SEGMENTS`` equal runs of them, the last ``TAIL`` values, the non-finite ones
    (``nonfinite``, first at ``first_nonfinite``) and, for the long probe, the copy gain."""

    name: str
    tokens: int
    mean: float | None
    segments: tuple[float | None, ...]
    tail: tuple[float | None, ...]
    nonfinite: int = 0
    first_nonfinite: int | None = None
    copy_gain: float | None = None  # long: second copy's mean minus the first's
    words: int = 0  # long: the words of one copy (fingerprints of other lengths differ)

    @classmethod
    def of(cls, name: str, logprobs: Sequence[float | None], *, words: int = 0) -> ProbeScores:
        """From every scored token's log-probability (the first prompt token has none and
        is left out by the caller). ``None`` counts as non-finite."""
        values = [math.nan if v is None else float(v) for v in logprobs]
        bad = [i for i, v in enumerate(values) if not finite(v)]
        gain = None
        if words:
            middle = len(values) // 2
            first, second = _mean(values[:middle]), _mean(values[middle + middle // 8 :])
            gain = None if first is None or second is None else _r(second - first)
        return cls(
            name=name,
            tokens=len(values),
            mean=_r(_mean(values)),
            segments=tuple(_segments(values)),
            tail=tuple(_r(v) if finite(v) else None for v in values[-TAIL:]),
            nonfinite=len(bad),
            first_nonfinite=bad[0] if bad else None,
            copy_gain=gain,
            words=words,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tokens": self.tokens,
            "mean": self.mean,
            "segments": list(self.segments),
            "tail": list(self.tail),
            "nonfinite": self.nonfinite,
            "first_nonfinite": self.first_nonfinite,
            "copy_gain": self.copy_gain,
            "words": self.words,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ProbeScores:
        return cls(
            name=str(doc["name"]),
            tokens=int(doc["tokens"]),
            mean=_opt_float(doc.get("mean")),
            segments=tuple(_opt_float(v) for v in doc.get("segments") or ()),
            tail=tuple(_opt_float(v) for v in doc.get("tail") or ()),
            nonfinite=int(doc.get("nonfinite") or 0),
            first_nonfinite=_opt_int(doc.get("first_nonfinite")),
            copy_gain=_opt_float(doc.get("copy_gain")),
            words=int(doc.get("words") or 0),
        )


def _opt_float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def longest_run(tokens: Sequence[Any]) -> int:
    """The longest run of one token repeated in a row."""
    best, run, prev = 0, 0, object()
    for token in tokens:
        run = run + 1 if token == prev else 1
        prev = token
        best = max(best, run)
    return best


@dataclass(frozen=True)
class GreedyRun:
    """The greedy continuation: its text, tokens (ids where the server gave them), their
    log-probabilities' non-finite count and its longest run of one token."""

    text: str
    tokens: int
    nonfinite: int
    first_nonfinite: int | None
    longest_run: int
    mean: float | None

    @classmethod
    def of(cls, text: str, tokens: Sequence[Any], logprobs: Sequence[float | None]) -> GreedyRun:
        values = [math.nan if v is None else float(v) for v in logprobs]
        bad = [i for i, v in enumerate(values) if not finite(v)]
        return cls(
            text=text[:400],
            tokens=len(tokens),
            nonfinite=len(bad),
            first_nonfinite=bad[0] if bad else None,
            longest_run=longest_run(tokens),
            mean=_r(_mean(values)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tokens": self.tokens,
            "nonfinite": self.nonfinite,
            "first_nonfinite": self.first_nonfinite,
            "longest_run": self.longest_run,
            "mean": self.mean,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> GreedyRun:
        return cls(
            text=str(doc.get("text") or ""),
            tokens=int(doc.get("tokens") or 0),
            nonfinite=int(doc.get("nonfinite") or 0),
            first_nonfinite=_opt_int(doc.get("first_nonfinite")),
            longest_run=int(doc.get("longest_run") or 0),
            mean=_opt_float(doc.get("mean")),
        )


@dataclass(frozen=True)
class Fingerprint:
    """The scored probes and the greedy run, with what taking them cost."""

    scores: tuple[ProbeScores, ...]
    greedy: GreedyRun | None
    cost_tokens: int = 0  # prompt + generated tokens the endpoint processed
    cost_s: float = 0.0
    probe_set: str = field(default_factory=probe_set_id)

    def probe(self, name: str) -> ProbeScores | None:
        return next((s for s in self.scores if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "probe_set": self.probe_set,
            "scores": [s.to_dict() for s in self.scores],
            "greedy": None if self.greedy is None else self.greedy.to_dict(),
            "cost_tokens": self.cost_tokens,
            "cost_s": round(self.cost_s, 3),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Fingerprint | None:
        """A stored fingerprint, or None for anything that is not one (records are data)."""
        try:
            if doc.get("schema") != SCHEMA:
                return None
            greedy = doc.get("greedy")
            return cls(
                scores=tuple(ProbeScores.from_dict(s) for s in doc.get("scores") or ()),
                greedy=GreedyRun.from_dict(greedy) if isinstance(greedy, Mapping) else None,
                cost_tokens=int(doc.get("cost_tokens") or 0),
                cost_s=float(doc.get("cost_s") or 0.0),
                probe_set=str(doc.get("probe_set") or ""),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


# --------------------------------------------------------------------------- parsing


def prompt_scores(
    choice: Mapping[str, Any], prompt_tokens: int | None = None
) -> list[float | None]:
    """Each prompt token's log-probability but the first, from one completion choice:
    vLLM's ``prompt_logprobs`` (``[null, {"<id>": {"logprob": x, ...}}, ...]``, the entry of
    the prompt's own token, found by ``prompt_token_ids`` when there are several), else the
    OpenAI ``echo`` shape (``logprobs.token_logprobs``, prompt tokens first, then the
    generated ones: cut at ``prompt_tokens``, the answer's ``usage.prompt_tokens``).
    ``ValueError`` when the choice has neither."""
    listed = choice.get("prompt_logprobs")
    if isinstance(listed, list) and listed:
        ids = choice.get("prompt_token_ids")
        values: list[float | None] = []
        for i, entry in enumerate(listed[1:], start=1):
            values.append(_entry_logprob(entry, ids[i] if isinstance(ids, list) else None))
        return values
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, Mapping) and isinstance(logprobs.get("token_logprobs"), list):
        echoed = logprobs["token_logprobs"]
        return [_number(v) for v in (echoed[:prompt_tokens] if prompt_tokens else echoed)[1:]]
    raise ValueError("the completion carries no prompt log-probabilities")


def _entry_logprob(entry: Any, token_id: Any) -> float | None:
    if not isinstance(entry, Mapping) or not entry:
        return None
    picked = entry.get(str(token_id)) if token_id is not None else None
    if picked is None:  # no ids: vLLM lists the prompt's own token first
        picked = next(iter(entry.values()))
    value = picked.get("logprob") if isinstance(picked, Mapping) else picked
    return _number(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):  # "NaN", "-Infinity" as some JSON encoders write them
        try:
            return float(value)
        except ValueError:
            return None
    return None


def greedy_run(choice: Mapping[str, Any]) -> GreedyRun:
    """The greedy continuation of one completion choice (``logprobs`` requested)."""
    text = str(choice.get("text") or "")
    logprobs = choice.get("logprobs")
    values: list[float | None] = []
    tokens: list[Any] = []
    if isinstance(logprobs, Mapping):
        values = [_number(v) for v in logprobs.get("token_logprobs") or ()]
        tokens = list(logprobs.get("tokens") or ())
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids:
        tokens = list(ids)
    if not values and not tokens:
        raise ValueError("the completion carries no log-probabilities")
    return GreedyRun.of(text, tokens or [None] * len(values), values)


# --------------------------------------------------------------------------- tolerance


@dataclass(frozen=True)
class Tolerance:
    """How far a healthy endpoint's scores move (nats a token), and where that was measured."""

    platform: str
    segment: float  # the largest move of one segment's mean
    tail: float  # the mean move of the last tokens
    measured: bool
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "segment": self.segment,
            "tail": self.tail,
            "measured": self.measured,
            "source": self.source,
        }


@cache
def _tolerance_table() -> dict[str, Any]:
    text = resources.files("instinct_serve.data").joinpath("fingerprint_tolerances.json")
    doc = json.loads(text.read_text(encoding="utf-8"))
    return dict(doc["platforms"])


def tolerance_for(platform: str | None) -> Tolerance:
    """The tolerance of ``platform`` (a gfx target, ``cpu``), else the default row."""
    table = _tolerance_table()
    key = platform if platform in table else "default"
    row = table[key]
    return Tolerance(
        platform=key,
        segment=float(row["segment"]),
        tail=float(row["tail"]),
        measured=bool(row.get("measured")),
        source=str(row.get("source") or ""),
    )


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Distance:
    """How far one probe moved from its reference."""

    segment: float  # the largest move of one segment mean
    tail: float  # the mean move over the last tokens
    comparable: bool = True  # the same probe on the same tokenizer (same token count)

    def within(self, tolerance: Tolerance) -> bool:
        return self.segment <= tolerance.segment and self.tail <= tolerance.tail

    def to_dict(self) -> dict[str, Any]:
        return {"segment": round(self.segment, 4), "tail": round(self.tail, 4)}


def _moves(a: Iterable[float | None], b: Iterable[float | None]) -> list[float]:
    moves = []
    for x, y in zip(a, b, strict=False):
        if x is None or y is None:
            moves.append(math.inf if (x is None) != (y is None) else 0.0)
        else:
            moves.append(abs(x - y))
    return moves


def distance(reference: ProbeScores, current: ProbeScores) -> Distance:
    """How far ``current`` moved from ``reference`` (not comparable when the endpoint
    counted another number of tokens: another tokenizer, another checkpoint)."""
    if reference.tokens != current.tokens or reference.words != current.words:
        return Distance(0.0, 0.0, comparable=False)
    segments = _moves(reference.segments, current.segments)
    tail = _moves(reference.tail, current.tail)
    return Distance(max(segments, default=0.0), sum(tail) / len(tail) if tail else 0.0)


@dataclass(frozen=True)
class Check:
    """A fingerprint judged: ``failure`` names what is wrong (None: it passed)."""

    failure: Failure | None
    reasons: tuple[str, ...] = ()
    distances: dict[str, Distance] = field(default_factory=dict)
    tolerance: Tolerance | None = None
    compared: bool = False  # against a reference (else only the checks that need none)

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "failure": self.failure,
            "reasons": list(self.reasons),
            "compared": self.compared,
            "distances": {k: v.to_dict() for k, v in self.distances.items() if v.comparable},
            "tolerance": None if self.tolerance is None else self.tolerance.to_dict(),
        }


def _own_failures(fp: Fingerprint, *, need_long: bool) -> list[tuple[Failure, str]]:
    """What a fingerprint shows by itself: NaN, repetition, a long probe not scored or
    not copied (the second copy no better than the first)."""
    found: list[tuple[Failure, str]] = []
    for scores in fp.scores:
        if scores.nonfinite:
            at = scores.first_nonfinite
            found.append(
                (
                    "nan",
                    f"{scores.nonfinite} of {scores.name}'s {scores.tokens} scored "
                    f"tokens are NaN or infinite (first at token {at})",
                )
            )
    greedy = fp.greedy
    if greedy is not None and greedy.nonfinite:
        found.append(
            (
                "nan",
                f"{greedy.nonfinite} of {greedy.tokens} greedy tokens have NaN or "
                f"infinite log-probabilities (first at token {greedy.first_nonfinite})",
            )
        )
    if greedy is not None and greedy.longest_run >= min(REPEAT_RUN, max(2, greedy.tokens)):
        found.append(
            (
                "repetition",
                f"the greedy continuation repeats one token "
                f"{greedy.longest_run} times in a row: {greedy.text[:80]!r}",
            )
        )
    long = fp.probe("long")
    if need_long and long is None:
        found.append(("long_context", "the long prompt was not scored"))
    elif long is not None and long.copy_gain is not None and long.copy_gain < MIN_COPY_GAIN:
        found.append(
            (
                "long_context",
                f"the long prompt's second copy scores {long.copy_gain:+.2f} nats a token "
                f"against its first: worse than no context predicts (a model that copies "
                f"scores it better, one that does not copies no worse than {MIN_COPY_GAIN:+.1f})",
            )
        )
    return found


def check(
    current: Fingerprint,
    reference: Fingerprint | None = None,
    *,
    platform: str | None = None,
    need_long: bool = True,
) -> Check:
    """Judge ``current``: alone (NaN, repetition, the long prompt scored and copied), then
    against ``reference`` when there is one of the same probe set, within the tolerance of
    ``platform``. Named failures in ``FAILURES`` order: the first found is the verdict."""
    tolerance = tolerance_for(platform)
    found = _own_failures(current, need_long=need_long)
    distances: dict[str, Distance] = {}
    compared = reference is not None and reference.probe_set == current.probe_set
    if compared:
        assert reference is not None
        for scores in current.scores:
            ref = reference.probe(scores.name)
            if ref is not None:
                distances[scores.name] = distance(ref, scores)
        moved = {n for n, d in distances.items() if d.comparable and not d.within(tolerance)}
        for name in sorted(moved):
            d = distances[name]
            kind: Failure = "long_context" if name == "long" and "short" not in moved else "drift"
            found.append(
                (
                    kind,
                    f"{name}: moved {d.segment:.3f} (segment) / {d.tail:.3f} (tail) "
                    f"nats a token, tolerance {tolerance.segment:g} / {tolerance.tail:g} "
                    f"({tolerance.platform})",
                )
            )
    failure = min((f for f, _ in found), key=FAILURES.index, default=None)
    return Check(failure, tuple(r for _, r in found), distances, tolerance, compared)
