"""The version x platform table of overhead terms (``fit.overhead_table``) held to its sources:
one case per row, from a published log where one shows the row, else from the vLLM source
the row cites."""

from __future__ import annotations

import json
import re

import pytest

from instinct_serve.fit.estimate import FitOptions, HardwareSpec, estimate
from instinct_serve.fit.meta import ModelMeta
from instinct_serve.fit.overhead_table import (
    PLATFORMS,
    ROWS,
    SAMPLER_BYTES_PER_LOGIT,
    RunnerModel,
    model_runner,
    normalise_platform,
    select,
    terms,
)
from tests.infra.paths import CONFIGS

GIB = 2**30

# (term, platform, since, when) -> (a version the row holds for, the evidence)
EVIDENCE: dict[tuple[str, str, str, str], tuple[str, str]] = {
    ("sampler", "cuda", "0", ""): (
        "0.8.5",
        "log, vllm 0.8.5 (SystemPanic/flashinfer-windows#1): 'Currently, FlashInfer top-p & "
        "top-k sampling sampler is disabled because FlashInfer>=v0.2.3 is not backward "
        "compatible. Falling back to the PyTorch-native implementation'",
    ),
    ("sampler", "cuda", "0.9.0", ""): (
        "0.10.1",
        "log, vllm#23278 (0.10.1, pip in a conda env): 65.9651 GiB of weights, -2.14 GiB of KV "
        "at 1024 seqs x 201,088 vocab: the sort path's 36 bytes per logit (case "
        "h100-gpt-oss-120b-v0.10.1)",
    ),
    ("sampler", "cuda", "0.9.0", "VLLM_USE_FLASHINFER_SAMPLER=1"): (
        "0.9.2",
        "source, topk_topp_sampler.py v0.9.0.1: 'elif envs.VLLM_USE_FLASHINFER_SAMPLER is not "
        "False' -> forward_cuda (PR #15777)",
    ),
    ("sampler", "cuda", "0.11.1", ""): ("0.14.0", "source, PR #26859: disabled by default"),
    ("sampler", "cuda", "0.11.1", "VLLM_USE_FLASHINFER_SAMPLER=1"): (
        "0.14.0",
        "source, PR #26859: opt-in via VLLM_USE_FLASHINFER_SAMPLER",
    ),
    ("sampler", "cuda", "0.18.0", ""): (
        "0.19.0",
        "source, v0.18.0 API docs: vllm.v1.sample.ops.topk_topp_triton, apply_top_k_top_p "
        "-> apply_top_k_top_p_triton when HAS_TRITON (PR #33538)",
    ),
    ("sampler", "cuda", "0.18.0", "VLLM_USE_FLASHINFER_SAMPLER=1"): (
        "0.18.2",
        "source, v0.18.2 API docs: 'if envs.VLLM_USE_FLASHINFER_SAMPLER:' -> forward_cuda",
    ),
    ("sampler", "cuda", "0.21.0", ""): (
        "0.27.1",
        "source, topk_topp_sampler.py (2026) flashinfer_sampler_supported: 'The sampler is "
        "on by default' (PR #40376)",
    ),
    ("sampler", "cuda", "0.21.0", "VLLM_USE_FLASHINFER_SAMPLER=0"): (
        "0.32.0",
        "log, aivrar/vllm-windows-build#17 (2026-09): 'FlashInfer top-p/top-k sampling "
        "disabled via VLLM_USE_FLASHINFER_SAMPLER=0.'",
    ),
    ("sampler", "rocm", "0", ""): (
        "0.11.1",
        "log, AMD blog TP2 on MI300X (0.11.1rc2, case mi300x-r1-distill-qwen14b-tp2-v1-0.11.1): "
        "5.3 GiB of profile at 1024 seqs x 152,064 vocab = the sort path",
    ),
    ("sampler", "rocm", "0.12.0", ""): ("0.13.0", "source, PR #26084: native unless aiter on"),
    ("sampler", "rocm", "0.12.0", "VLLM_ROCM_USE_AITER=1"): (
        "0.13.0",
        "source, PR #26084: 'The aiter sampling kernel on the ROCm platform is controlled by "
        "the VLLM_ROCM_USE_AITER master switch'",
    ),
    ("sampler", "rocm", "0.15.0", ""): (
        "0.16.0",
        "source, PR #32413: DISABLE_AITER_SAMPLER = True (even with VLLM_ROCM_USE_AITER=1)",
    ),
    ("sampler", "rocm", "0.18.0", ""): ("0.20.1", "source, PR #33538 (Triton on ROCm too)"),
    ("sampler", "rocm", "0.22.0", ""): (
        "0.23.0",
        "source, topk_topp_sampler.py (2026): forward_native -> apply_top_k_top_p_triton",
    ),
    ("sampler", "rocm", "0.22.0", "VLLM_ROCM_USE_AITER=1"): (
        "0.27.1",
        "source, topk_topp_sampler.py (2026): 'Using aiter sampler on ROCm (lazy import, "
        "sampling-only).' when rocm_aiter_ops.is_enabled() (PR #43331)",
    ),
    ("sampler", "cpu", "0", ""): ("0.32.0", "log, real-vllm-cpu/01: no GPU profile"),
    ("graphs", "cuda", "0", ""): ("0.20.0", "source, gpu_worker.compile_or_warm_up_model"),
    ("graphs", "cuda", "0.21.0", ""): (
        "0.21.0",
        "log text: 'CUDA graph memory profiling is enabled (default since v0.21.0)'",
    ),
    ("graphs", "rocm", "0", ""): ("0.19.0", "source, gpu_worker.compile_or_warm_up_model"),
    ("graphs", "rocm", "0.21.0", ""): ("0.27.1", "source, rocm.py CUDAGraphWrapper (same path)"),
    ("graphs", "cpu", "0", ""): ("0.32.0", "log, real-vllm-cpu/01: cudagraph_mode NONE"),
    ("collectives", "cuda", "0", ""): (
        "0.6.5",
        "log, PR #10511: non_torch 3.58 GiB at TP2 vs 1.79 at TP1 on one H100 build",
    ),
    ("collectives", "cuda", "0.11.0", ""): ("0.11.0", "source, PR #25359: NCCL init first"),
    ("collectives", "rocm", "0", ""): ("0.9.2", "source, V0 worker.py: snapshot before init"),
    ("collectives", "rocm", "0.11.0", ""): ("0.11.1", "source, PR #25359 (gpu_worker.py)"),
    ("collectives", "cpu", "0", ""): ("0.32.0", "source, cpu_worker.py: explicit KV size"),
    ("load", "cuda", "0", ""): (
        "0.6.4",
        "log, RTX 3090 (vllm#10517): 'Loading model weights took 14.9888 GB' = the tensors",
    ),
    ("load", "rocm", "0", ""): (
        "0.9.2",
        "log, MI300X V0 (case mi300x-llama8b-v0-gmu0.9): 15.30 GiB for 14.96 GiB of tensors",
    ),
    ("load", "cpu", "0", ""): ("0.32.0", "source, cpu_worker.py: no device profile"),
    **{
        ("runner", plat, since, ""): (version, evidence)
        for plat in ("cuda", "rocm")
        for since, version, evidence in (
            ("0", "0.21.0", "source, vllm/envs.py v0.21.0: VLLM_USE_V2_MODEL_RUNNER '0'"),
            ("0.22.0", "0.22.0", "source, config/vllm.py v0.22.0: {'Qwen3ForCausalLM'}"),
            ("0.23.0", "0.23.0", "source, config/vllm.py v0.23.0: Llama, Mistral, Qwen3"),
            ("0.24.0", "0.24.0", "source, config/vllm.py v0.24.0: any listed architecture"),
            ("0.25.0", "0.25.0", "source, config/vllm.py v0.25.0: 'or not model_config.is_moe'"),
            ("0.27.1", "0.27.1", "source, config/vllm.py v0.27.1: KimiK3 listed"),
            ("0.28.0", "0.28.0", "source, config/vllm.py v0.28.0: DeepseekV4ForCausalLM listed"),
            ("0.29.0", "0.33.0", "source, config/vllm.py v0.29.0: use_v2_model_runner 'True'"),
        )
    },
    ("runner", "cpu", "0", ""): ("0.32.0", "source, cpu_worker.py: CPUModelRunner"),
}


def _key(row: object) -> tuple[str, str, str, str]:
    return (row.term, row.platform, row.since, row.when)  # type: ignore[attr-defined]


def test_every_row_has_one_case_and_every_case_a_row() -> None:
    assert sorted(_key(r) for r in ROWS) == sorted(EVIDENCE)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: "-".join(x for x in _key(r) if x))
def test_each_row_is_selected_for_its_case_and_cites_vllm(row: object) -> None:
    version, evidence = EVIDENCE[_key(row)]
    assert evidence.startswith(("log", "source"))
    name, _, value = row.when.partition("=")  # type: ignore[attr-defined]
    env = {name: value} if name else {}
    assert select(row.term, version, row.platform, env) == row  # type: ignore[attr-defined]
    assert re.search(r"\.py|PR #\d+|vllm#\d+", row.source)  # type: ignore[attr-defined]


def test_rows_are_one_per_release_and_setting() -> None:
    assert len({_key(r) for r in ROWS}) == len(ROWS)
    assert {r.platform for r in ROWS} == set(PLATFORMS)
    for r in ROWS:
        if r.term == "sampler":
            assert r.value in SAMPLER_BYTES_PER_LOGIT


def test_the_v0_engine_sorts_whatever_the_row() -> None:
    assert terms("0.9.2", "rocm", v0_engine=True).sampler_bytes_per_logit == 36
    assert terms("0.27.1", "cuda").sampler_bytes_per_logit == 12


def test_platform_is_read_in_any_case() -> None:
    assert normalise_platform("ROCm") == "rocm"
    assert normalise_platform(" CUDA ") == "cuda"
    assert normalise_platform("Cpu") == "cpu"
    assert normalise_platform("tpu") is None


def _config_meta(name: str) -> ModelMeta:
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    return ModelMeta.from_config(name, cfg, source="config")


def test_cpu_row_reproduces_the_real_vllm_cpu_log() -> None:
    """real-vllm-cpu/01 (vLLM 0.32.0): 'Explicitly set (1.0/15.09) GiB for KV cache' and
    'CPU KV cache size: 46,592 tokens' for SmolLM2-135M at 2,048 tokens."""
    meta = _config_meta("HuggingFaceTB__SmolLM2-135M-Instruct")
    hw = HardwareSpec(int(15.09 * GIB), 1, None, "cpu", platform="cpu")
    opts = FitOptions(
        vllm_version="0.32.0",
        max_model_len=2048,
        enforce_eager=True,
        env=(("VLLM_CPU_KVCACHE_SPACE", "1"),),
    )
    r = estimate(meta, hw, opts)
    assert r.remaining_bytes == GIB
    assert r.overhead.sampler_bytes == 0 and r.overhead.graph_bytes == 0
    assert r.kv_num_blocks * r.layout.block_size == 46_592


def test_the_sampler_kind_changes_the_charge_on_rocm() -> None:
    """The aiter and Triton kernels charge a third of the sort path (PR #33538's figures)."""
    meta = _config_meta("meta-llama__Meta-Llama-3.1-8B")
    hw = HardwareSpec(192 * GIB, 1, None, "AMD Instinct MI300X", platform="rocm")
    v1 = ("VLLM_USE_V2_MODEL_RUNNER", "0")  # Llama would take the V2 runner on 0.27.1
    old = estimate(meta, hw, FitOptions(vllm_version="0.11.1", max_model_len=8192))
    new = estimate(meta, hw, FitOptions(vllm_version="0.27.1", max_model_len=8192, env=(v1,)))
    aiter = FitOptions(
        vllm_version="0.27.1", max_model_len=8192, env=(("VLLM_ROCM_USE_AITER", "1"), v1)
    )
    on = estimate(meta, hw, aiter)
    assert old.overhead.sampler_bytes == 3 * new.overhead.sampler_bytes
    assert on.overhead.sampler_bytes == new.overhead.sampler_bytes
    assert on.to_dict()["overhead"]["terms"]["sampler"]["value"] == "aiter"
    assert new.to_dict()["overhead"]["terms"]["sampler"]["value"] == "triton"


QWEN2 = ("Qwen2ForCausalLM",)


@pytest.mark.parametrize(
    ("version", "model", "env", "runner"),
    [
        # v0.21.0: opt-in only (VLLM_USE_V2_MODEL_RUNNER defaults to "0")
        ("0.21.0", RunnerModel(QWEN2), {}, "v1"),
        ("0.21.0", RunnerModel(QWEN2), {"VLLM_USE_V2_MODEL_RUNNER": "1"}, "v2"),
        # v0.23.0: listed, dense and unquantized
        ("0.23.0", RunnerModel(("LlamaForCausalLM",)), {}, "v2"),
        ("0.23.0", RunnerModel(("LlamaForCausalLM",), quantized=True), {}, "v1"),
        ("0.23.0", RunnerModel(QWEN2), {}, "v1"),
        # v0.24.0: listed, MoE included
        ("0.24.0", RunnerModel(("Qwen2MoeForCausalLM",), moe=True), {}, "v2"),
        # v0.25.0-v0.28.0: listed, or dense and neither hybrid nor attention-free
        ("0.27.1", RunnerModel(QWEN2), {}, "v2"),
        ("0.27.1", RunnerModel(QWEN2), {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "v1"),
        ("0.27.1", RunnerModel(("Qwen3MoeForCausalLM",), moe=True), {}, "v1"),
        ("0.25.0", RunnerModel(("Qwen3_5ForConditionalGeneration",), hybrid=True), {}, "v1"),
        ("0.28.0", RunnerModel(("GptOssForCausalLM",), moe=True), {}, "v1"),
        # v0.29.0: every model
        ("0.29.0", RunnerModel(("GptOssForCausalLM",), moe=True), {}, "v2"),
    ],
)
def test_the_default_model_runner_follows_vllm_config(
    version: str, model: RunnerModel, env: dict[str, str], runner: str
) -> None:
    assert model_runner(version, "cuda", env, model)[0] == runner


def test_rocm_keeps_deepseek_v4_on_the_v1_runner_from_0_29() -> None:
    """v0.29.0 ROCM_DEFAULT_MRV1_ARCHITECTURES = {DeepseekV32ForCausalLM, DeepseekV4ForCausalLM}."""
    v4 = RunnerModel(("DeepseekV4ForCausalLM",), moe=True)
    assert model_runner("0.29.0", "rocm", {}, v4)[0] == "v1"
    assert model_runner("0.29.0", "cuda", {}, v4)[0] == "v2"


def test_the_v2_runner_charges_no_graphs_before_0_29_and_the_default_sampler_pass_before_0_33() -> (
    None
):
    """v1/worker/gpu/model_runner.py: profile_cudagraph_memory 'return 0' in v0.21.0-v0.28.0,
    _profile_cudagraph_memory from v0.29.0; the sampler's 'Warmup-param pass' from v0.33.0.
    The RTX 4090 logs of v0.27.1 (cases rtx4090-qwen2.5-0.5b-*) agree: the available KV is
    the budget less the consumed memory and the peak activation, no graph term."""
    meta = _config_meta("Qwen__Qwen3-8B")  # Qwen3ForCausalLM: dense
    hw = HardwareSpec(int(23.99 * GIB), 1, None, "NVIDIA GeForce RTX 4090", platform="cuda")
    by_version = {
        v: estimate(meta, hw, FitOptions(vllm_version=v, max_model_len=8192))
        for v in ("0.27.1", "0.29.0", "0.33.0")
    }
    old, graphs, full = (by_version[v].overhead for v in ("0.27.1", "0.29.0", "0.33.0"))
    assert old.graph_bytes == 0 and graphs.graph_bytes > 0 and full.graph_bytes > 0
    assert any("V2 model runner" in n for n in old.notes)
    assert not any("V2 model runner" in n for n in graphs.notes)
    assert old.table.sampler_kind == graphs.table.sampler_kind == "v2_default"
    assert full.table.sampler_kind == "flashinfer"
    assert full.sampler_bytes == 6 * old.sampler_bytes
    v1 = FitOptions(
        vllm_version="0.27.1", max_model_len=8192, env=(("VLLM_USE_V2_MODEL_RUNNER", "0"),)
    )
    forced = estimate(meta, hw, v1).overhead
    assert forced.graph_bytes > 0 and forced.table.sampler_kind == "flashinfer"
