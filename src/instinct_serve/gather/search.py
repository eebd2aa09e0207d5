"""The GPUs ``recipes search`` ranks for: ``--gpu`` (with ``--gpu-count``), else what
``detect`` finds on the host, else none (a search still answers, without a fit column)."""

from __future__ import annotations

from instinct_serve.catalog.search import SearchTarget
from instinct_serve.errors import NotReadyError


def search_target(
    gpu: str | None, gpu_count: str | None, host_spec: str | None
) -> SearchTarget | None:
    from instinct_serve.gather.detect import resolve_on
    from instinct_serve.hardware.target import catalog_key
    from instinct_serve.hosts import resolve_host
    from instinct_serve.options import TargetOptions

    opts = TargetOptions.parse({"gpu": gpu, "gpu_count": gpu_count})
    try:
        target = resolve_on(opts, lambda: resolve_host(host_spec))
    except NotReadyError:  # no GPU here and none named: rank by the words alone
        return None
    inv = target.inventory
    key = catalog_key(inv)
    first = inv.gpus[0] if inv.gpus else None
    label = f"{inv.gpu_count}x {(first.market_name or first.name) if first else 'GPU'}"
    return SearchTarget(
        hardware_id=key if not key.startswith("gfx") else None,
        vram_bytes=inv.vram_bytes or 0,
        gpu_count=inv.gpu_count,
        label=label,
    )
