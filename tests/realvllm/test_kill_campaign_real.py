"""The kill campaign of ``tests/serve/test_kill_campaign.py`` once against the REAL vLLM
image (issue 26): ``instinct serve --upgrade`` through docker, SIGKILLed at each of its
events in turn, the next command settling what the kill left; the endpoint that answered
before must answer again (or be restorable by one command), with no orphan container or
record. The two plans differ by ``--max-model-len`` (2048 and 1024, eager: the image has no
C++ compiler).

Marked ``slow``: each kill late in the change costs a real start (about a minute on 2
cores), the campaign about half an hour; run it with
``INSTINCT_TEST_REQUIRE=realvllm .venv/bin/pytest -m "realvllm and slow" -s
tests/realvllm/test_kill_campaign_real.py``. Its figures go in the closing note.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.infra.ports import free_port
from tests.infra.realvllm import Setup
from tests.realvllm.conftest import cli, docker_serve_args, tier_env
from tests.serve.conftest import docker, inspect
from tests.serve.test_kill_campaign import _single_check, campaign

pytestmark = [pytest.mark.realvllm, pytest.mark.slow, pytest.mark.docker]

PLANS = (
    ("--max-model-len", "2048", "--enforce-eager"),
    ("--max-model-len", "1024", "--enforce-eager"),
)
RUN_S = 900.0  # one upgrade: a real start beside the old one, warm-up and proof


def test_kill_a_real_upgrade_at_every_step(
    real_vllm: Setup,
    real_image: str,
    gpu_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in tier_env(real_vllm, tmp_path).items():
        monkeypatch.setenv(key, value)
    port = free_port()
    name = f"rv-kill-{port}"

    def argv(*extra: str, plan: int) -> list[str]:
        return docker_serve_args(
            real_vllm,
            real_image,
            port=port,
            name=name,
            root=gpu_root,
            extra=extra,
            vllm_args=PLANS[plan],
            timeout_s=600,
        )

    def other() -> int:
        info = inspect(name)
        assert info is not None
        return 1 if "2048" in info["Config"]["Cmd"] else 0

    first = cli(argv(plan=0), dict(os.environ), timeout=RUN_S)
    assert first.returncode == 0, first.explain()
    try:
        result = campaign(
            "upgrade (real vLLM)",
            lambda: argv("--upgrade", plan=other()),
            _single_check(name, port),
            run_s=RUN_S,
            answer_s=300.0,
        )
        assert result.kills > 3
    finally:
        for suffix in ("", "-next", "-prev"):
            docker("rm", "-f", name + suffix, timeout=120)
