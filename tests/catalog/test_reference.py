"""AMD's reference configs: the master YAML and launch-script parsers, the shipped snapshot
(rebuilt from its source when the shared InferenceX directory is there), the cache rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from instinct_serve.catalog.reference import (
    ReferenceConfig,
    gpu_of,
    parse_launch,
    parse_master,
    references_from_doc,
    script_candidates,
)
from instinct_serve.gather import reference as gather_reference

MASTER = {
    "gptoss-fp4-mi300x-vllm": {
        "image": "vllm/vllm-openai-rocm:v0.17.0",
        "model": "openai/gpt-oss-120b",
        "model-prefix": "gptoss",
        "runner": "mi300x",
        "precision": "fp4",
        "framework": "vllm",
        "multinode": False,
        "scenarios": {
            "fixed-seq-len": [
                {
                    "isl": 1024,
                    "osl": 1024,
                    "search-space": [
                        {"tp": 1, "conc-start": 4, "conc-end": 128},
                        {"tp": 8, "ep": 8, "dp-attn": True, "conc-start": 64, "conc-end": 256},
                    ],
                }
            ]
        },
    },
    "dsv4-fp8-mi325x-vllm-mtp": {
        "image": "x",
        "model": "deepseek-ai/DeepSeek-V4-Pro",
        "model-prefix": "dsv4",
        "runner": "cluster:mi325x-tw",
        "precision": "fp8",
        "framework": "vllm",
        "scenarios": {
            "fixed-seq-len": [
                {"isl": 8192, "osl": 1024, "search-space": [{"tp": 8, "spec-decoding": "mtp"}]}
            ]
        },
    },
}

SCRIPT = """#!/usr/bin/env bash
source "$(dirname "$0")/../../benchmark_lib.sh"
if [[ "$MODEL" != /* ]]; then hf download "$MODEL"; fi
version=`rocm-smi --showfw | grep MEC | head -n 1 |  awk '{print $NF}'`
if [[ "$version" == "" || $version -lt 177 ]]; then
  export HSA_NO_SCRATCH_RECLAIM=1
fi
if [ -n "$ROCR_VISIBLE_DEVICES" ]; then
    export HIP_VISIBLE_DEVICES="$ROCR_VISIBLE_DEVICES"
fi
export AMDGCN_USE_BUFFER_OPS=0
export VLLM_ROCM_USE_AITER=1
export EVAL_CONCURRENT_REQUESTS=8
ATTN_BACKEND="--attention-backend ROCM_AITER_UNIFIED_ATTN"
BLOCK=32
if [ "$CONC" -lt 64 ]; then
  BLOCK=16
fi
if [ "$EP_SIZE" -gt 1 ]; then
  EP=" --enable-expert-parallel"
fi
DRAFT="org/draft"
set -x
vllm serve $MODEL --port $PORT \\
  $ATTN_BACKEND $EP \\
  --tensor-parallel-size=$TP \\
  --gpu-memory-utilization 0.95 \\
  --max-model-len $MAX_MODEL_LEN \\
  --block-size=$BLOCK \\
  --speculative-config "{\\"model\\": \\"$DRAFT\\", \\"n\\": 3}" \\
  --no-enable-prefix-caching > $SERVER_LOG 2>&1 &
"""


def test_master_rows_gpu_and_speculative() -> None:
    configs = parse_master(MASTER, "configs/amd-master.yaml")
    gpt, dsv4 = configs
    assert (gpt.gpu, gpt.prefix, gpt.precision) == ("mi300x", "gptoss", "fp4")
    assert [(r.tp, r.ep, r.dp_attn) for r in gpt.rows] == [(1, 1, False), (8, 8, True)]
    assert gpt.rows[0].conc == (4, 128) and gpt.rows[0].isl == 1024
    assert dsv4.gpu == "mi325x" and dsv4.speculative and not gpt.speculative
    assert gpu_of("mi355x-disagg") == "mi355x" and gpu_of("b200") is None


def test_script_candidates_follow_the_naming() -> None:
    gpt, dsv4 = parse_master(MASTER, "f")
    assert script_candidates(gpt) == [
        "benchmarks/single_node/fixed_seq_len/gptoss_fp4_mi300x_vllm.sh",
        "benchmarks/single_node/fixed_seq_len/gptoss_fp4_mi300x.sh",
        "benchmarks/single_node/fixed_seq_len/deprecated/gptoss_fp4_mi300x_vllm.sh",
        "benchmarks/single_node/fixed_seq_len/deprecated/gptoss_fp4_mi300x.sh",
    ]
    assert (
        script_candidates(dsv4)[1] == "benchmarks/single_node/fixed_seq_len/dsv4_fp8_mi325x_mtp.sh"
    )


def test_launch_script_env_and_flags() -> None:
    launch = parse_launch(SCRIPT)
    # top-level exports only: the conditional HSA one and the harness's are left out
    assert launch.env == {"AMDGCN_USE_BUFFER_OPS": "0", "VLLM_ROCM_USE_AITER": "1"}
    assert launch.args == [
        "--attention-backend",
        "ROCM_AITER_UNIFIED_ATTN",
        "--gpu-memory-utilization",
        "0.95",
        "--speculative-config",
        '{"model": "org/draft", "n": 3}',
        "--no-enable-prefix-caching",
    ]
    # set per run or inside a condition: named, never guessed
    assert {"--max-model-len", "--block-size", "--tensor-parallel-size", "$EP"} <= set(
        launch.varies
    )


def test_snapshot_reads_and_holds_the_vllm_configs() -> None:
    refs = gather_reference.load_snapshot()
    names = {c.name for c in refs.configs if c.vllm_single_node}
    assert {"gptoss-fp4-mi300x-vllm", "dsv4-fp8-mi300x-vllm", "minimaxm3-fp8-mi325x-vllm"} <= names
    gpt = refs.followed("openai/gpt-oss-120b", "mi355x")
    assert gpt is not None and gpt.name == "gptoss-fp4-mi355x-vllm"
    assert gpt.env["VLLM_ROCM_USE_AITER_TRITON_ROPE"] == "1"
    assert "--block-size=64" in gpt.args
    # the plan follows the plain config, not the speculative one listed first
    mm3 = refs.followed("MiniMaxAI/MiniMax-M3-MXFP8", "mi300x")
    assert mm3 is not None and mm3.name == "minimaxm3-fp8-mi300x-vllm"
    others = refs.other_servers("deepseek-ai/DeepSeek-R1-0528", "mi300x")
    assert [c.name for c in others] == ["dsr1-fp8-mi300x-sglang"]


def test_snapshot_is_its_source_rebuilt() -> None:
    from tests.infra.build_reference_snapshot import SNAPSHOT, default_root, render

    root = default_root()
    if root is None:
        pytest.skip("the shared InferenceX directory is not on this machine")
    assert SNAPSHOT.read_text(encoding="utf-8") == render(root)


def test_cache_rules(tmp_path: Path) -> None:
    """A synced copy replaces the snapshot; an unreadable one means the snapshot plus a
    warning; a document that cannot be read back is never written."""
    refs, warnings = gather_reference.load_references()
    assert refs.source == "snapshot" and warnings == ()
    one = ReferenceConfig.from_dict(
        gather_reference.load_snapshot().configs[0].to_dict() | {"name": "only-one"}
    )
    doc = {
        "schema": 1,
        "source": "git",
        "source_commit": "abc",
        "fetched_at": "2026-09-01",
        "source_url": "u",
        "configs": [one.to_dict()],
    }
    path = gather_reference.write_references(doc)
    refs, warnings = gather_reference.load_references()
    assert refs.source == "git" and [c.name for c in refs.configs] == ["only-one"]
    with pytest.raises(ValueError):
        gather_reference.write_references({"schema": 99})
    assert json.loads(Path(path).read_text())["source"] == "git"  # left as it was
    Path(path).write_text("{not json")
    refs, warnings = gather_reference.load_references()
    assert refs.source == "snapshot" and "unreadable" in warnings[0]
    with pytest.raises(ValueError):
        references_from_doc({"schema": 2}, "x")


def test_reference_import_cli(tmp_path: Path) -> None:
    """An InferenceX checkout imported over the snapshot; a directory without one refused."""
    from tests.infra.build_reference_snapshot import default_root
    from tests.infra.cli import run_instinct

    bad = run_instinct(["recipes", "reference-import", str(tmp_path), "--json"])
    assert bad.returncode == 2 and "amd-master.yaml" in bad.stdout
    root = default_root()
    if root is None:
        pytest.skip("the shared InferenceX directory is not on this machine")
    done = run_instinct(["recipes", "reference-import", str(root), "--json"])
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["configs"] == 176 and doc["source_commit"].startswith("843c6254")
    refs, warnings = gather_reference.load_references()
    assert refs.source == "import" and warnings == ()


# As AMD's agentic MiniMax-M3 script writes it: the speculative config is built per run in a
# condition (so its flag varies), its draft and token count are top-level variables.
SPEC_PER_RUN = r"""
DRAFT_MODEL="Inferact/MiniMax-M3-EAGLE3-GQA"
NUM_SPEC_TOKENS=3
if [ "$SYNTHETIC" = "1" ]; then
    SPEC_CONFIG="{\"method\":\"eagle3\",\"model\":\"$DRAFT_MODEL\",\"num_speculative_tokens\":$NUM_SPEC_TOKENS}"
else
    SPEC_CONFIG="{\"method\":\"eagle3\",\"model\":\"$DRAFT_MODEL\",\"num_speculative_tokens\":$NUM_SPEC_TOKENS,\"x\":1}"
fi
vllm serve $MODEL --port $PORT \
    --speculative-config "$SPEC_CONFIG"
"""


def test_a_speculative_config_set_per_run_still_names_its_method_draft_and_tokens() -> None:
    launch = parse_launch(SPEC_PER_RUN)
    assert "--speculative-config" in launch.varies and "--speculative-config" not in launch.args
    assert (launch.spec_method, launch.spec_draft, launch.spec_tokens) == (
        "eagle3",
        "Inferact/MiniMax-M3-EAGLE3-GQA",
        3,
    )
    cfg = ReferenceConfig(
        name="minimaxm3-fp8-mi300x-vllm-agentic-mtp",
        file="f",
        model="m",
        prefix="p",
        gpu="mi300x",
        runner="mi300x",
        precision="fp8",
        framework="vllm",
        image="i",
        spec_method=launch.spec_method,
        spec_draft=launch.spec_draft,
        spec_tokens=launch.spec_tokens,
    )
    assert cfg.speculative_method == "eagle3" and cfg.speculative_tokens == 3
    assert cfg.speculative_draft == "Inferact/MiniMax-M3-EAGLE3-GQA"
    # a literal config wins over the script's variables; a plain config speculates not
    literal = ReferenceConfig(
        **{
            **cfg.to_dict(),
            "rows": [],
            "args": ["--speculative-config", '{"method": "MTP", "num_speculative_tokens": 2}'],
        }
    )
    assert (literal.speculative_method, literal.speculative_tokens) == ("mtp", 2)
    plain = ReferenceConfig(**{**cfg.to_dict(), "rows": [], "name": "minimaxm3-fp8-mi300x-vllm"})
    assert plain.speculative_method is None and plain.speculative_tokens == 0


def test_followed_picks_by_speculative_method_and_scenario() -> None:
    refs = gather_reference.load_snapshot()
    model = "MiniMaxAI/MiniMax-M3-MXFP8"
    eagle = refs.followed(model, "mi300x", "eagle3")
    assert eagle is not None and eagle.name == "minimaxm3-fp8-mi300x-vllm-mtp"
    # no MTP config for MiniMax-M3: the plain one
    mtp = refs.followed(model, "mi300x", "mtp")
    assert mtp is not None and mtp.name == "minimaxm3-fp8-mi300x-vllm"
    agentic = refs.followed(model, "mi300x", "eagle3", "agentic-coding")
    assert agentic is not None and agentic.name == "minimaxm3-fp8-mi300x-vllm-agentic-mtp"
    assert agentic.speculative_draft == "Inferact/MiniMax-M3-EAGLE3-GQA"
