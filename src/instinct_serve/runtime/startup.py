"""Follow an endpoint's start-up: its log through the ``PhaseTracker``, ``/health``, its
liveness, until it is healthy, exits, fails, stalls, times out or (detached) is loading.

The deployer's second concept (``runtime.serve``). A ``StartupWatch`` is one wait for one
endpoint; what it ends with (``WaitResult``) the deployer turns into an outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from instinct_serve.credentials import Redactor
from instinct_serve.diagnose.phases import PHASE_ORDER, PhaseTracker
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import health
from instinct_serve.runtime.backend import Backend, ExitInfo
from instinct_serve.runtime.events import EventSink, Healthy, PhaseUpdate, Stalled
from instinct_serve.runtime.follower import LogFollower
from instinct_serve.runtime.settings import ServeSettings
from instinct_serve.servers import Routes

if TYPE_CHECKING:
    import httpx

FAST_POLL_S = 0.25  # /health cadence once the log says the API server is starting
ALIVE_CHECK_S = 5.0  # backup liveness check while the log follower runs
FOLLOWER_RESTARTS = 3
HANG_PHASES = frozenset({"capturing_graphs"})
SUCCESSOR_WAIT_S = 60.0  # a followed endpoint died: how long its owner may take to relaunch
SUCCESSOR_DECIDE_S = 10.0  # stopped but still there this long: its owner kept it, gave up
# After a strong failure line, how long the server may take to exit by itself (vLLM 0.32
# exits 2.5-9 s after it, tests/fixtures/logs/real-vllm-cpu/capture.json; its root-cause
# traceback may follow the line). Some failures leave the API server up (log 16: still
# running 30 s later): then serve ends the wait anyway, diagnoses and stops it.
FAILED_GRACE_S = 15.0

# "failed": the log said the start-up failed for good, and the server did not exit
WaitKind = Literal["healthy", "exited", "failed", "stalled", "timeout", "detached"]


@dataclass
class WaitResult:
    kind: WaitKind
    exit: ExitInfo | None = None
    elapsed_s: float = 0.0


def loading_confirmed(tracker: PhaseTracker) -> bool:
    """The log says the weights are loading (or later): a detached serve may return."""
    phase = tracker.phase
    return phase != "failed" and PHASE_ORDER.get(phase, 0) >= PHASE_ORDER["loading_weights"]


class StartupWatch:
    """One wait for the endpoint ``handle``: the log is read whenever it has a line, and
    between lines ``/health`` (faster once the API server starts) and the liveness check
    run on their own clocks."""

    def __init__(
        self,
        backend: Backend,
        handle: str,
        tracker: PhaseTracker,
        *,
        settings: ServeSettings,
        timeout_s: float,
        detach: bool,
        redact: Redactor,
        emit: EventSink,
        base_url: Callable[[], str],
        routes: Routes,
    ) -> None:
        self.backend, self.handle, self.tracker = backend, handle, tracker
        self.settings, self.detach, self.redact, self.emit = settings, detach, redact, emit
        self.base_url, self.routes = base_url, routes
        self.start = time.monotonic()
        self.deadline = self.start + timeout_s
        self.follower = LogFollower(backend.follow(handle))
        self.restarts = 0
        self.next_health = self.start
        self.next_alive = self.start + ALIVE_CHECK_S
        self.last_phase_key: tuple[str, str] | None = None
        self.failed_at: float | None = None  # when the log said the start-up failed for good
        self.http: httpx.Client | None = None

    def run(self) -> WaitResult:
        import httpx

        self.http = httpx.Client(timeout=3.0, trust_env=False)
        try:
            while True:
                result = self._step()
                if result is not None:
                    return result
        finally:
            self.http.close()
            self.follower.close()

    def _step(self) -> WaitResult | None:
        now = time.monotonic()
        wake = min(self.next_health, self.next_alive, self.deadline, now + 1.0)
        if self.follower.ended:  # nothing to wake us up early: sleep, bounded
            time.sleep(max(0.0, min(wake - now, 0.5)))
        self._read_log(wake - now)
        now = time.monotonic()
        if self.failed_at is None and self.tracker.failed_for_good:
            self.failed_at = now
            self.next_health = self.deadline  # a server whose engine failed is not polled
            self.next_alive = min(self.next_alive, now + 1.0)
        if self.detach and loading_confirmed(self.tracker):
            return WaitResult("detached", elapsed_s=now - self.start)
        gone = self._check_alive(now)
        if gone is not None:
            return gone
        if self.failed_at is not None:
            if now >= min(self.failed_at + FAILED_GRACE_S, self.deadline):
                exit_info = self.backend.exit_info(self.handle)
                return WaitResult("failed", exit_info, now - self.start)
            self.next_alive = min(self.next_alive, now + 1.0)
            return None  # nor waited healthy: only its exit, for the grace
        if now >= self.next_health:
            healthy = self._poll_health()
            if healthy is not None:
                return healthy
        settings = self.settings
        if self.tracker.stalled(time.monotonic(), settings.stall_timeout_s, HANG_PHASES):
            self.emit(
                Stalled(
                    phase=self.tracker.phase,
                    message=f"no log line for {settings.stall_timeout_s:g} s while "
                    "capturing graphs",
                )
            )
            return WaitResult("stalled", elapsed_s=time.monotonic() - self.start)
        if time.monotonic() >= self.deadline:
            return WaitResult("timeout", elapsed_s=time.monotonic() - self.start)
        return None

    def _read_log(self, wait_s: float) -> None:
        """Feed the tracker every line there is (waiting ``wait_s`` for the first); a
        phase the API server starts in brings the next /health poll forward."""
        follower = self.follower
        line = follower.get(wait_s)
        while line is not None:
            event = self.tracker.feed(self.redact.text(line))
            if event is not None:
                key = (event.phase, event.message)
                if key != self.last_phase_key:
                    self.last_phase_key = key
                    self.emit(PhaseUpdate.of(event))
                if event.phase in ("starting_server", "ready"):
                    self.next_health = min(self.next_health, time.monotonic())
            line = follower.get(0) if not follower.ended else None

    def _check_alive(self, now: float) -> WaitResult | None:
        """``exited`` once the endpoint is gone; a log stream that ended while it runs is
        reopened (a few times, then only the liveness check watches it)."""
        if self.follower.ended:
            gone = self.backend.exit_info(self.handle)
            if gone is not None:
                return WaitResult("exited", gone, now - self.start)
            if self.restarts >= FOLLOWER_RESTARTS:
                self.next_alive = min(self.next_alive, now + 1.0)
            else:
                self.restarts += 1
                self.follower.close()
                self.follower = LogFollower(self.backend.follow(self.handle, since=time.time()))
        if now >= self.next_alive:
            gone = self.backend.exit_info(self.handle)
            if gone is not None:
                self.follower.drain(2.0)
                return WaitResult("exited", gone, now - self.start)
            self.next_alive = now + ALIVE_CHECK_S
        return None

    def _poll_health(self) -> WaitResult | None:
        sample = health.probe_health(
            self.base_url(), timeout=3.0, client=self.http, routes=self.routes
        )
        if sample.ok:
            if self.tracker.phase != "ready":  # /health beat the log line to us
                self.emit(PhaseUpdate(phase="ready", message="API server answers /health"))
            self.emit(Healthy(elapsed_s=round(time.monotonic() - self.start, 2)))
            return WaitResult("healthy", elapsed_s=time.monotonic() - self.start)
        fast = PHASE_ORDER.get(self.tracker.phase, 0) >= PHASE_ORDER["starting_server"]
        self.next_health = time.monotonic() + (FAST_POLL_S if fast else self.settings.poll_s)
        return None


def successor(backend: Backend, plan: LaunchPlan, handle: str) -> str | None:
    """The endpoint another serve relaunched in place of ``handle`` (which this run only
    followed), once it appears; None when that serve gave up (it keeps its failed
    endpoint for the log) or nothing appears in time."""
    deadline = time.monotonic() + SUCCESSOR_WAIT_S
    kept_since: float | None = None
    while time.monotonic() < deadline:
        found = backend.same_plan(plan)
        genuine = found is not None and backend.verify(plan, found) is None
        if found is not None and genuine:
            running_again = backend.exit_info(found.handle) is None
            if found.handle != handle or running_again:
                return found.handle
        gone = backend.exit_info(handle)
        if gone is not None and gone.status != "removed":
            kept_since = kept_since or time.monotonic()
            if time.monotonic() - kept_since > SUCCESSOR_DECIDE_S:
                return None  # stopped and kept: its owner is not relaunching it
        time.sleep(0.5)
    return None
