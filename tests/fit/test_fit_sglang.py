"""``instinct fit --server sglang`` and an SGLang plan's fit figures: SGLang's own memory
model (``fit/sglang.py``), through the real CLI and the planner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from instinct_serve.cli.main import main
from instinct_serve.fit.sglang import CONTEXT_BYTES, GIB
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions
from tests.fit.hubserver import serve_model
from tests.infra.paths import CONFIGS

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


# -- SGLang's own answer: header, verdict, TP and context from its pool -------------------

SGLANG_KEYS = {
    "server",
    "model",
    "source",
    "metadata",
    "architecture",
    "attention_kind",
    "checkpoint_bytes",
    "checkpoint_gb",
    "weight_memory_bytes",
    "weight_memory_gb",
    "weight_memory_gib",
    "weights_skipped_bytes",
    "weight_memory_per_gpu_bytes",
    "weight_memory_per_gpu_gb",
    "weight_memory_per_gpu_gib",
    "weight_replicated_per_gpu_bytes",
    "weight_padding_per_gpu_bytes",
    "kv_cache_bytes_per_token",
    "kv_cache_bytes_per_token_per_gpu",
    "kv_cache_dtype",
    "remaining_for_kv_bytes",
    "remaining_for_kv_gb",
    "remaining_for_kv_gib",
    "per_gpu",
    "kv_cache",
    "fit",
    "verdict",
    "verdict_reason",
    "hardware",
    "sglang",
    "notes",
    "catalog",
    "alternatives",
    "alternatives_skipped",
}


def test_the_sglang_answer_is_sglangs_and_has_a_stable_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Llama 3.1 8B on one MI300X: the verdict, the context and the KV tokens are SGLang's
    (the context SGLang derives from config.json: 131,072, Llama 3's rope scaling keeping it),
    and no vLLM figure (its version, budget, overhead) is in the answer."""
    code, doc, _ = run([*LLAMA, "--server", "sglang"], capsys)
    assert code == 0
    assert set(doc) == SGLANG_KEYS
    mem, fit = doc["sglang"], doc["fit"]
    assert doc["verdict"] == "safe" and "SGLang's KV pool" in doc["verdict_reason"]
    assert doc["kv_cache"]["tokens"] == mem["max_total_num_tokens"]
    assert doc["kv_cache"]["reproduces"].endswith("of SGLang 0.5.23")
    assert doc["remaining_for_kv_bytes"] == doc["per_gpu"]["kv_cache_bytes"]
    assert abs(doc["remaining_for_kv_gib"] - mem["kv_pool_gib"]) <= 0.01
    assert fit["tp"] == 1 and fit["min_tp_required"] == 1
    assert fit["recommended_max_model_len"] == mem["context_length"] == 131072
    assert fit["native_max_model_len_source"].startswith("config.json max_position_embeddings")
    assert mem["max_req_len"] == 131071  # min(context_len - 1, max_total_num_tokens - 1)
    assert fit["context_limited"] is False
    assert doc["kv_cache_bytes_per_token_per_gpu"] == mem["kv_bytes_per_token"] == 131072


def test_the_human_view_names_sglang_not_vllm(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    argv = ["fit", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "mi300x", "--tp", "1"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--server", "sglang"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "SGLang 0.5.23, TP 1" in out and "vLLM 0." not in out  # no vLLM release
    assert "the recipe's vLLM flags are not this server's: not applied" in out
    assert "--mem-fraction-static 0.867" in out and "max_total_num_tokens" in out
    assert "verdict: safe" in out and "KV pool" in out and "outside static share" in out
    assert "budget / GPU" not in out and "overhead / GPU" not in out


def test_a_pool_shorter_than_the_context_is_tight(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama 3.3 70B on one MI300X at TP 1: 131 GiB of weights leave SGLang's default share a
    pool of about 34 GiB, fewer tokens than the 131,072 of context: SGLang starts (and warns),
    a full-length request cannot be served."""
    argv = ["fit", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "mi300x", "--tp", "1"]
    code, doc, _ = run([*argv, "--json", "--server", "sglang"], capsys)
    assert code == 0
    tokens = doc["sglang"]["max_total_num_tokens"]
    assert 0 < tokens < 131072
    assert (
        doc["verdict"] == "tight"
        and "a full-length request cannot be served" in (doc["verdict_reason"])
    )
    assert doc["fit"]["context_limited"] is True
    assert doc["fit"]["recommended_max_model_len"] == tokens
    assert doc["sglang"]["max_req_len"] == tokens - 1


def test_a_context_longer_than_the_models_is_refused_as_sglang_refuses_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, doc, _ = run([*LLAMA, "--server", "sglang", "--max-model-len", "200000"], capsys)
    assert code == 1
    assert doc["verdict"] == "does_not_fit"
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in doc["verdict_reason"]
    assert doc["sglang"]["context_length_source"] == "--context-length"


def test_the_tp_is_the_sglang_plans_and_the_minimum_is_sglangs_pool(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DeepSeek-R1 (AMD publishes no SGLang config for it on MI300X): fit answers for the TP
    ``plan --server sglang`` chooses (8, SGLang's defaults on AMD's image), and the smallest TP
    is SGLang's pool's: 4 at SGLang's default fraction, 8 at --mem-fraction-static 0.8
    (4 x 0.8 x 191.3 GiB is less than the 626.9 GiB of weights)."""
    argv = ["fit", "deepseek-ai/DeepSeek-R1", "--gpu", "mi300x", "--json", "--server", "sglang"]
    planned = make_plan(
        PlanOptions(model="deepseek-ai/DeepSeek-R1", gpu="mi300x", server="sglang")
    ).plan
    code, doc, _ = run(argv, capsys)
    assert code == 0
    assert doc["fit"]["tp"] == planned.tensor_parallel_size == 8 and doc["verdict"] == "safe"
    assert doc["fit"]["min_tp_required"] == 4
    assert doc["sglang"]["kv_bytes_per_token"] == 576 * 61 * 2  # the MLA latent at bf16
    code, doc, _ = run([*argv, "--gpu-memory-utilization", "0.8"], capsys)
    assert code == 0
    assert doc["fit"]["tp"] == 8 and doc["fit"]["min_tp_required"] == 8


def test_where_no_sglang_is_planned_its_pool_decides(capsys: pytest.CaptureFixture[str]) -> None:
    """On MI250X (no SGLang build, so no SGLang plan, and fit says so) the answer is SGLang's
    pool alone: 79.3 GiB of weights per GPU at TP 8 leave no pool in a 64 GiB device's static
    share."""
    argv = ["fit", "deepseek-ai/DeepSeek-R1", "--gpu", "mi250x", "--json", "--server", "sglang"]
    code, doc, err = run(argv, capsys)
    assert "`instinct plan --server sglang` refuses this: no SGLang build for MI250X" in err
    assert code == 1 and doc["verdict"] == "does_not_fit"  # the exit status of a no
    assert doc["fit"]["tp"] == 8 and doc["fit"]["min_tp_if_more_gpus"] == 16
    assert "SGLang refuses to start" in doc["verdict_reason"]


def test_fit_takes_the_sglang_plans_tp_and_flags(
    hub: HTTPServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """DeepSeek-R1-0528 on 8 MI300X: AMD's SGLang config runs TP 8 at --mem-fraction-static
    0.8 with fp8 KV; fit --server sglang answers for that launch, with the plan's figures."""
    shipped = json.loads((SHIPPED / "deepseek-ai--DeepSeek-R1.json").read_text())
    serve_model(
        hub, "deepseek-ai/DeepSeek-R1-0528", shipped["config"], shipped["safetensors"]["parameters"]
    )
    model = "deepseek-ai/DeepSeek-R1-0528"
    plan = make_plan(PlanOptions(model=model, gpu="mi300x", server="sglang")).plan
    code, doc, _ = run(["fit", model, "--gpu", "mi300x", "--server", "sglang", "--json"], capsys)
    assert code == 0
    assert doc["fit"]["tp"] == plan.tensor_parallel_size == 8
    planned = plan.to_dict()["fit"]["sglang"]
    mem = doc["sglang"]
    assert mem["mem_fraction_static"] == planned["mem_fraction_static"] == 0.8
    assert mem["max_total_num_tokens"] == planned["max_total_num_tokens"]
    assert mem["kv_bytes_per_token"] == 576 * 61  # fp8_e4m3, as the plan launches it
    assert doc["kv_cache_dtype"] == "fp8_e4m3"
    assert doc["verdict"] == "safe" and "vllm" not in doc
    assert any("the plan's choice" in note for note in doc["notes"])


def test_offline_the_sglang_estimate_says_what_it_cannot_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No config.json here (offline, nothing shipped for R1-0528): the estimate is SGLang's
    (its static share, the plan's --mem-fraction-static 0.8, TP 8) and says plainly that
    neither the pool's tokens nor the context are checked."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = ["fit", "deepseek-ai/DeepSeek-R1-0528", "--gpu", "mi300x", "--server", "sglang"]
    code, doc, _ = run([*argv, "--json"], capsys)
    assert code == 0
    assert doc["server"] == "sglang" and "vllm" not in doc
    assert doc["sglang"] == {"version": "0.5.23"}
    assert doc["metadata"]["size_basis"] == "estimated" and doc["kv_cache"] is None
    assert doc["gpu_memory_utilization"] == 0.8 and doc["fit"]["tp"] == 8
    pre = doc["hardware"]["vram_per_gpu_bytes"] - CONTEXT_BYTES["rocm"]
    assert doc["remaining_for_kv_bytes"] == int(pre * 0.8) - doc["weight_memory_per_gpu_bytes"]
    assert any("neither its tokens nor the context" in note for note in doc["notes"])
    with pytest.raises(SystemExit):
        main(argv)
    out = capsys.readouterr().out
    assert "SGLang 0.5.23, TP 8" in out and "vLLM 0." not in out


def test_sglangs_derived_context_follows_get_context_length() -> None:
    """sglang 0.5.23's ``get_context_length``: the first of its keys, times the rope factor
    unless the scaling names its original length or is Llama 3's."""
    from instinct_serve.fit.sglang import derived_context_length

    yarn = {"type": "yarn", "factor": 4.0}
    assert derived_context_length({"max_position_embeddings": 32768, "rope_scaling": yarn})[0] == (
        131072
    )
    original = {**yarn, "original_max_position_embeddings": 32768}
    assert derived_context_length({"max_position_embeddings": 131072, "rope_scaling": original})[
        0
    ] == (131072)
    llama3 = {"rope_type": "llama3", "factor": 8.0}
    assert derived_context_length({"max_position_embeddings": 131072, "rope_scaling": llama3})[
        0
    ] == (131072)
    both = {"seq_length": 8192, "max_position_embeddings": 32768}
    assert derived_context_length(both) == (
        8192,
        "config.json seq_length (SGLang's get_context_length)",
    )
    assert derived_context_length({})[0] == 2048


def test_one_reader_of_an_sglang_argv() -> None:
    """AMD's DeepSeek-R1 SGLang flags as a plan writes them; your options stand only where
    the argv says nothing."""
    from instinct_serve.fit.sglang import SglangLaunch, launch_from_args

    argv = [
        "--mem-fraction-static=0.8",
        "--cuda-graph-max-bs=128",
        "--chunked-prefill-size",
        "196608",
        "--dp-size",
        "8",
        "--enable-dp-attention",
        "--kv-cache-dtype",
        "fp8_e4m3",
    ]
    launch = launch_from_args(argv, mem_fraction_static=0.5, context_length=8192)
    assert launch == SglangLaunch(
        mem_fraction_static=0.8,
        chunked_prefill_size=196608,
        cuda_graph_max_bs=128,
        dp_attention_size=8,
        kv_cache_dtype="fp8_e4m3",
        context_length=8192,
    )
    assert launch_from_args(["--dp-size", "8"]).dp_attention_size == 1  # no DP attention
    assert launch_from_args(["--mem-fraction-static", "lots"]).mem_fraction_static is None


def test_a_vllm_recipes_flags_are_not_sglangs(capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-120b's recipe runs vLLM at --gpu-memory-utilization 0.95 and --block-size 64 on
    MI300X: neither is SGLang's; its answer is at SGLang's own default fraction, and says so.
    The vLLM fit of the same model keeps the recipe's flags."""
    argv = ["fit", "openai/gpt-oss-120b", "--gpu", "mi300x", "--tp", "1", "--json"]
    code, doc, _ = run(argv, capsys)
    assert code == 0 and doc["gpu_memory_utilization"] == 0.95
    code, doc, _ = run([*argv, "--server", "sglang"], capsys)
    assert code == 0
    assert doc["sglang"]["mem_fraction_static"] == 0.867
    assert doc["sglang"]["fraction_source"].startswith("SGLang's default")
    assert "the recipe's vLLM flags are not this server's: not applied" in doc["notes"]
    assert not any("from the recipe's flags" in note for note in doc["notes"])


def test_the_alternatives_are_judged_by_sglang(
    hub: HTTPServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint too big for one 64 GiB GPU: its FP8 sibling is offered with SGLang's
    verdict, TP and context (what fit --server sglang says of that sibling), not vLLM's."""
    big = json.loads((CONFIGS / "Qwen__Qwen3-8B.json").read_text())
    big |= {"num_hidden_layers": 96, "intermediate_size": 32768}
    fp8 = big | {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    serve_model(hub, "acme/Big", big, {"BF16": 42_000_000_000})
    serve_model(hub, "acme/Big-FP8", fp8, {"F8_E4M3": 40_000_000_000, "BF16": 2_000_000_000})

    def search(request: Request) -> Response:
        rows = (
            [{"id": "acme/Big"}, {"id": "acme/Big-FP8"}]
            if request.args.get("author") == ("acme")
            else []
        )
        return Response(json.dumps(rows), content_type="application/json")

    hub.expect_request("/api/models").respond_with_handler(search)
    one_gpu = ["--vram-gib", "64", "--gpu-count", "1", "--json", "--server", "sglang"]
    code, doc, _ = run(["fit", "acme/Big", *one_gpu], capsys)
    assert code == 1 and doc["verdict"] == "does_not_fit"
    assert "SGLang refuses to start" in doc["verdict_reason"]
    [alt] = doc["alternatives"]
    code, own, _ = run(["fit", "acme/Big-FP8", *one_gpu], capsys)
    assert code == 0 and own["server"] == "sglang"
    assert alt["model"] == "acme/Big-FP8" and alt["verdict"] == own["verdict"]
    assert alt["remaining_for_kv_gb"] == own["remaining_for_kv_gb"]
    assert alt["recommended_max_model_len"] == own["fit"]["recommended_max_model_len"]
    assert alt["tp"] == own["fit"]["tp"] == 1
