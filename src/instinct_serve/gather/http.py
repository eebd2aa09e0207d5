"""One GET, and what its failures mean: HTTP trouble mapped to an ``InstinctError``.

Every client of an HTTP service here (the recipes API, Docker Hub's tags, a vLLM's
``/metrics`` and ``/v1/models``) meets the same three failures: the service cannot be
reached, it answers another status than 200, its body is not JSON. ``get`` and
``json_body`` catch them in one place; each service only words its errors
(``HttpErrors``), so its error ids and messages stay its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import InstinctError

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class HttpErrors:
    """How one service's failures read: each field builds the error to raise."""

    unreachable: Callable[[str, Exception], InstinctError]  # (url, the transport error)
    status: Callable[[str, httpx.Response], InstinctError]  # (url, an answer not 200)
    bad_json: Callable[[str], InstinctError] | None = None  # (url)


def get(
    client: httpx.Client, url: str, errors: HttpErrors, *, also_ok: tuple[int, ...] = ()
) -> httpx.Response:
    """``GET url``: the answer when its status is 200 (or in ``also_ok``), else the
    service's error; a transport failure (refused, reset, timed out) is ``unreachable``."""
    import httpx

    try:
        resp = client.get(url)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL: not an HTTPError
        raise errors.unreachable(url, exc) from exc
    if resp.status_code != 200 and resp.status_code not in also_ok:
        raise errors.status(url, resp)
    return resp


def json_body(resp: httpx.Response, url: str, errors: HttpErrors) -> Any:
    """The answer's JSON; ``bad_json`` (or the ValueError itself, when unset) if it is not."""
    try:
        return resp.json()
    except ValueError as exc:
        if errors.bad_json is None:
            raise
        raise errors.bad_json(url) from exc
