"""Kubernetes manifests: valid against the API's schemas and the CRDs, and right for a GPU
cluster (probes, placement, caches, disruption, autoscaling, multi-node ranks, secrets).

Golden manifests live in tests/plan/golden/k8s_*.yaml and are compared byte for byte.
Regenerate after an intended change with INSTINCT_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest_httpserver import HTTPServer

from instinct_serve.errors import UsageError
from instinct_serve.gather.plan import make_plan
from instinct_serve.hardware.profiles import PROFILES
from instinct_serve.options import KubernetesOptions, PlanOptions
from instinct_serve.plan import kubernetes
from instinct_serve.plan.caches import COMPILE_CACHES, layout_for
from instinct_serve.plan.kubernetes import k8s_objects, object_name, vram_label_values
from instinct_serve.plan.model import LaunchPlan, startup_budget_s
from instinct_serve.plan.render import render
from tests.plan.k8s_validation import crd_schemas, validate, validate_core, validate_custom

GOLDEN = Path(__file__).parent / "golden"
HF = "/srv/hf-cache"
WARM_MARKER = "/tmp/instinct-serve-warm"
IMAGE = "vllm/vllm-openai-rocm:v0.27.1"


def plan_for(profile: str = "mi300x", **over: Any) -> LaunchPlan:
    """A plan as the planner makes it for one GPU of ``profile`` (no planner run)."""
    gpu = PROFILES[profile]
    plan = LaunchPlan(
        model="Qwen/Qwen3-8B",
        requested_model="Qwen/Qwen3-8B",
        image=IMAGE,
        container_name="vllm-qwen3-8b",
        env={"VLLM_ROCM_USE_AITER": "1"},
        secret_env=["HF_TOKEN"],
        vllm_args=["--port", "8000"],
        labels={"instinct-serve.managed": "true", "instinct-serve.model": "Qwen/Qwen3-8B"},
        gfx_version=gpu.gfx_version,
        gpu_name=gpu.market_name,
        vram_gb_per_gpu=round(gpu.vram_bytes / 1e9, 2),
        weight_memory_gb=16.38,
        cache=layout_for("/srv/compile-cache", gpu.gfx_version, IMAGE, None),
    )
    for key, value in over.items():
        setattr(plan, key, value)
    return plan


def objects(plan: LaunchPlan, **options: Any) -> dict[str, dict[str, Any]]:
    """The rendered objects by kind, each validated first."""
    docs = list(yaml.safe_load_all(render(plan, "k8s", KubernetesOptions(**options))))
    for doc in docs:
        validate(doc)
    kinds = [d["kind"] for d in docs]
    assert len(set(kinds)) == len(kinds), kinds
    return {d["kind"]: d for d in docs}


def pod_templates(docs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """role -> pod template: "single" for a Deployment, "leader"/"worker" for an LWS."""
    if "Deployment" in docs:
        return {"single": docs["Deployment"]["spec"]["template"]}
    lwt = docs["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]
    return {"leader": lwt["leaderTemplate"], "worker": lwt["workerTemplate"]}


def container(template: dict[str, Any]) -> dict[str, Any]:
    (only,) = template["spec"]["containers"]
    return dict(only)


def env_of(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(template)["env"]}


def expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet makes of ``$(VAR)`` in args and env values (Kubernetes'
    third_party/forked/golang/expansion): ``$$`` is ``$``, ``$(NAME)`` the variable when it
    is defined, anything else stays as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end == -1:
                    out.append(text[i:])
                    break
                name = text[i + 2 : end]
                out.append(env.get(name, f"$({name})"))
                i = end + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


# ----------------------------------------------------------------------------- validation


def test_the_validators_are_not_rubber_stamps() -> None:
    import jsonschema
    import kubernetes_validate

    docs = {d["kind"]: d for d in k8s_objects(plan_for(), KubernetesOptions(autoscale=True))}
    bad = copy.deepcopy(docs["Deployment"])
    bad["spec"]["template"]["spec"]["containers"][0]["startupprobe"] = {}  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(bad)
    bad = copy.deepcopy(docs["Deployment"])
    bad["spec"]["template"]["spec"]["containers"][0].pop("name")
    with pytest.raises((ValueError, kubernetes_validate.ValidationError)):
        validate_core(bad)
    bad = copy.deepcopy(docs["ScaledObject"])
    bad["spec"]["triggers"][0]["metadata"]["threshold"] = 5  # the CRD wants strings
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(bad)
    lws = k8s_objects(plan_for(tensor_parallel_size=16), KubernetesOptions(nodes=2))[1]
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["gpus"] = 8
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(bad)
    bad = copy.deepcopy(lws)
    bad["spec"]["startupPolicy"] = "WhenReady"
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(bad)


def test_the_crd_schemas_are_the_served_versions() -> None:
    assert set(crd_schemas()) == {
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
        ("keda.sh/v1alpha1", "ScaledObject"),
    }


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"replicas": 3},
        {"replicas": 2, "autoscale": True, "max_replicas": 5, "namespace": "llm"},
        {"nodes": 2},
        {"nodes": 4, "replicas": 2, "autoscale": True, "storage_class": "cephfs"},
    ],
)
def test_every_shape_is_valid(options: dict[str, Any]) -> None:
    nodes = options.get("nodes", 1)
    plan = plan_for(tensor_parallel_size=8 * nodes)
    docs = objects(plan, **options)
    expected = {"PersistentVolumeClaim", "Service", "PodDisruptionBudget"}
    expected |= {"LeaderWorkerSet" if nodes > 1 else "Deployment"}
    expected |= {"ScaledObject"} if options.get("autoscale") else set()
    assert set(docs) == expected
    if "namespace" in options:
        assert {d["metadata"]["namespace"] for d in docs.values()} == {options["namespace"]}
    else:
        assert all("namespace" not in d["metadata"] for d in docs.values())


# ----------------------------------------------------------------------------- probes


def test_probes_start_on_health_then_mean_warmed_up() -> None:
    plan = plan_for(weight_memory_gb=140.0)
    (template,) = pod_templates(objects(plan)).values()
    c = container(template)
    startup = c["startupProbe"]
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= startup_budget_s(plan) - 10
    assert startup_budget_s(plan) > startup_budget_s(plan_for(weight_memory_gb=16.0))
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    ready = c["readinessProbe"]
    command = ready["exec"]["command"]
    assert command[:2] == ["python3", "-c"]
    assert command[3:] == ["8000", "Qwen/Qwen3-8B", "generate"]
    # the one-time warm-up completion may take the serve warm-up's whole budget
    assert ready["timeoutSeconds"] > 900
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_the_probe_uses_the_served_name_and_lists_only_for_pooling_models() -> None:
    plan = plan_for(vllm_args=["--served-model-name", "chat", "--port", "9000"], port=9000)
    c = container(next(iter(pod_templates(objects(plan)).values())))
    assert c["readinessProbe"]["exec"]["command"][3:] == ["9000", "chat", "generate"]
    embed = plan_for(vllm_args=["--runner", "pooling", "--port", "8000"])
    c = container(next(iter(pod_templates(objects(embed)).values())))
    assert c["readinessProbe"]["exec"]["command"][-1] == "list"


def _probe(
    command: list[str], marker: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the manifest's readiness command here: this python for python3, a temp marker."""
    argv = [sys.executable, command[1], command[2].replace(WARM_MARKER, str(marker))]
    full_env = {"PATH": os.environ.get("PATH", ""), **(env or {})}
    return subprocess.run(
        [*argv, *command[3:]], env=full_env, capture_output=True, text=True, timeout=60
    )


def test_the_readiness_probe_waits_for_the_model_then_warms_up_once(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    plan = plan_for(vllm_args=["--port", str(httpserver.port)], port=httpserver.port)
    c = container(next(iter(pod_templates(objects(plan)).values())))
    command = c["readinessProbe"]["exec"]["command"]
    marker = tmp_path / "warm"
    key = "sk-not-on-any-command-line"
    assert all(key not in part for part in command)
    auth = {"Authorization": f"Bearer {key}"}

    # loading another model (or still registering): not ready
    httpserver.expect_ordered_request("/v1/models", headers=auth).respond_with_json(
        {"data": [{"id": "other"}]}
    )
    done = _probe(command, marker, {"VLLM_API_KEY": key})
    assert done.returncode != 0 and "not served yet" in done.stderr
    assert not marker.exists()

    # listed, and the first completion comes back: ready, and warm from now on
    httpserver.expect_ordered_request("/v1/models", headers=auth).respond_with_json(
        {"data": [{"id": "Qwen/Qwen3-8B"}]}
    )
    httpserver.expect_ordered_request(
        "/v1/completions", method="POST", headers=auth
    ).respond_with_json({"choices": [{"text": "!"}]})
    done = _probe(command, marker, {"VLLM_API_KEY": key})
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    sent = json.loads(httpserver.log[-1][0].get_data())
    assert sent == {"model": "Qwen/Qwen3-8B", "prompt": "Hello", "max_tokens": 1}

    # warm: only the listing, no completion queued behind a busy batch
    httpserver.expect_ordered_request("/v1/models", headers=auth).respond_with_json(
        {"data": [{"id": "Qwen/Qwen3-8B"}]}
    )
    done = _probe(command, marker, {"VLLM_API_KEY": key})
    assert done.returncode == 0, done.stderr
    httpserver.check_assertions()
    assert [req.path for req, _resp in httpserver.log] == [
        "/v1/models",
        "/v1/models",
        "/v1/completions",
        "/v1/models",
    ]


def test_the_readiness_probe_fails_when_the_server_is_down(tmp_path: Path) -> None:
    plan = plan_for(vllm_args=["--port", "9"], port=9)  # discard port: nothing listens
    c = container(next(iter(pod_templates(objects(plan)).values())))
    done = _probe(c["readinessProbe"]["exec"]["command"], tmp_path / "warm")
    assert done.returncode != 0


# ----------------------------------------------------------------------------- placement


@pytest.mark.parametrize(
    ("profile", "values"),
    [
        # the labeller's values for these GPUs: 192G for an MI300X (ROCm/k8s-device-plugin
        # docs/user-guide/installation.md); a plan runs on a same-gfx GPU with more memory
        ("mi300x", ["192G", "256G"]),
        ("mi325x", ["256G"]),
        ("mi355x", ["288G"]),
        ("mi350x", ["288G"]),
        ("mi250x", ["64G"]),
        ("mi210", ["64G"]),
    ],
)
def test_node_affinity_asks_for_enough_vram_of_the_plans_gfx(
    profile: str, values: list[str]
) -> None:
    plan = plan_for(profile)
    assert vram_label_values(plan) == values
    (template,) = pod_templates(objects(plan)).values()
    terms = template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [t["matchExpressions"] for t in terms] == [
        [{"key": "amd.com/gpu.vram", "operator": "In", "values": values}],
        [{"key": "beta.amd.com/gpu.vram", "operator": "In", "values": values}],
    ]


def test_a_plan_without_a_known_vram_gets_no_affinity() -> None:
    (template,) = pod_templates(objects(plan_for(vram_gb_per_gpu=None))).values()
    assert "affinity" not in template["spec"]


def test_gpus_requested_are_the_tp_and_node_local() -> None:
    (template,) = pod_templates(objects(plan_for(tensor_parallel_size=4))).values()
    resources = container(template)["resources"]
    assert resources["limits"] == {"amd.com/gpu": "4"}
    assert resources["requests"]["amd.com/gpu"] == "4"
    assert "memory" not in resources["limits"] and "cpu" not in resources["limits"]
    pp = plan_for(tensor_parallel_size=8, vllm_args=["--pipeline-parallel-size", "2"])
    for template in pod_templates(objects(pp, nodes=2)).values():
        assert container(template)["resources"]["limits"] == {"amd.com/gpu": "8"}
    # the device plugin assigns GPUs: the plan's host indices do not travel
    pinned = plan_for(env={"HIP_VISIBLE_DEVICES": "2,3", "VLLM_ROCM_USE_AITER": "1"})
    (template,) = pod_templates(objects(pinned)).values()
    assert "HIP_VISIBLE_DEVICES" not in env_of(template)


def test_replicas_prefer_separate_nodes() -> None:
    (template,) = pod_templates(objects(plan_for(), replicas=3)).values()
    anti = template["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (single,) = pod_templates(objects(plan_for())).values()
    assert "podAntiAffinity" not in single["spec"].get("affinity", {})


# ----------------------------------------------------------------------------- storage


def test_caches_share_one_volume_under_subpaths() -> None:
    docs = objects(plan_for())
    (template,) = pod_templates(docs).values()
    mounts = {m["mountPath"]: m for m in container(template)["volumeMounts"]}
    assert mounts["/root/.cache/huggingface"]["subPath"] == "huggingface"
    plan = plan_for()
    assert plan.cache is not None
    key = plan.cache.key  # the image digest (or its reference, not pulled here) and the gfx
    assert key.startswith("gfx942-")
    env = env_of(template)
    for cache in COMPILE_CACHES:  # the one table of every rendering
        assert mounts[cache.container_path]["subPath"] == f"compile/{key}/{cache.name}"
        for variable in cache.variables:
            assert env[variable]["value"] == cache.container_path
    # AITER_JIT_DIR is set only because an init container seeds it from the image first:
    # an empty directory there would hide the image's prebuilt AITER modules
    (seed,) = template["spec"]["initContainers"]
    assert seed["image"] == plan.image and seed["command"][:2] == ["python3", "-c"]
    assert seed["volumeMounts"] == [
        {"name": "cache", "mountPath": "/seed", "subPath": f"compile/{key}/aiter"}
    ]
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    claim = docs["PersistentVolumeClaim"]
    assert volumes["cache"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "storageClassName" not in claim["spec"]


@pytest.mark.parametrize(
    "options", [{"replicas": 2}, {"autoscale": True}, {"nodes": 2, "storage_class": "nfs"}]
)
def test_a_cache_several_pods_mount_is_read_write_many(options: dict[str, Any]) -> None:
    docs = objects(plan_for(tensor_parallel_size=2 * options.get("nodes", 1)), **options)
    spec = docs["PersistentVolumeClaim"]["spec"]
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec.get("storageClassName") == options.get("storage_class")


def test_the_cache_holds_the_weights_and_grows_with_them() -> None:
    small = objects(plan_for(weight_memory_gb=16.0))["PersistentVolumeClaim"]
    big = objects(plan_for(weight_memory_gb=673.0))["PersistentVolumeClaim"]
    size = big["spec"]["resources"]["requests"]["storage"]
    assert small["spec"]["resources"]["requests"]["storage"] == "64Gi"
    assert size.endswith("Gi") and int(size[:-2]) * 2**30 > 2 * 673e9


def test_shm_grows_with_the_gpus_of_a_pod() -> None:
    sizes = []
    for tp in (1, 8):
        (template,) = pod_templates(objects(plan_for(tensor_parallel_size=tp))).values()
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        sizes.append(volumes["dshm"]["emptyDir"]["sizeLimit"])
    assert sizes == ["16Gi", "32Gi"]


# ----------------------------------------------------------------------------- secrets


def test_secrets_are_referenced_by_name_only() -> None:
    (template,) = pod_templates(objects(plan_for())).values()
    env = env_of(template)
    refs = [("HF_TOKEN", "hf-token", "token"), ("VLLM_API_KEY", "vllm-api-key", "api-key")]
    for name, secret, key in refs:
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"] == {
            "name": secret,
            "key": key,
            "optional": True,
        }
    args = container(template)["args"]
    assert not any(a.startswith("--api-key") for a in args)


def test_no_token_value_reaches_the_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = "hf_SENTINEL_should_never_appear_1234"
    monkeypatch.setenv("HF_TOKEN", sentinel)
    monkeypatch.setenv("VLLM_API_KEY", sentinel)
    for options in ({}, {"nodes": 2}, {"autoscale": True}):
        text = render(plan_for(tensor_parallel_size=2), "k8s", KubernetesOptions(**options))
        assert sentinel not in text


# ----------------------------------------------------------------------------- rollout


def test_disruption_budget_lets_drains_through_one_pod_at_a_time() -> None:
    for options in ({}, {"replicas": 4}, {"autoscale": True}):
        docs = objects(plan_for(), **options)
        budget = docs["PodDisruptionBudget"]["spec"]
        assert budget == {
            "maxUnavailable": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "vllm-qwen3-8b"}},
        }
        (template,) = pod_templates(docs).values()
        labels = template["metadata"]["labels"]
        assert budget["selector"]["matchLabels"].items() <= labels.items()
        strategy = docs["Deployment"]["spec"]["strategy"]
        assert strategy["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_the_service_selects_the_serving_pods() -> None:
    docs = objects(plan_for())
    (template,) = pod_templates(docs).values()
    selector = docs["Service"]["spec"]["selector"]
    assert selector.items() <= template["metadata"]["labels"].items()
    assert docs["Deployment"]["spec"]["selector"]["matchLabels"] == selector


def test_pods_get_no_service_links_and_no_api_token() -> None:
    for template in pod_templates(objects(plan_for(tensor_parallel_size=2), nodes=2)).values():
        spec = template["spec"]
        # a Service named "vllm" would otherwise set VLLM_PORT=tcp://... in the pod
        assert spec["enableServiceLinks"] is False
        assert spec["automountServiceAccountToken"] is False


def test_metrics_are_scraped_from_the_api_port() -> None:
    (template,) = pod_templates(objects(plan_for(port=8123, vllm_args=["--port", "8123"]))).values()
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8123",
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": "http",
    }


# ----------------------------------------------------------------------------- autoscaling


def test_autoscaling_is_off_by_default() -> None:
    docs = objects(plan_for(), replicas=2)
    assert "ScaledObject" not in docs
    assert docs["Deployment"]["spec"]["replicas"] == 2


def test_keda_scales_the_deployment_on_vllms_queue() -> None:
    docs = objects(plan_for(), replicas=2, autoscale=True, namespace="llm")
    scaled = docs["ScaledObject"]["spec"]
    assert "replicas" not in docs["Deployment"]["spec"]  # KEDA owns the count
    assert scaled["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": docs["Deployment"]["metadata"]["name"],
    }
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (2, 4)
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "prometheus"
    meta = trigger["metadata"]
    assert meta["query"] == (
        'sum(vllm:num_requests_waiting{model_name="Qwen/Qwen3-8B",namespace="llm"})'
    )
    assert meta["serverAddress"] == "http://prometheus-operated.monitoring.svc:9090"
    assert float(meta["threshold"]) > 0


def test_keda_scales_a_leader_worker_set_by_groups() -> None:
    docs = objects(plan_for(tensor_parallel_size=16), nodes=2, autoscale=True, max_replicas=3)
    scaled = docs["ScaledObject"]["spec"]
    assert scaled["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    assert scaled["scaleTargetRef"]["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert scaled["maxReplicaCount"] == 3
    assert "replicas" not in docs["LeaderWorkerSet"]["spec"]


# ----------------------------------------------------------------------------- multi-node


def test_one_copy_across_nodes_is_a_leader_worker_set() -> None:
    plan = plan_for(
        tensor_parallel_size=16,
        vllm_args=["--tensor-parallel-size", "16", "--distributed-executor-backend", "mp"],
    )
    docs = objects(plan, nodes=2, socket_ifname="ib0")
    lws = docs["LeaderWorkerSet"]["spec"]
    assert lws["leaderWorkerTemplate"]["size"] == 2
    assert lws["startupPolicy"] == "LeaderCreated"  # the leader is ready only with its workers
    templates = pod_templates(docs)
    lws_env = {"LWS_LEADER_ADDRESS": "vllm-qwen3-8b-0.vllm-qwen3-8b", "LWS_WORKER_INDEX": "1"}
    leader = [expand(a, lws_env) for a in container(templates["leader"])["args"]]
    worker = [expand(a, lws_env) for a in container(templates["worker"])["args"]]
    address = lws_env["LWS_LEADER_ADDRESS"]
    assert leader[-6:] == ["--nnodes", "2", "--node-rank", "0", "--master-addr", address]
    assert worker[-7:] == [
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        address,
        "--headless",
    ]
    assert leader.count("--distributed-executor-backend") == 1
    for template in templates.values():
        env = env_of(template)
        assert env["GLOO_SOCKET_IFNAME"]["value"] == env["NCCL_SOCKET_IFNAME"]["value"] == "ib0"
    # the leader serves, is probed and scraped; a headless worker has no HTTP at all
    assert "readinessProbe" in container(templates["leader"])
    assert "prometheus.io/scrape" in templates["leader"]["metadata"]["annotations"]
    worker_c = container(templates["worker"])
    assert not {"ports", "startupProbe", "readinessProbe", "livenessProbe"} & set(worker_c)
    # the Service reaches each group's leader only (LWS labels its pods by index)
    assert docs["Service"]["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": "vllm-qwen3-8b",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == {
        "leaderworkerset.sigs.k8s.io/name": "vllm-qwen3-8b"
    }


def test_the_planned_rank_flags_are_replaced_not_repeated() -> None:
    upstream_style = [
        "--tensor-parallel-size", "16", "--nnodes", "4", "--node-rank", "0",
        "--master-addr", "$HEAD_IP", "--headless", "--port", "8000",
    ]  # fmt: skip
    docs = objects(plan_for(tensor_parallel_size=16, vllm_args=upstream_style), nodes=2)
    for role, template in pod_templates(docs).items():
        args = container(template)["args"]
        assert args.count("--nnodes") == 1 and args[args.index("--nnodes") + 1] == "2"
        assert "$HEAD_IP" not in " ".join(args) and "$$HEAD_IP" not in " ".join(args)
        assert args.count("--headless") == (role == "worker")


@pytest.mark.parametrize(
    ("plan_over", "options", "problem"),
    [
        ({"tensor_parallel_size": 1}, {"nodes": 2}, "do not split evenly"),
        ({"tensor_parallel_size": 12}, {"nodes": 8}, "do not split evenly"),
        (
            {"tensor_parallel_size": 8, "vllm_args": ["--data-parallel-size", "2"]},
            {"nodes": 2},
            "data parallel",
        ),
        (
            {"tensor_parallel_size": 16, "vllm_args": ["--distributed-executor-backend", "ray"]},
            {"nodes": 2},
            "mp executor",
        ),
        ({"tensor_parallel_size": 16}, {"nodes": 2, "gpus_per_node": 4}, "8 per node"),
    ],
)
def test_a_plan_that_cannot_span_the_nodes_is_refused(
    plan_over: dict[str, Any], options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(UsageError) as info:
        k8s_objects(plan_for(**plan_over), KubernetesOptions(**options))
    assert info.value.id == "bad_nodes" and problem in info.value.message


# ----------------------------------------------------------------------------- text


texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
)


# a flag's value as vLLM's argparse takes it: one that starts with "-" (other than a
# number or a text with a space) is read as the next option, so a plan holds none (it found
# "--chat-template --nnodes", which the multi-node rendering rightly reads as --nnodes)
flag_values = texts.filter(lambda s: not s.startswith("-"))


@settings(max_examples=200, deadline=None)
@given(arg=flag_values, value=texts)
def test_the_kubelet_expands_args_and_env_back_to_the_plan(arg: str, value: str) -> None:
    plan = plan_for(
        tensor_parallel_size=2,
        vllm_args=["--chat-template", arg, "--port", "8000"],
        env={"X": value},
    )
    # names the pod defines: the LWS variables and the plan's own env
    defined = {"LWS_LEADER_ADDRESS": "leader", "LWS_WORKER_INDEX": "1", "X": "expanded"}
    for options in ({}, {"nodes": 2}):
        docs = {d["kind"]: d for d in k8s_objects(plan, KubernetesOptions(**options))}
        for template in pod_templates(docs).values():
            args = [expand(a, defined) for a in container(template)["args"]]
            assert args[args.index("--chat-template") + 1] == arg
            assert expand(env_of(template)["X"]["value"], defined) == value


@pytest.mark.parametrize(
    ("container_name", "expected"),
    [
        ("vllm-qwen3-8b", "vllm-qwen3-8b"),
        ("My_Model.v2", "my-model-v2"),
        ("8b-model", "vllm-8b-model"),
        ("x" * 128, "x" * 45),
        ("vllm-" + "a" * 39 + "--b", "vllm-" + "a" * 39),
    ],
)
def test_object_names_are_dns_labels(container_name: str, expected: str) -> None:
    assert object_name(container_name) == expected


def test_the_manifests_have_no_anchors() -> None:
    """The objects share label dicts; none comes out as a YAML alias (test_render tests
    ``to_yaml`` itself)."""
    rendered = render(plan_for(tensor_parallel_size=16), "k8s", KubernetesOptions(nodes=2))
    events = list(yaml.parse(rendered))
    assert not [e for e in events if isinstance(e, yaml.AliasEvent)]
    assert not [e for e in events if getattr(e, "anchor", None)]


def test_the_header_says_what_the_cluster_needs() -> None:
    plain = kubernetes.header(plan_for())
    assert "LeaderWorkerSet" not in plain and "KEDA" not in plain
    assert "kubectl create secret generic hf-token --from-literal=token=<HF_TOKEN>" in plain
    full = kubernetes.header(
        plan_for(tensor_parallel_size=16),
        KubernetesOptions(nodes=2, autoscale=True, namespace="llm", storage_class="cephfs"),
    )
    for needed in ("LeaderWorkerSet", "KEDA", "ReadWriteMany", "cephfs", "kubectl -n llm"):
        assert needed in full, needed
    assert all(line.startswith("# ") for line in full.splitlines())


# ----------------------------------------------------------------------------- goldens

GOLDENS = {
    "k8s_qwen3-8b_mi300x": (
        {"model": "Qwen/Qwen3-8B", "gpu": "mi300x"},
        {},
    ),
    "k8s_qwen3-8b_mi300x_3_replicas_autoscale": (
        {"model": "Qwen/Qwen3-8B", "gpu": "mi300x"},
        {"replicas": 3, "autoscale": True, "namespace": "inference", "storage_class": "nfs"},
    ),
    "k8s_deepseek-r1_2_nodes_mi300x": (
        {"model": "deepseek-ai/DeepSeek-R1", "gpu": "mi300x", "gpu_count": 16},
        {"nodes": 2},
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_golden_manifests(name: str) -> None:
    plan_options, k8s_options = GOLDENS[name]
    options = PlanOptions(hf_cache=HF, compile_cache="/srv/compile-cache", **plan_options)
    options.nodes = int(k8s_options.get("nodes", 1))  # as `plan --format k8s --nodes N`
    plan = make_plan(options).plan
    text = render(plan, "k8s", KubernetesOptions(**k8s_options))
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("INSTINCT_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path.name}: run with INSTINCT_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        validate(doc)
    kinds = [d["kind"] for d in docs]
    assert kinds[0] == "PersistentVolumeClaim" and kinds[2:4] == ["Service", "PodDisruptionBudget"]
