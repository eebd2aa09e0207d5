"""The table a user approves before launch (``plan``, ``serve`` and the MCP summary)."""

from __future__ import annotations

from instinct_serve import servers
from instinct_serve.hardware.target import CPU_SOURCE
from instinct_serve.plan.cpu import KV_WHY
from instinct_serve.plan.model import LOOPBACK, LaunchPlan, PlanResult


def summary_rows(result: PlanResult) -> list[tuple[str, str]]:
    """The table a user approves before launch (also used by ``serve``)."""
    plan = result.plan
    fit = plan.fit
    rows = [
        (
            "Model",
            plan.model
            + (f"  (asked: {plan.requested_model})" if plan.requested_model != plan.model else ""),
        )
    ]
    rows.append(("Match", f"{plan.match_kind}: {plan.match_explanation}"))
    variant_reason = next((r.why for r in plan.reasons if r.item == "variant"), "")
    rows.append(("Precision", f"{plan.precision or 'as stored'} - {variant_reason}"))
    server = next((r.why for r in plan.reasons if r.item == "server"), None)
    if server:  # chosen by --server, or by AMD's reference configs (plan.sglang)
        rows.append(("Server", f"{servers.of(plan).title} - {server}"))
    if plan.weight_memory_gb is not None:
        per_gpu = fit.weight_memory_per_gpu_gib if fit is not None else None
        rows.append(
            (
                "Weights",
                f"{plan.weight_memory_gb:.1f} GB"
                + (f" ({per_gpu:.1f} GiB per GPU)" if per_gpu is not None else ""),
            )
        )
    vram = (
        f"{plan.vram_gb_per_gpu * 1e9 / 2**30:.0f} GiB = {plan.vram_gb_per_gpu:.0f} GB"
        if plan.vram_gb_per_gpu
        else "unknown VRAM"
    )
    if result.hardware_source == CPU_SOURCE:  # a CPU-only engine (plan.cpu)
        ram = f", {vram} of RAM" if plan.vram_gb_per_gpu else ""
        rows.append(("Device", f"CPU (vLLM's CPU backend: a CPU-only engine{ram})"))
        kv = next((r for r in plan.reasons if r.why.startswith(KV_WHY)), None)
        if kv is not None:
            rows.append(("KV cache", f"{kv.item}: {kv.why.removeprefix(KV_WHY)}"))
    else:
        rows.append(
            (
                "GPUs",
                f"{plan.gpu_count}x {plan.gpu_name or 'GPU'} ({plan.gfx_version}, "
                f"{vram} each; {result.hardware_source})",
            )
        )
    rows.append(("Tensor parallel", str(plan.tensor_parallel_size)))
    group = plan.group
    if group is not None and group.mode == "replicas":
        gpus = "; ".join(f"{m.name}: GPU {','.join(map(str, m.gpus))}" for m in group.members)
        rows.append(("Replicas", f"{group.count} x TP {group.tp} behind HAProxy ({gpus})"))
    elif group is not None:
        rows.append(("Replicas", f"vLLM data parallelism: {group.count} ranks x TP {group.tp}"))
    else:
        hint = next((r.why for r in plan.reasons if r.item == "replicas"), None)
        if hint:
            rows.append(("Replicas", hint))
    part = plan.partitions
    if part is not None and part.get("partitioned"):
        rows.append(("Partitions", str(part.get("note", ""))))
    if plan.max_model_len:
        ctx = f"{plan.max_model_len:,} tokens"
        if plan.context_limited:
            ctx += f" (limited by KV room; model max {plan.native_max_model_len:,})"
    elif plan.native_max_model_len:
        ctx = f"{plan.native_max_model_len:,} tokens (the model's full context)"
    else:
        ctx = "the model's default"
    rows.append(("Max context", ctx))
    rows += _fit_rows(plan)
    access = "every interface, API key required" if plan.public else "this host only"
    rows.append(("Port", f"{plan.port}  (http://{LOOPBACK}:{plan.port}/v1 on the host; {access})"))
    if plan.launcher == "docker":
        rows.append(("Image", plan.image))
        rows.append(("Container", plan.container_name))
    else:  # a process on the host: no image, no container
        rows.append(("Name", plan.container_name))
    return rows


def _fit_rows(plan: LaunchPlan) -> list[tuple[str, str]]:
    """The fit's verdict, and for an SGLang plan the KV pool SGLang itself will allocate
    (``fit.sglang``'s figures)."""
    fit = plan.fit
    rows = []
    if plan.verdict:
        rows.append(("Fit", f"{plan.verdict}: {fit.verdict_reason if fit else ''}"))
    pool = fit.sglang if fit is not None else None
    if pool:
        rows.append(
            (
                "KV pool",
                f"{pool['max_total_num_tokens']:,} tokens ({pool['kv_pool_gib']:.1f} GiB per GPU) "
                f"at --mem-fraction-static {pool['mem_fraction_static']:g}, as SGLang sizes it",
            )
        )
    return rows
