"""The fixes ``instinct check --auto-fix`` may apply, keyed by check id.

Only fixes that are safe without a human's judgement belong here: each one changes nothing
but the state its check looks at, can be undone with one command, and touches no account,
group, credential or persistent system configuration. Anything needing root is
``privileged``: it runs only with ``--yes``, as ``sudo -n`` (never a password prompt) unless
the host user is already root; without ``--yes`` the report lists the exact command instead.

Deliberately NOT fixed here (a person must decide): joining the video/render/docker groups
(grants device or root-equivalent access, needs a new login), unsetting environment
variables (lives in the user's shell profile), installing drivers, Docker or ROCm, freeing
disk space, stopping whatever holds a port, and changing ownership of an existing cache.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

from instinct_serve.checks.model import Check, FixOutcome
from instinct_serve.checks.probe import Probe

FIX_TIMEOUT_S = 60


@dataclass(frozen=True)
class FixPlan:
    """The exact command a fix runs on the host (argv, plus text on its stdin)."""

    check_id: str
    argv: tuple[str, ...]
    privileged: bool
    input: str | None = None

    def command(self, sudo: bool) -> tuple[str, ...]:
        return ("sudo", "-n", *self.argv) if sudo else self.argv

    def display(self, sudo: bool) -> str:
        """How the command reads in a shell (for the report and for running it by hand)."""
        text = shlex.join(("sudo", *self.argv) if sudo else self.argv)
        if self.input is not None:
            text = f"echo {shlex.quote(self.input.rstrip(chr(10)))} | {text}"
        return text


@dataclass(frozen=True)
class SafeFix:
    """A registered fix: why it is safe, how to undo it, and how to plan it on a host."""

    check_id: str
    safe_because: str
    undo: str
    plan: Callable[[Probe, Check], FixPlan | None]


def _plan_hf_cache_dir(probe: Probe, check: Check) -> FixPlan | None:
    path = check.details.get("path")
    if check.details.get("missing") and check.details.get("creatable") and path:
        return FixPlan("hf_cache_dir", ("mkdir", "-p", "--", str(path)), privileged=False)
    return None


def _plan_numa_balancing(probe: Probe, check: Check) -> FixPlan | None:
    if check.status != "warn":
        return None
    path = probe.path("/proc/sys/kernel/numa_balancing")
    # Writing the proc file is exactly what `sysctl -w kernel.numa_balancing=0` does; tee
    # keeps it a plain argv (no shell) and honours the --root prefix.
    return FixPlan("numa_balancing", ("tee", "--", path), privileged=True, input="0\n")


def _plan_docker_daemon(probe: Probe, check: Check) -> FixPlan | None:
    if check.details.get("reason") != "not_running" or check.details.get("docker_host"):
        return None
    init = probe.read(probe.path("/proc/1/comm"))
    if init is None or init.strip() != "systemd":
        return None  # no service manager we know how to ask; a stray dockerd is not safe
    return FixPlan("docker_daemon", ("systemctl", "start", "docker"), privileged=True)


FIXES: dict[str, SafeFix] = {
    "hf_cache_dir": SafeFix(
        "hf_cache_dir",
        safe_because="creates one empty directory owned by the user, where the Hugging Face "
        "cache belongs anyway; without it a Docker bind mount would create it owned by root",
        undo="rmdir the directory",
        plan=_plan_hf_cache_dir,
    ),
    "numa_balancing": SafeFix(
        "numa_balancing",
        safe_because="a runtime kernel tunable that AMD's MI300 tuning guides set to 0; it is "
        "not persisted (a reboot restores the distribution default)",
        undo="sudo sysctl -w kernel.numa_balancing=1",
        plan=_plan_numa_balancing,
    ),
    "docker_daemon": SafeFix(
        "docker_daemon",
        safe_because="starts the installed docker service through systemd the way the "
        "distribution does, without enabling it at boot or changing its configuration; "
        "offered only when no DOCKER_HOST is set and nothing answers on the socket",
        undo="sudo systemctl stop docker",
        plan=_plan_docker_daemon,
    ),
}


def plan_fix(probe: Probe, check: Check) -> FixPlan | None:
    """The fix for a failing check on this host, or None when none is safe."""
    fix = FIXES.get(check.id)
    if fix is None or check.status not in ("warn", "error"):
        return None
    return fix.plan(probe, check)


def needs_sudo(probe: Probe, plan: FixPlan) -> bool:
    return plan.privileged and probe.env().uid != 0


def apply_fix(probe: Probe, plan: FixPlan, *, yes: bool) -> tuple[str, FixOutcome]:
    """Run the plan (or decline it); returns ("applied" | "failed" | "pending", outcome)."""
    sudo = needs_sudo(probe, plan)
    shown = plan.display(sudo)
    if plan.privileged and not yes:
        return "pending", FixOutcome(
            plan.check_id,
            shown,
            ok=False,
            message="needs root: rerun with --auto-fix --yes, or run the command yourself",
            privileged=True,
        )
    result = probe.host.run(plan.command(sudo), timeout=FIX_TIMEOUT_S, input=plan.input)
    if result.ok:
        return "applied", FixOutcome(
            plan.check_id, shown, ok=True, message="done", privileged=plan.privileged
        )
    err = result.stderr.strip()
    last = err.splitlines()[-1] if err else f"exit status {result.returncode}"
    if sudo and "password" in err.lower():
        message = f"sudo wants a password on {probe.host.name}: run `{shown}` yourself"
    else:
        message = f"failed: {last}"
    return "failed", FixOutcome(
        plan.check_id, shown, ok=False, message=message, privileged=plan.privileged
    )
