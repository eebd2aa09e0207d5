"""Safe by default, in the plan: loopback unless --public, an API key with --public, secrets
passed by name only, and names checked wherever they come from (options, recipe files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from instinct_serve.errors import UsageError
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions, ServeOptions
from instinct_serve.plan.render import FORMATS, docker_argv, render
from tests.infra.cli import run_instinct
from tests.infra.paths import AMD_SKILL

HF = "/srv/hf-cache"
CLI = [sys.executable, "-m", "instinct_serve"]


def plan(**raw: Any) -> Any:
    raw.setdefault("gpu", "mi300x")
    raw.setdefault("gpu_count", 1)
    raw.setdefault("hf_cache", HF)
    engine = raw.pop("engine", "docker")
    opts = PlanOptions.parse(raw)
    opts.engine = engine
    return make_plan(opts).plan


def test_env_by_name_is_listed_never_valued(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both forms of --env pass by name (issue 26: a value given on the command line too);
    only --env-literal writes a value."""
    monkeypatch.setenv("MY_SETTING", "value-from-the-caller-123456")
    given = "value-given-on-the-command-line-7890"
    raw = {"extra_env": ["MY_SETTING", f"OTHER={given}"], "env_literal": ["PLAIN=1"]}
    opts = PlanOptions.parse({**raw, "gpu": "mi300x"})
    assert opts.env_by_name == ["MY_SETTING"] and opts.extra_env == {"OTHER": given}
    made = plan(**raw)
    assert {"MY_SETTING", "OTHER"} <= set(made.secret_env)
    assert "MY_SETTING" not in made.env and "OTHER" not in made.env
    assert made.env["PLAIN"] == "1"
    for fmt in FORMATS:
        text = render(made, fmt)
        assert "value-from-the-caller" not in text and given not in text
    argv = docker_argv(made)
    assert argv[argv.index("MY_SETTING") - 1] == argv[argv.index("OTHER") - 1] == "--env"
    assert "PLAIN=1" in argv
    # the same through the MCP-shaped mapping/list input
    assert PlanOptions.parse({"extra_env": ["A", "A", "B=2"]}).env_by_name == ["A"]


def test_public_needs_a_key_generated_unless_yours(monkeypatch: pytest.MonkeyPatch) -> None:
    private = plan()
    assert private.public is False and private.api_key is None
    assert "VLLM_API_KEY" not in private.secret_env
    assert "127.0.0.1:8000:8000" in docker_argv(private)

    public = plan(public=True)
    assert public.api_key == "generated" and "VLLM_API_KEY" in public.secret_env
    assert "0.0.0.0:8000:8000" in docker_argv(public)
    assert public.plan_hash != private.plan_hash  # a different launch: never reused for it
    doc = public.to_dict()
    assert doc["api_key"] == {"env": "VLLM_API_KEY", "source": "generated"}
    assert doc["bind_address"] == "0.0.0.0" and doc["public"] is True
    assert not any("--api-key" in a for a in public.vllm_args)

    monkeypatch.setenv("VLLM_API_KEY", "my-own-key-never-written-0000")
    own = plan(public=True, extra_env=["VLLM_API_KEY"])
    assert own.api_key == "environment" and own.secret_env.count("VLLM_API_KEY") == 1
    for fmt in FORMATS:
        assert "my-own-key-never-written" not in render(own, fmt)
    local_key = plan(extra_env=["VLLM_API_KEY"])  # a key on a loopback endpoint works too
    assert local_key.api_key == "environment" and not local_key.public


@pytest.mark.parametrize(
    "args",
    [
        ["--api-key", "s3cret-s3cret"],
        ["--api-key=s3cret-s3cret"],
        ["--hf-token", "hf_abcdefghijklmnopqrstuvwxyz0123456789"],
    ],
)
def test_a_secret_in_the_vllm_arguments_is_refused(args: list[str]) -> None:
    for job in (PlanOptions, ServeOptions):
        with pytest.raises(UsageError) as refused:
            job.parse({"gpu": "mi300x", "extra_args": args})
        assert refused.value.id == "secret_in_args"
        assert "by name" in (refused.value.fix or "")
        assert "s3cret" not in refused.value.message + (refused.value.fix or "")


@pytest.mark.parametrize(
    "env",
    [
        {"hf_token": "abcdefgh1"},
        {"VLLM_API_KEY": "abcdefgh2"},
        {"SOMETHING": "hf_" + "a" * 34},  # a Hub token under another name
    ],
)
def test_a_secret_value_in_env_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(UsageError) as refused:
        PlanOptions.parse({"gpu": "mi300x", "extra_env": env})
    assert refused.value.id == "secret_in_args"


def test_native_host_flag_needs_public() -> None:
    with pytest.raises(UsageError) as refused:
        plan(engine="native", extra_args=["--host", "0.0.0.0"])
    assert refused.value.id == "bad_extra_args" and "--public" in (refused.value.fix or "")
    assert plan(engine="native", extra_args=["--host", "127.0.0.1"]).public is False
    assert plan(engine="native", public=True, extra_args=["--host", "0.0.0.0"]).public


# ------------------------------------------------------------------ an imported recipe file


def _import(tmp_path: Path, base_env: dict[str, str]) -> dict[str, Any]:
    doc = json.loads((AMD_SKILL / "recipes_cache.json").read_text())
    doc["models"]["Qwen/Qwen3.5-9B"]["recipe"]["model"]["base_env"] = base_env
    path = tmp_path / "recipes.json"
    path.write_text(json.dumps(doc))
    done = run_instinct(["recipes", "import", str(path), "--json"])
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _plan_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_instinct(
        ["plan", "Qwen/Qwen3.5-9B", "--gpu", "mi300x", "--hf-cache", HF, *args], timeout=120
    )


def test_a_recipe_file_with_a_hostile_name_is_refused(tmp_path: Path) -> None:
    """The import skips that recipe and says why; no rendering ever carries the name."""
    marker = tmp_path / "pwned"
    hostile = f"X=1; touch {marker}; Y"
    imported = _import(tmp_path, {hostile: "1"})
    (skipped,) = [s for s in imported["skipped"] if "Qwen3.5-9B" in s["path"]]
    assert "environment variable name" in skipped["reason"]
    for fmt in ("native", "shell", "compose", "k8s", "json"):
        done = _plan_cli("--format", fmt)
        assert done.returncode == 0, done.stderr
        assert hostile not in done.stdout and str(marker) not in done.stdout
    assert not marker.exists()


def test_a_recipe_file_with_hostile_values_prints_a_script_that_runs_nothing(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    marker.mkdir()
    hostile = {
        "HOSTILE_A": f"$(touch {marker}/a)",
        "HOSTILE_B": f"`touch {marker}/b`",
        "HOSTILE_C": f"x; touch {marker}/c",
        "HOSTILE_D": f"x && touch {marker}/d # ' \"",
    }
    _import(tmp_path, hostile)
    done = _plan_cli("--format", "native")
    assert done.returncode == 0, done.stderr
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(tmp_path / 'call.json')!r}, 'w').write(json.dumps("
        "{k: v for k, v in os.environ.items() if k.startswith('HOSTILE')}))\n"
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    ran = subprocess.run(["sh", "-c", done.stdout], capture_output=True, text=True, env=env)
    assert ran.returncode == 0, ran.stderr
    assert list(marker.iterdir()) == []
    assert json.loads((tmp_path / "call.json").read_text()) == hostile


def test_a_recipe_value_spanning_lines_is_skipped_at_import(tmp_path: Path) -> None:
    imported = _import(tmp_path, {"HOSTILE": "x\ntouch /tmp/never"})
    (skipped,) = [s for s in imported["skipped"] if "Qwen3.5-9B" in s["path"]]
    assert "HOSTILE" in skipped["reason"]
    done = _plan_cli("--format", "native")
    assert done.returncode == 0 and "HOSTILE" not in done.stdout
