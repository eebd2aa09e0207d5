"""Safe by default, end to end (the real CLI, the real dockerd, the vLLM test double):

- the race: two serves of one plan at once end ready/reused with one container, and
  neither removes the other's (the audit: 4 pairs in 5 destroyed each other's);
- the bind address: 127.0.0.1 by default, every interface with --public;
- the key: --public generates one, the probes use it, a request without it gets 401, and
  it is in no argument, plan, label or output; a user's own key passes by name;
- labels are data: garbage labels never crash ps/status, an impostor carrying a plan's
  labels is named and left alone, never reused;
- secrets a server prints in its log are redacted by serve, logs and diagnose.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.infra.ports import free_port
from tests.serve.conftest import CLI, MODEL, Run, Serve, docker, inspect, parse_lines, run_cli

pytestmark = pytest.mark.docker

RACE_ROUNDS = int(os.environ.get("INSTINCT_RACE_ROUNDS", "3"))  # the audit ran 5 pairs


def _start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def _finish(proc: subprocess.Popen[str]) -> Run:
    out, err = proc.communicate(timeout=180)
    args = proc.args if isinstance(proc.args, list) else [proc.args]
    return Run([str(a) for a in args], proc.returncode, out, err, parse_lines(out))


def _containers_with(label: str) -> list[str]:
    out = docker("ps", "-aq", "--no-trunc", "--filter", f"label={label}")
    return out.stdout.split()


# ------------------------------------------------------------------ the race


RACE_EVENTS = ("reused", "attached", "note")


def test_two_serves_of_one_plan_at_once_share_one_container(serve: Serve) -> None:
    image = serve.double(load_s=2.0)
    for _round in range(RACE_ROUNDS):
        port, name = free_port(), serve.name("race")
        argv = serve.args(image=image, port=port, name=name)
        procs = [_start(argv), _start(argv)]
        runs = [_finish(p) for p in procs]
        for run in runs:
            assert run.returncode == 0, run.explain()
            assert run.result["status"] in ("ready", "reused"), run.explain()
            assert not run.of("replaced"), run.explain()
        launched = [e for run in runs for e in run.of("launched")]
        assert len(launched) == 1, [r.explain() for r in runs]  # one launched, one followed
        followed = [e["event"] for run in runs for e in run.events if e["event"] in RACE_EVENTS]
        print(f"race round {_round}: {[r.result['status'] for r in runs]} {followed}")
        plan_hash = runs[0].result["plan_hash"]
        assert runs[1].result["plan_hash"] == plan_hash
        ids = _containers_with(f"instinct-serve.plan-hash={plan_hash}")
        assert len(ids) == 1  # one container, nobody's removed
        info = inspect(name)
        assert info is not None and info["Id"] == ids[0] and info["State"]["Running"]
        assert info["RestartCount"] == 0 and info["State"]["ExitCode"] == 0
        docker("rm", "-f", name)


def test_a_follower_follows_the_relaunch_of_the_serve_it_raced(serve: Serve) -> None:
    """The winner relaunches with a fix (OOM in graph capture -> --enforce-eager); the other
    run, which only followed, neither relaunches nor removes anything: it follows the new
    container, and both end ready with one container."""
    image = serve.double("oom_graph_capture", load_s=1.5)
    port, name = free_port(), serve.name("race-oom")
    argv = serve.args(image=image, port=port, name=name)
    runs = [_finish(p) for p in [_start(argv), _start(argv)]]
    for run in runs:
        assert run.returncode == 0, run.explain()
        assert run.result["status"] in ("ready", "reused"), run.explain()
    relaunches = [e for run in runs for e in run.of("relaunch")]
    assert len(relaunches) == 1 and len([e for r in runs for e in r.of("launched")]) == 2
    ids = _containers_with(f"instinct-serve.plan-hash={runs[0].result['plan_hash']}")
    info = inspect(name)
    assert ids and info is not None and ids == [info["Id"]] and "--enforce-eager" in info["Args"]


# ------------------------------------------------------------------ bind address and key


def _bindings(info: dict[str, Any], port: int) -> list[dict[str, str]]:
    return list(info["HostConfig"]["PortBindings"][f"{port}/tcp"])


def test_the_endpoint_listens_on_loopback_by_default(serve: Serve) -> None:
    port, name = free_port(), serve.name()
    run = serve(port=port, name=name)
    assert run.returncode == 0, run.explain()
    info = inspect(name)
    assert info is not None
    assert _bindings(info, port) == [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
    addresses = {b["HostIp"] for b in info["NetworkSettings"]["Ports"][f"{port}/tcp"]}
    assert addresses == {"127.0.0.1"}
    endpoint = run.result["endpoint"]
    assert endpoint["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert endpoint["bind_address"] == "127.0.0.1" and endpoint["api_key"] is None


def test_public_listens_everywhere_and_requires_a_generated_key(serve: Serve) -> None:
    port, name = free_port(), serve.name("public")
    run = serve("--public", port=port, name=name)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["status"] == "ready"  # /v1/models, warm-up and coherence used the key
    endpoint = result["endpoint"]
    assert endpoint["bind_address"] == "0.0.0.0"
    key_doc = endpoint["api_key"]
    assert key_doc["env"] == "VLLM_API_KEY" and key_doc["source"] == "generated"
    key_file = Path(key_doc["file"])
    mode = stat.S_IMODE(key_file.stat().st_mode)
    assert mode == 0o600 and stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    key = key_file.read_text().strip()
    assert len(key) >= 40

    info = inspect(name)
    assert info is not None
    assert _bindings(info, port) == [{"HostIp": "0.0.0.0", "HostPort": str(port)}]
    # the key is in the container's environment (by name from serve), nowhere else
    assert f"VLLM_API_KEY={key}" in info["Config"]["Env"]
    for where in (info["Args"], info["Config"]["Cmd"], info["Config"]["Labels"], info["Path"]):
        assert key not in json.dumps(where)
    assert key not in run.stdout + run.stderr
    plan = run_cli(
        ["plan", MODEL, "--gpu", "mi300x", "--public", "--port", str(port), "--json"],
        env={**os.environ, "VLLM_API_KEY": "unrelated"},
    )
    assert plan.returncode == 0 and key not in plan.stdout
    assert json.loads(plan.stdout)["api_key"] == {"env": "VLLM_API_KEY", "source": "generated"}

    # vLLM's rule, kept by the double: /v1 needs the key, /health does not
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 401
    bad = {"Authorization": "Bearer wrong"}
    assert (
        httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=bad, timeout=5).status_code == 401
    )
    good = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", headers=good, timeout=5).is_success

    # the printed curl reads the key file itself, and works as printed
    curl = endpoint["curl"]
    assert f'"Authorization: Bearer $(cat -- {key_file})"' in curl and key not in curl
    answer = subprocess.run(["sh", "-c", curl], capture_output=True, text=True, timeout=30)
    assert answer.returncode == 0 and json.loads(answer.stdout)["choices"], answer.stdout

    again = serve("--public", port=port, name=name)  # reuse: the probes read the key file
    assert again.returncode == 0 and again.result["status"] == "reused", again.explain()
    assert key not in again.stdout + again.stderr

    human = run_cli(serve.args("--public", port=port, name=name, json_lines=False))
    assert human.returncode == 0, human.explain()
    assert str(key_file) in human.stdout and "every interface" in human.stdout
    assert key not in human.stdout + human.stderr

    stop = run_cli(["stop", "--yes", name, "--json"])
    assert stop.returncode == 0 and not key_file.exists()  # the key goes with its endpoint


def test_a_users_own_key_passes_by_name(serve: Serve) -> None:
    own = "users-own-key-" + uuid.uuid4().hex
    env = {**os.environ, "VLLM_API_KEY": own}
    port, name = free_port(), serve.name("ownkey")
    run = serve("--env", "VLLM_API_KEY", port=port, name=name, env=env)
    assert run.returncode == 0, run.explain()
    assert own not in run.stdout + run.stderr
    endpoint = run.result["endpoint"]
    assert endpoint["api_key"]["source"] == "environment" and endpoint["api_key"]["file"] is None
    assert '"Authorization: Bearer $VLLM_API_KEY"' in endpoint["curl"]
    info = inspect(name)
    assert info is not None and own not in json.dumps(info["Args"])
    assert _bindings(info, port)[0]["HostIp"] == "127.0.0.1"  # a key does not open it
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 401

    unset = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    missing = serve("--env", "VLLM_API_KEY", port=free_port(), env=unset)
    assert missing.returncode == 2 and missing.result["error"]["id"] == "api_key_missing"

    in_args = serve("--", "--api-key", own, port=free_port(), env=env)
    assert in_args.returncode == 2 and in_args.result["error"]["id"] == "secret_in_args"
    assert own not in in_args.stdout + in_args.stderr


# ------------------------------------------------------------------ labels are data


def _plan_labels(serve: Serve, image: str, port: int, name: str) -> dict[str, str]:
    plan = run_cli(
        [
            *["plan", MODEL, "--gpu", "mi300x", "--image", image, "--port", str(port)],
            *["--name", name, "--hf-cache", str(serve.hf_cache), "--json"],
        ]
    )
    assert plan.returncode == 0, plan.explain()
    labels: dict[str, str] = json.loads(plan.stdout)["labels"]
    return labels


def _impostor(name: str, labels: dict[str, str], port: int, *tail: str, entry: str = "") -> str:
    argv = ["run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:{port}"]
    for key, value in labels.items():
        argv += ["--label", f"{key}={value}"]
    if entry:
        argv += ["--entrypoint", entry]
    out = docker(*argv, *tail)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_an_impostor_with_copied_labels_is_named_and_left_alone(serve: Serve) -> None:
    image = serve.double(load_s=0.2)
    port, name = free_port(), serve.name("planned")
    labels = _plan_labels(serve, image, port, name)
    other = serve.name("impostor")
    cid = _impostor(
        other, labels, port, image, MODEL, "--port", str(port), "--served-model-name", "evil"
    )
    run = serve(image=image, port=port, name=name)
    assert run.returncode == 3, run.explain()
    error = run.result["error"]
    assert error["id"] == "port_in_use" and other in error["message"]
    assert "not reused" in error["message"] and not run.of("reused")
    info = inspect(other)
    assert info is not None and info["Id"] == cid and info["State"]["Running"]  # untouched
    assert inspect(name) is None  # nothing launched in its place
    docker("rm", "-f", other)

    # the same name as the plan's, and an entrypoint of its own: named, untouched
    cid = _impostor(name, labels, port, image, "-c", "sleep 300", entry="sh")
    run = serve(image=image, port=port, name=name)
    assert run.returncode == 3, run.explain()
    error = run.result["error"]
    assert error["id"] == "container_name_conflict" and name in error["message"]
    info = inspect(name)
    assert info is not None and info["Id"] == cid and info["State"]["Running"]


def test_garbage_labels_never_crash_ps_or_status(serve: Serve) -> None:
    from instinct_serve.agents import core
    from instinct_serve.agents.inputs import StatusInput

    names = []
    for port_label in ("²", "99999", "-1", "80 00", "٣", ""):
        name = serve.name("forged")
        names.append(name)
        labels = {
            "instinct-serve.managed": "true",
            "instinct-serve.port": port_label,
            "instinct-serve.model": "\x1b[31mred\x07",
            "instinct-serve.plan-hash": "x" * 5000,
            "instinct-serve.owner": "\x1b[31mme\x07",  # nobody's: garbage is no owner
        }
        _impostor(name, labels, free_port(), "--entrypoint", "sh", serve.double(), "-c", "sleep 60")
    for args in (["ps", "--json"], ["ps"], ["ps", "--json", "--no-health", "--everyone"]):
        ps = run_cli(args)
        assert ps.returncode == 0, ps.explain()
        assert "Traceback" not in ps.stderr
    listed = json.loads(run_cli(["ps", "--json", "--everyone"]).stdout)["endpoints"]
    rows = {r["name"]: r for r in listed}
    for name in names:
        assert rows[name]["port"] is None and rows[name]["model"] is None
        assert rows[name]["owner"] is None
    mine = {r["name"] for r in json.loads(run_cli(["ps", "--json"]).stdout)["endpoints"]}
    assert not mine & set(names)  # nobody's: listed with --everyone only
    outcome = core.status(StatusInput(everyone=True))
    assert {r["name"] for r in outcome.doc["endpoints"]} >= set(names)


# ------------------------------------------------------------------ secrets in logs


def test_secrets_a_server_prints_are_redacted_by_serve_logs_and_diagnose(
    serve: Serve, tmp_path: Path
) -> None:
    hf_value = "caller-hub-token-" + uuid.uuid4().hex  # not hf_-shaped: redacted by value
    by_name = "by-name-value-" + uuid.uuid4().hex  # a variable passed with --env NAME
    shaped = "hf_" + uuid.uuid4().hex[:34]  # token-shaped: redacted by its shape
    log_line = f"ERROR 01-01 00:00:00 [core.py:1] token={hf_value} other={by_name} hub={shaped}"
    image = _image_that_prints(serve, log_line)
    try:
        _check_redacted(serve, image, hf_value, by_name, shaped)
    finally:
        for name in serve.names:
            docker("rm", "-f", name)
        docker("rmi", "-f", image)


def _check_redacted(serve: Serve, image: str, hf_value: str, by_name: str, shaped: str) -> None:
    env = {**os.environ, "HF_TOKEN": hf_value, "APP_SETTING": by_name}
    name = serve.name("leaky")
    secrets = (hf_value, by_name, shaped)

    run = serve("--env", "APP_SETTING", image=image, name=name, env=env)
    assert run.returncode == 1 and run.result["status"] == "failed", run.explain()
    assert "[redacted]" in json.dumps(run.result["failure"]["log_tail"])
    human = run_cli(serve.args("--env", "APP_SETTING", image=image, json_lines=False), env=env)
    assert human.returncode == 1 and "[redacted]" in human.stdout + human.stderr
    logs = run_cli(["logs", name, "--tail", "200"], env=env)
    assert logs.returncode == 0 and "[redacted]" in logs.stdout
    follow = run_cli(["logs", name, "-f", "--tail", "200"], env=env)  # stopped: it ends
    assert "[redacted]" in follow.stdout
    diag = run_cli(["diagnose", "--container", name, "--json"], env=env)
    assert diag.returncode in (0, 1), diag.explain()
    for text in (run.stdout + run.stderr, human.stdout + human.stderr, logs.stdout):
        for secret in secrets:
            assert secret not in text
    for secret in secrets:
        assert secret not in follow.stdout + follow.stderr
    # diagnose reads any container the user names (no labels read): as MCP, it redacts the
    # caller's secrets (HF_TOKEN here) and token-shaped text
    assert "[redacted]" in diag.stdout
    for secret in (hf_value, shaped):
        assert secret not in diag.stdout + diag.stderr
    # the container itself did get the values (by name), so the log really had them
    raw = docker("logs", name)
    assert hf_value in raw.stdout + raw.stderr


def _image_that_prints(serve: Serve, line: str) -> str:
    """The test image whose double replays a log holding ``line`` and dies."""
    tag = f"instinct-serve-test/vllm-double-leaky:{uuid.uuid4().hex[:12]}"
    dockerfile = "\n".join(
        [
            f"FROM {serve.image.tag}",
            f"RUN mkdir -p /leak && echo {json.dumps(line)} > /leak/leak.log",
            'ENV VLLM_DOUBLE_MODE=die VLLM_DOUBLE_REPLAY=/leak/leak.log VLLM_DOUBLE_LOAD_S="0.2"',
        ]
    )
    out = subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=dockerfile + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    assert out.returncode == 0, out.stderr
    return tag
