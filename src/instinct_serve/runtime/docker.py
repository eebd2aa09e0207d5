"""Docker containers through a ``Host``: the docker CLI, locally or on ``--host`` over ssh.

Every call goes through ``Host.run``/``Host.spawn`` with the ``docker`` CLI, so the local
machine and a remote one are one code path and no Docker SDK or socket forwarding is
needed. The tool only ever destroys what it created: containers carry the labels of
``plan.labels`` (``LABEL_MANAGED`` et al.), ``list_managed`` filters on them, and
``stop``/``remove`` refuse (error id ``not_managed``) any container without them.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from instinct_serve import vllm_args
from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import Host, Result
from instinct_serve.plan.labels import (
    LABEL_MANAGED,
    MANAGED_VALUE,
)
from instinct_serve.runtime import docker_ports
from instinct_serve.runtime.docker_data import (
    FULL_ID,
    ContainerInfo,
    ContainerState,
    Listener,
    PortHolder,
    merge_timestamped,
    parse_inspect,
    strings,
)
from instinct_serve.runtime.docker_errors import daemon_error, last_line, run_error

UNSEEN_HOLDER_WAIT_S = 1.0  # a listener with no visible process: looked at again
UNSEEN_HOLDER_LOOKS = 3

# --------------------------------------------------------------------------- adapter


class Docker:
    """The docker CLI on one host."""

    def __init__(self, host: Host, *, binary: str = "docker", timeout: float = 60.0) -> None:
        self.host = host
        self.binary = binary
        self.timeout = timeout
        self._cid_dir: str | None = None

    # -- plumbing

    def _run(
        self,
        args: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        return self.host.run(
            [self.binary, *args], timeout=self.timeout if timeout is None else timeout, env=env
        )

    def _check(self, result: Result, action: str) -> Result:
        if result.ok:
            return result
        daemon = daemon_error(self.host, result)
        if daemon is not None:
            raise daemon
        raise InstinctError(
            f"docker {action} failed on {self.host.name}: "
            f"{last_line(result.stderr) or f'exit status {result.returncode}'}",
            fix="check `docker info` on the host",
            id="docker_failed",
            details={"stderr": result.stderr.strip(), "exit_code": result.returncode},
        )

    # -- daemon and images

    def available(self) -> tuple[bool, str]:
        """(True, "Docker 20.10.24") when the CLI can talk to a daemon, else (False, why).

        An unreachable ssh host is not a Docker problem: its ``HostError`` propagates.
        """
        result = self._run(["version", "--format", "{{.Server.Version}}"], timeout=30)
        if result.ok and result.stdout.strip():
            return True, f"Docker {result.stdout.strip()}"
        problem = daemon_error(self.host, result)
        if problem is not None:
            return False, problem.message
        return False, last_line(result.stderr) or f"docker version exited {result.returncode}"

    def require(self) -> None:
        """Raise ``NotReadyError`` (exit 3) unless Docker is usable on the host."""
        ok, reason = self.available()
        if not ok:
            raise NotReadyError(
                reason, fix="run `instinct check` for the fix", id="docker_unavailable"
            )

    def image_present(self, image: str) -> bool:
        """Whether the image is already local (so ``run`` will not pull silently)."""
        result = self._run(["image", "inspect", "--format", "{{.Id}}", image], timeout=30)
        if result.ok:
            return True
        if daemon_error(self.host, result) is not None:
            self._check(result, "image inspect")
        return False

    def image_id(self, image: str) -> str | None:
        """The local image's id (``sha256:...``), or None when it is not here: nodes of one
        group must run the very same build."""
        result = self._run(["image", "inspect", "--format", "{{.Id}}", image], timeout=30)
        return result.stdout.strip() or None if result.ok else None

    def network_exists(self, name: str) -> bool:
        return self._run(["network", "inspect", "--format", "{{.Name}}", name], timeout=30).ok

    def run_once(self, args: Sequence[str], *, timeout: float) -> Result:
        """A foreground ``docker run --rm ...`` (a probe), its exit status and output."""
        if list(args[:2]) != ["run", "--rm"]:
            raise ValueError("run_once takes `run --rm ...` arguments")
        return self._run(list(args), timeout=timeout)

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        """The image's ``Config.Entrypoint`` (what a container of it runs unless told
        otherwise), or None when the image is not here."""
        fmt = "{{json .Config.Entrypoint}}"
        result = self._run(["image", "inspect", "--format", fmt, image], timeout=30)
        if not result.ok:
            return None
        try:
            return strings(json.loads(result.stdout.strip() or "null"))
        except json.JSONDecodeError:
            return None

    def pull(self, image: str) -> subprocess.Popen[str]:
        """Start ``docker pull`` and stream its progress (serve shows it as a phase)."""
        return self.host.spawn([self.binary, "pull", image])

    # -- containers

    def new_cidfile(self) -> str:
        """A path (not yet existing) in a private directory on the host, for ``run``'s
        ``--cidfile``: docker writes the id there the moment it creates the container."""
        import uuid

        from instinct_serve.engine import hostfs

        directory = self._cid_dir
        if directory is None:
            directory = hostfs.join(hostfs.data_dir(self.host), "run")
            script = 'umask 077; mkdir -p "$1"'
            self.host.run(["sh", "-c", script, "sh", directory], timeout=30)
            self._cid_dir = directory
        return hostfs.join(directory, f"{uuid.uuid4().hex}.cid")

    def created_id(self, cidfile: str) -> str | None:
        """The id docker wrote in ``cidfile`` (the container that ``run`` created), if any."""
        text = (self.host.read_text(cidfile) or "").strip()
        return text if FULL_ID.fullmatch(text) else None

    def forget_cidfile(self, cidfile: str) -> None:
        self.host.run(["rm", "-f", "--", cidfile], timeout=30)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        cidfile: str | None = None,
    ) -> str:
        """Run a planner-made ``docker run -d ...`` argv; return the new container id.

        ``env`` carries secret values named by ``--env NAME`` in the argv (e.g. HF_TOKEN):
        they reach the docker CLI's environment, over ssh through stdin, never an argument.
        Pull first (``image_present``/``pull``): a missing image is pulled here, silently.

        The run writes the new container's id to ``cidfile`` (``--cidfile``; one is made
        and removed here unless the caller passes its own): on failure the container docker
        created but could not start (e.g. a port conflict) is removed by that id, so the
        next attempt does not hit a name conflict, and nothing that merely has the same
        name (another run's container) is ever touched.
        """
        args = list(argv)
        if len(args) < 3 or args[0].rsplit("/", 1)[-1] not in ("docker", self.binary):
            raise ValueError(f"not a docker argv: {args[:3]}")
        if args[1] != "run" or not any(a in ("-d", "--detach") for a in args):
            raise ValueError("Docker.run needs a detached `docker run -d ...` argv")
        args[0] = self.binary
        own_cidfile = cidfile is None
        path = self.new_cidfile() if cidfile is None else cidfile
        args[2:2] = ["--cidfile", path]
        try:
            result = self.host.run(args, timeout=timeout, env=env)
            # docker's own options come before the image: the first --name is the container's
            name = vllm_args.value(args, "--name", last=False) or None
            if not result.ok:
                error = run_error(self.host, result, name)
                self._discard_unstarted(path, error)
                raise error
            lines = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]
            if not lines or not re.fullmatch(r"[0-9a-f]{12,64}", lines[-1]):
                raise InstinctError(
                    f"docker run printed no container id on {self.host.name}",
                    fix="check `docker ps -a` on the host",
                    id="docker_run_failed",
                    details={"stdout": result.stdout, "stderr": result.stderr},
                )
            return lines[-1]
        finally:
            if own_cidfile:
                self.forget_cidfile(path)

    def _discard_unstarted(self, cidfile: str, error: InstinctError) -> None:
        """Remove the container this very run created and could not start (by its id)."""
        try:
            cid = self.created_id(cidfile)
            info = self.get(cid) if cid else None
        except InstinctError:
            return
        if info is not None and info.managed and not info.state.running:
            removed = self._run(["rm", "-f", info.id], timeout=60).ok
            error.details["removed_unstarted_container"] = info.name if removed else None

    def inspect(self, names: Iterable[str]) -> list[ContainerInfo]:
        """``docker inspect`` of several containers; missing ones are left out (races)."""
        wanted = list(names)
        if not wanted:
            return []
        result = self._run(["inspect", "--type", "container", *wanted])
        if not result.ok and "no such" not in result.stderr.lower():
            self._check(result, "inspect")
        try:
            docs = json.loads(result.stdout) if result.stdout.strip() else []
        except json.JSONDecodeError as exc:
            raise InstinctError(
                f"docker inspect printed invalid JSON on {self.host.name}: {exc}",
                fix="check the docker CLI on the host (docker inspect --help)",
                id="docker_failed",
            ) from exc
        now = datetime.now(UTC)
        return [parse_inspect(doc, now) for doc in docs if isinstance(doc, dict)]

    def get(self, name_or_id: str) -> ContainerInfo | None:
        """Any container (managed or not) by name or id, or None when there is none."""
        found = self.inspect([name_or_id])
        return found[0] if found else None

    def _ids(self, args: Sequence[str]) -> list[str]:
        result = self._check(self._run(["ps", "-q", "--no-trunc", *args]), "ps")
        return [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]

    def list_managed(
        self, *, labels: Mapping[str, str] | None = None, include_stopped: bool = True
    ) -> list[ContainerInfo]:
        """Containers this tool started (label ``instinct-serve.managed=true``), by name.

        ``labels`` narrows further (e.g. ``{LABEL_MODEL: model}``).
        """
        filters = ["--filter", f"label={LABEL_MANAGED}={MANAGED_VALUE}"]
        for key, value in (labels or {}).items():
            filters += ["--filter", f"label={key}={value}"]
        if include_stopped:
            filters.insert(0, "-a")
        found = [c for c in self.inspect(self._ids(filters)) if c.managed]
        return sorted(found, key=lambda c: c.name)

    def list_running(self) -> list[ContainerInfo]:
        """Every running container, ours or not (to find who publishes a port)."""
        return self.inspect(self._ids([]))

    def inspect_state(self, name: str) -> ContainerState | None:
        info = self.get(name)
        return None if info is None else info.state

    def wait_state(self, name: str, *, timeout: float) -> ContainerState | None:
        """Block until the container is no longer running (``docker wait``), at most
        ``timeout`` seconds; return its state then (still running if the wait timed out)."""
        self._run(["wait", name], timeout=timeout)
        return self.inspect_state(name)

    def logs(self, name: str, *, tail: int | None = 200, since: str | float | None = None) -> str:
        """The container's output, stdout and stderr interleaved in time order.

        vLLM logs records on stdout and progress bars on stderr; ``--timestamps`` lets the
        two streams (which the CLI returns separately) be merged back in order.
        """
        args = ["logs", "--timestamps"]
        if tail is not None:
            args += ["--tail", str(tail)]
        if since is not None:
            args += ["--since", _since(since)]
        result = self._run([*args, name], timeout=max(self.timeout, 120))
        if not result.ok:
            if "no such container" in result.stderr.lower():
                raise InstinctError(
                    f"no container named {name} on {self.host.name}",
                    fix="list them with `instinct ps`",
                    id="container_not_found",
                )
            self._check(result, "logs")
        return merge_timestamped(result.stdout, result.stderr)

    def follow(
        self, name: str, *, since: str | float | None = None, tail: int | None = None
    ) -> subprocess.Popen[str]:
        """``docker logs -f`` as a process whose stdout streams the merged output.

        It ends by itself when the container stops; the caller terminates it otherwise.
        """
        args = [self.binary, "logs", "-f"]
        if since is not None:
            args += ["--since", _since(since)]
        if tail is not None:
            args += ["--tail", str(tail)]
        return self.host.spawn([*args, name])

    def require_managed(self, name: str, action: str) -> ContainerInfo:
        """The container, if this tool started it; ``container_not_found``/``not_managed``."""
        info = self.get(name)
        if info is None:
            raise InstinctError(
                f"no container named {name} on {self.host.name}",
                fix="list the endpoints with `instinct ps`",
                id="container_not_found",
            )
        if not info.managed:
            raise InstinctError(
                f"refusing to {action} container {info.name}: instinct-serve did not create it "
                f"(no {LABEL_MANAGED}={MANAGED_VALUE} label)",
                fix="it is not ours to touch; if you are sure, use docker on it yourself",
                id="not_managed",
                details={"container": info.name, "image": info.image},
            )
        return info

    def stop(self, name: str, *, remove: bool = True, grace_s: int = 10) -> ContainerInfo:
        """Stop (and by default remove) a container this tool started; refuse any other."""
        info = self.require_managed(name, "stop")
        if info.state.running or info.state.status in ("restarting", "paused"):
            result = self._run(["stop", "-t", str(grace_s), info.id], timeout=grace_s + 60)
            if not result.ok and "no such container" not in result.stderr.lower():
                self._check(result, "stop")
        if remove:
            result = self._run(["rm", "-f", info.id], timeout=60)
            if not result.ok and "no such container" not in result.stderr.lower():
                self._check(result, "rm")
        return info

    def set_restart(self, name: str, policy: str) -> None:
        """``docker update --restart POLICY`` of a container this tool started."""
        info = self.require_managed(name, "change the restart policy of")
        self._check(self._run(["update", "--restart", policy, info.id]), "update")

    def signal(self, name: str, signal: str) -> ContainerInfo:
        """``docker kill --signal SIGNAL`` to a container this tool started (a reload)."""
        info = self.require_managed(name, "signal")
        self._check(self._run(["kill", "--signal", signal, info.id], timeout=60), "kill")
        return info

    def children(self, name: str, pid: int) -> set[int]:
        """The host PIDs of ``pid``'s children in container ``name`` (``docker top``)."""
        result = self._run(["top", name, "-o", "pid,ppid"], timeout=30)
        self._check(result, "top")
        found = set()
        for line in result.stdout.splitlines()[1:]:
            words = line.split()
            if len(words) == 2 and words[0].isdigit() and words[1] == str(pid):
                found.add(int(words[0]))
        return found

    def start(self, name: str) -> ContainerInfo:
        """Start again a stopped container this tool started (same id, same writable layer)."""
        info = self.require_managed(name, "start")
        self._check(self._run(["start", info.id], timeout=max(self.timeout, 120)), "start")
        return info

    def rename(self, name: str, new_name: str) -> ContainerInfo:
        """``docker rename`` a container this tool started (kept aside under another name)."""
        info = self.require_managed(name, "rename")
        self._check(self._run(["rename", info.id, new_name], timeout=60), "rename")
        return info

    def remove(self, name: str) -> ContainerInfo:
        """Remove a stopped container this tool started (before a relaunch under its name)."""
        return self.stop(name, remove=True)

    def stop_all_managed(
        self, *, labels: Mapping[str, str] | None = None, grace_s: int = 10
    ) -> list[ContainerInfo]:
        """Stop and remove every managed container (``labels`` narrows the set)."""
        stopped = []
        for info in self.list_managed(labels=labels):
            try:
                stopped.append(self.stop(info.id, grace_s=grace_s))
            except InstinctError as exc:
                if exc.id != "container_not_found":  # gone meanwhile: fine
                    raise
        return stopped

    # -- ports (``runtime.docker_ports``)

    def listeners(self, port: int) -> list[Listener]:
        """TCP listeners on ``port`` on the host (``ss``, else ``/proc/net/tcp``)."""
        return docker_ports.listeners(self.host, port)

    def port_holders(self, port: int) -> list[PortHolder]:
        """Who holds ``port``: our containers, foreign containers, or other processes. A
        listener with no visible process, or docker's proxy for a container ``docker ps``
        does not list, is looked at again (``UNSEEN_HOLDER_LOOKS`` times,
        ``UNSEEN_HOLDER_WAIT_S`` apart): a container being started (another serve's)
        publishes its port a moment before ``docker ps`` lists it running, longer on a
        loaded host."""
        holders = self._port_holders(port)
        for _ in range(UNSEEN_HOLDER_LOOKS):
            if not any(_unseen(h) for h in holders):
                break
            time.sleep(UNSEEN_HOLDER_WAIT_S)
            holders = self._port_holders(port)
        return holders

    def _port_holders(self, port: int) -> list[PortHolder]:
        try:
            running = self.list_running()
        except NotReadyError:
            running = []
        return docker_ports.port_holders(self.host, port, running)


def _unseen(holder: PortHolder) -> bool:
    """A holder not identified yet: a listener without a process, or a container's proxy
    with no container listed."""
    if holder.kind == "process":
        return holder.pid is None
    return holder.kind == "container" and holder.container_id is None


def _since(value: str | float) -> str:
    return f"{value:.9f}" if isinstance(value, float | int) else value
