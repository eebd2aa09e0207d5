"""``diagnose_symptom``: a pasted line or a sentence maps to the same findings as a log."""

from __future__ import annotations

import pytest

from instinct_serve.diagnose import DiagnoseContext, diagnose_symptom


@pytest.mark.parametrize(
    ("symptom", "expected"),
    [
        ("container exits with out of memory during graph capture", "oom_graph_capture"),
        ("OOM while capturing CUDA graphs on MI300X", "oom_graph_capture"),
        ("startup hangs at Capturing CUDA graph shapes 40%", "graph_capture_hang"),
        ("the model answers with gibberish", "incoherent_output"),
        ("output is !!!!!!!! for every prompt", "incoherent_output"),
        ("HIP out of memory while loading the weights", "oom_weights"),
        ("the model is too big: out of memory", "oom_weights"),
        ("out of memory when warming up sampler", "oom_sampler_warmup"),
        ("401 when downloading meta-llama/Llama-3.1-8B-Instruct, it's a gated model", "gated_repo"),
        ("needs trust_remote_code", "trust_remote_code_required"),
        ("segfault at warm-up on gfx942", "fp4bmm_gfx942"),
        ("Segmentation fault (core dumped) right after loading", "gpu_kernel_crash"),
        ("HIP error: invalid device function", "no_kernel_image"),
        ("ImportError libtorch_cuda.so on the rocm image", "libtorch_cuda_import"),
        ("max model len too large for the KV cache", "max_model_len_exceeds_kv"),
        ("Permission denied on /dev/kfd", "kfd_permission"),
        ("CUDA_VISIBLE_DEVICES is empty", "cuda_visible_devices_empty"),
        ("No HIP GPUs are available", "no_gpu_visible"),
        ("port 8000 is already in use", "port_in_use"),
        ("model architecture not supported", "unsupported_architecture"),
        ("No space left on device while downloading", "disk_full"),
        (
            "cannot reach the hugging face hub from the container, connection timed out",
            "hf_hub_unreachable",
        ),
        ("RuntimeError: Engine core initialization failed", "engine_core_init_failed"),
    ],
)
def test_symptom_maps_to_finding(symptom: str, expected: str) -> None:
    diagnosis = diagnose_symptom(symptom)
    assert diagnosis.source == "symptom"
    assert diagnosis.primary is not None, symptom
    assert diagnosis.primary.id == expected
    assert diagnosis.primary.line == symptom


def test_a_pasted_real_line_uses_the_exact_rules_and_their_numbers() -> None:
    line = (
        "(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the models's "
        "max seq len (262144), (24.0 GiB KV cache is needed, which is larger than the available "
        "KV cache memory (3.18 GiB). Based on the available memory, the estimated maximum model "
        "length is 34736."
    )
    finding = diagnose_symptom(line).primary
    assert finding is not None
    assert finding.retry == {"max_model_len": 34736}


def test_loose_symptom_keeps_numbers_it_states() -> None:
    finding = diagnose_symptom(
        "KV cache too small for max-model-len, estimated maximum model length is 20480"
    ).primary
    assert finding is not None and finding.retry == {"max_model_len": 20480}


def test_context_sharpens_a_symptom() -> None:
    ctx = DiagnoseContext(model="openai/gpt-oss-20b", args=("--tensor-parallel-size", "1"))
    finding = diagnose_symptom("the endpoint returns word salad", ctx).primary
    assert finding is not None
    assert finding.retry == {"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}}


@pytest.mark.parametrize("symptom", ["it does not work", "", "   ", "slow tokens per second"])
def test_unknown_symptom_says_so(symptom: str) -> None:
    diagnosis = diagnose_symptom(symptom)
    assert not diagnosis.matched
    assert diagnosis.to_dict()["message"] == "no known failure matches this symptom"
    assert diagnosis.commands and diagnosis.commands[0].startswith("gh search issues")


def test_a_missing_cxx_compiler_in_a_sentence_is_torch_compiles() -> None:
    finding = diagnose_symptom("torch.compile fails: no working C++ compiler").primary
    assert finding is not None and finding.id == "jit_build_failed"
    assert finding.details["component"] == "torch.compile (inductor)"
    assert finding.retry == {
        "add_args": ["--enforce-eager"],
        "set_env": {"TORCHDYNAMO_DISABLE": "1"},
    }


def test_a_glibcxx_error_is_not_a_missing_compiler() -> None:
    finding = diagnose_symptom("GLIBCXX_3.4.30 not found when importing torch").primary
    assert finding is None or finding.details.get("component") != "torch.compile (inductor)"


def test_no_kv_memory_with_a_cpu_plan_speaks_of_the_cpu_kv_space() -> None:
    ctx = DiagnoseContext(env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    finding = diagnose_symptom("No available memory for the cache blocks", ctx).primary
    assert finding is not None and finding.id == "kv_cache_no_memory"
    assert finding.retry == {"set_env": {"VLLM_CPU_KVCACHE_SPACE": "4"}}
    assert finding.details["kv_cache_space_gib"] == 2.0
