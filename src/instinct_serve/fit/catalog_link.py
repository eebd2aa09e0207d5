"""What ``fit`` takes from the catalog: native context, launch flags, variants, precisions.

The estimator never imports the catalog; this adapter reads it once for the CLI (and the
planner can build the same ``LaunchContext`` from its own plan). Everything is best
effort: a model outside the catalog, or a catalog that cannot load, gives an empty context
with a note, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from instinct_serve.fit.alternatives import Alternative
    from instinct_serve.fit.estimate import FitOptions, FitReport
    from instinct_serve.fit.estimated import EstimatedFit
    from instinct_serve.fit.overhead import CudagraphConfig
    from instinct_serve.fit.served import ServerFit


@dataclass
class LaunchContext:
    """Catalog facts for one model on one GPU kind."""

    recipe_model_id: str | None = None
    match_kind: str | None = None
    context_length: int | None = None
    precision: str | None = None
    variants: list[tuple[str, str | None, str]] = field(
        default_factory=list
    )  # (id, precision, key)
    native_precisions: list[str] | None = None
    unsupported_precisions: list[str] = field(default_factory=lambda: ["nvfp4"])
    launch_args: list[str] = field(default_factory=list)
    vllm_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # the launch's environment (VLLM_USE_V1)
    parameter_count: str | None = None  # the recipe's ("36B"): the ``estimated`` size basis
    image: str | None = None
    notes: list[str] = field(default_factory=list)
    # whose flags ``launch_args`` are, as notes name them: the recipe's (``launch_context``),
    # or a plan's argv (the recipe's, AMD's reference config and the user's ``-- ARGS``)
    flags_origin: str = "the launch flags"

    def flag(self, name: str) -> str | None:
        """The last value of ``--name`` in the launch args (``vllm_args.value``)."""
        from instinct_serve import vllm_args

        return vllm_args.value(self.launch_args, name)

    def has_flag(self, name: str) -> bool:
        from instinct_serve import vllm_args

        return vllm_args.has(self.launch_args, name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe_model_id,
            "match": self.match_kind,
            "context_length": self.context_length,
            "precision": self.precision,
            "image": self.image,
            "vllm_version": self.vllm_version,
            "launch_args": self.launch_args,
            "notes": self.notes,
        }


def launch_context(model_id: str, gpu: str | None) -> LaunchContext:
    """Recipe context length, variants, AMD launch flags and image for ``model_id``."""
    ctx = LaunchContext()
    try:
        from instinct_serve.catalog import (
            amd_config,
            load_catalog,
            load_gpu_overrides,
            lookup,
        )
        from instinct_serve.catalog.matching import image_version
    except Exception as exc:  # the catalog is optional for fit
        ctx.notes.append(f"catalog unavailable ({type(exc).__name__})")
        return ctx
    try:
        catalog = load_catalog()
        match = lookup(model_id, catalog)
    except Exception as exc:
        ctx.notes.append(f"catalog lookup failed: {exc}")
        return ctx
    ctx.match_kind = match.kind
    ctx.image = catalog.docker_image
    if match.recipe is not None:
        recipe = match.recipe
        ctx.recipe_model_id = recipe.model_id
        ctx.context_length = recipe.context_length
        variant = match.variant
        ctx.precision = variant.precision if variant else None
        ctx.parameter_count = recipe.parameter_count
        for v in recipe.variants.values():
            ctx.variants.append((v.model_id, v.precision, v.key))
    elif match.legacy is not None:
        ctx.parameter_count = match.legacy.parameter_count
    if match.blacklist is not None:
        ctx.notes.append(f"blacklisted in the catalog: {match.blacklist.reason}")
    if gpu:
        try:
            cfg = amd_config(match, gpu)
            ctx.launch_args = list(cfg.args)
            ctx.env = dict(cfg.env)  # VLLM_ROCM_USE_AITER and the like pick overhead rows
            ctx.flags_origin = f"the recipe's flags for {gpu}"
            ctx.image = cfg.image or ctx.image
            if cfg.context_length and not ctx.context_length:
                ctx.context_length = cfg.context_length
            gfx = cfg.gfx
            prec = load_gpu_overrides().config(gfx).precision
            ctx.native_precisions = sorted(prec.native)
            ctx.unsupported_precisions = sorted(prec.unsupported)
        except Exception as exc:
            ctx.notes.append(f"no AMD launch flags for {gpu}: {exc}")
    release = image_version(ctx.image)
    if release:
        ctx.vllm_version = ".".join(str(p) for p in release)
    return ctx


def _cast(value: str | None, kind: Callable[[str], Any]) -> Any:
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        return None


def fit_options(
    ctx: LaunchContext,
    *,
    tp: int | None = None,
    max_model_len: int | None = None,
    kv_cache_dtype: str | None = None,
    gpu_memory_utilization: float | None = None,
    vllm_version: str | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    block_size: int | None = None,
    enforce_eager: bool = False,
    language_model_only: bool = False,
    speculative_mtp: int = 0,
    enable_prefix_caching: bool = False,
    engine: str | None = None,
    pipeline_parallel_size: int = 1,
    kv_cache_memory: int | None = None,
    compilation_config: str | None = None,
) -> tuple[FitOptions, list[str]]:
    """``FitOptions`` for a launch: explicit values win, then the flags in
    ``ctx.launch_args`` (the catalog's AMD args, or a plan's whole ``vllm serve`` argv),
    then vLLM's defaults for the version. Returns the options and a note per flag taken
    from the launch args."""
    from instinct_serve.fit.estimate import FitOptions
    from instinct_serve.units import token_count

    notes: list[str] = []

    def taken(flag: str, kind: Callable[[str], Any]) -> Any:
        value = _cast(ctx.flag(flag), kind)
        if value is not None:
            notes.append(f"{flag} {ctx.flag(flag)} from {ctx.flags_origin}")
        return value

    if gpu_memory_utilization is None:
        gpu_memory_utilization = taken("--gpu-memory-utilization", float)
    block_size = block_size or taken("--block-size", int)
    kv_cache_dtype = kv_cache_dtype or taken("--kv-cache-dtype", str) or "auto"
    max_num_seqs = max_num_seqs or taken("--max-num-seqs", int)
    max_num_batched_tokens = max_num_batched_tokens or taken("--max-num-batched-tokens", int)
    max_model_len = max_model_len or taken("--max-model-len", token_count)
    tp = tp or taken("--tensor-parallel-size", int) or taken("-tp", int)
    if pipeline_parallel_size == 1:
        pipeline_parallel_size = taken("--pipeline-parallel-size", int) or taken("-pp", int) or 1
    language_model_only = language_model_only or ctx.has_flag("--language-model-only")
    enforce_eager = enforce_eager or ctx.has_flag("--enforce-eager")
    enable_prefix_caching = enable_prefix_caching or ctx.has_flag("--enable-prefix-caching")
    speculative_mtp = speculative_mtp or _mtp_tokens(ctx.launch_args, notes, ctx.flags_origin)
    cudagraph = _cudagraph_config(compilation_config or ctx.flag("--compilation-config"), notes)
    use_v1 = ctx.env.get("VLLM_USE_V1")
    v2_runner = ctx.env.get("VLLM_USE_V2_MODEL_RUNNER", "").strip() == "1"
    # "To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0" (the v0.21+ startup log)
    graphs = ctx.env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "").strip() != "0"
    options = FitOptions(
        engine=engine,
        use_v1_env=use_v1,
        v2_model_runner=v2_runner,
        estimate_graphs=graphs,
        pipeline_parallel_size=pipeline_parallel_size,
        kv_cache_memory_bytes=kv_cache_memory,
        tp=tp,
        max_model_len=max_model_len,
        native_max_model_len=ctx.context_length or None,  # upstream writes 0 for "unknown"
        native_source="recipe context_length" if ctx.context_length else None,
        kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        vllm_version=vllm_version or ctx.vllm_version,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        enforce_eager=enforce_eager,
        language_model_only=language_model_only,
        speculative_mtp=speculative_mtp,
        enable_prefix_caching=enable_prefix_caching,
        cudagraph=cudagraph,
        env=tuple(sorted(ctx.env.items())),
    )
    return options, notes


def _mtp_tokens(args: list[str], notes: list[str], origin: str = "the launch flags") -> int:
    """The MTP draft tokens the launch's ``--speculative-config`` asks for (0: none, or no
    MTP). JSON that does not parse is left to vLLM (it refuses it at startup)."""
    from instinct_serve.vllm_args import mtp_tokens, speculative_config

    tokens = mtp_tokens(speculative_config(args))
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        from instinct_serve.errors import UsageError

        raise UsageError(
            f"--speculative-config num_speculative_tokens {str(tokens)[:40]!r} in the "
            "launch flags is not a whole number",
            fix="give num_speculative_tokens as a number, e.g. "
            '{"method": "mtp", "num_speculative_tokens": 1}',
            id="bad_speculative_mtp",
        )
    if tokens:
        notes.append(f"MTP speculative decoding ({tokens} tokens) from {origin}")
    return tokens


def _cudagraph_config(text: str | None, notes: list[str]) -> CudagraphConfig | None:
    """The graph keys of ``--compilation-config`` JSON (``cudagraph_capture_sizes``,
    ``max_cudagraph_capture_size``, ``cudagraph_mode``); None when it sets none of them.
    JSON that does not parse is left to vLLM (it refuses it at startup)."""
    from instinct_serve.errors import UsageError
    from instinct_serve.fit.overhead import CudagraphConfig
    from instinct_serve.fit.vllm import CUDAGRAPH_MODES

    if not text:
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    sizes, top, mode = (
        doc.get("cudagraph_capture_sizes"),
        doc.get("max_cudagraph_capture_size"),
        doc.get("cudagraph_mode"),
    )

    def bad(key: str, value: Any, want: str) -> UsageError:
        return UsageError(
            f"--compilation-config {key} {str(value)[:40]!r} is not {want}",
            fix=f"give {key} as {want}, or drop it to take vLLM's default",
            id="bad_compilation_config",
        )

    if sizes is not None and not (
        isinstance(sizes, list)
        and sizes
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes)
    ):
        raise bad("cudagraph_capture_sizes", sizes, "a list of positive whole numbers")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise bad("max_cudagraph_capture_size", top, "a positive whole number")
    if mode is not None and (not isinstance(mode, str) or mode.upper() not in CUDAGRAPH_MODES):
        raise bad("cudagraph_mode", mode, "one of " + ", ".join(CUDAGRAPH_MODES))
    if sizes is None and top is None and mode is None:
        return None
    notes.append("CUDA graph settings from --compilation-config")
    return CudagraphConfig(
        capture_sizes=tuple(sizes) if sizes is not None else None,
        max_capture_size=top,
        mode=mode.upper() if mode is not None else None,
    )


@dataclass
class FitAnswer:
    """``instinct fit``'s answer: the report with its catalog context and alternatives."""

    report: FitReport | None  # None: no metadata, only ``estimated``
    context: LaunchContext
    alternatives: list[Alternative]
    skipped: list[str]
    tp_asked: bool
    estimated: EstimatedFit | None = None
    # the server's own answer from ``report`` (``fit.served``; vLLM's is the report itself)
    served: ServerFit | None = None

    @property
    def answer(self) -> ServerFit | EstimatedFit:
        """What fit answers: the server's, else the estimate made without metadata."""
        done = self.served or self.report or self.estimated
        assert done is not None
        return done

    @property
    def failed(self) -> bool:
        """Does not fit as asked: no room, too tight, or more GPUs than asked or present."""
        done = self.answer
        verdict = done.verdict
        return verdict in ("does_not_fit", "too_tight") or (
            verdict == "needs_tp" and (self.tp_asked or done.min_tp_required is None)
        )

    def to_dict(self) -> dict[str, Any]:
        doc = self.answer.to_dict()
        doc["catalog"] = self.context.to_dict()
        doc["alternatives"] = [a.to_dict() for a in self.alternatives]
        doc["alternatives_skipped"] = self.skipped
        return doc
