"""The native engine as a serve ``Backend``: a supervised ``vllm serve`` without Docker.

``engine.launcher`` starts the process detached on the host (log file, pid file, exit
file) and recognises it again only by what it recorded; this adapter gives serve the same
operations it has for containers: find by name or plan, launch, follow the log (``tail -F``
through the host, so over ssh too), tell whether it still runs and how it ended, stop.
The plan's GPU choice is pinned with ``HIP_VISIBLE_DEVICES`` (``plan.render.native_env``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from instinct_serve.engine import launcher
from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime.backend import (
    ExitInfo,
    Occupant,
    Target,
    launch_labels,
    same_command,
)
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.owner import META_OWNER, caller

META_ENGINE = "instinct-serve"


def target_of(status: launcher.ProcessStatus) -> Target:
    meta = status.process.meta
    port = meta.get("port")
    return Target(
        name=status.process.name,
        engine="native",
        managed=True,  # only what the launcher recorded is listed: it is ours
        running=status.running,
        status="running" if status.running else "exited",
        model=str(meta["model"]) if meta.get("model") else None,
        port=int(port) if isinstance(port, int) else None,
        plan_hash=str(meta["plan_hash"]) if meta.get("plan_hash") else None,
        image=None,
        instance=process_instance(status.process),
        fixes=tuple(str(f) for f in meta.get("fixes") or [] if isinstance(f, str)),
    )


def process_instance(process: launcher.NativeProcess) -> str:
    """This run of the native server: a relaunch under the same name is a new pid."""
    return f"{process.name}:{process.pid}:{process.start_ticks}"


def native_on_port(host: Host, port: int) -> Target | None:
    """A running native endpoint of ours that was launched on ``port``, if any."""
    for status in launcher.list_processes(host):
        if status.running and status.process.meta.get("port") == port:
            return target_of(status)
    return None


# How long serve lets a server it discards (failed, relaunched, replaced) end on SIGTERM
# before the SIGKILL: vLLM exits in about 2 s; a vLLM 0.32 whose engine core died during
# start-up ignores SIGTERM (tests/fixtures/logs/real-vllm-cpu/16), and waiting the
# launcher's 30 s for it only delays the diagnosis or the relaunch.
DISCARD_TERM_S = 10.0


def native_argv(command: str, plan: LaunchPlan) -> list[str]:
    """``plan.render.native_argv`` (``--host`` the plan's bind address) with the
    discovered command instead of its first word: the ``vllm`` script for ``vllm serve``,
    the interpreter for SGLang's ``python3 -m sglang.launch_server``
    (``engine.discovery.Engine.command``)."""
    from instinct_serve.plan.render import native_argv as rendered

    return [command, *rendered(plan)[1:]]


def backend_for_server(host: Host, server: str) -> NativeBackend:
    """Native processes of ``server``'s install on ``host`` (``engine.discovery``): what a
    relaunch (watch, upgrade, rollback) runs a recorded plan with."""
    from instinct_serve.engine.discovery import discover, require_usable

    return NativeBackend(host, require_usable(discover(host, server=server)).command)


class NativeBackend:
    """Native server processes on the host (``vllm serve``, SGLang's module), started by
    ``engine.launcher`` with ``command`` (the discovered install of the plan's server)."""

    engine = "native"

    def __init__(self, host: Host, command: str) -> None:
        self.host = host
        self.command = command
        self._launching: str | None = None

    def target(self, name: str) -> Target | None:
        try:
            status = launcher.status(self.host, name)
        except InstinctError:  # not a valid process name: cannot be one of ours
            return None
        return target_of(status) if status is not None else None

    def same_plan(self, plan: LaunchPlan) -> Target | None:
        wanted = plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash)
        for status in launcher.list_processes(self.host):
            if status.running and status.process.meta.get("plan_hash") == wanted:
                return target_of(status)
        return None

    def occupants(self, plan: LaunchPlan) -> list[Occupant]:
        out: list[Occupant] = []
        named = self.target(plan.container_name)
        if named is not None:
            out.append(Occupant(named.describe(), True, named))
        ours = [
            target_of(s)
            for s in launcher.list_processes(self.host)
            if s.running and s.process.meta.get("port") == plan.port
        ]
        try:
            holders = Docker(self.host).port_holders(plan.port)
        except NotReadyError:
            holders = []
        for holder in holders:
            if holder.kind == "process" and ours:
                owner = ours[0]
                if named is None or owner.name != named.name:
                    out.append(Occupant(owner.describe(), True, owner))
                continue
            if holder.managed and holder.container_name:
                docker_target = Target(
                    name=holder.container_name,
                    engine="docker",
                    managed=True,
                    running=True,
                    status="running",
                    model=holder.model,
                    port=plan.port,
                )
                out.append(Occupant(docker_target.describe(), True, docker_target))
                continue
            out.append(Occupant(holder.describe(), False))
        return out

    def verify(self, plan: LaunchPlan, target: Target) -> str | None:
        """The launcher's record (in the user's own state directory) of the command."""
        proc = launcher.load(self.host, target.name)
        if proc is None:
            return "it is gone"
        planned = native_argv(self.command, plan)[1:]
        relaunched = bool(proc.meta.get("fixes"))
        if not same_command(planned, proc.argv[1:], relaunched=relaunched):
            return "its command is not the plan's server arguments"
        return None

    def launching(self) -> str | None:
        name, self._launching = self._launching, None
        if name is None:
            return None
        try:
            status = launcher.status(self.host, name)
        except InstinctError:
            return None
        return name if status is not None and status.running else None

    def prepare(self, plan: LaunchPlan, on_line: Callable[[str], None]) -> None:
        """Nothing to pull: the engine was discovered (and checked) before the launch."""

    def launch(self, plan: LaunchPlan, secrets: Mapping[str, str], fixes: Sequence[str]) -> str:
        from instinct_serve.plan.render import native_env

        labels = launch_labels(plan, fixes)
        env = {**native_env(plan), **secrets}
        meta = {
            "engine": META_ENGINE,
            "model": plan.model,
            "served_model_name": plan.served_model_name,
            "port": plan.port,
            "plan_hash": labels[LABEL_PLAN_HASH],
            "fixes": list(fixes),
            "tensor_parallel_size": plan.tensor_parallel_size,
            "max_model_len": plan.max_model_len,
            "gpu_indices": plan.gpu_indices,
            "secret_env": sorted(secrets),
            META_OWNER: caller(),  # who started it (``runtime.owner``)
        } | plan.server_field()  # ps probes its route
        self._launching = plan.container_name
        launcher.launch(
            self.host, plan.container_name, native_argv(self.command, plan), env=env, meta=meta
        )
        self._launching = None
        return plan.container_name

    def _log_path(self, name: str) -> str:
        proc = launcher.load(self.host, name)
        if proc is None:
            raise InstinctError(
                f"no native process named {name} on {self.host.name}",
                fix="list them with `instinct ps`",
                id="container_not_found",
            )
        return proc.log_path

    def supervise(self, handle: str) -> None:
        """No daemon restarts a native process: ``instinct watch`` supervises it."""

    def follow(self, name: str, since: float | None = None) -> subprocess.Popen[str]:
        # -F: follow by name (survives a relaunch rewriting the file); since: new lines only
        start = "0" if since is not None else "+1"
        return self.host.spawn(["tail", "-n", start, "-F", self._log_path(name)])

    def exit_info(self, name: str) -> ExitInfo | None:
        status = launcher.status(self.host, name)
        if status is None:
            return ExitInfo(None, status="removed")
        if status.running:
            return None
        code = status.exit_code
        for _ in range(5):  # the wrapper writes the exit file just after the process ends
            if code is not None:
                break
            time.sleep(0.1)
            again = launcher.status(self.host, name)
            code = again.exit_code if again is not None else None
        return ExitInfo(code, status="exited")

    def log_text(self, name: str, tail: int) -> str:
        try:
            path = self._log_path(name)
        except InstinctError:
            return ""
        result = self.host.run(["tail", "-n", str(tail), path], timeout=60)
        return result.stdout if result.ok else ""

    def secret_values(self, name: str, names: Sequence[str]) -> dict[str, str]:
        """From the environment of the launch's running process (read on the host, back on
        stdout: never an argument); {} once it has ended."""
        from instinct_serve.runtime.secret_env import pick

        try:
            status = launcher.status(self.host, name) if names else None
        except InstinctError:
            return {}
        if status is None or not status.running:
            return {}
        result = self.host.run(["cat", f"/proc/{status.process.pid}/environ"], timeout=30)
        return pick(result.stdout.split("\0"), names) if result.ok else {}

    def discard(self, name: str, *, keep: bool) -> bool:
        """Stop every process of the launch (SIGKILL after ``DISCARD_TERM_S``), also those a
        crashed server left behind; ``processes_survive`` if any still runs (a relaunch
        beside them would find their GPU memory taken). Its state directory (log) is kept
        either way: a relaunch under the same name appends to the same log."""
        try:
            result = launcher.stop(self.host, name, timeout=DISCARD_TERM_S)
        except NotReadyError:
            return False
        if result.survivors:
            left = [(name, s) for s in result.survivors]
            raise launcher.survivors_error(self.host, left, result.to_dict())
        return bool(result.members)
