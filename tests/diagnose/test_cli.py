"""``instinct diagnose`` through the real entry point: inputs, JSON, exit codes, docker logs."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from instinct_serve.cli.main import main
from tests.diagnose.logs import real_log
from tests.infra.fakebin import FakeBin
from tests.infra.paths import LOGS
from tests.infra.ssh import SshServer

HEALTHY = "09_healthy_startup_MI300X_Llama-3.1-8B-Instruct_fp16_gmu0.9_vllm0.9.2dev_V0.log"
OOM = "02_oom_during_cuda_graph_capture.log"


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0), out, err


def test_log_file_with_a_known_failure_exits_0_with_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(real_log(OOM), encoding="utf-8")
    code, out, _ = run(["diagnose", "--log", str(log), "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["matched"] is True and doc["primary"] == "oom_graph_capture"
    assert doc["findings"][0]["retry"] == {"add_args": ["--enforce-eager"]}


def test_healthy_log_exits_0_says_so_and_shows_the_tail(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(["diagnose", "--log", str(LOGS / HEALTHY)], capsys)
    assert code == 0
    assert "No failure in this log: the start-up reached starting server." in out
    assert "No known failure pattern" not in out
    assert "Success: True" in out  # the last lines of the log are shown


def test_healthy_log_json_adds_healthy_and_keeps_the_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(["diagnose", "--log", str(LOGS / HEALTHY), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0
    assert doc["healthy"] is True and doc["matched"] is False and doc["primary"] is None
    assert doc["findings"] == [] and doc["last_error"] is None and doc["commands"] == []
    assert doc["facts"]["phase_reached"] == "starting_server"
    assert doc["message"].startswith("no failure in this log")
    assert {"source", "facts", "tail"} <= set(doc)


def test_unreadable_log_is_not_healthy_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("nothing that vLLM prints\n", encoding="utf-8")  # no progress, no error
    code, out, _ = run(["diagnose", "--log", str(log), "--json"], capsys)
    assert code == 1 and json.loads(out)["healthy"] is False
    cut = real_log(HEALTHY).replace("Success: True", "RuntimeError: boom")  # an error line
    log.write_text(cut, encoding="utf-8")
    code, out, _ = run(["diagnose", "--log", str(log), "--json"], capsys)
    assert code == 1 and json.loads(out)["healthy"] is False


def test_human_view_shows_id_cause_fix_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(real_log("01_engine_core_init_failed_flashinfer_jit_cause.log"))
    code, out, _ = run(["diagnose", "--log", str(log)], capsys)
    assert code == 0
    assert out.index("jit_build_failed") < out.index("engine_core_init_failed")
    for word in ("cause:", "fix:", "line 3:", "VLLM_USE_FLASHINFER_SAMPLER=0"):
        assert word in out


def test_stdin_with_dash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(real_log("03_gated_repo_401.log")))
    code, out, _ = run(["diagnose", "-", "--json"], capsys)
    assert code == 0 and json.loads(out)["primary"] == "gated_repo"


def test_symptom_and_gfx(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["diagnose", "--symptom", "segfault during warm-up", "--gfx", "gfx942", "--json"], capsys
    )
    assert code == 0
    assert json.loads(out)["primary"] == "fp4bmm_gfx942"


@pytest.mark.parametrize(
    "args",
    [
        ["diagnose"],
        ["diagnose", "--log", "a.log", "--symptom", "oom"],
        ["diagnose", "extra"],
        ["diagnose", "--log", "/nonexistent/vllm.log"],
        ["diagnose", "--log", "/"],
    ],
)
def test_bad_input_exits_2_without_a_traceback(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(args, capsys)
    assert code == 2
    assert "Traceback" not in out + err
    assert "Error:" in err


def test_missing_file_in_json_mode_is_a_json_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["diagnose", "--log", "/nonexistent/vllm.log", "--json"], capsys)
    assert code == 2
    assert json.loads(out)["error"]["id"] == "log_not_found"


def _stamped(text: str) -> str:
    return "".join(
        f"2025-06-05T06:18:{i % 60:02d}.{i:09d}Z {line}\n"
        for i, line in enumerate(text.splitlines())
    )


def test_container_logs_through_docker(
    fakebin: FakeBin, capsys: pytest.CaptureFixture[str]
) -> None:
    fakebin.add(
        "docker",
        {"logs --timestamps --tail 5000 vllm-qwen": ("", _stamped(real_log(OOM)), 0)},
    )
    code, out, _ = run(
        ["diagnose", "--container", "vllm-qwen", "--json", "--host", "local"], capsys
    )
    assert code == 0
    assert json.loads(out)["primary"] == "oom_graph_capture"
    assert fakebin.calls("docker") == [["logs", "--timestamps", "--tail", "5000", "vllm-qwen"]]


def test_unknown_container_is_bad_input(
    fakebin: FakeBin, capsys: pytest.CaptureFixture[str]
) -> None:
    fakebin.add(
        "docker", {}, default=("", "Error response from daemon: No such container: nope\n", 1)
    )
    code, _, err = run(["diagnose", "--container", "nope"], capsys)
    assert code == 2
    assert "no container named nope" in err


@pytest.mark.ssh
def test_log_file_on_an_explicit_remote_host(
    sshd: SshServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The "remote" is this machine over the loopback sshd: the file is read through ssh.
    monkeypatch.setenv("INSTINCT_SSH_CONFIG", str(sshd.ssh_config))
    log = tmp_path / "remote.log"
    log.write_text(real_log("07_model_architecture_not_supported.log"), encoding="utf-8")
    code, out, _ = run(["diagnose", "--log", str(log), "--host", sshd.host_spec, "--json"], capsys)
    assert code == 0 and json.loads(out)["primary"] == "unsupported_architecture"
    code, out, _ = run(
        ["diagnose", "--log", str(tmp_path / "absent.log"), "--host", sshd.host_spec, "--json"],
        capsys,
    )
    assert code == 2 and json.loads(out)["error"]["id"] == "log_not_found"


def test_a_native_endpoint_is_diagnosed_from_its_log_file(
    fakebin: FakeBin, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a failed `serve --engine native` suggests: `instinct diagnose --container NAME`.
    from instinct_serve.engine import launcher
    from instinct_serve.hosts import LocalHost

    fakebin.add(
        "docker", {}, default=("", "Error response from daemon: No such container: vllm-n\n", 1)
    )
    log = tmp_path / "server.log"
    log.write_text(real_log(OOM), encoding="utf-8")
    host = LocalHost()
    launcher.launch(host, "vllm-n", ["sh", "-c", f"cat '{log}'; exit 1"], meta={"port": 8000})
    for _ in range(100):
        status = launcher.status(host, "vllm-n")
        if status is not None and status.exit_code is not None:
            break
        time.sleep(0.05)
    code, out, _ = run(["diagnose", "--container", "vllm-n", "--json"], capsys)
    assert code == 0, out
    assert json.loads(out)["primary"] == "oom_graph_capture"
    assert fakebin.calls("docker") == [["logs", "--timestamps", "--tail", "5000", "vllm-n"]]


def test_a_json_retry_is_shown_quoted_for_the_shell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        real_log("public/07_triton_attn_full_graph_capture_memory_fault_step3.5_tp4.log")
    )
    code, out, _ = run(["diagnose", "--log", str(log)], capsys)
    assert code == 0 and "attn_full_graph_capture_fault" in out
    assert '--compilation-config \'{"cudagraph_mode":"PIECEWISE"}\'' in " ".join(out.split())


def test_server_flag_words_a_bare_sglang_error_for_sglang(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two bare lines from an SGLang launch (sgl-project/sglang#20890): nothing in them says
    # SGLang, the flag does
    log = tmp_path / "sglang.log"
    log.write_text(
        real_log("public/43_sglang_hip_oom_aiter_workspace_after_kv_pool_mi325x.log"), "utf-8"
    )
    code, out, _ = run(["diagnose", "--log", str(log), "--server", "sglang", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["primary"] == "out_of_memory"
    assert doc["findings"][0]["fix"].startswith("Lower --mem-fraction-static")
    assert doc["facts"]["server"] == "sglang"
    code, out, _ = run(["diagnose", "--log", str(log), "--json"], capsys)
    assert "--mem-fraction-static" not in json.loads(out)["findings"][0]["fix"]
