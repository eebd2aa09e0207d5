"""``instinct fit`` end to end through the real CLI entry point (offline by default)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from instinct_serve.cli.main import main
from tests.fit.hubserver import serve_model
from tests.fit.st_files import write_safetensors
from tests.hardware import sysfs_tree
from tests.hardware.conftest import METRIC, PARTITION, STATIC, VERSION, sample
from tests.hardware.sysfs_tree import mi300x, mi355x
from tests.infra.fakebin import FakeBin
from tests.infra.paths import CONFIGS


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), out, err


def as_json(out: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_default_model_offline_on_a_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["fit", "Qwen/Qwen3.5-9B", "--gpu", "mi300x", "--json"], capsys)
    assert code == 0
    doc = as_json(out)
    assert doc["verdict"] == "safe"
    assert doc["metadata"]["source"] == "shipped"
    assert doc["metadata"]["size_basis"] == "config"  # shipped counts from config shapes
    assert doc["kv_cache_bytes_per_token"] == 32768
    assert doc["fit"]["recommended_max_model_len"] == 262144
    assert doc["fit"]["native_max_model_len_source"] == "recipe context_length"
    assert doc["hardware"]["gpu_count"] == 8 and doc["hardware"]["gfx_version"] == "gfx942"
    assert doc["catalog"]["recipe"] == "Qwen/Qwen3.5-9B"
    assert doc["vllm"]["version"] == doc["catalog"]["vllm_version"]  # the image's vLLM


def test_human_view_has_the_budget_bar(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    code, out, _ = run(["fit", "Qwen/Qwen3.5-9B", "--gpu", "mi300x"], capsys)
    assert code == 0
    assert "verdict: safe" in out
    assert "size: from config.json shapes" in out
    assert "█" in out and "weights" in out and "KV cache" in out and "outside budget" in out
    assert "hybrid (full_attention + gated_delta_net)" in out


def test_recipe_launch_flags_are_applied(capsys: pytest.CaptureFixture[str]) -> None:
    # the gpt-oss recipe sets --gpu-memory-utilization 0.95 and --block-size 64 on AMD
    code, out, _ = run(["fit", "openai/gpt-oss-120b", "--gpu", "mi300x", "--json"], capsys)
    assert code == 0
    doc = as_json(out)
    assert doc["gpu_memory_utilization"] == 0.95
    assert doc["attention"]["block_size"] == 64
    code, out, _ = run(
        [
            "fit",
            "openai/gpt-oss-120b",
            "--gpu",
            "mi300x",
            "--gpu-memory-utilization",
            "0.8",
            "--json",
        ],
        capsys,
    )
    assert as_json(out)["gpu_memory_utilization"] == 0.8


def test_does_not_fit_prints_the_full_report_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        ["fit", "deepseek-ai/DeepSeek-V3", "--gpu", "mi300x", "--gpu-count", "2", "--json"], capsys
    )
    assert code == 1
    doc = as_json(out)
    assert doc["verdict"] == "does_not_fit"
    assert doc["fit"]["min_tp_if_more_gpus"] == 4
    assert doc["alternatives"] == []  # offline: the Hub cannot be searched
    assert "weight_memory_gb" in doc and "remaining_for_kv_gb" in doc


def test_needs_tp_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["fit", "deepseek-ai/DeepSeek-V3", "--gpu", "mi300x", "--json"], capsys)
    assert code == 0 and as_json(out)["fit"]["tp"] == 8  # the plan's TP (issue 28)
    code, out, _ = run(
        ["fit", "deepseek-ai/DeepSeek-V3", "--gpu", "mi300x", "--tp", "2", "--json"], capsys
    )
    assert code == 1 and as_json(out)["verdict"] == "needs_tp"


def test_unknown_model_offline_suggests_catalog_ids(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["fit", "Qwen/Qwen3.5-9X", "--gpu", "mi300x", "--json"], capsys)
    assert code == 3
    error = as_json(out)["error"]
    assert error["id"] == "model_metadata_unavailable"
    assert "Qwen/Qwen3.5-9B" in error["details"]["close_matches"]


def test_local_directory_with_manual_vram(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text(
        (CONFIGS / "meta-llama__Meta-Llama-3.1-8B.json").read_text()
    )
    written = write_safetensors(tmp_path / "model.safetensors", {"w": ("BF16", (4096, 4096))})
    code, out, _ = run(
        ["fit", str(tmp_path), "--vram-gb", "24", "--gpu-count", "1", "--json"], capsys
    )
    assert code == 0
    doc = as_json(out)
    assert doc["metadata"]["source"] == "local_dir"
    assert doc["metadata"]["size_basis"] == "exact"  # read from the safetensors header
    assert doc["checkpoint_bytes"] == written
    assert doc["hardware"]["vram_per_gpu_bytes"] == 24 * 10**9
    code, out, _ = run(
        ["fit", str(tmp_path), "--vram-gib", "24", "--gpu-count", "1", "--json"], capsys
    )
    assert as_json(out)["hardware"]["vram_per_gpu_bytes"] == 24 * 2**30


def test_a_context_length_in_vllms_notation(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["fit", "Qwen/Qwen3.5-9B", "--gpu", "mi300x", "--max-model-len", "32k", "--json"], capsys
    )
    assert code == 0 and as_json(out)["fit"]["requested_max_model_len"] == 32000
    code, _, err = run(
        ["fit", "Qwen/Qwen3.5-9B", "--gpu", "mi300x", "--max-model-len", "1.5M"], capsys
    )
    assert (
        code == 2
        and "--max-model-len 1.5M: use a number of tokens such as 32768, 32k or 32K" in err
    )


def test_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        ["fit", "Qwen/Qwen3.5-9B", "--vram-gb", "24", "--vram-gib", "24", "--gpu-count", "1"],
        capsys,
    )
    assert code == 2 and "not both" in err
    code, out, _ = run(["fit", "Qwen/Qwen3.5-9B", "--gpu", "mi300x", "--tp", "3", "--json"], capsys)
    assert code == 2 and as_json(out)["error"]["id"] == "bad_tp"


@pytest.fixture
def tools(fakebin: FakeBin) -> FakeBin:
    """Every ROCm tool absent (shadowing real ones); tests add fakes."""
    for name in ("amd-smi", "rocm-smi", "rocminfo", "hipconfig"):
        fakebin.missing(name)
    return fakebin


def test_detected_gpus_are_the_default(
    tools: FakeBin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools.add(
        "amd-smi",
        {
            STATIC: sample("amd-smi_static_MI300X_x8_gpu_data.json"),
            METRIC: sample("amd-smi_metric_mem-usage_MI300X_x8_gpu_data.json"),
            PARTITION: sample("amd-smi_static_partition_MI300X_x8_gpu_data.json"),
            VERSION: sample("amd-smi_version_rocm7.0.0.json"),
        },
    )
    code, out, _ = run(["fit", "Qwen/Qwen3.5-9B", "--json", "--sysfs-root", str(tmp_path)], capsys)
    assert code == 0
    hw = as_json(out)["hardware"]
    assert (hw["gpu_count"], hw["gfx_version"], hw["source"]) == (8, "gfx942", "detect (amd-smi)")


def test_no_gpu_detected_fits_for_an_mi300x_node_as_plan_does(
    tools: FakeBin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        ["fit", "Qwen/Qwen3.5-9B", "--json", "--sysfs-root", str(tmp_path)], capsys
    )
    assert code == 0
    hw = as_json(out)["hardware"]
    assert (hw["gpu_count"], hw["gfx_version"], hw["source"]) == (8, "gfx942", "profile")
    assert "no AMD GPU detected on local: planning for 8x AMD Instinct MI300X" in err


def test_mixed_gpus_are_fitted_on_the_smallest_with_a_warning(
    tools: FakeBin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from instinct_serve.agents.core import fit
    from instinct_serve.agents.inputs import FitInput

    sysfs_tree.build(tmp_path, [mi300x(0), mi355x(1)])
    code, out, err = run(
        ["fit", "Qwen/Qwen3.5-9B", "--json", "--sysfs-root", str(tmp_path)], capsys
    )
    hw = as_json(out)["hardware"]
    assert code == 0 and hw["gpu_count"] == 2 and 190 < hw["vram_per_gpu_gib"] <= 192  # MI300X
    assert "the GPUs differ: sized for the smallest; restrict with --gpus" in err
    # The MCP tool says it in its document: an agent reads no stderr.
    doc = fit(FitInput(model="Qwen/Qwen3.5-9B", sysfs_root=str(tmp_path))).doc
    assert "the GPUs differ: sized for the smallest; restrict with --gpus" in doc["warnings"]
    assert doc["hardware"] == hw


def test_alternatives_found_on_the_hub_and_verified(
    hub: HTTPServer, capsys: pytest.CaptureFixture[str]
) -> None:
    big = json.loads((CONFIGS / "Qwen__Qwen3-8B.json").read_text())
    big |= {"num_hidden_layers": 96, "intermediate_size": 32768}
    fp8 = big | {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    serve_model(hub, "acme/Big", big, {"BF16": 42_000_000_000})  # 84 GB: too big for 64 GiB
    serve_model(hub, "acme/Big-FP8", fp8, {"F8_E4M3": 40_000_000_000, "BF16": 2_000_000_000})
    serve_model(hub, "amd/Big-NVFP4", fp8, {"U8": 20_000_000_000})  # never offered on ROCm

    def search(request: Request) -> Response:
        rows = {
            "acme": [{"id": "acme/Big"}, {"id": "acme/Big-FP8"}],
            "amd": [{"id": "amd/Big-NVFP4"}],
        }.get(request.args.get("author") or "", [])
        return Response(json.dumps(rows), content_type="application/json")

    hub.expect_request("/api/models").respond_with_handler(search)
    code, out, _ = run(
        ["fit", "acme/Big", "--vram-gib", "64", "--gpu-count", "1", "--json"], capsys
    )
    assert code == 1
    doc = as_json(out)
    assert doc["verdict"] == "does_not_fit"
    assert [a["model"] for a in doc["alternatives"]] == ["acme/Big-FP8"]
    assert doc["alternatives_skipped"] == ["amd/Big-NVFP4: nvfp4 is not supported on this GPU"]
    alt = doc["alternatives"][0]
    assert (alt["precision"], alt["origin"], alt["metadata_source"]) == ("fp8", "provider", "hub")
    assert alt["verdict"] in ("safe", "tight") and alt["weight_memory_gb"] == 44.0


def test_the_device_and_engine_are_named_for_a_cross_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CUDA log reproduced: an RTX 3090 (23.58 GiB) on vLLM 0.6.4 ran V0 and profiled a
    20,000-token batch (vllm#10517: 1952 blocks)."""
    (tmp_path / "config.json").write_text(
        (CONFIGS / "meta-llama__Meta-Llama-3.1-8B.json").read_text()
    )
    argv = ["fit", str(tmp_path), "--vram-gib", "23.58", "--gpu-count", "1", "--json"]
    argv += ["--max-model-len", "20000", "--vllm-version", "0.6.4", "--platform", "cuda"]
    argv += ["--device-name", "NVIDIA GeForce RTX 3090"]
    code, out, _ = run(argv, capsys)
    doc = as_json(out)
    assert code == 0 and doc["vllm"]["engine"] == "V0"
    assert doc["overhead"]["max_num_batched_tokens"] == 20000
    assert abs(doc["kv_cache"]["num_blocks"] - 1952) / 1952 < 0.03
    code, out, _ = run([*argv, "--vllm-engine", "v1"], capsys)
    assert as_json(out)["vllm"]["engine"] == "V1"
    code, out, err = run([*argv, "--vllm-engine", "v9"], capsys)
    assert code == 2 and "v9" in out + err


def test_compilation_config_shapes_the_graph_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    """``--compilation-config`` as vLLM spells it: the mode and sizes vLLM will capture."""
    base = ["fit", "Qwen/Qwen3.5-9B", "--gpu", "mi300x", "--json", "--vllm-version", "0.22.0"]
    code, out, _ = run(base, capsys)
    default = as_json(out)["overhead"]
    code, out, _ = run([*base, "--compilation-config", '{"cudagraph_mode": "NONE"}'], capsys)
    assert code == 0
    none = as_json(out)["overhead"]
    assert default["graph_captures"] == {"piecewise": 51, "full": 51}  # 1024 seqs on MI300X
    assert default["graph_bytes"] > 0
    assert none["graph_captures"] == {"piecewise": 0, "full": 0} and none["graph_bytes"] == 0
    code, out, _ = run([*base, "--compilation-config", '{"cudagraph_mode": "SOMETIMES"}'], capsys)
    assert code != 0 and as_json(out)["error"]["id"] == "bad_compilation_config"


def test_vllm_version_and_platform_select_the_overhead_rows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--platform`` in any case and ``--vllm-version`` pick the rows of ``overhead_table``:
    the sort path of 0.11 on ROCm, the Triton masking of 0.27 (PR #33538), FlashInfer on CUDA."""
    base = ["fit", "Qwen/Qwen3-8B", "--gpu", "mi300x", "--json"]

    def sampler(*extra: str) -> dict[str, object]:
        code, out, _ = run([*base, *extra], capsys)
        assert code == 0
        terms: dict[str, dict[str, object]] = as_json(out)["overhead"]["terms"]
        return terms["sampler"]

    assert sampler("--vllm-version", "0.11.1")["value"] == "sort"
    # the recipe's environment sets VLLM_ROCM_USE_AITER=1: the aiter sampler (PR #43331)
    # (0.33.0: the V2 runner, which Qwen3-8B takes from 0.22, warms the full sampler up)
    assert sampler("--vllm-version", "0.33.0", "--platform", "ROCm")["value"] == "aiter"
    assert sampler("--vllm-version", "0.27.1", "--platform", "ROCm")["value"] == "v2_default"
    manual = ["--vram-gib", "192", "--gpu-count", "1", "--vllm-version", "0.33.0"]
    code, out, _ = run(["fit", "Qwen/Qwen3-8B", "--json", *manual, "--platform", "Rocm"], capsys)
    assert as_json(out)["overhead"]["terms"]["sampler"]["value"] == "triton"
    cuda = sampler("--vllm-version", "0.33.0", "--platform", "CUDA")
    assert (cuda["value"], cuda["bytes_per_logit"]) == ("flashinfer", 12)
    code, out, err = run([*base, "--platform", "tpu"], capsys)
    assert code == 2 and "tpu" in out + err
