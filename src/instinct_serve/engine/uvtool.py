"""The real ``uv`` on a host: venvs, ``pip install``, ``--dry-run`` resolution, freeze.

Why uv: it installs the multi-gigabyte ROCm torch stack fast, resolves per index
(``first-index``: a package found on the vendor index is never mixed with PyPI's CUDA
build of the same name), and ``uv pip install --dry-run --reinstall`` reports exactly which
version it *would* install, which is how the rotating vendor dev tags are pinned.
Output parsing is pure (``parse_dry_run``, ``parse_freeze``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import Host, Result

DRY_RUN_TIMEOUT_S = 900.0
INSTALL_TIMEOUT_S = 3600.0

_PLUS_LINE = re.compile(r"^\s*\+\s+([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*$")
_FREEZE_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*$")


def normalize(name: str) -> str:
    """PEP 503 project name normalization (``Flash_Attn`` -> ``flash-attn``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_dry_run(output: str) -> dict[str, str]:
    """``{project: version}`` from the `` + name==version`` lines of a dry run."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        match = _PLUS_LINE.match(line)
        if match:
            found[normalize(match.group(1))] = match.group(2)
    return found


def parse_freeze(output: str) -> dict[str, str]:
    """``{project: version}`` from ``uv pip freeze`` (direct URL lines are skipped)."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        match = _FREEZE_LINE.match(line.strip())
        if match:
            found[normalize(match.group(1))] = match.group(2)
    return found


class UvError(InstinctError):
    """A uv command failed; the message carries the command and uv's own words."""

    default_id = "uv_failed"


def _tail(result: Result, lines: int = 12) -> str:
    text = (result.stderr.strip() or result.stdout.strip()) or f"exit {result.returncode}"
    kept = [ln for ln in text.splitlines() if not ln.startswith("Using Python ")]
    return "\n".join(kept[-lines:])


_NETWORK = re.compile(
    r"error sending request|dns error|failed to lookup address|connection refused|"
    r"timed out|client error \(Connect\)|certificate",
    re.IGNORECASE,
)


def network_failure(result: Result) -> bool:
    """Whether uv failed to reach an index at all (as opposed to finding no build)."""
    return bool(_NETWORK.search(result.stderr + result.stdout))


def find_uv(host: Host) -> str:
    """``INSTINCT_UV``, else ``uv`` on the host's PATH, else (locally) the uv pip package."""
    configured = host.env(["INSTINCT_UV"]).get("INSTINCT_UV", "").strip()
    if configured:
        return configured
    found = host.which("uv")
    if found:
        return found
    if host.is_local:
        sibling = Path(sys.executable).with_name("uv")
        if sibling.is_file():
            return str(sibling)
        try:
            from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]

            return str(find_uv_bin())
        except (ImportError, FileNotFoundError):
            pass
    raise NotReadyError(
        f"uv is not installed on {host.name}; the managed vLLM environment is built with it",
        fix="install it (pip install uv, or see https://docs.astral.sh/uv/getting-started/"
        "installation/), or set INSTINCT_UV to its path",
        id="uv_missing",
    )


@dataclass
class Uv:
    """``uv`` at ``exe`` on ``host``."""

    host: Host
    exe: str

    def run(self, args: Sequence[str], timeout: float, what: str) -> Result:
        result = self.host.run([self.exe, *args], timeout=timeout)
        if result.timed_out:
            raise UvError(
                f"{what} did not finish within {timeout:.0f} s",
                fix="check the network path to the package index and retry",
                id="uv_timeout",
            )
        if result.returncode in (126, 127):
            raise NotReadyError(
                f"cannot run {self.exe} on {self.host.name}", fix="install uv", id="uv_missing"
            )
        return result

    def venv(self, path: str, python: str) -> Result:
        return self.run(["venv", "--allow-existing", "--python", python, path], 900, "uv venv")

    def dry_run(
        self,
        python: str,
        specs: Sequence[str],
        *,
        index_url: str | None = None,
        config_file: str | None = None,
        no_deps: bool = True,
        prerelease: str = "allow",
    ) -> tuple[dict[str, str], Result]:
        """What ``uv pip install`` would install for ``specs`` (``--reinstall``, so an
        already-installed package still shows up), and the raw result."""
        args = ["pip", "install", "--dry-run", "--reinstall", "--python", python]
        args += ["--prerelease", prerelease]
        if no_deps:
            args.append("--no-deps")
        if index_url:  # --default-index, not --index-url: UV_DEFAULT_INDEX would win over that
            args += ["--default-index", index_url]
        if config_file:
            args += ["--config-file", config_file]
        args += list(specs)
        result = self.run(args, DRY_RUN_TIMEOUT_S, "uv pip install --dry-run")
        return (parse_dry_run(result.stderr + "\n" + result.stdout) if result.ok else {}), result

    def install(
        self,
        python: str,
        specs: Sequence[str],
        *,
        index_url: str | None = None,
        config_file: str | None = None,
        no_deps: bool = False,
        reinstall: Sequence[str] = (),
        prerelease: str = "if-necessary",
    ) -> Result:
        args = ["pip", "install", "--python", python, "--prerelease", prerelease]
        if no_deps:
            args.append("--no-deps")
        if index_url:  # --default-index, not --index-url: UV_DEFAULT_INDEX would win over that
            args += ["--default-index", index_url]
        if config_file:
            args += ["--config-file", config_file]
        for name in reinstall:
            args += ["--reinstall-package", name]
        args += list(specs)
        result = self.run(args, INSTALL_TIMEOUT_S, "uv pip install")
        if not result.ok:
            raise UvError(
                f"`uv pip install {' '.join(specs)}` failed:\n{_tail(result)}",
                fix="read uv's message above; `instinct engine install vllm --dry-run` "
                "shows what would be installed without changing anything",
                details={"argv": [self.exe, *args]},
            )
        return result

    def freeze(self, python: str) -> dict[str, str]:
        result = self.run(["pip", "freeze", "--python", python], 300, "uv pip freeze")
        if not result.ok:
            raise UvError(f"`uv pip freeze` failed for {python}:\n{_tail(result)}")
        return parse_freeze(result.stdout)


def describe_failure(result: Result) -> str:
    return _tail(result)
