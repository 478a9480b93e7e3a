"""Default efficiency factors: what an uncalibrated estimate assumes about a real engine.

The numbers are fitted by ``benchmarks/fit_efficiency.py`` to the published measurements in
``shared/reference/measured_public.json`` that depend on them: TensorRT-LLM max-throughput tables
(0.12, 0.17, 1.0, 1.1), TensorRT-LLM static-batch and first-token tables, Vidur per-layer linear-op
and all-reduce timings (1,060 records; four whole models held out). vLLM/SGLang serving sweeps are
scored with the result, not fitted. ``docs/calibration.md`` holds the fit, its residuals per source
and what limits it; ``FITTED.source`` records the date, the counts and the errors. One set of
factors for every model (no per-model special cases); the card enters only through its datasheet
peaks.
"""

from __future__ import annotations

from planner.efficiency import Efficiency
from planner.hardware import HardwareProfile

#: Fitted factors (see the module docstring). Update with benchmarks/fit_efficiency.py --write.
FITTED = Efficiency(
    kind="estimate",
    bandwidth_fraction=0.7562,
    gemm_fraction_large=0.6562,
    gemm_fraction_small=0.0599,
    gemm_m_knee_tokens=2435,
    attention_fraction=0.8833,
    grouped_gemm_fraction=0.7667,
    step_overhead_seconds=0.002363,
    kernel_launch_seconds=6.828e-06,
    graph_launch_seconds=3.924e-07,
    allreduce_fraction=0.4724,
    allreduce_latency_seconds=3.752e-05,
    source=(
        "fit by benchmarks/fit_efficiency.py on 2026-11-29 to shared/reference/measured_public.json: 1060"
        " records in the objective (829 in-sample, 231 held out by model); median |error| in-sample 8.9% "
        "(P90 32.5%), held out 10.1% (P90 70.0%); BOUND on the same records 60.3%"
    ),
)


def default_efficiency(hw: HardwareProfile) -> Efficiency:
    """The fitted defaults; the CPU profile keeps the same shape (it is meant to be calibrated)."""
    return FITTED
