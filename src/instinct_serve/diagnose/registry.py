"""How a known failure is registered: one ``Rule`` carries everything about it.

A rule has a stable id (the finding's id), a rank (specificity: a root cause outranks the
wrapper error that reports it), a builder that writes the finding from what is known, a
detector that finds the evidence in a log (or ``symptom_only``: it is only ever reported
from a pasted sentence, said at registration), the words of a pasted sentence that point
to it, and the findings it supersedes when both are in one log (the same failure,
explained better). ``Registry`` refuses an incomplete or duplicate rule when it is built,
so a rule cannot exist half-registered.

The order of registration matters twice: symptoms are tried in that order (the first
match wins, so the specific come before the general), and among findings of equal rank
on the same log line the one registered first is listed first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding
from instinct_serve.diagnose.scan import Scan
from instinct_serve.diagnose.wording import worded

Detector = Callable[[Scan, DiagnoseContext], Finding | None]
Builder = Callable[..., Finding]


@dataclass(frozen=True)
class Symptom:
    """The words of a pasted sentence that point to a finding (every pattern must match,
    case-insensitively), the builder arguments read from the sentence, and an optional
    more specific finding to report instead in a given context."""

    patterns: tuple[re.Pattern[str], ...]
    numbers: Callable[[str], Mapping[str, Any]] | None = None
    instead: Callable[[DiagnoseContext], str | None] | None = None

    def matches(self, sentence: str) -> bool:
        return all(pattern.search(sentence) for pattern in self.patterns)

    def arguments(self, sentence: str) -> Mapping[str, Any]:
        return self.numbers(sentence) if self.numbers is not None else {}


def words(
    *patterns: str,
    numbers: Callable[[str], Mapping[str, Any]] | None = None,
    instead: Callable[[DiagnoseContext], str | None] | None = None,
) -> Symptom:
    """A ``Symptom``: every regular expression in ``patterns`` must be found."""
    if not patterns:
        raise ValueError("a symptom needs at least one pattern")
    compiled = tuple(re.compile(p, re.IGNORECASE) for p in patterns)
    return Symptom(compiled, numbers, instead)


def number_after(pattern: str, keyword: str) -> Callable[[str], Mapping[str, Any]]:
    """Builder arguments ``{keyword: N}`` from the first group of ``pattern`` in a sentence."""
    compiled = re.compile(pattern, re.IGNORECASE)

    def read(sentence: str) -> Mapping[str, Any]:
        m = compiled.search(sentence)
        return {keyword: int(m.group(1))} if m else {}

    return read


@dataclass(frozen=True)
class Rule:
    """One known failure (see the module docstring)."""

    id: str
    rank: int
    build: Builder
    detect: Detector | None
    symptom: Symptom | None = None
    symptom_only: bool = False
    supersedes: tuple[str, ...] = field(default=())

    def detect_in(self, scan: Scan, ctx: DiagnoseContext) -> Finding | None:
        """The detector's finding, ranked (the rule's rank unless the finding set one)."""
        if self.detect is None:
            return None
        finding = self.detect(scan, ctx)
        if finding is None:
            return None
        return worded(replace(finding, rank=finding.rank or self.rank), ctx)

    def build_ranked(self, ctx: DiagnoseContext, **kwargs: Any) -> Finding:
        """The builder's finding, ranked like the detector's."""
        finding = self.build(ctx, **kwargs)
        return worded(replace(finding, rank=finding.rank or self.rank), ctx)


def in_order(order: Sequence[str], rules: Iterable[Rule]) -> list[Rule]:
    """``rules`` (gathered from their families' modules) in the registration ``order``; each
    rule must be named in it once, and each name must be a rule."""
    by_id: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in by_id:
            raise ValueError(f"rule {rule.id} is registered twice")
        by_id[rule.id] = rule
    unordered = sorted(set(by_id) - set(order))
    if unordered:
        raise ValueError(f"rules {unordered} have no place in the registration order")
    unknown = sorted(set(order) - set(by_id))
    if unknown:
        raise ValueError(f"the registration order names unknown rules {unknown}")
    return [by_id[rule_id] for rule_id in order]


class Registry:
    """The known failures, in registration order (see the module docstring)."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self._rules: dict[str, Rule] = {}
        for rule in rules:
            self._add(rule)
        for rule in self._rules.values():
            unknown = [i for i in rule.supersedes if i not in self._rules or i == rule.id]
            if unknown:
                raise ValueError(f"rule {rule.id} supersedes unknown rules {unknown}")

    def _add(self, rule: Rule) -> None:
        if rule.id in self._rules:
            raise ValueError(f"rule {rule.id} is registered twice")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", rule.id):
            raise ValueError(f"rule id {rule.id!r} is not snake_case")
        if rule.symptom_only:
            if rule.detect is not None:
                raise ValueError(f"rule {rule.id} is symptom-only but has a detector")
            if rule.symptom is None:
                raise ValueError(f"rule {rule.id} is symptom-only but has no symptom words")
        elif rule.detect is None:
            raise ValueError(
                f"rule {rule.id} has no detector: give one, or register it symptom_only=True"
            )
        self._rules[rule.id] = rule

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._rules.values())

    def __len__(self) -> int:
        return len(self._rules)

    def __contains__(self, rule_id: object) -> bool:
        return rule_id in self._rules

    def __getitem__(self, rule_id: str) -> Rule:
        return self._rules[rule_id]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self._rules)
