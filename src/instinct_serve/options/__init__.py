"""The options of every job: declared once, validated once.

Each job has one options type (``FitRequest``, ``PlanOptions``, ``ServeOptions``,
``KubernetesOptions``, ``WatchOptions``, ``RollbackOptions``), a dataclass whose fields carry
their flag, kind, bounds, unit and help, the way vLLM's ``EngineArgs`` owns its CLI. The
click options (``cli.options``) and the MCP input models (``agents.inputs``) are generated
from these fields, and ``parse`` turns what a person typed or an agent sent into the typed
options with the same conversions, bounds and error ids (``{"error": {"id":
"bad_<option>", ...}}``, exit 2) whoever the caller is.

``spec`` holds the declaration machinery, ``jobs`` the options of fit, plan and serve,
``cluster`` those of the Kubernetes manifests, watch and rollback.
"""

from __future__ import annotations

from instinct_serve.options.cluster import KubernetesOptions, RollbackOptions, WatchOptions
from instinct_serve.options.jobs import (
    DEFAULT_MODEL,
    DEFAULT_PORT,
    LAUNCHERS,
    FitRequest,
    Launcher,
    PlanOptions,
    ServeOptions,
    SizingOptions,
    TargetOptions,
    launcher,
)
from instinct_serve.options.spec import JobOptions, Opt, declared, opt, option_of

# Every job's options type (the ``bad_<option>`` error ids are theirs: ``error_ids``).
JOB_OPTIONS: tuple[type[JobOptions], ...] = (
    FitRequest,
    PlanOptions,
    ServeOptions,
    KubernetesOptions,
    WatchOptions,
    RollbackOptions,
)

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_PORT",
    "JOB_OPTIONS",
    "LAUNCHERS",
    "FitRequest",
    "JobOptions",
    "KubernetesOptions",
    "Launcher",
    "Opt",
    "PlanOptions",
    "RollbackOptions",
    "ServeOptions",
    "SizingOptions",
    "TargetOptions",
    "WatchOptions",
    "declared",
    "launcher",
    "opt",
    "option_of",
]
