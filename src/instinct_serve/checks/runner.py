"""``run_checks``: every check on one host, then the safe fixes ``--auto-fix`` allows.

Checks run in a small thread pool: over ssh each probe is one connection, so a remote
check costs about the slowest probe instead of their sum. Facts shared between checks are
gathered once (``Probe`` memoises them).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

from instinct_serve.checks.fixes import apply_fix, plan_fix
from instinct_serve.checks.model import Check, CheckOptions, CheckReport
from instinct_serve.checks.probe import Probe
from instinct_serve.checks.rules import CHECKS
from instinct_serve.hosts import Host

MAX_WORKERS = 6


def _with_fixable(probe: Probe, check: Check) -> Check:
    fixable = plan_fix(probe, check) is not None
    return dataclasses.replace(check, fixable=fixable) if fixable != check.fixable else check


def _run_all(probe: Probe, options: CheckOptions) -> list[Check]:
    # One probe first, alone: an unreachable host fails here once (HostError), instead of
    # in every check at once; most checks need these facts anyway.
    probe.env()
    pool = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="check")
    try:
        futures = [pool.submit(fn, probe, options) for fn in CHECKS.values()]
        checks = [future.result() for future in futures]
    finally:  # on an error or Ctrl-C, checks not yet started never start
        pool.shutdown(wait=False, cancel_futures=True)
    return [_with_fixable(probe, c) for c in checks]


def run_checks(host: Host, options: CheckOptions | None = None) -> CheckReport:
    """Check that ``host`` can serve; apply safe fixes when ``options.auto_fix``.

    Raises HostError when the host cannot be reached at all. A fix that ran is followed by
    a fresh run of its check, so the report shows the state after the fix.
    """
    options = options or CheckOptions()
    probe = Probe(host, options.root)
    report = CheckReport(host=host.name, checks=_run_all(probe, options))
    if not options.auto_fix:
        return report
    for index, check in enumerate(report.checks):
        plan = plan_fix(probe, check)
        if plan is None:
            continue
        kind, outcome = apply_fix(probe, plan, yes=options.yes)
        if kind == "pending":
            report.fixes_pending.append(outcome)
            continue
        if kind == "failed":
            report.fixes_failed.append(outcome)
            continue
        fresh = Probe(host, options.root)
        report.checks[index] = _with_fixable(fresh, CHECKS[check.id](fresh, options))
        after = report.checks[index]
        if after.status in ("warn", "error"):
            report.fixes_failed.append(
                dataclasses.replace(
                    outcome, ok=False, message=f"ran, but the check still fails: {after.message}"
                )
            )
        else:
            report.fixes_applied.append(outcome)
    return report
