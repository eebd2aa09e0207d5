"""The interface every deployer has, written down: what ``serve`` (CLI and MCP),
``serve --upgrade`` and ``serve --hosts`` call, whatever runs behind it.

- ``Launches``: preflight, deploy to an outcome, abandon what this run launched, close.
  ``runtime.serve.Deployer`` (one endpoint), ``runtime.group.GroupDeployer`` (replicas
  behind a router) and ``runtime.multinode.GroupRunner`` (one model across nodes).
- ``Deploying``: what ``runtime.prepare.Prepared.deployer`` returns (one endpoint or a
  replica group): also reuse what already runs the plan, the cleanup after Ctrl-C, and
  the redactor the caller's output goes through.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from instinct_serve.credentials import Redactor
    from instinct_serve.runtime.documents import ServeOutcome

O_co = TypeVar("O_co", covariant=True)
OutcomeT = TypeVar("OutcomeT")


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) during serve, after cleanup; carries what was cleaned up."""

    def __init__(self, outcome: ServeOutcome, signum: int = signal.SIGINT) -> None:
        super().__init__("interrupted")
        self.outcome = outcome
        self.signum = signum


class Launches(Protocol[O_co]):
    """Check, launch and prove; clean up what this run launched."""

    def preflight(self) -> object:
        """Fail before any question when the launch cannot succeed (a foreign holder of
        the port or name, a node that is not ready)."""
        ...

    def deploy(self) -> O_co:
        """Launch and wait to the end: ready, or a diagnosed failure."""
        ...

    def abandon(self) -> object:
        """After an unexpected error: stop and remove what this run launched, nothing else."""
        ...

    def close(self) -> None:
        """Let go of the tunnels and log streams (what runs keeps running)."""
        ...


class Deploying(Launches["ServeOutcome"], Protocol):
    """One ``serve`` of one plan on one host: a single endpoint or a replica group."""

    @property
    def redact(self) -> Redactor:
        """What the caller's output goes through: the secrets and the endpoint's key."""
        ...

    def reuse(self) -> ServeOutcome | None:
        """The plan already runs: its outcome (after waiting for it to load), else None."""
        ...

    def deploy(self) -> ServeOutcome: ...

    def abandon(self) -> str | None: ...

    def interrupted(self, signum: int = signal.SIGINT) -> Interrupted:
        """The cleanup after Ctrl-C: what this run launched is removed."""
        ...


def deploy_to_end(deployer: Launches[OutcomeT]) -> OutcomeT:
    """``deploy``, with what this run launched removed if it raises (Ctrl-C included);
    closed in every case."""
    try:
        return deployer.deploy()
    except BaseException:
        deployer.abandon()
        raise
    finally:
        deployer.close()


def reuse_once(deployer: Deploying) -> ServeOutcome | None:
    """``reuse``, closed after: the plan's endpoint (or group) that already runs, proven."""
    try:
        return deployer.reuse()
    finally:
        deployer.close()
