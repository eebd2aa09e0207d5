"""``instinct fit`` with no metadata at all: the ``estimated`` size basis, pure.

Offline (or with the Hub refusing), a catalog model that ships no metadata still has its
recipe's ``parameter_count`` and precision. Their product (``rough.estimated_weight_bytes``)
gives the weights per GPU at each TP; with the rough overhead (``rough.OVERHEAD_BYTES``) it
says whether the weights fit and on how many GPUs. The KV cache per token needs the
architecture (config.json), so the context is not checked, and the answer says so: it is
never mistaken for an exact or config-based fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.catalog.rough import OVERHEAD_BYTES, estimated_weight_bytes
from instinct_serve.fit.estimate import SAFE_BYTES, TIGHT_BYTES, HardwareSpec
from instinct_serve.fit.vllm import behaviour
from instinct_serve.units import GB, GIB

MAX_TP = 64


@dataclass(frozen=True)
class Share:
    """What one GPU gives the weights and the KV cache at one TP, as a server sizes it."""

    server: str  # the ``servers`` name: vllm, sglang
    title: str  # "vLLM 0.27.1", "SGLang 0.5.23"
    version: str
    fraction: float  # --gpu-memory-utilization, --mem-fraction-static
    budget_bytes: int  # the share of one GPU the weights, overhead and KV cache live in
    overhead_bytes: int  # charged inside the budget (vLLM: the rough overhead)
    basis: str  # how the budget is made, for the reason of a verdict


def vllm_share(
    hw: HardwareSpec, utilization: float | None, vllm_version: str | None
) -> Callable[[int], Share]:
    """vLLM's: the utilization x the GPU's memory, less the rough overhead, at any TP."""
    vllm = behaviour(vllm_version, platform=hw.platform)
    fraction = utilization or vllm.default_gpu_memory_utilization
    share = Share(
        "vllm",
        f"vLLM {vllm.version}",
        vllm.version,
        fraction,
        int(hw.vram_bytes * fraction),
        OVERHEAD_BYTES,
        "budget",
    )
    return lambda tp: share


@dataclass(frozen=True)
class EstimatedFit:
    model_id: str
    parameter_count: str
    precision: str
    weight_bytes: int
    per_gpu_bytes: int
    tp: int
    min_tp_required: int | None
    budget_bytes: int
    remaining_bytes: int
    gpu_memory_utilization: float
    vllm_version: str  # the server's release (vLLM's, or the one ``server`` models)
    hardware: HardwareSpec
    verdict: str
    verdict_reason: str
    notes: list[str] = field(default_factory=list)
    server: str = "vllm"
    server_title: str = ""  # "vLLM 0.27.1"
    tp_given: bool = False

    size_basis = "estimated"

    @property
    def fits(self) -> bool:
        return self.verdict in ("safe", "tight")

    def to_dict(self) -> dict[str, Any]:
        """The keys of ``FitReport.to_dict`` that an estimate can fill; KV figures are None.
        Another server's estimate names it (``server``) and its release under its name."""
        doc = self._doc()
        if self.server != "vllm":
            del doc["vllm"]
            doc["overhead"]["total_bytes"] = 0
            doc = {"server": self.server, **doc, self.server: {"version": self.vllm_version}}
        return doc

    def _doc(self) -> dict[str, Any]:
        return {
            "model": self.model_id,
            "source": "recipe",
            "metadata": {
                "size_basis": self.size_basis,
                "source": "recipe",
                "weights_source": "parameter_count",
                "detail": f"{self.parameter_count} parameters x {self.precision}",
            },
            "weight_memory_bytes": self.weight_bytes,
            "weight_memory_gb": round(self.weight_bytes / GB, 2),
            "weight_memory_per_gpu_bytes": self.per_gpu_bytes,
            "weight_memory_per_gpu_gib": round(self.per_gpu_bytes / GIB, 2),
            "kv_cache_bytes_per_token": None,
            "overhead": {"method": "flat", "total_bytes": OVERHEAD_BYTES},
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "budget_per_gpu_gib": round(self.budget_bytes / GIB, 2),
            "remaining_for_kv_bytes": self.remaining_bytes,
            "remaining_for_kv_gb": round(self.remaining_bytes / GB, 2),
            "kv_cache": None,
            "fit": {
                "tp": self.tp,
                "weights_fit": self.remaining_bytes > 0,
                "min_tp_required": self.min_tp_required,
                "recommended_max_model_len": None,
            },
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "hardware": self.hardware.to_dict(),
            "vllm": {"version": self.vllm_version},
            "notes": list(self.notes),
        }


def estimated_fit(
    model_id: str,
    *,
    parameter_count: str | None,
    precision: str | None,
    hw: HardwareSpec,
    utilization: float | None = None,
    vllm_version: str | None = None,
    tp: int | None = None,
    share: Callable[[int], Share] | None = None,
) -> EstimatedFit | None:
    """The weights-only fit of ``parameter_count`` x ``precision``; None when either is
    unknown. ``share``: what a GPU gives at each TP (default: vLLM's, ``utilization`` None
    being the version's default)."""
    size = estimated_weight_bytes(parameter_count, precision)
    if size is None or parameter_count is None:
        return None
    prec = precision or "bf16"
    share_at = share or vllm_share(hw, utilization, vllm_version)

    def left(t: int) -> int:
        at = share_at(t)
        return at.budget_bytes - -(-size // t) - at.overhead_bytes

    tps = [1 << i for i in range(MAX_TP.bit_length()) if 1 << i <= MAX_TP]
    min_tp = next((t for t in tps if t <= hw.gpu_count and left(t) >= TIGHT_BYTES), None)
    chosen = tp or min_tp or max(t for t in tps if t <= max(1, hw.gpu_count))
    remaining = left(chosen)
    at = share_at(chosen)
    room = f"{remaining / GB:.1f} GB per GPU left for the KV cache at TP {chosen} (estimate)"
    if chosen > hw.gpu_count:
        verdict, why = "does_not_fit", f"TP {chosen} needs {chosen} GPUs; {hw.gpu_count} present"
    elif remaining >= TIGHT_BYTES and (tp is not None or chosen == 1):
        verdict, why = ("safe" if remaining >= SAFE_BYTES else "tight"), room
    elif remaining >= TIGHT_BYTES:
        verdict, why = "needs_tp", f"does not fit one GPU; TP {chosen} fits: {room}"
    elif min_tp is not None and min_tp > chosen:
        verdict, why = "needs_tp", f"{room}; TP {min_tp} fits on the GPUs present"
    elif remaining > 0:
        verdict, why = "too_tight", room
    else:
        verdict, why = (
            "does_not_fit",
            (
                f"estimated weights {-(-size // chosen) / GIB:.1f} GiB per GPU"
                + (" + overhead" if at.overhead_bytes else "")
                + f" exceed the {at.budget_bytes / GIB:.1f} GiB {at.basis} at TP {chosen}"
            ),
        )
    notes = [
        f"size estimated from the recipe: {parameter_count} parameters x {prec} "
        f"= {size / GB:.0f} GB of weights (no config.json or safetensors metadata here)",
        "the KV cache per token needs the model's config.json: the context is not checked; "
        "go online (or pass the model's local directory) for an exact fit",
    ]
    return EstimatedFit(
        model_id=model_id,
        parameter_count=parameter_count,
        precision=prec,
        weight_bytes=size,
        per_gpu_bytes=-(-size // chosen),
        tp=chosen,
        min_tp_required=min_tp,
        budget_bytes=at.budget_bytes,
        remaining_bytes=remaining,
        gpu_memory_utilization=at.fraction,
        vllm_version=at.version,
        hardware=hw,
        verdict=verdict,
        verdict_reason=why,
        notes=notes,
        server=at.server,
        server_title=at.title,
        tp_given=tp is not None,
    )
