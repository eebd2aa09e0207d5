"""The tool's log readers against REAL SGLang 0.5.23 logs captured in
``tests/fixtures/logs/real-sglang-cpu/``: ``instinct diagnose --log FILE --json`` names the
cause of each real failure, and the retry serve would relaunch with is in SGLang's words.
Fast (captured files, no engine); the live reproduction is test_failures_sglang_real.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from instinct_serve import servers, vllm_args
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime.retry import apply_retry
from tests.serve.conftest import run_cli

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "real-sglang-cpu"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_the_context_length_refusal_is_diagnosed_with_sglangs_option() -> None:
    log = LOGS / "01_context_length_exceeds_model.log"
    run = run_cli(["diagnose", "--log", str(log), "--json"], timeout=60)
    assert run.returncode in (0, 1), run.explain()
    doc = json.loads(run.stdout)
    assert doc["primary"] == "max_model_len_exceeds_model", doc
    (finding,) = doc["findings"]
    assert finding["title"] == "--context-length is larger than the model supports"
    assert finding["details"] == {"asked": 16384, "model_max": 8192, "option": "--context-length"}
    assert finding["retry"] == {"max_model_len": 8192}
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in finding["line"]
    tracker = servers.get("sglang").tracker()
    for line in log.read_text(encoding="utf-8").splitlines():
        tracker.feed(line)
    assert tracker.phase == "failed"


def test_a_retry_speaks_the_plans_server() -> None:
    """The same hint relaunches vLLM with ``--max-model-len`` and SGLang with
    ``--context-length`` (replacing the value it had), its batch cap as
    ``--max-running-requests``."""
    hint = {"max_model_len": 8192, "max_num_seqs": 64}
    for server, length, batch in (
        ("vllm", "--max-model-len", "--max-num-seqs"),
        ("sglang", "--context-length", "--max-running-requests"),
    ):
        plan = LaunchPlan(MODEL, MODEL, "none", "retry", server=server, port=30000)
        plan.vllm_args = [length, "16384", "--enable-metrics"]
        retried, changes = apply_retry(plan, hint)  # type: ignore[arg-type]
        assert changes == [f"{length} 8192", f"{batch} 64"], server
        assert vllm_args.value(retried.vllm_args, length) == "8192", server
        assert vllm_args.value(retried.vllm_args, batch) == "64", server
        assert retried.vllm_args.count(length) == 1 and "--enable-metrics" in retried.vllm_args
        assert retried.max_model_len == 8192 and plan.vllm_args[1] == "16384"
