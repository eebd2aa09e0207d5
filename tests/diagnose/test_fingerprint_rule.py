"""A failed fingerprint (``diagnose.rules.fingerprint``): named, looked up in the
validated-stack table, and given the known kernel fallback to relaunch with."""

from __future__ import annotations

from instinct_serve.diagnose import DiagnoseContext, diagnose


def test_nan_on_the_reported_stack_cites_the_row_and_takes_its_fix_first() -> None:
    ctx = DiagnoseContext(
        gfx="gfx942",
        model="Qwen/Qwen3.5-397B-A17B",
        image="vllm/vllm-openai-rocm:v0.26.0",
        env={"VLLM_ROCM_USE_AITER": "1"},
        args=["--tensor-parallel-size", "8"],
        signals=frozenset({"fingerprint_nan"}),
    )
    finding = diagnose("", ctx).get("wrong_output")
    assert finding is not None and finding.auto_retry
    assert finding.details["failure"] == "nan"
    assert finding.details["stacks"] == ["vllm-51580-aiter-moe-nan-gfx942"]
    assert "vllm/issues/51580" in finding.cause
    assert finding.retry == {"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}}
    assert finding.alternatives == (
        {"set_env": {"VLLM_ROCM_USE_AITER": "0"}},
        {"add_args": ["--enforce-eager"]},
    )


def test_elsewhere_the_fallbacks_are_the_aiter_switch_then_eager() -> None:
    ctx = DiagnoseContext(
        gfx="gfx942",
        model="meta-llama/Llama-3.1-8B-Instruct",
        image="vllm/vllm-openai-rocm:v0.26.0",
        signals=frozenset({"fingerprint_long_context"}),
    )
    finding = diagnose("", ctx).get("wrong_output")
    assert finding is not None and finding.details == {"failure": "long_context", "stacks": []}
    assert "long prompt" in finding.cause
    assert finding.retry == {"set_env": {"VLLM_ROCM_USE_AITER": "0"}}
    # already off, already eager: no kernel fallback left, only an earlier image
    done = DiagnoseContext(
        env={"VLLM_ROCM_USE_AITER": "0"},
        args=["--enforce-eager"],
        signals=frozenset({"fingerprint_drift"}),
    )
    finding = diagnose("", done).get("wrong_output")
    assert finding is not None and finding.retry is None and not finding.auto_retry
    assert "instinct rollback" in finding.fix
    assert diagnose("", DiagnoseContext()).get("wrong_output") is None  # no signal, no finding


def test_on_sglang_the_fallbacks_are_sglangs_aiter_switch_then_no_graphs() -> None:
    # AMD's SGLang config for DeepSeek-R1 on MI300X sets SGLANG_USE_AITER=1: vLLM's switch
    # and flag would not reach SGLang (its argv refuses --enforce-eager)
    ctx = DiagnoseContext(
        gfx="gfx942",
        model="deepseek-ai/DeepSeek-R1-0528",
        image="lmsysorg/sglang:v0.5.12-rocm700-mi30x",
        env={"SGLANG_USE_AITER": "1"},
        signals=frozenset({"fingerprint_drift"}),
        server="sglang",
    )
    finding = diagnose("", ctx).get("wrong_output")
    assert finding is not None and finding.auto_retry
    assert finding.retry == {"set_env": {"SGLANG_USE_AITER": "0"}}
    assert finding.alternatives == ({"add_args": ["--disable-cuda-graph"]},)
    assert "SGLANG_USE_AITER=0; then --disable-cuda-graph" in finding.fix
    assert "VLLM" not in finding.fix and "--enforce-eager" not in finding.fix
    done = DiagnoseContext(
        env={"SGLANG_USE_AITER": "0"},
        args=["--disable-cuda-graph"],
        signals=frozenset({"fingerprint_drift"}),
        server="sglang",
    )
    finding = diagnose("", done).get("wrong_output")
    assert finding is not None and finding.retry is None and not finding.auto_retry
