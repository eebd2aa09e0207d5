"""Safe by default (issue 19): every number of a config, a safetensors header or an index is
bounded before arithmetic, and every damaged model directory ends in a specific error id.

The audit's causes, each pinned: ``num_hidden_layers: 1e30`` hung ``fit`` (1e7 took 60 s
and 1.35 GB); heads or KV heads of 0 divided by zero; wrong types, NaN, huge header
lengths, nested JSON, link loops and FIFOs ended in "Internal error" or waited forever.
"""

from __future__ import annotations

import ast
import json
import os
import re
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from instinct_serve.errors import UsageError
from instinct_serve.fit.catalog_link import LaunchContext, fit_options
from instinct_serve.fit.config import (
    INT_LIMITS,
    MAX_POSITIONS,
    TOWER_INT_LIMITS,
    ModelConfig,
)
from instinct_serve.fit.estimate import FitOptions, HardwareSpec, estimate
from instinct_serve.fit.meta import ModelMeta
from instinct_serve.fit.params import count_parameters
from instinct_serve.gather.model_dir import read_local_dir
from instinct_serve.gather.model_meta import load_model_meta
from instinct_serve.options import FitRequest, option_of
from tests.fit.st_files import write_safetensors
from tests.fit.test_local import small_config
from tests.infra import fuzz
from tests.infra.paths import CONFIGS, REPO

GIB = 2**30
FIT_SOURCES = REPO / "src" / "instinct_serve" / "fit"


def refused(raw: dict[str, Any]) -> UsageError:
    with pytest.raises(UsageError) as err:
        ModelConfig(raw)
    assert err.value.id == "bad_model_config"
    return err.value


def fit_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """``instinct ARGV --json`` in this process: the exit status and the document."""
    from instinct_serve.cli.main import main

    with pytest.raises(SystemExit) as done:
        main([*argv, "--json"])
    captured = capsys.readouterr()
    assert "Internal error" not in captured.err and "Traceback" not in captured.err
    doc = json.loads(captured.out)
    assert isinstance(doc, dict)
    return int(done.value.code or 0), doc


def model_dir(tmp_path: Path, **config: Any) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(small_config(**config)))
    return tmp_path


# -- the audit's cases, through the command ----------------------------------------------


@pytest.mark.parametrize("layers", [1e30, 10**7, 10**400])
def test_a_huge_layer_count_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layers: float
) -> None:
    folder = model_dir(tmp_path, num_hidden_layers=layers)
    start = time.monotonic()
    code, doc = fit_json(["fit", str(folder), "--gpu", "mi300x"], capsys)
    assert time.monotonic() - start < 2.0
    assert code == 2
    assert doc["error"]["id"] == "bad_model_config"
    assert doc["error"]["details"]["key"] == "num_hidden_layers"
    assert "num_hidden_layers" in doc["error"]["message"]


@pytest.mark.parametrize("command", ["fit", "plan"])
def test_a_broken_local_directory_keeps_its_own_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """plan too: the user's directory is broken, not 'unsized' as for an unreachable Hub."""
    folder = model_dir(tmp_path, num_attention_heads=0)
    code, doc = fit_json([command, str(folder), "--gpu", "mi300x"], capsys)
    assert (code, doc["error"]["id"]) == (2, "bad_model_config")


@pytest.mark.parametrize(
    "change",
    [
        {"num_attention_heads": 0},
        {"num_key_value_heads": 0},
        {"hidden_size": 2, "num_attention_heads": 4},  # head_dim = 2 // 4 = 0
        {"attn_layer_period": 0},
        {"vocab_size": -1},
        {"hidden_size": "64"},
        {"hidden_size": True},
        {"num_hidden_layers": float("nan")},
        {"max_position_embeddings": float("inf")},
        {"intermediate_size": 127.5},
        {"sliding_window": -4096},
        {"layer_types": ["full_attention"] * 5000},
        {"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 128]}},
        {"rope_scaling": {"factor": float("nan")}},
        {"architectures": 5},
        {"text_config": {"num_hidden_layers": 2, "num_key_value_heads": [0, 2]}},
        {"vision_config": {"depth": 10**9, "hidden_size": 8, "intermediate_size": 8}},
    ],
)
def test_a_config_value_out_of_bounds_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any]
) -> None:
    folder = model_dir(tmp_path, **change)
    code, doc = fit_json(["fit", str(folder), "--gpu", "mi300x"], capsys)
    assert code == 2
    error = doc["error"]
    assert error["id"] == "bad_model_config"
    key = error["details"]["key"].split(".")[0]
    assert key in change or key in ("hidden_size", "num_hidden_layers", "num_key_value_heads")
    assert error["fix"]


@pytest.mark.parametrize("command", ["fit", "plan"])
@pytest.mark.parametrize("tp", ["1", "2"])
def test_a_config_without_hidden_size_is_incomplete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, tp: str
) -> None:
    """The fuzz audit's find (2026-12): gpt-oss's config less ``hidden_size``, with an index
    that gives the weight size, sized its KV cache and then failed in the MXFP4 padding (TP 1)
    or the replicated weights (TP 2) with an internal KeyError."""
    doc = json.loads((CONFIGS / "openai__gpt-oss-120b.json").read_text())
    del doc["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(doc))
    index = {"metadata": {"total_size": 10**9}, "weight_map": {}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    code, out = fit_json([command, str(tmp_path), "--gpu", "mi300x", "--tp", tp], capsys)
    assert code != 0
    assert out["error"]["id"] == "config_incomplete"
    assert "hidden_size" in out["error"]["message"] and out["error"]["fix"]


def test_no_layer_holding_a_cache_is_refused(tmp_path: Path) -> None:
    folder = model_dir(tmp_path, hybrid_override_pattern="--")  # two MLP-only layers
    meta = read_local_dir(folder)
    with pytest.raises(UsageError) as err:
        estimate(meta, HardwareSpec(192 * 10**9))
    assert err.value.id == "bad_model_config"


# -- the bounds themselves ---------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(INT_LIMITS))
def test_each_bound_admits_its_range_and_refuses_beyond(key: str) -> None:
    low, high = INT_LIMITS[key]
    base = small_config(hidden_size=2048, num_attention_heads=16, head_dim=128)
    for ok in (low, high, float(high)):
        ModelConfig({**base, key: ok})
    for bad in (low - 1, high + 1, True, "8", 1.5, float("nan"), [high + 1], {"x": 1}):
        error = refused({**base, key: bad})
        assert error.details["key"] == key


@pytest.mark.parametrize("key", sorted(TOWER_INT_LIMITS))
def test_each_vision_tower_bound(key: str) -> None:
    low, high = TOWER_INT_LIMITS[key]
    tower = {"depth": 2, "hidden_size": 8, "intermediate_size": 8}
    for ok in (low, high):
        ModelConfig(small_config(vision_config={**tower, key: ok}))
    for bad in (low - 1, high + 1, "2"):
        error = refused(small_config(vision_config={**tower, key: bad}))
        assert error.details["key"] == f"vision_config.{key}"


def test_per_layer_lists_are_bounded_then_read_as_absent() -> None:
    """OpenELM writes num_kv_heads per layer, Hunyuan moe_topk: within bounds, each value,
    and the estimator reads the key as absent (as before these checks)."""
    config = ModelConfig(small_config(num_key_value_heads=[2, 4], num_experts_per_tok=[8, 8]))
    assert config.num_kv_heads == 4  # num_attention_heads: MHA
    assert config.experts_per_token == 0
    refused(small_config(num_key_value_heads=[2] * 5000))
    refused(small_config(num_key_value_heads=[2, "4"]))
    # per-layer query heads (OpenELM) without head_dim: no head-size check on a list (the
    # fuzz audit's TypeError), the key read as absent like the others
    per_layer = small_config(num_attention_heads=[8, 8])
    per_layer.pop("head_dim", None)
    ModelConfig(per_layer)


def test_the_largest_real_configs_pass(tmp_path: Path) -> None:
    for path in sorted(CONFIGS.glob("*.json")):
        ModelConfig(json.loads(path.read_text()))


def test_every_number_the_estimator_reads_is_bounded() -> None:
    """Each key passed to ``get_int``/``require_int`` in fit/ has a bound in INT_LIMITS."""
    read: set[str] = set()
    for path in FIT_SOURCES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get_int", "require_int")
            ):
                read |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    assert read and read <= set(INT_LIMITS), read - set(INT_LIMITS)
    # the fuzz campaign throws values at every one of them
    assert set(fuzz.NUMBER_KEYS) == set(INT_LIMITS)
    assert set(TOWER_INT_LIMITS) <= set(fuzz.TOWER_KEYS)


def test_positions_bound_is_the_max_model_len_bound() -> None:
    assert option_of(FitRequest, "max_model_len").high == MAX_POSITIONS


def test_estimates_at_the_bounds_stay_fast() -> None:
    """The largest config the bounds admit: a 1,024-layer MoE of 4,096 experts, 2^17 wide.
    Experts are counted at once (not one by one), so this is milliseconds, not minutes."""
    config = json.loads((CONFIGS / "Qwen__Qwen3-235B-A22B.json").read_text())
    config.update(
        num_hidden_layers=1024,
        num_experts=4096,
        num_experts_per_tok=4096,
        hidden_size=1 << 17,
        num_attention_heads=1024,
        num_key_value_heads=1024,
        head_dim=8192,
        intermediate_size=1 << 20,
        moe_intermediate_size=1 << 20,
        vocab_size=1 << 22,
        max_position_embeddings=MAX_POSITIONS,
    )
    start = time.monotonic()
    counted = count_parameters(config)
    assert counted.dtype_counts["BF16"] > 1024 * 4096 * 3 * (1 << 17) * (1 << 20)
    meta = ModelMeta.from_config("huge", config, source="config")
    report = estimate(meta, HardwareSpec(192 * 10**9, 1024), FitOptions())
    assert report.verdict == "does_not_fit"
    json.dumps(report.to_dict())  # every figure converts (no OverflowError)
    assert time.monotonic() - start < 3.0


@pytest.mark.parametrize(
    ("flags", "error_id"),
    [
        (["--block-size", "-5"], "bad_block_size"),
        (["--max-num-seqs", "-1"], "bad_max_num_seqs"),
        (["--max-num-batched-tokens", "99999999999999999"], "bad_max_num_batched_tokens"),
        (["--max-model-len", "999999999999"], "bad_max_model_len"),
        (["--gpu-memory-utilization", "nan"], "bad_gpu_memory_utilization"),
        (["--gpu-memory-utilization", "1e999"], "bad_gpu_memory_utilization"),
        (["--tensor-parallel-size", "3"], "bad_tp"),
        (["--tensor-parallel-size", "4096"], "bad_tp"),
        (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": "x"}'], None),
        (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1000}'], None),
    ],
)
def test_launch_flags_are_bounded_like_the_options(flags: list[str], error_id: str | None) -> None:
    """Values from a recipe's or a plan's launch flags meet the bounds of ``fit``'s options."""
    with pytest.raises(UsageError) as err:
        fit_options(LaunchContext(launch_args=flags))
    assert err.value.id == (error_id or "bad_speculative_mtp")


def test_a_recipe_context_length_out_of_bounds() -> None:
    with pytest.raises(UsageError) as err:
        fit_options(LaunchContext(context_length=10**30))
    assert err.value.id == "bad_context_length"


def test_weight_figures_are_bounded() -> None:
    config = small_config()
    for counts in ({"BF16": -1}, {"BF16": 2**63}, {"BF16": True}, {"BF16": 1.5}):
        with pytest.raises(UsageError) as err:
            ModelMeta("m", config, dtype_counts=counts)
        assert err.value.id == "bad_model_metadata"
    with pytest.raises(UsageError) as err:
        ModelMeta("m", config, total_bytes=10**30)
    assert err.value.id == "bad_model_metadata"


# -- safetensors headers and index -------------------------------------------------------


def header_file(path: Path, table: Any, *, length: int | None = None) -> None:
    raw = json.dumps(table).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw)


GOOD = {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]}


@pytest.mark.parametrize(
    ("table", "length", "why"),
    [
        ({"w": GOOD}, 2**64 - 1, "exceeds"),
        ({"w": GOOD}, 10**6, "ends inside its header"),
        ([1, 2], None, "not a JSON object"),
        ({"w": {**GOOD, "dtype": "F128"}}, None, "unknown dtype"),
        ({"w": {**GOOD, "dtype": 5}}, None, "unknown dtype"),
        ({"w": {**GOOD, "shape": [-4, 8]}}, None, "invalid dimension"),
        ({"w": {**GOOD, "shape": [4.0, 8]}}, None, "invalid dimension"),
        ({"w": {**GOOD, "shape": [2**40, 2**40]}}, None, "2^50"),
        ({"w": {**GOOD, "shape": "4x8"}}, None, "no shape"),
        ({"w": {**GOOD, "data_offsets": [64, 0]}}, None, "out of order"),
        ({"w": {**GOOD, "data_offsets": [0]}}, None, "data_offsets"),
        ({"w": {**GOOD, "data_offsets": ["0", 64]}}, None, "whole number"),
        ({"w": [1, 2, 3]}, None, "not an object"),
    ],
)
def test_a_broken_header_is_bad_safetensors(
    tmp_path: Path, table: Any, length: int | None, why: str
) -> None:
    folder = model_dir(tmp_path)
    header_file(folder / "model.safetensors", table, length=length)
    with pytest.raises(UsageError) as err:
        read_local_dir(folder)
    assert err.value.id == "bad_safetensors"
    assert why in err.value.message


@pytest.mark.parametrize(
    "data",
    [b"", b"\x01\x02", struct.pack("<Q", 10) + b"{", struct.pack("<Q", 200_000) + b"[" * 200_000],
)
def test_truncated_and_nested_headers(tmp_path: Path, data: bytes) -> None:
    folder = model_dir(tmp_path)
    (folder / "model.safetensors").write_bytes(data)
    with pytest.raises(UsageError) as err:
        read_local_dir(folder)
    assert err.value.id == "bad_safetensors"


@pytest.mark.parametrize(
    "index",
    [
        {"weight_map": {"w": "/etc/passwd"}},
        {"weight_map": {"w": "../config.json"}},
        {"weight_map": {"w": 5}},
        {"weight_map": [1, 2]},
        {"weight_map": {}, "metadata": {"total_size": -1}},
        {"weight_map": {}, "metadata": {"total_size": "12"}},
        {"weight_map": {}, "metadata": {"total_size": 10**30}},
        {"weight_map": {}, "metadata": [1]},
        [],
    ],
)
def test_a_broken_index_is_bad_safetensors_index(tmp_path: Path, index: Any) -> None:
    folder = model_dir(tmp_path)
    write_safetensors(folder / "model.safetensors", {"w": ("BF16", (4, 8))})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(UsageError) as err:
        read_local_dir(folder)
    assert err.value.id == "bad_safetensors_index"


def test_an_index_pointing_nowhere_falls_back(tmp_path: Path) -> None:
    folder = model_dir(tmp_path)
    index = {"weight_map": {"w": "gone.safetensors"}, "metadata": {"total_size": 1234}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    meta = read_local_dir(folder)
    assert meta.weights_source == "index_total_size" and meta.total_bytes == 1234


def test_a_deep_layer_index_in_a_tensor_name_is_not_a_number_to_parse(tmp_path: Path) -> None:
    folder = model_dir(tmp_path, num_nextn_predict_layers=1)
    write_safetensors(
        folder / "model.safetensors", {f"model.layers.{'9' * 5000}.w": ("BF16", (2, 2))}
    )
    assert read_local_dir(folder).component_bytes == {}


# -- the directory and config.json itself ------------------------------------------------


def make(folder: Path, name: str, kind: str) -> None:
    path = folder / name
    if kind == "dir":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(name)
    elif kind == "dangling":
        path.symlink_to("nowhere")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "sparse":
        with path.open("wb") as fh:
            fh.truncate(200 * 2**20)
    else:
        path.write_bytes(kind.encode())


@pytest.mark.parametrize(
    ("kind", "error_id"),
    [
        ("dir", "bad_config"),
        ("fifo", "bad_config"),  # never opened: a FIFO would wait for a writer forever
        ("sparse", "bad_config"),
        ("loop", "model_dir_unreadable"),
        ("dangling", "no_config"),
        ("", "bad_config"),
        ("[]", "bad_config"),
        ("{", "bad_config"),
        ("[" * 100_000 + "]" * 100_000, "bad_config"),
        ('{"num_hidden_layers": 1' + "0" * 5000 + "}", "bad_config"),
    ],
)
def test_config_json_that_is_not_a_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, error_id: str
) -> None:
    make(tmp_path, "config.json", kind)
    start = time.monotonic()
    code, doc = fit_json(["fit", str(tmp_path), "--gpu", "mi300x"], capsys)
    assert time.monotonic() - start < 5.0
    assert code == 2 and doc["error"]["id"] == error_id


@pytest.mark.parametrize("kind", ["dir", "fifo", "loop", "dangling", "sparse"])
def test_a_shard_that_is_not_a_file_is_never_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    folder = model_dir(tmp_path)
    make(folder, "model.safetensors", kind)
    code, doc = fit_json(["fit", str(folder), "--gpu", "mi300x"], capsys)
    if kind == "sparse":  # a regular file of zeros: header length 0, not JSON
        assert (code, doc["error"]["id"]) == (2, "bad_safetensors")
    elif kind == "loop":
        assert (code, doc["error"]["id"]) == (2, "model_dir_unreadable")
    else:  # not a file: the weights come from the config's shapes
        assert code == 0 and doc["metadata"]["weights_source"] == "config_shapes"


@pytest.mark.parametrize("model", ["~nosuchuser-instinct/model", "a" * 300, "./" + "b" * 300])
def test_odd_paths_are_answered(capsys: pytest.CaptureFixture[str], model: str) -> None:
    code, doc = fit_json(["fit", model, "--gpu", "mi300x"], capsys)
    assert code == 2
    assert doc["error"]["id"] in ("not_a_model_dir", "model_not_found")


def test_a_damaged_kept_hub_answer_is_ignored(tmp_path: Path) -> None:
    """A kept Hub answer whose config breaks the bounds is no answer (offline: the shipped
    metadata, which it would otherwise have shadowed)."""
    from instinct_serve.gather.model_meta import _meta_cache_path

    bad = {"model_id": "Qwen/Qwen3-8B", "config": small_config(num_hidden_layers=1e30)}
    path = _meta_cache_path("Qwen/Qwen3-8B")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(bad))
    meta = load_model_meta("Qwen/Qwen3-8B")
    assert meta.source == "shipped"


def test_error_ids_of_the_loaders_are_documented() -> None:
    """Every id the metadata loaders raise is in the fuzz audit's documented set."""
    raised: set[str] = set()
    for path in FIT_SOURCES.glob("*.py"):
        raised |= set(re.findall(r'id="([a-z_]+)"', path.read_text()))
    raised |= {"bad_safetensors_index"}
    undocumented = {i for i in raised if not fuzz.known_error(i)}
    assert not undocumented, undocumented


def test_a_recipe_context_length_of_zero_means_unknown() -> None:
    """Upstream writes ``context_length: 0`` when it does not say: the config's is used."""
    opts, _notes = fit_options(LaunchContext(context_length=0))
    assert opts.native_max_model_len is None


@pytest.mark.parametrize(
    ("change", "parameters", "error_id"),
    [
        ({"num_hidden_layers": 1e30}, {"BF16": 10}, "bad_model_config"),
        ({}, {"BF16": -5}, "bad_model_metadata"),
        ({}, {"BF16": 1.5}, "bad_model_metadata"),
        ({}, {"BF16": 2**70}, "bad_model_metadata"),
    ],
)
def test_a_hub_answer_out_of_bounds(
    hub: Any, change: dict[str, Any], parameters: dict[str, Any], error_id: str
) -> None:
    """A Hub (or a proxy) answering odd figures gets the same bounds as a local directory."""
    from tests.fit.hubserver import LLAMA, serve_model

    serve_model(hub, "acme/odd", {**LLAMA, **change}, parameters)
    with pytest.raises(UsageError) as err:
        load_model_meta("acme/odd")
    assert err.value.id == error_id
