"""One failure-signal table for the phase tracker and ``diagnose``: both read every signal
the same way, from its real example line."""

from __future__ import annotations

import re

import pytest

from instinct_serve.diagnose import FINDING_IDS, diagnose
from instinct_serve.diagnose.failure_signals import FAILURE_SIGNALS, FailureSignal
from instinct_serve.diagnose.logline import iter_lines
from instinct_serve.diagnose.phases import PhaseTracker

LOADING = "INFO 10-31 15:07:12 [default_loader.py:262] Loading weights took 2.71 seconds"
IDS = [s.pattern for s in FAILURE_SIGNALS]


@pytest.mark.parametrize("signal", FAILURE_SIGNALS, ids=IDS)
def test_the_example_is_an_error_line_of_its_own_pattern(signal: FailureSignal) -> None:
    [line] = list(iter_lines(signal.example))
    assert line.errorish
    assert re.search(signal.pattern, line.text)
    assert signal.finding is None or signal.finding in FINDING_IDS


@pytest.mark.parametrize("signal", FAILURE_SIGNALS, ids=IDS)
def test_the_tracker_ends_the_start_up_on_it(signal: FailureSignal) -> None:
    tracker = PhaseTracker()
    tracker.feed(LOADING, now=0.0)
    assert tracker.phase == "loading_weights"
    event = tracker.feed(signal.example, now=1.0)
    assert event is not None and event.phase == "failed"
    assert tracker.failed_line == signal.example
    tracker.feed("INFO 10-31 15:07:13 [gpu_model_runner.py:1] Capturing CUDA graphs", now=2.0)
    assert tracker.phase == "failed"  # a strong signal is not overruled by later progress


@pytest.mark.parametrize("signal", FAILURE_SIGNALS, ids=IDS)
def test_diagnose_reports_it_as_the_last_error(signal: FailureSignal) -> None:
    diagnosis = diagnose("\n".join([LOADING, signal.example, "INFO: shutting down"]))
    [line] = list(iter_lines(signal.example))
    assert diagnosis.last_error == line.text.strip()
    assert diagnosis.facts["phase_reached"] == "loading_weights"
    if signal.finding is not None:
        assert signal.finding in diagnosis.ids


@pytest.mark.parametrize("signal", FAILURE_SIGNALS, ids=IDS)
def test_the_same_words_in_a_warning_are_no_failure(signal: FailureSignal) -> None:
    [line] = list(iter_lines(signal.example))
    warning = f"WARNING 10-31 15:07:50 [utils.py:1] retrying after: {line.text}"
    tracker = PhaseTracker()
    tracker.feed(LOADING, now=0.0)
    tracker.feed(warning, now=1.0)
    assert tracker.phase == "loading_weights"
    assert diagnose("\n".join([LOADING, warning])).last_error is None
