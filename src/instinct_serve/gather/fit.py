"""``instinct fit`` minus printing: resolve the GPUs (``hardware.target``), then fit the model
(``fit.fit_model``). The CLI and the MCP ``fit`` tool both call ``fit_request``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from instinct_serve.gather.detect import resolve_on
from instinct_serve.hardware.target import Target, catalog_key

if TYPE_CHECKING:
    from instinct_serve.fit.catalog_link import FitAnswer
    from instinct_serve.fit.estimate import HardwareSpec
    from instinct_serve.hosts import Host
    from instinct_serve.options import FitRequest

# A machine with no GPU fits for this profile, as ``plan`` does (with a note saying so).
FALLBACK_GPU = "mi300x"


def hardware_spec(target: Target) -> HardwareSpec:
    """The estimator's view of the resolved GPUs (smallest VRAM when they differ)."""
    from instinct_serve.fit.estimate import HardwareSpec

    inv = target.inventory
    if target.source == "manual":
        vram = inv.gpus[0].vram_total_bytes if inv.gpus else None
        return HardwareSpec(vram or 0, inv.gpu_count, None, "GPU", "manual")
    source = "profile" if target.source == "profile" else f"detect ({inv.source})"
    spec = HardwareSpec.from_inventory(inv, source=source)
    if inv.gfx_version in ("unknown", "mixed"):
        kinds = sorted({g.gfx_version for g in inv.gpus})
        spec = HardwareSpec(
            spec.vram_bytes, spec.gpu_count, kinds[0] if kinds else None, spec.name, spec.source
        )
    return spec


def fit_request(
    req: FitRequest,
    host: Host,
    *,
    fallback: bool = True,
    stage: Callable[[str], AbstractContextManager[Any]] | None = None,
) -> tuple[FitAnswer, list[str]]:
    """Fit ``req.model`` on the GPUs ``req`` names, or detects on ``host`` (reached only
    when detection is needed).

    ``fallback``: with no GPU found on a local host, fit for an MI300X node (as ``plan``).
    Returns the answer and the notes about the hardware.
    """
    from instinct_serve.fit.catalog_link import fit_model

    target = resolve_on(
        req,
        lambda: host,
        sysfs_root=req.sysfs_root,
        default_gpu=FALLBACK_GPU if fallback and host.is_local else None,
    )
    hw = hardware_spec(target)
    if target.source == "manual" and (req.device_name or req.platform):
        from dataclasses import replace

        hw = replace(hw, name=req.device_name or hw.name, platform=req.platform or hw.platform)
    answer = fit_model(
        req.model,
        hw,
        gpu=None if target.source == "manual" else catalog_key(target.inventory),
        revision=req.revision,
        alternatives=not req.no_alternatives,
        stage=stage,
        **req.estimate_kwargs(),
    )
    return answer, target.notes
