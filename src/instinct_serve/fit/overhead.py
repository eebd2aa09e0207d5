"""Memory vLLM charges besides weights and KV: profiled activations, non-torch, graphs.

``determine_available_memory`` runs ``profile_run``: a forward pass over
``max_num_batched_tokens`` tokens (no attention kernels), then ``_dummy_sampler_run`` on
``min(max_num_seqs, max_num_batched_tokens)`` rows with top-k/top-p on, then (multimodal
models) the encoder on the largest item. The torch peak of those passes is the
"activation" charge. Its parts, modelled per TP rank:

- forward: copies of the hidden state plus the widest projection output per token (MLP
  gate/up + activation, or the fused-MoE intermediate buffers of ``top_k`` experts).
  Llama-3.1-8B logs 14.63 GiB for 131,072 tokens on MI300X (V0, fp16): four hidden-size
  copies + 3 x intermediate, 116 KiB per token; an RTX 3090 logs 2.07 GiB for 20,000 and
  2.99 GiB for 29,000 tokens: three copies (``RESIDUAL_COPIES``);
- sampler: logits rows x vocab, about ``SAMPLER_BYTES_PER_LOGIT`` bytes per logit for the
  bf16 logits, their fp32 copy, the top-k/top-p sort (fp32 values + int64 indices), softmax
  and masks of PyTorch's path (used on ROCm); gpt-oss-120b's 7.45 GiB overhead at 1024 seqs
  x 201,088 vocab (vllm#23278) gives 36.5 bytes per logit, Gemma-3-4B's 9.96 GiB at 1024 x
  262,208 (vllm#21489) 35-39 once its logit soft-capping copies are set aside;
- encoder: the vision tower on its largest item (approximate).

Non-torch memory (HIP/RCCL/BLAS workspaces) and, from v0.21, the graph-memory estimate
complete the overhead. When the model's dimensions are unknown a flat figure is used.

Per TP rank, non-torch memory also holds the collectives' buffers where vLLM counts them: the
``collectives`` term of ``overhead_table`` (GiB per topology: NVSwitch, one node, across nodes;
none from v0.11, PR #25359). The sampler's bytes per logit follow the ``sampler`` term (sort,
FlashInfer, aiter, Triton), graphs the ``graphs`` term, and on ROCm the weights charge the
device-wide load figure (``load``): one table for every version and platform.

The graph estimate is computed as ``profile_cudagraph_memory`` (gpu_model_runner.py, v0.21+)
does: per mode (PIECEWISE, FULL) it captures the largest size and the next one, then charges
``max(first capture over modes) + sum over modes of per_graph x (graphs - 1)``, ``per_graph``
at least 1 MiB ("driver overhead"). The capture sizes come from ``vllm.cudagraph_capture_sizes``
(``max_num_seqs``, batched tokens, speculative tokens). The first capture (the pool of the
largest batch plus workspaces) is not derivable from the config: published estimates put it at
0.36 GiB with a single graph per mode and 0.55-0.65 GiB for 5-136 graphs on one GPU, 1.26 GiB
on a TP4 rank; ``FIRST_CAPTURE_BYTES`` keeps 0.5 / 1.0 GiB and the per-graph term is vLLM's
1 MiB floor, so the count dependence is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.overhead_table import Terms
from instinct_serve.fit.vllm import cudagraph_capture_sizes, cudagraph_counts

GIB = 2**30
RESIDUAL_COPIES = {"rocm": 4, "cuda": 3}
NON_TORCH_BYTES = {"rocm": int(0.66 * GIB), "cuda": int(0.35 * GIB), "cpu": 0}  # MI300X / 3090
# nvidia-smi names of boards on an NVSwitch fabric ("NVIDIA H100 80GB HBM3" is the SXM5 part;
# PCIe and NVL cards say so in their names)
NVSWITCH_NAME_PARTS = ("SXM", "H100 80GB HBM3", "H200", "B200", "B300")


def interconnect(device_name: str) -> str | None:
    """ "nvswitch" for GPU names of SXM boards, else None (not known from the name)."""
    upper = device_name.upper()
    if "PCIE" in upper or "NVL" in upper:
        return None
    return "nvswitch" if any(part.upper() in upper for part in NVSWITCH_NAME_PARTS) else None


def topology(device_name: str, *, across_nodes: bool) -> str:
    """The ``collectives`` term's topology key: ``across_nodes``, ``nvswitch`` or
    ``one_node`` (PCIe, xGMI)."""
    if across_nodes:
        return "across_nodes"
    return interconnect(device_name) or "one_node"


FIRST_CAPTURE_BYTES = {"single": int(0.5 * GIB), "tp": int(1.0 * GIB)}  # see the module doc
PER_GRAPH_BYTES = 1 << 20  # profile_cudagraph_memory's floor per graph
FLAT_OVERHEAD_BYTES = 4 * 10**9
ENCODER_PROFILE_TOKENS = 16384  # the largest image item's LM tokens (Qwen-VL processors)


@dataclass(frozen=True)
class CudagraphConfig:
    """``--compilation-config``'s graph keys; None: vLLM's default."""

    capture_sizes: tuple[int, ...] | None = None
    max_capture_size: int | None = None
    mode: str | None = None


@dataclass(frozen=True)
class Overhead:
    forward_bytes: int
    sampler_bytes: int
    encoder_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    graph_bytes: int
    method: str  # modelled | flat
    max_num_batched_tokens: int
    max_num_seqs: int
    notes: tuple[str, ...] = ()
    graph_captures: tuple[int, int] = (0, 0)  # (PIECEWISE, FULL) graphs the estimate counts
    load_extra_bytes: int = 0  # ROCm: the device-wide load figure over the tensor bytes
    table: Terms | None = None  # the overhead_table rows this estimate read

    @property
    def total_bytes(self) -> int:
        return (
            self.activation_bytes + self.non_torch_bytes + self.graph_bytes + self.load_extra_bytes
        )


def _forward_bytes_per_token(cfg: ModelConfig, tp: int, copies: int = 4) -> int:
    h = cfg.hidden_size
    dtype = cfg.dtype_bytes
    widest = 0
    inter = cfg.intermediate_size
    if inter:
        widest = max(widest, 3 * inter // tp)
    if cfg.num_experts:
        moe = cfg.moe_intermediate_size or inter or 0
        topk = max(1, cfg.experts_per_token)
        widest = max(
            widest, topk * (3 * moe // tp + h) + 3 * cfg.shared_expert_intermediate_size // tp
        )
    heads, kv, d = cfg.num_attention_heads, cfg.num_kv_heads, cfg.head_dim
    widest = max(widest, (heads + 2 * kv) * d // tp)
    return dtype * (copies * h + widest)


def graph_estimate(
    *,
    tp: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    cudagraph: CudagraphConfig | None = None,
) -> tuple[int, tuple[int, int]]:
    """(bytes, (PIECEWISE, FULL) graph counts) of vLLM's graph-memory estimate (module doc)."""
    cg = cudagraph or CudagraphConfig()
    piecewise, full = cudagraph_capture_sizes(
        max_num_seqs,
        max_num_batched_tokens,
        num_speculative_tokens,
        given_sizes=cg.capture_sizes,
        max_capture_size=cg.max_capture_size,
    )
    counts = cudagraph_counts(cg.mode, piecewise, full)
    if not any(counts):
        return 0, counts
    first = FIRST_CAPTURE_BYTES["tp" if tp > 1 else "single"]
    extra = sum(max(0, n - 1) for n in counts) * PER_GRAPH_BYTES
    return first + extra, counts


def _encoder_bytes(cfg: ModelConfig) -> int:
    vc = cfg.tower_configs.get("vision_config") or {}
    vh, vi = vc.get("hidden_size"), vc.get("intermediate_size")
    if not isinstance(vh, int) or not isinstance(vi, int):
        return 0
    merge = int(vc.get("spatial_merge_size", 1) or 1)
    patches = ENCODER_PROFILE_TOKENS * merge * merge
    return patches * 2 * (4 * vh + 3 * vi)


def estimate_overhead(
    cfg: ModelConfig,
    *,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    include_vision: bool,
    enforce_eager: bool,
    table: Terms,
    platform: str = "rocm",
    sampler_bytes_per_logit: int | None = None,
    profile_sampler: bool = True,
    graphs_estimated: bool = True,
    num_speculative_tokens: int = 0,
    cudagraph: CudagraphConfig | None = None,
    topology: str = "one_node",
    weights_bytes: int = 0,
) -> Overhead:
    """The per-rank overhead vLLM subtracts from ``utilization x total`` before KV.

    ``table``: the launch's ``overhead_table`` rows; ``topology``: the collectives' key;
    ``weights_bytes``: the tensor bytes per rank (the ``load`` term charges what it adds).
    ``profile_sampler``/``graphs_estimated`` False: the V2 model runner of 2026-07 profiled
    neither (vllm#48601; its log's available KV is budget - weights - activation - non-torch)."""
    collectives = int(table.collectives.amount(topology) * GIB) if tp > 1 else 0
    non_torch = NON_TORCH_BYTES.get(platform, NON_TORCH_BYTES["rocm"]) + collectives
    graphs, captures = 0, (0, 0)
    if table.graphs.value == "estimate" and graphs_estimated and not enforce_eager:
        graphs, captures = graph_estimate(
            tp=tp,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            num_speculative_tokens=num_speculative_tokens,
            cudagraph=cudagraph,
        )
    load_extra = int(weights_bytes * (table.load.factor - 1.0))
    vocab = cfg.vocab_size
    try:
        per_token = _forward_bytes_per_token(cfg, tp, RESIDUAL_COPIES.get(platform, 4))
    except (KeyError, ZeroDivisionError):
        per_token = 0
    if not vocab or not per_token:
        return Overhead(
            forward_bytes=0,
            sampler_bytes=0,
            encoder_bytes=0,
            activation_bytes=FLAT_OVERHEAD_BYTES,
            non_torch_bytes=non_torch,
            graph_bytes=graphs,
            method="flat",
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            notes=("model dimensions unknown: flat 4 GB activation estimate",),
            graph_captures=captures,
            load_extra_bytes=load_extra,
            table=table,
        )
    forward = max_num_batched_tokens * per_token
    hidden_kept = max_num_batched_tokens * cfg.hidden_size * cfg.dtype_bytes
    logits = min(max_num_seqs, max_num_batched_tokens) * (-(-vocab // 64) * 64)  # padded vocab
    per_logit = sampler_bytes_per_logit or table.sampler_bytes_per_logit
    sampler = logits * per_logit if profile_sampler else 0
    encoder = _encoder_bytes(cfg) if include_vision else 0
    activation = max(forward, hidden_kept + sampler, encoder)
    notes = _modelled_notes(table, collectives, topology, graphs, captures, max_num_seqs, encoder)
    return Overhead(
        forward_bytes=forward,
        sampler_bytes=sampler,
        encoder_bytes=encoder,
        activation_bytes=activation,
        non_torch_bytes=non_torch,
        graph_bytes=graphs,
        method="modelled",
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        notes=notes,
        graph_captures=captures,
        load_extra_bytes=load_extra,
        table=table,
    )


def _modelled_notes(
    table: Terms,
    collectives: int,
    topology: str,
    graphs: int,
    captures: tuple[int, int],
    max_num_seqs: int,
    encoder: int,
) -> tuple[str, ...]:
    """What a modelled overhead counted beyond the forward pass: the sampler kind, collective
    buffers, graphs, a vision encoder."""
    notes = [f"sampler: {table.sampler_kind} ({table.sampler_bytes_per_logit} bytes per logit)"]
    if collectives:
        notes.append(
            f"collective buffers counted: {collectives / GIB:.1f} GiB per rank ({topology}; "
            f"vLLM before 0.11 measures them inside the budget)"
        )
    if graphs:
        notes.append(
            f"graph estimate: first capture + 1 MiB x further graphs "
            f"({captures[0]} PIECEWISE, {captures[1]} FULL for {max_num_seqs} seqs)"
        )
    if table.v2_runner and not table.graphs_profiled and table.graphs.value == "estimate":
        notes.append(
            "no graph estimate: vLLM's V2 model runner, this model's default here, "
            "charges none before 0.29 (profile_cudagraph_memory returns 0)"
        )
    if encoder:
        notes.append("vision encoder profiling approximated for a 16,384-token image")
    return tuple(notes)
