"""The ``realsglang`` tier: the tool against a REAL SGLang (sglang 0.5.23 on a CPU torch,
SmolLM2-135M; ``tests/infra/realsglang.py``).

Set up once with ``bash tests/infra/setup_real_sglang.sh`` (cached); run with
``.venv/bin/pytest -m realsglang tests/realsglang -n 0``. Without the setup the tier's tests
skip with the reason; with ``INSTINCT_TEST_REQUIRE`` containing ``realsglang`` (CI) they fail
instead. The fast tests in this directory (the captured logs) run in the default suite.
SGLang's own CPU kernels are not exercised (the setup's ``sgl_kernel`` placeholder raises on
any call; a Llama on a CPU without AMX takes torch's path).
"""

from __future__ import annotations

import pytest

from tests.infra.realsglang import Setup, load_setup, required, why_unavailable


@pytest.fixture(scope="session")
def real_sglang_setup() -> Setup:
    """The set-up real SGLang, or skip (fail under ``INSTINCT_TEST_REQUIRE=...realsglang``)."""
    setup = load_setup()
    reason = why_unavailable(setup)
    if reason is not None or setup is None:
        message = reason or "no setup"
        if required():
            pytest.fail(f"{message} (INSTINCT_TEST_REQUIRE contains 'realsglang')")
        pytest.skip(message)
    return setup
