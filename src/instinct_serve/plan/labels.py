"""The labels of the containers the tool starts (DESIGN.md contract).

Pure data: the planner writes them into every plan, and ``runtime.docker`` filters on them
so that ``ps``/``stop`` only ever touch what the tool created.
"""

from __future__ import annotations

from collections.abc import Mapping

from instinct_serve import __version__

LABEL_MANAGED = "instinct-serve.managed"
LABEL_MODEL = "instinct-serve.model"
LABEL_PORT = "instinct-serve.port"
LABEL_PLAN_HASH = "instinct-serve.plan-hash"
LABEL_VERSION = "instinct-serve.version"
MANAGED_VALUE = "true"


def managed_labels(
    *, model: str, port: int, plan_hash: str, version: str = __version__
) -> dict[str, str]:
    """The labels every container the tool starts carries (DESIGN.md contract)."""
    return {
        LABEL_MANAGED: MANAGED_VALUE,
        LABEL_MODEL: model,
        LABEL_PORT: str(port),
        LABEL_PLAN_HASH: plan_hash,
        LABEL_VERSION: version,
    }


def label_args(labels: Mapping[str, str]) -> list[str]:
    """``--label k=v`` pairs for a ``docker run`` argv, in a stable order."""
    out: list[str] = []
    for key in sorted(labels):
        out += ["--label", f"{key}={labels[key]}"]
    return out
