"""Kill at every step: ``instinct`` is SIGKILLed at each event of a change (the Nth line of
its ``--json`` stream, N = 1, 2, ... until the change runs to its end before line N), on
the real dockerd with the vLLM test double; then the next ``instinct ps`` names the
interrupted change and finishes or undoes it, and

- the endpoint that answered before answers (else it counts as lost: must stay 0);
- no record (plan, proof, key, intent) names a container that does not exist;
- no container of the test is left over (no ``NAME-next``, ``NAME-prev``, stray replica).

One endpoint per change is set up once and changed back and forth (each kill leaves it
on the old or the new plan, which the next kill changes again): the set-up is shared,
every kill starts from the state the previous one left, which is what a user meets.
The figures (kills, lost, orphans, time) are printed (``-s``) for the report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.infra.docker import TestImage
from tests.infra.ports import free_port_run
from tests.serve.conftest import CLI, Serve, answers, docker, inspect, run_cli

pytestmark = [pytest.mark.docker, pytest.mark.heavy]  # 40-190 s each

MAX_KILLS = 80  # a change has fewer events than this; the loop is bounded all the same
KILL_RUN_S = 180.0


@dataclass
class Campaign:
    change: str
    kills: int = 0
    lost: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    named: int = 0  # kills after which ps named an interrupted change
    steps: set[str] = field(default_factory=set)  # the steps the interrupted changes were at
    started: float = field(default_factory=time.monotonic)
    run_s: float = KILL_RUN_S  # the bound of one run of the change, and of a settle
    answer_s: float = 30.0  # how long the endpoint has to answer after a settle

    def report(self) -> str:
        return (
            f"\nkill campaign {self.change}: {self.kills} steps killed, endpoints lost "
            f"{len(self.lost)}, orphans {len(self.orphans)}, interrupted changes named and "
            f"settled {self.named} (at steps {', '.join(sorted(self.steps)) or '-'}), "
            f"{time.monotonic() - self.started:.1f} s"
        )


def kill_at(argv: Sequence[str], n: int, run_s: float = KILL_RUN_S) -> int | None:
    """Run ``instinct ARGV`` and SIGKILL it when its Nth step begins: N, or None when it
    ended before (the change ran to its end). A step is a line of its ``--json`` stream,
    except that the progress lines of one phase (a loading server's log, a pull) are one
    step: they are many, and nothing changes between them."""
    proc = subprocess.Popen(
        [*CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    watchdog = threading.Timer(run_s, proc.kill)
    watchdog.start()
    steps, last = 0, None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            key = (event.get("event"), event.get("phase"))
            if key == last and key[0] == "phase":
                continue
            steps, last = steps + 1, key
            if steps == n:
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        watchdog.cancel()
        proc.wait(timeout=60)  # reaped: a zombie is no owner of a change
        if proc.stdout is not None:
            proc.stdout.close()
    return n if steps == n else None


def containers(prefix: str) -> set[str]:
    out = docker("ps", "-a", "--filter", f"name=^{prefix}", "--format", "{{.Names}}")
    return {n for n in out.stdout.split() if n.startswith(prefix)}


def records(prefix: str) -> dict[str, set[str]]:
    """The endpoint names each kind of record holds, for this test's names only."""
    data = Path(os.environ["INSTINCT_DATA_DIR"])
    found: dict[str, set[str]] = {}
    for kind, suffix in (("plans", ".json"), ("verified", ".json"), ("keys", "")):
        folder = data / kind
        names = (
            {p.name.removesuffix(suffix) for p in folder.glob(f"{prefix}*")}
            if folder.is_dir()
            else set()
        )
        found[kind] = {n for n in names if not n.endswith(".tmp") and ".tmp." not in n}
    intents = data / "intents"
    found["intents"] = {p.name for p in intents.glob(f"{prefix}*")} if intents.is_dir() else set()
    return found


def settle_and_check(
    campaign: Campaign, name: str, port: int, expected: Callable[[], set[str]]
) -> None:
    """The next command settles what the kill left (``ps``, or every other kill the MCP
    ``status`` tool, which settles the same way); then the invariants."""
    if campaign.kills % 2:
        ps = run_cli(["ps", "--json", "--no-health"], timeout=campaign.run_s)
        assert ps.returncode == 0, ps.explain()
        doc = json.loads(ps.stdout)
    else:
        from instinct_serve.agents import core
        from instinct_serve.agents.inputs import StatusInput

        outcome = core.status(StatusInput(no_health=True))
        assert outcome.exit_code == 0, outcome
        doc = outcome.doc
    for found in doc.get("interrupted", []):
        campaign.named += 1
        campaign.steps.add(str(found.get("step")))
        assert found["resolved"] and found["resolved"] != "in progress", found
        assert found["name"].startswith(name), found
    step = f"kill {campaign.kills}"
    if not answers(port, campaign.answer_s):
        campaign.lost.append(f"{step}: {name} does not answer on {port}")
    mine = containers(name)
    wanted = expected()
    campaign.orphans += [f"{step}: container {c}" for c in sorted(mine - wanted)]
    assert wanted <= mine, (step, wanted, mine)
    held = records(name)
    assert not held["intents"], (step, held["intents"])  # every change settled
    for kind in ("plans", "verified", "keys"):
        campaign.orphans += [f"{step}: {kind} record {n}" for n in sorted(held[kind] - mine)]
    running = {n for n in mine if (i := inspect(n)) is not None and i["State"]["Running"]}
    assert running == mine, (step, mine - running)


def current_plan(name: str) -> dict[str, object]:
    path = Path(os.environ["INSTINCT_DATA_DIR"]) / "plans" / f"{name}.json"
    current: dict[str, object] = json.loads(path.read_text())["current"]
    return current


def label_hash(name: str) -> str | None:
    info = inspect(name)
    assert info is not None, name
    labels: dict[str, str] = info["Config"]["Labels"] or {}
    return labels.get("instinct-serve.plan-hash")


def campaign(
    change: str,
    argv_for: Callable[[], list[str]],
    check: Callable[[Campaign], None],
    *,
    run_s: float = KILL_RUN_S,
    answer_s: float = 30.0,
) -> Campaign:
    """Kill the change at event 1, 2, ... until it runs to its end; check after each."""
    result = Campaign(change, run_s=run_s, answer_s=answer_s)
    for n in range(1, MAX_KILLS + 1):
        if kill_at(argv_for(), n, run_s) is None:
            break
        result.kills += 1
        check(result)
    else:
        raise AssertionError(f"{change} still had events after {MAX_KILLS} kills")
    print(result.report())
    assert result.lost == [] and result.orphans == [], (result.lost, result.orphans)
    return result


def _single(serve: Serve, prefix: str) -> tuple[str, int, list[str]]:
    port, name = free_port_run(3), serve.name(prefix)
    serve.names += [name + "-next", name + "-prev"]
    images = [serve.double(load_s=0.3), serve.double(load_s=0.3, VLLM_DOUBLE_SALAD="repeat")]
    first = serve(image=images[0], port=port, name=name)
    assert first.returncode == 0, first.explain()
    return name, port, images


def _single_check(name: str, port: int) -> Callable[[Campaign], None]:
    def check(result: Campaign) -> None:
        settle_and_check(result, name, port, lambda: {name})
        # the record names the plan the endpoint runs
        assert current_plan(name)["labels"]["instinct-serve.plan-hash"] == label_hash(name)  # type: ignore[index]

    return check


def _other(name: str, images: list[str]) -> str:
    info = inspect(name)
    assert info is not None
    return images[1] if info["Config"]["Image"] == images[0] else images[0]


@pytest.mark.parametrize(("change", "flag"), [("upgrade", "--upgrade"), ("replace", "--replace")])
def test_kill_upgrade_and_replace_at_every_step(serve: Serve, change: str, flag: str) -> None:
    name, port, images = _single(serve, "k" + change[:2])
    campaign(
        change,
        lambda: serve.args(flag, image=_other(name, images), port=port, name=name),
        _single_check(name, port),
    )


def test_kill_rollback_at_every_step(serve: Serve) -> None:
    name, port, images = _single(serve, "krb")
    up = serve("--upgrade", image=images[1], port=port, name=name)
    assert up.returncode == 0, up.explain()
    result = campaign(
        "rollback",
        lambda: ["rollback", name, "--yes", "--root", str(serve.root), "--json"],
        _single_check(name, port),
    )
    assert result.kills > 3


def test_kill_group_resize_at_every_step(serve: Serve, router_test_image: TestImage) -> None:
    port, name = free_port_run(4), serve.name("krs")
    serve.names += [f"{name}-r{i}" for i in range(3)]
    image = serve.double(load_s=0.3, VLLM_DOUBLE_BIND="late")

    def group(count: int) -> list[str]:
        router = ["--router-image", router_test_image.tag]
        return ["--gpu-count", str(count), "--replicas", str(count), *router]

    first = serve(*group(3), image=image, name=name, port=port)
    assert first.returncode == 0, first.explain()

    def members() -> set[str]:
        plan = current_plan(name)
        group_doc = plan["group"]
        assert isinstance(group_doc, dict)
        return {name, *(str(m[1]) for m in group_doc["members"])}  # [index, name, port, gpus]

    def argv() -> list[str]:
        count = 2 if len(members()) == 4 else 3
        return serve.args("--replace", *group(count), image=image, name=name, port=port)

    def check(result: Campaign) -> None:
        settle_and_check(result, name, port, members)

    campaign("group resize", argv, check)
