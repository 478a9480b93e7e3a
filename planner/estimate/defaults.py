"""Default efficiency factors: what an uncalibrated estimate assumes about a real engine.

The numbers are fitted by ``benchmarks/fit_efficiency.py`` to the published measurements in
``shared/reference/measured_public.json`` that depend on them: TensorRT-LLM max-throughput tables
(0.12, 0.17, 1.0, 1.1), TensorRT-LLM static-batch and first-token tables, Vidur per-layer linear-op
and all-reduce timings (770 records; four whole models held out). vLLM/SGLang serving sweeps are
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
    kind="default",
    bandwidth_fraction=0.7417,
    gemm_fraction_large=0.6198,
    gemm_fraction_small=0.09948,
    gemm_m_knee_tokens=2266,
    attention_fraction=0.8656,
    step_overhead_seconds=0.002174,
    kernel_launch_seconds=6.828e-06,
    graph_launch_seconds=1.241e-08,
    allreduce_fraction=0.4724,
    allreduce_latency_seconds=3.36e-05,
    source=(
        'fit by benchmarks/fit_efficiency.py on 2026-11-29 to shared/reference/measured_public.json: 770 '
        'records in the objective (571 in-sample, 199 held out by model); median |error| in-sample 9.6% '
        '(P90 35.8%), held out 9.5% (P90 95.5%); BOUND on the same records 59.9%'
    ),
)


def default_efficiency(hw: HardwareProfile) -> Efficiency:
    """The fitted defaults; the CPU profile keeps the same shape (it is meant to be calibrated)."""
    return FITTED
