"""Each rule on the real wording of its error (vLLM, PyTorch, huggingface_hub, docker, ROCm).

Lines are quoted from public vLLM issues and upstream source (see the comments); the
surrounding prefixes are the real ones of V0, V1 and Ray-worker logs.
"""

from __future__ import annotations

import pytest

from instinct_serve.diagnose import DiagnoseContext, Finding, diagnose
from tests.diagnose.logs import real_lines

HEALTHY = "09_healthy_startup_MI300X_Llama-3.1-8B-Instruct_fp16_gmu0.9_vllm0.9.2dev_V0.log"


def primary(text: str, ctx: DiagnoseContext | None = None) -> Finding:
    finding = diagnose(text, ctx).primary
    assert finding is not None, "no finding"
    return finding


# --------------------------------------------------------------------------- memory


def test_free_memory_below_utilisation_suggests_what_is_free() -> None:
    # pytorch/pytorch#175666 (vLLM V1 wording)
    finding = primary(
        "(EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on "
        "startup is less than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU "
        "memory utilization or reduce GPU memory used by other processes."
    )
    assert finding.id == "gpu_memory_busy"
    assert finding.retry == {"gpu_memory_utilization": 0.87}  # 89.7 % free, minus a margin
    assert finding.details["device"] == "cuda:1"
    assert "amd-smi process" in finding.commands


def test_no_kv_memory_raises_utilisation_from_the_plan() -> None:
    # vllm-project/vllm#10439
    line = (
        "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the "
        "cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    )
    finding = primary(line, DiagnoseContext(args=("--gpu-memory-utilization", "0.8")))
    assert finding.id == "kv_cache_no_memory"
    assert finding.retry == {"gpu_memory_utilization": 0.85}
    assert primary(line, DiagnoseContext(args=("--gpu-memory-utilization=0.95",))).retry is None


def test_v0_max_seq_len_wording_gives_the_tokens_that_fit() -> None:
    # vllm-project/vllm#2418 (V0)
    finding = primary(
        "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens "
        "that can be stored in KV cache (3664). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine."
    )
    assert finding.id == "max_model_len_exceeds_kv"
    assert finding.retry == {"max_model_len": 3664}


@pytest.mark.parametrize(
    ("line", "derived"),
    [
        # vllm-project/vllm#3676 and the pydantic form of newer releases
        (
            "ValueError: User-specified max_model_len (131072) is greater than the derived "
            "max_model_len (None=8192 in model's config.json). This may lead to incorrect model "
            "outputs or CUDA errors.",
            8192,
        ),
        (
            "  Value error, User-specified max_model_len (131072) is greater than the derived "
            "max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's "
            "config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. [type=value_error, input_value=ArgsKwargs((), {})]",
            32768,
        ),
    ],
)
def test_max_model_len_above_the_model_uses_the_derived_length(line: str, derived: int) -> None:
    finding = primary(line)
    assert finding.id == "max_model_len_exceeds_model"
    assert finding.retry == {"max_model_len": derived}
    assert finding.auto_retry


def test_sampler_warmup_oom_lowers_max_num_seqs() -> None:
    # vllm-project/vllm#17939
    finding = primary(
        "(VllmWorker rank=1 pid=2445156) ERROR 05-10 16:00:15 [multiproc_executor.py:470] "
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine."
    )
    assert finding.id == "oom_sampler_warmup"
    assert finding.retry == {"max_num_seqs": 64}


HIP_OOM = (
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total "
    "capacity of 191.98 GiB of which 1.20 GiB is free. Of the allocated memory 188.1 GiB is "
    "allocated by PyTorch, and 92.65 MiB is reserved by PyTorch but unallocated."
)


def test_oom_in_weight_loading_frames_suggests_tp_and_quantization() -> None:
    text = "\n".join(
        [
            "(EngineCore_DP0 pid=43) ERROR 03-20 17:39:14 [core.py:1100] Traceback (most recent "
            "call last):",
            '(EngineCore_DP0 pid=43) ERROR 03-20 17:39:14 [core.py:1100]   File "/usr/local/lib/'
            'python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2371, in '
            "load_model",
            "(EngineCore_DP0 pid=43) ERROR 03-20 17:39:14 [core.py:1100]     self.model = "
            "model_loader.load_model(",
            f"(EngineCore_DP0 pid=43) ERROR 03-20 17:39:14 [core.py:1100] {HIP_OOM}",
        ]
    )
    ctx = DiagnoseContext(gfx="gfx942", gpu_count=8, model="meta-llama/Llama-3.1-405B-Instruct")
    finding = primary(text, ctx)
    assert finding.id == "oom_weights"
    assert finding.retry == {"tensor_parallel_size": 2}
    assert "FP8" in finding.fix and "meta-llama/Llama-3.1-405B-Instruct" in finding.fix
    assert "tried to allocate 1.96 GiB on GPU 0" in finding.cause
    assert "instinct fit meta-llama/Llama-3.1-405B-Instruct" in finding.commands


def test_oom_without_frames_is_placed_by_the_startup_phase() -> None:
    lines = real_lines(HEALTHY)
    loading = next(i for i, s in enumerate(lines) if "Starting to load model" in s)
    assert primary("\n".join([*lines[: loading + 3], HIP_OOM])).id == "oom_weights"
    capture = next(i for i, s in enumerate(lines) if "Capturing CUDA graph shapes:  40%" in s)
    assert primary("\n".join([*lines[: capture + 1], HIP_OOM])).id == "oom_graph_capture"
    assert primary(HIP_OOM).id == "out_of_memory"
    assert primary(HIP_OOM).generic


def test_oom_in_profile_run_is_profiling() -> None:
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/vllm-workspace/vllm/worker/model_runner.py", line 1304, in profile_run',
            "    self.execute_model(model_input, kv_caches, intermediate_tensors)",
            HIP_OOM,
        ]
    )
    assert primary(text).id == "oom_profiling"


def test_gfx90a_weights_oom_does_not_suggest_fp8() -> None:
    text = f"Starting to load model x/y...\n{HIP_OOM}"
    finding = primary(text, DiagnoseContext(gfx="gfx90a"))
    assert "int4" in finding.fix and "an FP8" not in finding.fix


# --------------------------------------------------------------------------- model / hub


def test_trust_remote_code_needs_the_user_decision() -> None:
    # vllm-project/vllm#5244
    finding = primary(
        "ValueError: Loading /models/huggingface/Phi-3-small-128k-instruct/ requires you to "
        "execute the configuration file in that repo on your local machine. Make sure you have "
        "read the code there to avoid malicious use, then set the option `trust_remote_code=True` "
        "to remove this error."
    )
    assert finding.id == "trust_remote_code_required"
    assert finding.retry == {"add_args": ["--trust-remote-code"]}
    assert finding.auto_retry is False


@pytest.mark.parametrize(
    ("line", "method"),
    [
        # vllm-project/vllm#1919 and NVIDIA/Model-Optimizer#261 (pydantic form)
        (
            "ValueError: Unknown quantization method: gptq. Must be one of ['awq', 'squeezellm'].",
            "gptq",
        ),
        (
            "Value error, Unknown quantization method: . Must be one of ['aqlm', 'awq', 'fp8'].",
            None,
        ),
    ],
)
def test_unknown_quantization_names_the_method(line: str, method: str | None) -> None:
    finding = primary(line)
    assert finding.id == "unknown_quantization"
    assert finding.details["method"] == method


def test_transformers_without_the_model_type_means_vllm_too_old() -> None:
    # vllm-project/vllm#36217
    finding = primary(
        "(APIServer pid=50) ValueError: The checkpoint you are trying to load has model type "
        "`qwen3_5` but Transformers does not recognize this architecture. This could be because "
        "of an issue with the checkpoint, or because your version of Transformers is out of date."
    )
    assert finding.id == "vllm_too_old"
    assert "qwen3_5" in finding.cause


def test_known_too_old_version_without_evidence_ranks_last() -> None:
    ctx = DiagnoseContext(vllm_version="0.9.2", min_vllm_version="0.10.1")
    text = "ERROR 03-10 08:07:20 [core.py:302] EngineCore failed to start."
    diagnosis = diagnose(text, ctx)
    assert diagnosis.ids == ["vllm_too_old", "engine_core_init_failed"]
    assert diagnosis.findings[0].line is None
    assert diagnose(
        text, DiagnoseContext(vllm_version="0.11.0", min_vllm_version="0.10.1")
    ).ids == ["engine_core_init_failed"]


def test_unrecognized_argument() -> None:
    finding = primary("vllm serve: error: unrecognized arguments: --max-cudagraph-capture-size 64")
    assert finding.id == "unknown_argument"
    assert finding.details["arguments"] == "--max-cudagraph-capture-size 64"


def test_attention_heads_not_divisible_suggests_a_valid_tp() -> None:
    # THU-KEG/AdaptThink#1 (DeepSeek-R1-Distill-Qwen-7B, 28 heads)
    finding = primary(
        "ValueError: Total number of attention heads (28) must be divisible by tensor parallel "
        "size (8)."
    )
    assert finding.id == "tp_not_divisible"
    assert finding.details["valid"] == [1, 2, 4]
    assert finding.retry == {"tensor_parallel_size": 4}


@pytest.mark.parametrize(
    ("line", "variant"),
    [
        # OSError text of transformers (vllm-project/vllm#1986) and huggingface_hub offline mode
        (
            "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't "
            "find it in the cached files and it looks like meta-llama/Llama-2-13b-chat-hf is not "
            "the path to a directory containing a file named config.json.",
            "network",
        ),
        (
            "requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='"
            "huggingface.co', port=443): Max retries exceeded with url: /api/models/huggyllama/"
            "llama-7b/revision/main (Caused by NewConnectionError('<urllib3.connection."
            "HTTPSConnection object at 0x2b27fbfbe550>: Failed to establish a new connection: "
            "[Errno -3] Temporary failure in name resolution'))\"), '(Request ID: 3b86)')",
            "network",
        ),
        (
            "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in "
            "the disk cache and outgoing traffic has been disabled. To enable hf.co look-ups and "
            "downloads online, set 'local_files_only' to False.",
            "offline",
        ),
    ],
)
def test_hub_unreachable_tells_offline_from_network(line: str, variant: str) -> None:
    finding = primary(line)
    assert finding.id == "hf_hub_unreachable"
    assert finding.details["variant"] == variant


def test_repository_not_found() -> None:
    finding = primary(
        "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: "
        "Root=1-66f4b037-1bf3d7d2)",
        DiagnoseContext(model="Qwen/qwen3-8b-typo"),
    )
    assert finding.id == "repo_not_found"
    assert "Qwen/qwen3-8b-typo" in finding.cause


def test_gated_fine_grained_token_and_pending_request() -> None:
    pending = primary(
        "huggingface_hub.errors.GatedRepoError: 403 Client Error.\n\nCannot access gated repo for "
        "url https://huggingface.co/google/gemma-3-4b-pt/resolve/main/config.json.\nYour request "
        "to access model google/gemma-3-4b-pt is awaiting a review from the repo authors."
    )
    assert pending.details == {"variant": "access_pending", "repo": "google/gemma-3-4b-pt"}
    licence = primary(
        "Cannot access gated repo for url https://huggingface.co/google/gemma-3-4b-pt/resolve/"
        "main/config.json.\nAccess to model google/gemma-3-4b-pt is restricted and you are not in "
        "the authorized list. Visit https://huggingface.co/google/gemma-3-4b-pt to ask for access."
    )
    assert licence.details["variant"] == "license_not_accepted"


# --------------------------------------------------------------------------- image / GPU


@pytest.mark.parametrize(
    ("line", "cuda"),
    [
        ("hipErrorNoBinaryForGpu: Unable to find code object for all current devices!", False),
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            True,
        ),
    ],
)
def test_no_kernel_image_variants(line: str, cuda: bool) -> None:
    finding = primary(line)
    assert finding.id == "no_kernel_image"
    assert ("CUDA build" in finding.cause) is cuda


def test_tvm_ffi_dlpack_frame_is_the_libtorch_cuda_case() -> None:
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/tvm_ffi/_optional_torch_c_dlpack.py",'
            " line 193, in <module>",
            "    _LIB = load_torch_c_dlpack_extension()",
            "OSError: libtorch_cuda.so: cannot open shared object file: No such file or directory",
        ]
    )
    finding = primary(text)
    assert finding.id == "libtorch_cuda_import"
    assert finding.details["via_tvm_ffi_dlpack"] is True
    assert finding.retry == {"set_env": {"TVM_FFI_DISABLE_TORCH_C_DLPACK": "1"}}


SEGFAULT = "!!!!!!! Segfault encountered !!!!!!!"


def test_mxfp4_not_supported_on_gfx942_is_the_fp4bmm_default() -> None:
    # vllm-project/vllm#34641
    finding = primary("RuntimeError: MXFP4 quantization is not supported on gfx942")
    assert finding.id == "fp4bmm_gfx942"
    assert finding.retry == {"set_env": {"VLLM_ROCM_USE_AITER_FP4BMM": "0"}}
    assert finding.auto_retry


def test_crash_with_fp4_frames_is_fp4bmm_even_without_context() -> None:
    text = "\n".join(
        [
            SEGFAULT,
            '  File "<unknown>", line 0, in batched_gemm_a16wfp4_kernel',
            "Fatal Python error: Segmentation fault",
        ]
    )
    diagnosis = diagnose(text)
    assert diagnosis.ids == ["fp4bmm_gfx942"]  # the generic crash is not listed twice


def test_crash_on_gfx942_without_fp4_frames_still_points_at_fp4bmm() -> None:
    diagnosis = diagnose(SEGFAULT, DiagnoseContext(gfx="gfx942:sramecc+:xnack-"))
    assert diagnosis.ids == ["fp4bmm_gfx942"]
    assert diagnosis.findings[0].rank < 98  # less certain than with FP4 evidence


@pytest.mark.parametrize(
    "ctx",
    [
        DiagnoseContext(gfx="gfx950"),
        DiagnoseContext(gfx="gfx942", env={"VLLM_ROCM_USE_AITER_FP4BMM": "0"}),
        DiagnoseContext(gfx="gfx942", env={"VLLM_ROCM_USE_AITER": "0"}),
    ],
)
def test_crash_where_fp4bmm_cannot_be_the_cause_is_a_generic_kernel_crash(
    ctx: DiagnoseContext,
) -> None:
    finding = primary(f"{SEGFAULT}\nSegmentation fault (core dumped)", ctx)
    assert finding.id == "gpu_kernel_crash"
    assert finding.retry is not None and finding.alternatives


def test_memory_access_fault_is_a_kernel_crash() -> None:
    finding = primary(
        "Memory access fault by GPU node-5 (Agent handle: 0x460e3a50) on address 0x7ec4dfe0e000. "
        "Reason: Write access to a read-only page.",
        DiagnoseContext(gfx="gfx950"),
    )
    assert finding.id == "gpu_kernel_crash"
    assert finding.commands and finding.commands[0].startswith("gh search issues")


# --------------------------------------------------------------------------- host


def test_kfd_permission_from_rocminfo_output() -> None:
    # ROCm/ROCm-docker#116
    finding = primary(
        "ROCk module is loaded\nUnable to open /dev/kfd read-write: Permission denied\n"
        'root is not member of "video" group, the default DRM access group.'
    )
    assert finding.id == "kfd_permission"
    assert finding.details["variant"] == "permission"
    assert 'sudo usermod -aG video,render "$USER"' in finding.commands


def test_missing_kfd_device_from_docker() -> None:
    finding = primary(
        "docker: Error response from daemon: error gathering device information while adding "
        'custom device "/dev/kfd": no such file or directory.'
    )
    assert finding.id == "kfd_permission"
    assert finding.details["variant"] == "missing"


def test_no_gpu_visible_and_the_empty_visible_devices_case() -> None:
    line = "RuntimeError: No HIP GPUs are available"
    assert primary(line).id == "no_gpu_visible"
    empty = primary(line, DiagnoseContext(env={"HIP_VISIBLE_DEVICES": ""}))
    assert empty.id == "cuda_visible_devices_empty"
    assert empty.details["variable"] == "HIP_VISIBLE_DEVICES"
    dumped = diagnose(f"CUDA_VISIBLE_DEVICES=\n{line}")
    assert dumped.ids == ["cuda_visible_devices_empty"]


@pytest.mark.parametrize(
    ("line", "port", "variant"),
    [
        # vllm-project/vllm#8638 (uvicorn), docker's two wordings, torch's rendezvous port
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
            "address already in use",
            8000,
            "api",
        ),
        (
            "docker: Error response from daemon: driver failed programming external connectivity "
            "on endpoint vllm (3f2a): Bind for 0.0.0.0:8001 failed: port is already allocated.",
            8001,
            "api",
        ),
        (
            "RuntimeError: The server socket has failed to listen on any local network address. "
            "useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
            None,
            "distributed",
        ),
    ],
)
def test_port_in_use(line: str, port: int | None, variant: str) -> None:
    finding = primary(line)
    assert finding.id == "port_in_use"
    assert finding.details["port"] == port
    assert finding.details["variant"] == variant
    if port:
        assert f"ss -ltnp 'sport = :{port}'" in finding.commands


def test_disk_full_and_shared_memory_are_told_apart() -> None:
    assert primary("OSError: [Errno 28] No space left on device").id == "disk_full"
    shm = (
        "gpu01:1234:1290 [0] NCCL WARN Error: failed to extend /dev/shm/nccl-8a3c to 9637892 bytes"
    )
    assert primary(shm).id == "shm_too_small"
    assert primary("OSError: [Errno 28] No space left on device: '/dev/shm/psm_5ab7'").id == (
        "shm_too_small"
    )


def test_rccl_unhandled_system_error() -> None:
    finding = primary(
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5"
    )
    assert finding.id == "rccl_error"


# --------------------------------------------------------------------------- ordering


def test_specific_cause_outranks_worker_and_engine_wrappers() -> None:
    text = "\n".join(
        [
            "(VllmWorker rank=1 pid=2445156) ERROR 05-10 16:00:15 [multiproc_executor.py:140] "
            "Worker proc VllmWorker-1 died unexpectedly, shutting down executor.",
            "ERROR 04-30 10:20:36 [core.py:396] ValueError: No available memory for the cache "
            "blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
            "RuntimeError: Engine core initialization failed. See root cause above.",
        ]
    )
    assert diagnose(text).ids == ["kv_cache_no_memory", "worker_died", "engine_core_init_failed"]


def test_equal_ranks_keep_log_order() -> None:
    text = "\n".join(
        [
            "ValueError: Total number of attention heads (28) must be divisible by tensor "
            "parallel size (8).",
            "ValueError: Unknown quantization method: gptq. Must be one of ['awq'].",
        ]
    )
    assert diagnose(text).ids == ["tp_not_divisible", "unknown_quantization"]


def test_ansi_colours_and_carriage_returns_do_not_hide_errors() -> None:
    text = (
        "Capturing CUDA graphs:  40%|████      | 14/35\r"
        "\x1b[31mERROR 06-05 06:18:13 [core.py:1] RuntimeError: CUDA error: out of memory\x1b[0m"
    )
    assert primary(text).id == "oom_graph_capture"


# --------------------------------------------------------------------------- serve's signals


def test_graph_capture_hang_needs_serve_signal_and_quotes_the_last_capture_line() -> None:
    lines = real_lines(HEALTHY)
    cut = next(i for i, s in enumerate(lines) if "Capturing CUDA graph shapes:  40%" in s)
    text = "\n".join(lines[: cut + 1])
    assert diagnose(text).findings == ()
    finding = primary(text, DiagnoseContext(signals=frozenset({"graph_capture_hang"})))
    assert finding.id == "graph_capture_hang"
    assert finding.line == lines[cut]
    assert finding.retry == {"add_args": ["--enforce-eager"]} and finding.auto_retry


@pytest.mark.parametrize(
    ("ctx", "first", "then"),
    [
        (
            DiagnoseContext(model="openai/gpt-oss-120b", args=("--tensor-parallel-size", "1")),
            {"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}},
            [{"set_env": {"VLLM_ROCM_USE_AITER": "0"}}],
        ),
        (
            DiagnoseContext(model="meta-llama/Llama-3.1-70B-Instruct", args=("-tp", "4")),
            {"add_args": ["--disable-custom-all-reduce"]},
            [{"set_env": {"VLLM_ROCM_USE_AITER": "0"}}],
        ),
        (
            DiagnoseContext(),
            {"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}},
            [
                {"add_args": ["--disable-custom-all-reduce"]},
                {"set_env": {"VLLM_ROCM_USE_AITER": "0"}},
            ],
        ),
    ],
)
def test_incoherent_output_orders_the_overrides_by_what_is_known(
    ctx: DiagnoseContext, first: dict[str, object], then: list[dict[str, object]]
) -> None:
    ctx = DiagnoseContext(model=ctx.model, args=ctx.args, signals=frozenset({"incoherent_output"}))
    finding = primary("", ctx)
    assert finding.id == "incoherent_output"
    assert finding.retry == first
    assert list(finding.alternatives) == then
    assert "VLLM_ROCM_USE_AITER=0" in finding.fix


def test_signals_rank_above_whatever_the_log_shows() -> None:
    text = "ERROR 03-10 08:07:20 [core.py:302] EngineCore failed to start."
    ctx = DiagnoseContext(signals=frozenset({"graph_capture_hang"}))
    assert diagnose(text, ctx).ids == ["graph_capture_hang", "engine_core_init_failed"]


def test_gfx942_crash_with_a_vllm_before_the_fp4bmm_default_is_generic() -> None:
    ctx = DiagnoseContext(gfx="gfx942", vllm_version="0.9.2.dev364+gb432b7a28")
    assert primary(SEGFAULT, ctx).id == "gpu_kernel_crash"


def test_v1_profiling_through_the_cudagraph_wrapper_is_not_capture() -> None:
    # The V1 profiling run calls the model through vllm/compilation/cuda_graph.py as well.
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", '
            "line 263, in determine_available_memory",
            "    self.model_runner.profile_run()",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/compilation/cuda_graph.py", '
            "line 121, in __call__",
            "    return self.runnable(*args, **kwargs)",
            "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 8.00 GiB. GPU 0 has a "
            "total capacity of 191.98 GiB of which 2.00 GiB is free. Of the allocated memory 180 "
            "GiB is allocated by PyTorch, with 0.5 GiB allocated in private pools (e.g., CUDA "
            "Graphs).",
        ]
    )
    assert primary(text).id == "oom_profiling"


def test_an_image_without_lscpu_is_named() -> None:
    """The line vLLM's CPU backend printed in an image without util-linux (TODO-tool-fixes.md
    item 15), as the engine core logs it, and wrapped by the API server."""
    text = "\n".join(
        [
            "(EngineCore pid=26) ERROR 12-03 14:40:08 [core.py:1510] EngineCore failed to start.",
            "(EngineCore pid=26) ERROR 12-03 14:40:08 [core.py:1510] "
            "subprocess.CalledProcessError: Command 'lscpu --json --extended=CPU,CORE,NODE "
            "--online' returned non-zero exit status 127.",
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {}",
        ]
    )
    diagnosis = diagnose(text)
    assert diagnosis.ids[0] == "lscpu_missing"
    assert "util-linux" in diagnosis.findings[0].fix and diagnosis.findings[0].retry is None
    other = "subprocess.CalledProcessError: Command 'lscpu' returned non-zero exit status 1."
    assert "lscpu_missing" not in diagnose(other).ids  # it ran: not a missing command
