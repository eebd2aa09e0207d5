"""SGLang plans (``plan.sglang``, ``servers.sglang``) from AMD's own SGLang reference configs,
with real model ids on the GPUs AMD runs them on, offline from the shipped snapshot; and the
``--server auto`` choice between vLLM and SGLang."""

from __future__ import annotations

from typing import Any

import pytest

from instinct_serve import servers, vllm_args
from instinct_serve.errors import UsageError
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions
from instinct_serve.plan.render import render

DSR1 = "deepseek-ai/DeepSeek-R1-0528"


def plan(model: str, gpu: str, gpu_count: int = 8, **kw: Any) -> Any:
    """``--server auto`` unless another is given (the option's default is vllm)."""
    kw.setdefault("server", "auto")
    return make_plan(PlanOptions(model=model, gpu=gpu, gpu_count=gpu_count, **kw)).plan


def test_the_default_is_vllm_and_says_what_amd_runs() -> None:
    """Until an SGLang launch is proven through serve (docker, the fingerprint, bench), the
    default stays vLLM; the plan says which server AMD's config uses and how to follow it."""
    p = make_plan(PlanOptions(model=DSR1, gpu="mi300x", gpu_count=8)).plan
    assert p.server == "vllm" and "sglang" not in p.image
    assert any("--server sglang follows dsr1-fp8-mi300x-sglang" in w for w in p.warnings)


def reason(p: Any, item: str) -> Any:
    found = [r for r in p.reasons if r.item == item]
    assert found, [r.item for r in p.reasons]
    return found[0]


def test_auto_follows_amds_sglang_config_for_deepseek_r1_on_mi300x() -> None:
    p = plan(DSR1, "mi300x")
    assert p.server == "sglang" and p.to_dict()["server"] == "sglang"
    assert p.image == "lmsysorg/sglang:v0.5.12-rocm700-mi30x"
    assert p.tensor_parallel_size == 8
    # exactly as benchmarks/single_node/fixed_seq_len/dsr1_fp8_mi300x.sh sets them
    assert p.env["SGLANG_USE_AITER"] == "1" and p.env["SGLANG_AITER_MLA_PERSIST"] == "1"
    args = p.vllm_args
    assert vllm_args.value(args, "--attention-backend") == "aiter"
    assert vllm_args.value(args, "--kv-cache-dtype") == "fp8_e4m3"
    assert vllm_args.value(args, "--mem-fraction-static") == "0.8"
    assert vllm_args.value(args, "--chunked-prefill-size") == "131072"
    assert vllm_args.value(args, "--cuda-graph-max-bs") == "128"
    assert vllm_args.has(args, "--disable-radix-cache")
    assert vllm_args.value(args, "--tensor-parallel-size") == "8"
    assert not vllm_args.has(args, "--max-model-len", "--gpu-memory-utilization")
    # instinct's one addition: SGLang serves /metrics (what top reads) only when asked
    assert vllm_args.has(args, "--enable-metrics")
    assert "top reads" in reason(p, "--enable-metrics").why
    why = reason(p, "server")
    assert why.source == "AMD reference dsr1-fp8-mi300x-sglang"
    assert "no vLLM config" in why.why
    assert reason(p, "SGLANG_AITER_MLA_PERSIST=1").source == "AMD reference dsr1-fp8-mi300x-sglang"
    assert not any(k.startswith("VLLM_ROCM") for k in p.env)  # no vLLM recipe layer


def test_the_sglang_command_in_a_container_and_natively() -> None:
    p = plan(DSR1, "mi300x")
    kind = servers.of(p)
    assert kind.container_args(p)[:7] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        DSR1,
        "--host",
        "0.0.0.0",
    ]
    assert kind.native_argv(p)[5:7] == ["--host", "127.0.0.1"]
    docker = render(p, "docker")
    assert "lmsysorg/sglang:v0.5.12-rocm700-mi30x" in docker and "sglang.launch_server" in docker


def test_mi355x_takes_the_mi35x_image_and_its_quick_reduce_env() -> None:
    p = plan(DSR1, "mi355x")
    assert p.server == "sglang" and p.image.endswith("-mi35x")
    assert p.env["ROCM_QUICK_REDUCE_QUANTIZATION"] == "INT4"
    assert p.env["RCCL_MSCCL_ENABLE"] == "0"
    assert vllm_args.value(p.vllm_args, "--chunked-prefill-size") == "196608"


def test_auto_keeps_vllm_where_amd_runs_vllm() -> None:
    p = plan("openai/gpt-oss-120b", "mi355x")
    assert p.server == "vllm" and p.image.startswith("vllm/vllm-openai-rocm")
    assert "server" not in p.to_dict()
    assert not any(r.item == "server" for r in p.reasons)


def test_auto_without_any_reference_is_vllm_and_says_nothing_new() -> None:
    p = plan("Qwen/Qwen3.5-9B", "mi300x", gpu_count=1)
    assert p.server == "vllm" and not any(r.item == "server" for r in p.reasons)


def test_server_vllm_is_honoured_where_amd_runs_sglang() -> None:
    p = plan(DSR1, "mi300x", server="vllm")
    assert p.server == "vllm" and "sglang" not in p.image
    assert any("--server sglang follows dsr1-fp8-mi300x-sglang" in w for w in p.warnings)


def test_server_sglang_with_a_vllm_reference_follows_the_sglang_one_with_dp_attention() -> None:
    """DeepSeek-V4-Pro on MI355X: AMD runs vLLM, SGLang and ATOM; auto keeps vLLM, and
    --server sglang follows dsv4-fp4-mi355x-sglang, whose first row is DP-attention."""
    assert plan("deepseek-ai/DeepSeek-V4-Pro", "mi355x").server == "vllm"
    p = plan("deepseek-ai/DeepSeek-V4-Pro", "mi355x", server="sglang")
    assert p.server == "sglang"
    assert p.image == "lmsysorg/sglang-rocm:v0.5.14-rocm720-mi35x-20260706"
    assert vllm_args.value(p.vllm_args, "--dp-size") == "8"
    assert vllm_args.has(p.vllm_args, "--enable-dp-attention")
    assert vllm_args.value(p.vllm_args, "--attention-backend") == "dsv4"
    assert p.env["SGLANG_HACK_FLASHMLA_BACKEND"] == "unified_kv_triton"
    assert reason(p, "server").source == "--server"


def test_an_agentic_config_runs_expert_parallel() -> None:
    p = plan("amd/GLM-5.2-MXFP4", "mi355x", workload="agentic")
    assert p.server == "sglang" and p.tensor_parallel_size == 4
    assert vllm_args.value(p.vllm_args, "--ep-size") == "4"
    assert p.env["SGLANG_OPT_USE_TOPK_V2"] == "false"


def test_your_options_in_sglangs_words_win() -> None:
    p = plan(DSR1, "mi300x", max_model_len=32768, gpu_memory_utilization=0.85, tp=4)
    assert vllm_args.value(p.vllm_args, "--context-length") == "32768"
    assert vllm_args.value(p.vllm_args, "--mem-fraction-static") == "0.85"
    assert vllm_args.value(p.vllm_args, "--tensor-parallel-size") == "4"
    assert p.max_model_len == 32768


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"model": "Qwen/Qwen3.5-9B", "gpu": "mi250x"}, "no SGLang build for MI250X"),
        ({"model": DSR1, "public": True}, "--public is not offered for SGLang"),
    ],
)
def test_what_sglang_is_not_planned_for_is_refused(kw: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError) as caught:
        plan(server="sglang", **{"gpu": "mi300x", "gpu_count": 8, **kw})
    assert caught.value.id == "bad_server" and words in caught.value.message
    if "MI250X" in words:  # the GPUs it does run on come from AMD's configs
        assert "MI300X, MI325X, MI355X" in caught.value.message


@pytest.mark.parametrize(
    ("gpu", "image"),
    [
        ("mi300x", "lmsysorg/sglang-rocm:v0.5.16-rocm720-mi30x-20260730"),
        ("mi355x", "lmsysorg/sglang-rocm:v0.5.17-rocm720-mi35x-20260818"),
    ],
)
def test_sglang_asked_for_a_model_amd_runs_no_sglang_config_of(gpu: str, image: str) -> None:
    """``--server sglang`` for Qwen3-8B (AMD's SGLang configs are for DeepSeek, Qwen3.5 and
    GLM): SGLang's own defaults on the newest image AMD runs SGLang with on that GPU family,
    the TP the fit decides, your options in SGLang's words; nothing of another model's config,
    and a warning that says so. ``auto`` still keeps vLLM for it."""
    p = plan("Qwen/Qwen3-8B", gpu, server="sglang", max_model_len=32768)
    assert p.server == "sglang" and p.image == image
    args = p.vllm_args
    assert vllm_args.value(args, "--tensor-parallel-size") == str(p.tensor_parallel_size) == "1"
    assert vllm_args.value(args, "--context-length") == "32768"
    assert vllm_args.has(args, "--enable-metrics") and vllm_args.value(args, "--port") == "8000"
    assert not vllm_args.has(args, "--attention-backend", "--kv-cache-dtype", "--max-model-len")
    assert not any(key.startswith(("SGLANG_", "ROCM_")) for key in p.env)
    assert any("AMD publishes no SGLang config for this model" in w for w in p.warnings)
    assert "AMD has no SGLang config for this model" in reason(p, p.image).why
    assert servers.of(p).container_args(p)[:5] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-8B",
    ]
    assert plan("Qwen/Qwen3-8B", gpu).server == "vllm"


def test_the_newest_sglang_image_is_read_from_the_tag() -> None:
    from instinct_serve.catalog.reference import image_order

    tags = [
        "lmsysorg/sglang:v0.5.12-rocm700-mi35x",
        "lmsysorg/sglang-rocm:v0.5.12.post1-rocm720-mi35x-20260529",
        "lmsysorg/sglang-rocm:v0.5.16-rocm720-mi35x-20260726",
        "lmsysorg/sglang-rocm:v0.5.16-rocm720-mi35x-20260730",
        "lmsysorg/sglang-rocm:v0.5.17-rocm720-mi35x-20260818",
    ]
    assert sorted(reversed(tags), key=image_order) == tags
    assert image_order("lmsysorg/sglang:latest") < image_order(tags[0])


def test_public_with_auto_on_an_sglang_model_is_refused_not_silently_vllm() -> None:
    with pytest.raises(UsageError) as caught:
        plan(DSR1, "mi300x", public=True)
    assert "--server vllm" in (caught.value.fix or "")


def test_the_summary_says_which_server_and_why() -> None:
    from instinct_serve.plan.summary import summary_rows

    opts = PlanOptions(model=DSR1, gpu="mi300x", gpu_count=8, server="auto")
    rows = dict(summary_rows(make_plan(opts)))
    assert rows["Server"].startswith("SGLang - auto: AMD's reference config dsr1-fp8-mi300x-sglang")
    assert rows["Image"] == "lmsysorg/sglang:v0.5.12-rocm700-mi30x"
    assert rows["Container"] == "sglang-deepseek-r1-0528"
    vllm = dict(summary_rows(make_plan(PlanOptions(model="openai/gpt-oss-120b", gpu="mi355x"))))
    assert "Server" not in vllm  # a vLLM plan's table is what it was
    assert "KV pool" not in vllm


def test_the_summary_says_what_sglang_will_allocate() -> None:
    """Qwen3-8B (config shipped) on one MI300X as SGLang: the table a user approves shows
    SGLang's pool at SGLang's default static fraction, as the plan's KV pool reason does."""
    from instinct_serve.plan.summary import summary_rows

    result = make_plan(PlanOptions(model="Qwen/Qwen3-8B", gpu="mi300x", server="sglang"))
    rows = dict(summary_rows(result))
    assert rows["KV pool"].endswith("at --mem-fraction-static 0.867, as SGLang sizes it")
    tokens = rows["KV pool"].split(" tokens")[0]
    assert reason(result.plan, "KV pool").why.startswith(f"{tokens} tokens")


def test_a_native_launch_runs_the_discovered_install_of_the_plans_server() -> None:
    """The discovered command replaces the first word of the rendered argv: the ``vllm``
    script in a vLLM plan, the interpreter whose environment holds sglang in an SGLang plan
    (``python3 -m sglang.launch_server`` run by that interpreter)."""
    from instinct_serve.runtime.native import native_argv

    p = plan(DSR1, "mi300x")
    argv = native_argv("/opt/sglang/bin/python", p)
    assert argv[:5] == [
        "/opt/sglang/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        DSR1,
    ]
    v = plan("openai/gpt-oss-120b", "mi355x")
    assert native_argv("/opt/vllm/bin/vllm", v)[:2] == ["/opt/vllm/bin/vllm", "serve"]


def test_a_variable_the_script_sets_by_firmware_is_named_not_set() -> None:
    """dsr1_fp8_mi300x.sh exports HSA_NO_SCRATCH_RECLAIM=1 only when the MEC firmware is
    older than 177: the plan cannot know the firmware, so it says so and leaves it out."""
    p = plan(DSR1, "mi300x")
    assert "HSA_NO_SCRATCH_RECLAIM" not in p.env
    why = reason(p, "HSA_NO_SCRATCH_RECLAIM=1").why
    assert "MEC firmware older than 177" in why and "--env-literal" in why
    given = plan(DSR1, "mi300x", env_literal={"HSA_NO_SCRATCH_RECLAIM": "1"})
    assert given.env["HSA_NO_SCRATCH_RECLAIM"] == "1"


def test_the_cli_takes_server_and_says_the_choice() -> None:
    import json

    from tests.serve.conftest import run_cli

    base = ["plan", DSR1, "--gpu", "mi300x", "--gpu-count", "8"]
    auto = run_cli([*base, "--server", "auto", "--json"])
    assert auto.returncode == 0, auto.explain()
    doc = json.loads(auto.stdout)
    assert doc["server"] == "sglang" and doc["image"].startswith("lmsysorg/sglang:")
    vllm = run_cli([*base, "--server", "VLLM", "--json"])  # a choice: any case
    assert vllm.returncode == 0, vllm.explain()
    assert "server" not in json.loads(vllm.stdout)
    human = run_cli([*base, "--server", "Auto"], env={**__import__("os").environ, "COLUMNS": "200"})
    assert "SGLang - auto: AMD's reference config dsr1-fp8-mi300x-sglang" in human.stdout


def test_the_kubernetes_container_is_named_for_its_server() -> None:
    """``kubectl logs -c sglang`` on an SGLang pod, ``-c vllm`` on a vLLM one; the probes
    ask the server's own health route."""
    import yaml

    for server, name in (("sglang", "sglang"), ("vllm", "vllm")):
        docs = list(yaml.safe_load_all(render(plan(DSR1, "mi300x", server=server), "k8s")))
        pods = [d["spec"]["template"]["spec"] for d in docs if d and d.get("kind") == "Deployment"]
        containers = pods[0]["containers"]
        assert [c["name"] for c in containers] == [name]
        probe = containers[0]["livenessProbe"]["httpGet"]["path"]
        assert probe == servers.get(server).routes.health
