"""Random text never crashes ``diagnose``, ``diagnose_symptom`` or the phase tracker."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from instinct_serve.diagnose import DiagnoseContext, diagnose, diagnose_symptom
from instinct_serve.diagnose.phases import PhaseTracker

# Fragments of real log syntax, so that random text reaches the rules' deeper branches.
FRAGMENTS = [
    "(EngineCore_DP0 pid=1) ",
    "ERROR 06-05 06:18:13 [core.py:708] ",
    "INFO:     ",
    "[rank0]: ",
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in capture_end',
    "RuntimeError: CUDA error: out of memory",
    "ValueError: To serve at least one request with the models's max seq len (",
    "Capturing CUDA graph shapes:  40%|████      | 14/35 [00:28<02:39,  7.60s/it]",
    "GPU KV cache size: ",
    "Maximum concurrency for ",
    "Free memory on device (",
    "Cannot access gated repo for url ",
    "!!!!!!! Segfault encountered !!!!!!!",
    "\r",
    "\n",
    "\x1b[31m",
    "'",
    "999999999999999999999",
]

log_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=40).map(
    "".join
)
contexts = st.builds(
    DiagnoseContext,
    gfx=st.sampled_from([None, "gfx942", "gfx950", "gfx90a", "gfx1100", ""]),
    args=st.lists(st.sampled_from(["--gpu-memory-utilization", "0.9", "x", "-tp", "2", "="])),
    signals=st.frozensets(st.sampled_from(["graph_capture_hang", "incoherent_output"])),
)


@settings(max_examples=200, deadline=None)
@given(log_text, contexts)
def test_diagnose_never_crashes_and_serialises(text: str, ctx: DiagnoseContext) -> None:
    diagnosis = diagnose(text, ctx)
    json.dumps(diagnosis.to_dict())
    assert list(diagnosis.findings) == sorted(
        diagnosis.findings, key=lambda f: (-f.rank, f.line_no or 1 << 62)
    )


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_diagnose_symptom_never_crashes(text: str) -> None:
    json.dumps(diagnose_symptom(text).to_dict())


@settings(max_examples=100, deadline=None)
@given(st.lists(log_text, max_size=12), st.floats(min_value=0, max_value=1e6))
def test_phase_tracker_never_crashes(lines: list[str], stall_s: float) -> None:
    tracker = PhaseTracker()
    for i, line in enumerate(lines):
        event = tracker.feed(line, now=float(i))
        if event is not None:
            json.dumps(event.to_dict())
            assert event.progress is None or 0.0 <= event.progress <= 1.0
    tracker.stalled(float(len(lines)) + stall_s, stall_s)
