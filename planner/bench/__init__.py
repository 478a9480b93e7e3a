"""Validate: micro-benchmarks on the card (or CPU) beside the planner's predictions, and calibration.

The only planner package that uses torch (and pynvml), and only inside functions: importing
``planner.bench`` imports neither, so the app and the CLI can read reports without them.

    from planner.bench import run_validation
    report = run_validation(spec, None, device="cuda")   # ValidationReport

Modules: ``plan`` (each check's planner ops and prediction), ``benchmarks`` (the torch side of
each benchmark group), ``suite`` (``run_validation``: limits, runner, report), ``layer`` (a decoder
layer in plain torch), ``timing`` (warm-up, device
clocks, median, rotated random inputs), ``safety`` (memory guard, OOM, time limits), ``device``
(detection and profile matching), ``sampler`` (NVML utilization), ``calibrate`` (fitted
efficiency factors, calibrated profile), ``report`` (the report model and its table).
"""

from planner.bench.device import NoGPUError, detect_device
from planner.bench.report import CheckResult, ValidationReport, render_table
from planner.bench.suite import BENCHMARKS, default_sizes, run_validation

__all__ = [
    "BENCHMARKS",
    "CheckResult",
    "NoGPUError",
    "ValidationReport",
    "default_sizes",
    "detect_device",
    "render_table",
    "run_validation",
]
