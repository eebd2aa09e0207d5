"""Parameter counts from config shapes against published per-dtype figures, and the
metadata shipped for offline use."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from instinct_serve.fit.dtypes import dtype_bytes
from instinct_serve.fit.params import UnsupportedArchitecture, count_parameters
from instinct_serve.fit.shipped import load_shipped, shipped_model_ids
from tests.infra.paths import CONFIGS, REPO


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return doc


def test_deepseek_v3_matches_the_hub_per_dtype_counts() -> None:
    # Hub safetensors.parameters of deepseek-ai/DeepSeek-V3 (684.5B with the MTP layer)
    counts = count_parameters(load("deepseek-ai__DeepSeek-V3")).dtype_counts
    assert counts == {"BF16": 3_918_786_560, "F32": 41_555_600, "F8_E4M3": 680_571_043_840}


def test_deepseek_v3_mtp_layer_is_its_own_component() -> None:
    parts = count_parameters(load("deepseek-ai__DeepSeek-V3")).components
    language = sum(parts["language"].values())
    assert language == 671_067_257_432  # the "671B" without the MTP layer


def test_gpt_oss_120b_mxfp4_counts() -> None:
    # Hub: BF16 2,167,371,072 and U8 (FP4 pairs + E8M0 scales) -> 65.25 GB stored
    p = count_parameters(load("openai__gpt-oss-120b"))
    assert p.dtype_counts == {"BF16": 2_167_371_072, "U8": 60_914_073_600}
    assert p.total_bytes == 65_248_815_744


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("meta-llama__Meta-Llama-3.1-8B", 8_030_261_248),
        ("Qwen__Qwen3-8B", 8_190_735_360),
        ("Qwen__Qwen3-235B-A22B", 235_093_634_560),
    ],
)
def test_dense_and_moe_totals(name: str, expected: int) -> None:
    assert count_parameters(load(name)).dtype_counts == {"BF16": expected}


def test_qwen35_9b_matches_the_index_total_size() -> None:
    shipped = load_shipped("Qwen/Qwen3.5-9B")
    assert shipped is not None
    assert shipped.checkpoint_bytes == 19_306_216_416  # model.safetensors.index.json
    assert set(shipped.component_bytes) == {"vision", "mtp"}


def test_unmodelled_families_are_refused() -> None:
    with pytest.raises(UnsupportedArchitecture):
        count_parameters(load("facebook__opt-125m.OPTConfig-printout"))
    gptq = load("Qwen__Qwen3-8B") | {"quantization_config": {"quant_method": "gptq"}}
    with pytest.raises(UnsupportedArchitecture):
        count_parameters(gptq)


def test_shipped_metadata_covers_the_default_and_is_consistent() -> None:
    ids = shipped_model_ids()
    assert "Qwen/Qwen3.5-9B" in ids and len(ids) >= 10
    for model_id in ids:
        meta = load_shipped(model_id)
        assert meta is not None and meta.model_id == model_id
        assert meta.source == "shipped" and meta.source_detail  # says where it came from
        assert meta.dtype_counts and meta.checkpoint_bytes == dtype_bytes(meta.dtype_counts)


def test_shipped_files_are_what_the_build_script_writes() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_model_metadata.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
