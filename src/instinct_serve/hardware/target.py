"""The hardware a command plans or fits for: the one resolver behind fit, plan, serve and MCP.

In order: a GPU named with ``--gpu``/``--gfx`` (a profile; no detection), VRAM and count
given by hand (no detection), else what ``detect`` finds on the host, falling back to a
named profile where the command allows it (``plan`` on a laptop). Detected partitions (CPX
and the like) keep their own memory: ``partitions.normalize`` gives each its share of the
GPU where a tool reported the whole GPU's or none, never the profile's whole-GPU figure.
Then ``--vram-gb`` or ``--vram-gib`` overrides the memory, ``--gpu-count`` takes the first N
detected GPUs and ``--gpus`` picks devices by index. Pure: detection is a callable the
adapter hands in.

The one exception is a CPU-only engine (vLLM's CPU backend, allowed with
``INSTINCT_ALLOW_CPU_ENGINE``): it serves on the host's CPU whatever GPU is named, so
``cpu_target`` is the target then, with no GPU, no gfx and the RAM as its memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.hardware.inventory import Gpu, GpuInventory
from instinct_serve.hardware.partitions import normalize
from instinct_serve.hardware.profiles import MIB, get_profile, gpu_choices, is_gfx
from instinct_serve.options import TargetOptions

CPU_SOURCE = "cpu"  # the source of a CPU target (and the "gfx" of its one device)
# vLLM's CPU backend sizes its KV cache from this variable: whole GiB of RAM (it overrides
# --kv-cache-memory-bytes when set; 0 is an explicit KV cache of 0 bytes, which fails).
CPU_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"
# vLLM's CPU runner makes a pipeline rank's intermediate tensors only in its warm-up, which
# eager mode (--enforce-eager: compilation mode NONE) skips: the first request then kills the
# engine (cpu_model_runner.warming_up_model, vLLM 0.32). This compiled mode needs no C++
# compiler and warms up (seconds): what a CPU plan with pipeline parallelism runs instead.
CPU_PP_COMPILATION = '{"mode":2,"backend":"eager"}'
# torch's switch that turns every torch.compile into plain eager calls. vLLM's CPU build
# compiles the sampler's rank count (vllm/v1/sample/ops/logprobs.py batched_count_greater_than,
# backend=current_platform.simple_compile_backend: inductor) even under --enforce-eager, so an
# eager engine with no C++ compiler dies on its first logprobs request (real-vllm-cpu/20:
# "Worker failed with error 'InvalidCxxCompiler ...'"); with it set the request is answered.
NO_DYNAMO = "TORCHDYNAMO_DISABLE"


@dataclass
class Target:
    """The GPUs to plan for, where they came from, and what to tell the user about them."""

    inventory: GpuInventory
    source: str  # profile | detect | manual | profile (default) | cpu
    notes: list[str] = field(default_factory=list)

    @property
    def detected(self) -> bool:
        return self.source == "detect"

    @property
    def cpu(self) -> bool:
        """The host's CPU, for a CPU-only engine (``cpu_target``): no GPU at all."""
        return self.source == CPU_SOURCE


def cpu_target(
    opts: TargetOptions,
    *,
    memory_bytes: int | None,
    host_name: str = "this machine",
    server: str = "vLLM",
) -> Target:
    """The CPU a CPU-only engine (of ``server``, as messages name it) serves on: one device
    named ``CPU`` whose memory is the host's RAM (``memory_bytes``; None: unknown), gfx
    ``cpu``. The GPU options do not apply to it; a note says which were given and not used."""
    given = (
        ("--gpu", opts.gpu),
        ("--gfx", opts.gfx),
        ("--gpus", opts.gpus),
        ("--gpu-count", opts.gpu_count),
        ("--vram-gb", opts.vram_gb),
        ("--vram-gib", opts.vram_gib),
    )
    unused = [flag for flag, value in given if value is not None]
    notes = [f"the {server} on {host_name} is CPU-only: planned for its CPU backend, not a GPU"]
    if unused:
        notes.append(f"{', '.join(unused)} not used: a CPU-only engine serves on the CPU")
    device = Gpu(index=0, name="CPU", gfx_version=CPU_SOURCE, vram_total_bytes=memory_bytes)
    return Target(GpuInventory(gpus=[device], source=CPU_SOURCE), CPU_SOURCE, notes)


def cpu_kv_cache_gib(value: str) -> int:
    """The GiB of ``VLLM_CPU_KVCACHE_SPACE`` (a whole number above 0), else ``UsageError``."""
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        raise UsageError(
            f"{CPU_KV_ENV}={value!r}: vLLM's CPU backend takes a whole number of GiB, and 0 "
            "leaves no room for the KV cache",
            fix=f"e.g. --env-literal {CPU_KV_ENV}=4 (GiB of RAM for the KV cache)",
            id="bad_cpu_kv_space",
        )
    return int(text)


def _subset(inv: GpuInventory, gpus: list[Gpu]) -> GpuInventory:
    return GpuInventory(
        gpus=gpus,
        rocm_version=inv.rocm_version,
        source=inv.source,
        warnings=inv.warnings,
        hint=inv.hint,
    )


def _manual(vram: int, count: int | None) -> GpuInventory:
    gpus = [Gpu(index=i, name="GPU", gfx_version="unknown") for i in range(count or 1)]
    for gpu in gpus:
        gpu.vram_total_bytes = vram
    return GpuInventory(gpus=gpus, source="manual")


def needs_detection(opts: TargetOptions) -> bool:
    """Whether the GPUs must be detected: none is named, and VRAM and count are not given."""
    return not opts.gpu_spec and not (opts.vram_bytes is not None and opts.gpu_count is not None)


def resolve_target(
    opts: TargetOptions,
    detect: Callable[[], GpuInventory] | None,
    *,
    host_name: str = "this machine",
    default_gpu: str | None = None,
    refuse_unsupported: bool = False,
) -> Target:
    """The GPUs for ``opts``. ``detect`` runs detection (None: no host to ask);
    ``default_gpu`` is the profile used when detection finds no GPU, else that is an error
    (exit 3, ``no_gpu``)."""
    notes: list[str] = []
    manual = opts.vram_bytes
    spec = opts.gpu_spec
    if spec:
        profile = get_profile(spec)
        inv = profile.inventory(opts.gpu_count)
        source = "profile"
        if is_gfx(spec) and manual is None:
            notes.append(
                f"--gpu {spec}: assuming {profile.market_name} "
                f"({(profile.vram_bytes or 0) / 2**30:.0f} GiB per GPU); set --vram-gb for "
                "another"
            )
        elif profile.vram_bytes is None and manual is None:
            notes.append(
                f"--gpu {spec}: no public memory figure for the {profile.market_name}; "
                "set --vram-gb (what `instinct detect` shows on such a host)"
            )
    elif not needs_detection(opts):
        inv, source = _manual(manual or 0, opts.gpu_count), "manual"
    else:
        inv = detect() if detect is not None else GpuInventory()
        source = "detect"
        if not inv.gpus:
            if default_gpu:
                profile = get_profile(default_gpu)
                inv = profile.inventory(opts.gpu_count)
                source = "profile"
                notes.append(
                    f"no AMD GPU detected on {host_name}: planning for "
                    f"{inv.gpu_count}x {profile.market_name} (use --gpu or --host to choose)"
                )
            elif manual is not None:
                inv, source = _manual(manual, opts.gpu_count), "manual"
            else:
                raise NotReadyError(
                    f"no AMD GPU found on {host_name}",
                    fix=(inv.hint or "check the amdgpu driver (lsmod | grep amdgpu)")
                    + f"; or name the GPU: --gpu {gpu_choices()}",
                    id="no_gpu",
                )
        else:
            notes.extend(inv.warnings)
            _scope_check(inv, host_name, refuse_unsupported, notes)
            inv, partition_notes = normalize(inv)
            notes.extend(partition_notes)
            if opts.gpu_count is not None:
                if opts.gpu_count > inv.gpu_count:
                    raise UsageError(
                        f"--gpu-count {opts.gpu_count}, but {host_name} has {inv.gpu_count} GPU(s)",
                        fix=f"use --gpu-count {inv.gpu_count} or less",
                        id="bad_gpu_count",
                    )
                inv = _subset(inv, inv.gpus[: opts.gpu_count])
    if manual is not None and source != "manual":
        inv = _subset(inv, [replace(g, vram_total_bytes=manual) for g in inv.gpus])
        unit = f"{opts.vram_gb:g} GB" if opts.vram_gb is not None else f"{opts.vram_gib:g} GiB"
        notes.append(f"VRAM per GPU set to {unit} ({manual / MIB:.0f} MiB)")
    if opts.gpus is not None:
        inv = _select(inv, opts.gpus)
    if inv.gfx_version == "mixed":
        notes.append("the GPUs differ: sized for the smallest; restrict with --gpus")
    return Target(inv, source, notes)


def _select(inv: GpuInventory, indices: list[int]) -> GpuInventory:
    """The GPUs ``--gpus`` names, in its order; an index the host lacks is an error."""
    by_index = {g.index: g for g in inv.gpus}
    missing = [i for i in indices if i not in by_index]
    if missing:
        raise UsageError(
            f"--gpus names GPU {', '.join(map(str, missing))}, but the host has "
            f"{', '.join(str(i) for i in sorted(by_index)) or 'none'}",
            fix="run `instinct detect` to list the GPU indices",
            id="bad_gpus",
        )
    return _subset(inv, [by_index[i] for i in indices])


def _scope_check(inv: GpuInventory, host_name: str, refuse: bool, notes: list[str]) -> None:
    """Detected GPUs this tool does not serve (a consumer Radeon, an old Instinct): refused
    for a launch plan unless forced, said in a note otherwise (``hardware.scope``); a
    forced plan takes ``FORCED_SETTINGS_GFX``'s settings (``catalog_key``)."""
    from instinct_serve.hardware.scope import FORCED, scope_of

    scope = scope_of(inv)
    if scope.supported:
        return
    if refuse:
        raise NotReadyError(
            f"{host_name}: {scope.message}",
            fix=scope.fix,
            id="unsupported_gpu",
            details={"kind": scope.kind},
        )
    notes.append(f"{scope.message}; using {FORCED}")


def catalog_key(inventory: GpuInventory) -> str:
    """The profile (``mi300x``) the catalog merges for, else the gfx target: the exact
    profile lets upstream's per-GPU recipe overrides apply. A GPU without a row of its own
    (forced past ``hardware.scope``) takes ``FORCED_SETTINGS_GFX``'s."""
    from instinct_serve.hardware.profiles import GFX_TARGETS, profile_named
    from instinct_serve.hardware.scope import FORCED_SETTINGS_GFX

    gfx = inventory.gfx_version
    if gfx in ("unknown", "mixed"):
        kinds = sorted({g.gfx_version for g in inventory.gpus})
        gfx = kinds[0] if kinds else "unknown"
    first = inventory.gpus[0] if inventory.gpus else None
    profile = profile_named((first.market_name or first.name) if first else None)
    if profile is not None:
        return profile.key
    return gfx if gfx in GFX_TARGETS else FORCED_SETTINGS_GFX
