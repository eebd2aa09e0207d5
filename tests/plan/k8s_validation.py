"""Offline validation of rendered Kubernetes objects, as strictly as ``kubectl apply`` checks.

* Core kinds: the ``kubernetes`` client's typed models (wrong types, missing required
  fields) and the OpenAPI schemas ``kubernetes-validate`` ships, in their strict form
  (unknown fields are errors, as with kubectl's default ``--validate=strict``), for the
  oldest Kubernetes the AMD GPU Operator supports and the newest the package knows.
* CRDs (LeaderWorkerSet, ScaledObject): ``spec.versions[].schema.openAPIV3Schema`` of the
  CRD files in ``tests/data/schemas`` with ``jsonschema``, made strict the same way
  (``additionalProperties: false`` wherever the schema lists properties and does not
  preserve unknown fields), since the API server rejects unknown fields of custom objects
  under strict field validation too.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

SCHEMAS = Path(__file__).resolve().parents[1] / "data" / "schemas"
CRD_FILES = (
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    "keda.sh_scaledobjects.yaml",
)
CORE_MODELS = {
    "PersistentVolumeClaim": "V1PersistentVolumeClaim",
    "Deployment": "V1Deployment",
    "Service": "V1Service",
    "PodDisruptionBudget": "V1PodDisruptionBudget",
}
KUBERNETES_VERSIONS = ("1.29.0", "latest")


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def crd_schemas() -> dict[tuple[str, str], Any]:
    """(apiVersion, kind) -> the strict JSON schema of that custom object."""
    found: dict[tuple[str, str], Any] = {}
    for name in CRD_FILES:
        text = (SCHEMAS / name).read_text(encoding="utf-8")
        crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = _strict(version["schema"]["openAPIV3Schema"])
                found[(f"{group}/{version['name']}", kind)] = schema
    return found


def validate_custom(obj: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` (or KeyError for an unknown kind/version)."""
    import jsonschema

    schema = crd_schemas()[(obj["apiVersion"], obj["kind"])]
    body = copy.deepcopy(obj)
    # ObjectMeta is checked by the API server itself (the CRD schema only says "object")
    meta = body.pop("metadata")
    assert isinstance(meta.get("name"), str) and meta["name"], meta
    jsonschema.Draft7Validator(schema).validate(body)


def validate_core(obj: dict[str, Any]) -> Any:
    """The typed client object; raises ValueError or ``kubernetes_validate`` errors."""
    import kubernetes
    import kubernetes_validate

    for version in KUBERNETES_VERSIONS:
        target = kubernetes_validate.latest_version() if version == "latest" else version
        kubernetes_validate.validate(obj, target, strict=True)
    api = kubernetes.client.ApiClient()
    return api.deserialize(json.dumps(obj), CORE_MODELS[obj["kind"]], "application/json")


def validate(obj: dict[str, Any]) -> Any:
    """Any rendered object: the typed model for core kinds, the object for custom ones."""
    if obj["kind"] in CORE_MODELS:
        return validate_core(obj)
    validate_custom(obj)
    return obj
