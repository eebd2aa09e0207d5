"""Adapter: a host's partition mode, and changing it through the ``Host``.

``survey`` detects the GPUs and reads their mode (``hardware.partitions``); ``change``
works out the commands for a target mode and, only when asked to apply them, runs each as
an argv through ``Host.run`` (over ssh the same way), as root: directly when the host user
is root, else as ``sudo -n`` (never a password prompt, the rule ``check --auto-fix`` follows).
It stops at the first command that fails and says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.hardware.inventory import GpuInventory
from instinct_serve.hardware.partitions import (
    Layout,
    Mode,
    Step,
    check_mode,
    layout,
    normalize,
    paired,
    switch_steps,
)
from instinct_serve.hardware.profiles import PARTITIONED, products
from instinct_serve.hosts import Host

# amd-smi's memory (NPS) change can take minutes ("140 secs remain" in AMD's quick start
# guide), a driver reload too; nothing here may hang forever.
STEP_TIMEOUT_S = 600.0


@dataclass
class Survey:
    """A host's GPUs as partitions, and every mode they could be in with the commands."""

    host: str
    inventory: GpuInventory
    layout: Layout

    def modes(self) -> list[dict[str, Any]]:
        """Each mode of the product (AMD's memory pairing), with what it would give."""
        product = self.layout.product
        part = product.partitioning if product is not None else None
        if part is None:
            return []
        out = []
        for mode in paired(part):
            row = next(m for m in part.modes if m.name == mode.compute)
            mem = self.layout.device_memory(row.partitions)
            current = self.layout.mode is not None and (check_mode(part, self.layout.mode) == mode)
            steps = [] if current else switch_steps(part, self.layout.mode, mode)
            out.append(
                {
                    "mode": mode.label,
                    "current": current,
                    "partitions_per_gpu": row.partitions,
                    "logical_gpus": row.partitions * self.layout.physical_gpus,
                    "memory_per_device_gib": round(mem / 2**30, 2) if mem else None,
                    "commands": [s.shell for s in steps],
                }
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        product = self.layout.product
        return {
            "host": self.host,
            "gpu": product.market_name if product is not None else None,
            **self.layout.to_dict(),
            "modes": self.modes(),
            "notes": list(self.layout.notes),
        }


def survey(host: Host, sysfs_root: str = "/") -> Survey:
    """Detect the host's GPUs and read their partition mode."""
    from instinct_serve.gather.detect import detect

    inventory = detect(host, sysfs_root=sysfs_root)
    if not inventory.gpus:
        raise NotReadyError(
            f"no AMD GPU found on {host.name}",
            fix=inventory.hint or "check the amdgpu driver (lsmod | grep amdgpu)",
            id="no_gpu",
        )
    inventory, notes = normalize(inventory)
    where = layout(inventory)
    where.notes = list(dict.fromkeys([*notes, *where.notes]))
    return Survey(host.name, inventory, where)


@dataclass
class Change:
    """The commands that take a host to a mode, and what running them did."""

    host: str
    current: str | None
    target: str
    steps: list[Step]
    applied: bool = False
    ran: list[dict[str, Any]] = field(default_factory=list)
    failed: str | None = None  # the command that failed, when one did

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "current": self.current,
            "target": self.target,
            "steps": [s.to_dict() for s in self.steps],
            "applied": self.applied,
            "ran": self.ran,
            "failed": self.failed,
        }


def plan_change(found: Survey, compute: str, memory: str | None = None) -> Change:
    """The commands from the surveyed mode to ``compute``/``memory`` (AMD's pairing when
    ``memory`` is None)."""
    product = found.layout.product
    part = product.partitioning if product is not None else None
    if part is None:
        name = product.market_name if product is not None else "these GPUs"
        *most, last = products(PARTITIONED)
        raise UsageError(
            f"{name} on {found.host} have no partition modes this tool knows",
            fix=f"partition modes exist on {', '.join(most)} and {last}",
            id="no_partition_modes",
        )
    target = check_mode(part, Mode(compute.upper(), memory.upper() if memory else None))
    current = found.layout.mode
    return Change(
        found.host,
        current.label if current is not None else None,
        target.label,
        switch_steps(part, current, target),
    )


def _is_root(host: Host) -> bool:
    result = host.run(["id", "-u"], timeout=30)
    return result.ok and result.stdout.strip() == "0"


def apply(host: Host, change: Change) -> Change:
    """Run the change's commands in order on ``host``; stop at the first that fails."""
    sudo = not _is_root(host)
    change.applied = True
    for step in change.steps:
        argv = ["sudo", "-n", *step.argv] if sudo else list(step.argv)
        result = host.run(argv, timeout=STEP_TIMEOUT_S, input=step.input)
        text = (result.stderr.strip() or result.stdout.strip()).splitlines()
        change.ran.append(
            {
                "command": step.shell,
                "argv": argv,
                "returncode": result.returncode,
                "ok": result.ok,
                "output": text[-1][:300] if text else "",
            }
        )
        if not result.ok:
            change.failed = step.shell
            break
    return change
