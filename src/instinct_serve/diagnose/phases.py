"""Startup phases from vLLM's own log lines, for a status line and JSON events.

``serve`` follows ``docker logs -f`` and feeds every line to a ``PhaseTracker``; the tracker
turns the wording of several vLLM versions (V0 and V1 engines, 0.5 to 0.2x) into one phase
sequence with the figures users ask about (weights size, KV cache tokens, concurrency,
graph capture time) and remembers when the last line arrived, so that serve can tell a
graph-capture hang from a slow but live start-up.

For ``diagnose`` the tracker also keeps ``reached``, the furthest phase the log shows by any
evidence (traceback frames, the error that ends a step, V1's fixed order after the KV cache
is sized), which later lines never lower and a failure does not hide; the status line keeps
to what was printed.

Phases only move forward (a line from a lagging tensor-parallel rank does not move the
status back), except ``downloading_weights``/``loading_weights`` and ``compiling``/
``profiling``, which interleave in real logs. Pure: text and times in, events out; the
clock is read only when ``feed`` is not given one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from instinct_serve.diagnose.failure_signals import STRONG_FAILURE
from instinct_serve.diagnose.logline import EXCEPTION_START, LogLine, iter_lines

Phase = Literal[
    "starting",
    "pulling_image",
    "downloading_weights",
    "loading_weights",
    "compiling",
    "profiling",
    "capturing_graphs",
    "starting_server",
    "ready",
    "warming_up",
    "failed",
]

# Ordered position of each phase; equal numbers may alternate. ``warming_up`` is serve's own
# phase (its first request after /health); the tracker never emits it.
PHASE_ORDER: Mapping[str, int] = {
    "starting": 0,
    "pulling_image": 1,
    "downloading_weights": 2,
    "loading_weights": 2,
    "compiling": 3,
    "profiling": 3,
    "capturing_graphs": 4,
    "starting_server": 5,
    "ready": 6,
    "warming_up": 7,
}

# Phases in which a silent log means trouble (graph capture and weight loading print
# progress regularly; downloads and JIT builds may legitimately stay silent for minutes).
STALL_PHASES: frozenset[str] = frozenset({"capturing_graphs", "loading_weights"})


@dataclass(frozen=True)
class PhaseEvent:
    """One change of the startup status: what to show and what to emit as a JSON event."""

    phase: Phase
    message: str
    progress: float | None = None  # 0..1 within the phase, where the log shows it
    figures: Mapping[str, Any] = field(default_factory=dict)  # cumulative snapshot
    line_no: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": "phase",
            "phase": self.phase,
            "message": self.message,
            "progress": self.progress,
            "figures": dict(self.figures),
        }


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _fmt_int(value: Any) -> str:
    return f"{int(value):,}"


# --------------------------------------------------------------------------- patterns

_NUM = r"(\d[\d,]*(?:\.\d+)?)"

# docker pull (CLI without a TTY prints one line per layer state)
_PULL_MISSING = re.compile(r"^Unable to find image '([^']+)' locally")
_PULL_FROM = re.compile(r"^([\w.\-]+): Pulling from (\S+)")
_PULL_LAYER = re.compile(
    r"^([0-9a-f]{12}): (Pulling fs layer|Waiting|Downloading|Verifying Checksum|"
    r"Download complete|Extracting|Pull complete|Already exists)"
)
_PULL_DONE = re.compile(r"^Status: (?:Downloaded newer image|Image is up to date) for (\S+)")

# Hugging Face downloads (tqdm bars of huggingface_hub; hf_xet prints the same shape)
_FETCHING = re.compile(r"^Fetching (\d+) files?:\s+(\d{1,3})%")
_FILE_BAR = re.compile(
    r"^(?P<name>[^\s:|][^:|\n]{0,200}?\.(?:safetensors|bin|pt|pth|gguf|json|model|txt|py|"
    r"tiktoken|jinja|msgpack|h5|onnx)):\s+(?P<pct>\d{1,3})%\|"
)
_DOWNLOAD_TIME = re.compile(
    r"Time (?:spent|took) (?:downloading|to download) weights for \S+: " + _NUM
)

# Weight loading
_START_LOAD = re.compile(r"Starting to load model (\S+?)(?:\.\.\.)?$")
_WEIGHTS_FORMAT = re.compile(r"Using model weights format \[")
_SHARDS = re.compile(r"^Loading (?:\w+ )?checkpoint shards:\s+(\d{1,3})% Completed \| (\d+)/(\d+)")
_LOAD_WEIGHTS_TOOK = re.compile(r"^Loading weights took " + _NUM + r" ?s")
_MODEL_LOADING_TOOK = re.compile(
    r"^(?:Model loading|Loading model weights) took " + _NUM + r" ?(GiB|GB)"
    r"(?: memory)?(?: and " + _NUM + r" ?s)?"
)

# Compilation (torch.compile in V1; AITER JIT kernel builds on ROCm)
_COMPILE_CACHE = re.compile(r"^Using cache directory: .* for vLLM's torch\.compile")
_DYNAMO = re.compile(r"^Dynamo bytecode transform time: " + _NUM + r" ?s")
_COMPILE_GRAPH = re.compile(r"^Compiling a graph for (?:dynamic|general) shape takes " + _NUM)
_COMPILE_LOAD = re.compile(r"^Directly load the compiled graph")
_COMPILE_TOTAL = re.compile(r"^torch\.compile takes " + _NUM + r" ?s in total")
# vLLM 0.32's CPU model runner compiles in its warm-up run (silent for minutes but for these)
_CPU_COMPILE_START = re.compile(r"^Warming up model for the compilation")
_CPU_COMPILE_AGAIN = re.compile(r"Compiling model again due to a load failure")
_CPU_COMPILE_DONE = re.compile(r"^Warming up done\.")
_AITER_START = re.compile(r"^\[aiter\] start build \[?([^\]\s,]+)\]?")
_AITER_FINISH = re.compile(r"^\[aiter\] finish build \[?([^\]\s,]+)\]?, cost " + _NUM)

# Memory profiling and KV cache sizing
_V0_PROFILE = re.compile(r"^Memory profiling takes " + _NUM + r" ?seconds")
_V0_BUDGET = re.compile(
    r"total_gpu_memory \(" + _NUM + r" ?GiB\) x gpu_memory_utilization \(" + _NUM + r"\)"
)
_V0_PEAK = re.compile(r"PyTorch activation peak memory takes " + _NUM + r" ?GiB")
_V0_KV = re.compile(r"the rest of the memory reserved for KV Cache is " + _NUM + r" ?GiB")
_AVAILABLE_KV = re.compile(r"^Available KV cache memory: " + _NUM + r" ?GiB")
# "GPU KV cache size: N tokens"; vLLM 0.32's CPU backend says "CPU KV cache size: N tokens,
# Maximum concurrency for L tokens per request: Cx" (both figures on one line).
_KV_TOKENS = re.compile(r"^(?:GPU|CPU|XPU) KV cache size: " + _NUM + r" tokens")
# "# GPU blocks: N, # CPU blocks: M" (V0); pasted without the first "# " as well
_BLOCKS = re.compile(r"^(?:# (\w+)|(GPU)) blocks: " + _NUM)
# V1 API server: "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks
# is: 57656" (loggers.py)
_NUM_GPU_BLOCKS = re.compile(r"\bnum_gpu_blocks is: " + _NUM)
# vLLM 0.6.x: "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=...
# kv_cache_size=2.89GiB gpu_memory_utilization=0.90" (key=value pairs on one line)
_V06_PROFILE = re.compile(r"^Memory profiling results: (?=.*\bkv_cache_size=)")
_V06_PAIR = re.compile(r"\b(\w+)=" + _NUM + r"(?:GiB)?\b")
_V06_FIGURES = {
    "total_gpu_memory": "total_gpu_gib",
    "non_torch_memory": "non_torch_gib",
    "kv_cache_size": "available_kv_gib",
    "gpu_memory_utilization": "gpu_memory_utilization",
}
# The V2 model runner, after its graphs: "Free memory on device (77.57/79.11 GiB) on startup.
# Desired GPU memory utilization is (0.92, 72.78 GiB). Actual usage is 7.39 GiB for weight,
# 1.54 GiB for peak activation, 0.6 GiB for non-torch memory, and 2.04 GiB for CUDAGraph
# memory. ... Current kv cache memory in use is 63.25 GiB."
_V2_USAGE = re.compile(
    r"^Free memory on device \(" + _NUM + r"/" + _NUM + r" ?GiB\) on startup\. Desired GPU "
    r"memory utilization is \("
    + _NUM
    + r", [\d.]+ ?GiB\)\. Actual usage is "
    + _NUM
    + r" ?GiB for weight, "
    + _NUM
    + r" ?GiB for peak activation, "
    + _NUM
    + r" ?GiB for non-torch memory(?:, and "
    + _NUM
    + r" ?GiB for CUDAGraph memory)?"
)
_V2_KV_IN_USE = re.compile(r"Current kv cache memory in use is " + _NUM + r" ?GiB")
# The KV-capacity errors, raised once the memory profile has sized the KV cache: the phase
# they prove, and the capacity they state (V0: tokens; V1: GiB available).
_KV_V0_TOO_SMALL = re.compile(
    r"The model's max seq len \(\d+\) is larger than the maximum number of tokens that can "
    r"be stored in KV cache \(" + _NUM + r"\)"
)
_KV_V1_TOO_SMALL = re.compile(
    r"To serve at least one request with the models?'s max seq len \(\d+\), \([\d.]+ GiB "
    r"KV cache is needed, which is larger than the available KV cache memory \(" + _NUM + r" ?GiB\)"
)
_CONCURRENCY = re.compile(
    r"(?:^|, )Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r" ?x"
)
_GRAPH_ESTIMATE = re.compile(r"^Estimated CUDA graph memory: " + _NUM + r" ?GiB")
_MAX_MODEL_LEN = re.compile(r"^Using max model len " + _NUM)

# Kernel warm-up runs once the KV cache is sized, before graph capture ("Warming up DeepSeek
# V4 sparse MLA attention for mixed tokens=16."); not the CPU runner's compile warm-up.
_KERNEL_WARMUP = re.compile(
    r"^Warming up (?!model for the compilation).{0,120}\b(?:attention|kernels?)\b"
)

# Graph capture
# V1 DEBUG, one per captured shape: "Capturing a cudagraph on (FULL,BatchDescriptor(...))"
_CAPTURE_ONE = re.compile(r"^Capturing a cudagraph on \((\w+),")
_CAPTURE_START = re.compile(
    r"^Capturing (?:cudagraphs for decoding|the model for CUDA graphs|CUDA graphs)"
)
_CAPTURE_BAR = re.compile(
    r"^Capturing CUDA graphs?(?: shapes| \([^)]*\))?:\s+(\d{1,3})%\|[^|]*\|\s*(\d+)/(\d+)"
)
_CAPTURE_DONE = re.compile(
    r"^Graph capturing finished in " + _NUM + r" ?secs?(?:, took " + _NUM + r" ?GiB)?"
)

# A traceback frame shows the step a process was in when it failed, whatever line came last
# (Python's 'File "...", line N, in f' and faulthandler's 'File "...", line N in f').
FRAME_IN = re.compile(r'^\s*File "[^"]+", line \d+,? in (\w+)')
_FRAME_PHASES: Mapping[str, Phase] = {
    "capture_model": "capturing_graphs",
    "_capture_cudagraphs": "capturing_graphs",
    "compile_or_warm_up_model": "capturing_graphs",
    "determine_available_memory": "profiling",
    "determine_num_available_blocks": "profiling",
    "profile_run": "profiling",
    "load_model": "loading_weights",
}
# V1 captures graphs right after it sizes the KV cache; not in eager mode.
_EAGER = re.compile(
    r"enforce_eager=True|'enforce_eager': True|Cudagraph is disabled under eager mode"
)

# Engine up, API server
_INIT_ENGINE = re.compile(r"^init engine (?:\([^)]*\) )?took " + _NUM + r" ?s")
# "Starting vLLM API server 0 on URL" (0.8-0.1x); 0.32: "Starting vLLM server on URL"
_API_START = re.compile(r"^Starting vLLM (?:API )?server(?: \d+)?(?: \([^)]*\))? on (\S+)")
_ROUTES = re.compile(r"^Available routes are")
_READY_UVICORN = re.compile(r"^Uvicorn running on (\S+)")
_READY_APP = re.compile(r"^Application startup complete")

# A stop asked from outside (SIGTERM/SIGINT: ``instinct stop``, ``docker stop``): vLLM 0.32's
# "[shutdown] API server: shutdown triggered", "[shutdown] EngineCore: trigger received
# signal=SIGTERM", uvicorn's "Shutting down". What follows is teardown: vLLM 0.32 races and
# may log "AsyncLLM output_handler failed" / EngineDeadError then, which is no failure.
_SHUTDOWN = re.compile(
    r"^\[shutdown\] (?:API server: shutdown triggered|EngineCore: trigger received signal)"
    r"|^Shutting down$"
)

# Versions
_ENGINE_VERSION = re.compile(r"^Initializing an? (?:(V0|V1) )?LLM engine \(v([^)\s]+)\)")
_API_VERSION = re.compile(r"^vLLM API server version (\S+)")
_BANNER_VERSION = re.compile(r"█\s+version (\d+\.\d+\S*)\s*$")


@dataclass
class _Update:
    phase: Phase | None = None
    message: str | None = None
    progress: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    soft_failure: bool = False


class PhaseTracker:
    """Feed it log lines; it returns a ``PhaseEvent`` whenever the status changes.

    ``stalled(now, stall_s)`` is true when the current phase is one where silence means a
    hang (graph capture, weight loading) and no line at all arrived for ``stall_s`` seconds,
    unless a JIT kernel build is known to be running.
    """

    def __init__(self) -> None:
        self.phase: Phase = "starting"
        self.message: str = "no progress line yet"
        self.progress: float | None = None
        self.failed_line: str | None = None
        self.last_line_at: float | None = None
        self._figures: dict[str, Any] = {}
        self._soft_failed_from: Phase | None = None
        self._layers: dict[str, bool] = {}  # docker layer id -> done
        self._files: dict[str, float] = {}  # download file name -> fraction
        self._building: list[str] = []  # JIT modules started and not finished
        self._last_key: tuple[Any, ...] | None = None
        self._lines_seen = 0
        self.shutting_down = False  # a stop was asked for: later failure lines are teardown
        self._reached: Phase = "starting"  # the furthest phase any evidence shows
        self._kv_sized_v1 = False  # V1's "GPU KV cache size" line: graph capture comes next
        self._eager = False

    # -- public API -------------------------------------------------------------------

    @property
    def figures(self) -> dict[str, Any]:
        return dict(self._figures)

    @property
    def failed_for_good(self) -> bool:
        """A strong failure signal (``failure_signals``) ended the start-up: no later line
        can overrule it, unlike a bare exception (a soft failure)."""
        return self.phase == "failed" and self._soft_failed_from is None

    @property
    def reached(self) -> Phase:
        """The furthest start-up phase the log shows, failed or not: progress lines, the
        frames of a traceback (``capture_model``), the errors raised after a step (the
        KV-capacity error ends the memory profile), and a failure after V1 sized its KV
        cache, which captures graphs next (unless eager)."""
        return self._reached

    @property
    def stage(self) -> Phase:
        """The step the engine is in now, as far as the log tells (``reached`` while
        failed): V1 goes from sizing the KV cache straight to graph capture, printing
        nothing in between, so a failure there is a capture failure."""
        base = self._reached if self.phase == "failed" else _later(self._reached, self.phase)
        if base == "profiling" and self._kv_sized_v1 and not self._eager:
            return "capturing_graphs"
        return base

    @property
    def building(self) -> bool:
        """A JIT kernel build has started and not yet reported its end."""
        return bool(self._building)

    def feed(self, line: str, now: float | None = None) -> PhaseEvent | None:
        """Take one line of output (tqdm's ``\\r`` updates and several lines are fine)."""
        self.last_line_at = time.monotonic() if now is None else now
        if line.endswith("\n"):
            line = line[:-1]
        event: PhaseEvent | None = None
        for log_line in iter_lines(line):
            produced = self._feed_one(log_line, self._lines_seen + log_line.no)
            if produced is not None and (event is None or event.phase != "failed"):
                event = produced
        self._lines_seen += line.count("\n") + 1
        return event

    def stalled(self, now: float, stall_s: float, phases: Iterable[str] = STALL_PHASES) -> bool:
        """No line for ``stall_s`` seconds while in a phase where that means a hang."""
        if self.last_line_at is None or self.phase not in set(phases) or self._building:
            return False
        return now - self.last_line_at >= stall_s

    def snapshot(self) -> PhaseEvent:
        """The current status as an event (for a status line redrawn on a timer)."""
        return PhaseEvent(self.phase, self.message, self.progress, self.figures)

    # -- internals --------------------------------------------------------------------

    def _feed_one(self, line: LogLine, line_no: int) -> PhaseEvent | None:
        update = self._classify(line)
        if update is None:
            return None
        self._figures.update(update.figures)
        if update.phase == "failed":
            return self._fail(line, line_no, soft=update.soft_failure)
        if (update.phase is None and self.phase == "failed") or (
            update.phase is not None and not self._accepts(update.phase)
        ):
            # A lagging rank's line, or news after a failure: keep its figures only.
            return self._emit(line_no) if update.figures else None
        if update.phase is not None:
            if update.phase != self.phase:
                self.progress = None
            self.phase = update.phase
            self._reached = _later(self._reached, update.phase)
            self._soft_failed_from = None
        if update.message is not None:
            self.message = update.message
        if update.progress is not None:
            self.progress = max(0.0, min(1.0, update.progress))
        if self.phase == "ready":
            self._building.clear()
        return self._emit(line_no)

    def _accepts(self, phase: Phase) -> bool:
        if self.phase == "failed":
            # Only progress past the point of a soft failure overrules it.
            base = self._soft_failed_from
            return base is not None and PHASE_ORDER[phase] > PHASE_ORDER[base]
        return PHASE_ORDER[phase] >= PHASE_ORDER[self.phase]

    def _fail(self, line: LogLine, line_no: int, *, soft: bool) -> PhaseEvent | None:
        if self.phase == "failed" and (soft or self._soft_failed_from is None):
            return None  # already failed; keep the first failure line
        if self.phase != "failed":
            self._reached = _later(self._reached, self.stage)
        if soft:
            self._soft_failed_from = self.phase
        else:
            self._soft_failed_from = None
        self.phase = "failed"
        self.progress = None
        self.failed_line = line.raw
        self.message = line.text.strip()[:300] or line.raw[:300]
        return self._emit(line_no)

    def _emit(self, line_no: int) -> PhaseEvent | None:
        progress = None if self.progress is None else round(self.progress, 2)
        key = (self.phase, self.message, progress, tuple(sorted(self._figures.items())))
        if key == self._last_key:
            return None
        self._last_key = key
        return PhaseEvent(self.phase, self.message, progress, self.figures, line_no)

    def _classify(self, line: LogLine) -> _Update | None:
        text = line.text.strip()
        if not text:
            return None
        if self.shutting_down:
            return None
        if _SHUTDOWN.match(text) and self.phase != "failed":
            self.shutting_down = True
            return _Update(message="shutting down: a stop was asked for")
        evidence = self._evidence(text)
        # A strong signal (``failure_signals``) ends the start-up whatever came before; a
        # bare exception line before the server is ready is a soft failure that later
        # progress lines can overrule (some libraries log a traceback and carry on).
        if STRONG_FAILURE.search(text) and line.errorish:
            return _Update(phase="failed", figures=evidence)
        for matcher in _MATCHERS:
            update = matcher(self, text)
            if update is not None:
                return update
        if (
            EXCEPTION_START.match(line.text)
            and line.errorish
            and PHASE_ORDER.get(self.phase, 0) < PHASE_ORDER["ready"]
        ):
            return _Update(phase="failed", soft_failure=True, figures=evidence)
        return _Update(figures=evidence) if evidence else None

    def _evidence(self, text: str) -> dict[str, Any]:
        """What a line proves besides the progress it reports (in any phase, after a failure
        too): the phase a traceback frame or an error shows was reached, and its figures."""
        if _EAGER.search(text):
            self._eager = True
        m = FRAME_IN.match(text)
        if m and m.group(1) in _FRAME_PHASES:
            self._reached = _later(self._reached, _FRAME_PHASES[m.group(1)])
            return {}
        m = _KV_V0_TOO_SMALL.search(text)
        if m:
            self._reached = _later(self._reached, "profiling")
            return {"kv_cache_tokens": _int(m.group(1))}
        m = _KV_V1_TOO_SMALL.search(text)
        if m:
            self._reached = _later(self._reached, "profiling")
            return {"available_kv_gib": _num(m.group(1))}
        return {}

    # Each matcher returns an update for the lines it knows, else None.

    def _m_pull(self, text: str) -> _Update | None:
        m = _PULL_MISSING.match(text)
        if m:
            self._figures["image"] = m.group(1)
            return _Update("pulling_image", f"pulling image {m.group(1)}", 0.0)
        m = _PULL_FROM.match(text)
        if m:
            image = f"{m.group(2)}:{m.group(1)}"
            return _Update("pulling_image", f"pulling image {image}", figures={"image": image})
        m = _PULL_LAYER.match(text)
        if m:
            layer, state = m.groups()
            self._layers[layer] = state in ("Pull complete", "Already exists")
            done = sum(self._layers.values())
            total = len(self._layers)
            return _Update("pulling_image", f"pulling image: {done}/{total} layers", done / total)
        m = _PULL_DONE.match(text)
        if m:
            return _Update("pulling_image", f"image {m.group(1)} pulled", 1.0)
        return None

    def _m_download(self, text: str) -> _Update | None:
        m = _FETCHING.match(text)
        if m:
            return _Update(
                "downloading_weights",
                f"downloading weights: {m.group(1)} files, {m.group(2)}%",
                int(m.group(2)) / 100,
            )
        m = _FILE_BAR.match(text)
        if m:
            name = m.group("name").strip()
            if len(self._files) < 10_000:
                self._files[name] = int(m.group("pct")) / 100
            overall = sum(self._files.values()) / len(self._files)
            return _Update("downloading_weights", f"downloading {name} {m.group('pct')}%", overall)
        m = _DOWNLOAD_TIME.search(text)
        if m:
            seconds = _num(m.group(1))
            return _Update(
                "loading_weights",
                f"weights downloaded in {seconds:.0f} s",
                figures={"download_s": seconds},
            )
        return None

    def _m_load(self, text: str) -> _Update | None:
        m = _START_LOAD.search(text)
        if m:
            return _Update("loading_weights", f"loading model {m.group(1)}")
        if _WEIGHTS_FORMAT.search(text):
            return _Update("loading_weights", "loading weights")
        m = _SHARDS.match(text)
        if m:
            pct, done, total = (int(g) for g in m.groups())
            return _Update("loading_weights", f"loading weights: shard {done}/{total}", pct / 100)
        m = _LOAD_WEIGHTS_TOOK.match(text)
        if m:
            seconds = _num(m.group(1))
            return _Update(
                "loading_weights",
                f"weights read in {seconds:.1f} s",
                1.0,
                figures={"weights_load_s": seconds},
            )
        m = _MODEL_LOADING_TOOK.match(text)
        if m:
            # Older vLLM printed "GB" but divided by 2**30: the figure is GiB either way.
            gib = _num(m.group(1))
            figures: dict[str, Any] = {"weights_gib": gib}
            message = f"weights loaded: {gib:.2f} GiB per GPU"
            if m.group(3):
                figures["model_load_s"] = _num(m.group(3))
                message += f" in {figures['model_load_s']:.1f} s"
            return _Update("loading_weights", message, 1.0, figures)
        return None

    def _m_compile(self, text: str) -> _Update | None:
        m = _AITER_START.match(text)
        if m:
            self._building.append(m.group(1))
            # A JIT build can happen in any phase: show it without moving the phase.
            return _Update(message=f"building kernel {m.group(1)} (JIT, once per image)")
        m = _AITER_FINISH.match(text)
        if m:
            name = m.group(1)
            if name in self._building:
                self._building.remove(name)
            elif self._building:
                self._building.pop(0)
            return _Update(message=f"built kernel {name} in {_num(m.group(2)):.0f} s")
        if _CPU_COMPILE_START.match(text):
            return _Update("compiling", "torch.compile: warming up the model")
        if _CPU_COMPILE_AGAIN.search(text):
            return _Update("compiling", "compile cache failed to load: compiling again")
        if _CPU_COMPILE_DONE.match(text):
            return _Update("compiling", "torch.compile: warm-up done", 1.0)
        if _COMPILE_CACHE.match(text) or _COMPILE_LOAD.match(text):
            return _Update("compiling", "torch.compile")
        m = _DYNAMO.match(text)
        if m:
            return _Update(
                "compiling", f"torch.compile: bytecode transform {_num(m.group(1)):.1f} s"
            )
        m = _COMPILE_GRAPH.match(text)
        if m:
            return _Update(
                "compiling", f"torch.compile: graph compiled in {_num(m.group(1)):.1f} s"
            )
        m = _COMPILE_TOTAL.match(text)
        if m:
            seconds = _num(m.group(1))
            return _Update(
                "compiling",
                f"torch.compile done in {seconds:.1f} s",
                figures={"compile_s": seconds},
            )
        return None

    def _m_profile(self, text: str) -> _Update | None:
        m = _V0_PROFILE.match(text)
        if m:
            return _Update("profiling", "profiling memory", figures={"profile_s": _num(m.group(1))})
        m = _V0_BUDGET.search(text)
        if m:
            return _Update(
                "profiling",
                "profiling memory",
                figures={
                    "total_gpu_gib": _num(m.group(1)),
                    "gpu_memory_utilization": _num(m.group(2)),
                },
            )
        m = _V0_KV.search(text)
        if m:
            figures = {"available_kv_gib": _num(m.group(1))}
            peak = _V0_PEAK.search(text)
            if peak:
                figures["activation_peak_gib"] = _num(peak.group(1))
            figures = self._binding_rank(figures)
            return _Update("profiling", self._kv_message(figures), figures=figures)
        m = _AVAILABLE_KV.match(text)
        if m:
            figures = self._binding_rank({"available_kv_gib": _num(m.group(1))})
            return _Update("profiling", self._kv_message(figures), figures=figures)
        m = _KV_TOKENS.match(text)
        if m:
            self._kv_sized_v1 = self._kv_sized_v1 or text.startswith("GPU ")
            figures = {"kv_cache_tokens": _int(m.group(1))}
            both = _CONCURRENCY.search(text)
            if both:
                figures["max_model_len"] = _int(both.group(1))
                figures["max_concurrency"] = _num(both.group(2))
            return _Update("profiling", self._kv_message(figures), figures=figures)
        m = _BLOCKS.match(text)
        if m and (m.group(1) or m.group(2)).upper() != "CPU":
            figures = {"kv_cache_blocks": _int(m.group(3))}
            return _Update("profiling", self._kv_message(figures), figures=figures)
        m = _CONCURRENCY.match(text)
        if m:
            figures = {"max_model_len": _int(m.group(1)), "max_concurrency": _num(m.group(2))}
            return _Update("profiling", self._kv_message(figures), figures=figures)
        m = _V06_PROFILE.match(text)
        if m:
            figures = {
                _V06_FIGURES[key]: _num(value)
                for key, value in _V06_PAIR.findall(text)
                if key in _V06_FIGURES
            }
            return _Update("profiling", self._kv_message(figures), figures=figures)
        m = _V2_USAGE.match(text)
        if m:
            total, util, weights, activation, non_torch, graphs = (
                m.group(i) for i in (2, 3, 4, 5, 6, 7)
            )
            figures = {
                "total_gpu_gib": _num(total),
                "gpu_memory_utilization": _num(util),
                "weights_gib": _num(weights),
                "activation_peak_gib": _num(activation),
                "non_torch_gib": _num(non_torch),
            }
            if graphs:
                figures["graph_memory_gib"] = _num(graphs)
            kv = _V2_KV_IN_USE.search(text)
            if kv:
                figures["available_kv_gib"] = _num(kv.group(1))
            return _Update(message=self._kv_message(figures), figures=figures)
        m = _NUM_GPU_BLOCKS.search(text)
        if m:
            return _Update(figures={"kv_cache_blocks": _int(m.group(1))})
        if _KERNEL_WARMUP.match(text):
            return _Update("profiling", "warming up kernels")
        m = _GRAPH_ESTIMATE.match(text)
        if m:
            return _Update(
                "profiling",
                "profiling memory",
                figures={"graph_memory_estimate_gib": _num(m.group(1))},
            )
        m = _MAX_MODEL_LEN.match(text)
        if m:
            return _Update(figures={"max_model_len": _int(m.group(1))})
        return None

    def _binding_rank(self, figures: dict[str, Any]) -> dict[str, Any]:
        """One rank's profile figures, kept only if its KV memory is the smallest so far.

        Each TP/PP rank prints its own profile line and vLLM sizes the cache by the rank with
        the least memory left, so the figures a reader wants are that rank's, whatever order
        the workers' lines arrive in."""
        held = self._figures.get("available_kv_gib")
        if self.phase == "profiling" and held is not None and figures["available_kv_gib"] > held:
            return {}
        return figures

    def _kv_message(self, new: Mapping[str, Any]) -> str:
        figures = {**self._figures, **new}
        parts = []
        if "available_kv_gib" in figures:
            parts.append(f"{figures['available_kv_gib']:.2f} GiB")
        if "kv_cache_tokens" in figures:
            parts.append(f"{_fmt_int(figures['kv_cache_tokens'])} tokens")
        elif "kv_cache_blocks" in figures:
            parts.append(f"{_fmt_int(figures['kv_cache_blocks'])} blocks")
        if "max_concurrency" in figures:
            length = figures.get("max_model_len")
            at = f" at {_fmt_int(length)} tokens" if length else ""
            parts.append(f"{figures['max_concurrency']:g}x concurrency{at}")
        return "KV cache: " + ", ".join(parts) if parts else "profiling memory"

    def _m_capture(self, text: str) -> _Update | None:
        m = _CAPTURE_BAR.match(text)
        if m:
            pct, done, total = (int(g) for g in m.groups())
            return _Update("capturing_graphs", f"capturing graphs: {done}/{total}", pct / 100)
        m = _CAPTURE_DONE.match(text)
        if m:
            figures: dict[str, Any] = {"graph_capture_s": _num(m.group(1))}
            message = f"graphs captured in {figures['graph_capture_s']:.0f} s"
            if m.group(2):
                figures["graph_memory_gib"] = _num(m.group(2))
                message += f" ({figures['graph_memory_gib']:.2f} GiB)"
            return _Update("capturing_graphs", message, 1.0, figures)
        if _CAPTURE_START.match(text):
            return _Update("capturing_graphs", "capturing graphs")
        m = _CAPTURE_ONE.match(text)
        if m:
            return _Update("capturing_graphs", f"capturing graphs ({m.group(1)})")
        return None

    def _m_server(self, text: str) -> _Update | None:
        m = _INIT_ENGINE.match(text)
        if m:
            seconds = _num(m.group(1))
            return _Update(
                "starting_server",
                f"engine initialised in {seconds:.0f} s; starting the API server",
                figures={"init_engine_s": seconds},
            )
        m = _API_START.match(text)
        if m:
            url = m.group(1)
            return _Update(
                "starting_server", f"API server starting on {url}", figures={"api_url": url}
            )
        if _ROUTES.match(text):
            return _Update("starting_server", "API server starting")
        m = _READY_UVICORN.match(text)
        if m:
            return _Update("ready", f"API server listening on {m.group(1)}")
        if _READY_APP.match(text):
            return _Update("ready", "API server ready")
        return None

    def _m_version(self, text: str) -> _Update | None:
        m = _ENGINE_VERSION.match(text)
        if m:
            figures = {"vllm_version": m.group(2)}
            if m.group(1):
                figures["engine"] = m.group(1)
            return _Update(figures=figures)
        m = _API_VERSION.match(text) or _BANNER_VERSION.search(text)
        if m:
            return _Update(figures={"vllm_version": m.group(1)})
        return None


_MATCHERS: tuple[Callable[[PhaseTracker, str], _Update | None], ...] = (
    PhaseTracker._m_capture,
    PhaseTracker._m_load,
    PhaseTracker._m_profile,
    PhaseTracker._m_compile,
    PhaseTracker._m_server,
    PhaseTracker._m_download,
    PhaseTracker._m_pull,
    PhaseTracker._m_version,
)


def _later(a: Phase, b: Phase) -> Phase:
    """The later of two phases, ``b`` (the newer) on a tie; ``failed`` is no phase."""
    if b == "failed":
        return a
    if a == "failed":
        return b
    return b if PHASE_ORDER[b] >= PHASE_ORDER[a] else a


def track(lines: Iterable[str]) -> list[PhaseEvent]:
    """Every event a fresh tracker produces over these lines (logs, tests, ``instinct logs``)."""
    tracker = PhaseTracker()
    events = []
    for number, line in enumerate(lines):
        event = tracker.feed(line, now=float(number))
        if event is not None:
            events.append(event)
    return events
