#!/usr/bin/env bash
# What the real-SGLang tests (tests/realsglang/) need: a REAL SGLang on a CPU torch, and the
# real-vLLM tier's model (SmolLM2-135M-Instruct, bf16 safetensors), built once into a cache
# and reused (each step is skipped when its result is there). The recipe and its traps are in
# ../shared/notes/real-sglang.md:
#   1. venv  Python 3.11 venv made by uv: sglang==0.5.23's own requirements (its wheel's
#            Requires-Dist, pins kept) minus the CUDA-only ones, with torch 2.13.0+cpu (local
#            find-links, else the PyTorch CPU index); then sglang and torchvision==0.28.0
#            with --no-deps. PyPI's torchvision is a CUDA build whose _C cannot load on a CPU
#            torch ("operator torchvision::nms does not exist"): its _meta_registrations.py is
#            given the nms/qnms schemas (torch.library.define) when its ops are missing.
#   2. sgl_kernel  no CPU build on PyPI: a placeholder package (on PYTHONPATH at launch) whose
#            every name is a function raising NotImplementedError. A plain Llama on a CPU
#            without AMX takes torch's path everywhere (0 calls traced), so SGLang's own CPU
#            kernels are NOT exercised by this tier; any kernel actually called fails loudly.
#   3. model the real-vLLM tier's (tests/infra/setup_real_vllm.sh builds it; its cache is
#            read from $INSTINCT_REALVLLM_CACHE or the default).
# Launch: SGLANG_USE_CPU_ENGINE=1 PYTHONPATH=$cache/sgl-kernel-placeholder
#   $cache/venv/bin/python -m sglang.launch_server --device cpu --attention-backend torch_native
#   --model-path DIR ... (tests/infra/realsglang.py)
#   4. image  the venv, the placeholder and the host's python3.11 as a registry-free docker image
#            (`docker import`, as the real-vLLM tier's), for `serve --server sglang` by docker
# Then: INSTINCT_TEST_REQUIRE=realsglang .venv/bin/pytest -m realsglang tests/realsglang -n 0
#
# Cache: $INSTINCT_REALSGLANG_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/instinct-serve-tests/
# real-sglang; uv's wheel cache inside it. Needs the project's .venv (for uv) and python3.11.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

SGLANG_SPEC="sglang==0.5.23"
TORCHVISION_SPEC="torchvision==0.28.0"
TORCH_LOCAL="2.13.0+cpu"
# sglang's requirements that are CUDA-only (or pull a CUDA stack); the note lists them
CUDA_ONLY="cuda-python flashinfer_python flash-attn-4 humming-kernels nvidia-cutlass-dsl \
nvidia-mathdx nvshmem4py-cu13 quack-kernels sgl-deep-ep sgl-deep-gemm sgl-flash-mla \
sglang-kernel tilelang torch_memory_saver torchaudio torchcodec timm torch torchvision"
RECIPE=1  # bump to rebuild the venv when the recipe above changes

cache="${INSTINCT_REALSGLANG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/instinct-serve-tests/real-sglang}"
vllm_cache="${INSTINCT_REALVLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/instinct-serve-tests/real-vllm}"
mkdir -p "$cache"
export UV_CACHE_DIR="$cache/uv-cache"
py=$repo/.venv/bin/python
uv=$repo/.venv/bin/uv
[ -x "$uv" ] || uv=$(command -v uv || true)
[ -x "$py" ] || { echo "no $py: create the project venv first (README)" >&2; exit 1; }
[ -n "$uv" ] || { echo "uv not found (it is in the test extras: pip install -e '.[test]')" >&2; exit 1; }
base_python=${INSTINCT_REALSGLANG_PYTHON:-$(command -v python3.11 || true)}
[ -x /usr/bin/python3.11 ] && base_python=${INSTINCT_REALSGLANG_PYTHON:-/usr/bin/python3.11}
[ -n "$base_python" ] || { echo "python3.11 not found (apt-get install python3-minimal)" >&2; exit 1; }

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
total_start=$(now)

torch_source=()
links=$(pip config get global.find-links 2>/dev/null || true)
for dir in ${PIP_FIND_LINKS:-} $links /opt/wheels; do
  if compgen -G "$dir/torch-${TORCH_LOCAL}-*.whl" >/dev/null; then
    torch_source=(--find-links "$dir"); break
  fi
done
if [ ${#torch_source[@]} -eq 0 ]; then
  torch_source=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
fi

# ---------------------------------------------------------------- 1. venv
venv="$cache/venv"
ready="$cache/venv.ready"
if [ "$(cat "$ready" 2>/dev/null)" != "$RECIPE $SGLANG_SPEC" ]; then
  echo "== venv: $SGLANG_SPEC into $venv (python $base_python; torch from ${torch_source[*]})"
  t=$(now)
  rm -rf "$venv" "$ready"
  wheels="$cache/wheels"
  mkdir -p "$wheels"
  if ! compgen -G "$wheels/sglang-0.5.23-*.whl" >/dev/null; then
    "$py" -m pip download -q --no-deps --only-binary=:all: -d "$wheels" "$SGLANG_SPEC"
  fi
  whl=$(ls "$wheels"/sglang-0.5.23-*.whl | tail -1)
  # its Requires-Dist without extras, minus the CUDA-only ones (markers and pins kept)
  "$py" - "$whl" "$CUDA_ONLY" >"$cache/requirements.txt" <<'PY'
import re, sys, zipfile
whl, cuda_only = sys.argv[1], set(sys.argv[2].split())
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    text = z.read(meta).decode()
for line in text.splitlines():
    if not line.startswith("Requires-Dist: ") or "extra ==" in line:
        continue
    req = line[len("Requires-Dist: "):]
    name = re.match(r"[A-Za-z0-9_.\-]+", req).group(0)
    if name.lower().replace("_", "-") not in {n.lower().replace("_", "-") for n in cuda_only}:
        print(req)
PY
  "$uv" venv -q --relocatable -p "$base_python" "$venv"
  "$uv" pip install -q -p "$venv/bin/python" "${torch_source[@]}" -r "$cache/requirements.txt" \
    "torch==$TORCH_LOCAL"
  "$uv" pip install -q -p "$venv/bin/python" --no-deps "$whl" "$TORCHVISION_SPEC"
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  meta="$site/torchvision/_meta_registrations.py"
  if ! grep -q "instinct-serve tests" "$meta"; then
    { cat <<'PY'
# instinct-serve tests: PyPI's torchvision is a CUDA build whose _C cannot load on a CPU
# torch; declare the schemas its fakes below register for, so that `import torchvision`
# works (the ops themselves stay unavailable: a text model never calls them).
import torch as _torch
from torchvision.extension import _has_ops as _instinct_has_ops

if not _instinct_has_ops():
    for _op in ("nms", "qnms"):
        try:
            _torch.library.define(
                f"torchvision::{_op}", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
            )
        except RuntimeError:
            pass
PY
      cat "$meta"; } >"$meta.new" && mv "$meta.new" "$meta"
  fi
  "$venv/bin/python" -c 'import torchvision, sglang' || { echo "sglang does not import" >&2; exit 1; }
  echo "venv_install_s=$(secs "$t")" >"$cache/timings"
  echo "$RECIPE $SGLANG_SPEC" > "$ready"
else
  echo "== venv: reused $venv"
fi

# ---------------------------------------------------------------- 2. sgl_kernel
placeholder="$cache/sgl-kernel-placeholder/sgl_kernel"
mkdir -p "$placeholder"
cat >"$placeholder/__init__.py" <<'PY'
"""instinct-serve tests: a placeholder for sgl_kernel, which has no CPU build on PyPI.

SGLang's CPU path imports names from it at module level; a plain Llama on a CPU without AMX
calls none of them. Any name is a function that raises when called, so a kernel actually
used fails loudly instead of computing something else."""


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: no CPU build (instinct-serve test placeholder)")

    return missing
PY

# ---------------------------------------------------------------- 3. model
model="$vllm_cache/models/SmolLM2-135M-Instruct"
if [ ! -f "$model/model.safetensors" ]; then
  echo "== model: building it with the real-vLLM tier's setup (INSTINCT_REALVLLM_IMAGE=0)"
  INSTINCT_REALVLLM_IMAGE=0 bash tests/infra/setup_real_vllm.sh
fi
version=$("$venv/bin/python" -c 'from importlib.metadata import version; print(version("sglang"), version("torch"))')
printf '{"venv": "%s", "placeholder": "%s", "model_dir": "%s", "hf_home": "%s", "versions": "%s"}\n' \
  "$venv" "$cache/sgl-kernel-placeholder" "$model" "$vllm_cache/hf-home" "$version" >"$cache/setup.json"
# 4. the docker image (registry-free, tests/infra/realsglang.py); INSTINCT_REALSGLANG_IMAGE=0 skips it
if [ "${INSTINCT_REALSGLANG_IMAGE:-1}" != 0 ] && docker version >/dev/null 2>&1; then
  t=$(now)
  "$py" -m tests.infra.realsglang image
  echo "image_s=$(secs "$t")" >>"$cache/timings"
fi
echo "== real SGLang ready in $(secs "$total_start") s (cache $cache): $version"
cat "$cache/timings" 2>/dev/null || true
