"""SLO planning: the cheapest deployment whose simulated latencies meet the targets at a request rate.

The question: "how many GPUs, of which card and split, serve 20 requests/s with P99 TTFT under 1 s
and P99 TPOT under 50 ms, and what does it cost?". For every candidate deployment (card x TP x PP
x weight dtype x KV dtype x max_num_seqs):

1. **Memory.** ``plan_memory`` must say vLLM starts (max_model_len covers the workload's longest
   request unless the base scenario fixes it). Otherwise the row says why, with no simulation.
2. **Floor.** A request alone costs the step model's prefill of its prompt (TTFT), one decode step
   (TPOT), or both (E2E). A target below its floor fails at every rate: said with the numbers.
3. **Saturation.** The replica's knee ``r_sat`` (requests/s, ``planner.serve.saturation``: its
   throughput kept at full batch, min(max_num_seqs, what the KV cache holds) requests in flight) is
   reported on every row. No rate above ``UTILIZATION_CAP x r_sat`` is planned: near saturation
   the queue's length depends on how long the run is, not on the load.
4. **Bisection.** Poisson traffic at rate r, ``requests_per_probe`` measured requests after a
   warm-up of ``r x W`` requests (W: a request's time in the system at saturation, so the batch
   has filled) and before as many cool-down requests (so the measured ones never see the queue
   drain). A probe passes when every target holds over the measured requests. The search halves
   [0, cap x r_sat] until the bracket is within ``rate_tolerance``; the result is the largest
   rate that passed and the smallest that failed above it. The same seed at every rate: arrival
   gaps are one set of standard exponentials scaled by 1 / r, so probes differ only by the load.
5. **Replicas and cost.** replicas = ceil(target rate / max rate per replica); GPUs = replicas x
   tp x pp; $/hour = GPUs x the card's price where the profile has one. At the operating point
   (target / replicas per replica) one more run splits GPU time between prefill and decode:
   each step's time goes to its prefill chunk and its decodes in proportion to what each would
   take alone. That gives GPU-hours per 1M input and per 1M output tokens, hence $ and energy per
   1M tokens; energy uses the board power limit (TDP) for the whole time, an **upper bound** on
   the GPUs' energy (host, network and cooling not included).

The cheapest candidate that meets the targets wins: by $/hour whenever a feasible candidate has a
price (the profile's cited on-demand figure, or the user's ``prices``), a candidate without one
ranked after the priced ones and named in the notes; by GPU count only when none has a price. By
default a candidate whose lower bound (replicas at saturation) already costs more than the best found is not bisected
(``exhaustive=False``); its row says so.
Every probe is also a point of tokens/s per GPU vs tokens/s per user (1 / mean TPOT); the
non-dominated ones form the Pareto front.

Every number is simulated with the planner's own step-time model: ``step_time_kind`` says
whether that model is an estimate (fitted factors), calibrated (measured on the card) or a bound.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.efficiency import Efficiency
from planner.errors import HardwareProfileError, PlannerError, ScenarioError
from planner.estimate.cost import (
    gpu_hours_per_million_tokens,
    kwh_per_million_tokens_upper_bound,
    usd_per_million_tokens,
)
from planner.estimate.latency import StepTimeModel
from planner.estimate.memory import plan_memory
from planner.estimate.roofline import PredictionKind
from planner.hardware import HardwareProfile, get_profile, priced, resolve_prices
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.serve.replica import scheduler_config
from planner.serve.saturation import SATURATION_WAVES, measure_saturation, saturated_run  # noqa: F401 (re-exported)
from planner.serve.simulate import LatencyStats, SchedulerConfig, latency_stats, run_engine
from planner.serve.workload import (
    ConcurrencyArrivals,
    PoissonArrivals,
    RequestSet,
    TraceArrivals,
    Workload,
    generate_requests,
)
from planner.units import fmt_seconds

_SPEC = ConfigDict(frozen=True, extra="forbid")

UTILIZATION_CAP = 0.95
"""Highest planned load as a fraction of the saturation throughput (see the module docstring)."""
MIN_RATE_FRACTION = 1 / 16
"""The bisection gives up below this fraction of the saturation throughput: 'fails at any load'."""
MIN_REQUESTS_PER_PROBE = 200
"""Fewest measured requests in one probe; light-load probes use fewer than ``requests_per_probe``
(down to this) because each costs many more steps per request and its requests barely interact."""

Metric = Literal["ttft", "tpot", "e2e"]
Statistic = Literal["mean", "p50", "p90", "p99"]


@dataclass(frozen=True)
class MetricDef:
    """What the SLO search knows of one latency metric: its label, and its value for a request that
    runs alone (the floor no load can beat) from that request's prefill and one decode step."""

    label: str
    alone: Callable[[float, float, int], float]  # (prefill seconds, decode-step seconds, output tokens) -> s
    why: str  # the floor in words: str.format with n_in, n_out and value


#: The metric registry: a new latency metric is one row here and one field of ``Probe``.
METRICS: dict[str, MetricDef] = {
    "ttft": MetricDef("TTFT", lambda pre, dec, n_out: pre, "prefill of {n_in:,} tokens alone takes {value}"),
    "tpot": MetricDef("TPOT", lambda pre, dec, n_out: dec, "one decode step of a request alone takes {value}"),
    "e2e": MetricDef(
        "E2E",
        lambda pre, dec, n_out: pre + (n_out - 1) * dec,
        "a request of {n_in:,} + {n_out:,} tokens alone takes {value}",
    ),
}
assert set(METRICS) == set(get_args(Metric)), "METRICS and Metric must name the same metrics"
_METRIC_LABEL = {name: m.label for name, m in METRICS.items()}
_PERCENTILE = {"mean": None, "p50": 50.0, "p90": 90.0, "p99": 99.0}

# ------------------------------------------------------------------------------------------------
# What the user asks for.
# ------------------------------------------------------------------------------------------------


class SLOTarget(BaseModel):
    """One latency target: a statistic of one metric must not exceed ``seconds``."""

    model_config = _SPEC
    metric: Metric = Field(
        description="ttft (arrival to first token, queueing included), tpot ((E2E - TTFT) / (output - 1) "
        "per request) or e2e (arrival to last token), as vllm bench serve defines them."
    )
    statistic: Statistic = Field("p99", description="Which statistic over the requests: mean, p50, p90 or p99.")
    seconds: float = Field(gt=0, allow_inf_nan=False, description="Largest allowed value, in seconds.")

    @property
    def label(self) -> str:
        """'P99 TTFT'."""
        return f"{self.statistic.upper() if self.statistic != 'mean' else 'Mean'} {_METRIC_LABEL[self.metric]}"

    def value(self, stats: dict[str, LatencyStats | None]) -> float | None:
        s = stats.get(self.metric)
        return None if s is None else float(getattr(s, self.statistic))


class SLO(BaseModel):
    """Latency targets (any subset of TTFT, TPOT, E2E at mean/P50/P90/P99); all must hold."""

    model_config = _SPEC
    targets: tuple[SLOTarget, ...] = Field(min_length=1, description="The targets; every one must hold.")

    @model_validator(mode="after")
    def _distinct(self) -> SLO:
        keys = [(t.metric, t.statistic) for t in self.targets]
        if len(set(keys)) != len(keys):
            raise ScenarioError(
                f"SLO names a target twice: {', '.join(t.label for t in self.targets)}.",
                hint="Give each statistic of each metric once.",
            )
        return self

    @classmethod
    def of(cls, **seconds: float | None) -> SLO:
        """``SLO.of(p99_ttft=1.0, p99_tpot=0.05)``; keys are ``<statistic>_<metric>``, None is skipped."""
        targets = []
        for key, value in seconds.items():
            if value is None:
                continue
            statistic, _, metric = key.partition("_")
            if statistic not in _PERCENTILE or metric not in _METRIC_LABEL:
                raise ScenarioError(
                    f"unknown SLO key {key!r}.",
                    hint="Use <statistic>_<metric> with statistic mean/p50/p90/p99 and metric ttft/tpot/e2e, "
                    "e.g. p99_ttft=1.0.",
                )
            targets.append(SLOTarget(metric=metric, statistic=statistic, seconds=value))
        if not targets:
            raise ScenarioError("no SLO target given.", hint="Set at least one, e.g. --p99-ttft 1.0.")
        return cls(targets=tuple(targets))

    def describe(self) -> str:
        """'P99 TTFT <= 1.00 s, P99 TPOT <= 50.00 ms'."""
        return ", ".join(f"{t.label} <= {fmt_seconds(t.seconds)}" for t in self.targets)


class CandidateSpace(BaseModel):
    """The deployments to try: every combination of the options below, on top of ``base``."""

    model_config = _SPEC
    gpus: tuple[str, ...] = Field(("h100-sxm",), min_length=1, description="Hardware profile ids to try.")
    tp: tuple[int, ...] = Field((1, 2, 4, 8), min_length=1, description="Tensor-parallel sizes to try (GPUs).")
    pp: tuple[int, ...] = Field((1,), min_length=1, description="Pipeline-parallel sizes to try (GPUs).")
    weight_dtypes: tuple[str, ...] = Field(
        ("auto",), min_length=1, description="Weight precisions to try: auto (the checkpoint's), bf16, fp8, int4, ..."
    )
    kv_cache_dtypes: tuple[str, ...] = Field(
        ("auto",), min_length=1, description="KV-cache dtypes to try: auto, fp8, ..."
    )
    max_num_seqs: tuple[int | None, ...] = Field(
        (None,), min_length=1, description="max_num_seqs values to try (requests per step); None: vLLM's default."
    )
    base: Scenario = Field(
        default_factory=Scenario,
        description="Everything else (gpu_memory_utilization, max_model_len, engine, ...). Its gpu, tp, pp, "
        "weight_dtype, kv_cache_dtype and max_num_seqs are replaced by each candidate's.",
    )

    def scenarios(self) -> list[Scenario]:
        out = []
        for gpu in self.gpus:
            for tp in self.tp:
                for pp in self.pp:
                    for wd in self.weight_dtypes:
                        for kv in self.kv_cache_dtypes:
                            for mns in self.max_num_seqs:
                                out.append(
                                    self.base.model_copy(
                                        update=dict(
                                            gpu=gpu,
                                            tp=tp,
                                            pp=pp,
                                            num_gpus=None,
                                            weight_dtype=wd,
                                            kv_cache_dtype=kv,
                                            max_num_seqs=mns,
                                        )
                                    )
                                )
        return out


class SearchSettings(BaseModel):
    """How hard the search works; the defaults answer a typical question in seconds."""

    model_config = _SPEC
    requests_per_probe: int = Field(
        600,
        ge=50,
        description="Requests measured per probe at moderate and high load (a count); light-load "
        f"probes measure fewer, down to {MIN_REQUESTS_PER_PROBE}.",
    )
    rate_tolerance: float = Field(
        0.03,
        gt=0,
        lt=1,
        description="Bisection stops when (failing - passing rate) / failing rate is below this (unitless).",
    )
    max_probes: int = Field(12, ge=2, description="Most bisection probes per candidate, a count.")
    exhaustive: bool = Field(
        False,
        description="Bisect every feasible candidate, even one whose lower bound already costs more than the best.",
    )


# ------------------------------------------------------------------------------------------------
# What the search answers.
# ------------------------------------------------------------------------------------------------


class Probe(BaseModel):
    """One simulated rate on one replica: the measured requests' latencies and the verdict."""

    model_config = _SPEC
    request_rate_per_s: float = Field(description="Offered Poisson rate to the replica, in requests per second.")
    measured_requests: int = Field(description="Requests the statistics are over (after warm-up, before cool-down).")
    ttft_seconds: LatencyStats | None = Field(description="Time to first token of the measured requests, in seconds.")
    tpot_seconds: LatencyStats | None = Field(description="Time per output token of the measured requests, in seconds.")
    e2e_seconds: LatencyStats | None = Field(description="End-to-end latency of the measured requests, in seconds.")
    output_tokens_per_s_per_gpu: float = Field(
        description="Rate x mean output tokens / GPUs of the replica, in output tokens per second per GPU."
    )
    output_tokens_per_s_per_user: float | None = Field(
        description="1 / mean TPOT of the measured requests, in output tokens per second per request."
    )
    passed: bool | None = Field(description="Every SLO target held; None when the probe was run without an SLO.")
    worst_target: str | None = Field(
        None, description="The target furthest over (or closest to) its limit, e.g. 'P99 TTFT'."
    )
    worst_ratio: float | None = Field(None, description="That target's value / limit (unitless; > 1 fails).")
    preemptions: int = Field(description="Preemptions in the whole run, a count.")

    def stats(self) -> dict[str, LatencyStats | None]:
        return {"ttft": self.ttft_seconds, "tpot": self.tpot_seconds, "e2e": self.e2e_seconds}


Status = Literal["meets", "fails-slo", "does-not-fit", "invalid", "not-cheaper"]


class CandidateResult(BaseModel):
    """One candidate deployment: whether it meets the SLO, at what rate per replica, and its cost."""

    model_config = _SPEC
    label: str = Field(description="Short name of one replica, e.g. 'h100-sxm TP2 w fp8 kv auto'.")
    scenario: Scenario = Field(description="The scenario of one replica (exportable).")
    gpu: str = Field(description="Hardware profile id.")
    tp: int = Field(description="Tensor-parallel size.")
    pp: int = Field(description="Pipeline-parallel size.")
    weight_dtype: str = Field(description="Weight precision asked for.")
    kv_cache_dtype: str = Field(description="KV-cache dtype asked for.")
    max_num_seqs: int | None = Field(description="Requests per step after vLLM's defaults; None if the plan failed.")
    status: Status = Field(
        description="meets: meets the SLO at some rate; fails-slo: at no rate probed; does-not-fit: vLLM would not "
        "start; invalid: impossible combination; not-cheaper: not bisected, its lower bound costs more than the best."
    )
    reason: str = Field(description="Why, in one line with the numbers.")
    gpus_per_replica: int = Field(description="tp x pp, a count.")
    saturation_requests_per_s: float | None = Field(
        None,
        description="Sustainable rate of one replica (the knee): its throughput kept at full batch, in "
        "requests per second; above it the queue grows without bound (planner.serve.saturation).",
    )
    overloaded: bool | None = Field(
        None,
        description="One replica at the operating point (target / replicas) is above the knee; None when the "
        "candidate was not costed.",
    )
    max_rate_per_replica_per_s: float | None = Field(
        None, description="Largest probed rate that met every target, in requests per second per replica."
    )
    first_failing_rate_per_s: float | None = Field(
        None, description="Smallest probed rate above it that failed (or the cap), in requests per second."
    )
    limiting_target: str | None = Field(
        None, description="Target that failed at first_failing_rate_per_s ('P99 TTFT'), or 'saturation' at the cap."
    )
    replicas: int | None = Field(None, description="Replicas for the target rate: ceil(target / max rate per replica).")
    total_gpus: int | None = Field(None, description="replicas x tp x pp (or its lower bound for not-cheaper rows).")
    usd_per_hour: float | None = Field(
        None,
        description="total_gpus x the card's price (the user's, else the profile's), in US dollars per hour; "
        "None when the card has no price.",
    )
    operating_point: Probe | None = Field(
        None, description="Simulated latencies of one replica at target / replicas requests per second."
    )
    gpu_hours_per_1m_input_tokens: float | None = Field(
        None, description="GPU-hours spent on prefill per million prompt tokens at the operating point."
    )
    gpu_hours_per_1m_output_tokens: float | None = Field(
        None, description="GPU-hours spent on decode per million generated tokens at the operating point."
    )
    usd_per_1m_input_tokens: float | None = Field(None, description="Cost per million prompt tokens, US dollars.")
    usd_per_1m_output_tokens: float | None = Field(None, description="Cost per million generated tokens, US dollars.")
    energy_kwh_per_1m_input_tokens_upper_bound: float | None = Field(
        None, description="Energy per million prompt tokens at TDP for the whole time, kWh; an upper bound."
    )
    energy_kwh_per_1m_output_tokens_upper_bound: float | None = Field(
        None, description="Energy per million generated tokens at TDP for the whole time, kWh; an upper bound."
    )
    probes: tuple[Probe, ...] = Field((), description="Every rate simulated for this candidate, in the order probed.")
    step_time_kind: PredictionKind | None = Field(None, description="estimate, calibrated or bound step times.")


class ParetoPoint(BaseModel):
    """A probe on the throughput/interactivity trade-off that no other probe beats on both axes."""

    model_config = _SPEC
    candidate: str = Field(description="Label of the candidate deployment.")
    request_rate_per_s: float = Field(description="Rate per replica of that probe, in requests per second.")
    output_tokens_per_s_per_gpu: float = Field(description="Output tokens per second per GPU.")
    output_tokens_per_s_per_user: float = Field(description="Output tokens per second per request (1 / mean TPOT).")
    meets_slo: bool = Field(description="The probe met every SLO target.")


class SLOPlan(BaseModel):
    """The answer: the cheapest deployment that meets the SLO, every candidate, and the Pareto front."""

    model_config = _SPEC
    kind: Literal["simulated"] = Field("simulated", description="What these numbers are.")
    step_time_kind: PredictionKind | None = Field(
        description="Kind of the step times of the recommendation (estimate, calibrated, bound); None without one."
    )
    model_name: str = Field(description="Model planned.")
    target_rate_per_s: float = Field(description="Total request rate to serve, in requests per second.")
    slo: SLO = Field(description="The targets.")
    mean_input_tokens: float = Field(description="Mean prompt length of the workload, in tokens.")
    mean_output_tokens: float = Field(description="Mean output length of the workload, in tokens.")
    recommendation: CandidateResult | None = Field(
        description="Cheapest candidate that meets the SLO; None if none does."
    )
    saturation_requests_per_s: float | None = Field(
        description="Sustainable rate (knee) of one replica of the recommendation, in requests per second; None "
        "without a recommendation."
    )
    overloaded: bool | None = Field(
        description="The recommendation's replicas at the target rate are above their knee (never, for a "
        "recommendation: its rate is capped below it); None without a recommendation."
    )
    ranked_by: Literal["usd_per_hour", "gpus"] = Field(
        description="usd_per_hour when a feasible candidate has a price (unpriced ones after the priced, named in "
        "notes), else gpus (total GPU count)."
    )
    candidates: tuple[CandidateResult, ...] = Field(description="Every candidate, best first, then the rest by status.")
    pareto: tuple[ParetoPoint, ...] = Field(description="Non-dominated probes, by increasing tokens/s per GPU.")
    notes: tuple[str, ...] = Field(description="Assumptions a reader needs (max_model_len chosen, pruning, pricing).")
    search_seconds: float = Field(description="Wall time of the search, in seconds.")


# ------------------------------------------------------------------------------------------------
# One candidate.
# ------------------------------------------------------------------------------------------------


class _Traffic:
    """The workload drawn once at rate 1 req/s; a probe at rate r divides the arrival times by r.

    numpy's ``exponential(1 / r)`` is ``standard_exponential() / r`` from the same stream, so this
    is the request set ``generate_requests`` would draw at rate r, for every r at once.
    """

    def __init__(self, workload: Workload, count: int):
        arrivals = workload.arrivals
        if isinstance(arrivals, ConcurrencyArrivals):
            raise ScenarioError(
                "an SLO search needs an open-loop workload (a request rate), not a fixed concurrency.",
                hint="Give a Poisson rate (--qps) or a trace.",
            )
        self.trace = isinstance(arrivals, TraceArrivals)
        if self.trace:
            drawn = generate_requests(workload)
            span = float(drawn.arrival_time_s[-1] - drawn.arrival_time_s[0])
            if len(drawn) < 2 or span <= 0:
                raise ScenarioError(
                    f"the trace {arrivals.path} has {len(drawn)} request(s) over {span:g} s; a rate needs two or more "
                    "arrivals at different times.",
                    hint="Use a longer trace, or a Poisson rate.",
                )
            self.rate = (len(drawn) - 1) / span
            unit = (drawn.arrival_time_s - drawn.arrival_time_s[0]) * self.rate
        else:
            one = workload.model_copy(
                update={"arrivals": PoissonArrivals(request_rate_per_s=1.0), "num_requests": count}
            )
            drawn = generate_requests(one)
            self.rate = arrivals.request_rate_per_s
            unit = drawn.arrival_time_s
        self.unit_arrivals = unit
        self.inputs = drawn.input_tokens
        self.outputs = drawn.output_tokens
        self.hit_rate = workload.prefix_cache_hit_rate

    def __len__(self) -> int:
        return len(self.inputs)

    def at(self, rate: float, count: int) -> RequestSet:
        return RequestSet(
            self.unit_arrivals[:count] / rate, self.inputs[:count], self.outputs[:count], None, self.hit_rate
        )


class _Recording:
    """A StepCost that remembers each step's mix and duration (for splitting GPU time by phase)."""

    MAX_SPLIT_STEPS = 4000
    """The split is estimated on at most this many evenly spaced steps (it is a ratio of sums)."""

    def __init__(self, step: StepTimeModel):
        self.step = step
        self.mixes: list[tuple[int, float, int, int, float]] = []

    def step_seconds(self, *, prefill_tokens, prefill_attention_pairs, decode_seqs, decode_kv_tokens) -> float:
        dt = self.step.step_seconds(
            prefill_tokens=prefill_tokens,
            prefill_attention_pairs=prefill_attention_pairs,
            decode_seqs=decode_seqs,
            decode_kv_tokens=decode_kv_tokens,
        )
        self.mixes.append((prefill_tokens, prefill_attention_pairs, decode_seqs, decode_kv_tokens, dt))
        return dt

    def prefill_share(self) -> float:
        """Fraction of busy time spent on prefill: each step split by what each phase would take alone."""
        step = self.step.step_seconds
        stride = max(1, len(self.mixes) // self.MAX_SPLIT_STEPS)
        prefill = decode = 0.0
        for p, pairs, d, kv, dt in self.mixes[::stride]:
            if not d:
                prefill += dt
            elif not p:
                decode += dt
            else:
                a = step(prefill_tokens=p, prefill_attention_pairs=pairs, decode_seqs=0, decode_kv_tokens=0)
                b = step(prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=d, decode_kv_tokens=kv)
                prefill += dt * a / (a + b)
                decode += dt * b / (a + b)
        return prefill / (prefill + decode) if prefill + decode > 0 else 0.0


def prefill_seconds(step: StepTimeModel, tokens: int, budget_tokens: int) -> float:
    """Seconds to prefill ``tokens`` alone in chunks of ``budget_tokens``, one step each."""
    total, start = 0.0, 0
    while start < tokens:
        c = min(budget_tokens, tokens - start)
        total += step.step_seconds(
            prefill_tokens=c, prefill_attention_pairs=c * (start + (c + 1) / 2), decode_seqs=0, decode_kv_tokens=0
        )
        start += c
    return total


def _statistic(values: np.ndarray, statistic: Statistic) -> float:
    q = _PERCENTILE[statistic]
    return float(np.mean(values)) if q is None else float(np.percentile(values, q))


class _Candidate:
    """Everything one candidate's search needs: its plan, limits, step model and probe runner."""

    def __init__(self, model, hw, sc, plan, step, traffic: _Traffic, slo: SLO, settings: SearchSettings):
        self.model, self.hw, self.sc, self.plan, self.step = model, hw, sc, plan, step
        self.scheduler: SchedulerConfig = scheduler_config(plan, sc)
        self.traffic, self.slo, self.settings = traffic, slo, settings
        self.gpus = sc.tp * sc.pp
        self.warm_seconds = 0.0  # time a request spends in the system at saturation (set by saturate)
        self.probes: list[Probe] = []
        self.mean_output = float(np.mean(traffic.outputs))

    # ---- floors and saturation ---------------------------------------------------------------

    def floors(self) -> list[tuple[SLOTarget, float, str]]:
        """(target, value for a request alone, why) for each target."""
        inputs, outputs = self.traffic.inputs, self.traffic.outputs
        budget = self.scheduler.max_num_batched_tokens
        bs = self.scheduler.block_size_tokens
        out = []
        for t in self.slo.targets:
            n_in = round(_statistic(inputs, t.statistic))
            n_out = max(2, round(_statistic(outputs, t.statistic)))
            cached = int(min(self.traffic.hit_rate * n_in, n_in - 1) // bs * bs)
            pre = prefill_seconds(self.step, n_in - cached, budget)
            dec = self.step.step_seconds(
                prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=1, decode_kv_tokens=n_in + n_out // 2
            )
            metric = METRICS[t.metric]
            value = metric.alone(pre, dec, n_out)
            out.append((t, value, metric.why.format(n_in=n_in, n_out=n_out, value=fmt_seconds(value))))
        return out

    def saturate(self) -> float:
        """The knee of one replica, in requests/s (``planner.serve.saturation``; 0.0 when unknown)."""
        t = self.traffic
        found = measure_saturation(t.inputs, t.outputs, self.scheduler, self.step, t.hit_rate)
        self.warm_seconds = found.engine_seconds or 0.0
        return found.requests_per_s or 0.0

    # ---- probes ------------------------------------------------------------------------------

    def probe(self, rate: float, saturation: float | None, *, recorder: _Recording | None = None) -> Probe:
        traffic = self.traffic
        if traffic.trace:
            measured, warm = len(traffic), 0
        else:
            measured = self.settings.requests_per_probe
            if saturation:
                light = int(measured * 4 * rate / saturation)
                measured = max(min(MIN_REQUESTS_PER_PROBE, measured), min(measured, light))
            warm = min(math.ceil(rate * self.warm_seconds), measured)
        count = min(len(traffic), measured + 2 * warm)
        step = recorder or self.step
        run = run_engine(traffic.at(rate, count), self.scheduler, step)
        window = slice(warm, warm + measured)
        arrival = run.arrival_time_s[window]
        first = run.first_token_time_s[window]
        finish = run.finish_time_s[window]
        out = run.output_tokens[window]
        done = ~np.isnan(finish)
        ttft = first[done] - arrival[done]
        e2e = finish[done] - arrival[done]
        multi = done & (out > 1)
        tpot = (finish[multi] - first[multi]) / (out[multi] - 1)
        stats = {"ttft": latency_stats(ttft), "tpot": latency_stats(tpot), "e2e": latency_stats(e2e)}
        per_user = 1.0 / stats["tpot"].mean if stats["tpot"] and stats["tpot"].mean > 0 else None
        passed = worst = ratio = None
        if self.slo is not None:
            worst, ratio = self._worst(stats)
            passed = ratio is not None and ratio <= 1.0 and bool(done.all())
        probe = Probe(
            request_rate_per_s=rate,
            measured_requests=int(done.sum()),
            ttft_seconds=stats["ttft"],
            tpot_seconds=stats["tpot"],
            e2e_seconds=stats["e2e"],
            output_tokens_per_s_per_gpu=rate * float(np.mean(out)) / self.gpus,
            output_tokens_per_s_per_user=per_user,
            passed=passed,
            worst_target=worst,
            worst_ratio=ratio,
            preemptions=run.preemptions,
        )
        return probe

    def _worst(self, stats) -> tuple[str | None, float | None]:
        worst, ratio = None, None
        for t in self.slo.targets:
            v = t.value(stats)
            r = math.inf if v is None else v / t.seconds
            if ratio is None or r > ratio:
                worst, ratio = t.label, r
        return worst, ratio

    def record(self, rate: float, saturation: float) -> Probe:
        p = self.probe(rate, saturation)
        self.probes.append(p)
        return p

    # ---- bisection ---------------------------------------------------------------------------

    def max_rate(self, saturation: float) -> tuple[float | None, float, Probe | None, Probe]:
        """(largest passing rate or None, smallest failing rate above it, its probe, the failing probe).

        Starts at the cap (UTILIZATION_CAP x saturation); when that passes the cap is the answer,
        limited by saturation rather than by a target.
        """
        cap = UTILIZATION_CAP * saturation
        top = self.record(cap, saturation)
        if top.passed:
            return cap, saturation, top, top
        lo, hi, lo_probe, hi_probe = 0.0, cap, None, top
        floor = MIN_RATE_FRACTION * saturation
        for _ in range(self.settings.max_probes - 1):
            if lo > 0 and (hi - lo) / hi <= self.settings.rate_tolerance:
                break
            mid = (lo + hi) / 2
            if lo == 0 and mid < floor:
                mid = floor
                p = self.record(mid, saturation)
                if p.passed:
                    lo, lo_probe = mid, p
                    continue
                hi, hi_probe = mid, p
                break
            p = self.record(mid, saturation)
            if p.passed:
                lo, lo_probe = mid, p
            else:
                hi, hi_probe = mid, p
        return (lo or None), hi, lo_probe, hi_probe


# ------------------------------------------------------------------------------------------------
# The search.
# ------------------------------------------------------------------------------------------------


def _draws(settings: SearchSettings, max_num_seqs: Iterable[int | None]) -> int:
    """Requests to draw once: a probe's window plus warm-up and cool-down, or the saturation waves."""
    most = max(m or 1024 for m in max_num_seqs)  # 1024: vLLM's largest default
    return max(3 * settings.requests_per_probe, SATURATION_WAVES * most)


def _label(hw: HardwareProfile | None, sc: Scenario) -> str:
    """'h100-sxm TP2 w fp8 kv auto' (+ ' PP2', ' seqs 256' when set): one replica's card, split and precision."""
    par = f"TP{sc.tp}" + (f" PP{sc.pp}" if sc.pp > 1 else "")
    mns = f" seqs {sc.max_num_seqs}" if sc.max_num_seqs else ""
    return f"{hw.id if hw else sc.gpu} {par} w {sc.weight_dtype} kv {sc.kv_cache_dtype}{mns}"


def _row(sc: Scenario, hw: HardwareProfile | None, status: Status, reason: str, **extra) -> CandidateResult:
    return CandidateResult(
        label=_label(hw, sc),
        scenario=sc,
        gpu=sc.gpu,
        tp=sc.tp,
        pp=sc.pp,
        weight_dtype=sc.weight_dtype,
        kv_cache_dtype=sc.kv_cache_dtype,
        max_num_seqs=extra.pop("max_num_seqs", None),
        status=status,
        reason=reason,
        gpus_per_replica=sc.tp * sc.pp,
        **extra,
    )


def workload_max_model_len(model: ModelSpec, traffic: _Traffic) -> int:
    """max_model_len covering the workload's longest request, rounded up to 256 tokens, within the model's."""
    longest = int(np.max(traffic.inputs + traffic.outputs))
    if longest > model.max_position_embeddings:
        raise ScenarioError(
            f"the workload has requests of {longest:,} tokens (prompt + output) but {model.name} allows "
            f"{model.max_position_embeddings:,}.",
            hint="Shorten the length distributions (or clip them) below the model's context.",
        )
    return min(model.max_position_embeddings, -(-longest // 256) * 256)


def plan_slo(
    model: ModelSpec,
    slo: SLO,
    workload: Workload,
    space: CandidateSpace,
    settings: SearchSettings | None = None,
    efficiency: Efficiency | None = None,
    profiles: dict[str, HardwareProfile] | None = None,
    prices: Mapping[str, float] | None = None,
) -> SLOPlan:
    """The cheapest deployment of ``model`` that serves ``workload`` (its Poisson rate is the total
    target) within ``slo``, every candidate of ``space`` with its verdict, and the Pareto front.

    ``workload.num_requests`` is ignored for Poisson traffic (each probe measures
    ``settings.requests_per_probe``); a trace is replayed whole, time-scaled to each probed rate.
    ``efficiency`` overrides every card's step-time factors (None: calibrated where saved, else defaults).
    ``prices`` sets US dollars per GPU-hour by card (id or alias), over the profiles' ``price_per_hour_usd``.
    """
    started = time.perf_counter()
    prices = resolve_prices(prices, "prices", profiles)
    settings = settings or SearchSettings()
    traffic = _Traffic(workload, _draws(settings, space.max_num_seqs))
    target = traffic.rate
    notes: list[str] = []
    base_len = space.base.max_model_len
    if base_len is None:
        chosen = workload_max_model_len(model, traffic)
        notes.append(
            f"max_model_len {chosen:,} tokens (the workload's longest request, rounded up to 256); "
            f"set it in the base scenario to plan another."
        )

    rows: list[CandidateResult] = []
    live: list[tuple[_Candidate, float]] = []
    steps: dict[str, StepTimeModel] = {}
    for sc in space.scenarios():
        if base_len is None:
            sc = sc.model_copy(update={"max_model_len": chosen})
        try:
            hw = priced(profiles[sc.gpu] if profiles and sc.gpu in profiles else get_profile(sc.gpu), prices)
        except (HardwareProfileError, KeyError) as err:
            rows.append(_row(sc, None, "invalid", str(err)))
            continue
        sc = sc.model_copy(update={"gpu": hw.id})
        if sc.tp > hw.gpus_per_node:
            rows.append(
                _row(
                    sc,
                    hw,
                    "invalid",
                    f"TP {sc.tp} exceeds the {hw.gpus_per_node} GPUs that share "
                    f"{hw.name}'s fast link in one node; tensor parallelism stays inside a node.",
                )
            )
            continue
        try:
            plan = plan_memory(model, hw, sc, suggest=False)
        except PlannerError as err:
            rows.append(_row(sc, hw, "invalid", str(err)))
            continue
        if not plan.fits or plan.num_gpu_blocks < 1:
            rows.append(_row(sc, hw, "does-not-fit", plan.reason, max_num_seqs=plan.resolved.max_num_seqs))
            continue
        # One step model per (card, split, precision): max_num_seqs does not change step times.
        key = sc.model_copy(update={"max_num_seqs": None}).model_dump_json()
        step = steps.get(key)
        if step is None:
            step = steps[key] = StepTimeModel(model, hw, sc, efficiency)
        try:
            cand = _Candidate(model, hw, sc, plan, step, traffic, slo, settings)
        except PlannerError as err:
            rows.append(_row(sc, hw, "invalid", str(err), max_num_seqs=plan.resolved.max_num_seqs))
            continue
        common = dict(max_num_seqs=cand.scheduler.max_num_seqs, step_time_kind=step.kind)
        misses = [(t, v, why) for t, v, why in cand.floors() if v > t.seconds]
        if misses:
            t, v, why = max(misses, key=lambda m: m[1] / m[0].seconds)
            rows.append(
                _row(
                    sc,
                    hw,
                    "fails-slo",
                    f"{t.label} target {fmt_seconds(t.seconds)} cannot be met at any "
                    f"rate: {why} ({v / t.seconds:.1f}x the target).",
                    **common,
                )
            )
            continue
        saturation = cand.saturate()
        if not saturation > 0:
            rows.append(_row(sc, hw, "invalid", "the saturation run completed no request.", **common))
            continue
        live.append((cand, saturation))

    # Bisect the most promising first, so a cheap answer prunes the rest.
    def bound(item) -> tuple[float, int]:
        cand, saturation = item
        reps = math.ceil(target / (UTILIZATION_CAP * saturation))
        gpus = reps * cand.gpus
        price = cand.hw.price_per_hour_usd
        return (gpus * price if price else math.inf, gpus)

    live.sort(key=bound)
    ranked_by = _ranking([c.hw for c, _ in live], notes)
    best_key: tuple[float, int] | None = None
    for cand, saturation in live:
        hw, sc = cand.hw, cand.sc
        common = dict(
            max_num_seqs=cand.scheduler.max_num_seqs,
            step_time_kind=cand.step.kind,
            saturation_requests_per_s=saturation,
        )
        lb_cost, lb_gpus = bound((cand, saturation))
        lb_key = (lb_cost if ranked_by == "usd_per_hour" else lb_gpus, lb_gpus)
        prunable = ranked_by == "gpus" or math.isfinite(lb_cost)  # an unpriced card's cost is unknown, not high
        if not settings.exhaustive and best_key is not None and prunable and lb_key > best_key:
            rows.append(
                _row(
                    sc,
                    hw,
                    "not-cheaper",
                    (
                        f"not bisected: needs >= {lb_gpus} GPUs"
                        + (f" (${lb_cost:,.2f}/h)" if math.isfinite(lb_cost) else "")
                        + f" even at {UTILIZATION_CAP:.0%} of its saturation"
                        + "; a cheaper one meets the SLO"
                    ),
                    total_gpus=lb_gpus,
                    **common,
                )
            )
            continue
        best, fail_rate, best_probe, fail_probe = cand.max_rate(saturation)
        probes = tuple(cand.probes)
        if best is None:
            rows.append(
                _row(
                    sc,
                    hw,
                    "fails-slo",
                    _infeasible(fail_probe, cand.slo, cand.floors()),
                    probes=probes,
                    first_failing_rate_per_s=fail_rate,
                    limiting_target=fail_probe.worst_target,
                    **common,
                )
            )
            continue
        limiting = "saturation" if fail_probe is best_probe else fail_probe.worst_target
        replicas = math.ceil(target / best - 1e-9)
        row = _costed(cand, target, best, replicas, saturation)
        reason = f"up to {best:.2f} req/s per replica ({_limit(limiting, fail_rate, saturation)})"
        rows.append(
            _row(
                sc,
                hw,
                "meets",
                reason,
                probes=probes + (row["operating_point"],),
                max_rate_per_replica_per_s=best,
                first_failing_rate_per_s=fail_rate,
                limiting_target=limiting,
                **row,
                **common,
            )
        )
        cost = row["usd_per_hour"] if row["usd_per_hour"] is not None else math.inf
        found = ((cost if ranked_by == "usd_per_hour" else row["total_gpus"]), row["total_gpus"])
        if best_key is None or found < best_key:
            best_key = found

    ordered = _order(rows, ranked_by)
    meets = [r for r in ordered if r.status == "meets"]
    recommendation = meets[0] if meets else None
    if not settings.exhaustive and any(r.status == "not-cheaper" for r in rows):
        notes.append(
            "rows marked not-cheaper were not bisected (lower bound above the best); "
            "search exhaustively for their exact rates."
        )
    points = [(r.label, p) for r in rows for p in r.probes]
    return SLOPlan(
        step_time_kind=recommendation.step_time_kind if recommendation else None,
        model_name=model.name,
        target_rate_per_s=target,
        slo=slo,
        mean_input_tokens=float(np.mean(traffic.inputs)),
        mean_output_tokens=float(np.mean(traffic.outputs)),
        recommendation=recommendation,
        ranked_by=ranked_by,
        candidates=tuple(ordered),
        saturation_requests_per_s=recommendation.saturation_requests_per_s if recommendation else None,
        overloaded=recommendation.overloaded if recommendation else None,
        pareto=pareto_front(points),
        notes=tuple(notes),
        search_seconds=time.perf_counter() - started,
    )


def _ranking(cards: Sequence[HardwareProfile], notes: list[str]) -> Literal["usd_per_hour", "gpus"]:
    """usd_per_hour when any feasible card has a price, else gpus; a card without one is named in ``notes``
    with how to give it one (the ranking never falls back to GPU count without saying so)."""
    unpriced = sorted({hw.id for hw in cards if hw.price_per_hour_usd is None})
    ranked_by: Literal["usd_per_hour", "gpus"] = (
        "usd_per_hour" if len(unpriced) < len({hw.id for hw in cards}) else "gpus"
    )
    if unpriced:
        how = missing_price_hint(unpriced)
        notes.append(
            f"ranked by GPU count, not cost: {how}"
            if ranked_by == "gpus"
            else f"ranked by $/hour; unpriced candidates come after the priced ones: {how}"
        )
    return ranked_by


def missing_price_hint(card_ids: Sequence[str]) -> str:
    """'no price for gaudi3, h20: pass --price-per-gpu-hour gaudi3=USD (US dollars per GPU-hour) ...'."""
    pairs = " ".join(f"--price-per-gpu-hour {c}=USD" for c in card_ids)
    return (
        f"no price for {', '.join(card_ids)}: pass {pairs} (US dollars per GPU-hour; in the app, the card's "
        "$/GPU-hour field), or add price_per_hour_usd to its profile."
    )


def _costed(cand: _Candidate, target: float, best: float, replicas: int, saturation: float) -> dict:
    """Replicas, GPUs, $/hour, and per-1M-token cost and energy at the operating point."""
    hw = cand.hw
    total_gpus = replicas * cand.gpus
    price = hw.price_per_hour_usd
    per_replica = target / replicas
    recorder = _Recording(cand.step)
    op = cand.probe(per_replica, saturation, recorder=recorder)
    share = recorder.prefill_share()
    traffic = cand.traffic
    in_per_s = target * float(np.mean(traffic.inputs))
    out_per_s = target * float(np.mean(traffic.outputs))
    gh_in = gpu_hours_per_million_tokens(total_gpus, in_per_s, share)
    gh_out = gpu_hours_per_million_tokens(total_gpus, out_per_s, 1 - share)
    tdp = hw.tdp_watts
    return dict(
        replicas=replicas,
        total_gpus=total_gpus,
        usd_per_hour=total_gpus * price if price else None,
        overloaded=per_replica > saturation,
        operating_point=op,
        gpu_hours_per_1m_input_tokens=gh_in,
        gpu_hours_per_1m_output_tokens=gh_out,
        usd_per_1m_input_tokens=usd_per_million_tokens(price, total_gpus, in_per_s, share),
        usd_per_1m_output_tokens=usd_per_million_tokens(price, total_gpus, out_per_s, 1 - share),
        energy_kwh_per_1m_input_tokens_upper_bound=kwh_per_million_tokens_upper_bound(tdp, total_gpus, in_per_s, share),
        energy_kwh_per_1m_output_tokens_upper_bound=kwh_per_million_tokens_upper_bound(
            tdp, total_gpus, out_per_s, 1 - share
        ),
    )


def _limit(limiting: str, fail_rate: float, saturation: float) -> str:
    if limiting == "saturation":
        return f"capped at {UTILIZATION_CAP:.0%} of saturation"
    return f"{limiting} fails at {fail_rate:.2f} req/s"


def _infeasible(probe: Probe, slo: SLO, floors) -> str:
    """'P99 TTFT 2.40 s at the lowest rate probed (0.10 req/s), target 1.00 s (2.4x):
    prefill of ... alone takes ...'."""
    target = next(t for t in slo.targets if t.label == probe.worst_target)
    value = target.value(probe.stats())
    why = next((w for t, _, w in floors if t.label == target.label), "")
    shown = "no request completed" if value is None else fmt_seconds(value)
    over = "" if value is None else f" ({value / target.seconds:.1f}x)"
    return (
        f"{target.label} {shown} at the lowest rate probed ({probe.request_rate_per_s:.3g} req/s), target "
        f"{fmt_seconds(target.seconds)}{over}: {why}."
    )


_STATUS_ORDER = {"meets": 0, "not-cheaper": 1, "fails-slo": 2, "does-not-fit": 3, "invalid": 4}


def _order(rows: Iterable[CandidateResult], ranked_by: str) -> list[CandidateResult]:
    def key(r: CandidateResult):
        cost = r.usd_per_hour if r.usd_per_hour is not None else math.inf
        primary = cost if ranked_by == "usd_per_hour" else (r.total_gpus or math.inf)
        return (_STATUS_ORDER[r.status], primary, r.total_gpus or math.inf, -(r.max_rate_per_replica_per_s or 0))

    return sorted(rows, key=key)


def pareto_front(points: Sequence[tuple[str, Probe]]) -> tuple[ParetoPoint, ...]:
    """Probes no other probe beats on both tokens/s per GPU and tokens/s per user (ties kept once)."""
    pts = [(label, p) for label, p in points if p.output_tokens_per_s_per_user is not None]
    pts.sort(key=lambda lp: (-lp[1].output_tokens_per_s_per_gpu, -lp[1].output_tokens_per_s_per_user))
    front, best_user = [], -math.inf
    for label, p in pts:
        if p.output_tokens_per_s_per_user > best_user:
            best_user = p.output_tokens_per_s_per_user
            front.append(
                ParetoPoint(
                    candidate=label,
                    request_rate_per_s=p.request_rate_per_s,
                    output_tokens_per_s_per_gpu=p.output_tokens_per_s_per_gpu,
                    output_tokens_per_s_per_user=p.output_tokens_per_s_per_user,
                    meets_slo=bool(p.passed),
                )
            )
    return tuple(sorted(front, key=lambda f: f.output_tokens_per_s_per_gpu))


# ------------------------------------------------------------------------------------------------
# Sweeps and single candidates (for the page and the tests).
# ------------------------------------------------------------------------------------------------


def _single(model, hw, sc, workload, slo, settings, efficiency, step) -> tuple[_Candidate, float]:
    settings = settings or SearchSettings()
    traffic = _Traffic(workload, _draws(settings, (sc.max_num_seqs,)))
    plan = plan_memory(model, hw, sc, suggest=False)
    if not plan.fits or plan.num_gpu_blocks < 1:
        raise ScenarioError(
            f"{model.name} on {sc.tp * sc.pp} x {hw.name}: {plan.reason}.",
            hint="Pick a scenario the Memory page says fits.",
        )
    cand = _Candidate(model, hw, sc, plan, step or StepTimeModel(model, hw, sc, efficiency), traffic, slo, settings)
    return cand, cand.saturate()


def sweep_rates(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    rates: Sequence[float] | None = None,
    slo: SLO | None = None,
    settings: SearchSettings | None = None,
    efficiency: Efficiency | None = None,
    step_model: StepTimeModel | None = None,
) -> tuple[float, tuple[Probe, ...]]:
    """(saturation rate, probes) of one replica at each rate: latency percentiles vs load.

    ``rates`` default to 10 steps up to the utilization cap. With ``slo`` each probe has a verdict.
    """
    cand, saturation = _single(model, hw, sc, workload, slo, settings, efficiency, step_model)
    if rates is None:
        rates = [UTILIZATION_CAP * saturation * k / 10 for k in range(1, 11)]
    return saturation, tuple(cand.probe(float(r), saturation) for r in rates)


def max_rate_per_replica(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    slo: SLO,
    settings: SearchSettings | None = None,
    efficiency: Efficiency | None = None,
    step_model: StepTimeModel | None = None,
) -> CandidateResult:
    """The bisection for one scenario: largest rate per replica that meets ``slo`` (no costing)."""
    cand, saturation = _single(model, hw, sc, workload, slo, settings, efficiency, step_model)
    common = dict(
        max_num_seqs=cand.scheduler.max_num_seqs, step_time_kind=cand.step.kind, saturation_requests_per_s=saturation
    )
    misses = [(t, v, why) for t, v, why in cand.floors() if v > t.seconds]
    if misses:
        t, v, why = max(misses, key=lambda m: m[1] / m[0].seconds)
        return _row(
            sc,
            hw,
            "fails-slo",
            f"{t.label} target {fmt_seconds(t.seconds)} cannot be met at any rate: "
            f"{why} ({v / t.seconds:.1f}x the target).",
            **common,
        )
    best, fail_rate, best_probe, fail_probe = cand.max_rate(saturation)
    if best is None:
        return _row(
            sc,
            hw,
            "fails-slo",
            _infeasible(fail_probe, slo, cand.floors()),
            probes=tuple(cand.probes),
            first_failing_rate_per_s=fail_rate,
            limiting_target=fail_probe.worst_target,
            **common,
        )
    limiting = "saturation" if fail_probe is best_probe else fail_probe.worst_target
    return _row(
        sc,
        hw,
        "meets",
        f"up to {best:.2f} req/s per replica ({_limit(limiting, fail_rate, saturation)})",
        probes=tuple(cand.probes),
        max_rate_per_replica_per_s=best,
        first_failing_rate_per_s=fail_rate,
        limiting_target=limiting,
        **common,
    )
