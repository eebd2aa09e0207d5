"""``watch`` of an endpoint SGLang serves, through the real dockerd with the SGLang double
(DeepSeek-R1-0528 on 8 MI300X, AMD's SGLang config): a server whose numbers drift while
serving is caught by the canary (the fingerprint asked as SGLang gives it) and relaunched
once with SGLang's own AITER switch (``SGLANG_USE_AITER=0``, not vLLM's), then proven."""

from __future__ import annotations

import time

import pytest

from tests.infra.docker import TestImage
from tests.infra.sglang_infra import sglang_test_image
from tests.serve.conftest import Serve, inspect, parse_lines, run_cli

pytestmark = pytest.mark.docker

DSR1 = "deepseek-ai/DeepSeek-R1-0528"


def test_watch_catches_sglang_drifting_in_service_and_relaunches_with_its_aiter_switch(
    serve: Serve, vllm_test_image: TestImage
) -> None:
    # the double's scores move by 2 nats a token 4 s after it turned healthy, until
    # SGLANG_USE_AITER=0 (the double's VLLM_DOUBLE_FAULT_FIX=aiter, as SGLang's switch)
    image = sglang_test_image(
        vllm_test_image, {"SGLANG_DOUBLE_LOAD_S": "0.5", "VLLM_DOUBLE_DRIFT_AFTER_S": "4"}
    )
    name = serve.name("sgw")
    run = serve("--server", "sglang", "--gpu-count", "8", model=DSR1, image=image, name=name)
    assert run.returncode == 0, run.explain()
    first = inspect(name)
    assert first is not None and "SGLANG_USE_AITER=1" in first["Config"]["Env"]
    time.sleep(4.2)
    bounded = ["--interval", "0.3", "--canary", "1", "--for", "12", "--timeout", "60"]
    started = time.monotonic()
    watch = run_cli(["watch", name, *bounded, "--root", str(serve.root), "--json"], timeout=150)
    assert watch.returncode == 0, watch.explain()
    events = parse_lines(watch.stdout)
    kinds = [e["kind"] for e in events]
    failed = next(e for e in events if e["kind"] == "canary_failed")
    assert failed["failure"] == "drift"
    relaunched = next(e for e in events if e["kind"] == "relaunched")
    assert relaunched["fixes"] == ["wrong_output"] and relaunched["status"] == "ready"
    assert "canary_passed" in kinds[kinds.index("recovered") :], kinds
    info = inspect(name)
    assert info is not None and info["Id"] != first["Id"]
    env = info["Config"]["Env"]
    assert "SGLANG_USE_AITER=0" in env and not any(e.startswith("VLLM_ROCM") for e in env), env
    assert info["Config"]["Cmd"][:3] == ["python3", "-m", "sglang.launch_server"]
    print(f"\nwatch on SGLang: drift caught and relaunched in {time.monotonic() - started:.1f} s")
