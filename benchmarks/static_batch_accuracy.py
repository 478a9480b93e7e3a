"""Static-batch accuracy: published vLLM ``benchmark_latency.py`` results against the planner.

Runs ``planner.verify.static_batch.evaluate`` over reference/static_batch_latency.json: for each
record the predicted latency (TTFT + (output - 1) x TPOT, with the prefill share and the decode
step split by binding ceiling), then the measurement and the error; then the median |error| per
engine profile and per source thread, the records set aside with their reasons, and one JSON line.

    python benchmarks/static_batch_accuracy.py           # every record (~1 s)
    python benchmarks/static_batch_accuracy.py --json    # the whole report as JSON
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from planner.verify.static_batch import (
    TARGET_ERROR_PCT,
    GroupSummary,
    StaticBatchPrediction,
    StaticBatchReport,
    evaluate,
)


def prediction_row(p: StaticBatchPrediction) -> str:
    """One record: conditions, the predicted parts, predicted, measured, error."""
    split = " ".join(f"{k[:4]} {v * 1e3:5.1f}" for k, v in p.decode_seconds_by_bound.items() if v > 0)
    return (
        f"{p.thread:24} {p.model[:24]:24} {p.gpu:9} TP{p.tp} bs{p.batch:<3} {p.input_len:>4}/{p.output_len:<3} "
        f"{p.engine_version:11} TTFT {p.ttft_seconds:6.3f} s  TPOT {p.tpot_seconds * 1e3:5.1f} ms ({split})  "
        f"pred {p.predicted_seconds:7.3f} s  meas {p.measured_seconds:7.3f} s  {p.error_pct:+6.1f}%"
    )


def summary_rows(title: str, groups: list[GroupSummary]) -> list[str]:
    rows = [f"\n{title}: n, median |err| %, max |err| %, median err %, within {TARGET_ERROR_PCT:g}%"]
    rows += [
        f"  {g.group:26} {g.count:3d} {g.median_abs_error_pct:6.1f} {g.max_abs_error_pct:6.1f} "
        f"{g.median_error_pct:+6.1f} {g.within_target:3d}"
        for g in groups
    ]
    return rows


def summary_line(report: StaticBatchReport, seconds: float) -> dict:
    return {
        "records": report.total_records,
        "predicted": len(report.predictions),
        "unexpressed": len(report.unexpressed),
        "median_abs_error_pct": None if report.median_abs_error_pct is None else round(report.median_abs_error_pct, 1),
        "by_engine_profile": {g.group: round(g.median_abs_error_pct, 1) for g in report.by_engine_profile},
        "within_target": sum(g.within_target for g in report.by_engine_profile),
        "seconds": round(seconds, 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report = evaluate()
    elapsed = time.perf_counter() - t0
    if args.json:
        print(report.model_dump_json(indent=1))
    else:
        print(
            "predicted (estimate_latency; decode step split by ceiling, ms), "
            "then measured (benchmark_latency Avg latency)"
        )
        for p in report.predictions:
            print(prediction_row(p))
        for title, groups in (("per engine profile", report.by_engine_profile), ("per thread", report.by_thread)):
            print("\n".join(summary_rows(title, groups)))
        print(f"\nnot predicted ({len(report.unexpressed)}):")
        for (kind, reason), n in Counter((u.reason_kind, u.reason) for u in report.unexpressed).most_common():
            print(f"  {n:3d}  {kind}: {reason}")
    print(json.dumps(summary_line(report, elapsed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
