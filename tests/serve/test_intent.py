"""Intent records (``runtime.intent``) on this machine's data directory: written whole,
read back, skipped when they do not parse; a record whose process is alive is in
progress, one whose process is gone is settled by the next command (``runtime.recover``).
Real files and real processes; no daemon needed (the records of live processes are left alone)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from instinct_serve.hosts import LocalHost
from instinct_serve.runtime import intent
from instinct_serve.runtime.recover import resolve


def _dir() -> Path:
    return Path(os.environ["INSTINCT_DATA_DIR"]) / "intents"


def test_a_record_is_written_whole_and_read_back() -> None:
    host = LocalHost()
    rec = intent.begin(host, "replace", "intent-a", step="candidate", extra={"left": ["x"]})
    path = _dir() / "intent-a.replace.json"
    assert json.loads(path.read_text())["step"] == "candidate"
    assert not list(_dir().glob("*.tmp.*"))  # renamed into place
    rec.advance("switching", extra={"left": []})
    found = [r for r in intent.load_all(host) if r.name == "intent-a"]
    assert [(r.change, r.step, r.extra) for r in found] == [("replace", "switching", {"left": []})]
    assert found[0].alive()  # this very process
    intent.clear(host, rec)
    assert not path.exists()


def test_a_record_of_a_live_process_is_in_progress_and_left_alone() -> None:
    host = LocalHost()
    rec = intent.begin(host, "replace", "intent-b", step="candidate")
    try:
        found = [d for d in resolve(host) if d["name"] == "intent-b"]
        assert [d["resolved"] for d in found] == ["in progress"]
        assert (_dir() / "intent-b.replace.json").exists()
    finally:
        intent.clear(host, rec)


def test_a_reused_pid_is_not_the_owner() -> None:
    rec = intent.Intent(change="replace", name="x", step="s")
    assert rec.alive()
    rec.owner = {**rec.owner, "start": "1"}  # this pid, another process's start time
    assert not rec.alive()
    rec.owner = {"machine": "elsewhere", "pid": 1}
    assert rec.alive()  # another machine: in progress until STALE_S after its step
    rec.at = "2000-01-01T00:00:00+00:00"
    assert not rec.alive()


def test_records_that_do_not_parse_are_skipped() -> None:
    host = LocalHost()
    _dir().mkdir(parents=True, exist_ok=True)
    bad = {
        "junk.upgrade.json": "{not json",
        "list.upgrade.json": "[1, 2]",
        "badname.upgrade.json": json.dumps({"change": "upgrade", "name": "../x", "step": "s"}),
        "badchange.json": json.dumps({"change": "rm -rf", "name": "x", "step": "s"}),
        "cands.upgrade.json": json.dumps(
            {"change": "upgrade", "name": "x", "step": "s", "candidates": ["a b"]}
        ),
    }
    for file, text in bad.items():
        (_dir() / file).write_text(text)
    try:
        names = {r.name for r in intent.load_all(host)}
        assert not names & {"junk", "list", "../x", "x"}
    finally:
        for file in bad:
            (_dir() / file).unlink()
