"""Fit the default efficiency factors to the published measurements, and say how well they fit.

One set of ``Efficiency`` factors for every model and card (no per-model cases): the card enters
only through its datasheet peaks. The records are those of ``shared/reference/measured_public.json``
that ``planner.verify.public_records`` can express and whose prediction depends on the factors:
TensorRT-LLM max-throughput and static-batch tables, first-token latencies, Vidur per-operator
timings and NCCL all-reduce times. Serving sweeps are scored with the result but kept out of the
objective (each evaluation would re-run ~50 simulations); startup-log memory figures do not depend
on the factors at all.

Objective: the mean over source families of each family's mean min(|ln(predicted / measured)|,
ln 2), so a 300-row table and a 30-row one weigh the same. A log error is symmetric in over- and
under-prediction; capping it at 2x (a robust, trimmed loss) keeps the records the planner's model
cannot follow (MoE with small experts, Mistral's window ignored by the engine, noisy small-message
all-reduces) from pulling the factors that fit everything else.
Optimizer: coordinate descent over bounded grids that shrink each round (numpy only).
Hold-out: every record of a few whole models (``HOLDOUT_MODELS``, about 20% of the records) is
left out of the fit and reported as out-of-sample error.

    python benchmarks/fit_efficiency.py            # fit, print the tables
    python benchmarks/fit_efficiency.py --write    # ... and update FITTED in planner/estimate/defaults.py
    python benchmarks/fit_efficiency.py --json     # one JSON object instead of tables
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.efficiency import BOUND, Efficiency
from planner.estimate.defaults import FITTED
from planner.verify.public_records import catalog_model, load_records
from planner.verify.public_records_express import Expressed, express_all
from planner.verify.public_records_predict import MemoryPrediction, ServingPrediction, StepOpsBatch, step_ops

DEFAULTS_FILE = Path(__file__).resolve().parents[1] / "planner" / "estimate" / "defaults.py"

#: Whole models held out of the fit (by catalog repo id): a 7B with a sliding window, a 70B
#: fine-tune, an MoE with small experts and an 8B measured by both TensorRT-LLM and Vidur.
HOLDOUT_MODELS = (
    "mistralai/Mistral-7B-v0.1",
    "meta-llama/Llama-3.3-70B-Instruct",
    "Qwen/Qwen3-30B-A3B",
    "meta-llama/Meta-Llama-3-8B",
)


@dataclass(frozen=True)
class Param:
    """One factor: its bounds and whether its grid is spaced in log (times, token counts)."""

    name: str
    lo: float
    hi: float
    log: bool = False
    integer: bool = False


PARAMS = (
    Param("bandwidth_fraction", 0.3, 1.0),
    Param("gemm_fraction_large", 0.3, 1.0),
    Param("gemm_fraction_small", 0.05, 1.0),
    Param("gemm_m_knee_tokens", 16, 16384, log=True, integer=True),
    Param("attention_fraction", 0.15, 1.0),
    Param("grouped_gemm_fraction", 0.2, 1.0),
    Param("step_overhead_seconds", 1e-5, 0.03, log=True),
    Param("kernel_launch_seconds", 1e-7, 3e-5, log=True),
    Param("graph_launch_seconds", 1e-8, 1e-5, log=True),
    Param("allreduce_fraction", 0.05, 1.0),
)


# ------------------------------------------------------------------------------ scoring


_BATCHES: dict[int, tuple[list[Expressed], StepOpsBatch]] = {}


def _prime(rows: list[Expressed], eff: Efficiency) -> None:
    """Time every static-batch step of ``rows`` at once (numpy) before reading the predictions."""
    key = id(rows)
    if key not in _BATCHES or _BATCHES[key][0] is not rows:
        _BATCHES[key] = (rows, StepOpsBatch(step_ops([e.prediction for e in rows])))
    _BATCHES[key][1].prime(eff)


def log_errors(rows: list[Expressed], eff: Efficiency) -> np.ndarray:
    """ln(predicted / measured) per record (nan where the planner has no number)."""
    _prime(rows, eff)
    out = np.empty(len(rows))
    for i, e in enumerate(rows):
        p = e.predict(eff)
        out[i] = math.log(p / e.record.value) if p > 0 and math.isfinite(p) else math.nan
    return out


#: Log errors beyond this count as this (ln 2: a record more than 2x off weighs as 2x off).
LOG_ERROR_CAP = math.log(2.0)


def objective(rows: list[Expressed], families: np.ndarray, eff: Efficiency) -> float:
    """Mean over families of the mean min(|ln(predicted / measured)|, LOG_ERROR_CAP)."""
    err = np.minimum(np.abs(log_errors(rows, eff)), LOG_ERROR_CAP)
    total = [np.nanmean(err[families == f]) for f in np.unique(families)]
    return float(np.mean(total))


def pct_errors(rows: list[Expressed], eff: Efficiency) -> np.ndarray:
    _prime(rows, eff)
    return np.array([(e.predict(eff) - e.record.value) / e.record.value * 100 for e in rows])


def stats(errors: np.ndarray) -> dict[str, float | int | None]:
    a = np.abs(errors[np.isfinite(errors)])
    if not a.size:
        return {"count": 0, "median_abs_error_pct": None, "p90_abs_error_pct": None, "median_error_pct": None}
    return {
        "count": int(a.size),
        "median_abs_error_pct": round(float(np.median(a)), 1),
        "p90_abs_error_pct": round(float(np.percentile(a, 90)), 1),
        "median_error_pct": round(float(np.median(errors[np.isfinite(errors)])), 1),
    }


# ------------------------------------------------------------------------------ optimizer


def with_value(eff: Efficiency, p: Param, value: float) -> Efficiency:
    value = round(value) if p.integer else float(value)
    update = {p.name: value}
    if p.name == "gemm_fraction_large" and eff.gemm_fraction_small > value:
        update["gemm_fraction_small"] = value
    return eff.model_copy(update=update)


def grid(p: Param, current: float, span: float, points: int = 7) -> list[float]:
    """``points`` values around ``current``: +-span of the range (lin) or x/÷ e^(span*range) (log)."""
    if p.log:
        lo, hi = math.log(p.lo), math.log(p.hi)
        centre = math.log(min(max(current, p.lo), p.hi))
        width = span * (hi - lo)
        vals = np.exp(np.clip(np.linspace(centre - width, centre + width, points), lo, hi))
    else:
        width = span * (p.hi - p.lo)
        vals = np.clip(np.linspace(current - width, current + width, points), p.lo, p.hi)
    out = sorted({round(float(v)) if p.integer else float(v) for v in vals} | {current})
    return out


def fit(
    rows: list[Expressed], families: np.ndarray, start: Efficiency, rounds: int = 5, log=print
) -> tuple[Efficiency, float, int]:
    """Coordinate descent: each round, each factor tries a grid around its value; the grids halve."""
    eff, best = start, objective(rows, families, start)
    evals, span = 1, 0.5
    for r in range(rounds):
        for p in PARAMS:
            cur = getattr(eff, p.name)
            hi_bound = eff.gemm_fraction_large if p.name == "gemm_fraction_small" else p.hi
            for value in grid(p, cur, span):
                if value == cur or value > hi_bound:
                    continue
                cand = with_value(eff, p, value)
                score = objective(rows, families, cand)
                evals += 1
                if score < best - 1e-12:
                    eff, best = cand, score
        log(f"  round {r + 1}: objective {best:.4f} (mean capped |ln ratio|), {evals} evaluations")
        span /= 2
    return eff, best, evals


# ------------------------------------------------------------------------------ reporting


def family_table(groups: dict[str, list[Expressed]], heldout: set[int], effs: dict[str, Efficiency]) -> list[dict]:
    """Per source family: in-sample and held-out errors of the fit, and the same under each ``effs``."""
    table = []
    for family, rows in sorted(groups.items()):
        scored_only = isinstance(rows[0].prediction, ServingPrediction)
        row: dict = {"family": family + (" (scored, not fitted)" if scored_only else "")}
        in_rows = [e for e in rows if e.record.index not in heldout]
        out_rows = [e for e in rows if e.record.index in heldout]
        for label, eff in effs.items():
            if label == "fitted":
                row["fitted_in_sample"] = stats(pct_errors([] if scored_only else in_rows, eff))
                row["fitted_out_of_sample"] = stats(pct_errors(out_rows if not scored_only else rows, eff))
            row[label] = stats(pct_errors(rows, eff))
        table.append(row)
    return table


def by_tp(rows: list[Expressed], eff: Efficiency) -> dict[str, dict]:
    """Signed median error of the throughput rows by TP degree, dense and MoE apart (a scaling check)."""
    groups: dict[str, list[float]] = {}
    for e, err in zip(rows, pct_errors(rows, eff)):
        if "throughput" not in e.record.metric or not isinstance(e.record.tp, int):
            continue
        moe = "moe" if e.repo_id and catalog_is_moe(e.repo_id) else "dense"
        groups.setdefault(f"TP{e.record.tp} {moe}", []).append(err)
    return {k: {"count": len(v), "median_error_pct": round(float(np.median(v)), 1)} for k, v in sorted(groups.items())}


def catalog_is_moe(repo_id: str) -> bool:
    return catalog_model(repo_id).is_moe


def _cell(s: dict) -> str:
    if not s["count"]:
        return f"{'-':>17}"
    return f"{s['count']:4d} {s['median_abs_error_pct']:5.1f} {s['p90_abs_error_pct']:6.1f}"


def print_table(table: list[dict], title: str) -> None:
    print(f"\n{title}")
    print(
        f"{'source family':52s} {'fit: in-sample':>17} {'fit: out of fit':>17} {'fit: all':>17} {'initial':>17} "
        f"{'BOUND':>17}"
    )
    print(f"{'':52s} " + " ".join([f"{'n  med%   P90%':>17}"] * 5))
    for row in table:
        print(
            f"{row['family'][:52]:52s} {_cell(row['fitted_in_sample'])} {_cell(row['fitted_out_of_sample'])} "
            f"{_cell(row['fitted'])} {_cell(row['initial'])} {_cell(row['bound'])}"
        )


def fitted_source(summary: dict) -> str:
    return (
        f"fit by benchmarks/fit_efficiency.py on {summary['date']} to shared/reference/measured_public.json: "
        f"{summary['fit_records']} records in the objective ({summary['in_sample']['count']} in-sample, "
        f"{summary['held_out']['count']} held out by model); median |error| in-sample "
        f"{summary['in_sample']['median_abs_error_pct']}% (P90 {summary['in_sample']['p90_abs_error_pct']}%), held out "
        f"{summary['held_out']['median_abs_error_pct']}% (P90 {summary['held_out']['p90_abs_error_pct']}%); "
        f"BOUND on the same records {summary['bound']['median_abs_error_pct']}%"
    )


def write_defaults(eff: Efficiency, path: Path = DEFAULTS_FILE) -> None:
    """Replace the ``FITTED = Efficiency(...)`` block of defaults.py, keeping the rest of the file."""
    text = path.read_text()
    lines = ["FITTED = Efficiency(", '    kind="estimate",']
    for p in PARAMS:
        value = getattr(eff, p.name)
        lines.append(f"    {p.name}={value if p.integer else float(f'{value:.4g}')!r},")
    pieces = textwrap.wrap(eff.source, 96, drop_whitespace=False)
    lines.append("    source=(")
    lines += [f"        {piece!r}" for piece in pieces]
    lines.append("    ),")
    lines.append(")")
    block = "\n".join(lines)
    new, count = re.subn(r"FITTED = Efficiency\(\n.*?\n\)", block, text, count=1, flags=re.S)
    if count != 1:
        raise SystemExit(f"could not find the FITTED block in {path}")
    path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="update FITTED in planner/estimate/defaults.py")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ap.add_argument("--rounds", type=int, default=5, help="coordinate-descent rounds (default 5)")
    ap.add_argument(
        "--start",
        choices=("current", "initial"),
        default="initial",
        help="start from the current FITTED factors or from the planner's initial guesses",
    )
    args = ap.parse_args(argv)
    say = (lambda *a, **k: None) if args.json else print
    t0 = time.perf_counter()

    records = load_records()
    expressed, unexpressed = express_all(records)
    depends = [e for e in expressed if not isinstance(e.prediction, MemoryPrediction)]
    fit_rows = [e for e in depends if not isinstance(e.prediction, ServingPrediction)]
    heldout = {e.record.index for e in depends if e.repo_id in HOLDOUT_MODELS}
    train = [e for e in fit_rows if e.record.index not in heldout]
    test = [e for e in fit_rows if e.record.index in heldout]
    say(
        f"{len(records)} records: {len(expressed)} expressed ({len(fit_rows)} in the fit objective, "
        f"{len(depends) - len(fit_rows)} serving records scored only), {len(unexpressed)} not expressible; "
        f"{len(train)} in-sample, {len(test)} held out ({', '.join(HOLDOUT_MODELS)})"
    )

    initial = Efficiency(source="planner initial guesses")
    start = FITTED if args.start == "current" else initial
    families = np.array([e.family for e in train])
    fitted, score, evals = fit(train, families, start, rounds=args.rounds, log=say)
    elapsed = time.perf_counter() - t0

    summary = {
        "date": datetime.date.today().isoformat(),
        "fit_records": len(fit_rows),
        "in_sample": stats(pct_errors(train, fitted)),
        "held_out": stats(pct_errors(test, fitted)),
        "all_fit_records": stats(pct_errors(fit_rows, fitted)),
        "bound": stats(pct_errors(fit_rows, BOUND)),
        "initial": stats(pct_errors(fit_rows, initial)),
        "serving_fitted": stats(
            pct_errors([e for e in depends if isinstance(e.prediction, ServingPrediction)], fitted)
        ),
        "objective": round(score, 4),
        "evaluations": evals,
        "seconds": round(elapsed, 1),
    }
    fitted = fitted.model_copy(update={"source": fitted_source(summary)})
    groups: dict[str, list[Expressed]] = {}
    for e in depends:
        groups.setdefault(e.family, []).append(e)
    table = family_table(groups, heldout, {"fitted": fitted, "initial": initial, "bound": BOUND})
    factors = {p.name: getattr(fitted, p.name) for p in PARAMS}
    scaling = {"fitted": by_tp(fit_rows, fitted), "bound": by_tp(fit_rows, BOUND)}

    if args.json:
        print(
            json.dumps(
                {
                    "factors": factors,
                    "summary": summary,
                    "families": table,
                    "by_tp": scaling,
                    "holdout_models": HOLDOUT_MODELS,
                },
                indent=1,
            )
        )
    else:
        print("\nfitted factors:")
        for name, value in factors.items():
            print(f"  {name:28s} {value:.4g}")
        print_table(
            table, "absolute % error per source family (n, median, P90); serving families are scored, not fitted"
        )
        print("\nsigned median error of the throughput rows by TP degree (fitted; BOUND):")
        for key, row in scaling["fitted"].items():
            print(
                f"  {key:10s} n={row['count']:4d}  {row['median_error_pct']:+6.1f}%   "
                f"(BOUND {scaling['bound'][key]['median_error_pct']:+6.1f}%)"
            )
        print(
            f"\nfit records: in-sample median {summary['in_sample']['median_abs_error_pct']}% P90 "
            f"{summary['in_sample']['p90_abs_error_pct']}%; held out median "
            f"{summary['held_out']['median_abs_error_pct']}% "
            f"P90 {summary['held_out']['p90_abs_error_pct']}%; all "
            f"{summary['all_fit_records']['median_abs_error_pct']}% "
            f"(initial guesses {summary['initial']['median_abs_error_pct']}%, BOUND "
            f"{summary['bound']['median_abs_error_pct']}%)"
        )
        print(
            f"serving records with the fitted factors: median {summary['serving_fitted']['median_abs_error_pct']}% "
            f"P90 {summary['serving_fitted']['p90_abs_error_pct']}% over {summary['serving_fitted']['count']}"
        )
        print(f"{evals} evaluations in {elapsed:.0f} s")
    if args.write:
        write_defaults(fitted)
        say(f"wrote FITTED to {DEFAULTS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
