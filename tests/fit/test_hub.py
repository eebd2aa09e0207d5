"""The Hub path against a real local HTTP server answering the Hub routes via HF_ENDPOINT.

Routes used by huggingface_hub: ``GET /api/models/{id}`` (model_info with safetensors
counts), ``HEAD``/``GET /{id}/resolve/{sha}/config.json`` (hf_hub_download), and the
search ``GET /api/models?author=&search=`` for quantized siblings.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from instinct_serve.errors import InstinctError, NotReadyError, UsageError
from instinct_serve.gather.model_meta import HUB_DOWN_TTL_S, load_model_meta, quantized_siblings
from instinct_serve.paths import cache_dir
from tests.fit.hubserver import LLAMA, SHA, serve_model


def test_success_then_offline_from_the_cache(
    hub: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_model(hub, "acme/Llama-8B", LLAMA, {"BF16": 8_030_261_248})
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    meta = load_model_meta("acme/Llama-8B")
    assert meta.source == "hub" and meta.weights_source == "hub_safetensors"
    assert meta.revision == SHA and meta.checkpoint_bytes == 16_060_522_496
    assert meta.config["num_hidden_layers"] == 32
    assert meta.source_detail == hub.url_for("/").rstrip("/") + "/acme/Llama-8B"
    assert "hf_secret_value" not in json.dumps(meta.to_dict())
    sent = [r.headers.get("Authorization") for r, _ in hub.log if "/api/models/acme" in r.path]
    assert sent == ["Bearer hf_secret_value"]
    # offline afterwards: the answer was kept in the instinct cache, config in the HF cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.clear()
    again = load_model_meta("acme/Llama-8B")
    assert again.source == "hub_cache" and again.checkpoint_bytes == meta.checkpoint_bytes
    assert not hub.log


def test_hub_without_safetensors_info_counts_config_shapes(hub: HTTPServer) -> None:
    serve_model(hub, "acme/bin-only", LLAMA, None)
    meta = load_model_meta("acme/bin-only")
    assert meta.source == "hub" and meta.weights_source == "config_shapes"
    assert meta.dtype_counts == {"BF16": 8_030_261_248}


def test_gated_without_token_names_the_license_page(hub: HTTPServer) -> None:
    serve_model(hub, "acme/gated-model", LLAMA, {"BF16": 1}, gated=True)
    with pytest.raises(NotReadyError) as err:
        load_model_meta("acme/gated-model")
    license_url = hub.url_for("/").rstrip("/") + "/acme/gated-model"
    assert err.value.id == "gated_model"
    assert license_url in (err.value.fix or "")
    assert "HF_TOKEN" in (err.value.fix or "")
    assert err.value.details["license_url"] == license_url


def test_gated_with_shipped_metadata_falls_back_to_it(hub: HTTPServer) -> None:
    serve_model(hub, "meta-llama/Llama-3.1-8B-Instruct", LLAMA, {"BF16": 1}, gated=True)
    meta = load_model_meta("meta-llama/Llama-3.1-8B-Instruct")
    assert meta.source == "shipped" and meta.gated
    assert any("accept the license" in n for n in meta.notes)


def test_not_found_lists_close_matches(hub: HTTPServer) -> None:
    hub.expect_request("/api/models/acme/nope").respond_with_data(
        "not found", status=404, headers={"X-Error-Code": "RepoNotFound"}
    )
    with pytest.raises(UsageError) as err:
        load_model_meta("acme/nope", suggest=lambda _m: ["acme/yes", "acme/nope-2"])
    assert err.value.id == "model_not_found"
    assert "acme/yes" in (err.value.fix or "")
    assert err.value.details["close_matches"] == ["acme/yes", "acme/nope-2"]


def _slow(_request: Request) -> Response:
    threading.Event().wait(1.0)
    return Response("{}", content_type="application/json")


def test_timeout_without_offline_metadata(hub: HTTPServer) -> None:
    hub.expect_request("/api/models/acme/slow").respond_with_handler(_slow)
    with pytest.raises(NotReadyError) as err:
        load_model_meta("acme/slow", timeout=0.2)
    assert err.value.id == "model_metadata_unavailable"
    assert "unreachable" in err.value.message.lower()


def test_timeout_falls_back_to_shipped_metadata(hub: HTTPServer) -> None:
    hub.expect_request("/api/models/Qwen/Qwen3.5-9B").respond_with_handler(_slow)
    meta = load_model_meta("Qwen/Qwen3.5-9B", timeout=0.2)
    assert meta.source == "shipped"
    assert any("Hub unreachable" in n for n in meta.notes)


def test_an_unreachable_hub_is_not_asked_again_for_a_while(hub: HTTPServer) -> None:
    """On a firewalled host each command would wait on the network again: the failure is
    remembered when another source has the model, and forgotten after HUB_DOWN_TTL_S."""
    asked: list[str] = []

    def slow(request: Request) -> Response:
        asked.append(request.path)
        threading.Event().wait(0.4)  # past the client's 0.2 s: unreachable
        return Response("{}", content_type="application/json")

    def seen(path: str) -> bool:
        for _ in range(30):  # the test server answers one request at a time
            if path in asked:
                return True
            time.sleep(0.1)
        return False

    hub.expect_request("/api/models/Qwen/Qwen3.5-9B").respond_with_handler(slow)
    assert load_model_meta("Qwen/Qwen3.5-9B", timeout=0.2).source == "shipped"
    assert seen("/api/models/Qwen/Qwen3.5-9B") and len(asked) == 1
    start = time.monotonic()
    again = load_model_meta("Qwen/Qwen3.5-9B", timeout=0.2)
    assert time.monotonic() - start < 0.2 and len(asked) == 1  # not asked
    assert again.source == "shipped"
    assert any(n.startswith("Hub unreachable") and "not asked again" in n for n in again.notes)

    # a model that only the Hub can describe is still asked
    hub.expect_request("/api/models/acme/slow").respond_with_handler(slow)
    with pytest.raises(NotReadyError):
        load_model_meta("acme/slow", timeout=0.2)
    assert seen("/api/models/acme/slow")

    # once the memory is old the Hub is asked again; an answer clears it
    marker = cache_dir() / "hub_unreachable.json"
    doc = json.loads(marker.read_text())
    doc["at"] -= HUB_DOWN_TTL_S + 1
    marker.write_text(json.dumps(doc))
    serve_model(hub, "acme/Back", LLAMA, {"BF16": 8_030_261_248})
    assert load_model_meta("acme/Back").source == "hub"
    assert not marker.exists()


def test_offline_unknown_model_is_not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InstinctError) as err:
        load_model_meta("acme/unknown-model", suggest=lambda _m: ["Qwen/Qwen3.5-9B"])
    assert err.value.id == "model_metadata_unavailable"
    assert "Qwen/Qwen3.5-9B" in (err.value.fix or "")


def test_quantized_siblings_from_the_search_route(hub: HTTPServer) -> None:
    def search(request: Request) -> Response:
        author = request.args.get("author")
        rows = {
            "acme": [
                {"id": "acme/Big-70B-FP8"},
                {"id": "acme/Big-70B-Base"},
                {"id": "acme/Big-70B"},
            ],
            "amd": [{"id": "amd/Big-70B-MXFP4"}, {"id": "amd/Other-FP8"}],
        }.get(author or "", [])
        return Response(json.dumps(rows), content_type="application/json")

    hub.expect_request("/api/models").respond_with_handler(search)
    assert quantized_siblings("acme/Big-70B") == ["acme/Big-70B-FP8", "amd/Big-70B-MXFP4"]


def test_repo_without_config_json(hub: HTTPServer) -> None:
    hub.expect_request("/api/models/acme/mistral-format").respond_with_json(
        {"id": "acme/mistral-format", "sha": SHA}
    )
    hub.expect_request(f"/acme/mistral-format/resolve/{SHA}/config.json").respond_with_data(
        "Entry not found", status=404, headers={"X-Error-Code": "EntryNotFound"}
    )
    with pytest.raises(UsageError) as err:
        load_model_meta("acme/mistral-format")
    assert err.value.id == "no_config"


def test_forbidden_is_a_clear_error(hub: HTTPServer) -> None:
    hub.expect_request("/api/models/acme/private").respond_with_data("forbidden", status=403)
    with pytest.raises(NotReadyError) as err:
        load_model_meta("acme/private")
    assert err.value.id == "hub_refused" and "403" in err.value.message


def test_a_week_old_answer_is_asked_again(hub: HTTPServer) -> None:
    serve_model(hub, "acme/Aging", LLAMA, {"BF16": 8_030_261_248})
    assert load_model_meta("acme/Aging").source == "hub"
    assert load_model_meta("acme/Aging").source == "hub_cache"  # fresh: not asked again
    kept = cache_dir() / "models" / "acme--Aging.json"
    week_ago = time.time() - 8 * 24 * 3600
    os.utime(kept, (week_ago, week_ago))
    assert load_model_meta("acme/Aging").source == "hub"  # stale: asked again
    os.utime(kept, (week_ago, week_ago))
    hub.clear()
    hub.expect_request("/api/models/acme/Aging").respond_with_handler(_slow)
    stale = load_model_meta("acme/Aging", timeout=0.2)  # unreachable: the stale answer
    assert stale.source == "hub_cache" and any("Hub unreachable" in n for n in stale.notes)
