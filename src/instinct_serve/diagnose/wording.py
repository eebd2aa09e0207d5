"""A finding in the words of the route that ran the server (one place for all rules).

The rules write their causes and fixes for the docker route (an image, a container, its
mounts and flags). With ``--engine native`` vLLM is a process on the host, installed with
pip, reading the host's directories and environment: ``worded`` rewrites a finding for that
route once, where every rule's finding is made (``registry.Rule``), so no rule keeps a
second copy of its text. ``NATIVE`` is the table, most specific phrases first; the general
ones at its end catch the rest (tests/diagnose/test_wording.py builds every rule under the
native context and finds no image, container or docker flag left).

The Hugging Face cache is named as the native process finds it: ``HF_HOME`` and its
directory where it points elsewhere than ``~/.cache/huggingface`` (``DiagnoseContext.
hf_home``).
"""

from __future__ import annotations

import re
from dataclasses import replace

from instinct_serve.diagnose.model import DiagnoseContext, Finding

NATIVE_LAUNCHER = "native"
_DEFAULT_HF = "~/.cache/huggingface"
_UPGRADE = "Upgrade vLLM (pip install -U vllm)"

# (docker wording, native wording): regular expressions, tried in order on title, cause, fix
NATIVE: tuple[tuple[str, str], ...] = (
    # the model and the Hugging Face cache
    (r"\(the container gets it as --env HF_TOKEN\)", "(the vLLM process inherits it)"),
    (
        r"; for a local directory, mount it into the container and pass its path",
        "; for a local directory, pass its path",
    ),
    (
        r"; on the docker route the directory must be mounted into the container at the same "
        r"path \(instinct serve DIR does that for a local directory\)",
        ", readable by the user that runs vLLM",
    ),
    (
        r"Hugging Face cache mounted into the container",
        "Hugging Face cache the vLLM process reads ({hf})",
    ),
    (r"into the cache that is mounted into the container \(~/\.cache/huggingface\)", "into {hf}"),
    (r" and mount that into the container", ""),
    (r"The container could not reach", "The vLLM process could not reach"),
    (r"from a container \(docker run --rm IMAGE curl -sI (\S+)\)", r"from this host (curl -sI \1)"),
    # devices, groups and shared memory
    (r"the container was started without --device /dev/kfd --device /dev/dri, ", ""),
    (
        r"run the container with --device /dev/kfd --device /dev/dri --group-add video "
        r"--group-add render",
        "add the user that runs vLLM to the video and render groups",
    ),
    (
        r"Run the container with --group-add video --group-add render \(instinct serve does\), "
        r"and on the host add your user to both groups",
        "Add the user that runs vLLM to the video and render groups",
    ),
    (
        r"With docker, select GPUs with --device or HIP_VISIBLE_DEVICES",
        "Select GPUs with HIP_VISIBLE_DEVICES",
    ),
    (
        r"and docker gives a container only 64 MB of it by default",
        "and /dev/shm on this host is too small for them",
    ),
    (
        r"Run the container with --ipc=host \(instinct serve does\) or --shm-size 16g\.",
        "Make /dev/shm larger on the host (mount -o remount,size=16G /dev/shm).",
    ),
    (
        r"Run the container with --ipc=host \(or --shm-size 16g\)",
        "Make /dev/shm larger on the host (16 GB or more)",
    ),
    (r"/dev/shm in the container", "/dev/shm on the host"),
    (r" processes and containers \(", " processes ("),
    (r"another server or container", "another server"),
    (r"an earlier vLLM container", "an earlier vLLM process"),
    # the vLLM build
    (
        r"Use a newer image: vllm/vllm-openai-rocm:latest, or a tag at or above",
        _UPGRADE + " to a version at or above",
    ),
    (r"Use a newer vllm/vllm-openai-rocm image", _UPGRADE),
    (r"Use a newer image \(its NCCL/RCCL and vLLM\)", _UPGRADE + " (and its RCCL)"),
    (
        r"Use an image with (\S+) \(the fix; a newer vllm/vllm-openai-rocm\)\. The same image",
        r"Use a vLLM with \1 (the fix; pip install -U vllm). The same vLLM",
    ),
    (
        r"Use vllm/vllm-openai-rocm \(built for ([^)]*)\) or a rocm/vllm image for your GPU",
        r"Install ROCm builds of PyTorch and vLLM for your GPU (or serve with --engine docker: "
        r"vllm/vllm-openai-rocm is built for \1)",
    ),
    (
        r"Run the ROCm image vllm/vllm-openai-rocm rather than vllm/vllm-openai",
        "Install vLLM's ROCm build (or serve with --engine docker)",
    ),
    (r"\) into it\.", ") into its environment."),
    (r"a CUDA vLLM wheel or the vllm/vllm-openai image", "a CUDA vLLM wheel"),
    (r"use the vllm/vllm-openai-rocm image", "install ROCm builds of PyTorch and vLLM"),
    (
        r"prefer the prebuilt vllm/vllm-openai-rocm image to a local build",
        "or serve the prebuilt ROCm build with --engine docker",
    ),
    (r"No GPU code for this GPU in the image", "No GPU code for this GPU in the installed vLLM"),
    (r"The GPU code in the image was", "The GPU code of the installed vLLM (or PyTorch) was"),
    (r"an image built for other gfx targets", "a build for other gfx targets"),
    (r"or the image is a CUDA build", "or the installed PyTorch or vLLM is a CUDA build"),
    (r"The vLLM image is too old", "The installed vLLM is too old"),
    (
        r"Check `vllm serve --help` in this image; use an image that has the flag",
        "Check `vllm serve --help` of the installed vLLM; install a vLLM that has the flag",
    ),
    (r"the image or host it runs in has no lscpu", "this host has no lscpu"),
    (r", or use an image that has it\.", "."),
    (r"all nodes run the same image", "all nodes run the same vLLM"),
    (r"older images:", "older vLLM versions:"),
    # what is left: the general words
    (r"\b(?:this|the) image version\b", "this vLLM version"),
    (r"\ba newer image\b", "a newer vLLM"),
    (r"\ban image not built\b", "a vLLM not built"),
    (r"\b[Tt]his image\b", "this vLLM"),
    (r"\bthe image\b", "the installed vLLM"),
    (r"\bthe container\b", "the vLLM process"),
    (r"\ba container\b", "a process"),
)
_NATIVE = tuple((re.compile(pattern), words) for pattern, words in NATIVE)
_COMMANDS = {"docker ps": "instinct ps"}


def hf_words(ctx: DiagnoseContext) -> str:
    """The Hugging Face cache as the native process finds it."""
    if ctx.hf_home and ctx.hf_home.rstrip("/") not in ("", _DEFAULT_HF):
        return f"HF_HOME={ctx.hf_home}"
    return _DEFAULT_HF


def _native(text: str, hf: str) -> str:
    for pattern, words in _NATIVE:
        if pattern.search(text):  # expand the native words' groups, then name the cache
            text = pattern.sub(words, text).replace("{hf}", hf)
    return text.replace(_DEFAULT_HF, hf) if hf != _DEFAULT_HF else text


def worded(finding: Finding, ctx: DiagnoseContext) -> Finding:
    """``finding`` in the words of ``ctx.launcher`` (the rules' own words: docker)."""
    if ctx.launcher != NATIVE_LAUNCHER:
        return finding
    hf = hf_words(ctx)
    return replace(
        finding,
        title=_native(finding.title, hf),
        cause=_native(finding.cause, hf),
        fix=_native(finding.fix, hf),
        commands=tuple(_COMMANDS.get(c, c) for c in finding.commands),
    )
