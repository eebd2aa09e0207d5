"""TEST: a second inference server kind, added as this one module (issue 25's seam test).

``fake`` takes vLLM's command line (it is served by the vLLM test double, ``vllm_double``)
but answers health on ``/livez`` and lists its models on ``/fake/models`` (vLLM's ``/health``
and ``/v1/models`` answer 404 there), and says it is ready with its own line instead of
uvicorn's. It tells the double so through the variables a server kind may add to a launch
(``ServerKind.environment``), and reads its own ready line with its own tracker.

It is registered the way an out-of-tree server would be: an entry point in the group
``instinct_serve.servers`` (``register`` writes the ``.dist-info`` of a tiny distribution
into a directory that goes on ``PYTHONPATH``). Nothing in ``src/`` names it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from instinct_serve.diagnose.phases import PhaseEvent, PhaseTracker
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.servers import GROUP, Routes
from instinct_serve.servers.vllm import VllmServer

NAME = "fake"
READY_LINE = "fake-server: ready to serve on http://{host}:{port}"
_READY = re.compile(r"^fake-server: ready to serve on (\S+)")


class FakeTracker(PhaseTracker):
    """vLLM's start-up reading (the double replays vLLM's loading log), and the fake
    server's own ready line."""

    def feed(self, line: str, now: float | None = None) -> PhaseEvent | None:
        m = _READY.match(line.strip())
        if m is None or self.phase == "failed":
            return super().feed(line, now)
        self.last_line_at = time.monotonic() if now is None else now
        self.phase, self.progress = "ready", None
        self.message = f"fake server ready on {m.group(1)}"
        return self.snapshot()


class FakeServer(VllmServer):
    name = NAME
    title = "fake server"
    routes = Routes(health="/livez", models="/fake/models")

    def environment(self, plan: LaunchPlan) -> dict[str, str]:
        return {
            "VLLM_DOUBLE_HEALTH_PATH": self.routes.health,
            "VLLM_DOUBLE_MODELS_PATH": self.routes.models,
            "VLLM_DOUBLE_READY_LINE": READY_LINE,
        }

    def tracker(self) -> PhaseTracker:
        return FakeTracker()


KIND = FakeServer()


def register(site: Path) -> Path:
    """Write a distribution into ``site`` whose entry point registers ``KIND``; put
    ``site`` on ``PYTHONPATH`` (or ``sys.path``) for the registry to see it."""
    info = site / "instinct_fake_server-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: instinct-fake-server\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[{GROUP}]\n{NAME} = {__name__}:KIND\n", encoding="utf-8"
    )
    return site
