"""Explain a failed (or misbehaving) vLLM launch: known failures, their cause and fix.

``diagnose(log_text, context)`` recognises the failures in a log and returns a
``Diagnosis`` whose findings are ordered most specific root cause first, each with a
machine-readable retry hint that ``serve`` can apply; ``diagnose_symptom(text)`` maps one
pasted line or sentence to the same findings. Pure: text in, findings out.
"""

from instinct_serve.diagnose.core import diagnose, diagnose_symptom
from instinct_serve.diagnose.model import (
    SIGNALS,
    DiagnoseContext,
    Diagnosis,
    Finding,
    RetryHint,
    Signal,
)
from instinct_serve.diagnose.rules import FINDING_IDS
from instinct_serve.diagnose.shell import quotable, quote_line

__all__ = [
    "FINDING_IDS",
    "SIGNALS",
    "DiagnoseContext",
    "Diagnosis",
    "Finding",
    "RetryHint",
    "Signal",
    "diagnose",
    "diagnose_symptom",
    "quotable",
    "quote_line",
]
