"""Efficiency factors: how far below the datasheet roofline a real engine runs.

A roofline says the least time an operation can take; engines reach a fraction of peak
bandwidth and FLOP/s, pay a launch cost per kernel (eager) or per step (CUDA graphs), and lose
time in all-reduce. These factors turn a bound into an estimate. The defaults are fitted to the
published measurements in ``shared/reference/measured_public.json`` (see
``benchmarks/fit_efficiency.py`` and ``docs/calibration.md``); a card's own micro-benchmarks replace
them (``kind="calibrated"``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: What older files call the fitted factors (``kind: default``); read as ``estimate``.
_LEGACY_KINDS = {"default": "estimate"}


class Efficiency(BaseModel):
    """Achieved fractions of peak and fixed overheads for one card (and engine)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["bound", "estimate", "calibrated"] = Field(
        "estimate",
        description="'bound': no derating (pure roofline); 'estimate': factors fitted to public "
        "measurements; 'calibrated': factors measured on this card by the Validate benchmarks. The "
        "same word as the kind of every prediction made with them ('default' in older files reads as 'estimate').",
    )
    bandwidth_fraction: float = Field(
        0.8, gt=0, le=1, description="Achieved fraction of HBM bandwidth when streaming weights and KV (unitless)."
    )
    gemm_fraction_large: float = Field(
        0.7, gt=0, le=1, description="Achieved fraction of dense peak FLOP/s for GEMMs with M >= gemm_m_knee tokens."
    )
    gemm_fraction_small: float = Field(
        0.35,
        gt=0,
        le=1,
        description=(
            "Achieved fraction of dense peak FLOP/s for GEMMs with M = 1 token (interpolated in log M up to the knee)."
        ),
    )
    gemm_m_knee_tokens: int = Field(
        1024, ge=1, description="Rows (tokens) of a GEMM at which it reaches gemm_fraction_large."
    )
    grouped_gemm_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Fused-MoE grouped GEMMs reach this fraction of the FLOP/s a dense GEMM of the same "
        "rows achieves; they stream the touched experts' weights at bandwidth_fraction (unitless).",
    )
    attention_fraction: float = Field(
        0.6,
        gt=0,
        le=1,
        description="Achieved fraction of peak (FLOP/s and bandwidth) for attention kernels (unitless).",
    )
    kernel_launch_seconds: float = Field(
        4e-6,
        ge=0,
        le=1e-3,
        description="Host (CPU) time to launch one kernel eagerly, in seconds; outside CUDA "
        "graphs a step lasts at least the sum of its launches.",
    )
    graph_launch_seconds: float = Field(
        1e-6,
        ge=0,
        le=1e-3,
        description="Least GPU time of one kernel (launch latency and tail, in or out of a "
        "CUDA graph), in seconds: an op of k kernels takes at least k x this.",
    )
    step_overhead_seconds: float = Field(
        2e-3,
        ge=0,
        le=0.1,
        description="Fixed host (CPU) work per engine step: scheduling, input preparation, "
        "output processing, in seconds. Overlaps the GPU's step under async scheduling (see planner.estimate.step).",
    )
    frontend_seconds_per_request: float = Field(
        0.0,
        ge=0,
        le=1.0,
        description="Time each request spends outside the engine's step loop: the API "
        "server's HTTP handling, tokenization, detokenization and streaming of the first chunk, in seconds; "
        "added to TTFT and end-to-end latency (it does not hold the GPU).",
    )
    attention_seconds_per_seq: float = Field(
        0.0,
        ge=0,
        le=1e-4,
        description="Least time of one sequence's attention in one layer (walking its block "
        "table, the first KV blocks; too few sequences cannot fill the SMs), in seconds.",
    )
    host_seconds_per_seq: float = Field(
        0.0, ge=0, le=1e-3, description="Host (CPU) work per scheduled sequence per engine step, in seconds."
    )
    allreduce_fraction: float = Field(
        0.7, gt=0, le=1, description="Achieved fraction of the interconnect's unidirectional bandwidth in all-reduce."
    )
    nccl_graph_latency_seconds: float = Field(
        0.0,
        ge=0,
        le=5e-4,
        description="Extra fixed time of an NCCL all-reduce replayed inside a CUDA graph, over the link's "
        "small-message latency, in seconds.",
    )
    allreduce_latency_seconds: float = Field(
        8e-6,
        ge=0,
        description="Not used since 2026-12: an all-reduce's latency comes from the engine and the link "
        "(planner.estimate.step.allreduce_seconds). Kept so calibration files written before then still load.",
    )
    source: str = Field(
        "planner defaults", description="Where these factors come from (fit, card and date, or 'none')."
    )

    @field_validator("kind", mode="before")
    @classmethod
    def _legacy_kind(cls, value: object) -> object:
        """Older efficiency files and calibrations say 'default' for the fitted factors."""
        return _LEGACY_KINDS.get(value, value) if isinstance(value, str) else value


BOUND = Efficiency(
    kind="bound",
    bandwidth_fraction=1.0,
    gemm_fraction_large=1.0,
    gemm_fraction_small=1.0,
    attention_fraction=1.0,
    kernel_launch_seconds=0.0,
    graph_launch_seconds=0.0,
    step_overhead_seconds=0.0,
    host_seconds_per_seq=0.0,
    frontend_seconds_per_request=0.0,
    allreduce_fraction=1.0,
    allreduce_latency_seconds=0.0,
    source="pure roofline: datasheet peaks, no overheads",
)
