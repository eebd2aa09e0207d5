"""``serve --upgrade --server sglang`` of an endpoint the REAL vLLM serves, to the REAL SGLang,
both through docker (the real-vLLM tier's image, ``tests/infra/realvllm.py``; the real SGLang
image, ``tests/infra/realsglang.py``), SmolLM2-135M-Instruct by its Hub id from the tier's
mounted cache, offline, both bounded to a 1,024-token context.

The SGLang candidate is proven beside the running vLLM endpoint (which keeps answering); the
upgrade's fingerprint gate compares the two servers' prompt log-probabilities (vLLM's
``prompt_logprobs``, SGLang's ``echo`` with ``logprobs``) and prints how far they moved: the
figure this test reports. AMD publishes no SGLang config for the model: SGLang is planned
with its own defaults on the image given with ``--image`` (``plan.sglang._defaults``).

Measured on 2 cores (2026-12-05): the two real servers' fingerprints moved at most 0.174
(segment) / 0.116 (tail) nats a token, within the CPU tolerance of 0.5 and of the size of
vLLM's own eager-vs-compiled move (0.143 / 0.132); vLLM served in 42 s, the upgrade took
102 s (down 43 s: SGLang's warm start), the rollback 91 s; the test 238 s.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest

from tests.infra import realvllm
from tests.infra.docker import DockerDaemon
from tests.infra.ports import free_port
from tests.infra.realsglang import (
    DOCKER_CPU_ENV,
    DOCKER_CPU_TAIL,
    SERVED,
    Setup,
    build_image,
    required,
)
from tests.realvllm.conftest import docker_serve_args, tier_env
from tests.serve.conftest import docker, inspect, parse_lines, run_cli

pytestmark = [pytest.mark.realsglang, pytest.mark.docker]

CLI_TIMEOUT_S = 600.0  # the candidate's start and proof, the switch's start and proof
CONTEXT = "1024"  # both servers: bounds the fingerprint's long probe (and its time)
MOVED = re.compile(r"moved at most ([\d.]+) \(segment\) / ([\d.]+) \(tail\)")


def _owner(port: int) -> str:
    doc = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10, trust_env=False).json()
    return str(doc["data"][0]["owned_by"])


def test_a_real_vllm_endpoint_upgraded_to_the_real_sglang_and_rolled_back(
    real_sglang_setup: Setup, docker_daemon: DockerDaemon, tmp_path: Path
) -> None:
    from tests.infra.fakeroot import build_gpu_root

    vllm = realvllm.load_setup()
    reason = realvllm.why_unavailable(vllm)
    if reason is not None or vllm is None:
        if required():
            pytest.fail(f"the upgrade needs the real vLLM too: {reason}")
        pytest.skip(f"the upgrade needs the real vLLM too: {reason}")
    vllm_image = realvllm.build_image(vllm)[0]
    sglang_image = build_image(real_sglang_setup)[0]
    root = tmp_path / "gpu-root"
    root.mkdir()
    build_gpu_root(root)
    env = tier_env(vllm, tmp_path)
    port, name = free_port(), f"rs-up-{free_port()}"
    try:
        start = time.monotonic()
        first = run_cli(
            docker_serve_args(
                vllm,
                vllm_image,
                SERVED,
                port=port,
                name=name,
                root=root,
                extra=("--server", "vllm"),
                vllm_args=("--max-model-len", CONTEXT, "--enforce-eager"),
            ),
            env=env,
            timeout=CLI_TIMEOUT_S,
        )
        vllm_s = time.monotonic() - start
        assert first.returncode == 0, first.explain()
        assert _owner(port) == "vllm"

        args = ["serve", SERVED, "--upgrade", "--server", "sglang", "--image", sglang_image]
        args += ["--port", str(port), "--name", name, "--timeout", "300", "--yes"]
        args += ["--gpu", "mi300x", "--root", str(root), "--hf-cache", str(vllm.hf_home)]
        args += [*DOCKER_CPU_ENV, "--max-model-len", CONTEXT, "--json", *DOCKER_CPU_TAIL]
        start = time.monotonic()
        up = run_cli(args, env=env, timeout=CLI_TIMEOUT_S)
        upgrade_s = time.monotonic() - start
        gate = [e["message"] for e in up.of("note") if e["message"].startswith("fingerprint of")]
        print(f"\nreal vLLM -> real SGLang gate: {gate}")
        assert up.returncode == 0, up.explain()
        assert gate and "against the running one (now)" in gate[0], gate
        assert "(vLLM → SGLang)" in gate[0] and "within tolerance" in gate[0], gate
        moved = MOVED.search(gate[0])
        assert moved is not None, gate
        info = inspect(name)
        assert info is not None and info["Config"]["Image"] == sglang_image
        assert _owner(port) == "sglang"
        ps = run_cli(["ps", "--json"], env=env)
        rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
        assert rows[name]["server"] == "sglang" and rows[name]["health"] == "healthy"

        start = time.monotonic()
        back = run_cli(
            ["rollback", "--yes", name, "--root", str(root), "--json"],
            env=env,
            timeout=CLI_TIMEOUT_S,
        )
        rollback_s = time.monotonic() - start
        assert back.returncode == 0, back.explain()
        assert parse_lines(back.stdout)[-1]["status"] == "ready"
        assert _owner(port) == "vllm"
        print(
            f"real vLLM served in {vllm_s:.1f} s; upgrade to the real SGLang {upgrade_s:.1f} s "
            f"(down {up.result['figures']['downtime_s']} s); fingerprints moved at most "
            f"{moved.group(1)} (segment) / {moved.group(2)} (tail) nats a token; rollback "
            f"{rollback_s:.1f} s"
        )
    finally:
        for left in (name, name + "-next", name + "-prev"):
            docker("rm", "-f", left, timeout=120)
