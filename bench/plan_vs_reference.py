"""`instinct plan` against AMD's reference configs (InferenceX ``amd-master.yaml`` and the
deprecated AMD master files, as shipped in ``data/reference_snapshot.json``).

For every single-node vLLM config on mi300x / mi325x / mi355x, plan the same checkpoint on
8 such GPUs offline and compare with the config's first search-space row that fits and its
launch script:

  (a) TP, EP (``--enable-expert-parallel``) and DP-attention
  (b) every environment variable the script exports (same value)
  (c) every vLLM flag the script passes with a literal value (same value)

What the plan adds beyond the config (our data's AITER/cache variables, a tool-call parser)
is listed as stated additions, not counted against it; a benchmark-harness flag the plan does
not follow on purpose (``catalog.reference.BENCHMARK_ONLY``, with its reason) is a stated
exception. A speculative-decoding config is compared too: an MTP one planned as a user opts
into it (``--speculative-mtp N``, its draft tokens), which makes the plan follow it; an EAGLE3
one (a draft model of its own) against the plain plan, since the plan has no opt-in for it.
Flags the script sets per run (``--max-model-len $MAX_MODEL_LEN``) or inside a condition are not
compared (``varies``).

SGLang configs (``--server sglang``, or both by default) are planned with ``--server sglang``
and compared the same way, TP/EP/DP-attention as ``--tensor-parallel-size``, ``--ep-size`` and
``--dp-size N --enable-dp-attention``; an MTP one (SGLang's ``--speculative-algorithm EAGLE``
on the model's own heads) with ``--speculative-mtp N``. Prefill/decode-split configs
(``sglang-disagg``, across nodes) are listed apart as not planned.

Run: .venv/bin/python bench/plan_vs_reference.py [--model TEXT] [--server vllm|sglang|both]
     [--json] [--examples N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from plan_vs_upstream import (  # noqa: E402
    Ours,
    configure_offline,
    flag_map,
    load_planner,
    same_value,
)

GPU_COUNT = 8


@dataclass
class Result:
    name: str
    file: str
    model: str
    gpu: str
    matched: bool
    differences: list[str] = field(default_factory=list)
    additions: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)  # stated, not followed on purpose
    followed: bool = False  # the plan cites this config by name
    speculative: bool = False
    mtp: bool = False  # speculative (MTP, EAGLE3), planned with the opt-in for it
    explained: str | None = None  # a difference with a known, stated cause


# How each server's plan states TP, EP and DP-attention (compared as the row, not as flags).
PARALLEL = {
    "vllm": {
        "tp": "--tensor-parallel-size",
        "ep": "--enable-expert-parallel",
        "skip": {"--tensor-parallel-size", "--enable-expert-parallel", "--data-parallel-size"},
    },
    "sglang": {
        "tp": "--tensor-parallel-size",
        "ep": "--ep-size",
        "skip": {"--tensor-parallel-size", "--ep-size", "--dp-size", "--enable-dp-attention"},
    },
}


def _parallel(cfg: Any, ours: Ours, flags: dict[str, str], out: Result) -> None:
    """TP, EP and (SGLang) DP-attention as the config's first usable row runs them."""
    from instinct_serve.plan.reference import usable_row

    row = usable_row(cfg, GPU_COUNT)
    if row is None:
        return
    names = PARALLEL[cfg.framework]
    if ours.tp != row.tp:
        out.differences.append(f"TP {ours.tp}, reference {row.tp}")
    if cfg.framework == "vllm" and (row.ep > 1) != (names["ep"] in flags):
        out.differences.append(f"EP: reference {row.label()}")
    if cfg.framework == "sglang":
        ep = int(flags.get("--ep-size") or 1)
        dp = "--enable-dp-attention" in flags and flags.get("--dp-size") == str(row.tp)
        if ep != row.ep or dp != row.dp_attn:
            out.differences.append(f"EP/DP: EP {ep} DP-attention {dp}, reference {row.label()}")


def compare(cfg: Any, ours: Ours) -> Result:
    from instinct_serve.catalog.reference import BENCHMARK_ONLY

    out = Result(cfg.name, cfg.file, cfg.model, cfg.gpu, matched=False)
    out.speculative = cfg.speculative
    out.mtp = cfg.speculative_method in OPT_IN
    if not ours.ok:
        out.differences.append(f"refused: {ours.error_id}: {ours.error}")
        return out
    out.followed = any(cfg.name in why for why in [ours.tp_reason, *ours.env_reasons.values()])
    flags = flag_map(ours.args)
    _parallel(cfg, ours, flags, out)
    for key, value in cfg.env.items():
        if ours.env.get(key) != value:
            out.differences.append(f"env {key}={ours.env.get(key)!r}, reference {value!r}")
    theirs = flag_map(cfg.args)
    for flag, value in theirs.items():
        if flag in BENCHMARK_ONLY and flag not in flags:
            out.exceptions.append(f"{flag}: {BENCHMARK_ONLY[flag]}")
        elif flag not in flags:
            out.differences.append(f"flag {flag} missing (reference {value!r})")
        elif not same_value(flags[flag], value):
            out.differences.append(f"flag {flag} {flags[flag]!r}, reference {value!r}")
    skip = PARALLEL[cfg.framework]["skip"]
    out.additions = [f for f in flags if f not in theirs and f not in skip]
    out.additions += [f"{k}={v}" for k, v in ours.env.items() if k not in cfg.env]
    out.matched = not out.differences
    return out


def _explain(results: list[Result], configs: dict[tuple[str, str], Any]) -> None:
    """A config name listed in two files with different search spaces: the plan follows
    the first file's first row; the later file's differs only in TP."""
    from instinct_serve.plan.reference import usable_row

    for r in results:
        if r.matched or not all(d.startswith("TP ") for d in r.differences):
            continue
        first = configs.get((r.name, r.gpu))
        row = usable_row(first, GPU_COUNT) if first is not None else None
        if first is not None and first.file != r.file and row is not None:
            r.explained = (
                f"the same config name in {first.file} lists {row.label()} first; "
                "the plan follows that file"
            )


OPT_IN = {"mtp": "speculative_mtp", "eagle3": "speculative_eagle3"}


def opt_ins(cfg: Any) -> dict[str, Any]:
    """A config is planned as a user opts into what it runs: its speculative method with its
    draft tokens (``--speculative-mtp N``, ``--speculative-eagle3 N``), its workload
    (``--workload agentic`` for AMD's agentic-coding scenario)."""
    out: dict[str, Any] = {}
    option = OPT_IN.get(cfg.speculative_method or "")
    if option and cfg.speculative_tokens:
        out[option] = cfg.speculative_tokens
    if cfg.scenario == "agentic-coding":
        out["workload"] = "agentic"
    return out


def run(model_filter: str | None = None, server: str = "vllm") -> list[Result]:
    """Every single-node config of ``server`` (``vllm`` or ``sglang``) planned with
    ``--server`` set to it."""
    from instinct_serve.gather.reference import load_snapshot

    plan = load_planner()
    results = []
    first: dict[tuple[str, str], Any] = {}
    for cfg in load_snapshot().configs:
        if cfg.framework == server:
            first.setdefault((cfg.name, cfg.gpu), cfg)
        single = cfg.sglang_single_node if server == "sglang" else cfg.vllm_single_node
        if not single or not cfg.rows:
            continue
        if model_filter and model_filter.lower() not in cfg.model.lower():
            continue
        ours = plan(cfg.model, cfg.gpu, GPU_COUNT, server=server, **opt_ins(cfg))
        results.append(compare(cfg, ours))
    _explain(results, first)
    return results


def not_planned(server: str) -> list[str]:
    """The configs of ``server`` that span nodes (prefill/decode split): not planned."""
    from instinct_serve.gather.reference import load_snapshot

    return [
        f"{c.name} ({c.gpu}, {c.file}): prefill/decode split across nodes"
        for c in load_snapshot().configs
        if c.framework == f"{server}-disagg" and c.gpu in ("mi300x", "mi325x", "mi355x")
    ]


def print_table(results: list[Result], examples: int, title: str = "vLLM") -> None:
    matched = sum(r.matched for r in results)
    excepted = sum(r.matched and bool(r.exceptions) for r in results)
    plain = [r for r in results if not r.speculative]
    print(f"AMD reference configs ({title}, single node, {GPU_COUNT} GPUs): {len(results)}")
    print(f"  matched TP/EP/DP, env and flags: {matched}/{len(results)}")
    print(f"    of which with a stated exception (benchmark-only flag): {excepted}")
    print(
        f"  without speculative decoding: {sum(r.matched for r in plain)}/{len(plain)} "
        "(the configs a plan follows by default)"
    )
    mtp = [r for r in results if r.mtp]
    print(
        "  speculative, planned with --speculative-mtp/--speculative-eagle3: "
        f"{sum(r.matched for r in mtp)}/{len(mtp)}"
    )
    kinds: Counter[str] = Counter()
    for r in results:
        for d in r.differences:
            kinds[d.split(" ", 2)[0] + " " + d.split(" ", 2)[1]] += 1
    explained = [r for r in results if r.explained]
    print(f"  differing with a stated cause: {len(explained)}")
    for r in results:
        mark = "ok  " if r.matched else ("expl" if r.explained else "DIFF")
        print(f"  {mark} {r.name:<40} {r.gpu}  {r.file}")
        if r.explained:
            print(f"         = {r.explained}")
        for d in r.differences[:examples]:
            print(f"         - {d}")
        if len(r.differences) > examples:
            print(f"         - ... {len(r.differences) - examples} more")
    if kinds:
        print("differences by kind:")
        for kind, n in kinds.most_common():
            print(f"  {n:4d}  {kind}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="only configs whose model contains this text")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--examples", type=int, default=4)
    parser.add_argument("--server", choices=("vllm", "sglang", "both"), default="both")
    args = parser.parse_args(argv)
    wanted = ("vllm", "sglang") if args.server == "both" else (args.server,)
    with tempfile.TemporaryDirectory(prefix="plan-vs-reference-") as tmp:
        configure_offline(Path(tmp))
        by_server = {server: run(args.model, server) for server in wanted}
    if args.json:
        doc: dict[str, Any] = {}
        for server, results in by_server.items():
            doc[server] = {
                "matched": sum(r.matched for r in results),
                "total": len(results),
                "not_planned": not_planned(server),
                "results": [asdict(r) for r in results],
            }
        if args.server == "vllm":  # the shape before SGLang was counted
            doc = {k: v for k, v in doc["vllm"].items() if k != "not_planned"}
        json.dump(doc, sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    for server, results in by_server.items():
        print_table(results, args.examples, "SGLang" if server == "sglang" else "vLLM")
        skipped = not_planned(server)
        if skipped:
            print(f"  not planned (counted apart): {len(skipped)}")
            for line in skipped:
                print(f"    {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
