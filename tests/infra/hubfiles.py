"""A Hugging Face Hub stand-in on 127.0.0.1 that serves whole repositories (tests): the
routes ``snapshot_download`` of huggingface_hub calls, with file bodies paced to a rate.

``tests/fit/hubserver.py`` answers the metadata routes the fit tests need; downloads need
more: the repository's revision (``/api/models/R/revision/REV``), its file tree
(``/api/models/R/tree/REV``, with sizes and LFS entries) and ``/R/resolve/REV/FILE`` for
HEAD (commit, ETag, size headers) and GET (``Range`` honoured, for clients that resume).
No Xet headers are sent, so the plain HTTP path is used even where ``hf_xet`` is installed.
Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

SHA = "feedbeef" * 5
LFS_MIN = 1024  # files this large are LFS entries (the Hub's threshold is larger)


@dataclass
class Hub:
    port: int
    repo: str
    files: dict[str, bytes]
    rate: float
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gets(self, name: str) -> list[str | None]:
        """The Range headers of the GETs of one file (None: from the start)."""
        return [
            r for m, p, r in self.requests if m == "GET" and p.endswith(f"/resolve/{SHA}/{name}")
        ]


def _entry(name: str, data: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "type": "file",
        "oid": hashlib.sha1(data).hexdigest(),
        "size": len(data),
        "path": name,
    }
    if len(data) >= LFS_MIN:
        doc["lfs"] = {
            "oid": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "pointerSize": 134,
        }
    return doc


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _json(self, doc: Any, body: bool) -> None:
            data = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _answer(self, body: bool) -> None:
            hub.requests.append((self.command, self.path, self.headers.get("Range")))
            path = unquote(self.path.split("?", 1)[0])
            api = f"/api/models/{hub.repo}"
            if path == api or path.startswith(f"{api}/revision/"):
                siblings = [{"rfilename": n} for n in sorted(hub.files)]
                self._json({"id": hub.repo, "sha": SHA, "siblings": siblings}, body)
                return
            if path.startswith(f"{api}/tree/"):
                self._json([_entry(n, d) for n, d in sorted(hub.files.items())], body)
                return
            prefix = f"/{hub.repo}/resolve/"
            if path.startswith(prefix):
                name = path[len(prefix) :].split("/", 1)[-1]
                if name in hub.files:
                    self._file(name, hub.files[name], body)
                    return
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _file(self, name: str, data: bytes, body: bool) -> None:
            entry = _entry(name, data)
            etag = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
            start = 0
            rng = self.headers.get("Range") or ""
            if rng.startswith("bytes=") and rng[6:].split("-")[0].isdigit():
                start = min(int(rng[6:].split("-")[0]), len(data))
            part = data[start:]
            self.send_response(206 if start else 200)
            self.send_header("X-Repo-Commit", SHA)
            self.send_header("ETag", f'"{etag}"')
            if "lfs" in entry:
                self.send_header("X-Linked-Etag", f'"{etag}"')
                self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("Content-Length", str(len(part)))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not body:
                return
            chunk = 64 * 1024
            began = time.monotonic()
            try:
                for offset in range(0, len(part), chunk):
                    self.wfile.write(part[offset : offset + chunk])
                    delay = began + (offset + chunk) / hub.rate - time.monotonic()
                    if delay > 0:
                        time.sleep(min(delay, 5.0))
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

    return Handler


@contextmanager
def hub_repo(repo: str, files: Mapping[str, bytes], *, rate: float = 4 * 2**20) -> Iterator[Hub]:
    """A Hub stand-in serving ``repo`` with ``files`` on a free port of 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    hub = Hub(server.server_address[1], repo, dict(files), rate)
    server.RequestHandlerClass = _handler(hub)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
