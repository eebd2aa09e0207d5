"""Nothing that runs is destroyed without a confirmation, and ``stop --all`` is the caller's
(issue 26): the real CLI, the real dockerd, the vLLM test double.

- each endpoint carries who started it (``instinct-serve.owner`` = user@host), set at launch;
- ``ps`` and ``stop --all`` default to the caller's own: another user's endpoint is hidden
  (said in the footer), kept running by ``stop --all``, listed with ``--everyone``;
- without a terminal and without ``--yes``, ``stop`` refuses and names what it would touch;
- ``stop a b`` with an unknown name stops the others and reports each name;
- a replica group served again as one endpoint with ``--replace`` goes whole (router and
  every replica), listed in the summary first.

Owners are made unique per test (``LOGNAME``/``USER``, as ``getpass`` reads them), so
``stop --all`` here can only touch this test's own containers on a shared daemon.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.infra.docker import TestImage
from tests.infra.ports import free_port, free_port_run
from tests.serve.conftest import Serve, inspect, run_cli

pytestmark = pytest.mark.docker


def as_user(user: str) -> dict[str, str]:
    return {**os.environ, "LOGNAME": user, "USER": user}


def json_doc(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    return doc


def running(name: str) -> bool:
    info = inspect(name)
    return info is not None and bool(info["State"]["Running"])


def test_stop_all_is_the_callers_and_asks_first(serve: Serve) -> None:
    me, other = f"me{uuid.uuid4().hex[:8]}", f"other{uuid.uuid4().hex[:8]}"
    mine, theirs = serve.name("mine"), serve.name("theirs")
    image = serve.double()
    for name, user in ((mine, me), (theirs, other)):
        run = serve(name=name, image=image, env=as_user(user))
        assert run.returncode == 0, run.explain()
    labels = inspect(mine)["Config"]["Labels"]  # type: ignore[index]
    assert labels["instinct-serve.owner"] == f"{me}@{socket.gethostname()}"

    # ps: mine only, the other user's hidden (and said so); --everyone shows both
    ps = run_cli(["ps", "--json", "--no-health"], env=as_user(me))
    listed = json.loads(ps.stdout)
    names = {row["name"] for row in listed["endpoints"]}
    assert mine in names and theirs not in names and listed["hidden"] >= 1
    human = run_cli(["ps", "--no-health"], env=as_user(me)).stdout
    assert "of other users hidden" in human and "--everyone" in human
    every = run_cli(["ps", "--json", "--no-health", "--everyone"], env=as_user(me))
    owners = {row["name"]: row["owner"] for row in json.loads(every.stdout)["endpoints"]}
    assert owners[theirs] == f"{other}@{socket.gethostname()}"

    # no terminal, no --yes: refused, the summary in the error, nothing stopped
    refused = run_cli(["stop", "--all", "--json"], env=as_user(me))
    error = json_doc(refused.stdout)["error"]
    assert refused.returncode == 2 and error["id"] == "confirmation_required", refused.explain()
    touched = {item["name"] for item in error["details"]["change"]["touch"]}
    assert mine in touched and theirs not in touched
    assert running(mine) and running(theirs)

    stop = run_cli(["stop", "--all", "--yes", "--json"], env=as_user(me))
    assert stop.returncode == 0, stop.explain()
    assert [s["name"] for s in json.loads(stop.stdout)["stopped"]] == [mine]
    assert inspect(mine) is None and running(theirs)  # the other user's work goes on

    # named on purpose: stopped whoever owns it; the unknown name is reported, exit 1
    unknown = f"nothing-{uuid.uuid4().hex[:8]}"
    named = run_cli(["stop", theirs, unknown, "--yes", "--json"], env=as_user(me))
    assert named.returncode == 1, named.explain()
    doc = json.loads(named.stdout)
    assert [s["name"] for s in doc["stopped"]] == [theirs] and inspect(theirs) is None
    assert [(f["name"], f["status"]) for f in doc["not_stopped"]] == [(unknown, "not_found")]


def test_replace_of_a_group_removes_every_member(
    serve: Serve, router_test_image: TestImage
) -> None:
    port = free_port_run(3)
    name = serve.name("regroup")
    members = [f"{name}-r0", f"{name}-r1"]
    serve.names.extend(members)
    image = serve.double()
    extra = ["--gpu-count", "2", "--replicas", "2", "--router-image", router_test_image.tag]
    group = serve(*extra, image=image, name=name, port=port)
    assert group.returncode == 0, group.explain()
    assert all(running(c) for c in (name, *members))

    single = ["--gpu-count", "1", "--replace"]
    asked = serve(*single, image=image, name=name, port=port, yes=False)
    error = asked.result["error"]
    assert asked.returncode == 2 and error["id"] == "confirmation_required", asked.explain()
    touched = {item["name"] for item in error["details"]["change"]["touch"]}
    assert touched == {name, *members}, touched
    assert all(running(c) for c in (name, *members))  # asked, so nothing touched

    replaced = serve(*single, image=image, name=name, port=port)
    assert replaced.returncode == 0 and replaced.result["status"] == "ready", replaced.explain()
    gone = {e["container"] for e in replaced.of("replaced")}
    assert gone == {name}, replaced.explain()
    assert all(inspect(m) is None for m in members), "a replica of the old group was left"
    info = inspect(name)
    assert info is not None and "instinct-serve.role" not in info["Config"]["Labels"]
    ps = json.loads(run_cli(["ps", "--json", "--no-health"]).stdout)
    assert not {row["name"] for row in ps["endpoints"]} & set(members)


def test_serve_replace_without_a_terminal_names_what_it_removes(serve: Serve) -> None:
    """A single endpoint replaced by another plan: the same rule, its container in the
    summary; with --yes it goes."""
    port, name = free_port(), serve.name("rep")
    first = serve(name=name, port=port)
    assert first.returncode == 0, first.explain()
    before = inspect(name)
    assert before is not None
    other = serve.double(load_s=0.2)
    asked = serve("--replace", image=other, name=name, port=port, yes=False)
    error = asked.result["error"]
    assert asked.returncode == 2 and error["id"] == "confirmation_required", asked.explain()
    touch = error["details"]["change"]["touch"]
    assert [(t["kind"], t["name"], t["id"]) for t in touch] == [
        ("container", name, before["Id"][:12])
    ]
    after = inspect(name)
    assert after is not None and after["Id"] == before["Id"]


def test_a_stopped_endpoint_taken_over_by_serve_leaves_its_log(serve: Serve) -> None:
    """A stopped endpoint of ours that holds the name is removed by the next serve (nothing
    runs in it), but its log (why it stopped) is saved beside the journal first and the
    output says where."""
    from tests.serve.conftest import docker

    port, name = free_port(), serve.name("stopped")
    first = serve(name=name, port=port)
    assert first.returncode == 0, first.explain()
    before = inspect(name)
    assert before is not None
    assert docker("stop", "-t", "5", name).returncode == 0  # stopped outside the tool
    again = serve(name=name, port=port)
    assert again.returncode == 0, again.explain()
    after = inspect(name)
    assert after is not None and after["Id"] != before["Id"]
    notes = [e["message"] for e in again.events if e.get("event") == "note"]
    said = [n for n in notes if n.startswith(f"removed {name}, a stopped endpoint")]
    assert len(said) == 1 and "its log kept at " in said[0], notes
    kept = said[0].split("its log kept at ", 1)[1].rstrip(")")
    text = Path(kept).read_text(encoding="utf-8")
    assert "Application startup complete" in text, text[-500:]  # the first run's own log
