"""Local model directories and the HF cache: safetensors headers read from real files."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.fit.estimate import FitOptions, HardwareSpec, estimate
from instinct_serve.fit.safetensors_header import read_header
from instinct_serve.gather.model_dir import read_local_dir
from instinct_serve.gather.model_meta import load_model_meta
from tests.fit.st_files import write_index, write_safetensors
from tests.infra.paths import CONFIGS

GIB = 2**30


def small_config(**extra: Any) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 256,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        **extra,
    }


def test_header_reader_several_dtypes(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    written = write_safetensors(
        path,
        {
            "a.weight": ("BF16", (4, 8)),
            "a.scale": ("F32", (4,)),
            "b.weight": ("F8_E4M3", (16, 8)),
            "c.blocks": ("U8", (3, 5)),
            "d.qweight": ("I32", (2, 3)),
            "e.packed": ("F4", (4, 6)),
        },
    )
    table = {t.name: t for t in read_header(path)}
    assert table["a.weight"].dtype == "BF16" and table["a.weight"].nbytes == 64
    assert table["b.weight"].dtype == "F8_E4M3" and table["b.weight"].nbytes == 128
    assert table["e.packed"].dtype == "F4" and table["e.packed"].elements == 24
    assert table["e.packed"].nbytes == 12  # two FP4 values per byte
    assert sum(t.nbytes for t in table.values()) == written


def test_sharded_directory_with_index(tmp_path: Path) -> None:
    cfg = small_config(tie_word_embeddings=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shard1 = {
        "model.embed_tokens.weight": ("BF16", (256, 64)),
        "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", (64, 128)),
        "model.layers.0.mlp.down_proj.weight_scale": ("F32", (1,)),
    }
    shard2 = {
        "lm_head.weight": ("BF16", (256, 64)),  # a duplicate of the tied embeddings
        "model.visual.blocks.0.attn.qkv.weight": ("BF16", (96, 32)),
        "mtp.layers.0.mlp.up_proj.weight": ("BF16", (128, 64)),
    }
    b1 = write_safetensors(tmp_path / "model-00001-of-00002.safetensors", shard1)
    b2 = write_safetensors(tmp_path / "model-00002-of-00002.safetensors", shard2)
    weight_map = {n: "model-00001-of-00002.safetensors" for n in shard1}
    weight_map |= {n: "model-00002-of-00002.safetensors" for n in shard2}
    write_index(tmp_path, weight_map, b1 + b2)

    meta = read_local_dir(tmp_path)
    assert meta.source == "local_dir" and meta.weights_source == "safetensors_headers"
    assert meta.dtype_counts == {
        "BF16": 256 * 64 * 2 + 96 * 32 + 128 * 64,
        "F32": 1,
        "F8_E4M3": 64 * 128,
    }
    assert meta.checkpoint_bytes == b1 + b2
    assert meta.component_bytes == {
        "tied_lm_head": 256 * 64 * 2,
        "vision": 96 * 32 * 2,
        "mtp": 128 * 64 * 2,
    }
    hw = HardwareSpec(64 * GIB)
    report = estimate(meta, hw, FitOptions(language_model_only=True))
    # vLLM skips the tied duplicate, the MTP layer and (text only) the vision tower
    assert report.weights.loaded_bytes == b1 + b2 - sum(meta.component_bytes.values())


def test_index_without_shards_uses_total_size(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(small_config()))
    write_index(tmp_path, {"x": "model-00001-of-00009.safetensors"}, 123_456_789)
    meta = read_local_dir(tmp_path)
    assert meta.weights_source == "index_total_size"
    assert meta.dtype_counts is None and meta.checkpoint_bytes == 123_456_789


def test_config_only_directory_counts_known_shapes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "Qwen__Qwen3-8B.json").read_text())
    meta = load_model_meta(str(tmp_path))
    assert meta.weights_source == "config_shapes"
    assert meta.dtype_counts == {"BF16": 8_190_735_360}


def test_config_only_unknown_family_cannot_be_sized(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        (CONFIGS / "facebook__opt-125m.OPTConfig-printout.json").read_text()
    )
    meta = read_local_dir(tmp_path)
    assert meta.checkpoint_bytes is None
    with pytest.raises(InstinctError) as err:
        estimate(meta, HardwareSpec(64 * GIB))
    assert err.value.id == "weights_unknown"


def test_corrupt_header_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(small_config()))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(UsageError) as err:
        read_local_dir(tmp_path)
    assert err.value.id == "bad_safetensors"


def test_not_a_model_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as err:
        load_model_meta(str(tmp_path))
    assert err.value.id == "no_config"
    with pytest.raises(UsageError) as err:
        load_model_meta(str(tmp_path / "missing"))
    assert err.value.id == "not_a_model_dir"


def test_hf_cache_snapshot_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "hub" / "models--acme--tiny"
    snap = repo / "snapshots" / sha
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(sha)
    (snap / "config.json").write_text(json.dumps(small_config()))
    written = write_safetensors(snap / "model.safetensors", {"w": ("BF16", (1000, 10))})
    meta = load_model_meta("acme/tiny")
    assert meta.source == "hf_cache" and meta.model_id == "acme/tiny"
    assert meta.weights_source == "safetensors_headers" and meta.checkpoint_bytes == written
