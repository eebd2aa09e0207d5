"""Docker's failures, in its own words: which mean "no usable Docker here" (whatever the
command), and what a failed ``docker run`` means for the user (port, name, device, image,
registry, disk), each with a fix.
"""

from __future__ import annotations

import re
from typing import Any

from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import Host, Result

# --------------------------------------------------------------------------- errors


_CLI_NOISE = re.compile(r"^(Run|See) '\S+ .*--help'")


def last_line(text: str) -> str:
    """Docker's reason, without its "Run 'docker run --help'" footer and error prefixes."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    lines = [ln for ln in lines if not _CLI_NOISE.match(ln)] or lines
    if not lines:
        return ""
    said = lines[-1]
    for prefix in ("docker: ", "Error: ", "Error response from daemon: "):
        said = said.removeprefix(prefix)
    return said


def daemon_error(host: Host, result: Result) -> NotReadyError | None:
    """The failures that mean "no usable Docker here", whatever the command was."""
    err = result.stderr.lower()
    # 127 is also `docker run`'s code for a container that cannot start: only a shell's or
    # our LocalHost's "not found", without a word from the daemon, means a missing CLI.
    if result.returncode == 127 and "error response from daemon" not in err and "not found" in err:
        return NotReadyError(
            f"the docker CLI is not installed on {host.name}",
            fix="install Docker (docker.io or docker-ce) on the host",
            id="docker_missing",
        )
    if "cannot connect to the docker daemon" in err or "is the docker daemon running" in err:
        return NotReadyError(
            f"the Docker daemon is not running on {host.name}",
            fix="start it (systemctl start docker, or run dockerd)",
            id="docker_unavailable",
        )
    if "permission denied" in err and "docker" in err and ".sock" in err:
        return NotReadyError(
            f"permission denied on the Docker socket on {host.name}",
            fix="add the user to the docker group (sudo usermod -aG docker $USER), "
            "then log in again",
            id="docker_permission",
        )
    if result.timed_out:
        return NotReadyError(
            f"docker did not answer on {host.name}: {' '.join(result.argv[:3])} timed out",
            fix="check the Docker daemon (docker info) on the host",
            id="docker_timeout",
        )
    return None


def run_error(host: Host, result: Result, name: str | None) -> InstinctError:
    """Map a failed ``docker run`` to an actionable error carrying docker's own words."""
    daemon = daemon_error(host, result)
    if daemon is not None:
        return daemon
    stderr = result.stderr.strip()
    err = stderr.lower()
    said = last_line(stderr) or f"exit status {result.returncode}"
    details: dict[str, Any] = {"stderr": stderr, "exit_code": result.returncode}
    if "port is already allocated" in err or "address already in use" in err:
        return InstinctError(
            f"docker could not publish the port: {said}",
            fix="pick another --port, or see what holds it with `instinct ps` / `ss -tlnp`",
            id="port_in_use",
            details=details,
        )
    if "is already in use by container" in err:
        return InstinctError(
            f"a container named {name} already exists: {said}",
            fix=f"choose another --name, or remove it (docker rm {name}) if it is yours",
            id="container_name_conflict",
            details=details,
        )
    if "error gathering device information" in err or (
        "no such file or directory" in err and "/dev/" in err
    ):
        return InstinctError(
            f"a GPU device is missing on {host.name}: {said}",
            fix="check that the amdgpu driver is loaded (ls /dev/kfd /dev/dri) and run "
            "`instinct check`",
            id="device_missing",
            details=details,
        )
    if "unable to find group" in err:
        return InstinctError(
            f"the image has no such group: {said}",
            fix="use a vLLM ROCm image (vllm/vllm-openai-rocm) or numeric --group-add GIDs",
            id="group_missing",
            details=details,
        )
    if any(
        s in err
        for s in ("pull access denied", "manifest unknown", "not found: manifest", "no such image")
    ):
        return InstinctError(
            f"the image could not be found: {said}",
            fix="check the image name and tag (e.g. vllm/vllm-openai-rocm:latest) and "
            "`docker login` for private registries",
            id="image_not_found",
            details=details,
        )
    if "registry" in err or "dial tcp" in err or "tls handshake" in err:
        return InstinctError(
            f"the image is not on {host.name} and the registry cannot be reached: {said}",
            fix="check the host's network or proxy (docker info | grep -i proxy), or bring the "
            "image over with `docker save | docker load`",
            id="image_pull_failed",
            details=details,
        )
    if "no space left on device" in err:
        return InstinctError(
            f"no disk space left on {host.name}: {said}",
            fix="free space under /var/lib/docker (docker system prune) or the HF cache",
            id="disk_full",
            details=details,
        )
    return InstinctError(
        f"docker run failed on {host.name}: {said}",
        fix="read docker's message above; `instinct plan --json` shows the exact argv",
        id="docker_run_failed",
        details=details,
    )
