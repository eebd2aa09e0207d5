"""Renderers: one ``LaunchPlan`` as docker argv, a shell line, native ``vllm serve``, a compose
service or Kubernetes objects. Pure functions: the same plan always renders the same text.

The official ``vllm/vllm-openai-rocm`` image's entrypoint is ``vllm serve``
(docker/Dockerfile.rocm), so ``docker run ... IMAGE MODEL <engine args>`` is the container
command: the model is ``vllm serve``'s positional argument (``--model`` is deprecated
there). Secrets are referenced by name only in every format.
"""

from __future__ import annotations

import shlex
from typing import Any

from instinct_serve import vllm_args
from instinct_serve.plan.model import CONTAINER_HF_CACHE, LaunchPlan

FORMATS = ("json", "docker", "shell", "native", "compose", "k8s")

# Startup budget in Kubernetes: model loading, weight download and graph capture can take a
# long time on first start; liveness must not kill a pod that is still loading.
K8S_STARTUP_PERIOD_S = 10


def container_args(plan: LaunchPlan) -> list[str]:
    """What follows the image name: ``vllm serve``'s positional model, then its arguments."""
    return [plan.model, *plan.vllm_args]


def docker_argv(plan: LaunchPlan) -> list[str]:
    """The full ``docker run -d`` argv (labels, AMD flags, port, mounts, env, image, args)."""
    argv = ["docker", "run", "-d", "--name", plan.container_name]
    for key, value in plan.labels.items():
        argv += ["--label", f"{key}={value}"]
    for flag in plan.docker_flags:
        argv += split_flag(flag)
    argv += ["-p", f"{plan.port}:{plan.port}"]
    for mount in plan.mounts:
        argv += ["-v", mount.docker_arg()]
    for key, value in plan.env.items():
        argv += ["-e", f"{key}={value}"]
    for name in plan.secret_env:
        argv += ["--env", name]  # by name: docker copies the value from its own environment
    argv.append(plan.image)
    argv += container_args(plan)
    return argv


def split_flag(flag: str) -> list[str]:
    """``"--security-opt seccomp=unconfined"`` → two argv tokens; ``--ipc=host`` stays one."""
    return flag.split(" ", 1) if " " in flag.strip() else [flag.strip()]


def shell_line(plan: LaunchPlan) -> str:
    """One copy-pasteable line; ``shlex.split`` of it gives back ``docker_argv`` exactly."""
    return shlex.join(docker_argv(plan))


# Where a native vLLM listens unless the plan's arguments say otherwise. vLLM's default is
# every interface (0.0.0.0): an unauthenticated endpoint open to the network. Clients on
# the host reach 127.0.0.1, and serve/ps reach a remote host through an ssh tunnel to its
# 127.0.0.1, so nothing of ours needs more; `-- --host 0.0.0.0` opens it deliberately.
# (The docker route publishes the container's port instead: docker_argv.)
NATIVE_BIND = "127.0.0.1"


def native_argv(plan: LaunchPlan) -> list[str]:
    """``vllm serve MODEL ...`` for hosts without Docker, as ``serve --engine native``
    launches it: bound to ``NATIVE_BIND`` unless the arguments name a ``--host``."""
    bind = [] if vllm_args.has(plan.vllm_args, "--host") else ["--host", NATIVE_BIND]
    return ["vllm", "serve", plan.model, *bind, *plan.vllm_args]


def native_env(plan: LaunchPlan) -> dict[str, str]:
    """Environment for the native route: the plan's env plus the GPU restriction."""
    env = dict(plan.env)
    if plan.gpu_indices is not None and "HIP_VISIBLE_DEVICES" not in env:
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in plan.gpu_indices)
    return env


def native_script(plan: LaunchPlan) -> str:
    """``export`` lines and the ``vllm serve`` line, ready to paste into a shell."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in native_env(plan).items()]
    for name in plan.secret_env:
        lines.append(f"# {name}: taken from your environment (export {name}=... beforehand)")
    lines.append(shlex.join(native_argv(plan)))
    return "\n".join(lines) + "\n"


def _compose_from_flags(flags: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Map docker run flags to compose service keys; return the keys and any flag left over."""
    service: dict[str, Any] = {}
    leftover: list[str] = []
    for flag in flags:
        tokens = split_flag(flag)
        if len(tokens) == 2:
            name, value = tokens
        elif "=" in tokens[0]:
            name, value = tokens[0].split("=", 1)
        else:
            name, value = tokens[0], ""
        if name == "--group-add":
            service.setdefault("group_add", []).append(value)
        elif name == "--cap-add":
            service.setdefault("cap_add", []).append(value)
        elif name == "--security-opt":
            service.setdefault("security_opt", []).append(value)
        elif name == "--device":
            service.setdefault("devices", []).append(value)
        elif name == "--ipc":
            service["ipc"] = value
        elif name == "--shm-size":
            service["shm_size"] = value
        elif name == "--network":
            service["network_mode"] = value
        else:
            leftover.append(flag)
    return service, leftover


def compose_service(plan: LaunchPlan) -> dict[str, Any]:
    """A docker-compose document with one service equivalent to ``docker_argv``."""
    service: dict[str, Any] = {
        "image": plan.image,
        "container_name": plan.container_name,
        "command": container_args(plan),
    }
    mapped, leftover = _compose_from_flags(plan.docker_flags)
    service.update(mapped)
    service["ports"] = [f"{plan.port}:{plan.port}"]
    if plan.mounts:
        service["volumes"] = [m.docker_arg() for m in plan.mounts]
    service["environment"] = [f"{k}={v}" for k, v in plan.env.items()] + list(plan.secret_env)
    service["labels"] = dict(plan.labels)
    service["healthcheck"] = {
        "test": [
            "CMD",
            "python3",
            "-c",
            "import urllib.request; "
            f"urllib.request.urlopen('http://localhost:{plan.port}/health', timeout=5)",
        ],
        "interval": "10s",
        "timeout": "6s",
        "retries": 3,
        "start_period": f"{startup_budget_s(plan)}s",
    }
    service["restart"] = "unless-stopped"
    doc: dict[str, Any] = {"services": {plan.container_name: service}}
    if leftover:
        doc["x-instinct-serve-unmapped-flags"] = leftover
    return doc


def startup_budget_s(plan: LaunchPlan) -> int:
    """Seconds a fresh start may take: download + load scale with the weight size."""
    weights_gb = plan.weight_memory_gb or 20.0
    # ~30 s per 10 GB to load, plus downloads at a modest 100 MB/s, plus graph capture.
    return int(600 + weights_gb * 3 + weights_gb * 10)


def k8s_objects(plan: LaunchPlan, namespace: str | None = None) -> list[dict[str, Any]]:
    """Deployment + Service (+ a PVC for the HF cache) for the AMD GPU device plugin."""
    name = plan.container_name
    app_labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "instinct-serve"}
    meta: dict[str, Any] = {"name": name, "labels": dict(app_labels)}
    if namespace:
        meta["namespace"] = namespace
    env: list[dict[str, Any]] = [
        {"name": k, "value": v}
        for k, v in plan.env.items()
        if k not in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
    ]
    for secret in plan.secret_env:
        env.append(
            {
                "name": secret,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": secret.lower().replace("_", "-"),
                        "key": "token",
                        "optional": True,
                    }
                },
            }
        )
    gpus = str(plan.tensor_parallel_size)
    probe = {"httpGet": {"path": "/health", "port": "http"}}
    startup_failures = max(1, startup_budget_s(plan) // K8S_STARTUP_PERIOD_S)
    pvc_size_gi = max(50, int((plan.weight_memory_gb or 20.0) * 2 / 1.073741824) + 10)
    container: dict[str, Any] = {
        "name": "vllm",
        "image": plan.image,
        "args": container_args(plan),
        "ports": [{"name": "http", "containerPort": plan.port, "protocol": "TCP"}],
        "env": env,
        "resources": {"limits": {"amd.com/gpu": gpus}, "requests": {"amd.com/gpu": gpus}},
        "volumeMounts": [
            {"name": "hf-cache", "mountPath": CONTAINER_HF_CACHE},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "startupProbe": {
            **probe,
            "periodSeconds": K8S_STARTUP_PERIOD_S,
            "failureThreshold": startup_failures,
        },
        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**probe, "periodSeconds": 15, "failureThreshold": 4, "timeoutSeconds": 5},
        "securityContext": {
            "capabilities": {"add": ["SYS_PTRACE"]},
            "seccompProfile": {"type": "Unconfined"},
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # GPUs are exclusive: never run two at once
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": dict(app_labels)},
                "spec": {
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "hf-cache",
                            "persistentVolumeClaim": {"claimName": f"{name}-hf-cache"},
                        },
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": dict(meta),
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/name": name},
            "ports": [{"name": "http", "port": plan.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {**meta, "name": f"{name}-hf-cache"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": f"{pvc_size_gi}Gi"}},
        },
    }
    return [pvc, deployment, service]


def to_yaml(docs: list[dict[str, Any]] | dict[str, Any]) -> str:
    import yaml

    if isinstance(docs, dict):
        return yaml.safe_dump(docs, sort_keys=False, width=1000)
    return yaml.safe_dump_all(docs, sort_keys=False, width=1000)


def render(plan: LaunchPlan, fmt: str) -> str:
    """The plan in one of ``FORMATS`` (``json`` is handled by the CLI's JSON emitter)."""
    if fmt == "docker":
        return "\n".join(docker_argv(plan)) + "\n"
    if fmt == "shell":
        return shell_line(plan) + "\n"
    if fmt == "native":
        return native_script(plan)
    if fmt == "compose":
        return to_yaml(compose_service(plan))
    if fmt == "k8s":
        return to_yaml(k8s_objects(plan))
    if fmt == "json":
        from instinct_serve.jsonio import dumps

        return dumps(plan) + "\n"
    raise ValueError(f"unknown format {fmt!r}")
