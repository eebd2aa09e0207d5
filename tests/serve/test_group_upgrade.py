"""``serve --upgrade`` of a replica group: the new replicas start beside the old ones, are
proven, and HAProxy (the router test image, real dockerd) is pointed at them by a graceful
reload, so the router's port never stops answering; ``rollback`` swaps back the same way.
A bad candidate leaves the old group as it was. Clients keep sending requests through the
router meanwhile (bounded in count and time) and every one must succeed; the counts and the
switch time are printed (``-s``) for the report."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.infra.docker import TestImage
from tests.infra.ports import free_port, free_port_run
from tests.serve.conftest import MODEL, Run, Serve, inspect, parse_lines, run_cli

pytestmark = pytest.mark.docker

REPLICAS = 2
CLIENT_DEADLINE_S = 240.0
CLIENT_MAX_REQUESTS = 20_000
HALF = ["--", "--gpu-memory-utilization", "0.45"]  # old and new fit on the same GPUs


@dataclass
class Clients:
    """Two clients sending completions through the router until stopped: one keeps its
    connection alive (as an SDK does), one opens a new connection per request."""

    port: int
    results: list[tuple[float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def _loop(self, keep_alive: bool) -> None:
        url = f"http://127.0.0.1:{self.port}/v1/completions"
        body = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4}
        started = time.monotonic()
        with httpx.Client(timeout=30) as http:
            while not self.stop.is_set() and time.monotonic() - started < CLIENT_DEADLINE_S:
                if len(self.results) >= CLIENT_MAX_REQUESTS:
                    break
                try:
                    if keep_alive:
                        outcome = str(http.post(url, json=body).status_code)
                    else:
                        outcome = str(httpx.post(url, json=body, timeout=30).status_code)
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                self.results.append((time.monotonic(), outcome))

    def __enter__(self) -> Clients:
        for keep in (True, False):
            thread = threading.Thread(target=self._loop, args=(keep,), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def failures(self) -> list[str]:
        return [o for _, o in self.results if o != "200"]


def served(port: int) -> float:
    """Requests a replica finished (the double's ``vllm:request_success_total``)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    return sum(float(v) for v in found)


def members(run: Run) -> list[dict[str, Any]]:
    return list(run.result["replicas"]["members"])


def journal(name: str) -> list[dict[str, Any]]:
    path = Path(os.environ["INSTINCT_DATA_DIR"]) / "events" / f"{name}.jsonl"
    return parse_lines(path.read_text()) if path.exists() else []


def ids(names: list[str]) -> list[tuple[str, str]]:
    found = []
    for container in names:
        info = inspect(container)
        assert info is not None, container
        found.append((info["Id"], info["State"]["StartedAt"]))
    return found


@pytest.mark.parametrize("replicas", [REPLICAS, 1])
def test_upgrade_behind_the_router_fails_no_request_and_rollback_swaps_back(
    serve: Serve, router_test_image: TestImage, replicas: int
) -> None:
    port, name = free_port_run(replicas + 1), serve.name("gup")
    old_names = [f"{name}-r{i}" for i in range(replicas)]
    new_names = [f"{name}-next-r{i}" for i in range(replicas)]
    serve.names.extend(old_names + new_names)
    # one replica: `--router` puts HAProxy in front of it all the same
    group = ["--gpu-count", str(replicas)]
    group += ["--replicas", str(replicas)] if replicas > 1 else ["--router"]
    group += ["--router-image", router_test_image.tag]
    old_image = serve.double(load_s=1.0, VLLM_DOUBLE_BIND="late")
    new_image = serve.double(load_s=1.0, VLLM_DOUBLE_BIND="late", VLLM_DOUBLE_SALAD="repeat")
    first = serve(*group, *HALF, image=old_image, name=name, port=port)
    assert first.returncode == 0, first.explain()
    assert [m["name"] for m in members(first)] == old_names
    router = inspect(name)
    assert router is not None and router["Args"][:2] == ["-W", "-db"]  # master-worker

    with Clients(port) as clients:
        time.sleep(0.5)  # traffic before the upgrade starts
        began = time.monotonic()
        run = serve("--upgrade", *group, *HALF, image=new_image, name=name, port=port)
        ended = time.monotonic()
        time.sleep(0.5)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["status"] == "ready", run.explain()
    during = [o for t, o in clients.results if began <= t <= ended]
    figures = result["figures"]
    print(
        f"\nupgrade behind the router, {replicas} replica(s): {len(clients.results)} "
        f"requests in all, {len(during)} during the upgrade, failed: {clients.failures()}; "
        f"switch (config written → new worker) {figures['switch_s']} s, "
        f"drain {figures['drain_s']} s, whole upgrade {ended - began:.1f} s"
    )
    assert clients.failures() == [] and len(during) > 0
    assert figures["drained"] is True and 0 < figures["switch_s"] < 30

    # the router was kept (same container, never restarted); the replicas were swapped
    after = inspect(name)
    assert after is not None and after["Id"] == router["Id"] and after["RestartCount"] == 0
    assert after["State"]["StartedAt"] == router["State"]["StartedAt"]
    assert all(inspect(n) is None for n in old_names)
    new_members = members(run)
    assert [m["name"] for m in new_members] == new_names
    new_ports = [m["port"] for m in new_members]
    assert not set(new_ports) & {m["port"] for m in members(first)}
    for member in new_names:
        info = inspect(member)
        assert info is not None and info["Config"]["Image"] == new_image
    before = sum(served(p) for p in new_ports)
    codes = [
        httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            json={"model": MODEL, "prompt": "Hi", "max_tokens": 2},
            timeout=10,
        ).status_code
        for _ in range(10)
    ]
    assert codes == [200] * 10
    assert sum(served(p) for p in new_ports) - before == 10, "the new replicas answer"
    config = Path(os.environ["INSTINCT_DATA_DIR"]) / "groups" / f"{name}.haproxy.cfg"
    assert all(f"127.0.0.1:{p} check" in config.read_text() for p in new_ports)
    upgraded = [e for e in journal(name) if e["kind"] == "upgraded"]
    assert upgraded and upgraded[-1]["replicas"] == new_names

    ps = run_cli(["ps", "--json", "--no-health"])
    rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
    assert [m["name"] for m in rows[name]["members"]] == new_names

    # serving the new plan again finds the group where the upgrade put it
    again = serve(*group, *HALF, image=new_image, name=name, port=port)
    assert again.returncode == 0, again.explain()
    assert again.result["status"] == "reused" and not again.of("launched"), again.explain()
    # another plan without --upgrade: the moved replicas are not left running beside it
    other = serve(*group, *HALF, image=old_image, name=name, port=port)
    assert other.returncode == 3, other.explain()
    assert other.result["error"]["id"] == "container_name_conflict", other.explain()
    assert "--upgrade" in other.result["error"]["fix"]
    assert all(inspect(n) is None for n in old_names)

    # rollback: the old plan's replicas beside the new ones, then the same swap
    with Clients(port) as clients:
        began = time.monotonic()
        back = run_cli(
            ["rollback", "--yes", name, "--root", str(serve.root), "--json"], timeout=180
        )
        ended = time.monotonic()
    assert back.returncode == 0, back.explain()
    rolled = parse_lines(back.stdout)[-1]
    assert rolled["status"] == "ready", back.stdout
    print(
        f"rollback behind the router: {len(clients.results)} requests, failed: "
        f"{clients.failures()}; switch {rolled['figures']['switch_s']} s, whole rollback "
        f"{ended - began:.1f} s"
    )
    assert clients.failures() == [] and len(clients.results) > 0
    assert [m["name"] for m in rolled["replicas"]["members"]] == old_names
    for member in old_names:
        info = inspect(member)
        assert info is not None and info["Config"]["Image"] == old_image
    assert all(inspect(n) is None for n in new_names)
    final = inspect(name)
    assert final is not None and final["Id"] == router["Id"]
    assert [e["kind"] for e in journal(name)][-1] == "rolled_back"

    stop = run_cli(["stop", "--yes", name, "--json"])
    assert stop.returncode == 0, stop.explain()
    assert all(inspect(c) is None for c in (name, *old_names, *new_names))


def test_a_bad_candidate_leaves_the_group_untouched(
    serve: Serve, router_test_image: TestImage
) -> None:
    port, name = free_port_run(REPLICAS + 1), serve.name("gbad")
    old_names = [f"{name}-r{i}" for i in range(REPLICAS)]
    new_names = [f"{name}-next-r{i}" for i in range(REPLICAS)]
    serve.names.extend(old_names + new_names)
    common = ["--gpu-count", "4", "--replicas", str(REPLICAS)]
    common += ["--router-image", router_test_image.tag]
    first = serve(*common, "--gpus", "0,1", image=serve.double(load_s=0.5), name=name, port=port)
    assert first.returncode == 0, first.explain()
    router = inspect(name)
    assert router is not None
    before = ids([name, *old_names])
    config = Path(os.environ["INSTINCT_DATA_DIR"]) / "groups" / f"{name}.haproxy.cfg"
    config_before = config.read_text()

    # a GPU shared at vLLM's default share (0.9): old and new cannot run together there,
    # and the replicas' GPU sets differ, so they cannot be replaced one by one either
    crowded = serve(
        "--upgrade",
        *common,
        "--gpus",
        "1,2",
        image=serve.double("incoherent"),
        name=name,
        port=port,
    )
    assert crowded.returncode == 2, crowded.explain()
    assert crowded.result["error"]["id"] == "upgrade_does_not_fit", crowded.explain()
    assert all(inspect(n) is None for n in new_names)  # refused before starting anything
    elsewhere = serve("--upgrade", *common, "--gpus", "2,3", name=name, port=free_port())
    assert elsewhere.returncode == 2, elsewhere.explain()
    assert "keeps the router and its address" in elsewhere.result["error"]["message"]

    # other GPUs: the candidates start, one is incoherent: nothing changes for clients
    with Clients(port) as clients:
        run = serve(
            "--upgrade",
            *common,
            "--gpus",
            "2,3",
            image=serve.double("incoherent", load_s=0.5),
            name=name,
            port=port,
        )
    assert run.returncode == 1, run.explain()
    assert run.result["status"] == "failed", run.explain()
    notes = run.result.get("notes", [])
    assert any("still serves the old plan, untouched" in n for n in notes), run.explain()
    assert clients.failures() == [] and len(clients.results) > 0
    assert ids([name, *old_names]) == before
    assert config.read_text() == config_before
    left = [inspect(n) for n in new_names]
    kept = [info for info in left if info is not None]
    assert len(kept) == 1 and not kept[0]["State"]["Running"]  # the failed one, for its log
    assert [e["kind"] for e in journal(name)][-1] == "upgrade_failed"
    print(f"\nbad candidate: {len(clients.results)} requests meanwhile, failed: 0")


def rolling_group(
    serve: Serve, router_test_image: TestImage, prefix: str
) -> tuple[int, str, list[str], list[str], list[str], str]:
    """A group of REPLICAS replicas served at vLLM's default GPU share (old and new cannot
    share a GPU: an upgrade rolls): port, name, the old and the new replica names, the
    group's serve arguments and the old image."""
    port, name = free_port_run(REPLICAS + 1), serve.name(prefix)
    old_names = [f"{name}-r{i}" for i in range(REPLICAS)]
    new_names = [f"{name}-next-r{i}" for i in range(REPLICAS)]
    serve.names.extend(old_names + new_names)
    group = ["--gpu-count", str(REPLICAS), "--replicas", str(REPLICAS)]
    group += ["--router-image", router_test_image.tag]
    old_image = serve.double(load_s=0.5, VLLM_DOUBLE_BIND="late")
    first = serve(*group, image=old_image, name=name, port=port)
    assert first.returncode == 0, first.explain()
    return port, name, old_names, new_names, group, old_image


def test_replicas_replaced_one_at_a_time_when_the_gpus_hold_one_plan(
    serve: Serve, router_test_image: TestImage
) -> None:
    """At vLLM's default share old and new cannot share a GPU: the replicas are replaced
    one at a time behind the router. A bad new replica puts the old plan back; a good plan
    goes through. No request fails either way."""
    port, name, old_names, new_names, group, old_image = rolling_group(
        serve, router_test_image, "groll"
    )
    config = Path(os.environ["INSTINCT_DATA_DIR"]) / "groups" / f"{name}.haproxy.cfg"
    config_before = config.read_text()

    bad_image = serve.double("incoherent", load_s=0.5, VLLM_DOUBLE_BIND="late")
    with Clients(port) as clients:
        bad = serve("--upgrade", *group, image=bad_image, name=name, port=port)
    assert bad.returncode == 1, bad.explain()
    assert any("serves the old plan again" in n for n in bad.result["notes"]), bad.explain()
    assert clients.failures() == [] and len(clients.results) > 0
    assert config.read_text() == config_before
    for member in old_names:
        info = inspect(member)
        assert info is not None and info["State"]["Running"]
        assert info["Config"]["Image"] == old_image
    print(f"\nrolling, bad replica: {len(clients.results)} requests meanwhile, failed: 0")

    new_image = serve.double(load_s=0.5, VLLM_DOUBLE_BIND="late", VLLM_DOUBLE_SALAD="repeat")
    with Clients(port) as clients:
        run = serve("--upgrade", *group, image=new_image, name=name, port=port)
    assert run.returncode == 0, run.explain()
    assert run.result["figures"]["rolled"] is True
    assert [m["name"] for m in members(run)] == new_names
    assert all(inspect(n) is None for n in old_names)
    for member in new_names:
        info = inspect(member)
        assert info is not None and info["Config"]["Image"] == new_image
    print(
        f"rolling upgrade: {len(clients.results)} requests, failed: {clients.failures()}; "
        f"{run.result['figures']['roll_s']} s"
    )
    assert clients.failures() == [] and len(clients.results) > 0


def test_a_spare_port_taken_before_the_launch_is_passed_over(
    serve: Serve, router_test_image: TestImage
) -> None:
    """CI's failure: a spare port with no listener when chosen was bound before docker
    published it (a client connection's local port). The new replicas are launched again
    on other spare ports; the upgrade goes through."""
    port, name = free_port_run(REPLICAS * 3 + 1), serve.name("gspare")
    old_names = [f"{name}-r{i}" for i in range(REPLICAS)]
    new_names = [f"{name}-next-r{i}" for i in range(REPLICAS)]
    serve.names.extend(old_names + new_names)
    group = ["--gpu-count", str(REPLICAS), "--replicas", str(REPLICAS)]
    group += ["--router-image", router_test_image.tag]
    first = serve(*group, *HALF, image=serve.double(load_s=0.3), name=name, port=port)
    assert first.returncode == 0, first.explain()
    taken = port + REPLICAS + 1  # the first port after the replicas': the first spare
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", taken))  # bound, not listening: no listener to see
        new_image = serve.double(load_s=0.3, VLLM_DOUBLE_SALAD="repeat")
        run = serve("--upgrade", *group, *HALF, image=new_image, name=name, port=port)
    assert run.returncode == 0, run.explain()
    notes = [e["message"] for e in run.of("note")]
    assert any("taken before the launch" in n for n in notes), notes
    new_ports = [m["port"] for m in members(run)]
    assert taken not in new_ports and len(set(new_ports)) == REPLICAS
    for member in new_names:
        info = inspect(member)
        assert info is not None and info["Config"]["Image"] == new_image


def test_a_spare_port_taken_before_a_rolled_replica_starts_is_passed_over(
    serve: Serve, router_test_image: TestImage
) -> None:
    """The same race one replica at a time (CI's failure of the rolling test): each new
    replica's port is chosen when it is launched, not one of the old replicas', and one
    bound meanwhile is passed over; the roll goes through."""
    port, name = free_port_run(REPLICAS * 3 + 1), serve.name("grspare")
    old_names = [f"{name}-r{i}" for i in range(REPLICAS)]
    new_names = [f"{name}-next-r{i}" for i in range(REPLICAS)]
    serve.names.extend(old_names + new_names)
    group = ["--gpu-count", str(REPLICAS), "--replicas", str(REPLICAS)]
    group += ["--router-image", router_test_image.tag]
    first = serve(*group, image=serve.double(load_s=0.3), name=name, port=port)
    assert first.returncode == 0, first.explain()
    old_ports = [m["port"] for m in members(first)]
    taken = port + REPLICAS + 1  # the first port after the replicas': the first spare
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", taken))  # bound, not listening: no listener to see
        new_image = serve.double(load_s=0.3, VLLM_DOUBLE_SALAD="repeat")
        run = serve("--upgrade", *group, image=new_image, name=name, port=port)
    assert run.returncode == 0, run.explain()
    assert run.result["figures"]["rolled"] is True
    notes = [e["message"] for e in run.of("note")]
    assert sum("taken before the launch" in n for n in notes) == REPLICAS, notes
    new_ports = [m["port"] for m in members(run)]
    assert [m["name"] for m in members(run)] == new_names
    assert taken not in new_ports and len(set(new_ports)) == REPLICAS
    assert not set(new_ports) & set(old_ports)
    for member, member_port in zip(new_names, new_ports, strict=True):
        info = inspect(member)
        assert info is not None and info["Config"]["Image"] == new_image
        assert httpx.get(f"http://127.0.0.1:{member_port}/health", timeout=5).status_code == 200
    through = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
    assert through.status_code == 200


def test_a_roll_killed_midway_is_undone_by_the_next_command(
    serve: Serve, router_test_image: TestImage
) -> None:
    """``kill -9`` of a rolling upgrade once its second replica is being replaced (the
    first slot already new, the second empty): the next ``ps`` names the interrupted
    upgrade and serves the old plan whole again (the GPUs hold one plan only); the router
    answers, every old replica runs its old image, no new replica is left running."""
    import signal
    import subprocess

    from tests.serve.conftest import CLI

    port, name, old_names, new_names, group, old_image = rolling_group(
        serve, router_test_image, "grkill"
    )
    new_image = serve.double(load_s=0.5, VLLM_DOUBLE_BIND="late", VLLM_DOUBLE_SALAD="repeat")
    argv = serve.args("--upgrade", *group, image=new_image, name=name, port=port)
    proc = subprocess.Popen([*CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    killed = False
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:  # bounded by serve's own --timeout
            line = raw.decode(errors="replace")
            if line.startswith("{") and "replica 1: " in json.loads(line).get("message", ""):
                proc.send_signal(signal.SIGKILL)
                killed = True
                break
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert killed, "the upgrade never reached its second replica"
    ps = run_cli(["ps", "--json", "--no-health"], timeout=180)
    assert ps.returncode == 0, ps.explain()
    interrupted = [i for i in json.loads(ps.stdout).get("interrupted", []) if i["name"] == name]
    assert len(interrupted) == 1, ps.stdout
    assert interrupted[0]["resolved"].startswith("undone"), interrupted
    for member in old_names:
        info = inspect(member)
        assert info is not None and info["State"]["Running"], member
        assert info["Config"]["Image"] == old_image
    for member in new_names:
        info = inspect(member)
        assert info is None or not info["State"]["Running"], member
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={"model": MODEL, "prompt": "The capital of France is", "max_tokens": 4},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    records = Path(os.environ["INSTINCT_DATA_DIR"]) / "intents"
    assert not records.is_dir() or not list(records.glob(f"{name}.*"))
