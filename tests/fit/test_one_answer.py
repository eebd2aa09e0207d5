"""``fit MODEL`` without ``--tp`` answers "how should I run this here" with the plan's own
decision: the TP and context ``plan`` chooses for the same inputs, and why; ``--tp N`` stays
"what if"; flags that come from a recipe are named as the recipe's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from instinct_serve.cli.main import main
from tests.plan.plans import plan

# every golden plan case with a fit (tests/plan/test_planner.py), and issue 28's example
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("Qwen/Qwen3.5-9B", "mi300x", {"gpu_count": 1}),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "mi300x", {}),
    ("openai/gpt-oss-120b", "mi300x", {}),
    ("openai/gpt-oss-120b", "mi355x", {}),
    ("meta-llama/Llama-3.3-70B-Instruct", "mi300x", {"gpu_count": 1}),
    ("deepseek-ai/DeepSeek-R1", "mi300x", {}),
    ("deepseek-ai/DeepSeek-V3.2-Exp", "mi300x", {}),
]


def fit_doc(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    with pytest.raises(SystemExit):
        main(["fit", *argv, "--json"])
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _context(doc: dict[str, Any]) -> int:
    fit = doc.get("fit") or {}
    return int(fit.get("recommended_max_model_len") or doc.get("max_model_len") or 0)


@pytest.mark.parametrize(("model", "gpu", "kw"), CASES, ids=[f"{m}@{g}" for m, g, _ in CASES])
def test_fit_and_plan_agree_on_tp_and_context(
    model: str, gpu: str, kw: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    planned = plan(model, gpu, **kw)
    extra = [f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]
    fitted = fit_doc(capsys, model, "--gpu", gpu, *extra)
    tp = (fitted.get("fit") or {}).get("tp") or fitted.get("tp")
    assert tp == planned["tensor_parallel_size"]
    plan_context = planned["max_model_len"] or planned["native_max_model_len"]
    if planned.get("fit"):
        plan_context = (
            planned["max_model_len"] or planned["fit"]["fit"]["recommended_max_model_len"]
        )
        assert _context(fitted) == plan_context
    assert any(n.startswith(f"TP {tp}: the plan's choice") for n in fitted["notes"])


def test_deepseek_r1_on_mi300x_is_the_plan_s_tp_8(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28: fit said TP 4 with 13 GB of KV, plan TP 8 with 97 GB: one answer now."""
    doc = fit_doc(capsys, "deepseek-ai/DeepSeek-R1", "--gpu", "mi300x")
    assert doc["fit"]["tp"] == 8 and doc["verdict"] == "safe"
    assert "spans the node" in doc["notes"][0]
    what_if = fit_doc(capsys, "deepseek-ai/DeepSeek-R1", "--gpu", "mi300x", "--tp", "4")
    assert what_if["fit"]["tp"] == 4
    assert not any("the plan's choice" in n for n in what_if["notes"])


def test_flags_from_a_recipe_are_named_the_recipe_s(capsys: pytest.CaptureFixture[str]) -> None:
    doc = fit_doc(capsys, "openai/gpt-oss-120b", "--gpu", "mi300x", "--tp", "1")
    flagged = [n for n in doc["notes"] if n.startswith("--")]
    assert flagged and all("from the recipe's flags for mi300x" in n for n in flagged)
    assert not any("from the launch flags" in n for n in doc["notes"])
