"""Sizing without the model's metadata: a parameter count times the bytes of its precision.

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
from dataclasses import dataclass

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

_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMBT])\s*$", re.IGNORECASE)
_SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def parse_parameter_count(text: str | None) -> float | None:
    """``"235B"`` -> 2.35e11; ``"1.5T"``, ``"600M"``; None for anything else."""
    found = _COUNT.match(text or "")
    if not found:
        return None
    return float(found.group(1)) * _SCALE[found.group(2).upper()]


@dataclass(frozen=True)
class RoughSize:
    """Weights from a count or a stated minimum, and the TP they need on given GPUs."""

    weight_bytes: int
    basis: str  # what the figure rests on, for the plan's reasons
    min_tp: int | None  # smallest power of two that fits; None: more than gpu_count
    gpus_needed: int  # GPUs of this size it takes (not rounded to a power of two)

    @property
    def fits(self) -> bool:
        return self.min_tp is not None


def rough_size(
    *,
    parameter_count: str | None,
    precision: str | None,
    vram_minimum_gb: float | None,
    vram_bytes: int,
    gpu_count: int,
    utilization: float,
) -> RoughSize | None:
    """The weights and the smallest TP, from what is known; None when nothing is."""
    params = parse_parameter_count(parameter_count)
    per_param = BYTES_PER_PARAM.get((precision or "bf16").lower())
    weights: int | None = None
    basis = ""
    if params is not None and per_param is not None:
        weights = int(params * per_param)
        basis = (
            f"the recipe's parameter count ({parameter_count}) x {per_param:g} bytes per "
            f"{precision or 'bf16'} parameter = {weights / GB:.0f} GB"
        )
    budget = int(vram_bytes * utilization) - OVERHEAD_BYTES
    usable = int(budget * (1 - MIN_KV_SHARE))
    if vram_minimum_gb:
        stated = int(vram_minimum_gb * GB)
        # the recipe's figure is the total memory the authors ran with: weights and KV
        if weights is None or stated > weights:
            weights_need = stated
            basis = (basis + "; " if basis else "") + (
                f"the recipe states {vram_minimum_gb:g} GB of VRAM"
            )
        else:
            weights_need = weights
    elif weights is not None:
        weights_need = weights
    else:
        return None
    if usable <= 0:
        return RoughSize(weights or weights_need, basis, None, 0)
    gpus = max(1, math.ceil(weights_need / usable))
    tp = 1
    while tp < gpus:
        tp *= 2
    return RoughSize(weights or weights_need, basis, tp if tp <= gpu_count else None, gpus)
