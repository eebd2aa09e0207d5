"""A shallow checkout of the recipes repository, through the git binary on a ``Host``.

The first sync clones ``--depth 1`` into ``cache_dir()/recipes-git``; later syncs fetch the
remote's HEAD into it and reset, which transfers only what changed. A clone that is broken
(or was made from another URL and cannot fetch) is replaced by a fresh one, built beside it
and swapped in, so a failure never leaves a half-written checkout behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host, LocalHost, Result

DEFAULT_REPO_URL = "https://github.com/vllm-project/recipes.git"
GIT_TIMEOUT_S = 300.0
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}


class GitError(InstinctError):
    default_id = "git_failed"


@dataclass(frozen=True)
class Checkout:
    path: Path
    commit: str
    commit_date: str | None
    action: str  # cloned | fetched


def _last_line(result: Result) -> str:
    text = (result.stderr or result.stdout or "").strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else f"exit status {result.returncode}"


def _git(host: Host, *args: str, timeout: float = GIT_TIMEOUT_S) -> Result:
    return host.run(["git", *args], timeout=timeout, env=_GIT_ENV)


def _head(host: Host, path: Path) -> tuple[str, str | None]:
    rev = _git(host, "-C", str(path), "rev-parse", "HEAD", timeout=30)
    if not rev.ok or not rev.stdout.strip():
        raise GitError(
            f"the recipes checkout in {path} has no commit ({_last_line(rev)})",
            fix="delete that directory and run `instinct recipes sync` again",
        )
    log = _git(host, "-C", str(path), "log", "-1", "--format=%cI", timeout=30)
    return rev.stdout.strip(), (log.stdout.strip() or None) if log.ok else None


def _clone(host: Host, repo_url: str, dest: Path, timeout: float) -> None:
    parent = dest.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".recipes-git.", dir=parent))
    try:
        result = _git(
            host,
            "clone",
            "--depth",
            "1",
            "--quiet",
            "--",
            repo_url,
            str(tmp / "repo"),
            timeout=timeout,
        )
        if result.returncode == 127:
            raise GitError(
                "git is not installed on this machine",
                fix="install git (e.g. apt-get install git), or use --source api",
                id="git_missing",
            )
        if not result.ok:
            raise GitError(
                f"git clone of {repo_url} failed: {_last_line(result)}",
                fix="check the URL (--repo-url) and the network, then retry",
            )
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp / "repo", dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fetch(host: Host, repo_url: str, dest: Path, timeout: float) -> bool:
    """Update an existing clone in place; False when it has to be re-cloned instead."""
    if not (dest / ".git").exists():
        return False
    fetch = _git(
        host,
        "-C",
        str(dest),
        "fetch",
        "--depth",
        "1",
        "--quiet",
        "--",
        repo_url,
        "HEAD",
        timeout=timeout,
    )
    if not fetch.ok:
        return False
    reset = _git(host, "-C", str(dest), "reset", "--hard", "--quiet", "FETCH_HEAD", timeout=60)
    return reset.ok


def checkout(
    repo_url: str, dest: Path, *, host: Host | None = None, timeout: float = GIT_TIMEOUT_S
) -> Checkout:
    """Bring ``dest`` to the remote's HEAD (fetch, or clone afresh); GitError on failure."""
    from filelock import FileLock

    host = host or LocalHost()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock", timeout=timeout):
        if _fetch(host, repo_url, dest, timeout):
            action = "fetched"
        else:
            _clone(host, repo_url, dest, timeout)
            action = "cloned"
        commit, date = _head(host, dest)
    return Checkout(dest, commit, date, action)
