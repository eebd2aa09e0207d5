"""Reading AMD's reference configs: from an InferenceX checkout (``build_references``), the
synced copy in the cache directory, else the snapshot shipped in the package
(``data/reference_snapshot.json``). The parsing is ``catalog.reference``'s.

Cache rules as for the recipes (``catalog.store``): the synced copy is written whole, to a
temporary file that replaces the old one, under a file lock; a missing copy means the
snapshot; an unreadable one means the snapshot plus a warning.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from instinct_serve.catalog.overrides import data_text
from instinct_serve.catalog.reference import (
    MASTER_FILE,
    ReferenceConfig,
    References,
    parse_launch,
    parse_master,
    reference_document,
    references_from_doc,
    script_candidates,
)

if TYPE_CHECKING:
    from instinct_serve.catalog.config import AmdConfig
    from instinct_serve.fit.catalog_link import LaunchContext
    from instinct_serve.hosts import Host
    from instinct_serve.options import PlanOptions
    from instinct_serve.plan.reference import ReferenceChoice

CACHE_FILE = "reference_configs.json"
SNAPSHOT_FILE = "reference_snapshot.json"
_COMMIT = re.compile(r"commit\s+([0-9a-f]{40})\s*\(([0-9-]+)\)")


def master_files(root: Path) -> list[Path]:
    """``amd-master.yaml`` then the deprecated AMD master files (sorted)."""
    files = [root / MASTER_FILE]
    files += sorted((root / "configs" / "deprecated").glob("amd-*.yaml"))
    return [f for f in files if f.is_file()]


def _with_script(cfg: ReferenceConfig, root: Path) -> ReferenceConfig:
    for candidate in script_candidates(cfg):
        path = root / candidate
        if path.is_file():
            launch = parse_launch(path.read_text(encoding="utf-8"))
            if launch.server is not None and launch.server != cfg.framework:
                continue  # another server's script of the same name (an SGLang one, unsuffixed)
            cfg.script, cfg.env, cfg.args, cfg.varies = (
                candidate,
                launch.env,
                launch.args,
                launch.varies,
            )
            cfg.spec_method, cfg.spec_draft = launch.spec_method, launch.spec_draft
            cfg.spec_tokens = launch.spec_tokens
            cfg.conditional_env = launch.conditional_env
            break
    return cfg


def build_references(
    root: Path, *, source: str = "snapshot", commit: str | None = None, date: str | None = None
) -> dict[str, Any]:
    """The reference document of an InferenceX checkout (deterministic for its files); the
    commit and its date are given by a git sync, else read from the subset's SOURCE.md."""
    import yaml

    configs: list[ReferenceConfig] = []
    for path in master_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ValueError(f"{rel}: not YAML ({exc})") from None
        configs.extend(_with_script(c, root) for c in parse_master(doc, rel))
    if commit is None:
        with contextlib.suppress(OSError):
            found = _COMMIT.search((root / "SOURCE.md").read_text(encoding="utf-8"))
            if found:
                commit, date = found.group(1), found.group(2)
    return reference_document(configs, source=source, commit=commit, fetched_at=date)


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def cache_path() -> str:
    from instinct_serve.paths import cache_dir

    return os.path.join(str(cache_dir()), CACHE_FILE)


def sync_references(url: str, host: Host | None = None) -> dict[str, Any]:
    """``recipes sync``'s second source: AMD's configs from an InferenceX git repository,
    checked out beside the recipes' (``recipes_git.checkout``: fetch, else clone), parsed and
    written as the synced copy. What happened; an ``error`` (the copy left as it was) rather
    than an exception: the recipes' sync stands on its own."""
    from instinct_serve.errors import InstinctError
    from instinct_serve.gather.recipes_git import checkout
    from instinct_serve.paths import cache_dir

    try:
        co = checkout(url, Path(cache_dir()) / "reference-git", host=host)
        if not (co.path / MASTER_FILE).is_file():
            raise ValueError(f"no {MASTER_FILE}: not an InferenceX repository")
        doc = build_references(co.path, source="git", commit=co.commit, date=co.commit_date)
        path = write_references(doc)
    except InstinctError as exc:
        return {"url": url, "error": exc.message}
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return {"url": url, "error": str(exc)}
    return {"url": url, "commit": co.commit, "configs": len(doc["configs"]), "path": path}


def write_references(doc: dict[str, Any], path: str | None = None) -> str:
    """Replace the synced copy atomically (temp file + ``os.replace``) under a file lock."""
    from instinct_serve.gather.recipes_cache import write_locked

    references_from_doc(doc, "<new references>")  # never write what we could not read back
    path = path or cache_path()
    write_locked(path, dumps(doc), ".reference_configs.")
    return path


def load_snapshot() -> References:
    return references_from_doc(json.loads(data_text(SNAPSHOT_FILE)), SNAPSHOT_FILE)


def load_references() -> tuple[References, tuple[str, ...]]:
    """The synced copy when there is one, else the shipped snapshot; and the warnings."""
    path = cache_path()
    try:
        mtime: int | None = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        mtime = None
    except OSError:
        mtime = -1  # there, but not statable: read (and warned about) as unreadable
    return _load(path, mtime)


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime: int | None) -> tuple[References, tuple[str, ...]]:
    if mtime is None:
        return load_snapshot(), ()
    from instinct_serve.paths import read_regular

    try:  # a FIFO, a device, a link loop, an oversized file: OSError (paths.read_regular)
        return references_from_doc(json.loads(read_regular(path)), path), ()
    except (OSError, ValueError, TypeError, KeyError) as exc:
        return load_snapshot(), (
            f"the synced AMD reference configs at {path} are unreadable ({exc}); using the "
            "shipped snapshot",
        )


def reference_for(
    opts: PlanOptions,
    amd: AmdConfig,
    model: str,
    gpu_key: str,
    gpu_count: int,
    ctx: LaunchContext,
    framework: str = "vllm",
) -> ReferenceChoice | None:
    """AMD's configs for the checkpoint served on this GPU (``plan.reference.choose``); the
    fit then sizes the launch as the config runs it (its flags and env after the recipe's,
    before yours)."""
    from instinct_serve.plan.reference import choose, wanted

    refs, _warnings = load_references()
    spec, scenario = wanted(opts)
    choice = choose(refs, model, gpu_key, gpu_count, spec, scenario, framework)
    if choice is None and opts.model.strip() != model:  # the checkpoint named, not served
        choice = choose(refs, opts.model.strip(), gpu_key, gpu_count, spec, scenario, framework)
    if choice is None or choice.config is None:
        return choice
    ctx.launch_args = [*amd.args, *choice.config.args, *opts.extra_args]
    ctx.env = {**amd.env, **choice.config.env, **opts.env_literal}
    ctx.flags_origin = "the plan's flags (the recipe's, AMD's reference config and yours)"
    return choice


def reference_rows(models: list[str], gpu_key: str) -> list[dict[str, Any]]:
    """``plan --list``'s AMD reference rows: each config for these checkpoints on this GPU
    (every server), one row per search-space entry."""
    refs, _warnings = load_references()
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for model in dict.fromkeys(m.strip() for m in models):
        for cfg in refs.for_gpu(model, gpu_key):
            for row in cfg.rows:
                key = (cfg.name, row.label() + str(row.spec) + str(row.isl))
                if key in seen:
                    continue
                seen.add(key)
                rows.append(
                    {
                        "config": cfg.name,
                        "model": cfg.model,
                        "server": cfg.framework,
                        "parallel": row.label(),
                        "tp": row.tp,
                        "ep": row.ep,
                        "dp_attention": row.dp_attn,
                        "speculative": row.spec,
                        "isl": row.isl,
                        "osl": row.osl,
                        "image": cfg.image,
                        "file": cfg.file,
                    }
                )
    return rows
