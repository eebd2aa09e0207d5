"""The plan being decided: vLLM's argv, the environment, the docker flags and secrets, each
recorded together with its ``Reason`` in one call, and every value a later source replaced
kept as a typed ``Conflict``.

Every planner writes through a ``PlanBuilder``: ``plan.planner`` for one endpoint,
``plan.replicas`` when it fills the GPUs with copies (``PlanBuilder.extending`` a decided
plan), ``plan.multinode`` for the reasons shared by its ranks. A new planner step adds a flag
with ``b.flag(["--x", "1"], "planner", "why")`` and a variable with ``b.set_env("X", "1",
"planner", "why")``; the reason, the argv's precedence and the conflict report follow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve.plan.model import Assigned, Conflict, LaunchPlan, Reason
from instinct_serve.vllm_args import Unit
from instinct_serve.vllm_args import units as arg_units

if TYPE_CHECKING:
    from instinct_serve.catalog.config import Layer


@dataclass
class ArgMerge:
    """Merge argv from sources in precedence order; remember who set what.

    A flag keeps the place where it was first set and the value it was last given."""

    units: dict[str, tuple[list[str], str]] = field(default_factory=dict)  # name → (tokens, src)
    order: list[str] = field(default_factory=list)
    positional: list[str] = field(default_factory=list)
    history: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # name → (src, val)

    def add(self, args: Iterable[str], source: str) -> None:
        for name, tokens in arg_units(list(args)):
            if name is None:
                self.positional.extend(tokens)
                continue
            self.history.setdefault(name, []).append((source, Unit(name, tokens).value or ""))
            if name not in self.units:
                self.order.append(name)
            self.units[name] = (tokens, source)

    def remove(self, name: str) -> None:
        if name in self.units:
            del self.units[name]
            self.order.remove(name)

    def has(self, name: str) -> bool:
        return name in self.units

    def value(self, name: str) -> str | None:
        return Unit(name, self.units[name][0]).value if name in self.units else None

    def source(self, name: str) -> str | None:
        return self.units[name][1] if name in self.units else None

    def argv(self) -> list[str]:
        out = list(self.positional)
        for name in self.order:
            out.extend(self.units[name][0])
        return out

    def conflicts(self) -> list[Conflict]:
        """Every flag still set that two sources gave different values."""
        found = []
        for name, seen in self.history.items():
            if len({value for _src, value in seen}) > 1 and name in self.units:
                values = tuple(Assigned(src, val) for src, val in seen)
                winner = Assigned(self.units[name][1], self.value(name) or "")
                found.append(Conflict("flag", name, values, winner))
        return found


@dataclass
class PlanBuilder:
    """What a planner decided so far; every element goes in with its reason.

    ``base_args``: argv already decided (a plan being extended); what ``flag`` adds follows it.
    """

    reasons: list[Reason] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    env_sources: dict[str, str] = field(default_factory=dict)  # who set each variable
    secrets: list[str] = field(default_factory=list)  # passed by name, never by value
    docker_flags: list[str] = field(default_factory=list)
    args: ArgMerge = field(default_factory=ArgMerge)
    base_args: list[str] = field(default_factory=list)

    @classmethod
    def extending(cls, plan: LaunchPlan) -> PlanBuilder:
        """A builder over a decided plan: its reasons, warnings and environment are the
        plan's own (edited in place); ``finish`` writes the argv back."""
        return cls(
            reasons=plan.reasons,
            warnings=plan.warnings,
            conflicts=plan.conflicts,
            env=plan.env,
            secrets=plan.secret_env,
            docker_flags=plan.docker_flags,
            base_args=list(plan.vllm_args),
        )

    # ------------------------------------------------------------------ reasons alone

    def reason(self, item: str, source: str, why: str) -> None:
        """A choice with no flag or variable of its own (the model, the variant, a TP bound)."""
        self.reasons.append(Reason(item, source, why))

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    # ------------------------------------------------------------------ vLLM arguments

    def flag(self, args: list[str], source: str, why: str, *, setter: str | None = None) -> None:
        """Set vLLM arguments (a later source wins, at the first one's place), with the
        reason. ``setter``: the source a conflict names, where it differs from the reason's
        (``planner (fit)`` for a value the fit decided)."""
        self.args.add(args, setter or source)
        self.reasons.append(Reason(" ".join(args), source, why))

    def layered_args(self, layers: Iterable[Layer], final: Iterable[str], why: str) -> None:
        """The arguments of configuration layers, lowest first, each layer named as their
        source; flags missing from ``final`` (the layers' merged result: a later layer may
        remove one) are dropped; every flag kept is explained by the layer that set it."""
        for layer in layers:
            if layer.args:
                self.args.add(layer.args, layer.name)
        kept = {name for name, _tokens in arg_units(list(final)) if name}
        for name in list(self.args.units):
            if name not in kept:
                self.args.remove(name)
        for name in self.args.order:
            tokens, source = self.args.units[name]
            self.reasons.append(Reason(" ".join(tokens), source, why))

    def argv(self) -> list[str]:
        return [*self.base_args, *self.args.argv()]

    def flag_conflicts(self) -> None:
        """Report every flag two sources set differently (a conflict and a warning each)."""
        found = self.args.conflicts()
        self.conflicts.extend(found)
        for conflict in found:
            self.warn(
                f"{conflict.name} set to different values; {conflict.winner.source} wins "
                f"({conflict.winner.value})"
            )

    # ------------------------------------------------------------------ environment

    def set_env(self, key: str, value: str, source: str, why: str) -> None:
        """Set a variable (replacing any value) with its reason."""
        self.env[key] = value
        self.env_sources[key] = source
        self.reasons.append(Reason(f"{key}={value}", source, why))

    def override_env(self, key: str, value: str, source: str, why: str) -> None:
        """``set_env`` over an earlier value, which is reported as a conflict when it differs
        (the user's ``--env`` over the recipe's)."""
        old = self.env.get(key)
        if old is not None and old != value:
            given = Assigned(source, value)
            earlier = Assigned(self.env_sources.get(key, "recipe"), old)
            self.conflicts.append(Conflict("env", key, (earlier, given), given))
        self.set_env(key, value, source, why)

    def drop_env(self, key: str, source: str, why: str) -> None:
        """Leave a variable out of the plan, with the reason."""
        self.env.pop(key, None)
        self.env_sources.pop(key, None)
        self.reasons.append(Reason(key, source, why))

    def secret(self, name: str, source: str, why: str) -> None:
        """Pass a variable by name only (its value stays in the caller's environment)."""
        if name in self.secrets:
            return
        self.secrets.append(name)
        self.reasons.append(Reason(f"--env {name}", source, why))

    def docker_flag(self, flag: str, source: str, why: str) -> None:
        self.docker_flags.append(flag)
        self.reasons.append(Reason(flag, source, why))

    # ------------------------------------------------------------------ the result

    def plan(self, **fields: Any) -> LaunchPlan:
        """The ``LaunchPlan`` of what was recorded, plus ``fields`` (the decisions)."""
        return LaunchPlan(
            docker_flags=self.docker_flags,
            env=self.env,
            secret_env=self.secrets,
            vllm_args=self.argv(),
            reasons=self.reasons,
            warnings=list(dict.fromkeys(self.warnings)),
            conflicts=self.conflicts,
            **fields,
        )

    def finish(self, plan: LaunchPlan) -> None:
        """Write the argv back into the plan being extended (``extending``)."""
        plan.vllm_args = self.argv()
