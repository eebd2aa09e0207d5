"""``recipes search``: a family name resolves to what the GPUs can serve, not the shortest id."""

from __future__ import annotations

import json
import subprocess
import sys

from instinct_serve.catalog.search import SearchTarget, search
from instinct_serve.catalog.store import load_catalog
from instinct_serve.hardware.profiles import PROFILES

MI300X = PROFILES["mi300x"]
NODE = SearchTarget("mi300x", MI300X.vram_bytes, 8, "8x AMD Instinct MI300X")


def test_a_family_name_ranks_a_text_model_that_fits_before_the_shortest_name() -> None:
    catalog = load_catalog()
    deepseek = [h.model_id for h in search(catalog, "deepseek", NODE)]
    assert deepseek[0] != "deepseek-ai/DeepSeek-OCR"  # was: the shortest name won
    assert deepseek.index("deepseek-ai/DeepSeek-OCR") > 2
    qwen3 = search(catalog, "qwen3", NODE)
    assert qwen3[0].model_id.startswith("Qwen/Qwen3-")  # Qwen3, not Qwen3.5
    assert qwen3[0].fits and qwen3[0].fits != "no"


def test_the_target_decides_what_fits() -> None:
    catalog = load_catalog()
    one = SearchTarget("mi300x", MI300X.vram_bytes, 1, "1x AMD Instinct MI300X")
    hits = {h.model_id: h for h in search(catalog, "deepseek r1", one, limit=20)}
    assert hits["deepseek-ai/DeepSeek-R1"].fits == "no"
    node = {h.model_id: h for h in search(catalog, "deepseek r1", NODE, limit=20)}
    assert (
        node["deepseek-ai/DeepSeek-R1"].fits == "8 GPUs"
        and node["deepseek-ai/DeepSeek-R1"].verified
    )
    assert "fits on 8 GPUs" in node["deepseek-ai/DeepSeek-R1"].why


def test_nothing_matches_nothing() -> None:
    assert search(load_catalog(), "zzzz qqqq", NODE) == []


def test_the_command_and_its_json() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "instinct_serve",
            "recipes",
            "search",
            "gpt",
            "oss",
            "--gpu",
            "mi300x",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["target"]["gpu_count"] == 8
    assert [r["model_id"] for r in doc["results"]][:2] == [
        "openai/gpt-oss-120b",
        "openai/gpt-oss-20b",
    ]
