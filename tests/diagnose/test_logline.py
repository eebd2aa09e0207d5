"""The prefixes ``split_message`` takes off a log line, and the ones it must leave."""

from __future__ import annotations

import pytest

from instinct_serve.diagnose.logline import split_message

HEADER = "ERROR 05-05 15:15:08 [core.py:708] "


@pytest.mark.parametrize(
    ("line", "message", "level"),
    [
        # a wrapper echoing vLLM's stdout under its own label (Unsloth's SyntheticDataKit)
        (
            "vLLM STDOUT: " + HEADER + "EngineCore failed to start.",
            "EngineCore failed to start.",
            "ERROR",
        ),
        ("vLLM STDOUT: INFO 05-05 15:15:08 [api_server.py:981] up", "up", "INFO"),
        # nested under compose and the engine core's process tag
        ("vllm-1  | vLLM STDOUT: (EngineCore_DP0 pid=7) " + HEADER + "boom", "boom", "ERROR"),
        # an exception line is no label: without a full vLLM header after it nothing is cut
        ("ValueError: INFO 05-05 15:15:08 x", "ValueError: INFO 05-05 15:15:08 x", None),
        ("RuntimeError: CUDA out of memory", "RuntimeError: CUDA out of memory", None),
    ],
)
def test_prefixes(line: str, message: str, level: str | None) -> None:
    assert split_message(line) == (message, level)
