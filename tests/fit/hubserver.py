"""A Hub on 127.0.0.1 for the fit tests: the routes huggingface_hub calls, real HTTP."""

from __future__ import annotations

import json
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from tests.infra.paths import CONFIGS

SHA = "c0ffee00" * 5
LLAMA: dict[str, Any] = json.loads((CONFIGS / "meta-llama__Meta-Llama-3.1-8B.json").read_text())


def serve_model(
    server: HTTPServer,
    repo: str,
    config: dict[str, Any],
    parameters: dict[str, int] | None,
    *,
    gated: bool = False,
) -> None:
    info: dict[str, Any] = {"id": repo, "sha": SHA, "gated": "manual" if gated else False}
    if parameters is not None:
        info["safetensors"] = {"parameters": parameters, "total": sum(parameters.values())}
    server.expect_request(f"/api/models/{repo}").respond_with_json(info)
    body = json.dumps(config).encode()

    def resolve(request: Request) -> Response:
        if gated and request.headers.get("Authorization") is None:
            return Response(
                "Access to model is restricted",
                status=401,
                headers={"X-Error-Code": "GatedRepo", "X-Error-Message": "gated"},
            )
        # werkzeug drops the body of a HEAD answer but keeps its Content-Length
        return Response(
            body,
            headers={"ETag": '"cfg-etag"', "X-Repo-Commit": SHA},
            content_type="application/json",
        )

    server.expect_request(f"/{repo}/resolve/{SHA}/config.json").respond_with_handler(resolve)
