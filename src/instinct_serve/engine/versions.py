"""Version arithmetic the native route depends on (pure).

ROCm versions arrive in many spellings: ``7.0.2`` from ``/opt/rocm/.info/version``,
``10.0.0a20260423`` from TheRock's ``rocm_sdk``, ``7.0.51831-a3e329ad8`` from
``torch.version.hip``, and inside wheel local versions as ``+rocm7.0``,
``+rocm10.0.0.gf46a9dfe2.d20260826`` or vLLM's compact ABI tag ``+rocm700``. Pins and
checks only ever compare the **major.minor series**: AMD rotates patch and dev suffixes
constantly, but a different minor is a different ABI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from instinct_serve.errors import UsageError

_SERIES = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")
_LOCAL_ROCM_DOTTED = re.compile(r"^rocm(\d+)\.(\d+)")
_LOCAL_ROCM_COMPACT = re.compile(r"^rocm(\d{3,4})(?![\d.])")


@dataclass(frozen=True, order=True)
class Series:
    """A ROCm ``major.minor`` line."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def parse_series(text: str | None) -> Series | None:
    """The ``major.minor`` of any ROCm/HIP spelling, or None when there is none."""
    if not text:
        return None
    match = _SERIES.match(text)
    if not match:
        return None
    return Series(int(match.group(1)), int(match.group(2)))


def require_series(text: str, what: str = "--rocm") -> Series:
    """Like ``parse_series`` but a bad value is a usage error naming the option."""
    series = parse_series(text)
    if series is None:
        raise UsageError(
            f"{what} {text!r} is not a ROCm version",
            fix="give major.minor, e.g. --rocm 7.0",
            id="bad_rocm_version",
        )
    return series


def split_local(version: str) -> tuple[str, str | None]:
    """``2.9.0+rocm7.0`` -> (``2.9.0``, ``rocm7.0``); no local part -> (version, None)."""
    public, sep, local = version.partition("+")
    return public, (local if sep else None)


def local_rocm_series(version: str) -> Series | None:
    """The ROCm line a wheel's local version names, or None when it names none.

    ``+rocm7.0``, ``+rocm7.0.2``, ``+rocm10.0.0.gf46a9dfe2.d20260826`` are dotted.
    vLLM's ABI tags are compact: ``rocm700`` is 7.0(.0), ``rocm721`` 7.2(.1), and the
    three-digit ``rocm100`` is 10.0 (there never were ROCm 1.x wheels); four digits such
    as ``rocm1001`` read as 10.0(.1).
    """
    _, local = split_local(version)
    if not local:
        return None
    local = local.lower()
    dotted = _LOCAL_ROCM_DOTTED.match(local)
    if dotted:
        return Series(int(dotted.group(1)), int(dotted.group(2)))
    compact = _LOCAL_ROCM_COMPACT.match(local)
    if compact:
        digits = compact.group(1)
        if len(digits) == 4 or digits[0] == "1":
            return Series(int(digits[:2]), int(digits[2]))
        return Series(int(digits[0]), int(digits[1]))
    return None


def release(version: str) -> str:
    """The public release of a version (no local part): ``2.9.0+rocm7.0`` -> ``2.9.0``."""
    return split_local(version)[0]


def parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def at_least(installed: str, minimum: str) -> bool | None:
    """Whether ``installed`` >= ``minimum`` by release; None when either does not parse.

    A dev build of the next release (``0.11.1.dev5``) counts as that release: recipes
    name releases, and a dev build past one carries everything the release had.
    """
    have = parse_version(release(installed))
    need = parse_version(release(minimum))
    if have is None or need is None:
        return None
    return have.release >= need.release


def python_tag(major: int, minor: int) -> str:
    """The PEP 425 interpreter tag, e.g. ``cp312``."""
    return f"cp{major}{minor}"


def python_request(tag: str) -> str:
    """``cp314`` -> ``3.14`` (what ``uv venv --python`` understands)."""
    match = re.fullmatch(r"cp(\d)(\d+)", tag)
    if not match:
        raise ValueError(f"not a CPython tag: {tag!r}")
    return f"{match.group(1)}.{match.group(2)}"
