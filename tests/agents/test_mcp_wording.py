"""An MCP caller is told tools and arguments, not CLI commands and flags (issue 30).

The runtime's fixes are written for a terminal; ``agents.wording`` rewrites every MCP
answer's prose with the server's own vocabulary (``server.VOCABULARY``: the tools' ``cli``
column and their inputs). Data (a rendered launch, a log line) is left as it is."""

from __future__ import annotations

from instinct_serve.agents.server import VOCABULARY
from instinct_serve.agents.wording import for_agent, words


def test_commands_become_tools_and_flags_become_arguments() -> None:
    timed_out = (  # runtime.proof.timed_out's fix, over ssh
        "it is still running: follow it with `instinct logs -f vllm-qwen --host me@gpu1`, "
        "wait longer next time with --timeout, or stop it with `instinct stop vllm-qwen`"
    )
    assert words(timed_out, VOCABULARY) == (
        "it is still running: follow it with the `logs` tool (name=vllm-qwen, host=me@gpu1), "
        "wait longer next time with `timeout_s`, or stop it with the `stop` tool "
        "(names=vllm-qwen)"
    )
    recover = "`instinct ps`, `instinct logs vllm-qwen`; serve it again with --replace"
    assert words(recover, VOCABULARY) == (
        "the `status` tool, the `logs` tool (name=vllm-qwen); serve it again with `replace`"
    )
    assert words("instinct diagnose --container vllm-qwen", VOCABULARY) == (
        "the `diagnose` tool (container=vllm-qwen)"
    )
    # a command no tool covers is the user's to run, and says so
    assert "for the user to run" in words("run `instinct watch vllm-qwen`", VOCABULARY)
    # vLLM's own flags in a diagnosis stay vLLM's (they go in extra_args)
    assert words("relaunch with --enforce-eager", VOCABULARY) == "relaunch with --enforce-eager"


def test_only_prose_is_rewritten() -> None:
    doc = {
        "notes": ["follow it with `instinct logs -f x`"],
        "error": {"fix": "use --port 8001", "message": "--port 8000 is taken"},
        "rendered": {"text": "docker run --port 8000 x"},
        "lines": ["instinct logs x"],
    }
    out = for_agent(doc, VOCABULARY)
    assert out["notes"] == ["follow it with the `logs` tool (name=x)"]
    assert out["error"]["fix"] == "use `port` 8001"
    assert out["error"]["message"] == doc["error"]["message"]
    assert out["rendered"] == doc["rendered"] and out["lines"] == doc["lines"]
