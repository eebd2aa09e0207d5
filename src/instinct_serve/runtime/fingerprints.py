"""Where fingerprints (``observe.fingerprint``) are kept, on the endpoint's host beside the
proof records (``runtime.verified``): ``<data dir>/fingerprints/``.

- ``<endpoint name>.json``: the fingerprint recorded when the endpoint was first proven,
  with its plan hash, checkpoint, precision, image and image digest, and the last check of
  it (``watch``'s canary): when it last passed, what last failed. ``ps``, ``top`` and the
  MCP status read it.
- ``references/<key>.json``: the reference of one checkpoint and precision (``reference_key``):
  the first fingerprint proven for them. A later serve of the same checkpoint and precision
  (another image, another flag) is checked against it.

Records are data, not trust: anything that does not parse is no record.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from instinct_serve import vllm_args
from instinct_serve.hosts import Host
from instinct_serve.names import CONTAINER_NAME
from instinct_serve.observe import fingerprint as fp
from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import LaunchPlan

MAX_RECORD_BYTES = 65_536
_WRITE = 'd="${1%/*}"; mkdir -p "$d" && tmp="$1.tmp.$$" && cat > "$tmp" && mv -f "$tmp" "$1"'
_READ_ALL = 'for f in "$1"/*.json; do [ -f "$f" ] && head -c 65536 "$f" && echo; done; exit 0'


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def record_dir(host: Host) -> str:
    from instinct_serve.engine import hostfs

    return hostfs.join(hostfs.data_dir(host), "fingerprints")


KV_ALIASES = {"fp8": "fp8_e4m3"}  # vLLM's ``fp8`` cache is e4m3, SGLang's only spelling of it


def weights_of(plan: LaunchPlan) -> tuple[str, str]:
    """The checkpoint's precision as served: dtype and quantization (the same flags on both
    servers)."""
    args = plan.vllm_args
    dtype = plan.precision or vllm_args.value(args, "--dtype") or "auto"
    return dtype, vllm_args.value(args, "--quantization", "-q") or ""


def kv_cache_of(plan: LaunchPlan) -> str:
    """The KV cache's dtype (``auto``: the model's), one spelling for both servers."""
    kv = vllm_args.value(plan.vllm_args, "--kv-cache-dtype") or "auto"
    return KV_ALIASES.get(kv, kv)


def precision_of(plan: LaunchPlan) -> str:
    """What the numbers depend on besides the checkpoint: dtype, quantization, KV dtype (as
    written: the reference key of a recorded fingerprint stays what it was)."""
    kv = vllm_args.value(plan.vllm_args, "--kv-cache-dtype") or ""
    return "/".join([*weights_of(plan), kv]).rstrip("/")


def reference_key(plan: LaunchPlan) -> str:
    blob = json.dumps([plan.model, precision_of(plan), fp.probe_set_id()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def platform_of(plan: LaunchPlan) -> str:
    return plan.gfx_version or "unknown"


def _write(host: Host, path: str, doc: dict[str, Any]) -> None:
    text = json.dumps(doc, separators=(",", ":"))
    if len(text) < MAX_RECORD_BYTES:
        host.run(["sh", "-c", _WRITE, "sh", path], timeout=30, input=text)


def _read(host: Host, path: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(host.read_text(path, MAX_RECORD_BYTES) or "")
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _reference_path(host: Host, plan: LaunchPlan) -> str:
    return f"{record_dir(host)}/references/{reference_key(plan)}.json"


def _endpoint_path(host: Host, name: str) -> str | None:
    return f"{record_dir(host)}/{name}.json" if CONTAINER_NAME.fullmatch(name) else None


def fingerprint_of(doc: dict[str, Any] | None) -> fp.Fingerprint | None:
    raw = doc.get("fingerprint") if doc else None
    return fp.Fingerprint.from_dict(raw) if isinstance(raw, dict) else None


def load_reference(host: Host, plan: LaunchPlan) -> dict[str, Any] | None:
    """The reference record of the plan's checkpoint and precision, if one was proven."""
    doc = _read(host, _reference_path(host, plan))
    return doc if fingerprint_of(doc) is not None else None


def load_endpoint(host: Host, name: str) -> dict[str, Any] | None:
    path = _endpoint_path(host, name)
    doc = _read(host, path) if path else None
    return doc if doc is not None and doc.get("name") == name else None


def load_all(host: Host) -> dict[str, dict[str, Any]]:
    """Every endpoint's record on the host, by name (one command, for ``ps``)."""
    result = host.run(["sh", "-c", _READ_ALL, "sh", record_dir(host)], timeout=30)
    records: dict[str, dict[str, Any]] = {}
    for line in result.stdout.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("name"), str):
            records[doc["name"]] = doc
    return records


def record(
    host: Host,
    name: str,
    plan: LaunchPlan,
    taken: fp.Fingerprint,
    verdict: fp.Check,
    *,
    image_digest: str | None,
    reference: bool = True,
) -> dict[str, Any]:
    """Keep the endpoint's proven fingerprint; the first of its checkpoint and precision
    becomes their reference (unless ``reference`` is False: an upgrade's candidate, not
    yet compared with the running endpoint). Best effort: a record that cannot be written
    only means the next serve has no reference."""
    at = now()
    doc: dict[str, Any] = {
        "name": name,
        "plan_hash": plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash),
        "checkpoint": plan.model,
        "precision": precision_of(plan),
        "platform": platform_of(plan),
        "image": plan.image if plan.launcher == "docker" else None,
        "image_digest": image_digest,
        "at": at,
        "fingerprint": taken.to_dict(),
        "check": verdict.to_dict(),
        "last_check": {"at": at, "ok": verdict.ok, "failure": verdict.failure},
        "last_passed_at": at if verdict.ok else None,
    }
    path = _endpoint_path(host, name)
    if path is not None:
        _write(host, path, doc)
    if reference and verdict.ok and load_reference(host, plan) is None:
        _write(host, _reference_path(host, plan), doc)
    return doc


def note_check(host: Host, name: str, verdict: fp.Check, cost: dict[str, Any]) -> str:
    """Keep one canary check on the endpoint's record (when it last passed); its time."""
    at = now()
    doc = load_endpoint(host, name)
    path = _endpoint_path(host, name)
    if doc is None or path is None:
        return at
    doc["last_check"] = {"at": at, "ok": verdict.ok, "failure": verdict.failure, **cost}
    if verdict.ok:
        doc["last_passed_at"] = at
    _write(host, path, doc)
    return at


def forget(host: Host, name: str) -> None:
    path = _endpoint_path(host, name)
    if path is not None:
        host.run(["rm", "-f", "--", path], timeout=30)


def summary(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """What ``ps``, ``top`` and the MCP status show of a record."""
    if not doc:
        return None
    raw = doc.get("last_check")
    last: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {
        "last_passed_at": doc.get("last_passed_at"),
        "last_check_at": last.get("at"),
        "ok": last.get("ok"),
        "failure": last.get("failure"),
    }
