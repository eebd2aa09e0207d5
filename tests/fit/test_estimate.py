"""The pure estimator: budgets, TP, verdicts, versions, alternatives, and the known errors
of the estimator script this product replaces (each pinned by its own test)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from instinct_serve.errors import UsageError
from instinct_serve.fit.alternatives import Candidate, alternatives
from instinct_serve.fit.estimate import FitOptions, HardwareSpec, estimate
from instinct_serve.fit.meta import ModelMeta
from instinct_serve.fit.shipped import load_shipped
from instinct_serve.fit.vllm import behaviour
from instinct_serve.hardware.profiles import get_profile
from tests.infra.paths import CONFIGS

GB, GIB = 10**9, 2**30
MI300X = HardwareSpec.from_inventory(get_profile("mi300x").inventory(), source="profile")


def shipped(model_id: str) -> ModelMeta:
    meta = load_shipped(model_id)
    assert meta is not None
    return meta


def fixture_meta(name: str, **changes: Any) -> ModelMeta:
    cfg = json.loads((CONFIGS / f"{name}.json").read_text()) | changes
    return ModelMeta.from_config(name, cfg, source="config")


def one_gpu(gib: float, count: int = 1) -> HardwareSpec:
    return HardwareSpec(int(gib * GIB), count, "gfx942", "test GPU")


# -- the default model ------------------------------------------------------------------


def test_default_model_on_mi300x() -> None:
    report = estimate(shipped("Qwen/Qwen3.5-9B"), MI300X, FitOptions())
    doc = report.to_dict()
    for key in (
        "weight_memory_gb",
        "kv_cache_bytes_per_token",
        "remaining_for_kv_gb",
        "verdict",
        "attention_kind",
        "overhead",
    ):
        assert key in doc
    for key in (
        "weights_fit",
        "recommended_max_model_len",
        "context_limited",
        "min_tp_required",
        "max_seq_len_fp8_kv",
    ):
        assert key in doc["fit"]
    assert doc["verdict"] == "safe" and doc["fit"]["min_tp_required"] == 1
    assert doc["attention_kind"] == "hybrid (full_attention + gated_delta_net)"
    # 8 full-attention layers x 2 x 4 KV heads x 256 x 2 bytes; the 24 GDN layers are a
    # per-sequence state: conv 8192 x 3 bf16 + 32 x 128 x 128 fp32 each
    assert doc["kv_cache_bytes_per_token"] == 8 * 2 * 4 * 256 * 2
    assert doc["attention"]["recurrent_state_bytes_per_seq"] == 24 * (
        8192 * 3 * 2 + 32 * 128 * 128 * 4
    )
    assert doc["fit"]["recommended_max_model_len"] == 262144  # native, config and recipe
    assert doc["metadata"]["source"] == "shipped"
    # vision tower loaded by default, MTP layer skipped without speculative decoding
    assert report.weights.skipped == {"mtp": shipped("Qwen/Qwen3.5-9B").component_bytes["mtp"]}
    text_only = estimate(shipped("Qwen/Qwen3.5-9B"), MI300X, FitOptions(language_model_only=True))
    assert text_only.weights.loaded_bytes < report.weights.loaded_bytes


def test_mtp_speculation_loads_the_mtp_layer_and_its_kv() -> None:
    meta = shipped("Qwen/Qwen3.5-9B")
    base = estimate(meta, MI300X, FitOptions())
    mtp = estimate(meta, MI300X, FitOptions(speculative_mtp=1))
    assert mtp.weights.loaded_bytes - base.weights.loaded_bytes == meta.component_bytes["mtp"]
    assert mtp.layers.counts()["full_attention"] == 9


# -- known errors of the replaced script --------------------------------------------------


def test_known_error_mla_latent_not_doubled_nor_divided_by_tp() -> None:
    report = estimate(shipped("deepseek-ai/DeepSeek-V3"), MI300X, FitOptions(tp=8))
    doc = report.to_dict()
    assert doc["kv_cache_bytes_per_token"] == 61 * 576 * 2  # 70,272, not x2
    assert doc["kv_cache_bytes_per_token_per_gpu"] == 61 * 576 * 2  # not / 8


def test_known_error_kv_not_divided_past_the_kv_heads() -> None:
    # Qwen3-8B: 8 KV heads; at TP 16 each GPU holds one full head per layer
    meta = fixture_meta("Qwen__Qwen3-8B")
    hw = one_gpu(192, 16)
    r16 = estimate(meta, hw, FitOptions(tp=16))
    r8 = estimate(meta, hw, FitOptions(tp=8))
    assert r16.to_dict()["kv_cache_bytes_per_token_per_gpu"] == 36 * 2 * 1 * 128 * 2
    assert r8.to_dict()["kv_cache_bytes_per_token_per_gpu"] == 36 * 2 * 1 * 128 * 2
    # the K/V projection weights are replicated too: more than an even 1/16 split
    assert r16.weights.replicated_bytes_per_rank > r8.weights.replicated_bytes_per_rank


def test_known_error_hybrid_and_sliding_layers_not_counted_as_full() -> None:
    qwen35 = estimate(shipped("Qwen/Qwen3.5-9B"), MI300X, FitOptions())
    assert qwen35.kv_cache_bytes_per_token != 32 * 2 * 4 * 256 * 2
    gpt_oss = estimate(shipped("openai/gpt-oss-120b"), MI300X, FitOptions())
    assert gpt_oss.kv_cache_bytes_per_token == 18 * 2 * 8 * 64 * 2  # 18 of 36 layers
    doc = gpt_oss.to_dict()["attention"]
    assert doc["sliding_window_tokens_per_seq"] == 128 - 1 + 16384  # v0.28+: 16K on 192 GB
    assert doc["sliding_window_bytes_per_seq"] == 18 * 2 * 8 * 64 * 2 * (128 - 1 + 16384)


def test_known_error_gb_and_gib_labelled_apart() -> None:
    doc = estimate(shipped("openai/gpt-oss-120b"), MI300X, FitOptions()).to_dict()
    assert doc["checkpoint_gb"] == 65.25  # 65,248,815,744 bytes / 10^9
    assert doc["weight_memory_gib"] == round(doc["weight_memory_bytes"] / GIB, 2) == 60.77
    assert doc["remaining_for_kv_gb"] == round(doc["remaining_for_kv_bytes"] / GB, 2)
    assert doc["remaining_for_kv_gib"] == round(doc["remaining_for_kv_bytes"] / GIB, 2)
    assert doc["hardware"]["vram_per_gpu_gib"] == 191.98  # 196,592 MiB


def test_known_error_weights_fit_includes_the_overhead() -> None:
    meta = shipped("meta-llama/Llama-3.1-8B-Instruct")
    report = estimate(meta, one_gpu(17.5), FitOptions())
    weights = report.weights.per_rank_bytes
    assert weights < report.budget_bytes  # the weights alone would fit...
    assert not report.weights_fit  # ...not with the profiling overhead
    assert report.verdict == "does_not_fit"
    assert report.recommended_max_model_len == 0


# -- weights -----------------------------------------------------------------------------


def test_gpt_oss_120b_padding_on_mi300x() -> None:
    # 65.25 GB stored; MXFP4 experts padded to 3072 x 3072 for AITER/CK: 68.59 GiB loaded
    # (68.7 GiB logged on MI300X)
    r1 = estimate(shipped("openai/gpt-oss-120b"), MI300X, FitOptions(tp=1))
    assert round(r1.weights.per_rank_bytes / GIB, 2) == 68.59
    # TP4: intermediate 2880/4 = 720 padded to 768 per rank
    r4 = estimate(shipped("openai/gpt-oss-120b"), MI300X, FitOptions(tp=4))
    assert r4.weights.padding_bytes_per_rank > 0
    assert r4.weights.per_rank_bytes < r1.weights.per_rank_bytes / 3


def test_mla_projections_replicated_per_rank() -> None:
    meta = shipped("deepseek-ai/DeepSeek-V3")
    r8 = estimate(meta, MI300X, FitOptions(tp=8))
    # q_a (7168 x 1536) + kv_a (7168 x 576) per layer in FP8, on every rank
    per_layer = 7168 * (1536 + 576)
    assert r8.weights.replicated_bytes_per_rank > 61 * per_layer * 7 / 8


# -- TP, verdicts, context ---------------------------------------------------------------


def test_needs_tp_when_one_gpu_is_not_enough() -> None:
    report = estimate(shipped("deepseek-ai/DeepSeek-V3"), MI300X, FitOptions())
    assert report.verdict == "needs_tp"
    assert report.min_tp_required == 4 and report.tp == 4
    asked = estimate(shipped("deepseek-ai/DeepSeek-V3"), MI300X, FitOptions(tp=2))
    assert asked.verdict == "needs_tp" and asked.tp == 2 and not asked.weights_fit


def test_does_not_fit_names_the_tp_it_would_need() -> None:
    hw = replace(MI300X, gpu_count=2)
    report = estimate(shipped("deepseek-ai/DeepSeek-V3"), hw, FitOptions())
    doc = report.to_dict()
    assert doc["verdict"] == "does_not_fit"
    assert doc["fit"]["min_tp_required"] is None
    assert doc["fit"]["min_tp_if_more_gpus"] == 4
    assert "TP 4 would fit" in doc["verdict_reason"]


@pytest.mark.parametrize(
    ("gib", "verdict"), [(17.5, "does_not_fit"), (20, "too_tight"), (24, "tight"), (32, "safe")]
)
def test_verdict_thresholds(gib: float, verdict: str) -> None:
    report = estimate(shipped("meta-llama/Llama-3.1-8B-Instruct"), one_gpu(gib), FitOptions())
    assert report.verdict == verdict
    left = report.remaining_bytes
    assert {
        "safe": left >= 6 * GB,
        "tight": 2 * GB <= left < 6 * GB,
        "too_tight": 0 < left < 2 * GB,
        "does_not_fit": left <= 0,
    }[verdict]


def test_context_limited_block_aligned_and_fp8_kv() -> None:
    report = estimate(shipped("meta-llama/Llama-3.1-8B-Instruct"), one_gpu(24), FitOptions())
    assert report.context_limited
    assert report.recommended_max_model_len % report.layout.block_size == 0
    assert (
        report.layout.bytes_for_request(report.recommended_max_model_len) <= report.remaining_bytes
    )
    # fp8 KV halves a full-attention model's KV: about twice the context
    ratio = report.max_seq_len_fp8_kv / report.recommended_max_model_len
    assert 1.95 < ratio <= 2.01


def test_requested_length_that_does_not_fit() -> None:
    report = estimate(
        shipped("meta-llama/Llama-3.1-8B-Instruct"), one_gpu(24), FitOptions(max_model_len=131072)
    )
    assert report.requested_fits is False
    assert report.to_dict()["fit"]["requested_max_model_len_fits"] is False
    # vLLM would refuse to start with that length: not a fit, and the reason says what fits
    assert report.verdict == "does_not_fit"
    assert (
        f"the longest that fits is {report.layout.max_model_len(report.remaining_bytes, 131072)}"
        in (report.verdict_reason)
    )
    # with a second GPU, TP 2 holds the requested length
    two = estimate(
        shipped("meta-llama/Llama-3.1-8B-Instruct"),
        one_gpu(24, 2),
        FitOptions(max_model_len=131072),
    )
    assert (two.verdict, two.tp, two.requested_fits) == ("needs_tp", 2, True)


def test_tp_beyond_the_gpus_present() -> None:
    report = estimate(shipped("Qwen/Qwen3-8B"), one_gpu(192, 1), FitOptions(tp=4))
    assert report.verdict == "does_not_fit" and "TP 4 needs 4 GPUs" in report.verdict_reason


def test_tp_must_divide_the_heads() -> None:
    # Qwen3.5-27B: 24 attention heads: TP 16 is not valid, TP 8 is
    meta = shipped("Qwen/Qwen3.5-27B")
    hw = replace(MI300X, gpu_count=16)
    with pytest.raises(UsageError) as err:
        estimate(meta, hw, FitOptions(tp=16))
    assert err.value.id == "bad_tp_for_model"
    assert estimate(meta, hw, FitOptions(tp=8)).tp == 8
    with pytest.raises(UsageError):
        FitOptions(tp=3)


# -- vLLM versions -----------------------------------------------------------------------


def test_version_behaviour() -> None:
    old, new = behaviour("0.19.0"), behaviour("0.22.0")
    assert old.default_gpu_memory_utilization == 0.9 and not old.graph_memory_in_budget
    assert new.default_gpu_memory_utilization == 0.92 and new.graph_memory_in_budget
    assert (old.kv_tokens_formula, new.kv_tokens_formula) == ("blocks", "concurrency")
    gib = 2**30
    assert behaviour("0.22.0").batch_defaults(192 * gib, 4096) == (8192, 1024)
    assert behaviour("0.28.0").batch_defaults(192 * gib, 4096) == (16384, 1024)
    assert behaviour("0.22.0").batch_defaults(64 * gib, 4096) == (2048, 256)
    assert behaviour("0.22.0").batch_defaults(80 * gib, 4096, "NVIDIA A100-SXM4-80GB") == (
        2048,
        256,
    )
    with pytest.raises(UsageError):
        behaviour("banana")


def test_graph_memory_and_utilization_follow_the_version() -> None:
    meta = shipped("Qwen/Qwen3-8B")
    new = estimate(meta, MI300X, FitOptions(vllm_version="0.21.0"))
    eager = estimate(meta, MI300X, FitOptions(vllm_version="0.21.0", enforce_eager=True))
    old = estimate(meta, MI300X, FitOptions(vllm_version="0.19.0"))
    assert new.overhead.graph_bytes > 0 and eager.overhead.graph_bytes == 0
    assert old.overhead.graph_bytes == 0
    assert (new.gpu_memory_utilization, old.gpu_memory_utilization) == (0.92, 0.9)
    given = estimate(meta, MI300X, FitOptions(gpu_memory_utilization=0.8))
    assert given.gpu_memory_utilization == 0.8 and given.utilization_source == "given"
    assert "0.21.0" in new.to_dict()["kv_cache"]["reproduces"]


def test_overhead_grows_with_batch_and_vocab() -> None:
    meta = shipped("Qwen/Qwen3-8B")
    small = estimate(meta, MI300X, FitOptions(max_num_seqs=64))
    large = estimate(meta, MI300X, FitOptions(max_num_seqs=1024))
    assert large.overhead.sampler_bytes == 16 * small.overhead.sampler_bytes
    assert large.overhead.method == "modelled"


@pytest.mark.parametrize(
    ("gpu", "platform", "version", "extra_gib"),
    [
        ("NVIDIA H100 80GB HBM3", "cuda", "0.9.2", 1.8),  # V1, snapshot before NCCL init
        ("NVIDIA A100-SXM4-80GB", "cuda", "0.8.5", 1.8),  # V1 of 0.8: device-wide non-torch
        ("NVIDIA H100 80GB HBM3", "cuda", "0.11.0", 0.0),  # vllm#25359: outside the budget
        ("AMD Instinct MI300X", "rocm", "0.11.0", 0.0),
        ("NVIDIA H100 PCIe", "cuda", "0.9.2", 0.4),
        ("NVIDIA H100 NVL", "cuda", "0.9.2", 0.4),
        ("AMD Instinct MI300X", "rocm", "0.9.2", 0.4),  # no log isolates RCCL's share
    ],
)
def test_collective_buffers_per_rank_follow_the_fabric_and_the_version(
    gpu: str, platform: str, version: str, extra_gib: float
) -> None:
    meta = shipped("Qwen/Qwen3-8B")
    hw = HardwareSpec(int(80 * GIB), 2, None, gpu, platform=platform)
    one, two = (estimate(meta, hw, FitOptions(tp=tp, vllm_version=version)) for tp in (1, 2))
    extra = two.overhead.non_torch_bytes - one.overhead.non_torch_bytes
    assert extra == int(extra_gib * GIB)
    counted = [n for n in two.overhead.notes if n.startswith("collective buffers counted")]
    assert bool(counted) == (extra_gib > 0)


def test_flat_overhead_when_dimensions_are_unknown() -> None:
    meta = fixture_meta("Qwen__Qwen3-8B")
    cfg = {k: v for k, v in meta.config.items() if k != "vocab_size"}
    report = estimate(replace(meta, config=cfg), MI300X, FitOptions())
    assert report.overhead.method == "flat" and report.overhead.activation_bytes == 4 * GB


# -- alternatives ------------------------------------------------------------------------


def test_alternatives_verified_and_ranked() -> None:
    hw = one_gpu(64)
    big = fixture_meta("Qwen__Qwen3-8B", num_hidden_layers=96, intermediate_size=32768)
    fp8_cfg = big.config | {
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}
    }
    fp8 = ModelMeta.from_config("acme/Big-FP8", fp8_cfg, source="config")
    cands = [
        Candidate("acme/Big", "bf16", "recipe_variant", big),
        Candidate("acme/Big-NVFP4", "nvfp4", "provider", fp8),
        Candidate("amd/Big-FP8", "fp8", "amd", fp8),
    ]
    ranked = alternatives(cands, hw, FitOptions(), native_precisions=["bf16", "fp8_fnuz"])
    assert [a.candidate.model_id for a in ranked] == ["amd/Big-FP8", "acme/Big"]  # no NVFP4
    assert ranked[0].report.fits and not ranked[1].report.fits
    assert ranked[0].native_precision
    assert ranked[0].to_dict()["verdict"] in ("safe", "tight")


# -- engine, device class, pipeline parallel (issue 17) ----------------------------------


def test_the_engine_follows_version_platform_and_vllm_use_v1() -> None:
    assert behaviour("0.9.2", platform="rocm").v0_engine  # ROCm fell back to V0 through 0.9
    assert not behaviour("0.10.1", platform="rocm").v0_engine
    assert behaviour("0.7.2", platform="cuda").v0_engine  # V1 default on CUDA from 0.8.0
    assert not behaviour("0.8.0", platform="cuda").v0_engine
    assert not behaviour("0.7.1", platform="cuda", use_v1_env="1").v0_engine
    assert behaviour("0.9.2", platform="cuda", use_v1_env="0").v0_engine
    assert behaviour("0.9.2", platform="cuda", engine="v0").v0_engine
    assert not behaviour("0.12.0", platform="rocm", engine="v0").v0_engine  # V0 removed
    with pytest.raises(UsageError) as err:
        FitOptions(engine="v2")
    assert err.value.id == "bad_engine"


def test_v0_profiles_a_full_length_batch_unless_it_chunks_by_itself() -> None:
    gib = 2**30
    v0 = behaviour("0.9.2", platform="rocm")
    assert v0.batch_defaults(192 * gib, 131072) == (131072, 256)
    assert v0.batch_defaults(24 * gib, 131072, v0_chunked_prefill=True) == (2048, 256)
    assert behaviour("0.6.3", v0_engine=True).batch_defaults(
        24 * gib, 131072, v0_chunked_prefill=True
    ) == (512, 256)
    # V1 defaults are capped by max_num_seqs x max_model_len
    assert behaviour("0.22.0").batch_defaults(192 * gib, 4) == (4096, 1024)
    llama = fixture_meta("meta-llama__Meta-Llama-3.1-8B")
    rocm = estimate(llama, MI300X, FitOptions(vllm_version="0.9.2", max_model_len=131072))
    cuda_hw = replace(MI300X, platform="cuda", name="GPU")
    cuda = estimate(llama, cuda_hw, FitOptions(vllm_version="0.7.2", max_model_len=131072))
    assert rocm.overhead.max_num_batched_tokens == 131072  # ROCm V0 never chunks by itself
    assert cuda.overhead.max_num_batched_tokens == 2048
    assert rocm.remaining_bytes < cuda.remaining_bytes - 8 * gib  # 14.6 GiB of activations


def test_an_a100_named_device_gets_the_small_batch_defaults() -> None:
    llama = fixture_meta("meta-llama__Meta-Llama-3.1-8B")
    hw = HardwareSpec(int(79.2 * 2**30), 1, None, "GPU", "manual", "cuda")
    big = estimate(llama, hw, FitOptions(vllm_version="0.19.0"))
    a100 = estimate(
        llama, replace(hw, name="NVIDIA A100-SXM4-80GB"), FitOptions(vllm_version="0.19.0")
    )
    assert (big.overhead.max_num_seqs, a100.overhead.max_num_seqs) == (1024, 256)
    assert a100.remaining_bytes > big.remaining_bytes


def test_pipeline_parallel_splits_layers_and_keeps_one_vocab_matrix() -> None:
    meta = fixture_meta("meta-llama__Meta-Llama-3.1-8B")
    cfg = meta.config
    hw = replace(MI300X, gpu_count=8)
    one = estimate(meta, hw, FitOptions(tp=4))
    two = estimate(meta, hw, FitOptions(tp=4, pipeline_parallel_size=2))
    vocab_rank = cfg["vocab_size"] * cfg["hidden_size"] * 2 // 4
    shared = one.weights.replicated_bytes_per_rank
    layers_rank = one.weights.per_rank_bytes - shared - 2 * vocab_rank
    assert abs(two.weights.per_rank_bytes - (layers_rank // 2 + vocab_rank + shared)) <= 1
    assert two.layout.group_size * 2 == one.layout.group_size  # half the layers per stage


def test_kv_cache_memory_skips_the_profile() -> None:
    meta = shipped("Qwen/Qwen3-8B")
    r = estimate(meta, MI300X, FitOptions(kv_cache_memory_bytes=8 * 2**30))
    assert r.remaining_bytes == 8 * 2**30


@pytest.mark.parametrize(
    ("seqs", "tokens", "spec", "logged"),
    [
        (256, 8192, 0, ((51, 512), (35, 256))),  # vllm#39559: PIECEWISE=51 (largest=512), FULL=35
        (8, 8192, 0, ((5, 16), (4, 8))),  # a 2026-07 log: PIECEWISE=5 (largest=16), FULL=4 (8)
        (4, 8192, 2, ((5, 24), (3, 9))),  # DeepSeek-V4 with 2 MTP tokens: 5 (24), 3 (9)
    ],
)
def test_capture_sizes_match_what_vllm_logs(
    seqs: int, tokens: int, spec: int, logged: tuple[tuple[int, int], tuple[int, int]]
) -> None:
    """What vLLM logs as "Profiling CUDA graph memory: PIECEWISE=n (largest=l), FULL=m"."""
    from instinct_serve.fit.vllm import cudagraph_capture_sizes

    piecewise, full = cudagraph_capture_sizes(seqs, tokens, spec)
    assert ((len(piecewise), piecewise[-1]), (len(full), full[-1])) == logged


def test_graph_estimate_counts_the_capture_sizes() -> None:
    """vLLM charges the first capture plus at least 1 MiB per further graph: fewer sequences,
    fewer graphs, a smaller estimate; batched tokens below the capture limit cap the sizes."""
    from instinct_serve.fit.overhead import FIRST_CAPTURE_BYTES, PER_GRAPH_BYTES, graph_estimate
    from instinct_serve.fit.vllm import cudagraph_capture_sizes

    big, big_counts = graph_estimate(tp=1, max_num_seqs=1024, max_num_batched_tokens=8192)
    small, small_counts = graph_estimate(tp=1, max_num_seqs=8, max_num_batched_tokens=8192)
    assert (big_counts, small_counts) == ((51, 51), (5, 4))
    assert big - small == (100 - 7) * PER_GRAPH_BYTES
    assert small == FIRST_CAPTURE_BYTES["single"] + 7 * PER_GRAPH_BYTES
    tp, _ = graph_estimate(tp=4, max_num_seqs=8, max_num_batched_tokens=8192)
    assert tp - small == FIRST_CAPTURE_BYTES["tp"] - FIRST_CAPTURE_BYTES["single"]
    assert cudagraph_capture_sizes(1024, 96)[0][-1] == 96  # capped by max_num_batched_tokens
    meta = shipped("Qwen/Qwen3-8B")
    few = estimate(meta, MI300X, FitOptions(vllm_version="0.21.0", max_num_seqs=8))
    many = estimate(meta, MI300X, FitOptions(vllm_version="0.21.0", max_num_seqs=1024))
    assert few.overhead.graph_captures == (5, 4) and many.overhead.graph_captures == (51, 51)
    assert many.overhead.graph_bytes - few.overhead.graph_bytes == 93 * PER_GRAPH_BYTES


def test_compilation_config_sets_the_graphs_vllm_captures() -> None:
    """``--compilation-config`` graph keys, read from the launch flags as vLLM spells them."""
    from instinct_serve.fit.catalog_link import LaunchContext, fit_options
    from instinct_serve.fit.overhead import FIRST_CAPTURE_BYTES, PER_GRAPH_BYTES
    from instinct_serve.fit.vllm import cudagraph_capture_sizes

    meta = shipped("Qwen/Qwen3-8B")

    def graphs(config: str) -> tuple[int, tuple[int, int]]:
        args = ["--max-num-seqs", "256", "--compilation-config", config]
        opts, _ = fit_options(LaunchContext(vllm_version="0.21.0", launch_args=args))
        o = estimate(meta, MI300X, opts).overhead
        return o.graph_bytes, o.graph_captures

    assert graphs("{}")[1] == (51, 35)
    assert graphs('{"cudagraph_mode": "NONE"}') == (0, (0, 0))
    assert graphs('{"cudagraph_mode": "piecewise"}')[1] == (51, 0)
    assert graphs('{"cudagraph_mode": "FULL_DECODE_ONLY"}')[1] == (0, 35)
    assert graphs('{"max_cudagraph_capture_size": 16}')[1] == (5, 5)
    sized = graphs('{"cudagraph_capture_sizes": [4, 1, 2, 4, 300]}')  # FULL: up to 256 seqs
    assert sized == (FIRST_CAPTURE_BYTES["single"] + (3 + 2) * PER_GRAPH_BYTES, (4, 3))
    given = cudagraph_capture_sizes(256, 256, given_sizes=(4, 1, 2, 4, 300))
    assert given == ((1, 2, 4), (1, 2, 4))  # sizes over max_num_batched_tokens are dropped
    for bad in (
        '{"cudagraph_mode": "SOMETIMES"}',
        '{"cudagraph_capture_sizes": [0]}',
        '{"max_cudagraph_capture_size": "big"}',
    ):
        with pytest.raises(UsageError) as err:
            graphs(bad)
        assert err.value.id == "bad_compilation_config"


def test_the_launch_env_turns_the_graph_estimate_off() -> None:
    from instinct_serve.fit.catalog_link import LaunchContext, fit_options

    meta = shipped("Qwen/Qwen3-8B")
    on, _ = fit_options(LaunchContext(vllm_version="0.21.0"))
    off, _ = fit_options(
        LaunchContext(vllm_version="0.21.0", env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"})
    )
    with_graphs, without = estimate(meta, MI300X, on), estimate(meta, MI300X, off)
    assert with_graphs.overhead.graph_bytes > 0 and without.overhead.graph_bytes == 0
    v0, _ = fit_options(LaunchContext(vllm_version="0.9.2", env={"VLLM_USE_V1": "1"}))
    assert not estimate(meta, MI300X, v0).vllm.v0_engine  # VLLM_USE_V1=1 on ROCm 0.9


def _qwen3_06b_config() -> dict[str, Any]:
    """Qwen/Qwen3-0.6B's config.json: Qwen3-8B's with its own shapes and tied embeddings."""
    cfg: dict[str, Any] = json.loads((CONFIGS / "Qwen__Qwen3-8B.json").read_text())
    cfg.update(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_window_layers=28,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
    )
    return cfg


@pytest.mark.parametrize(
    "meta",
    [
        ModelMeta("Qwen/Qwen3-0.6B", _qwen3_06b_config(), {"BF16": 751_632_384}, source="hub"),
        ModelMeta("Qwen/Qwen3-0.6B", _qwen3_06b_config(), total_bytes=1_503_264_768),
    ],
    ids=["hub_dtype_counts", "index_total_size"],
)
def test_a_stored_head_of_tied_embeddings_is_found_from_the_sizes(meta: ModelMeta) -> None:
    """Qwen3-0.6B stores an lm_head although its embeddings are tied; vLLM skips it (its log:
    "Model loading took 1.12 GiB"). With no tensor names (the Hub's per-dtype counts, an
    index total) the stored size minus the config's shapes is exactly vocab x hidden x 2."""
    filled = meta.with_config_components()
    assert filled.component_bytes["tied_lm_head"] == 151_936 * 1024 * 2
    r = estimate(filled, MI300X, FitOptions())
    assert r.weights.loaded_bytes == 1_192_099_840  # 1.11 GiB
    untied = ModelMeta(meta.model_id, {**meta.config, "tie_word_embeddings": False}, {"BF16": 1})
    assert untied.tied_head_bytes(0) == 0
    off_by_one = ModelMeta(meta.model_id, meta.config, total_bytes=1_503_264_770)
    assert "tied_lm_head" not in off_by_one.with_config_components().component_bytes
