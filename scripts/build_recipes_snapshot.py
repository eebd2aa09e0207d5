#!/usr/bin/env python3
"""Regenerate the recipes snapshot shipped in the package from a recipes checkout.

    python scripts/build_recipes_snapshot.py                      # tests/data/vllm-recipes
    python scripts/build_recipes_snapshot.py --corpus ~/recipes --date 2026-09-01T00:00:00Z
    python scripts/build_recipes_snapshot.py --check              # exit 1 if out of date

The commit and its date come from the checkout's SOURCE.md (our provenance file), else from
git when the corpus is the top of a git clone, else from --commit/--date. Also validates the
shipped gpu_overrides.json and blacklist.json, so a bad edit there fails here first.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

DEFAULT_CORPUS = REPO / "tests" / "data" / "vllm-recipes"
DEFAULT_OUT = REPO / "src" / "instinct_serve" / "data" / "recipes_snapshot.json"


def _git_identity(corpus: Path) -> tuple[str | None, str | None]:
    """Commit and date when ``corpus`` is itself the top of a git clone (not a subfolder)."""
    try:
        top = subprocess.run(
            ["git", "-C", str(corpus), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
        if Path(top).resolve() != corpus.resolve():
            return None, None
        out = subprocess.run(
            ["git", "-C", str(corpus), "log", "-1", "--format=%H %cI"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None, None
    return (out[0], out[1]) if len(out) == 2 else (None, None)


def main(argv: list[str] | None = None) -> int:
    import json

    from instinct_serve.catalog.overrides import data_text
    from instinct_serve.catalog.schema import validate_blacklist, validate_gpu_overrides
    from instinct_serve.catalog.snapshot import build_snapshot, read_source_md
    from instinct_serve.catalog.store import dumps_document

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--corpus", type=Path, default=DEFAULT_CORPUS, help="recipes checkout (has models/)"
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--commit", help="upstream commit of the corpus")
    ap.add_argument("--date", help="commit date (ISO-8601): the snapshot's fetched_at")
    ap.add_argument("--docker-tag", help="default vllm/vllm-openai-rocm tag (default: inferred)")
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing")
    args = ap.parse_args(argv)

    validate_gpu_overrides(json.loads(data_text("gpu_overrides.json")))
    validate_blacklist(json.loads(data_text("blacklist.json")))

    commit, date = args.commit, args.date
    if not (commit and date):
        src_commit, src_date = read_source_md(args.corpus)
        if not (src_commit and src_date):
            src_commit, src_date = _git_identity(args.corpus)
        commit, date = commit or src_commit, date or src_date
    doc = build_snapshot(args.corpus, commit=commit, date=date, docker_tag=args.docker_tag)
    text = dumps_document(doc)
    for item in doc["skipped"]:
        print(f"warning: skipped {item['path']}: {item['reason']}", file=sys.stderr)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date ({doc['model_count']} recipes)")
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(
        f"wrote {args.out}: {doc['model_count']} recipes, {len(doc['skipped'])} skipped, "
        f"{len(text.encode())} bytes, image {doc['docker_image']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
