"""Kubernetes manifests for one ``LaunchPlan``: what a cluster admin applies as it is.

Pure: the same plan and ``KubernetesOptions`` always give the same objects (plain dicts, in
``kubectl apply`` order). Two shapes:

* one node per copy: PVC, Deployment, Service, PodDisruptionBudget (+ a KEDA ScaledObject
  with ``autoscale``);
* one copy across ``nodes`` nodes: the same with a LeaderWorkerSet
  (``leaderworkerset.x-k8s.io/v1``) instead of the Deployment. The leader runs vLLM's node
  rank 0 and the API; each worker runs ``--headless`` with its rank from the LWS index.
  vLLM's mp backend joins them: ``--nnodes/--node-rank/--master-addr`` are
  ``ParallelConfig`` fields (vllm/config/parallel.py) and ``--headless`` the ``serve``
  flag, as vLLM's docs/serving/parallelism_scaling.md runs two nodes.

Every choice an admin would ask about is here once, with its reason:

* Probes. ``startupProbe`` on ``/health`` with a budget scaled to the weights (download,
  load, graph capture), so nothing kills a pod that is still loading. ``readinessProbe``
  means *warmed up*: the served name is listed by ``/v1/models`` and, once per container, a
  one-token completion came back (the first request compiles kernels; clients must not pay
  for it). Later checks only list the models: a completion queued behind a full batch would
  mark a busy pod unready and shed the traffic it is serving. ``livenessProbe`` is the
  cheap ``/health``. The API key, if the ``vllm-api-key`` Secret exists, reaches vLLM and
  the probe as ``VLLM_API_KEY`` inside the container, never on a command line.
* Placement. ``amd.com/gpu`` requests and limits equal to the GPUs per pod (the AMD device
  plugin), and a required node affinity on the AMD node labeller's VRAM label (see
  ``VRAM_LABELS``), so a plan sized for a 192 GB MI300X never lands on a 64 GB MI210.
* Caches. One volume (``<name>-cache``) holds the Hugging Face cache and the compile caches
  (``plan.k8s_cache``), so a restart neither downloads nor recompiles. ReadWriteOnce for a
  single pod; ReadWriteMany once several pods mount it (replicas, autoscaling, nodes). On a
  cold compile cache the first copy fills it and the others wait for it (``fills_in_turn``).
* Disruption and rollout: see ``pod_disruption_budget`` and ``deployment``.
* Secrets only by name: ``secretKeyRef`` per ``SECRET_REFS`` (every other variable the
  plan passes by name, ``--env NAME[=VALUE]``, from a Secret of its own), optional (a public model
  needs no token; no API key Secret means no authentication) except the API key of a
  ``--public`` plan, which the pod cannot start without.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from instinct_serve import __version__, servers, vllm_args
from instinct_serve.errors import UsageError
from instinct_serve.hardware.profiles import PROFILES
from instinct_serve.options import KubernetesOptions
from instinct_serve.plan.k8s_cache import (
    FILL_CONTAINER,
    cache_mounts,
    fill_wait_s,
    fills_in_turn,
    init_containers,
    ready_command,
)
from instinct_serve.plan.k8s_cache import escape as _escape
from instinct_serve.plan.model import (
    API_KEY_ENV,
    WARMUP_TIMEOUT_S,
    LaunchPlan,
    check_names,
    container_args,
    startup_budget_s,
)

GPU_RESOURCE = "amd.com/gpu"  # the AMD GPU device plugin's resource
# The AMD node labeller (ROCm/k8s-device-plugin cmd/k8s-node-labeller/main.go, createLabels;
# deployed by the AMD GPU Operator) writes ``amd.com/gpu.vram=192G`` when all GPUs of a node
# are alike, and the same under the legacy ``beta.amd.com/`` prefix; the value is the KFD
# memory bank size in GiB, rounded, plus "G" (an MI300X node: ``amd.com/gpu.vram=192G``,
# ``amd.com/gpu.product-name=AMD_Instinct_MI300X_OAM``, ``amd.com/gpu.family=AI`` in the
# plugin's docs/user-guide/installation.md). VRAM is the label that tells apart the GPUs a
# plan is sized for; the family (AI for every CDNA part) does not, and product names vary
# by board and virtualization (``_OAM``, ``_VF``).
VRAM_LABELS = ("amd.com/gpu.vram", "beta.amd.com/gpu.vram")

LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" is the leader

NAME_LABEL = "app.kubernetes.io/name"
MANAGED_BY = {"app.kubernetes.io/managed-by": "instinct-serve"}
MAX_NAME = 45  # room for LWS pod names (<name>-<group>-<worker>) and controller hashes

# Environment variable -> (Secret name, key): ``kubectl create secret generic hf-token
# --from-literal=token=...``. The API key is read from the container's environment by vLLM
# (``--api-key`` defaults to VLLM_API_KEY) and by the readiness probe.
SECRET_REFS: dict[str, tuple[str, str]] = {
    "HF_TOKEN": ("hf-token", "token"),
    API_KEY_ENV: ("vllm-api-key", "api-key"),
}

COMPILE_CACHE_GIB = 20

# Host resources requested per GPU. Requests only: a memory limit OOM-kills a pod when
# weight loading spikes the page cache, a CPU limit throttles the scheduler loop.
CPU_PER_GPU = 4
MEMORY_GIB_PER_GPU = 16

HTTP_PROBE_TIMEOUT_S = 5
STARTUP_PERIOD_S = 10
READY_PERIOD_S = 10
GRACE_S = 120  # in-flight requests finish after SIGTERM
DRAIN_S = 10  # preStop: endpoints drop the pod before vLLM stops accepting

# Autoscaling: vLLM queues a request only when the running batch is full (max-num-seqs or
# KV cache), so a few waiting requests per copy, sustained, means the copies are saturated.
QUEUE_METRIC = "vllm:num_requests_waiting"
QUEUE_TARGET = 5
SCALE_STEP_S = 300  # one copy at a time: a new one takes minutes before it serves

# The readiness probe, run in the container by python3 (the vLLM images have it). argv:
# port, served model name, "generate" or "list" (pooling models have no completions).
READY_SCRIPT = f"""\
import json, os, sys, urllib.request
port, model, mode = sys.argv[1:4]
headers = {{"Content-Type": "application/json"}}
if os.environ.get("{API_KEY_ENV}"):
    headers["Authorization"] = "Bearer " + os.environ["{API_KEY_ENV}"]
def call(path, body=None, timeout=10):
    req = urllib.request.Request("http://127.0.0.1:" + port + path, body, headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.load(resp)
served = [m["id"] for m in call("/v1/models")["data"]]
if model not in served:
    sys.exit("not served yet: " + model)
marker = "/tmp/instinct-serve-warm"
if mode == "generate" and not os.path.exists(marker):
    prompt = {{"model": model, "prompt": "Hello", "max_tokens": 1}}
    call("/v1/completions", json.dumps(prompt).encode(), {WARMUP_TIMEOUT_S})
    open(marker, "w").close()
"""
# vLLM runners and tasks that serve no completions.
_POOLING = {"pooling", "embed", "embedding", "classify", "score", "reward"}


def object_name(container_name: str) -> str:
    """The plan's container name as a Kubernetes name (RFC 1035 label, ``MAX_NAME`` long)."""
    name = re.sub(r"[^a-z0-9]+", "-", container_name.lower()).strip("-")
    if not name[:1].isalpha():
        name = f"vllm-{name}"
    return name[:MAX_NAME].rstrip("-")


def vram_label(vram_bytes: float) -> str:
    """The node labeller's value for this VRAM: GiB rounded half away from zero, plus G."""
    return f"{math.floor(vram_bytes / 2**30 + 0.5)}G"


def vram_label_values(plan: LaunchPlan) -> list[str]:
    """The ``amd.com/gpu.vram`` values the plan may run on: its GPU's, and those of the
    same gfx with at least as much memory (an MI300X plan runs on an MI325X). The profiles'
    VRAM is the KFD figure the labeller reads, except the MI300A's (its 96 GiB is HIP's
    allocation cap on shared memory): check that node's label before applying."""
    if not plan.vram_gb_per_gpu:
        return []
    need = plan.vram_gb_per_gpu * 1e9
    sizes = {vram_label(need): need}
    for profile in PROFILES.values():
        # 1 %: the plan's VRAM went through GB with two decimals
        vram = profile.vram_bytes  # None: a profile without a published figure (MI308X)
        if profile.gfx_version == plan.gfx_version and vram is not None and vram >= need * 0.99:
            sizes[vram_label(vram)] = vram
    return sorted(sizes, key=lambda label: sizes[label])


def gpus_per_pod(plan: LaunchPlan, options: KubernetesOptions) -> int:
    """GPUs each pod requests: the plan's TP x PP, over ``nodes`` pods for one copy."""
    pp = _size(plan, "--pipeline-parallel-size", "-pp")
    world = plan.tensor_parallel_size * pp
    nodes = options.nodes
    if nodes == 1:
        return world
    dp = _size(plan, "--data-parallel-size", "-dp")
    if dp > 1:
        raise UsageError(
            f"the plan runs data parallel ({dp} copies) and --nodes {nodes} asks for one "
            "copy across nodes",
            fix="use --replicas for more copies, or plan without data parallelism",
            id="bad_nodes",
            details={"option": "nodes"},
        )
    if world % nodes:
        raise UsageError(
            f"the plan uses {world} GPU(s) (TP {plan.tensor_parallel_size} x PP {pp}): "
            f"they do not split evenly over {nodes} nodes",
            fix="plan TP x PP as a multiple of the nodes (--gpu-count as the GPUs of all "
            "nodes together, or --tp), or --nodes 1 for a model that fits one node "
            "(--replicas for more copies)",
            id="bad_nodes",
            details={"option": "nodes"},
        )
    per_node = world // nodes
    if options.gpus_per_node is not None and options.gpus_per_node != per_node:
        raise UsageError(
            f"{world} GPU(s) over {nodes} nodes is {per_node} per node, not "
            f"{options.gpus_per_node}",
            fix="plan TP x PP = nodes x GPUs per node",
            id="bad_nodes",
            details={"option": "nodes"},
        )
    return per_node


def _size(plan: LaunchPlan, *flags: str) -> int:
    given = vllm_args.value(plan.vllm_args, *flags) or ""
    return int(given) if given.isdigit() and int(given) > 0 else 1


def k8s_objects(plan: LaunchPlan, options: KubernetesOptions | None = None) -> list[dict[str, Any]]:
    """The manifests, in apply order: PVC, workload, Service, PDB (+ ScaledObject).

    A multi-node planner passes the shape explicitly:
    ``k8s_objects(plan, KubernetesOptions(nodes=2, gpus_per_node=8))``.
    """
    opts = options or KubernetesOptions()
    check_names(plan)
    gpus = gpus_per_pod(plan, opts)
    name = object_name(plan.container_name)
    if opts.nodes == 1:
        workload = deployment(plan, opts, name, gpus)
        pods = {NAME_LABEL: name}
        serving = pods
    else:
        workload = leader_worker_set(plan, opts, name, gpus)
        pods = {LWS_NAME_LABEL: name}
        serving = {**pods, LWS_INDEX_LABEL: "0"}
    objects = [
        cache_claim(plan, opts, name),
        workload,
        service(plan, opts, name, serving),
        pod_disruption_budget(opts, name, pods),
    ]
    if opts.autoscale:
        objects.append(scaled_object(plan, opts, name, workload))
    return objects


def header(plan: LaunchPlan, options: KubernetesOptions | None = None) -> str:
    """YAML comment lines: what the manifests need in the cluster, and the Secrets to make."""
    opts = options or KubernetesOptions()
    ns = f" -n {opts.namespace}" if opts.namespace else ""
    gpus = gpus_per_pod(plan, opts)
    shape = f"{opts.nodes} nodes x {gpus}" if opts.nodes > 1 else f"{gpus}"
    needs = [f"the AMD GPU device plugin ({GPU_RESOURCE}) and node labeller ({VRAM_LABELS[0]})"]
    if opts.nodes > 1:
        needs.append(
            f"the LeaderWorkerSet controller ({LWS_API}); ranks talk over {opts.socket_ifname}"
        )
    if opts.autoscale:
        needs.append(f"KEDA; Prometheus at {opts.prometheus_url} scraping prometheus.io/*")
    if opts.shared_cache:
        storage = opts.storage_class or "the cluster's default"
        needs.append(f"ReadWriteMany storage for the shared cache ({storage})")
    lines = [
        f"instinct-serve {__version__}: {plan.model} on {plan.gpu_name or plan.gfx_version}, "
        f"{shape} GPU(s) per copy, plan {plan.plan_hash}",
        "Needs:",
        *(f"  - {need}" for need in needs),
    ]
    if opts.nodes > 1:  # vLLM's multi-node advice: every node reads the same weights
        lines.append("Download the weights into the cache volume before the first start.")
    if fills_in_turn(plan, opts):
        assert plan.cache is not None
        first = "pod" if opts.nodes == 1 else "group of pods"
        lines += [
            f"On a cold compile cache ({plan.cache.key}) the first {first} to start fills it;",
            f"the others wait in {FILL_CONTAINER} until it has served (at most "
            f"{fill_wait_s(plan)} s),",
            "then start warm from it.",
        ]
    names = list(dict.fromkeys([*SECRET_REFS, *plan.secret_env]))
    optional = "both optional" if len(names) == len(SECRET_REFS) else "all optional"
    lines.append(f"Secrets, by name only; {optional} (a public model needs no token, and")
    lines.append("without the key the endpoint takes requests unauthenticated):")
    for env_name in names:
        secret, key = secret_ref(env_name)
        lines.append(
            f"  kubectl{ns} create secret generic {secret} --from-literal={key}=<{env_name}>"
        )
    return "".join(f"# {line}\n" for line in lines)


def secret_ref(env_name: str) -> tuple[str, str]:
    """The Secret (name, key) a variable passed by name is read from: ``SECRET_REFS``,
    else one Secret per variable (``MY_SETTING`` -> ``my-setting``, key ``value``)."""
    own = re.sub(r"[^a-z0-9]+", "-", env_name.lower()).strip("-") or "env"
    return SECRET_REFS.get(env_name, (own, "value"))


# ----------------------------------------------------------------------------- objects


def _meta(
    opts: KubernetesOptions, name: str, own_name: str | None = None, **extra: Any
) -> dict[str, Any]:
    """``name`` is the endpoint's (the app label of every object), ``own_name`` this
    object's name when it differs."""
    meta: dict[str, Any] = {"name": own_name or name}
    if opts.namespace:
        meta["namespace"] = opts.namespace
    meta["labels"] = {NAME_LABEL: name, **MANAGED_BY}
    meta.update(extra)
    return meta


def cache_claim(plan: LaunchPlan, opts: KubernetesOptions, name: str) -> dict[str, Any]:
    """The cache volume: the weights (twice, for a revision next to the old one) and the
    compile caches. ReadWriteOnce binds to one node, so several pods need ReadWriteMany."""
    weights_gib = (plan.weight_memory_gb or 20.0) * 1e9 / 2**30
    size_gib = max(64, math.ceil(weights_gib * 2) + COMPILE_CACHE_GIB)
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany" if opts.shared_cache else "ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{size_gib}Gi"}},
    }
    if opts.storage_class:
        spec["storageClassName"] = opts.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(opts, name, f"{name}-cache"),
        "spec": spec,
    }


def deployment(plan: LaunchPlan, opts: KubernetesOptions, name: str, gpus: int) -> dict[str, Any]:
    """One pod per copy. Rolling one pod at a time with no surge: a surge pod would need a
    spare set of GPUs, which a GPU pool rarely has (for one copy this is a Recreate). Under
    ``autoscale`` ``replicas`` is left to KEDA, so a re-apply does not reset the count."""
    spec: dict[str, Any] = {}
    if not opts.autoscale:
        spec["replicas"] = opts.replicas
    spec.update(
        {
            "selector": {"matchLabels": {NAME_LABEL: name}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            # a rollout of a large model takes longer than the 600 s default
            "progressDeadlineSeconds": startup_budget_s(plan) + WARMUP_TIMEOUT_S,
            "template": {
                "metadata": {
                    "labels": {NAME_LABEL: name, **MANAGED_BY},
                    "annotations": _scrape(plan),
                },
                "spec": _pod_spec(plan, opts, name, gpus, role=None),
            },
        }
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(opts, name, annotations=dict(plan.labels)),
        "spec": spec,
    }


def leader_worker_set(
    plan: LaunchPlan, opts: KubernetesOptions, name: str, gpus: int
) -> dict[str, Any]:
    """One copy = one group of ``nodes`` pods. Workers start with the leader
    (``LeaderCreated``): the leader only turns ready once every rank has joined, so waiting
    for it would never start them. A failed pod restarts its whole group, which vLLM needs
    (a lost rank does not rejoin a running engine)."""
    labels = {NAME_LABEL: name, **MANAGED_BY}
    spec: dict[str, Any] = {}
    if not opts.autoscale:
        spec["replicas"] = opts.replicas
    spec.update(
        {
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "leaderWorkerTemplate": {
                "size": opts.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": dict(labels), "annotations": _scrape(plan)},
                    "spec": _pod_spec(plan, opts, name, gpus, role="leader"),
                },
                "workerTemplate": {
                    "metadata": {"labels": dict(labels)},
                    "spec": _pod_spec(plan, opts, name, gpus, role="worker"),
                },
            },
        }
    )
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": _meta(opts, name, annotations=dict(plan.labels)),
        "spec": spec,
    }


def service(
    plan: LaunchPlan, opts: KubernetesOptions, name: str, selector: dict[str, str]
) -> dict[str, Any]:
    """The endpoint: the pods that serve the API (every pod, or each group's leader)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(opts, name),
        "spec": {
            "type": "ClusterIP",
            "selector": dict(selector),
            "ports": [{"name": "http", "port": plan.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def pod_disruption_budget(
    opts: KubernetesOptions, name: str, selector: dict[str, str]
) -> dict[str, Any]:
    """``maxUnavailable: 1``: a drain evicts one pod at a time and waits until it serves
    again elsewhere. ``maxUnavailable: 0`` (or ``minAvailable`` = replicas) would block every
    drain of a single copy forever, and a fixed ``minAvailable`` goes stale once KEDA changes
    the count. One copy does go down during a drain: a GPU pool has no spare to move it to
    first, and a blocked node upgrade is worse."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(opts, name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(selector)}},
    }


def scaled_object(
    plan: LaunchPlan, opts: KubernetesOptions, name: str, workload: dict[str, Any]
) -> dict[str, Any]:
    """KEDA scales the workload on the queue length summed over its copies (the target is an
    average per copy), one copy per ``SCALE_STEP_S`` up and down: a new copy loads for
    minutes, and adding more before it serves only overshoots."""
    matchers = [f"model_name={_promql_string(plan.served_model_name)}"]
    if opts.namespace:
        matchers.append(f"namespace={_promql_string(opts.namespace)}")
    query = f"sum({QUEUE_METRIC}{{{','.join(matchers)}}})"
    step = {"type": "Pods", "value": 1, "periodSeconds": SCALE_STEP_S}
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _meta(opts, name),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": workload["apiVersion"],
                "kind": workload["kind"],
                "name": name,
            },
            "minReplicaCount": opts.replicas,
            "maxReplicaCount": opts.most_replicas,
            "pollingInterval": 15,
            "cooldownPeriod": SCALE_STEP_S,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleUp": {"stabilizationWindowSeconds": 0, "policies": [step]},
                        "scaleDown": {
                            "stabilizationWindowSeconds": 2 * SCALE_STEP_S,
                            "policies": [dict(step)],
                        },
                    }
                }
            },
            "triggers": [
                {
                    "type": "prometheus",
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": opts.prometheus_url,
                        "query": query,
                        "threshold": str(QUEUE_TARGET),
                    },
                }
            ],
        },
    }


# ----------------------------------------------------------------------------- the pod


def _pod_spec(
    plan: LaunchPlan, opts: KubernetesOptions, name: str, gpus: int, role: str | None
) -> dict[str, Any]:
    """``role``: None for a single-node pod, "leader" or "worker" in a LeaderWorkerSet.
    No service links (a Service called ``vllm`` would inject VLLM_PORT=tcp://..., which vLLM
    reads as its own setting) and no API token (vLLM never calls the API server)."""
    spec: dict[str, Any] = {
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": GRACE_S,
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
    }
    affinity: dict[str, Any] = {}
    values = vram_label_values(plan)
    if values:
        terms = [
            {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
            for key in VRAM_LABELS  # terms are ORed: either label generation matches
        ]
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    if role is None and (opts.replicas > 1 or opts.autoscale):
        affinity["podAntiAffinity"] = {  # copies on different nodes survive a node loss
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {NAME_LABEL: name}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    if affinity:
        spec["affinity"] = affinity
    inits = init_containers(plan, opts, role)
    if inits:
        spec["initContainers"] = inits
    spec["containers"] = [_container(plan, opts, gpus, role)]
    spec["volumes"] = [
        {"name": "cache", "persistentVolumeClaim": {"claimName": f"{name}-cache"}},
        # vLLM's shared-memory queues between ranks and RCCL's intra-node transport; the
        # docker plan has --ipc=host, a pod gets a RAM-backed /dev/shm of this size
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{_shm_gib(gpus)}Gi"}},
    ]
    return spec


def _shm_gib(gpus: int) -> int:
    return min(64, max(16, 4 * gpus))


def _container(
    plan: LaunchPlan, opts: KubernetesOptions, gpus: int, role: str | None
) -> dict[str, Any]:
    args = [_escape(a) for a in container_args(plan)]
    if role is not None:
        args = _multi_node_args(args, opts.nodes, headless=role == "worker")
    count = str(gpus)
    kind = servers.of(plan)
    container: dict[str, Any] = {
        "name": kind.name,  # the server it runs: `kubectl logs -c vllm` (or sglang)
        "image": plan.image,
        "args": args,
        "env": _env(plan, opts),
        "resources": {
            "requests": {
                GPU_RESOURCE: count,
                "cpu": str(CPU_PER_GPU * gpus),
                "memory": f"{MEMORY_GIB_PER_GPU * gpus}Gi",
            },
            "limits": {GPU_RESOURCE: count},
        },
        "volumeMounts": [
            *(
                {"name": "cache", "mountPath": path, "subPath": sub}
                for sub, path, _vars in cache_mounts(plan)
            ),
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "securityContext": {  # the docker plan's --cap-add SYS_PTRACE, seccomp=unconfined
            "capabilities": {"add": ["SYS_PTRACE"]},
            "seccompProfile": {"type": "Unconfined"},
        },
    }
    if role == "worker":  # a headless rank serves no HTTP: its failures end the process
        return container
    health = {"httpGet": {"path": kind.routes.health, "port": "http"}}
    container["ports"] = [{"name": "http", "containerPort": plan.port, "protocol": "TCP"}]
    container["startupProbe"] = {
        **health,
        "periodSeconds": STARTUP_PERIOD_S,
        "timeoutSeconds": HTTP_PROBE_TIMEOUT_S,
        "failureThreshold": max(1, startup_budget_s(plan) // STARTUP_PERIOD_S),
    }
    mode = "list" if _pooling(plan) else "generate"
    container["readinessProbe"] = {
        "exec": {
            "command": ready_command(
                plan, opts, READY_SCRIPT, str(plan.port), plan.served_model_name, mode
            )
        },
        "periodSeconds": READY_PERIOD_S,
        "timeoutSeconds": WARMUP_TIMEOUT_S + 30,  # the first check waits for the warm-up
        "failureThreshold": 3,
    }
    container["livenessProbe"] = {
        **health,
        "periodSeconds": 15,
        "timeoutSeconds": HTTP_PROBE_TIMEOUT_S,
        "failureThreshold": 4,
    }
    container["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(DRAIN_S)]}}}
    return container


def _env(plan: LaunchPlan, opts: KubernetesOptions) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": k, "value": _escape(v)}
        for k, v in plan.env.items()
        # the device plugin hands the pod its GPUs: indices from the plan's host mean nothing
        if k not in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
    ]
    for _sub, path, variables in cache_mounts(plan):
        for var in variables:
            if var not in plan.env:
                env.append({"name": var, "value": path})
    if opts.nodes > 1:  # upstream's multi_node_* strategies set both to the node's interface
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if var not in plan.env:
                env.append({"name": var, "value": opts.socket_ifname})
    for secret_env in dict.fromkeys([*plan.secret_env, API_KEY_ENV]):
        secret, key = secret_ref(secret_env)
        env.append(
            {
                "name": secret_env,
                # a public plan's API key is required: that endpoint must not start open
                "valueFrom": {
                    "secretKeyRef": {
                        "name": secret,
                        "key": key,
                        "optional": secret_env != plan.api_key_env,
                    }
                },
            }
        )
    return env


def _multi_node_args(args: list[str], nodes: int, headless: bool) -> list[str]:
    """The rank flags of vLLM's mp backend, replacing any the plan carried; the leader's
    address and the worker's index come from the variables LWS sets in every pod."""
    for flag in ("--nnodes", "--node-rank", "--master-addr", "--headless"):
        args = vllm_args.remove(args, flag)
    backend = vllm_args.value(args, "--distributed-executor-backend")
    if backend not in (None, "mp"):
        raise UsageError(
            f"--nodes needs vLLM's mp executor, not --distributed-executor-backend {backend}",
            fix="drop --distributed-executor-backend from the extra vLLM arguments",
            id="bad_nodes",
            details={"option": "nodes"},
        )
    if backend is None:
        args = [*args, "--distributed-executor-backend", "mp"]
    rank = "$(LWS_WORKER_INDEX)" if headless else "0"
    args = [*args, "--nnodes", str(nodes), "--node-rank", rank]
    args += ["--master-addr", "$(LWS_LEADER_ADDRESS)"]
    return [*args, "--headless"] if headless else args


def _scrape(plan: LaunchPlan) -> dict[str, str]:
    """Prometheus' annotation-based pod discovery (``observe.scrape``): vLLM serves /metrics
    on the API port, without the API key (it guards /v1 only)."""
    from instinct_serve.observe.scrape import k8s_pod_annotations

    return k8s_pod_annotations(plan.port)


def _promql_string(value: str) -> str:
    return json.dumps(value)  # a double-quoted string with \\ and \" escapes, as PromQL reads


def _pooling(plan: LaunchPlan) -> bool:
    for flag in ("--runner", "--task", "--convert"):
        if (vllm_args.value(plan.vllm_args, flag) or "") in _POOLING:
            return True
    return False
