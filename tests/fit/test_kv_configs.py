"""KV bytes per token for every real config in tests/fixtures/configs, per attention kind.

Each expectation is written from the formula next to the config fields it uses, never
computed by the code under test: full attention ``2 x kv_heads x head_dim x layers x 2``
(bf16), MLA ``(kv_lora_rank + qk_rope_head_dim) x layers x 2`` (one latent, no factor 2),
sliding-window layers reported apart, recurrent layers as a per-sequence state.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.kv import LayerKind, describe_layers, kv_layout
from tests.infra.paths import CONFIGS


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return doc


def per_kind(name: str) -> dict[str, int]:
    return describe_layers(ModelConfig(load(name))).bytes_per_token_by_kind(2)


def test_every_fixture_config_is_covered() -> None:
    covered = {
        "Qwen__Qwen3-8B",
        "Qwen__Qwen3-235B-A22B",
        "Qwen__Qwen3-Next-80B-A3B-Thinking",
        "Qwen__Qwen3.5-27B",
        "openai__gpt-oss-120b",
        "deepseek-ai__DeepSeek-V3",
        "moonshotai__Kimi-K2-Instruct",
        "meta-llama__Meta-Llama-3.1-8B",
        "facebook__opt-125m.OPTConfig-printout",
        "HuggingFaceTB__SmolLM2-135M-Instruct",
    }
    assert {p.stem for p in CONFIGS.glob("*.json")} == covered


def test_smollm2_135m_as_the_real_vllm_sized_it() -> None:
    # 3 KV heads of 64, 30 layers, bf16: 23,040 bytes per token; vLLM 0.32's CPU backend
    # made 1 GiB of it 46,592 tokens (tests/fixtures/logs/real-vllm-cpu/01, tests/plan/test_cpu.py)
    assert per_kind("HuggingFaceTB__SmolLM2-135M-Instruct") == {"full_attention": 23_040}


def test_qwen3_8b_full_gqa() -> None:
    # num_key_value_heads 8, head_dim 128, num_hidden_layers 36, bf16
    assert per_kind("Qwen__Qwen3-8B") == {"full_attention": 2 * 8 * 128 * 36 * 2}


def test_qwen3_235b_full_gqa() -> None:
    # num_key_value_heads 4, head_dim 128, num_hidden_layers 94
    assert per_kind("Qwen__Qwen3-235B-A22B") == {"full_attention": 2 * 4 * 128 * 94 * 2}


def test_llama_31_8b_full_gqa_head_dim_from_hidden() -> None:
    # no head_dim: hidden_size 4096 / num_attention_heads 32 = 128; kv heads 8; 32 layers
    assert per_kind("meta-llama__Meta-Llama-3.1-8B") == {"full_attention": 2 * 8 * 128 * 32 * 2}


def test_opt_125m_mha_without_dtype() -> None:
    # no num_key_value_heads: MHA with num_attention_heads 12; head_dim 768 / 12 = 64;
    # 12 layers; no torch_dtype: served in 16 bits
    cfg = ModelConfig(load("facebook__opt-125m.OPTConfig-printout"))
    layers = describe_layers(cfg)
    assert layers.bytes_per_token_by_kind(2) == {"full_attention": 2 * 12 * 64 * 12 * 2}
    assert layers.attention_kind == "full_attention (MHA)"


def test_gpt_oss_sliding_layers_do_not_grow_with_context() -> None:
    # layer_types: 18 sliding_attention + 18 full_attention; kv heads 8, head_dim 64
    kinds = per_kind("openai__gpt-oss-120b")
    assert kinds == {"sliding_window": 2 * 8 * 64 * 18 * 2, "full_attention": 2 * 8 * 64 * 18 * 2}
    layers = describe_layers(ModelConfig(load("openai__gpt-oss-120b")))
    assert layers.context_bytes_per_token(2) == 2 * 8 * 64 * 18 * 2  # full layers only


def test_gpt_oss_sliding_window_reservation_follows_vllm() -> None:
    # SlidingWindowSpec: cdiv(min(window - 1 + mnbt, L), block) + 1 blocks per request;
    # sliding_window 128, mnbt 8192, block 16 -> 521 blocks (notes §1.2), full: L / 16
    layers = describe_layers(ModelConfig(load("openai__gpt-oss-120b")))
    lay = kv_layout(layers, tp=1, kv_dtype_bytes=2, max_num_batched_tokens=8192)
    assert lay.block_size == 16
    assert lay.group_size == 18 and lay.num_groups == 2
    assert lay.blocks_per_request(131072) == 131072 // 16 + 521
    assert lay.blocks_per_request(100) == 7 + (7 + 1)  # short requests: the window is capped by L


@pytest.mark.parametrize("name", ["deepseek-ai__DeepSeek-V3", "moonshotai__Kimi-K2-Instruct"])
def test_mla_one_latent_per_layer(name: str) -> None:
    # kv_lora_rank 512 + qk_rope_head_dim 64 = 576 per layer, 61 layers, no factor 2:
    # 70,272 B/token (notes §1.3), not 2 x 576 x 61 x 2 and not num_key_value_heads (128)
    assert per_kind(name) == {"mla": 576 * 61 * 2}
    assert 576 * 61 * 2 == 70_272


def test_mla_is_not_divided_by_tp() -> None:
    # MLAAttentionSpec: get_num_kv_heads() is 1 on every rank whatever the TP size
    layers = describe_layers(ModelConfig(load("deepseek-ai__DeepSeek-V3")))
    for tp in (1, 8, 16):
        lay = kv_layout(layers, tp=tp, kv_dtype_bytes=2, max_num_batched_tokens=8192)
        assert lay.attention_bytes_per_token == 576 * 2
    assert describe_layers(
        ModelConfig(load("deepseek-ai__DeepSeek-V3")), include_mtp=True
    ).counts() == {"mla": 62}  # the MTP layer adds one latent layer when it is loaded


def test_qwen3_next_hybrid() -> None:
    # full_attention_interval 4 over 48 layers: 12 full layers, kv heads 2, head_dim 256;
    # 36 gated-delta-net layers hold a state: conv (2*16*128 + 32*128 = 8192 channels x 3)
    # bf16 + ssm (32 value heads x 128 x 128) bf16 (no mamba_ssm_dtype in this config)
    layers = describe_layers(ModelConfig(load("Qwen__Qwen3-Next-80B-A3B-Thinking")))
    assert layers.counts() == {"mamba": 36, "full_attention": 12}
    assert layers.context_bytes_per_token(2) == 2 * 2 * 256 * 12 * 2
    assert layers.recurrent_state_bytes() == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 2)


@pytest.mark.parametrize(("tp", "block"), [(1, 544), (4, 272), (8, 144)])
def test_qwen3_next_block_size_per_tp(tp: int, block: int) -> None:
    # HybridAttentionMambaModelConfig: block = 16 * cdiv(mamba_page, 16 * attn_page_1tok).
    # TP1: 1,097,728 / 2,048 -> 544 (vllm PR #32492 "non-standard block size (544)");
    # TP4/TP8: the 2 KV heads are replicated (1 per rank), the state is divided.
    layers = describe_layers(ModelConfig(load("Qwen__Qwen3-Next-80B-A3B-Thinking")))
    lay = kv_layout(layers, tp=tp, kv_dtype_bytes=2, max_num_batched_tokens=8192)
    assert lay.block_size == block


def test_qwen35_27b_hybrid_multimodal_text_config() -> None:
    # text_config: layer_types 48 linear_attention + 16 full_attention, kv heads 4,
    # head_dim 256; conv channels 2*16*128 + 48*128 = 10240 x 3 in bf16, ssm state
    # 48 x 128 x 128 in float32 (mamba_ssm_dtype)
    layers = describe_layers(ModelConfig(load("Qwen__Qwen3.5-27B")))
    assert layers.bytes_per_token_by_kind(2) == {"full_attention": 2 * 4 * 256 * 16 * 2}
    assert layers.recurrent_state_bytes() == 48 * (10240 * 3 * 2 + 48 * 128 * 128 * 4)
    assert layers.attention_kind == "hybrid (full_attention + gated_delta_net)"


def test_qwen35_27b_reproduces_the_v019_log() -> None:
    # vllm#40691, v0.19.0, L=32768: "GPU KV cache size: 290,864 tokens", 33.04x.
    # block = 16 * cdiv(3,207,168, 16 * 4,096) = 784; groups of 16: 1 attention + 3 state;
    # old formula num_blocks // 4 * 784 pins num_blocks // 4 = 371; the concurrency
    # 1487 / (cdiv(32768, 784) + 3 x 1) = 33.04 then confirms the per-request blocks.
    layers = describe_layers(ModelConfig(load("Qwen__Qwen3.5-27B")))
    lay = kv_layout(layers, tp=1, kv_dtype_bytes=2, max_num_batched_tokens=16384)
    assert lay.block_size == 784
    assert (lay.group_size, lay.num_groups) == (16, 4)
    assert lay.kv_tokens(1487, 32768, "blocks") == 290_864
    assert round(lay.max_concurrency(1487, 32768), 2) == 33.04


def test_fp8_kv_halves_attention_but_not_recurrent_state() -> None:
    layers = describe_layers(ModelConfig(load("Qwen__Qwen3.5-27B")))
    bf16 = kv_layout(layers, tp=1, kv_dtype_bytes=2, max_num_batched_tokens=8192)
    fp8 = kv_layout(layers, tp=1, kv_dtype_bytes=1, max_num_batched_tokens=8192)
    assert fp8.attention_bytes_per_token * 2 == bf16.attention_bytes_per_token
    assert fp8.recurrent_page_bytes == bf16.recurrent_page_bytes


@pytest.mark.parametrize(("tp", "heads_per_rank"), [(1, 8), (2, 4), (8, 1), (16, 1)])
def test_gqa_heads_replicated_past_tp(tp: int, heads_per_rank: int) -> None:
    # Qwen3-8B has 8 KV heads: at TP16 each rank keeps one whole head (not half of one)
    layers = describe_layers(ModelConfig(load("Qwen__Qwen3-8B")))
    lay = kv_layout(layers, tp=tp, kv_dtype_bytes=2, max_num_batched_tokens=8192)
    assert lay.attention_bytes_per_token == 2 * heads_per_rank * 128 * 2
    assert lay.bytes_for_request(16) == 36 * 16 * 2 * heads_per_rank * 128 * 2


def test_layer_kinds_of_other_families() -> None:
    # Gemma 3: sliding_window_pattern 6 (5 local : 1 global)
    gemma = {
        "model_type": "gemma3_text",
        "num_hidden_layers": 12,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
    }
    assert describe_layers(ModelConfig(gemma)).counts() == {
        "sliding_window": 10,
        "full_attention": 2,
    }
    # Llama 4: RoPE layers use chunked local attention, every 4th (NoPE) is global
    llama4 = {
        "model_type": "llama4_text",
        "num_hidden_layers": 8,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "attention_chunk_size": 8192,
    }
    counts = describe_layers(ModelConfig(llama4)).counts()
    assert counts == {LayerKind.CHUNKED.value: 6, LayerKind.FULL.value: 2}
    # Nemotron-H: hybrid_override_pattern, M = mamba2, * = attention, - = MLP only
    nemo = {
        "model_type": "nemotron_h",
        "num_hidden_layers": 6,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hybrid_override_pattern": "M-M*-M",
        "mamba_num_heads": 8,
        "mamba_head_dim": 32,
        "ssm_state_size": 16,
        "n_groups": 2,
        "conv_kernel": 4,
    }
    nemo_layers = describe_layers(ModelConfig(nemo))
    assert nemo_layers.counts() == {"mamba": 3, "full_attention": 1}
    # conv: (8*32 + 2*2*16) channels x 3, ssm: 8 heads x 32 x 16, both bf16
    assert nemo_layers.recurrent_state_bytes() == 3 * ((256 + 64) * 3 * 2 + 8 * 32 * 16 * 2)
