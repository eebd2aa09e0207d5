"""Issue 26, finding 9: no ``--env`` value in a plan, an argv or a rendering.

Every name and value shape the issue lists, through the real CLI (``instinct plan``) and
the options an agent sends: a credential given a value on the command line is refused
(``--env`` and ``--env-literal`` alike) and the value is in no output; passed by name from
the caller's environment, it is named and never written; a value no rule recognises, given
with ``--env NAME=VALUE``, is passed by name too; only ``--env-literal`` writes one.
"""

from __future__ import annotations

import contextvars
import json
import os
import random
import subprocess
import sys
from typing import Any

import pytest
import yaml

from instinct_serve.agents import core, inputs
from instinct_serve.credentials import Redactor, is_secret_name, looks_like_token, secret_values
from instinct_serve.errors import UsageError
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions
from instinct_serve.plan.render import docker_argv, render
from instinct_serve.runtime.secret_env import give, given, local_secrets

CLI = [sys.executable, "-m", "instinct_serve"]
HF = "/srv/hf-cache"
FORMATS = ("docker", "argv", "shell", "compose", "k8s", "native")


# Fixed draws: pytest-xdist workers must collect the same parametrized ids.
_DRAW = random.Random(26)


def _tail() -> str:
    return f"{_DRAW.getrandbits(128):032x}"


# The names and value shapes of the finding (and the shapes the detection was extended by).
LISTED_NAMES = ("SSH_KEY", "PASS", "SESSION_ID", "COOKIE", "BEARER", "AUTH_HEADER")
EXTRA_NAMES = ("DB_PASSWORD", "GITHUB_TOKEN", "CLIENT_SECRET", "OPENAI_APIKEY", "AWS_SECRET_KEY")
SHAPES = {
    "sk": "sk-proj-" + _tail(),
    "ghp": "ghp_" + _tail()[:36].ljust(36, "A"),
    "github_pat": "github_pat_" + _tail() + _tail()[:20],
    "hf": "hf_" + _tail()[:34].ljust(34, "b"),
    "slack": "xoxb-1234567890-" + _tail(),
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + _tail(),
    "aws": "AKIA" + _tail()[:16].upper(),
    "bearer": "Bearer " + _tail(),
    "url": f"postgres://app:{_tail()}@db.internal/app",
}
LISTED = [(name, "value-" + _tail()) for name in (*LISTED_NAMES, *EXTRA_NAMES)] + [
    ("MY_VALUE", value) for value in SHAPES.values()
]


def _plan_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "plan", "Qwen/Qwen3.5-9B", "--gpu", "mi300x", "--hf-cache", HF, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _secret_part(value: str) -> str:
    """What must never show: the value without the words a shape keeps readable."""
    return value.removeprefix("Bearer ").split(":")[-1].split("@")[0]


# ------------------------------------------------------------------ detection


@pytest.mark.parametrize("name", [*LISTED_NAMES, *EXTRA_NAMES, "HF_TOKEN", "NGROK_AUTHTOKEN"])
def test_credential_names_are_recognised(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        *("TOKENIZERS_PARALLELISM", "MAX_TOKENS", "KEYS_DIR", "BYPASS", "SSH_ASKPASS", "PWD"),
        *("OLDPWD", "AUTH_MODE", "MONKEY", "SSH_AUTH_SOCK", "XAUTHORITY", "VLLM_USE_V1"),
    ],
)
def test_settings_are_not_credentials(name: str) -> None:
    """A name merely containing a word (KEYS, TOKENS, PASS in BYPASS) is a setting: its
    value stays readable in logs and may be given with --env-literal."""
    assert not is_secret_name(name)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_credential_shapes_are_recognised_and_redacted_in_logs(shape: str) -> None:
    value = SHAPES[shape]
    assert looks_like_token(value)
    line = f"INFO 01-01 loaded with {value} from the environment"
    redacted = Redactor([]).text(line)
    assert _secret_part(value) not in redacted and "[redacted]" in redacted


def test_settings_values_are_left_readable() -> None:
    line = "task-1234567890123456789012 http://0.0.0.0:8000/v1 Bearer $VLLM_API_KEY /dev/shm/x"
    assert Redactor([]).text(line) == line


def test_the_environment_redactor_knows_the_new_names() -> None:
    environ = {name: value for name, value in LISTED[: len(LISTED_NAMES)]}
    environ |= {"KEYS_DIR": "/srv/keys/directory", "PWD": "/home/someone/work"}
    found = secret_values(environ)
    assert {v for _n, v in LISTED[: len(LISTED_NAMES)]} <= set(found)
    assert "/srv/keys/directory" not in found and "/home/someone/work" not in found


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(("name", "value"), LISTED)
def test_a_credential_with_a_value_is_refused_on_both_flags(name: str, value: str) -> None:
    for field, flag in (("extra_env", "--env"), ("env_literal", "--env-literal")):
        with pytest.raises(UsageError) as refused:
            PlanOptions.parse({"gpu": "mi300x", field: {name: value}})
        err = refused.value
        assert err.id == "secret_in_args", (flag, err)
        assert f"--env {name}" in (err.fix or "")  # the fix: pass it by name
        assert _secret_part(value) not in json.dumps(err.to_dict())


@pytest.mark.parametrize(("name", "value"), LISTED[:3] + LISTED[-3:])
def test_the_cli_refuses_them_without_printing_the_value(name: str, value: str) -> None:
    for flag in ("--env", "--env-literal"):
        done = _plan_cli(flag, f"{name}={value}", "--json")
        assert done.returncode == 2, done.stderr
        assert json.loads(done.stdout)["error"]["id"] == "secret_in_args"
        assert _secret_part(value) not in done.stdout + done.stderr


def test_a_setting_the_plan_reads_must_be_literal() -> None:
    for name in ("VLLM_USE_V1", "VLLM_CPU_KVCACHE_SPACE", "HIP_VISIBLE_DEVICES", "VLLM_CACHE_ROOT"):
        with pytest.raises(UsageError) as refused:
            make_plan(PlanOptions.parse({"gpu": "mi300x", "extra_env": {name: "0"}}))
        assert refused.value.id == "bad_env"
        assert f"--env-literal {name}=" in (refused.value.fix or "")
    literal = make_plan(PlanOptions.parse({"gpu": "mi300x", "env_literal": {"VLLM_USE_V1": "0"}}))
    assert literal.plan.env["VLLM_USE_V1"] == "0"
    with pytest.raises(UsageError) as twice:
        PlanOptions.parse({"gpu": "mi300x", "extra_env": ["A=x"], "env_literal": ["A=y"]})
    assert twice.value.id == "bad_env"
    with pytest.raises(UsageError) as bare:
        PlanOptions.parse({"gpu": "mi300x", "env_literal": ["JUST_A_NAME"]})
    assert bare.value.id == "bad_env_literal"


# ------------------------------------------------------------------ by name, every output


@pytest.mark.parametrize(("name", "value"), LISTED)
def test_passed_from_the_environment_it_is_named_never_written(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real CLI's plan JSON, and every rendering of the same plan (in process)."""
    env = {**os.environ, name: value}
    doc = _plan_cli("--env", name, "--json", env=env)
    assert doc.returncode == 0, doc.stderr
    plan = json.loads(doc.stdout)
    assert name in plan["secret_env"] and name not in plan["env"]
    assert _secret_part(value) not in doc.stdout + doc.stderr
    monkeypatch.setenv(name, value)
    made = make_plan(PlanOptions.parse({"gpu": "mi300x", "hf_cache": HF, "extra_env": [name]}))
    assert made.plan.plan_hash == plan["plan_hash"]
    argv = docker_argv(made.plan)
    assert argv[argv.index(name) - 1] == "--env"
    for fmt in (*FORMATS, "json"):
        text = render(made.plan, fmt)
        assert name in text and _secret_part(value) not in text, fmt


def test_a_value_given_with_env_goes_by_name_in_every_format() -> None:
    value = "given-" + _tail()
    given_flag = ("--env", f"MY_SETTING={value}")
    doc = _plan_cli(*given_flag, "--json")
    assert doc.returncode == 0, doc.stderr
    plan = json.loads(doc.stdout)
    assert "MY_SETTING" in plan["secret_env"] and "MY_SETTING" not in plan["env"]
    why = [r["why"] for r in plan["reasons"] if r["item"] == "--env MY_SETTING"]
    assert why and "given on the command line" in why[0]
    outputs: dict[str, subprocess.CompletedProcess[str]] = {
        fmt: _plan_cli(*given_flag, "--format", fmt) for fmt in FORMATS
    }
    for fmt, out in outputs.items():
        assert out.returncode == 0, (fmt, out.stderr)
        assert value not in out.stdout + out.stderr, fmt
    argv = outputs["argv"].stdout.splitlines()
    assert argv[argv.index("MY_SETTING") - 1] == "--env"
    assert "  --env MY_SETTING \\\n" in outputs["docker"].stdout  # the pasteable script
    assert "export MY_SETTING=" in outputs["docker"].stderr  # how to provide it
    assert "export MY_SETTING=" in outputs["shell"].stderr
    compose_text = outputs["compose"].stdout
    assert compose_text.startswith("# passed by name") and "export MY_SETTING=" in compose_text
    service = yaml.safe_load(compose_text)["services"]["vllm-qwen3-5-9b"]
    assert "MY_SETTING" in service["environment"]  # bare: from docker compose's environment
    k8s_text = outputs["k8s"].stdout
    assert "create secret generic my-setting --from-literal=value=<MY_SETTING>" in k8s_text
    refs = [
        e["valueFrom"]["secretKeyRef"]
        for d in yaml.safe_load_all(k8s_text)
        if d and d.get("kind") == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
        for e in c.get("env", [])
        if e["name"] == "MY_SETTING"
    ]
    assert refs == [{"name": "my-setting", "key": "value", "optional": True}]
    assert "# MY_SETTING: taken from your environment" in outputs["native"].stdout


def test_env_literal_is_written_and_part_of_the_plan() -> None:
    one = _plan_cli("--env-literal", "MY_SETTING=first-value", "--json")
    two = _plan_cli("--env-literal", "MY_SETTING=second-value", "--json")
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    first, second = json.loads(one.stdout), json.loads(two.stdout)
    assert first["env"]["MY_SETTING"] == "first-value" and "MY_SETTING" not in first["secret_env"]
    assert first["plan_hash"] != second["plan_hash"]
    shell = _plan_cli("--env-literal", "MY_SETTING=first-value", "--format", "shell")
    assert "-e MY_SETTING=first-value" in shell.stdout


# ------------------------------------------------------------------ the agents' inputs


def _mcp_plan(**raw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = core.plan(
        inputs.PlanInput.model_validate({"gpu": "mi300x", "hf_cache": HF, **raw})
    ).doc
    return doc


def test_the_mcp_plan_has_the_same_semantics() -> None:
    value = "agent-given-" + _tail()
    options = inputs.PlanInput.model_validate(
        {"extra_env": {"MY_SETTING": value}, "env_literal": {"PLAIN": "1"}}
    ).options()
    assert options.extra_env == {"MY_SETTING": value} and options.env_literal == {"PLAIN": "1"}
    doc = _mcp_plan(extra_env={"MY_SETTING": value}, env_literal={"PLAIN": "1"})
    text = json.dumps(doc)
    assert value not in text
    plan = doc.get("plan", doc)
    assert "MY_SETTING" in plan["secret_env"] and plan["env"]["PLAIN"] == "1"
    schema = inputs.ServeInput.model_json_schema()["properties"]
    said = schema["extra_env"]["description"]  # the agent's wording (agents/schema.py)
    assert "env_literal" in schema and "never written in the plan" in said and "NAME" in said
    for name, value in LISTED[:2]:
        with pytest.raises(UsageError) as refused:
            inputs.ServeInput.model_validate({"env_literal": {name: value}}).options()
        assert refused.value.id == "secret_in_args"


# ------------------------------------------------------------------ the launch's values


def test_given_values_win_and_stay_in_their_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """``give`` is what serve does with --env NAME=VALUE: the launch's by-name values; an
    MCP call runs in a copied context, so another call never sees them."""
    monkeypatch.setenv("MY_SETTING", "from-the-environment")

    def one_call() -> dict[str, str]:
        give({"MY_SETTING": "given-here", "EMPTY": ""})
        return local_secrets(["MY_SETTING", "EMPTY", "HF_TOKEN_NOT_SET"])

    assert contextvars.copy_context().run(one_call) == {"MY_SETTING": "given-here", "EMPTY": ""}
    assert given() == {}  # the caller's context never saw them
    assert local_secrets(["MY_SETTING"]) == {"MY_SETTING": "from-the-environment"}
