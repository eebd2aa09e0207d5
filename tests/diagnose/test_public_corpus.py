"""The public vLLM and SGLang log corpus (tests/fixtures/logs/public): the corpus itself, and what
today's ``diagnose`` says about each log against the cause, phase and figures the public record
gives. Each log is diagnosed as the tool diagnoses its own launch: knowing the server.

The corpus checks hold the manifest, the files and tests/fixtures/SOURCES.md to each other and
to the log text. The diagnosis checks record today's answers: where today's answer differs from
the expected one the case is a strict xfail naming the gap, so the suite stays green while the
gaps stay visible, and a gap that gets closed turns into a failure until its entry is removed.
"""

from __future__ import annotations

import json
import re
from typing import Literal, TypedDict

import pytest

from instinct_serve.diagnose import FINDING_IDS, DiagnoseContext, Diagnosis, diagnose
from instinct_serve.diagnose.phases import PHASE_ORDER
from tests.diagnose.logs import real_log
from tests.infra.paths import FIXTURES, LOGS

PUBLIC = LOGS / "public"
SUBDIR = "public"

Outcome = Literal["healthy", "failed"]
Basis = Literal["log", "log_order", "thread", "inferred", "unknown"]
Server = Literal["vllm", "sglang"]
Split = Literal["calibration", "held_out"]


class Fix(TypedDict):
    fix: str
    said_by: str


class Figures(TypedDict):
    model: str | None
    tp: int | None
    pp: int | None
    max_model_len: int | None
    gpu_memory_utilization: float | None
    dtype: str | None
    kv_cache_dtype: str | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    block_size: int | None
    enforce_eager: bool | None
    total_gpu_gib: float | None
    weights_gib: float | None
    activation_peak_gib: float | None
    non_torch_gib: float | None
    available_kv_gib: float | None
    kv_cache_tokens: int | None
    kv_cache_blocks: int | None
    max_concurrency: float | None
    graph_memory_gib: float | None
    graph_memory_estimate_gib: float | None


class Case(TypedDict):
    file: str
    source: str
    source_detail: str
    server: Server
    split: Split
    platform: Literal["rocm", "cuda", "cpu", "npu"]
    gpu: str | None
    gfx: str | None
    vllm_version: str | None
    engine: Literal["v0", "v1"] | None
    excerpt: bool
    outcome: Outcome
    furthest_phase: str | None
    furthest_phase_basis: Basis
    expected_cause: str | None
    right_fix: Fix | None
    wrong_fixes: list[Fix]
    figures: Figures | None
    notes: str


def _load() -> list[Case]:
    cases: list[Case] = json.loads((PUBLIC / "cases.json").read_text(encoding="utf-8"))
    return cases


CASES = _load()
BY_FILE = {case["file"]: case for case in CASES}
FAILED = sorted(case["file"] for case in CASES if case["outcome"] == "failed")
HEALTHY = sorted(case["file"] for case in CASES if case["outcome"] == "healthy")
SGLANG = sorted(case["file"] for case in CASES if case["server"] == "sglang")

# Measured figures (vLLM prints them) and the launch settings (the log or the issue states them).
MEASURED: tuple[str, ...] = (
    "total_gpu_gib",
    "weights_gib",
    "activation_peak_gib",
    "non_torch_gib",
    "available_kv_gib",
    "kv_cache_tokens",
    "kv_cache_blocks",
    "max_concurrency",
    "graph_memory_gib",
    "graph_memory_estimate_gib",
)
SETTINGS: tuple[str, ...] = (
    "tp",
    "pp",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
)
TEXT_SETTINGS = ("dtype", "kv_cache_dtype")
# The phases a log can show by itself: its own lines, or its lines plus vLLM's fixed order.
PHASE_FROM_LOG: frozenset[str] = frozenset({"log", "log_order"})

# Where today's diagnose gives another primary finding than the real cause (None: none at all).
DIAGNOSIS_GAPS: dict[str, str] = {
    "16_mrv2_kernel_warmup_oom_after_graphs_h100_tp4_figures.log": "no finding: the OOM line is "
    "not in the published excerpt; only the thread says it is the sampler warm-up OOM (with no "
    "error line left, diagnose calls the excerpt healthy)",
}

# Where today's phase tracker reports another furthest phase than the log shows.
PHASE_GAPS: dict[str, str] = {
    # held out: SGLang's tracker reads this line as no phase
    "44_sglang_not_enough_memory_mfs0.2_gpustack_ascend.log": "SGLang raises 'Not enough memory' "
    "right after profiling its pool; the tracker does not take the error as the end of the "
    "profile (vLLM's KV-capacity error is): 'starting'",
    "14_hsa_memory_aperture_violation_mi300x_v1_runtime.log": "the excerpt is cut right after "
    "the benchmark's run_vllm frame, which builds the engine as well as runs it: no line left "
    "shows the engine was up (the thread says llm.generate ran): 'starting'",
}

# Where today's tracker does not read a figure the log prints (or reads another value).
FIGURE_GAPS: dict[str, str] = {
    "12_max_model_len_exceeds_kv_rtx3090_llama3.1-8b_29k_V0.log": "the block count is on the "
    "pasted '# GPU blocks: 1478' line, which starts with '#' and is dropped as a note by the "
    "corpus convention (tests/diagnose/logs.py), so diagnose never sees it",
}


def _diagnose(name: str) -> Diagnosis:
    """``name`` diagnosed as the tool diagnoses its own launch: knowing which server ran."""
    return diagnose(real_log(f"{SUBDIR}/{name}"), DiagnoseContext(server=BY_FILE[name]["server"]))


def _xfail(name: str, gaps: dict[str, str]) -> pytest.ParameterSet:
    if name in gaps:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=gaps[name]))
    return pytest.param(name)


def _raw_lines(name: str) -> list[str]:
    return (PUBLIC / name).read_text(encoding="utf-8").splitlines()


def _header(name: str) -> list[str]:
    """The provenance notes at the top of a file: the leading run of '# ' lines."""
    header = []
    for line in _raw_lines(name):
        if not line.startswith("# "):
            break
        header.append(line)
    return header


def _body(name: str) -> str:
    """Everything after the provenance header: the log as published, cut markers included."""
    return "\n".join(_raw_lines(name)[len(_header(name)) :])


_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")  # a number on its own: 15.3047, 567,978
_DIGITS = re.compile(r"(?<![\d.])\d[\d,]*(?:\.\d+)?")  # also inside words: TP16, PP2, 1x


def _numbers(text: str, pattern: re.Pattern[str] = _NUMBER) -> set[float]:
    return {float(match.rstrip(",").replace(",", "")) for match in pattern.findall(text)}


def _new_cause_ids() -> set[str]:
    readme = (PUBLIC / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Cause ids", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.MULTILINE))


# --------------------------------------------------------------------------- the corpus


def test_manifest_lists_exactly_the_log_files() -> None:
    files = sorted(path.name for path in PUBLIC.glob("*.log"))
    assert sorted(BY_FILE) == files
    assert len(BY_FILE) == len(CASES), "a file is listed twice"


def test_corpus_size_and_mix() -> None:
    assert 25 <= len(CASES) <= 50
    assert len(FAILED) >= 12
    with_figures = [c for c in CASES if c["figures"] and c["figures"]["max_concurrency"]]
    assert len(with_figures) >= 10
    assert len({c["expected_cause"] for c in CASES if c["outcome"] == "failed"}) >= 8


@pytest.mark.parametrize("name", sorted(BY_FILE))
def test_manifest_entry_is_well_formed(name: str) -> None:
    case = BY_FILE[name]
    assert set(case) == set(Case.__annotations__)
    assert re.fullmatch(r"\d\d_[A-Za-z0-9._-]+\.log", name)
    assert case["platform"] in ("rocm", "cuda", "cpu", "npu")
    assert case["server"] in ("vllm", "sglang")
    assert case["split"] in ("calibration", "held_out")
    assert case["engine"] in ("v0", "v1", None)
    if case["server"] == "sglang":
        assert case["vllm_version"] is None and case["engine"] is None
    assert case["outcome"] in ("healthy", "failed")
    assert case["furthest_phase_basis"] in ("log", "log_order", "thread", "inferred", "unknown")
    assert (case["furthest_phase"] is None) == (case["furthest_phase_basis"] == "unknown")
    if case["furthest_phase"] is not None:
        assert case["furthest_phase"] in PHASE_ORDER
    if case["outcome"] == "healthy":
        assert case["expected_cause"] is None
        assert case["right_fix"] is None and case["wrong_fixes"] == []
    else:
        assert case["expected_cause"], "a failure names its real cause"
        cause = case["expected_cause"]
        assert cause in FINDING_IDS or cause in _new_cause_ids(), (
            f"{cause}: neither a finding id nor listed as a new id in public/README.md"
        )
    for fix in ([case["right_fix"]] if case["right_fix"] else []) + case["wrong_fixes"]:
        assert set(fix) == {"fix", "said_by"} and fix["fix"] and fix["said_by"]
    if case["figures"] is not None:
        assert set(case["figures"]) == set(Figures.__annotations__)


def test_new_cause_ids_are_new_and_used() -> None:
    new = _new_cause_ids()  # empty once every cause of the corpus is a finding
    assert "## Cause ids" in (PUBLIC / "README.md").read_text(encoding="utf-8")
    assert not new & set(FINDING_IDS), "a listed new id already exists as a finding id"
    used = {c["expected_cause"] for c in CASES}
    assert new <= used, f"listed but unused: {sorted(new - used)}"


@pytest.mark.parametrize("name", sorted(BY_FILE))
def test_every_file_starts_with_provenance_naming_its_source(name: str) -> None:
    header = "\n".join(_header(name))
    assert header, "provenance notes ('# ' lines) open the file"
    source = BY_FILE[name]["source"]
    github = re.match(r"https://github\.com/([^/]+/[^/]+)/(issues|pull|blob)/([^/]+)", source)
    assert github, f"not a GitHub source: {source}"
    repo, kind, ref = github.groups()
    assert repo in header
    if kind == "blob":
        assert ref in header, "a repository file is cited at its commit"
    else:
        assert re.search(rf"(#|/){ref}\b", header), "the issue or PR number is in the notes"
    assert _body(name).strip(), "the log itself follows the notes"


@pytest.mark.parametrize("name", sorted(BY_FILE))
def test_every_file_and_source_is_in_sources_md(name: str) -> None:
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    row = next((line for line in sources.splitlines() if f"logs/{SUBDIR}/{name}" in line), None)
    assert row is not None, "SOURCES.md has a row for the file"
    source = BY_FILE[name]["source"]
    blob = re.match(r"https://github\.com/([^/]+/[^/]+)/blob/([0-9a-f]{40})/", source)
    if blob:
        assert blob.group(1) in row and blob.group(2) in row
    else:
        assert source in row


@pytest.mark.parametrize("name", sorted(BY_FILE))
def test_excerpt_flag_matches_the_cut_markers(name: str) -> None:
    cut = "[... TRUNCATED ...]" in _body(name)
    assert cut == BY_FILE[name]["excerpt"]


@pytest.mark.parametrize("name", sorted(n for n in BY_FILE if BY_FILE[n]["figures"]))
def test_figures_are_in_the_log_text(name: str) -> None:
    figures = BY_FILE[name]["figures"]
    assert figures is not None
    in_log = _numbers(_body(name))
    in_file = _numbers("\n".join(_raw_lines(name)), _DIGITS)
    text = "\n".join(_raw_lines(name))
    for key in MEASURED:
        value = figures[key]  # type: ignore[literal-required]
        if value is not None:
            assert float(value) in in_log, f"{key}={value} is not printed by the log"
    for key in SETTINGS:
        value = figures[key]  # type: ignore[literal-required]
        if value is not None:
            assert float(value) in in_file, f"{key}={value} is stated nowhere in the file"
    for key in TEXT_SETTINGS:
        value = figures[key]  # type: ignore[literal-required]
        if value is not None:
            assert value in text, f"{key}={value} is stated nowhere in the file"


# (file, whether tokens / max_model_len equals the logged concurrency): it does for full-attention
# models and for versions that log hybrid capacity as concurrency x max_model_len; it does not for
# hybrid models on versions that count tokens as if every layer were full attention
# (vllm-memory.md 2.3), which a fit estimate has to reproduce to match the log.
KV_CONSISTENCY = [
    ("11_mi50_pp2_tp4_kv_sized_then_full_graph_capture_fails.log", True),
    ("23_startup_2x3090_tp2_kimi-linear-48b-awq_V1_figures.log", False),
    ("24_startup_rtx5090_qwen3.6-35b-a3b-nvfp4_v0.24.0_figures.log", True),
    ("25_startup_2x3090_tp2_qwen3.6-27b-int4_figures.log", True),
    ("26_startup_gguf_qwen3.5_graph_estimate_figures.log", False),
    ("27_healthy_eager_startup_to_api_server_v1_figures.log", True),
]


@pytest.mark.parametrize(("name", "consistent"), KV_CONSISTENCY)
def test_kv_tokens_against_concurrency(name: str, consistent: bool) -> None:
    figures = BY_FILE[name]["figures"]
    assert figures is not None
    tokens, length, concurrency = (
        figures["kv_cache_tokens"],
        figures["max_model_len"],
        figures["max_concurrency"],
    )
    assert tokens is not None and length is not None and concurrency is not None
    assert (abs(tokens / length - concurrency) <= 0.01) is consistent


# --------------------------------------------------------------------------- today's diagnose


@pytest.mark.parametrize("name", [_xfail(n, DIAGNOSIS_GAPS) for n in FAILED])
def test_today_primary_finding_is_the_real_cause(name: str) -> None:
    diagnosis = _diagnose(name)
    today = diagnosis.primary.id if diagnosis.primary else None
    assert today == BY_FILE[name]["expected_cause"]


@pytest.mark.parametrize("name", HEALTHY)
def test_today_healthy_logs_have_no_finding(name: str) -> None:
    diagnosis = _diagnose(name)
    assert diagnosis.findings == ()
    assert diagnosis.last_error is None
    assert diagnosis.healthy  # reported as healthy (exit 0), not "no pattern matched"


@pytest.mark.parametrize("name", [n for n in FAILED if n not in DIAGNOSIS_GAPS])
def test_today_a_diagnosed_failure_is_not_healthy(name: str) -> None:
    diagnosis = _diagnose(name)
    assert not diagnosis.healthy and diagnosis.to_dict()["healthy"] is False


PHASED = sorted(n for n in BY_FILE if BY_FILE[n]["furthest_phase_basis"] in PHASE_FROM_LOG)


@pytest.mark.parametrize("name", [_xfail(n, PHASE_GAPS) for n in PHASED])
def test_today_furthest_phase_is_the_one_the_log_shows(name: str) -> None:
    diagnosis = _diagnose(name)
    assert diagnosis.facts["phase_reached"] == BY_FILE[name]["furthest_phase"]


# The figures the phase tracker reports (its own names), checked against the manifest.
TRACKED: tuple[str, ...] = tuple(k for k in MEASURED if k != "non_torch_gib")
WITH_FIGURES = sorted(
    n
    for n in BY_FILE
    if BY_FILE[n]["figures"] and any(BY_FILE[n]["figures"][k] is not None for k in TRACKED)  # type: ignore[index,literal-required]
)


@pytest.mark.parametrize("name", [_xfail(n, FIGURE_GAPS) for n in WITH_FIGURES])
def test_today_tracker_reads_the_logged_figures(name: str) -> None:
    figures = BY_FILE[name]["figures"]
    assert figures is not None
    read = _diagnose(name).facts["figures"]
    for key in TRACKED:
        expected = figures[key]  # type: ignore[literal-required]
        if expected is not None:
            assert read.get(key) == pytest.approx(expected), key


def test_gap_lists_name_corpus_files() -> None:
    for gaps in (DIAGNOSIS_GAPS, PHASE_GAPS, FIGURE_GAPS):
        assert set(gaps) <= set(BY_FILE)


# --------------------------------------------------------------------------- SGLang

# The flags an SGLang fix may name, and vLLM's own, which it must not.
SGLANG_FLAGS = (
    "--mem-fraction-static",
    "--cuda-graph-max-bs",
    "--disable-cuda-graph",
    "--chunked-prefill-size",
    "--context-length",
    "--tp",
)
VLLM_FLAGS = (
    "--gpu-memory-utilization",
    "--enforce-eager",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--tensor-parallel-size",
    "--max-model-len",
)
# The SGLang logs with a line only SGLang prints (its logger's rank tag, its frames, its own
# errors): diagnose names the server from the log alone. The others are bare exception lines.
SELF_NAMED = frozenset(
    {
        "40_sglang_kv_pool_negative_deepseek_r1_dp8_mi300x.log",
        "41_sglang_capture_invalidated_aiter_allreduce_hy3_mi300x.log",
        "42_sglang_nccl_unhandled_system_error_init.log",
        "44_sglang_not_enough_memory_mfs0.2_gpustack_ascend.log",
        "45_sglang_hip_captured_event_watchdog_abort_qwen3-235b_mi35x.log",
    }
)
# Right causes on the held-out SGLang logs (no rule was written against them), as recorded in
# public/README.md; DIAGNOSIS_GAPS names each miss.
HELD_OUT_SCORE = (4, 4)


def test_sglang_cases_are_split_and_mostly_rocm() -> None:
    split = [BY_FILE[n]["split"] for n in SGLANG]
    assert split.count("calibration") >= 3 and split.count("held_out") >= 3
    assert sum(BY_FILE[n]["platform"] == "rocm" for n in SGLANG) * 2 > len(SGLANG)
    assert all(BY_FILE[n]["split"] == "calibration" for n in BY_FILE if n not in SGLANG)


@pytest.mark.parametrize("name", [n for n in SGLANG if n not in DIAGNOSIS_GAPS])
def test_sglang_fix_names_sglang_flags(name: str) -> None:
    primary = _diagnose(name).primary
    assert primary is not None
    assert any(flag in primary.fix for flag in SGLANG_FLAGS), primary.fix
    assert not any(flag in primary.fix for flag in VLLM_FLAGS), primary.fix


@pytest.mark.parametrize("name", SGLANG)
def test_an_sglang_log_names_its_server_where_it_can(name: str) -> None:
    facts = diagnose(real_log(f"{SUBDIR}/{name}")).facts
    assert (facts.get("server") == "sglang") == (name in SELF_NAMED)


def test_held_out_sglang_score() -> None:
    held_out = [n for n in SGLANG if BY_FILE[n]["split"] == "held_out"]
    right = [
        n
        for n in held_out
        if getattr(_diagnose(n).primary, "id", None) == BY_FILE[n]["expected_cause"]
    ]
    assert (len(right), len(held_out)) == HELD_OUT_SCORE
    assert set(held_out) - set(right) <= set(DIAGNOSIS_GAPS)
