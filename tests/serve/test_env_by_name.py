"""Issue 26, finding 9, end to end (the real CLI, the real dockerd, the vLLM test double):
``--env`` values reach the container by name only.

A ``docker`` on PATH records the argv and the environment it was started with, then runs
the real docker: the values must be in the docker CLI's environment (docker's ``--env
NAME`` copies them from there) and so in the container's ``Config.Env``, and nowhere
else: not in the docker CLI's argv, the container's ``Args``/``Cmd``/labels, serve's
output, ``ps``, or any record serve wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

from tests.infra.ports import free_port
from tests.infra.ssh import SshServer
from tests.serve.conftest import Serve, inspect, run_cli

pytestmark = pytest.mark.docker

# The names the issue lists, passed by name from the caller's environment (a value on
# the command line is refused for them: they say credential).
LISTED = ("SSH_KEY", "PASS", "SESSION_ID", "COOKIE", "BEARER", "AUTH_HEADER")


def _recording(tmp_path: Path, tool: str, names: list[str]) -> tuple[Path, Path]:
    """A ``tool`` that appends {argv, the values of ``names`` it saw} to a file and execs
    the real one."""
    real = shutil.which(tool)
    assert real is not None
    bin_dir, record = tmp_path / "bin", tmp_path / f"{tool}-calls.jsonl"
    bin_dir.mkdir()
    wrapper = bin_dir / tool
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"names = {names!r}\n"
        f"with open({str(record)!r}, 'a') as fh:\n"
        "    seen = {n: os.environ[n] for n in names if n in os.environ}\n"
        "    fh.write(json.dumps({'argv': sys.argv[1:], 'env': seen}) + '\\n')\n"
        f"os.execv({real!r}, [{real!r}, *sys.argv[1:]])\n"
    )
    wrapper.chmod(0o755)
    return bin_dir, record


def _files_mentioning(root: Path, value: str) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if value in path.read_text(errors="replace"):
                    found.append(str(path))
            except OSError:
                continue
    return found


def test_env_values_reach_the_container_by_name_only(serve: Serve, tmp_path: Path) -> None:
    given = "given-on-the-command-line-" + uuid.uuid4().hex
    listed = {name: f"{name.lower()}-value-{uuid.uuid4().hex}" for name in LISTED}
    bin_dir, record = _recording(tmp_path, "docker", ["MY_SETTING", *LISTED])
    env = {**os.environ, **listed, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    name = serve.name("byname")
    by_name = [arg for n in LISTED for arg in ("--env", n)]
    run = serve("--env", f"MY_SETTING={given}", *by_name, name=name, env=env)
    assert run.returncode == 0, run.explain()
    secrets = {"MY_SETTING": given, **listed}

    info = inspect(name)
    assert info is not None
    container_env = info["Config"]["Env"]
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    (launch,) = [c for c in calls if c["argv"][:1] == ["run"] and "-d" in c["argv"]]
    plan = json.loads(run_cli(["ps", "--json"], env=env).stdout)
    records = [
        *_files_mentioning(Path(os.environ["INSTINCT_DATA_DIR"]), "MY_SETTING"),
        *_files_mentioning(Path(os.environ["INSTINCT_CACHE_DIR"]), "MY_SETTING"),
    ]
    assert records, "serve wrote no record naming the variable"  # the plan record names it
    for var, value in secrets.items():
        assert f"{var}={value}" in container_env  # expected: the server must get it
        assert launch["env"][var] == value  # in the docker CLI's environment, by name
        assert launch["argv"][launch["argv"].index(var) - 1] == "--env"
        for call in calls:
            assert value not in json.dumps(call["argv"]), (var, call["argv"][:3])
        assert value not in json.dumps(
            [info["Path"], info["Args"], info["Config"]["Cmd"], info["Config"]["Labels"]]
        )
        assert value not in run.stdout + run.stderr
        assert value not in json.dumps(plan)
        for path in records:
            assert value not in Path(path).read_text(errors="replace"), path


def test_a_credential_given_a_value_launches_nothing(serve: Serve) -> None:
    for flag in ("--env", "--env-literal"):
        for var in (*LISTED, "MY_VALUE"):
            value = f"ghp_{uuid.uuid4().hex}abcd" if var == "MY_VALUE" else uuid.uuid4().hex
            name = serve.name("refused")
            run = serve(flag, f"{var}={value}", name=name, port=free_port())
            assert run.returncode == 2, run.explain()
            assert run.result["error"]["id"] == "secret_in_args"
            assert value not in run.stdout + run.stderr
            assert inspect(name) is None


@pytest.mark.ssh
def test_a_given_value_travels_over_ssh_on_stdin(
    serve: Serve, sshd: SshServer, tmp_path: Path
) -> None:
    """--host: the value reaches the remote docker CLI's environment through ssh's stdin;
    neither the ssh argv nor the remote docker's argv carries it."""
    given = "given-over-ssh-" + uuid.uuid4().hex
    bin_dir, record = _recording(tmp_path, "ssh", ["MY_SETTING"])
    env = {**sshd.env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    name = serve.name("sshbyname")
    run = serve("--host", sshd.host_spec, "--env", f"MY_SETTING={given}", name=name, env=env)
    assert run.returncode == 0, run.explain()
    info = inspect(name)  # the "remote" docker is this machine's
    assert info is not None and f"MY_SETTING={given}" in info["Config"]["Env"]
    assert given not in json.dumps([info["Args"], info["Config"]["Cmd"], info["Config"]["Labels"]])
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls and all(given not in json.dumps(c["argv"]) for c in calls)
    assert any("MY_SETTING" in json.dumps(c["argv"]) for c in calls)  # the name, in the run
    assert given not in run.stdout + run.stderr


def test_a_relaunch_passes_on_the_values_the_endpoint_was_given(
    serve: Serve, tmp_path: Path
) -> None:
    """``--env NAME=VALUE`` given once: a later ``serve --upgrade`` and ``rollback``, run
    where the value is not exported, pass on the value the running endpoint was given (read
    from its container), still by name only: never in docker's argv."""
    given = "given-once-" + uuid.uuid4().hex
    exported = "exported-once-" + uuid.uuid4().hex
    bin_dir, record = _recording(tmp_path, "docker", ["MY_SETTING", "SSH_KEY"])
    bare = {k: v for k, v in os.environ.items() if k not in ("MY_SETTING", "SSH_KEY")}
    env = {**bare, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    name, port = serve.name("inherit"), free_port()
    serve.names += [f"{name}-next", f"{name}-prev"]
    first = serve(
        "--env", f"MY_SETTING={given}", "--env", "SSH_KEY", name=name, port=port,
        env={**env, "SSH_KEY": exported},
    )  # fmt: skip
    assert first.returncode == 0, first.explain()
    other = serve.double(load_s=0.2)
    up = serve(
        "--upgrade", "--env", "MY_SETTING", "--env", "SSH_KEY", image=other, name=name,
        port=port, env=env,
    )  # fmt: skip
    assert up.returncode == 0, up.explain()
    for step in ("upgrade", "rollback"):
        info = inspect(name)
        assert info is not None, step
        assert f"MY_SETTING={given}" in info["Config"]["Env"], step
        assert f"SSH_KEY={exported}" in info["Config"]["Env"], step
        if step == "upgrade":
            back = run_cli(
                ["rollback", name, "--yes", "--root", str(serve.root), "--json"], env=env
            )
            assert back.returncode == 0, back.explain()
            assert given not in back.stdout + back.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    launches = [c for c in calls if c["argv"][:1] == ["run"] and "-d" in c["argv"]]
    assert len(launches) >= 3
    assert all(c["env"] == {"MY_SETTING": given, "SSH_KEY": exported} for c in launches)
    assert all(given not in json.dumps(c["argv"]) for c in calls)
