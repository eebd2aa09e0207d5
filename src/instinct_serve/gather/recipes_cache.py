"""Writing the recipes cache: whole, atomically, under a file lock (the reading and the
document's format are ``catalog.store``'s)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from instinct_serve.catalog.store import cache_path, catalog_from_doc, dumps_document, forget_loaded


def write_cache(doc: dict[str, Any], path: str | None = None) -> str:
    """Replace the cache atomically (temp file + ``os.replace``) under a file lock."""
    catalog_from_doc(doc, "<new cache>")  # never write what we could not read back
    path = path or cache_path()
    write_locked(path, dumps_document(doc), ".recipes_cache.")
    forget_loaded()
    return path


def write_locked(path: str, text: str, prefix: str) -> None:
    """``text`` as the whole of ``path``: a temp file beside it (``prefix``), synced, then
    ``os.replace``d, under ``path.lock``; a reader sees the old file or the new one. The
    recipes cache and AMD's reference configs are written so."""
    import tempfile

    from filelock import FileLock

    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    with FileLock(path + ".lock", timeout=60):
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=".tmp")
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
