"""How far a REAL vLLM's fingerprint moves between healthy runs, and how far a broken run's
moves (figures, not a test): the measurement the ``cpu`` row of
``data/fingerprint_tolerances.json`` comes from.

The real vLLM is the CPU build of the ``realvllm`` test tier (set up by
``tests/infra/setup_real_vllm.sh``) serving SmolLM2-135M-Instruct at ``--max-model-len 2048``
(the long probe's bound: 1024 tokens). One server at a time, each started, fingerprinted
``--takes`` times (``runtime.fingerprint.take``) and stopped:

- ``eager``: ``--enforce-eager``; ``eager-restart``: the same, started again;
- ``compiled``: without ``--enforce-eager`` (torch.compile; 2-3 min to start on 2 cores);
- ``broken-rope``, ``rope-2``, ``rope-1.25``: eager with a wrong RoPE scaling
  (``--hf-overrides``: linear, factor 4, 2, 1.25), the kind of mistake a wrong config
  makes: weights fine, positions wrong (at 2 and 1.25 greedy still answers the coherence
  probe right).

It prints each pair's distance (segment / tail, nats a token) against the first eager take,
the copy gain of the long probe, the greedy continuation's agreement, and each run's verdict
with and without the reference; ``--save PATH`` keeps every fingerprint as JSON.

    .venv/bin/python bench/fingerprint_tolerance.py [--takes 2] [--skip-compiled] [--save F]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from tests.infra.ports import free_port  # noqa: E402
from tests.infra.realvllm import (  # noqa: E402
    COMPILED_START_TIMEOUT_S,
    EAGER_START_TIMEOUT_S,
    load_setup,
    start_server,
    why_unavailable,
)

from instinct_serve.observe import fingerprint as fp  # noqa: E402
from instinct_serve.runtime.fingerprint import Budget, take  # noqa: E402

CONTEXT = 2048


def rope(factor: float) -> list[str]:
    scaling = {"rope_scaling": {"rope_type": "linear", "factor": factor}}
    return ["--enforce-eager", "--hf-overrides", json.dumps(scaling)]


RUNS: dict[str, tuple[list[str], float]] = {
    "eager": (["--enforce-eager"], EAGER_START_TIMEOUT_S),
    "eager-restart": (["--enforce-eager"], EAGER_START_TIMEOUT_S),
    "compiled": ([], COMPILED_START_TIMEOUT_S),
    "broken-rope": (rope(4.0), EAGER_START_TIMEOUT_S),
    "rope-2": (rope(2.0), EAGER_START_TIMEOUT_S),
    "rope-1.25": (rope(1.25), EAGER_START_TIMEOUT_S),
}


def run(name: str, takes: int, model: str) -> tuple[list[fp.Fingerprint], float]:
    setup = load_setup()
    assert setup is not None
    args, timeout = RUNS[name]
    log = Path(tempfile.mkdtemp(prefix="fp-tolerance-")) / f"{name}.log"
    server = start_server(setup, log, port=free_port(), args=args, max_model_len=CONTEXT)
    try:
        ready_s = server.wait_healthy(timeout)
        served = str(setup.model_dir) if model == "" else model
        budget = Budget.for_context(CONTEXT, seconds=300)
        return [take(server.base_url, served, budget) for _ in range(takes)], ready_s
    finally:
        server.stop()


def describe(label: str, current: fp.Fingerprint, reference: fp.Fingerprint | None) -> str:
    alone = fp.check(current)
    parts = [f"{label}: alone {alone.failure or 'ok'}"]
    long = current.probe("long")
    if long is not None:
        parts.append(f"copy gain {long.copy_gain:+.2f}")
    if reference is not None:
        against = fp.check(current, reference, platform="cpu")
        moved = ", ".join(f"{n} {d.segment:.4f}/{d.tail:.4f}" for n, d in against.distances.items())
        same = current.greedy is not None and reference.greedy is not None
        agree = same and current.greedy.text == reference.greedy.text  # type: ignore[union-attr]
        parts.append(f"moved (segment/tail) {moved}; greedy same: {agree}")
        parts.append(f"verdict {against.failure or 'ok'}")
    parts.append(f"{current.cost_tokens} tokens, {current.cost_s:.2f} s")
    return "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--takes", type=int, default=2)
    parser.add_argument("--skip-compiled", action="store_true")
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    setup = load_setup()
    reason = why_unavailable(setup)
    if reason is not None:
        print(f"no real vLLM: {reason}", file=sys.stderr)
        return 2
    names = [n for n in RUNS if not (args.skip_compiled and n == "compiled")]
    saved: dict[str, Any] = {}
    reference: fp.Fingerprint | None = None
    for name in names:
        begin = time.monotonic()
        taken, ready_s = run(name, args.takes, "")
        print(f"[{name}] ready in {ready_s:.0f} s, {time.monotonic() - begin:.0f} s in all")
        for i, fingerprint in enumerate(taken):
            print("  " + describe(f"take {i + 1}", fingerprint, reference))
            if reference is None:
                reference = fingerprint
        saved[name] = [f.to_dict() for f in taken]
    if args.save:
        args.save.write_text(json.dumps(saved, indent=1) + "\n", encoding="utf-8")
        print(f"saved {args.save}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
