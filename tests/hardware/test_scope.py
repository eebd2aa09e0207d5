"""Which GPUs this tool serves (``hardware.scope``): detect says it, plans refuse the rest.

A consumer Radeon (the RX 7900 XT capture), an MI100 (gfx908) or an NVIDIA name must get
a plain answer and what to do instead, never a plan with MI300X settings.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hardware.inventory import Gpu, GpuInventory
from instinct_serve.hardware.profiles import GFX_TARGETS
from instinct_serve.hardware.scope import document, scope_of
from instinct_serve.hardware.target import catalog_key, resolve_target
from instinct_serve.options import FitRequest, PlanOptions
from tests.checks.conftest import run_one
from tests.hardware import sysfs_tree
from tests.hardware.conftest import ROCM_QUERY, fixture
from tests.hardware.sysfs_tree import mi300x, radeon_7900xt
from tests.infra.cli import run_instinct
from tests.infra.fakebin import FakeBin

RADEON = "rocm-smi_productname_use_meminfo_vram_RX7900XT.txt"


def instinct(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "160", "NO_COLOR": "1", "HF_HUB_OFFLINE": "1"}
    return run_instinct(args, env=env, timeout=60)


def inv(*gfx: str) -> GpuInventory:
    return GpuInventory(
        gpus=[Gpu(i, f"GPU {g}", g, vram_total_bytes=2**34) for i, g in enumerate(gfx)]
    )


@pytest.mark.parametrize(
    ("gfx", "kind"),
    [
        *[(g, "instinct") for g in GFX_TARGETS],
        ("gfx1100", "radeon"),
        ("gfx1201", "radeon"),
        ("gfx1030", "radeon"),
        ("gfx908", "older_instinct"),
        ("gfx906", "older_instinct"),
        ("gfx803", "unknown"),
    ],
)
def test_kinds_by_gfx(gfx: str, kind: str) -> None:
    scope = scope_of(inv(gfx))
    assert (scope.supported, scope.kind) == (kind == "instinct", kind)
    if not scope.supported:
        assert gfx in scope.message and "--force" in scope.fix and "gfx90a" in scope.fix


def test_one_unserved_gpu_makes_the_host_unserved() -> None:
    scope = scope_of(inv("gfx942", "gfx942", "gfx1100"))
    assert not scope.supported and scope.kind == "radeon"
    doc = document(inv("gfx942", "gfx1100"))
    assert doc["supported"] is False and doc["support"]["kind"] == "radeon"
    assert document(inv("gfx950"))["support"] is None
    assert document(GpuInventory())["supported"] is False


def test_detect_on_a_radeon_exits_3_and_says_what_it_is(tools: FakeBin, root: Path) -> None:
    tools.add("rocm-smi", {ROCM_QUERY: fixture(RADEON)})
    result = instinct("detect", "--json", "--sysfs-root", str(root))
    assert result.returncode == 3, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["gfx_version"], doc["gpu_count"], doc["supported"]) == ("gfx1100", 1, False)
    assert doc["support"]["kind"] == "radeon"
    assert "Radeon RX 7900 XT" in doc["support"]["message"]
    human = instinct("detect", "--sysfs-root", str(root))
    assert human.returncode == 3
    assert "consumer Radeon" in human.stderr


def test_plan_on_a_radeon_is_refused_unless_forced(tools: FakeBin, root: Path) -> None:
    """Refused with what to do; forced, the most conservative row's settings (AITER off),
    never the MI300X env, and the 20 GB card still sized (a 27B model does not fit; an 8B one
    does at a short context since vLLM's V2 runner charges no graph memory to the KV budget)."""
    tools.add("rocm-smi", {ROCM_QUERY: fixture(RADEON)})
    refused = instinct("plan", "Qwen/Qwen3-0.6B", "--json")
    assert refused.returncode == 3, refused.stdout + refused.stderr
    err = json.loads(refused.stdout)["error"]
    assert err["id"] == "unsupported_gpu" and err["details"]["kind"] == "radeon"
    assert "vllm/vllm-openai-rocm" in err["fix"]
    forced = instinct("plan", "Qwen/Qwen3-0.6B", "--json", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    plan = json.loads(forced.stdout)
    assert plan["env"].get("VLLM_ROCM_USE_AITER") == "0"
    assert plan["gpu_name"] == "Radeon RX 7900 XT" and plan["gfx_version"] == "gfx1100"
    assert any("using gfx90a's settings" in w for w in plan["warnings"])
    too_big = instinct("plan", "Qwen/Qwen3.5-27B", "--json", "--force")
    assert json.loads(too_big.stdout)["error"]["id"] == "does_not_fit"


def test_resolve_target_refuses_for_plans_and_notes_for_fit() -> None:
    mi100 = GpuInventory(gpus=[Gpu(0, "AMD Instinct MI100", "gfx908", vram_total_bytes=2**35)])
    with pytest.raises(NotReadyError) as err:
        resolve_target(PlanOptions.parse({}), lambda: mi100, refuse_unsupported=True)
    assert err.value.id == "unsupported_gpu" and "MI100" in err.value.message
    noted = resolve_target(FitRequest.parse({"model": "m"}), lambda: mi100)
    assert any("older than" in n and "gfx90a's settings" in n for n in noted.notes)
    assert catalog_key(mi100) == "gfx90a"  # the forced row


def test_an_nvidia_name_is_answered_not_guessed() -> None:
    with pytest.raises(InstinctError) as err:
        PlanOptions.parse({"gpu": "h100"})
    assert err.value.id == "not_amd_gpu"
    assert "vllm/vllm-openai" in (err.value.fix or "")


def test_check_gpu_supported(tools: FakeBin, tmp_path: Path) -> None:
    served = sysfs_tree.build(tmp_path / "a", [mi300x(0), mi300x(1)])
    ok = run_one("gpu_supported", root=str(served))
    assert ok.status == "ok" and "gfx942" in ok.message
    radeon = sysfs_tree.build(tmp_path / "b", [radeon_7900xt()])
    refused = run_one("gpu_supported", root=str(radeon))
    assert refused.status == "error" and refused.details["kind"] == "radeon"
    assert "gfx1100" in refused.message and refused.fix
    none = run_one("gpu_supported", root=str(sysfs_tree.build(tmp_path / "c", [])))
    assert none.status == "skip"
