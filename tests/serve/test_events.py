"""Serve's progress events: typed inside, the same JSON at the edge, no word said twice."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from rich.text import Text

from instinct_serve.cli.serve import phase_text
from instinct_serve.diagnose.phases import PhaseEvent, track
from instinct_serve.runtime import events as ev
from tests.diagnose.logs import log_names, real_lines

# The JSON Lines contract (README, `instinct serve --help`, SKILL.md): keys in this order.
SHAPES: list[tuple[Callable[[], ev.ServeEvent], list[str]]] = [
    (
        lambda: ev.PhaseUpdate(phase="launching", message="vllm-x", attempt=1),
        ["event", "ts", "phase", "message", "progress", "figures", "attempt"],
    ),
    (
        lambda: ev.PhaseUpdate(phase="checking", message="host local"),
        ["event", "ts", "phase", "message", "progress", "figures"],
    ),
    (
        lambda: ev.Launched(container="c", engine="docker", attempt=1),
        ["container", "engine", "attempt"],
    ),
    (lambda: ev.Healthy(elapsed_s=1.5), ["elapsed_s"]),
    (
        lambda: ev.WarmedUp(latency_s=0.2, endpoint="/v1/chat/completions"),
        ["latency_s", "endpoint"],
    ),
    (lambda: ev.CoherenceChecked(verdict="coherent", text="Paris"), ["verdict", "text"]),
    (
        lambda: ev.Relaunching(finding="f", title="t", changes=["--enforce-eager"], message="m"),
        ["finding", "title", "changes", "message"],
    ),
    (lambda: ev.Stalled(phase="capturing_graphs", message="m"), ["phase", "message"]),
    (lambda: ev.Replaced(container="c", message="m"), ["container", "message"]),
    (lambda: ev.Reused(container="c", message="m"), ["container", "message"]),
    (lambda: ev.Attached(container="c", message="m"), ["container", "message"]),
    (lambda: ev.Note(message="m"), ["message"]),
    (lambda: ev.WarningEvent(message="m"), ["message"]),
]


@pytest.mark.parametrize(("make", "keys"), SHAPES, ids=[type(m()).__name__ for m, _ in SHAPES])
def test_json_shape_is_the_contract(make: Callable[[], ev.ServeEvent], keys: list[str]) -> None:
    event = make()
    doc = event.to_dict()
    expected = keys if keys[:2] == ["event", "ts"] else ["event", "ts", *keys]
    assert list(doc) == expected
    assert doc["event"] == event.kind
    assert isinstance(doc["ts"], float) and abs(doc["ts"] - time.time()) < 60


def test_every_event_type_is_covered_and_kinds_are_unique() -> None:
    assert {type(make()) for make, _ in SHAPES} == set(ev.EVENT_TYPES)
    kinds = [t.kind for t in ev.EVENT_TYPES]
    assert len(kinds) == len(set(kinds))


def test_a_tracker_phase_becomes_a_serve_phase() -> None:
    tracked = PhaseEvent("loading_weights", "shard 1/2", 0.5, {"weights_gib": 1.0})
    doc = ev.PhaseUpdate.of(tracked).to_dict()
    doc.pop("ts")
    assert doc == {**tracked.to_dict(), "event": "phase"}
    doc["figures"]["x"] = 1  # a copy: the event stays as it was
    assert "x" not in ev.PhaseUpdate.of(tracked).figures


_REPEATED = re.compile(r"\b([a-z]+(?: [a-z]+)*)[\s:]+\1\b", re.IGNORECASE)


def _doubled(text: str) -> bool:
    """A word or phrase said twice in a row; ``pulling_image`` reads as two words."""
    return bool(_REPEATED.search(text.replace("_", " ")))


def _phase_messages() -> list[tuple[str, str]]:
    pairs = {
        ("starting", "no progress line yet"),
        ("launching", "vllm-qwen3"),
        ("pulling_image", "image vllm/vllm-openai-rocm:v0.27.1 pulled"),
        ("pulling_image", "pulling image vllm/vllm-openai-rocm:v0.27.1"),
        ("warming_up", "first request (compiles kernels: may take minutes)"),
        ("coherence_probe", "greedy known-answer probe"),
        ("ready", "API server answers /health"),
    }
    for name in log_names():
        for event in track(real_lines(name)):
            pairs.add((event.phase, event.message))
    return sorted(pairs)


@pytest.mark.parametrize(("phase", "message"), _phase_messages())
def test_no_phase_line_says_a_word_twice(phase: str, message: str) -> None:
    plain = Text.from_markup(phase_text(phase, message)).plain
    assert not _doubled(plain), plain
    assert not _doubled(ev.phase_words(phase, message))
    assert message in plain


def test_the_checker_sees_what_the_old_lines_said() -> None:
    assert _doubled("starting starting") and _doubled("launching launching vllm-x")
    assert _doubled("loading_weights loading weights: shard 2/4")
    assert _doubled("pulling_image image x pulled") and not _doubled("ready API server ready")


def test_the_phase_label_is_dropped_only_when_the_message_repeats_it() -> None:
    assert ev.phase_label("loading_weights", "loading weights: shard 2/4") is None
    assert ev.phase_label("starting", "starting") is None
    assert ev.phase_label("ready", "API server ready") == "ready"
    assert ev.phase_label("starting_server", "on http://127.0.0.1:8000") == "starting server"
    assert phase_text("starting_server", "") == "[bold]starting server[/]"  # words, not ids
    assert ev.phase_label("loading_weights", "weights read in 2.7 s") is None
    assert ev.phase_words("capturing_graphs", "capturing graphs: 3/35") == "capturing graphs: 3/35"
    assert ev.phase_words("launching", "vllm-x") == "launching: vllm-x"
    assert ev.phase_words("ready", "") == "ready"
    assert phase_text("loading_weights", "loading model m") == "[bold]loading[/] model m"
    assert phase_text("launching", "vllm-x") == "[bold]launching[/] vllm-x"


def test_a_warning_is_said_once_per_command(capsys: pytest.CaptureFixture[str]) -> None:
    """serve shows the plan (its warnings) for approval, then its launch reports the same
    plan's warnings as events: each is printed once; a new command says it again."""
    from instinct_serve.cli.common import new_command, warn
    from instinct_serve.cli.serve import ServeView

    new_command()
    view = ServeView(as_json=False)
    warn("--gpu not used: a CPU-only engine serves on the CPU")
    view.event(ev.WarningEvent(message="--gpu not used: a CPU-only engine serves on the CPU"))
    view.event(ev.WarningEvent(message="hf_token: no Hugging Face token"))
    err = capsys.readouterr().err
    assert err.count("--gpu not used") == 1 and err.count("hf_token") == 1, err
    new_command()
    warn("--gpu not used: a CPU-only engine serves on the CPU")
    assert "--gpu not used" in capsys.readouterr().err
