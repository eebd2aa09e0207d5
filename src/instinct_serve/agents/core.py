"""The MCP tools' bodies: the same core calls as the CLI, returning the ``--json`` documents.

Each function takes a validated input model and returns an ``Outcome`` (the document, the
exit code the CLI would give, and whether the action asked for failed). They are blocking
and thread-safe, and the server runs them in worker threads. Nothing here prints to stdout
(the MCP stream): warnings from the shared CLI helpers go to stderr.

Safety rules the server relies on: ``serve`` launches nothing without ``confirm``;
``stop``, ``logs`` and ``diagnose --container`` act only on containers carrying the
managed label (``runtime.endpoints``), so a foreign container is a structured error; logs and
lists are bounded here, and ``agents.safety`` redacts secrets from every document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from instinct_serve.agents.inputs import (
    CheckInput,
    DetectInput,
    DiagnoseInput,
    FitInput,
    LogsInput,
    PlanInput,
    RecipesShowInput,
    ServeInput,
    StatusInput,
    StopInput,
)
from instinct_serve.errors import ExitCode, InstinctError, UsageError
from instinct_serve.jsonio import to_jsonable

if TYPE_CHECKING:
    from instinct_serve.hosts import Host
    from instinct_serve.plan.assemble import PlanResult

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
    from instinct_serve.hardware.detect import detect as detect_gpus

    inventory = detect_gpus(_host(inp.host), sysfs_root=inp.sysfs_root)
    code = ExitCode.OK if inventory.gpu_count else ExitCode.NOT_READY
    return Outcome(_doc(inventory), int(code))


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
    return Outcome(_doc(report), int(ExitCode.OK if report.ready else ExitCode.NOT_READY))


def recipes_show(inp: RecipesShowInput) -> Outcome:
    """``instinct recipes show MODEL [--gpu G] [--variant V] --json``."""
    from instinct_serve.catalog.documents import show_document
    from instinct_serve.catalog.store import checked_catalog

    catalog, warnings = checked_catalog()
    # the catalog's warnings and its staleness in the document: an agent reads no stderr
    return Outcome(_doc(show_document(catalog, inp.model, inp.gpu, inp.variant, warnings)))


def fit(inp: FitInput) -> Outcome:
    """``instinct fit MODEL --json``: the report, the catalog context and alternatives."""
    from instinct_serve.fit.catalog_link import fit_model
    from instinct_serve.fit.hardware import fit_hardware

    hw, notes = fit_hardware(
        inp.gpu, inp.vram_gb, inp.vram_gib, inp.gpu_count, lambda: _host(inp.host), inp.sysfs_root
    )
    answer = fit_model(
        inp.model,
        hw,
        gpu=inp.gpu,
        revision=inp.revision,
        alternatives=not inp.no_alternatives,
        tp=inp.tp,
        max_model_len=inp.max_model_len,
        kv_cache_dtype=inp.kv_cache_dtype,
        gpu_memory_utilization=inp.gpu_memory_utilization,
        vllm_version=inp.vllm_version,
        max_num_seqs=inp.max_num_seqs,
        max_num_batched_tokens=inp.max_num_batched_tokens,
        block_size=inp.block_size,
        enforce_eager=inp.enforce_eager,
        language_model_only=inp.language_model_only,
        speculative_mtp=inp.speculative_mtp,
        enable_prefix_caching=inp.enable_prefix_caching,
    )
    doc = _doc(answer)
    if notes:
        doc["warnings"] = notes
    return Outcome(doc, int(ExitCode.FAILED if answer.failed else ExitCode.OK))


def _refuse_secrets(inp: PlanInput) -> None:
    """A token given a value in ``extra_env`` would sit in the plan (and in ``docker run``'s
    argv): refuse every secret-looking name, not only the planner's ``HF_TOKEN``."""
    from instinct_serve.agents.safety import is_secret_name

    for key in inp.extra_env:
        if is_secret_name(key):
            raise UsageError(
                f"{key} must not be given a value in extra_env",
                fix=f"set {key} in the environment of the instinct mcp server (or use "
                "`huggingface-cli login` on the host); plans pass tokens by name only",
                id="secret_in_args",
            )


def plan(inp: PlanInput) -> Outcome:
    """``instinct plan --json`` (an MI300X profile when the local machine has no GPU)."""
    from instinct_serve.cli.plan import make_plan_from_cli

    _refuse_secrets(inp)
    result = make_plan_from_cli(inp.plan_kwargs(), engine="docker", fallback_gpu=True)
    return Outcome(_doc(result))


def diagnose(inp: DiagnoseInput) -> Outcome:
    """``instinct diagnose --json`` over pasted text, a managed container's log, a symptom."""
    from instinct_serve.diagnose import DiagnoseContext, diagnose_symptom
    from instinct_serve.diagnose import diagnose as run_diagnose

    context = DiagnoseContext(gfx=inp.gfx, model=inp.model, vllm_version=inp.vllm_version)
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
    return Outcome(_doc(result), int(ExitCode.OK if result.matched else ExitCode.FAILED))


# --------------------------------------------------------------------------- containers


def _keep_end(text: str, limit: int) -> str:
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    return data[-limit:].decode("utf-8", errors="ignore")


def status(inp: StatusInput) -> Outcome:
    """``instinct ps --json``: the endpoints this tool started (at most ``MAX_LIST``)."""
    from instinct_serve.runtime.endpoints import list_endpoints

    listing = list_endpoints(_host(inp.host), health=not inp.no_health, limit=MAX_LIST)
    return Outcome(_doc(listing))


def logs(inp: LogsInput) -> Outcome:
    """``instinct logs NAME --tail N --json``, bounded to ``MAX_LOG_BYTES``; the log of a
    container instinct-serve did not start is refused (``not_managed``)."""
    from instinct_serve.runtime.endpoints import read_log

    engine, text = read_log(_host(inp.host), inp.name, inp.tail, managed_only=True)
    kept = _keep_end(text, MAX_LOG_BYTES)
    lines = kept.splitlines()
    if len(kept) < len(text) and lines:
        lines = lines[1:]  # the first line was cut in the middle
    doc: dict[str, Any] = {"name": inp.name, "engine": engine, "lines": lines}
    if len(kept) < len(text):
        doc["truncated"] = {"max_bytes": MAX_LOG_BYTES}
    return Outcome(_doc(doc))


def stop(inp: StopInput) -> Outcome:
    """``instinct stop NAME...|--all --json``: containers carrying the managed label and
    native processes this tool launched; anything else is refused (``not_managed``)."""
    from instinct_serve.runtime import endpoints

    host = _host(inp.host)
    if inp.all:
        stopped = endpoints.stop_all(host)
    else:
        stopped = [endpoints.stop_one(host, name) for name in inp.names]
    return Outcome(_doc({"host": host.name, "stopped": stopped}))


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


def serve_summary(result: PlanResult, host: Host) -> dict[str, Any]:
    """The confirmation document: what the user approves, and what approval does."""
    from instinct_serve.cli.plan import summary_rows

    plan = result.plan
    native = plan.engine == "native"
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
        "confirm_would": [step.format(**fields) for step in WOULD],
        "next": "show this summary to the user; once they agree, call serve again with the "
        "same arguments, confirm=true and plan_hash=" + plan.plan_hash,
    }


def serve(inp: ServeInput, sink: EventSink, cancelled: Callable[[], bool]) -> Outcome:
    """``instinct serve --json``: the final result document; events go to ``sink``.

    Without ``confirm`` this only plans (no check, no docker command) and returns the
    confirmation summary. ``cancelled`` is polled at every event: once true, the run
    stops and removes what it launched, as Ctrl-C does in the CLI.
    """
    from instinct_serve.cli.plan import plan_options_from_kwargs
    from instinct_serve.plan.assemble import make_plan

    _refuse_secrets(inp)
    host = _host(inp.host)
    opts = plan_options_from_kwargs(inp.plan_kwargs(), engine=inp.engine)
    opts.validate()
    if not inp.confirm:
        return Outcome(serve_summary(make_plan(opts, host), host))
    return deploy(inp, host, sink, cancelled)


class Cancelled(KeyboardInterrupt):
    """The MCP request was cancelled: unwinds serve like Ctrl-C (cleanup included)."""


def deploy(inp: ServeInput, host: Host, sink: EventSink, cancelled: Callable[[], bool]) -> Outcome:
    """Check, plan, launch and wait: ``runtime.prepare`` then the ``Deployer``, as the CLI.

    The plan made now must be the one the user approved (``plan_hash``), else
    ``plan_changed`` and nothing is launched.
    """
    from instinct_serve.cli.plan import plan_options_from_kwargs
    from instinct_serve.runtime.events import ServeEvent
    from instinct_serve.runtime.prepare import prepare
    from instinct_serve.runtime.serve import Interrupted
    from instinct_serve.runtime.settings import ServeSettings

    unwinding = False

    def emit(event: ServeEvent) -> None:
        # Raise once; the cleanup that follows must not be interrupted by its own events.
        nonlocal unwinding
        if unwinding:
            return
        if cancelled():
            unwinding = True
            raise Cancelled()
        sink(event.to_dict())  # the JSON edge: MCP progress notifications

    try:
        opts = plan_options_from_kwargs(inp.plan_kwargs(), engine=inp.engine)
        prepared = prepare(
            host, opts, engine=inp.engine, sink=emit, root=inp.root, approved_hash=inp.plan_hash
        )
    except Cancelled:
        raise InstinctError(
            "serve was cancelled before anything was launched",
            fix="call serve again with confirm=true when the user wants it",
            id="cancelled",
        ) from None
    given: dict[str, Any] = {
        "stall_timeout_s": inp.stall_timeout_s,
        "warmup_timeout_s": inp.warmup_timeout_s,
    }
    settings = ServeSettings(
        replace=inp.replace,
        detach=inp.detach,
        timeout_s=inp.timeout_s,
        coherence=not inp.skip_coherence,
        **{key: value for key, value in given.items() if value is not None},
    )
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
