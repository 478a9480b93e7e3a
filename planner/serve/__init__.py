"""Serving: the traffic a replica is offered (workload) and how it serves it over time (simulate)."""

from planner.serve.simulate import (
    LatencyStats,
    LinearStepCost,
    SchedulerConfig,
    SimulationResult,
    StepCost,
    Timeline,
    run_engine,
    simulate,
)
from planner.serve.workload import (
    ConcurrencyArrivals,
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    NormalLength,
    PoissonArrivals,
    RequestSet,
    TraceArrivals,
    UniformLength,
    Workload,
    generate_requests,
    load_trace,
)

__all__ = [
    "ConcurrencyArrivals",
    "EmpiricalLength",
    "FixedLength",
    "LatencyStats",
    "LinearStepCost",
    "LognormalLength",
    "NormalLength",
    "PoissonArrivals",
    "RequestSet",
    "SchedulerConfig",
    "SimulationResult",
    "StepCost",
    "Timeline",
    "TraceArrivals",
    "UniformLength",
    "Workload",
    "generate_requests",
    "load_trace",
    "run_engine",
    "simulate",
]
