"""Named GPU profiles (``--gpu mi300x``): plan and fit without touching the hardware.

VRAM is what the driver reports per GPU (amd-smi's "MB" are MiB), not the marketing figure;
``source`` says where each number was checked. Each row also carries the GPU's partition
modes (``Partitioning``: its compute units, XCDs, and which compute modes run with which
memory modes), which ``hardware.partitions`` reads: this table is the one list of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from instinct_serve.errors import UsageError
from instinct_serve.hardware.inventory import Gpu, GpuInventory

MIB = 2**20


class ComputeMode(NamedTuple):
    """One compute (accelerator) partition mode of a GPU model: how many logical GPUs it
    makes of one physical GPU, and the memory (NPS) modes it runs with, AMD's pairing first."""

    name: str  # SPX | DPX | TPX | QPX | CPX
    partitions: int
    memory: tuple[str, ...]


class Partitioning(NamedTuple):
    """A GPU model's partitioning facts. A logical GPU gets the GPU's memory divided by the
    partitions, whatever the NPS mode (AMD's MI300X partitioning overview: 24 GB per CPX
    partition in NPS1 and in NPS4; its MI300A overview: 16 GB per CPX partition)."""

    compute_units: int  # the whole GPU's
    xcds: int
    modes: tuple[ComputeMode, ...]  # SPX first: the mode after boot and after a driver reload
    source: str


def _modes(*rows: tuple[str, int, str]) -> tuple[ComputeMode, ...]:
    return tuple(ComputeMode(name, n, tuple(memory.split())) for name, n, memory in rows)


_GUIDE = (
    "AMD SMI conceptual guide 'GPU partitioning' (ROCm/rocm-systems projects/amdsmi/docs/"
    "conceptual/partition.md: a mode needs the XCC count to divide by its partitions, and "
    "memory partitions cannot outnumber compute partitions)"
)
_MATRIX = (
    "AMD Instinct 'GPU partitioning' index (instinct.docs.amd.com/projects/amdgpu-docs, "
    "gpu-partitioning/index: validated bare-metal pairs)"
)

MI300X_PARTITIONING = Partitioning(
    304,
    8,
    _modes(
        ("SPX", 1, "NPS1"),
        ("DPX", 2, "NPS2 NPS1"),
        ("QPX", 4, "NPS1 NPS4"),
        ("CPX", 8, "NPS4 NPS1"),
    ),
    f"{_GUIDE}: MI300X matrix SPX+NPS1, DPX+NPS1/NPS2, QPX+NPS1/NPS4, CPX+NPS1/NPS4; "
    f"{_MATRIX}: MI300X SPX+NPS1, DPX+NPS2, CPX+NPS4; MI300X partitioning overview: "
    "8 XCDs x 38 CUs = 304, CPX = 8 GPUs of 38 CUs and 24 GB",
)

# MI350X and MI355X: the same CDNA 4 die (8 XCDs of 32 CUs), the same modes.
MI350_PARTITIONING = Partitioning(
    256,
    8,
    _modes(
        ("SPX", 1, "NPS1"),
        ("DPX", 2, "NPS2 NPS1"),
        ("QPX", 4, "NPS1 NPS2"),
        ("CPX", 8, "NPS1 NPS2"),
    ),
    "ROCm GPU specifications: MI350X/MI355X 256 CUs (32 per XCD); AMD Accelerator Cloud "
    "'GPU Partitioning Modes': MI355X SPX/DPX/QPX/CPX = 1/2/4/8 GPUs each; "
    f"{_MATRIX}: MI350/MI355 SPX+NPS1, DPX+NPS2, no CPX+NPS4; ROCm blog 'LLM Inference "
    "Optimization Using AMD GPU Partitioning' (amd-smi partition --accelerator: DPX, QPX "
    "and CPX take NPS1 or NPS2)",
)


class GpuProfile(NamedTuple):
    """A GPU model's facts for planning without hardware (``--gpu``)."""

    key: str
    market_name: str
    gfx_version: str
    vram_mib: int | None  # None: no public figure (plan with --vram-gb)
    default_count: int
    source: str  # where the VRAM figure comes from
    upstream: bool = False  # a hardware id of the vllm-project/recipes taxonomy
    partitioning: Partitioning | None = None  # None: the GPU has no partition modes
    # ``default_count`` is a whole node (an OAM baseboard, an APU board): the most one host
    # holds. False for a PCIe card, which hosts hold in any number.
    whole_node: bool = True

    @property
    def vram_bytes(self) -> int | None:
        return self.vram_mib * MIB if self.vram_mib is not None else None

    @property
    def per_node(self) -> int | None:
        """The GPUs one node of this model holds (an OAM platform: 8; MI300A: 4): the most
        one endpoint on one host can use (more: several nodes, ``--hosts``). None for a
        PCIe card (no fixed number per host)."""
        return self.default_count if self.whole_node else None

    @property
    def product(self) -> str:
        """The product name without the brand ("MI300X"), for lists in help and fix text."""
        return self.market_name.removeprefix("AMD Instinct ")

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
                partition="SPX/NPS1" if self.partitioning is not None else None,
                compute_units=self.partitioning.compute_units if self.partitioning else None,
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
            partitioning=MI300X_PARTITIONING,
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
            partitioning=Partitioning(
                304,
                8,
                _modes(
                    ("SPX", 1, "NPS1"), ("DPX", 2, "NPS1"), ("QPX", 4, "NPS1"), ("CPX", 8, "NPS1")
                ),
                "ROCm GPU specifications: 304 CUs (38 per XCD); AMD Accelerator Cloud 'GPU "
                "Partitioning Modes' (aac.amd.com/help/bare-metal/gpu-partitioning): MI325X "
                f"SPX/DPX/QPX/CPX = 1/2/4/8 GPUs each; {_MATRIX}: MI325 SPX+NPS1 only, "
                "'DPX + NPS2 ... NOT on MI300A or MI325', so NPS1 with every mode",
            ),
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
            partitioning=Partitioning(
                228,
                6,
                _modes(("SPX", 1, "NPS1"), ("TPX", 3, "NPS1"), ("CPX", 6, "NPS1")),
                "AMD Instinct MI300A APU overview (amdgpu-docs gpu-partitioning/mi300a): 6 XCDs "
                "x 38 CUs = 228, SPX/TPX/CPX = 1/3/6 GPUs, CPX 16 GB each, NPS1 only (fixed "
                f"at boot); {_MATRIX} (ROCm 6.4 revision): TPX+NPS1, CPX+NPS1",
            ),
        ),
        GpuProfile(
            "mi308x",
            "AMD Instinct MI308X",
            "gfx942",
            None,
            8,
            "no public per-GPU memory figure was found: pass --vram-gb with --gpu mi308x; on a "
            "host, detection reads it (KFD memory banks)",
            partitioning=Partitioning(
                80,
                4,
                _modes(("SPX", 1, "NPS1"), ("CPX", 4, "NPS1")),
                "amdsmi_get_gpu_asic_info on MI308X OAM: num_compute_units 80, gfx942 "
                "(gpustack/gpustack#4123); ROCm/amdsmi CHANGELOG 'amd-smi static --asic' on "
                "an MI308X in CPX: NUM_COMPUTE_UNITS 20, so 4 XCDs of 20 CUs; other modes "
                "unverified",
            ),
        ),
        GpuProfile(
            "mi350x",
            "AMD Instinct MI350X",
            "gfx950",
            294896,
            8,
            "KFD mem_banks size_in_bytes 309220868096 (= 294896 MiB) in rocprofiler-sdk's "
            "MI350X topology capture; same size as amd-smi shows on MI355X",
            partitioning=MI350_PARTITIONING,
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
            partitioning=MI350_PARTITIONING,
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
            whole_node=False,
        ),
    ]
}


def _key(name: str) -> str:
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    return key.removeprefix("amd").removeprefix("instinct")


# Two lists that differ: the GPUs this tool has a profile for (and so plans for), and the
# gfx targets the vLLM ROCm image ships GPU code for. A GPU can get a profile before the
# image carries kernels for it, and the image carries targets with no profile (Radeon).

# Every gfx target with a profile, in table order (gfx942, gfx950, gfx90a): the one list of
# the Instinct generations this tool plans for.
GFX_TARGETS: tuple[str, ...] = tuple(dict.fromkeys(p.gfx_version for p in PROFILES.values()))

# The gfx targets the vLLM ROCm images are compiled for, whichever release or --image runs:
# the Instinct ones, in every base image's PYTORCH_ROCM_ARCH (gfx90a;gfx942 in the ROCm 6.3
# images, with gfx950 since ROCm 7; vllm-project/vllm docker/Dockerfile.rocm_base). Newer
# bases add Radeon targets (gfx1100, gfx1101, gfx1200, gfx1201, gfx1150, gfx1151), but an
# older or pinned image lacks them, so a "no kernel image" fix does not promise them.
IMAGE_GFX_TARGETS: tuple[str, ...] = ("gfx942", "gfx950", "gfx90a")

# The profiles with compute partition modes (``hardware.partitions``), in table order.
PARTITIONED: tuple[str, ...] = tuple(k for k, p in PROFILES.items() if p.partitioning)


# The AMD GPUs the vllm-project/recipes taxonomy names (recipes carry overrides for them).
UPSTREAM_HARDWARE: tuple[str, ...] = tuple(k for k, p in PROFILES.items() if p.upstream)


def gpu_choices() -> str:
    """The accepted ``--gpu`` values, for help and error text (derived from the table)."""
    return ", ".join(PROFILES) + " (or a gfx target: " + ", ".join(GFX_TARGETS) + ")"


def products(keys: Iterable[str]) -> list[str]:
    """The product names of profiles ("MI300X", ...), in the order given."""
    return [PROFILES[key].product for key in keys]


def product_families() -> str:
    """Every profiled GPU, a gfx target's products joined by "/": "MI300X/MI325X/MI300A/
    MI308X, MI350X/MI355X, MI250X/MI210" (the list SKILL.md's description carries)."""
    return ", ".join(
        "/".join(p.product for p in PROFILES.values() if p.gfx_version == gfx)
        for gfx in GFX_TARGETS
    )


def family(gfx: str) -> GpuProfile | None:
    """The first profile of a gfx target (its flagship: gfx942 -> MI300X), or None."""
    return next((p for p in PROFILES.values() if p.gfx_version == gfx), None)


def profile_named(name: str | None) -> GpuProfile | None:
    """The profile a detected GPU's name names ("AMD Instinct MI300X", "MI308X OAM"), or
    None: a product name, never a gfx target (gfx942 is MI300X, MI325X, MI300A and MI308X)."""
    flat = re.sub(r"[^a-z0-9]", "", (name or "").lower())
    return next((p for key, p in PROFILES.items() if key in flat), None)


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
