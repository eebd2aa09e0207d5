"""``diagnose`` (a log) and ``diagnose_symptom`` (one pasted sentence): text in, findings out."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from instinct_serve.diagnose.failure_signals import STRONG_FAILURE
from instinct_serve.diagnose.logline import EXCEPTION_START, LogLine, iter_lines
from instinct_serve.diagnose.model import DiagnoseContext, Diagnosis, Finding
from instinct_serve.diagnose.phases import PHASE_ORDER, PhaseTracker
from instinct_serve.diagnose.rules import BUILDERS, RANKS, RULES
from instinct_serve.diagnose.scan import Scan
from instinct_serve.diagnose.shell import issue_search

TAIL_LINES = 40
MAX_LINES = 50_000  # a docker logs --tail 5000 is far below; bound the work on huge input
_GFX = re.compile(r"\b(gfx(?:90a|9[0-9]{2}|1[0-9]{3}))\b")
CANONICAL_UNKNOWN = "vLLM ROCm engine startup failure"


def _facts(text: str, lines: list[LogLine]) -> tuple[dict[str, Any], dict[int, str]]:
    """Run the phase tracker over the log: version, figures and the phase before each line."""
    tracker = PhaseTracker()
    phase_before: dict[int, str] = {}
    reached = "starting"
    for index, line in enumerate(lines):
        phase_before[index] = tracker.phase
        tracker.feed(line.raw, now=0.0)
        if tracker.phase != "failed" and PHASE_ORDER[tracker.phase] >= PHASE_ORDER[reached]:
            reached = tracker.phase
    figures = tracker.figures
    facts: dict[str, Any] = {"phase_reached": reached, "figures": figures}
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


def diagnose(text: str, context: DiagnoseContext | None = None) -> Diagnosis:
    """Recognise the known failures in a vLLM log (``docker logs`` output, a file).

    ``context`` (optional) sharpens the fixes and carries the situations serve observed
    itself (``signals``: a graph-capture hang, an incoherent answer).
    """
    physical = text.split("\n")
    if len(physical) > MAX_LINES:
        physical = physical[-MAX_LINES:]
        text = "\n".join(physical)
    lines = list(iter_lines(text))
    facts, phase_before = _facts(text, lines)
    ctx = _sharpen(context, facts)
    scan = Scan(lines=lines, phase_before=phase_before, facts=facts)
    findings: dict[str, Finding] = {}
    for _rule_id, _rank, detect in RULES:
        finding = detect(scan, ctx)
        if finding is not None and finding.id not in findings:
            findings[finding.id] = finding
    if "fp4bmm_gfx942" in findings:
        findings.pop("gpu_kernel_crash", None)  # the same crash, explained better
    if "cuda_visible_devices_empty" in findings:
        findings.pop("no_gpu_visible", None)
    ordered = _order(list(findings.values()))
    last_error = _last_error(lines)
    tail = tuple(line.raw for line in lines[-TAIL_LINES:])
    commands: tuple[str, ...] = ()
    if not ordered:
        commands = (issue_search(last_error, CANONICAL_UNKNOWN),)
    return Diagnosis(
        findings=ordered,
        tail=tail,
        facts=facts,
        last_error=last_error,
        commands=commands,
        source="log",
    )


# --------------------------------------------------------------------------- symptoms

_OOM_WORDS = r"(?:out of memory|out-of-memory|\boom\b|oom-?kill|outofmemory)"


def _words(*patterns: str) -> Callable[[str], re.Match[str] | None]:
    compiled = [re.compile(p, re.IGNORECASE) for p in patterns]

    def matcher(text: str) -> re.Match[str] | None:
        last: re.Match[str] | None = None
        for pattern in compiled:
            last = pattern.search(text)
            if last is None:
                return None
        return last

    return matcher


# (finding id, every pattern must match, extra builder keyword arguments from the text)
_SYMPTOMS: list[tuple[str, Callable[[str], re.Match[str] | None]]] = [
    (
        "graph_capture_hang",
        _words(
            r"hang|hung|stuck|freez|frozen|stall|no progress|no output|"
            r"no new (?:log )?line",
            r"graph|captur",
        ),
    ),
    (
        "incoherent_output",
        _words(
            r"garbage|gibberish|word salad|nonsense|incoherent|garbled|"
            r"!!!!|random (?:characters|tokens|words)|junk|repeat(?:s|ing)? "
            r"(?:the same|itself)|mojibake"
        ),
    ),
    ("oom_sampler_warmup", _words(_OOM_WORDS, r"sampler")),
    ("oom_graph_capture", _words(_OOM_WORDS, r"graph|captur")),
    ("oom_weights", _words(_OOM_WORDS, r"load|weight|too (?:large|big)|does(?:n't| not) fit")),
    ("oom_profiling", _words(_OOM_WORDS, r"profil|warm|dummy")),
    (
        "gpu_memory_busy",
        _words(
            r"free memory on device|memory (?:is )?(?:used|held|taken) by "
            r"(?:another|other)|another process"
        ),
    ),
    ("kv_cache_no_memory", _words(r"no available memory for the cache blocks")),
    (
        "max_model_len_exceeds_model",
        _words(r"max.?model.?len|context length", r"max_position_embeddings|derived|config\.json"),
    ),
    (
        "max_model_len_exceeds_kv",
        _words(r"max.?model.?len|max seq len|context length|context", r"kv.?cache"),
    ),
    ("out_of_memory", _words(_OOM_WORDS)),
    ("gated_repo", _words(r"gated|\b40[13]\b|licen[cs]e|authorized list|awaiting a review")),
    ("repo_not_found", _words(r"repository not found|not a valid model identifier|\b404\b")),
    ("trust_remote_code_required", _words(r"trust.?remote.?code|custom code")),
    (
        "fp4bmm_gfx942",
        _words(
            r"fp4.?bmm|(?:segfault|segmentation|illegal instruction).*"
            r"(?:gfx942|mi300|mi325)|(?:gfx942|mi300|mi325).*(?:segfault|"
            r"segmentation|illegal instruction)"
        ),
    ),
    (
        "gpu_kernel_crash",
        _words(
            r"segfault|segmentation fault|illegal instruction|"
            r"memory access fault|illegal memory access|core dumped"
        ),
    ),
    (
        "no_kernel_image",
        _words(
            r"invalid device function|no kernel image|code object|"
            r"nobinaryforgpu"
        ),
    ),
    ("libtorch_cuda_import", _words(r"libtorch_cuda|libcudart|_optional_torch_c_dlpack")),
    (
        "cuda_visible_devices_empty",
        _words(r"(?:cuda|hip|rocr)_visible_devices", r"empty|''|\"\"|blank|unset"),
    ),
    ("kfd_permission", _words(r"/dev/kfd|\bkfd\b|render group|video group")),
    (
        "no_gpu_visible",
        _words(
            r"no (?:hip|cuda|rocm) gpus?|no gpus? (?:found|detected|available|"
            r"visible)|failed to infer device type"
        ),
    ),
    (
        "port_in_use",
        _words(
            r"address already in use|port is already allocated|eaddrinuse|"
            r"port \d+ (?:is )?(?:already )?(?:in use|taken|busy)"
        ),
    ),
    (
        "vllm_too_old",
        _words(
            r"does not recognize this architecture|(?:vllm|image).{0,30}"
            r"(?:too old|outdated|old version)"
        ),
    ),
    ("unsupported_architecture", _words(r"architecture", r"not supported|unsupported")),
    ("unknown_quantization", _words(r"unknown quantization")),
    ("quantization_unsupported", _words(r"quantization", r"not supported|unsupported")),
    ("disk_full", _words(r"no space left|disk (?:is )?full|out of disk")),
    ("shm_too_small", _words(r"/dev/shm|\bshm\b|shared memory")),
    (
        "hf_hub_unreachable",
        _words(
            r"hugging ?face|hf.?hub|\bhub\b",
            r"connect|offline|unreachable|timed? ?out|resolve|network",
        ),
    ),
    ("tp_not_divisible", _words(r"divisible by tensor parallel")),
    ("jit_build_failed", _words(r"ninja|jit|build(?:ing)? extension", r"fail|error")),
    ("unknown_argument", _words(r"unrecognized argument")),
    ("rccl_error", _words(r"[nr]ccl")),
    ("worker_died", _words(r"worker.{0,40}died|died unexpectedly")),
    ("engine_core_init_failed", _words(r"engine ?core|engine process failed")),
]

_NUMBER_AFTER = {
    "max_model_len_exceeds_kv": re.compile(
        r"(?:estimated maximum model length is|fits?(?: up to)?|max(?:imum)? (?:fitting )?"
        r"(?:length|len) (?:is )?)\s*(\d{3,})",
        re.IGNORECASE,
    ),
    "oom_sampler_warmup": re.compile(r"(\d+) dummy requests", re.IGNORECASE),
}


def diagnose_symptom(text: str, context: DiagnoseContext | None = None) -> Diagnosis:
    """Map a pasted symptom (a log line or a sentence) to the same findings, more loosely."""
    exact = diagnose(text, context)
    if exact.primary is not None and not exact.primary.generic:
        return replace(exact, source="symptom")
    ctx = _sharpen(context, exact.facts)
    sentence = " ".join(text.split())
    for finding_id, matcher in _SYMPTOMS:
        if matcher(sentence) is None:
            continue
        if finding_id == "gpu_kernel_crash" and (ctx.gfx or "").startswith("gfx942"):
            finding_id = "fp4bmm_gfx942"  # the usual crash at warm-up on gfx942
        kwargs: dict[str, Any] = {}
        number = _NUMBER_AFTER.get(finding_id)
        m = number.search(sentence) if number else None
        if m and finding_id == "max_model_len_exceeds_kv":
            kwargs["fits"] = int(m.group(1))
        elif m and finding_id == "oom_sampler_warmup":
            kwargs["seqs"] = int(m.group(1))
        finding = BUILDERS[finding_id](ctx, line=sentence or None, **kwargs)
        finding = replace(finding, rank=finding.rank or RANKS.get(finding_id, 50))
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
