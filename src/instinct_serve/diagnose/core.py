"""``diagnose`` (a log) and ``diagnose_symptom`` (one pasted sentence): text in, findings out."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from instinct_serve.diagnose.failure_signals import STRONG_FAILURE
from instinct_serve.diagnose.logline import EXCEPTION_START, LogLine, iter_lines
from instinct_serve.diagnose.model import DiagnoseContext, Diagnosis, Finding
from instinct_serve.diagnose.phases import PhaseTracker
from instinct_serve.diagnose.rules import REGISTRY, sglang
from instinct_serve.diagnose.scan import Scan
from instinct_serve.diagnose.sglang_phases import SglangTracker, is_sglang_log
from instinct_serve.diagnose.shell import issue_search

TAIL_LINES = 40
MAX_LINES = 50_000  # a docker logs --tail 5000 is far below; bound the work on huge input
_GFX = re.compile(r"\b(gfx(?:90a|9[0-9]{2}|1[0-9]{3}))\b")
CANONICAL_UNKNOWN = "vLLM ROCm engine startup failure"
CANONICAL_UNKNOWN_SGLANG = "SGLang ROCm server startup failure"


def _facts(
    text: str, lines: list[LogLine], server: str | None
) -> tuple[dict[str, Any], dict[int, str]]:
    """Run the phase tracker over the log (SGLang's for an SGLang log, named by the caller
    or read from the log): version, figures and the phase before each line."""
    sglang = server == "sglang" or (server is None and is_sglang_log(text))
    tracker = SglangTracker() if sglang else PhaseTracker()
    phase_before: dict[int, str] = {}
    for index, line in enumerate(lines):
        phase_before[index] = tracker.stage
        tracker.feed(line.raw, now=0.0)
    figures = tracker.figures
    facts: dict[str, Any] = {"phase_reached": tracker.reached, "figures": figures}
    if sglang:
        facts["server"] = "sglang"
    if "vllm_version" in figures:
        facts["vllm_version"] = figures["vllm_version"]
    if "engine" in figures:
        facts["engine"] = figures["engine"]
    gfx = _GFX.search(text)
    if gfx:
        facts["gfx"] = gfx.group(1)
    return facts, phase_before


def _sharpen(context: DiagnoseContext | None, facts: Mapping[str, Any]) -> DiagnoseContext:
    ctx = context or DiagnoseContext()
    return replace(
        ctx,
        gfx=ctx.gfx or facts.get("gfx"),
        vllm_version=ctx.vllm_version or facts.get("vllm_version"),
        server=ctx.server or facts.get("server"),
    )


def _order(findings: list[Finding]) -> tuple[Finding, ...]:
    """Most specific first; among equals the earliest line (later errors are consequences)."""
    return tuple(
        sorted(findings, key=lambda f: (-f.rank, f.line_no if f.line_no is not None else 1 << 62))
    )


def _last_error(lines: list[LogLine]) -> str | None:
    for line in reversed(lines):
        if line.errorish and (EXCEPTION_START.match(line.text) or STRONG_FAILURE.search(line.text)):
            return line.text.strip()
    return None


def scan_log(text: str, context: DiagnoseContext | None = None) -> tuple[Scan, DiagnoseContext]:
    """The parsed log the rules query (its last ``MAX_LINES`` lines), and the context
    sharpened with what the log says (gfx, vLLM version)."""
    physical = text.split("\n")
    if len(physical) > MAX_LINES:
        physical = physical[-MAX_LINES:]
        text = "\n".join(physical)
    lines = list(iter_lines(text))
    facts, phase_before = _facts(text, lines, context.server if context else None)
    return Scan(lines=lines, phase_before=phase_before, facts=facts), _sharpen(context, facts)


def diagnose(text: str, context: DiagnoseContext | None = None) -> Diagnosis:
    """Recognise the known failures in a vLLM log (``docker logs`` output, a file).

    ``context`` (optional) sharpens the fixes and carries the situations serve observed
    itself (``signals``: a graph-capture hang, an incoherent answer).
    """
    scan, ctx = scan_log(text, context)
    lines = scan.lines
    facts = scan.facts
    findings: dict[str, Finding] = {}
    for rule in REGISTRY:
        finding = rule.detect_in(scan, ctx)
        if finding is not None and finding.id not in findings:
            findings[finding.id] = finding
    for rule in REGISTRY:
        if rule.id in findings:
            for superseded in rule.supersedes:  # the same failure, explained better
                findings.pop(superseded, None)
    ordered = _order(list(findings.values()))
    last_error = _last_error(lines)
    tail = tuple(line.raw for line in lines[-TAIL_LINES:])
    commands: tuple[str, ...] = ()
    if not ordered:  # search the tracker of the server that wrote the log
        commands = (
            issue_search(last_error, CANONICAL_UNKNOWN_SGLANG, sglang.REPO)
            if ctx.sglang
            else issue_search(last_error, CANONICAL_UNKNOWN),
        )
    healthy = not ordered and last_error is None and facts["phase_reached"] != "starting"
    return Diagnosis(
        findings=ordered,
        tail=tail,
        facts=facts,
        last_error=last_error,
        commands=() if healthy else commands,
        source="log",
        healthy=healthy,
    )


# --------------------------------------------------------------------------- symptoms


def diagnose_symptom(text: str, context: DiagnoseContext | None = None) -> Diagnosis:
    """Map a pasted symptom (a log line or a sentence) to the same findings, more loosely."""
    exact = diagnose(text, context)
    if exact.primary is not None and not exact.primary.generic:
        return replace(exact, source="symptom")
    ctx = _sharpen(context, exact.facts)
    sentence = " ".join(text.split())
    for rule in REGISTRY:
        symptom = rule.symptom
        if symptom is None or not symptom.matches(sentence):
            continue
        instead = symptom.instead(ctx) if symptom.instead is not None else None
        target = REGISTRY[instead] if instead is not None else rule
        finding = target.build_ranked(ctx, line=sentence or None, **symptom.arguments(sentence))
        if finding.generic and exact.matched:
            break  # the exact rules' generic finding carries the real line's evidence
        return Diagnosis(findings=(finding,), facts=exact.facts, source="symptom")
    if exact.matched:
        return replace(exact, source="symptom")
    return Diagnosis(
        findings=(),
        tail=(sentence,) if sentence else (),
        facts=exact.facts,
        last_error=None,
        commands=(issue_search(sentence, CANONICAL_UNKNOWN),),
        source="symptom",
    )
