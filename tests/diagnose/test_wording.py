"""Findings in the words of the route that ran the server (``diagnose.wording``): the rules
write for docker; under ``launcher="native"`` every finding speaks of processes, the host
and its directories, and names HF_HOME where it points elsewhere than the default."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from instinct_serve.diagnose import DiagnoseContext, diagnose
from instinct_serve.diagnose.model import Finding
from instinct_serve.diagnose.rules import REGISTRY
from instinct_serve.diagnose.wording import NATIVE

DOCKER_WORDS = re.compile(
    r"container|mount(?:ed)? (?:it |that )?into|\b(?:in |an? |this |the )image\b|images\b|"
    r"docker run|docker gives|--ipc|--device|--group-add|--shm-size|docker ps",
    re.IGNORECASE,
)
NATIVE_CTX = DiagnoseContext(
    gfx="gfx942", model="Qwen/Qwen3-8B", launcher="native", args=["--tensor-parallel-size", "2"]
)
OFFLINE = (
    "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk "
    "cache and outgoing traffic has been disabled. To enable hf.co look-ups and downloads "
    "online, set 'local_files_only' to False."
)
# the builders' variants that word things differently (hub.py, host.py)
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("hf_hub_unreachable", {"variant": "offline"}),
    ("hf_hub_unreachable", {"variant": "network"}),
    ("repo_not_found", {"path": "/models/qwen"}),
    ("port_in_use", {"distributed": True}),
    ("port_in_use", {"port": 8000}),
]


def _every_finding(ctx: DiagnoseContext) -> list[Finding]:
    found = [rule.build_ranked(ctx) for rule in REGISTRY]
    return found + [REGISTRY[rule_id].build_ranked(ctx, **kw) for rule_id, kw in VARIANTS]


def _text(finding: Finding) -> str:
    return " | ".join([finding.title, finding.cause, finding.fix, *finding.commands])


def test_no_native_finding_speaks_of_images_or_containers() -> None:
    docker_worded = [
        f for f in _every_finding(DiagnoseContext(gfx="gfx942")) if DOCKER_WORDS.search(_text(f))
    ]
    assert len(docker_worded) >= 20  # the rules do speak docker: the check below is not empty
    left = {
        f.id: DOCKER_WORDS.findall(_text(f))
        for f in _every_finding(NATIVE_CTX)
        if DOCKER_WORDS.search(_text(f))
    }
    assert left == {}


def test_every_native_phrase_is_used() -> None:
    """A rule reworded without its table row would silently keep its docker words: each row
    of the table must still match some rule's docker text."""
    texts = [_text(f) for f in _every_finding(DiagnoseContext(gfx="gfx942", model="Qwen/Qwen3-8B"))]
    unused = [p for p, _ in NATIVE if not any(re.search(p, t) for t in texts)]
    assert unused == []


def test_the_docker_route_keeps_the_rules_own_words() -> None:
    ctx = DiagnoseContext(gfx="gfx942")
    for rule in REGISTRY:
        built = rule.build(ctx)
        assert rule.build_ranked(ctx) == replace(built, rank=built.rank or rule.rank)
    shm = REGISTRY["shm_too_small"].build_ranked(ctx)
    assert "--ipc=host" in shm.fix


@pytest.mark.parametrize(
    ("hf_home", "named"),
    [("/data/hf", "HF_HOME=/data/hf"), (None, "~/.cache/huggingface")],
)
def test_the_native_cache_is_named_where_the_process_reads_it(
    hf_home: str | None, named: str
) -> None:
    finding = diagnose(OFFLINE, DiagnoseContext(launcher="native", hf_home=hf_home)).primary
    assert finding is not None and finding.id == "hf_hub_unreachable"
    assert named in finding.cause and named in finding.fix
    assert "container" not in finding.cause + finding.fix
    if hf_home:
        assert "~/.cache/huggingface" not in finding.cause + finding.fix
    docker = diagnose(OFFLINE, DiagnoseContext(hf_home=hf_home)).primary
    assert docker is not None and "mounted into the container" in docker.cause


def test_a_native_symptom_is_worded_for_the_native_route() -> None:
    from instinct_serve.diagnose import diagnose_symptom

    native = diagnose_symptom("unrecognized arguments: --foo", NATIVE_CTX).primary
    assert native is not None and native.id == "unknown_argument"
    assert "this image" not in native.fix and "of the installed vLLM" in native.fix


# The findings SGLang words itself (diagnose/rules/sglang.py), and its log's version of each
SGLANG_WORDED = (
    "kv_cache_no_memory",
    "oom_graph_capture",
    "oom_weights",
    "oom_profiling",
    "out_of_memory",
    "graph_capture_failed",
    "rccl_error",
    "gpu_kernel_crash",
)


def test_sglangs_findings_speak_of_no_container_natively_and_of_no_vllm() -> None:
    native = replace(NATIVE_CTX, server="sglang", args=["--tp", "2"])
    for rule_id in SGLANG_WORDED:
        finding = REGISTRY[rule_id].build_ranked(native)
        assert not DOCKER_WORDS.search(_text(finding)), rule_id
        assert "vLLM" not in _text(finding) and "VLLM_" not in _text(finding), rule_id
        docker = REGISTRY[rule_id].build_ranked(replace(native, launcher="docker"))
        assert docker.id == rule_id and "vLLM" not in _text(docker), rule_id
