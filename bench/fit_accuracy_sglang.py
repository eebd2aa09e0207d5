#!/usr/bin/env python3
"""How close ``instinct fit --server sglang`` comes to what SGLang logged at start-up.

The cases are real SGLang start-up logs (``tests/fixtures/sglang/fit_cases.json``, each with
its page). Each is sized as ``fit`` sizes it: the model's shapes (a config fixture), the GPU by
its memory, the TP and the static fraction the launch used, on the path ``fit --server sglang``
takes: ``fit.estimate`` gives the weights per rank and the KV layers, SGLang's memory model
(``fit.sglang_answer``, the ``memory_model`` of ``servers.sglang``) its pool. No constant is
set per case. Printed per case and as median / p90 / max of the absolute error, by split
(``held_out`` derives nothing; ``calibration`` sets ``CONTEXT_BYTES``) and platform (the CPU
start-up counts apart):

- ``weights``: loaded weights per rank vs "Load weight end ... mem usage";
- ``kv_tokens``: ``max_total_num_tokens`` from the GPU's total (fit's path, no log figure in);
- ``kv_tokens_logged_pre``: the same pool from the log's own "Load weight begin" figure
  (SGLang's formula alone, with fit's weights);
- ``kv_k_gib``: the K half of the pool at the logged token count (the cell size alone).

Run: ``.venv/bin/python bench/fit_accuracy_sglang.py [--json]``. Exit 1 when a held-out
figure is outside the corpus tolerance (``tolerance_pct``).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

from fit_accuracy import model_meta, pct  # noqa: E402

from instinct_serve.fit.estimate import FitOptions, HardwareSpec, estimate  # noqa: E402
from instinct_serve.fit.served import ServerLaunch  # noqa: E402
from instinct_serve.fit.sglang import SglangLaunch, default_fraction, from_report  # noqa: E402
from instinct_serve.fit.sglang_answer import SglangFit, sglang_answer  # noqa: E402

GIB = 2**30
CASES = REPO / "tests" / "fixtures" / "sglang" / "fit_cases.json"
METRICS = ("weights", "kv_tokens", "kv_tokens_logged_pre", "kv_k_gib")


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(CASES.read_text())
    return doc


def size_case(case: dict[str, Any]) -> dict[str, float]:
    """The case's figures as ``fit --server sglang`` gives them (and the formula check)."""
    meta = model_meta(case["model"], case["id"])
    dev, tp = case["device"], int(case["tp"])
    hw = HardwareSpec(
        int(dev["total_gib"] * GIB), tp, None, dev["name"], "manual", case["platform"]
    )
    report = estimate(meta, hw, FitOptions(tp=tp))
    args = ["--mem-fraction-static", str(case["mem_fraction_static"])]
    if case.get("max_total_tokens"):
        args += ["--max-total-tokens", str(case["max_total_tokens"])]
    answer = sglang_answer(report, ServerLaunch(tuple(args)))
    assert isinstance(answer, SglangFit)
    fit = answer.memory
    launch = SglangLaunch(
        mem_fraction_static=case["mem_fraction_static"],
        max_total_tokens=case.get("max_total_tokens"),
    )
    out = {
        "weights": fit.weights_bytes / GIB,
        "kv_tokens": float(fit.max_total_num_tokens),
        "cell_bytes": float(fit.cell_bytes),
    }
    logged = case["logged"]
    if "pre_load_gib" in logged and case["platform"] != "cpu":
        pre = int(logged["pre_load_gib"] * GIB)
        out["kv_tokens_logged_pre"] = float(
            from_report(report, launch, pre_load_bytes=pre).max_total_num_tokens
        )
    if "kv_k_gib" in logged:
        out["kv_k_gib"] = fit.cell_bytes / 2 * logged["kv_tokens"] / GIB
    return out


def errors(case: dict[str, Any], sized: dict[str, float]) -> dict[str, float]:
    logged = case["logged"]
    ref = {
        "weights": logged.get("weights_gib"),
        "kv_tokens": logged.get("kv_tokens"),
        "kv_tokens_logged_pre": logged.get("kv_tokens"),
        "kv_k_gib": logged.get("kv_k_gib"),
    }
    if case.get("max_total_tokens"):  # the pool is given: the token count checks nothing
        ref["kv_tokens"] = ref["kv_tokens_logged_pre"] = None
    return {m: pct(sized[m], float(ref[m])) for m in METRICS if ref[m] is not None and m in sized}


def summarize(values: list[float]) -> dict[str, float]:
    vals = sorted(abs(v) for v in values)
    p90 = vals[min(len(vals) - 1, max(0, round(0.9 * len(vals) + 0.5) - 1))]
    return {"n": len(vals), "median": statistics.median(vals), "p90": p90, "max": vals[-1]}


def run() -> dict[str, Any]:
    doc = load()
    rows = []
    for case in doc["cases"]:
        sized = size_case(case)
        rows.append(
            {
                "id": case["id"],
                "split": case["split"],
                "platform": case["platform"],
                "sized": {k: round(v, 3) for k, v in sized.items()},
                "logged": case["logged"],
                "error_pct": {k: round(v, 2) for k, v in errors(case, sized).items()},
            }
        )
    groups: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        for key in (f"{row['split']} {row['platform']}", row["split"], "all"):
            for metric, err in row["error_pct"].items():
                groups.setdefault(key, {}).setdefault(metric, []).append(err)
    summary = {key: {m: summarize(v) for m, v in by.items()} for key, by in sorted(groups.items())}
    return {
        "cases": rows,
        "summary": summary,
        "fraction_checks": fraction_checks(doc),
        "tolerance_pct": doc["tolerance_pct"],
    }


def fraction_checks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """SGLang 0.5.23's default fraction, chunk and decode max_bs against a logged
    server_args line (cases with ``default_fraction``)."""
    out = []
    for case in doc["cases"]:
        spec = case.get("default_fraction")
        if not spec:
            continue
        fraction, reserved, chunk, max_bs = default_fraction(
            spec["device_mib"],
            int(case["tp"]),
            SglangLaunch(),
            mla=False,
            platform=case["platform"],
        )
        got = {
            "mem_fraction_static": fraction,
            "chunked_prefill_size": chunk,
            "cuda_graph_max_bs": max_bs,
        }
        out.append(
            {"id": case["id"], "reserved_mib": reserved, "model": got, "logged": spec["logged"]}
        )
    return out


def outside(result: dict[str, Any]) -> list[str]:
    """Held-out GPU figures outside the corpus tolerance (the CPU start-up counts apart:
    its "mem usage" is host memory), and any default-fraction mismatch."""
    tol = result["tolerance_pct"]
    bad = [
        f"{c['id']} default fraction {c['model']} != logged {c['logged']}"
        for c in result["fraction_checks"]
        if c["model"] != c["logged"]
    ]
    for row in result["cases"]:
        if row["platform"] == "cpu":
            continue
        for metric, err in row["error_pct"].items():
            limit = tol.get("kv_tokens" if metric.startswith("kv_tokens") else metric)
            if row["split"] == "held_out" and limit is not None and abs(err) > limit:
                bad.append(f"{row['id']} {metric} {err:+.1f} %")
    return bad


def main(argv: list[str]) -> int:
    result = run()
    if "--json" in argv:
        print(json.dumps(result, indent=1))
        return 1 if outside(result) else 0
    print(f"{'case':38} {'split':11} {'plat':5} " + " ".join(f"{m:>21}" for m in METRICS))
    for row in result["cases"]:
        cells = [
            f"{row['error_pct'][m]:+20.2f}%" if m in row["error_pct"] else f"{'-':>21}"
            for m in METRICS
        ]
        print(f"{row['id']:38} {row['split']:11} {row['platform']:5} " + " ".join(cells))
    print()
    print(f"{'group':22} {'metric':22} {'n':>3} {'median %':>9} {'p90 %':>8} {'max %':>8}")
    for key, by in result["summary"].items():
        for metric, s in by.items():
            print(
                f"{key:22} {metric:22} {s['n']:3d} {s['median']:9.2f} {s['p90']:8.2f} "
                f"{s['max']:8.2f}"
            )
    for check in result["fraction_checks"]:
        print(f"default fraction ({check['id']}): model {check['model']}, logged {check['logged']}")
    bad = outside(result)
    print("held-out within tolerance: " + ("yes" if not bad else "no (" + "; ".join(bad) + ")"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
