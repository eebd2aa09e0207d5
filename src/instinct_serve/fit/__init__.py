"""Will a model fit? Weights, KV cache per attention kind, context and GPUs, as vLLM sizes them.

API for the planner (pure: data in, data out; what reads disks and the Hub is in
``gather``)::

    gather.model_meta.load_model_meta(model, *, revision=None, timeout=10.0, suggest=None)
        -> ModelMeta
        A hub id or local directory: local dir, HF cache (+ cached Hub answers), the Hub
        (HF_ENDPOINT, HF_HUB_OFFLINE, HF_TOKEN read at call time), shipped metadata
        (``load_shipped``). Errors: model_not_found (with close matches from ``suggest``),
        gated_model (names the license page), model_metadata_unavailable, no_config,
        hub_refused; for damaged
        input: bad_config (config.json unreadable, too large, not a JSON object),
        bad_model_config (a value of the wrong type or outside ``config.INT_LIMITS``: key
        and value named), bad_safetensors, bad_safetensors_index, bad_model_metadata,
        model_dir_unreadable (permission denied, a link loop).
    launch_context(model_id, gpu) -> LaunchContext
        Recipe context_length, variants, AMD launch args, the image's vLLM version and the
        gfx's native/unsupported precisions from the catalog (best effort, never raises).
    fit_options(ctx, **explicit) -> (FitOptions, notes)
        Options from explicit values, then ``ctx.launch_args`` (a plan's argv works: TP,
        --max-model-len, --kv-cache-dtype, --speculative-config MTP, ...), then defaults.
    HardwareSpec.from_inventory(inventory) / HardwareSpec(vram_bytes, gpu_count, ...)
    (the GPUs themselves come from ``hardware.target``; ``gather.fit.fit_request`` runs the
    whole ``instinct fit``)
    estimate(meta, hw, opts) -> FitReport
        ``.verdict``, ``.tp``, ``.recommended_max_model_len``, ``.min_tp_required``,
        ``.fits``, ``.to_dict()`` (the DESIGN.md keys).
    alternatives(candidates, hw, opts, native_precisions, unsupported_precisions)
        -> list[Alternative], each verified with ``estimate`` and ranked.
    gather.alternatives.find_alternatives(model_id, ctx, hw, opts) -> (list[Alternative], skipped)
        The adapter around ``alternatives``: recipe variants and Hub quantized siblings.
    servers.get(name).memory_model(report_or_estimate, served.ServerLaunch) -> ServerFit
        The server's own answer from fit's sizing (``served``): vLLM's is the report itself;
        SGLang's (``sglang_answer``) its verdict, TP and context from its pool (``sglang``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, typed; at run time each loads on first use
    from instinct_serve.fit.alternatives import Alternative, Candidate, alternatives
    from instinct_serve.fit.catalog_link import (
        LaunchContext,
        fit_options,
        launch_context,
    )
    from instinct_serve.fit.estimate import FitOptions, FitReport, HardwareSpec
    from instinct_serve.fit.meta import ModelMeta
    from instinct_serve.fit.shipped import load_shipped, shipped_model_ids
    from instinct_serve.fit.vllm import DEFAULT_VLLM_VERSION

_LAZY: dict[str, str] = {
    "Alternative": "instinct_serve.fit.alternatives",
    "Candidate": "instinct_serve.fit.alternatives",
    "DEFAULT_VLLM_VERSION": "instinct_serve.fit.vllm",
    "FitOptions": "instinct_serve.fit.estimate",
    "FitReport": "instinct_serve.fit.estimate",
    "HardwareSpec": "instinct_serve.fit.estimate",
    "LaunchContext": "instinct_serve.fit.catalog_link",
    "ModelMeta": "instinct_serve.fit.meta",
    "alternatives": "instinct_serve.fit.alternatives",
    "fit_options": "instinct_serve.fit.catalog_link",
    "launch_context": "instinct_serve.fit.catalog_link",
    "load_shipped": "instinct_serve.fit.shipped",
    "shipped_model_ids": "instinct_serve.fit.shipped",
}


def __getattr__(name: str) -> Any:
    """Import a submodule on first use of one of its names: importing one part of ``fit``
    (``fit.kv``) does not load the estimator and the catalog link.
    (``estimate`` is also a submodule's name: import it from ``fit.estimate``.)"""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_VLLM_VERSION",
    "Alternative",
    "Candidate",
    "FitOptions",
    "FitReport",
    "HardwareSpec",
    "LaunchContext",
    "ModelMeta",
    "alternatives",
    "fit_options",
    "launch_context",
    "load_shipped",
    "shipped_model_ids",
]
