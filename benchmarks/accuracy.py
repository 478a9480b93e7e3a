"""Accuracy report: the planner against every published measurement it can express.

Runs ``planner.verify.public_records_report.evaluate`` over shared/reference/measured_public.json with the
fitted default factors, prints per source family and metric the count, median and P90 absolute %
error and the worst five cases, then the records it cannot express grouped by reason, then the
same totals for the pure roofline (``BOUND``) to show what the fit buys, and one line of JSON.

    python benchmarks/accuracy.py            # every record (~15 s)
    python benchmarks/accuracy.py --fast     # every 5th record of each family (CI, a few seconds)
    python benchmarks/accuracy.py --json     # the whole report as JSON
"""

from __future__ import annotations

import argparse
import json
import time

from planner.commands.accuracy import render_table
from planner.efficiency import BOUND
from planner.verify.public_records import load_records
from planner.verify.public_records_report import AccuracyReport, evaluate


def summary_line(report: AccuracyReport, bound: AccuracyReport, seconds: float) -> dict:
    return {
        "records": report.total_records,
        "expressed": report.expressed,
        "unexpressed": report.unexpressed_count,
        "median_abs_error_pct": round(report.median_abs_error_pct or 0.0, 1),
        "p90_abs_error_pct": round(report.p90_abs_error_pct or 0.0, 1),
        "bound_median_abs_error_pct": round(bound.median_abs_error_pct or 0.0, 1),
        "bound_p90_abs_error_pct": round(bound.p90_abs_error_pct or 0.0, 1),
        "fast": report.fast,
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="deterministic subset: every 5th record of each source family")
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    records = load_records()
    report = evaluate(records, fast=args.fast)
    bound = evaluate(records, efficiency=BOUND, fast=args.fast)
    elapsed = time.perf_counter() - t0
    if args.json:
        out = report.model_dump(mode="json")
        out["bound_summaries"] = [s.model_dump(mode="json", exclude={"worst"}) for s in bound.summaries]
        out["summary"] = summary_line(report, bound, elapsed)
        print(json.dumps(out, indent=1))
        return 0
    print(render_table(report))
    print("\nPure roofline (BOUND: datasheet peaks, no overheads) on the same records:")
    for s in bound.summaries:
        print(
            f"  {s.family[:34]:34s} {s.metric[:36]:36s} n={s.count:4d}  median |err| {s.median_abs_error_pct:6.1f}%  "
            f"P90 {s.p90_abs_error_pct:6.1f}%  median err {s.median_error_pct:+6.1f}%"
        )
    print(json.dumps(summary_line(report, bound, elapsed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
