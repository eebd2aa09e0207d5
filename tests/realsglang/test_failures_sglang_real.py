"""A real SGLang failure, read by the tool: the real sglang 0.5.23, launched with the SGLang
kind's native command, refuses ``--context-length 16384`` for a model of 8192 positions (a
real ``ValueError`` from its model config, before any process of its own starts). The kind's
tracker ends the start-up ``failed``, ``instinct diagnose`` names
``max_model_len_exceeds_model`` in SGLang's words, and the retry serve would relaunch with is
``--context-length 8192`` (not vLLM's ``--max-model-len``, which SGLang's argparse refuses).
The captured log of the same failure is diagnosed in the fast suite (test_real_sglang_logs.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from instinct_serve import servers, vllm_args
from instinct_serve.runtime.retry import apply_retry
from tests.infra.ports import free_port
from tests.infra.realsglang import Setup, cpu_plan, start_server
from tests.serve.conftest import run_cli

pytestmark = pytest.mark.realsglang

FAIL_S = 240.0  # 20-50 s on 2 shared cores: the imports, then the model config's check


def test_a_context_beyond_the_models_is_diagnosed_in_sglangs_words(
    real_sglang_setup: Setup, tmp_path: Path
) -> None:
    plan = cpu_plan(real_sglang_setup, free_port(), ("--context-length", "16384"))
    log = tmp_path / "server.log"
    server = start_server(real_sglang_setup, plan, log)
    try:
        code = server.wait_exit(FAIL_S)
    finally:
        server.stop()
    took = time.monotonic() - server.started
    text = server.text()
    assert code != 0, text[-3000:]
    tracker = servers.get("sglang").tracker()
    for line in text.splitlines():
        tracker.feed(line)
    assert tracker.phase == "failed", (tracker.phase, text[-3000:])
    assert "context_length (16384)" in (tracker.failed_line or ""), tracker.failed_line

    run = run_cli(["diagnose", "--log", str(log), "--json"], timeout=60)
    assert run.returncode in (0, 1), run.explain()
    doc = json.loads(run.stdout)
    assert doc["primary"] == "max_model_len_exceeds_model", doc
    finding = doc["findings"][0]
    assert finding["details"] == {"asked": 16384, "model_max": 8192, "option": "--context-length"}
    assert finding["fix"] == "Relaunch with --context-length 8192"
    assert finding["auto_retry"] is True

    retried, changes = apply_retry(plan, finding["retry"])
    assert changes == ["--context-length 8192"]
    assert vllm_args.value(retried.vllm_args, "--context-length") == "8192"
    assert not vllm_args.has(retried.vllm_args, "--max-model-len")
    print(f"real SGLang context-length failure: exited {code} after {took:.1f} s")
