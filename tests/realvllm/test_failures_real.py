"""Real failures through ``instinct serve --engine native`` with the REAL vLLM: each must end
with the right diagnosis id (or be refused before anything starts, when the tool can tell).
The captured logs of the same failures are diagnosed in the fast suite (test_real_logs.py).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from instinct_serve.runtime.startup import FAILED_GRACE_S
from tests.infra.ports import free_port
from tests.infra.realvllm import Setup
from tests.realvllm.conftest import cli, serve_args, tier_env

pytestmark = pytest.mark.realvllm


@pytest.fixture
def env(real_vllm: Setup, tmp_path: Path) -> Iterator[dict[str, str]]:
    values = tier_env(real_vllm, tmp_path)
    yield values
    with pytest.MonkeyPatch.context() as mp:  # stop whatever a test left running
        mp.setenv("INSTINCT_DATA_DIR", values["INSTINCT_DATA_DIR"])
        for status in launcher.list_processes(LocalHost()):
            if status.running:  # a vLLM whose engine core died ignores SIGTERM: not long
                launcher.stop(LocalHost(), status.process.name, timeout=5)


def test_a_context_beyond_the_models_is_relaunched_at_the_models_limit(
    real_vllm: Setup, env: dict[str, str]
) -> None:
    """vLLM refuses --max-model-len 16384 for a model of 8192 positions (a real
    ValidationError); serve reads the model's limit from that line and relaunches once."""
    port = free_port()
    args = serve_args(
        str(real_vllm.model_dir),
        port=port,
        name=f"rv-len-{port}",
        vllm_args=("--max-model-len", "16384", "--enforce-eager"),
    )
    run = cli(args, env)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert [r["finding"] for r in result["relaunches"]] == ["max_model_len_exceeds_model"]
    assert result["relaunches"][0]["changes"] == ["--max-model-len 8192"]
    assert result["status"] == "ready" and result["endpoint"]["max_model_len"] == 8192


def test_an_unknown_architecture_is_diagnosed(
    real_vllm: Setup, env: dict[str, str], tmp_path: Path
) -> None:
    model = tmp_path / "SmolLM2-unknown-arch"
    model.mkdir()
    for item in real_vllm.model_dir.iterdir():
        if item.name != "config.json":
            (model / item.name).symlink_to(item)
    config = (real_vllm.model_dir / "config.json").read_text()
    (model / "config.json").write_text(
        config.replace('"LlamaForCausalLM"', '"InstinctTestUnknownForCausalLM"')
    )
    port = free_port()
    run = cli(serve_args(str(model), port=port, name=f"rv-arch-{port}"), env)
    assert run.returncode == 1, run.explain()
    failure = run.result["failure"]
    assert failure["id"] == "unsupported_architecture", failure
    assert "InstinctTestUnknownForCausalLM" in failure["line"]


def test_a_kv_cache_too_small_for_the_context_is_relaunched_at_what_fits(
    real_vllm: Setup, env: dict[str, str]
) -> None:
    """50 MB of KV cache for --max-model-len 8192: vLLM says the estimated maximum length is
    1920 (a real ValueError); serve relaunches once with it."""
    port = free_port()
    args = serve_args(
        str(real_vllm.model_dir),
        port=port,
        name=f"rv-kv-{port}",
        vllm_args=(
            "--max-model-len",
            "8192",
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            "50000000",
        ),
        kv_cache_gib=None,  # VLLM_CPU_KVCACHE_SPACE would override --kv-cache-memory-bytes
    )
    run = cli(args, env)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert [r["finding"] for r in result["relaunches"]] == ["max_model_len_exceeds_kv"]
    assert result["relaunches"][0]["changes"] == ["--max-model-len 1920"]
    assert result["status"] == "ready" and result["endpoint"]["max_model_len"] == 1920


def test_an_engine_core_failure_with_the_server_alive_ends_promptly(
    real_vllm: Setup, env: dict[str, str]
) -> None:
    """Compiled mode without a C++ compiler: torch inductor's InvalidCxxCompiler kills the
    engine core (about 60-90 s in) and vLLM's API server stays up (log 16). Serve ends the
    wait FAILED_GRACE_S after the failure line, diagnoses jit_build_failed and relaunches
    in eager mode."""
    port = free_port()
    args = serve_args(
        str(real_vllm.model_dir),
        port=port,
        name=f"rv-cxx-{port}",
        extra=("--env-literal", "CXX=/nonexistent/c++"),
        vllm_args=("--max-model-len", "2048"),  # compiled: no --enforce-eager
        timeout_s=420,  # a bound only: serve must end long before it (2 busy cores: the
        # failure comes 60-200 s in, after loading, in the compile warm-up)
    )
    run = cli(args, env, timeout=840)
    result = run.result
    failed = [e for e in run.of("phase") if e["phase"] == "failed"]
    assert failed, (run.phases, result.get("failure"))
    (relaunch,) = run.of("relaunch")
    assert relaunch["finding"] == "jit_build_failed"
    assert "--enforce-eager" in relaunch["changes"]
    # the wait ended FAILED_GRACE_S after the failure line (the server was still up), then
    # the discard (SIGKILL after 10 s): not at the --timeout
    assert relaunch["ts"] - failed[0]["ts"] < FAILED_GRACE_S + 30, (relaunch, failed[0])
    assert result["status"] == "ready", result.get("failure")
    assert [r["finding"] for r in result["relaunches"]] == ["jit_build_failed"]


def test_a_missing_model_directory_is_refused_before_launch(
    env: dict[str, str], tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-model"
    port = free_port()
    run = cli(serve_args(str(missing), port=port, name=f"rv-miss-{port}"), env)
    assert run.returncode == 2, run.explain()
    error = run.result["error"]
    assert error["id"] == "model_dir_not_found" and str(missing) in error["message"]
    assert "launching" not in run.phases


def test_a_port_already_taken_is_refused_before_launch(
    real_vllm: Setup, env: dict[str, str]
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = int(holder.getsockname()[1])
        args = serve_args(str(real_vllm.model_dir), port=port, name=f"rv-port-{port}")
        run = cli(args, env, timeout=120)
    assert run.returncode == 3, run.explain()
    error = run.result["error"]
    assert error["id"] == "port_in_use" and str(port) in error["message"]
    assert "launching" not in run.phases
