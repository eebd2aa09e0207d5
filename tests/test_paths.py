"""``paths.hf_locations``: huggingface_hub's own rules, checked against huggingface_hub itself
(run in a subprocess with each environment), and every consumer using the same answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from instinct_serve.paths import HF_ENV_NAMES, hf_locations
from tests.infra.cli import run_instinct

ENVIRONMENTS: list[dict[str, str]] = [
    {},
    {"XDG_CACHE_HOME": "/xdg"},
    {"HF_HOME": "~/hf-home"},
    {"HF_HOME": "/srv/hf", "XDG_CACHE_HOME": "/xdg"},
    {"HUGGINGFACE_HUB_CACHE": "/legacy-hub"},
    {"HF_HUB_CACHE": "/hub", "HUGGINGFACE_HUB_CACHE": "/legacy-hub"},
    {"HF_HUB_CACHE": "~/hub", "HF_HOME": "/srv/hf"},
    {"HF_TOKEN_PATH": "/secrets/hf-token", "HF_HOME": "/srv/hf"},
    {"HF_HOME": "$DATA/hf", "DATA": "/data"},
]

_PROBE = (
    "import json, huggingface_hub.constants as c; "
    "print(json.dumps([c.HF_HOME, c.HF_HUB_CACHE, c.HF_TOKEN_PATH]))"
)


@pytest.mark.parametrize("extra", ENVIRONMENTS, ids=lambda e: ",".join(e) or "defaults")
def test_the_same_places_as_huggingface_hub(extra: dict[str, str], tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", ""), **extra}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout
    home, hub, token = json.loads(out)
    places = hf_locations(env)
    assert (places.home, places.hub_cache, places.token_file) == (home, hub, token)


def test_it_says_which_variable_decided() -> None:
    assert hf_locations({"HOME": "/h"}).hub_cache_from == "default"
    assert hf_locations({"HOME": "/h", "XDG_CACHE_HOME": "/x"}).home_from == "XDG_CACHE_HOME"
    legacy = hf_locations({"HOME": "/h", "HUGGINGFACE_HUB_CACHE": "/l"})
    assert (legacy.hub_cache, legacy.hub_cache_from) == ("/l", "HUGGINGFACE_HUB_CACHE")
    assert set(HF_ENV_NAMES) >= {"HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}


def plan_mount(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The HF cache mount of a real ``instinct plan --json`` run with ``env``."""
    run_env = {
        "HOME": str(tmp_path / "home"),
        "PATH": os.environ.get("PATH", ""),
        "HF_HUB_OFFLINE": "1",
        "INSTINCT_CACHE_DIR": str(tmp_path / "cache"),
        "INSTINCT_DATA_DIR": str(tmp_path / "data"),
        **env,
    }
    done = run_instinct(["plan", "--gpu", "mi300x", "--json"], env=run_env)
    assert done.returncode == 0, done.stderr  # as check=True
    out = done.stdout
    [mount] = json.loads(out)["mounts"]
    return {"host": mount["host"], "container": mount["container"]}


def test_the_plan_mounts_what_huggingface_hub_would_use(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert plan_mount({}, tmp_path) == {
        "host": f"{home}/.cache/huggingface",
        "container": "/root/.cache/huggingface",
    }
    # the legacy name of the hub cache (was: ~/.cache/huggingface mounted, /x read by fit)
    assert plan_mount({"HUGGINGFACE_HUB_CACHE": "/x"}, tmp_path) == {
        "host": "/x",
        "container": "/root/.cache/huggingface/hub",
    }
    # XDG_CACHE_HOME moves the HF home (was: the token looked for there, ~/.cache mounted)
    assert plan_mount({"XDG_CACHE_HOME": "/xdg"}, tmp_path) == {
        "host": "/xdg/huggingface",
        "container": "/root/.cache/huggingface",
    }


def test_fit_reads_the_hub_cache_the_plan_mounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from instinct_serve.gather.model_dir import hf_cache_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HUGGINGFACE_HUB_CACHE", str(tmp_path / "legacy"))
    assert hf_cache_dir() == tmp_path / "legacy"
