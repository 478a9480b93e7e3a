"""Diagnose: which ceiling limits a real run, where its time goes, and what to change next.

The four steps of a performance investigation, each a pure function:

1. **Baseline**: record what a run measured (``Baseline``): typed-in numbers, an imported
   benchmark (``baseline_from_bench``) or the Validate page's measurements
   (``baseline_from_validation``).
2. **Classify** (``classify``): compute-bound, memory-bandwidth-bound or overhead/scheduling-bound,
   with the reasoning in numbers. Two kinds of evidence, each a vote with a weight:

   * utilizations: compute (achieved share of peak FLOP/s) high with bandwidth low means the math
     units are the ceiling; bandwidth high with compute low means HBM is; both low means neither
     is, so the GPU waits on the host (scheduling, Python, kernel launches) or on requests;
   * the roofline of the same scenario (``scenario_rooflines``): a pure bound per step, so the
     measured TPOT divided by the decode-step bound says how much of each step the ceiling
     explains. Near 1x: the run sits on that ceiling. At 2.5x or more the ceiling is not the
     limit: "TPOT 38 ms is 2.9x the 13 ms memory-bandwidth bound: bandwidth is not the limit,
     overhead is". TTFT is set against one prompt's prefill bound the same way (TTFT also holds
     queueing, so a large ratio points at scheduling), and a long tail (P99 several times the
     mean) points at queueing too.
3. **Where the time goes** (``where_time_goes``): the roofline's ops ranked by time.
4. **Compare** (``compare``): a changed run against the baseline, one setting at a time: what
   moved, by how much, and whether the change can be attributed to one setting.

``symptom_table`` lists common symptoms, their likely causes and the fixes to try, each with the
Scenario change (a dict of field updates) that tests it; ``what_if`` re-plans a scenario with one
such change so the effect can be read before the engine is restarted.

Utilization is easy to misread: nvidia-smi's "GPU-Util" is the share of time any kernel was
running, not how hard the math units worked (a memory-bound decode shows 100%). Only an SM or
tensor-pipe throughput (DCGM ``PROF_PIPE_TENSOR_ACTIVE``, Nsight Compute "Compute (SM) Throughput")
measures compute utilization; ``Baseline.gpu_utilization_kind`` says which one was typed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.efficiency import BOUND, Efficiency
from planner.engine import DEFAULT_ENGINE, resolve_engine
from planner.errors import PlannerError, ScenarioError
from planner.estimate.latency import estimate_latency
from planner.estimate.memory import plan_memory
from planner.estimate.roofline import Roofline, efficiency_for, roofline
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.verify.bench_results import E2E, ITL, TPOT, TTFT, BenchResult

__all__ = [
    "Baseline",
    "Comparison",
    "Diagnosis",
    "Evidence",
    "MetricChange",
    "OpShare",
    "ScenarioRooflines",
    "Symptom",
    "TimeBreakdown",
    "WhatIf",
    "apply_change",
    "baseline_from_bench",
    "baseline_from_typed",
    "baseline_from_validation",
    "classify",
    "compare",
    "scenario_rooflines",
    "scenario_settings",
    "symptom_table",
    "what_if",
    "where_time_goes",
]

_SPEC = ConfigDict(frozen=True, extra="forbid")
Bound = Literal["compute", "memory_bandwidth", "interconnect", "overhead", "inconclusive"]
Setting = str | int | float | bool | None

HIGH_PCT = 60.0
"""A utilization at or above this is 'high' (near its ceiling, given real kernels' efficiency)."""
LOW_PCT = 30.0
"""A utilization below this is 'low'."""
BUSY_IDLE_PCT = 70.0
"""nvidia-smi GPU-Util below this: the GPU sits idle a meaningful share of the time."""
NEAR_BOUND_RATIO = 1.6
"""Measured / roofline bound up to this: the run sits on that ceiling (real kernels reach 60-90% of peak)."""
FAR_FROM_BOUND_RATIO = 2.5
"""Measured / bound from this on: the ceiling explains under 40% of the time; something else limits."""
TTFT_QUEUE_RATIO = 4.0
"""TTFT / one prompt's prefill bound from this on: the request mostly waited."""
TAIL_RATIO = 3.0
"""P99 / mean from this on is a long tail: some requests queue."""
NOISE_PCT = 3.0
"""Changes smaller than this (percent) are reported as within run-to-run noise."""

_BOUND_WORDS = {
    "compute": "compute-bound",
    "memory_bandwidth": "memory-bandwidth-bound",
    "interconnect": "interconnect-bound (TP all-reduce)",
    "overhead": "overhead/scheduling-bound",
    "inconclusive": "inconclusive",
}
_ROOFLINE_CLASS = {
    "compute": "compute",
    "memory": "memory_bandwidth",
    "interconnect": "interconnect",
    "overhead": "overhead",
}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


# ------------------------------------------------------------------------------- baseline


class Baseline(BaseModel):
    """What one run measured. Every field is optional; unknown is None."""

    model_config = _SPEC

    label: str = Field("baseline", description="Name of the run, e.g. 'baseline' or 'fp8 kv cache'.")
    source: Literal["typed", "bench", "validation"] = Field(
        "typed", description="Where the numbers came from: typed in, an imported benchmark, or the Validate page."
    )
    ttft_seconds: float | None = Field(None, gt=0, description="Mean time to first token, seconds.")
    ttft_p90_seconds: float | None = Field(None, gt=0, description="90th-percentile TTFT, seconds.")
    ttft_p99_seconds: float | None = Field(None, gt=0, description="99th-percentile TTFT, seconds.")
    tpot_seconds: float | None = Field(None, gt=0, description="Mean time per output token after the first, seconds.")
    tpot_p90_seconds: float | None = Field(None, gt=0, description="90th-percentile TPOT, seconds.")
    tpot_p99_seconds: float | None = Field(None, gt=0, description="99th-percentile TPOT, seconds.")
    e2e_seconds: float | None = Field(None, gt=0, description="Mean request latency, seconds.")
    throughput_tokens_per_s: float | None = Field(None, gt=0, description="Output tokens per second of the deployment.")
    requests_per_s: float | None = Field(None, gt=0, description="Completed requests per second.")
    gpu_utilization_pct: float | None = Field(
        None,
        ge=0,
        le=100,
        description="GPU utilization, percent: with gpu_utilization_kind 'sm_throughput' the achieved share of peak "
        "FLOP/s (DCGM tensor-pipe active, Nsight SM throughput); with 'busy_time' nvidia-smi's GPU-Util (share of "
        "time any kernel ran).",
    )
    gpu_utilization_kind: Literal["sm_throughput", "busy_time"] = Field(
        "sm_throughput", description="What gpu_utilization_pct measures: 'sm_throughput' or 'busy_time' (nvidia-smi)."
    )
    memory_bandwidth_utilization_pct: float | None = Field(
        None, ge=0, le=100, description="Achieved share of peak HBM bandwidth, percent (DCGM DRAM active, Nsight)."
    )
    concurrency: int | None = Field(None, ge=1, description="Requests in flight (decode batch), requests.")
    input_len: int | None = Field(None, ge=1, description="Mean prompt length, tokens.")
    output_len: int | None = Field(None, ge=1, description="Mean answer length, tokens.")
    settings: dict[str, Setting] = Field(
        default_factory=dict,
        description="The settings the run used (Scenario field -> value), so compare() can tell what changed.",
    )


def baseline_from_typed(
    *,
    label: str = "baseline",
    ttft_ms: float | None = None,
    ttft_p90_ms: float | None = None,
    ttft_p99_ms: float | None = None,
    tpot_ms: float | None = None,
    tpot_p90_ms: float | None = None,
    tpot_p99_ms: float | None = None,
    throughput_tokens_per_s: float | None = None,
    gpu_utilization_pct: float | None = None,
    gpu_utilization_kind: str = "sm_throughput",
    memory_bandwidth_utilization_pct: float | None = None,
    concurrency: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    settings: dict[str, Setting] | None = None,
) -> Baseline:
    """A baseline from numbers typed as people read them (latencies in milliseconds).

    None is 'not typed'; a latency, throughput or count of 0 also reads as not typed (none can be 0),
    a utilization of 0% is kept.
    """

    def seconds(ms: float | None) -> float | None:
        return ms / 1e3 if ms else None

    def given(value: float | None) -> float | None:
        return value if value else None

    return Baseline(
        label=label,
        source="typed",
        ttft_seconds=seconds(ttft_ms),
        ttft_p90_seconds=seconds(ttft_p90_ms),
        ttft_p99_seconds=seconds(ttft_p99_ms),
        tpot_seconds=seconds(tpot_ms),
        tpot_p90_seconds=seconds(tpot_p90_ms),
        tpot_p99_seconds=seconds(tpot_p99_ms),
        throughput_tokens_per_s=given(throughput_tokens_per_s),
        gpu_utilization_pct=gpu_utilization_pct,
        gpu_utilization_kind=gpu_utilization_kind,
        memory_bandwidth_utilization_pct=memory_bandwidth_utilization_pct,
        concurrency=concurrency or None,
        input_len=input_len or None,
        output_len=output_len or None,
        settings=dict(settings or {}),
    )


def scenario_settings(sc: Scenario) -> dict[str, Setting]:
    """The settings of a scenario as a flat dict, for Baseline.settings and compare(): a nested model's fields
    under dotted keys (``workload.batch_size``, ``speculative.method``, ``lora.adapter.r``; an unset one is its
    key with None), a list as comma-separated text (``workload.image_size``: '896,896')."""
    dumped = sc.model_dump()
    out: dict[str, Setting] = {}
    precision = dumped.pop("precision_overrides")
    _flatten(dumped, "", out)
    out["precision_overrides"] = ",".join(f"{c}={d}" for c, d in sorted(precision.items())) or None
    return out


def _flatten(value: object, key: str, out: dict[str, Setting]) -> None:
    """``value`` into ``out`` under ``key``: a dict's items under ``key.name``, a list or tuple as text (anything
    else not a Setting, too)."""
    if isinstance(value, dict):
        for name, item in value.items():
            _flatten(item, f"{key}.{name}" if key else str(name), out)
    elif isinstance(value, (list, tuple)):
        out[key] = ",".join(str(item) for item in value)
    elif value is None or isinstance(value, (str, int, float, bool)):
        out[key] = value
    else:
        out[key] = str(value)


def baseline_from_bench(
    bench: BenchResult, *, label: str | None = None, settings: dict[str, Setting] | None = None
) -> Baseline:
    """A baseline from an imported benchmark run (TPOT falls back to the ITL mean when the tool has no TPOT)."""

    def stat(metric: str, name: str) -> float | None:
        summary = bench.metrics.get(metric)
        value = None if summary is None else getattr(summary, name)
        return value if value and value > 0 else None

    tpot = stat(TPOT, "mean") or stat(ITL, "mean")
    return Baseline(
        label=label or bench.label or bench.model or "imported run",
        source="bench",
        ttft_seconds=stat(TTFT, "mean"),
        ttft_p90_seconds=stat(TTFT, "p90"),
        ttft_p99_seconds=stat(TTFT, "p99"),
        tpot_seconds=tpot,
        tpot_p90_seconds=stat(TPOT, "p90"),
        tpot_p99_seconds=stat(TPOT, "p99"),
        e2e_seconds=stat(E2E, "mean"),
        throughput_tokens_per_s=bench.throughput_tokens_per_s or None,
        requests_per_s=bench.requests_per_s or None,
        concurrency=bench.max_concurrency,
        input_len=None if not bench.mean_input_tokens else max(1, round(bench.mean_input_tokens)),
        output_len=None if not bench.mean_output_tokens else max(1, round(bench.mean_output_tokens)),
        settings=dict(settings or {}),
    )


def baseline_from_validation(report: Any, *, check_name: str | None = None) -> Baseline:
    """A baseline from the Validate page's report: a measured whole-model decode (and prefill) forward.

    TPOT is the measured decode forward, and the utilizations are its achieved fractions of the
    card's peak FLOP/s and bandwidth; TTFT is the measured prefill forward when there is one.
    ``check_name`` picks the decode check; by default the largest-batch one that ran.
    """
    checks = [
        c
        for c in report.checks
        if c.benchmark == "layer_forward"
        and c.status == "ok"
        and c.measured_seconds
        and c.name.startswith("model forward")
    ]
    decode = [c for c in checks if c.shape.get("stage") == "decode"]
    if check_name is not None:
        decode = [c for c in checks if c.name == check_name]
    if not decode:
        raise PlannerError(
            "the validation report has no measured whole-model decode forward"
            + (f" named {check_name!r}" if check_name else "")
            + ".",
            hint="Run the Validate benchmarks with the layer_forward group (python -m planner validate).",
        )
    best = max(decode, key=lambda c: (int(c.shape.get("batch") or 0), c.name))
    prefill = [c for c in checks if c.shape.get("stage") == "prefill"]
    first = min(prefill, key=lambda c: int(c.shape.get("batch") or 0)) if prefill else None
    scaled = " (scaled model)" if getattr(report.model, "scaled", False) else ""
    pct = lambda x: None if x is None else min(100.0, x * 100.0)  # noqa: E731
    return Baseline(
        label=f"validation: {best.name}{scaled}",
        source="validation",
        tpot_seconds=best.measured_seconds,
        ttft_seconds=first.measured_seconds if first else None,
        gpu_utilization_pct=pct(best.flops_fraction_of_peak),
        memory_bandwidth_utilization_pct=pct(best.bytes_fraction_of_peak),
        concurrency=int(best.shape.get("batch") or 1),
        input_len=int(first.shape["seq_len"]) if first and first.shape.get("seq_len") else None,
        settings={"validation_check": best.name},
    )


# ------------------------------------------------------------------------------- rooflines


class ScenarioRooflines(BaseModel):
    """The roofline of the scenario a run used: pure bounds (for classify) and estimates (for where_time_goes)."""

    model_config = _SPEC

    decode_bound: Roofline = Field(
        description="One decode step at the run's batch and mean context, pure roofline bound."
    )
    prefill_bound: Roofline = Field(description="One prompt's prefill (batch 1), pure roofline bound.")
    decode_estimate: Roofline = Field(
        description="The same decode step with the card's efficiency factors and overheads."
    )
    prefill_estimate: Roofline = Field(description="The same prefill with the card's efficiency factors and overheads.")
    batch: int = Field(description="Decode batch used, requests.")
    input_len: int = Field(description="Prompt length used, tokens.")
    decode_context_tokens: int = Field(description="Decode context: input + output / 2, tokens.")


def scenario_rooflines(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    baseline: Baseline | None = None,
    efficiency: Efficiency | None = None,
) -> ScenarioRooflines:
    """Rooflines of ``sc`` at the baseline's batch and lengths (else the scenario's workload)."""
    wl = sc.workload
    batch = (baseline.concurrency if baseline else None) or wl.batch_size
    n_in = (baseline.input_len if baseline else None) or wl.input_len
    n_out = (baseline.output_len if baseline else None) or wl.output_len
    context = n_in + max(1, n_out // 2)
    eff = efficiency or efficiency_for(hw, sc=sc)
    return ScenarioRooflines(
        decode_bound=roofline(model, hw, sc, "decode", batch, context, BOUND),
        prefill_bound=roofline(model, hw, sc, "prefill", 1, n_in, BOUND),
        decode_estimate=roofline(model, hw, sc, "decode", batch, context, eff),
        prefill_estimate=roofline(model, hw, sc, "prefill", 1, n_in, eff),
        batch=batch,
        input_len=n_in,
        decode_context_tokens=context,
    )


# -------------------------------------------------------------------------------- classify


class Evidence(BaseModel):
    """One observation and the bound it points to."""

    model_config = _SPEC

    name: str = Field(
        description="What was looked at: utilization, tpot_vs_bound, ttft_vs_bound, ttft_tail, tpot_tail, "
        "implied_bandwidth, implied_compute, consistency."
    )
    points_to: Bound | None = Field(description="The bound it supports; None for context only.")
    weight: float = Field(ge=0, description="Strength of the vote (0 for context only); unitless.")
    statement: str = Field(description="The observation in words, with its numbers.")
    ratio: float | None = Field(None, description="Measured / roofline bound where that is the evidence; unitless.")


class Diagnosis(BaseModel):
    """The bottleneck of a baseline, and why."""

    model_config = _SPEC

    label: str = Field(description="The baseline's label.")
    bound: Bound = Field(
        description="compute, memory_bandwidth, interconnect, overhead (incl. scheduling) or inconclusive."
    )
    confidence: Literal["clear", "likely", "weak", "none"] = Field(
        description="'clear': strong evidence, no contender; 'likely'; 'weak': close call; 'none': no evidence."
    )
    summary: str = Field(description="The verdict in one or two sentences with the deciding numbers.")
    evidence: list[Evidence] = Field(description="Every observation, strongest first.")
    scores: dict[str, float] = Field(description="Sum of vote weights per bound; unitless.")
    symptom_ids: list[str] = Field(description="Rows of symptom_table() that fit this diagnosis, most relevant first.")
    roofline_kind: str | None = Field(description="'bound' when rooflines were compared, None without them.")


def _utilization(points_to: Bound | None, weight: float, statement: str) -> Evidence:
    """A piece of utilization evidence: the bound it supports (None: context only), its weight, the sentence."""
    return Evidence(name="utilization", points_to=points_to, weight=weight, statement=statement)


def _utilization_evidence(b: Baseline) -> list[Evidence]:
    c, m = b.gpu_utilization_pct, b.memory_bandwidth_utilization_pct
    out: list[Evidence] = []
    if b.gpu_utilization_kind == "busy_time":
        if c is not None and c < BUSY_IDLE_PCT:
            out.append(
                _utilization(
                    "overhead",
                    1.5,
                    f"nvidia-smi GPU-Util {c:.0f}%: the GPU is idle {100 - c:.0f}% of the time, "
                    "waiting on the host (scheduler, Python, tokenization) or on requests",
                )
            )
        elif c is not None:
            out.append(
                _utilization(
                    None,
                    0.0,
                    f"nvidia-smi GPU-Util {c:.0f}% only says a kernel was running; it cannot tell "
                    "compute from bandwidth (a memory-bound decode also shows ~100%)",
                )
            )
        c = None
    if c is not None and m is not None:
        if c >= HIGH_PCT and m >= HIGH_PCT:
            top: Bound = "compute" if c >= m else "memory_bandwidth"
            out.append(
                _utilization(
                    top,
                    1.0,
                    f"compute {c:.0f}% and bandwidth {m:.0f}% are both high: the work sits near the "
                    f"card's ridge point; {'compute' if top == 'compute' else 'bandwidth'} is slightly ahead",
                )
            )
        elif c >= HIGH_PCT and c >= m + 15:
            out.append(
                _utilization(
                    "compute",
                    2.0,
                    f"compute at {c:.0f}% of peak, bandwidth at {m:.0f}%: the math units are the ceiling",
                )
            )
        elif m >= HIGH_PCT and m >= c + 15:
            out.append(
                _utilization(
                    "memory_bandwidth",
                    2.0,
                    f"bandwidth at {m:.0f}% of peak, compute at {c:.0f}%: streaming weights and KV "
                    "from HBM is the ceiling",
                )
            )
        elif c < LOW_PCT and m < LOW_PCT:
            out.append(
                _utilization(
                    "overhead",
                    2.0,
                    f"compute {c:.0f}% and bandwidth {m:.0f}% are both low: neither ceiling is near, "
                    "so the GPU waits on the host (scheduling, Python, kernel launches) or on requests",
                )
            )
        else:
            top = "compute" if c >= m else "memory_bandwidth"
            out.append(
                _utilization(
                    top if max(c, m) >= 40 else "overhead",
                    0.5,
                    f"compute {c:.0f}%, bandwidth {m:.0f}%: in between, no clear ceiling from utilization alone",
                )
            )
    elif c is not None:
        if c >= HIGH_PCT:
            out.append(_utilization("compute", 1.5, f"compute at {c:.0f}% of peak: the math units are busy"))
        else:
            out.append(
                _utilization(
                    None,
                    0.0,
                    f"compute at {c:.0f}%: low, so bandwidth or overhead limits; the bandwidth "
                    "utilization would tell which",
                )
            )
    elif m is not None:
        if m >= HIGH_PCT:
            out.append(
                _utilization("memory_bandwidth", 1.5, f"bandwidth at {m:.0f}% of peak: HBM traffic is the ceiling")
            )
        else:
            out.append(
                _utilization(
                    None,
                    0.0,
                    f"bandwidth at {m:.0f}%: low, so compute or overhead limits; the compute "
                    "utilization would tell which",
                )
            )
    return out


def _roofline_evidence(b: Baseline, r: ScenarioRooflines | Roofline) -> list[Evidence]:
    out: list[Evidence] = []
    decode = r.decode_bound if isinstance(r, ScenarioRooflines) else (r if r.stage == "decode" else None)
    prefill = r.prefill_bound if isinstance(r, ScenarioRooflines) else (r if r.stage == "prefill" else None)
    if decode is not None and b.tpot_seconds and decode.total_seconds > 0:
        bound = decode.total_seconds
        ratio = b.tpot_seconds / bound
        cls = _ROOFLINE_CLASS[decode.bound]
        ceiling = {
            "compute": "compute",
            "memory_bandwidth": "memory-bandwidth",
            "interconnect": "interconnect",
            "overhead": "launch",
        }[cls]
        where = f"one decode step (batch {decode.batch}, context {decode.seq_len:,} tokens, {decode.gpu})"
        head = f"TPOT {_ms(b.tpot_seconds)} is {ratio:.1f}x the {_ms(bound)} {ceiling} bound of {where}"
        if ratio < 0.9:
            out.append(
                Evidence(
                    name="consistency",
                    points_to=None,
                    weight=0.0,
                    ratio=ratio,
                    statement=head + ": faster than the roofline allows, so the scenario does not match the "
                    "run (batch, TP, dtype or card); check the inputs before trusting the diagnosis",
                )
            )
        elif ratio <= NEAR_BOUND_RATIO:
            out.append(
                Evidence(
                    name="tpot_vs_bound",
                    points_to=cls,
                    weight=2.0,
                    ratio=ratio,
                    statement=head + f": decode runs near the {ceiling} ceiling",
                )
            )
        elif ratio < FAR_FROM_BOUND_RATIO:
            share = 1 / ratio
            out.append(
                Evidence(
                    name="tpot_vs_bound",
                    points_to=cls,
                    weight=1.0,
                    ratio=ratio,
                    statement=head + f": the ceiling explains {share:.0%} of each step",
                )
            )
            out.append(
                Evidence(
                    name="tpot_vs_bound",
                    points_to="overhead",
                    weight=1.0,
                    ratio=ratio,
                    statement=f"the other {1 - share:.0%} of each decode step ({_ms(b.tpot_seconds - bound)}) "
                    "is overhead: kernel launches, scheduling, sampling, Python",
                )
            )
        else:
            out.append(
                Evidence(
                    name="tpot_vs_bound",
                    points_to="overhead",
                    weight=2.5,
                    ratio=ratio,
                    statement=head + f": {ceiling.replace('-', ' ')} is not the limit, overhead is",
                )
            )
        if decode.total_bytes and decode.hbm_bandwidth_bytes_per_s:
            achieved = decode.total_bytes / b.tpot_seconds
            out.append(
                Evidence(
                    name="implied_bandwidth",
                    points_to=None,
                    weight=0.0,
                    statement=f"each decode step reads {decode.total_bytes / 1e9:,.2f} GB per GPU; at TPOT "
                    f"{_ms(b.tpot_seconds)} that is {achieved / 1e12:,.2f} TB/s, "
                    f"{achieved / decode.hbm_bandwidth_bytes_per_s:.0%} "
                    f"of the card's {decode.hbm_bandwidth_bytes_per_s / 1e12:,.2f} TB/s",
                )
            )
    if prefill is not None and b.ttft_seconds and prefill.total_seconds > 0:
        bound = prefill.total_seconds
        ratio = b.ttft_seconds / bound
        cls = _ROOFLINE_CLASS[prefill.bound]
        head = (
            f"TTFT {_ms(b.ttft_seconds)} is {ratio:.1f}x the {_ms(bound)} {cls.replace('_', ' ')} bound of one "
            f"{prefill.seq_len:,}-token prompt's prefill"
        )
        if ratio <= NEAR_BOUND_RATIO and ratio >= 0.9:
            out.append(
                Evidence(
                    name="ttft_vs_bound",
                    points_to=cls,
                    weight=1.0,
                    ratio=ratio,
                    statement=head + ": prefill runs near that ceiling",
                )
            )
        elif ratio >= TTFT_QUEUE_RATIO:
            out.append(
                Evidence(
                    name="ttft_vs_bound",
                    points_to="overhead",
                    weight=1.0,
                    ratio=ratio,
                    statement=head + ": the request mostly waits (queueing behind other prefills, "
                    "scheduling), it is not computing",
                )
            )
        elif ratio >= 0.9:
            out.append(Evidence(name="ttft_vs_bound", points_to=cls, weight=0.3, ratio=ratio, statement=head))
        if prefill.total_flops and prefill.peak_flops_per_s and ratio >= 0.9:
            achieved = prefill.total_flops / b.ttft_seconds
            out.append(
                Evidence(
                    name="implied_compute",
                    points_to=None,
                    weight=0.0,
                    statement=f"one prefill is {prefill.total_flops / 1e12:,.2f} TFLOP per GPU; at TTFT "
                    f"{_ms(b.ttft_seconds)} "
                    f"that is {achieved / 1e12:,.0f} TFLOP/s, {achieved / prefill.peak_flops_per_s:.0%} of the card's "
                    f"{prefill.peak_flops_per_s / 1e12:,.0f} TFLOP/s",
                )
            )
    return out


def _tail_evidence(b: Baseline) -> list[Evidence]:
    out: list[Evidence] = []
    if b.ttft_seconds and b.ttft_p99_seconds and b.ttft_p99_seconds / b.ttft_seconds >= TAIL_RATIO:
        ratio = b.ttft_p99_seconds / b.ttft_seconds
        out.append(
            Evidence(
                name="ttft_tail",
                points_to="overhead",
                weight=1.0,
                ratio=ratio,
                statement=f"TTFT P99 {_ms(b.ttft_p99_seconds)} is {ratio:.1f}x the mean {_ms(b.ttft_seconds)}: "
                "some requests wait in the queue (scheduling and admission, not a hardware ceiling)",
            )
        )
    if b.tpot_seconds and b.tpot_p99_seconds and b.tpot_p99_seconds / b.tpot_seconds >= 2.0:
        ratio = b.tpot_p99_seconds / b.tpot_seconds
        out.append(
            Evidence(
                name="tpot_tail",
                points_to="overhead",
                weight=0.7,
                ratio=ratio,
                statement=f"TPOT P99 {_ms(b.tpot_p99_seconds)} is {ratio:.1f}x the mean: some decode steps "
                "are stretched by prefills sharing them (token budget, chunked prefill)",
            )
        )
    return out


_SYMPTOMS_BY_BOUND = {
    "compute": ["compute_bound_prefill", "prefill_starved"],
    "memory_bandwidth": ["weights_dominate", "kv_cache_full", "more_tp"],
    "interconnect": ["allreduce_bound"],
    "overhead": ["eager_overhead", "prefill_starved", "decode_stalls", "mixed_traffic"],
    "inconclusive": [],
}


def classify(baseline: Baseline, roofline_of_scenario: ScenarioRooflines | Roofline | None = None) -> Diagnosis:
    """Which ceiling limits the run, with the reasoning in numbers (see the module docstring)."""
    evidence = _utilization_evidence(baseline)
    if roofline_of_scenario is not None:
        evidence += _roofline_evidence(baseline, roofline_of_scenario)
    evidence += _tail_evidence(baseline)
    evidence.sort(key=lambda e: -e.weight)
    scores: dict[Bound, float] = {}
    for e in evidence:
        if e.points_to is not None and e.weight > 0:
            scores[e.points_to] = scores.get(e.points_to, 0.0) + e.weight
    if not scores:
        bound: Bound = "inconclusive"
        confidence = "none"
        hint = (
            "type TPOT (and the batch it ran at) to compare with the roofline, or the compute and bandwidth "
            "utilizations"
            if roofline_of_scenario is not None or not evidence
            else ""
        )
        summary = f"{baseline.label}: not enough evidence to classify" + (f"; {hint}" if hint else "") + "."
        if evidence:
            summary += " " + evidence[0].statement[0].upper() + evidence[0].statement[1:] + "."
    else:
        ranked = sorted(scores.items(), key=lambda kv: -kv[1])
        bound = ranked[0][0]
        top = ranked[0][1]
        margin = top - (ranked[1][1] if len(ranked) > 1 else 0.0)
        confidence = "clear" if top >= 2.0 and margin >= 1.5 else ("likely" if margin >= 0.5 else "weak")
        reasons = [e.statement for e in evidence if e.points_to == bound][:2]
        summary = f"{baseline.label} is {_BOUND_WORDS[bound]} ({confidence}): " + "; ".join(reasons) + "."
    ids = list(_SYMPTOMS_BY_BOUND[bound])
    names = {e.name for e in evidence}
    for name, symptom in (
        ("ttft_tail", "mixed_traffic"),
        ("ttft_tail", "prefill_starved"),
        ("tpot_tail", "decode_stalls"),
    ):
        if name in names and symptom not in ids:
            ids.append(symptom)
    return Diagnosis(
        label=baseline.label,
        bound=bound,
        confidence=confidence,
        summary=summary,
        evidence=evidence,
        scores=scores,
        symptom_ids=ids,
        roofline_kind="bound" if roofline_of_scenario is not None else None,
    )


# ------------------------------------------------------------------------ where time goes


class OpShare(BaseModel):
    """One op's share of a step."""

    model_config = _SPEC

    name: str = Field(description="Op name with its layer group.")
    kind: str = Field(description="gemm, attention, elementwise, scan, allreduce, overhead.")
    bound: str = Field(description="Ceiling that binds it.")
    count: int = Field(description="Layers that run it per step.")
    seconds: float = Field(description="Its time x count per step, seconds.")
    share_pct: float = Field(description="Share of the step time, percent.")


class TimeBreakdown(BaseModel):
    """Where one step's time goes, op by op and by kind."""

    model_config = _SPEC

    stage: str = Field(description="prefill or decode.")
    kind: str = Field(description="bound, estimate or calibrated: what the times are.")
    total_seconds: float = Field(description="Step time, seconds.")
    top_ops: list[OpShare] = Field(description="The most expensive ops, largest first.")
    by_kind: dict[str, float] = Field(description="Share of the step per op kind, percent.")
    by_bound: dict[str, float] = Field(description="Share of the step per binding ceiling, percent.")
    summary: str = Field(description="One line: the step time and its largest parts.")


def where_time_goes(r: Roofline, top: int = 8) -> TimeBreakdown:
    """The roofline's ops ranked by time (op time x layer count), with shares by kind and by bound."""
    total = r.total_seconds or 1.0
    ranked = sorted(r.layers, key=lambda op: -op.total_seconds)
    ops = [
        OpShare(
            name=op.name,
            kind=op.kind,
            bound=op.bound,
            count=op.count,
            seconds=op.total_seconds,
            share_pct=op.total_seconds / total * 100.0,
        )
        for op in ranked[:top]
    ]
    by_kind: dict[str, float] = {}
    for op in r.layers:
        by_kind[op.kind] = by_kind.get(op.kind, 0.0) + op.total_seconds / total * 100.0
    by_bound = {k: v / total * 100.0 for k, v in r.seconds_by_bound.items()}
    kinds = sorted(by_kind.items(), key=lambda kv: -kv[1])
    parts = ", ".join(f"{share:.0f}% {kind}" for kind, share in kinds[:3])
    summary = (
        f"{r.stage} step (batch {r.batch}, {r.seq_len:,} tokens) takes {_ms(r.total_seconds)} ({r.kind}): {parts}; "
        f"largest op {ranked[0].name} ({ranked[0].total_seconds / total:.0%}, {ranked[0].bound}-bound)"
        if ranked
        else f"{r.stage} step has no ops"
    )
    return TimeBreakdown(
        stage=r.stage,
        kind=r.kind,
        total_seconds=r.total_seconds,
        top_ops=ops,
        by_kind=dict(kinds),
        by_bound=by_bound,
        summary=summary,
    )


# -------------------------------------------------------------------------------- compare


class MetricChange(BaseModel):
    """One metric before and after a change."""

    model_config = _SPEC

    metric: str = Field(description="Baseline field, e.g. tpot_seconds.")
    unit: str = Field(description="seconds, tokens/s, requests/s or percent.")
    before: float = Field(description="Baseline value, in unit.")
    after: float = Field(description="Changed run's value, in unit.")
    change_pct: float = Field(description="(after - before) / before x 100, percent.")
    verdict: Literal["better", "worse", "within noise", "changed"] = Field(
        description="better/worse for latency (lower is better) and throughput (higher is better); 'changed' for "
        "utilizations, which are neither; 'within noise' under the noise threshold."
    )


class Comparison(BaseModel):
    """A changed run against its baseline."""

    model_config = _SPEC

    baseline: str = Field(description="Label of the baseline.")
    changed: str = Field(description="Label of the changed run.")
    changed_settings: dict[str, dict[str, Setting]] = Field(
        description="Settings that differ: name -> {'before', 'after'}."
    )
    attributable: bool = Field(
        description="True when exactly one setting changed, so the effect can be attributed to it."
    )
    rows: list[MetricChange] = Field(description="Every metric both runs have.")
    summary: str = Field(description="What changed and what moved, in one or two sentences.")
    noise_pct: float = Field(description="Changes below this were called noise, percent.")


_COMPARED: dict[str, tuple[str, int]] = {
    "ttft_seconds": ("seconds", -1),
    "ttft_p90_seconds": ("seconds", -1),
    "ttft_p99_seconds": ("seconds", -1),
    "tpot_seconds": ("seconds", -1),
    "tpot_p90_seconds": ("seconds", -1),
    "tpot_p99_seconds": ("seconds", -1),
    "e2e_seconds": ("seconds", -1),
    "throughput_tokens_per_s": ("tokens/s", 1),
    "requests_per_s": ("requests/s", 1),
    "gpu_utilization_pct": ("percent", 0),
    "memory_bandwidth_utilization_pct": ("percent", 0),
}


def compare(baseline: Baseline, changed: Baseline, *, noise_pct: float = NOISE_PCT) -> Comparison:
    """What moved between two runs and by how much; whether one setting (and only one) changed."""
    keys = dict.fromkeys([*baseline.settings, *changed.settings])
    diff = {
        k: {"before": baseline.settings.get(k), "after": changed.settings.get(k)}
        for k in keys
        if baseline.settings.get(k) != changed.settings.get(k)
    }
    rows: list[MetricChange] = []
    for metric, (unit, better_sign) in _COMPARED.items():
        before, after = getattr(baseline, metric), getattr(changed, metric)
        if before is None or after is None or before == 0:
            continue
        change = (after - before) / before * 100.0
        if abs(change) < noise_pct:
            verdict = "within noise"
        elif better_sign == 0:
            verdict = "changed"
        else:
            verdict = "better" if change * better_sign > 0 else "worse"
        rows.append(
            MetricChange(metric=metric, unit=unit, before=before, after=after, change_pct=change, verdict=verdict)
        )
    if not diff:
        what = "no setting recorded as changed, so any difference is run-to-run noise or an unrecorded change"
    elif len(diff) == 1:
        name, values = next(iter(diff.items()))
        what = f"{name}: {values['before']} -> {values['after']}"
    else:
        what = (
            f"{len(diff)} settings changed ({', '.join(diff)}): the effect cannot be attributed to one; change one "
            "at a time"
        )
    moved = [r for r in rows if r.verdict in ("better", "worse", "changed")]
    moved.sort(key=lambda r: (r.verdict == "changed", -abs(r.change_pct)))  # latency and throughput first
    if moved:
        parts = [
            f"{r.metric.removesuffix('_seconds').removesuffix('_pct').replace('_', ' ')} {_fmt(r.before, r.unit)} -> "
            f"{_fmt(r.after, r.unit)} ({r.change_pct:+.1f}%, {r.verdict})"
            for r in moved[:4]
        ]
        movement = "; ".join(parts)
    elif rows:
        movement = f"nothing moved by more than {noise_pct:g}%"
    else:
        movement = "the two runs share no metric to compare"
    return Comparison(
        baseline=baseline.label,
        changed=changed.label,
        changed_settings=diff,
        attributable=len(diff) == 1,
        rows=rows,
        summary=f"{what}. {movement}.",
        noise_pct=noise_pct,
    )


def _fmt(value: float, unit: str) -> str:
    if unit == "seconds":
        return _ms(value)
    if unit == "percent":
        return f"{value:.0f}%"
    return f"{value:,.1f} {unit}"


# ---------------------------------------------------------------------------- symptom table


class Symptom(BaseModel):
    """A symptom, its likely cause, the fix to try, and the Scenario change that tests it."""

    model_config = _SPEC

    id: str = Field(description="Stable identifier, e.g. 'kv_cache_full'.")
    symptom: str = Field(description="What one sees in the metrics or the log.")
    likely_cause: str = Field(description="Why it happens.")
    fix: str = Field(description="What to try, named as vLLM's flags name it.")
    scenario_change: dict[str, Setting] = Field(
        description="Scenario field updates that test the fix; empty when the scenario already has it."
    )
    change_label: str = Field(description="The change in words, e.g. 'kv_cache_dtype: auto -> fp8'.")
    applies_to: tuple[str, ...] = Field(description="Bounds (classify) this symptom belongs to.")
    how_to_test: str = Field(description="What to measure before and after.")


def _current(sc: Scenario, field: str) -> Setting:
    """The scenario's value of ``field``; chunked prefill left to the engine is its default at the scenario's version
    (without a model, the long-context rule of vLLM V0 is judged on the scenario's own max_model_len)."""
    value = getattr(sc, field)
    if field == "enable_chunked_prefill" and value is None:
        profile, version = resolve_engine(sc.engine_version or DEFAULT_ENGINE)
        return profile.chunked_prefill_at(version, sc.max_model_len or 0, lambda: False)
    return value


def _label(sc: Scenario, change: dict[str, Setting]) -> str:
    if not change:
        return "already set in this scenario"
    return ", ".join(f"{k}: {_current(sc, k)} -> {v}" for k, v in change.items())


def symptom_table(sc: Scenario | None = None) -> list[Symptom]:
    """Common symptoms -> causes -> fixes, each with the change to ``sc``
    (default: a default Scenario) that tests it."""
    sc = sc or Scenario()
    budget = sc.max_num_batched_tokens or 8192

    def changed(**updates: Setting) -> dict[str, Setting]:
        return {k: v for k, v in updates.items() if _current(sc, k) != v}

    rows = [
        (
            "kv_cache_full",
            "Requests queue or get preempted at moderate load; the startup log shows a low "
            "'Maximum concurrency'; KV cache usage near 100%",
            "The KV cache holds too few tokens for the concurrency x context served",
            "FP8 KV cache (--kv-cache-dtype fp8): half the bytes per cached token, about twice the concurrency",
            changed(kv_cache_dtype="fp8"),
            ("memory_bandwidth",),
            "max concurrency and preemptions before/after; check output quality on your evals",
        ),
        (
            "weights_dominate",
            "TPOT high even at batch 1; decode memory-bandwidth-bound; weights fill most of the GPU",
            "Every decode step streams all the weights from HBM",
            "Quantize weights (FP8, or an AWQ/GPTQ INT4 checkpoint): fewer bytes per step, and more room for KV",
            changed(weight_dtype="fp8"),
            ("memory_bandwidth",),
            "TPOT at low batch; quality on your evals",
        ),
        (
            "more_tp",
            "TPOT above the target at low batch although decode is bandwidth-bound; the model barely fits",
            "One GPU's bandwidth has to stream the whole model every step",
            "More tensor parallelism (--tensor-parallel-size): each GPU streams 1/TP of the weights, bandwidth adds up",
            changed(tp=sc.tp * 2, num_gpus=None),
            ("memory_bandwidth",),
            "TPOT and cost per token (more GPUs)",
        ),
        (
            "eager_overhead",
            "TPOT several times the roofline bound at small batch; GPU busy under ~70%; the run used --enforce-eager",
            "Kernel-launch and Python overhead between small kernels dominates short decode steps",
            "CUDA graphs (drop --enforce-eager): one launch replays the whole decode step",
            changed(engine="cuda-graphs"),
            ("overhead",),
            "TPOT at batch 1-32; startup time (graph capture)",
        ),
        (
            "prefill_starved",
            "TTFT high and rising with load while TPOT is fine; long prompts take many engine steps",
            "The per-step token budget is small, so a prompt is prefilled in many chunks and waits behind others",
            f"Larger --max-num-batched-tokens (e.g. {budget * 2:,}): more prompt tokens per step",
            changed(max_num_batched_tokens=budget * 2),
            ("overhead", "compute"),
            "TTFT P50/P99 under load; TPOT P99 (larger prefill chunks stretch decode steps)",
        ),
        (
            "decode_stalls",
            "ITL/TPOT P99 spikes when long prompts arrive",
            "Whole-prompt prefills share steps with decodes and stall them (chunked prefill off, or a large token "
            "budget)",
            "Chunked prefill (--enable-chunked-prefill) with a moderate --max-num-batched-tokens (2048-8192)",
            changed(enable_chunked_prefill=True) or changed(max_num_batched_tokens=2048),
            ("overhead",),
            "TPOT/ITL P99; TTFT (smaller chunks delay prefills a little)",
        ),
        (
            "mixed_traffic",
            "Interactive P99 TTFT/ITL degrade whenever batch or offline jobs run",
            "Offline requests fill the batch: each step carries many sequences and long prefills, so interactive "
            "requests wait and decode slower",
            "Separate online and offline deployments: a latency-tuned replica with a small --max-num-seqs for "
            "interactive traffic, a throughput-tuned one (large batch) for offline jobs",
            changed(max_num_seqs=64),
            ("overhead",),
            "interactive P99 TTFT and TPOT on the latency-tuned replica",
        ),
        (
            "compute_bound_prefill",
            "TTFT close to the prefill's compute bound; compute utilization above ~60%",
            "Prefill is compute-bound: the tensor cores are the ceiling at this precision",
            "FP8 weights and activations (--quantization fp8) on cards with FP8 tensor cores: about twice the "
            "BF16 FLOP/s; or more TP for long prompts",
            changed(weight_dtype="fp8"),
            ("compute",),
            "TTFT at low load; quality on your evals",
        ),
        (
            "allreduce_bound",
            "TPOT barely improves (or worsens) with more TP; cards linked by PCIe",
            "Each layer's all-reduce over a slow link costs more than the compute it saves",
            "Less TP and more replicas (data parallelism), or cards with NVLink",
            changed(tp=max(1, sc.tp // 2)),
            ("interconnect",),
            "TPOT and throughput per GPU",
        ),
    ]
    return [
        Symptom(
            id=i,
            symptom=s,
            likely_cause=c,
            fix=f,
            scenario_change=ch,
            change_label=_label(sc, ch),
            applies_to=a,
            how_to_test=t,
        )
        for i, s, c, f, ch, a, t in rows
    ]


def apply_change(sc: Scenario, change: dict[str, Setting]) -> Scenario:
    """``sc`` with the change applied and validated (ScenarioError for an impossible value)."""
    try:
        return Scenario.model_validate({**sc.model_dump(), **change})
    except ValidationError as err:
        problem = err.errors()[0]
        raise ScenarioError(
            f"the change {change} gives an invalid scenario: {'.'.join(str(p) for p in problem['loc'])} "
            f"{problem['msg']}.",
            hint="Pick another fix from the table.",
        ) from None


class WhatIf(BaseModel):
    """One scenario change re-planned: memory and latency before and after (planner estimates)."""

    model_config = _SPEC

    change: dict[str, Setting] = Field(description="The Scenario field updates applied.")
    change_label: str = Field(description="The change in words.")
    fits_before: bool = Field(description="The memory plan starts before the change.")
    fits_after: bool | None = Field(description="After the change; None when the change is impossible.")
    rows: list[dict[str, Any]] = Field(description="Per figure: name, unit, before, after, change_pct (percent).")
    kind: str = Field(description="What the latency figures are: bound, estimate or calibrated.")
    error: str | None = Field(description="Why the changed scenario cannot be planned, if it cannot.")


def what_if(model: ModelSpec, hw: HardwareProfile, sc: Scenario, change: dict[str, Setting]) -> WhatIf:
    """Re-plan ``sc`` with ``change``: max concurrency, KV tokens, TTFT, TPOT, throughput before and after."""
    before_plan = plan_memory(model, hw, sc, suggest=False)
    before_lat = estimate_latency(model, hw, sc, check_memory=False)
    label = _label(sc, change)
    try:
        after_sc = apply_change(sc, change)
        after_plan = plan_memory(model, hw, after_sc, suggest=False)
        after_lat = estimate_latency(model, hw, after_sc, check_memory=False)
    except PlannerError as err:
        return WhatIf(
            change=change,
            change_label=label,
            fits_before=before_plan.fits,
            fits_after=None,
            rows=[],
            kind=before_lat.kind,
            error=str(err),
        )
    figures = (
        ("max_concurrency", "requests", before_plan.max_concurrency, after_plan.max_concurrency),
        ("kv_cache_tokens", "tokens", before_plan.kv_cache_tokens, after_plan.kv_cache_tokens),
        ("ttft_seconds", "seconds", before_lat.ttft_seconds, after_lat.ttft_seconds),
        ("tpot_seconds", "seconds", before_lat.tpot_seconds, after_lat.tpot_seconds),
        ("throughput_tokens_per_s", "tokens/s", before_lat.throughput_tokens_per_s, after_lat.throughput_tokens_per_s),
    )
    rows = [
        {"name": n, "unit": u, "before": b, "after": a, "change_pct": None if not b else (a - b) / b * 100.0}
        for n, u, b, a in figures
    ]
    return WhatIf(
        change=change,
        change_label=label,
        fits_before=before_plan.fits,
        fits_after=after_plan.fits,
        rows=rows,
        kind=before_lat.kind,
        error=None,
    )
