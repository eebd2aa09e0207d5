"""`instinct check --host` through the real loopback sshd: the remote's facts, not ours."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from instinct_serve.checks import CheckOptions, run_checks
from tests.hosts.argv_audit import recorded_argv
from tests.infra.ssh import SshServer

from .conftest import FakeRoot

pytestmark = pytest.mark.ssh

REMOTE_SENTINEL = "hf_SENTINELremote0123456789abcdef"
LOCAL_SENTINEL = "hf_SENTINELlocal0123456789abcdef"


def test_check_json_over_ssh_reports_the_remote(
    sshd: SshServer, fake_root: FakeRoot, world_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote_hf = world_tmp / "remote-hf"
    # The remote login environment (SetEnv in the client config, AcceptEnv on the server):
    # a token, an empty HIP_VISIBLE_DEVICES and its own HF_HOME. None of them are set here.
    client = sshd.client(
        "remote-facts",
        set_env={
            "HF_TOKEN": REMOTE_SENTINEL,
            "HIP_VISIBLE_DEVICES": "",
            "HF_HOME": str(remote_hf),
        },
    )
    env = client.env()
    for name in ("HF_TOKEN", "HIP_VISIBLE_DEVICES", "HF_HOME", "HF_HUB_CACHE"):
        env.pop(name, None)
    args = ["check", "--json", "--host", client.host_spec, "--root", str(fake_root)]
    proc = subprocess.run(
        [sys.executable, "-m", "instinct_serve", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["host"] == sshd.alias
    checks = {c["id"]: c for c in doc["checks"]}
    assert checks["hf_token"]["status"] == "ok"
    assert checks["hf_token"]["details"]["source"] == "HF_TOKEN"
    assert checks["visible_devices_empty"]["status"] == "error"
    assert checks["hf_cache_dir"]["details"]["path"] == f"{remote_hf}/hub"
    assert checks["dev_kfd"]["status"] == "ok" and checks["amdgpu_driver"]["status"] == "ok"
    assert "visible_devices_empty" in {e["id"] for e in doc["errors"]}
    assert REMOTE_SENTINEL not in proc.stdout + proc.stderr


def test_no_token_reaches_any_argv_local_or_remote(
    sshd: SshServer, fake_root: FakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", LOCAL_SENTINEL)
    client = sshd.client("token-argv", set_env={"HF_TOKEN": REMOTE_SENTINEL})
    with recorded_argv() as seen:
        remote = run_checks(client.host(), CheckOptions(root=str(fake_root), model_gated=True))
    token = remote.get("hf_token")
    assert token is not None and token.status == "ok"
    assert seen and any(argv[0] == "ssh" for argv in seen)
    for argv in seen:
        joined = "\0".join(argv)
        assert REMOTE_SENTINEL not in joined and LOCAL_SENTINEL not in joined
    text = json.dumps(remote.to_dict())
    assert REMOTE_SENTINEL not in text and LOCAL_SENTINEL not in text


def test_auto_fix_acts_on_the_remote(sshd: SshServer, fake_root: FakeRoot, world_tmp: Path) -> None:
    cache = world_tmp / "remote-cache" / "hub"
    report = run_checks(
        sshd.host(), CheckOptions(root=str(fake_root), hf_cache=str(cache), auto_fix=True)
    )
    assert cache.is_dir()
    assert [f.command for f in report.fixes_applied if f.id == "hf_cache_dir"] == [
        f"mkdir -p -- {cache}"
    ]


def test_local_environment_does_not_leak_into_the_remote_report(
    sshd: SshServer, fake_root: FakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")  # empty here, unset over there
    monkeypatch.setenv("HF_TOKEN", LOCAL_SENTINEL)
    report = run_checks(sshd.host(), CheckOptions(root=str(fake_root)))
    visible = report.get("visible_devices_empty")
    assert visible is not None and visible.status == "ok"
    remote_token = report.get("hf_token")
    has_remote_token = os.path.exists(os.path.expanduser("~/.cache/huggingface/token"))
    assert remote_token is not None
    assert remote_token.status == ("ok" if has_remote_token else "warn")
