"""The host and the container's devices: /dev/kfd permissions, no GPU visible (or an empty
*_VISIBLE_DEVICES), a port already taken, a full disk and a too small /dev/shm."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules.common import ROCM_IMAGE, at_hit
from instinct_serve.diagnose.scan import Scan, exc

_KFD = (
    re.compile(r"^\s*Unable to open /dev/kfd read-write: (.+)$"),
    re.compile(r'is not member of "(\w+)" group'),
    exc(r".{0,200}(?:Permission denied: '/dev/(?:kfd|dri/\S+)'|/dev/kfd: [Pp]ermission denied)"),
    exc(
        r".{0,200}error gathering device information while adding custom device "
        r'"(/dev/kfd|/dev/dri)"'
    ),
)


def build_kfd_permission(ctx: DiagnoseContext, missing: bool = False, **at: Any) -> Finding:
    if missing:
        return Finding(
            id="kfd_permission",
            title="/dev/kfd is missing",
            cause="The ROCm compute device /dev/kfd does not exist: it was not passed into the "
            "container (--device /dev/kfd), or the amdgpu driver is not loaded on the host.",
            fix="Start the container with --device /dev/kfd --device /dev/dri (instinct serve "
            "does); on the host check `ls -l /dev/kfd` and that the amdgpu module is loaded.",
            commands=("ls -l /dev/kfd /dev/dri", "lsmod | grep amdgpu"),
            details={"variant": "missing"},
            **at,
        )
    return Finding(
        id="kfd_permission",
        title="No permission to use the GPU (/dev/kfd)",
        cause="The process cannot open /dev/kfd: its user is not in the group that owns the "
        "device (video or render, depending on the distribution).",
        fix="Run the container with --group-add video --group-add render (instinct serve does), "
        "and on the host add your user to both groups, then log in again.",
        commands=('sudo usermod -aG video,render "$USER"', "ls -l /dev/kfd /dev/dri"),
        details={"variant": "permission"},
        **at,
    )


def _kfd(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_KFD)
    if hit is None:
        return None
    text = hit.line.text
    missing = "No such file or directory" in text or "no such file or directory" in text
    return build_kfd_permission(ctx, missing, **at_hit(hit, count))


_NO_GPU = (
    exc(r"No (?:HIP|CUDA) GPUs are available"),
    exc(r"Failed to infer device type"),
)
_VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
_VISIBLE_EMPTY = re.compile(
    r"\b((?:CUDA|HIP|ROCR)_VISIBLE_DEVICES)(?:=(?:''|\"\"|\s*$)|\s+is set to (?:an )?empty)"
)


def build_cuda_visible_devices_empty(
    ctx: DiagnoseContext, variable: str = "CUDA_VISIBLE_DEVICES", **at: Any
) -> Finding:
    return Finding(
        id="cuda_visible_devices_empty",
        title=f"{variable} is empty: no GPU is visible",
        cause=f"{variable} is set to an empty string, which hides every GPU from ROCm and "
        "PyTorch (an unset variable shows them all).",
        fix=f"Unset {variable}, or set it to the GPUs to use (e.g. 0,1). With docker, select "
        "GPUs with --device or HIP_VISIBLE_DEVICES=0,1 rather than an empty value.",
        details={"variable": variable},
        **at,
    )


def build_no_gpu_visible(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="no_gpu_visible",
        title="PyTorch sees no GPU",
        cause="The engine found no GPU: the container was started without --device /dev/kfd "
        "--device /dev/dri, CUDA/HIP/ROCR_VISIBLE_DEVICES is empty or wrong, the user cannot "
        "open /dev/kfd, or the image is a CUDA build.",
        fix="Check `instinct check` on the host; run the container with --device /dev/kfd "
        "--device /dev/dri --group-add video --group-add render; unset empty *_VISIBLE_DEVICES "
        f"variables; use the {ROCM_IMAGE} image.",
        commands=("instinct check",),
        **at,
    )


def _visible_empty(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_NO_GPU)
    if hit is None:
        return None
    for name in _VISIBLE_VARS:
        if ctx.env.get(name) == "":
            return build_cuda_visible_devices_empty(ctx, name, **at_hit(hit, count))
    for line in scan.lines:
        m = _VISIBLE_EMPTY.search(line.text)
        if m:
            return build_cuda_visible_devices_empty(ctx, m.group(1), **at_hit(hit, count))
    return None


def _no_gpu(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_NO_GPU)
    return build_no_gpu_visible(ctx, **at_hit(hit, count)) if hit else None


_PORT = (
    exc(r".{0,40}error while attempting to bind on address \(([^)]*)\): address already in use"),
    exc(r".{0,300}Bind for [^\s]*?:(\d+) failed: port is already allocated"),
    exc(
        r".{0,300}failed to bind host port (?:for )?[\d.:\[\]a-f]*?:(\d+)\S*: "
        r"address already in use"
    ),
    exc(r".{0,40}\[Errno 98\] Address already in use"),
    exc(r".{0,300}EADDRINUSE"),
)


def build_port_in_use(
    ctx: DiagnoseContext, port: int | None = None, distributed: bool = False, **at: Any
) -> Finding:
    if distributed:
        return Finding(
            id="port_in_use",
            title="A port the engine needs is already in use",
            cause="The torch.distributed rendezvous port is taken, usually by a leftover vLLM "
            "process from an earlier run.",
            fix="Stop stale vLLM processes and containers (instinct ps / instinct stop), or "
            "set VLLM_PORT to a free port.",
            details={"port": port, "variant": "distributed"},
            **at,
        )
    which = f"Port {port}" if port else "The API port"
    commands = (f"ss -ltnp 'sport = :{port}'",) if port else ("ss -ltnp",)
    return Finding(
        id="port_in_use",
        title=f"{which} is already in use",
        cause=f"{which} is already bound on the host by another server or container.",
        fix=f"Serve on another port (--port {port + 1 if port else 'N'}), or stop what holds "
        "it (instinct ps shows endpoints started by this tool).",
        commands=commands,
        details={"port": port, "variant": "api"},
        **at,
    )


def _port(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_PORT)
    if hit is None:
        return None
    m = hit.match
    port: int | None = None
    text = hit.line.text
    if m.re is _PORT[0]:
        number = re.search(r",\s*(\d+)\s*$", m.group(1))
        port = int(number.group(1)) if number else None
    elif m.re in (_PORT[1], _PORT[2]):
        port = int(m.group(1))
    distributed = "EADDRINUSE" in text or "get_open_port" in " ".join(
        line.text for line in scan.traceback_before(hit.index)
    )
    return build_port_in_use(ctx, port, distributed, **at_hit(hit, count))


_NO_SPACE = exc(r".{0,300}No space left on device")
_SHM = (
    exc(r".{0,300}Error while creating shared memory segment"),
    exc(r".{0,300}failed to extend /dev/shm"),
    exc(r".{0,300}/dev/shm.{0,200}No space left on device"),
    exc(r".{0,300}No space left on device.{0,200}/dev/shm"),
    # vLLM 0.32 checks before it allocates: "RuntimeError: Insufficient space in /dev/shm for
    # shared-memory allocation: 160 MiB required, 64 MiB free. Increase /dev/shm (e.g.
    # --shm-size or --ipc=host)." (real-vllm-cpu/17, docker's default 64 MiB)
    exc(r".{0,300}Insufficient space in /dev/shm"),
)
_SHM_FIGURES = re.compile(r"(\d+(?:\.\d+)?) MiB required, (\d+(?:\.\d+)?) MiB free")


def build_disk_full(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="disk_full",
        title="Disk full",
        cause="A write failed with 'No space left on device': usually the Hugging Face cache "
        "while downloading the weights, or the JIT/compile caches.",
        fix="Free space on the disk that holds ~/.cache/huggingface (df -h), or point HF_HOME "
        "at a larger disk and mount that into the container.",
        commands=("df -h",),
        **at,
    )


def build_shm_too_small(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="shm_too_small",
        title="Shared memory (/dev/shm) too small",
        cause="RCCL and vLLM's multiprocessing exchange data through /dev/shm, and docker gives "
        "a container only 64 MB of it by default.",
        fix="Run the container with --ipc=host (instinct serve does) or --shm-size 16g.",
        commands=("df -h /dev/shm",),
        **at,
    )


def _shm(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_SHM)
    if hit is None:
        return None
    finding = build_shm_too_small(ctx, **at_hit(hit, count))
    m = _SHM_FIGURES.search(hit.line.text)
    if m:
        figures = {"required_mib": float(m.group(1)), "free_mib": float(m.group(2))}
        finding = replace(finding, details=figures)
    return finding


def _disk_full(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    for hit in scan.hits(_NO_SPACE):
        if "/dev/shm" not in hit.line.text:
            return build_disk_full(ctx, **at_hit(hit))
    return None


RULES = (
    Rule(
        "kfd_permission",
        95,
        build_kfd_permission,
        _kfd,
        words(r"/dev/kfd|\bkfd\b|render group|video group"),
    ),
    Rule(
        "cuda_visible_devices_empty",
        94,
        build_cuda_visible_devices_empty,
        _visible_empty,
        words(r"(?:cuda|hip|rocr)_visible_devices", r"empty|''|\"\"|blank|unset"),
        supersedes=("no_gpu_visible",),  # the reason no GPU is visible
    ),
    Rule(
        "no_gpu_visible",
        70,
        build_no_gpu_visible,
        _no_gpu,
        words(
            r"no (?:hip|cuda|rocm) gpus?|no gpus? (?:found|detected|available|"
            r"visible)|failed to infer device type"
        ),
    ),
    Rule(
        "port_in_use",
        96,
        build_port_in_use,
        _port,
        words(
            r"address already in use|port is already allocated|eaddrinuse|"
            r"port \d+ (?:is )?(?:already )?(?:in use|taken|busy)"
        ),
    ),
    Rule(
        "disk_full",
        93,
        build_disk_full,
        _disk_full,
        words(r"no space left|disk (?:is )?full|out of disk"),
    ),
    Rule(
        "shm_too_small",
        91,
        build_shm_too_small,
        _shm,
        words(r"/dev/shm|\bshm\b|shared memory"),
    ),
)
