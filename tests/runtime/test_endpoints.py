"""``ps`` over real native processes: running, exited with a code, or stopped by us."""

from __future__ import annotations

import json
import time

import pytest

from instinct_serve.cli.main import main
from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from instinct_serve.runtime.endpoints import native_rows
from tests.infra import tables
from tests.infra.fakebin import FakeBin

META = {"engine": "instinct-serve", "model": "org/model", "port": 8000}


def _ended(name: str) -> None:
    host = LocalHost()
    for _ in range(200):
        status = launcher.status(host, name)
        if status is not None and not status.running and status.exit_code is not None:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} did not end")


def test_ps_never_shows_exited_none(fakebin: FakeBin, capsys: pytest.CaptureFixture[str]) -> None:
    fakebin.add("docker", {}, default=("", 0))  # Docker answers: no managed containers
    host = LocalHost()
    launcher.launch(host, "n-exited", ["sh", "-c", "exit 3"], meta=META)
    launcher.launch(host, "n-stopped", ["sleep", "60"], meta=META)
    launcher.launch(host, "n-running", ["sleep", "60"], meta=META)
    try:
        _ended("n-exited")
        assert launcher.stop(host, "n-stopped").was_running
        rows = {row.name: row for row in native_rows(host)}
        assert rows["n-exited"].status == "exited (3)"
        stopped = rows["n-stopped"].status
        assert stopped.startswith("stopped (exit ") and not rows["n-stopped"].running
        assert rows["n-running"].status == "running" and rows["n-running"].running

        # launched without an owner (as by an older version): nobody's, --everyone only
        with pytest.raises(SystemExit):
            main(["ps", "--no-health", "--json", "--everyone"])  # JSON: every record
        listed = {r["name"]: r["status"] for r in json.loads(capsys.readouterr().out)["endpoints"]}
        assert listed == {"n-exited": "exited (3)", "n-stopped": stopped, "n-running": "running"}
        with pytest.raises(SystemExit):
            main(["ps", "--all", "--no-health", "--everyone"])
        human = capsys.readouterr().out
        assert "stopped" in human and "exited (3)" in human and "None" not in human

        # as docker ps: without -a only what runs, the others counted
        with pytest.raises(SystemExit):
            main(["ps", "--no-health", "--everyone"])
        human = capsys.readouterr().out
        assert "n-exited" not in human and "2 stopped endpoints not shown: -a" in human
        with pytest.raises(SystemExit):
            main(["ps", "-q", "--everyone"])
        assert capsys.readouterr().out == "n-running\n"
        with pytest.raises(SystemExit):
            main(["ps", "-qa", "--everyone"])
        assert sorted(capsys.readouterr().out.split()) == ["n-exited", "n-running", "n-stopped"]

        # stop of what is already stopped says so (not "✓ stopped" again)
        with pytest.raises(SystemExit):
            main(["stop", "--yes", "n-stopped"])
        out, err = capsys.readouterr()
        assert out, err
        assert "n-stopped (org/model) was already stopped" in out and "✓" not in out
        with pytest.raises(SystemExit):
            main(["ps", "--no-health"])
        mine = capsys.readouterr().out
        assert "n-running" not in mine and "of other users hidden" in mine and "--everyone" in mine
    finally:
        launcher.stop(host, "n-running")


LONG = "vllm-llama-3-1-8b-instruct"  # the name serve gives it
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def test_ps_table_through_a_pipe_and_at_80_columns(
    fakebin: FakeBin, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fakebin.add("docker", {}, default=("", 0))
    host = LocalHost()
    meta = META | {"model": MODEL, "port": 18000}
    launcher.launch(host, LONG, ["sleep", "60"], meta=meta)
    try:
        tables.pipe(monkeypatch)
        with pytest.raises(SystemExit):
            main(["ps", "--no-health", "--everyone"])
        out = capsys.readouterr().out
        assert tables.one_line(out, LONG, MODEL, "18000", "running").startswith(LONG)
        assert tables.one_line(out, "NAME", "MODEL", "PORT", "STATUS", "PROVEN", "OWNER")

        tables.terminal(monkeypatch)
        with pytest.raises(SystemExit):
            main(["ps", "--no-health", "--everyone"])
        out = capsys.readouterr().out
        tables.fits(out, LONG, MODEL)
        assert "PROVEN" not in out and "NAME" in out and "STATUS" in out  # low value first

        # names and model ids wider than the terminal: whole lines, never cut
        monkeypatch.setenv("COLUMNS", "40")
        with pytest.raises(SystemExit):
            main(["ps", "--no-health", "--everyone"])
        assert tables.one_line(capsys.readouterr().out, LONG, MODEL, "running")
    finally:
        launcher.stop(host, LONG)
