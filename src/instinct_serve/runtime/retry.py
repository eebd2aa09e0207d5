"""A diagnose retry hint applied to a launch plan: the relaunch serve does by itself.

Pure: the plan is copied, never changed; argv edits go through ``vllm_args``.
"""

from __future__ import annotations

import copy

from instinct_serve import servers, vllm_args
from instinct_serve.diagnose import RetryHint
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.plan.sglang import OPTION_FLAGS

# A hint's options in each planner vocabulary's words (``ServerKind.vocabulary``): vLLM's
# flags, and SGLang's (``plan.sglang.OPTION_FLAGS``; its TP flag is vLLM's, and
# ``--max-running-requests`` caps its batch as ``--max-num-seqs`` does vLLM's).
_FLAGS = {
    "vllm": {
        "max_model_len": "--max-model-len",
        "gpu_memory_utilization": "--gpu-memory-utilization",
        "max_num_seqs": "--max-num-seqs",
        "tensor_parallel_size": "--tensor-parallel-size",
    },
    "sglang": {
        **OPTION_FLAGS,
        "max_num_seqs": "--max-running-requests",
        "tensor_parallel_size": "--tensor-parallel-size",
    },
}


def apply_retry(plan: LaunchPlan, hint: RetryHint) -> tuple[LaunchPlan, list[str]]:
    """A copy of ``plan`` with a diagnose retry hint applied, and what changed (words), its
    options in the words of the plan's server (``--context-length`` for SGLang's).

    Flags already present are not duplicated; an option with a value is replaced.
    Pure: the original plan is untouched. No change at all means the hint cannot help.
    """
    new = copy.deepcopy(plan)
    changes: list[str] = []
    for unit in vllm_args.units(hint.get("add_args", [])):
        if unit.name is None:
            continue  # a hint names options, never positional arguments
        flag, wanted = unit.name, unit.value or None
        current = vllm_args.value(new.vllm_args, flag)  # "" for a bare flag, None if absent
        if current is not None and (current or None) == wanted:
            continue
        new.vllm_args = vllm_args.set_flag(new.vllm_args, flag, wanted)
        changes.append(flag if wanted is None else f"{flag} {wanted}")
    for key, env_value in hint.get("set_env", {}).items():
        if new.env.get(key) != env_value:
            new.env[key] = env_value
            changes.append(f"{key}={env_value}")
    flags = _FLAGS.get(servers.of(plan).vocabulary, _FLAGS["vllm"])
    options: list[tuple[str, str]] = []
    if "max_model_len" in hint:
        options.append((flags["max_model_len"], str(hint["max_model_len"])))
        new.max_model_len = int(hint["max_model_len"])
    if "gpu_memory_utilization" in hint:
        options.append((flags["gpu_memory_utilization"], f"{hint['gpu_memory_utilization']:g}"))
    if "max_num_seqs" in hint:
        options.append((flags["max_num_seqs"], str(hint["max_num_seqs"])))
    if "tensor_parallel_size" in hint:
        options.append((flags["tensor_parallel_size"], str(hint["tensor_parallel_size"])))
        new.tensor_parallel_size = int(hint["tensor_parallel_size"])
    for flag, text in options:
        if vllm_args.value(new.vllm_args, flag) != text:
            new.vllm_args = vllm_args.set_flag(new.vllm_args, flag, text)
            changes.append(f"{flag} {text}")
    return new, changes
