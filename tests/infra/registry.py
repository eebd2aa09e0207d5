"""A Docker registry stand-in on 127.0.0.1 (tests): the read side of the Registry HTTP API
V2 that ``docker pull`` speaks, serving one image made here, at a set rate.

dockerd treats 127.0.0.0/8 registries as insecure (plain HTTP) by default, so the real
daemon pulls ``127.0.0.1:PORT/NAME:TAG`` from it. The image is one gzipped layer holding a
file of random bytes (``layer_bytes``) and a minimal config; blobs go out in chunks paced
to ``rate`` bytes per second, so a pull takes a known, measurable time. Every request is
recorded (method, path, Range) for the tests.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Registry:
    """The running stand-in: where it listens and what it served."""

    port: int
    name: str
    tag: str
    manifest: bytes
    blobs: dict[str, bytes]
    rate: float
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)

    @property
    def image(self) -> str:
        return f"127.0.0.1:{self.port}/{self.name}:{self.tag}"

    @property
    def compressed_bytes(self) -> int:
        doc: dict[str, Any] = json.loads(self.manifest)
        return int(doc["config"]["size"]) + sum(int(x["size"]) for x in doc["layers"])


def build_image(layer_bytes: int, seed: str) -> tuple[bytes, dict[str, bytes]]:
    """(manifest, blobs by digest) of a one-layer image; ``seed`` makes it unique."""
    payload = hashlib.sha256(seed.encode()).digest() + os.urandom(layer_bytes)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("data/payload.bin")
        info.size = len(payload)
        info.mtime = 0
        tar.addfile(info, io.BytesIO(payload))
    layer_tar = raw.getvalue()
    layer = gzip.compress(layer_tar, compresslevel=1, mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/bin/true"], "Labels": {"instinct-serve-test": seed}},
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer_tar)]},
            "history": [{"created_by": "tests/infra/registry.py"}],
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "size": len(config), "digest": _digest(config)},
            "layers": [{"mediaType": LAYER_TYPE, "size": len(layer), "digest": _digest(layer)}],
        }
    ).encode()
    return manifest, {_digest(config): config, _digest(layer): layer}


def _handler(reg: Registry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _head(self, code: int, headers: dict[str, str]) -> None:
            self.send_response(code)
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()

        def _answer(self, body: bool) -> None:
            reg.requests.append((self.command, self.path, self.headers.get("Range")))
            path = self.path.split("?", 1)[0]
            prefix = f"/v2/{reg.name}/"
            if path in ("/v2/", "/v2"):
                self._head(200, {"Content-Length": "2", "Content-Type": "application/json"})
                if body:
                    self.wfile.write(b"{}")
                return
            if path == f"{prefix}manifests/{reg.tag}" or path == (
                f"{prefix}manifests/{_digest(reg.manifest)}"
            ):
                headers = {
                    "Content-Type": MANIFEST_TYPE,
                    "Content-Length": str(len(reg.manifest)),
                    "Docker-Content-Digest": _digest(reg.manifest),
                }
                self._head(200, headers)
                if body:
                    self.wfile.write(reg.manifest)
                return
            if path.startswith(f"{prefix}blobs/") and path[len(prefix) + 6 :] in reg.blobs:
                data = reg.blobs[path[len(prefix) + 6 :]]
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes=") and rng[6:].split("-")[0].isdigit():
                    start = min(int(rng[6:].split("-")[0]), len(data))
                part = data[start:]
                headers = {
                    "Content-Type": "application/octet-stream",
                    "Content-Length": str(len(part)),
                    "Docker-Content-Digest": _digest(data),
                }
                if start:
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                self._head(206 if start else 200, headers)
                if body:
                    self._paced(part)
                return
            message = b'{"errors":[{"code":"NAME_UNKNOWN","message":"unknown"}]}'
            self._head(
                404, {"Content-Type": "application/json", "Content-Length": str(len(message))}
            )
            if body:
                self.wfile.write(message)

        def _paced(self, data: bytes) -> None:
            chunk = 64 * 1024
            began = time.monotonic()
            for offset in range(0, len(data), chunk):
                self.wfile.write(data[offset : offset + chunk])
                due = began + (offset + chunk) / reg.rate
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(min(delay, 5.0))

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

    return Handler


@contextmanager
def registry(
    *, layer_bytes: int = 4 * 2**20, rate: float = 2 * 2**20, name: str = "instinct-test/pullme"
) -> Iterator[Registry]:
    """A registry stand-in on a free port of 127.0.0.1, for the ``with`` block."""
    seed = os.urandom(8).hex()
    manifest, blobs = build_image(layer_bytes, seed)
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    reg = Registry(server.server_address[1], name, seed[:8], manifest, blobs, rate)
    server.RequestHandlerClass = _handler(reg)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield reg
    finally:
        server.shutdown()
        server.server_close()
