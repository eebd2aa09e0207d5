"""A diagnose retry hint applied to a launch plan: the relaunch serve does by itself.

Pure: the plan is copied, never changed; argv edits go through ``vllm_args``.
"""

from __future__ import annotations

import copy

from instinct_serve import vllm_args
from instinct_serve.diagnose import RetryHint
from instinct_serve.plan.model import LaunchPlan


def apply_retry(plan: LaunchPlan, hint: RetryHint) -> tuple[LaunchPlan, list[str]]:
    """A copy of ``plan`` with a diagnose retry hint applied, and what changed (words).

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
    options: list[tuple[str, str]] = []
    if "max_model_len" in hint:
        options.append(("--max-model-len", str(hint["max_model_len"])))
        new.max_model_len = int(hint["max_model_len"])
    if "gpu_memory_utilization" in hint:
        options.append(("--gpu-memory-utilization", f"{hint['gpu_memory_utilization']:g}"))
    if "max_num_seqs" in hint:
        options.append(("--max-num-seqs", str(hint["max_num_seqs"])))
    if "tensor_parallel_size" in hint:
        options.append(("--tensor-parallel-size", str(hint["tensor_parallel_size"])))
        new.tensor_parallel_size = int(hint["tensor_parallel_size"])
    for flag, text in options:
        if vllm_args.value(new.vllm_args, flag) != text:
            new.vllm_args = vllm_args.set_flag(new.vllm_args, flag, text)
            changes.append(f"{flag} {text}")
    return new, changes
