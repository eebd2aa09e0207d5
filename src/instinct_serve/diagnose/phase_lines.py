"""What one line of a vLLM start-up log says: the phase it shows, its status message and
the figures it carries (weights size, KV cache tokens, concurrency, graph capture time).

``LineReader`` knows the wording of several vLLM versions (V0 and V1 engines, 0.5 to 0.2x),
docker pull and huggingface_hub downloads, and keeps what reading needs across lines (the
docker layers and files seen, the JIT builds running, whether V1 sized its KV cache, eager
mode); ``phases.PhaseTracker`` decides what the updates mean for the start-up status. Pure:
text in, updates out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from instinct_serve.diagnose.capture_errors import capture_error_in

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

# Versions
_ENGINE_VERSION = re.compile(r"^Initializing an? (?:(V0|V1) )?LLM engine \(v([^)\s]+)\)")
_API_VERSION = re.compile(r"^vLLM API server version (\S+)")
_BANNER_VERSION = re.compile(r"█\s+version (\d+\.\d+\S*)\s*$")


def _v2_usage(m: re.Match[str], text: str) -> dict[str, Any]:
    """The V2 model runner's memory figures (``_V2_USAGE``, and the KV cache in use)."""
    total, util, weights, activation, non_torch, graphs = (m.group(i) for i in (2, 3, 4, 5, 6, 7))
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
    return figures


@dataclass
class Update:
    """What a line says: a phase, a message, a progress within the phase, figures, or that
    it is a failure (``soft_failure``: one that later progress may overrule)."""

    phase: Phase | None = None
    message: str | None = None
    progress: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    soft_failure: bool = False


class LineReader:
    """Reads lines into ``Update``s (see the module docstring).

    ``figures`` is the tracker's figures so far (shared, not copied): the KV cache message
    sums them up, a tensor-parallel rank's profile is weighed against them, and the image a
    pull is about to fetch is recorded in them.
    """

    def __init__(self, figures: dict[str, Any]) -> None:
        self._figures = figures
        self._phase: Phase = "starting"  # the tracker's phase at the line being read
        self._layers: dict[str, bool] = {}  # docker layer id -> done
        self._files: dict[str, float] = {}  # download file name -> fraction
        self.building: list[str] = []  # JIT modules started and not finished
        self.kv_sized_v1 = False  # V1's "GPU KV cache size" line: graph capture comes next
        self.eager = False

    def read(self, text: str, phase: Phase) -> Update | None:
        """The progress a stripped, non-empty line reports, if any, in the tracker's ``phase``."""
        self._phase = phase
        for matcher in _MATCHERS:
            update = matcher(self, text)
            if update is not None:
                return update
        return None

    def evidence(self, text: str) -> tuple[Phase | None, dict[str, Any]]:
        """What a line proves besides the progress it reports (in any phase, after a failure
        too): the phase a traceback frame or an error shows was reached, and its figures."""
        if _EAGER.search(text):
            self.eager = True
        m = FRAME_IN.match(text)
        if m and m.group(1) in _FRAME_PHASES:
            return _FRAME_PHASES[m.group(1)], {}
        m = _KV_V0_TOO_SMALL.search(text)
        if m:
            return "profiling", {"kv_cache_tokens": _int(m.group(1))}
        m = _KV_V1_TOO_SMALL.search(text)
        if m:
            return "profiling", {"available_kv_gib": _num(m.group(1))}
        if capture_error_in(text) is not None:  # HIP refuses it only while a stream captures
            return "capturing_graphs", {}
        return None, {}

    # Each matcher returns an update for the lines it knows, else None.

    def _m_pull(self, text: str) -> Update | None:
        m = _PULL_MISSING.match(text)
        if m:
            self._figures["image"] = m.group(1)
            return Update("pulling_image", f"pulling image {m.group(1)}", 0.0)
        m = _PULL_FROM.match(text)
        if m:
            image = f"{m.group(2)}:{m.group(1)}"
            return Update("pulling_image", f"pulling image {image}", figures={"image": image})
        m = _PULL_LAYER.match(text)
        if m:
            layer, state = m.groups()
            self._layers[layer] = state in ("Pull complete", "Already exists")
            done = sum(self._layers.values())
            total = len(self._layers)
            return Update("pulling_image", f"pulling image: {done}/{total} layers", done / total)
        m = _PULL_DONE.match(text)
        if m:
            return Update("pulling_image", f"image {m.group(1)} pulled", 1.0)
        return None

    def _m_download(self, text: str) -> Update | None:
        m = _FETCHING.match(text)
        if m:
            return Update(
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
            return Update("downloading_weights", f"downloading {name} {m.group('pct')}%", overall)
        m = _DOWNLOAD_TIME.search(text)
        if m:
            seconds = _num(m.group(1))
            return Update(
                "loading_weights",
                f"weights downloaded in {seconds:.0f} s",
                figures={"download_s": seconds},
            )
        return None

    def _m_load(self, text: str) -> Update | None:
        m = _START_LOAD.search(text)
        if m:
            return Update("loading_weights", f"loading model {m.group(1)}")
        if _WEIGHTS_FORMAT.search(text):
            return Update("loading_weights", "loading weights")
        m = _SHARDS.match(text)
        if m:
            pct, done, total = (int(g) for g in m.groups())
            return Update("loading_weights", f"loading weights: shard {done}/{total}", pct / 100)
        m = _LOAD_WEIGHTS_TOOK.match(text)
        if m:
            seconds = _num(m.group(1))
            return Update(
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
            return Update("loading_weights", message, 1.0, figures)
        return None

    def _m_compile(self, text: str) -> Update | None:
        m = _AITER_START.match(text)
        if m:
            self.building.append(m.group(1))
            # A JIT build can happen in any phase: show it without moving the phase.
            return Update(message=f"building kernel {m.group(1)} (JIT, once per image)")
        m = _AITER_FINISH.match(text)
        if m:
            name = m.group(1)
            if name in self.building:
                self.building.remove(name)
            elif self.building:
                self.building.pop(0)
            return Update(message=f"built kernel {name} in {_num(m.group(2)):.0f} s")
        if _CPU_COMPILE_START.match(text):
            return Update("compiling", "torch.compile: warming up the model")
        if _CPU_COMPILE_AGAIN.search(text):
            return Update("compiling", "compile cache failed to load: compiling again")
        if _CPU_COMPILE_DONE.match(text):
            return Update("compiling", "torch.compile: warm-up done", 1.0)
        if _COMPILE_CACHE.match(text) or _COMPILE_LOAD.match(text):
            return Update("compiling", "torch.compile")
        m = _DYNAMO.match(text)
        if m:
            return Update(
                "compiling", f"torch.compile: bytecode transform {_num(m.group(1)):.1f} s"
            )
        m = _COMPILE_GRAPH.match(text)
        if m:
            return Update("compiling", f"torch.compile: graph compiled in {_num(m.group(1)):.1f} s")
        m = _COMPILE_TOTAL.match(text)
        if m:
            seconds = _num(m.group(1))
            return Update(
                "compiling",
                f"torch.compile done in {seconds:.1f} s",
                figures={"compile_s": seconds},
            )
        return None

    def _m_memory(self, text: str) -> Update | None:
        """The memory profile: its time, the budget, and what is left for the KV cache."""
        m = _V0_PROFILE.match(text)
        if m:
            return Update("profiling", "profiling memory", figures={"profile_s": _num(m.group(1))})
        m = _V0_BUDGET.search(text)
        if m:
            return Update(
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
            return Update("profiling", self._kv_message(figures), figures=figures)
        m = _AVAILABLE_KV.match(text)
        if m:
            figures = self._binding_rank({"available_kv_gib": _num(m.group(1))})
            return Update("profiling", self._kv_message(figures), figures=figures)
        m = _V06_PROFILE.match(text)
        if m:
            figures = {
                _V06_FIGURES[key]: _num(value)
                for key, value in _V06_PAIR.findall(text)
                if key in _V06_FIGURES
            }
            return Update("profiling", self._kv_message(figures), figures=figures)
        m = _V2_USAGE.match(text)
        if m:
            figures = _v2_usage(m, text)
            return Update(message=self._kv_message(figures), figures=figures)
        return None

    def _m_kv_cache(self, text: str) -> Update | None:
        """The KV cache's size (tokens or blocks), the concurrency it allows, the length."""
        m = _KV_TOKENS.match(text)
        if m:
            self.kv_sized_v1 = self.kv_sized_v1 or text.startswith("GPU ")
            figures: dict[str, Any] = {"kv_cache_tokens": _int(m.group(1))}
            both = _CONCURRENCY.search(text)
            if both:
                figures["max_model_len"] = _int(both.group(1))
                figures["max_concurrency"] = _num(both.group(2))
            return Update("profiling", self._kv_message(figures), figures=figures)
        m = _BLOCKS.match(text)
        if m and (m.group(1) or m.group(2)).upper() != "CPU":
            figures = {"kv_cache_blocks": _int(m.group(3))}
            return Update("profiling", self._kv_message(figures), figures=figures)
        m = _CONCURRENCY.match(text)
        if m:
            figures = {"max_model_len": _int(m.group(1)), "max_concurrency": _num(m.group(2))}
            return Update("profiling", self._kv_message(figures), figures=figures)
        m = _NUM_GPU_BLOCKS.search(text)
        if m:
            return Update(figures={"kv_cache_blocks": _int(m.group(1))})
        m = _MAX_MODEL_LEN.match(text)
        if m:
            return Update(figures={"max_model_len": _int(m.group(1))})
        return None

    def _m_before_capture(self, text: str) -> Update | None:
        """Between sizing the KV cache and capturing graphs: kernel warm-up, graph memory."""
        if _KERNEL_WARMUP.match(text):
            return Update("profiling", "warming up kernels")
        m = _GRAPH_ESTIMATE.match(text)
        if m:
            return Update(
                "profiling",
                "profiling memory",
                figures={"graph_memory_estimate_gib": _num(m.group(1))},
            )
        return None

    def _binding_rank(self, figures: dict[str, Any]) -> dict[str, Any]:
        """One rank's profile figures, kept only if its KV memory is the smallest so far.

        Each TP/PP rank prints its own profile line and vLLM sizes the cache by the rank with
        the least memory left, so the figures a reader wants are that rank's, whatever order
        the workers' lines arrive in."""
        held = self._figures.get("available_kv_gib")
        if self._phase == "profiling" and held is not None and figures["available_kv_gib"] > held:
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

    def _m_capture(self, text: str) -> Update | None:
        m = _CAPTURE_BAR.match(text)
        if m:
            pct, done, total = (int(g) for g in m.groups())
            return Update("capturing_graphs", f"capturing graphs: {done}/{total}", pct / 100)
        m = _CAPTURE_DONE.match(text)
        if m:
            figures: dict[str, Any] = {"graph_capture_s": _num(m.group(1))}
            message = f"graphs captured in {figures['graph_capture_s']:.0f} s"
            if m.group(2):
                figures["graph_memory_gib"] = _num(m.group(2))
                message += f" ({figures['graph_memory_gib']:.2f} GiB)"
            return Update("capturing_graphs", message, 1.0, figures)
        if _CAPTURE_START.match(text):
            return Update("capturing_graphs", "capturing graphs")
        m = _CAPTURE_ONE.match(text)
        if m:
            return Update("capturing_graphs", f"capturing graphs ({m.group(1)})")
        return None

    def _m_server(self, text: str) -> Update | None:
        m = _INIT_ENGINE.match(text)
        if m:
            seconds = _num(m.group(1))
            return Update(
                "starting_server",
                f"engine initialised in {seconds:.0f} s; starting the API server",
                figures={"init_engine_s": seconds},
            )
        m = _API_START.match(text)
        if m:
            url = m.group(1)
            return Update(
                "starting_server", f"API server starting on {url}", figures={"api_url": url}
            )
        if _ROUTES.match(text):
            return Update("starting_server", "API server starting")
        m = _READY_UVICORN.match(text)
        if m:
            return Update("ready", f"API server listening on {m.group(1)}")
        if _READY_APP.match(text):
            return Update("ready", "API server ready")
        return None

    def _m_version(self, text: str) -> Update | None:
        m = _ENGINE_VERSION.match(text)
        if m:
            figures = {"vllm_version": m.group(2)}
            if m.group(1):
                figures["engine"] = m.group(1)
            return Update(figures=figures)
        m = _API_VERSION.match(text) or _BANNER_VERSION.search(text)
        if m:
            return Update(figures={"vllm_version": m.group(1)})
        return None


_MATCHERS: tuple[Callable[[LineReader, str], Update | None], ...] = (
    LineReader._m_capture,
    LineReader._m_load,
    # The memory profile's three, in this order: their unanchored patterns (V0's budget and
    # KV lines, V1's block count) are tried before the anchored ones that follow them.
    LineReader._m_memory,
    LineReader._m_kv_cache,
    LineReader._m_before_capture,
    LineReader._m_compile,
    LineReader._m_server,
    LineReader._m_download,
    LineReader._m_pull,
    LineReader._m_version,
)
