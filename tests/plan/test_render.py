"""Renderers: shell round-trips, compose, secrets by name only, loopback unless public,
and scripts that a real ``sh`` runs without running anything else (Kubernetes manifests:
test_kubernetes)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from instinct_serve.errors import UsageError
from instinct_serve.plan.model import LaunchPlan, Mount
from instinct_serve.plan.render import (
    FORMATS,
    RESTART_POLICY,
    compose_service,
    docker_argv,
    k8s_objects,
    native_argv,
    native_script,
    render,
    shell_line,
)

AMD_FLAGS = [
    "--group-add=video",
    "--group-add=render",
    "--cap-add=SYS_PTRACE",
    "--security-opt seccomp=unconfined",
    "--device /dev/kfd",
    "--device /dev/dri",
    "--ipc=host",
]

SPEC_CONFIG = json.dumps({"method": "mtp", "num_speculative_tokens": 2})


def sample_plan(**over: Any) -> LaunchPlan:
    plan = LaunchPlan(
        model="Qwen/Qwen3.5-9B",
        requested_model="Qwen/Qwen3.5-9B",
        image="vllm/vllm-openai-rocm:v0.22.0",
        container_name="vllm-qwen3-5-9b",
        port=8000,
        docker_flags=list(AMD_FLAGS),
        mounts=[Mount("/home/u/.cache/huggingface", "/root/.cache/huggingface")],
        env={"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_FP4BMM": "0"},
        secret_env=["HF_TOKEN"],
        vllm_args=["--speculative-config", SPEC_CONFIG, "--port", "8000"],
        labels={"instinct-serve.managed": "true", "instinct-serve.model": "Qwen/Qwen3.5-9B"},
        weight_memory_gb=19.3,
    )
    for key, value in over.items():
        setattr(plan, key, value)
    return plan


def test_docker_argv_has_every_part_in_order() -> None:
    argv = docker_argv(sample_plan())
    assert argv[:5] == ["docker", "run", "-d", "--name", "vllm-qwen3-5-9b"]
    # multi-word flags become two tokens, single ones stay whole
    i = argv.index("--security-opt")
    assert argv[i + 1] == "seccomp=unconfined"
    assert argv[argv.index("--device") + 1] == "/dev/kfd"
    assert "--ipc=host" in argv
    assert argv[argv.index("-p") + 1] == "127.0.0.1:8000:8000"  # loopback unless public
    assert argv[argv.index("-v") + 1] == "/home/u/.cache/huggingface:/root/.cache/huggingface"
    image_at = argv.index("vllm/vllm-openai-rocm:v0.22.0")
    assert argv[image_at + 1] == "Qwen/Qwen3.5-9B"  # vllm serve's positional model
    # the secret goes by name only: `--env HF_TOKEN`, never `HF_TOKEN=...`
    assert argv[argv.index("--env") + 1] == "HF_TOKEN"
    assert not any(a.startswith("HF_TOKEN=") for a in argv)
    # labels precede the image (docker options), engine args follow it
    assert argv.index("--label") < image_at


def test_every_daemon_rendering_carries_one_bounded_restart_policy() -> None:
    """docker and compose restart a crash a few times (never a clean stop, never forever);
    serve's own launch has none until the endpoint is proven (it supervises the start)."""
    plan = sample_plan()
    argv = docker_argv(plan)
    assert argv[argv.index("--restart") + 1] == RESTART_POLICY == "on-failure:3"
    assert argv.index("--restart") < argv.index("vllm/vllm-openai-rocm:v0.22.0")
    assert "--restart" not in docker_argv(plan, restart=None)
    assert "--restart on-failure:3" in shell_line(plan)
    service = yaml.safe_load(render(plan, "compose"))["services"]["vllm-qwen3-5-9b"]
    assert service["restart"] == RESTART_POLICY


def test_shell_line_round_trips_json_args() -> None:
    plan = sample_plan()
    line = shell_line(plan)
    assert "\n" not in line
    assert shlex.split(line) == docker_argv(plan)
    # the JSON of --speculative-config survives the shell intact
    parsed = shlex.split(line)
    assert json.loads(parsed[parsed.index("--speculative-config") + 1])["method"] == "mtp"


hostile = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(model=hostile, value=hostile, arg=hostile)
def test_shell_line_round_trips_hostile_values(model: str, value: str, arg: str) -> None:
    plan = sample_plan(model=model, env={"X": value}, vllm_args=["--chat-template", arg])
    assert shlex.split(shell_line(plan)) == docker_argv(plan)


def test_native_script_exports_env_and_restricts_gpus() -> None:
    plan = sample_plan(gpu_indices=[2, 3], env={"A": "x y; rm -rf /"})
    text = native_script(plan)
    lines = text.strip().splitlines()
    assert "export A='x y; rm -rf /'" in lines
    assert "export HIP_VISIBLE_DEVICES=2,3" in lines
    assert shlex.split(lines[-1])[:3] == ["vllm", "serve", "Qwen/Qwen3.5-9B"]
    assert not any(line.startswith("export HF_TOKEN") for line in lines)


def test_compose_maps_amd_flags_to_service_keys() -> None:
    doc = yaml.safe_load(render(sample_plan(), "compose"))
    svc = doc["services"]["vllm-qwen3-5-9b"]
    assert svc["devices"] == ["/dev/kfd", "/dev/dri"]
    assert svc["group_add"] == ["video", "render"]
    assert svc["cap_add"] == ["SYS_PTRACE"]
    assert svc["security_opt"] == ["seccomp=unconfined"]
    assert svc["ipc"] == "host"
    assert svc["command"][0] == "Qwen/Qwen3.5-9B"
    assert "HF_TOKEN" in svc["environment"]  # by name: compose takes it from the shell
    plan = sample_plan()
    # the endpoint's labels and the ones a Prometheus docker_sd job discovers /metrics by
    assert svc["labels"]["prometheus.io/scrape"] == "true"
    assert svc["labels"]["prometheus.io/port"] == str(plan.port)
    assert all(svc["labels"][k] == v for k, v in plan.labels.items())
    assert "x-instinct-serve-unmapped-flags" not in doc
    assert compose_service(sample_plan(docker_flags=["--weird"]))[
        "x-instinct-serve-unmapped-flags"
    ] == ["--weird"]


@pytest.mark.parametrize("fmt", ["json", "docker", "shell", "native", "compose", "k8s"])
def test_no_format_contains_a_token_value(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = "hf_SENTINEL_should_never_appear_1234"
    monkeypatch.setenv("HF_TOKEN", sentinel)
    assert sentinel not in render(sample_plan(), fmt)


def test_yaml_has_no_anchors_even_for_shared_dicts() -> None:
    from instinct_serve.plan.render import to_yaml

    shared = {"app": "x"}
    text = to_yaml([{"a": shared, "b": shared}, {"c": shared}])
    assert "&id" not in text and "*id" not in text
    assert list(yaml.safe_load_all(text)) == [{"a": shared, "b": shared}, {"c": shared}]
    script = to_yaml({"script": "import os\nprint(os.getpid())\n"})
    assert script == "script: |\n  import os\n  print(os.getpid())\n"


# ------------------------------------------------------------------ bind address, public


def test_every_format_listens_on_loopback_unless_public() -> None:
    private = sample_plan()
    assert "127.0.0.1:8000:8000" in docker_argv(private)
    assert shlex.split(shell_line(private))[shlex.split(shell_line(private)).index("-p") + 1] == (
        "127.0.0.1:8000:8000"
    )
    assert native_argv(private)[3:5] == ["--host", "127.0.0.1"]
    compose = yaml.safe_load(render(private, "compose"))["services"]["vllm-qwen3-5-9b"]
    assert compose["ports"] == ["127.0.0.1:8000:8000"]
    docs = list(yaml.safe_load_all(render(private, "k8s")))
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert "hostPort" not in json.dumps(docs) and "hostNetwork" not in json.dumps(docs)

    public = sample_plan(public=True, api_key="generated", secret_env=["HF_TOKEN", "VLLM_API_KEY"])
    assert "0.0.0.0:8000:8000" in docker_argv(public)
    assert native_argv(public)[3:5] == ["--host", "0.0.0.0"]
    compose = yaml.safe_load(render(public, "compose"))["services"]["vllm-qwen3-5-9b"]
    assert compose["ports"] == ["0.0.0.0:8000:8000"]
    assert "VLLM_API_KEY" in compose["environment"]  # by name
    argv = docker_argv(public)
    assert "VLLM_API_KEY" in argv and not any(a.startswith("VLLM_API_KEY=") for a in argv)
    assert "--api-key" not in argv
    container = k8s_objects(public)[1]["spec"]["template"]["spec"]["containers"][0]
    key_ref = next(e for e in container["env"] if e["name"] == "VLLM_API_KEY")
    assert key_ref["valueFrom"]["secretKeyRef"]["optional"] is False  # must not start without
    script = native_script(public)
    assert "VLLM_API_KEY:?" in script  # refuses to start without the key


def test_a_plan_arguments_host_wins_in_the_native_argv() -> None:
    plan = sample_plan(vllm_args=["--port", "8000", "--host", "::1"])
    argv = native_argv(plan)
    assert argv.count("--host") == 1 and argv[-2:] == ["--host", "::1"]


# ------------------------------------------------------------------ hostile names and values

HOSTILE_VALUES = [
    "$(touch {m}/dollar)",
    "`touch {m}/backtick`",
    "x; touch {m}/semicolon",
    "x\ntouch {m}/newline",
    "'; touch {m}/quote; '",
    '"$(touch {m}/dq)"',
    "x && touch {m}/and | cat",
    "$HOME ${{IFS}} \\ * ? [a] ~",
]
HOSTILE_NAMES = [
    "A=$(touch X)",
    "A;touch X",
    "A`touch X`",
    "A\ntouch X",
    "1A",
    "A B",
    "",
]

RECORDER = """#!{python}
import json, os, sys
with open(os.environ["RECORD_TO"], "a") as fh:
    env = {{k: v for k, v in os.environ.items() if k.startswith("HOSTILE")}}
    fh.write(json.dumps({{"argv": sys.argv[1:], "env": env}}) + "\\n")
"""


def _recorders(tmp_path: Path) -> tuple[Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("vllm", "docker"):
        path = bin_dir / name
        path.write_text(RECORDER.format(python=sys.executable))
        path.chmod(0o755)
    return bin_dir, tmp_path / "calls.jsonl"


def _run_sh(
    script: str, bin_dir: Path, record: Path, cwd: Path
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD_TO": str(record), "HOME": str(cwd)}
    return subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, timeout=30, env=env, cwd=cwd
    )


def _hostile_plan(marker: Path) -> LaunchPlan:
    values = [v.format(m=marker) for v in HOSTILE_VALUES]
    return sample_plan(
        model=values[0],
        env={f"HOSTILE_{i}": v for i, v in enumerate(values)},
        vllm_args=["--chat-template", values[1], "--served-model-name", values[2]],
        labels={"instinct-serve.model": values[3]},
        container_name="c",
    )


def test_a_real_sh_runs_the_printed_scripts_and_nothing_else(tmp_path: Path) -> None:
    """The audit ran `plan --format native` output and got commands executed: a real sh
    now runs the native script and the docker line with hostile values, and the only thing
    executed is the program meant, with every value intact."""
    marker = tmp_path / "ran"
    marker.mkdir()
    bin_dir, record = _recorders(tmp_path)
    plan = _hostile_plan(marker)

    done = _run_sh(native_script(plan), bin_dir, record, tmp_path)
    assert done.returncode == 0, done.stderr
    done = _run_sh(shell_line(plan), bin_dir, record, tmp_path)
    assert done.returncode == 0, done.stderr

    assert list(marker.iterdir()) == []  # nothing injected ran
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(calls) == 2
    native, docker = calls
    assert native["argv"] == native_argv(plan)[1:]
    assert native["env"] == plan.env  # exported exactly
    assert docker["argv"] == docker_argv(plan)[1:]


def test_the_docker_format_is_a_script_sh_runs_seed_first(tmp_path: Path) -> None:
    """``plan --format docker`` (and the summary's Command block) is pasted into a shell as
    it is: the AITER seeding, then the one ``docker run`` over continued lines, every
    hostile value intact and nothing else run; ``--format argv`` keeps one word a line."""
    from instinct_serve.plan import caches

    marker = tmp_path / "ran"
    marker.mkdir()
    bin_dir, record = _recorders(tmp_path)
    plan = _hostile_plan(marker)
    plan.cache = caches.layout_for(str(tmp_path / "cc"), "gfx942", plan.image, None)
    script = render(plan, "docker")
    assert [ln.split()[:3] for ln in script.splitlines() if ln.startswith("docker")] == [
        ["docker", "run", "--rm"],
        ["docker", "run", "-d"],
    ]
    assert script.splitlines()[0].startswith("# once per image and gfx")
    assert "  --env HF_TOKEN \\\n" in script  # a flag a line, the secret by name

    done = _run_sh(script, bin_dir, record, tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(marker.iterdir()) == []
    calls = [json.loads(line)["argv"] for line in record.read_text().splitlines()]
    seed = caches.seed_argv(plan.cache, plan.image)
    assert seed is not None and calls == [seed[1:], docker_argv(plan)[1:]]
    assert render(plan, "argv") == "\n".join(docker_argv(plan)) + "\n"


@pytest.mark.parametrize("name", HOSTILE_NAMES)
@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "json"])
def test_an_environment_name_that_is_not_a_name_is_refused(name: str, fmt: str) -> None:
    for plan in (sample_plan(env={name: "1"}), sample_plan(secret_env=["HF_TOKEN", name])):
        with pytest.raises(UsageError) as refused:
            render(plan, fmt)
        assert refused.value.id == "bad_env_name"


def test_compose_and_k8s_keep_values_literal() -> None:
    value = "$(touch X) ${HOME} $HOME"
    plan = sample_plan(env={"A": value}, vllm_args=["--chat-template", value])
    compose = render(plan, "compose")
    svc = yaml.safe_load(compose)["services"]["vllm-qwen3-5-9b"]
    # compose reads $$ as a literal $: nothing is interpolated from the shell
    assert "A=" + value.replace("$", "$$") in svc["environment"]
    assert value.replace("$", "$$") in svc["command"]
    docs = list(yaml.safe_load_all(render(plan, "k8s")))
    container = docs[1]["spec"]["template"]["spec"]["containers"][0]
    # Kubernetes expands $(VAR) in args and env values and reads $$ as a literal $
    assert value.replace("$", "$$") in container["args"]
    assert {"name": "A", "value": value.replace("$", "$$")} in container["env"]


def test_yaml_has_no_anchors_or_aliases() -> None:
    for fmt in ("compose", "k8s"):
        text = render(sample_plan(), fmt)
        assert "&id" not in text and "*id" not in text, text


def test_render_module_never_sees_a_key_value(monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = "sentinel-api-key-value-1234567890"
    monkeypatch.setenv("VLLM_API_KEY", sentinel)
    plan = sample_plan(public=True, api_key="environment", secret_env=["HF_TOKEN", "VLLM_API_KEY"])
    for fmt in FORMATS:
        assert sentinel not in render(plan, fmt)
    assert os.environ["VLLM_API_KEY"] == sentinel


def test_the_native_script_prints_the_bind_serve_launches() -> None:
    """``plan --format native`` shows what ``serve --engine native`` runs: 127.0.0.1 unless
    the arguments name a --host (vLLM's own default is every interface)."""
    plan = sample_plan(vllm_args=["--port", "8000"])
    argv = shlex.split(native_script(plan).strip().splitlines()[-1])
    assert argv[3:] == ["--host", "127.0.0.1", "--port", "8000"]
    opened = sample_plan(vllm_args=["--port", "8000", "--host", "0.0.0.0"])
    argv = shlex.split(native_script(opened).strip().splitlines()[-1])
    assert argv[3:] == ["--port", "8000", "--host", "0.0.0.0"]


@pytest.mark.parametrize(
    ("change", "error_id"),
    [
        ({"image": "--privileged"}, "bad_image"),
        ({"image": "img --privileged"}, "bad_image"),
        ({"container_name": "-x"}, "bad_name"),
        ({"container_name": "a b"}, "bad_name"),
    ],
)
@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "json"])
def test_a_name_or_image_that_would_read_as_an_option_is_refused(
    change: dict[str, str], error_id: str, fmt: str
) -> None:
    """A plan read back from a record (``runtime.plans``) is data: an image or container
    name that docker would take as an option never reaches a command line."""
    plan = sample_plan()
    for key, value in change.items():
        setattr(plan, key, value)
    if fmt == "native" and "image" in change:
        return  # the native rendering runs no image
    with pytest.raises(UsageError) as refused:
        render(plan, fmt)
    assert refused.value.id == error_id
    with pytest.raises(UsageError):
        docker_argv(plan)
