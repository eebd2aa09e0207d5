"""The fingerprint's pure core (``observe.fingerprint``): probes bounded by the context,
scores parsed from vLLM's real response shapes, and the named failures."""

from __future__ import annotations

import json
import math
from typing import Any

from instinct_serve.observe import fingerprint as fp
from tests.infra.paths import LOGS

# vLLM 0.32 (CPU build, SmolLM2-135M-Instruct), POST /v1/completions with
# {"prompt": "The quick brown fox jumps over", "max_tokens": 1, "prompt_logprobs": 0,
#  "return_token_ids": true}: the choice's fields as it answered them.
REAL_PROMPT_LOGPROBS: dict[str, Any] = {
    "prompt_logprobs": [
        None,
        {"2365": {"logprob": -14.45909309387207, "rank": 13912, "decoded_token": " quick"}},
        {"6354": {"logprob": -6.169591426849365, "rank": 49, "decoded_token": " brown"}},
        {"16438": {"logprob": -1.4508458375930786, "rank": 1, "decoded_token": " fox"}},
        {"27003": {"logprob": -7.073756217956543, "rank": 73, "decoded_token": " jumps"}},
        {"690": {"logprob": -0.005162361543625593, "rank": 1, "decoded_token": " over"}},
    ],
    "prompt_token_ids": [504, 2365, 6354, 16438, 27003, 690],
    "token_ids": [253],
    "text": " a",
}
# the same prompt with {"echo": true, "logprobs": 1}: prompt_logprobs=1 lists the prompt's
# token first, then the top one
REAL_ECHO: dict[str, Any] = {
    "text": "The quick brown fox jumps over a",
    "logprobs": {
        "token_logprobs": [
            None,
            -14.45909309387207,
            -6.169591426849365,
            -1.4508458375930786,
            -7.073756217956543,
            -0.005162361543625593,
            -0.13306351006031036,
        ],
        "tokens": ["The", " quick", " brown", " fox", " jumps", " over", " a"],
    },
    "prompt_logprobs": [
        None,
        {
            "2365": {"logprob": -14.45909309387207, "rank": 13912, "decoded_token": " quick"},
            "29": {"logprob": -0.8340926170349121, "rank": 1, "decoded_token": "-"},
        },
    ],
}


def healthy(shift: float = 0.0, long_shift: float = 0.0, words: int = 100) -> fp.Fingerprint:
    short = [-2.0 - (i % 5) * 0.3 + shift for i in range(60)]
    first = [-7.0 + (i % 3) * 0.1 for i in range(words)]
    second = [-0.5 - (i % 4) * 0.05 + long_shift for i in range(words)]
    return fp.Fingerprint(
        scores=(
            fp.ProbeScores.of("short", short),
            fp.ProbeScores.of("long", first + second, words=words),
        ),
        greedy=fp.GreedyRun.of("a b c", list(range(32)), [-0.5] * 32),
    )


def test_the_long_probe_is_bounded_by_the_context_the_plan_affords() -> None:
    assert fp.long_budget(131072) == fp.MAX_LONG_TOKENS
    assert fp.long_budget(2048) == 1024
    assert fp.long_budget(2048, cap=512) == 512
    assert fp.long_budget(100) == 0  # under MIN_LONG_TOKENS: no long probe
    texts = fp.probes(1024)
    assert [p.name for p in texts] == ["short", "long"]
    long = texts[1]
    words = long.text.replace(".", "").split()
    assert len(words) == 2 * long.half <= 1024 * fp.WORDS_PER_TOKEN
    assert words[: long.half] == words[long.half :]  # two copies of the same words
    assert fp.probes(1024) == texts  # seeded: the same text every time
    assert [p.name for p in fp.probes(0)] == ["short"]


def test_scores_are_read_from_vllms_prompt_logprobs_and_echo_shapes() -> None:
    values = fp.prompt_scores(REAL_PROMPT_LOGPROBS)
    assert values == [
        -14.45909309387207,
        -6.169591426849365,
        -1.4508458375930786,
        -7.073756217956543,
        -0.005162361543625593,
    ]
    # several candidates and no token ids: the prompt's own token is listed first
    assert fp.prompt_scores(REAL_ECHO)[0] == -14.45909309387207
    echo_only = {"logprobs": REAL_ECHO["logprobs"]}
    assert fp.prompt_scores(echo_only)[:2] == [-14.45909309387207, -6.169591426849365]
    greedy = fp.greedy_run({**REAL_ECHO, "token_ids": [1, 2, 3, 4, 5, 6, 7]})
    assert greedy.tokens == 7 and greedy.nonfinite == 1 and greedy.first_nonfinite == 0


def test_nan_infinite_and_clamped_minus_infinity_count_as_nonfinite() -> None:
    scores = fp.ProbeScores.of("short", [-1.0, -2.0, math.nan, -math.inf, -9999.0, None])
    assert scores.nonfinite == 4 and scores.first_nonfinite == 2
    assert scores.mean == -1.5
    choice = {"prompt_logprobs": [None, {"5": {"logprob": "NaN"}}, {"6": {"logprob": -1.0}}]}
    assert math.isnan(fp.prompt_scores(choice)[0] or 0.0)


def test_a_healthy_fingerprint_passes_alone_and_against_itself() -> None:
    alone = fp.check(healthy())
    assert alone.ok and not alone.compared
    same = fp.check(healthy(), healthy(), platform="gfx942")
    assert same.ok and same.compared
    assert same.distances["short"].segment == 0.0
    assert same.tolerance is not None and same.tolerance.platform == "default"


def test_each_failure_is_named() -> None:
    nan = healthy()
    bad_greedy = fp.GreedyRun.of("!!!!", [0] * 32, [-0.1, -0.2] + [math.nan] * 30)
    verdict = fp.check(fp.Fingerprint(nan.scores, bad_greedy))
    assert verdict.failure == "nan"  # NaN ranks before the repetition it also shows
    assert any("repeats one token 32 times" in r for r in verdict.reasons)
    repeat = fp.GreedyRun.of("the the the", [7] * 20 + list(range(12)), [-0.1] * 32)
    assert fp.check(fp.Fingerprint(nan.scores, repeat)).failure == "repetition"
    no_copy = healthy(long_shift=-6.5)  # the second copy scores like the first: a weak model
    assert fp.check(no_copy).ok
    garbage = healthy(long_shift=-9.0)  # worse than the first copy by 2 nats: garbage
    verdict = fp.check(garbage)
    assert verdict.failure == "long_context" and "worse than no context" in verdict.reasons[0]
    short_only = fp.Fingerprint(healthy().scores[:1], healthy().greedy)
    assert fp.check(short_only).failure == "long_context"
    assert fp.check(short_only, need_long=False).ok


def test_against_a_reference_a_move_is_drift_or_long_context() -> None:
    reference = healthy()
    assert fp.check(healthy(shift=0.2, long_shift=0.2), reference).ok  # within 0.5
    drift = fp.check(healthy(shift=2.0, long_shift=2.0), reference)
    assert drift.failure == "drift"
    assert drift.distances["short"].segment == 2.0
    only_long = fp.check(healthy(long_shift=-0.9), reference)
    assert only_long.failure == "long_context"
    assert "long: moved" in only_long.reasons[0]
    other_tokenizer = fp.check(healthy(words=90), reference)
    assert other_tokenizer.ok and not other_tokenizer.distances["long"].comparable


def test_a_stored_fingerprint_round_trips_and_junk_is_no_fingerprint() -> None:
    doc = healthy().to_dict()
    again = fp.Fingerprint.from_dict(doc)
    assert again is not None and again.to_dict() == doc
    assert fp.check(again, healthy()).ok
    assert fp.Fingerprint.from_dict({"schema": 99}) is None
    assert fp.Fingerprint.from_dict({"schema": 1, "scores": [{"name": "x"}]}) is None
    other_set = fp.Fingerprint(healthy(shift=3).scores, None, probe_set="other")
    assert not fp.check(other_set, healthy(), need_long=False).compared


def test_the_real_vllm_measurement_holds_for_the_cpu_tolerance() -> None:
    """tests/fixtures/logs/real-vllm-cpu/fingerprints.json: the real engine's fingerprints
    across a restart and eager vs compiled stay within the ``cpu`` row; a wrong RoPE
    scaling is caught against the reference (alone it looks like a model that copies less)."""
    runs = json.loads((LOGS / "real-vllm-cpu" / "fingerprints.json").read_text())
    taken = {k: [fp.Fingerprint.from_dict(d) for d in v] for k, v in runs.items()}
    reference = taken["eager"][0]
    assert reference is not None and fp.check(reference).ok
    tolerance = fp.tolerance_for("cpu")
    assert tolerance.measured and tolerance.platform == "cpu"
    for name in ("eager", "eager-restart", "compiled"):
        for current in taken[name]:
            assert current is not None
            verdict = fp.check(current, reference, platform="cpu")
            assert verdict.ok and verdict.compared, (name, verdict.reasons)
    compiled = fp.check(taken["compiled"][0], reference, platform="cpu")  # type: ignore[arg-type]
    assert 0 < compiled.distances["long"].segment < tolerance.segment / 3
    for broken in taken["broken-rope"]:
        assert broken is not None
        assert fp.check(broken).ok  # it copies less, as a weaker model would: not alone
        against = fp.check(broken, reference, platform="cpu")
        assert against.failure == "drift"  # factor 4 moves the short probe as well
        assert min(d.tail for d in against.distances.values()) > 2 * tolerance.tail
