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

Per TP rank, non-torch memory also holds the collectives' buffers. Where vLLM counts them
(``VllmBehaviour.collectives_in_budget``) and the GPUs sit on an NVSwitch (SXM boards), they
are ``COLLECTIVE_BYTES["nvswitch"]``: 1.8 GiB, the TP2 - TP1 difference of one build on an
80 GB H100 (vllm PR #10511: non_torch 3.58 vs 1.79 GiB). Logs of such systems agree on the rank
that binds the KV cache: 8x A100-80GB TP8 2.10 GiB (vllm#18446), 8x A100-40GB TP8 2.10
(aws-samples p4d), 2 x 4 A100-40GB TP4 x PP2 2.11 and 2.24 (surajssd/llm-k8s); other ranks of a
run log as little as 0.89. Elsewhere (PCIe cards, whose logs show 0.25-0.36 GiB in all; AMD
Instinct, no log that isolates RCCL; vLLM from 0.11, which leaves them out) the flat
``NON_TORCH_TP_EXTRA_BYTES`` stays: a 2026 H100 TP4 log shows 0.6 GiB in all.

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
from instinct_serve.fit.vllm import cudagraph_capture_sizes, cudagraph_counts

GIB = 2**30
SAMPLER_BYTES_PER_LOGIT = 36
RESIDUAL_COPIES = {"rocm": 4, "cuda": 3}
NON_TORCH_BYTES = {"rocm": int(0.66 * GIB), "cuda": int(0.35 * GIB)}  # MI300X / RTX 3090 logs
NON_TORCH_TP_EXTRA_BYTES = int(0.4 * GIB)  # collective buffers per rank (estimate)
COLLECTIVE_BYTES = {"nvswitch": int(1.8 * GIB)}  # counted collectives per rank (module doc)
# nvidia-smi names of boards on an NVSwitch fabric ("NVIDIA H100 80GB HBM3" is the SXM5 part;
# PCIe and NVL cards say so in their names)
NVSWITCH_NAME_PARTS = ("SXM", "H100 80GB HBM3", "H200", "B200", "B300")


def interconnect(device_name: str) -> str | None:
    """ "nvswitch" for GPU names of SXM boards, else None (not known from the name)."""
    upper = device_name.upper()
    if "PCIE" in upper or "NVL" in upper:
        return None
    return "nvswitch" if any(part.upper() in upper for part in NVSWITCH_NAME_PARTS) else None


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

    @property
    def total_bytes(self) -> int:
        return self.activation_bytes + self.non_torch_bytes + self.graph_bytes


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
    graphs_in_budget: bool,
    enforce_eager: bool,
    platform: str = "rocm",
    sampler_bytes_per_logit: int = SAMPLER_BYTES_PER_LOGIT,
    profile_sampler: bool = True,
    graphs_estimated: bool = True,
    num_speculative_tokens: int = 0,
    cudagraph: CudagraphConfig | None = None,
    collectives_in_budget: bool = False,
    device_name: str = "",
) -> Overhead:
    """The per-rank overhead vLLM subtracts from ``utilization x total`` before KV.

    ``profile_sampler``/``graphs_estimated`` False: the V2 model runner of 2026-07 profiled
    neither (vllm#48601: the sampler warm-up then ran out of memory; its log's available KV is
    exactly budget - weights - peak activation - non-torch)."""
    non_torch = NON_TORCH_BYTES.get(platform, NON_TORCH_BYTES["rocm"])
    fabric = interconnect(device_name) if collectives_in_budget else None
    if tp > 1:
        non_torch += COLLECTIVE_BYTES[fabric] if fabric else NON_TORCH_TP_EXTRA_BYTES
    graphs, captures = 0, (0, 0)
    if graphs_in_budget and graphs_estimated and not enforce_eager:
        graphs, captures = graph_estimate(
            tp=tp,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            num_speculative_tokens=num_speculative_tokens,
            cudagraph=cudagraph,
        )
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
        )
    forward = max_num_batched_tokens * per_token
    rows = min(max_num_seqs, max_num_batched_tokens)
    padded_vocab = -(-vocab // 64) * 64
    hidden_kept = max_num_batched_tokens * cfg.hidden_size * cfg.dtype_bytes
    sampler = rows * padded_vocab * sampler_bytes_per_logit if profile_sampler else 0
    encoder = _encoder_bytes(cfg) if include_vision else 0
    activation = max(forward, hidden_kept + sampler, encoder)
    notes = _modelled_notes(fabric if tp > 1 else None, graphs, captures, max_num_seqs, encoder)
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
    )


def _modelled_notes(
    fabric: str | None, graphs: int, captures: tuple[int, int], max_num_seqs: int, encoder: int
) -> tuple[str, ...]:
    """What a modelled overhead counted beyond the forward pass: collective buffers (TP on
    an NVSwitch), graphs, a vision encoder."""
    notes = []
    if fabric:
        notes.append(
            f"collective buffers counted: {COLLECTIVE_BYTES[fabric] / GIB:.1f} GiB per rank "
            f"on an NVSwitch (vLLM before 0.11 measures them inside the budget)"
        )
    if graphs:
        notes.append(
            f"graph estimate: first capture + 1 MiB x further graphs "
            f"({captures[0]} PIECEWISE, {captures[1]} FULL for {max_num_seqs} seqs)"
        )
    if encoder:
        notes.append("vision encoder profiling approximated for a 16,384-token image")
    return tuple(notes)
