"""MCP: nothing is launched, stopped or removed without the user's approval of a summary
(issue 26), against the real dockerd and the vLLM test double.

- ``serve`` with confirm=true and no plan_hash is refused (it used to launch);
- ``stop`` without confirm returns what it would stop and remove (with owner, id, model,
  port) and its ``change_hash``, and changes nothing; confirm without the hash, or with
  another one, is refused and changes nothing; with the summary's hash it stops.
"""

from __future__ import annotations

import pytest

from tests.agents.conftest import Call, Client, run_session
from tests.agents.test_mcp_docker import serve_args
from tests.infra.ports import free_port
from tests.serve.conftest import Serve, inspect

pytestmark = pytest.mark.docker


def test_serve_and_stop_take_the_approved_hash_only(serve: Serve) -> None:
    name, port = serve.name("mcp-ok"), free_port()
    args = serve_args(serve, name, port, serve.double())
    running: dict[str, bool] = {}

    def alive(step: str) -> None:
        info = inspect(name)
        running[step] = info is not None and bool(info["State"]["Running"])

    async def scenario(client: Client) -> list[Call]:
        unapproved = await client.call("serve", args)  # confirm=true, no plan_hash
        alive("unapproved")
        served = await client.confirmed("serve", args)
        asked = await client.call("stop", {"names": [name]})
        alive("asked")
        no_hash = await client.call("stop", {"names": [name], "confirm": True})
        alive("no_hash")
        stale = {"names": [name], "confirm": True, "change_hash": "0123456789abcdef"}
        wrong = await client.call("stop", stale)
        alive("wrong")
        approved = {"names": [name], "confirm": True, "change_hash": asked.doc["change_hash"]}
        stopped = await client.call("stop", approved)
        return [unapproved, served, asked, no_hash, wrong, stopped]

    unapproved, served, asked, no_hash, wrong, stopped = run_session(scenario, timeout=240)
    assert unapproved.error["id"] == "approval_required" and unapproved.exit_code == 2
    assert running["unapproved"] is False  # nothing was launched
    assert served.doc["status"] == "ready", served.text[-3000:]

    assert not asked.is_error and asked.doc["done"] is False, asked.text
    change = asked.doc["change"]
    assert change["action"] == "stop" and change["change_hash"] == asked.doc["change_hash"]
    endpoint = change["touch"][0]
    assert (endpoint["kind"], endpoint["name"], endpoint["port"]) == ("container", name, port)
    assert endpoint["owner"] and "@" in endpoint["owner"] and endpoint["id"]
    assert running["asked"] is True

    assert no_hash.error["id"] == "approval_required" and running["no_hash"] is True
    assert wrong.error["id"] == "change_changed" and running["wrong"] is True
    assert wrong.error["details"]["now"] == asked.doc["change_hash"]

    assert not stopped.is_error, stopped.text
    assert [s["name"] for s in stopped.doc["stopped"]] == [name] and inspect(name) is None
