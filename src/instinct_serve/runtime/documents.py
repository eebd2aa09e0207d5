"""The documents ``serve`` returns: the endpoint, the failure, the relaunches, the outcome."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import LaunchPlan

Status = Literal["ready", "reused", "loading", "failed", "timeout", "interrupted"]

# ``Failure.id``s serve sets itself; the others are diagnose finding ids, or the id of the
# request that failed after /health (``runtime.health``).
STARTUP_FAILED = "startup_failed"  # the server died and no finding matched
STARTUP_TIMEOUT = "startup_timeout"  # not healthy in time, left running
MODEL_NOT_LISTED = "model_not_listed"  # /v1/models lists another model
SERVE_FAILURE_IDS = (STARTUP_FAILED, STARTUP_TIMEOUT, MODEL_NOT_LISTED)


@dataclass
class Failure:
    """Why serve gave up, what to do, and the evidence."""

    id: str
    title: str
    cause: str
    fix: str
    line: str | None = None
    log_tail: list[str] = field(default_factory=list)
    exit_code: int | None = None
    container: str | None = None
    left: str | None = None  # what happened to the endpoint: stopped and kept, running, ...
    commands: list[str] = field(default_factory=list)
    finding: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "cause": self.cause,
            "fix": self.fix,
            "line": self.line,
            "exit_code": self.exit_code,
            "container": self.container,
            "left": self.left,
            "commands": list(self.commands),
            "log_tail": list(self.log_tail),
            "finding": self.finding,
        }


@dataclass
class Endpoint:
    """The connection details of a serving endpoint."""

    base_url: str
    model: str
    container: str
    engine: str
    host: str
    port: int
    tensor_parallel_size: int
    max_model_len: int | None
    image: str | None
    use_chat: bool
    warmup_latency_s: float | None = None
    coherence: dict[str, Any] | None = None
    fingerprint: dict[str, Any] | None = None  # its check (observe.fingerprint), when taken
    api_key_env: str | None = None  # the variable that carries the key (VLLM_API_KEY)
    api_key_source: str | None = None  # "generated" (in api_key_file) or "environment"
    api_key_file: str | None = None  # where a generated key is, on the endpoint's host
    api_key_command: str | None = None  # prints the key here (cat, or ssh HOST cat)
    bind_address: str = "127.0.0.1"  # where it listens on its host
    tunnel: str | None = None  # the ssh forward that brings base_url here (remote hosts)

    @property
    def curl(self) -> str:
        return curl_command(self)

    def api_key_doc(self) -> dict[str, Any] | None:
        """Where the key is: never the key itself."""
        if self.api_key_env is None:
            return None
        return {
            "env": self.api_key_env,
            "source": self.api_key_source,
            "file": self.api_key_file,
            "read_with": self.api_key_command,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "model": self.model,
            "container": self.container,
            "engine": self.engine,
            "host": self.host,
            "port": self.port,
            "tp": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "image": self.image,
            "api": "chat" if self.use_chat else "completions",
            "warmup_latency_s": self.warmup_latency_s,
            "coherence": self.coherence,
            "fingerprint": self.fingerprint,
            "bind_address": self.bind_address,
            "api_key": self.api_key_doc(),
            "tunnel": self.tunnel,
            "curl": self.curl,
        }


def curl_command(endpoint: Endpoint) -> str:
    """A ready-to-run request with the endpoint's exact URL and model name."""
    import json

    if endpoint.use_chat:
        path = "/chat/completions"
        body: dict[str, Any] = {
            "model": endpoint.model,
            "messages": [{"role": "user", "content": "Hello! Who are you?"}],
            "max_tokens": 64,
        }
    else:
        path = "/completions"
        body = {"model": endpoint.model, "prompt": "The capital of France is", "max_tokens": 32}
    parts = ["curl", "-sS", endpoint.base_url + path, "-H", "Content-Type: application/json"]
    line = shlex.join(parts)
    if endpoint.api_key_command:  # the key stays in its file: the shell reads it
        line += f' -H "Authorization: Bearer $({endpoint.api_key_command})"'
    elif endpoint.api_key_env:
        line += f' -H "Authorization: Bearer ${endpoint.api_key_env}"'
    return line + " -d " + shlex.quote(json.dumps(body))


@dataclass
class Relaunch:
    """One automatic relaunch: which finding, and what changed in the plan."""

    finding: str
    title: str
    changes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"finding": self.finding, "title": self.title, "changes": list(self.changes)}


@dataclass
class ServeOutcome:
    """The final document of ``serve``."""

    status: Status
    host: str
    engine: str
    plan: LaunchPlan
    endpoint: Endpoint | None = None
    failure: Failure | None = None
    relaunches: list[Relaunch] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    phase: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    # a replica group (``runtime.group``): the router and each replica's state
    group: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("ready", "reused", "loading")

    @property
    def exit_code(self) -> int:
        if self.ok:
            return 0
        return 130 if self.status == "interrupted" else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": "result",
            "ok": self.ok,
            "status": self.status,
            "host": self.host,
            "engine": self.engine,
            "model": self.plan.model,
            "plan_hash": self.plan.labels.get(LABEL_PLAN_HASH, self.plan.plan_hash),
            "endpoint": self.endpoint.to_dict() if self.endpoint else None,
            "failure": self.failure.to_dict() if self.failure else None,
            "relaunches": [r.to_dict() for r in self.relaunches],
            "replaced": list(self.replaced),
            "notes": list(self.notes),
            "phase": self.phase,
            "figures": dict(self.figures),
            "elapsed_s": round(self.elapsed_s, 2),
        } | ({"replicas": self.group} if self.group is not None else {})
