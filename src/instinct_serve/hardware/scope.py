"""Whether GPUs are ones this tool serves: AMD Instinct of the generations its images and
recipes target (``hardware.profiles.GFX_TARGETS``), and plainly what else they are.

A consumer Radeon (RDNA, gfx10xx-12xx) or an older Instinct (MI100 gfx908, MI50 gfx906) is
detected like any AMD GPU, but the plans here (images, kernels, env, recipes) are for
gfx942/gfx950/gfx90a: a plan for it is refused with what to do instead; ``--force`` plans
with the most conservative row of the table (``FORCED_SETTINGS_GFX``), untested. An
NVIDIA GPU named as ``--gpu h100`` gets the same plain answer. Pure.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NamedTuple

from instinct_serve.hardware.profiles import GFX_TARGETS, is_nvidia_name, nvidia_answer

__all__ = [
    "FORCED_SETTINGS_GFX",
    "Scope",
    "document",
    "is_nvidia_name",
    "nvidia_answer",
    "scope_of",
]

if TYPE_CHECKING:
    from instinct_serve.hardware.inventory import GpuInventory

# A forced plan on a GPU without a row of its own takes gfx90a's settings: AITER off, no
# FP8, AITER recipe args removed; the ones least likely to crash on an unknown GPU.
FORCED_SETTINGS_GFX = "gfx90a"
FORCED = f"{FORCED_SETTINGS_GFX}'s settings (AITER off, no FP8; untested on this GPU)"
VLLM_ROCM_DOCS = "https://docs.vllm.ai/en/latest/getting_started/installation/gpu.html"


class Scope(NamedTuple):
    """``supported`` GPUs, or what they are and what to do instead."""

    supported: bool
    kind: str  # instinct | radeon | older_instinct | unknown | none
    message: str
    fix: str


def _kind(gfx: str) -> str:
    if gfx in GFX_TARGETS:
        return "instinct"
    if re.fullmatch(r"gfx1[0-2][0-9a-f]{2}", gfx):
        return "radeon"
    if gfx in ("gfx908", "gfx906"):
        return "older_instinct"
    return "unknown"


def scope_of(inventory: GpuInventory) -> Scope:
    """Whether the inventory's GPUs are served here (all of them must be)."""
    if not inventory.gpus:
        return Scope(False, "none", "no AMD GPU", inventory.hint or "")
    kinds = {g.gfx_version: _kind(g.gfx_version) for g in inventory.gpus}
    odd = {gfx: kind for gfx, kind in kinds.items() if kind != "instinct"}
    if not odd:
        return Scope(True, "instinct", "AMD Instinct GPUs this tool serves", "")
    gfx, kind = sorted(odd.items())[0]
    name = next(g.market_name or g.name for g in inventory.gpus if g.gfx_version == gfx)
    targets = ", ".join(GFX_TARGETS)
    if kind == "radeon":
        message = (
            f"{name} ({gfx}) is a consumer Radeon GPU: instinct-serve's images, kernels and "
            f"recipes are for AMD Instinct ({targets})"
        )
        fix = (
            f"vLLM's ROCm docs list the Radeon GPUs it supports ({VLLM_ROCM_DOCS}): run "
            "vllm/vllm-openai-rocm or `vllm serve` by hand there; or pass --force to plan with "
            f"{FORCED}"
        )
    elif kind == "older_instinct":
        message = (
            f"{name} ({gfx}) is an Instinct GPU older than what vLLM's ROCm images are built "
            f"for ({targets})"
        )
        fix = (
            f"build vLLM from source with PYTORCH_ROCM_ARCH={gfx} ({VLLM_ROCM_DOCS}); or pass "
            f"--force to plan with {FORCED}"
        )
    else:
        message = f"{name} ({gfx}) is not a GPU instinct-serve knows ({targets})"
        fix = f"check `instinct detect`; or pass --force to plan with {FORCED}"
    return Scope(False, kind, message, fix)


def document(inventory: GpuInventory) -> dict[str, Any]:
    """``detect``'s JSON: the inventory and whether its GPUs are ones served here
    (``supported``; ``support``: what they are and what to do instead)."""
    doc = inventory.to_dict()
    if not inventory.gpus:
        doc["supported"] = False
        return doc
    scope = scope_of(inventory)
    doc["supported"] = scope.supported
    doc["support"] = (
        None
        if scope.supported
        else {"kind": scope.kind, "message": scope.message, "fix": scope.fix}
    )
    return doc
