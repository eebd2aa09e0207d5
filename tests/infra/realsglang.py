"""A REAL SGLang for tests: sglang 0.5.23 on a CPU torch serving SmolLM2-135M-Instruct.

``tests/infra/setup_real_sglang.sh`` builds it once into a cache and writes ``setup.json``
(the venv, the ``sgl_kernel`` placeholder, the real-vLLM tier's model directory); this module
reads it and starts real SGLang servers with the command the SGLang kind writes for a plan
(``servers.sglang``), plus the CPU flags of ``../shared/notes/real-sglang.md``. A started
server is the real-vLLM tier's ``RealServer`` (its process group, bounded waits, stop).
Used by the ``realsglang`` tier (tests/realsglang) and ``capture_real_sglang.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from instinct_serve import servers
from instinct_serve.plan.model import LaunchPlan
from tests.infra.ports import free_port
from tests.infra.realvllm import RealServer, import_venv_image

SERVED = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the model's Hub id, served under it
READY_LINE = "The server is fired up and ready to roll!"
READY_S = 240.0  # about 42 s on 2 idle cores; the machine is shared
# what SGLang needs on a CPU (the note's launch): its CPU engine, torch's attention
CPU_ARGS = ("--device", "cpu", "--attention-backend", "torch_native")


def cache_dir() -> Path:
    explicit = os.environ.get("INSTINCT_REALSGLANG_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "instinct-serve-tests" / "real-sglang"


@dataclass(frozen=True)
class Setup:
    """What ``setup_real_sglang.sh`` built (``setup.json``)."""

    root: Path
    venv: Path
    placeholder: Path
    model_dir: Path
    versions: str
    hf_home: Path  # the real-vLLM tier's Hub cache holding the same model, for docker by id

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def problems(self) -> list[str]:
        return [
            f"{what} ({path})"
            for what, path in (
                ("python", self.python),
                ("sgl_kernel placeholder", self.placeholder / "sgl_kernel"),
                ("model weights", self.model_dir / "model.safetensors"),
                ("hf cache snapshot", self.hf_home / "hub"),
            )
            if not path.exists()
        ]


def load_setup(root: Path | None = None) -> Setup | None:
    root = root or cache_dir()
    try:
        doc = json.loads((root / "setup.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model_dir = Path(doc["model_dir"])
    return Setup(
        root,
        Path(doc["venv"]),
        Path(doc["placeholder"]),
        model_dir,
        str(doc.get("versions") or ""),
        Path(doc.get("hf_home") or model_dir.parent.parent / "hf-home"),
    )


def required() -> bool:
    wanted = os.environ.get("INSTINCT_TEST_REQUIRE", "")
    return "realsglang" in {part.strip() for part in wanted.split(",")}


def why_unavailable(setup: Setup | None) -> str | None:
    """None when the real SGLang is ready to use, else the reason (for skip/fail)."""
    if setup is None:
        return (
            f"the real SGLang is not set up ({cache_dir()}/setup.json missing): run "
            "`bash tests/infra/setup_real_sglang.sh` (cached)"
        )
    problems = setup.problems()
    if problems:
        return (
            "the real SGLang setup is incomplete (missing "
            + ", ".join(problems)
            + "): rerun `bash tests/infra/setup_real_sglang.sh`"
        )
    return None


def server_env(setup: Setup, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """SGLang's CPU engine on, the placeholder ``sgl_kernel`` importable, offline, no token."""
    env = dict(os.environ)
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        env.pop(key, None)
    env.update(
        {
            "SGLANG_USE_CPU_ENGINE": "1",
            "PYTHONPATH": str(setup.placeholder),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def cli_env(setup: Setup, data_dir: Path) -> dict[str, str]:
    """The CLI's environment for a native SGLang: the tier's interpreter found by
    ``INSTINCT_SGLANG_PYTHON``, the CPU engine allowed, its own state directory, the model
    from the tier's Hugging Face cache, offline, no token. The ``sgl_kernel`` placeholder is
    not here: serve is given it as the user of such an install would (``--env-literal
    PYTHONPATH=...``), so the plan carries it to every launch and relaunch."""
    env = dict(os.environ)
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ROCM_SSH_HOST", "ROCM_SSH_USER"):
        env.pop(key, None)
    env.update(
        {
            "INSTINCT_SGLANG_PYTHON": str(setup.python),
            "INSTINCT_ALLOW_CPU_ENGINE": "1",
            "INSTINCT_DATA_DIR": str(data_dir / "data"),
            "INSTINCT_CACHE_DIR": str(data_dir / "cache"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HOME": str(setup.hf_home),
        }
    )
    return env


# What a user of a CPU build of SGLang in a docker image adds to serve (the note's launch):
# the CPU engine, and after ``--`` SGLang's CPU device, torch's attention and a bounded pool
DOCKER_CPU_ENV = ("--env-literal", "HF_HUB_OFFLINE=1", "--env-literal", "SGLANG_USE_CPU_ENGINE=1")
DOCKER_CPU_TAIL = ("--", *CPU_ARGS, "--max-total-tokens", "8192")


@dataclass
class DockerServe:
    """``instinct serve SmolLM2 --server sglang --image TAG`` through docker: its
    environment, port, name and arguments up to the ones a test adds (``args``), then
    ``DOCKER_CPU_TAIL``. AMD publishes no SGLang config for SmolLM2, so the plan is SGLang's
    own defaults (``plan.sglang._defaults``) on the image named."""

    env: dict[str, str]
    port: int
    name: str
    args: list[str]


def docker_serve(setup: Setup, image: str, tmp: Path, prefix: str, timeout_s: int) -> DockerServe:
    """The serve command of the tier's docker tests, planned for an MI300X on a stand-in GPU
    root (the tool cannot know the image is a CPU build), offline, with a 1,024-token
    context (written as SGLang's --context-length: it bounds the fingerprint's long probe)."""
    from tests.infra.fakeroot import build_gpu_root

    root = tmp / "gpu-root"
    root.mkdir()
    build_gpu_root(root)
    env = dict(os.environ)
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ROCM_SSH_HOST", "ROCM_SSH_USER"):
        env.pop(key, None)
    env.update(
        {
            "INSTINCT_DATA_DIR": str(tmp / "data"),
            "INSTINCT_CACHE_DIR": str(tmp / "cache"),
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(setup.hf_home),
        }
    )
    port = free_port()
    name = f"{prefix}-{port}"
    args = ["serve", SERVED, "--server", "sglang", "--image", image, "--port", str(port)]
    args += ["--name", name, "--timeout", str(timeout_s), "--yes", "--gpu", "mi300x"]
    args += ["--root", str(root), "--hf-cache", str(setup.hf_home), *DOCKER_CPU_ENV]
    args += ["--max-model-len", "1024"]
    return DockerServe(env, port, name, args)


def cpu_plan(
    setup: Setup, port: int, args: Sequence[str] = (), *, max_total_tokens: int = 8192
) -> LaunchPlan:
    """A native SGLang plan of the tier's model on this CPU: the note's flags, then ``args``
    (later ones win in SGLang's argparse)."""
    model = str(setup.model_dir)
    plan = LaunchPlan(model, model, "none", "sglang-real", server="sglang", port=port)
    plan.vllm_args = [
        *CPU_ARGS,
        *("--served-model-name", SERVED),
        *("--port", str(port), "--nccl-port", str(free_port())),
        *("--enable-metrics", "--max-total-tokens", str(max_total_tokens)),
        *args,
    ]
    plan.launcher = "native"
    return plan


def native_argv(setup: Setup, plan: LaunchPlan) -> list[str]:
    """The kind's native command for ``plan``, run by the tier's interpreter."""
    argv = servers.get("sglang").native_argv(plan)
    if argv[:3] != ["python3", "-m", "sglang.launch_server"]:
        raise AssertionError(f"the SGLang kind's native command changed: {argv[:3]}")
    return [str(setup.python), *argv[1:]]


def start_server(
    setup: Setup, plan: LaunchPlan, log: Path, env: Mapping[str, str] | None = None
) -> RealServer:
    """``plan``'s SGLang in its own process group, both streams to ``log``."""
    argv = native_argv(setup, plan)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(setup, env),
            start_new_session=True,
        )
    assert plan.port is not None
    return RealServer(proc, plan.port, log, argv, time.monotonic(), title="sglang")


# --------------------------------------------------------------------------- docker image

IMAGE_REPO = "instinct-serve-test/sglang-cpu"
IMAGE_RECIPE = "1"  # bump when the image recipe below changes
IMAGE_VENV = "/opt/sglang-cpu"  # the venv inside the image, its bin first on PATH
IMAGE_PLACEHOLDER = "/opt/sgl-kernel-placeholder"  # on PYTHONPATH, as on the host


def image_tag(setup: Setup) -> str:
    """A tag that changes when the venv, the interpreter or the recipe changes."""
    digest = hashlib.sha256(IMAGE_RECIPE.encode())
    python = os.path.realpath(setup.python)
    for path in (python, str(setup.venv / "pyvenv.cfg"), str(setup.root / "venv.ready")):
        with contextlib.suppress(OSError):
            st = os.stat(path)
            digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode())
    return f"{IMAGE_REPO}:0.5.23-{digest.hexdigest()[:10]}"


def build_image(setup: Setup) -> tuple[str, float, bool]:
    """Build (or reuse) the real SGLang's image: (tag, seconds, reused). Laid out as the
    ``lmsysorg/sglang`` ROCm images are for the planner's argv: no entrypoint, and
    ``python3 -m sglang.launch_server ...`` runs the venv's interpreter (``PATH``), with the
    ``sgl_kernel`` placeholder on ``PYTHONPATH`` (the real-vLLM tier's ``import_venv_image``,
    no registry)."""
    tag = image_tag(setup)
    start = time.monotonic()
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag, time.monotonic() - start, True
    changes = [f"ENV PYTHONPATH={IMAGE_PLACEHOLDER}", "LABEL instinct-serve.test-image=sglang-cpu"]
    extra = {IMAGE_PLACEHOLDER: setup.placeholder}
    import_venv_image(setup.python, setup.venv, IMAGE_VENV, tag, changes, extra)
    return tag, time.monotonic() - start, False


def main(argv: list[str]) -> int:
    """``python -m tests.infra.realsglang image``: build or reuse the image (the setup)."""
    setup = load_setup()
    if argv[:1] != ["image"] or setup is None:
        print("usage: python -m tests.infra.realsglang image (after setup_real_sglang.sh)")
        return 2
    tag, seconds, reused = build_image(setup)
    print(f"image {tag}: {'reused' if reused else f'built in {seconds:.1f} s'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
