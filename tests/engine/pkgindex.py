"""A real PEP 503 "simple" package index on 127.0.0.1, serving wheels the tests build.

Several named indexes share one server: ``/<name>/simple/<project>/``. A vendor-style
index answers **403** for a project it does not host (as AMD's CDN-backed indexes do);
a PyPI-style one answers 404. Every request is recorded, so a test can assert which index
``uv`` asked for which project.
"""

from __future__ import annotations

import hashlib
import html
import http.server
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from tests.engine.wheels import normalize


@dataclass
class Index:
    name: str
    root: Path
    missing_status: int = 404
    wheels: dict[str, list[Path]] = field(default_factory=dict)  # project -> files

    def add(self, *paths: Path) -> Index:
        for path in paths:
            project = normalize(path.name.split("-")[0])
            target = self.root / path.name
            if not target.exists():
                shutil.copyfile(path, target)
            self.wheels.setdefault(project, []).append(target)
        return self


class PackageIndexServer:
    """One threaded HTTP server for all indexes of a test session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.indexes: dict[str, Index] = {}
        self.requests: list[tuple[str, str, int]] = []  # (index, project or file, status)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._handle(self)

            def do_HEAD(self) -> None:
                server._handle(self, head=True)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def url(self, name: str) -> str:
        return f"{self.base}/{name}/simple/"

    def index(self, name: str, *, missing_status: int = 404) -> Index:
        if name in self.indexes:
            raise ValueError(f"index {name} exists")
        root = self.root / name
        root.mkdir(parents=True)
        idx = Index(name, root, missing_status)
        self.indexes[name] = idx
        return idx

    def asked(self, index: str) -> Iterator[tuple[str, int]]:
        for name, what, status in list(self.requests):
            if name == index:
                yield what, status

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _send(
        self, h: http.server.BaseHTTPRequestHandler, status: int, body: bytes, ctype: str
    ) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _handle(self, h: http.server.BaseHTTPRequestHandler, head: bool = False) -> None:
        parts = [unquote(p) for p in h.path.split("?")[0].split("/") if p]
        idx = self.indexes.get(parts[0]) if parts else None
        if idx is None:
            self._send(h, 404, b"no such index", "text/plain")
            return
        if len(parts) == 3 and parts[1] == "files":
            target = idx.root / parts[2]
            status = 200 if target.is_file() else 404
            if not head:
                self.requests.append((idx.name, parts[2], status))
            data = target.read_bytes() if status == 200 else b""
            self._send(h, status, data, "application/octet-stream")
            return
        if len(parts) == 2 and parts[1] == "simple":
            links = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(idx.wheels))
            self._send(h, 200, f"<html><body>{links}</body></html>".encode(), "text/html")
            return
        if len(parts) == 3 and parts[1] == "simple":
            project = normalize(parts[2])
            files = idx.wheels.get(project)
            if not files:
                self.requests.append((idx.name, project, idx.missing_status))
                self._send(h, idx.missing_status, b"AccessDenied", "text/plain")
                return
            self.requests.append((idx.name, project, 200))
            links = []
            for path in sorted(files):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                href = f"../../files/{html.escape(path.name)}#sha256={digest}"
                links.append(f'<a href="{href}">{html.escape(path.name)}</a><br/>')
            body = "<html><body>\n" + "\n".join(links) + "\n</body></html>\n"
            self._send(h, 200, body.encode(), "text/html")
            return
        self._send(h, 404, b"not found", "text/plain")
