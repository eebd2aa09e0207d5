"""Docker for tests (pytest plugin): the daemon, a registry-free vLLM test image, AMD devices.

Fixtures
--------
``docker_daemon`` (session)
    A usable Docker daemon: the running one when ``docker info`` works, else ``dockerd``
    started in the background (root only) and stopped at the end. Skips with the reason when
    impossible, or fails when ``INSTINCT_TEST_REQUIRE`` contains ``docker``. At the end of
    the session it removes the containers labelled with this session's test label
    (``daemon.label_args()``), and at the start those of test sessions that are gone.
``vllm_test_image`` (session)
    A local image built without any registry: the host's own CPython (preferably Debian's
    ``/usr/bin/python3``) with the shared libraries ``ldd`` lists (and ``libgcc_s``, which
    glibc loads itself) and its stdlib (minus tests, tkinter, idle, ...), ``/etc/passwd``
    and ``/etc/group`` with ``video`` and ``render`` (named ``--group-add`` needs them),
    busybox when installed, the vLLM test
    double (``vllm_double.py``) and the real logs it replays, imported with
    ``docker import`` and ``ENTRYPOINT ["vllm", "serve"]``: the entrypoint of the real
    ``vllm/vllm-openai-rocm`` image (vLLM ``docker/Dockerfile.rocm``, stage ``vllm-openai``),
    so the planner's argv (``IMAGE --model M --port P ...``) runs unchanged. Tagged by a hash
    of its inputs and reused while they do not change. About 2 s to build.
``router_test_image`` (session)
    The replica router (``plan.replicas``) without a registry: the host's own HAProxy
    (Debian's ``haproxy`` package, ``/usr/sbin/haproxy``) and the libraries ``ldd`` lists,
    imported with ``docker import`` as ``instinct-serve-test/haproxy:HASH``, laid out like
    the official ``haproxy`` image: the binary on PATH, ``/usr/local/etc/haproxy``, running
    as the unprivileged ``haproxy`` user (uid 99), so the planner's router argv
    (``--entrypoint haproxy IMAGE -W -db -f /usr/local/etc/haproxy/haproxy.cfg``) runs
    unchanged. Skips (fails under INSTINCT_TEST_REQUIRE=docker) without HAProxy installed.
``device_root`` (session)
    A temp tree with stand-in ``/dev/kfd`` and ``/dev/dri/renderD*`` character devices (1:3,
    the null device), handed to docker as ``--device ROOT/dev/kfd:/dev/kfd``: the mandatory
    AMD device flags are exercised, never skipped, and the host's /dev is never touched.
``docker_names`` (function)
    ``docker_names("prefix")`` gives a unique container name, removed (``rm -f``) after the
    test when it carries this session's test label.
``vllm_double_local`` (function)
    Runs the vLLM test double as a host process (no docker): fast health/warm-up tests.

Helpers: ``amd_run_argv(...)`` (the AMD ``docker run`` flags vLLM's docs
give for ROCm, for tests that need an argv without the planner), ``derived_test_image(image,
env)`` (the test image with ``ENV`` defaults such as ``VLLM_DOUBLE_MODE``, for argvs made by
the real planner). Ports for the servers tests start: ``tests.infra.ports``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

from instinct_serve.hosts import LocalHost
from instinct_serve.plan.labels import label_args
from tests.infra import leases, shared
from tests.infra.paths import LOGS
from tests.infra.ports import free_port

DOUBLE = Path(__file__).resolve().parent / "vllm_double.py"
TEST_LABEL = "instinct-serve.test"
TEST_PID_LABEL = "instinct-serve.test-pid"
IMAGE_REPO = "instinct-serve-test/vllm-double"
IMAGE_RECIPE = "4"  # bump to force a rebuild when the recipe below changes
IMAGE_ENTRYPOINT = ["vllm", "serve"]  # vllm/vllm-openai-rocm: docker/Dockerfile.rocm
DAEMON_START_TIMEOUT_S = 30.0
DAEMON_LEASED = "dockerd-leased"  # run list: this run holds the daemon (``leases``)
IMAGES_LEASED = "images-leased"  # run list: image tags this run holds (``leases``)
IMAGES_BUILT = "images-built"  # run list: the test images' summary lines
_STATE_DIR = Path(tempfile.gettempdir()) / "instinct-serve-test-devices"

# Not needed by a stdlib HTTP server, and large: left out of the test image.
_STDLIB_SKIP = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "lib2to3",
    "pydoc_data",
    "distutils",
    "ensurepip",
    "site-packages",
    "dist-packages",
    "venv",
    "unittest",
    "sqlite3",
    "curses",
    "dbm",
}
_DYNLOAD_SKIP = re.compile(r"^(_test|xx|_ctypes_test|_xxsub|_curses|_dbm|_gdbm|_sqlite|_tkinter)")
_BUSYBOX_APPLETS = ("sh", "env", "cat", "ls", "sleep", "kill", "ps", "id", "echo", "true", "wget")


# --------------------------------------------------------------------------- skip or fail


def required(component: str) -> bool:
    """True when INSTINCT_TEST_REQUIRE names ``component``: a skip must become a failure."""
    wanted = os.environ.get("INSTINCT_TEST_REQUIRE", "")
    return component in {part.strip() for part in wanted.split(",")}


def unavailable(reason: str) -> NoReturn:
    if required("docker"):
        pytest.fail(f"{reason} (INSTINCT_TEST_REQUIRE contains 'docker')")
    pytest.skip(reason)


# --------------------------------------------------------------------------- daemon


@dataclass
class DockerDaemon:
    """A daemon the docker CLI on this machine talks to."""

    version: str
    started_here: bool
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    host: LocalHost = field(default_factory=LocalHost)

    def labels(self) -> dict[str, str]:
        """Labels that mark a container as this test session's (for cleanup)."""
        return {TEST_LABEL: self.session, TEST_PID_LABEL: str(os.getpid())}

    def label_args(self) -> list[str]:
        return label_args(self.labels())

    def docker(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    def remove_session_containers(self) -> None:
        ids = self.docker("ps", "-aq", "--filter", f"label={TEST_LABEL}={self.session}")
        found = ids.stdout.split()
        if found:
            self.docker("rm", "-f", *found, timeout=120)

    def remove_stale_containers(self) -> None:
        """Containers left by test sessions whose pytest process is gone."""
        out = self.docker(
            "ps", "-a", "--filter", f"label={TEST_PID_LABEL}", "--format", "{{.ID}} {{.Labels}}"
        )
        stale = []
        for line in out.stdout.splitlines():
            cid, _, labels = line.partition(" ")
            match = re.search(rf"{re.escape(TEST_PID_LABEL)}=(\d+)", labels)
            if match and not leases.pid_alive(int(match.group(1))):
                stale.append(cid)
        if stale:
            self.docker("rm", "-f", *stale, timeout=120)


def _docker_version() -> str | None:
    try:
        out = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


@pytest.fixture(scope="session")
def docker_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerDaemon]:
    """A usable Docker daemon (see the module docstring)."""
    if shutil.which("docker") is None:
        unavailable("the docker CLI is not installed (apt-get install docker.io)")
    # xdist workers: one starts it, the others find it running; other runs on this machine
    # hold it too (``leases``): the last one stops it, if a test run started it
    with shared.once("dockerd"), leases.held("dockerd"):
        version = _docker_version()
        started = False
        pid = None
        if version is None:
            version, pid = _start_dockerd(tmp_path_factory.mktemp("dockerd") / "dockerd.log")
            started = True
        if not shared.recorded(DAEMON_LEASED):
            leases.take("dockerd", made=started, pid=pid)
            shared.record(DAEMON_LEASED, "dockerd")
    daemon = DockerDaemon(version=version, started_here=started)
    daemon.remove_stale_containers()
    try:
        yield daemon
    finally:
        daemon.remove_session_containers()


def _start_dockerd(log: Path) -> tuple[str, int]:
    """Start ``dockerd`` in its own session; its version once it answers, and its pid (the
    last run holding it stops it: a worker that started it may finish before the others,
    and another checkout's run may be using it)."""
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        unavailable("no Docker daemon answers and dockerd cannot be started here (not root?)")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [dockerd], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
    version = None
    while version is None and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        version = _docker_version()
    if version is None:
        _stop_pid(proc.pid)
        unavailable(f"dockerd did not come up; its log:\n{log.read_text()[-2000:]}")
    return version, proc.pid


def pytest_unconfigure(config: pytest.Config) -> None:
    """At the end of the run (the controller under xdist): release the images and the
    daemon; what no other live run holds and a test run made goes (``leases``)."""
    if shared.is_worker():
        return
    release_images()
    if shared.recorded(DAEMON_LEASED):
        with leases.held("dockerd"):
            last, pid = leases.release("dockerd")
            if last and pid is not None:
                _stop_pid(pid)


def _stop_pid(pid: int) -> None:
    """SIGTERM ``pid`` (not necessarily our child), wait up to 20 s, then SIGKILL."""
    with contextlib.suppress(ChildProcessError, ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and leases.pid_alive(pid) and not _reap(pid):
            time.sleep(0.2)
        if leases.pid_alive(pid) and not _reap(pid):
            os.kill(pid, signal.SIGKILL)


def _reap(pid: int) -> bool:
    """True when ``pid`` was our child and has exited (reaped now); False otherwise."""
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


@pytest.fixture
def docker_names(docker_daemon: DockerDaemon) -> Iterator[Callable[[str], str]]:
    """``docker_names("x")`` -> a unique container name, removed after the test."""
    names: list[str] = []

    def make(prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        names.append(name)
        return name

    yield make
    for name in names:
        out = docker_daemon.docker(
            "inspect", "--format", f'{{{{index .Config.Labels "{TEST_LABEL}"}}}}', name
        )
        if out.returncode == 0 and out.stdout.strip() == docker_daemon.session:
            docker_daemon.docker("rm", "-f", name, timeout=60)


# --------------------------------------------------------------------------- test image


@dataclass(frozen=True)
class TestImage:
    """The registry-free vLLM test image."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    tag: str
    build_s: float
    reused: bool
    python: str


def _interpreter() -> str:
    """Debian's python3 when present (what CI installs), else the one running the tests."""
    for candidate in ("/usr/bin/python3", sys.executable):
        real = os.path.realpath(candidate)
        if os.access(real, os.X_OK):
            return real
    raise RuntimeError("no python interpreter")


def _stdlib_of(python: str) -> str:
    code = "import sysconfig; print(sysconfig.get_path('stdlib'))"
    out = subprocess.run([python, "-I", "-S", "-c", code], capture_output=True, text=True)
    out.check_returncode()
    return os.path.realpath(out.stdout.strip())


def _stdlib_files(stdlib: str) -> Iterator[str]:
    for root, dirs, files in os.walk(stdlib):
        rel = os.path.relpath(root, stdlib)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in _STDLIB_SKIP and not d.startswith("config-")]
        dirs.sort()
        for name in sorted(files):
            if ".opt-" in name:  # optimized bytecode: never used without -O
                continue
            if rel == "lib-dynload" and _DYNLOAD_SKIP.match(name):
                continue
            yield os.path.join(root, name)


def _ldd(paths: Sequence[str]) -> tuple[set[str], set[str]]:
    """(libraries needed, files whose libraries are missing) for ELF files."""
    libs: set[str] = set()
    broken: set[str] = set()
    for path in paths:
        out = subprocess.run(["ldd", path], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            line = line.strip()
            if "not found" in line:
                broken.add(path)
            elif "=>" in line:
                target = line.split("=>", 1)[1].strip().split(" ", 1)[0]
                if target.startswith("/"):
                    libs.add(target)
            elif line.startswith("/"):
                libs.add(line.split(" ", 1)[0])
    return libs, broken


def _dlopened_by_libc(libs: set[str]) -> set[str]:
    """Libraries glibc loads at run time, which ``ldd`` cannot list.

    ``pthread_exit`` (CPython ends daemon threads with it at interpreter exit) unwinds through
    ``libgcc_s.so.1``; without it in the image a dying server exits 139 instead of its own
    code, as every real base image ships it.
    """
    extra: set[str] = set()
    for lib in libs:
        if os.path.basename(lib) == "libc.so.6":
            candidate = os.path.join(os.path.dirname(lib), "libgcc_s.so.1")
            if os.path.exists(candidate):
                extra.add(candidate)
    return extra


class _Rootfs:
    """A tar stream of a root filesystem assembled from host files (symlinks preserved)."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.seen: set[str] = set()

    def dir(self, path: str, mode: int = 0o755) -> None:
        path = os.path.normpath(path)
        if path == "/" or path in self.seen:
            return
        self.dir(os.path.dirname(path))
        info = tarfile.TarInfo(path.lstrip("/"))
        info.type = tarfile.DIRTYPE
        info.mode = mode
        self.seen.add(path)
        self.tar.addfile(info)

    def data(self, path: str, content: bytes, mode: int = 0o644) -> None:
        self.dir(os.path.dirname(path))
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size = len(content)
        info.mode = mode
        self.seen.add(path)
        self.tar.addfile(info, _BytesReader(content))

    def symlink(self, path: str, target: str) -> None:
        if path in self.seen:
            return
        self.dir(os.path.dirname(path))
        info = tarfile.TarInfo(path.lstrip("/"))
        info.type = tarfile.SYMTYPE
        info.linkname = target
        self.seen.add(path)
        self.tar.addfile(info)

    def regular(self, dest: str, src: str) -> None:
        if dest in self.seen:
            return
        self.dir(os.path.dirname(dest))
        st = os.stat(src)
        info = tarfile.TarInfo(dest.lstrip("/"))
        info.size = st.st_size
        info.mode = stat.S_IMODE(st.st_mode)
        info.mtime = int(st.st_mtime)
        self.seen.add(dest)
        with open(src, "rb") as fh:
            self.tar.addfile(info, fh)

    def host(self, path: str) -> None:
        """Copy a host path to the same place, recreating symlinked directories (/lib)."""
        path = os.path.normpath(path)
        parent = os.path.dirname(path)
        logical = "/"
        for part in [p for p in parent.split("/") if p]:
            nxt = os.path.join(logical, part)
            if os.path.islink(nxt):
                self.symlink(os.path.join(os.path.realpath(logical), part), os.readlink(nxt))
            logical = nxt
        real_parent = os.path.realpath(parent)
        dest = os.path.join(real_parent, os.path.basename(path))
        if os.path.islink(path):
            link = os.readlink(path)
            self.symlink(dest, link)
            self.host(link if link.startswith("/") else os.path.join(real_parent, link))
        else:
            self.regular(dest, path)


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.pos + size
        chunk = self.data[self.pos : end]
        self.pos += len(chunk)
        return chunk


_PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
_GROUP = "root:x:0:\nvideo:x:44:\nrender:x:109:\nnogroup:x:65534:\n"
_VLLM_WRAPPER = (
    "#!/usr/bin/python3\n"
    "# TEST DOUBLE of vLLM: `vllm serve ...` runs tests/infra/vllm_double.py\n"
    "import runpy, sys\n"
    "sys.argv[0] = '/opt/vllm-double/vllm_double.py'\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def _busybox() -> str | None:
    path = shutil.which("busybox")
    if path is None:
        return None
    out = subprocess.run(["ldd", path], capture_output=True, text=True)
    static = "not a dynamic executable" in (out.stdout + out.stderr) or "statically" in out.stdout
    return os.path.realpath(path) if static else None


def replayable_logs() -> list[Path]:
    """The captured logs the double can replay: tests/fixtures/logs, its public corpus and
    the real vLLM's."""
    return [
        *sorted(LOGS.glob("*.log")),
        *sorted((LOGS / "public").glob("*.log")),
        *sorted((LOGS / "real-vllm-cpu").glob("*.log")),
    ]


def image_inputs_hash(python: str, busybox: str | None) -> str:
    """What the image is made of; a change in any of it means a new tag."""
    digest = hashlib.sha256(IMAGE_RECIPE.encode())
    digest.update(DOUBLE.read_bytes())
    for log in replayable_logs():
        digest.update(str(log.relative_to(LOGS)).encode() + log.read_bytes())
    for path in (python, busybox):
        if path:
            st = os.stat(path)
            digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode())
    digest.update(json.dumps([_PASSWD, _GROUP, _VLLM_WRAPPER, IMAGE_ENTRYPOINT]).encode())
    return digest.hexdigest()[:16]


def build_test_image() -> TestImage:
    """Build (or reuse) the test image; see the module docstring."""
    python = _interpreter()
    busybox = _busybox()
    tag = f"{IMAGE_REPO}:{image_inputs_hash(python, busybox)}"
    start = time.monotonic()
    exists = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, text=True)
    if exists.returncode == 0:
        return TestImage(tag, time.monotonic() - start, True, python)

    stdlib = _stdlib_of(python)
    files = list(_stdlib_files(stdlib))
    elves = [python] + [f for f in files if f.endswith(".so")]
    libs, broken = _ldd(elves)
    libs |= _dlopened_by_libc(libs)
    if python in broken:
        raise RuntimeError(f"{python} needs libraries ldd cannot find")
    with tempfile.TemporaryDirectory(prefix="instinct-test-image-") as tmp:
        tar_path = os.path.join(tmp, "rootfs.tar")
        with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
            root = _Rootfs(tar)
            root.dir("/tmp", 0o1777)
            root.dir("/root", 0o700)
            root.dir("/app")
            for sub in ("/proc", "/sys", "/dev", "/etc", "/usr/local/bin"):
                root.dir(sub)
            root.data("/etc/passwd", _PASSWD.encode())
            root.data("/etc/group", _GROUP.encode())
            root.host(python)
            for lib in sorted(libs):
                root.host(lib)
            for path in files:
                if path not in broken:
                    root.host(path)
            if os.path.realpath("/usr/bin/python3") == python:
                root.host("/usr/bin/python3")  # Debian's own python3 -> python3.11 link
            else:
                root.symlink("/usr/bin/python3", python)
            if busybox:
                root.regular("/usr/bin/busybox", busybox)
                for applet in _BUSYBOX_APPLETS:
                    root.symlink(f"/usr/bin/{applet}", "busybox")
                root.symlink("/bin", "usr/bin")
            root.regular("/opt/vllm-double/vllm_double.py", str(DOUBLE))
            for log in replayable_logs():
                root.regular(f"/opt/vllm-double/logs/{log.relative_to(LOGS)}", str(log))
            root.data("/usr/local/bin/vllm", _VLLM_WRAPPER.encode(), 0o755)
        changes = [
            "ENTRYPOINT " + json.dumps(IMAGE_ENTRYPOINT),
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "ENV PYTHONDONTWRITEBYTECODE=1",
            "WORKDIR /app",
        ]
        argv = ["docker", "import"]
        for change in changes:
            argv += ["--change", change]
        out = subprocess.run([*argv, tar_path, tag], capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError(f"docker import failed: {out.stderr.strip()}")
    _remove_old_tags(tag)
    return TestImage(tag, time.monotonic() - start, False, python)


def _remove_old_tags(keep: str, older_than_s: float = 6 * 3600) -> None:
    """Drop earlier builds (derived images first: they are children of the old ones) that are
    more than a few hours old: a fresher one may belong to another test session (another
    checkout) running against the same daemon right now."""
    from datetime import datetime

    now = time.time()
    for repo in (f"{IMAGE_REPO}-derived", IMAGE_REPO):
        out = subprocess.run(
            ["docker", "images", repo, "--format", "{{.Repository}}:{{.Tag}}\t{{.CreatedAt}}"],
            capture_output=True,
            text=True,
        )
        for line in out.stdout.splitlines():
            tag, _, created = line.partition("\t")
            try:  # "2026-12-03 15:00:00 +0000 UTC"
                stamp = datetime.strptime(" ".join(created.split()[:3]), "%Y-%m-%d %H:%M:%S %z")
            except ValueError:
                continue
            if tag != keep and now - stamp.timestamp() > older_than_s and not leases.in_use(tag):
                # fails harmlessly while a container still uses it
                subprocess.run(["docker", "rmi", tag], capture_output=True, text=True)


def derived_test_image(
    base: TestImage,
    env: Mapping[str, str],
    files: Mapping[str, bytes] | None = None,
    entrypoint: Sequence[str] | None = None,
) -> str:
    """The test image with extra ``ENV`` defaults (e.g. ``VLLM_DOUBLE_MODE``), for tests whose
    docker argv comes from the real planner and cannot carry ``-e`` flags, extra ``files``
    (absolute path in the image -> content) and another ``entrypoint`` (``[]``: none, the
    container's arguments are its command). Cached by content."""
    lines = [f"FROM {base.tag}"] + [f"ENV {k}={json.dumps(v)}" for k, v in sorted(env.items())]
    if entrypoint is not None:
        lines.append("ENTRYPOINT " + json.dumps(list(entrypoint)))
    digest = hashlib.sha256()
    for path, data in sorted((files or {}).items()):
        lines.append(f"COPY files{path} {path}")
        digest.update(path.encode() + b"\0" + data)
    dockerfile = "\n".join(lines) + "\n"
    digest.update(dockerfile.encode())
    tag = f"{IMAGE_REPO}-derived:{digest.hexdigest()[:16]}"
    # one build per run, not per worker; held by this run until its end (``leases``)
    with shared.once(f"image-{digest.hexdigest()[:16]}"), leases.held("images"):
        _lease_image(tag, _build_derived(tag, dockerfile, files or {}))
    return tag


def _lease_image(tag: str, made: bool) -> None:
    """This run holds ``tag`` until its end (once per run; ``made``: this run built it)."""
    if tag not in shared.recorded(IMAGES_LEASED):
        leases.take(tag, made=made)
        shared.record(IMAGES_LEASED, tag)


def _build_derived(tag: str, dockerfile: str, files: Mapping[str, bytes]) -> bool:
    """Build ``tag`` unless it exists; True when it was built here."""
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
        with tempfile.TemporaryDirectory() as context:
            for path, data in files.items():
                target = Path(context) / "files" / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            (Path(context) / "Dockerfile").write_text(dockerfile)
            out = subprocess.run(
                ["docker", "build", "-q", "-t", tag, context],
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "DOCKER_BUILDKIT": "0"},
            )
        if out.returncode != 0:
            raise RuntimeError(f"docker build failed: {out.stderr.strip()}")
        return True
    return False


def release_images() -> list[str]:
    """Release the images this run held (children first) and remove those no other live
    run holds that a test run made; leave the rest. At the end of the run
    (``pytest_unconfigure``): a worker's image may serve another worker, and another
    checkout's run may be using it."""
    removed = []
    with leases.held("images"):
        for tag in reversed(list(dict.fromkeys(shared.recorded(IMAGES_LEASED)))):
            last, _pid = leases.release(tag)
            if not last:
                continue
            out = subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, text=True)
            if out.returncode == 0:
                removed.append(tag)
    (shared.run_dir() / IMAGES_LEASED).unlink(missing_ok=True)
    return removed


def _session_image(lock: str, build: Callable[[], TestImage], what: str) -> TestImage:
    """``build()`` once per run (the first worker builds, the others reuse), or fail."""
    try:
        with shared.once(lock), leases.held("images"):
            image = build()
            _lease_image(image.tag, not image.reused)
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        pytest.fail(f"could not build the {what} test image: {exc}")
    how = "reused" if image.reused else f"built in {image.build_s:.1f} s"
    shared.record(IMAGES_BUILT, f"{what} test image {image.tag}: {how} ({image.python})")
    return image


@pytest.fixture(scope="session")
def vllm_test_image(docker_daemon: DockerDaemon) -> TestImage:
    """The registry-free image whose ``vllm serve`` is the test double (module docstring)."""
    return _session_image("vllm-test-image", build_test_image, "vLLM")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if shared.is_worker():
        return
    for line in dict.fromkeys(shared.recorded(IMAGES_BUILT)):  # once, in the order built
        terminalreporter.write_line(line)


# --------------------------------------------------------------------------- router image


ROUTER_REPO = "instinct-serve-test/haproxy"
ROUTER_RECIPE = "1"
HAPROXY = "/usr/sbin/haproxy"
_ROUTER_PASSWD = _PASSWD + "haproxy:x:99:99:haproxy:/var/lib/haproxy:/bin/false\n"
_ROUTER_GROUP = _GROUP + "haproxy:x:99:\n"


def build_router_image() -> TestImage:
    """Build (or reuse) the HAProxy test image; see the module docstring."""
    real = os.path.realpath(HAPROXY)
    st = os.stat(real)
    digest = hashlib.sha256(ROUTER_RECIPE.encode())
    digest.update(f"{real}:{st.st_size}:{st.st_mtime_ns}".encode())
    digest.update(json.dumps([_ROUTER_PASSWD, _ROUTER_GROUP]).encode())
    tag = f"{ROUTER_REPO}:{digest.hexdigest()[:16]}"
    start = time.monotonic()
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return TestImage(tag, time.monotonic() - start, True, real)
    libs, broken = _ldd([real])
    if broken:
        raise RuntimeError(f"{real} needs libraries ldd cannot find")
    libs |= _dlopened_by_libc(libs)
    with tempfile.TemporaryDirectory(prefix="instinct-router-image-") as tmp:
        tar_path = os.path.join(tmp, "rootfs.tar")
        with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
            root = _Rootfs(tar)
            root.dir("/tmp", 0o1777)
            for sub in ("/proc", "/sys", "/dev", "/etc", "/usr/local/etc/haproxy", "/run"):
                root.dir(sub)
            root.dir("/var/lib/haproxy", 0o755)
            root.data("/etc/passwd", _ROUTER_PASSWD.encode())
            root.data("/etc/group", _ROUTER_GROUP.encode())
            for lib in sorted(libs):
                root.host(lib)
            root.regular("/usr/local/sbin/haproxy", real)
        changes = [
            'CMD ["haproxy", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]',
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "USER haproxy",
            "WORKDIR /var/lib/haproxy",
        ]
        argv = ["docker", "import"]
        for change in changes:
            argv += ["--change", change]
        out = subprocess.run([*argv, tar_path, tag], capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError(f"docker import failed: {out.stderr.strip()}")
    return TestImage(tag, time.monotonic() - start, False, real)


@pytest.fixture(scope="session")
def router_test_image(docker_daemon: DockerDaemon) -> TestImage:
    """The registry-free HAProxy image (module docstring)."""
    if not os.access(HAPROXY, os.X_OK):
        unavailable(f"{HAPROXY} is not installed (apt-get install haproxy)")
    return _session_image("router-test-image", build_router_image, "router")


# --------------------------------------------------------------------------- AMD devices


@pytest.fixture(scope="session")
def device_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in root with ``/dev/kfd`` and ``/dev/dri/renderD*`` character devices (1:3,
    the null device), for ``--device ROOT/dev/kfd:/dev/kfd``: the mandatory AMD device
    flags are exercised while the host's own /dev is never touched."""
    if os.geteuid() != 0:
        unavailable("only root can create the stand-in device nodes docker --device needs")
    from tests.infra.fakeroot import build_gpu_root

    return build_gpu_root(tmp_path_factory.mktemp("device-root")).path


# --------------------------------------------------------------------------- docker argv


def amd_run_argv(
    image: str,
    *,
    name: str,
    port: int,
    model: str,
    labels: Mapping[str, str],
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    host_ip: str = "127.0.0.1",
    device_root: Path | None = None,
) -> list[str]:
    """A ``docker run -d`` argv with the mandatory ROCm flags (vLLM docs for ROCm); with
    ``device_root`` the devices come from that stand-in tree, as ``serve --root`` does."""
    kfd = f"{device_root}/dev/kfd:/dev/kfd" if device_root else "/dev/kfd"
    dri = f"{device_root}/dev/dri:/dev/dri" if device_root else "/dev/dri"
    argv = [
        "docker",
        "run",
        "-d",
        "--name",
        name,
        "--group-add=video",
        "--group-add=render",
        "--cap-add=SYS_PTRACE",
        "--security-opt",
        "seccomp=unconfined",
        "--device",
        kfd,
        "--device",
        dri,
        "--ipc=host",
        "-p",
        f"{host_ip}:{port}:{port}",
        *label_args(labels),
    ]
    for key, value in (env or {}).items():
        argv += ["-e", f"{key}={value}"]
    return [*argv, image, "--model", model, "--port", str(port), *args]


# --------------------------------------------------------------------------- double on the host


@dataclass
class LocalDouble:
    """The vLLM test double as a host process, with its merged output collected."""

    proc: subprocess.Popen[str]
    port: int
    model: str
    lines: list[tuple[float, str]] = field(default_factory=list)  # (time.time(), line)
    reader: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return "".join(line + "\n" for _, line in list(self.lines))

    def wait_for(self, needle: str, timeout: float = 20.0) -> tuple[float, str]:
        """The first output line containing ``needle`` (with its arrival time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if needle in line:
                    return at, line
            if self.proc.poll() is not None and not (self.reader and self.reader.is_alive()):
                break
            time.sleep(0.02)
        raise AssertionError(f"{needle!r} not in the double's output:\n{self.output()[-3000:]}")

    def healthy_at(self, timeout: float = 20.0) -> float:
        """The double's own clock reading when it turned healthy."""
        _, line = self.wait_for("vllm-double: healthy at", timeout)
        return float(line.split("healthy at", 1)[1].split()[0])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def start_local_double(
    model: str = "test-org/test-model",
    *,
    mode: str = "healthy",
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    port: int | None = None,
) -> LocalDouble:
    port = port or free_port()
    full_env = dict(os.environ)
    full_env.update({"VLLM_DOUBLE_MODE": mode, "VLLM_DOUBLE_LOAD_S": "0.5"})
    full_env.update(env or {})
    proc = subprocess.Popen(
        [
            sys.executable,
            str(DOUBLE),
            "serve",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
    )
    double = LocalDouble(proc, port, model)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            double.lines.append((time.time(), line.rstrip("\n")))

    double.reader = threading.Thread(target=read, name=f"double-{proc.pid}", daemon=True)
    double.reader.start()
    return double


@pytest.fixture
def vllm_double_local() -> Iterator[Callable[..., LocalDouble]]:
    """``vllm_double_local(model, mode=..., env=..., args=...)``: a double on the host."""
    started: list[LocalDouble] = []

    def start(*a: object, **kw: object) -> LocalDouble:
        double = start_local_double(*a, **kw)  # type: ignore[arg-type]
        started.append(double)
        return double

    yield start
    for double in started:
        double.stop()
