"""A plan for a CPU-only engine (vLLM's CPU backend): the model's settings without the GPU's,
the KV cache sized from VLLM_CPU_KVCACHE_SPACE as the real vLLM 0.32 sizes it
(tests/fixtures/logs/real-vllm-cpu), and said in the plan."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from instinct_serve.errors import UsageError
from instinct_serve.gather.plan import make_plan
from instinct_serve.hardware.target import cpu_target
from instinct_serve.options import PlanOptions
from instinct_serve.plan.cpu import byte_count, kv_size
from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import PlanResult
from instinct_serve.plan.render import native_script
from instinct_serve.plan.summary import summary_rows
from tests.infra.paths import CONFIGS

GIB = 2**30
RAM = 24 * GIB
SMOL_BYTES_PER_TOKEN = 23_040  # SmolLM2-135M: 2 x 30 layers x 3 KV heads x 64 x 2 bytes


@pytest.fixture
def smol(tmp_path: Path) -> str:
    """A local directory of SmolLM2-135M-Instruct, the model the real-vLLM tier serves."""
    model = tmp_path / "SmolLM2-135M-Instruct"
    model.mkdir()
    shutil.copy(CONFIGS / "HuggingFaceTB__SmolLM2-135M-Instruct.json", model / "config.json")
    return str(model)


def cpu_plan(model: str, *extra_args: str, **kw: object) -> PlanResult:
    opts = PlanOptions(model=model, engine="native", extra_args=list(extra_args), **kw)  # type: ignore[arg-type]
    return make_plan(opts, target=cpu_target(opts, memory_bytes=RAM))


def reason(result: PlanResult, item_start: str) -> str:
    return next(r.why for r in result.plan.reasons if r.item.startswith(item_start))


def test_the_kv_cache_holds_what_the_real_vllm_said() -> None:
    # log 01: "CPU KV cache size: 46,592 tokens" at VLLM_CPU_KVCACHE_SPACE=1
    assert kv_size(GIB, SMOL_BYTES_PER_TOKEN) == (46_592, 46_464)
    # log 12: 50,000,000 bytes, "the estimated maximum model length is 1920"
    size = kv_size(50_000_000, SMOL_BYTES_PER_TOKEN)
    assert size is not None and size.longest == 1920
    assert kv_size(None, SMOL_BYTES_PER_TOKEN) is None


@pytest.mark.parametrize(
    ("text", "count"),
    [("50000000", 50_000_000), ("1g", 10**9), ("1.5g", 1_500_000_000), ("1G", GIB)],
)
def test_kv_cache_memory_bytes_read_as_vllm_reads_it(text: str, count: int) -> None:
    assert byte_count(text) == count


@pytest.mark.parametrize("text", ["1.5G", "auto", "-1", "", "12 G"])
def test_what_vllm_would_not_read_is_no_byte_count(text: str) -> None:
    assert byte_count(text) is None


def test_a_cpu_plan_has_no_gpu_in_it_and_says_its_kv_cache(smol: str) -> None:
    result = cpu_plan(
        smol, "--max-model-len", "2048", gpu="mi300x", env_literal={"VLLM_CPU_KVCACHE_SPACE": "1"}
    )
    plan = result.plan
    assert result.hardware_source == "cpu" and result.fit is None
    assert plan.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert plan.gpu_indices is None and plan.docker_flags == []
    assert (plan.gfx_version, plan.gpu_name, plan.verdict, plan.fit) == ("cpu", "CPU", None, None)
    assert plan.vllm_args == ["--port", "8000", "--max-model-len", "2048"]
    assert "46,592 tokens of this model" in reason(result, "VLLM_CPU_KVCACHE_SPACE=1")
    assert plan.labels[LABEL_PLAN_HASH] == plan.plan_hash
    assert any(w == "--gpu not used: a CPU-only engine serves on the CPU" for w in plan.warnings)
    script = native_script(plan)
    assert "HIP_VISIBLE_DEVICES" not in script and "ROCM" not in script
    rows = dict(summary_rows(result))
    assert "GPUs" not in rows and rows["Device"].startswith("CPU (vLLM's CPU backend")
    assert rows["KV cache"].startswith("VLLM_CPU_KVCACHE_SPACE=1: 1 GiB of RAM = 46,592 tokens")
    assert "Image" not in rows and "Container" not in rows  # a process on the host
    assert rows["Name"] == plan.container_name


def test_a_recipe_model_keeps_its_model_settings_and_drops_the_gpus() -> None:
    model = "Qwen/Qwen3-8B"  # shipped metadata: no network
    gpu = make_plan(PlanOptions(model=model, gpu="mi300x", engine="native")).plan
    assert any(key.startswith("VLLM_ROCM_") for key in gpu.env)  # the GPU plan's
    plan = cpu_plan(model).plan
    assert not any(key.startswith(("VLLM_ROCM_", "HIP_", "HSA_", "ROCR_")) for key in plan.env)
    for parser in ("--tool-call-parser", "--reasoning-parser"):  # the model's own settings
        assert parser in plan.vllm_args
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "4"  # the default, said in the plan


def test_without_a_size_the_plan_sets_one_and_limits_the_context_to_it(smol: str) -> None:
    plan = cpu_plan(smol, "--kv-cache-memory-bytes", "50000000").plan
    assert "VLLM_CPU_KVCACHE_SPACE" not in plan.env  # it would override the argument
    assert plan.max_model_len == 1920 and plan.context_limited
    assert plan.vllm_args[-2:] == ["--max-model-len", "1920"]
    assert any(w.startswith("context limited to 1,920 of 8,192 tokens") for w in plan.warnings)


def test_a_context_longer_than_the_kv_cache_is_warned_about(smol: str) -> None:
    plan = cpu_plan(smol, "--max-model-len", "8192", "--kv-cache-memory-bytes", "50000000").plan
    assert plan.max_model_len == 8192  # asked for: kept, and vLLM will say so
    assert any("vLLM refuses to start" in w and "1,920" in w for w in plan.warnings)


def test_the_default_kv_space_is_at_most_a_quarter_of_the_ram(smol: str) -> None:
    opts = PlanOptions(model=smol, engine="native")
    plan = make_plan(opts, target=cpu_target(opts, memory_bytes=6 * GIB)).plan
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"


@pytest.mark.parametrize("value", ["0", "1.5", "-2", "lots"])
def test_a_kv_space_vllm_cannot_use_is_refused(smol: str, value: str) -> None:
    with pytest.raises(UsageError) as err:
        cpu_plan(smol, env_literal={"VLLM_CPU_KVCACHE_SPACE": value})
    assert err.value.id == "bad_cpu_kv_space"


def test_pipeline_parallel_on_the_cpu_backend_runs_compiled_not_eager(smol: str) -> None:
    """Eager + PP 2 on vLLM's CPU backend: healthy, then the first request kills the engine
    (real-vllm-cpu log 18); the compiled mode without a compiler answers (log 19). The plan
    replaces --enforce-eager with it and says why; one rank keeps eager as asked."""
    from instinct_serve import vllm_args
    from instinct_serve.hardware.target import CPU_PP_COMPILATION

    pp = cpu_plan(smol, "--enforce-eager", "--pipeline-parallel-size", "2")
    args = pp.plan.vllm_args
    assert "--enforce-eager" not in args
    assert vllm_args.value(args, "--compilation-config") == CPU_PP_COMPILATION
    assert "first request would kill the engine" in reason(pp, "--compilation-config")
    assert any("--enforce-eager replaced" in w for w in pp.plan.warnings)
    one = cpu_plan(smol, "--enforce-eager")
    assert "--enforce-eager" in one.plan.vllm_args
    assert not vllm_args.has(one.plan.vllm_args, "--compilation-config")


def test_an_eager_cpu_plan_compiles_nothing_at_all(smol: str) -> None:
    """vLLM's CPU build compiles the sampler's logprob ranks even eager: with no C++ compiler
    the first logprobs request kills the engine (real-vllm-cpu/20). An eager plan, or the
    pipeline stages' eager backend, turns torch.compile off; compiled mode needs the compiler
    anyway and is left alone, as is a value the user gave."""
    eager = cpu_plan(smol, "--enforce-eager")
    assert eager.plan.env["TORCHDYNAMO_DISABLE"] == "1"
    assert "sampler's log-probability ranks" in reason(eager, "TORCHDYNAMO_DISABLE=1")
    pp = cpu_plan(smol, "--enforce-eager", "--pipeline-parallel-size", "2")
    assert pp.plan.env["TORCHDYNAMO_DISABLE"] == "1"
    assert "TORCHDYNAMO_DISABLE" not in cpu_plan(smol).plan.env  # compiled
    given = cpu_plan(smol, "--enforce-eager", env_literal={"TORCHDYNAMO_DISABLE": "0"})
    assert given.plan.env["TORCHDYNAMO_DISABLE"] == "0"


def test_a_cpu_only_sglang_is_planned_for_sglangs_cpu_backend(smol: str) -> None:
    """``--server sglang`` with a CPU-only SGLang: no AMD config is needed (AMD's are GPU
    launches), SGLang's CPU engine is switched on and its torch attention chosen before your
    arguments, and nothing of vLLM's CPU backend is planned."""
    from instinct_serve.gather.plan import cpu_plan_target
    from instinct_serve.hosts import LocalHost

    opts = PlanOptions(
        model=smol, engine="native", extra_args=["--max-total-tokens", "8192"], server="sglang"
    )
    result = make_plan(opts, target=cpu_plan_target(opts, LocalHost()))  # this host's RAM
    plan = result.plan
    assert plan.server == "sglang" and plan.gpu_name == "CPU" and plan.gpu_indices is None
    assert plan.vllm_args[:4] == ["--device", "cpu", "--attention-backend", "torch_native"]
    assert plan.vllm_args[-2:] == ["--max-total-tokens", "8192"]
    assert plan.env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in plan.env and "HIP_VISIBLE_DEVICES" not in plan.env
    assert "the native SGLang is CPU-only" in reason(result, "device")
    assert "the SGLang on this machine is CPU-only" in " ".join(result.warnings)
    assert plan.labels[LABEL_PLAN_HASH] == plan.plan_hash
    script = native_script(plan)
    assert f"python3 -m sglang.launch_server --model-path {smol} --host 127.0.0.1" in script
    # a backend you name wins, once
    mine = cpu_plan(smol, "--attention-backend", "sdpa", server="sglang").plan
    assert mine.vllm_args[:2] == ["--device", "cpu"]
    assert mine.vllm_args.count("--attention-backend") == 1 and "sdpa" in mine.vllm_args
