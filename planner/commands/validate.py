"""``validate``: run the micro-benchmarks on this machine's GPU (or CPU) beside the planner's predictions.

A thin shell over ``planner.bench.run_validation``: flags in, ``ValidationReport`` out. torch is
imported only when the command runs, so ``python -m planner --help`` does not need it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from planner.bench.report import ValidationReport
from planner.bench.suite import BENCHMARKS
from planner.commands.common import (
    Number,
    add_model_argument,
    field_descriptions,
    fmt_seconds,
    heading,
    kind_text,
    load_model,
    render,
    table,
)
from planner.hardware import get_profile

#: Longest time limit, seconds: a day. Most CPU threads: 4,096 (more than any machine's cores).
MAX_TIME_LIMIT_S = 86_400.0
MAX_CPU_THREADS = 4096

NAME = "validate"
HELP = (
    "Benchmark the model's shapes on this GPU (or CPU): predicted vs measured per operation, NVML utilization, "
    "and a calibrated hardware profile."
)
EXAMPLE = "python -m planner validate meta-llama/Llama-3.1-8B --device cuda --format json"

OUTPUT_KEYS = field_descriptions(ValidationReport)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    g = parser.add_argument_group("validation")
    g.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="Where to run: cuda (the first NVIDIA GPU), cpu (CPU torch against the 'cpu' profile), or auto "
        "(cuda when one is found). Default: %(default)s.",
    )
    g.add_argument(
        "--gpu",
        metavar="ID",
        default=None,
        help="Hardware profile to predict with. Default: the profile matching the detected card ('cpu' on CPU).",
    )
    g.add_argument("--quick", action="store_true", help="Fewer shapes and repeats (a smoke test).")
    g.add_argument(
        "--time-limit",
        metavar="S",
        type=Number(float, "--time-limit", gt=0, le=MAX_TIME_LIMIT_S),
        default=None,
        help="Whole-suite time limit in seconds (> 0, at most a day); later benchmarks are "
        "skipped. Default: 240 on a GPU, 120 on CPU.",
    )
    g.add_argument(
        "--benchmark-time-limit",
        metavar="S",
        default=None,
        type=Number(float, "--benchmark-time-limit", gt=0, le=MAX_TIME_LIMIT_S),
        help="Time limit of one benchmark group in seconds (> 0, at most a day); its later checks time out. "
        "Default: 90 on a GPU, 40 on CPU.",
    )
    g.add_argument(
        "--memory-fraction",
        metavar="F",
        type=Number(float, "--memory-fraction", gt=0, le=1),
        default=0.5,
        help="Largest fraction of the free memory one allocation step may take (> 0 and <= 1). Default: %(default)s.",
    )
    g.add_argument(
        "--models-scale",
        metavar="F",
        type=Number(float, "--models-scale", gt=0, le=1),
        default=1.0,
        help="Multiply widths and head counts by F (0 < F <= 1) to fit a big model on a small device; the report "
        "labels the shapes as scaled. Default: %(default)s (the real model).",
    )
    g.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "fp32"),
        default=None,
        help="Benchmark dtype. Default: the checkpoint's on a GPU, fp32 on CPU.",
    )
    g.add_argument(
        "--benchmarks",
        metavar="LIST",
        default=None,
        help=f"Comma-separated subset of: {', '.join(BENCHMARKS)}. Default: all.",
    )
    g.add_argument(
        "--cpu-threads",
        metavar="N",
        type=Number(int, "--cpu-threads", ge=1, le=MAX_CPU_THREADS),
        default=None,
        help=f"torch CPU threads for a CPU run, 1 to {MAX_CPU_THREADS:,} (1 gives steadier "
        "times on a shared machine). Default: torch's.",
    )
    g.add_argument("--no-calibrate", action="store_true", help="Do not fit efficiency factors.")
    w = g.add_mutually_exclusive_group()
    w.add_argument(
        "--write",
        action="store_true",
        help="Write the calibrated profile (<card>-calibrated.yaml) when the fit improves its own checks; an earlier "
        "calibration there is kept, dated, under calibration-history/. Default: a dry run that prints what would "
        "be written.",
    )
    w.add_argument("--no-write", action="store_true", help="A dry run: fit the factors, write nothing (the default).")
    g.add_argument(
        "--calibration-dir",
        metavar="DIR",
        default=None,
        help="Folder for <card>-calibrated.yaml. Default: the first folder of $PLANNER_HARDWARE_DIR, else "
        "~/.cache/llm-planner/hardware.",
    )


def _progress(name: str, i: int, n: int) -> None:
    if sys.stderr.isatty():
        print(f"\r[{i}/{n}] {name[:70]:<70}", end="" if i < n else "\n", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> ValidationReport:
    from planner.bench.suite import run_validation

    spec, _ = load_model(args)
    benchmarks = None
    if args.benchmarks:
        benchmarks = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    return run_validation(
        spec,
        get_profile(args.gpu) if args.gpu else None,
        args.device,
        time_limit_s=args.time_limit,
        benchmark_time_limit_s=args.benchmark_time_limit,
        memory_fraction=args.memory_fraction,
        models_scale=args.models_scale,
        dtype=args.dtype,
        quick=args.quick,
        benchmarks=benchmarks,
        calibrate=not args.no_calibrate,
        write_calibration=args.write,
        calibration_dir=args.calibration_dir,
        cpu_threads=args.cpu_threads,
        progress=_progress,
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0f}%"


def render_table(report: ValidationReport) -> str:
    dev, prof, model = report.device, report.profile, report.model
    cal = report.calibration
    after = {e.name: e for e in cal.errors} if cal else {}
    rows: list[Any] = []
    for c in report.checks:
        e = after.get(c.name)
        rows.append(
            (
                c.name,
                fmt_seconds(c.predicted_seconds),
                kind_text(c.predicted_kind),
                fmt_seconds(c.measured_seconds) if c.measured_seconds else "-",
                _pct(c.error_pct),
                _pct(e.error_pct_after) if e else "-",
                "-" if c.flops_fraction_of_peak is None else f"{c.flops_fraction_of_peak:.0%}",
                "-" if c.bytes_fraction_of_peak is None else f"{c.bytes_fraction_of_peak:.0%}",
                c.status if c.status == "ok" else f"{c.status}: {c.reason or ''}",
            )
        )
    title = (
        f"{model.name} on {dev.name} ({dev.kind}), profile {prof.id} ({prof.origin}); bench dtype {model.bench_dtype}"
        + (f"; dims x{model.models_scale:g}, NOT the real model" if model.scaled else "")
    )
    parts: list[Any] = [
        table(
            [
                "check",
                "predicted",
                "kind",
                "measured",
                "error",
                "calibrated",
                "FLOP/s of peak",
                "B/s of peak",
                "status",
            ],
            rows,
            title=title,
            right=(1, 3, 4, 5, 6, 7),
        )
    ]
    s = report.summary
    parts.append(
        heading(
            f"{s.checks} checks ({', '.join(f'{k} {v}' for k, v in s.by_status.items())}), "
            f"median |error| {_pct(s.median_abs_error_pct).lstrip('+')}, {s.wall_seconds:.1f} s"
        )
    )
    util = report.utilization
    if util.status == "ok":
        parts.append(
            table(
                ["benchmark", "samples", "GPU util", "memory util", "reading"],
                [
                    (r.benchmark, r.samples, r.gpu_util_pct, r.memory_util_pct, r.diagnosis or "-")
                    for r in util.readings
                ],
                title="NVML utilization while the benchmarks ran",
                right=(1, 2, 3),
            )
        )
    else:
        parts.append(heading(f"utilization: unavailable ({util.reason})"))
    if cal is not None:
        line = (
            f"calibration {cal.status}: median |error| {_pct(cal.median_abs_error_pct_before).lstrip('+')} before, "
            f"{_pct(cal.median_abs_error_pct_after).lstrip('+')} after"
        )
        if cal.file:
            line += f"; wrote {cal.file}"
        if cal.reason:
            line += f" ({cal.reason})"
        parts.append(heading(line))
        if cal.bounds_hit:
            parts.append(
                table(
                    ["factor", "fitted", "kept", "why the measurement is suspect"],
                    [
                        (h.factor, _factor(h.fitted, h.unit), _factor(h.clipped_to, h.unit), h.reason)
                        for h in cal.bounds_hit
                    ],
                    title="factors clipped to their physical range",
                    right=(1, 2),
                )
            )
        if cal.status == "fitted" and cal.factors_after is not None:
            parts.append(
                table(
                    ["factor", "now", "would be"],
                    _changed_factors(cal),
                    title=f"dry run: the factors --write would save to {cal.target_file}",
                    right=(1, 2),
                )
            )
        if cal.note:
            parts.append(cal.note)
    return render(*parts)


def _factor(value: float, unit: str) -> str:
    """A fitted factor in its unit: a fraction as a percentage, seconds as us/ms."""
    return f"{value:.1%}" if unit == "fraction" else fmt_seconds(value)


def _changed_factors(cal: Any) -> list[tuple[str, str, str]]:
    """(factor, before, after) for every fitted factor (``cal.fitted_from``)."""
    from planner.bench.calibrate import FACTOR_BOUNDS

    return [
        (
            k,
            _factor(getattr(cal.factors_before, k), FACTOR_BOUNDS[k].unit),
            _factor(getattr(cal.factors_after, k), FACTOR_BOUNDS[k].unit),
        )
        for k in FACTOR_BOUNDS
        if k in cal.fitted_from
    ]
