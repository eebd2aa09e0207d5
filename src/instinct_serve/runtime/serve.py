"""From a ``LaunchPlan`` to a healthy, warmed-up endpoint, or to a diagnosed failure.

``Deployer`` drives one ``instinct serve``: reuse a healthy managed endpoint of the same
plan (or attach to one still loading), clear the port and the name (only ever removing what
the tool created), pull the image, launch, follow the log through the ``PhaseTracker``
while polling ``/health``, warm up, probe coherence, and print the connection details. The
known failures are handled here: a dead server is diagnosed from its log tail and, when
the finding says a retry is safe (``auto_retry``: ``--enforce-eager`` after a graph-capture
OOM, an env override for garbage output, ...), relaunched once with that fix; a silent log
while capturing graphs is a ``graph_capture_hang`` and gets the same treatment.

Its three concepts live beside it: ``claim`` (the name and the port), ``startup`` (follow
the start-up) and ``proof`` (warm-up, coherence probe, the outcome and its failure); this
module decides between them, on the state of a ``serve_run.ServeRun``. Its interface is
``deploying.Deploying``.

The engine behind it is a ``Backend`` (``runtime.backend``): Docker containers
(``runtime.docker_backend``) or the supervised native ``vllm serve`` (``runtime.native``).
Both run through a ``Host``, so ``--host`` is the same code path; HTTP goes through
``runtime.tunnel`` (a no-op locally). The pieces it uses live next to it: ``settings``
(patience), ``retry`` (a hint applied to the plan), ``secret_env``, ``follower`` (the log
stream) and ``documents`` (what it returns). Progress is reported as typed events
(``runtime.events``) to a sink the CLI renders as a status line or JSON Lines.
"""

from __future__ import annotations

from typing import Any

from instinct_serve import servers
from instinct_serve.diagnose import Diagnosis, Finding, diagnose
from instinct_serve.errors import InstinctError
from instinct_serve.paths import hf_home
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import health, intent, plans, verified
from instinct_serve.runtime.backend import Occupant, Target
from instinct_serve.runtime.claim import clear_the_way, impostor, refuse_foreign
from instinct_serve.runtime.documents import Endpoint, Relaunch, ServeOutcome
from instinct_serve.runtime.events import (
    Attached,
    Relaunching,
    Reused,
)
from instinct_serve.runtime.proof import (
    Proof,
    Prover,
    failure_from,
    fingerprint_spec,
    not_listed,
    record_fingerprint,
    record_proof,
    serve_context,
)
from instinct_serve.runtime.retry import apply_retry
from instinct_serve.runtime.serve_run import ServeRun
from instinct_serve.runtime.settings import detaches, startup_timeout_s
from instinct_serve.runtime.startup import StartupWatch, WaitResult, successor

DIAGNOSE_TAIL = 2000  # log lines handed to diagnose


class Deployer(ServeRun):
    """One ``serve`` run of one plan on one host (see the module docstring).

    Safe under concurrency: the look for an endpoint of the same plan, the clearing of the
    way and the launch happen under the host's launch lock (``runtime.lock``), so a second
    serve of the same plan waits, then reuses what the first launched. Everything this run
    stops or removes is what it launched, by the handle the backend returned (a
    container's id), never something found by name."""

    def reuse(self) -> ServeOutcome | None:
        """An endpoint of this very plan already runs: report it, or wait for it to load."""
        self._check_own_key()
        existing = self.backend.same_plan(self.plan)
        if existing is None:
            return self._reuse_foreign()
        return self._reuse(existing)

    def _reuse_foreign(self) -> ServeOutcome | None:
        """Something this tool did not start holds the plan's port and serves the plan's
        model over the OpenAI API (``/health`` 200, the model in ``/v1/models``): offered
        as it is, untouched and unmanaged, rather than refused as ``port_in_use``; None
        when nothing foreign holds the port or it serves something else."""
        if not self.foreign_ok:
            return None
        routes = servers.of(self.plan).routes
        # here a free port refuses the probe at once; on another host the probe needs an
        # ssh forward, so who holds the port is looked at first there
        remote = not self.host.is_local
        if remote and not self._foreign_port_holders():
            return None
        if not health.probe_health(self.base_url, timeout=3.0, routes=routes).ok:
            return None
        foreign = self._foreign_port_holders()
        if not foreign:
            return None
        try:
            models = health.list_models(self.base_url, api_key=self.api_key, routes=routes)
        except InstinctError:
            return None
        wanted = {self.plan.served_model_name, self.plan.model}
        match = next((m for m in models if m.id in wanted), None)
        if match is None:
            return None
        holder = foreign[0].description
        endpoint = self._endpoint(warmup_s=None, coherence=None)
        endpoint.container, endpoint.image, endpoint.model = holder, None, match.id
        endpoint.max_model_len = match.max_model_len
        self.note(
            f"{holder} already serves {match.id} on port {self.plan.port}, and instinct-serve "
            "did not start it: reused as it is (not managed: stop, upgrade and watch leave "
            "it alone; serve on another port for an endpoint of this plan)"
        )
        self.emit(Reused(container=holder, message=f"{holder} serves {match.id}: reusing it"))
        outcome = self._outcome("reused", endpoint=endpoint)
        outcome.phase = "ready"
        return outcome

    def _foreign_port_holders(self) -> list[Occupant]:
        """What this tool did not start and holds the plan's port; [] when anything holds
        the plan's name, or one of ours is there (the usual path decides)."""
        occupants = self.backend.occupants(self.plan)
        if any(o.managed or o.target is not None for o in occupants):
            return []
        return occupants

    def _reuse(self, existing: Target) -> ServeOutcome:
        """Reuse ``existing`` once it proves to run this plan; an impostor is an error that
        names it, and it is left untouched."""
        problem = self.backend.verify(self.plan, existing)
        if problem is not None:
            raise impostor(self.plan, existing, problem)
        self.plan = self._with_name(existing.name)
        self._load_key(create=False)
        routes = servers.of(self.plan).routes
        sample = health.probe_health(self.base_url, timeout=3.0, routes=routes)
        if sample.ok:
            endpoint = self._endpoint(warmup_s=None, coherence=None)
            try:
                models = health.list_models(self.base_url, api_key=self.api_key, routes=routes)
            except InstinctError as exc:
                raise impostor(self.plan, existing, f"/v1/models failed: {exc.message}") from None
            match = next((m for m in models if m.id == endpoint.model), None)
            if match is None:
                names = ", ".join(m.id for m in models) or "nothing"
                why = f"/v1/models lists {names}, not {endpoint.model}"
                raise impostor(self.plan, existing, why)
            if match.max_model_len:
                endpoint.max_model_len = match.max_model_len
            record = verified.load(self.host, existing.name, existing.instance)
            if record is None:
                # left loading by a detached serve (a large model), or started before this
                # was recorded: healthy means /health only until a warm-up and the probe
                self.emit(
                    Reused(
                        container=existing.name,
                        message=f"{existing.name} is healthy, not yet warmed up and probed: "
                        "doing it now",
                    )
                )
                proven = self._after_healthy(existing.handle)
                if proven is None:  # it died meanwhile
                    return self._failed(
                        existing.handle,
                        WaitResult("exited", self.backend.exit_info(existing.handle)),
                        self._diagnose(existing.handle, frozenset()),
                    )
                if proven.status == "ready":
                    proven.status = "reused"
                return proven
            endpoint.warmup_latency_s = record.get("warmup_latency_s")
            endpoint.coherence = record.get("coherence")
            self.emit(Reused(container=existing.name, message=f"{existing.name} is healthy"))
            outcome = self._outcome("reused", endpoint=endpoint)
            outcome.phase = "ready"
            return outcome
        self.emit(
            Attached(
                container=existing.name,
                message=f"{existing.name} (same plan) is still starting: following it",
            )
        )
        self.following = True  # asked again: wait for it (no automatic detach this time)
        return self._wait_and_finish(existing.handle)

    def adopt(self, target: Target) -> None:
        """Take ``target``, a running or dead endpoint of this plan found after its serve
        ended, as this run's own: a relaunch may replace it, and the fixes its launch
        applied stay applied (each known fix is tried once per endpoint, not per run)."""
        self.own = target.handle
        self.plan = self._with_name(target.name)
        self.fixes = list(target.fixes)
        self._load_key(create=False)

    def prove(self, target: Target) -> ServeOutcome:
        """The adopted ``target`` answers /health: warm it up and probe it (serve's reuse
        path), which records it as proven or diagnoses it (an incoherent answer with a
        known fix relaunches it with the fix)."""
        return self._reuse(target)

    def restart(
        self, handle: str, signals: frozenset[Any] = frozenset(), *, keep: bool = False
    ) -> ServeOutcome:
        """The adopted endpoint ``handle`` died or hangs after it was ready: relaunch it
        under the launch lock with the known fix of its diagnosis when one applies and was
        not tried yet (serve's retry mapping), else as planned; then wait, warm up and
        probe it like any serve. Its log goes with it (``keep``: stopped, not removed, for
        the caller to remove once the relaunch is proven): the caller keeps the diagnosis."""
        from instinct_serve.runtime.lock import HostLock

        diagnosis = self._diagnose(handle, signals)
        self.last_diagnosis = diagnosis
        retry = self._relaunch_plan(diagnosis)
        if retry is not None:
            finding, new_plan, changes = retry
            self._relaunch(handle, finding, new_plan, changes, keep=keep)
        else:
            with HostLock(self.host, on_wait=self.note):
                self.backend.discard(handle, keep=keep)  # adopted: ours
                self.launched = None
                self._launch()
        assert self.launched is not None
        return self._wait_and_finish(self.launched)

    def deploy(self) -> ServeOutcome:
        """Clear the way, launch and wait (after the user confirmed the plan).

        The image is pulled first (a pull may take an hour; two serves may pull at once).
        Then, under the host's launch lock: an endpoint of the same plan that appeared
        meanwhile (another serve) is reused; else the way is cleared and this run launches.
        """
        from instinct_serve.runtime.caches import prepare_caches
        from instinct_serve.runtime.lock import HostLock

        self._check_own_key()
        if self.backend.engine == "docker":
            self.phase("pulling_image", f"checking image {self.plan.image}")
        if self.settings.prefetch:
            from instinct_serve.runtime.fetch import prefetch

            prefetch(
                self.host,
                self.plan,
                self.backend,
                phase=self.phase,
                note=self.note,
                feed=self._feed_pull,
            )
        else:
            self.backend.prepare(self.plan, self._feed_pull)
        # the compile caches: keyed by the digest the pull brought, created, AITER seeded
        prepare_caches(self.host, self.plan, self.note)
        with HostLock(self.host, on_wait=self.note):
            existing = self.backend.same_plan(self.plan)
            if existing is None:
                self._clear_the_way()
                self._load_key(create=True)
                self._launch()
        if existing is not None:
            return self._reuse(existing)
        assert self.launched is not None
        return self._wait_and_finish(self.launched)

    def preflight(self) -> None:
        """Fail before any question when something foreign holds the port or the name."""
        refuse_foreign(self.host, self.plan, self.backend.occupants(self.plan))

    def _clear_the_way(self) -> None:
        clear_the_way(
            self.host,
            self.plan,
            self.backend,
            self.settings,
            self.confirm,
            note=self.note,
            emit=self.emit,
            replaced=self.replaced,
        )

    def _wait(self, handle: str) -> WaitResult:
        settings = self.settings
        return StartupWatch(
            self.backend,
            handle,
            self.tracker,
            settings=settings,
            timeout_s=settings.timeout_s or startup_timeout_s(self.plan),
            detach=bool(settings.detach) if self.following else detaches(self.plan, settings),
            redact=self.redact,
            emit=self.emit,
            base_url=lambda: self.base_url,
            routes=servers.of(self.plan).routes,
        ).run()

    def _wait_and_finish(self, handle: str) -> ServeOutcome:
        """Wait for ``handle`` (ours, or one we attached to) and finish: ready, diagnosed,
        or relaunched once with a fix (only what this run launched is relaunched)."""
        for _round in range(self.settings.max_relaunches + 2):
            result = self._wait(handle)
            if result.kind == "detached":
                return self._detached(handle)
            if result.kind == "timeout":
                return self._timed_out(handle, result)
            if result.kind == "healthy":
                finished = self._after_healthy(handle)
                if finished is not None:
                    return finished
                result = WaitResult("exited", self.backend.exit_info(handle))
            signals: frozenset[Any] = frozenset()
            if result.kind == "stalled":
                signals = frozenset({"graph_capture_hang"})
            if handle != self.own and result.kind == "exited":
                found = successor(self.backend, self.plan, handle)  # its serve relaunches
                if found is not None:
                    self.emit(
                        Attached(
                            container=self.plan.container_name,
                            message=f"{self.plan.container_name} was relaunched by the serve "
                            "that launched it: following it",
                        )
                    )
                    handle = found
                    continue
            diagnosis = self._diagnose(handle, signals)
            retry = self._relaunch_plan(diagnosis) if handle == self.own else None
            if retry is None:
                return self._failed(handle, result, diagnosis)
            finding, new_plan, changes = retry
            self._relaunch(handle, finding, new_plan, changes)
            assert self.launched is not None
            handle = self.launched
        return self._failed(handle, WaitResult("exited"), self._diagnose(handle, frozenset()))

    def _relaunch(
        self,
        handle: str,
        finding: Finding,
        new_plan: LaunchPlan,
        changes: list[str],
        *,
        keep: bool = False,
    ) -> None:
        """Replace this run's failed endpoint with one launched with the fix, under the
        launch lock (no other serve launches the plan in between)."""
        from instinct_serve.runtime.lock import HostLock

        with HostLock(self.host, on_wait=self.note):
            self.backend.discard(handle, keep=keep)  # ours: _wait_and_finish checked
            self.launched = None
            self.fixes.append(finding.id)
            self.relaunches.append(Relaunch(finding.id, finding.title, changes))
            self.emit(
                Relaunching(
                    finding=finding.id,
                    title=finding.title,
                    changes=changes,
                    message=f"{finding.title}: relaunching once with {', '.join(changes)}",
                )
            )
            self.plan = new_plan
            self._launch()

    def _relaunch_plan(self, diagnosis: Diagnosis) -> tuple[Finding, LaunchPlan, list[str]] | None:
        if len(self.relaunches) >= self.settings.max_relaunches:
            return None
        specific = [f for f in diagnosis.findings if not f.generic] or list(diagnosis.findings)
        if not specific:
            return None
        finding = specific[0]
        if not finding.auto_retry or not finding.retry or finding.id in self.fixes:
            return None
        new_plan, changes = apply_retry(self.plan, finding.retry)
        if not changes:
            return None
        return finding, new_plan, changes

    def _diagnose(self, handle: str, signals: frozenset[Any]) -> Diagnosis:
        text = self._log_text(handle, DIAGNOSE_TAIL)
        context = serve_context(
            self.plan,
            gfx=self.gfx,
            engine=self.backend.engine,
            secrets=self.secrets,
            signals=signals,
            hf_home=hf_home(self.host, self.plan.env) if self.backend.engine == "native" else None,
        )
        return diagnose(text, context)

    def _after_healthy(self, handle: str) -> ServeOutcome | None:
        """Models, warm-up, coherence. None when the server died meanwhile (diagnose it)."""
        endpoint = self._endpoint(warmup_s=None, coherence=None)
        proof = Prover(
            self.base_url,
            self.settings,
            self.api_key,
            routes=servers.of(self.plan).routes,
            emit=self.emit,
            note=self.note,
            gone=lambda: self.backend.exit_info(handle) is not None,
            fingerprint=fingerprint_spec(self.host, self.plan, self.settings),
        ).run(endpoint)
        self.use_chat = endpoint.use_chat
        if proof.died:
            return None
        if proof.error is not None:
            return self._http_failure(handle, proof.error)
        if proof.listed is not None:
            failure = not_listed(endpoint, proof.listed)
            failure.left = self._stop_kept(handle)
            return self._outcome("failed", failure=failure, endpoint=endpoint)
        if proof.ok:
            self._record(endpoint, proof)
            return self._outcome("ready", endpoint=endpoint)
        signal, finding_id, evidence = self._wrong(proof)
        diagnosis = self._diagnose(handle, frozenset({signal}))
        retry = self._relaunch_plan(diagnosis) if handle == self.own else None
        if retry is None:
            finding = diagnosis.get(finding_id)
            failure = failure_from(self.plan, self.host, diagnosis, finding, None, fixes=self.fixes)
            failure.cause += evidence
            failure.left = self._stop_kept(handle)
            return self._outcome("failed", failure=failure, endpoint=endpoint)
        finding, new_plan, changes = retry
        self._relaunch(handle, finding, new_plan, changes)
        assert self.launched is not None
        return self._wait_and_finish(self.launched)

    def _wrong(self, proof: Proof) -> tuple[Any, str, str]:
        """(the signal, the finding it names, the evidence) of an endpoint that answers but
        is wrong: garbage from the coherence probe, or a fingerprint that failed."""
        if proof.probe is not None and not proof.probe.ok:
            answer = self.redact.text(proof.probe.completion.text[:200])
            return "incoherent_output", "incoherent_output", f" Probe answer: {answer!r}."
        assert proof.verdict is not None and proof.verdict.failure is not None
        said = "; ".join(proof.verdict.reasons)
        return f"fingerprint_{proof.verdict.failure}", "wrong_output", f" Fingerprint: {said}."

    def _record(self, endpoint: Endpoint, proof: Proof | None = None) -> None:
        """Keep what was proven (warm-up, coherence, fingerprint) for the next serve and
        ``ps``."""
        target = self.backend.target(self.plan.container_name)
        if target is not None and target.running:
            self.backend.supervise(target.handle)
            plans.save(self.host, self.plan)
            intent.settled(self.host, self.plan)  # a replace bringing this plan is over
            record_proof(self.host, target.name, target.instance, self.plan.plan_hash, endpoint)
            if proof is not None:
                record_fingerprint(self.host, target.name, self.plan, proof, self.settings)
