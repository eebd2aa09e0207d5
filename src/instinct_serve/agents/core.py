"""The MCP tools' bodies: the same core calls as the CLI, returning the ``--json`` documents.

Each function takes a validated input model and returns an ``Outcome`` (the document, the
exit code the CLI would give, and whether the action asked for failed). They are blocking
and thread-safe, and the server runs them in worker threads. Nothing here prints to stdout
(the MCP stream): warnings from the shared CLI helpers go to stderr.

Safety rules the server relies on: ``serve`` (an upgrade too) launches nothing without
``confirm`` and the approved ``plan_hash``; ``stop``, ``rollback`` and ``serve`` with
``replace`` stop or remove nothing without ``confirm`` and the ``change_hash`` of the
summary of what they touch (``runtime.confirm``: the first call returns that summary);
``stop``, ``logs`` and ``diagnose --container`` act only on containers carrying the
managed label (``runtime.endpoints``), so a foreign container is a structured error; logs and
lists are bounded here, and ``agents.safety`` redacts secrets from every document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from instinct_serve.agents.inputs import (
    BenchInput,
    CacheInput,
    CheckInput,
    DetectInput,
    DiagnoseInput,
    JobInput,
    LogsInput,
    MetricsInput,
    PartitionInput,
    PlanExtras,
    RecipesSearchInput,
    RecipesShowInput,
    RecipesSyncInput,
    RollbackExtras,
    ServeExtras,
    StatusInput,
    StopInput,
)
from instinct_serve.errors import ExitCode, InstinctError, UsageError
from instinct_serve.jsonio import to_jsonable

if TYPE_CHECKING:
    from instinct_serve.hosts import Host
    from instinct_serve.options import FitRequest, PlanOptions, ServeOptions
    from instinct_serve.plan.model import PlanResult
    from instinct_serve.runtime.backend import Backend
    from instinct_serve.runtime.events import ServeEvent

EventSink = Callable[[dict[str, Any]], None]

MAX_LOG_BYTES = 64 * 1024  # the tail of `logs`, at most
MAX_LIST = 100  # containers listed by `status`


@dataclass
class Outcome:
    """A tool's document, the CLI's exit code for it, and whether the action failed.

    ``failed`` marks the MCP result as an error: a launch that did not come up, not a
    verdict such as "does not fit" (an answer, with exit code 1 as in the CLI).
    """

    doc: dict[str, Any]
    exit_code: int = 0
    failed: bool = False


def _host(spec: str | None) -> Host:
    from instinct_serve.hosts import resolve_host

    return resolve_host(spec)


def _doc(obj: Any) -> dict[str, Any]:
    doc = to_jsonable(obj)
    assert isinstance(doc, dict)
    return doc


# --------------------------------------------------------------------------- read-only


def detect(inp: DetectInput) -> Outcome:
    """``instinct detect --json``."""
    from instinct_serve.gather.detect import detect as detect_gpus
    from instinct_serve.hardware.scope import document

    inventory = detect_gpus(_host(inp.host), sysfs_root=inp.sysfs_root)
    doc = document(inventory)
    code = ExitCode.OK if doc["supported"] else ExitCode.NOT_READY
    return Outcome(doc, int(code))


def check(inp: CheckInput) -> Outcome:
    """``instinct check --json`` (``auto_fix``/``yes`` as ``--auto-fix``/``--yes``)."""
    from instinct_serve.checks import CheckOptions, run_checks
    from instinct_serve.checks.hub import model_is_gated

    host = _host(inp.host)
    options = CheckOptions(
        model=inp.model,
        model_gated=model_is_gated(inp.model) if inp.model else None,
        port=inp.port,
        hf_cache=inp.hf_cache,
        need_gb=inp.need_gb,
        root=inp.root,
        auto_fix=inp.auto_fix,
        yes=inp.yes,
    )
    report = run_checks(host, options)
    code = ExitCode.OK if report.ready else ExitCode.NOT_READY
    return Outcome(_doc(report.to_dict(agent=True)), int(code))


def recipes_show(inp: RecipesShowInput) -> Outcome:
    """``instinct recipes show MODEL [--gpu G] [--variant V] --json``."""
    from instinct_serve.catalog.documents import show_document
    from instinct_serve.catalog.store import checked_catalog

    catalog, warnings = checked_catalog()
    # the catalog's warnings and its staleness in the document: an agent reads no stderr
    return Outcome(_doc(show_document(catalog, inp.model, inp.gpu, inp.variant, warnings)))


def recipes_search(inp: RecipesSearchInput) -> Outcome:
    """``instinct recipes search QUERY --json``: the ranked recipes and why each ranks."""
    from instinct_serve.catalog.search import search
    from instinct_serve.catalog.store import checked_catalog
    from instinct_serve.gather.search import search_target

    catalog, warnings = checked_catalog()
    gpu_count = str(inp.gpu_count) if inp.gpu_count is not None else None
    target = search_target(inp.gpu, gpu_count, inp.host)
    hits = search(catalog, inp.query, target, limit=inp.limit)
    doc = {
        "query": inp.query,
        "target": target._asdict() if target else None,
        "results": [h.to_dict() for h in hits],
        "warnings": warnings,
    }
    return Outcome(doc, int(ExitCode.OK if hits else ExitCode.FAILED))


def fit(inp: JobInput) -> Outcome:
    """``instinct fit MODEL --json``: the report, the catalog context and alternatives."""
    from instinct_serve.gather.fit import fit_request

    req: FitRequest = inp.options()
    answer, notes = fit_request(req, _host(inp.host))
    doc = _doc(answer)
    if notes:
        doc["warnings"] = notes
    return Outcome(doc, int(ExitCode.FAILED if answer.failed else ExitCode.OK))


def plan(inp: PlanExtras) -> Outcome:
    """``instinct plan --json`` (an MI300X profile when the local machine has no GPU); with
    ``list``, ``plan --list --json``; with ``format``, the document and that rendering."""
    from instinct_serve.gather.plan import plan_for

    opts: PlanOptions = inp.options()
    host = _host(inp.host)
    if inp.list:
        from instinct_serve.gather.choices import plan_choices

        if host.is_local:
            opts.default_gpu = "mi300x"
        listing = plan_choices(opts, host)
        failed = listing.plan_error is not None
        return Outcome(_doc(listing.to_dict()), int(ExitCode.FAILED if failed else ExitCode.OK))
    result = plan_for(opts, host, fallback_gpu=True)
    doc = _doc(result)
    if inp.format:
        from instinct_serve.plan.render import render, secret_notes

        doc["rendered"] = {
            "format": inp.format,
            "text": render(result.plan, inp.format),
            "notes": secret_notes(result.plan, inp.format),
        }
    return Outcome(doc)


def partition(inp: PartitionInput) -> Outcome:
    """``instinct partition show --json``: the GPUs' modes and how to reach the others."""
    from instinct_serve.gather.partitions import survey

    return Outcome(_doc(survey(_host(inp.host), sysfs_root=inp.sysfs_root).to_dict()))


def cache(inp: CacheInput) -> Outcome:
    """``instinct cache ls --json``: the compile caches, their size, image and users."""
    from instinct_serve.runtime.caches import listing_for

    host = _host(inp.host)
    return Outcome(listing_for(host, inp.compile_cache).to_dict(host))


def recipes_sync(inp: RecipesSyncInput) -> Outcome:
    """``instinct recipes sync --json``: the recipes cache and AMD's reference configs."""
    from instinct_serve.gather.recipes_sync import sync_from

    report = sync_from(
        inp.source,
        repo_url=inp.repo_url,
        api_url=inp.api_url,
        hub_url=inp.hub_url,
        reference_url=inp.reference_url,
    )
    return Outcome(_doc(report.to_dict()))


def diagnose(inp: DiagnoseInput) -> Outcome:
    """``instinct diagnose --json`` over pasted text, a managed container's log, a symptom."""
    from instinct_serve.diagnose import DiagnoseContext, diagnose_symptom
    from instinct_serve.diagnose import diagnose as run_diagnose

    context = DiagnoseContext(
        gfx=inp.gfx, model=inp.model, vllm_version=inp.vllm_version, server=inp.server
    )
    if inp.symptom:
        result = diagnose_symptom(inp.symptom, context)
    elif inp.container:
        from instinct_serve.runtime.diagnosis import diagnose_endpoint

        result = diagnose_endpoint(_host(inp.host), inp.container, context, managed_only=True)
    else:
        text = inp.log_text or ""
        if not text.strip():
            raise UsageError("the log is empty", fix="check the log source", id="empty_log")
        result = run_diagnose(text, context)
    ok = result.matched or result.healthy
    return Outcome(_doc(result), int(ExitCode.OK if ok else ExitCode.FAILED))


# --------------------------------------------------------------------------- containers


def status(inp: StatusInput) -> Outcome:
    """``instinct ps --json``: the endpoints this tool started (at most ``MAX_LIST``), after
    finishing or undoing any change cut short (``interrupted``, as ``ps`` does)."""
    from instinct_serve.runtime.endpoints import list_endpoints
    from instinct_serve.runtime.recover import resolve

    host = _host(inp.host)
    interrupted = resolve(host)
    listing = list_endpoints(host, health=not inp.no_health, limit=MAX_LIST, everyone=inp.everyone)
    doc = _doc(listing)
    return Outcome(doc | ({"interrupted": interrupted} if interrupted else {}))


def logs(inp: LogsInput) -> Outcome:
    """``instinct logs NAME --tail N --json``, bounded to ``MAX_LOG_BYTES``; the log of a
    container instinct-serve did not start is refused (``not_managed``)."""
    from instinct_serve.runtime.diagnosis import keep_end
    from instinct_serve.runtime.endpoints import read_log

    engine, text = read_log(_host(inp.host), inp.name, inp.tail, managed_only=True)
    kept = keep_end(text, MAX_LOG_BYTES)
    lines = kept.splitlines()
    if len(kept) < len(text) and lines:
        lines = lines[1:]  # the first line was cut in the middle
    doc: dict[str, Any] = {"name": inp.name, "engine": engine, "lines": lines}
    if len(kept) < len(text):
        doc["truncated"] = {"max_bytes": MAX_LOG_BYTES}
    return Outcome(_doc(doc))


def metrics(inp: MetricsInput) -> Outcome:
    """``instinct top --once --json``: load, KV cache, latency, tokens/s, tokens per watt."""
    from instinct_serve.runtime.observe import observe_once

    doc = observe_once(_host(inp.host), inp.names, inp.window_s, gpus=inp.gpu)
    return Outcome(doc.to_dict(), int(ExitCode.OK if doc.ok else ExitCode.FAILED))


def bench(inp: BenchInput, sink: EventSink, cancelled: Callable[[], bool]) -> Outcome:
    """``instinct bench NAME --json``: the step events to ``sink`` (progress), then the run
    next to AMD's published points; stored unless ``save`` is false."""
    from instinct_serve.observe import bench as model
    from instinct_serve.runtime import bench as runner

    settings = model.Settings(
        concurrency=tuple(model.parse_concurrency(",".join(map(str, inp.concurrency)))),
        requests=inp.requests,
        input_len=inp.input_len,
        output_len=inp.output_len,
        step_timeout_s=inp.step_timeout_s,
    )
    host = _host(inp.host)
    endpoint = runner.resolve(host, inp.name)
    steps = {"index": 0, "total": len(settings.concurrency)}

    def started(level: int, index: int, total: int) -> None:
        steps["index"] = index

    def done(level: int, point: Any, error: dict[str, Any] | None) -> None:
        sink(to_jsonable(model.step_event(steps["index"], steps["total"], level, point, error)))

    result, reference = runner.sweep(
        host,
        endpoint,
        settings,
        vllm=inp.vllm,
        gpu_name=inp.gpu,
        store=inp.save,
        on_step=done,
        on_start=started,
    )
    failed = not result.points or bool(result.errors)
    doc = _doc(result.to_dict() | {"reference": reference})
    return Outcome(doc, int(ExitCode.FAILED if failed else ExitCode.OK), failed=not result.points)


def stop(inp: StopInput) -> Outcome:
    """``instinct stop NAME...|--all [--everyone] --json``: containers carrying the managed
    label and native processes this tool launched; anything else is refused
    (``not_managed``). Without ``confirm`` and the summary's ``change_hash``: the summary
    of what it would stop and remove, and nothing is done."""
    from instinct_serve.runtime import endpoints
    from instinct_serve.runtime.confirm import approval, stop_selection

    host = _host(inp.host)
    chosen = stop_selection(host, [] if inp.all else inp.names, everyone=inp.everyone)
    summary = approval(chosen.change, confirm=inp.confirm, change_hash=inp.change_hash)
    if summary is not None:
        return Outcome(summary)
    doc = endpoints.stop_each(host, chosen.names, chosen.change.skipped)
    failed = bool(doc["not_stopped"])
    return Outcome(_doc(doc), int(ExitCode.FAILED if failed else ExitCode.OK), failed=failed)


# --------------------------------------------------------------------------- serve

WOULD = (
    "run `instinct check` on {host} ({checks}) and stop if it is not ready",
    "reuse an endpoint of this very plan if one already runs (or follow it while it loads)",
    "refuse if anything not started by instinct-serve holds port {port} or the name {name}",
    "remove a stopped instinct-serve endpoint of that name; replace a running instinct-serve "
    "endpoint on the port only with replace=true",
    "{launch}",
    "follow its startup phases, wait for /health, warm it up and probe that it answers "
    "coherently; relaunch once with a known safe fix (e.g. --enforce-eager after a "
    "graph-capture OOM)",
    "return the endpoint: base_url, model name and a curl command",
)


UPGRADE_WOULD = (
    "run `instinct check` on {host} ({checks}) and stop if it is not ready",
    "refuse unless an instinct-serve endpoint named {name} runs a plan this tool recorded",
    "start the new plan beside it on a spare port ({name}-next; for a replica group, new "
    "replicas behind the same router) and prove it: /health, warm-up, coherence",
    "if the new plan fails: stop it, keep its log, and leave the running endpoint untouched",
    "if it is proven: behind a router, point the router at it (no request refused); for one "
    "endpoint, stop the old one and serve the new plan on port {port} (a warm restart, a "
    "few seconds without an endpoint)",
    "keep the old plan as last-good: the rollback tool returns to it",
)


def serve_summary(result: PlanResult, host: Host, *, upgrade: bool = False) -> dict[str, Any]:
    """The confirmation document: what the user approves, and what approval does."""
    from instinct_serve.plan.summary import summary_rows

    plan = result.plan
    native = plan.launcher == "native"
    fields = {
        "host": host.name,
        "port": plan.port,
        "name": plan.container_name,
        "checks": "GPU devices, HF token, disk" + ("" if native else ", docker"),
        "launch": f"find the host's vLLM (`instinct engine detect`) and start `vllm serve` as "
        f"process {plan.container_name}, its log under the instinct-serve state directory"
        if native
        else f"pull {plan.image} if needed and launch container {plan.container_name} "
        "(labelled instinct-serve.managed=true)",
    }
    return {
        "confirmed": False,
        "launched": False,
        "host": host.name,
        "plan_hash": plan.plan_hash,
        "summary": [{"item": k, "value": v} for k, v in summary_rows(result)],
        "warnings": list(plan.warnings),
        "plan": _doc(result),
        "confirm_would": [step.format(**fields) for step in (UPGRADE_WOULD if upgrade else WOULD)],
        "next": "show this summary to the user; once they agree, call serve again with the "
        "same arguments, confirm=true and plan_hash=" + plan.plan_hash,
    }


def serve(inp: ServeExtras, sink: EventSink, cancelled: Callable[[], bool]) -> Outcome:
    """``instinct serve --json``: the final result document; events go to ``sink``.

    Without ``confirm`` this only plans (no check, no launch; the native engine is only
    discovered, to plan for the CPU when it is CPU-only) and returns the
    confirmation summary. ``cancelled`` is polled at every event: once true, the run
    stops and removes what it launched, as Ctrl-C does in the CLI.
    """
    from instinct_serve.runtime.prepare import serve_plan

    opts: ServeOptions = inp.options()
    host = _host(inp.host)
    if not inp.confirm:  # the plan prepare will make (a CPU-only engine's: its CPU's)
        from instinct_serve.runtime.prepare import require_token

        result = serve_plan(host, opts.plan_options(), engine=opts.engine)
        require_token(result)  # a gated model with no token: no summary to approve
        doc = serve_summary(result, host, upgrade=opts.upgrade)
        if opts.replace:
            doc |= _replacing(host, result, opts.engine)
        return Outcome(doc)
    if inp.plan_hash is None:
        raise UsageError(
            "serve with confirm=true needs the plan_hash of the summary the user approved",
            fix="call serve without confirm, show the summary to the user, then call again "
            "with confirm=true and its plan_hash",
            id="approval_required",
        )
    return deploy(inp, opts, host, sink, cancelled)


def _replacing(host: Host, result: PlanResult, engine: str) -> dict[str, Any]:
    """With replace=true: what the replacement would stop and remove now (and its
    ``change_hash``), for the summary; nothing when it cannot be read (Docker down)."""
    from instinct_serve.runtime.confirm import replace_change

    try:
        change = replace_change(host, result.plan, _stand_in_backend(host, engine))
    except InstinctError:
        return {}
    if change.empty:
        return {}
    return {"change": change.to_dict(), "change_hash": change.hash}


def _stand_in_backend(host: Host, engine: str) -> Backend:
    """A backend to read what holds a plan's port and name (no launch: no command)."""
    if engine == "native":
        from instinct_serve.runtime.native import NativeBackend

        return NativeBackend(host, "vllm")
    from instinct_serve.runtime.docker_backend import DockerBackend

    return DockerBackend(host)


class Cancelled(KeyboardInterrupt):
    """The MCP request was cancelled: unwinds serve like Ctrl-C (cleanup included)."""


def _emitter(sink: EventSink, cancelled: Callable[[], bool]) -> Callable[[ServeEvent], None]:
    """Serve events to the MCP sink (progress notifications, the JSON edge); once the request
    is cancelled, ``Cancelled`` is raised once: the cleanup that follows must not be
    interrupted by its own events."""
    unwinding = False

    def emit(event: ServeEvent) -> None:
        nonlocal unwinding
        if unwinding:
            return
        if cancelled():
            unwinding = True
            raise Cancelled()
        sink(event.to_dict())

    return emit


def deploy(
    inp: ServeExtras,
    opts: ServeOptions,
    host: Host,
    sink: EventSink,
    cancelled: Callable[[], bool],
) -> Outcome:
    """Check, plan, launch and wait: ``runtime.prepare`` then the ``Deployer``, as the CLI.

    The plan made now must be the one the user approved (``plan_hash``), else
    ``plan_changed`` and nothing is launched.
    """
    from instinct_serve.runtime.deploying import Interrupted
    from instinct_serve.runtime.prepare import prepare, serve_settings
    from instinct_serve.runtime.secret_env import give

    give(opts.extra_env)  # this call's context only: another call never launches with it
    emit = _emitter(sink, cancelled)
    try:
        prepared = prepare(
            host,
            opts.plan_options(),
            engine=opts.engine,
            sink=emit,
            root=opts.root,
            approved_hash=inp.plan_hash,
        )
    except Cancelled:
        raise InstinctError(
            "serve was cancelled before anything was launched",
            fix="call serve again with confirm=true when the user wants it",
            id="cancelled",
        ) from None
    settings = serve_settings(opts)
    if opts.replace:  # what it stops and removes: approved, or refused before anything
        from instinct_serve.runtime.confirm import approval, replace_change

        change = replace_change(host, prepared.result.plan, prepared.backend)
        approval(change, confirm=True, change_hash=inp.change_hash)
    if opts.upgrade:
        try:
            upgraded = prepared.upgrade(settings, emit)
        except KeyboardInterrupt:  # Cancelled: what this run launched is removed
            raise InstinctError(
                "the upgrade was cancelled; the new plan's endpoint was removed",
                fix="see the endpoint with the status tool; call serve again with upgrade=true "
                "and confirm=true when the user wants it",
                id="cancelled",
            ) from None
        return Outcome(_doc(upgraded), upgraded.exit_code, failed=not upgraded.ok)
    # Nobody to ask: a running endpoint is replaced only with replace=true.
    deployer = prepared.deployer(settings, emit, confirm=None)
    try:
        try:
            outcome = deployer.reuse()
            if outcome is None:
                deployer.preflight()
                outcome = deployer.deploy()
        except KeyboardInterrupt:  # Cancelled: stop and remove what this run launched
            raise deployer.interrupted() from None
        finally:
            deployer.close()
    except Interrupted as stop:
        outcome = stop.outcome
    return Outcome(_doc(outcome), outcome.exit_code, failed=not outcome.ok)


def rollback(inp: RollbackExtras, sink: EventSink, cancelled: Callable[[], bool]) -> Outcome:
    """``instinct rollback NAME --json``: the last good plan (the one an upgrade replaced)
    served again in place of the current one, which becomes the last good. Without
    ``confirm`` and the summary's ``change_hash``: the summary of what it would replace."""
    from instinct_serve.runtime.confirm import approval, rollback_change
    from instinct_serve.runtime.rollback import rollback as run_rollback
    from instinct_serve.runtime.settings import ServeSettings

    opts = inp.options()
    host = _host(inp.host)
    change = rollback_change(host, inp.name)
    summary = approval(change, confirm=inp.confirm, change_hash=inp.change_hash)
    if summary is not None:
        return Outcome(summary)
    settings = ServeSettings(timeout_s=opts.timeout_s)
    try:
        outcome = run_rollback(
            host, inp.name, settings, _emitter(sink, cancelled), device_root=inp.root
        )
    except KeyboardInterrupt:
        raise InstinctError(
            "the rollback was cancelled; what it launched was removed",
            fix="see what runs with the status tool",
            id="cancelled",
        ) from None
    return Outcome(_doc(outcome), outcome.exit_code, failed=not outcome.ok)
