"""The skill's description (its trigger text): prompts that should bring an agent to this
skill, and prompts it must leave alone (NVIDIA, consumer Radeon, MI100, NPUs, CPUs,
training, trivia).

No model decides here, so a small lexical judge stands in for one: a prompt triggers when
it names hardware this skill is for *and* an action the description names, and names
nothing only the description's exclusions name. Every word the judge uses is read from
the description itself (only the vocabulary of what counts as hardware or action is fixed
here), so a description that drops an exclusion or a verb fails these tests.
"""

from __future__ import annotations

import json
import re

import pytest

from instinct_serve.agents import skill_text
from tests.infra.paths import REPO

PROMPTS = json.loads((REPO / "tests/data/skill/trigger_prompts.json").read_text())["prompts"]
ACTIONS = ("serv", "deploy", "launch", "run", "host", "start", "spin", "endpoint", "server")
HARDWARE = re.compile(
    r"\b(mi\d{2,3}[a-z]?|instinct|amd|rocm|nvidia|radeon|rx|ryzen|npus?|"
    r"[ah]\d{2,3}|cpus?|epyc|fine-tun\w*|training)\b"
)


def description() -> str:
    front = skill_text().split("---")[1]
    match = re.search(r"^description:\s*(.+)$", front, re.M)
    assert match, "SKILL.md front matter has a description"
    return match.group(1)


def parts() -> tuple[str, str]:
    """(what it is for, what it is not for): the exclusions start at 'Not for'."""
    text = description().lower()
    head, sep, tail = text.partition("not for")
    assert sep, "the description says what the skill is not for"
    return head, tail


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9][a-z0-9-]*", text.lower()))


def triggers(prompt: str) -> bool:
    head, tail = parts()
    said = prompt.lower()
    hardware = set(HARDWARE.findall(said))
    # excluded: named only among the exclusions ("AMD" is in both: consumer AMD GPUs)
    excluded = {
        h
        for h in hardware
        if re.search(rf"\b{re.escape(h)}", tail) and not re.search(rf"\b{re.escape(h)}", head)
    }
    # "data center GPUs" is hardware too when the description names it
    if "data center" in said and "data center" in head:
        hardware.add("data center")
    served = {h for h in hardware if h == "data center" or re.search(rf"\b{re.escape(h)}", head)}
    acts = {a for a in ACTIONS if any(w.startswith(a) for w in words(said))}
    named_acts = {a for a in acts if any(w.startswith(a) for w in words(head))}
    return bool(served) and bool(named_acts) and not excluded


@pytest.mark.parametrize("case", PROMPTS, ids=[p["id"] for p in PROMPTS])
def test_prompt(case: dict[str, object]) -> None:
    assert triggers(str(case["prompt"])) is case["trigger"], description()


def test_the_seed_evaluations_are_all_here() -> None:
    ids = {p["id"] for p in PROMPTS}
    seed = {
        "qwen-on-mi300x",
        "vllm-rocm-node",
        "openai-compatible-mi355x",
        "deploy-datacenter-gpu",
        "serve-tiny-model-on-instinct",
        "vllm-on-nvidia",
        "consumer-radeon",
        "hbm-vs-gddr",
    }
    assert seed <= ids
    assert sum(p["trigger"] for p in PROMPTS) >= 6 and sum(not p["trigger"] for p in PROMPTS) >= 6


def test_every_served_gfx_generation_is_named() -> None:
    from instinct_serve.hardware.profiles import PROFILES

    head, _tail = parts()
    for key, profile in PROFILES.items():
        if profile.gfx_version in ("gfx942", "gfx950", "gfx90a") and key.startswith("mi3"):
            assert key in head.replace(" ", ""), key


def test_a_judge_that_can_fail() -> None:
    """The judge rejects what the description does not name (guards the guard)."""
    assert not triggers("Serve Qwen3 on my TPU v5e pod.")
    assert not triggers("What is an MI300X?")  # hardware, no action
