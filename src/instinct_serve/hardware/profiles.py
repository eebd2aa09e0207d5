"""Named GPU profiles (``--gpu mi300x``): plan and fit without touching the hardware.

VRAM is what the driver reports per GPU (amd-smi's "MB" are MiB), not the marketing figure;
``source`` says where each number was checked.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from instinct_serve.errors import UsageError
from instinct_serve.hardware.inventory import Gpu, GpuInventory

MIB = 2**20


class GpuProfile(NamedTuple):
    """A GPU model's facts for planning without hardware (``--gpu``)."""

    key: str
    market_name: str
    gfx_version: str
    vram_mib: int
    default_count: int
    source: str  # where the VRAM figure comes from
    upstream: bool = False  # a hardware id of the vllm-project/recipes taxonomy

    @property
    def vram_bytes(self) -> int:
        return self.vram_mib * MIB

    def inventory(self, count: int | None = None) -> GpuInventory:
        """``count`` identical GPUs of this model, as ``detect`` would report them."""
        n = self.default_count if count is None else count
        if n < 1:
            raise UsageError("--gpu-count must be at least 1", id="bad_gpu_count")
        gpus = [
            Gpu(
                index=i,
                name=self.market_name,
                market_name=self.market_name,
                gfx_version=self.gfx_version,
                vram_total_bytes=self.vram_bytes,
            )
            for i in range(n)
        ]
        return GpuInventory(gpus=gpus, source="profile")


# VRAM per GPU as the driver reports it (MiB), each checked against public output; the
# marketing figure ("256 GB") is not what vLLM can allocate.
PROFILES: dict[str, GpuProfile] = {
    p.key: p
    for p in [
        GpuProfile(
            "mi300x",
            "AMD Instinct MI300X",
            "gfx942",
            196592,
            8,
            "amd-smi 26.0.0 default view on 8x MI300X (ROCm 7.0.0): 196592 MB (MiB) per GPU; "
            "rocm-smi shows 206141652992 B",
            upstream=True,
        ),
        GpuProfile(
            "mi325x",
            "AMD Instinct MI325X",
            "gfx942",
            262128,
            8,
            "amd-smi 26.0.0 default view on an MI325X (ROCm 7.0.1, ROCm JAX install docs): "
            "283/262128 MB; marketed as 256 GB",
            upstream=True,
        ),
        GpuProfile(
            "mi300a",
            "AMD Instinct MI300A",
            "gfx942",
            98304,
            4,
            "128 GiB HBM3 shared with the CPU cores; HIP device allocations are capped at "
            "96 GiB by default (ROCm MI300A system optimization guide; raise via amdttm "
            "pages_limit)",
        ),
        GpuProfile(
            "mi350x",
            "AMD Instinct MI350X",
            "gfx950",
            294896,
            8,
            "KFD mem_banks size_in_bytes 309220868096 (= 294896 MiB) in rocprofiler-sdk's "
            "MI350X topology capture; same size as amd-smi shows on MI355X",
        ),
        GpuProfile(
            "mi355x",
            "AMD Instinct MI355X",
            "gfx950",
            294896,
            8,
            "amd-smi 26.2.1 default view on MI355X hosts (ROCm 7.2.2): 283/294896 MB; "
            "marketed as 288 GB",
            upstream=True,
        ),
        GpuProfile(
            "mi250x",
            "AMD Instinct MI250X",
            "gfx90a",
            65520,
            8,
            "rocm-smi on an MI250X GCD (Card Model 0x7408): VRAM Total Memory (B) "
            "68702699520 = 65520 MiB; each OAM module shows as two GPUs (GCDs)",
        ),
        GpuProfile(
            "mi210",
            "AMD Instinct MI210",
            "gfx90a",
            65520,
            1,
            "rocm-smi on an MI210 (Card Model 0x740f): VRAM Total Memory (B) 68702699520 "
            "= 65520 MiB; PCIe card",
        ),
    ]
}


def _key(name: str) -> str:
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return key.removeprefix("amd").removeprefix("instinct")


# Every gfx target with a profile, in table order (gfx942, gfx950, gfx90a): the one list of
# the Instinct generations this tool plans for.
GFX_TARGETS: tuple[str, ...] = tuple(dict.fromkeys(p.gfx_version for p in PROFILES.values()))


# The AMD GPUs the vllm-project/recipes taxonomy names (recipes carry overrides for them).
UPSTREAM_HARDWARE: tuple[str, ...] = tuple(k for k, p in PROFILES.items() if p.upstream)


def gpu_choices() -> str:
    """The accepted ``--gpu`` values, for help and error text (derived from the table)."""
    return ", ".join(PROFILES) + " (or a gfx target: " + ", ".join(GFX_TARGETS) + ")"


def family(gfx: str) -> GpuProfile | None:
    """The first profile of a gfx target (its flagship: gfx942 -> MI300X), or None."""
    return next((p for p in PROFILES.values() if p.gfx_version == gfx), None)


def get_profile(name: str) -> GpuProfile:
    """A profile by loose name: "mi300x", "MI-300X", "AMD Instinct MI300X" all work; a gfx
    target ("gfx942") gives its family's first profile."""
    key = _key(name)
    if key in PROFILES:
        return PROFILES[key]
    if key.startswith("gfx"):
        found = family(key)
        if found is not None:
            return found
    if is_nvidia_name(name):
        message, fix = nvidia_answer(name)
        raise UsageError(message, fix=fix, id="not_amd_gpu")
    raise UsageError(
        f"unknown GPU {name!r}",
        fix="use one of: " + gpu_choices(),
        id="unknown_gpu_profile",
    )


def is_gfx(name: str) -> bool:
    """``gfx942`` and friends (a target, not a product)."""
    return _key(name).startswith("gfx")


VLLM_CUDA_IMAGE = "vllm/vllm-openai"

# NVIDIA product names people type for --gpu (data-center, workstation and GeForce lines).
_NVIDIA = re.compile(
    r"^(?:nvidia)?(?:[abhlv]\d{2,3}[a-z]*|gb?[23]00|b[12]00|gh200|rtx\w*|gtx\w*|tesla\w*"
    r"|quadro\w*|titan\w*|dgx\w*)$"
)


def is_nvidia_name(name: str) -> bool:
    """``h100``, ``A100-80GB``, ``RTX 4090``, ``GB200``: an NVIDIA GPU's name."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    key = re.sub(r"\d+gb$", "", key)
    return bool(_NVIDIA.match(key))


def nvidia_answer(name: str) -> tuple[str, str]:
    """The message and fix for an NVIDIA GPU named where an AMD one is expected."""
    return (
        f"{name} is an NVIDIA GPU: instinct-serve serves AMD Instinct GPUs "
        f"({', '.join(GFX_TARGETS)})",
        f"on NVIDIA, run vLLM's CUDA image ({VLLM_CUDA_IMAGE}) or `vllm serve` directly; "
        "here, name an AMD GPU (--gpu mi300x)",
    )
