"""Environment checks: can this host serve? (``instinct check``, and the first step of serve).

``run_checks(host, CheckOptions(...)) -> CheckReport``; each check has a stable id (see
``rules.CHECKS``) and ``--auto-fix`` applies only the safe fixes of ``fixes.FIXES``.
"""

from instinct_serve.checks.model import Check, CheckOptions, CheckReport, FixOutcome, Status
from instinct_serve.checks.rules import CHECKS
from instinct_serve.checks.runner import run_checks

__all__ = [
    "CHECKS",
    "Check",
    "CheckOptions",
    "CheckReport",
    "FixOutcome",
    "Status",
    "run_checks",
]
