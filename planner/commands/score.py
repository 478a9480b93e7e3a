"""``score``: predict a benchmark run you made and say, per metric, how far off the planner is.

Reads a ``vllm bench serve`` / ``benchmark_serving.py`` / GuideLLM / genai-perf result file, predicts
every run in it on the deployment the scenario flags describe (the simulator where the run had a
request rate or concurrency), and prints predicted, measured and error per metric and statistic.
The file says which model, rate, concurrency and lengths were used; flags given here win over it.
The file does not say which card or TP ran it: pass --gpu and --tp (default: the Scenario's).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from planner.commands.common import (
    Number,
    add_efficiency_flag,
    efficiency_from_args,
    fmt_seconds,
    heading,
    load_model,
    render,
    table,
    warn,
)
from planner.commands.reconcile import add_override_flags, optional_model_argument, overrides_from_args, read_text
from planner.errors import ScenarioError
from planner.hardware import get_profile
from planner.scenario import MAX_TOKENS, Scenario
from planner.serve.workload import MAX_REQUESTS
from planner.verify.bench_results import load_bench_results
from planner.verify.history import append, entries_from_score
from planner.verify.mismatch import Mismatch, bench_mismatches
from planner.verify.reconcile import apply_overheads, load_overheads
from planner.verify.scoring import Score, bench_with_overrides, score

NAME = "score"
HELP = (
    "Predict the runs of a benchmark result file (vllm bench serve, GuideLLM, genai-perf) on a scenario and score "
    "each metric: TTFT, TPOT, ITL, E2E at mean/P50/P90/P99 and throughput, predicted vs measured."
)
EXAMPLE = "python -m planner score result.json --gpu l40s --num-gpus 4 --max-model-len 8192 --format json"

OUTPUT_KEYS = {
    "bench_file": "The result file read.",
    "runs": "One score per run in the file (or the one --index picks): " + ", ".join(Score.model_fields) + ".",
    "median_abs_error_pct": "Median |error_pct| over every compared row of every run, percent.",
    "mismatches": "Ways a run is not about the given MODEL (kind, run, plan, message); empty when they agree.",
    "recorded_to": "History file the scored rows were appended to (--record); null otherwise.",
    "calibration_used": "The adopted memory-overhead calibration applied (reconcile --adopt) for the card, "
    "--engine-version and TP; null when none.",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "bench",
        metavar="BENCH.json",
        help="Benchmark result file (JSON, or JSON lines with one run per line); '-' reads stdin.",
    )
    optional_model_argument(parser, "the result file")
    add_override_flags(parser, "the Scenario's (the result file does not say)")
    w = parser.add_argument_group("the run (default: what the file says)")
    w.add_argument(
        "--request-rate",
        dest="bench_rate",
        metavar="R",
        type=Number(float, "--request-rate", gt=0),
        default=None,
        help="Request rate of the run, requests/s (Poisson; finite, > 0).",
    )
    w.add_argument(
        "--max-concurrency",
        dest="bench_concurrency",
        metavar="N",
        default=None,
        type=Number(int, "--max-concurrency", ge=1, le=MAX_REQUESTS),
        help=f"Requests in flight of the run (closed loop), 1 to {MAX_REQUESTS:,}.",
    )
    w.add_argument(
        "--input-len",
        dest="bench_input_len",
        metavar="N",
        default=None,
        type=Number(float, "--input-len", gt=0, le=MAX_TOKENS),
        help=f"Mean prompt length of the run, tokens (at most {MAX_TOKENS:,}).",
    )
    w.add_argument(
        "--output-len",
        dest="bench_output_len",
        metavar="N",
        default=None,
        type=Number(float, "--output-len", gt=0, le=MAX_TOKENS),
        help=f"Mean output length of the run, tokens (at most {MAX_TOKENS:,}).",
    )
    w.add_argument(
        "--num-prompts",
        dest="bench_num_prompts",
        metavar="N",
        default=None,
        type=Number(int, "--num-prompts", ge=1, le=MAX_REQUESTS),
        help=f"Requests the run sent, 1 to {MAX_REQUESTS:,} (the most one simulation takes).",
    )
    w.add_argument(
        "--index",
        metavar="N",
        type=Number(int, "--index", ge=-MAX_REQUESTS, le=MAX_REQUESTS),
        default=None,
        help="Score only run N of a file holding several (0-based; -1 is the last). Default: every run.",
    )
    w.add_argument(
        "--record",
        action="store_true",
        help="Append the scored rows to the accuracy history ($PLANNER_HISTORY_PATH, else "
        "~/.cache/llm-planner/accuracy_history.jsonl).",
    )
    add_efficiency_flag(parser)


def _scenario(args: argparse.Namespace) -> Scenario:
    overrides = overrides_from_args(args)
    if "gpu" not in overrides:
        warn(f"the result file does not say which card ran it; planned on {Scenario().gpu} (pass --gpu)")
    return Scenario(**overrides)


def run(args: argparse.Namespace) -> dict[str, Any]:
    runs = load_bench_results(read_text(args.bench) if args.bench == "-" else args.bench)
    if args.index is not None:
        if not -len(runs) <= args.index < len(runs):
            raise ScenarioError(
                f"--index {args.index} is out of range: the file holds {len(runs)} runs.",
                hint=f"Use 0 to {len(runs) - 1}, or leave --index out to score every run.",
            )
        runs = (runs[args.index],)
    sc = _scenario(args)
    hw = get_profile(sc.gpu)
    # The shared --engine-version (vllm@V or V): filed in the history; the overheads adopted for this card
    # and version (reconcile --adopt) are applied.
    vllm_version = args.engine_version.split("@")[-1] if args.engine_version else None
    calibration = load_overheads(hw.id, vllm_version, tp=sc.tp) if vllm_version else None
    sc = apply_overheads(sc, calibration)
    efficiency = efficiency_from_args(args, hw)
    specs: dict[str, Any] = {}
    scores: list[Score] = []
    mismatches: list[Mismatch] = []
    for bench in runs:
        name = args.model or bench.model
        if not name:
            raise ScenarioError(
                "the result file does not name the model.",
                hint="Pass MODEL: a catalog name, a Hub repo id or a path to its config.json.",
            )
        if args.model:  # flagged before the score: a file for another model makes every error meaningless
            for m in bench_mismatches(bench, args.model):
                warn(f"not the same {m.kind}: {m.message}")
                mismatches.append(m)
        if name not in specs:
            args.model, given = name, args.model
            specs[name] = load_model(args)[0]
            args.model = given
        bench, overridden = bench_with_overrides(
            bench,
            request_rate_per_s=args.bench_rate,
            max_concurrency=args.bench_concurrency,
            mean_input_tokens=args.bench_input_len,
            mean_output_tokens=args.bench_output_len,
            num_prompts=args.bench_num_prompts,
        )
        scores.append(
            score(bench, specs[name], hw, sc, efficiency=efficiency, engine_version=vllm_version, overridden=overridden)
        )
    errors = [abs(m.error_pct) for s in scores for m in s.metrics if m.error_pct is not None]
    median = statistics.median(errors) if errors else None
    recorded = None
    if args.record:
        recorded = str(append([e for s in scores for e in entries_from_score(s)]))
    used = (
        None
        if calibration is None
        else (
            f"memory overheads adopted for {calibration.card} / vLLM {calibration.engine_version} / tp {calibration.tp}"
        )
    )
    return {
        "bench_file": args.bench,
        "runs": scores,
        "median_abs_error_pct": median,
        "mismatches": [m.model_dump() for m in mismatches],
        "recorded_to": recorded,
        "calibration_used": used,
    }


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return fmt_seconds(value) if unit == "seconds" else f"{value:,.1f} {unit}"


def render_table(r: dict[str, Any]) -> str:
    parts: list[Any] = []
    for i, s in enumerate(r["runs"]):
        s = s if isinstance(s, Score) else Score.model_validate(s)
        title = (
            f"run {i}{' (' + s.bench_label + ')' if s.bench_label else ''}: {s.model} on {s.card} "
            f"(tp {s.scenario.tp}), {s.bench_format}; predicted: {s.prediction_label}"
        )
        rows = [
            (
                m.metric,
                m.statistic,
                _value(m.predicted, m.unit),
                _value(m.measured, m.unit),
                "-" if m.error_pct is None else f"{m.error_pct:+.1f}%",
            )
            for m in s.metrics
        ]
        parts += [
            heading(title),
            f"workload: {s.workload}",
            table(["metric", "stat", "predicted", "measured", "error"], rows, right=(2, 3, 4)),
        ]
        if s.median_abs_error_pct is not None:
            parts.append(f"median |error| {s.median_abs_error_pct:.1f}%")
        parts += [f"  note: {n}" for n in s.notes]
        parts.append("")
    parts.append(heading("definitions"))
    seen: dict[str, str] = {}
    for s in r["runs"]:
        s = s if isinstance(s, Score) else Score.model_validate(s)
        seen.update(s.definitions)
    parts += [f"  {k}: {v}" for k, v in seen.items()]
    if r.get("median_abs_error_pct") is not None:
        parts.append(heading(f"all runs: median |error| {r['median_abs_error_pct']:.1f}%"))
    if r.get("calibration_used"):
        parts.append(r["calibration_used"])
    if r.get("recorded_to"):
        parts.append(f"recorded to {r['recorded_to']}")
    return render(*parts)
