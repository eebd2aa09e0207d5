"""The pure parts of supervision and upgrade: watch's decision and backoff, the journal
(on a real local host), the recorded plans, the systemd unit and the upgrade candidate."""

from __future__ import annotations

import json
import shlex

import pytest

from instinct_serve import vllm_args
from instinct_serve.cli.watch import systemd_unit, unit_name
from instinct_serve.hosts import LocalHost
from instinct_serve.plan.labels import LABEL_PLAN_HASH, LABEL_PORT
from instinct_serve.plan.model import LaunchPlan, Mount
from instinct_serve.runtime import journal, plans
from instinct_serve.runtime.upgrade import candidate_of
from instinct_serve.runtime.watch import Memory, Seen, WatchSettings, backoff_s, decide

S = WatchSettings(backoff_s=5.0, max_backoff_s=60.0, unhealthy_after=3, startup_s=100.0)
HEALTHY = Seen(True, running=True, instance="a", health="healthy", proven=True)


def test_decide_leaves_a_proven_healthy_endpoint_alone_and_proves_a_new_run() -> None:
    assert decide(HEALTHY, Memory(), 0.0, S).action == "ok"
    fresh = Seen(True, running=True, instance="b", health="healthy", proven=False)
    assert decide(fresh, Memory(), 0.0, S).action == "prove"


def test_decide_gives_up_on_a_run_that_never_proves_itself() -> None:
    fresh = Seen(True, running=True, instance="b", health="healthy", proven=False)
    assert decide(fresh, Memory(failed_proofs=4), 0.0, S).action == "prove"
    done = decide(fresh, Memory(failed_proofs=5), 0.0, S)
    assert done.action == "give_up" and "coherence probe failed 5 times" in done.why


def test_decide_removed_is_the_end_and_the_daemon_restarting_is_waited_for() -> None:
    assert decide(Seen(False), Memory(), 0.0, S).action == "gone"
    restarting = Seen(True, running=False, restarting=True, instance="a")
    assert decide(restarting, Memory(restarts_in_a_row=99), 0.0, S).action == "wait"


def test_decide_gives_a_new_run_its_startup_time_before_counting_failures() -> None:
    loading = Seen(True, running=True, instance="b", health="loading", proven=False)
    young = decide(loading, Memory(instance_since=0.0), 50.0, S)
    assert young.action == "wait" and not young.failed_check
    old = decide(loading, Memory(instance_since=0.0), 150.0, S)
    assert old.action == "wait" and old.failed_check  # 1 of 3


def test_decide_a_hang_restarts_after_the_third_failed_check() -> None:
    hung = Seen(True, running=True, instance="a", health="connection refused", proven=True)
    assert decide(hung, Memory(failed_checks=1), 0.0, S).action == "wait"
    third = decide(hung, Memory(failed_checks=2), 0.0, S)
    assert third.action == "restart" and "3 times" in third.why and third.failed_check


def test_decide_an_exit_restarts_with_doubling_backoff_then_gives_up() -> None:
    dead = Seen(True, running=False, instance="a")
    assert decide(dead, Memory(), 0.0, S).action == "restart"  # the first at once
    after_one = Memory(restarts_in_a_row=1, last_restart_at=100.0)
    assert backoff_s(S, 1) == 10.0
    assert decide(dead, after_one, 109.0, S).action == "wait"
    assert decide(dead, after_one, 110.0, S).action == "restart"
    assert [backoff_s(S, n) for n in range(6)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    done = decide(dead, Memory(restarts_in_a_row=S.max_restarts), 1e9, S)
    assert done.action == "give_up" and "5 restarts in a row" in done.why


def test_journal_appends_on_the_host_and_summarises_for_ps() -> None:
    host = LocalHost()
    journal.record(host, "ep-1", "watch_started", id="c1")
    journal.record(host, "ep-1", "exited", why="the server exited: code 0", id="c1")
    journal.record(host, "ep-1", "restarted", by="watch", status="ready")
    journal.record(host, "ep-1", "restarted", by="docker", id="c2")
    journal.record(host, "../escape", "exited")  # not a name: not written anywhere
    events = journal.read(host, "ep-1")
    assert [e["kind"] for e in events] == ["watch_started", "exited", "restarted", "restarted"]
    assert journal.read_all(host) == {"ep-1": events}
    # docker says c2 restarted 3 times; the watch saw one of those: 2 + 1 + 1
    doc = journal.summary(events, instance_id="c2", daemon_restarts=3)
    assert doc["restarts"] == 4
    assert doc["last_failure"]["kind"] == "exited"
    assert doc["last_failure"]["why"] == "the server exited: code 0"
    assert journal.summary([], instance_id="c9", daemon_restarts=2) == {
        "restarts": 2,
        "last_failure": None,
    }


def _plan(**over: object) -> LaunchPlan:
    plan = LaunchPlan(
        model="org/m",
        requested_model="org/m",
        image="img:1",
        container_name="vllm-m",
        port=8000,
        docker_flags=["--ipc=host"],
        mounts=[Mount("/h", "/c", True)],
        env={"A": "1"},
        secret_env=["HF_TOKEN"],
        vllm_args=["--port", "8000", "--max-model-len", "4096"],
        labels={LABEL_PLAN_HASH: "abc", LABEL_PORT: "8000", "x": "y"},
        gpu_indices=[0],
    )
    for key, value in over.items():
        setattr(plan, key, value)
    return plan


def test_plans_round_trip_what_a_relaunch_needs_and_keep_the_last_good() -> None:
    host = LocalHost()
    old, new = _plan(), _plan(image="img:2")
    plans.save(host, old)
    assert plans.load(host, "vllm-m").current.identity() == old.identity()  # type: ignore[union-attr]
    plans.save(host, new, last_good=old)
    record = plans.load(host, "vllm-m")
    assert record.current is not None and record.current.image == "img:2"
    assert record.last_good is not None and record.last_good.plan_hash == old.plan_hash
    plans.save(host, new)  # serve's record keeps the last good one
    assert plans.load(host, "vllm-m").last_good is not None


@pytest.mark.parametrize(
    "doc",
    [None, [], {"model": "m"}, {**plans.to_doc(_plan()), "vllm_args": "--rm -rf"}, {"port": "x"}],
)
def test_a_record_that_is_not_a_plan_reads_as_absent(doc: object) -> None:
    assert plans.from_doc(doc) is None


def test_candidate_runs_beside_under_its_own_name_port_and_hash() -> None:
    plan = _plan()
    cand = candidate_of(plan, 8011)
    assert (cand.container_name, cand.port) == ("vllm-m-next", 8011)
    assert vllm_args.value(cand.vllm_args, "--port") == "8011"  # the server's own, too
    assert vllm_args.value(cand.vllm_args, "--max-model-len") == "4096"
    assert LABEL_PLAN_HASH not in cand.labels and LABEL_PORT not in cand.labels
    assert plan.port == 8000 and plan.vllm_args[1] == "8000"  # the plan is untouched


def test_ps_says_restarts_and_the_last_failure_in_one_line() -> None:
    from instinct_serve.cli.containers import _history

    failure = {"at": "T", "kind": "exited", "why": "it exited with code 1"}
    assert _history("ep", 2, failure) == (
        "ep: restarted 2 times; last failure exited at T: it exited with code 1"
    )
    assert _history("ep", 1, None) == "ep: restarted 1 time"


def test_systemd_unit_runs_the_watch_and_holds_no_secret() -> None:
    argv = ["/opt/my tools/instinct", "watch", "vllm-m", "--host", "u@box"]
    text = systemd_unit("vllm-m", argv)
    exec_line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    assert shlex.split(exec_line.removeprefix("ExecStart=")) == argv
    assert "Restart=on-failure" in text and "WantedBy=default.target" in text
    assert "EnvironmentFile=-%h/.config/instinct-serve/watch.env" in text
    assert "hf_" not in text and "HF_TOKEN=" not in text.replace("# HF_TOKEN=", "")
    assert unit_name("vllm-m") == "instinct-watch-vllm-m.service"
    assert json.dumps(text)  # plain text


def test_a_group_plan_is_recorded_with_its_replicas() -> None:
    """A replica group is recorded under its router's name with its placement: what
    ``serve --upgrade`` compares with the router's configuration, and ``rollback`` relaunches."""
    from instinct_serve.plan.replicas import GroupPlan, Replica, Router

    host = LocalHost()
    group = GroupPlan(
        mode="replicas",
        count=2,
        tp=1,
        why="two",
        members=[Replica(0, "g-r0", 8001, (0,)), Replica(1, "g-r1", 8002, (1,))],
        router=Router("g", 8000, "127.0.0.1", "haproxy:3.0"),
        gpus=(0, 1),
    )
    plans.save(host, _plan(container_name="g", group=group))
    current = plans.load(host, "g").current
    assert current is not None and current.group == group


def test_an_upgrade_that_cannot_run_beside_the_old_group_is_refused_first() -> None:
    """Old and new replicas share the GPUs during the switch: vLLM's default share (0.9)
    twice does not fit; halves do, and so do other GPUs."""
    from instinct_serve.errors import UsageError
    from instinct_serve.plan.replicas import GroupPlan, Replica, Router
    from instinct_serve.runtime.upgrade_group import check_fits_beside

    def group_plan(gpus: list[int], *args: str) -> LaunchPlan:
        members = [Replica(i, f"g-r{i}", 8001 + i, (g,)) for i, g in enumerate(gpus)]
        group = GroupPlan("replicas", len(gpus), 1, "", members, Router("g", 8000, "127.0.0.1"))
        return _plan(container_name="g", group=group, vllm_args=["--port", "8000", *args])

    with pytest.raises(UsageError) as crowded:
        check_fits_beside(group_plan([0, 1]), group_plan([1, 2]))
    assert crowded.value.id == "upgrade_does_not_fit" and crowded.value.details["gpus"] == [1]
    assert "--gpu-memory-utilization" in crowded.value.fix and "--gpus" in crowded.value.fix
    half = ["--gpu-memory-utilization", "0.45"]
    check_fits_beside(group_plan([0, 1], *half), group_plan([0, 1], *half))
    check_fits_beside(group_plan([0, 1]), group_plan([2, 3]))
