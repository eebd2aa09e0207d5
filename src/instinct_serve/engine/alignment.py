"""Torch alignment: which torch build the managed environment ends up with (pure).

Two installers have an opinion about torch: the vLLM index ships the build vLLM was
compiled against, and the SDK's torch index ships the build that loads the host SDK's
libraries. The rule: a torch that already runs a GPU kernel against the SDK is kept,
whichever installer put it there; otherwise the environment moves to the **SDK's build of
the release the engine pins**. ``INSTINCT_DISABLE_TORCH_ALIGNMENT`` (set, any value,
even empty) keeps whatever is installed and reports what the alignment would have done.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from instinct_serve.engine.versions import release

DISABLE_ENV = "INSTINCT_DISABLE_TORCH_ALIGNMENT"

Action = Literal["aligned", "kept", "realigned", "disabled"]


def alignment_disabled(env: Mapping[str, str]) -> bool:
    """Set means on, whatever the value (an empty string included)."""
    return DISABLE_ENV in env


@dataclass(frozen=True)
class Alignment:
    """What happened to torch after the full install, and why."""

    action: Action
    installed: str | None  # the torch the full install left behind
    target: str  # the SDK's build the alignment aims for
    reason: str

    @property
    def final(self) -> str | None:
        return self.target if self.action == "realigned" else self.installed

    @property
    def changes_torch(self) -> bool:
        return self.action == "realigned"

    def line(self) -> str:
        if self.action == "aligned":
            return f"torch_alignment: aligned (torch=={self.target}: {self.reason})"
        if self.action == "kept":
            return (
                f"torch_alignment: kept torch=={self.installed} ({self.reason}; "
                f"the SDK build would have been torch=={self.target})"
            )
        if self.action == "realigned":
            return (
                f"torch_alignment: realigned torch=={self.installed or 'none'} -> "
                f"torch=={self.target} ({self.reason})"
            )
        return (
            f"torch_alignment: disabled by {DISABLE_ENV} (would have installed "
            f"torch=={self.target}; kept torch=={self.installed or 'none'})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "installed": self.installed,
            "target": self.target,
            "final": self.final,
            "reason": self.reason,
            "line": self.line(),
        }


def decide(
    *,
    installed: str | None,
    target: str,
    installed_runs_kernel: bool | None,
    disabled: bool,
    kernel_error: str | None = None,
) -> Alignment:
    """The alignment for a torch ``installed`` after the full install.

    ``installed_runs_kernel`` is the device check of that torch (None: not checked, as
    when it already is the target).
    """
    if installed == target:
        return Alignment(
            "aligned", installed, target, "already the SDK's build of the release vLLM pins"
        )
    if disabled:
        return Alignment("disabled", installed, target, f"{DISABLE_ENV} is set")
    if installed is not None and installed_runs_kernel:
        same = release(installed) == release(target)
        why = "it runs a GPU kernel against this SDK"
        if not same:
            why += f" (release {release(installed)}, not {release(target)})"
        return Alignment("kept", installed, target, why)
    if installed is None:
        return Alignment("realigned", None, target, "no torch was left installed")
    return Alignment(
        "realigned",
        installed,
        target,
        "it cannot run a GPU kernel against this SDK"
        + (f": {kernel_error}" if kernel_error else ""),
    )
