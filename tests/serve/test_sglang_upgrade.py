"""``serve --upgrade --server sglang`` of an endpoint vLLM serves, through the real dockerd
with the two doubles (the vLLM double's test image, the SGLang double's image laid out as
``lmsysorg/sglang``'s): DeepSeek-R1-0528 on 8 MI300X, which AMD runs on SGLang.

The SGLang candidate is proven beside the vLLM endpoint, which answers all the while; the
fingerprint gate compares the two servers' prompt log-probabilities (each asked as its
server gives them: vLLM's ``prompt_logprobs``, SGLang's ``echo`` with ``logprobs``), not
their names; after the switch ``ps`` and the plan record say SGLang, and ``rollback``
brings vLLM back. Then the other way: SGLang to vLLM.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import httpx
import pytest

from instinct_serve import paths
from tests.infra.docker import TestImage
from tests.infra.ports import free_port
from tests.infra.sglang_infra import sglang_test_image
from tests.serve.conftest import Run, Serve, inspect, parse_lines, run_cli

pytestmark = pytest.mark.docker

DSR1 = "deepseek-ai/DeepSeek-R1-0528"  # AMD runs it on SGLang (dsr1-fp8-mi300x-sglang)
EIGHT = ("--gpu-count", "8")


@pytest.fixture
def sglang_image(serve: Serve, vllm_test_image: TestImage) -> str:
    # a start-up long enough that the old endpoint is seen answering while it runs
    return sglang_test_image(vllm_test_image, {"SGLANG_DOUBLE_LOAD_S": "2.0"})


class Poller:
    """Asks the endpoint on ``port`` which server answers (``/v1/models``' ``owned_by``) and
    for a completion, every 0.2 s, in a thread: ``(time, owner or None)`` for each try."""

    def __init__(self, port: int) -> None:
        self.port, self.seen = port, []  # type: list[tuple[float, str | None]]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _ask(self) -> str | None:
        base = f"http://127.0.0.1:{self.port}/v1"
        try:
            models = httpx.get(f"{base}/models", timeout=3).json()
            body = {"model": DSR1, "prompt": "The capital of France is", "max_tokens": 4}
            answer = httpx.post(f"{base}/completions", json=body, timeout=5)
            return str(models["data"][0]["owned_by"]) if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError, IndexError):
            return None

    def _run(self) -> None:
        while not self.stop.is_set():
            self.seen.append((time.time(), self._ask()))
            self.stop.wait(0.2)

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=15)


def _note_ts(run: Run, text: str) -> float:
    return next(float(e["ts"]) for e in run.of("note") if text in e["message"])


def _row(name: str) -> dict[str, Any]:
    ps = run_cli(["ps", "--json"])
    assert ps.returncode == 0, ps.explain()
    rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
    assert name in rows, ps.stdout
    return rows[name]


def _record(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((paths.data_dir() / "plans" / f"{name}.json").read_text())
    return doc


def _owner(port: int) -> str:
    models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
    return str(models["data"][0]["owned_by"])


def _gate(run: Run, name: str) -> str:
    said = [e["message"] for e in run.of("note") if e["message"].startswith("fingerprint of")]
    assert said, run.explain()
    assert f"fingerprint of {name}-next against the running one (now)" in said[0], said
    return said[0]


def test_an_endpoint_served_by_vllm_is_upgraded_to_sglang_and_rolled_back(
    serve: Serve, sglang_image: str
) -> None:
    port, name = free_port(), serve.name("up-sglang")
    serve.names.append(name + "-next")
    vllm_image = serve.double(load_s=0.3)
    first = serve("--server", "vllm", *EIGHT, model=DSR1, image=vllm_image, port=port, name=name)
    assert first.returncode == 0, first.explain()
    assert first.result["endpoint"]["fingerprint"]["ok"] is True
    assert _owner(port) == "vllm" and _row(name)["server"] == "vllm"

    started = time.monotonic()
    with Poller(port) as poller:
        up = serve(
            "--upgrade",
            "--server",
            "sglang",
            *EIGHT,
            model=DSR1,
            image=sglang_image,
            port=port,
            name=name,
        )
    upgrade_s = time.monotonic() - started
    assert up.returncode == 0, up.explain()
    # the candidate, proven beside: vLLM answered every request meanwhile
    beside, gated = _note_ts(up, "starting the new plan beside"), _note_ts(up, "fingerprint of")
    during = [owner for ts, owner in poller.seen if beside <= ts <= gated]
    assert len(during) >= 5 and set(during) == {"vllm"}, during
    # the gate compared the two servers' numbers, and found them the same
    said = _gate(up, name)  # the doubles compute the same scores: nothing moved
    assert ": within tolerance: moved at most 0.000 (segment)" in said, said
    assert said.endswith("0.000 (tail) nats a token (vLLM → SGLang, KV cache auto → fp8_e4m3)")
    assert up.result["endpoint"]["image"] == sglang_image
    assert 0 < up.result["figures"]["downtime_s"] < 30

    info = inspect(name)
    assert info is not None and info["Config"]["Image"] == sglang_image
    assert info["Config"]["Cmd"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert inspect(name + "-next") is None and inspect(name + "-prev") is None
    assert _owner(port) == "sglang"
    row = _row(name)
    assert row["server"] == "sglang" and row["health"] == "healthy" and row["port"] == port
    table = run_cli(["ps"], env={**os.environ, "COLUMNS": "200"})
    line = next(li for li in table.stdout.splitlines() if li.startswith(name))
    assert "docker sglang" in line and DSR1 in line, table.stdout
    record = _record(name)
    assert record["current"]["server"] == "sglang", record
    assert record["last_good"].get("server", "vllm") == "vllm", record

    started = time.monotonic()
    back = run_cli(["rollback", "--yes", name, "--root", str(serve.root), "--json"], timeout=120)
    rollback_s = time.monotonic() - started
    assert back.returncode == 0, back.explain()
    rolled = parse_lines(back.stdout)[-1]
    assert rolled["status"] == "ready" and rolled["endpoint"]["image"] == vllm_image
    assert _owner(port) == "vllm" and _row(name)["server"] == "vllm"
    assert _record(name)["current"].get("server", "vllm") == "vllm"
    print(f"\nvLLM -> SGLang upgrade {upgrade_s:.1f} s, rollback {rollback_s:.1f} s")


def test_an_endpoint_served_by_sglang_is_upgraded_to_vllm(serve: Serve, sglang_image: str) -> None:
    port, name = free_port(), serve.name("up-vllm")
    serve.names.append(name + "-next")
    served = ("--server", "sglang", *EIGHT)
    first = serve(*served, model=DSR1, image=sglang_image, port=port, name=name)
    assert first.returncode == 0, first.explain()
    vllm_image = serve.double(load_s=0.3)
    up = serve(
        "--upgrade", "--server", "vllm", *EIGHT, model=DSR1, image=vllm_image, port=port, name=name
    )
    assert up.returncode == 0, up.explain()
    said = _gate(up, name)
    assert ": within tolerance: moved at most 0.000 (segment)" in said, said
    assert said.endswith("0.000 (tail) nats a token (SGLang → vLLM, KV cache fp8_e4m3 → auto)")
    assert _owner(port) == "vllm" and _row(name)["server"] == "vllm"
    assert _record(name)["current"].get("server", "vllm") == "vllm"


def test_an_sglang_candidate_that_computes_something_else_keeps_vllm_serving(
    serve: Serve, vllm_test_image: TestImage
) -> None:
    # the SGLang double's scores moved by 2 nats a token from the start (the vLLM double's
    # drift, which the SGLang double shares), with no fallback that clears it
    drifted = sglang_test_image(
        vllm_test_image,
        {
            "SGLANG_DOUBLE_LOAD_S": "0.5",
            "VLLM_DOUBLE_DRIFT_AFTER_S": "0",
            "VLLM_DOUBLE_FAULT_FIX": "none",
        },
    )
    port, name = free_port(), serve.name("up-sglang-drift")
    serve.names.append(name + "-next")
    vllm_image = serve.double(load_s=0.3)
    first = serve("--server", "vllm", *EIGHT, model=DSR1, image=vllm_image, port=port, name=name)
    assert first.returncode == 0, first.explain()
    before = inspect(name)
    assert before is not None

    up = serve(
        "--upgrade", "--server", "sglang", *EIGHT, model=DSR1, image=drifted, port=port, name=name
    )
    assert up.returncode == 1, up.explain()
    failure = up.result["failure"]
    assert failure["id"] == "wrong_output", failure
    assert "something else than the running endpoint: drift" in failure["title"]
    assert "(vLLM → SGLang, KV cache auto → fp8_e4m3)" in failure["cause"], failure
    assert "(SGLANG_USE_AITER=0 or --disable-cuda-graph)" in failure["fix"], failure  # SGLang's
    after = inspect(name)
    assert after is not None and after["Id"] == before["Id"] and after["State"]["Running"]
    assert _owner(port) == "vllm" and _row(name)["server"] == "vllm"
    assert _record(name)["current"].get("server", "vllm") == "vllm"
