"""The planner end to end on the shipped catalog and metadata (offline), plus its rules.

Golden plans live in tests/plan/golden/*.json. They are the whole plan document minus what
depends on the day (the snapshot-age warning). Regenerate after an intended change with
INSTINCT_UPDATE_GOLDEN=1 and review the diff like code.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from instinct_serve import vllm_args
from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.gather.plan import make_plan, resolve_hf_mount
from instinct_serve.options import PlanOptions
from instinct_serve.plan.planner import choose_variant
from instinct_serve.plan.render import docker_argv, render
from tests.infra.cli import run_instinct

GOLDEN = Path(__file__).parent / "golden"
HF = "/srv/hf-cache"  # a path that does not exist: an HF home, mounted as such
COMPILE_CACHE = "/srv/compile-cache"


def plan_doc(**kw: Any) -> dict[str, Any]:
    kw.setdefault("hf_cache", HF)
    kw.setdefault("compile_cache", COMPILE_CACHE)  # a fixed host path: golden documents
    result = make_plan(PlanOptions(**kw))
    doc = json.loads(render(result.plan, "json"))
    doc["warnings"] = [w for w in doc["warnings"] if "days old" not in w]
    return doc


def check_golden(name: str, doc: dict[str, Any]) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if os.environ.get("INSTINCT_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path.name}: run with INSTINCT_UPDATE_GOLDEN=1"
    assert json.loads(path.read_text()) == json.loads(text)


def flag(args: list[str], name: str) -> str | None:
    return vllm_args.value(args, name)


# ------------------------------------------------------------------ golden matrix


def test_default_model_on_one_mi300x() -> None:
    doc = plan_doc(gpu="mi300x", gpu_count=1)
    check_golden("qwen3.5-9b_1x_mi300x", doc)
    args = doc["vllm_args"]
    assert doc["model"] == "Qwen/Qwen3.5-9B" and doc["tensor_parallel_size"] == 1
    assert flag(args, "--tool-call-parser") == "qwen3_coder"
    assert flag(args, "--reasoning-parser") == "qwen3"
    assert "--enable-auto-tool-choice" in args
    assert flag(args, "--tensor-parallel-size") is None  # TP 1 is vLLM's default
    assert doc["env"]["VLLM_ROCM_USE_AITER_FP4BMM"] == "0"  # vllm#34641 on gfx942
    assert doc["verdict"] == "safe" and doc["max_model_len"] is None
    assert doc["secret_env"] == ["HF_TOKEN"]
    assert doc["mounts"] == [
        {"host": HF, "container": "/root/.cache/huggingface", "read_only": False}
    ]
    assert doc["labels"]["instinct-serve.managed"] == "true"
    assert doc["labels"]["instinct-serve.plan-hash"] == doc["plan_hash"]


def test_moe_235b_on_eight_mi300x_uses_tp_and_mp_backend() -> None:
    doc = plan_doc(model="Qwen/Qwen3-235B-A22B-Instruct-2507", gpu="mi300x")
    check_golden("qwen3-235b_8x_mi300x", doc)
    # the recipe states 564 GB: its MI300X command spans the node (was TP 4, issue 13)
    assert doc["tensor_parallel_size"] == 8
    assert flag(doc["vllm_args"], "--tensor-parallel-size") == "8"
    assert flag(doc["vllm_args"], "--distributed-executor-backend") == "mp"
    assert doc["verdict"] in ("safe", "tight")


def test_deepseek_v32_keeps_amd_block_size_and_env() -> None:
    doc = plan_doc(model="deepseek-ai/DeepSeek-V3.2-Exp", gpu="mi300x")
    check_golden("deepseek-v3.2-exp_8x_mi300x", doc)
    assert flag(doc["vllm_args"], "--block-size") == "1"
    assert doc["env"]["VLLM_ROCM_USE_AITER"] == "1"
    # no metadata offline: sized from the recipe's VRAM minimum instead, and said so
    assert doc["tensor_parallel_size"] > 1
    assert any("no exact size for the model" in w for w in doc["warnings"])


@pytest.mark.parametrize(
    ("gpu", "fp4bmm", "aiter_moe"), [("mi300x", "0", None), ("mi355x", "1", "0")]
)
def test_gpt_oss_differs_by_gfx(gpu: str, fp4bmm: str, aiter_moe: str | None) -> None:
    doc = plan_doc(model="openai/gpt-oss-120b", gpu=gpu)
    check_golden(f"gpt-oss-120b_{gpu}", doc)
    assert doc["env"]["VLLM_ROCM_USE_AITER_FP4BMM"] == fp4bmm
    assert doc["env"].get("VLLM_ROCM_USE_AITER_MOE") == aiter_moe
    assert doc["gfx_version"] == ("gfx942" if gpu == "mi300x" else "gfx950")
    assert doc["tensor_parallel_size"] == 1  # 68.6 GiB of MXFP4 weights fit one GPU
    assert flag(doc["vllm_args"], "--tool-call-parser") == "openai"


def test_legacy_model() -> None:
    doc = plan_doc(model="Qwen/Qwen2.5-72B-Instruct", gpu="mi300x", gpu_count=1)
    check_golden("qwen2.5-72b_legacy", doc)
    assert doc["match"]["kind"] == "legacy"
    assert flag(doc["vllm_args"], "--tool-call-parser") == "hermes"
    # not in the shipped metadata and offline: planned, with the gap said out loud
    assert any("no exact size for the model" in w for w in doc["warnings"])


def test_unknown_model_gets_the_generic_config() -> None:
    """Outside the catalog, unreadable config: no remote code, no guessed parser, sized from
    the count in its name (was: --trust-remote-code and hermes whatever the model)."""
    doc = plan_doc(model="someorg/some-model-7B", gpu="mi300x", gpu_count=1)
    check_golden("generic_unknown", doc)
    assert doc["match"]["kind"] == "generic"
    assert "--trust-remote-code" not in doc["vllm_args"]
    assert flag(doc["vllm_args"], "--tool-call-parser") is None
    assert any("-- --trust-remote-code" in w for w in doc["warnings"])
    assert any(r["why"].startswith("TP 1: its name's count (7B)") for r in doc["reasons"])


def test_blacklisted_model_is_refused_with_an_alternative() -> None:
    with pytest.raises(InstinctError) as err:
        make_plan(PlanOptions(model="stabilityai/stable-diffusion-3.5-medium", gpu="mi300x"))
    assert err.value.id == "blacklisted" and err.value.exit_code == 1
    assert err.value.details["alternative"]


def test_context_limited_plan_caps_the_length_and_pins_utilization() -> None:
    doc = plan_doc(model="meta-llama/Llama-3.3-70B-Instruct", gpu="mi300x", gpu_count=1)
    check_golden("llama-3.3-70b_1x_mi300x_context_limited", doc)
    assert doc["context_limited"] is True
    limit = int(flag(doc["vllm_args"], "--max-model-len") or 0)
    assert 0 < limit < doc["native_max_model_len"] == 131072
    assert limit == doc["fit"]["fit"]["recommended_max_model_len"]
    assert flag(doc["vllm_args"], "--gpu-memory-utilization") is not None
    assert any("--kv-cache-dtype fp8" in w for w in doc["warnings"])


def test_image_older_than_the_recipe_warns() -> None:
    doc = plan_doc(gpu="mi300x", gpu_count=1, image="vllm/vllm-openai-rocm:v0.10.0")
    check_golden("old_image_warning", doc)
    assert doc["image"] == "vllm/vllm-openai-rocm:v0.10.0"
    assert any(
        "needs vLLM >= 0.17.0" in w and "Engine core initialization failed" in w
        for w in doc["warnings"]
    )


# ------------------------------------------------------------------ rules


def test_user_args_win_conflicts_and_are_reported() -> None:
    doc = plan_doc(gpu="mi300x", gpu_count=1, extra_args=["--tool-call-parser", "hermes"])
    assert flag(doc["vllm_args"], "--tool-call-parser") == "hermes"
    assert doc["vllm_args"].count("--tool-call-parser") == 1
    conflict = next(c for c in doc["conflicts"] if c.get("flag") == "--tool-call-parser")
    assert conflict["winner"] == {"source": "arguments after --", "value": "hermes"}
    assert {v["value"] for v in conflict["values"]} == {"qwen3_coder", "hermes"}


@pytest.mark.parametrize("value", ["32768", "32K", "32Ki", "32.768k"])
def test_a_context_length_after_dashes_is_the_plans_and_the_fits(value: str) -> None:
    """What runs is the merged argv: the plan's figure and the fit follow it."""
    doc = plan_doc(gpu="mi300x", gpu_count=1, extra_args=["--max-model-len", value])
    assert flag(doc["vllm_args"], "--max-model-len") == value  # passed on as written
    assert doc["max_model_len"] == 32768
    assert doc["fit"]["fit"]["requested_max_model_len"] == 32768


def test_a_context_length_too_large_after_dashes_is_refused_like_the_option() -> None:
    for kw in ({"max_model_len": 10**7}, {"extra_args": ["--max-model-len", "10000k"]}):
        with pytest.raises(InstinctError) as info:
            plan_doc(gpu="mi300x", gpu_count=1, **kw)
        assert info.value.id == "max_model_len_too_large"
        assert "exceeds both the model's 262144 tokens and the KV cache room" in str(info.value)


def test_a_context_length_beyond_the_models_warns_unless_allowed() -> None:
    """vLLM refuses it at startup without VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: say so now."""
    doc = plan_doc(gpu="mi300x", gpu_count=1, max_model_len=300000)
    assert any(
        "exceeds the model's 262144 tokens" in w and "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in w
        for w in doc["warnings"]
    )
    allowed = plan_doc(
        gpu="mi300x",
        gpu_count=1,
        max_model_len=300000,
        env_literal={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
    )
    assert not any("exceeds the model's" in w for w in allowed["warnings"])
    assert allowed["env"]["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"


def test_opt_in_feature_only_when_asked() -> None:
    plain = plan_doc(gpu="mi300x", gpu_count=1)
    assert flag(plain["vllm_args"], "--speculative-config") is None
    mtp = plan_doc(gpu="mi300x", gpu_count=1, features=["spec_decoding"])
    spec = flag(mtp["vllm_args"], "--speculative-config")
    assert spec and json.loads(spec)["method"] == "mtp"
    with pytest.raises(UsageError):
        plan_doc(gpu="mi300x", features=["no_such_feature"])


def test_gpus_restrict_with_hip_visible_devices_only() -> None:
    doc = plan_doc(gpu="mi300x", gpus=[2, 3], env_literal={"CUDA_VISIBLE_DEVICES": "0"})
    assert doc["env"]["HIP_VISIBLE_DEVICES"] == "2,3"
    assert "CUDA_VISIBLE_DEVICES" not in doc["env"]
    assert doc["gpu_count"] == 2
    with pytest.raises(UsageError):
        plan_doc(gpu="mi300x", gpu_count=2, gpus=[5])


def test_empty_visible_devices_is_never_passed() -> None:
    doc = plan_doc(gpu="mi300x", gpu_count=1, env_literal={"HIP_VISIBLE_DEVICES": ""})
    assert "HIP_VISIBLE_DEVICES" not in doc["env"]
    assert "HIP_VISIBLE_DEVICES=" not in " ".join(
        docker_argv(
            make_plan(
                PlanOptions(
                    gpu="mi300x", gpu_count=1, env_literal={"HIP_VISIBLE_DEVICES": ""}, hf_cache=HF
                )
            ).plan
        )
    )


def test_token_value_never_accepted_or_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = "hf_SENTINEL_value_9876"
    monkeypatch.setenv("HF_TOKEN", sentinel)
    result = make_plan(PlanOptions(gpu="mi300x", gpu_count=1, hf_cache=HF))
    for fmt in ("json", "docker", "shell", "native", "compose", "k8s"):
        assert sentinel not in render(result.plan, fmt)
    with pytest.raises(UsageError) as err:
        make_plan(PlanOptions(gpu="mi300x", extra_env={"HF_TOKEN": sentinel}))
    assert sentinel not in err.value.message + (err.value.fix or "")


def test_tp_larger_than_the_gpus_is_bad_input() -> None:
    with pytest.raises(UsageError) as err:
        plan_doc(gpu="mi300x", gpu_count=2, tp=4)
    assert err.value.id == "tp_exceeds_gpus"


def test_model_too_large_is_refused_with_the_gpus_it_needs() -> None:
    with pytest.raises(InstinctError) as err:
        make_plan(
            PlanOptions(
                model="Qwen/Qwen3-235B-A22B-Instruct-2507", gpu="mi300x", gpu_count=1, hf_cache=HF
            )
        )
    assert err.value.id == "does_not_fit"
    assert "4 such GPUs" in (err.value.fix or "")
    assert err.value.details["fit"]["verdict"] == "does_not_fit"


def test_requested_length_beyond_kv_room_is_refused_unless_forced() -> None:
    opts: dict[str, Any] = dict(
        model="meta-llama/Llama-3.3-70B-Instruct", gpu="mi300x", gpu_count=1, max_model_len=131072
    )
    with pytest.raises(InstinctError) as err:
        plan_doc(**opts)
    assert err.value.id == "max_model_len_too_large"
    forced = plan_doc(**opts, force=True)
    assert flag(forced["vllm_args"], "--max-model-len") == "131072"


def test_hf_cache_layout_decides_the_mount(tmp_path: Path) -> None:
    hub_style = tmp_path / "hub-cache"
    (hub_style / "models--Qwen--Qwen3.5-9B").mkdir(parents=True)
    home_style = tmp_path / "hf-home"
    (home_style / "hub" / "models--Qwen--Qwen3.5-9B").mkdir(parents=True)
    mount, why = resolve_hf_mount(PlanOptions(hf_cache=str(hub_style)), None)
    assert mount.container_path == "/root/.cache/huggingface/hub" and "root" in why
    mount, _ = resolve_hf_mount(PlanOptions(hf_cache=str(home_style)), None)
    assert mount.container_path == "/root/.cache/huggingface"


def test_hf_env_variables_choose_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hubc"))
    mount, _ = resolve_hf_mount(PlanOptions(), None)
    assert (mount.host_path, mount.container_path) == (
        str(tmp_path / "hubc"),
        "/root/.cache/huggingface/hub",
    )
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    mount, _ = resolve_hf_mount(PlanOptions(), None)
    assert mount.container_path == "/root/.cache/huggingface"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    mount, _ = resolve_hf_mount(PlanOptions(), None)
    assert mount.host_path == f"{tmp_path}/.cache/huggingface"


class _V:
    def __init__(self, key: str, precision: str, model_id: str) -> None:
        self.key, self.precision, self.model_id = key, precision, model_id
        self.vram_minimum_gb = None


class _Recipe:
    def __init__(self, variants: list[_V]) -> None:
        self.variants = {v.key: v for v in variants}
        self.default_variant = variants[0]
        self.model_id = variants[0].model_id


class _Match:
    def __init__(self, recipe: _Recipe, kind: str = "exact") -> None:
        self.recipe, self.kind, self.legacy = recipe, kind, None
        self.model_id = recipe.model_id
        self.variant = recipe.default_variant


STATUS = {"bf16": "native", "fp8": "native", "mxfp4": "emulated", "nvfp4": "unsupported"}


def test_variant_choice_prefers_default_then_native_then_emulated() -> None:
    variants = [
        _V("default", "bf16", "o/m"),
        _V("mxfp4", "mxfp4", "o/m-mxfp4"),
        _V("fp8", "fp8", "o/m-fp8"),
        _V("nv", "nvfp4", "o/m-nvfp4"),
    ]
    match: Any = _Match(_Recipe(variants))
    verdicts = {"o/m": "safe", "o/m-fp8": "safe", "o/m-mxfp4": "safe", "o/m-nvfp4": "safe"}
    assert choose_variant(match, STATUS.get, verdicts.get, None).key == "default"
    verdicts["o/m"] = "does_not_fit"
    choice = choose_variant(match, STATUS.get, verdicts.get, None)
    assert choice.key == "fp8" and "native" in choice.reason
    verdicts["o/m-fp8"] = "does_not_fit"
    assert choose_variant(match, STATUS.get, verdicts.get, None).key == "mxfp4"
    verdicts["o/m-mxfp4"] = "too_tight"
    assert "no variant fits" in choose_variant(match, STATUS.get, verdicts.get, None).reason
    with pytest.raises(UsageError) as err:
        choose_variant(match, STATUS.get, verdicts.get, "nvfp4")
    assert err.value.id == "unsupported_precision"
    assert choose_variant(match, STATUS.get, verdicts.get, "mxfp4").model_id == "o/m-mxfp4"


# ------------------------------------------------------------------ the CLI


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_instinct(args, env={**os.environ, **(env or {})}, timeout=120)


def test_plan_with_no_arguments_works_offline_without_a_gpu(tmp_path: Path) -> None:
    """The README's main job: no GPU, no docker, no network."""
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = run_cli("plan", "--json", env={"PATH": f"{empty}:/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["model"] == "Qwen/Qwen3.5-9B" and doc["gfx_version"] == "gfx942"
    assert doc["hardware_source"] == "profile"
    assert any("no AMD GPU detected" in w for w in doc["warnings"])


def test_shell_format_is_the_docker_argv() -> None:
    proc = run_cli("plan", "--gpu", "mi300x", "--hf-cache", HF, "--format", "shell")
    assert proc.returncode == 0, proc.stderr
    # the AITER cache is seeded from the image first (tests/plan/test_caches.py), then
    seed, run = proc.stdout.split(" &&\n")
    assert shlex.split(seed)[:5] == ["docker", "run", "--rm", "--entrypoint", "python3"]
    argv = shlex.split(run)
    assert argv[:3] == ["docker", "run", "-d"]
    image = next(a for a in argv if a.startswith("vllm/vllm-openai-rocm:"))
    assert argv[argv.index(image) + 1] == "Qwen/Qwen3.5-9B"  # vllm serve's positional model
    assert "--model" not in argv


def test_refusals_exit_nonzero_with_json_error() -> None:
    proc = run_cli("plan", "stabilityai/stable-diffusion-3.5-medium", "--gpu", "mi300x", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"]["id"] == "blacklisted"
    bad = run_cli("plan", "--gpu", "mi999x")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "mi300x" in bad.stderr  # the fix lists the profiles
