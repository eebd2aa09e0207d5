"""What serve asks of the engine an endpoint runs on, and what it gets back.

A ``Backend`` (Docker containers in ``runtime.docker_backend``, native ``vllm serve``
processes in ``runtime.native``) finds endpoints by name or plan (``Target``), names what
holds a plan's port or name (``Occupant``), launches, follows the log, tells how a server
ended (``ExitInfo``) and stops it. Both run through a ``Host``, so ``--host`` is the same
code path.

What ``launch`` returns is the *handle* of what it created (a container's id, a native
process's name): serve follows, stops and removes only that, never something it merely
found under the same name. An endpoint found by its plan-hash label is reused only once
``verify`` agrees that it really runs the plan (labels are data, not trust).
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from instinct_serve import servers
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import (
    LABEL_COMPILE_CACHE,
    LABEL_MANAGED,
    LABEL_MODEL,
    LABEL_PLAN_HASH,
    LABEL_PORT,
    LABEL_SERVER,
    MANAGED_VALUE,
    managed_labels,
)
from instinct_serve.plan.model import LaunchPlan

LABEL_FIXES = "instinct-serve.fixes"  # finding ids whose retry hint a relaunch applied
# the names of the variables passed by name (values never): what ``logs`` must redact
LABEL_BY_NAME = "instinct-serve.env-by-name"


@dataclass(frozen=True)
class Target:
    """An endpoint process the engine knows by name: ours (managed) or not."""

    name: str
    engine: str
    managed: bool
    running: bool
    status: str
    model: str | None = None
    port: int | None = None
    plan_hash: str | None = None
    image: str | None = None
    id: str | None = None  # a container's id (docker); None for native processes
    # this run of it: a restart or relaunch is a new instance (``runtime.verified``)
    instance: str | None = None
    fixes: tuple[str, ...] = ()  # the known fixes its launch applied (``LABEL_FIXES``)

    @property
    def handle(self) -> str:
        """What the backend's calls take to act on exactly this endpoint."""
        return self.id or self.name

    def describe(self) -> str:
        what = "container" if self.engine == "docker" else "native vLLM process"
        owner = "instinct-serve " if self.managed else ""
        model = f" serving {self.model}" if self.model else ""
        foreign = "" if self.managed else " (not started by instinct-serve)"
        return f"{owner}{what} {self.name}{model}{foreign}"


@dataclass(frozen=True)
class Occupant:
    """Something that holds the plan's port or name."""

    description: str
    managed: bool
    target: Target | None = None  # for ours: what to stop to free it

    def to_dict(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "managed": self.managed,
            "name": self.target.name if self.target else None,
            "model": self.target.model if self.target else None,
        }


@dataclass(frozen=True)
class ExitInfo:
    """How a server process ended."""

    exit_code: int | None
    oom_killed: bool = False
    status: str = "exited"

    def describe(self) -> str:
        if self.oom_killed:
            return "was killed by the kernel's out-of-memory killer"
        if self.exit_code is None:
            return "is gone"
        if self.exit_code > 128:
            try:
                name = signal.Signals(self.exit_code - 128).name
            except ValueError:
                name = f"signal {self.exit_code - 128}"
            return f"exited with code {self.exit_code} ({name})"
        return f"exited with code {self.exit_code}"


class Backend(Protocol):
    """The engine an endpoint runs on: Docker containers or native processes."""

    engine: str
    host: Host

    def target(self, name: str) -> Target | None: ...

    def same_plan(self, plan: LaunchPlan) -> Target | None:
        """A running managed endpoint launched from the same plan (hash), if any."""
        ...

    def occupants(self, plan: LaunchPlan) -> list[Occupant]:
        """Whatever holds the plan's port or name, ours or not."""
        ...

    def prepare(self, plan: LaunchPlan, on_line: Callable[[str], None]) -> None:
        """Everything before the launch itself (pulling the image)."""
        ...

    def verify(self, plan: LaunchPlan, target: Target) -> str | None:
        """None when ``target`` (found by its labels) really runs ``plan``, else why not."""
        ...

    def launch(self, plan: LaunchPlan, secrets: Mapping[str, str], fixes: Sequence[str]) -> str:
        """Start the endpoint; return its handle (what the other calls take)."""
        ...

    def launching(self) -> str | None:
        """The handle of what an interrupted ``launch`` created so far, if anything."""
        ...

    def supervise(self, handle: str) -> None:
        """Once the endpoint is proven: let the engine restart it after a crash (docker's
        restart policy; native processes have no daemon: ``instinct watch`` does it)."""
        ...

    def follow(self, handle: str, since: float | None = None) -> subprocess.Popen[str]: ...

    def exit_info(self, handle: str) -> ExitInfo | None:
        """None while the endpoint runs, else how it ended."""
        ...

    def log_text(self, handle: str, tail: int) -> str: ...

    def secret_values(self, handle: str, names: Sequence[str]) -> dict[str, str]:
        """The values ``names`` have in the environment of our endpoint ``handle`` (what a
        relaunch passes on by name, ``secret_env.inherit``); {} where unknown."""
        ...

    def discard(self, handle: str, *, keep: bool) -> bool:
        """Stop the endpoint (ours only); remove it unless ``keep``. True if it existed."""
        ...


def launch_labels(plan: LaunchPlan, fixes: Sequence[str]) -> dict[str, str]:
    """The plan's labels with the managed ones guaranteed, and the fixes applied.

    The plan-hash label stays the one of the plan the user asked for, also after a
    relaunch with a fix: the next identical ``serve`` then finds and reuses the endpoint.
    """
    labels = dict(plan.labels)
    labels.update(
        managed_labels(
            model=plan.labels.get(LABEL_MODEL, plan.model),
            port=plan.port,
            plan_hash=plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash),
        )
    )
    labels[LABEL_MANAGED] = MANAGED_VALUE
    labels[LABEL_PORT] = str(plan.port)
    if plan.secret_env:
        labels[LABEL_BY_NAME] = ",".join(sorted(plan.secret_env))
    if fixes:
        labels[LABEL_FIXES] = ",".join(fixes)
    if plan.cache is not None:
        labels[LABEL_COMPILE_CACHE] = plan.cache.directory
    if plan.server != servers.DEFAULT:  # at launch, not in the plan: vLLM plans' hashes stay
        labels[LABEL_SERVER] = plan.server
    return labels


# Options a relaunch may set or replace (``runtime.retry``: the retry hints of diagnose and
# its option hints): a relaunched endpoint's command differs from its plan's in these only.
RELAUNCH_FLAGS = frozenset(
    {
        "--enforce-eager",
        "--max-num-batched-tokens",
        "--trust-remote-code",
        "--disable-custom-all-reduce",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--tensor-parallel-size",
    }
)


def same_command(planned: Sequence[str], actual: Sequence[str], *, relaunched: bool) -> bool:
    """Whether an endpoint's real command is the plan's: equal, or (after a relaunch with
    a fix) equal but for the options a relaunch may set."""
    if list(planned) == list(actual):
        return True
    if not relaunched:
        return False
    from instinct_serve import vllm_args

    def kept(args: Sequence[str]) -> list[list[str]]:
        out = []
        for unit in vllm_args.units(args):
            name = unit.name
            if name is not None and (
                name in RELAUNCH_FLAGS or vllm_args.negation(name) in RELAUNCH_FLAGS
            ):
                continue
            out.append(unit.tokens)
        return out

    return kept(planned) == kept(actual)
