"""A listener whose process is not visible yet (another serve's container publishing its port
a moment before ``docker ps`` lists it) is looked at once more before it counts as a foreign
process (``Docker.port_holders``). Real ``Host`` and ``Docker`` code; the boundary is the
``ss`` and ``docker`` executables on PATH, a stand-in ``ss`` that answers without the process
the first time and with it the second."""

from __future__ import annotations

from pathlib import Path

import pytest

from instinct_serve.hosts import LocalHost
from instinct_serve.runtime import docker as docker_module
from instinct_serve.runtime.docker import Docker

PORT = 18_181
UNSEEN = f"LISTEN 0 4096 127.0.0.1:{PORT} 0.0.0.0:*\n"
SEEN = f'LISTEN 0 4096 127.0.0.1:{PORT} 0.0.0.0:* users:(("python3",pid=4242,fd=3))\n'
PROXY = f'LISTEN 0 4096 127.0.0.1:{PORT} 0.0.0.0:* users:(("docker-proxy",pid=77,fd=4))\n'


def _stand_ins(bin_dir: Path, answers: list[str]) -> Path:
    """``ss`` printing ``answers`` one per call (the last one from then on), ``docker ps``
    listing no container; the calls to ``ss`` are counted in the returned file."""
    bin_dir.mkdir()
    calls = bin_dir / "ss-calls"
    calls.write_text("0")
    lines = "".join(f"  {i}) printf '%s' '{text}' ;;\n" for i, text in enumerate(answers))
    last = len(answers) - 1
    (bin_dir / "ss").write_text(
        "#!/bin/sh\n"
        f'n=$(cat "{calls}"); echo $((n + 1)) > "{calls}"\n'
        f'[ "$n" -gt {last} ] && n={last}\n'
        'case "$n" in\n' + lines + "esac\n"
    )
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("ss", "docker"):
        (bin_dir / tool).chmod(0o755)
    return calls


def test_an_unseen_holder_is_looked_at_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _stand_ins(tmp_path / "bin", [UNSEEN, SEEN])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setattr(docker_module, "UNSEEN_HOLDER_WAIT_S", 0.05)
    [holder] = Docker(LocalHost()).port_holders(PORT)
    assert (holder.kind, holder.pid, holder.process) == ("process", 4242, "python3")
    assert calls.read_text().strip() == "2"


def test_a_holder_still_unseen_counts_as_a_foreign_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _stand_ins(tmp_path / "bin", [UNSEEN])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setattr(docker_module, "UNSEEN_HOLDER_WAIT_S", 0.05)
    [holder] = Docker(LocalHost()).port_holders(PORT)
    assert holder.kind == "process" and holder.pid is None
    assert "not visible" in holder.describe()
    looks = 1 + docker_module.UNSEEN_HOLDER_LOOKS
    assert calls.read_text().strip() == str(looks)  # looked at again, a bounded number of times


def test_a_container_proxy_with_no_container_listed_is_looked_at_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Docker's proxy holds the port for a container ``docker ps`` does not list yet (the
    CI race: another serve's container starting on a loaded host)."""
    calls = _stand_ins(tmp_path / "bin", [PROXY, PROXY, SEEN])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setattr(docker_module, "UNSEEN_HOLDER_WAIT_S", 0.05)
    [holder] = Docker(LocalHost()).port_holders(PORT)
    assert (holder.kind, holder.pid) == ("process", 4242)
    assert calls.read_text().strip() == "3"
