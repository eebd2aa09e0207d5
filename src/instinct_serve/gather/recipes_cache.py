"""Writing the recipes cache: whole, atomically, under a file lock (the reading and the
document's format are ``catalog.store``'s)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from instinct_serve.catalog.store import cache_path, catalog_from_doc, dumps_document, forget_loaded


def write_cache(doc: dict[str, Any], path: str | None = None) -> str:
    """Replace the cache atomically (temp file + ``os.replace``) under a file lock."""
    import tempfile

    from filelock import FileLock

    catalog_from_doc(doc, "<new cache>")  # never write what we could not read back
    path = path or cache_path()
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    text = dumps_document(doc)
    with FileLock(path + ".lock", timeout=60):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".recipes_cache.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    forget_loaded()
    return path
