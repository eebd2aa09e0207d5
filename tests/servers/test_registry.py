"""The server registry: the built-in vLLM kind, kinds registered by entry point, and the
plan's ``server`` field, which leaves every vLLM plan's JSON and hash as they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from instinct_serve import servers
from instinct_serve.diagnose.failure_signals import FAILURE_SIGNALS
from instinct_serve.diagnose.phases import PhaseTracker
from instinct_serve.errors import UsageError
from instinct_serve.fit.served import as_reported
from instinct_serve.observe import vllm as vllm_metrics
from instinct_serve.observe.bench import VLLM_CLIENT, Settings, bench_args
from instinct_serve.options import PlanOptions
from instinct_serve.plan.model import API_KEY_ENV, LaunchPlan, container_args
from instinct_serve.plan.render import native_argv
from instinct_serve.servers.kind import ServerKind
from tests.infra import fake_server

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _plan(**kw: object) -> LaunchPlan:
    return LaunchPlan(MODEL, MODEL, "img:1", "n", vllm_args=["--max-model-len", "8192"], **kw)  # type: ignore[arg-type]


def test_vllm_is_built_in_and_the_default() -> None:
    kind = servers.get()
    assert kind is servers.get("vllm") and kind.name == "vllm" == servers.DEFAULT
    assert servers.names()[0] == "vllm"
    assert servers.of(_plan()) is kind


def test_the_vllm_kind_answers_what_the_tool_assumed() -> None:
    kind: ServerKind = servers.get("vllm")
    plan = _plan(public=True)
    assert kind.container_args(plan) == container_args(plan)
    assert kind.native_argv(plan) == native_argv(plan)
    assert kind.environment(plan) == {}
    assert kind.api_key_env == API_KEY_ENV
    assert (kind.routes.health, kind.routes.models, kind.routes.metrics) == (
        "/health",
        "/v1/models",
        "/metrics",
    )
    assert kind.failure_signals == FAILURE_SIGNALS
    assert kind.metric_names is vllm_metrics.NAMES
    assert type(kind.tracker()) is PhaseTracker
    assert kind.memory_model is as_reported  # fit's report is vLLM's answer
    step = {
        "base_url": "http://127.0.0.1:8000",
        "model": MODEL,
        "served_model_name": None,
        "tokenizer": None,
        "concurrency": 4,
        "settings": Settings(),
        "result_dir": "/tmp/r",
        "result_file": "s.json",
    }
    assert kind.bench_client is VLLM_CLIENT and kind.bench_client.executable == "vllm"
    assert kind.bench_client.argv(**step) == bench_args(**step)


def test_an_unknown_server_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as caught:
        servers.get("no-such-server")
    assert caught.value.id == "bad_server" and "vllm" in caught.value.fix


def test_a_server_registered_by_entry_point_is_listed_and_loaded(fake_site: Path) -> None:
    assert "fake" in servers.names()
    kind = servers.get("fake")
    assert kind is fake_server.KIND and kind.routes.health == "/livez"


def test_an_entry_point_must_load_the_kind_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = tmp_path / "odd-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: odd\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{servers.GROUP}]\n"
        "odd-missing = tests.infra.no_such_module:KIND\n"
        "odd-renamed = tests.infra.fake_server:KIND\n"
        "vllm = tests.infra.fake_server:KIND\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("odd-missing", "odd-renamed"):
        with pytest.raises(UsageError) as caught:
            servers.get(name)
        assert caught.value.id == "bad_server"
    assert servers.get("vllm").name == "vllm"  # a built-in name is not taken over
    assert servers.names().count("vllm") == 1


def test_the_plan_names_its_server_only_when_it_is_not_vllm() -> None:
    vllm = _plan()
    assert "server" not in vllm.to_dict() and "server" not in vllm.identity()
    other = _plan(server="fake")
    assert other.to_dict()["server"] == "fake"
    assert other.identity() == vllm.identity() | {"server": "fake"}
    assert other.plan_hash != vllm.plan_hash


def test_the_server_option_takes_a_name() -> None:
    """Whether the registry has it is asked when the plan is made (test_fake_server)."""
    assert PlanOptions.parse({"server": "fake"}).server == "fake"
    assert (
        PlanOptions.parse({}).server == "vllm"
    )  # auto (AMD's reference config's server) is asked for
    with pytest.raises(UsageError) as caught:
        PlanOptions.parse({"server": "a b"})
    assert caught.value.id == "bad_server"


def test_a_container_of_another_server_is_labelled_with_its_kind_at_launch() -> None:
    """ps, watch and top read the label to ask that kind's routes; a vLLM container carries
    none, so its labels (and its plan's hash) are what they were."""
    from instinct_serve.plan.labels import LABEL_SERVER
    from instinct_serve.runtime.backend import launch_labels

    assert LABEL_SERVER not in launch_labels(_plan(), [])
    other = _plan(server="fake")
    assert launch_labels(other, [])[LABEL_SERVER] == "fake"
    assert LABEL_SERVER not in other.labels
