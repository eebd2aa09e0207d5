"""The flag matrix: every shared option, through every surface (fit, plan, serve on the
command line; the MCP fit, plan and serve inputs), with good and bad values.

One table drives it. A bad value must be refused with the same error id everywhere, as
``{"error": {"id", "message", "fix"}}`` on stdout under ``--json`` with exit code 2; a good
value must not be refused as an option error anywhere.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from instinct_serve.agents import inputs
from instinct_serve.cli.main import main
from instinct_serve.errors import UsageError
from instinct_serve.options import FitRequest, PlanOptions, ServeOptions, declared

MODEL = "Qwen/Qwen3.5-9B"

# (option, CLI flag, good values, bad values -> error id); which jobs take it.
SHARED = ("fit", "plan", "serve")
LAUNCH = ("plan", "serve")
MATRIX: list[tuple[str, str, tuple[str, ...], dict[str, str], tuple[str, ...]]] = [
    (
        "gpu",
        "--gpu",
        ("mi300x", "gfx942", "MI-355X", "AMD Instinct MI325X"),
        {"h100": "not_amd_gpu", "RTX 4090": "not_amd_gpu", "gfx1100": "unknown_gpu_profile"},
        SHARED,
    ),
    ("gfx", "--gfx", ("gfx950",), {"gfx000": "unknown_gpu_profile"}, SHARED),
    (
        "vram_gb",
        "--vram-gb",
        ("80", "191.5"),
        {
            "0": "bad_vram",
            "-1": "bad_vram",
            "lots": "bad_vram",
            "nan": "bad_vram",
            "1e9": "bad_vram",
        },
        SHARED,
    ),
    ("vram_gib", "--vram-gib", ("192",), {"0": "bad_vram", "inf": "bad_vram"}, SHARED),
    (
        "gpu_count",
        "--gpu-count",
        ("1", "4"),
        {"0": "bad_gpu_count", "1000000000": "bad_gpu_count", "1.5": "bad_gpu_count"},
        SHARED,
    ),
    (
        "gpus",
        "--gpus",
        ("0,1", "3"),
        {"0,0": "bad_gpus", "a": "bad_gpus", "-1": "bad_gpus"},
        SHARED,
    ),
    ("tp", "--tp", ("1", "2"), {"3": "bad_tp", "0": "bad_tp", "two": "bad_tp"}, SHARED),
    (
        "speculative_mtp",
        "--speculative-mtp",
        ("1", "2"),
        {
            "-1": "bad_speculative_mtp",
            "65": "bad_speculative_mtp",
            "two": "bad_speculative_mtp",
        },
        SHARED,
    ),
    (
        "max_model_len",
        "--max-model-len",
        ("32768", "32k", "32K", "1M", "1m"),
        {"1.5M": "bad_max_model_len", "0": "bad_max_model_len", "auto": "bad_max_model_len"},
        SHARED,
    ),
    (
        "kv_cache_dtype",
        "--kv-cache-dtype",
        ("fp8", "auto", "fp8_e4m3", "FP8", "FP8_E4M3"),
        {"fp4": "bad_kv_cache_dtype", "fp 8": "bad_kv_cache_dtype"},
        SHARED,
    ),
    (
        "gpu_memory_utilization",
        "--gpu-memory-utilization",
        ("0.9", "1"),
        {
            "1.5": "bad_gpu_memory_utilization",
            "0": "bad_gpu_memory_utilization",
            "90": "bad_gpu_memory_utilization",
            "nan": "bad_gpu_memory_utilization",
        },
        SHARED,
    ),
    (
        "port",
        "--port",
        ("8001",),
        {"0": "bad_port", "70000": "bad_port", "http": "bad_port"},
        LAUNCH,
    ),
    (
        "name",
        "--name",
        ("my-endpoint",),
        {"-rm": "bad_name", "a b": "bad_name", "x" * 200: "bad_name"},
        LAUNCH,
    ),
    ("max_num_seqs", "--max-num-seqs", ("64",), {"0": "bad_max_num_seqs"}, ("fit",)),
    ("timeout_s", "--timeout", ("60",), {"nan": "bad_timeout_s", "0": "bad_timeout_s"}, ("serve",)),
]
CASES = [
    (job, name, flag, value, bad.get(value))
    for name, flag, good, bad, jobs in MATRIX
    for job in jobs
    for value in (*good, *bad)
]
TYPES = {"fit": FitRequest, "plan": PlanOptions, "serve": ServeOptions}
MCP = {"fit": inputs.FitInput, "plan": inputs.PlanInput, "serve": inputs.ServeInput}


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), out, err


def last_json(out: str) -> dict[str, Any]:
    """The document: pretty-printed JSON, or the last line of serve's JSON Lines."""
    try:
        doc: dict[str, Any] = json.loads(out)
    except ValueError:
        doc = json.loads(out.strip().splitlines()[-1])
    return doc


def argv_for(job: str, flag: str, value: str) -> list[str]:
    # --gpu mi300x keeps detection out of the way (except where --gpu is the option).
    gpu = [] if flag in ("--gpu", "--gfx") else ["--gpu", "mi300x"]
    if flag == "--gfx":
        gpu = []
    return [job, MODEL, *gpu, f"{flag}={value}", "--json"]


def mcp_error(job: str, arguments: dict[str, Any]) -> UsageError | None:
    """What the MCP server answers for these arguments: the input model, then ``parse``."""
    model = MCP[job]
    try:
        inp = model.model_validate(arguments)
    except ValidationError as exc:
        mapped = model.option_error(exc)
        assert mapped is not None, exc
        return mapped
    try:
        inp.options()
    except UsageError as exc:
        return exc
    return None


def test_every_option_of_every_job_is_in_the_matrix_or_job_specific() -> None:
    covered = {name for name, *_ in MATRIX}
    shared = set.intersection(*({n for n, _s, _d in declared(t)} for t in TYPES.values()))
    assert shared <= covered | {"model"}, shared - covered


@pytest.mark.parametrize(("job", "name", "flag", "value", "error_id"), CASES)
def test_the_cli_takes_or_refuses_each_value_as_json(
    job: str,
    name: str,
    flag: str,
    value: str,
    error_id: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if job == "serve":  # past the options, serve checks this host: keep it quick and local
        monkeypatch.setenv("PATH", "/nonexistent")
    code, out, err = cli(argv_for(job, flag, value), capsys)
    if error_id is None:
        if job != "serve":
            assert code == 0, out + err
        else:
            assert code != 2 or last_json(out)["error"]["id"] not in (
                f"bad_{name}",
                "unknown_gpu_profile",
            ), out
        return
    doc = last_json(out)
    error = doc["error"]
    assert code == 2, out + err
    assert error["id"] == error_id, error
    assert error["message"] and error["fix"], error
    assert "Traceback" not in out + err


@pytest.mark.parametrize(("job", "name", "flag", "value", "error_id"), CASES)
def test_the_mcp_input_takes_or_refuses_each_value_the_same_way(
    job: str, name: str, flag: str, value: str, error_id: str | None
) -> None:
    arguments: dict[str, Any] = {"model": MODEL, name: value}
    if name not in ("gpu", "gfx"):
        arguments["gpu"] = "mi300x"
    if name == "gpus":
        arguments[name] = value
    found = mcp_error(job, arguments)
    if error_id is None:
        assert found is None, found.to_dict() if found else None
    else:
        assert found is not None and found.id == error_id, found.to_dict() if found else None
        assert found.exit_code == 2


def test_json_values_convert_as_the_cli_strings_do() -> None:
    """An agent sends JSON numbers and lists; the result is the same typed options."""
    from_cli = PlanOptions.parse(
        {"model": MODEL, "gpu": "mi300x", "tp": "2", "max_model_len": "32k", "gpus": "0,1"}
    )
    from_json = inputs.PlanInput.model_validate(
        {"model": MODEL, "gpu": "mi300x", "tp": 2, "max_model_len": "32k", "gpus": [0, 1]}
    ).options()
    assert from_cli == from_json
    assert from_json.max_model_len == 32000 and from_json.gpus == [0, 1]


def test_click_usage_errors_are_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["plan", "--no-such-flag", "--json"], capsys)
    assert code == 2 and last_json(out)["error"]["id"] == "bad_usage"
    code, out, _ = cli(["fit", "--json"], capsys)
    assert code == 2 and last_json(out)["error"]["id"] in ("bad_usage", "bad_model")


def test_a_secret_is_refused_on_every_surface(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["plan", "--gpu", "mi300x", "--env", "HF_TOKEN=hf_x", "--json"], capsys)
    assert code == 2 and last_json(out)["error"]["id"] == "secret_in_args"
    found = mcp_error("serve", {"gpu": "mi300x", "extra_env": {"MY_API_KEY": "abc"}})
    assert found is not None and found.id == "secret_in_args"
    code, out, _ = cli(["plan", "--gpu", "mi300x", "--env", "1BAD=x", "--json"], capsys)
    assert code == 2 and last_json(out)["error"]["id"] == "bad_extra_env"


def test_the_help_lists_the_gpus_from_the_profile_table(capsys: pytest.CaptureFixture[str]) -> None:
    from instinct_serve.hardware.profiles import GFX_TARGETS, PROFILES

    for job in SHARED:
        code, out, _ = cli([job, "--help"], capsys)
        assert code == 0
        flat = " ".join(out.split())
        for key in (*PROFILES, *GFX_TARGETS):
            assert key in flat, (job, key)


# The manifest options of `plan --format k8s` (options.KubernetesOptions): command line
# only, since the MCP plan tool answers with the plan document, not manifests.
K8S_MATRIX: list[tuple[str, str, tuple[str, ...], dict[str, str]]] = [
    ("namespace", "--namespace", ("llm", "team-a"), {"Team_A": "bad_namespace"}),
    ("replicas", "--replicas", ("1", "3"), {"0": "bad_replicas", "two": "bad_replicas"}),
    ("nodes", "--nodes", ("1",), {"0": "bad_nodes", "100": "bad_nodes"}),
    ("storage_class", "--storage-class", ("nfs-rwx", "cephfs.csi"), {"NFS": "bad_storage_class"}),
    ("socket_ifname", "--socket-ifname", ("eth0", "ib0,ib1"), {"a b": "bad_socket_ifname"}),
    (
        "prometheus_url",
        "--prometheus-url",
        ("http://prom.monitoring:9090", "https://thanos.example/api"),
        {"ftp://x": "bad_prometheus_url", "prom:9090": "bad_prometheus_url"},
    ),
]
K8S_CASES = [
    (flag, value, bad.get(value))
    for _name, flag, good, bad in K8S_MATRIX
    for value in (*good, *bad)
]


@pytest.mark.parametrize(("flag", "value", "error_id"), K8S_CASES)
def test_the_manifest_options_take_or_refuse_each_value(
    flag: str, value: str, error_id: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    base = ["plan", MODEL, "--gpu", "mi300x", f"{flag}={value}"]
    if error_id is None:
        code, out, err = cli([*base, "--format", "k8s"], capsys)
        assert code == 0, err
        assert {d["kind"] for d in yaml.safe_load_all(out)} >= {"Service", "Deployment"}
        return
    code, out, _ = cli([*base, "--json"], capsys)
    assert code == 2 and last_json(out)["error"]["id"] == error_id


def test_the_manifest_options_need_the_k8s_format(capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (["--autoscale"], ["--nodes", "2", "--gpu-count", "16"]):
        code, out, _ = cli(["plan", MODEL, "--gpu", "mi300x", *extra, "--json"], capsys)
        assert code == 2 and last_json(out)["error"]["id"] == "k8s_only", extra
    code, out, _ = cli(["plan", MODEL, "--gpu", "mi300x", "--replicas", "1", "--json"], capsys)
    assert code == 0, out  # the defaults, spelled out, are no manifest option
    # without --format k8s, --replicas means copies on this host behind one router
    code, out, _ = cli(["plan", MODEL, "--gpu", "mi300x", "--replicas", "2", "--json"], capsys)
    assert code == 0 and last_json(out)["replicas"]["count"] == 2, out


def test_manifest_option_rules_across_fields(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", MODEL, "--gpu", "mi300x", "--format", "k8s"]
    for extra, problem in (
        (["--max-replicas", "4"], "only bounds --autoscale"),
        (["--autoscale", "--replicas", "3", "--max-replicas", "2"], "is below --replicas 3"),
        (["--nodes", "2"], "needs the GPUs of all nodes"),
        (["--nodes", "2", "--gpu-count", "16"], "do not split evenly"),  # an 8B model: TP 1
    ):
        code, out, err = cli([*base, *extra], capsys)
        assert code == 2 and not out, (extra, out)
        assert problem in " ".join(err.split()), (extra, err)


def test_the_manifest_options_are_not_offered_where_they_mean_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from instinct_serve.options import KubernetesOptions

    names = {name for name, _spec, _default in declared(KubernetesOptions)}
    # --replicas is the plan's (copies on this host, or the Deployment's pods with k8s)
    assert names | {"replicas"} == {name for name, *_ in K8S_MATRIX} | {
        "autoscale",
        "max_replicas",
    }
    for model in (inputs.PlanInput, inputs.ServeInput):
        assert not names & set(model.model_fields), model
    assert not names & {n for n, _s, _d in declared(ServeOptions)}
    _code, out, _ = cli(["serve", "--help"], capsys)
    assert "--replicas" in out and "--nodes" not in out


# instinct watch / rollback (command line only): name, flag, good values, bad value -> id
WATCH_MATRIX = [
    ("interval_s", "--interval", ("0.5", "30"), {"0": "bad_interval_s", "nan": "bad_interval_s"}),
    ("backoff_s", "--backoff", ("0", "12.5"), {"-1": "bad_backoff_s", "301": "bad_backoff_s"}),
    ("unhealthy_after", "--unhealthy-after", ("1",), {"0": "bad_unhealthy_after"}),
    ("max_restarts", "--max-restarts", ("2",), {"1.5": "bad_max_restarts"}),
    ("max_checks", "--checks", ("4",), {"0": "bad_max_checks"}),
    ("duration_s", "--for", ("60",), {"0": "bad_duration_s", "-5": "bad_duration_s"}),
    ("timeout_s", "--timeout", ("600",), {"inf": "bad_timeout_s", "0.5": "bad_timeout_s"}),
    ("canary_s", "--canary", ("0", "60"), {"-1": "bad_canary_s", "86401": "bad_canary_s"}),
    ("canary_tokens", "--canary-tokens", ("1024",), {"10": "bad_canary_tokens"}),
]


def test_every_watch_option_is_in_its_matrix() -> None:
    from instinct_serve.options import WatchOptions

    assert {n for n, _s, _d in declared(WatchOptions)} == {n for n, *_ in WATCH_MATRIX}


@pytest.mark.parametrize(("name", "flag", "good", "bad"), WATCH_MATRIX)
def test_watch_takes_or_refuses_each_value(
    name: str,
    flag: str,
    good: tuple[str, ...],
    bad: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    for value in good:  # a unit that runs the watch with it again
        code, out, err = cli(["watch", "ep", "--systemd", flag, value], capsys)
        assert code == 0, err
        exec_line = next(x for x in out.splitlines() if x.startswith("ExecStart="))
        assert exec_line.endswith(f"watch ep {flag} {float(value):g}"), exec_line
    for value, error_id in bad.items():
        code, out, _ = cli(["watch", "ep", f"{flag}={value}", "--json"], capsys)
        assert code == 2 and last_json(out)["error"]["id"] == error_id, (value, out)
        if name == "timeout_s":  # rollback's relaunch is bounded the same way
            code, out, _ = cli(["rollback", "ep", f"{flag}={value}", "--json"], capsys)
            assert code == 2 and last_json(out)["error"]["id"] == error_id, (value, out)


def test_choices_whatever_the_case_and_sizes_as_vllm_reads_them() -> None:
    """One rule for every choice (``options.spec.choice_of``): the canonical value back."""
    plan = ServeOptions.parse(
        {"model": MODEL, "objective": "Throughput", "engine": "NATIVE", "kv_cache_dtype": "FP8"}
    )
    assert (plan.objective, plan.engine, plan.kv_cache_dtype) == ("throughput", "native", "fp8")
    fit = FitRequest.parse(
        {
            "model": MODEL,
            "vram_gb": "80",
            "platform": "ROCM",
            "vllm_engine": "V1",
            "max_model_len": "1M",
            "max_num_batched_tokens": "8k",
        }
    )
    assert (fit.platform, fit.vllm_engine) == ("rocm", "v1")
    assert (fit.max_model_len, fit.max_num_batched_tokens) == (2**20, 8000)
    assert PlanOptions.parse({"model": MODEL, "max_model_len": "1m"}).max_model_len == 10**6


def test_the_clis_own_choices_and_click_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["plan", MODEL, "--gpu", "MI300X", "--format", "JSON"], capsys)
    assert code == 0 and json.loads(out)["model"] == MODEL
    code, out, _ = cli(["completion", "ZSH"], capsys)
    assert code == 0 and out.startswith("#compdef instinct")
    code, out, err = cli(["plan", MODEL, "--format", "xml"], capsys)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "Error: invalid value for '--format': 'xml' is not one of 'summary', 'json', "
        "'docker', 'shell', 'native', 'compose', 'k8s'.",
        "Fix: see `instinct plan --help`",
    ]
    code, out, _ = cli(["plan", MODEL, "--nope", "--format=JSON"], capsys)
    assert code == 2 and json.loads(out)["error"]["id"] == "bad_usage"  # JSON asked: JSON


def test_a_gpu_count_beyond_one_node_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """16 MI300X are two nodes: one endpoint cannot use them (the per-node count is the
    hardware table's); spanning nodes (k8s --nodes, --hosts) plans for them together."""
    code, out, err = cli(
        ["plan", "deepseek-ai/DeepSeek-R1", "--gpu", "mi300x", "--gpu-count", "16"], capsys
    )
    assert code == 2 and not out
    assert "16 GPUs: one MI300X node holds 8" in err and "--hosts H1,H2" in err, err
    code, out, _ = cli(["plan", MODEL, "--gpu", "mi300a", "--gpu-count", "8", "--json"], capsys)
    error = last_json(out)["error"]
    assert code == 2 and error["id"] == "bad_gpu_count" and error["details"]["gpus_per_node"] == 4
    code, out, _ = cli(["plan", MODEL, "--gpu", "mi300x", "--gpu-count", "8", "--json"], capsys)
    assert code == 0, out  # a whole node is fine
    code, out, _ = cli(["plan", MODEL, "--gpu", "mi210", "--gpu-count", "4", "--json"], capsys)
    assert code == 0, out  # a PCIe card: no number per host
    k8s = ["--format", "k8s", "--nodes", "2"]
    code, out, _ = cli(
        ["plan", "deepseek-ai/DeepSeek-R1", "--gpu", "mi300x", "--gpu-count", "16", *k8s], capsys
    )
    assert code == 0 and "LeaderWorkerSet" in out
