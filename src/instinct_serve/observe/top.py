"""The ``instinct top`` document: every endpoint's reading, the GPUs, tokens per watt.

One document per refresh (``--json``: one object with ``--once``, JSON Lines when
streaming); the MCP tool ``metrics`` returns the same. Power is attributed to an endpoint
when its GPUs are known (the plan's ``HIP_VISIBLE_DEVICES``), else only the host total is
given, with the generation throughput of every endpoint over the power of every GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from instinct_serve.observe.gpu import GpuSample, tokens_per_watt, total_power
from instinct_serve.observe.vllm import Reading


@dataclass
class EndpointView:
    """One endpoint in ``top``: who it is, and its reading or why there is none."""

    name: str
    engine: str
    model: str | None
    port: int | None
    plan_hash: str | None = None
    gpu_indices: list[int] | None = None
    reading: Reading | None = None
    error: str | None = None
    fingerprint: dict[str, Any] | None = None  # when its fingerprint last passed (watch)

    @property
    def generation_tokens_per_s(self) -> float | None:
        if self.reading is None:
            return None
        value = self.reading.rates.get("generation_tokens")
        return None if value is None else float(value)

    def to_dict(self, gpus: list[GpuSample] | None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "engine": self.engine,
            "model": self.model,
            "port": self.port,
            "plan_hash": self.plan_hash,
            "gpu_indices": self.gpu_indices,
            "status": "ok" if self.reading is not None else "unreachable",
            "error": self.error,
            "fingerprint": self.fingerprint,
        }
        if self.reading is not None and not self.reading.now.is_vllm:
            doc["status"] = "not_vllm"
            doc["error"] = f"/metrics answered without any {self.reading.now.prefix}* metric"
        doc["metrics"] = None if self.reading is None else self.reading.to_dict()
        power = None
        if gpus and self.gpu_indices is not None:
            power = total_power(gpus, self.gpu_indices)
        doc["power_w"] = None if power is None else round(power, 1)
        tpw = tokens_per_watt(self.generation_tokens_per_s, power)
        doc["tokens_per_watt"] = None if tpw is None else round(tpw, 4)
        return doc


@dataclass
class TopDocument:
    """Everything one refresh of ``top`` saw on a host."""

    host: str
    endpoints: list[EndpointView]
    gpus: list[GpuSample] | None
    gpu_problem: str | None = None
    at: str | None = None  # ISO time of the scrape
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(e.reading is not None and e.reading.now.is_vllm for e in self.endpoints)

    def to_dict(self) -> dict[str, Any]:
        gpus = self.gpus or []
        host_power = total_power(gpus) if gpus else None
        rates = [e.generation_tokens_per_s for e in self.endpoints]
        known = [r for r in rates if r is not None]
        generation = sum(known) if known else None
        tpw = tokens_per_watt(generation, host_power)
        return {
            "host": self.host,
            "at": self.at,
            "endpoints": [e.to_dict(self.gpus) for e in self.endpoints],
            "gpus": [g.to_dict() for g in gpus],
            "gpu_problem": self.gpu_problem,
            "totals": {
                "generation_tokens_per_s": None if generation is None else round(generation, 2),
                "power_w": None if host_power is None else round(host_power, 1),
                "tokens_per_watt": None if tpw is None else round(tpw, 4),
            },
            "notes": list(self.notes),
        }
