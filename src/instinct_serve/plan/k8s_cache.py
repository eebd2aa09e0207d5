"""The cache volume's part of a Kubernetes pod: where each cache is mounted, and the init
containers that get it ready before vLLM starts (``plan.kubernetes`` renders the rest).

One volume (``<name>-cache``) holds the Hugging Face cache under ``huggingface/`` and the
compile caches of ``plan.caches.COMPILE_CACHES`` (the one table every rendering uses) under
``compile/<cache key>/<name>``, each variable pointing at its mount. Two init containers,
both from the plan's own image:

* ``wait-compile-cache``, where several copies mount the volume (``fills_in_turn``): on a
  cold key every pod would compile the same kernels into one directory at once, minutes of
  Triton and torch.compile each. ``FILL_SCRIPT`` lets the first pod fill the key and holds
  the others until it has served (its readiness probe writes ``FILLED_MARKER``, see
  ``ready_command``), as a replica group on docker starts its first replica alone. A
  multi-node copy is one owner: its ranks start together (the leader is ready only once
  every rank joined), so a group, not a pod, holds the turn. Bounded by the filler's own
  start budget: past it the lock is stale and a waiter fills instead, or starts cold.
* ``seed-aiter-jit``: AITER's directory seeded from the image once per key
  (``SEED_SCRIPT``): AITER imports its modules only from AITER_JIT_DIR once it is set
  (aiter/jit/core.py), so an empty mount would hide the image's prebuilt ones and rebuild
  them all on the first start. It runs after the wait, so only the filler copies them.
"""

from __future__ import annotations

from typing import Any

from instinct_serve.options import KubernetesOptions
from instinct_serve.plan.caches import BY_NAME, FILL_SCRIPT, FILLED_MARKER, SEED_SCRIPT
from instinct_serve.plan.model import (
    CONTAINER_HF_CACHE,
    WARMUP_TIMEOUT_S,
    LaunchPlan,
    startup_budget_s,
)

HF_SUBPATH = "huggingface"
FILL_CONTAINER = "wait-compile-cache"
FILL_MOUNT = "/compile"  # the key's directory, in the waiting init container
FILL_POLL_S = 10
FILL_OWNER_ENV = "INSTINCT_FILL_OWNER"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"  # set on every pod of a group

# Appended to the readiness probe's script where the pods fill in turn: once this pod has
# served (the warm-up completion came back, or its models are listed), the paths after the
# probe's own three arguments (``ready_command``) are written: the marker the waiting pods
# look for.
READY_FILLED_TAIL = """\
for path in sys.argv[4:]:  # this pod has served from the compile cache: it is filled
    if not os.path.exists(path):
        open(path, "w").close()
"""


def compile_subpath(plan: LaunchPlan) -> str:
    """The key's directory in the cache volume (``plan.cache`` is set)."""
    assert plan.cache is not None
    return f"compile/{plan.cache.key}"


def cache_mounts(plan: LaunchPlan) -> list[tuple[str, str, tuple[str, ...]]]:
    """(subPath in the cache volume, mount path, variables) of every cache the pod mounts."""
    out: list[tuple[str, str, tuple[str, ...]]] = [(HF_SUBPATH, CONTAINER_HF_CACHE, ())]
    if plan.cache is not None:
        for cache in plan.cache.dirs:
            out.append(
                (f"{compile_subpath(plan)}/{cache.name}", cache.container_path, cache.variables)
            )
    return out


def fills_in_turn(plan: LaunchPlan, opts: KubernetesOptions) -> bool:
    """Whether the copies take turns on a cold compile cache: several copies on one volume
    (replicas, or the autoscaler adding some) and a cache that a start compiles into."""
    several = opts.replicas > 1 or opts.autoscale
    return several and plan.cache is not None and bool(plan.cache.warm_names)


def fill_wait_s(plan: LaunchPlan) -> int:
    """The most a pod waits for the filler: the filler's own start and warm-up budget
    (the Deployment's progress deadline); a fill lock as old is stale."""
    return startup_budget_s(plan) + WARMUP_TIMEOUT_S


def _filled_marker(plan: LaunchPlan) -> tuple[str, str]:
    """The marker's path in the key's directory, and in the vLLM container."""
    assert plan.cache is not None
    first = plan.cache.warm_names[0]
    return f"{first}/{FILLED_MARKER}", f"{BY_NAME[first].container_path}/{FILLED_MARKER}"


def ready_command(plan: LaunchPlan, opts: KubernetesOptions, script: str, *args: str) -> list[str]:
    """The readiness probe: ``script`` under python3 with ``args``, and where the pods fill
    in turn the tail that writes the marker, its path the last argument."""
    if not fills_in_turn(plan, opts):
        return ["python3", "-c", script, *args]
    return ["python3", "-c", script + READY_FILLED_TAIL, *args, _filled_marker(plan)[1]]


def init_containers(
    plan: LaunchPlan, opts: KubernetesOptions, role: str | None
) -> list[dict[str, Any]]:
    """The wait for the filler (where the pods fill in turn), then the AITER seed."""
    out = []
    if fills_in_turn(plan, opts):
        out.append(_fill_container(plan, role))
    seed = _seed_container(plan)
    if seed is not None:
        out.append(seed)
    return out


def _fill_container(plan: LaunchPlan, role: str | None) -> dict[str, Any]:
    """``FILL_SCRIPT`` under ``sh``, as its comment says; the owner is the pod's name, or
    the multi-node group's index (``role`` set: a LeaderWorkerSet pod)."""
    assert plan.cache is not None
    field = "metadata.name" if role is None else f"metadata.labels['{LWS_GROUP_LABEL}']"
    owner = f"$({FILL_OWNER_ENV})" if role is None else f"group-$({FILL_OWNER_ENV})"
    return {
        "name": FILL_CONTAINER,
        "image": plan.image,
        "command": [
            "sh",
            "-c",
            escape(FILL_SCRIPT),
            "sh",
            FILL_MOUNT,
            owner,
            str(fill_wait_s(plan)),
            str(FILL_POLL_S),
            _filled_marker(plan)[0],
            *plan.cache.warm_names,
        ],
        "env": [{"name": FILL_OWNER_ENV, "valueFrom": {"fieldRef": {"fieldPath": field}}}],
        "volumeMounts": [
            {"name": "cache", "mountPath": FILL_MOUNT, "subPath": compile_subpath(plan)}
        ],
    }


def _seed_container(plan: LaunchPlan) -> dict[str, Any] | None:
    """Copies the image's prebuilt AITER modules into the volume once per cache key (a
    marker file says it was done), before vLLM starts with AITER_JIT_DIR set."""
    if plan.cache is None or "aiter" not in plan.cache.names:
        return None
    return {
        "name": "seed-aiter-jit",
        "image": plan.image,
        "command": ["python3", "-c", escape(SEED_SCRIPT), "/seed"],
        "volumeMounts": [
            {"name": "cache", "mountPath": "/seed", "subPath": f"{compile_subpath(plan)}/aiter"}
        ],
    }


def escape(value: str) -> str:
    """Kubernetes expands ``$(VAR)`` in command, args and env values and turns ``$$`` into
    ``$``: doubling every ``$`` keeps the plan's text exactly as planned."""
    return value.replace("$", "$$")
