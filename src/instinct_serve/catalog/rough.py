"""Sizing a recipe without the model's metadata: a parameter count times the bytes of its
precision (here, not in ``fit``, because ranking the catalog needs it and the catalog sits
below ``fit``).

When the Hub cannot be read (offline, gated, a proxy) and no metadata ships for a model,
the planner still must not guess TP 1 for a 235B model. What is known then: the recipe's
``parameter_count`` ("235B"), the checkpoint's precision (from the variant or its name), a
variant's ``vram_minimum_gb``. This turns them into the weight bytes and the smallest TP
whose share fits in the memory vLLM may use, with the overhead and a minimum of KV room.
It is an estimate, and the plan says so.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from instinct_serve.units import GB, GIB

# Bytes per parameter as stored, scales included: FP8 per-block/channel scales add ~1-3 %;
# 4-bit formats carry a scale per 16-32 weights (MXFP4 4.25 bits, NVFP4 4.5, AWQ/GPTQ with
# group 128 ~4.25) and usually keep embeddings and attention in bf16, hence ~0.55-0.6.
BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 2.0,  # vLLM serves fp32 checkpoints in 16 bits
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.03,
    "fp8_fnuz": 1.03,
    "fp8_ocp": 1.03,
    "int8": 1.03,
    "w8a8": 1.03,
    "mxfp8": 1.06,
    "mxfp6": 0.8,
    "mxfp4": 0.58,
    "nvfp4": 0.6,
    "fp4": 0.6,
    "int4": 0.6,
}
OVERHEAD_BYTES = 3 * GIB  # activations, graphs and the non-torch share, per GPU (rough)
MIN_KV_SHARE = 0.1  # leave at least this share of the budget for the KV cache

_COUNT = r"^\s*(\d+(?:\.\d+)?)\s*([KMBT])\s*$"
_SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def parse_parameter_count(text: str | None) -> float | None:
    """``"235B"`` -> 2.35e11; ``"1.5T"``, ``"600M"``; None for anything else."""
    found = re.match(_COUNT, text or "", re.IGNORECASE)
    if not found:
        return None
    return float(found.group(1)) * _SCALE[found.group(2).upper()]


_NAME_COUNT = r"(?<![A-Za-z])(?:(\d+)x)?(\d+(?:\.\d+)?)[Bb](?![A-Za-z0-9])"
# Llama 4's spelling of a MoE: the active count, then the experts (``Maverick-17B-128E``)
_ACTIVE_EXPERTS = r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)[Bb]-(\d+)[Ee](?![A-Za-z0-9])"


def moe_active_count_from_name(model_id: str) -> tuple[str, int] | None:
    """``meta-llama/Llama-4-Maverick-17B-128E-Instruct`` -> ``("17B", 128)``: the name gives
    the active parameters of a MoE and its expert count, not its total (Maverick is ~400B,
    Scout-17B-16E ~109B). None when the name is not spelled so."""
    found = re.search(_ACTIVE_EXPERTS, model_id.rsplit("/", 1)[-1])
    return (f"{found.group(1)}B", int(found.group(2))) if found else None


def is_moe_name(model_id: str) -> bool:
    """The name spells a MoE: an active count (``-A22B``), ``17B-128E``, ``8x7B``."""
    name = model_id.rsplit("/", 1)[-1]
    if moe_active_count_from_name(name):
        return True
    return bool(re.search(r"(?<![A-Za-z0-9])A\d+(?:\.\d+)?B(?![A-Za-z0-9])|\d+x\d+B", name))


def parameter_count_from_name(model_id: str) -> str | None:
    """``someorg/Model-7B-Instruct`` -> ``"7B"``, ``Mixtral-8x7B`` -> ``"56B"`` (an upper
    bound: experts share attention); an active count (``-A22B``, ``17B-128E``) is not a
    size: None then (``moe_active_count_from_name`` says why), and when the name has no
    count."""
    name = model_id.rsplit("/", 1)[-1]
    if moe_active_count_from_name(name):
        return None
    best: float | None = None
    for found in re.finditer(_NAME_COUNT, name):
        start = found.start()
        if start > 0 and name[start - 1] in "Aa":  # A22B: active parameters
            continue
        count = float(found.group(2)) * (int(found.group(1)) if found.group(1) else 1)
        best = max(best or 0.0, count)
    return f"{best:g}B" if best else None


def estimated_weight_bytes(parameter_count: str | None, precision: str | None) -> int | None:
    """A parameter count (``"235B"``) x the bytes of ``precision`` as stored; None when
    either is unknown. The ``estimated`` size basis (``fit.meta.SIZE_BASES``)."""
    params = parse_parameter_count(parameter_count)
    per_param = bytes_per_param(precision)
    if params is None or per_param is None:
        return None
    return int(params * per_param)


def bytes_per_param(precision: str | None) -> float | None:
    """``BYTES_PER_PARAM`` of ``precision``; a mixed one (``int2/4/8``) takes its largest
    member (an upper bound), None when nothing is known."""
    text = (precision or "bf16").lower()
    if "/" not in text:
        return BYTES_PER_PARAM.get(text)
    prefix = re.match(r"[a-z]*", text)
    stem = prefix.group(0) if prefix else ""
    parts = [p if p[:1].isalpha() else stem + p for p in text.split("/")]
    known = [BYTES_PER_PARAM[p] for p in parts if p in BYTES_PER_PARAM]
    return max(known) if known else None


class Need(NamedTuple):
    """The smallest TP that a size needs on given GPUs, and what says so."""

    tp: int | None  # smallest power of two that fits; None: more GPUs than there are
    gpus: int  # GPUs of this size it takes (not rounded to a power of two)
    why: str
    size: int = 0  # the bytes sized
    budget: int = 0  # what vLLM may use of one GPU, the overhead taken off

    def kv_room(self, tp: int) -> int:
        """What is left of each GPU's budget for the KV cache at ``tp`` (bytes, >= 0)."""
        return max(0, self.budget - self.size // max(tp, 1))


class RoughSize(NamedTuple):
    """What is known without metadata: the weights' TP need (from a parameter count) and
    the recipe's stated total VRAM (a hint of the shape its authors ran, not a gate)."""

    weights: Need | None
    stated: Need | None
    # the recipe's stated VRAM is more than one GPU: upstream compares it with the GPU's
    # figure in its taxonomy (MI300X 192, MI325X 256, MI355X 288: the GiB the driver shows)
    stated_spans_gpus: bool = False
    # why there is no count to size by, when the name misleads (a MoE's active count)
    unsized_why: str = ""
    moe: bool = False  # a MoE (its recipe or its name says): its TP leaves room for the KV

    def preferred(self) -> list[Need]:
        """The sizes known without metadata, in the order they are trusted: the recipe's
        stated VRAM (what its authors ran, scales and mixed FP8/FP4 layers included), then
        a parameter count x the precision's bytes. (The metadata's exact fit comes before
        both, ``plan.decisions``; AMD's reference config's TP is to slot in after the
        stated VRAM.)"""
        return [n for n in (self.stated, self.weights) if n is not None]


def _need(size: int, budget: int, gpu_count: int, why: str, kv_share: float) -> Need:
    usable = int(budget * (1 - kv_share))
    if usable <= 0:
        return Need(None, 0, why)
    gpus = max(1, math.ceil(size / usable))
    tp = 1
    while tp < gpus:
        tp *= 2
    return Need(tp if tp <= gpu_count else None, gpus, why, size, budget)


def rough_size(
    *,
    parameter_count: str | None,
    precision: str | None,
    vram_minimum_gb: float | None,
    vram_bytes: int,
    gpu_count: int,
    utilization: float,
    count_from: str = "the recipe's parameter count",
    unsized_why: str = "",
) -> RoughSize:
    """The TP the weights need (a count x the precision's bytes) and the TP the recipe's
    stated VRAM spans, on ``gpu_count`` GPUs of ``vram_bytes`` at ``utilization``."""
    budget = int(vram_bytes * utilization) - OVERHEAD_BYTES
    weights = None
    size = estimated_weight_bytes(parameter_count, precision)
    per_param = bytes_per_param(precision)
    if size is not None and per_param is not None:
        weights = _need(
            size,
            budget,
            gpu_count,
            f"{count_from} ({parameter_count}) x {per_param:g} bytes per "
            f"{precision or 'bf16'} parameter = {size / GB:.0f} GB of weights",
            MIN_KV_SHARE,
        )
    stated = None
    spans = bool(vram_minimum_gb) and (vram_minimum_gb or 0) > round(vram_bytes / GIB)
    if vram_minimum_gb:
        stated = _need(
            int(vram_minimum_gb * GB),
            budget,
            gpu_count,
            f"the recipe states {vram_minimum_gb:g} GB of VRAM",
            0.0,  # the VRAM its authors ran: the KV cache included
        )
    return RoughSize(weights, stated, spans, unsized_why)
