"""Each check's pass and fail paths, on a temp root and an environment the test controls."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

from instinct_serve.checks import CHECKS, CheckOptions, run_checks
from instinct_serve.checks.probe import TargetEnv
from instinct_serve.checks.rules import _group_fix
from instinct_serve.hosts import LocalHost
from tests.hosts.argv_audit import recorded_argv
from tests.infra.fakebin import FakeBin

from .conftest import AsUserHost, FakeRoot, run_one

pytestmark = pytest.mark.usefixtures("target_env")


def test_every_check_has_a_stable_id_and_order() -> None:
    assert list(CHECKS) == [
        "docker_installed",
        "docker_daemon",
        "amdgpu_driver",
        "dev_kfd",
        "dev_dri",
        "visible_devices_empty",
        "gpu_supported",
        "rocm_version",
        "numa_balancing",
        "hf_token",
        "hf_cache_dir",
        "hf_cache_disk",
        "port_free",
    ]


# --- amdgpu driver ---------------------------------------------------------------------------


def test_amdgpu_loaded(fake_root: FakeRoot) -> None:
    check = run_one("amdgpu_driver", root=str(fake_root))
    assert check.status == "ok" and "6.10.5" in check.message
    assert check.details == {"initstate": "live", "version": "6.10.5"}


def test_amdgpu_builtin_without_initstate(fake_root: FakeRoot) -> None:
    fake_root.remove("/sys/module/amdgpu/initstate")
    fake_root.remove("/sys/module/amdgpu/version")
    check = run_one("amdgpu_driver", root=str(fake_root))
    assert check.status == "ok" and check.message == "amdgpu kernel driver loaded"


def test_amdgpu_missing(fake_root: FakeRoot) -> None:
    fake_root.remove("/sys/module/amdgpu")
    check = run_one("amdgpu_driver", root=str(fake_root))
    assert check.status == "error" and "not loaded" in check.message
    assert check.fix and "modprobe amdgpu" in check.fix


def test_amdgpu_not_live(fake_root: FakeRoot) -> None:
    fake_root.write("/sys/module/amdgpu/initstate", "coming\n")
    check = run_one("amdgpu_driver", root=str(fake_root))
    assert check.status == "error" and "'coming'" in check.message


# --- devices ---------------------------------------------------------------------------------


def test_devices_present_and_accessible(fake_root: FakeRoot) -> None:
    kfd = run_one("dev_kfd", root=str(fake_root))
    dri = run_one("dev_dri", root=str(fake_root))
    assert kfd.status == "ok"
    assert dri.status == "ok" and dri.message == "2 render nodes accessible"
    assert dri.details["render_nodes"] == ["/dev/dri/renderD128", "/dev/dri/renderD129"]


def test_devices_accessible_to_an_unprivileged_user(
    fake_root: FakeRoot, as_nobody: AsUserHost
) -> None:
    assert run_one("dev_kfd", as_nobody, root=str(fake_root)).status == "ok"
    assert run_one("dev_dri", as_nobody, root=str(fake_root)).status == "ok"


def test_kfd_missing(fake_root: FakeRoot) -> None:
    fake_root.remove("/dev/kfd")
    check = run_one("dev_kfd", root=str(fake_root))
    assert check.status == "error" and "/dev/kfd is missing" in check.message


def test_kfd_not_accessible(fake_root: FakeRoot, as_nobody: AsUserHost) -> None:
    (fake_root.path / "dev/kfd").chmod(0o660)  # owned by root:root, like render without us
    check = run_one("dev_kfd", as_nobody, root=str(fake_root))
    assert check.status == "error"
    assert "/dev/kfd (group root) is not readable and writable by nobody" in check.message
    assert check.fix == "sudo usermod -aG video,render nobody, then log out and back in"


def test_dri_missing(fake_root: FakeRoot) -> None:
    fake_root.remove("/dev/dri")
    check = run_one("dev_dri", root=str(fake_root))
    assert check.status == "error" and "/dev/dri is missing" in check.message


def test_dri_without_render_nodes(fake_root: FakeRoot) -> None:
    fake_root.remove("/dev/dri/renderD128")
    fake_root.remove("/dev/dri/renderD129")
    check = run_one("dev_dri", root=str(fake_root))
    assert check.status == "error" and "no render nodes" in check.message


def test_dri_render_node_not_accessible(fake_root: FakeRoot, as_nobody: AsUserHost) -> None:
    (fake_root.path / "dev/dri/renderD129").chmod(0o600)
    check = run_one("dev_dri", as_nobody, root=str(fake_root))
    assert check.status == "error" and check.message.startswith("1 of 2 render nodes")
    assert check.details["denied"] == ["/dev/dri/renderD129"]
    assert check.fix and "usermod -aG video,render nobody" in check.fix


def test_group_fix_when_membership_needs_a_new_login() -> None:
    env = TargetEnv({}, frozenset(), 1000, "alice", ("alice",), ("alice", "render", "video"))
    fix = _group_fix(env, {"render", "video"})
    assert "already in group render,video" in fix and "log out and back in" in fix
    assert "usermod" not in fix
    fresh = TargetEnv({}, frozenset(), 1000, "bob", ("bob",), ("bob",))
    assert _group_fix(fresh, {"render"}) == (
        "sudo usermod -aG video,render bob, then log out and back in"
    )


# --- environment -----------------------------------------------------------------------------


def test_no_visible_devices_variables() -> None:
    check = run_one("visible_devices_empty")
    assert check.status == "ok" and check.details == {"empty": [], "set": {}}


@pytest.mark.parametrize(
    "name", ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"]
)
def test_empty_visible_devices_hides_every_gpu(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "")
    check = run_one("visible_devices_empty")
    assert check.status == "error"
    assert check.message == f"{name} is set to an empty string, which hides every GPU"
    assert check.fix and f"unset {name}" in check.fix


def test_two_empty_and_one_limiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", " ")
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    check = run_one("visible_devices_empty")
    assert check.status == "error"
    assert check.details == {
        "empty": ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"],
        "set": {"CUDA_VISIBLE_DEVICES": "0,1"},
    }


def test_limiting_visible_devices_is_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "0,1")
    check = run_one("visible_devices_empty")
    assert (
        check.status == "ok" and check.message == "HIP_VISIBLE_DEVICES=0,1 limits the GPUs in use"
    )


# --- ROCm ------------------------------------------------------------------------------------


def test_rocm_version_known(fake_root: FakeRoot, fakebin: FakeBin) -> None:
    fakebin.missing("amd-smi")  # only the version file under the root answers
    fakebin.missing("hipconfig")
    check = run_one("rocm_version", root=str(fake_root))
    assert check.status == "ok" and check.message == "ROCm 6.4.0"


def test_rocm_version_unknown(fake_root: FakeRoot, fakebin: FakeBin) -> None:
    fakebin.missing("amd-smi")
    fakebin.missing("hipconfig")
    fake_root.remove("/opt/rocm")
    check = run_one("rocm_version", root=str(fake_root))
    assert check.status == "warn" and check.details == {"version": None}


# --- NUMA ------------------------------------------------------------------------------------


def test_numa_balancing_off(fake_root: FakeRoot) -> None:
    assert run_one("numa_balancing", root=str(fake_root)).status == "ok"


def test_numa_balancing_on(fake_root: FakeRoot) -> None:
    fake_root.write("/proc/sys/kernel/numa_balancing", "1\n")
    check = run_one("numa_balancing", root=str(fake_root))
    assert check.status == "warn" and "kernel.numa_balancing=1" in check.message
    assert check.fix and "sysctl -w kernel.numa_balancing=0" in check.fix


def test_numa_balancing_absent(fake_root: FakeRoot) -> None:
    fake_root.remove("/proc/sys/kernel/numa_balancing")
    assert run_one("numa_balancing", root=str(fake_root)).status == "skip"


# --- HF token --------------------------------------------------------------------------------

SENTINEL = "hf_SENTINELsentinel0123456789abcdef"


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"])
def test_token_in_environment(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, SENTINEL)
    check = run_one("hf_token", model_gated=True)
    assert check.status == "ok" and check.details["source"] == name
    assert SENTINEL not in repr(check.to_dict())


def test_token_never_reaches_argv_or_report(
    fake_root: FakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SENTINEL)
    options = CheckOptions(root=str(fake_root), model_gated=True, auto_fix=True, yes=True)
    with recorded_argv() as seen:
        report = run_checks(LocalHost(), options)
    token = report.get("hf_token")
    assert token is not None and token.status == "ok"
    assert any(argv[0] == "sh" for argv in seen)  # the probes really ran as processes
    assert all(SENTINEL not in "\0".join(argv) for argv in seen)
    assert SENTINEL not in json.dumps(report.to_dict())


def test_token_file_in_hf_home(target_env: Path) -> None:
    token = target_env / ".cache" / "huggingface" / "token"
    token.parent.mkdir(parents=True)
    token.write_text(SENTINEL)
    check = run_one("hf_token", model_gated=True)
    assert check.status == "ok" and check.details["source"] == str(token)


def test_token_file_in_custom_places(target_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    custom = target_env / "elsewhere" / "tok"
    custom.parent.mkdir()
    custom.write_text(SENTINEL)
    monkeypatch.setenv("HF_TOKEN_PATH", str(custom))
    assert run_one("hf_token").details["source"] == str(custom)
    monkeypatch.delenv("HF_TOKEN_PATH")
    monkeypatch.setenv("HF_HOME", str(custom.parent))
    custom.rename(custom.parent / "token")
    assert run_one("hf_token").details["source"] == str(custom.parent / "token")


def test_empty_token_file_or_variable_is_no_token(
    target_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = target_env / ".cache" / "huggingface" / "token"
    token.parent.mkdir(parents=True)
    token.write_text("")
    monkeypatch.setenv("HF_TOKEN", "")
    assert run_one("hf_token").status == "warn"


def test_no_token(target_env: Path) -> None:
    unknown = run_one("hf_token")
    assert unknown.status == "warn" and unknown.fix and "HF_TOKEN" in unknown.fix
    gated = run_one("hf_token", model="meta-llama/Llama-3.1-8B", model_gated=True)
    assert gated.status == "error"
    assert gated.message.startswith("meta-llama/Llama-3.1-8B is gated")
    assert gated.fix and "accept the model's license" in gated.fix
    open_model = run_one("hf_token", model="Qwen/Qwen3-8B", model_gated=False)
    assert open_model.status == "ok" and "does not need one" in open_model.message


# --- HF cache --------------------------------------------------------------------------------


def test_cache_dir_missing_but_creatable(target_env: Path) -> None:
    check = run_one("hf_cache_dir")
    expected = str(target_env / ".cache" / "huggingface" / "hub")
    assert check.status == "warn" and check.details["path"] == expected
    assert check.details["existing_parent"] == str(target_env)
    assert check.fix == f"mkdir -p {expected}"


def test_cache_dir_exists(target_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = target_env / "models"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    check = run_one("hf_cache_dir")
    assert check.status == "ok" and check.details["path"] == str(hub)


def test_cache_dir_from_option_with_tilde(target_env: Path) -> None:
    (target_env / "hf").mkdir()
    check = run_one("hf_cache_dir", hf_cache="~/hf")
    assert check.status == "ok" and check.details["path"] == str(target_env / "hf")


def test_cache_dir_is_a_file(target_env: Path) -> None:
    (target_env / "hf").write_text("")
    check = run_one("hf_cache_dir", hf_cache=str(target_env / "hf"))
    assert check.status == "error" and "not a directory" in check.message


def test_cache_dir_not_writable(target_env: Path, as_nobody: AsUserHost) -> None:
    hub = target_env / "hub"
    hub.mkdir(mode=0o755)  # root's, like a directory Docker created for a bind mount
    check = run_one("hf_cache_dir", as_nobody, hf_cache=str(hub))
    assert check.status == "error" and "not writable by nobody" in check.message
    assert check.fix == f"sudo chown -R nobody {hub}"


def test_cache_dir_cannot_be_created(target_env: Path, as_nobody: AsUserHost) -> None:
    check = run_one("hf_cache_dir", as_nobody, hf_cache=str(target_env / "a" / "b"))
    assert check.status == "error" and "cannot create it" in check.message
    assert check.details["creatable"] is False


def test_cache_disk_space(target_env: Path) -> None:
    deep = target_env / "not" / "yet" / "there"
    ok = run_one("hf_cache_disk", hf_cache=str(deep), min_free_gb=0.001)
    assert ok.status == "ok" and ok.details["checked_path"] == str(target_env)
    free = os.statvfs(target_env)
    expected_gb = free.f_bavail * free.f_frsize / 1e9
    assert abs(float(ok.details["free_gb"]) - expected_gb) < 1.0  # df and statvfs agree

    low = run_one("hf_cache_disk", hf_cache=str(deep), min_free_gb=10**9)
    assert low.status == "warn" and low.message.startswith("only ")

    need = run_one("hf_cache_disk", hf_cache=str(deep), need_gb=10**9)
    assert need.status == "error" and "the model needs 1e+09 GB" in need.message
    enough = run_one("hf_cache_disk", hf_cache=str(deep), need_gb=0.001, min_free_gb=10**9)
    assert enough.status == "ok"  # a known need replaces the generic threshold


def test_cache_paths_follow_huggingface_hub(
    target_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(target_env / "xdg"))
    assert run_one("hf_cache_dir").details["path"] == str(target_env / "xdg/huggingface/hub")
    monkeypatch.setenv("HF_HOME", str(target_env / "hfhome"))
    assert run_one("hf_cache_dir").details["path"] == str(target_env / "hfhome/hub")
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(target_env / "legacy"))
    assert run_one("hf_cache_dir").details["path"] == str(target_env / "legacy")
    monkeypatch.setenv("HF_HUB_CACHE", str(target_env / "new"))
    assert run_one("hf_cache_dir").details["path"] == str(target_env / "new")


# --- port ------------------------------------------------------------------------------------


def test_port_skipped_without_port() -> None:
    assert run_one("port_free").status == "skip"


def test_port_in_use_and_free() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        busy = run_one("port_free", port=port)
        assert (
            busy.status == "error"
            and busy.message == f"port {port} is already in use on this machine"
        )
    free = run_one("port_free", port=port)
    assert free.status == "ok" and free.details["source"] == "/proc/net/tcp"


def test_port_in_use_on_ipv6() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("::1", 0))
        except OSError:
            pytest.skip("no ::1 here")
        sock.listen()
        assert run_one("port_free", port=sock.getsockname()[1]).status == "error"


def test_port_from_proc_under_the_root(fake_root: FakeRoot) -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    fake_root.write(
        "/proc/net/tcp",
        header
        + "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0\n"
        + "   1: 0100007F:1F91 0100007F:D3A2 01 00000000:00000000 00:00000000 00000000 0\n",
    )
    assert run_one("port_free", root=str(fake_root), port=8080).status == "error"
    assert run_one("port_free", root=str(fake_root), port=8081).status == "ok"  # not LISTEN


def test_port_falls_back_to_ss(fake_root: FakeRoot) -> None:
    # no proc/net under the root: the real `ss -tln` answers
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        check = run_one("port_free", root=str(fake_root), port=sock.getsockname()[1])
    assert check.status == "error" and check.details["source"] == "ss -tln"


# --- the report ------------------------------------------------------------------------------


def test_report_shape(fake_root: FakeRoot, target_env: Path) -> None:
    (target_env / ".cache/huggingface/hub").mkdir(parents=True)
    fake_root.write("/proc/sys/kernel/numa_balancing", "1\n")
    report = run_checks(LocalHost(), CheckOptions(root=str(fake_root), min_free_gb=0.001))
    doc = report.to_dict()
    assert list(doc) == [
        "host",
        "ready",
        "errors",
        "warnings",
        "fixes_applied",
        "fixes_failed",
        "fixes_pending",
        "checks",
    ]
    assert doc["host"] == "local"
    assert [c["id"] for c in doc["checks"]] == list(CHECKS)
    statuses = {c["id"]: c["status"] for c in doc["checks"]}
    assert statuses["numa_balancing"] == "warn" and statuses["hf_token"] == "warn"
    assert {w["id"] for w in doc["warnings"]} >= {"numa_balancing", "hf_token"}
    assert all(set(w) == {"id", "message", "fix"} for w in doc["warnings"] + doc["errors"])
    numa = next(c for c in doc["checks"] if c["id"] == "numa_balancing")
    assert numa["fixable"] is True
    assert doc["ready"] == (not doc["errors"])


def test_device_nodes_can_be_real_character_devices(world_tmp: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    root = FakeRoot(world_tmp / "chr")
    (root.path / "dev/dri").mkdir(parents=True)
    os.mknod(root.path / "dev/kfd", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(root.path / "dev/dri/renderD128", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    assert run_one("dev_kfd", root=str(root)).status == "ok"
    assert run_one("dev_dri", root=str(root)).status == "ok"
