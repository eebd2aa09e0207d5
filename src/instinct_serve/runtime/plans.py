"""The launch plan an endpoint was proven with, and the last good one before an upgrade.

``instinct watch`` relaunches an endpoint (with a known fix) and ``instinct rollback``
returns to the plan an upgrade replaced; both need the plan itself, not only the labels a
container carries. ``<data dir>/plans/<endpoint name>.json`` on the endpoint's host (next
to ``verified``, through the ``Host``) holds ``{"current": PLAN, "last_good": PLAN|null}``,
each the launch fields of a ``LaunchPlan`` (no secret: variables passed by name are names),
with its replica group where it has one (a group is recorded under its router's name).

Records are data, not trust: a loaded plan is rendered like any other (names checked,
every word quoted, argv never a shell line), and one that does not parse reads as absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from instinct_serve.hosts import Host
from instinct_serve.names import CONTAINER_NAME
from instinct_serve.plan.model import LaunchPlan, Mount
from instinct_serve.plan.replicas import group_from_record

MAX_RECORD_BYTES = 262_144
# What a relaunch needs of a plan (the rest is explanation, re-made by ``plan``).
_FIELDS = (
    "model",
    "requested_model",
    "image",
    "container_name",
    "port",
    "launcher",
    "docker_flags",
    "env",
    "secret_env",
    "vllm_args",
    "labels",
    "tensor_parallel_size",
    "max_model_len",
    "precision",
    "variant",
    "gpu_indices",
    "gpu_count",
    "gfx_version",
    "gpu_name",
    "weight_memory_gb",
    "public",
    "api_key",
)
# A field whose record key is another word: records keep ``engine`` (docker|native), as
# every version wrote it and as plan documents say it.
_KEYS = {"launcher": "engine"}


@dataclass
class PlanRecord:
    current: LaunchPlan | None
    last_good: LaunchPlan | None


def to_doc(plan: LaunchPlan) -> dict[str, Any]:
    doc = {_KEYS.get(key, key): getattr(plan, key) for key in _FIELDS}
    doc["mounts"] = [list(m) for m in plan.mounts]
    doc["group"] = plan.group.record() if plan.group is not None else None
    doc |= plan.server_field()  # a record without one is a vLLM plan's, as before servers
    copied: dict[str, Any] = json.loads(json.dumps(doc))  # plain JSON values (copies)
    return copied


def from_doc(doc: Any) -> LaunchPlan | None:
    """A plan from its record, or None for anything that is not one."""
    if not isinstance(doc, dict):
        return None
    try:
        fields = {
            key: doc[_KEYS.get(key, key)]
            for key in (*_FIELDS, "server")
            if _KEYS.get(key, key) in doc
        }
        mounts = [Mount(str(h), str(c), bool(ro)) for h, c, ro in doc.get("mounts") or []]
        plan = LaunchPlan(mounts=mounts, **fields)
    except (TypeError, ValueError, KeyError):
        return None
    if doc.get("group") is not None:
        plan.group = group_from_record(doc["group"])
        if plan.group is None:
            return None
    text_lists = (plan.docker_flags, plan.secret_env, plan.vllm_args)
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in text_lists):
        return None
    if not isinstance(plan.env, dict) or not isinstance(plan.labels, dict):
        return None
    if not isinstance(plan.port, int) or not isinstance(plan.image, str):
        return None
    return plan


def _path(host: Host, name: str) -> str | None:
    from instinct_serve.engine import hostfs

    if not CONTAINER_NAME.fullmatch(name):
        return None
    return hostfs.join(hostfs.data_dir(host), "plans", f"{name}.json")


def load(host: Host, name: str) -> PlanRecord:
    path = _path(host, name)
    text = (host.read_text(path, MAX_RECORD_BYTES) or "") if path else ""
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    return PlanRecord(from_doc(doc.get("current")), from_doc(doc.get("last_good")))


def save(host: Host, plan: LaunchPlan, *, last_good: LaunchPlan | bool | None = True) -> None:
    """Record ``plan`` as the current plan of its endpoint; ``last_good``: the plan to
    return to (``True``: keep the recorded one; ``None``: none any more). Best effort for
    ``True`` (serve's record); an upgrade's record must be written (raises)."""
    from instinct_serve.engine import hostfs
    from instinct_serve.errors import InstinctError

    path = _path(host, plan.container_name)
    if path is None:
        return
    keep = last_good is True
    if last_good is True:
        last_good = load(host, plan.container_name).last_good
    doc = {
        "current": to_doc(plan),
        "last_good": to_doc(last_good) if isinstance(last_good, LaunchPlan) else None,
    }
    try:
        hostfs.makedirs(host, path.rsplit("/", 1)[0])
        hostfs.write_text(host, path, json.dumps(doc, separators=(",", ":")))
    except InstinctError:
        if not keep:
            raise
        return


def forget(host: Host, name: str) -> None:
    """The record of an endpoint that is gone for good (a candidate once switched over)."""
    path = _path(host, name)
    if path is not None:
        host.run(["rm", "-f", "--", path], timeout=30)
