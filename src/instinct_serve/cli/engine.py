"""``instinct engine``: the native vLLM route (no Docker): detect, capabilities,
resolve-model, install, acceptance.

Heavy modules are imported inside the commands, so ``instinct engine --help`` stays fast.
Exit codes follow DESIGN.md: 0 ok, 1 the thing asked for failed, 2 bad usage, 3 the host
is not ready (no usable vLLM, no GPU, no uv, ...).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from instinct_serve import servers
from instinct_serve.cli.common import (
    choice,
    emit,
    get_host,
    host_option,
    json_option,
    progress,
    warn,
)
from instinct_serve.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from rich.console import Console


@click.group("engine")
def engine() -> None:
    """Native vLLM without Docker: find it, install a managed ROCm build, check it.

    \b
    Discovery order (first hit wins):
      INSTINCT_VLLM_COMMAND (or ROCM_CLI_VLLM_COMMAND): a vllm executable's path
      INSTINCT_VLLM_PYTHON (or ROCM_CLI_VLLM_PYTHON): a python beside a vllm
      the managed environment (instinct engine install vllm)
      vllm on PATH
    """


def _kv(con: Console, key: str, value: Any) -> None:
    from rich.markup import escape

    con.print(f"  [bold]{key}[/]: {escape(str(value)) if value is not None else '[dim]-[/]'}")


@engine.command("detect")
@click.option("--device-check", is_flag=True, help="Also run a tiny kernel on the GPU.")
@click.option(
    "--server",
    type=click.Choice(list(servers.BUILTIN)),
    default=servers.DEFAULT,
    show_default=True,
    help="The server whose native install to find (sglang: INSTINCT_SGLANG_PYTHON, the "
    "managed environment, python3 on PATH).",
)
@json_option
@host_option
def detect_cmd(device_check: bool, server: str, as_json: bool, host_spec: str | None) -> int:
    """Which vLLM (or SGLang) would serve, its torch / HIP / ROCm libraries, and whether it
    can."""
    from instinct_serve.engine.discovery import discover

    host = get_host(host_spec)
    kind = servers.get(server)
    with progress(f"probing the {kind.title} environment", enabled=not as_json):
        found = discover(host, device_check=device_check, server=server)
    doc = found.to_dict()

    def human(con: Console) -> None:
        from rich.markup import escape

        eng = found.engine
        if eng is None:
            con.print(f"[red]no {kind.title} found[/] on {escape(found.host)}; looked at:")
            for cand in found.candidates:
                con.print(f"  {cand.source}: {escape(cand.note or cand.status)}")
            con.print(f"Fix: {escape(kind.install_fix)}")
            return
        mark = "[green]usable[/]" if eng.usable else "[red]unusable[/]"
        con.print(f"{kind.title} via [bold]{escape(eng.source)}[/]: {mark}")
        info = eng.to_dict()
        keys: tuple[str, ...] = ("vllm_command", "python", "vllm_version", "vllm_build")
        if server != servers.DEFAULT:
            keys = ("command", "python", "server_version")
        for key in (
            *keys,
            "torch_version",
            "torch_build",
            "serves_on",
            "cpu_only",
            "torch_rocm",
            "hip_version",
        ):
            _kv(con, key, info[key])
        lib = info["hip_library"]
        _kv(con, "hip_library", f"{lib['path']} ({lib['origin']})" if lib else None)
        if eng.probe and eng.probe.device:
            con.print("  " + escape(eng.probe.device.line()))
        for reason in eng.reasons:
            con.print(f"  [red]✗[/] {escape(reason)}")
        for note in eng.warnings:
            con.print(f"  [yellow]![/] {escape(note)}")

    emit(doc, as_json, human)
    if found.engine is None or not found.engine.usable:
        return int(ExitCode.NOT_READY)
    return 0


def _confirm_install(summary: list[str], yes: bool, as_json: bool) -> bool:
    """Ask before changing the host; refuse when nobody can answer (no terminal)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError(
            "refusing to install without confirmation: stdin is not a terminal",
            fix="rerun with --yes (or --dry-run to see what would be installed)",
            id="confirmation_required",
        )
    con_text = "\n".join(summary)
    click.echo(con_text, err=True)
    return click.confirm("Proceed?", default=False, err=True)


@engine.command("install")
@click.argument("name", type=choice(["vllm"]), metavar="vllm")
@click.option("--rocm", "rocm", metavar="X.Y", help="ROCm SDK version (default: detected).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--dry-run", is_flag=True, help="Resolve every pin in a scratch venv; install nothing."
)
@json_option
@host_option
def install_cmd(
    name: str, rocm: str | None, yes: bool, dry_run: bool, as_json: bool, host_spec: str | None
) -> int:
    """Install vLLM into a managed uv venv pinned to the host's ROCm SDK.

    The pin table (data/engine_pins.json; INSTINCT_ENGINE_PINS=file overrides it) gives,
    per ROCm major.minor, the vLLM wheel or series, its index, the torch series and the
    Python tag. INSTINCT_VLLM_ROCM_INDEX_URL installs from another vLLM index instead.
    INSTINCT_DISABLE_TORCH_ALIGNMENT (set, any value) keeps whatever torch vLLM installed.
    """
    from instinct_serve.engine.install import install_vllm, plan_target
    from instinct_serve.engine.versions import require_series

    if rocm is not None:
        require_series(rocm)
    host = get_host(host_spec)
    target = plan_target(host, rocm)
    if not dry_run:
        summary = [
            f"Install vLLM on {host.name} for ROCm {target.rocm_detected} "
            f"({target.route} route, Python {target.python_tag}):",
            f"  vLLM:  {target.vllm_spec} from {target.vllm_index_url}",
            f"  torch: from {target.torch_index_url}",
            *(f"  note: {n}" for n in target.notes),
        ]
        if not _confirm_install(summary, yes, as_json):
            click.echo("Not installed.", err=True)
            return int(ExitCode.FAILED)
    with progress("installing vLLM", enabled=not as_json) as update:
        report = install_vllm(host, target, dry_run=dry_run, progress=update)
    doc = report.to_dict()
    doc["ready"] = bool(report.device_check and report.device_check.ok)

    def human(con: Console) -> None:
        from rich.markup import escape

        verb = "would install" if dry_run else "installed"
        con.print(
            f"[bold]vLLM {verb}[/] in {escape(report.venv)} (ROCm {target.rocm_detected},"
            f" {target.route} route, {report.python_tag})"
        )
        for pin in report.pins:
            con.print(f"  {escape(pin.spec):<60} [dim]{escape(pin.how)}[/]")
        for spec in report.repinned:
            con.print(f"  re-pinned {escape(spec)}")
        for line in report.lines():
            con.print(escape(line))
        for note in report.notes:
            con.print(f"[dim]note: {escape(note)}[/]")

    emit(doc, as_json, human)
    for message in report.warnings:
        warn(message, as_json)
    if not dry_run and report.device_check and not report.device_check.ok:
        warn(
            "the installed torch could not run a GPU kernel here; serving will fail until "
            "it can (see device_check)",
            as_json,
        )
    return 0


@engine.command("capabilities")
@click.option("--model", "model", metavar="MODEL", help="Also judge this one model.")
@json_option
@host_option
def capabilities_cmd(model: str | None, as_json: bool, host_spec: str | None) -> int:
    """What the installed vLLM can serve: its version vs each recipe's min_vllm_version,
    grouped by architecture (only where the catalog knows the model)."""
    from instinct_serve.engine.capabilities import (
        assess,
        catalog_requirements,
        judge,
        model_requirement,
    )
    from instinct_serve.engine.discovery import discover

    host = get_host(host_spec)
    with progress("probing the vLLM environment", enabled=not as_json):
        found = discover(host)
    eng = found.engine
    version = eng.probe.vllm_version if eng and eng.probe else None
    caps = assess(version, catalog_requirements())
    doc: dict[str, Any] = {
        "engine": eng.to_dict() if eng else None,
        "usable": found.usable,
        "features": {
            "device": "rocm",
            "cpu_fallback": False,
            "tensor_parallel": True,
            "graph_capture": True,
        },
        **caps.to_dict(),
    }
    verdict = None
    if model:
        req = model_requirement(model)
        verdict = judge(version, req).to_dict() if req else None
        doc["model"] = {"requested": model, "in_catalog": req is not None, "verdict": verdict}

    def human(con: Console) -> None:
        from rich.markup import escape

        from instinct_serve.cli.tables import Column, Rows

        con.print(
            f"vLLM {escape(version or 'not found')}"
            + ("" if found.usable else " [red](not usable)[/]")
        )
        table = Rows(
            [
                Column("ARCHITECTURE", key=True),
                Column("SUPPORTED"),
                Column("RECIPES", right=True),
                Column("NEWEST MINIMUM", drop=1),
            ],
            "recipes by architecture",
        )
        for arch, group in caps.by_architecture().items():
            table.add(
                arch,
                str(group["supported"]),
                str(group["recipes"]),
                str(group["newest_min_vllm_version"] or "-"),
            )
        table.print(con)
        if model:
            if verdict is None:
                con.print(f"{escape(model)}: not in the catalog (no stated minimum)")
            else:
                ok = {
                    True: "[green]supported[/]",
                    False: "[red]needs a newer vLLM[/]",
                    None: "[yellow]unknown[/]",
                }[verdict["supported"]]
                con.print(f"{escape(model)}: {ok} (min {verdict['min_vllm_version']})")

    emit(doc, as_json, human)
    if not found.usable:
        return int(ExitCode.NOT_READY)
    if verdict is not None and verdict["supported"] is False:
        return int(ExitCode.FAILED)
    return 0


@engine.command("resolve-model")
@click.argument("model")
@click.option(
    "--device-policy",
    type=choice(["gpu_required", "gpu_preferred"]),
    default="gpu_required",
    show_default=True,
    help="gpu_required fails without a usable engine and GPU; gpu_preferred only warns.",
)
@json_option
@host_option
def resolve_model_cmd(model: str, device_policy: str, as_json: bool, host_spec: str | None) -> int:
    """Where MODEL's weights come from (local path, HF cache, or the Hub) and whether this
    host can serve it natively. There is no CPU fallback under either policy."""
    from instinct_serve.engine.discovery import discover
    from instinct_serve.engine.models import resolve_model
    from instinct_serve.errors import NotReadyError
    from instinct_serve.gather.detect import detect

    host = get_host(host_spec)
    source = resolve_model(host, model)
    problems: list[str] = []
    found = discover(host)
    if not found.usable:
        eng = found.engine
        problems.append("no usable vLLM: " + ("; ".join(eng.reasons) if eng else "none found"))
    inventory = detect(host)
    if inventory.gpu_count == 0:
        problems.append(inventory.hint or "no AMD GPU found")
    if problems and device_policy == "gpu_required":
        raise NotReadyError(
            f"{model} cannot be served natively on {host.name} (gpu_required): "
            + "; ".join(problems),
            fix="run `instinct engine install vllm` and `instinct detect`; there is no CPU "
            "fallback",
            id="gpu_required",
            details={"model": source.to_dict()},
        )
    doc = {
        "model": source.to_dict(),
        "device_policy": device_policy,
        "engine": found.engine.to_dict() if found.engine else None,
        "gpu_count": inventory.gpu_count,
        "servable": not problems,
        "problems": problems,
    }

    def human(con: Console) -> None:
        from rich.markup import escape

        con.print(
            f"{escape(model)} -> [bold]{source.kind}[/]: "
            f"{escape(source.path or source.hub_id or '')}"
        )
        for note in source.notes:
            con.print(f"  [dim]{escape(note)}[/]")
        for problem in problems:
            con.print(f"  [yellow]![/] {escape(problem)}")

    emit(doc, as_json, human)
    return 0


@engine.command("acceptance")
@click.option("--model", "model", required=True, help="A small model, e.g. facebook/opt-125m.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(10, 7200),
    default=900,
    show_default=True,
    help="Seconds to wait for /health.",
)
@json_option
@host_option
def acceptance_cmd(
    model: str, port: int, timeout_s: float, as_json: bool, host_spec: str | None
) -> int:
    """Prove the managed engine serves on a real GPU host (not run in CI).

    Requires the managed environment (engine install vllm) and refuses external
    overrides (INSTINCT_VLLM_* / ROCM_CLI_VLLM_*). It launches vllm serve with
    gpu_required on the freest GPU, checks /health and /v1/completions, and reads
    /proc/PID/maps of the server processes to verify that the HIP runtime and BLAS
    libraries load from inside the managed environment. It always stops what it started.
    Exit 0: passed; 1: a check failed; 3: not ready (no managed engine, no GPU).

    \b
    Example:  instinct engine install vllm --yes
              instinct engine acceptance --model facebook/opt-125m
    """
    from instinct_serve.engine.acceptance import run_acceptance

    host = get_host(host_spec)
    with progress("acceptance", enabled=not as_json) as update:
        report = run_acceptance(host, model, port=port, timeout_s=timeout_s, progress=update)

    def human(con: Console) -> None:
        from rich.markup import escape

        for check in report.checks:
            mark = "[green]✓[/]" if check.ok else "[red]✗[/]"
            con.print(f"{mark} {check.id}: {escape(check.message)}")
        if report.hint:
            con.print(escape(report.hint))
        if not report.passed and report.log_tail:
            con.print("[dim]" + escape(report.log_tail) + "[/]")
        con.print("[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]")

    emit(report.to_dict(), as_json, human)
    return 0 if report.passed else int(ExitCode.FAILED)
