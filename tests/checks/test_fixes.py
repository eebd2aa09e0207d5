"""--auto-fix: only registered safe fixes, privileged ones only with --yes, then a recheck."""

from __future__ import annotations

from pathlib import Path

import pytest

from instinct_serve.checks import CheckOptions, run_checks
from instinct_serve.checks.fixes import FIXES
from instinct_serve.hosts import LocalHost

from .conftest import AsUserHost, FakeRoot

pytestmark = pytest.mark.usefixtures("target_env")


def test_every_fix_says_why_it_is_safe_and_how_to_undo_it() -> None:
    assert set(FIXES) == {"hf_cache_dir", "numa_balancing", "docker_daemon"}
    for check_id, fix in FIXES.items():
        assert fix.check_id == check_id and fix.safe_because and fix.undo


def test_without_auto_fix_nothing_changes(fake_root: FakeRoot, target_env: Path) -> None:
    fake_root.write("/proc/sys/kernel/numa_balancing", "1\n")
    report = run_checks(LocalHost(), CheckOptions(root=str(fake_root)))
    assert not (target_env / ".cache").exists()
    assert (fake_root.path / "proc/sys/kernel/numa_balancing").read_text() == "1\n"
    fixable = {c.id for c in report.checks if c.fixable}
    assert {"hf_cache_dir", "numa_balancing"} <= fixable
    assert not report.fixes_applied and not report.fixes_pending and not report.fixes_failed


def test_unprivileged_fix_applies_without_yes(fake_root: FakeRoot, target_env: Path) -> None:
    hub = target_env / ".cache" / "huggingface" / "hub"
    report = run_checks(LocalHost(), CheckOptions(root=str(fake_root), auto_fix=True))
    assert hub.is_dir()
    applied = {f.id: f for f in report.fixes_applied}
    assert applied["hf_cache_dir"].command == f"mkdir -p -- {hub}"
    assert not applied["hf_cache_dir"].privileged
    check = report.get("hf_cache_dir")
    assert check is not None and check.status == "ok" and not check.fixable


def test_privileged_fix_is_only_listed_without_yes(fake_root: FakeRoot) -> None:
    numa = fake_root.write("/proc/sys/kernel/numa_balancing", "1\n")
    report = run_checks(LocalHost(), CheckOptions(root=str(fake_root), auto_fix=True))
    assert numa.read_text() == "1\n"
    pending = {f.id: f for f in report.fixes_pending}
    assert pending["numa_balancing"].command == f"echo 0 | tee -- {numa}"
    assert pending["numa_balancing"].privileged
    check = report.get("numa_balancing")
    assert check is not None and check.status == "warn"


def test_privileged_fix_runs_with_yes_and_is_rechecked(fake_root: FakeRoot) -> None:
    numa = fake_root.write("/proc/sys/kernel/numa_balancing", "1\n")
    report = run_checks(LocalHost(), CheckOptions(root=str(fake_root), auto_fix=True, yes=True))
    assert numa.read_text() == "0\n"
    assert "numa_balancing" in {f.id for f in report.fixes_applied}
    check = report.get("numa_balancing")
    assert check is not None and check.status == "ok"


def test_non_root_user_gets_sudo_n(fake_root: FakeRoot, as_nobody: AsUserHost) -> None:
    numa = fake_root.write("/proc/sys/kernel/numa_balancing", "1\n")
    pending = run_checks(as_nobody, CheckOptions(root=str(fake_root), auto_fix=True))
    assert [f.command for f in pending.fixes_pending if f.id == "numa_balancing"] == [
        f"echo 0 | sudo tee -- {numa}"
    ]
    ran = run_checks(as_nobody, CheckOptions(root=str(fake_root), auto_fix=True, yes=True))
    failed = {f.id: f for f in ran.fixes_failed}
    # no password-less sudo for nobody here (or no sudo at all): it fails, never prompts
    assert "numa_balancing" in failed and not failed["numa_balancing"].ok
    assert numa.read_text() == "1\n"
