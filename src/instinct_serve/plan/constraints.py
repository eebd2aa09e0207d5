"""Which tensor-parallel sizes a model can start with: kernel and sharding constraints as
data, each with the source that states it. Pure: the shapes come from the model's config.

A TP that breaks one of these makes vLLM refuse to start (an assertion at load or at the
first forward), so the planner leaves it out, and says why, before anything is launched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from packaging.version import InvalidVersion, Version

from instinct_serve.hardware.partitions import splits_a_gpu


class Shape(NamedTuple):
    """The dimensions that TP shards, read from the model's config."""

    num_attention_heads: int
    num_kv_heads: int
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    fp8_block_n: int | None = None  # block-quantized FP8: the output block of a weight
    uses_mla: bool = False

    @classmethod
    def of(cls, config: Any) -> Shape | None:
        """From a ``fit.config.ModelConfig`` (None when the config lacks the head counts)."""
        try:
            heads = int(config.num_attention_heads)
            kv = int(config.num_kv_heads)
        except Exception:  # a config without attention heads (odd or partial): no constraint
            return None
        block = None
        quant = config.quantization_config if hasattr(config, "quantization_config") else {}
        raw = quant.get("weight_block_size") if isinstance(quant, dict) else None
        if quant.get("quant_method") == "fp8" and isinstance(raw, list) and len(raw) == 2:
            block = int(raw[0])
        return cls(
            num_attention_heads=heads,
            num_kv_heads=kv,
            intermediate_size=config.intermediate_size,
            moe_intermediate_size=config.moe_intermediate_size,
            fp8_block_n=block,
            uses_mla=bool(config.uses_mla),
        )


class Situation(NamedTuple):
    """What else decides whether a constraint applies: the environment and vLLM release."""

    env: dict[str, str]
    vllm_version: str | None = None
    partitions_per_gpu: int = 1  # logical GPUs per physical GPU (8 for an MI300X in CPX)

    def aiter(self, switch: str) -> bool:
        """AITER is on (``VLLM_ROCM_USE_AITER=1``) and this kernel switch is not off."""
        on = self.env.get("VLLM_ROCM_USE_AITER", "0").strip().lower() in ("1", "true")
        return on and self.env.get(switch, "1").strip().lower() not in ("0", "false")

    def at_least(self, version: str) -> bool:
        """The image's vLLM is this release or newer (unknown: newest, the default image)."""
        if not self.vllm_version:
            return True
        try:
            return Version(self.vllm_version) >= Version(version)
        except InvalidVersion:
            return True


class Constraint(NamedTuple):
    """One rule: when it applies, which TPs it allows, why, and where it is stated."""

    id: str
    applies: Callable[[Shape, Situation], bool]
    problem: Callable[[int, Shape, Situation], str | None]  # None: this TP is fine
    source: str


def _heads(tp: int, s: Shape, _: Situation) -> str | None:
    if s.num_attention_heads % tp:
        return f"{s.num_attention_heads} attention heads do not divide by TP {tp}"
    return None


def _kv_heads(tp: int, s: Shape, _: Situation) -> str | None:
    kv = s.num_kv_heads
    if kv >= tp and kv % tp:
        return f"{kv} KV heads do not divide by TP {tp}"
    if kv < tp and tp % kv:
        return f"TP {tp} cannot replicate {kv} KV heads evenly"
    return None


def _fp8_block(tp: int, s: Shape, _: Situation) -> str | None:
    block = s.fp8_block_n or 1
    for name, size in (
        ("intermediate_size", s.intermediate_size),
        ("moe_intermediate_size", s.moe_intermediate_size),
    ):
        if size and (size % tp or (size // tp) % block):
            return f"{name} {size} / TP {tp} is not a multiple of the FP8 block {block}"
    return None


# vllm#35850 (merged 2026-03-05) relaxed AITER's MLA decode to 4, 8 or a multiple of 16
# heads per rank up to 128; taken to ship from v0.18.0, the first release after the merge.
AITER_MLA_RELAXED = "0.18.0"


def _aiter_mla(tp: int, s: Shape, sit: Situation) -> str | None:
    per_rank = s.num_attention_heads // tp if s.num_attention_heads % tp == 0 else 0
    if sit.at_least(AITER_MLA_RELAXED):
        ok = per_rank in (4, 8) or (per_rank % 16 == 0 and 16 <= per_rank <= 128)
        allowed = "4, 8 or a multiple of 16 up to 128"
    else:
        ok = per_rank in (16, 128)
        allowed = "16 or 128"
    if not ok:
        return f"AITER's MLA kernel takes {allowed} heads per rank; TP {tp} gives {per_rank}"
    return None


CONSTRAINTS: tuple[Constraint, ...] = (
    Constraint(
        "attention_heads_divisible",
        lambda s, _: True,
        _heads,
        "vLLM ModelConfig.verify_with_parallel_config: 'Total number of attention heads "
        "must be divisible by tensor parallel size'",
    ),
    Constraint(
        "kv_heads_divisible",
        lambda s, _: not s.uses_mla,
        _kv_heads,
        "vLLM QKVParallelLinear: KV heads are split across ranks, or replicated when fewer "
        "than the ranks (then the TP must be a multiple of them)",
    ),
    Constraint(
        "fp8_block_divisible",
        lambda s, _: s.fp8_block_n is not None,
        _fp8_block,
        "vLLM fp8 block quantization (validate_block_quant_shapes): 'The output_size of "
        "gate's and up's weight ... is not divisible by weight quantization block_n'",
    ),
    Constraint(
        "aiter_mla_heads",
        lambda s, sit: s.uses_mla and sit.aiter("VLLM_ROCM_USE_AITER_MLA"),
        _aiter_mla,
        "ROCm/aiter#548 ('Aiter MLA only supports 16 or 128 number of heads'); relaxed by "
        "vllm-project/vllm#35850",
    ),
)


def tp_problems(tp: int, shape: Shape | None, situation: Situation) -> list[tuple[str, str]]:
    """(constraint id, why) for each rule this TP breaks; [] when it can start."""
    found = []
    per_gpu = situation.partitions_per_gpu
    if splits_a_gpu(tp, per_gpu):
        found.append(
            (
                "partition_groups",
                f"TP {tp} would split a GPU's {per_gpu} partitions between TP groups (a TP "
                "group takes the partitions of one GPU, or whole GPUs: hardware.partitions)",
            )
        )
    if shape is None:
        return found
    for rule in CONSTRAINTS:
        if rule.applies(shape, situation):
            problem = rule.problem(tp, shape, situation)
            if problem:
                found.append((rule.id, f"{problem} ({rule.source})"))
    return found
