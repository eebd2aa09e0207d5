"""Cache and state files are read only when they are regular files, to a size cap, never with
a blocking open (issue 26, finding 8): ``paths.read_regular`` here, ``Host.read_text`` on this
machine and over the loopback sshd, and every reader of the tool's records with a FIFO, a
link to ``/dev/zero``, a link loop and a 10 GB sparse file where its file should be."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from instinct_serve.hosts import Host, LocalHost
from instinct_serve.paths import READ_LIMIT, read_regular
from instinct_serve.runtime import journal, keys, plans, verified
from tests.infra import fuzz
from tests.infra.fuzz_commands import SPECIAL_NAMES as SPECIAL
from tests.infra.fuzz_commands import make_special
from tests.infra.ssh import SshServer


@pytest.fixture
def bounded() -> Iterator[None]:
    """Fails the test instead of hanging it."""
    with fuzz.time_limit(20):
        yield


@pytest.mark.parametrize("kind", SPECIAL)
def test_read_regular_refuses_what_is_not_a_small_regular_file(
    tmp_path: Path, kind: str, bounded: None
) -> None:
    path = tmp_path / "file"
    make_special(path, kind)
    start = time.monotonic()
    with pytest.raises(OSError):
        read_regular(path)
    assert time.monotonic() - start < 2


def test_read_regular_reads_regular_files_to_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"x" * 100)
    assert read_regular(path) == b"x" * 100
    assert read_regular(path, 100) == b"x" * 100
    with pytest.raises(OSError, match="larger than 99 bytes"):
        read_regular(path, 99)
    link = tmp_path / "link"
    link.symlink_to(path)
    assert read_regular(link) == b"x" * 100  # a link to a regular file is one
    maps = read_regular("/proc/self/maps")  # size 0 in stat, read to the cap all the same
    assert maps and len(maps) <= READ_LIMIT


@pytest.mark.ssh
@pytest.mark.parametrize("where", ["local", "ssh"])
def test_host_read_text_over_both_hosts(
    tmp_path: Path, sshd: SshServer, where: str, bounded: None
) -> None:
    host: Host = LocalHost() if where == "local" else sshd.host()
    for kind in SPECIAL:
        path = tmp_path / kind
        make_special(path, kind)
        assert host.read_text(str(path)) is None, kind
    ok = tmp_path / "ok"
    ok.write_text("hello\n")
    assert host.read_text(str(ok)) == "hello\n"
    assert host.read_text(str(ok), 5) is None  # over the cap: not read at all
    assert host.read_text(str(tmp_path / "missing")) is None


def _record_paths(host: Host, name: str) -> dict[str, tuple[Path, Callable[[], object]]]:
    """Each record reader of the tool, and where it reads ``name``'s record."""
    from instinct_serve.engine import hostfs

    data = Path(hostfs.data_dir(host))
    return {
        "plan": (data / "plans" / f"{name}.json", lambda: plans.load(host, name)),
        "verified": (
            data / "verified" / f"{name}.json",
            lambda: verified.load(host, name, "instance"),
        ),
        "key": (
            Path(keys.key_path(host, name)),
            lambda: keys.read_key(host, keys.key_path(host, name)),
        ),
        "journal": (data / "events" / f"{name}.jsonl", lambda: journal.read(host, name)),
        "journal_all": (data / "events" / f"{name}.jsonl", lambda: journal.read_all(host)),
    }


@pytest.mark.parametrize("kind", SPECIAL)
def test_records_with_special_files_read_as_absent(kind: str, bounded: None) -> None:
    host = LocalHost()
    for what, (path, read) in _record_paths(host, f"special-{kind}").items():
        make_special(path, kind)
        start = time.monotonic()
        found = read()
        assert time.monotonic() - start < 5, what
        if what == "plan":
            assert found == plans.PlanRecord(None, None)
        elif what == "journal_all":
            assert found == {} or found == {f"special-{kind}": []}  # type: ignore[comparison-overlap]
        else:
            assert not found, what
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()


def test_a_journal_larger_than_its_tail_is_read_from_its_end(tmp_path: Path) -> None:
    host = LocalHost()
    name = "long-journal"
    path, _read = _record_paths(host, name)["journal"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.truncate(2 * 2**30)  # 2 GB of hole, then the real events
        fh.seek(0, os.SEEK_END)
        fh.write(b"\n")
        for i in range(3):
            fh.write(json.dumps({"at": str(i), "kind": "restarted"}).encode() + b"\n")
    start = time.monotonic()
    events = journal.read(host, name)
    assert time.monotonic() - start < 5
    assert [e["at"] for e in events] == ["0", "1", "2"]
    path.unlink()
