"""``instinct fit --server sglang`` and an SGLang plan's fit figures: SGLang's own memory
model (``fit/sglang.py``), through the real CLI and the planner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from instinct_serve.cli.main import main
from instinct_serve.fit.sglang import CONTEXT_BYTES, GIB
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions
from tests.fit.hubserver import serve_model

SHIPPED = Path(__file__).resolve().parents[2] / "src" / "instinct_serve" / "data" / "models"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), (json.loads(out) if out else {}), err


LLAMA = ["fit", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "mi300x", "--tp", "1", "--json"]


def test_fit_sizes_an_sglang_launch_with_sglangs_default_fraction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """MI300X at TP 1: SGLang 0.5.23 reserves 512 + 1.5 x 16384 + 128 + 2 x 512 MiB, so the
    fraction is 0.867; the pool is the free memory before loading x 0.867 - the weights."""
    code, doc, _ = run([*LLAMA, "--server", "sglang"], capsys)
    assert code == 0
    mem = doc["sglang"]
    assert doc["server"] == "sglang"
    assert mem["mem_fraction_static"] == 0.867 and mem["reserved_mib"] == 26240.0
    assert (mem["chunked_prefill_size"], mem["cuda_graph_max_bs"]) == (16384, 512)
    assert mem["kv_bytes_per_token"] == 131072  # 32 layers x 8 heads x 256 x 2 bytes
    vram = doc["per_gpu"]["vram_bytes"]
    pre = vram - CONTEXT_BYTES["rocm"]
    weights = doc["per_gpu"]["weights_bytes"]
    pool = pre - weights - int(pre * (1 - 0.867))
    assert mem["max_total_num_tokens"] == pool // 131072
    assert 1_200_000 < mem["max_total_num_tokens"] < 1_300_000


def test_the_utilization_given_is_sglangs_static_fraction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, doc, _ = run([*LLAMA, "--server", "sglang", "--gpu-memory-utilization", "0.8"], capsys)
    assert code == 0
    mem = doc["sglang"]
    assert mem["mem_fraction_static"] == 0.8
    assert mem["fraction_source"] == "--mem-fraction-static"
    assert mem["reserved_mib"] == 0.0


def test_a_vllm_fit_is_unchanged_and_another_server_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, doc, _ = run(LLAMA, capsys)
    assert code == 0 and "sglang" not in doc and "server" not in doc
    code, doc, _ = run([*LLAMA, "--server", "tgi"], capsys)
    assert code == 2 and doc["error"]["id"] == "bad_server"
    assert "vllm or sglang" in doc["error"]["message"]


def test_an_sglang_plan_reports_sglangs_pool_at_the_configs_fraction(hub: HTTPServer) -> None:
    """AMD's DeepSeek-R1 SGLang config on MI300X sets --mem-fraction-static 0.8 and
    --kv-cache-dtype fp8_e4m3: the plan's fit figures are SGLang's, the MLA latent
    ((512 + 64) x 61 layers x 1 byte) on every rank."""
    shipped = json.loads((SHIPPED / "deepseek-ai--DeepSeek-R1.json").read_text())
    params = shipped["safetensors"]["parameters"]
    serve_model(hub, "deepseek-ai/DeepSeek-R1-0528", shipped["config"], params)
    opts = PlanOptions(
        model="deepseek-ai/DeepSeek-R1-0528", gpu="mi300x", gpu_count=8, server="sglang"
    )
    result = make_plan(opts)
    plan = result.plan
    assert plan.server == "sglang" and plan.fit is not None
    mem = plan.to_dict()["fit"]["sglang"]
    assert mem["mem_fraction_static"] == 0.8
    assert mem["kv_bytes_per_token"] == 576 * 61
    assert mem["max_total_num_tokens"] > 0
    pool_gib = mem["kv_pool_gib"]
    assert abs(pool_gib - mem["max_total_num_tokens"] * 576 * 61 / GIB) < 0.01
    why = next(r for r in plan.reasons if r.item == "KV pool")
    assert why.source == "fit (SGLang)"
    assert f"{mem['max_total_num_tokens']:,} tokens" in why.why
    assert "--mem-fraction-static 0.8" in why.why
