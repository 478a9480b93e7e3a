"""Scoring: predict a benchmark run the user made, and say per metric how far off the planner was.

``score(bench, model, hw, sc)`` predicts the run that ``bench`` (``planner.verify.bench_results``)
measured, on the deployment ``sc`` describes:

* a run with a request rate or a concurrency (``vllm bench serve --request-rate R`` /
  ``--max-concurrency C``, GuideLLM ``constant``/``poisson``/``concurrent``/``synchronous``,
  genai-perf ``--concurrency``) is replayed by the serving simulator
  (``planner.serve.replica.simulate_scenario``): same arrival process, same number of requests,
  the run's mean prompt and answer lengths. A run with unlimited rate sends every request at
  t = 0: a closed loop as wide as the run (or as its ``--max-concurrency``). With several replicas
  (``sc.num_gpus`` > tp x pp) the load is split evenly and throughput multiplied back;
* a run with neither is predicted by the static-batch latency model (``estimate_latency``) at
  batch 1 (or the run's concurrency), and labelled so: it has means, no percentiles.

Per metric and statistic (mean, p50, p90, p99; throughput as one value) it reports ``predicted``,
``measured`` and ``error_pct = (predicted - measured) / measured x 100`` (positive: the planner
predicts more seconds, or more tokens/s, than were measured).

Definitions matter more than decimals. The simulator reports what ``vllm bench serve`` reports:
TTFT with queueing; TPOT = (E2E - TTFT) / (output - 1) per request, so the first token is
excluded; ITL = every gap between consecutive tokens, pooled over requests; E2E. Each tool's own
definition travels with its numbers (``BenchResult.definitions``), and the comparison adapts:

* genai-perf's ``inter_token_latency`` is vLLM's TPOT (the loader files it as ``tpot_seconds``); a
  non-streaming genai-perf run has TTFT = E2E (one response), so its TTFT is not compared;
* GuideLLM's ITL mean equals the pooled mean gap, but its percentiles are of per-request averages:
  those are compared with the simulator's TPOT percentiles (also per-request averages);
* GuideLLM's ``time_per_output_token`` includes the first token (E2E / output tokens): compared
  with the simulator's E2E divided by the output length;
* vLLM's ITL counts gaps between streamed chunks; a chunk can carry several tokens (speculative
  decoding, ``stream_interval``), which the simulator does not model.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.efficiency import Efficiency
from planner.errors import ConfigError
from planner.estimate.latency import estimate_latency
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.workload import ConcurrencyArrivals, FixedLength, PoissonArrivals
from planner.serve.workload import Workload as ServeWorkload
from planner.verify.bench_results import E2E, ITL, TPOT, TPOT_INCL_FIRST, TTFT, BenchResult

__all__ = ["MetricScore", "Score", "bench_with_overrides", "score", "serving_workload"]

_SPEC = ConfigDict(frozen=True, extra="forbid")
Statistic = Literal["mean", "p50", "p90", "p99", "value"]
LATENCY_METRICS = (TTFT, TPOT, ITL, E2E, TPOT_INCL_FIRST)
STATISTICS: tuple[Statistic, ...] = ("mean", "p50", "p90", "p99")
THROUGHPUT_METRICS = (
    ("throughput_tokens_per_s", "tokens/s"),
    ("total_throughput_tokens_per_s", "tokens/s"),
    ("requests_per_s", "requests/s"),
)
DEFAULT_REQUESTS = 500
"""Requests simulated when the file does not say how many it sent."""
MAX_REQUESTS = 4000
"""Most requests simulated per replica (enough for stable P99s, under a second of simulation)."""

PREDICTED_DEFINITIONS = {
    "simulator": {
        TTFT: "simulated: arrival to the end of the step that emits the first token, queueing included.",
        TPOT: "simulated: (E2E - TTFT) / (output_tokens - 1) per request with > 1 token: excludes the first token.",
        ITL: "simulated: every gap between consecutive tokens, pooled over requests (one token per step).",
        E2E: "simulated: arrival to the last token.",
        TPOT_INCL_FIRST: "simulated E2E / output tokens (the run's fixed mean output length): includes the TTFT.",
    },
    "static_estimate": {
        TTFT: "static-batch estimate: prefill of the batch's prompts (no queueing).",
        TPOT: "static-batch estimate: one decode step at the mean context.",
        ITL: "static-batch estimate: one decode step (ITL = TPOT when every step emits one token).",
        E2E: "static-batch estimate: TTFT + (output - 1) x TPOT.",
        TPOT_INCL_FIRST: "static-batch estimate: E2E / output tokens.",
    },
}


class MetricScore(BaseModel):
    """One metric at one statistic: predicted, measured, and the error."""

    model_config = _SPEC

    metric: str = Field(
        description="ttft_seconds, tpot_seconds, itl_seconds, e2e_seconds, "
        "tpot_incl_first_token_seconds, throughput_tokens_per_s, total_throughput_tokens_per_s, "
        "requests_per_s."
    )
    statistic: Statistic = Field(description="mean, p50, p90, p99, or 'value' for a throughput.")
    unit: str = Field(description="seconds, tokens/s or requests/s.")
    predicted: float | None = Field(description="The planner's prediction, in unit; None when it has none.")
    measured: float | None = Field(description="What the benchmark measured, in unit; None when the file lacks it.")
    error_pct: float | None = Field(
        description="(predicted - measured) / measured x 100, percent; None when either is unknown."
    )
    predicted_how: str = Field(
        description="Which predicted quantity was compared (and why, when it is not the same name)."
    )


class Score(BaseModel):
    """A benchmark run beside the planner's prediction of it, metric by metric."""

    model_config = _SPEC

    model: str = Field(description="Model the prediction is for.")
    card: str = Field(description="Hardware profile id the prediction is for.")
    engine_version: str | None = Field(
        description="vLLM (or other engine) version of the run, when given; None: unknown."
    )
    bench_format: str = Field(description="Which tool wrote the result: vllm_bench_serve, guidellm, genai_perf.")
    bench_label: str | None = Field(description="The run's label (GuideLLM strategy, vLLM --label); None if none.")
    predicted_by: Literal["simulator", "static_estimate"] = Field(
        description="'simulator' (continuous batching at the run's rate or concurrency) or 'static_estimate' "
        "(the static-batch latency model, no queueing, means only)."
    )
    prediction_label: str = Field(description="What the predicted numbers are, e.g. 'simulated (estimate step times)'.")
    prediction_kind: Literal["bound", "estimate", "calibrated"] = Field(
        description="The step-time or latency model behind the prediction: bound, estimate or calibrated."
    )
    scenario: Scenario = Field(description="The deployment predicted.")
    workload: dict[str, Any] = Field(description="What was predicted: arrivals, requests, lengths (tokens), replicas.")
    metrics: list[MetricScore] = Field(description="Per metric and statistic: predicted, measured, error_pct.")
    median_abs_error_pct: float | None = Field(description="Median |error_pct| over the compared rows, percent.")
    definitions: dict[str, str] = Field(
        description="Per metric: what the tool measured and what the planner predicted."
    )
    overridden: dict[str, Any] = Field(
        description="Run fields replaced by the caller: field -> {'file': ..., 'given': ...}."
    )
    notes: list[str] = Field(description="What to know before trusting the comparison.")


def _pct(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured * 100.0


def bench_with_overrides(bench: BenchResult, **given: Any) -> tuple[BenchResult, dict[str, Any]]:
    """The run with some of its fields replaced (command-line flags win over the file).

    Accepts ``request_rate_per_s``, ``max_concurrency``, ``mean_input_tokens``,
    ``mean_output_tokens``, ``num_prompts`` and ``model``; None values are ignored. A rate
    or a concurrency given here also sets the matching ``arrival_pattern``.
    """
    updates = {k: v for k, v in given.items() if v is not None}
    unknown = set(updates) - {
        "request_rate_per_s",
        "max_concurrency",
        "mean_input_tokens",
        "mean_output_tokens",
        "num_prompts",
        "model",
    }
    if unknown:
        raise TypeError(f"bench_with_overrides got unknown fields {sorted(unknown)}")
    overridden = {k: {"file": getattr(bench, k), "given": v} for k, v in updates.items() if getattr(bench, k) != v}
    if "request_rate_per_s" in updates:
        updates["arrival_pattern"] = "poisson"
    elif "max_concurrency" in updates and bench.request_rate_per_s is None:
        updates["arrival_pattern"] = "closed_loop"
    try:  # model_copy does not validate: a given value meets the same bounds as the file's
        replaced = BenchResult.model_validate({**bench.model_dump(), **updates})
    except ValidationError as err:
        first = err.errors()[0]
        name = ".".join(str(part) for part in first["loc"])
        raise ConfigError(
            f"{name} = {first.get('input')!r} is out of range for a benchmark run ({first['msg'].lower()}).",
            hint=f"Give {name} as a finite number >= 0 (a request rate > 0).",
        ) from None
    return replaced, overridden


def serving_workload(
    bench: BenchResult, sc: Scenario, *, max_requests: int = MAX_REQUESTS
) -> tuple[ServeWorkload | None, dict[str, Any], list[str]]:
    """The simulator workload for one replica that replays ``bench``; None when the run had no rate or concurrency.

    Returns (workload, description, notes).
    """
    notes: list[str] = []
    replicas = sc.replicas
    input_tokens = _mean_length(bench.mean_input_tokens, sc.workload.input_len, "prompt", notes)
    output_tokens = _mean_length(bench.mean_output_tokens, sc.workload.output_len, "output", notes)
    total = bench.num_prompts or bench.completed_requests
    if total is None:
        total = DEFAULT_REQUESTS
        notes.append(f"the file does not say how many requests it sent; {DEFAULT_REQUESTS} simulated")
    per_replica = max(1, math.ceil(total / replicas))
    if per_replica > max_requests:
        notes.append(f"{per_replica:,} requests per replica; the first {max_requests:,} simulated")
        per_replica = max_requests
    arrivals: PoissonArrivals | ConcurrencyArrivals | None = None
    pattern = bench.arrival_pattern
    if bench.request_rate_per_s is not None:
        cap = None if bench.max_concurrency is None else max(1, math.ceil(bench.max_concurrency / replicas))
        arrivals = PoissonArrivals(request_rate_per_s=bench.request_rate_per_s / replicas, max_concurrency=cap)
        if pattern in ("gamma", "constant"):
            notes.append(f"the run's arrivals were {pattern}; simulated as Poisson at the same mean rate")
        if cap is not None:
            notes.append(
                f"the run also capped concurrency at {bench.max_concurrency}: at most {cap} in flight per replica, "
                "the rest sent as requests finish, latencies from the send (as vllm bench serve counts them)"
            )
    elif bench.max_concurrency is not None and pattern in ("closed_loop", "unlimited", None):
        arrivals = ConcurrencyArrivals(concurrency=max(1, math.ceil(bench.max_concurrency / replicas)))
    elif pattern == "unlimited":
        arrivals = ConcurrencyArrivals(concurrency=per_replica)
        notes.append("unlimited rate: every request sent at t = 0 (a closed loop as wide as the run)")
    if arrivals is None:
        return None, {"input_tokens": input_tokens, "output_tokens": output_tokens, "replicas": replicas}, notes
    if replicas > 1:
        notes.append(f"{replicas} replicas: each simulated with 1/{replicas} of the load; throughput x {replicas}")
    notes.append("prompt and answer lengths fixed at the run's means; a spread of lengths widens the real P99s")
    workload = ServeWorkload(
        arrivals=arrivals,
        num_requests=per_replica,
        input_tokens=FixedLength(tokens=input_tokens),
        output_tokens=FixedLength(tokens=output_tokens),
    )
    described = {
        "arrivals": arrivals.model_dump(),
        "num_requests_per_replica": per_replica,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "replicas": replicas,
    }
    return workload, described, notes


def _mean_length(value: float | None, fallback: int, what: str, notes: list[str]) -> int:
    if value is None or value < 1:
        notes.append(f"the file does not give the mean {what} length; the scenario's {fallback} tokens used")
        return fallback
    return max(1, round(value))


def score(
    bench: BenchResult,
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    *,
    efficiency: Efficiency | None = None,
    engine_version: str | None = None,
    overridden: dict[str, Any] | None = None,
    max_requests: int = MAX_REQUESTS,
) -> Score:
    """Predict the run ``bench`` measured on ``sc`` and score every metric the file holds.

    ``efficiency``: None uses the card's calibration if it has one, else the fitted defaults.
    Raises ``ScenarioError`` when the deployment would not start (the memory plan's verdict).
    """
    if engine_version:  # the run's engine version picks the engine profile that times its steps
        sc = sc.model_copy(
            update={"engine_version": engine_version if "@" in engine_version else f"vllm@{engine_version}"}
        )
        Scenario.model_validate(sc.model_dump())  # an unknown version is refused with the known ranges
    workload, described, notes = serving_workload(bench, sc, max_requests=max_requests)
    notes = list(bench.warnings) + notes
    if workload is not None:
        result = simulate_scenario(model, hw, sc, workload, efficiency)
        if result.num_rejected:
            notes.extend(result.rejection_reasons)
        if result.preemptions:
            notes.append(f"the simulated replica preempted {result.preemptions} times (KV cache full)")
        predicted = _from_simulation(result, sc.replicas)
        by, label, kind = "simulator", result.label, result.step_time_kind
    else:
        batch = bench.max_concurrency or 1
        estimate = estimate_latency(
            model,
            hw,
            sc,
            batch_size=batch,
            input_len=described["input_tokens"],
            output_len=described["output_tokens"],
            efficiency=efficiency,
        )
        notes.append(
            f"the run has no request rate or concurrency; predicted as a static batch of {batch} "
            "(no queueing, means only)"
        )
        predicted = _from_estimate(estimate)
        by, label, kind = "static_estimate", f"static-batch latency ({estimate.kind})", estimate.kind
        described = {**described, "batch_size": batch}
    rows = _rows(bench, predicted, by, described["output_tokens"], notes)
    errors = [abs(r.error_pct) for r in rows if r.error_pct is not None]
    return Score(
        model=model.name,
        card=hw.id,
        engine_version=engine_version,
        bench_format=bench.format,
        bench_label=bench.label,
        predicted_by=by,
        prediction_label=label,
        prediction_kind=kind,
        scenario=sc,
        workload=described,
        metrics=rows,
        median_abs_error_pct=statistics.median(errors) if errors else None,
        definitions=_definitions(bench, by, rows),
        overridden=overridden or {},
        notes=notes,
    )


def _from_simulation(result, replicas: int) -> dict[str, Any]:
    """Predicted quantities by name: latency stats objects (mean/p50/p90/p99) and throughputs."""

    def times(value: float | None) -> float | None:
        return None if value is None else value * replicas

    return {
        TTFT: result.ttft_seconds,
        TPOT: result.tpot_seconds,
        ITL: result.itl_seconds,
        E2E: result.e2e_seconds,
        "throughput_tokens_per_s": times(result.throughput_tokens_per_s),
        "total_throughput_tokens_per_s": times(result.total_throughput_tokens_per_s),
        "requests_per_s": times(result.requests_per_s),
    }


def _from_estimate(estimate) -> dict[str, Any]:
    means = {
        TTFT: estimate.ttft_seconds,
        TPOT: estimate.tpot_seconds,
        ITL: estimate.tpot_seconds,
        E2E: estimate.e2e_seconds,
    }
    out: dict[str, Any] = {name: {"mean": value} for name, value in means.items()}
    out["throughput_tokens_per_s"] = estimate.throughput_tokens_per_s
    out["total_throughput_tokens_per_s"] = estimate.requests_per_s * (estimate.input_len + estimate.output_len)
    out["requests_per_s"] = estimate.requests_per_s
    return out


def _stat(stats: Any, statistic: str) -> float | None:
    if stats is None:
        return None
    if isinstance(stats, dict):
        return stats.get(statistic)
    return getattr(stats, statistic, None)


def _non_streaming(bench: BenchResult) -> bool:
    ttft, e2e = bench.metrics.get(TTFT), bench.metrics.get(E2E)
    return bench.format == "genai_perf" and ttft is not None and e2e is not None and ttft.mean == e2e.mean


def _rows(
    bench: BenchResult, predicted: dict[str, Any], by: str, output_tokens: int, notes: list[str]
) -> list[MetricScore]:
    rows: list[MetricScore] = []
    source = "simulated" if by == "simulator" else "static-batch estimate"
    non_streaming = _non_streaming(bench)
    if non_streaming:
        notes.append("non-streaming genai-perf run: its TTFT is the whole request, so TTFT is not compared")
    for metric in LATENCY_METRICS:
        measured = bench.metrics.get(metric)
        if measured is None:
            continue
        for statistic in STATISTICS:
            value = getattr(measured, statistic)
            if value is None:
                continue
            how = f"{source} {metric} {statistic}"
            guess: float | None
            if metric == TTFT and non_streaming:
                guess, how = None, "not compared: a non-streaming run's TTFT is the whole request"
            elif metric == TPOT_INCL_FIRST:
                e2e = _stat(predicted[E2E], statistic)
                guess = None if e2e is None else e2e / output_tokens
                how = f"{source} {E2E} {statistic} / {output_tokens} output tokens (includes the first token)"
            elif metric == ITL and bench.format == "guidellm" and statistic != "mean":
                guess = _stat(predicted[TPOT], statistic)
                how = (
                    f"{source} {TPOT} {statistic}: GuideLLM's ITL percentiles are of per-request averages, "
                    "as TPOT's are"
                )
            else:
                guess = _stat(predicted[metric], statistic)
            if guess is None and by == "static_estimate" and statistic != "mean" and not non_streaming:
                how = "static-batch estimate has no distribution (means only)"
            rows.append(
                MetricScore(
                    metric=metric,
                    statistic=statistic,
                    unit="seconds",
                    predicted=guess,
                    measured=value,
                    error_pct=_pct(guess, value),
                    predicted_how=how,
                )
            )
    for metric, unit in THROUGHPUT_METRICS:
        value = getattr(bench, metric)
        if value is None:
            continue
        guess = predicted.get(metric)
        rows.append(
            MetricScore(
                metric=metric,
                statistic="value",
                unit=unit,
                predicted=guess,
                measured=value,
                error_pct=_pct(guess, value),
                predicted_how=f"{source} {metric}",
            )
        )
    return rows


def _definitions(bench: BenchResult, by: str, rows: list[MetricScore]) -> dict[str, str]:
    out: dict[str, str] = {}
    for metric in dict.fromkeys(r.metric for r in rows):
        measured = bench.definitions.get(metric)
        predicted = PREDICTED_DEFINITIONS[by].get(metric)
        if measured is None and predicted is None:
            continue
        out[metric] = f"measured ({bench.format}): {measured or 'as the tool reports it'} | predicted: " + (
            predicted or f"{'simulated' if by == 'simulator' else 'estimated'} {metric.replace('_', ' ')}"
        )
    return out
