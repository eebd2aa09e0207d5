"""What a diagnosis is made of: findings, the retry hints serve applies, and the context.

A ``Finding`` is one known failure recognised in a log: a stable ``id`` agents branch on,
the line that proved it, the cause, the fix, and optionally a machine-readable ``retry``
hint (plus ``alternatives`` to try next) that ``serve`` applies to the launch plan when it
relaunches. ``auto_retry`` says whether serve may do that once without asking (safe,
reversible changes such as ``--enforce-eager``); hints that widen trust
(``--trust-remote-code``) or change the model never are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, get_args

from instinct_serve import vllm_args


class RetryHint(TypedDict, total=False):
    """Changes to the launch plan, all optional; serve merges them into its plan.

    ``add_args``: vLLM arguments to append (``["--enforce-eager"]``); ``set_env``:
    container environment to set (``{"VLLM_ROCM_USE_AITER_MOE": "0"}``); the other keys
    replace the value of the matching vLLM option.
    """

    add_args: list[str]
    set_env: dict[str, str]
    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int
    tensor_parallel_size: int


# Situations serve observes itself and asks ``diagnose`` to explain: no new log line while
# capturing graphs, a healthy endpoint whose coherence probe returned garbage, and one whose
# fingerprint (``observe.fingerprint``) failed, by the failure's name.
Signal = Literal[
    "graph_capture_hang",
    "incoherent_output",
    "fingerprint_nan",
    "fingerprint_repetition",
    "fingerprint_long_context",
    "fingerprint_drift",
]
SIGNALS: tuple[Signal, ...] = get_args(Signal)


@dataclass(frozen=True)
class DiagnoseContext:
    """What the caller knows about the launch; every field optional, each sharpens fixes."""

    gfx: str | None = None  # "gfx942"
    vllm_version: str | None = None  # of the image that ran
    min_vllm_version: str | None = None  # what the model's recipe needs
    model: str | None = None  # Hugging Face id
    image: str | None = None
    args: Sequence[str] = ()  # vLLM arguments of the plan
    env: Mapping[str, str] = field(default_factory=dict)  # container env set by the plan
    gpu_count: int | None = None
    hf_token_set: bool | None = None  # whether HF_TOKEN was passed (never its value)
    is_moe: bool | None = None
    signals: frozenset[Signal] = frozenset()
    launcher: str = "docker"  # docker | native: the words of the findings (``wording``)
    hf_home: str | None = None  # native: the HF_HOME the process reads, where one is set
    # whose log: "vllm" or "sglang" (a fix names that server's flags); None: read from the log
    server: str | None = None

    def arg(self, *names: str) -> str | None:
        """The value of a vLLM option in ``args`` (``--x v`` or ``--x=v``), last one wins."""
        return vllm_args.value(self.args, *names) or None

    def has_flag(self, name: str) -> bool:
        return vllm_args.has(self.args, name)

    def float_arg(self, *names: str) -> float | None:
        try:
            text = self.arg(*names)
            return float(text) if text is not None else None
        except ValueError:
            return None

    def int_arg(self, *names: str) -> int | None:
        value = self.float_arg(*names)
        return int(value) if value is not None else None

    @property
    def sglang(self) -> bool:
        """The log is SGLang's: fixes name SGLang's flags (``diagnose.rules.sglang``)."""
        return self.server == "sglang"

    @property
    def tensor_parallel_size(self) -> int | None:
        return self.int_arg("--tensor-parallel-size", "-tp")


@dataclass(frozen=True)
class Finding:
    """One recognised failure, with the evidence and what to do about it."""

    id: str
    title: str
    cause: str
    fix: str
    line: str | None = None  # the log line that matched, as it appeared
    line_no: int | None = None  # 1-based line number in the log
    occurrences: int = 1  # how many lines matched (one per TP rank is common)
    retry: RetryHint | None = None
    alternatives: tuple[RetryHint, ...] = ()
    auto_retry: bool = False
    commands: tuple[str, ...] = ()  # shell commands that help; arguments are quoted
    details: Mapping[str, Any] = field(default_factory=dict)
    generic: bool = False  # a wrapper symptom: the root cause is elsewhere in the log
    rank: int = 0  # specificity, higher first (0: the rule's default rank)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "cause": self.cause,
            "fix": self.fix,
            "line": self.line,
            "line_no": self.line_no,
            "occurrences": self.occurrences,
            "retry": dict(self.retry) if self.retry is not None else None,
            "alternatives": [dict(a) for a in self.alternatives],
            "auto_retry": self.auto_retry,
            "commands": list(self.commands),
            "details": dict(self.details),
            "generic": self.generic,
        }


@dataclass(frozen=True)
class Diagnosis:
    """The findings over one log (most specific root cause first) and what surrounds them."""

    findings: tuple[Finding, ...]
    tail: tuple[str, ...] = ()
    facts: Mapping[str, Any] = field(default_factory=dict)  # vLLM version, gfx, last phase...
    last_error: str | None = None  # the last error-looking line, matched or not
    commands: tuple[str, ...] = ()  # for an unmatched log: how to search upstream
    source: Literal["log", "symptom"] = "log"
    # A log with no finding, no error line and some start-up progress: it shows no failure
    # (how far it got is ``facts["phase_reached"]``).
    healthy: bool = False

    @property
    def primary(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    @property
    def matched(self) -> bool:
        return bool(self.findings)

    def get(self, finding_id: str) -> Finding | None:
        return next((f for f in self.findings if f.id == finding_id), None)

    @property
    def ids(self) -> list[str]:
        return [f.id for f in self.findings]

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "matched": self.matched,
            "primary": self.primary.id if self.primary else None,
            "source": self.source,
            "findings": [f.to_dict() for f in self.findings],
            "facts": dict(self.facts),
            "last_error": self.last_error,
            "commands": list(self.commands),
            "tail": list(self.tail),
            "healthy": self.healthy,
        }
        if self.healthy:
            doc["message"] = (
                "no failure in this log: the start-up reached "
                f"{str(self.facts.get('phase_reached', 'starting')).replace('_', ' ')}"
            )
        elif not self.matched:
            doc["message"] = (
                "no known failure pattern matched this log; the last lines are included"
                if self.source == "log"
                else "no known failure matches this symptom"
            )
        return doc
