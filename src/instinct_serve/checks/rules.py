"""The checks of ``instinct check``: one function per fact, each returning a ``Check``.

A check reads facts through a ``Probe`` (one code path for local and ssh hosts) and decides
from them; it never changes the host (fixes live in ``fixes.py``). ``CHECKS`` fixes the
order and the stable ids. Every failing check says what to do in ``fix``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from instinct_serve.checks.model import Check, CheckOptions
from instinct_serve.checks.probe import DiskFacts, Node, Probe, TargetEnv
from instinct_serve.credentials import AGENT_TOKEN
from instinct_serve.paths import HfLocations, expand_path, hf_locations

CheckFn = Callable[[Probe, CheckOptions], Check]

GB = 10**9
VISIBLE_DEVICE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
DOCKER_INFO_TIMEOUT_S = 30
TOKEN_URL = "https://huggingface.co/settings/tokens"
DRIVER_URL = "https://rocm.docs.amd.com/projects/install-on-linux/en/latest/"

# $1: /sys/module/amdgpu under the root prefix. Exit 3 when the module is absent.
_AMDGPU_SCRIPT = r"""
[ -d "$1" ] || exit 3
printf 'initstate=%s\n' "$(cat -- "$1/initstate" 2>/dev/null)"
printf 'version=%s\n' "$(cat -- "$1/version" 2>/dev/null)"
"""


def _where(probe: Probe) -> str:
    return "this machine" if probe.host.is_local else probe.host.name


def _user(env: TargetEnv) -> str:
    return env.user or "$USER"


def _group_fix(env: TargetEnv, groups: set[str]) -> str:
    """Group advice: join video/render, or re-login when the membership is not active yet."""
    pending = sorted(g for g in groups if g in env.db_groups and g not in env.groups)
    if pending:
        names = ",".join(pending)
        return (
            f"{_user(env)} is already in group {names}, but this login session started "
            f"before that: log out and back in (or run `newgrp {pending[0]}`)"
        )
    return f"sudo usermod -aG video,render {_user(env)}, then log out and back in"


# --- docker ------------------------------------------------------------------------------


def check_docker_installed(probe: Probe, options: CheckOptions) -> Check:
    path = probe.which("docker")
    if path:
        return Check("docker_installed", "ok", f"docker CLI: {path}", details={"path": path})
    return Check(
        "docker_installed",
        "error",
        f"docker is not installed on {_where(probe)}",
        fix="install Docker Engine (https://docs.docker.com/engine/install/), or serve "
        "without Docker through the native engine (`instinct engine`)",
    )


def check_docker_daemon(probe: Probe, options: CheckOptions) -> Check:
    if not probe.which("docker"):
        return Check("docker_daemon", "skip", "docker is not installed")
    docker_host = probe.env().get("DOCKER_HOST") or None
    details: dict[str, object] = {"docker_host": docker_host}
    result = probe.host.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"], timeout=DOCKER_INFO_TIMEOUT_S
    )
    version = result.stdout.strip()
    if result.ok and version and "<no value>" not in version:
        where = f" at {docker_host}" if docker_host else ""
        return Check(
            "docker_daemon",
            "ok",
            f"Docker daemon {version} reachable{where}",
            details={**details, "server_version": version},
        )
    if result.timed_out:
        return Check(
            "docker_daemon",
            "error",
            f"`docker info` did not answer within {DOCKER_INFO_TIMEOUT_S} s",
            fix="the daemon looks hung: check `sudo journalctl -u docker` and restart it",
            details={**details, "reason": "timeout"},
        )
    stderr = result.stderr.strip()
    low = stderr.lower()
    line = next(
        (
            s.strip()
            for s in stderr.splitlines()
            if "docker daemon" in s.lower() or "permission denied" in s.lower()
        ),
        stderr.splitlines()[-1].strip() if stderr else f"exit status {result.returncode}",
    )
    if "permission denied" in low:
        env = probe.env()
        if "docker" in env.db_groups and "docker" not in env.groups:
            fix = _group_fix(env, {"docker"})
        else:
            fix = (
                f"sudo usermod -aG docker {_user(env)}, then log out and back in "
                "(membership of the docker group is equivalent to root)"
            )
        return Check(
            "docker_daemon",
            "error",
            f"no permission to use the Docker daemon: {line}",
            fix=fix,
            details={**details, "reason": "permission_denied"},
        )
    if "cannot connect" in low or "is the docker daemon running" in low:
        fix = (
            f"check DOCKER_HOST={docker_host}, or unset it to use the local daemon"
            if docker_host
            else "start it: `sudo systemctl start docker` (or `sudo service docker start`)"
        )
        return Check(
            "docker_daemon",
            "error",
            f"the Docker daemon is not running: {line}",
            fix=fix,
            details={**details, "reason": "not_running"},
        )
    return Check(
        "docker_daemon",
        "error",
        f"`docker info` failed: {line}",
        fix="run `docker info` on the host to see why",
        details={**details, "reason": "failed"},
    )


# --- driver and devices --------------------------------------------------------------------


def check_amdgpu_driver(probe: Probe, options: CheckOptions) -> Check:
    module = probe.path("/sys/module/amdgpu")
    result = probe.run(["sh", "-c", _AMDGPU_SCRIPT, "sh", module])
    if result.returncode == 3:
        return Check(
            "amdgpu_driver",
            "error",
            "the amdgpu kernel driver is not loaded (no /sys/module/amdgpu)",
            fix=f"`sudo modprobe amdgpu`; if that fails install the AMD GPU driver "
            f"(amdgpu-dkms, {DRIVER_URL}) and check `dmesg | grep amdgpu`",
        )
    fields = dict(line.partition("=")[::2] for line in result.stdout.splitlines() if "=" in line)
    state = fields.get("initstate", "").strip()
    version = fields.get("version", "").strip() or None
    if state and state != "live":
        return Check(
            "amdgpu_driver",
            "error",
            f"the amdgpu kernel module is present but its state is {state!r}, not 'live'",
            fix="check `dmesg | grep -i amdgpu` for the load error, then reboot",
            details={"initstate": state, "version": version},
        )
    suffix = f" (version {version})" if version else ""
    return Check(
        "amdgpu_driver",
        "ok",
        f"amdgpu kernel driver loaded{suffix}",
        details={"initstate": state or None, "version": version},
    )


def _inaccessible(node: Node, env: TargetEnv) -> str:
    group = f" (group {node.group})" if node.group else ""
    return f"{node.path}{group} is not readable and writable by {env.user or 'this user'}"


def check_dev_kfd(probe: Probe, options: CheckOptions) -> Check:
    node = probe.devices().get("/dev/kfd", Node("/dev/kfd", False))
    if not node.present:
        return Check(
            "dev_kfd",
            "error",
            "/dev/kfd is missing: the ROCm compute interface of the amdgpu driver is absent",
            fix="load the driver (`sudo modprobe amdgpu`) on a host with an AMD Instinct GPU",
        )
    env = probe.env()
    if not node.accessible:
        return Check(
            "dev_kfd",
            "error",
            _inaccessible(node, env),
            fix=_group_fix(env, {node.group or "render", "video", "render"}),
            details={"group": node.group},
        )
    return Check("dev_kfd", "ok", "/dev/kfd is accessible", details={"group": node.group})


def check_dev_dri(probe: Probe, options: CheckOptions) -> Check:
    nodes = probe.devices()
    dri = nodes.get("/dev/dri", Node("/dev/dri", False))
    if not dri.present:
        return Check(
            "dev_dri",
            "error",
            "/dev/dri is missing: no GPU is exposed by the kernel",
            fix="load the driver (`sudo modprobe amdgpu`) and check `ls -l /dev/dri`",
        )
    render = sorted(
        (n for p, n in nodes.items() if p.startswith("/dev/dri/renderD") and n.present),
        key=lambda n: n.path,
    )
    if not render:
        return Check(
            "dev_dri",
            "error",
            "/dev/dri has no render nodes (renderD*): the GPUs are not usable for compute",
            fix="check `ls -l /dev/dri` and `dmesg | grep amdgpu` (driver load error?)",
        )
    env = probe.env()
    denied = [n for n in render if not n.accessible]
    paths = [n.path for n in render]
    if denied:
        groups = {n.group for n in denied if n.group} | {"video", "render"}
        return Check(
            "dev_dri",
            "error",
            f"{len(denied)} of {len(render)} render nodes are not accessible: "
            + _inaccessible(denied[0], env),
            fix=_group_fix(env, groups),
            details={"render_nodes": paths, "denied": [n.path for n in denied]},
        )
    return Check(
        "dev_dri",
        "ok",
        f"{len(render)} render node{'s' if len(render) != 1 else ''} accessible",
        details={"render_nodes": paths},
    )


def check_visible_devices(probe: Probe, options: CheckOptions) -> Check:
    env = probe.env()
    empty = [n for n in VISIBLE_DEVICE_VARS if n in env.values and not env.values[n].strip()]
    limited = {n: env.values[n] for n in VISIBLE_DEVICE_VARS if env.values.get(n, "").strip()}
    if empty:
        names = " and ".join(empty)
        return Check(
            "visible_devices_empty",
            "error",
            f"{names} {'is' if len(empty) == 1 else 'are'} set to an empty string, "
            "which hides every GPU",
            fix=f"`unset {' '.join(empty)}` and remove it from the shell profile "
            "(~/.bashrc, ~/.profile) of the host",
            details={"empty": empty, "set": limited},
        )
    if limited:
        text = ", ".join(f"{k}={v}" for k, v in limited.items())
        return Check(
            "visible_devices_empty",
            "ok",
            f"{text} limits the GPUs in use",
            details={"empty": [], "set": limited},
        )
    return Check(
        "visible_devices_empty",
        "ok",
        "no *_VISIBLE_DEVICES variable hides GPUs",
        details={"empty": [], "set": {}},
    )


def check_rocm_version(probe: Probe, options: CheckOptions) -> Check:
    from instinct_serve.gather.detect import detect_rocm_version

    version = detect_rocm_version(probe.host, probe.root or "/")
    if version:
        return Check("rocm_version", "ok", f"ROCm {version}", details={"version": version})
    return Check(
        "rocm_version",
        "warn",
        "the ROCm version of the host is unknown (no amd-smi, no /opt/rocm version file)",
        fix="the vLLM images bring their own ROCm; install ROCm on the host "
        f"({DRIVER_URL}) for amd-smi and the native engine",
        details={"version": None},
    )


def check_gpu_supported(probe: Probe, options: CheckOptions) -> Check:
    """The host's GPUs are AMD Instinct GPUs this tool serves (``hardware.scope``): a plan
    for --gpu mi300x must not launch on a consumer Radeon."""
    from instinct_serve.gather.detect import detect
    from instinct_serve.hardware.scope import scope_of

    inventory = detect(probe.host, probe.root or "/")
    if not inventory.gpus:
        return Check("gpu_supported", "skip", "no AMD GPU detected (see amdgpu_driver)")
    scope = scope_of(inventory)
    names = sorted({g.market_name or g.name for g in inventory.gpus})
    if scope.supported:
        return Check(
            "gpu_supported",
            "ok",
            f"{inventory.gpu_count} x {', '.join(names)} ({inventory.gfx_version})",
            details={"kind": scope.kind},
        )
    return Check(
        "gpu_supported",
        "error",
        scope.message,
        fix=scope.fix,
        details={"kind": scope.kind, "gpus": names},
    )


def check_numa_balancing(probe: Probe, options: CheckOptions) -> Check:
    path = probe.path("/proc/sys/kernel/numa_balancing")
    text = probe.read(path)
    value = text.strip() if text is not None else None
    if value is None or not value.lstrip("-").isdigit():
        return Check(
            "numa_balancing",
            "skip",
            "kernel.numa_balancing is not available (kernel without NUMA balancing)",
        )
    if value == "0":
        return Check(
            "numa_balancing", "ok", "NUMA auto-balancing is disabled", details={"value": 0}
        )
    return Check(
        "numa_balancing",
        "warn",
        f"NUMA auto-balancing is enabled (kernel.numa_balancing={value}); AMD recommends "
        "disabling it on Instinct hosts (it costs throughput and can stall the GPU)",
        fix="sudo sysctl -w kernel.numa_balancing=0 (until reboot; to keep it, add "
        "kernel.numa_balancing=0 to /etc/sysctl.d/99-amd-gpu.conf)",
        details={"value": int(value), "path": path},
    )


# --- Hugging Face --------------------------------------------------------------------------


def hf_places(env: TargetEnv) -> HfLocations | None:
    """Where huggingface_hub keeps its files on the host (``paths.hf_locations``); None when
    the host's HOME is unknown and no variable names a place."""
    places = hf_locations(env.values)
    return None if places.home.startswith("~") and places.hub_cache.startswith("~") else places


def hf_hub_cache(env: TargetEnv, override: str | None = None) -> str | None:
    """The hub cache directory (where model weights land) on the host."""
    if override:
        return expand_path(override, env.values)
    places = hf_places(env)
    return places.hub_cache if places and not places.hub_cache.startswith("~") else None


def hf_token_path(env: TargetEnv) -> str | None:
    """Where ``hf auth login`` stores the token on the host."""
    places = hf_places(env)
    return places.token_file if places and not places.token_file.startswith("~") else None


def check_hf_token(probe: Probe, options: CheckOptions) -> Check:
    env = probe.env()
    gated = options.model_gated
    details: dict[str, object] = {"model": options.model, "model_gated": gated}
    present = sorted(env.secrets_present)
    if present:
        return Check(
            "hf_token",
            "ok",
            f"{present[0]} is set on {_where(probe)} (value not shown)",
            details={**details, "source": present[0]},
        )
    token_file = hf_token_path(env)
    if token_file:
        found = probe.run(["sh", "-c", '[ -r "$1" ] && [ -s "$1" ]', "sh", token_file])
        if found.ok:
            return Check(
                "hf_token",
                "ok",
                f"a Hugging Face token is stored in {token_file} (value not shown)",
                details={**details, "source": token_file},
            )
    if probe.host.is_local:
        where = "in your shell profile (or run `hf auth login`)"
    else:
        where = (
            f"in the login environment of {probe.host.name} (its ~/.bashrc, above any early "
            "return for non-interactive shells), or run `hf auth login` there"
        )
    fix = f"create a read token at {TOKEN_URL} and `export HF_TOKEN=...` {where}"
    model = options.model or "the model"
    # an MCP caller cannot export a variable: the server's own environment is what counts
    agent_fix = AGENT_TOKEN if probe.host.is_local else None
    if gated:
        return Check(
            "hf_token",
            "error",
            f"{model} is gated on the Hugging Face Hub and no token is set "
            f"(HF_TOKEN, HUGGING_FACE_HUB_TOKEN or {token_file})",
            fix=fix + "; accept the model's license on its Hub page too",
            details={**details, "source": None},
            agent_fix=agent_fix
            and f"{agent_fix}; the user accepts the model's license on its Hub page too",
        )
    if gated is False:
        return Check(
            "hf_token",
            "ok",
            f"no Hugging Face token, and {model} does not need one",
            details={**details, "source": None},
        )
    return Check(
        "hf_token",
        "warn",
        "no Hugging Face token (HF_TOKEN): gated models (Llama, Gemma, ...) cannot be "
        "downloaded, and anonymous downloads are rate-limited",
        fix=fix,
        details={**details, "source": None},
        agent_fix=agent_fix,
    )


def _cache_facts(probe: Probe, options: CheckOptions) -> tuple[str | None, DiskFacts | None]:
    path = hf_hub_cache(probe.env(), options.hf_cache)
    return path, probe.disk(path) if path else None


def check_hf_cache_dir(probe: Probe, options: CheckOptions) -> Check:
    path, facts = _cache_facts(probe, options)
    if path is None:
        return Check("hf_cache_dir", "skip", "HOME is not set: pass --hf-cache DIR")
    if facts is None:
        return Check("hf_cache_dir", "skip", f"could not inspect {path}")
    user = probe.env().user or "this user"
    details: dict[str, object] = {"path": path, "existing_parent": facts.existing}
    if facts.exists and not facts.is_dir:
        return Check(
            "hf_cache_dir",
            "error",
            f"the Hugging Face cache {path} exists but is not a directory",
            fix="move the file away or choose another directory with --hf-cache",
            details=details,
        )
    if facts.exists and not facts.writable:
        return Check(
            "hf_cache_dir",
            "error",
            f"the Hugging Face cache {path} is not writable by {user} "
            "(often: Docker created it as root)",
            fix=f"sudo chown -R {_user(probe.env())} {shlex.quote(path)}",
            details=details,
        )
    if facts.exists:
        return Check("hf_cache_dir", "ok", f"Hugging Face cache: {path}", details=details)
    if not facts.is_dir or not facts.writable:
        return Check(
            "hf_cache_dir",
            "error",
            f"the Hugging Face cache {path} does not exist and {user} cannot create it "
            f"({facts.existing} is not a writable directory)",
            fix=f"sudo mkdir -p {shlex.quote(path)} && sudo chown {_user(probe.env())} "
            f"{shlex.quote(path)}, or choose another directory with --hf-cache",
            details={**details, "missing": True, "creatable": False},
        )
    return Check(
        "hf_cache_dir",
        "warn",
        f"the Hugging Face cache {path} does not exist yet (if Docker creates it for a "
        "bind mount, it will be owned by root)",
        fix=f"mkdir -p {shlex.quote(path)}",
        details={**details, "missing": True, "creatable": True},
    )


def check_hf_cache_disk(probe: Probe, options: CheckOptions) -> Check:
    path, facts = _cache_facts(probe, options)
    if path is None:
        return Check("hf_cache_disk", "skip", "HOME is not set: pass --hf-cache DIR")
    if facts is None or facts.free_bytes is None:
        return Check("hf_cache_disk", "skip", f"could not read the free space for {path}")
    free_gb = round(facts.free_bytes / GB, 1)
    details: dict[str, object] = {
        "path": path,
        "checked_path": facts.existing,
        "mount": facts.mount,
        "free_gb": free_gb,
        "total_gb": round(facts.total_bytes / GB, 1) if facts.total_bytes else None,
        "need_gb": options.need_gb,
        "min_free_gb": options.min_free_gb,
    }
    where = f"{free_gb} GB free on {facts.mount} (holds {path})"
    fix = (
        "free space there (`hf cache rm`, `hf cache prune`, `docker system prune`) "
        "or point --hf-cache / HF_HUB_CACHE at a larger disk"
    )
    if options.need_gb is not None:
        if facts.free_bytes < options.need_gb * GB:
            return Check(
                "hf_cache_disk",
                "error",
                f"{where}: the model needs {options.need_gb:g} GB",
                fix=fix,
                details=details,
            )
        return Check("hf_cache_disk", "ok", where, details=details)
    if facts.free_bytes < options.min_free_gb * GB:
        return Check(
            "hf_cache_disk",
            "warn",
            f"only {where}; large models need {options.min_free_gb:g} GB or more",
            fix=fix,
            details=details,
        )
    return Check("hf_cache_disk", "ok", where, details=details)


# --- network -------------------------------------------------------------------------------


def check_port_free(probe: Probe, options: CheckOptions) -> Check:
    port = options.port
    if port is None:
        return Check("port_free", "skip", "no --port given")
    listening = probe.listening_ports()
    if listening is None:
        return Check(
            "port_free",
            "skip",
            f"could not list listening TCP ports on {_where(probe)} (no /proc/net/tcp, no ss)",
            details={"port": port},
        )
    ports, source = listening
    if port in ports:
        return Check(
            "port_free",
            "error",
            f"port {port} is already in use on {_where(probe)}",
            fix=f"choose another --port, or stop what listens there "
            f"(`ss -tlnp 'sport = :{port}'`; `instinct ps` lists this tool's endpoints)",
            details={"port": port, "source": source},
        )
    return Check(
        "port_free",
        "ok",
        f"port {port} is free",
        details={"port": port, "source": source},
    )


# The order of the report, and the stable ids.
CHECKS: dict[str, CheckFn] = {
    "docker_installed": check_docker_installed,
    "docker_daemon": check_docker_daemon,
    "amdgpu_driver": check_amdgpu_driver,
    "dev_kfd": check_dev_kfd,
    "dev_dri": check_dev_dri,
    "visible_devices_empty": check_visible_devices,
    "gpu_supported": check_gpu_supported,
    "rocm_version": check_rocm_version,
    "numa_balancing": check_numa_balancing,
    "hf_token": check_hf_token,
    "hf_cache_dir": check_hf_cache_dir,
    "hf_cache_disk": check_hf_cache_disk,
    "port_free": check_port_free,
}
