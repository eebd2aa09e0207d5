"""Every overhead term ``fit`` charges, by vLLM version and platform: one table, with sources.

A row says what one term is from a vLLM release on, on one platform (``rocm``, ``cuda``,
``cpu``), optionally only under an environment setting (``when``), and cites the vLLM source
(file and version, or the PR) it rests on. ``select(term, version, platform, env)`` takes the
newest row at or below ``version``: among the rows of that release, the one whose ``when``
holds, else the one without ``when``. The V0 engine has its own sampler (``V0_SAMPLER``).

Terms and values:

- ``sampler``: how ``_dummy_sampler_run`` applies top-k/top-p to ``max_num_seqs x vocab``
  logits; its bytes per logit (``SAMPLER_BYTES_PER_LOGIT``):
  - ``sort``: PyTorch's ``apply_top_k_top_p`` sorts the fp32 logits (values + int64 indices),
    then softmax/cumsum/masks: 36 bytes per logit (gpt-oss-120b's 7.45 GiB overhead at 1024
    seqs x 201,088 vocab, vllm#23278, a pip install without FlashInfer);
  - ``flashinfer`` / ``aiter``: a rejection-sampling kernel on the probabilities, no sort;
    ``triton``: the pivot-search masking of ``topk_topp_triton.py`` (PR #33538), no sort. PR
    #33538's own measurement at 512 x 131,072 fp32 logits: PyTorch 2.50 GB, Triton 834 MB,
    FlashInfer 768 MB; scaled by the sort path's 36 / 40 (what that benchmark counts beside
    vLLM's charge): 12 bytes per logit for the kernels (the softmax copy of the logits
    and the fp32 logits themselves);
  - ``none``: the CPU worker sizes its KV cache without a GPU profile.
- ``graphs``: ``outside`` (graphs are captured after the KV cache is sized and come out of
  the ``1 - gpu_memory_utilization`` headroom) or ``estimate`` (``profile_cudagraph_memory``
  charges them in the budget, ``overhead.graph_estimate``).
- ``collectives``: NCCL/RCCL and custom all-reduce buffers per TP/PP rank, in GiB per topology
  (``nvswitch``: SXM boards; ``one_node``: PCIe, xGMI; ``across_nodes``), counted while vLLM
  measured non-torch memory from a snapshot taken before the distributed init.
- ``load``: what "Model loading took" measures and the budget charges as weights: ``torch``
  (the allocations) or ``device`` (used device memory, ``total - free``), as a factor on the
  tensor bytes.
- ``runner``: which GPU model runner a generate model gets by default (``model_runner``):
  the V1 runner (``gpu_model_runner.py``) or the V2 one (``vllm/v1/worker/gpu/model_runner.py``),
  by ``VllmConfig.use_v2_model_runner``. The V2 runner's ``profile_cudagraph_memory`` returns
  0 up to v0.28.0 (graphs are not charged: ``V2_GRAPHS_FROM``) and its ``_dummy_sampler_run``
  runs only the default pass ("the sampler may skip top_k, top_p", the model-dtype logits:
  sampler kind ``v2_default``) up to v0.32 (``V2_SAMPLER_FROM``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from instinct_serve.names import PLATFORMS, normalise_platform

GIB = 2**30
TERMS = ("sampler", "graphs", "collectives", "load", "runner")
__all__ = [
    "PLATFORMS",
    "ROWS",
    "Row",
    "RunnerModel",
    "Terms",
    "model_runner",
    "normalise_platform",
    "runner_model",
    "select",
    "terms",
]
SAMPLER_BYTES_PER_LOGIT = {
    "sort": 36,
    "flashinfer": 12,
    "aiter": 12,
    "triton": 12,
    "v2_default": 2,  # the bf16 logits compute_logits returns; no fp32 copy, no top-k/top-p
    "none": 0,
}
# the ROCm device-wide load figure over the tensor bytes: the calibration case
# mi300x-llama8b-v0-gmu0.9 logs 15.30 GiB for 14.96 GiB of tensors (+2.3 %)
ROCM_LOAD_FACTOR = 1.023

V0_SAMPLER = (
    "sort",
    "vllm/model_executor/layers/sampler.py (V0): _apply_top_k_top_p sorts the logits",
)


@dataclass(frozen=True)
class Row:
    term: str
    platform: str
    since: str  # the first release the row holds for ("0" = every older one)
    value: str
    source: str
    when: str = ""  # "NAME=VALUE": the row holds only with that environment setting
    gib: tuple[tuple[str, float], ...] = ()  # collectives: GiB per topology
    factor: float = 1.0  # load: the logged figure over the tensor bytes
    archs: tuple[str, ...] = ()  # runner: DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES of the release

    def amount(self, topology: str) -> float:
        return dict(self.gib).get(topology, 0.0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"term": self.term, "platform": self.platform}
        out |= {"since": self.since, "value": self.value, "source": self.source}
        if self.when:
            out["when"] = self.when
        if self.gib:
            out["gib"] = dict(self.gib)
        if self.term == "load":
            out["factor"] = self.factor
        if self.archs:
            out["archs"] = list(self.archs)
        return out


_SORT_PIP = (
    "vllm/v1/sample/ops/topk_topp_sampler.py v0.8.5: FlashInfer >= 0.2.3 'is not backward "
    "compatible', PyTorch-native fallback (log of SystemPanic/flashinfer-windows#1)"
)
_FI_EXTRA = (
    "PR #15777 (v0.9.0) adapts the V1 sampler to FlashInfer 0.2.3; FlashInfer is not a "
    "dependency of the pip wheel (PR #21959: the vllm[flashinfer] extra), so the "
    "PyTorch sort runs unless FlashInfer is installed and on (vllm#23278, v0.10.1: sort)"
)
_FI_OPT_IN = (
    "PR #26443 makes FlashInfer a CUDA dependency and PR #26859 makes its sampler opt-in "
    "(VLLM_USE_FLASHINFER_SAMPLER=1), both 2025-10, after v0.11.0"
)
_TRITON = (
    "PR #33538: apply_top_k_top_p uses topk_topp_triton.py when Triton is present "
    "(vllm.v1.sample.ops.topk_topp_triton in the v0.18.0 API docs)"
)
_FI_DEFAULT = (
    "PR #40376 (2026-04) turns the FlashInfer sampler on by default on CUDA; "
    "VLLM_USE_FLASHINFER_SAMPLER=0 falls back to the Triton path "
    "(topk_topp_sampler.py flashinfer_sampler_supported); release taken as v0.21.0"
)
_AITER = (
    "PR #26084: forward_hip uses aiter's top_k_top_p_sampling_from_probs when "
    "VLLM_ROCM_USE_AITER=1 (2025-10); release taken as v0.12.0"
)
_AITER_OFF = (
    "PR #32413 (2026-01-15) hard-disables the aiter sampler (DISABLE_AITER_SAMPLER); "
    "release taken as v0.15.0"
)
_AITER_BACK = (
    "PR #43331 (2026-05-21) turns the aiter sampler back on under VLLM_ROCM_USE_AITER=1 "
    "(VLLM_ROCM_USE_AITER_SAMPLER, default on), else the Triton path; before v0.22.0's "
    "PRs (#43385)"
)
_IN_BUDGET = (
    "V0 worker.py and V1 gpu_worker.py before PR #25359: the non-torch baseline is taken "
    "before the distributed init, so NCCL/RCCL buffers count; NVSwitch 1.8 GiB = the TP2 - "
    "TP1 non-torch of one H100 build (PR #10511: 3.58 vs 1.79 GiB); elsewhere 0.4 GiB "
    "(no log isolates RCCL or PCIe buffers)"
)
_OUT_OF_BUDGET = (
    "PR #25359 (v0.11.0): gpu_worker.init_device initialises the distributed environment "
    "(NCCL, custom all-reduce, warm-up all-reduce) before MemorySnapshot(), so the buffers "
    "sit outside gpu_memory_utilization x total on one node and across nodes"
)
_GRAPHS_OUT = (
    "vllm/v1/worker/gpu_worker.py compile_or_warm_up_model captures graphs after the KV cache "
    "is allocated: "
    "they come out of the 1 - gpu_memory_utilization headroom"
)
_GRAPHS_IN = (
    "vllm/v1/worker/gpu_model_runner.py profile_cudagraph_memory: 'CUDA graph memory "
    "profiling is enabled (default since v0.21.0)'; HIP graphs take the same path (rocm.py "
    "CUDAGraphWrapper)"
)
_LOAD_DEVICE = (
    "vllm/platforms/rocm.py get_current_memory_usage: mem_get_info total - free (the whole "
    "device), which DeviceMemoryProfiler turns into 'Model loading took' and the profile "
    "charges as weights_memory; factor from the calibration case mi300x-llama8b-v0-gmu0.9"
)
_LOAD_TORCH = (
    "vllm/platforms/cuda.py get_current_memory_usage: torch.cuda.max_memory_allocated "
    "(torch's allocations only)"
)
_CPU = (
    "vllm/v1/worker/cpu_worker.py determine_available_memory: the KV cache is the explicit "
    "size (--kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE), else requested memory - RSS; "
    "no GPU profile, no graphs, no device collectives"
)
_RUNNER_OPT_IN = (
    "vllm/envs.py v0.21.0: VLLM_USE_V2_MODEL_RUNNER defaults to '0'; gpu_worker.py builds the "
    "V1 GPUModelRunner unless it is set"
)
_RUNNER_LISTED_DENSE = (
    "vllm/config/vllm.py v0.22.0/v0.23.0 _is_default_v2_model_runner_model: an architecture of "
    "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES and 'not model_config.is_moe and not "
    "model_config.is_quantized'"
)
_RUNNER_LISTED = (
    "vllm/config/vllm.py v0.24.0 _is_default_v2_model_runner_model: any architecture of "
    "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES"
)
_RUNNER_DENSE = (
    "vllm/config/vllm.py v0.25.0-v0.28.0 _is_default_v2_model_runner_model: a listed "
    "architecture, or 'not model_config.is_moe' for a generate model that is neither hybrid "
    "nor attention-free (v0.26.0 not read; the RTX 4090 logs of Qwen2.5-0.5B on v0.27.1 come from "
    "v1/worker/gpu/model_runner.py)"
)
_RUNNER_ALL = (
    "vllm/config/vllm.py v0.29.0 use_v2_model_runner: every model unless a feature is "
    "unsupported; on ROCm not ROCM_DEFAULT_MRV1_ARCHITECTURES"
)
_V22 = ("Qwen3ForCausalLM",)
_V23 = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM")
_V24 = (*_V23, "DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM")
_V25 = ("DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM")
_V27 = (
    *_V25,
    "InklingForCausalLM",
    "InklingForConditionalGeneration",
    "KimiK3ForConditionalGeneration",
    "LongcatFlashNgramForCausalLM",
)
_V28 = (*_V27, "DeepseekV4ForCausalLM")
_ROCM_V1 = ("DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM")  # v0.29.0, ROCm keeps V1


_DENSE = "listed_or_dense"


def _rocm_v1(platform: str) -> tuple[str, ...]:
    """v0.29.0: the architectures ROCm keeps on the V1 runner (none elsewhere)."""
    return _ROCM_V1 if platform == "rocm" else ()


def _rocm(platform: str, archs: tuple[str, ...]) -> tuple[str, ...]:
    """v0.27.1 ROCM_EXCLUDED_V2_MODEL_RUNNER_ARCHITECTURES: Kimi K3 stays on V1 on ROCm."""
    return tuple(a for a in archs if platform != "rocm" or a != "KimiK3ForConditionalGeneration")


# the V2 runner's graph estimate and full sampler warm-up (module doc, ``runner``)
V2_GRAPHS_FROM = "0.29.0"  # v0.21.0-v0.28.0: 'return 0'; v0.29.0: _profile_cudagraph_memory
V2_SAMPLER_FROM = "0.33.0"  # v0.33.0: 'Warmup-param pass ... pays for the fp32 logits pipeline'
_NVSWITCH = (("nvswitch", 1.8), ("one_node", 0.4), ("across_nodes", 0.4))
_NONE = (("nvswitch", 0.0), ("one_node", 0.0), ("across_nodes", 0.0))

ROWS: tuple[Row, ...] = (
    Row("sampler", "cuda", "0", "sort", _SORT_PIP),
    Row("sampler", "cuda", "0.9.0", "sort", _FI_EXTRA),
    Row("sampler", "cuda", "0.9.0", "flashinfer", _FI_EXTRA, "VLLM_USE_FLASHINFER_SAMPLER=1"),
    Row("sampler", "cuda", "0.11.1", "sort", _FI_OPT_IN),
    Row("sampler", "cuda", "0.11.1", "flashinfer", _FI_OPT_IN, "VLLM_USE_FLASHINFER_SAMPLER=1"),
    Row("sampler", "cuda", "0.18.0", "triton", _TRITON),
    Row("sampler", "cuda", "0.18.0", "flashinfer", _TRITON, "VLLM_USE_FLASHINFER_SAMPLER=1"),
    Row("sampler", "cuda", "0.21.0", "flashinfer", _FI_DEFAULT),
    Row("sampler", "cuda", "0.21.0", "triton", _FI_DEFAULT, "VLLM_USE_FLASHINFER_SAMPLER=0"),
    Row("sampler", "rocm", "0", "sort", "topk_topp_sampler.py: ROCm takes forward_native"),
    Row("sampler", "rocm", "0.12.0", "sort", _AITER),
    Row("sampler", "rocm", "0.12.0", "aiter", _AITER, "VLLM_ROCM_USE_AITER=1"),
    Row("sampler", "rocm", "0.15.0", "sort", _AITER_OFF),
    Row("sampler", "rocm", "0.18.0", "triton", _TRITON),
    Row("sampler", "rocm", "0.22.0", "triton", _AITER_BACK),
    Row("sampler", "rocm", "0.22.0", "aiter", _AITER_BACK, "VLLM_ROCM_USE_AITER=1"),
    Row("sampler", "cpu", "0", "none", _CPU),
    Row("graphs", "cuda", "0", "outside", _GRAPHS_OUT),
    Row("graphs", "cuda", "0.21.0", "estimate", _GRAPHS_IN),
    Row("graphs", "rocm", "0", "outside", _GRAPHS_OUT),
    Row("graphs", "rocm", "0.21.0", "estimate", _GRAPHS_IN),
    Row("graphs", "cpu", "0", "none", _CPU),
    Row("collectives", "cuda", "0", "in_budget", _IN_BUDGET, gib=_NVSWITCH),
    Row("collectives", "cuda", "0.11.0", "outside", _OUT_OF_BUDGET, gib=_NONE),
    Row("collectives", "rocm", "0", "in_budget", _IN_BUDGET, gib=_NVSWITCH),
    Row("collectives", "rocm", "0.11.0", "outside", _OUT_OF_BUDGET, gib=_NONE),
    Row("collectives", "cpu", "0", "none", _CPU, gib=_NONE),
    Row("load", "cuda", "0", "torch", _LOAD_TORCH),
    Row("load", "rocm", "0", "device", _LOAD_DEVICE, factor=ROCM_LOAD_FACTOR),
    Row("load", "cpu", "0", "none", _CPU),
    *(
        row
        for plat in ("cuda", "rocm")
        for row in (
            Row("runner", plat, "0", "v1", _RUNNER_OPT_IN),
            Row("runner", plat, "0.22.0", "listed_dense", _RUNNER_LISTED_DENSE, archs=_V22),
            Row("runner", plat, "0.23.0", "listed_dense", _RUNNER_LISTED_DENSE, archs=_V23),
            Row("runner", plat, "0.24.0", "listed", _RUNNER_LISTED, archs=_V24),
            Row("runner", plat, "0.25.0", _DENSE, _RUNNER_DENSE, archs=_V25),
            Row("runner", plat, "0.27.1", _DENSE, _RUNNER_DENSE, archs=_rocm(plat, _V27)),
            Row("runner", plat, "0.28.0", _DENSE, _RUNNER_DENSE, archs=_rocm(plat, _V28)),
            Row("runner", plat, "0.29.0", "all", _RUNNER_ALL, archs=_rocm_v1(plat)),
        )
    ),
    Row("runner", "cpu", "0", "v1", _CPU),
)


def _base(version: str) -> Version:
    try:
        return Version(Version(version.strip().lstrip("v")).base_version)
    except InvalidVersion:
        return Version("0")


def _holds(row: Row, env: dict[str, str]) -> bool:
    name, _, value = row.when.partition("=")
    return env.get(name, "").strip() == value


def select(term: str, version: str, platform: str, env: dict[str, str] | None = None) -> Row:
    """The row of ``term`` for ``version`` on ``platform`` (module doc)."""
    env = env or {}
    plat = platform if platform in PLATFORMS else "rocm"
    rows = [r for r in ROWS if r.term == term and r.platform == plat]
    ver = _base(version)
    since = max((_base(r.since) for r in rows if _base(r.since) <= ver), default=Version("0"))
    same = [r for r in rows if _base(r.since) == since]
    conditional = [r for r in same if r.when and _holds(r, env)]
    return conditional[0] if conditional else next(r for r in same if not r.when)


@dataclass(frozen=True)
class RunnerModel:
    """What ``use_v2_model_runner`` reads of a model (``_is_default_v2_model_runner_model``)."""

    architectures: tuple[str, ...] = ()
    moe: bool = False
    hybrid: bool = False  # recurrent (Mamba, gated delta net) layers beside attention
    quantized: bool = False
    attention_free: bool = False


def runner_model(cfg: Any, layers: Sequence[Any]) -> RunnerModel:
    """A ``fit.config.ModelConfig`` and its ``kv`` layers as the runner choice reads them."""
    recurrent = sum(1 for layer in layers if str(layer.kind) == "mamba")
    return RunnerModel(
        architectures=tuple(cfg.architectures),
        moe=cfg.num_experts > 0,
        hybrid=0 < recurrent < len(layers),
        quantized=cfg.quant_method is not None,
        attention_free=bool(layers) and recurrent == len(layers),
    )


def model_runner(
    version: str, platform: str, env: dict[str, str] | None, model: RunnerModel
) -> tuple[str, Row]:
    """("v1" | "v2", the row deciding it) for one launch (module doc, ``runner``).

    ``VLLM_USE_V2_MODEL_RUNNER`` set to a boolean decides first ('if use_v2_model_runner is
    not None: return use_v2_model_runner', v0.22.0-v0.29.0)."""
    row = select("runner", version, platform, env)
    forced = (env or {}).get("VLLM_USE_V2_MODEL_RUNNER", "").strip().lower()
    if forced in ("1", "true", "0", "false"):
        return ("v2" if forced in ("1", "true") else "v1"), row
    listed = any(a in row.archs for a in model.architectures)
    if row.value == "listed_dense":
        v2 = listed and not model.moe and not model.quantized
    elif row.value == "listed":
        v2 = listed
    elif row.value == "listed_or_dense":
        dense = not (model.moe or model.hybrid or model.attention_free)
        v2 = listed or dense
    elif row.value == "all":
        v2 = not listed  # the row's list is the architectures kept on V1
    else:
        v2 = False
    return ("v2" if v2 else "v1"), row


@dataclass(frozen=True)
class Terms:
    """The rows one estimate reads: what each term is for this version and platform."""

    sampler: Row
    graphs: Row
    collectives: Row
    load: Row
    v0_sampler: bool = False
    runner: Row | None = None
    v2_runner: bool = False
    v2_graphs: bool = False  # the V2 runner charges its graph estimate (V2_GRAPHS_FROM)
    v2_sampler: bool = False  # the V2 runner warms the full sampler up (V2_SAMPLER_FROM)

    @property
    def graphs_profiled(self) -> bool:
        """Whether the runner charges graph memory where the ``graphs`` row estimates it."""
        return not self.v2_runner or self.v2_graphs

    @property
    def sampler_kind(self) -> str:
        if self.v0_sampler:
            return V0_SAMPLER[0]
        return "v2_default" if self.v2_runner and not self.v2_sampler else self.sampler.value

    @property
    def sampler_source(self) -> str:
        if self.v0_sampler:
            return V0_SAMPLER[1]
        if self.v2_runner and not self.v2_sampler:
            return _V2_DEFAULT_PASS
        return self.sampler.source

    @property
    def sampler_bytes_per_logit(self) -> int:
        return SAMPLER_BYTES_PER_LOGIT[self.sampler_kind]

    def to_dict(self) -> dict[str, Any]:
        sampler = self.sampler.to_dict() | {
            "value": self.sampler_kind,
            "source": self.sampler_source,
            "bytes_per_logit": self.sampler_bytes_per_logit,
        }
        out = {
            "sampler": sampler,
            "graphs": self.graphs.to_dict() | {"charged": self.graphs_profiled},
            "collectives": self.collectives.to_dict(),
            "load": self.load.to_dict(),
        }
        if self.runner is not None:
            out["runner"] = self.runner.to_dict() | {"runner": "v2" if self.v2_runner else "v1"}
        return out


_V2_DEFAULT_PASS = (
    "vllm/v1/worker/gpu/model_runner.py v0.21.0-v0.32: _dummy_sampler_run calls the sampler "
    "on the model-dtype logits of a dummy batch ('the sampler may skip top_k, top_p, and "
    "logprobs'); v0.33.0 adds the 'Warmup-param pass' that pays for the fp32 pipeline"
)


def terms(
    version: str,
    platform: str,
    env: dict[str, str] | None = None,
    *,
    v0_engine: bool = False,
    model: RunnerModel | None = None,
) -> Terms:
    """Every term's row for one launch; ``model``: what selects the model runner (V1 engine)."""
    runner, runner_row = ("v1", None)
    if model is not None and not v0_engine:
        runner, runner_row = model_runner(version, platform, env, model)
    ver = _base(version)
    return Terms(
        sampler=select("sampler", version, platform, env),
        graphs=select("graphs", version, platform, env),
        collectives=select("collectives", version, platform, env),
        load=select("load", version, platform, env),
        v0_sampler=v0_engine,
        runner=runner_row,
        v2_runner=runner == "v2",
        v2_graphs=ver >= Version(V2_GRAPHS_FROM),
        v2_sampler=ver >= Version(V2_SAMPLER_FROM),
    )
