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
    old = estimate(meta, hw, FitOptions(vllm_version="0.11.1", max_model_len=8192))
    new = estimate(meta, hw, FitOptions(vllm_version="0.27.1", max_model_len=8192))
    aiter = FitOptions(
        vllm_version="0.27.1", max_model_len=8192, env=(("VLLM_ROCM_USE_AITER", "1"),)
    )
    on = estimate(meta, hw, aiter)
    assert old.overhead.sampler_bytes == 3 * new.overhead.sampler_bytes
    assert on.overhead.sampler_bytes == new.overhead.sampler_bytes
    assert on.to_dict()["overhead"]["terms"]["sampler"]["value"] == "aiter"
    assert new.to_dict()["overhead"]["terms"]["sampler"]["value"] == "triton"
