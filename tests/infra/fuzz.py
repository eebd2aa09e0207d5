"""Fuzzing plumbing for the safe-by-default audit (issue 19): what to throw at ``fit`` and
``plan``, how to run them in-process, and what counts as a correct answer.

Shared by ``tests/test_fuzz_audit.py`` (a fast, bounded run in CI) and
``bench/fuzz_audit.py`` (the larger campaign that prints the audit figures). It depends on
nothing but the CLI's entry point and the MCP server's handler, so the same campaign can be
run against an older checkout to measure "before".

A correct answer is a result (exit 0, or 1 for "does not fit") or an error whose id is in
``KNOWN_ERRORS`` (exit 1, 2 or 3), within ``LIMIT_S`` seconds, with no traceback and no
"Internal error". Everything else is a finding.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import struct
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from hypothesis import strategies as st

from tests.infra.paths import CONFIGS

LIMIT_S = 5.0  # the bound on one run
HANG_S = 20.0  # a run still going after this is stopped and counted as a hang

# The documented set of error ids a fit or plan may end in, and what each means. An id
# outside it (``internal_error`` above all) is a finding.
KNOWN_ERRORS: dict[str, str] = {
    # the model directory and its files
    "no_config": "the directory has no config.json",
    "bad_config": "config.json (or a Hub download) is unreadable, too large, not JSON or "
    "not a JSON object",
    "bad_model_config": "a config.json value is of the wrong type or outside the bounds of "
    "real models (the key and value are named)",
    "config_incomplete": "config.json lacks a value needed to size the model (KV cache or weights)",
    "bad_safetensors": "a safetensors header is truncated, too large, not JSON, or has an "
    "unknown dtype, an invalid shape or invalid offsets",
    "bad_safetensors_index": "model.safetensors.index.json is unreadable or names shards "
    "outside the directory, or its total_size is invalid",
    "bad_model_metadata": "weight figures (per-dtype counts, sizes) outside real bounds",
    "model_dir_unreadable": "the directory or a file in it cannot be examined (permission "
    "denied, a link loop)",
    "not_a_model_dir": "a path that is not a model directory",
    "model_dir_not_found": "plan: a path that does not exist",
    "model_dir_invalid": "plan: a directory without a config.json file",
    "bad_model_id": "plan: neither a hub id nor a model directory",
    "unknown_dtype": "a weight dtype the tool does not know",
    "weights_unknown": "no weight size: no safetensors metadata, family not modelled",
    "model_not_found": "not a hub id nor a directory",
    "model_metadata_unavailable": "offline and nothing on this machine has the model",
    "gated_model": "the Hub repo is gated and the token has no access",
    "hub_refused": "the Hub refused the metadata (HTTP error)",
    "revision_not_found": "--revision names no branch, tag or commit",
    # what the fit or plan refuses
    "bad_tp_for_model": "--tp does not divide the model's heads",
    "bad_context_length": "a recipe context_length out of bounds",
    "unsized_model": "plan: the model could not be sized, so no TP can be chosen",
    "does_not_fit": "plan: the model does not fit the GPUs",
    "too_tight": "plan: it fits with too little KV cache room",
    "max_model_len_too_large": "plan: the asked context does not fit",
    "no_valid_tp": "plan: no tensor-parallel size both fits and is allowed",
    "tp_not_allowed": "plan: --tp breaks a sharding constraint of the model",
    "tp_exceeds_gpus": "plan: the TP needs more GPUs than there are",
    "needs_newer_vllm": "plan: the recipe needs a newer vLLM than the image",
    "conflicting_precision": "plan: --precision disagrees with the checkpoint",
    "blacklisted": "plan: the model is not an LLM endpoint",
    "unknown_model": "plan: the model is in no source",
    "unknown_gpu": "no such GPU",
    "unknown_gfx": "no configuration for the gfx target",
    "unknown_feature_mode": "plan: a feature mode the recipe does not have",
    # options (options.py: bad_<option>, plus these)
    "bad_usage": "click's own usage errors (unknown option, missing value)",
    "bad_input": "MCP arguments that fail the tool's input schema",
    "unknown_option": "an option the job does not have",
    "unknown_gpu_profile": "--gpu/--gfx names no GPU",
    "bad_gfx": "--gpu and --gfx disagree",
    "bad_vram": "VRAM out of bounds, or both --vram-gb and --vram-gib",
    "bad_model": "no model, or a model that starts with '-'",
    "secret_in_args": "a token given a value on the command line",
    "bad_engine": "an unknown engine",
    "no_gpu_memory": "no GPU memory figure to fit against",
    "no_gpu": "detection found no GPU",
    "bad_gpus": "--gpus names devices that are not there",
    "bad_vllm_version": "--vllm-version is not a release number",
    "bad_kv_cache_dtype": "an unknown --kv-cache-dtype",
    "unknown_feature": "plan: a --feature the recipe does not have",
    "unknown_precision": "plan: a --precision no variant has",
    "unknown_variant": "plan: a variant the recipe does not have",
    "unsupported_precision": "plan: a precision the GPU cannot run",
}
KNOWN_PREFIXES = ("bad_",)  # bad_<option> from options.parse


def known_error(error_id: str | None) -> bool:
    if not error_id:
        return False
    return error_id in KNOWN_ERRORS or (
        error_id.startswith(KNOWN_PREFIXES) and error_id != "bad_unknown"
    )


# ------------------------------------------------------------------------ running


class Hang(BaseException):
    """A run that went past ``HANG_S`` (a BaseException: no ``except Exception`` eats it)."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``Hang`` in the main thread after ``seconds`` (SIGALRM; Unix)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    """One run: what came out, how long it took, and whether it is a correct answer."""

    surface: str  # cli | mcp | parse
    args: list[str] | dict[str, Any]
    code: int = 0
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    error_id: str | None = None
    hang: bool = False
    hang_s: float = HANG_S  # the run was stopped after this long
    crash: str = ""  # an exception that escaped (parse) or internal_error (mcp)
    doc: dict[str, Any] = field(default_factory=dict)
    # which error ids are a correct answer (fit and plan: KNOWN_ERRORS; every other
    # command: the registered ids, ``fuzz_commands.known_command_error``)
    known: Callable[[str | None], bool] = field(default=known_error, repr=False)

    @property
    def wants_json(self) -> bool:
        """A JSON answer is due: always over MCP and parse, with --json on the CLI."""
        if not isinstance(self.args, list):
            return True
        head = self.args[: self.args.index("--")] if "--" in self.args else self.args
        return "--json" in head

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stderr + self.stdout

    @property
    def internal_error(self) -> bool:
        return (
            "Internal error" in self.stderr or self.error_id == "internal_error" or bool(self.crash)
        )

    @property
    def label(self) -> str:
        """What the run ended in, for the audit's table: an error id, or ok/not_fit."""
        if self.hang:
            return "HANG"
        if self.internal_error:
            return "INTERNAL ERROR"
        if self.error_id:
            return self.error_id
        if self.code == 0:
            return "ok"
        if self.doc:
            return f"result (exit {self.code})"
        return f"error without --json (exit {self.code})"

    def problems(self, codes: tuple[int, ...] = (0, 1, 2, 3)) -> list[str]:
        """Why this run is not a correct answer (empty when it is)."""
        found = []
        if self.hang:
            found.append(f"hang (stopped after {self.hang_s:g} s)")
        elif self.seconds > LIMIT_S:
            found.append(f"took {self.seconds:.1f} s (> {LIMIT_S:g} s)")
        if self.traceback:
            found.append("traceback")
        if self.internal_error:
            found.append(f"internal error: {self.crash or self.stderr.strip()[-300:]}")
        if self.code not in codes:
            found.append(f"exit {self.code} (expected one of {codes})")
        if self.error_id is not None and not self.known(self.error_id):
            found.append(f"unknown error id {self.error_id!r}")
        if self.code > 0 and self.error_id is None and not self.doc and self.wants_json:
            found.append(f"exit {self.code} without an error document")
        return found

    def describe(self) -> str:
        return f"{self.surface} {self.args!r}: {'; '.join(self.problems()) or self.label}"


def _error_of(text: str) -> tuple[str | None, dict[str, Any]]:
    """The error id of a ``--json`` output, and the document (empty when none); for JSON
    Lines (``serve --json``: events, then the result), the last line."""
    try:
        doc = json.loads(text)
    except ValueError:
        lines = text.strip().splitlines()
        try:
            doc = json.loads(lines[-1]) if lines else None
        except ValueError:
            return None, {}
    if not isinstance(doc, dict):
        return None, {}
    error = doc.get("error")
    if isinstance(error, dict):
        return str(error.get("id")), doc
    return None, doc


def run_cli(argv: list[str], *, hang_s: float = HANG_S) -> Outcome:
    """``instinct ARGV`` in this process (``cli.main.main``), output captured."""
    from instinct_serve.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    outcome = Outcome("cli", list(argv), hang_s=hang_s)
    start = time.monotonic()
    stdin = sys.stdin
    sys.stdin = io.StringIO("")  # a prompt or `-` reads an empty stdin, never the terminal
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), time_limit(hang_s):
            main(list(argv))
    except SystemExit as exc:
        outcome.code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Hang:
        outcome.hang, outcome.code = True, -1
    except Exception as exc:  # main never lets one out (unless INSTINCT_DEBUG): a finding
        import traceback

        outcome.code, outcome.crash = -2, f"{type(exc).__name__}: {exc}"
        outcome.crash += "\n" + "".join(traceback.format_exc(limit=-6))
    finally:
        sys.stdin = stdin
    outcome.seconds = time.monotonic() - start
    outcome.stdout, outcome.stderr = out.getvalue(), err.getvalue()
    outcome.error_id, outcome.doc = _error_of(outcome.stdout)
    return outcome


def run_mcp(tool: str, arguments: dict[str, Any], *, hang_s: float = HANG_S) -> Outcome:
    """One MCP tool call through the server's own handler (``agents.server.call_tool``)."""
    import anyio
    from mcp_types import CallToolRequestParams

    from instinct_serve.agents.server import EXIT_CODE_META, call_tool

    outcome = Outcome("mcp", dict(arguments), hang_s=hang_s)
    params = CallToolRequestParams(name=tool, arguments=arguments)
    start = time.monotonic()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), time_limit(hang_s):
            result = anyio.run(call_tool, None, params)
    except Hang:
        outcome.hang, outcome.code = True, -1
        outcome.seconds = time.monotonic() - start
        return outcome
    except Exception as exc:
        outcome.code, outcome.crash = -2, f"{type(exc).__name__}: {exc}"
        outcome.seconds = time.monotonic() - start
        return outcome
    outcome.seconds = time.monotonic() - start
    outcome.stderr = err.getvalue()
    doc = result.structured_content if isinstance(result.structured_content, dict) else {}
    outcome.doc = doc
    outcome.code = int((result.meta or {}).get(EXIT_CODE_META, 0))
    error = doc.get("error") if result.is_error else None
    if isinstance(error, dict):
        outcome.error_id = str(error.get("id"))
        if outcome.error_id == "internal_error":
            outcome.crash = str(error.get("message"))
    return outcome


def run_parse(parse: Callable[[Mapping[str, Any]], Any], raw: dict[str, Any]) -> Outcome:
    """``options.<Job>.parse(raw)``: options, or a UsageError with a known id."""
    from instinct_serve.errors import InstinctError

    outcome = Outcome("parse", dict(raw))
    start = time.monotonic()
    try:
        with time_limit(HANG_S):
            parse(raw)
    except InstinctError as exc:
        outcome.code, outcome.error_id = int(exc.exit_code), exc.id
    except Hang:
        outcome.hang, outcome.code = True, -1
    except Exception as exc:
        outcome.code, outcome.crash = -2, f"{type(exc).__name__}: {exc}"
    else:
        outcome.doc = {"parsed": True}
    outcome.seconds = time.monotonic() - start
    return outcome


@contextlib.contextmanager
def isolated_env(root: Path) -> Iterator[None]:
    """Offline, with the instinct and HF caches under ``root`` (the bench's isolation; the
    tests get theirs from tests/conftest.py)."""
    keep = dict(os.environ)
    os.environ.update(
        {
            "HF_HUB_OFFLINE": "1",
            "INSTINCT_CACHE_DIR": str(root / "instinct-cache"),
            "INSTINCT_DATA_DIR": str(root / "instinct-data"),
            "HF_HOME": str(root / "hf"),
        }
    )
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ROCM_SSH_HOST", "ROCM_SSH_USER"):
        os.environ.pop(name, None)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(keep)


# ------------------------------------------------------------------------ values

# Every config.json key the estimator reads as a number (``fit.config.INT_LIMITS`` and the
# tower's; tests/test_fuzz_audit.py keeps this list complete), and the other keys it reads.
NUMBER_KEYS = [
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "num_nextn_predict_layers",
    "mtp_num_hidden_layers",
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "full_attention_interval",
    "attn_layer_period",
    "attn_layer_offset",
    "sliding_window_pattern",
    "no_rope_layer_interval",
    "hidden_size",
    "d_model",
    "n_embd",
    "intermediate_size",
    "ffn_dim",
    "ffn_hidden_size",
    "n_inner",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "mamba_intermediate_size",
    "num_attention_heads",
    "n_head",
    "num_heads",
    "num_key_value_heads",
    "num_kv_heads",
    "multi_query_group_num",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "mamba_num_heads",
    "n_groups",
    "mamba_n_groups",
    "head_dim",
    "head_size",
    "v_head_dim",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "mamba_head_dim",
    "ssm_state_size",
    "mamba_d_state",
    "state_size",
    "kv_lora_rank",
    "q_lora_rank",
    "linear_conv_kernel_dim",
    "mamba_d_conv",
    "conv_kernel",
    "mamba_expand",
    "expand",
    "vocab_size",
    "padded_vocab_size",
    "max_position_embeddings",
    "max_sequence_length",
    "seq_length",
    "n_positions",
    "sliding_window",
    "attention_chunk_size",
    "num_experts",
    "n_routed_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "experts_per_token",
    "moe_topk",
    "n_shared_experts",
]
TOWER_KEYS = [
    "depth",
    "hidden_size",
    "intermediate_size",
    "out_hidden_size",
    "spatial_merge_size",
    "patch_size",
    "temporal_patch_size",
    "in_channels",
    "num_position_embeddings",
    "deepstack_visual_indexes",
]
OTHER_KEYS = [
    "model_type",
    "architectures",
    "torch_dtype",
    "dtype",
    "tie_word_embeddings",
    "quantization_config",
    "layer_types",
    "layers_block_type",
    "mlp_only_layers",
    "no_rope_layers",
    "hybrid_override_pattern",
    "use_sliding_window",
    "multi_query",
    "attention_bias",
    "mlp_bias",
    "attn_output_gate",
    "topk_method",
    "mamba_ssm_dtype",
    "rope_scaling",
    "rope_parameters",
    "text_config",
    "vision_config",
    "mtp_use_dedicated_embeddings",
]
MODEL_TYPES = [
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "gpt_oss",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_moe",
    "gemma2",
    "gemma3",
    "jamba",
    "mamba",
    "nemotron_h",
    "llama4",
    "opt",
]

HUGE = [2**31, 2**53 + 1, 2**63, 2**64, 10**30, 10**300]
numbers = st.one_of(
    st.integers(min_value=-8, max_value=4096),
    st.integers(),
    st.sampled_from([0, -1, 1, *HUGE, *(-h for h in HUGE)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.5, 1e30, 1e308, float("nan"), float("inf"), -float("inf")]),
)
texts = st.one_of(
    st.text(max_size=16),
    st.sampled_from(["", "64", "1e30", "nan", "NaN", "-1", "32k", "bfloat16", "\x00", "é" * 3]),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=200, max_size=600),
)
leaves = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)


def base_configs() -> dict[str, dict[str, Any]]:
    """The real configs of tests/fixtures/configs (every family the estimator models)."""
    out = {}
    for path in sorted(CONFIGS.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict):
            out[path.stem] = doc
    return out


BASES = base_configs()


def _value_for(key: str) -> st.SearchStrategy[Any]:
    if key == "model_type":
        return st.one_of(st.sampled_from(MODEL_TYPES), json_values)
    if key in ("layer_types", "layers_block_type"):
        kinds = st.sampled_from(["full_attention", "linear_attention", "sliding_attention", "x"])
        return st.one_of(st.lists(kinds, max_size=2000), json_values)
    if key in ("mlp_only_layers", "no_rope_layers", "deepstack_visual_indexes"):
        return st.one_of(st.lists(numbers, max_size=8), json_values)
    if key == "quantization_config":
        block = st.one_of(st.lists(numbers, max_size=3), json_values)
        return st.one_of(
            st.fixed_dictionaries(
                {"quant_method": st.sampled_from(["fp8", "mxfp4", "awq", "gptq", "x"])},
                optional={"weight_block_size": block, "config_groups": json_values},
            ),
            json_values,
        )
    if key in ("rope_scaling", "rope_parameters"):
        return st.one_of(st.fixed_dictionaries({"factor": numbers}), json_values)
    return st.one_of(numbers, json_values)


@st.composite
def config_docs(draw: st.DrawFn) -> dict[str, Any]:
    """A real config with one to four values replaced (top level, text or vision config)."""
    name = draw(st.sampled_from(sorted(BASES)))
    doc = json.loads(json.dumps(BASES[name]))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        where = draw(st.sampled_from(["top", "text_config", "vision_config"]))
        if where == "vision_config":
            key = draw(st.sampled_from(TOWER_KEYS))
        else:
            key = draw(st.sampled_from(NUMBER_KEYS + OTHER_KEYS))
        target = doc.get(where) if where != "top" else doc
        if not isinstance(target, dict):
            target = doc
        if draw(st.integers(min_value=0, max_value=9)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(_value_for(key))
    return doc


def dumps(doc: Any) -> bytes:
    """JSON as a writer that knows no bounds would write it (NaN and Infinity included)."""
    return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")


# ------------------------------------------------------------------------ model directories


class Entry(NamedTuple):
    """One thing in a model directory: a file's bytes, or something that is not a file."""

    kind: str  # bytes | dir | loop | dangling | fifo | sparse | unreadable
    data: bytes = b""


SPECIAL = st.sampled_from(
    [
        Entry("dir"),
        Entry("loop"),
        Entry("dangling"),
        Entry("fifo"),
        Entry("sparse"),
    ]
)

_DTYPES = ["BF16", "F16", "F32", "F8_E4M3", "U8", "I32", "F4", "bf16", "F128", "", "INT4"]
_TENSOR_NAMES = [
    "model.embed_tokens.weight",
    "lm_head.weight",
    "model.layers.0.mlp.down_proj.weight",
    "model.layers.99999999999999999999.mlp.up_proj.weight",
    "model.layers.3.self_attn.q_proj.weight",
    "model.visual.blocks.0.attn.qkv.weight",
    "mtp.layers.0.mlp.up_proj.weight",
    "__metadata__",
]


@st.composite
def tensor_tables(draw: st.DrawFn) -> dict[str, Any]:
    """A safetensors header table: valid entries, some of them broken."""
    table: dict[str, Any] = {}
    offset = 0
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        name = draw(st.one_of(st.sampled_from(_TENSOR_NAMES), st.text(max_size=12)))
        dtype = draw(st.sampled_from(_DTYPES[:6]))
        shape = draw(st.lists(st.integers(min_value=0, max_value=64), min_size=1, max_size=3))
        size = 1
        for dim in shape:
            size *= dim
        entry: Any = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
        broken = draw(st.integers(min_value=0, max_value=7))
        if broken == 1:
            entry["dtype"] = draw(st.one_of(st.sampled_from(_DTYPES), json_values))
        elif broken == 2:
            entry["shape"] = draw(st.one_of(st.lists(numbers, max_size=20), json_values))
        elif broken == 3:
            entry["data_offsets"] = draw(st.one_of(st.lists(numbers, max_size=3), json_values))
        elif broken == 4:
            entry = draw(json_values)
        elif broken == 5:
            del entry[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))]
        table[name] = entry
    if draw(st.booleans()):
        table["__metadata__"] = draw(st.one_of(st.just({"format": "pt"}), json_values))
    return table


@st.composite
def safetensors_files(draw: st.DrawFn) -> Entry:
    """A ``.safetensors`` file: a good header, a broken one, a lying length, or no file."""
    how = draw(st.integers(min_value=0, max_value=9))
    if how == 0:
        return draw(SPECIAL)
    table: Any = draw(tensor_tables())
    if how == 1:
        table = draw(json_values)
    header = dumps(table)
    if how == 2:
        header = draw(st.binary(max_size=64))
    length = len(header)
    if how == 3:
        length = draw(
            st.one_of(
                st.sampled_from([0, 1, 2**64 - 1, 100 * 2**20 + 1, length + 100]),
                st.integers(min_value=0, max_value=2**64 - 1),
            )
        )
    data = struct.pack("<Q", length) + header + bytes(draw(st.integers(0, 256)))
    if how == 4:
        data = data[: draw(st.integers(min_value=0, max_value=len(data)))]
    if how == 5:
        return Entry("unreadable", data)
    return Entry("bytes", data)


@st.composite
def index_files(draw: st.DrawFn, shards: list[str]) -> Entry:
    """``model.safetensors.index.json``: pointing at the shards, nowhere, or outside."""
    how = draw(st.integers(min_value=0, max_value=6))
    if how == 0:
        return draw(SPECIAL)
    if how == 1:
        return Entry("bytes", draw(st.one_of(st.binary(max_size=40), json_values.map(dumps))))
    names = st.one_of(
        st.sampled_from(shards or ["model.safetensors"]),
        st.sampled_from(
            [
                "missing.safetensors",
                "/etc/passwd",
                "../config.json",
                "sub/dir.safetensors",
                "",
                "config.json",
                "a\\b.safetensors",
                "x" * 300,
            ]
        ),
        json_values,
    )
    weight_map: Any = {f"t{i}": draw(names) for i in range(draw(st.integers(0, 4)))}
    if how == 2:
        weight_map = draw(json_values)
    metadata: Any = {"total_size": draw(st.one_of(st.integers(0, 2**40), numbers, json_values))}
    if how == 3:
        metadata = draw(json_values)
    doc = {"metadata": metadata, "weight_map": weight_map}
    return Entry("bytes", dumps(doc))


@st.composite
def config_files(draw: st.DrawFn) -> Entry | None:
    """config.json: a (damaged) real config, not JSON, not an object, not a file, absent."""
    how = draw(st.integers(min_value=0, max_value=11))
    if how <= 4:
        return Entry("bytes", dumps(draw(config_docs())))
    if how == 5:
        data = dumps(draw(config_docs()))
        return Entry("bytes", data[: draw(st.integers(min_value=0, max_value=len(data)))])
    if how == 6:
        return Entry(
            "bytes",
            draw(
                st.sampled_from(
                    [
                        b"",
                        b"{",
                        b"\xff\xfe{}",
                        b"[" * 100_000 + b"]" * 100_000,
                        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
                        b"1" * 5000,
                        b"NaN",
                        b'{"num_hidden_layers": 1' + b"0" * 5000 + b"}",
                    ]
                )
            ),
        )
    if how == 7:
        return Entry("bytes", dumps(draw(json_values.filter(lambda v: not isinstance(v, dict)))))
    if how == 8:
        return Entry("bytes", draw(st.binary(max_size=64)))
    if how == 9:
        return draw(SPECIAL)
    if how == 10:
        return Entry("unreadable", dumps(draw(config_docs())))
    return None


@st.composite
def model_dirs(draw: st.DrawFn) -> dict[str, Entry]:
    """A model directory: config.json, zero to three shards and maybe an index."""
    entries: dict[str, Entry] = {}
    config = draw(config_files())
    if config is not None:
        entries["config.json"] = config
    count = draw(st.integers(min_value=0, max_value=3))
    names = (
        ["model.safetensors"]
        if count == 1
        else [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]
    )
    for name in names:
        entries[name] = draw(safetensors_files())
    if count and draw(st.booleans()):
        entries["model.safetensors.index.json"] = draw(index_files(names))
    return entries


def build_dir(root: Path, entries: Mapping[str, Entry]) -> Path:
    """Write ``entries`` into a new directory ``root/model``."""
    folder = root / "model"
    folder.mkdir(parents=True)
    for name, entry in entries.items():
        path = folder / name
        if entry.kind == "dir":
            path.mkdir()
        elif entry.kind == "loop":
            path.symlink_to(name)
        elif entry.kind == "dangling":
            path.symlink_to("nowhere/at/all")
        elif entry.kind == "fifo":
            os.mkfifo(path)
        elif entry.kind == "sparse":
            with path.open("wb") as fh:
                fh.truncate(200 * 2**20)  # a hole: no disk used, but too large to be a header
        else:
            path.write_bytes(entry.data)
            if entry.kind == "unreadable":
                path.chmod(0)
    return folder
