#!/usr/bin/env python3
"""Build the model metadata shipped in ``src/instinct_serve/data/models/``.

Each file holds the ``config.json`` essentials (the keys ``fit`` reads) and the stored
elements per safetensors dtype, with a ``source`` saying where both came from, so that
``instinct fit`` and ``instinct plan`` work offline on a fresh install.

Two ways to get the per-dtype counts:

* default (offline): computed from the config's tensor shapes with
  ``instinct_serve.fit.params`` (exact for the families it models), and checked against
  the published figure named in ``CHECKS`` (the build fails on a mismatch);
* ``--from-hub``: the Hub's ``safetensors.parameters`` and the real ``config.json``
  (needs network; ``HF_TOKEN`` for gated models). Shape counts are compared and any
  difference is printed.

Usage: ``python scripts/build_model_metadata.py [--from-hub] [--check]``; ``--check``
only verifies that the shipped files are what this script would write.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from instinct_serve.fit.dtypes import dtype_bytes  # noqa: E402
from instinct_serve.fit.meta import SHAPES_TEXT  # noqa: E402
from instinct_serve.fit.params import count_parameters  # noqa: E402

OUT = REPO / "src" / "instinct_serve" / "data" / "models"
FIXTURES = REPO / "tests" / "fixtures" / "configs"
AIC = "ai-dynamo/aiconfigurator model_configs (verbatim HF config.json, tests/fixtures/SOURCES.md)"

# Keys of config.json that fit reads; everything else (token ids, rope details) is dropped.
KEEP = {
    "architectures",
    "model_type",
    "torch_dtype",
    "dtype",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "layer_types",
    "sliding_window",
    "use_sliding_window",
    "full_attention_interval",
    "linear_conv_kernel_dim",
    "linear_key_head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_value_head_dim",
    "mamba_ssm_dtype",
    "mtp_num_hidden_layers",
    "mtp_use_dedicated_embeddings",
    "num_nextn_predict_layers",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "n_routed_experts",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "topk_method",
    "decoder_sparse_step",
    "mlp_only_layers",
    "quantization_config",
    "attention_bias",
    "attn_output_gate",
    "text_config",
    "vision_config",
}


def fixture(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return doc


def essentials(config: dict[str, Any]) -> dict[str, Any]:
    out = {k: copy.deepcopy(v) for k, v in config.items() if k in KEEP}
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = {k: v for k, v in out["text_config"].items() if k in KEEP}
    return out


def qwen35_9b() -> dict[str, Any]:
    """Qwen/Qwen3.5-9B: the 27B config's family shape with the 9B dimensions."""
    cfg = fixture("Qwen__Qwen3.5-27B")
    text = cfg["text_config"]
    text.update(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=32,
        num_attention_heads=16,
        num_key_value_heads=4,
        linear_num_value_heads=32,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 8,
    )
    cfg["vision_config"]["out_hidden_size"] = 4096
    return cfg


def gpt_oss_20b() -> dict[str, Any]:
    cfg = fixture("openai__gpt-oss-120b")
    cfg.update(num_hidden_layers=24, num_local_experts=32, layer_types=cfg["layer_types"][:24])
    return cfg


def llama_33_70b() -> dict[str, Any]:
    cfg = fixture("meta-llama__Meta-Llama-3.1-8B")
    cfg.update(
        hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64
    )
    return cfg


def qwen3_235b_2507() -> dict[str, Any]:
    cfg = fixture("Qwen__Qwen3-235B-A22B")
    cfg["max_position_embeddings"] = 262144
    return cfg


# model id -> (config builder, where the config comes from, published figure checked, gated)
MODELS: dict[str, tuple[Any, str, tuple[str, int] | None, bool]] = {
    "Qwen/Qwen3.5-9B": (
        qwen35_9b,
        "Qwen3.5-27B config.json (" + AIC + ") with the 9B dimensions of Qwen/Qwen3.5-9B's "
        "config.json as quoted by a public test fixture (checkpoint revision c2022362)",
        (
            "index total_size bytes (model.safetensors.index.json, revision c2022362)",
            19_306_216_416,
        ),
        False,
    ),
    "Qwen/Qwen3.5-27B": (lambda: fixture("Qwen__Qwen3.5-27B"), AIC, None, False),
    "Qwen/Qwen3-8B": (
        lambda: fixture("Qwen__Qwen3-8B"),
        AIC,
        ("parameters (Hub model card: 8.19B)", 8_190_735_360),
        False,
    ),
    "Qwen/Qwen3-235B-A22B-Instruct-2507": (
        qwen3_235b_2507,
        "Qwen3-235B-A22B config.json (" + AIC + ") with the 2507 release's 262,144 context",
        ("parameters (Hub: 235B)", 235_093_634_560),
        False,
    ),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": (
        lambda: fixture("Qwen__Qwen3-Next-80B-A3B-Thinking"),
        "Qwen3-Next-80B-A3B-Thinking config.json (same architecture; " + AIC + "); MTP "
        "weights are not in the config and not counted (vLLM skips them without MTP)",
        ("parameters without MTP (published total of the Qwen3-Next architecture)", 79_674_391_296),
        False,
    ),
    "meta-llama/Llama-3.1-8B-Instruct": (
        lambda: fixture("meta-llama__Meta-Llama-3.1-8B"),
        "Meta-Llama-3.1-8B config.json (identical shapes; " + AIC + ")",
        ("BF16 parameters (Hub safetensors.parameters)", 8_030_261_248),
        True,
    ),
    "meta-llama/Llama-3.3-70B-Instruct": (
        llama_33_70b,
        "Llama-3.1 config.json family with the 70B dimensions "
        "(h 8192, I 28672, 80 layers, 64 heads)",
        ("BF16 parameters (Hub: 70.6B)", 70_553_706_496),
        True,
    ),
    "openai/gpt-oss-120b": (
        lambda: fixture("openai__gpt-oss-120b"),
        AIC,
        ("checkpoint bytes (65.25 GB, notes/vllm-memory.md §3.2)", 65_248_815_744),
        False,
    ),
    "openai/gpt-oss-20b": (
        gpt_oss_20b,
        "gpt-oss-120b config.json with the 20b's 24 layers and 32 experts",
        ("checkpoint bytes (13.76 GB, notes/vllm-memory.md §3.2)", 13_761_264_768),
        False,
    ),
    "deepseek-ai/DeepSeek-V3": (
        lambda: fixture("deepseek-ai__DeepSeek-V3"),
        AIC,
        ("parameters incl. the MTP layer (Hub: 684.5B; 671B without MTP)", 684_531_386_000),
        False,
    ),
    "deepseek-ai/DeepSeek-R1": (
        lambda: fixture("deepseek-ai__DeepSeek-V3"),
        "DeepSeek-V3 config.json (" + AIC + "): R1 has the V3 architecture and shapes",
        ("parameters incl. the MTP layer (Hub: 684.5B)", 684_531_386_000),
        False,
    ),
    "moonshotai/Kimi-K2-Instruct": (
        lambda: fixture("moonshotai__Kimi-K2-Instruct"),
        AIC,
        None,
        False,
    ),
}


def build(model_id: str, from_hub: bool) -> dict[str, Any]:
    builder, config_source, check, gated = MODELS[model_id]
    config = builder()
    counted = count_parameters(config)
    counts = counted.dtype_counts
    source = f"config: {config_source}; parameters: {SHAPES_TEXT}"
    if check is not None:
        what, expected = check
        got = (
            dtype_bytes(counts)
            if "bytes" in what
            else (counts.get("BF16", 0) if what.startswith("BF16") else sum(counts.values()))
        )
        if got != expected:
            raise SystemExit(f"{model_id}: {what} is {got:,}, expected {expected:,}")
        source += f", equal to the published {what} {expected:,}"
    revision = None
    if from_hub:
        from instinct_serve.gather.model_meta import fetch_hub_meta

        live = fetch_hub_meta(model_id)
        config = live.config
        revision = live.revision
        if live.dtype_counts and live.dtype_counts != counts:
            print(f"{model_id}: Hub counts {live.dtype_counts} differ from shapes {counts}")
        counts = live.dtype_counts or counts
        source = f"config and parameters: Hub API at revision {revision}"
    parts = {k: v for k, v in counted.component_bytes().items() if k != "language"}
    return {
        "model_id": model_id,
        "source": source,
        "revision": revision,
        "gated": gated,
        "config": essentials(config),
        "safetensors": {"parameters": counts, "total_bytes": dtype_bytes(counts)},
        "component_bytes": parts,
        "components_source": "config_shapes",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-hub", action="store_true", help="read counts from the Hub")
    parser.add_argument("--check", action="store_true", help="verify the shipped files only")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    stale = []
    for model_id in MODELS:
        doc = build(model_id, args.from_hub)
        path = OUT / (model_id.replace("/", "--") + ".json")
        text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
            continue
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)} ({doc['safetensors']['total_bytes'] / 1e9:.2f} GB)")
    if stale:
        print("stale shipped metadata: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
