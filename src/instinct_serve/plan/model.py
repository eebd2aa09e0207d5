"""The launch plan: everything needed to start one vLLM endpoint, and why each piece is there.

A ``LaunchPlan`` is produced by the pure planner (``plan.planner``) and consumed by the
renderers (``plan.render``) and by ``serve``. It never holds a secret: secrets are listed by
name in ``secret_env`` and passed through from the caller's environment at launch.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PORT = 8000
CONTAINER_HF_CACHE = "/root/.cache/huggingface"


@dataclass(frozen=True)
class Reason:
    """Why one element of the plan is there: ``item`` came from ``source`` because ``why``."""

    item: str
    source: str
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"item": self.item, "source": self.source, "why": self.why}


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    read_only: bool = False

    def docker_arg(self) -> str:
        return f"{self.host_path}:{self.container_path}" + (":ro" if self.read_only else "")


@dataclass
class LaunchPlan:
    """One endpoint, fully decided."""

    model: str  # the checkpoint vLLM loads (a variant's model_id when one was chosen)
    requested_model: str  # what the user asked for
    image: str
    container_name: str
    port: int = DEFAULT_PORT
    engine: str = "docker"  # docker | native
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
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    fit: dict[str, Any] | None = None
    recipe_cross_check: dict[str, Any] | None = None

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
            "engine": self.engine,
            "port": self.port,
            "docker_flags": self.docker_flags,
            "mounts": [m.docker_arg() for m in self.mounts],
            "env": dict(sorted(self.env.items())),
            "secret_env": sorted(self.secret_env),
            "vllm_args": self.vllm_args,
            "gpu_indices": self.gpu_indices,
        }

    @property
    def plan_hash(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "requested_model": self.requested_model,
            "served_model_name": self.served_model_name,
            "engine": self.engine,
            "image": self.image,
            "container_name": self.container_name,
            "port": self.port,
            "base_url": f"http://localhost:{self.port}/v1",
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
            "conflicts": list(self.conflicts),
            "fit": self.fit,
            "recipe_cross_check": self.recipe_cross_check,
        }
