"""Prove an endpoint and say how it went: the endpoint document, the warm-up, the
coherence probe, the record of what was proven, and the ``ServeOutcome`` with its
``Failure``.

The deployer's third concept (``runtime.serve``), shared with the replica group
(``runtime.group``), which proves its router with the same calls and reports with the
same documents.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from instinct_serve import vllm_args
from instinct_serve.credentials import Redactor
from instinct_serve.diagnose import DiagnoseContext, Diagnosis, Finding
from instinct_serve.diagnose.phases import PhaseTracker
from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.observe import fingerprint as fp
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import health, verified
from instinct_serve.runtime.backend import ExitInfo
from instinct_serve.runtime.documents import (
    MODEL_NOT_LISTED,
    STARTUP_FAILED,
    STARTUP_TIMEOUT,
    Endpoint,
    Failure,
    Relaunch,
    ServeOutcome,
    Status,
)
from instinct_serve.runtime.events import (
    CoherenceChecked,
    EventSink,
    PhaseUpdate,
    WarmedUp,
    phase_words,
)
from instinct_serve.runtime.fingerprint import Budget, take
from instinct_serve.runtime.health import VLLM_ROUTES
from instinct_serve.runtime.settings import ServeSettings
from instinct_serve.runtime.startup import FAILED_GRACE_S
from instinct_serve.servers import Routes

SHOWN_TAIL = 30  # log lines shown with a failure
DIED_GRACE_S = 10.0  # a failed request, then health failing this long: the server died

# --------------------------------------------------------------------------- documents


def endpoint_of(
    plan: LaunchPlan,
    host: Host,
    engine: str,
    *,
    container: str,
    address: str,
    use_chat: bool,
    max_model_len: int | None,
    warmup_s: float | None = None,
    coherence: dict[str, Any] | None = None,
    key_file: str | None = None,
    key_command: str | None = None,
    tunnel: str | None = None,
) -> Endpoint:
    """How a client reaches the endpoint of ``plan`` (``container``: the one it talks to,
    the router of a group) at ``address``."""
    return Endpoint(
        base_url=f"http://{address}:{plan.port}/v1",
        model=plan.served_model_name,
        container=container,
        engine=engine,
        host=host.name,
        port=plan.port,
        tensor_parallel_size=plan.tensor_parallel_size,
        max_model_len=max_model_len,
        image=plan.image if engine == "docker" else None,
        use_chat=use_chat,
        warmup_latency_s=warmup_s,
        coherence=coherence,
        api_key_env=plan.api_key_env,
        api_key_source=plan.api_key,
        api_key_file=key_file,
        api_key_command=key_command,
        bind_address=plan.bind_address,
        tunnel=tunnel,
    )


def serve_outcome(
    status: Status,
    *,
    host: Host,
    engine: str,
    plan: LaunchPlan,
    started: float,
    endpoint: Endpoint | None = None,
    failure: Failure | None = None,
    notes: Sequence[str] = (),
    relaunches: Sequence[Relaunch] = (),
    replaced: Sequence[str] = (),
    tracker: PhaseTracker | None = None,
) -> ServeOutcome:
    """How one serve ended (``started``: its ``time.monotonic()`` at the start)."""
    return ServeOutcome(
        status=status,
        host=host.name,
        engine=engine,
        plan=plan,
        endpoint=endpoint,
        failure=failure,
        relaunches=list(relaunches),
        replaced=list(replaced),
        notes=list(notes),
        phase=tracker.phase if tracker is not None else None,
        figures=tracker.figures if tracker is not None else {},
        elapsed_s=time.monotonic() - started,
    )


# --------------------------------------------------------------------------- proof


def warm_up(
    base_url: str,
    model: str,
    settings: ServeSettings,
    api_key: str | None,
    *,
    use_chat: bool,
    routes: Routes = VLLM_ROUTES,
) -> health.CompletionResult:
    """The first request (it compiles kernels: may take minutes)."""
    timeout = settings.warmup_timeout_s
    return health.warmup(
        base_url, model, use_chat=use_chat, timeout=timeout, api_key=api_key, routes=routes
    )


def probe_coherence(
    base_url: str,
    endpoint: Endpoint,
    settings: ServeSettings,
    api_key: str | None,
    routes: Routes = VLLM_ROUTES,
) -> health.CoherenceResult:
    """The greedy known-answer probe; its verdict kept on ``endpoint``."""
    probe = health.coherence_probe(
        base_url,
        endpoint.model,
        use_chat=endpoint.use_chat,
        timeout=settings.probe_timeout_s,
        api_key=api_key,
        routes=routes,
    )
    endpoint.coherence = probe.to_dict()
    return probe


def record_proof(
    host: Host, name: str, instance: str | None, plan_hash: str, endpoint: Endpoint
) -> None:
    """Keep what was proven (warm-up, coherence) for the next serve and ``ps``."""
    verified.save(
        host,
        name,
        instance,
        plan_hash=plan_hash,
        warmup_latency_s=endpoint.warmup_latency_s,
        coherence=endpoint.coherence,
    )


@dataclass(frozen=True)
class FingerprintSpec:
    """How to check an endpoint's fingerprint: its bound, the reference of its checkpoint
    and precision (None: the checks that need none), the platform's tolerance."""

    budget: Budget
    reference: fp.Fingerprint | None = None
    platform: str | None = None


@dataclass
class Proof:
    """What proving an endpoint found: ``ok``, or the one thing that stopped it."""

    died: bool = False  # the server exited meanwhile: diagnose it
    error: InstinctError | None = None  # a request failed (the server still runs)
    listed: list[str] | None = None  # the models it lists, when not the plan's
    probe: health.CoherenceResult | None = None  # the coherence probe's result
    fingerprint: fp.Fingerprint | None = None  # taken once the probe passed
    verdict: fp.Check | None = None  # the fingerprint judged

    @property
    def ok(self) -> bool:
        fine = self.probe is None or self.probe.ok
        fine = fine and (self.verdict is None or self.verdict.ok)
        return not self.died and self.error is None and self.listed is None and fine


def fingerprint_doc(taken: fp.Fingerprint, verdict: fp.Check) -> dict[str, Any]:
    """What the endpoint document says of its fingerprint."""
    return {**verdict.to_dict(), "cost_tokens": taken.cost_tokens, "cost_s": round(taken.cost_s, 3)}


class Prover:
    """Prove an endpoint that answers /health: it lists the plan's model, answers a
    warm-up (a model without a chat template through /v1/completions) and, unless
    skipped, the coherence probe. ``gone``: whether the server has exited."""

    def __init__(
        self,
        base_url: str,
        settings: ServeSettings,
        api_key: str | None,
        *,
        routes: Routes = VLLM_ROUTES,
        emit: EventSink,
        note: Callable[[str], None],
        gone: Callable[[], bool],
        fingerprint: FingerprintSpec | None = None,
    ) -> None:
        self.base_url, self.settings, self.api_key = base_url, settings, api_key
        self.routes, self.fingerprint = routes, fingerprint
        self.emit, self.note, self.gone = emit, note, gone

    def run(self, endpoint: Endpoint) -> Proof:
        """Fills in ``endpoint`` (its context length, warm-up, coherence) as it goes."""
        try:
            models = health.list_models(self.base_url, api_key=self.api_key, routes=self.routes)
        except InstinctError as exc:
            return Proof(error=exc)
        match = next((m for m in models if m.id == endpoint.model), None)
        if match is None:
            return Proof(listed=[m.id for m in models])
        if match.max_model_len:
            endpoint.max_model_len = match.max_model_len
        self.emit(
            PhaseUpdate(
                phase="warming_up", message="first request (compiles kernels: may take minutes)"
            )
        )
        try:
            first = self._warmup(endpoint)
        except InstinctError as exc:
            return Proof(died=True) if self._died(exc) else Proof(error=exc)
        endpoint.warmup_latency_s = round(first.latency_s, 3)
        self.emit(WarmedUp(latency_s=endpoint.warmup_latency_s, endpoint=first.endpoint))
        if not self.settings.coherence:
            return Proof()
        self.emit(PhaseUpdate(phase="coherence_probe", message="greedy known-answer probe"))
        try:
            probe = probe_coherence(
                self.base_url, endpoint, self.settings, self.api_key, self.routes
            )
        except InstinctError as exc:
            return Proof(died=True) if self._died(exc) else Proof(error=exc)
        self.emit(CoherenceChecked(verdict=probe.verdict.verdict, text=probe.completion.text[:200]))
        if self.fingerprint is None or not probe.ok:
            return Proof(probe=probe)
        return self._fingerprint(endpoint, probe, self.fingerprint)

    def _fingerprint(
        self, endpoint: Endpoint, probe: health.CoherenceResult, spec: FingerprintSpec
    ) -> Proof:
        """Score the fixed prompts and judge them (``observe.fingerprint``)."""
        budget = spec.budget
        if budget.long_tokens == 0:  # not chosen: what the endpoint's context affords
            budget = Budget.for_context(endpoint.max_model_len, seconds=budget.seconds)
        self.emit(PhaseUpdate(phase="fingerprint", message="scoring fixed prompts (fingerprint)"))
        try:
            taken = take(
                self.base_url, endpoint.model, budget, api_key=self.api_key, routes=self.routes
            )
        except InstinctError as exc:
            return Proof(died=True) if self._died(exc) else Proof(probe=probe, error=exc)
        verdict = fp.check(
            taken, spec.reference, platform=spec.platform, need_long=budget.long_tokens > 0
        )
        endpoint.fingerprint = fingerprint_doc(taken, verdict)
        return Proof(probe=probe, fingerprint=taken, verdict=verdict)

    def _died(self, exc: InstinctError) -> bool:
        """Whether a failed request is the server dying. An engine that dies answers the
        request 500 first, then its health fails and it may exit seconds later, or stay up
        (real-vllm-cpu/16, /20), so: gone, or its health not OK for ``DIED_GRACE_S``. A 4xx
        is the request's own fault; health answering OK is a live server."""
        status = exc.details.get("status_code")
        if isinstance(status, int) and 400 <= status < 500:
            return self.gone()
        deadline = time.monotonic() + DIED_GRACE_S
        while not self.gone():
            sample = health.probe_health(self.base_url, timeout=2.0, routes=self.routes)
            if sample.ok:
                return False
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.5)
        return True

    def _warmup(self, endpoint: Endpoint) -> health.CompletionResult:
        base_url, settings, key, routes = self.base_url, self.settings, self.api_key, self.routes
        try:
            return warm_up(base_url, endpoint.model, settings, key, use_chat=True, routes=routes)
        except InstinctError as exc:
            if exc.details.get("status_code") != 400:
                raise
        # vLLM answers 400 to chat requests for base models without a chat template.
        endpoint.use_chat = False
        self.note("the model has no chat template: using /v1/completions")
        return warm_up(base_url, endpoint.model, settings, key, use_chat=False, routes=routes)


# --------------------------------------------------------------------------- failures


def tail_lines(text: str) -> list[str]:
    return text.splitlines()[-SHOWN_TAIL:]


def host_flag(host: Host) -> str:
    """`` --host NAME`` for a command shown to the user, empty here."""
    return "" if host.is_local else f" --host {host.name}"


def not_listed(endpoint: Endpoint, names: list[str]) -> Failure:
    return Failure(
        id=MODEL_NOT_LISTED,
        title="The server does not list the model",
        cause=f"/v1/models lists {', '.join(names) or 'nothing'}, not {endpoint.model}: "
        "another server may answer on this port",
        fix="check `instinct ps` and the port; pass --port to use another one",
        container=endpoint.container,
    )


def timed_out(
    plan: LaunchPlan, host: Host, tracker: PhaseTracker, elapsed_s: float, log_text: str
) -> Failure:
    name = plan.container_name
    where = host_flag(host)
    return Failure(
        id=STARTUP_TIMEOUT,
        title="Not healthy in time",
        cause=f"{name} did not answer /health within {elapsed_s:.0f} s "
        f"(last phase: {phase_words(tracker.phase, tracker.message)})",
        fix="it is still running: follow it with `instinct logs -f "
        f"{name}{where}`, wait longer next time with --timeout, or stop it with "
        f"`instinct stop {name}{where}`",
        log_tail=tail_lines(log_text),
        container=name,
        left="running",
    )


def http_failure(plan: LaunchPlan, exc: InstinctError, redact: Redactor, log_text: str) -> Failure:
    name = plan.container_name
    return Failure(
        id=exc.id,
        title="The endpoint is up but a request failed",
        cause=redact.text(exc.message),
        fix=exc.fix or "read the server log",
        log_tail=tail_lines(log_text),
        container=name,
        commands=[f"instinct logs {name}"],
    )


def failure_from(
    plan: LaunchPlan,
    host: Host,
    diagnosis: Diagnosis,
    finding: Finding | None,
    gone: ExitInfo | None,
    *,
    fixes: Sequence[str] = (),
    alive: bool = False,
) -> Failure:
    """What failed, from its diagnosis. ``alive``: the log said the start-up failed, and
    the server had not exited ``FAILED_GRACE_S`` later (vLLM 0.32's API server may
    outlive its engine core); ``fixes``: those the automatic relaunches applied."""
    name = plan.container_name
    where = host_flag(host)
    tail = list(diagnosis.tail[-SHOWN_TAIL:])
    how = f"{name} {gone.describe()}" if gone is not None else f"{name} failed"
    if alive:
        how = f"{name} failed (its server process was still up {FAILED_GRACE_S:g} s later)"
    commands = [f"instinct diagnose --container {name}{where}", f"instinct logs {name}{where}"]
    if finding is None:
        last = [line for line in tail if line.strip() and not line.startswith("# instinct:")]
        if diagnosis.last_error:
            said = f"; the last error line: {diagnosis.last_error}"
        elif last:
            said = f"; no error line, the last line: {last[-1].strip()}"
        else:
            said = " without logging anything"
        return Failure(
            id=STARTUP_FAILED,
            title="The server failed and no known failure pattern matched",
            cause=how + said,
            fix="read the log tail below; search upstream with the command shown",
            log_tail=tail,
            exit_code=gone.exit_code if gone else None,
            container=name,
            commands=[*diagnosis.commands, *commands],
        )
    retried = ""
    if finding.id in fixes:
        retried = " (the automatic relaunch with this fix did not help)"
    return Failure(
        id=finding.id,
        title=finding.title + retried,
        cause=f"{how}: {finding.cause}" if gone is not None or alive else finding.cause,
        fix=finding.fix,
        line=finding.line,
        log_tail=tail,
        exit_code=gone.exit_code if gone else None,
        container=name,
        commands=[*finding.commands, *commands],
        finding=finding.to_dict(),
    )


def serve_context(
    plan: LaunchPlan,
    *,
    gfx: str | None,
    engine: str,
    secrets: Mapping[str, str],
    signals: frozenset[Any],
    hf_home: str | None = None,
) -> DiagnoseContext:
    """What serve knows about the endpoint it diagnoses: the plan's argv (its tensor
    parallel size spelled out), environment, GPUs, what the wait saw (``signals``), and
    the route that ran it (``engine``: the findings' words; ``hf_home``: the native
    process's HF_HOME, where one is set) and the server it launched."""
    args = list(plan.vllm_args)
    if not vllm_args.has(args, "--tensor-parallel-size", "-tp"):
        args += ["--tensor-parallel-size", str(plan.tensor_parallel_size)]
    return DiagnoseContext(
        gfx=gfx,
        model=plan.model,
        image=plan.image if engine == "docker" else None,
        args=args,
        env=dict(plan.env),
        gpu_count=plan.gpu_count,
        hf_token_set=bool(secrets) or None,
        signals=signals,
        launcher=engine,
        hf_home=hf_home if engine == "native" else None,
        server=plan.server,  # the findings name that server's flags (SGLang's, vLLM's)
    )


def fingerprint_spec(
    host: Host, plan: LaunchPlan, settings: ServeSettings
) -> FingerprintSpec | None:
    """The fingerprint check (none when skipped with the probe): the reference of its
    checkpoint and precision, if any. Asked as the plan's server asks (``Routes.scoring``)."""
    from instinct_serve.runtime import fingerprints

    if not (settings.fingerprint and settings.coherence):
        return None
    reference = fingerprints.fingerprint_of(fingerprints.load_reference(host, plan))
    return FingerprintSpec(
        Budget(long_tokens=0, seconds=settings.fingerprint_s),
        reference,
        fingerprints.platform_of(plan),
    )


def record_fingerprint(
    host: Host, name: str, plan: LaunchPlan, proof: Proof, settings: ServeSettings
) -> None:
    """Keep a proven endpoint's fingerprint, with its image's digest (docker)."""
    from instinct_serve.runtime import fingerprints

    if proof.fingerprint is None or proof.verdict is None:
        return
    digest = None
    if plan.launcher == "docker":
        from instinct_serve.gather.caches import image_id

        digest = image_id(host, plan.image)
    fingerprints.record(
        host,
        name,
        plan,
        proof.fingerprint,
        proof.verdict,
        image_digest=digest,
        reference=settings.fingerprint_reference,
    )
