"""What a model outside the catalog gets: the tool-call and reasoning parsers vLLM documents
for its family, and ``--trust-remote-code`` only when its config needs custom code.

Families are recognised from ``config.json`` (``architectures``, ``model_type``) when it is
known, else from the name. Sources: vLLM's "Tool Calling" and "Reasoning Outputs" pages
(docs.vllm.ai/en/latest/features/tool_calling, /reasoning_outputs). A model that matches
no family gets no parser: a wrong parser garbles tool calls, a missing one only disables
them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

TOOL_DOCS = "docs.vllm.ai/en/latest/features/tool_calling"
REASONING_DOCS = "docs.vllm.ai/en/latest/features/reasoning_outputs"


@dataclass(frozen=True)
class Family:
    key: str
    architectures: tuple[str, ...]  # config.json architectures that mean this family
    names: str  # a regex on the model name (when no config is known, or to narrow)
    tool_parser: str | None
    reasoning_parser: str | None = None
    needs_name: bool = False  # the architecture alone is not enough (shared by families)


# Most specific first: the first family whose architecture and name match wins.
FAMILIES: tuple[Family, ...] = (
    Family("gpt_oss", ("GptOssForCausalLM",), r"gpt-oss", "openai"),
    Family("kimi_k2", ("DeepseekV3ForCausalLM",), r"kimi-k2", "kimi_k2", needs_name=True),
    Family(
        "deepseek_r1",
        ("DeepseekV3ForCausalLM",),
        r"deepseek-r1",
        "deepseek_v3",
        "deepseek_r1",
        needs_name=True,
    ),
    Family("deepseek_v3", ("DeepseekV3ForCausalLM",), r"deepseek-v3", "deepseek_v3"),
    Family("llama4", ("Llama4ForConditionalGeneration",), r"llama-4", "llama4_pythonic"),
    Family("qwen3_coder", ("Qwen3MoeForCausalLM",), r"qwen3-coder", "qwen3_coder", needs_name=True),
    Family("qwq", ("Qwen2ForCausalLM",), r"qwq", "hermes", "deepseek_r1", needs_name=True),
    Family("qwen3", ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"), r"qwen3", "hermes", "qwen3"),
    Family("qwen2", ("Qwen2ForCausalLM",), r"qwen2", "hermes"),
    Family(
        "hermes", ("LlamaForCausalLM", "MistralForCausalLM"), r"hermes", "hermes", needs_name=True
    ),
    Family("llama3", ("LlamaForCausalLM",), r"llama-?3", "llama3_json", needs_name=True),
    Family(
        "magistral", ("MistralForCausalLM",), r"magistral", "mistral", "mistral", needs_name=True
    ),
    Family(
        "mistral",
        ("MistralForCausalLM", "MixtralForCausalLM", "Mistral3ForConditionalGeneration"),
        r"mistral|mixtral|ministral",
        "mistral",
    ),
    Family("glm45", ("Glm4MoeForCausalLM",), r"glm-4\.[5-9]", "glm45", "glm45"),
    Family("granite", ("GraniteForCausalLM", "GraniteMoeForCausalLM"), r"granite", "granite"),
    Family("internlm", ("InternLM2ForCausalLM",), r"internlm", "internlm"),
    Family("jamba", ("JambaForCausalLM",), r"jamba", "jamba"),
    Family("minimax", ("MiniMaxM1ForCausalLM",), r"minimax", "minimax"),
    Family("phi4_mini", ("Phi3ForCausalLM",), r"phi-4-mini", "phi4_mini_json", needs_name=True),
)


@cache
def _name_re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def family_of(model_id: str, config: Mapping[str, Any] | None) -> Family | None:
    """The family of ``model_id``: by architecture (and name where families share one),
    else by name alone when the config is not known."""
    name = model_id.rsplit("/", 1)[-1]
    archs = [str(a) for a in (config or {}).get("architectures") or []]
    for family in FAMILIES:
        named = bool(_name_re(family.names).search(name))
        if archs:
            if any(a in family.architectures for a in archs) and (named or not family.needs_name):
                return family
        elif named:
            return family
    return None


@dataclass(frozen=True)
class GenericLaunch:
    """The generic layer of a model outside the catalog, with the reason for each part."""

    args: list[str]
    features: dict[str, list[str]]
    reasons: dict[str, str]


def generic_launch(model_id: str, config: Mapping[str, Any] | None) -> GenericLaunch:
    """Args and features for a model outside the catalog (see the module doc)."""
    args: list[str] = []
    reasons: dict[str, str] = {}
    if config is not None and config.get("auto_map"):
        args.append("--trust-remote-code")
        reasons["--trust-remote-code"] = (
            "its config.json has auto_map: the model's own Python code must run"
        )
    features: dict[str, list[str]] = {}
    family = family_of(model_id, config)
    if family is not None and family.tool_parser:
        features["tool_calling"] = [
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            family.tool_parser,
        ]
        reasons["--tool-call-parser"] = (
            f"the {family.key} family's parser in vLLM's tool-calling docs ({TOOL_DOCS})"
        )
    if family is not None and family.reasoning_parser:
        features["reasoning"] = ["--reasoning-parser", family.reasoning_parser]
        reasons["--reasoning-parser"] = (
            f"the {family.key} family's parser in vLLM's reasoning docs ({REASONING_DOCS})"
        )
    return GenericLaunch(args, features, reasons)
