"""``accuracy``: the planner against the published measurements of shared/reference/measured_public.json.

Per source family and metric: how many records the planner expresses, the median and P90 absolute
% error, the signed median (negative: it predicts low) and the worst cases; then the records it
cannot express, grouped by reason. The work is ``planner.verify.public_records_report.evaluate``.
"""

from __future__ import annotations

import argparse

from planner.commands.common import field_descriptions, heading, render, table
from planner.efficiency import BOUND
from planner.verify.public_records_report import AccuracyReport, evaluate

NAME = "accuracy"
HELP = (
    "Score the planner against the published measurements (TensorRT-LLM tables, vLLM/SGLang sweeps, Vidur ops, "
    "vLLM startup logs): errors per source and metric, and what it cannot express."
)
EXAMPLE = "python -m planner accuracy --fast --format json"

OUTPUT_KEYS = field_descriptions(AccuracyReport)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fast",
        action="store_true",
        help="A deterministic subset (every 5th record of each source family; CI), under 30 s.",
    )
    parser.add_argument(
        "--bound",
        action="store_true",
        help="Score the pure roofline (no efficiency factors) instead of the fitted defaults.",
    )


def run(args: argparse.Namespace) -> AccuracyReport:
    return evaluate(efficiency=BOUND if args.bound else None, fast=args.fast)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _indices(values: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return shown + (f" ... (+{len(values) - limit})" if len(values) > limit else "")


def render_table(result: AccuracyReport) -> str:
    """Summary per family and metric, the worst cases, then the unexpressed records by reason."""
    subset = "fast subset" if result.fast else "every record"
    title = (
        f"{result.expressed} of {result.total_records} records expressed ({subset}); efficiency factors: "
        f"{result.kind} ({result.efficiency_source.split(':')[0]})"
    )
    summary = table(
        ["source family", "metric", "n", "median |err| %", "P90 |err| %", "median err %"],
        (
            [
                s.family,
                s.metric[:40],
                s.count,
                _pct(s.median_abs_error_pct),
                _pct(s.p90_abs_error_pct),
                _pct(s.median_error_pct),
            ]
            for s in result.summaries
        ),
        title=title,
        right=(2, 3, 4, 5),
    )
    overall = heading(
        f"All expressed records: median |error| {_pct(result.median_abs_error_pct)}%, "
        f"P90 {_pct(result.p90_abs_error_pct)}%"
    )
    worst_rows = []
    for s in result.summaries:
        for r in s.worst:
            worst_rows.append(
                [
                    s.family[:30],
                    s.metric[:24],
                    r.index,
                    r.model[:28],
                    r.gpu[:16],
                    f"{r.measured:,.4g}",
                    "-" if r.predicted is None else f"{r.predicted:,.4g}",
                    _pct(r.error_pct),
                ]
            )
    worst = table(
        ["family", "metric", "#", "model", "gpu", "measured", "predicted", "err %"],
        worst_rows,
        title="Worst cases per family and metric (up to 5 each; --format json has each scenario)",
        right=(2, 5, 6, 7),
    )
    groups: dict[tuple[str, str], list[int]] = {}
    for u in result.unexpressed:
        groups.setdefault((u.reason_kind, u.reason), []).append(u.index)
    reasons = table(
        ["category", "reason", "n", "records (#)"],
        (
            [kind, reason[:90], len(idx), _indices(idx)]
            for (kind, reason), idx in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        ),
        title=f"{result.unexpressed_count} records not expressed, by reason",
        right=(2,),
    )
    return render(summary, overall, worst, reasons)
