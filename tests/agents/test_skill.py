"""SKILL.md: shipped, printed by ``instinct skill``, and unable to drift from the code.

Every diagnose finding id, fit verdict, serve status, exit code and MCP tool the code
defines must be named in the guide, and the JSON keys it calls stable must exist in the
documents the tools return.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import pytest

from instinct_serve.agents import skill_text
from instinct_serve.agents.core import diagnose, fit, plan
from instinct_serve.agents.inputs import DiagnoseInput, FitInput, PlanInput
from instinct_serve.diagnose import FINDING_IDS
from instinct_serve.errors import ExitCode
from instinct_serve.fit.estimate import VERDICTS
from instinct_serve.hardware.profiles import PROFILES, get_profile, product_families
from instinct_serve.runtime.documents import Status
from tests.agents.conftest import FIXTURE_LOGS
from tests.infra.cli import run_instinct
from tests.infra.paths import REPO

SKILL = REPO / "src" / "instinct_serve" / "agents" / "SKILL.md"


@pytest.fixture(scope="module")
def text() -> str:
    return SKILL.read_text(encoding="utf-8")


def named(text: str) -> set[str]:
    """Everything the guide writes in backticks or bold."""
    return set(re.findall(r"`([^`\n]+)`", text)) | set(re.findall(r"\*\*([^*\n]+)\*\*", text))


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_package_ships_it_and_the_command_prints_it(text: str) -> None:
    assert skill_text() == text
    out = run_instinct(["skill"], timeout=30)
    assert out.returncode == 0 and out.stdout == text
    assert text.startswith("---\nname: instinct-serve\ndescription: ")  # skill front matter


def test_every_diagnose_finding_id_has_a_reaction(text: str) -> None:
    table = section(text, "Diagnose finding ids")
    rows = set(re.findall(r"^\| `([a-z0-9_]+)` \|", table, flags=re.M))
    assert rows == set(FINDING_IDS)


def test_serves_own_failure_ids_are_explained(text: str) -> None:
    from instinct_serve.runtime.documents import SERVE_FAILURE_IDS

    table = section(text, "Diagnose finding ids")
    for failure_id in SERVE_FAILURE_IDS:
        assert f"`{failure_id}`" in table, failure_id
    assert not set(SERVE_FAILURE_IDS) & set(FINDING_IDS)  # never mistaken for a finding


def test_every_fit_verdict_has_a_reaction(text: str) -> None:
    table = section(text, "Fit verdicts")
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M))
    assert rows == set(VERDICTS)


def test_serve_statuses_exit_codes_and_tools_are_named(text: str) -> None:
    from instinct_serve.agents.server import TOOLS

    words = named(text)
    assert set(TOOLS) <= words
    for status in typing.get_args(Status):
        assert status in text, status
    for code in ExitCode:
        assert f"**{int(code)}**" in text, code


def test_the_error_ids_it_names_are_raised_somewhere(text: str) -> None:
    errors = section(text, "Results and errors")
    bullet = errors[errors.index("- Errors:") : errors.index("- Exit codes:")]
    ids = {i for i in re.findall(r"`([a-z][a-z0-9_]+)`", bullet) if "_" in i or i == "cancelled"}
    ids -= {"details", "field", "problem", "port", "replace"}  # argument and key names
    source = "\n".join(
        path.read_text(encoding="utf-8") for path in (REPO / "src" / "instinct_serve").rglob("*.py")
    )
    raised = {  # every literal on an `id=...` line (ids may be chosen by a condition)
        found
        for line in source.splitlines()
        if re.search(r"\bid=|default_id = ", line)
        for found in re.findall(r'"([a-z0-9_]+)"', line)
    }
    from instinct_serve.plan.refusals import PRIORITY

    raised |= set(PRIORITY)  # the plan's refusals, raised by id from that table
    assert len(ids) >= 15 and ids <= raised, sorted(ids - raised)


KEY = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*(?:\[\])?$")


def keys_of(bullet: str) -> list[str]:
    return [k for k in re.findall(r"`([^`]+)`", bullet) if KEY.match(k)]


def has_key(doc: Any, key: str) -> bool:
    """``a.b`` from the top, or a plain name anywhere (sub-keys of list items)."""
    key = key.removesuffix("[]")
    node = doc
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            break
        node = node[part]
    else:
        return True
    if "." in key:
        return False
    if isinstance(doc, dict):
        return key in doc or any(has_key(v, key) for v in doc.values())
    if isinstance(doc, list):
        return any(has_key(v, key) for v in doc)
    return False


def test_the_stable_keys_exist_in_the_documents(text: str) -> None:
    keys = section(text, "Stable keys")
    bullets = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^- (\w+)[^:]*: (.*?)(?=^- |\Z)", keys, flags=re.M | re.S)
    }
    oom_log = (FIXTURE_LOGS / "02_oom_during_cuda_graph_capture.log").read_text()
    unmatched = diagnose(DiagnoseInput(log_text="nothing to see\n")).doc
    documents = {
        "detect": get_profile("mi300x").inventory(2).to_dict(),
        "fit": fit(FitInput(model="Qwen/Qwen3.5-9B", gpu="mi300x")).doc,
        "plan": plan(PlanInput(gpu="mi300x")).doc,
        "diagnose": {**diagnose(DiagnoseInput(log_text=oom_log)).doc, "tail": unmatched["tail"]},
    }
    for name, doc in documents.items():
        listed = keys_of(bullets[name])
        assert len(listed) >= 5, (name, listed)
        missing = [k for k in listed if not has_key(doc, k)]
        assert missing == [], f"SKILL.md names {name} keys the document lacks: {missing}"


def test_the_design_contract_keys_of_fit_are_explained(text: str) -> None:
    contract = [
        "weight_memory_gb",
        "kv_cache_bytes_per_token",
        "remaining_for_kv_gb",
        "fit.weights_fit",
        "fit.recommended_max_model_len",
        "fit.context_limited",
        "fit.min_tp_required",
        "fit.max_seq_len_fp8_kv",
    ]
    assert set(contract) <= named(section(text, "Stable keys"))


def test_its_gpu_lists_are_the_profiles(text: str) -> None:
    """The guide is a static file: its two GPU lists must say what ``hardware.profiles`` says."""
    families = re.search(r"AMD Instinct data center GPUs \(([^;]+); ROCm\)", text)
    assert families is not None and families.group(1) == product_families()
    keys = re.search(r"pass `gpu` \(([^)]+)\)", text)
    assert keys is not None and keys.group(1) == ", ".join(PROFILES)


def test_it_stays_concise(text: str) -> None:
    assert len(text.splitlines()) < 200 and len(text) < 16_000
    assert Path(SKILL).stat().st_size == len(text.encode("utf-8"))
