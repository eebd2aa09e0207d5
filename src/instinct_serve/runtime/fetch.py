"""Fetch in parallel: the image pull and the weight download of a plan, at the same time.

A first ``serve`` of a large model spends most of its time fetching: tens of GB of image
and up to hundreds of GB of weights, one after the other when vLLM downloads the weights
only once the container runs. ``fetch`` runs both at once (``instinct pull MODEL``, or
``serve --prefetch`` before the launch), after a disk check sized from both:

* the image through the host's docker (``DockerBackend.prepare``: ``docker pull``, which
  keeps the layers it finished, so an interrupted pull resumes);
* the weights with ``huggingface_hub.snapshot_download`` into the hub cache the plan mounts
  (so vLLM finds them and downloads nothing), honouring ``HF_ENDPOINT``, ``HF_TOKEN`` and
  ``HF_HUB_OFFLINE`` (then only the cache is checked). Finished files are kept, so a run
  after an interruption fetches only the rest (huggingface_hub 2 restarts an unfinished
  file: its partial download is private to the process that died). The files are the ones
  vLLM loads (``select_files``). Where
  ``hf_xet`` is installed its high-performance mode is turned on (``HF_XET_HIGH_PERFORMANCE``,
  used when the Hub serves the repository through Xet); with a huggingface_hub older than 1.0
  and ``hf_transfer`` installed, ``HF_HUB_ENABLE_HF_TRANSFER``. Weights are downloaded on
  this machine only: for ``--host`` the download is left to vLLM on that host.

Each side is a ``Span`` (start, end, bytes): the overlap of the two is reported.
"""

from __future__ import annotations

import importlib.util
import os
import posixpath
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import InstinctError, NotReadyError

if TYPE_CHECKING:
    from instinct_serve.hosts import Host
    from instinct_serve.plan.model import LaunchPlan
    from instinct_serve.runtime.backend import Backend

# The weights vLLM loads (``load_format auto``: safetensors, else PyTorch bins), and formats
# it never reads from a Hub repository: not downloaded.
WEIGHT_ORDER = ((".safetensors",), (".bin",), (".pt", ".pth"))
NEVER = (".gguf", ".onnx", ".onnx_data", ".msgpack", ".h5", ".ckpt", ".tflite", ".ot", ".mlmodel")
SKIP_DIRS = ("original/", "onnx/", "openvino/", "coreml/")  # other formats' copies
# gzip layers: the extracted tree is about twice the download, which stays until extracted
IMAGE_EXTRACT_FACTOR = 2.0
DISK_MARGIN = 1.05
PROGRESS_EVERY_S = 1.0


@dataclass
class Span:
    """One side of the fetch: when it ran and how much it moved."""

    what: str  # "image" | "weights"
    status: str = "pending"  # pending, running, done, present, skipped, failed
    start: float | None = None
    end: float | None = None
    total_bytes: int | None = None
    done_bytes: int = 0
    detail: str = ""
    error: InstinctError | None = field(default=None, repr=False)

    @property
    def seconds(self) -> float | None:
        return None if self.start is None or self.end is None else self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "start": self.start,
            "end": self.end,
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "total_bytes": self.total_bytes,
            "done_bytes": self.done_bytes,
            "detail": self.detail,
            "error": self.error.to_dict() if self.error is not None else None,
        }


def overlap_s(a: Span, b: Span) -> float:
    """Seconds both sides ran at once (0 when one did not run)."""
    if None in (a.start, a.end, b.start, b.end):
        return 0.0
    assert a.start is not None and a.end is not None and b.start is not None and b.end is not None
    return max(0.0, min(a.end, b.end) - max(a.start, b.start))


def select_files(files: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The files of a repository vLLM reads: one weight format (safetensors first), and
    every non-weight file (config, tokenizer, chat template, code); no copies in other
    formats (``original/``, GGUF, ONNX, ...)."""
    kept = [
        (n, s) for n, s in files if not n.startswith(SKIP_DIRS) and not n.lower().endswith(NEVER)
    ]
    weight_exts = tuple(e for group in WEIGHT_ORDER for e in group)
    chosen: tuple[str, ...] = ()
    for group in WEIGHT_ORDER:
        if any(n.lower().endswith(group) for n, _ in kept):
            chosen = group
            break
    return [
        (n, s) for n, s in kept if not n.lower().endswith(weight_exts) or n.lower().endswith(chosen)
    ]


def offline_patterns(names: list[str]) -> list[str]:
    """What to verify in the cache when offline (no file list from the Hub): the weight
    format ``select_files`` picks among the cached names as a pattern (a missing shard is
    then missing), and the other files present by name."""
    chosen = select_files([(n, 0) for n in names])
    weight_exts = tuple(e for group in WEIGHT_ORDER for e in group)
    exts = sorted({"*" + e for n, _ in chosen for e in weight_exts if n.lower().endswith(e)})
    return exts + [n for n, _ in chosen if not n.lower().endswith(weight_exts)]


def parse_df(text: str) -> dict[str, tuple[str, int]]:
    """``df -Pk PATH...`` → {path asked: (mount point, available bytes)}, in the order
    the paths were given (the caller zips them); keyed by output line number here."""
    out: dict[str, tuple[str, int]] = {}
    for i, line in enumerate(text.splitlines()[1:]):
        parts = line.split()
        if len(parts) >= 6 and parts[3].isdigit():
            out[str(i)] = (parts[5], int(parts[3]) * 1024)
    return out


def disk_problems(needs: list[tuple[str, str, int]], free: dict[str, tuple[str, int]]) -> list[str]:
    """What does not fit: ``needs`` (what, path, bytes) grouped by the filesystem of each
    path (``free``: path → (mount point, available bytes)), with a 5% margin."""
    by_mount: dict[str, tuple[int, int, list[str]]] = {}
    for what, path, size in needs:
        if path not in free or size <= 0:
            continue
        mount, avail = free[path]
        total, _, names = by_mount.get(mount, (0, avail, []))
        by_mount[mount] = (total + size, avail, [*names, f"{what} {size / 1e9:.1f} GB"])
    return [
        f"{mount} has {avail / 1e9:.1f} GB free, {' + '.join(names)} need "
        f"{total * DISK_MARGIN / 1e9:.1f} GB (with a 5% margin)"
        for mount, (total, avail, names) in by_mount.items()
        if total * DISK_MARGIN > avail
    ]


def _parse_reference(image: str) -> tuple[str, str, str]:
    """(registry, repository, tag or digest) of an image reference, Docker's rules."""
    name, ref = image, "latest"
    if "@" in name:
        name, ref = name.split("@", 1)
    elif ":" in name.rsplit("/", 1)[-1]:
        name, ref = name.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest, ref
    repo = name if "/" in name else f"library/{name}"
    return "registry-1.docker.io", repo, ref


_MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


def registry_image_bytes(image: str, timeout: float = 10.0) -> int | None:
    """The compressed size of ``image`` (config and layers, linux/amd64) from its registry
    (the Registry HTTP API V2, anonymous token when asked), or None when it cannot tell."""
    import httpx

    registry, repo, ref = _parse_reference(image)
    local = registry.split(":")[0] in ("localhost", "127.0.0.1")
    base = f"{'http' if local else 'https'}://{registry}/v2/{repo}"
    headers = {"Accept": _MANIFEST_TYPES}
    try:
        with httpx.Client(timeout=timeout, follow_redirects=True) as client:

            def get(url: str) -> dict[str, Any] | None:
                answer = client.get(url, headers=headers)
                challenge = answer.headers.get("WWW-Authenticate", "")
                if answer.status_code == 401 and challenge.lower().startswith("bearer "):
                    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
                    realm = params.pop("realm", "")
                    token = client.get(realm, params=params).json().get("token")
                    headers["Authorization"] = f"Bearer {token}"
                    answer = client.get(url, headers=headers)
                if answer.status_code != 200:
                    return None
                doc: dict[str, Any] = answer.json()
                return doc

            doc = get(f"{base}/manifests/{ref}")
            if doc is not None and "manifests" in doc:  # an index: the linux/amd64 image
                pick = next(
                    (
                        m
                        for m in doc["manifests"]
                        if (m.get("platform") or {}).get("os") == "linux"
                        and (m.get("platform") or {}).get("architecture") == "amd64"
                    ),
                    None,
                )
                doc = get(f"{base}/manifests/{pick['digest']}") if pick else None
            if doc is None or "layers" not in doc:
                return None
            return int(doc.get("config", {}).get("size", 0)) + sum(
                int(layer.get("size", 0)) for layer in doc["layers"]
            )
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def hub_dir(plan: LaunchPlan) -> str | None:
    """The host directory vLLM's hub cache is in (from the plan's HF mount)."""
    from instinct_serve.plan.model import CONTAINER_HF_CACHE

    for mount in plan.mounts:
        if mount.container_path == CONTAINER_HF_CACHE:
            return posixpath.join(mount.host_path, "hub")
        if mount.container_path == CONTAINER_HF_CACHE + "/hub":
            return mount.host_path
    return None


def fast_path() -> str | None:
    """Turn on the fast download path huggingface_hub offers, where installed."""
    if importlib.util.find_spec("hf_xet") is not None:
        os.environ.setdefault("HF_XET_HIGH_PERFORMANCE", "1")
        return "hf_xet"
    if importlib.util.find_spec("hf_transfer") is not None:
        from huggingface_hub import constants

        if hasattr(constants, "HF_HUB_ENABLE_HF_TRANSFER"):
            constants.HF_HUB_ENABLE_HF_TRANSFER = True
            return "hf_transfer"
    return None


def _dir_bytes(path: Path) -> int:
    total = 0
    try:
        for entry in os.scandir(path):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        return total
    return total


@dataclass
class FetchReport:
    image: Span
    weights: Span
    fast_path: str | None = None
    disk: list[str] = field(default_factory=list)

    @property
    def overlap_s(self) -> float:
        return overlap_s(self.image, self.weights)

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image.to_dict(),
            "weights": self.weights.to_dict(),
            "overlap_s": round(self.overlap_s, 3),
            "fast_path": self.fast_path,
            "disk_checked": self.disk,
        }


Progress = Callable[[str, Span], None]


class Fetcher:
    """One parallel fetch of a plan's image and weights on ``host``."""

    def __init__(self, host: Host, plan: LaunchPlan, backend: Backend | None) -> None:
        self.host = host
        self.plan = plan
        self.backend = backend
        self.image = Span("image")
        self.weights = Span("weights")
        self.layers: dict[str, str] = {}
        self._files: list[tuple[str, int]] = []
        self._sha: str | None = None
        self._hub: str | None = None

    # -- what there is to fetch, and whether it fits

    def _plan_weights(self) -> None:
        from instinct_serve.gather.model_dir import is_local_dir
        from instinct_serve.gather.model_meta import hub_endpoint, hub_offline, hub_token

        model = self.plan.model
        if is_local_dir(model) or model.startswith("/"):
            self.weights.status, self.weights.detail = "skipped", "the model is a local directory"
            return
        if not self.host.is_local:
            self.weights.status = "skipped"
            self.weights.detail = (
                f"weights are fetched on this machine only: vLLM downloads them on {self.host.name}"
            )
            return
        self._hub = hub_dir(self.plan)
        if self._hub is None:
            self.weights.status, self.weights.detail = "skipped", "the plan mounts no HF cache"
            return
        if hub_offline():
            return  # only the cache is checked (``_download``)
        from huggingface_hub import HfApi

        api = HfApi(endpoint=hub_endpoint(), token=hub_token() or False)
        try:
            info = api.repo_info(model)
            self._sha = info.sha
            tree = api.list_repo_tree(model, recursive=True, revision=self._sha)
            files = [(f.path, int(f.size or 0)) for f in tree if hasattr(f, "size")]
        except Exception as exc:
            self.weights.status = "failed"
            self.weights.error = _hub_error(model, exc)
            return
        self._files = select_files(files)
        self.weights.total_bytes = sum(s for _, s in self._files)

    def _missing_weight_bytes(self) -> int:
        if self._hub is None or self._sha is None:
            return 0
        snap = Path(self._hub) / _repo_folder(self.plan.model) / "snapshots" / self._sha
        return sum(s for n, s in self._files if not (snap / n).is_file())

    def _plan_image(self) -> None:
        if self.plan.launcher != "docker" or self.backend is None:
            self.image.status, self.image.detail = "skipped", "no image: the native engine"
            return
        from instinct_serve.runtime.docker import Docker

        if Docker(self.host).image_present(self.plan.image):
            self.image.status, self.image.detail = "present", "already on the host"
            self.image.total_bytes = 0
            return
        size = registry_image_bytes(self.plan.image)
        self.image.total_bytes = size
        if size is None:
            self.image.detail = "size unknown (the registry did not say): not in the disk check"

    def check_disk(self) -> list[str]:
        """The disk check: weights into the hub cache, the image into Docker's root."""
        needs: list[tuple[str, str, int]] = []
        if self._hub is not None:
            self.host.run(["mkdir", "-p", "--", self._hub], timeout=30)
            needs.append(("weights", self._hub, self._missing_weight_bytes()))
        if self.image.status == "pending" and self.image.total_bytes:
            root = self.host.run(
                ["docker", "info", "--format", "{{.DockerRootDir}}"], timeout=30
            ).stdout.strip()
            if root.startswith("/"):
                extracted = int(self.image.total_bytes * IMAGE_EXTRACT_FACTOR)
                needs.append(("image", root, extracted))
        paths = [p for _, p, n in needs if n > 0]
        if not paths:
            return []
        result = self.host.run(["df", "-Pk", *paths], timeout=30)
        rows = parse_df(result.stdout)
        free = {p: rows[str(i)] for i, p in enumerate(paths) if str(i) in rows}
        checked = [f"{what}: {n / 1e9:.2f} GB to {p}" for what, p, n in needs if n > 0]
        problems = disk_problems(needs, free)
        if problems:
            raise NotReadyError(
                f"not enough disk space to fetch {self.plan.model}: " + "; ".join(problems),
                fix="free space there, point --hf-cache at a larger disk, or move Docker's "
                "data-root",
                id="disk_full",
                details={"problems": problems},
            )
        return checked

    # -- the two fetches

    def _pull(self, on_line: Callable[[str], None]) -> None:
        assert self.backend is not None

        def line(text: str) -> None:
            m = re.match(r"^([0-9a-f]{12}): (.+)$", text.strip())
            if m:
                self.layers[m.group(1)] = m.group(2)
            on_line(text)

        self.image.status, self.image.start = "running", time.time()
        try:
            self.backend.prepare(self.plan, line)
            self.image.status = "done"
        except InstinctError as exc:
            self.image.status, self.image.error = "failed", exc
        finally:
            self.image.end = time.time()
            if self.image.status == "done" and self.image.total_bytes:
                self.image.done_bytes = self.image.total_bytes

    def _download(self) -> None:
        from huggingface_hub import constants, snapshot_download
        from huggingface_hub.utils.tqdm import disable_progress_bars

        from instinct_serve.gather.model_meta import hub_endpoint, hub_offline, hub_token

        self.weights.status, self.weights.start = "running", time.time()
        offline = hub_offline()
        constants.HF_HUB_OFFLINE = offline
        disable_progress_bars()  # the fetch reports its own progress
        try:
            snapshot_download(
                self.plan.model,
                # by branch, not by the commit listed: huggingface_hub then records the
                # branch's commit (refs/main), which offline lookups (and vLLM) resolve
                revision=None,
                cache_dir=self._hub,
                endpoint=hub_endpoint(),
                token=hub_token() or False,
                allow_patterns=self._offline_patterns() if offline else [n for n, _ in self._files],
                local_files_only=offline,
                max_workers=8,
            )
            self.weights.status = "done"
            if offline:
                self.weights.detail = "HF_HUB_OFFLINE is set: found in the cache"
        except Exception as exc:
            self.weights.status = "failed"
            self.weights.error = _hub_error(self.plan.model, exc, offline=offline, where=self._hub)
        finally:
            self.weights.end = time.time()
            self.weights.done_bytes = self._weights_done()

    def _offline_patterns(self) -> list[str] | None:
        """The files to find in the cache offline (None: the whole snapshot; nothing is
        cached then and huggingface_hub says so)."""
        assert self._hub is not None
        snapshots = Path(self._hub) / _repo_folder(self.plan.model) / "snapshots"
        names = sorted(
            {
                str(p.relative_to(snap))
                for snap in (snapshots.iterdir() if snapshots.is_dir() else [])
                for p in snap.rglob("*")
                if p.is_file()
            }
        )
        return offline_patterns(names) or None

    def _weights_done(self) -> int:
        if self._hub is None:
            return 0
        return _dir_bytes(Path(self._hub) / _repo_folder(self.plan.model) / "blobs")

    def run(
        self,
        on_progress: Progress,
        on_line: Callable[[str], None] | None = None,
        *,
        strict_weights: bool = True,
    ) -> FetchReport:
        """Check, then fetch both at once; raises the first failure after both ended (a
        weight failure only with ``strict_weights``: else it stays in the report)."""
        report = FetchReport(self.image, self.weights)
        self._plan_image()
        self._plan_weights()
        if self.weights.error is not None and strict_weights:
            raise self.weights.error
        report.disk = self.check_disk()
        if self.weights.status == "pending" and self._hub is not None:
            report.fast_path = fast_path()
        threads = []
        if self.image.status == "pending":
            pull_lines = on_line or (lambda _line: None)
            threads.append(threading.Thread(target=self._pull, args=(pull_lines,), daemon=True))
        if self.weights.status == "pending":
            threads.append(threading.Thread(target=self._download, daemon=True))
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(PROGRESS_EVERY_S / max(1, len(threads)))
            if self.weights.status == "running":
                self.weights.done_bytes = self._weights_done()
            for span in (self.image, self.weights):
                if span.status == "running":
                    on_progress(span.what, span)
        for span in (self.image, self.weights):
            on_progress(span.what, span)
        for span in (self.image, self.weights):
            if span.error is not None and (strict_weights or span is self.image):
                raise span.error
        return report


def _repo_folder(model: str) -> str:
    return "models--" + model.replace("/", "--")


def _hub_error(
    model: str, exc: BaseException, *, offline: bool = False, where: str | None = None
) -> InstinctError:
    from instinct_serve.gather.model_meta import gated_error, hub_endpoint, hub_token

    name = type(exc).__name__
    if offline:
        return NotReadyError(
            f"HF_HUB_OFFLINE is set and {model} is not complete in the cache {where} "
            f"({name}: {str(exc)[:200]})",
            fix="unset HF_HUB_OFFLINE to download it, or copy the model's cache there",
            id="weights_not_cached",
        )
    if name == "GatedRepoError":
        return gated_error(model, bool(hub_token()))
    if name in ("RepositoryNotFoundError", "RevisionNotFoundError"):
        return InstinctError(
            f"{model} was not found on {hub_endpoint()}",
            fix="check the model id (org/name) and HF_TOKEN for a private one",
            id="model_not_found",
        )
    return InstinctError(
        f"downloading {model} from {hub_endpoint()} failed: {name}: {str(exc)[:200]}",
        fix="check the network path to the Hub (HF_ENDPOINT for a mirror); run `instinct pull` "
        "again: the files it finished are kept",
        id="weights_download_failed",
    )


def prefetch(
    host: Host,
    plan: LaunchPlan,
    backend: Backend,
    *,
    phase: Callable[[str, str], None],
    note: Callable[[str], None],
    feed: Callable[[str], None],
) -> None:
    """Serve's ``--prefetch``: the image and the weights at once; a failed weight
    download is only a note (vLLM fetches what is missing itself)."""

    def progress(what: str, span: Span) -> None:
        if what == "weights" and span.status == "running":
            total = f" of {span.total_bytes / 1e9:.2f} GB" if span.total_bytes else ""
            phase(
                "downloading_weights",
                f"prefetching weights: {span.done_bytes / 1e9:.2f} GB{total}",
            )

    report = Fetcher(host, plan, backend).run(progress, feed, strict_weights=False)
    weights = report.weights
    if weights.error is not None:
        note(f"weights not prefetched ({weights.error.message}): vLLM downloads them")
    elif weights.status == "done":
        note(
            f"prefetched {weights.done_bytes / 1e9:.2f} GB of weights in "
            f"{weights.seconds or 0:.1f} s, {report.overlap_s:.1f} s of it beside the pull"
        )
