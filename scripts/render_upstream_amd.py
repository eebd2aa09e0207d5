"""Write upstream's AMD renderings of the vendored recipes snapshot to a JSON file.

The renderings come from ``tests/plan/upstream_render.py`` (a re-implementation of
vllm-project/recipes' command builder) run over ``tests/data/vllm-recipes`` (upstream commit
8959cf64): one entry per API page (a recipe, or a promoted variant) and AMD GPU, with the
argv, env, image, strategy, node count and TP upstream publishes, plus the AMD GPUs upstream
gives no page, with the reason. The output is deterministic (sorted; one rendering per line),
so a change in the renderer or the corpus shows as a readable diff.

Run: .venv/bin/python scripts/render_upstream_amd.py [--out PATH] [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "data" / "upstream_rendered_amd.json"


def dumps(doc: dict[str, Any]) -> str:
    """Sorted keys; each rendering and each not-rendered entry on its own line."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"  {json.dumps(key)}: [")
            for j, entry in enumerate(value):
                sep = "," if j < len(value) - 1 else ""
                text = json.dumps(entry, sort_keys=True, ensure_ascii=False)
                lines.append(f"    {text}{sep}")
            lines.append(f"  ]{comma}")
        else:
            text = json.dumps(value, sort_keys=True, ensure_ascii=False)
            lines.append(f"  {json.dumps(key)}: {text}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def build() -> str:
    sys.path.insert(0, str(ROOT))
    from tests.plan.upstream_render import document, load_corpus, render_all

    corpus = load_corpus()
    hardware = corpus.amd_hardware()
    renderings, missing = render_all(corpus, hardware)
    return dumps(document(renderings, missing, hardware))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    args = parser.parse_args()
    text = build()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: rerun scripts/render_upstream_amd.py")
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text, encoding="utf-8")
    doc = json.loads(text)
    print(
        f"wrote {args.out}: {doc['rendering_count']} renderings on {', '.join(doc['hardware'])}, "
        f"{len(doc['not_rendered'])} AMD GPUs without a page"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
