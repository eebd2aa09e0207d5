"""GPU partitions: what mode a host's GPUs are in, what each logical GPU holds, how to lay
endpoints on them, and the exact ``amd-smi`` commands that change the mode. Pure.

The facts (per product, in ``profiles.PROFILES[...].partitioning``, the one table):

- A *compute* (accelerator) mode groups a GPU's XCDs into logical GPUs: SPX 1, DPX 2, TPX 3,
  QPX 4, CPX one per XCD (8 on MI300X/MI325X/MI350X/MI355X, 6 on MI300A, 4 on MI308X). A
  mode needs the XCD count to divide by its partitions (AMD SMI partition guide).
- A *memory* (NPS) mode splits the HBM into NUMA domains; there can be no more memory
  partitions than compute partitions (MI300X: SPX+NPS1, DPX+NPS1/2, QPX/CPX+NPS1/4).
- Each logical GPU gets the GPU's memory divided by the partitions whatever the NPS mode:
  an MI300X in CPX has 8 GPUs of 24 GB (KFD: 25767706624 B = 196592 MiB / 8, ROCm issue
  4750), in NPS1 as in NPS4 (AMD MI300X partitioning overview).
- ``amd-smi list`` gives all partitions of one GPU the same bus:device, the PCI function
  numbering the partition (``0000:0c:00.0`` .. ``.7``); ``amd-smi static --partition``
  prints the mode on partition 0 only, "N/A" on the others; HIP numbers a GPU's partitions
  consecutively (renderD128..135 for GPU 0, then 136...) (AMD SMI partition guide, MI300X
  quick start guide).
- Changing the memory mode acts on every GPU of the hive and needs every GPU process
  stopped and the amdgpu driver reloaded (``modprobe -r amdgpu && modprobe amdgpu``; ``amd-smi
  reset -r`` is gone since ROCm 7.13); a reload (or reboot) puts the compute mode back to
  SPX, so the compute mode is set last (AMD SMI partition guide, amd_smi_lib 7.0.0 changelog,
  MI300X overview).

Serving: AMD's partitioning guides run one vLLM per partition behind a load balancer for
models that fit a partition ("CPX + NPS4 ... small language models (13B parameters or less)
that fit within the memory capacity of a single CPX GPU"; ROCm blog "LLM Inference
Optimization Using AMD GPU Partitioning": DPX+NPS2 serves more per GPU than SPX), split a
model that does not fit across partitions with tensor parallelism (amdgpu-docs run-vllm),
and advise against partitioning "when running only a single instance of a single model on a
device". So a TP group stays on the partitions of one physical GPU when it fits there, and
spans whole GPUs (never part of one) when it does not.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from instinct_serve.errors import UsageError
from instinct_serve.hardware.inventory import Gpu, GpuInventory, gb, gib
from instinct_serve.hardware.profiles import ComputeMode, GpuProfile, Partitioning, profile_named

AMD_SMI = "amd-smi"
DRIVER_RELOAD: tuple[tuple[str, ...], ...] = (("modprobe", "-r", "amdgpu"), ("modprobe", "amdgpu"))
WHOLE_DEVICE_FACTOR = 1.5  # a partition reporting this much more than its share shows the GPU's


@dataclass(frozen=True)
class Mode:
    """A compute mode and, when known, its memory mode ("CPX/NPS4")."""

    compute: str
    memory: str | None = None

    @property
    def label(self) -> str:
        return f"{self.compute}/{self.memory}" if self.memory else self.compute

    @classmethod
    def parse(cls, label: str | None) -> Mode | None:
        """From "CPX/NPS4", "cpx", "SPX/NPS1"; None for nothing usable ("N/A")."""
        if not label:
            return None
        parts = [p.strip().upper() for p in label.split("/") if p.strip()]
        compute = next((p for p in parts if p.endswith("PX")), None)
        memory = next((p for p in parts if p.startswith("NPS")), None)
        return cls(compute, memory) if compute else None


def product_of(inventory: GpuInventory) -> GpuProfile | None:
    """The profile of the host's GPUs (the first GPU's name), when the name says it."""
    first = inventory.gpus[0] if inventory.gpus else None
    return profile_named((first.market_name or first.name) if first else None)


def compute_mode(partitioning: Partitioning, name: str) -> ComputeMode:
    """The ``ComputeMode`` row called ``name``; UsageError naming the valid ones."""
    for row in partitioning.modes:
        if row.name == name.upper():
            return row
    raise UsageError(
        f"no {name.upper()} compute mode on this GPU",
        fix="use one of: " + ", ".join(m.name for m in partitioning.modes),
        id="bad_partition_mode",
    )


def paired(partitioning: Partitioning) -> list[Mode]:
    """Every compute mode with AMD's memory mode for it (SPX/NPS1, DPX/NPS2, CPX/NPS4...)."""
    return [Mode(m.name, m.memory[0]) for m in partitioning.modes]


def check_mode(partitioning: Partitioning, mode: Mode) -> Mode:
    """``mode`` with its memory mode filled in (AMD's pairing) and checked against the table."""
    row = compute_mode(partitioning, mode.compute)
    memory = (mode.memory or row.memory[0]).upper()
    if memory not in row.memory:
        raise UsageError(
            f"{row.name} does not run with {memory} on this GPU",
            fix=f"{row.name} takes " + " or ".join(row.memory),
            id="bad_partition_mode",
        )
    return Mode(row.name, memory)


# ------------------------------------------------------------------ the host's layout


@dataclass
class Layout:
    """The host's GPUs as partitions: the mode, and which logical GPUs share a physical one."""

    product: GpuProfile | None
    mode: Mode | None  # None: not known (no label, no compute-unit count to read it from)
    per_gpu: int  # logical GPUs per physical GPU
    groups: list[list[int]]  # logical GPU indices per physical GPU, in HIP order
    memory_per_device: int | None  # bytes, as the inventory has it
    notes: list[str] = field(default_factory=list)

    @property
    def partitioned(self) -> bool:
        return self.per_gpu > 1

    @property
    def physical_gpus(self) -> int:
        return len(self.groups)

    @property
    def physical_memory(self) -> int | None:
        """One physical GPU's memory: the partitions' shares together, else the profile's."""
        if self.memory_per_device:
            return self.memory_per_device * self.per_gpu
        return self.product.vram_bytes if self.product is not None else None

    def device_memory(self, partitions: int) -> int | None:
        """What one logical GPU holds when the GPU is split ``partitions`` ways."""
        whole = self.physical_memory
        return whole // partitions if whole else None

    def to_dict(self) -> dict[str, Any]:
        mem = self.memory_per_device
        return {
            "mode": self.mode.label if self.mode else None,
            "partitioned": self.partitioned,
            "physical_gpus": self.physical_gpus,
            "partitions_per_gpu": self.per_gpu,
            "logical_gpus": sum(len(g) for g in self.groups),
            "memory_per_device_gb": gb(mem) if mem else None,
            "memory_per_device_gib": gib(mem) if mem else None,
            "gpu_groups": [list(g) for g in self.groups],
        }


def _mode_from_units(gpu: Gpu, partitioning: Partitioning) -> Mode | None:
    """CPX and friends read from the compute units a logical GPU has: 20 of an MI308X's 80
    is one of 4 partitions."""
    units = gpu.compute_units
    if not units or partitioning.compute_units % units:
        return None
    count = partitioning.compute_units // units
    row = next((m for m in partitioning.modes if m.partitions == count), None)
    return Mode(row.name) if row is not None else None


def _physical_key(gpu: Gpu) -> str | None:
    """Domain:bus:device: the partitions of one GPU differ only in the PCI function."""
    return gpu.bdf.rsplit(".", 1)[0] if gpu.bdf else None


def _modes_of(gpus: list[Gpu], partitioning: Partitioning | None) -> list[Mode | None]:
    modes = []
    for gpu in gpus:
        mode = Mode.parse(gpu.partition)
        if mode is None and partitioning is not None:
            mode = _mode_from_units(gpu, partitioning)
        modes.append(mode)
    return modes


def layout(inventory: GpuInventory) -> Layout:
    """How the inventory's logical GPUs sit on physical GPUs, and in which mode.

    The mode: a GPU's partition label ("CPX/NPS4"), inherited by the partitions of the same
    GPU that print "N/A"; else read from its compute units against the product's. The
    grouping: by PCI bus:device when every GPU has an address, else consecutive runs of the
    mode's partition count (HIP numbers a GPU's partitions consecutively)."""
    gpus = inventory.gpus
    product = product_of(inventory)
    part = product.partitioning if product is not None else None
    modes = _modes_of(gpus, part)
    keys = [_physical_key(g) for g in gpus]
    groups: list[list[int]] = []
    if gpus and all(keys):
        by_key: dict[str, list[int]] = {}
        for gpu, key in zip(gpus, keys, strict=True):
            by_key.setdefault(str(key), []).append(gpu.index)
        groups = list(by_key.values())
        # a labelled partition lends its mode to the unlabelled ones of its GPU
        mode_of_key: dict[str | None, Mode] = {}
        for key, mode in zip(keys, modes, strict=True):
            if mode is not None:
                mode_of_key.setdefault(key, mode)
        modes = [mode or mode_of_key.get(key) for key, mode in zip(keys, modes, strict=True)]
    known = [m for m in modes if m is not None]
    mode = known[0] if known else None
    notes: list[str] = []
    if len({m.label for m in known}) > 1:
        notes.append(
            "the GPUs are in different partition modes ("
            + ", ".join(sorted({m.label for m in known}))
            + "): AMD does not recommend mixed modes on one node"
        )
    row = None
    if mode is not None and part is not None:
        row = next((m for m in part.modes if m.name == mode.compute), None)
    if row is not None and mode is not None and mode.memory is None and len(row.memory) == 1:
        mode = Mode(mode.compute, row.memory[0])  # the only memory mode it runs with
    shared = any(len(g) > 1 for g in groups)
    observed = max((len(g) for g in groups), default=1)
    per_gpu = row.partitions if row is not None else observed
    if not groups or (per_gpu > 1 and not shared):
        # no addresses, or addresses that do not show the sharing: consecutive runs
        ordered = [g.index for g in gpus]
        groups = [ordered[i : i + per_gpu] for i in range(0, len(ordered), per_gpu)]
    if mode is None and per_gpu > 1:
        notes.append(f"{per_gpu} logical GPUs share each physical GPU, in a mode no tool reported")
    return Layout(product, mode, per_gpu, groups, inventory.vram_bytes, notes)


def normalize(inventory: GpuInventory) -> tuple[GpuInventory, list[str]]:
    """The inventory with each partition's mode and memory filled in, and notes on what was.

    A partition printing "N/A" takes its GPU's mode. A partition showing the whole GPU's
    memory (some tools do, ROCm issue 4750) or none gets its share of the product's memory
    (an MI300X CPX partition: 196592 MiB / 8); the KFD figure, when detection read it, is
    that share already and stays."""
    where = layout(inventory)
    if not where.partitioned or where.mode is None:
        return inventory, list(where.notes)
    notes = list(where.notes)
    share = None
    product = where.product
    if product is not None and product.vram_bytes:
        share = product.vram_bytes // where.per_gpu
    labelled = shrunk = filled = 0
    gpus = []
    for gpu in inventory.gpus:
        new = gpu
        if Mode.parse(gpu.partition) is None:
            new = replace(new, partition=where.mode.label)
            labelled += 1
        if share is not None and new.vram_total_bytes is None:
            new = replace(new, vram_total_bytes=share)
            filled += 1
        elif share is not None and (new.vram_total_bytes or 0) > share * WHOLE_DEVICE_FACTOR:
            new = replace(new, vram_total_bytes=share)
            shrunk += 1
        gpus.append(new)
    name = product.market_name if product is not None else "GPU"
    if labelled:
        notes.append(f"{labelled} partition(s) reported no mode: {where.mode.label} like their GPU")
    if shrunk:
        notes.append(
            f"{shrunk} partition(s) reported the whole GPU's memory: each {where.mode.label} "
            f"partition holds 1/{where.per_gpu} of an {name} ({gib(share or 0):g} GiB)"
        )
    if filled:
        notes.append(
            f"{filled} partition(s) reported no memory: 1/{where.per_gpu} of an {name} "
            f"({gib(share or 0):g} GiB) assumed"
        )
    out = replace(inventory, gpus=gpus)
    return out, notes


# ------------------------------------------------------------------ endpoints on partitions


def replicas(groups: list[list[int]], tp: int) -> list[list[int]]:
    """The GPU index sets of as many TP-``tp`` endpoints as the host holds.

    A TP group stays inside one physical GPU's partitions when it fits there (partitions of
    one GPU talk over the package, not over xGMI); a larger one takes whole GPUs, so no GPU
    is split between two groups. On unpartitioned GPUs (one index per group) that is runs of
    ``tp`` GPUs in order."""
    if tp < 1:
        raise UsageError(f"TP {tp} is not a tensor-parallel size", id="bad_tp")
    out: list[list[int]] = []
    if groups and tp <= max(len(g) for g in groups):
        for group in groups:
            out.extend(group[i : i + tp] for i in range(0, len(group) - tp + 1, tp))
        return out
    pending: list[int] = []
    for group in groups:
        pending.extend(group)
        if len(pending) >= tp:
            out.append(pending[:tp])
            pending = []
    return out


def spans_gpus(tp: int, per_gpu: int) -> bool:
    """Whether a TP group of ``tp`` takes more than one physical GPU's partitions."""
    return per_gpu > 1 and tp > per_gpu


def splits_a_gpu(tp: int, per_gpu: int) -> bool:
    """Whether TP groups of ``tp`` would share a physical GPU's partitions with another
    group: larger than one GPU's partitions and not a multiple of them (TP 8 on an MI300A
    in CPX, 6 per GPU)."""
    return spans_gpus(tp, per_gpu) and tp % per_gpu != 0


def endpoints(where: Layout, tp: int) -> dict[str, Any]:
    """The plan's ``partitions`` section: the mode, the GPUs, and the endpoints of TP ``tp``
    the host holds (``replica_gpus``: one index set each, for the replica runtime)."""
    sets = replicas(where.groups, tp)
    mode = where.mode.label if where.mode else "an unreported mode"
    mem = where.memory_per_device
    size = f" of {gib(mem):g} GiB" if mem else ""
    if where.partitioned:
        unit = "partition" if tp == 1 else f"{tp} partitions of one GPU"
        if spans_gpus(tp, where.per_gpu):
            unit = f"{tp // where.per_gpu} whole GPUs' partitions"
        note = (
            f"{mode}: {sum(len(g) for g in where.groups)} logical GPUs{size} on "
            f"{where.physical_gpus} GPU(s), {where.per_gpu} each; at TP {tp} the host holds "
            f"{len(sets)} endpoint(s), one per {unit}; this plan starts one"
        )
    else:
        note = (
            f"{len(sets)} endpoint(s) of TP {tp} fit these {where.physical_gpus} GPU(s); "
            "this plan starts one"
        )
    return where.to_dict() | {
        "tp": tp,
        "replicas": len(sets),
        "replica_gpus": sets,
        "note": note,
    }


def spanning_warning(where: Layout, tp: int) -> str | None:
    """What to say when one TP group takes all of a GPU's partitions or more: AMD partitions
    GPUs for many small instances and advises against it for one instance of one model."""
    if not where.partitioned or tp < where.per_gpu or where.mode is None:
        return None
    whole = -(-tp // where.per_gpu)
    span = "all of a GPU's" if whole == 1 else f"{whole} GPUs'"
    return (
        f"TP {tp} takes {span} {where.mode.compute} partitions: AMD advises against "
        "partitioning a GPU to run one instance of one model; unpartitioned (SPX) it takes TP "
        f"{whole} (`instinct plan --list` shows the modes and the commands to switch)"
    )


# ------------------------------------------------------------------ changing the mode


@dataclass(frozen=True)
class Step:
    """One command of a mode change: argv (run as root), why, and what it asks on stdin."""

    argv: tuple[str, ...]
    why: str
    input: str | None = None  # the answer to amd-smi's confirmation prompt, when it asks

    @property
    def shell(self) -> str:
        """As a person types it (root needed: ``sudo``)."""
        return shlex.join(("sudo", *self.argv))

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.shell, "argv": list(self.argv), "why": self.why}


def _set_compute(mode: str) -> Step:
    return Step(
        (AMD_SMI, "set", "--gpu", "all", "--compute-partition", mode),
        f"compute mode {mode} on every GPU (no GPU work may run; no reload needed)",
    )


def _set_memory(mode: str) -> Step:
    return Step(
        (AMD_SMI, "set", "--gpu", "all", "--memory-partition", mode),
        f"memory mode {mode}: applies to every GPU of the hive, after the driver reload",
        input="Y\n",  # amd-smi before ROCm 7.0 asks "Do you accept these terms? [Y/N]"
    )


def switch_steps(partitioning: Partitioning, current: Mode | None, target: Mode) -> list[Step]:
    """The commands that take the GPUs from ``current`` to ``target``, in an order where
    every mode on the way is valid: a compute mode that takes both memory modes first (when
    none does, the way goes through NPS1), then the memory mode, the driver reload it
    needs, and the compute mode last (a reload puts SPX back). [] when already there."""
    target = check_mode(partitioning, target)
    assert target.memory is not None
    if (
        current is not None
        and current.compute == target.compute
        and (current.memory == target.memory)
    ):
        return []
    cur_compute = current.compute if current is not None else None
    cur_memory = current.memory if current is not None else None
    if cur_memory == target.memory:
        return [] if cur_compute == target.compute else [_set_compute(target.compute)]
    steps: list[Step] = []
    if cur_memory is not None:
        bridge = next(
            (
                m.name
                for m in sorted(
                    partitioning.modes,
                    key=lambda m: (m.name != target.compute, m.name != cur_compute),
                )
                if cur_memory in m.memory and target.memory in m.memory
            ),
            None,
        )
        if bridge is None and "NPS1" not in (cur_memory, target.memory):
            # no compute mode takes both (MI300X DPX/NPS2 -> CPX/NPS4): through NPS1, which
            # every compute mode takes
            via = Mode(target.compute, "NPS1")
            return switch_steps(partitioning, current, via) + switch_steps(
                partitioning, via, target
            )
        if bridge is not None and bridge != cur_compute:
            steps.append(_set_compute(bridge))
    steps.append(_set_memory(target.memory))
    steps.extend(
        Step(
            argv,
            "reload the amdgpu driver: applies the memory mode (every GPU process must "
            "have exited, containers included)",
        )
        for argv in DRIVER_RELOAD
    )
    steps.append(_set_compute(target.compute))
    return steps
