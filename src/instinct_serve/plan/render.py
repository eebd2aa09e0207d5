"""Renderers: one ``LaunchPlan`` as docker argv, a shell line, native ``vllm serve``, a compose
service or Kubernetes objects. Pure functions: the same plan always renders the same text.

The official ``vllm/vllm-openai-rocm`` image's entrypoint is ``vllm serve``
(docker/Dockerfile.rocm), so ``docker run ... IMAGE MODEL <engine args>`` is the container
command: the model is ``vllm serve``'s positional argument (``--model`` is deprecated
there). Secrets are referenced by name only in every format.

Safe to paste: the endpoint listens on ``127.0.0.1`` unless the plan is ``public``
(``-p 127.0.0.1:PORT:PORT``, ``vllm serve --host 127.0.0.1``, a ClusterIP Service); every
shell word is quoted (``shlex``), YAML is dumped without anchors and with the ``$``
escapes of compose and Kubernetes, so no name or value in a plan (a recipe can say
anything) is ever run or interpolated; and environment names are checked
(``[A-Za-z_][A-Za-z0-9_]*``) before anything is rendered.
"""

from __future__ import annotations

import functools
import shlex
from typing import Any

from instinct_serve import servers
from instinct_serve.options import KubernetesOptions
from instinct_serve.plan import caches, kubernetes
from instinct_serve.plan.kubernetes import k8s_objects as k8s_objects
from instinct_serve.plan.model import RESTART_POLICY as RESTART_POLICY
from instinct_serve.plan.model import LaunchPlan, startup_budget_s
from instinct_serve.plan.model import check_names as check_names
from instinct_serve.plan.model import container_args as container_args
from instinct_serve.plan.model import docker_argv as docker_argv
from instinct_serve.plan.model import publish_arg as publish_arg
from instinct_serve.plan.model import split_flag as split_flag

FORMATS = ("json", "docker", "argv", "shell", "native", "compose", "k8s")

# docker run's flags that take no value (every other ``-x``/``--xx`` without ``=`` is followed
# by its value): only the line layout of ``docker_script`` reads it
_BARE_FLAGS = frozenset({"-d", "--rm", "-i", "-t", "-it", "--init", "--privileged"})


def shell_line(plan: LaunchPlan) -> str:
    """One copy-pasteable line; ``shlex.split`` of it gives back ``docker_argv`` exactly."""
    return shlex.join(docker_argv(plan))


def continued(argv: list[str], image_at: int) -> str:
    """One ``docker run`` argv as one shell command over several lines (`` \\``
    continuations): ``docker run`` and its first flag, then a flag and its value a line,
    the image alone, and what follows it a flag a line. Every word is ``shlex.quote``d, so
    the shell reads back exactly ``argv``."""
    lines = [argv[:5], *_flag_lines(argv[5:image_at]), argv[image_at : image_at + 1]]
    lines += _flag_lines(argv[image_at + 1 :])
    return " \\\n  ".join(shlex.join(words) for words in lines if words)


def _flag_lines(tokens: list[str]) -> list[list[str]]:
    """A flag with its value on one line (``--name X``, ``-e K=V``); anything else alone."""
    lines: list[list[str]] = []
    for token in tokens:
        last = lines[-1] if lines else []
        flag = len(last) == 1 and last[0].startswith("-") and "=" not in last[0]
        if flag and last[0] not in _BARE_FLAGS and not token.startswith("-"):
            last.append(token)
        else:
            lines.append([token])
    return lines


def docker_script(plan: LaunchPlan) -> str:
    """The launch as a shell script to paste as it is (``plan --format docker`` and the
    summary's Command block): the AITER cache seeding first where the plan mounts one (a
    no-op once done: serve runs the same ``seed_argv``), then the ``docker run``; secrets
    are named, never carried (docker copies them from the caller's environment)."""
    argv = docker_argv(plan)
    out = []
    seed = caches.seed_argv(plan.cache, plan.image)
    if seed is not None:
        out.append(
            "# once per image and gfx: seed the AITER compile cache from the image (a no-op after)"
        )
        out.append(continued(seed, seed.index(plan.image)) + " &&")
    if plan.secret_env:
        out.append(
            f"# taken by name from your environment: {', '.join(plan.secret_env)} "
            "(export it first where the model needs it)"
        )
    out.append(continued(argv, len(argv) - len(container_args(plan)) - 1))
    return "\n".join(out) + "\n"


def native_argv(plan: LaunchPlan) -> list[str]:
    """The server's command for hosts without Docker, bound to the plan's address
    (``vllm serve MODEL --host ADDRESS ...``: ``servers.vllm``)."""
    return servers.of(plan).native_argv(plan)


def native_env(plan: LaunchPlan) -> dict[str, str]:
    """Environment for the native route: the plan's env, the GPU restriction, and the
    compile caches' variables pointing at their host directories (``plan.caches``)."""
    env = {**servers.of(plan).environment(plan), **plan.env}  # the server's own (vLLM: none)
    if plan.gpu_indices is not None and "HIP_VISIBLE_DEVICES" not in env:
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in plan.gpu_indices)
    env.update(caches.host_env(plan.cache, env))
    return env


def native_script(plan: LaunchPlan) -> str:
    """``export`` lines and the ``vllm serve`` line, ready to paste into a shell.

    Every value is one shell word (``shlex.quote``) and every name a checked variable
    name, so running the script runs ``vllm serve`` and nothing else."""
    check_names(plan)
    lines = [f"export {k}={shlex.quote(v)}" for k, v in native_env(plan).items()]
    for name in plan.secret_env:
        lines.append(f"# {name}: taken from your environment (export {name}=... beforehand)")
    key = plan.api_key_env
    if key:
        lines.append(f': "${{{key}:?export {key} first: the endpoint requires this key}}"')
    lines.append(shlex.join(native_argv(plan)))
    return "\n".join(lines) + "\n"


def secret_notes(plan: LaunchPlan, fmt: str) -> list[str]:
    """How to provide the variables the rendering names but does not carry (the plan's
    ``secret_env``: HF_TOKEN, every ``--env``); a value given with ``--env NAME=VALUE`` is
    in no rendering. The CLI prints them beside the text (stderr); compose's are in it."""
    names = [n for n in plan.secret_env if n != "HF_TOKEN"]
    if fmt in ("k8s", "native", "json") or not names:
        return []  # the Kubernetes header and the native script say it themselves
    where = {
        "compose": "docker compose takes each from its own environment (or an .env file "
        "beside the compose file)",
    }.get(fmt, "docker run --env NAME copies each from its own environment")
    return [
        f"passed by name, not in this output: {', '.join(names)}; {where}: export "
        f"{names[0]}=... before running it (HF_TOKEN too, for a gated model)"
    ]


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
    check_names(plan)
    mapped, leftover = _compose_from_flags(plan.docker_flags)
    service.update(mapped)
    service["ports"] = [publish_arg(plan)]
    volumes = [m.docker_arg() for m in plan.mounts]
    volumes += [f"{host}:{container}" for host, container in caches.mounts(plan.cache)]
    if volumes:
        service["volumes"] = volumes
    env = {**plan.env, **caches.container_env(plan.cache, plan.env)}
    service["environment"] = [f"{k}={v}" for k, v in env.items()] + list(plan.secret_env)
    from instinct_serve.observe.scrape import compose_labels

    # the endpoint's own labels, and the ones a docker_sd Prometheus job discovers
    service["labels"] = {**plan.labels, **compose_labels(plan.port)}
    service["healthcheck"] = {
        "test": [
            "CMD",
            "python3",
            "-c",
            "import urllib.request; "
            f"urllib.request.urlopen('http://localhost:{plan.port}"
            f"{servers.of(plan).routes.health}', timeout=5)",
        ],
        "interval": "10s",
        "timeout": "6s",
        "retries": 3,
        "start_period": f"{startup_budget_s(plan)}s",
    }
    service["restart"] = RESTART_POLICY
    services = {plan.container_name: service}
    seed = caches.seed_argv(plan.cache, plan.image)
    if seed is not None and plan.cache is not None:
        # the compose form of serve's seeding (and of the init container in Kubernetes):
        # vLLM starts only once the image's AITER modules are in the mounted directory
        seeder = f"{plan.container_name}-seed-aiter"
        services[seeder] = {
            "image": plan.image,
            "entrypoint": ["python3"],
            "command": seed[seed.index(plan.image) + 1 :],
            "volumes": [f"{plan.cache.host_path('aiter')}:/seed"],
            "restart": "no",
        }
        service["depends_on"] = {seeder: {"condition": "service_completed_successfully"}}
    doc: dict[str, Any] = {"services": _compose_escape(services)}
    if leftover:
        doc["x-instinct-serve-unmapped-flags"] = _compose_escape(leftover)
    return doc


def _compose_escape(value: Any) -> Any:
    """Compose interpolates ``$NAME``/``${NAME}`` in every string of the file: ``$$`` is a
    literal ``$``, so a value from the plan stays exactly what it was."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {k: _compose_escape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compose_escape(v) for v in value]
    return value


@functools.cache
def _dumper() -> type[Any]:
    """Safe YAML without anchors: objects that share a dict would otherwise come out as
    ``&id001`` / ``*id001``, which kubectl reads but people (and many tools) do not; and
    multi-line text (the readiness probe's script) as a ``|`` block, readable in review.
    Built on first use: PyYAML costs ~15 ms to import, which ``plan --json`` never needs."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper


def to_yaml(docs: list[dict[str, Any]] | dict[str, Any]) -> str:
    """One YAML document, or a ``---``-separated stream of them; keys in insertion order."""
    import yaml

    if isinstance(docs, dict):
        return yaml.dump(docs, Dumper=_dumper(), sort_keys=False, width=1000)
    return yaml.dump_all(docs, Dumper=_dumper(), sort_keys=False, width=1000)


def render(plan: LaunchPlan, fmt: str, k8s: KubernetesOptions | None = None) -> str:
    """The plan in one of ``FORMATS`` (``json`` is handled by the CLI's JSON emitter);
    ``k8s`` shapes the Kubernetes manifests (replicas, nodes, autoscaling). A plan of
    replicas behind a router (``plan.replicas``) renders as shell lines (docker, shell)."""
    if plan.group is not None and plan.group.mode == "replicas":
        return _group(plan, fmt)
    if fmt == "docker":
        return docker_script(plan)
    if fmt == "argv":  # one argument a line: for tools that read it, not a shell
        return "\n".join(docker_argv(plan)) + "\n"
    if fmt == "shell":
        seed = caches.seed_argv(plan.cache, plan.image)
        # seed the AITER cache from the image first (once per key: a no-op after that)
        first = f"{shlex.join(seed)} &&\n" if seed is not None else ""
        return first + shell_line(plan) + "\n"
    if fmt == "native":
        return native_script(plan)
    if fmt == "compose":
        notes = "".join(f"# {note}\n" for note in secret_notes(plan, fmt))
        return notes + to_yaml(compose_service(plan))
    if fmt == "k8s":
        return kubernetes.header(plan, k8s) + to_yaml(k8s_objects(plan, k8s))
    if fmt == "json":
        from instinct_serve.jsonio import dumps

        return dumps(plan) + "\n"
    raise ValueError(f"unknown format {fmt!r}")


def _group(plan: LaunchPlan, fmt: str) -> str:
    """Replicas behind a router: each replica's ``docker run``, the router's configuration
    and its ``docker run`` (``plan.replicas.group_script``)."""
    from instinct_serve.errors import UsageError
    from instinct_serve.plan.replicas import group_script

    if fmt in ("docker", "shell"):
        return group_script(plan, lambda member: docker_argv(member, restart=None))
    if fmt == "json":
        from instinct_serve.jsonio import dumps

        return dumps(plan) + "\n"
    count = plan.group.count if plan.group else 0
    raise UsageError(
        f"--format {fmt} renders one endpoint, and this plan is {count} replicas behind a router",
        fix="use --format shell (every replica's docker run and the router's), or plan one "
        "endpoint (--replicas 1)",
        id="bad_format",
        details={"format": fmt},
    )
