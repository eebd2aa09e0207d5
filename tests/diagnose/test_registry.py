"""One registration per known failure: detector, builder, rank, symptom words, documentation.

A rule cannot exist half-registered: the registry refuses it, every detector and builder
function of the ``diagnose.rules`` modules is registered, every rule has its place in the
one registration order, and every registered id reaches SKILL.md.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

from instinct_serve.diagnose import FINDING_IDS, DiagnoseContext, Finding, diagnose_symptom
from instinct_serve.diagnose import rules as rules_module
from instinct_serve.diagnose.core import scan_log
from instinct_serve.diagnose.failure_signals import FAILURE_SIGNALS
from instinct_serve.diagnose.registry import Registry, Rule, in_order, number_after, words
from instinct_serve.diagnose.rules import ORDER, REGISTRY
from instinct_serve.diagnose.scan import Scan
from tests.diagnose.logs import log_names, real_log
from tests.infra.paths import REPO

SKILL = REPO / "src" / "instinct_serve" / "agents" / "SKILL.md"
RULES = list(REGISTRY)
RULE_MODULES = [
    importlib.import_module(f"{rules_module.__name__}.{info.name}")
    for info in pkgutil.iter_modules(rules_module.__path__)
]


def _build(ctx: DiagnoseContext, **at: object) -> Finding:
    return Finding(id="x_rule", title="t", cause="c", fix="f")


def _detect(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    return None


def test_finding_ids_are_the_registry() -> None:
    assert REGISTRY.ids == FINDING_IDS
    assert len(set(FINDING_IDS)) == len(FINDING_IDS) == len(REGISTRY)


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_each_rule_has_a_builder_a_detector_or_says_it_has_none(rule: Rule) -> None:
    assert callable(rule.build)
    assert (rule.detect is not None) != rule.symptom_only
    finding = rule.build(DiagnoseContext())
    assert finding.id == rule.id
    assert 0 < rule.rank <= 100


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_each_rule_is_reachable_from_a_pasted_sentence(rule: Rule) -> None:
    assert rule.symptom is not None, f"{rule.id} has no symptom words"


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_each_rule_is_documented_in_the_skill_guide(rule: Rule) -> None:
    text = SKILL.read_text(encoding="utf-8")
    table = text[text.index("## Diagnose finding ids\n") :]
    table = table[: table.find("\n## ", 1)]
    assert re.search(rf"^\| `{rule.id}` \| \S", table, flags=re.M), f"{rule.id} not in SKILL.md"


def test_every_detector_and_builder_in_rules_is_registered() -> None:
    """A detector or builder written but not registered would never run: none may exist."""
    detectors = {r.detect for r in RULES if r.detect is not None}
    builders = {r.build for r in RULES}
    for module in RULE_MODULES:
        for name, func in inspect.getmembers(module, inspect.isfunction):
            if func.__module__ != module.__name__:
                continue
            params = list(inspect.signature(func).parameters)
            if name.startswith("build_"):
                assert func in builders, f"builder {name} is not registered"
            elif params == ["scan", "ctx"] and "Finding" in str(inspect.signature(func)):
                assert func in detectors, f"detector {name} is not registered"


def _logs() -> list[str]:
    texts = [real_log(name) for name in log_names()]
    return texts + [signal.example for signal in FAILURE_SIGNALS]


@pytest.mark.parametrize("rule", [r for r in RULES if r.detect], ids=lambda r: r.id)
def test_a_detector_reports_its_own_id(rule: Rule) -> None:
    contexts = [DiagnoseContext(), DiagnoseContext(gfx="gfx942", signals=frozenset(_SIGNALS))]
    for text in _logs():
        for context in contexts:
            scan, ctx = scan_log(text, context)
            finding = rule.detect_in(scan, ctx)
            assert finding is None or finding.id == rule.id


_SIGNALS = ("graph_capture_hang", "incoherent_output")


def test_a_symptom_finding_carries_the_rules_rank() -> None:
    for rule in RULES:
        assert rule.build_ranked(DiagnoseContext()).rank == rule.rank
    finding = diagnose_symptom("out of memory while capturing graphs").primary
    assert finding is not None and finding.rank == REGISTRY["oom_graph_capture"].rank


def test_supersedes_names_registered_rules() -> None:
    for rule in RULES:
        for other in rule.supersedes:
            assert other in REGISTRY and other != rule.id


# --------------------------------------------------------------------------- refusals


def test_a_rule_without_a_detector_must_say_it_is_symptom_only() -> None:
    with pytest.raises(ValueError, match="no detector"):
        Registry([Rule("x_rule", 50, _build, None, words("x"))])
    only = Registry([Rule("x_rule", 50, _build, None, words("x"), symptom_only=True)])
    assert only.ids == ("x_rule",)
    with pytest.raises(ValueError, match="no symptom words"):
        Registry([Rule("x_rule", 50, _build, None, symptom_only=True)])
    with pytest.raises(ValueError, match="has a detector"):
        Registry([Rule("x_rule", 50, _build, _detect, words("x"), symptom_only=True)])


def test_duplicates_bad_ids_and_unknown_supersedes_are_refused() -> None:
    rule = Rule("x_rule", 50, _build, _detect, words("x"))
    with pytest.raises(ValueError, match="twice"):
        Registry([rule, rule])
    with pytest.raises(ValueError, match="snake_case"):
        Registry([Rule("X-Rule", 50, _build, _detect)])
    with pytest.raises(ValueError, match="supersedes unknown"):
        Registry([Rule("x_rule", 50, _build, _detect, supersedes=("nope",))])
    with pytest.raises(ValueError, match="at least one pattern"):
        words()


def test_every_family_rule_has_one_place_in_the_order() -> None:
    assert REGISTRY.ids == ORDER
    assert {rule.id for module in RULE_MODULES for rule in getattr(module, "RULES", ())} == set(
        ORDER
    )
    a = Rule("a_rule", 50, _build, _detect, words("a"))
    b = Rule("b_rule", 50, _build, _detect, words("b"))
    assert in_order(("b_rule", "a_rule"), [a, b]) == [b, a]
    with pytest.raises(ValueError, match="no place"):
        in_order(("a_rule",), [a, b])
    with pytest.raises(ValueError, match="unknown rules"):
        in_order(("a_rule", "b_rule", "c_rule"), [a, b])
    with pytest.raises(ValueError, match="twice"):
        in_order(("a_rule",), [a, a])


def test_symptom_words_all_must_match_and_read_numbers() -> None:
    symptom = words(r"out of memory", r"sampler", numbers=number_after(r"(\d+) dummy", "seqs"))
    assert symptom.matches("Out Of Memory warming up the SAMPLER")
    assert not symptom.matches("out of memory")
    assert symptom.arguments("256 dummy requests") == {"seqs": 256}
    assert symptom.arguments("no number here") == {}
    assert words("x").arguments("x") == {}


def test_a_symptom_can_name_a_more_specific_finding_for_the_context() -> None:
    crash = "segmentation fault right after loading"
    plain = diagnose_symptom(crash).primary
    assert plain is not None and plain.id == "gpu_kernel_crash"
    on_gfx942 = diagnose_symptom(crash, DiagnoseContext(gfx="gfx942")).primary
    assert on_gfx942 is not None and on_gfx942.id == "fp4bmm_gfx942"
