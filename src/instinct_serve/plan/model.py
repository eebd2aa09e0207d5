"""The launch plan: everything needed to start one vLLM endpoint, and why each piece is there.

A ``LaunchPlan`` is produced by the pure planner (``plan.planner``) and consumed by the
renderers (``plan.render``) and by ``serve``. It never holds a secret: secrets are listed by
name in ``secret_env`` and passed through from the caller's environment at launch.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from instinct_serve import servers
from instinct_serve.errors import UsageError
from instinct_serve.names import CONTAINER_NAME, is_env_name
from instinct_serve.options import DEFAULT_PORT, Launcher
from instinct_serve.paths import CONTAINER_HF_HOME as CONTAINER_HF_CACHE
from instinct_serve.plan import caches
from instinct_serve.plan.caches import CacheLayout
from instinct_serve.servers.vllm import API_KEY_ENV

if TYPE_CHECKING:
    from collections.abc import Callable

    from instinct_serve.catalog.matching import Match
    from instinct_serve.fit.estimate import FitReport
    from instinct_serve.hardware.inventory import GpuInventory
    from instinct_serve.plan.replicas import GroupPlan

__all__ = [
    "API_KEY_ENV",
    "CONTAINER_HF_CACHE",
    "DEFAULT_PORT",
    "Assigned",
    "Conflict",
    "FitSummary",
    "LaunchPlan",
    "Mount",
    "PlanResult",
    "Reason",
    "check_names",
    "container_args",
    "startup_budget_s",
]

# The first request after startup compiles kernels (Triton, AITER JIT builds): serve's warm-up
# and the Kubernetes readiness probe give it this long.
WARMUP_TIMEOUT_S = 900


LOOPBACK = "127.0.0.1"
EVERY_INTERFACE = "0.0.0.0"


class Reason(NamedTuple):
    """Why one element of the plan is there: ``item`` came from ``source`` because ``why``."""

    item: str
    source: str
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"item": self.item, "source": self.source, "why": self.why}


class Assigned(NamedTuple):
    """One value a source gave a flag or variable."""

    source: str
    value: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "value": self.value}


@dataclass(frozen=True)
class Conflict:
    """A flag (``kind="flag"``) or variable (``kind="env"``) set to different values: every
    value in precedence order, and the one the plan keeps. Typed until the JSON edge, where
    it is ``{"flag"|"env": name, "values": [...], "winner": {...}}``."""

    kind: Literal["flag", "env"]
    name: str
    values: tuple[Assigned, ...]
    winner: Assigned

    def to_dict(self) -> dict[str, Any]:
        return {
            self.kind: self.name,
            "values": [v.to_dict() for v in self.values],
            "winner": self.winner.to_dict(),
        }


class Mount(NamedTuple):
    host_path: str
    container_path: str
    read_only: bool = False

    def docker_arg(self) -> str:
        return f"{self.host_path}:{self.container_path}" + (":ro" if self.read_only else "")


class FitSummary(NamedTuple):
    """What the plan keeps of the fit at its TP (typed until the JSON edge)."""

    verdict: str
    verdict_reason: str
    weight_memory_gb: float
    weight_memory_per_gpu_gib: float
    kv_cache_bytes_per_token: int
    remaining_for_kv_gb: float
    attention_kind: str
    kv_cache_tokens: int
    gpu_memory_utilization: float  # the fraction the fit was sized at
    tp: int
    weights_fit: bool
    recommended_max_model_len: int
    native_max_model_len: int
    native_max_model_len_source: str
    context_limited: bool
    requested_max_model_len: int | None
    requested_max_model_len_fits: bool | None
    min_tp_required: int | None
    min_tp_if_more_gpus: int | None
    max_seq_len_fp8_kv: int
    headroom: str
    sglang: dict[str, Any] | None = None  # an SGLang plan: SGLang's own sizing (fit.sglang)

    @classmethod
    def of(cls, report: FitReport) -> FitSummary:
        doc = report.to_dict()
        return cls(
            verdict=report.verdict,
            verdict_reason=report.verdict_reason,
            weight_memory_gb=doc["weight_memory_gb"],
            weight_memory_per_gpu_gib=doc["weight_memory_per_gpu_gib"],
            kv_cache_bytes_per_token=report.kv_cache_bytes_per_token,
            remaining_for_kv_gb=doc["remaining_for_kv_gb"],
            attention_kind=doc["attention_kind"],
            kv_cache_tokens=report.kv_tokens,
            gpu_memory_utilization=report.gpu_memory_utilization,
            tp=report.tp,
            weights_fit=report.weights_fit,
            recommended_max_model_len=report.recommended_max_model_len,
            native_max_model_len=report.native_max_model_len,
            native_max_model_len_source=report.native_source,
            context_limited=report.context_limited,
            requested_max_model_len=report.requested_max_model_len,
            requested_max_model_len_fits=report.requested_fits,
            min_tp_required=report.min_tp_required,
            min_tp_if_more_gpus=report.min_tp_unbounded,
            max_seq_len_fp8_kv=report.max_seq_len_fp8_kv,
            headroom=report.headroom,
            sglang=doc.get("sglang"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "weight_memory_gb": self.weight_memory_gb,
            "weight_memory_per_gpu_gib": self.weight_memory_per_gpu_gib,
            "kv_cache_bytes_per_token": self.kv_cache_bytes_per_token,
            "remaining_for_kv_gb": self.remaining_for_kv_gb,
            "attention_kind": self.attention_kind,
            "kv_cache_tokens": self.kv_cache_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "fit": {
                "tp": self.tp,
                "weights_fit": self.weights_fit,
                "recommended_max_model_len": self.recommended_max_model_len,
                "native_max_model_len": self.native_max_model_len,
                "native_max_model_len_source": self.native_max_model_len_source,
                "context_limited": self.context_limited,
                "requested_max_model_len": self.requested_max_model_len,
                "requested_max_model_len_fits": self.requested_max_model_len_fits,
                "min_tp_required": self.min_tp_required,
                "min_tp_if_more_gpus": self.min_tp_if_more_gpus,
                "max_seq_len_fp8_kv": self.max_seq_len_fp8_kv,
                "headroom": self.headroom,
            },
            **({"sglang": self.sglang} if self.sglang is not None else {}),
        }


@dataclass
class LaunchPlan:
    """One endpoint, fully decided."""

    model: str  # the checkpoint vLLM loads (a variant's model_id when one was chosen)
    requested_model: str  # what the user asked for
    image: str
    container_name: str
    port: int = DEFAULT_PORT
    # how the server is launched (``Launcher``): in a container, or as a process on the host
    launcher: Launcher = "docker"
    server: str = servers.DEFAULT  # the inference server launched (``servers``: its kind's name)
    docker_flags: list[str] = field(default_factory=list)  # argv tokens, in order
    mounts: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # non-secret environment
    secret_env: list[str] = field(default_factory=list)  # names passed through by name only
    vllm_args: list[str] = field(default_factory=list)  # after `vllm serve MODEL`
    labels: dict[str, str] = field(default_factory=dict)
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    precision: str | None = None
    variant: str | None = None
    gpu_indices: list[int] | None = None  # restricts devices via HIP_VISIBLE_DEVICES
    gpu_count: int = 1
    match_kind: str = "generic"
    match_explanation: str = ""
    gfx_version: str = "unknown"
    gpu_name: str = ""
    vram_gb_per_gpu: float | None = None
    weight_memory_gb: float | None = None
    native_max_model_len: int | None = None
    context_limited: bool = False
    verdict: str | None = None
    reasons: list[Reason] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    fit: FitSummary | None = None
    recipe_cross_check: dict[str, Any] | None = None
    # the GPUs as partitions and the endpoints of this TP the host holds (replica_gpus)
    partitions: dict[str, Any] | None = None
    public: bool = False  # every interface (and an API key) instead of 127.0.0.1
    # where the API key comes from: "generated" (serve makes one and keeps it in a key file
    # on the host), "environment" (the caller's VLLM_API_KEY, passed by name), or None
    api_key: str | None = None
    # the persistent compile caches on the host (``plan.caches``): mounted and pointed at by
    # their variables in every rendering; None: off (the container's own, lost with it)
    cache: CacheLayout | None = None
    # several copies behind one endpoint (``plan.replicas``): replicas behind a router, or
    # vLLM's own data parallelism; None for one endpoint
    group: GroupPlan | None = None

    @property
    def bind_address(self) -> str:
        """The host address the endpoint listens on: loopback unless ``public``."""
        return EVERY_INTERFACE if self.public else LOOPBACK

    @property
    def api_key_env(self) -> str | None:
        """The variable that carries the endpoint's API key (by name), when it has one."""
        return servers.of(self).api_key_env if self.api_key is not None else None

    @property
    def served_model_name(self) -> str:
        """The name clients put in requests: vLLM serves the model id unless renamed."""
        from instinct_serve import vllm_args

        return vllm_args.value(self.vllm_args, "--served-model-name") or self.model

    def identity(self) -> dict[str, Any]:
        """What makes two launches the same endpoint (used for the plan hash and reuse)."""
        return {
            "model": self.model,
            "image": self.image,
            "engine": self.launcher,  # the key agents and records read (`--engine`)
            "port": self.port,
            "bind": self.bind_address,
            "api_key": self.api_key,
            "docker_flags": self.docker_flags,
            "mounts": [m.docker_arg() for m in self.mounts],
            "env": dict(sorted(self.env.items())),
            "secret_env": sorted(self.secret_env),
            "vllm_args": self.vllm_args,
            "gpu_indices": self.gpu_indices,
            # where the caches live, not their key: the key follows from the image and the
            # gfx (already here), and a pull may only learn the digest after planning
            "compile_cache": self.cache.root if self.cache is not None else None,
            **self.server_field(),
        } | ({"group": self.group.identity()} if self.group is not None else {})

    def server_field(self) -> dict[str, str]:
        """``{"server": name}`` for a plan of any server but vLLM, else nothing: every plan
        made before plans named their server is a vLLM plan, and its JSON and hash (the
        endpoint's identity, on its labels) stay what they were."""
        return {"server": self.server} if self.server != servers.DEFAULT else {}

    @property
    def plan_hash(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "requested_model": self.requested_model,
            "served_model_name": self.served_model_name,
            "engine": self.launcher,  # the key agents and records read (`--engine`)
            **self.server_field(),
            "image": self.image,
            "container_name": self.container_name,
            "port": self.port,
            "base_url": f"http://{LOOPBACK}:{self.port}/v1",
            "public": self.public,
            "bind_address": self.bind_address,
            "api_key": None
            if self.api_key is None
            else {"env": self.api_key_env, "source": self.api_key},
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "native_max_model_len": self.native_max_model_len,
            "context_limited": self.context_limited,
            "precision": self.precision,
            "variant": self.variant,
            "gpu_indices": self.gpu_indices,
            "gpu_count": self.gpu_count,
            "gfx_version": self.gfx_version,
            "gpu_name": self.gpu_name,
            "vram_gb_per_gpu": self.vram_gb_per_gpu,
            "weight_memory_gb": self.weight_memory_gb,
            "verdict": self.verdict,
            "match": {"kind": self.match_kind, "explanation": self.match_explanation},
            "docker_flags": list(self.docker_flags),
            "mounts": [
                {"host": m.host_path, "container": m.container_path, "read_only": m.read_only}
                for m in self.mounts
            ],
            "env": dict(self.env),
            "secret_env": list(self.secret_env),
            "vllm_args": list(self.vllm_args),
            "labels": dict(self.labels),
            "plan_hash": self.plan_hash,
            "reasons": [r.to_dict() for r in self.reasons],
            "warnings": list(self.warnings),
            "conflicts": [c.to_dict() for c in self.conflicts],
            "fit": self.fit.to_dict() if self.fit is not None else None,
            "recipe_cross_check": self.recipe_cross_check,
            "partitions": self.partitions,
            "compile_cache": self.cache.to_dict() if self.cache is not None else None,
            "replicas": self.group.document(self) if self.group is not None else None,
        }


def container_args(plan: LaunchPlan) -> list[str]:
    """What follows the image name (its entrypoint is the server): the plan's server says
    (vLLM: ``vllm serve``'s positional model, then its arguments)."""
    return servers.of(plan).container_args(plan)


def startup_budget_s(plan: LaunchPlan) -> int:
    """Seconds a fresh start may take: download + load scale with the weight size."""
    weights_gb = plan.weight_memory_gb or 20.0
    # ~30 s per 10 GB to load, plus downloads at a modest 100 MB/s, plus graph capture.
    return int(600 + weights_gb * 3 + weights_gb * 10)


@dataclass
class PlanResult:
    """The plan and what it was made from (for the confirmation table and JSON)."""

    plan: LaunchPlan
    inventory: GpuInventory
    match: Match
    fit: FitReport | None = None
    hardware_source: str = "detect"
    warnings: list[str] = field(default_factory=list)
    # the kernel and sharding rules the TP was checked with (``plan.constraints``), for a TP
    # decided after the plan (a multi-node split's per node): (rule id, why) per broken rule
    tp_problems: Callable[[int], list[tuple[str, str]]] | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = self.plan.to_dict()
        doc["hardware_source"] = self.hardware_source
        return doc


def check_names(plan: LaunchPlan) -> None:
    """Refuse to render a plan with an environment name that is not a variable name, a
    container name docker would not take, or an image that would read as an option (every
    rendering calls it: a recipe, or a plan record read back from disk, can say anything)."""
    names = [plan.container_name]
    if plan.group is not None:
        names += [m.name for m in plan.group.members]
        names += [plan.group.router.name] if plan.group.router is not None else []
    for name in names:
        if not CONTAINER_NAME.fullmatch(name):
            raise UsageError(
                f"the plan names a container {name!r}, which is not a container name",
                fix="letters, digits, '_', '.', '-' (128 at most, not starting with '-')",
                id="bad_name",
                details={"name": name},
            )
    if plan.image.startswith("-") or any(c.isspace() for c in plan.image):  # "": native
        raise UsageError(
            f"the plan's image {plan.image!r} is not an image reference",
            fix="name an image such as vllm/vllm-openai-rocm:v0.20.0 (--image)",
            id="bad_image",
            details={"image": plan.image},
        )
    for name in [*plan.env, *plan.secret_env]:
        if not is_env_name(name):
            raise UsageError(
                f"the plan's environment has an invalid variable name {name!r}",
                fix="variable names are letters, digits and '_' (not starting with a digit)",
                id="bad_env_name",
                details={"name": name},
            )


# The daemon's restart policy of a docker or compose endpoint (docs/supervision.md). Not
# ``unless-stopped``/``always``: a failure that recurs at every start (out of memory while
# loading, a bad argument) would reload the weights forever, hold the GPUs, and show as
# "restarting" instead of a diagnosable exit. ``on-failure:3`` restarts a crash a few times
# and then leaves it exited, log kept, for ``instinct watch``/``diagnose``; a clean exit
# (``docker stop``, ``instinct stop``) is never restarted. Kubernetes restarts pods itself;
# the native route has no daemon: ``instinct watch`` supervises it.
RESTART_POLICY = "on-failure:3"


def publish_arg(plan: LaunchPlan) -> str:
    """``-p``'s value: the port on the plan's bind address (127.0.0.1 unless public)."""
    return f"{plan.bind_address}:{plan.port}:{plan.port}"


def docker_argv(plan: LaunchPlan, *, restart: str | None = RESTART_POLICY) -> list[str]:
    """The full ``docker run -d`` argv (labels, restart policy, AMD flags, port, mounts, env,
    image, args). ``restart=None``: no policy (serve's own launch: it supervises the
    start-up itself and sets the policy once the endpoint is proven, ``Docker.set_restart``)."""
    check_names(plan)
    argv = ["docker", "run", "-d", "--name", plan.container_name]
    if restart is not None:
        argv += ["--restart", restart]
    for key, value in plan.labels.items():
        argv += ["--label", f"{key}={value}"]
    for flag in plan.docker_flags:
        argv += split_flag(flag)
    argv += ["-p", publish_arg(plan)]
    for mount in plan.mounts:
        argv += ["-v", mount.docker_arg()]
    for host_path, container_path in caches.mounts(plan.cache):
        argv += ["-v", f"{host_path}:{container_path}"]
    for key, value in plan.env.items():
        argv += ["-e", f"{key}={value}"]
    for key, value in caches.container_env(plan.cache, plan.env).items():
        argv += ["-e", f"{key}={value}"]
    for key, value in servers.of(plan).environment(plan).items():  # vLLM: none
        argv += ["-e", f"{key}={value}"]
    for name in plan.secret_env:
        argv += ["--env", name]  # by name: docker copies the value from its own environment
    argv.append(plan.image)
    argv += container_args(plan)
    return argv


def split_flag(flag: str) -> list[str]:
    """``"--security-opt seccomp=unconfined"`` → two argv tokens; ``--ipc=host`` stays one."""
    return flag.split(" ", 1) if " " in flag.strip() else [flag.strip()]
