"""The sizing misses of issue 27, each on a real model id from AMD's own material (InferenceX
configs, AMD model cards): a MoE sized by its name's active count, NVIDIA ``-FP4`` taken for
bf16, ``amd/*-FP8-KV`` without an fp8 KV cache, the TP that merely holds the weights, a mixed
FP8/FP4 checkpoint sized at parameters x 1.03, a named checkpoint swapped for a dated one, a
plan refusing what its own ``--list`` fits, refusals that ignore ``--hosts``, and
``plan --hosts`` that could not be previewed.

Offline (the shipped snapshot and metadata); every plan goes through ``make_plan``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from instinct_serve import vllm_args
from instinct_serve.catalog.rough import moe_active_count_from_name, parameter_count_from_name
from instinct_serve.errors import UsageError
from instinct_serve.fit.precision import checkpoint_precision, fp8_kv_cache, precision_from_name
from instinct_serve.gather.choices import plan_choices
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions
from tests.infra.paths import CONFIGS
from tests.plan.plans import plan, reason, refused

MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"


# ---------------------------------------------------------------- a MoE's active count


def test_a_name_with_active_and_experts_gives_no_total() -> None:
    assert moe_active_count_from_name(MAVERICK) == ("17B", 128)
    assert moe_active_count_from_name("meta-llama/Llama-4-Scout-17B-16E-Instruct") == ("17B", 16)
    assert parameter_count_from_name(MAVERICK) is None  # was "17B": TP 1 for ~400B
    assert parameter_count_from_name(MAVERICK + "-FP8") is None
    assert moe_active_count_from_name("meta-llama/Llama-3.1-405B-Instruct") is None
    assert parameter_count_from_name("meta-llama/Llama-3.1-405B-Instruct") == "405B"
    assert parameter_count_from_name("mistralai/Mixtral-8x7B-Instruct-v0.1") == "56B"


@pytest.mark.parametrize(
    ("model", "gpu"),
    [
        (MAVERICK, "mi355x"),  # was TP 1 (17B x 2 bytes = 34 GB) and an 800 GB download
        (MAVERICK, "mi325x"),
        (MAVERICK, "mi250x"),  # gfx90a: the same miss
        (MAVERICK + "-FP8", "mi300x"),
    ],
)
def test_a_moe_named_by_its_active_count_is_refused_unsized(model: str, gpu: str) -> None:
    with pytest.raises(UsageError) as err:
        make_plan(PlanOptions(model=model, gpu=gpu))
    assert err.value.id == "unsized_model"
    assert "17B is the active count of a 128-expert MoE" in err.value.message
    assert "--tp" in (err.value.fix or "")
    assert plan(model, gpu, tp=8)["tensor_parallel_size"] == 8  # --tp plans it


def test_scout_is_sized_from_its_recipe_not_its_name() -> None:
    doc = plan("meta-llama/Llama-4-Scout-17B-16E-Instruct", "mi355x")
    assert doc["tensor_parallel_size"] >= 2  # was 1: 218 GB of weights on a 309 GB GPU
    assert "the recipe states 262 GB" in reason(doc, "tp minimum")


# ---------------------------------------------------------------- precision from the name


def test_nvidia_fp4_in_a_name_is_nvfp4() -> None:
    assert precision_from_name("nvidia/DeepSeek-R1-0528-FP4") == "nvfp4"
    assert precision_from_name("nvidia/Llama-3.1-405B-Instruct-FP4") == "nvfp4"
    assert precision_from_name("amd/DeepSeek-R1-0528-MXFP4") == "mxfp4"  # AMD's stays MXFP4
    assert checkpoint_precision("nvidia/DeepSeek-R1-FP4", None) == ("nvfp4", "its name")


@pytest.mark.parametrize(
    "model",
    [
        "nvidia/DeepSeek-R1-0528-FP4",  # was "could not be sized" (not the real reason)
        "nvidia/DeepSeek-R1-FP4",  # was planned as fp8 (the recipe's), exit 0
        "nvidia/Llama-3.1-405B-Instruct-FP4",  # was planned TP 4, labelled bf16
    ],
)
@pytest.mark.parametrize("gpu", ["mi355x", "mi300x"])
def test_nvidia_fp4_checkpoints_are_refused_like_nvfp4(model: str, gpu: str) -> None:
    error = refused(model, gpu)
    assert error.id == "unsupported_precision"
    assert "stores nvfp4 weights (its name)" in error.message
    assert error.details["source"]


# ---------------------------------------------------------------- FP8 KV cache


@pytest.mark.parametrize(
    ("model", "gpu"),
    [
        ("amd/Llama-3.1-70B-Instruct-FP8-KV", "mi300x"),
        ("amd/Llama-3.1-405B-Instruct-FP8-KV", "mi300x"),
        ("amd/Llama-3.1-8B-Instruct-FP8-KV", "mi325x"),
        ("amd/Mixtral-8x7B-Instruct-v0.1-FP8-KV", "mi355x"),
    ],
)
def test_fp8_kv_checkpoints_get_an_fp8_kv_cache_with_the_reason(model: str, gpu: str) -> None:
    doc = plan(model, gpu)
    assert vllm_args.value(doc["vllm_args"], "--kv-cache-dtype") == "fp8"
    why = reason(doc, "--kv-cache-dtype fp8")
    assert "FP8-KV" in why and "half the tokens" in why
    assert next(r for r in doc["reasons"] if r["item"] == "--kv-cache-dtype fp8")["source"] == (
        "checkpoint"
    )
    assert doc["precision"] == "fp8"


def test_your_kv_cache_dtype_wins_over_the_checkpoints() -> None:
    doc = plan("amd/Llama-3.1-70B-Instruct-FP8-KV", kv_cache_dtype="auto")
    assert vllm_args.value(doc["vllm_args"], "--kv-cache-dtype") == "auto"
    assert not any(r["source"] == "checkpoint" for r in doc["reasons"])
    plain = plan("meta-llama/Llama-3.3-70B-Instruct")
    assert vllm_args.value(plain["vllm_args"], "--kv-cache-dtype") is None


def test_a_kv_cache_scheme_in_a_local_config_takes_fp8_kv_and_the_fit_sizes_it(
    tmp_path: Path,
) -> None:
    from tests.fit.st_files import write_safetensors

    model = tmp_path / "Llama-3.1-8B-Instruct-FP8-dynamic"  # no FP8-KV in its name
    model.mkdir()
    config = json.loads((CONFIGS / "meta-llama__Meta-Llama-3.1-8B.json").read_text())
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"},
    }
    (model / "config.json").write_text(json.dumps(config))
    write_safetensors(model / "model.safetensors", {"w": ("F8_E4M3", (4096, 4096))})
    ours = make_plan(PlanOptions(model=str(model), gpu="mi300x"))
    assert vllm_args.value(ours.plan.vllm_args, "--kv-cache-dtype") == "fp8"
    assert any("kv_cache_scheme" in r.why for r in ours.plan.reasons)
    bf16 = make_plan(PlanOptions(model=str(model), gpu="mi300x", kv_cache_dtype="auto"))
    assert ours.fit is not None and bf16.fit is not None
    assert ours.fit.kv_tokens >= 1.9 * bf16.fit.kv_tokens  # the fit sizes the fp8 KV


@pytest.mark.parametrize(
    ("quant", "key"),
    [
        (
            {
                "quant_method": "compressed-tensors",
                "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"},
            },
            "kv_cache_scheme",
        ),
        ({"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}, "kv_cache_quant_algo"),
        (
            {"quant_method": "quark", "export": {"kv_cache_group": ["*k_proj", "*v_proj"]}},
            "export.kv_cache_group",
        ),
    ],
)
def test_a_kv_cache_scheme_in_the_config_means_fp8_kv(quant: dict[str, Any], key: str) -> None:
    why = fp8_kv_cache("someorg/Llama-3.1-70B-Instruct-FP8", {"quantization_config": quant})
    assert why is not None and key in why
    fp8_only = {"quantization_config": {"quant_method": "fp8"}}
    assert fp8_kv_cache("someorg/Llama-3.1-70B-Instruct-FP8", fp8_only) is None


# ---------------------------------------------------------------- TP that holds the context


def test_the_estimated_tp_says_how_much_room_the_context_has() -> None:
    doc = plan("amd/Llama-3.1-405B-Instruct-FP8-KV")  # dense: the smallest TP, said plainly
    assert doc["tensor_parallel_size"] == 4
    why = reason(doc, "--tensor-parallel-size")
    assert "leaves about 78 GB per GPU for the KV cache" in why
    assert "cannot be checked" in why


def test_a_400b_class_moe_is_not_planned_at_the_tp_that_only_holds_its_weights() -> None:
    doc = plan("Qwen/Qwen3-235B-A22B")  # 470 GB bf16: TP 4 leaves a third of each GPU
    assert doc["tensor_parallel_size"] == 8  # was 4
    why = reason(doc, "--tensor-parallel-size")
    assert "TP 8 leaves about 124 GB per GPU for the KV cache" in why
    assert "TP 4 leaves only about 65 GB per GPU" in why
    doc = plan("Qwen/Qwen3-235B-A22B", "mi325x")  # TP 4 leaves over half here: kept
    assert doc["tensor_parallel_size"] == 4
    assert "GB per GPU for the KV cache" in reason(doc, "--tensor-parallel-size")


# ---------------------------------------------------------------- mixed FP8/FP4 checkpoints


def test_a_mixed_fp8_fp4_checkpoint_is_sized_by_its_stated_vram_not_params_x_1_03() -> None:
    # DeepSeek-V4-Pro stores FP8 attention and FP4 experts: 1600B x 1.03 = 1648 GB refused
    # it on 8x MI300X; the recipe's 960 GB (what it really takes) fits at TP 8
    doc = plan("deepseek-ai/DeepSeek-V4-Pro", force=True)  # the recipe verifies mi355x only
    assert doc["tensor_parallel_size"] == 8
    assert "the recipe states 960 GB" in reason(doc, "tp minimum")
    assert "1648 GB" not in str(doc)


def test_a_mixed_fp8_fp4_checkpoint_with_metadata_is_sized_by_its_real_bytes() -> None:
    from instinct_serve.fit.estimate import FitOptions, HardwareSpec, estimate
    from instinct_serve.fit.meta import ModelMeta
    from instinct_serve.fit.shipped import load_shipped

    r1 = load_shipped("deepseek-ai/DeepSeek-R1")
    assert r1 is not None
    config = dict(r1.config)  # amd/DeepSeek-R1-0528-MXFP4: FP4 experts, FP8 attention (Quark)
    config["quantization_config"] = {
        "quant_method": "quark",
        "global_quant_config": {"weight": {"dtype": "fp4"}},
        "layer_quant_config": {"*self_attn*": {"weight": {"dtype": "fp8_e4m3"}}},
    }
    counts = {"U8": 330_000_000_000, "F8_E4M3": 20_000_000_000, "BF16": 15_000_000_000}
    meta = ModelMeta(
        model_id="amd/DeepSeek-R1-0528-MXFP4",
        config=config,
        dtype_counts=counts,
        source="test",
        weights_source="test",
    )
    mi300x = HardwareSpec(vram_bytes=192 * 2**30, gpu_count=8, gfx_version="gfx942")
    report = estimate(meta, mi300x, FitOptions(tp=8))
    assert report.weights.loaded_bytes == 380_000_000_000  # the bytes stored, per dtype
    assert report.verdict == "safe"  # not 671B x 1.03 = 691 GB


# ---------------------------------------------------------------- smaller misses


@pytest.mark.parametrize(
    ("model", "dated"),
    [
        ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Flash-0731"),
        ("deepseek-ai/DeepSeek-V4-Pro", "deepseek-ai/DeepSeek-V4-Pro-0813"),
    ],
)
def test_a_named_checkpoint_is_served_as_named_and_the_dated_one_suggested(
    model: str, dated: str
) -> None:
    doc = plan(model, "mi355x")
    assert doc["model"] == model  # was the recipe default's dated release
    why = reason(doc, "variant")
    assert "served as named" in why and dated in why
    assert plan(dated, "mi355x")["model"] == dated  # named, the dated one is served


def test_a_plan_takes_the_first_fitting_row_of_its_own_list() -> None:
    opts = PlanOptions(model="Qwen/Qwen3.8-2.4T-A95B", gpu="mi355x")
    doc = make_plan(opts).to_dict()  # was refused at the bf16 default's 5871 GB
    listing = plan_choices(opts)
    first = next(c for c in listing.choices if c.feasible)
    assert (doc["model"], doc["tensor_parallel_size"]) == (first.model_id, first.tp)
    assert doc["precision"] == "mxfp4" and "does not fit here" in reason(doc, "variant")


def test_the_list_and_the_plan_agree_when_nothing_fits() -> None:
    opts = PlanOptions(model="Qwen/Qwen3.8-2.4T-A95B", gpu="mi300x")
    error = refused("Qwen/Qwen3.8-2.4T-A95B", "mi300x")
    assert error.id == "does_not_fit"
    assert not any(c.feasible for c in plan_choices(opts).choices)


def test_a_refusal_points_at_hosts_not_a_later_release() -> None:
    error = refused("Qwen/Qwen3-235B-A22B", gpu_count=1)
    assert "--hosts" in (error.fix or "") and "later release" not in (error.fix or "")


def test_plan_hosts_with_gpu_previews_the_ranks_without_contacting_the_nodes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from instinct_serve.cli.multinode import plan_hosts
    from instinct_serve.runtime.multinode import parse_hosts

    # names that cannot resolve: contacting them failed with "cannot resolve host name"
    hosts = parse_hosts("node-a.invalid,node-b.invalid")
    opts = PlanOptions(model="meta-llama/Llama-3.3-70B-Instruct", gpu="mi210", gpu_count=2)
    opts.hosts = "node-a.invalid,node-b.invalid"
    assert plan_hosts(opts, hosts, "json") == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)["multi_node"]
    assert [n["host"] for n in doc["nodes"]] == ["node-a.invalid", "node-b.invalid"]
    assert all("--nnodes" in n["argv"] for n in doc["nodes"])
    assert "no node was contacted" in captured.err


def test_plan_hosts_with_gpu_that_fits_one_node_previews_it_without_contacting_it() -> None:
    """One node holds the model: the preview is that node's plan, and the node (a name that
    cannot resolve) is not contacted either."""
    from tests.infra.cli import run_instinct

    args = ["plan", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "mi300x", "--json"]
    done = run_instinct([*args, "--hosts", "node-a.invalid,node-b.invalid"], timeout=120)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "node-a.invalid alone runs it" in said and "node-a.invalid was not contacted" in said
    assert json.loads(done.stdout)["tensor_parallel_size"] >= 1
