"""Regenerate ``src/instinct_serve/data/reference_snapshot.json`` from an InferenceX checkout
(the AMD subset in the shared data directory; ``SOURCE.md`` there names the commit).

Run: .venv/bin/python tests/infra/build_reference_snapshot.py [ROOT] [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = REPO / "src" / "instinct_serve" / "data" / "reference_snapshot.json"
DEFAULT_ROOTS = (
    REPO.parent / "shared" / "data" / "inferencex",
    Path("/work/shared/data/inferencex"),
)


def default_root() -> Path | None:
    return next((p for p in DEFAULT_ROOTS if (p / "configs").is_dir()), None)


def render(root: Path) -> str:
    from instinct_serve.gather.reference import build_references, dumps

    return dumps(build_references(root))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", nargs="?", type=Path, default=None)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    root = args.root or default_root()
    if root is None:
        print("no InferenceX checkout found; pass its path", file=sys.stderr)
        return 2
    text = render(root)
    if args.check:
        same = SNAPSHOT.read_text(encoding="utf-8") == text
        print("snapshot up to date" if same else "snapshot differs from its source")
        return 0 if same else 1
    SNAPSHOT.write_text(text, encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
