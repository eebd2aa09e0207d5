"""Will a model fit? Weights, KV cache per attention kind, context and GPUs, as vLLM sizes them.

API for the planner (``estimate`` and ``alternatives`` are pure; the rest are adapters)::

    load_model_meta(model, *, revision=None, timeout=10.0, suggest=None) -> ModelMeta
        A hub id or local directory: local dir, HF cache (+ cached Hub answers), the Hub
        (HF_ENDPOINT, HF_HUB_OFFLINE, HF_TOKEN read at call time), shipped metadata.
        Errors: model_not_found (with close matches from ``suggest``), gated_model (names
        the license page), model_metadata_unavailable, no_config, hub_refused; for damaged
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
    find_alternatives(model_id, ctx, hw, opts) -> (list[Alternative], skipped)
        The adapter around ``alternatives``: recipe variants and Hub quantized siblings.
"""

from __future__ import annotations

from instinct_serve.fit.catalog_link import (
    LaunchContext,
    find_alternatives,
    fit_options,
    launch_context,
)
from instinct_serve.fit.estimate import (
    Alternative,
    Candidate,
    FitOptions,
    FitReport,
    HardwareSpec,
    alternatives,
    estimate,
)
from instinct_serve.fit.meta import ModelMeta
from instinct_serve.fit.sources import load_model_meta, load_shipped, shipped_model_ids
from instinct_serve.fit.vllm import DEFAULT_VLLM_VERSION

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
    "estimate",
    "find_alternatives",
    "fit_options",
    "launch_context",
    "load_model_meta",
    "load_shipped",
    "shipped_model_ids",
]
