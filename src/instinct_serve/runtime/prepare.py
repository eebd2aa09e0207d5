"""What ``serve`` does before it launches: check the host, make the plan, pick the backend.

One path for the CLI (``instinct serve``) and the MCP ``serve`` tool: both hand in an
event sink and get back a deployer ready to run (``runtime.deploying.Deploying``: a
``Deployer``, or a ``GroupDeployer`` for replicas). Progress goes to the sink as the
same events the ``Deployer`` emits (``phase`` checking/planning, ``warning``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hardware.target import CPU_SOURCE
from instinct_serve.runtime.events import EventSink, Note, PhaseUpdate, WarningEvent

if TYPE_CHECKING:
    from instinct_serve.checks import CheckReport
    from instinct_serve.engine.discovery import Engine
    from instinct_serve.hosts import Host
    from instinct_serve.options import PlanOptions, ServeOptions
    from instinct_serve.plan.model import PlanResult
    from instinct_serve.runtime.backend import Backend
    from instinct_serve.runtime.deploying import Deploying
    from instinct_serve.runtime.documents import ServeOutcome
    from instinct_serve.runtime.settings import ServeSettings

DOCKER_CHECKS = frozenset({"docker_installed", "docker_daemon"})
# What a CPU-only engine does not use: the GPU, its driver and devices, ROCm.
GPU_CHECKS = frozenset(
    {
        "amdgpu_driver",
        "dev_kfd",
        "dev_dri",
        "visible_devices_empty",
        "gpu_supported",
        "rocm_version",
    }
)


def ignored_checks(engine: str, cpu: bool = False, force: bool = False) -> frozenset[str]:
    """The checks that do not matter for this launch: Docker on the native route, the
    GPU for a CPU-only engine, and with ``--force`` whether the GPUs are ones this tool
    serves (``gpu_supported``: a Radeon, an MI100)."""
    ignored = DOCKER_CHECKS if engine == "native" else frozenset()
    if force:
        ignored |= {"gpu_supported"}
    return ignored | GPU_CHECKS if cpu else ignored


def require_ready(
    host: Host,
    model: str,
    port: int,
    hf_cache: str | None,
    root: str,
    engine: str,
    *,
    cpu: bool = False,
    force: bool = False,
) -> CheckReport:
    """``instinct check`` for this launch; ``NotReadyError`` naming the first blocker.

    The port check is left to the deployer (it knows which holders it may replace), and
    ``ignored_checks`` do not block (``force``: GPUs this tool does not serve).
    """
    from instinct_serve.checks import CheckOptions, run_checks
    from instinct_serve.checks.hub import model_is_gated

    gated = model_is_gated(model) if model else None
    options = CheckOptions(model=model, model_gated=gated, port=port, hf_cache=hf_cache, root=root)
    report = run_checks(host, options)
    ignored = {"port_free"} | ignored_checks(engine, cpu, force)
    errors = [c for c in report.errors if c.id not in ignored]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise NotReadyError(
            f"{host.name} is not ready to serve: {first.message}{more}",
            fix=(first.fix or "") + "; `instinct check` lists everything"
            if first.fix
            else "run `instinct check` for the details and fixes",
            agent_fix=first.agent_fix and first.agent_fix + "; the check tool lists everything",
            id="not_ready",
            details={"errors": [c.brief() for c in errors], "check": first.id},
        )
    return report


def native_engine(host: Host, warn: Callable[[str], None], server: str = "auto") -> Engine:
    """The server install the native route runs (``engine.discovery``), its warnings said:
    the one ``server`` names (``--server``), vLLM for ``auto`` (``planned_engine`` looks
    again when the plan chose another)."""
    from instinct_serve import servers
    from instinct_serve.engine.discovery import discover, require_usable

    name = server if server in servers.names() else servers.DEFAULT
    engine = require_usable(discover(host, server=name))
    for message in engine.warnings:
        warn(message)
    return engine


def planned_engine(
    host: Host, result: PlanResult, warn: Callable[[str], None], engine: Engine
) -> Engine:
    """The install of the server the plan launches: ``engine`` when it is that server's,
    else that server's found now (``--server auto`` chose another one)."""
    from instinct_serve import servers

    wanted = servers.of(result.plan).name
    return engine if engine.server == wanted else native_engine(host, warn, wanted)


def native_backend(
    host: Host, result: PlanResult, warn: Callable[[str], None], engine: Engine
) -> Backend:
    """Pin the GPUs (most free first) and wrap the launcher around ``engine``."""
    from instinct_serve.runtime.native import NativeBackend

    plan = result.plan
    if plan.gpu_indices is None and result.hardware_source == "detect":
        from instinct_serve.engine.gpus import rank, select, telemetry_trusted

        if plan.tensor_parallel_size == 1:
            util = plan.fit.gpu_memory_utilization if plan.fit else None
            selection = select(result.inventory, utilization=util)
            plan.gpu_indices = list(selection.indexes)
            for note in [*selection.notes, *selection.low_free]:
                warn(note)
        elif telemetry_trusted(result.inventory):
            ranked = rank(result.inventory)[: plan.tensor_parallel_size]
            plan.gpu_indices = sorted(g.index for g in ranked)
    return NativeBackend(host, engine.command)


def serve_plan(host: Host, opts: PlanOptions, *, engine: str) -> PlanResult:
    """The plan ``prepare`` will make, without checking or launching anything (the MCP
    summary a user approves): vLLM's CPU backend's when the native engine is CPU-only,
    else the GPUs'. Only reads the host (engine discovery, GPUs)."""
    from instinct_serve.gather.plan import cpu_plan_target, make_plan

    target = None
    if engine == "native":
        from instinct_serve import servers
        from instinct_serve.engine.discovery import discover

        server = opts.server if opts.server in servers.names() else servers.DEFAULT
        found = discover(host, server=server)
        if found.usable and found.engine is not None and found.engine.cpu_only:
            target = cpu_plan_target(opts, host)
    return make_plan(opts, host, target=target)


def plan_changed(approved: str, result: PlanResult) -> InstinctError:
    """The user approved another plan than the one made at launch."""
    return InstinctError(
        f"the plan changed since the summary was approved (plan_hash {approved} -> "
        f"{result.plan.plan_hash}): the host's GPUs, the catalog or the arguments differ",
        fix="plan again, and show the new summary to the user",
        id="plan_changed",
        details={"approved": approved, "now": result.plan.plan_hash},
    )


@dataclass
class Prepared:
    """A checked host, its plan, and the backend that will run it."""

    host: Host
    result: PlanResult
    backend: Backend
    engine: str

    @property
    def gfx(self) -> str | None:
        gfx = self.result.inventory.gfx_version
        return gfx if gfx not in ("unknown", "mixed", CPU_SOURCE) else None

    def deployer(
        self,
        settings: ServeSettings,
        sink: EventSink,
        confirm: Callable[[str], bool] | None,
    ) -> Deploying:
        from instinct_serve.runtime.serve import Deployer

        group = self.result.plan.group
        if group is not None and group.mode == "replicas" and self.engine != "docker":
            from instinct_serve.errors import UsageError

            raise UsageError(
                f"{group.count} replicas behind a router run as Docker containers; the "
                f"{self.engine} engine serves one endpoint",
                fix="use --engine docker, or --replicas 1",
                id="bad_engine",
            )
        if group is not None and group.mode == "replicas":
            from instinct_serve.runtime.group import GroupDeployer

            backend = self.backend
            return GroupDeployer(
                self.host,
                self.result.plan,
                settings,
                sink=sink,
                confirm=confirm,
                gfx=self.gfx,
                device_root=getattr(backend, "device_root", ""),
            )
        return Deployer(
            self.host,
            self.result.plan,
            self.backend,
            settings,
            sink=sink,
            confirm=confirm,
            gfx=self.gfx,
        )

    def upgrade(self, settings: ServeSettings, sink: EventSink) -> ServeOutcome:
        """``serve --upgrade`` (CLI and MCP alike): the new plan proven beside the running
        one, then swapped in; a replica group behind its router without downtime."""
        from instinct_serve.errors import UsageError
        from instinct_serve.runtime import upgrade, upgrade_group

        if settings.replace:
            raise UsageError(
                "--upgrade and --replace are two ways to replace an endpoint",
                fix="--upgrade proves the new plan first; --replace stops the old one at once",
                id="bad_usage",
            )
        plan = self.result.plan
        if plan.group is not None and plan.group.mode == "replicas":
            return upgrade_group.upgrade_group(
                self.host,
                plan,
                settings,
                sink,
                gfx=self.gfx,
                device_root=getattr(self.backend, "device_root", ""),
            )
        return upgrade.upgrade(self.host, plan, self.backend, settings, sink)


def prepare(
    host: Host,
    opts: PlanOptions,
    *,
    engine: str,
    sink: EventSink,
    root: str = "",
    approved_hash: str | None = None,
) -> Prepared:
    """Check the host, plan, and choose the backend; progress and warnings to ``sink``.

    ``approved_hash``: the ``plan_hash`` a user approved; a different plan now (GPUs,
    catalog or arguments changed) raises ``plan_changed`` before anything is launched.
    """
    from instinct_serve.gather.plan import cpu_plan_target, make_plan
    from instinct_serve.runtime.docker_backend import DockerBackend
    from instinct_serve.runtime.recover import resolve

    def warn(message: str) -> None:
        sink(WarningEvent(message=message))

    sink(PhaseUpdate(phase="checking", message=f"host {host.name}"))
    resolve(host, lambda text: sink(Note(message=text)))  # a change cut short: settled first
    # The native engine first: a CPU-only one (allowed by INSTINCT_ALLOW_CPU_ENGINE) needs
    # no GPU, and its plan is the CPU backend's (hardware.target.cpu_target).
    native = native_engine(host, warn, opts.server) if engine == "native" else None
    cpu = native is not None and native.cpu_only
    report = require_ready(
        host, opts.model, opts.port, opts.hf_cache, root, engine, cpu=cpu, force=opts.force
    )
    ignored = ignored_checks(engine, cpu, opts.force)
    for warning in report.warnings:
        if warning.id not in ignored:
            warn(f"{warning.id}: {warning.message}")
    sink(PhaseUpdate(phase="planning", message=opts.model))
    target = cpu_plan_target(opts, host) if cpu else None
    result = make_plan(opts, host, target=target)
    if approved_hash is not None and result.plan.plan_hash != approved_hash:
        raise plan_changed(approved_hash, result)
    require_token(result)
    for message in result.warnings:
        warn(message)
    backend: Backend = (
        native_backend(host, result, warn, planned_engine(host, result, warn, native))
        if native is not None
        else DockerBackend(host, device_root=root)
    )
    return Prepared(host, result, backend, engine)


def require_token(result: PlanResult) -> None:
    """Refuse a gated model when no token is visible to this process, which passes it to
    the server that downloads (the container's ``--env HF_TOKEN``, the native process's
    environment): ``gated_model`` before any launch, not a 401 seconds after it.

    Gated is the Hub API's answer for the planned model (asked only when its metadata says
    so; offline, unknown: not refused, ``check`` warns). The token is looked for where the
    launch takes it from (``secret_env.local_secrets``)."""
    from instinct_serve.checks.hub import model_is_gated
    from instinct_serve.gather.model_meta import gated_error
    from instinct_serve.runtime.secret_env import TOKEN_NAMES, local_secrets

    meta = result.fit.meta if result.fit is not None else None
    if meta is None or not meta.gated or local_secrets(TOKEN_NAMES):
        return
    if model_is_gated(result.plan.model):
        raise gated_error(result.plan.model, has_token=False)


def serve_settings(opts: ServeOptions) -> ServeSettings:
    """How patient and forceful one serve is, from its options (CLI and MCP alike)."""
    from instinct_serve.runtime.settings import ServeSettings

    given: dict[str, Any] = {
        "replace": opts.replace,
        "detach": opts.detach,
        "timeout_s": opts.timeout_s,
        "stall_timeout_s": opts.stall_timeout_s,
        "warmup_timeout_s": opts.warmup_timeout_s,
        "coherence": not opts.skip_coherence,
        "fingerprint": not opts.skip_fingerprint,
        "prefetch": opts.prefetch,
    }
    return ServeSettings(**{k: v for k, v in given.items() if v is not None})
