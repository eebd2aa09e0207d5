"""What a user names in ``instinct bench`` never reaches a glob nor leaves the store, and the
store is read as regular files only (issue 26, finding 8): usage errors (exit 2, registered
ids), never an internal error, an ``IndexError`` or a hang. The CLI runs in this process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from instinct_serve.observe.bench import BenchRun, Settings
from instinct_serve.paths import data_dir
from instinct_serve.runtime import bench as runner
from tests.infra import fuzz, fuzz_commands


def cli(*args: str) -> fuzz.Outcome:
    outcome = fuzz_commands.run_command(["bench", *args, "--json"])
    assert not outcome.problems(), outcome.describe()
    return outcome


@pytest.mark.parametrize(
    ("args", "error_id"),
    [
        (["compare", "/etc", "ffff"], "bad_bench_result"),  # absolute, not a file
        (["compare", "/dev/zero", "ffff"], "bad_bench_result"),
        (["compare", "x" * 10_000, "ffff"], "bad_bench_ref"),
        (["compare", "a/" * 5_000, "ffff"], "bad_bench_result"),
        (["compare", "../..", "ffff"], "bad_bench_result"),
        (["compare", "", "ffff"], "bad_bench_ref"),
        (["compare", "*", "ffff"], "bad_bench_ref"),  # a glob would match every folder
        (["compare", "[a-f]", "ffff"], "bad_bench_ref"),
        (["run", ""], "bad_name"),
        (["run", "../x"], "bad_name"),
    ],
)
def test_names_that_are_usage_errors(args: list[str], error_id: str) -> None:
    outcome = cli(*args)
    assert (outcome.code, outcome.error_id) == (2, error_id), outcome.stdout


def _run(plan_hash: str | None) -> BenchRun:
    return BenchRun(
        plan_hash=plan_hash,
        endpoint="e",
        model="m",
        engine="docker",
        host="local",
        started_at="2026-01-01T00:00:00",
        settings=Settings(concurrency=(1,)),
    )


def test_a_label_never_names_a_folder_outside_the_store() -> None:
    store = data_dir() / "bench"
    path = runner.save(_run("../../escaped"))
    assert path.parent == store / runner.NO_PLAN
    assert not (store.parent.parent / "escaped").exists()
    good = runner.save(_run("0123456789abcdef"))
    assert good.parent == store / "0123456789abcdef"
    doc = cli("compare", "0123", "0123456789abcdef").doc
    assert doc["a"]["plan_hash"] == "0123456789abcdef"


def test_special_files_in_the_store_are_skipped(tmp_path: Path) -> None:
    folder = data_dir() / "bench" / "fedcba9876543210"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "a-fifo.json")
    (folder / "b-zero.json").symlink_to("/dev/zero")
    (folder / "c-loop.json").symlink_to("c-loop.json")
    with (folder / "d-sparse.json").open("wb") as fh:
        fh.truncate(10 * 2**30)
    (folder / "e-truncated.json").write_text(json.dumps(_run("fedcba9876543210").to_dict())[:40])
    outcome = cli("compare", "fedcba", "fedcba")
    assert (outcome.code, outcome.error_id) == (2, "bench_not_found")
    assert outcome.seconds < fuzz.LIMIT_S
    assert cli("list").code == 0
    fifo = cli("compare", str(folder / "a-fifo.json"), "fedcba")
    assert (fifo.code, fifo.error_id) == (2, "bad_bench_result")
