"""The seam between fit's sizing and a server's own memory model: what ``fit`` answers for a
launch of one server.

``fit.estimate`` sizes what every server loads alike: the weights per rank (one weight model
for all servers) and the KV layers, at each TP; its ``FitReport`` is vLLM's answer. A server
that sizes its memory its own way (SGLang: a static fraction and a token pool,
``fit.sglang_answer``) turns that report into its own answer: its verdict, TP, context and KV
tokens. Each ``servers.kind.ServerKind`` names its model as ``memory_model``, called with the
report (or the estimate made without metadata, ``fit.estimated``) and the ``ServerLaunch``;
``gather.fit`` calls it once, whatever the server.

Pure: data in, data out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from instinct_serve.fit.estimate import FitReport
    from instinct_serve.fit.estimated import EstimatedFit

__all__ = ["ServerFit", "ServerLaunch", "as_reported"]


@dataclass(frozen=True)
class ServerLaunch:
    """The launch fit answers for, as the server is told it.

    ``args``: a plan's argv in the server's own words (AMD's reference config, your options
    and your ``-- ARGS``); empty when no plan was made. The rest are your options as given
    to ``fit`` (None: not given), which a server's model reads where ``args`` says nothing."""

    args: tuple[str, ...] = ()
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None


class ServerFit(Protocol):
    """A server's fit answer: what ``FitAnswer`` asks of it (``FitReport`` is one)."""

    @property
    def verdict(self) -> str: ...

    @property
    def min_tp_required(self) -> int | None: ...

    @property
    def fits(self) -> bool: ...

    def to_dict(self) -> dict[str, Any]: ...


def as_reported(base: FitReport | EstimatedFit, launch: ServerLaunch) -> FitReport | EstimatedFit:
    """vLLM's memory model: fit's report (or its estimate without metadata) is vLLM's answer;
    the launch is already in it."""
    return base
