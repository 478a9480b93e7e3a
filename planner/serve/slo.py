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

Steps 1-4 do not depend on the target rate (probes scale one draw of arrival times), so the search is
two halves: ``search_capacity`` screens the candidates and finds their knees (``CapacitySearch``, whose
bisections run once each, when a ranking first needs them) and ``plan_at_rate`` ranks, prunes, bisects
and costs at a rate. ``plan_slo`` is one then the other; a caller that changes only the rate keeps the
search and calls ``plan_at_rate`` again.

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
from planner.serve.disagg import DisaggCandidate, DisaggLayout, DisaggSearch, KVLinkKind, simulate_disaggregated
from planner.serve.replica import SpeculativeStepCost, planned_replica, replica_step_cost, scheduler_config
from planner.serve.saturation import SATURATION_WAVES, measure_saturation, saturated_run  # noqa: F401 (re-exported)
from planner.serve.simulate import LatencyStats, SchedulerConfig, decode_speculation, request_latencies, run_engine
from planner.serve.workload import (
    ConcurrencyArrivals,
    RequestSet,
    TraceArrivals,
    Workload,
    generate_requests,
    rank_share,
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
    meaning: str  # what it measures, in the slo command's --<statistic>-<metric> help
    alone: Callable[[float, float, int], float]  # (prefill seconds, decode-step seconds, output tokens) -> s
    why: str  # the floor in words: str.format with n_in, n_out and value


#: The metric registry: a new latency metric is one row here, its name in ``Metric``, its field of ``Probe``
#: (and ``Probe.stats``), and its per-request value in ``planner.serve.simulate.RequestLatencies``; the
#: slo command's flags follow this table.
METRICS: dict[str, MetricDef] = {
    "ttft": MetricDef(
        "TTFT",
        "time to first token (queueing included)",
        lambda pre, dec, n_out: pre,
        "prefill of {n_in:,} tokens alone takes {value}",
    ),
    "tpot": MetricDef(
        "TPOT",
        "time per output token",
        lambda pre, dec, n_out: dec,
        "one decode step of a request alone takes {value}",
    ),
    "e2e": MetricDef(
        "E2E",
        "end-to-end latency",
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
    data_parallel_size: tuple[int, ...] = Field(
        (1,),
        min_length=1,
        description="Attention data-parallel sizes to try (--data-parallel-size; > 1 needs expert parallelism, "
        "MoE models only): a replica is tp x pp x dp GPUs, each DP rank taking 1 / dp of the replica's rate.",
    )
    enable_expert_parallel: bool = Field(
        False, description="Every candidate with --enable-expert-parallel (experts split over tp x dp ranks)."
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
                                for dp in self.data_parallel_size:
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
                                                data_parallel_size=dp,
                                                enable_expert_parallel=self.enable_expert_parallel,
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
    disaggregated: DisaggSearch | None = Field(
        None,
        exclude_if=lambda v: v is None,  # a plain search's JSON stays what it was
        description="With --compare-disaggregated: the fewest-GPU prefill/decode layout meeting the SLO beside "
        "the aggregated recommendation (search_disaggregated).",
    )


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
        if isinstance(arrivals, TraceArrivals):
            drawn = generate_requests(workload)
            times = drawn.arrival_time_s
            assert times is not None  # None only in a closed loop, refused above
            span = float(times[-1] - times[0])
            if len(drawn) < 2 or span <= 0:
                raise ScenarioError(
                    f"the trace {arrivals.path} has {len(drawn)} request(s) over {span:g} s; a rate needs two or more "
                    "arrivals at different times.",
                    hint="Use a longer trace, or a Poisson rate.",
                )
            self.rate = (len(drawn) - 1) / span
            unit = (times - times[0]) * self.rate
        else:
            drawn = generate_requests(workload.at_unit_rate(count))
            self.rate = arrivals.request_rate_per_s
            unit = drawn.arrival_time_s
        # the client's cap on requests in flight holds at every probed rate (vllm bench serve --max-concurrency)
        self.cap = workload.max_in_flight
        self.unit_arrivals = unit
        self.inputs = drawn.input_tokens
        self.outputs = drawn.output_tokens
        self.hit_rate = workload.prefix_cache_hit_rate

    def __len__(self) -> int:
        return len(self.inputs)

    def cap_share(self, ranks: int) -> int | None:
        """One of ``ranks`` DP ranks' share of the client's cap (``rank_share``)."""
        return rank_share(self.cap, ranks)

    def at(self, rate: float, count: int, ranks: int = 1) -> RequestSet:
        """The first ``count`` requests at ``rate``, under one of ``ranks`` DP ranks' share of the client's cap."""
        return RequestSet(
            self.unit_arrivals[:count] / rate,
            self.inputs[:count],
            self.outputs[:count],
            None,
            self.hit_rate,
            max_in_flight=self.cap_share(ranks),
        )


class _Recording:
    """A StepCost that remembers each step's mix and duration (for splitting GPU time by phase)."""

    MAX_SPLIT_STEPS = 4000
    """The split is estimated on at most this many evenly spaced steps (it is a ratio of sums)."""

    def __init__(self, step: StepTimeModel | SpeculativeStepCost):
        self.step = step
        self.speculation = decode_speculation(step)  # the wrapped steps' speculation, for run_engine
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


def prefill_seconds(step: StepTimeModel | SpeculativeStepCost, tokens: int, budget_tokens: int) -> float:
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
        self.gpus = sc.gpus_per_replica
        #: DP ranks of the replica: each runs 1 / dp of its rate (the simulated engine is one rank), so the
        #: replica's knee is dp x the rank's (``planner.serve.replica`` does the same).
        self.dp = sc.data_parallel_size
        self.warm_seconds = 0.0  # time a request spends in the system at saturation (set by saturate)

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
            dec = (
                self.step.step_seconds(
                    prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=1, decode_kv_tokens=n_in + n_out // 2
                )
                / decode_speculation(self.step).tokens_per_step
            )  # a speculative step gives E tokens on average
            metric = METRICS[t.metric]
            value = metric.alone(pre, dec, n_out)
            out.append((t, value, metric.why.format(n_in=n_in, n_out=n_out, value=fmt_seconds(value))))
        return out

    def saturate(self) -> float:
        """The knee of one replica, in requests/s (``planner.serve.saturation``; 0.0 when unknown)."""
        t = self.traffic
        found = measure_saturation(
            t.inputs, t.outputs, self.scheduler, self.step, t.hit_rate, max_in_flight=t.cap_share(self.dp)
        )
        self.warm_seconds = found.engine_seconds or 0.0
        return (found.requests_per_s or 0.0) * self.dp

    # ---- probes ------------------------------------------------------------------------------

    def window(self, rate: float, saturation: float | None) -> tuple[int, int]:
        """(measured requests, warm-up requests) of a probe at ``rate``: a trace is measured whole; Poisson
        traffic measures ``requests_per_probe`` (fewer at light load, down to ``MIN_REQUESTS_PER_PROBE``)
        after ``rate x W`` warm-up requests, and as many cool-down ones follow."""
        if self.traffic.trace:
            return len(self.traffic), 0
        measured = self.settings.requests_per_probe
        if saturation:
            light = int(measured * 4 * rate / saturation)
            measured = max(min(MIN_REQUESTS_PER_PROBE, measured), min(measured, light))
        return measured, min(math.ceil(rate / self.dp * self.warm_seconds), measured)

    def probe(self, rate: float, saturation: float | None, *, recorder: _Recording | None = None) -> Probe:
        """One simulated run at ``rate`` requests/s on this replica: the measured requests' latencies, and
        the verdict when the search has an SLO (every target holds and every measured request completed)."""
        measured, warm = self.window(rate, saturation)
        count = min(len(self.traffic), measured + 2 * warm)
        run = run_engine(self.traffic.at(rate / self.dp, count, self.dp), self.scheduler, recorder or self.step)
        window = slice(warm, warm + measured)
        latencies = request_latencies(run, window)
        stats = latencies.stats()
        per_user = 1.0 / stats["tpot"].mean if stats["tpot"] and stats["tpot"].mean > 0 else None
        passed = worst = ratio = None
        if self.slo is not None:
            worst, ratio = self._worst(stats)
            passed = ratio is not None and ratio <= 1.0 and bool(latencies.completed.all())
        return Probe(
            request_rate_per_s=rate,
            measured_requests=int(latencies.completed.sum()),
            ttft_seconds=stats["ttft"],
            tpot_seconds=stats["tpot"],
            e2e_seconds=stats["e2e"],
            output_tokens_per_s_per_gpu=rate * float(np.mean(run.output_tokens[window])) / self.gpus,
            output_tokens_per_s_per_user=per_user,
            passed=passed,
            worst_target=worst,
            worst_ratio=ratio,
            preemptions=run.preemptions,
        )

    def _worst(self, stats) -> tuple[str | None, float | None]:
        worst, ratio = None, None
        for t in self.slo.targets:
            v = t.value(stats)
            r = math.inf if v is None else v / t.seconds
            if ratio is None or r > ratio:
                worst, ratio = t.label, r
        return worst, ratio

    # ---- bisection ---------------------------------------------------------------------------

    def max_rate(self, saturation: float) -> _Bisection:
        """The bisection: the largest rate per replica that passes, the smallest failing one above it.

        Starts at the cap (UTILIZATION_CAP x saturation); when that passes the cap is the answer,
        limited by saturation rather than by a target. Below ``MIN_RATE_FRACTION`` of saturation it
        probes that floor once and stops there if it fails.
        """
        probes: list[Probe] = []

        def record(rate: float) -> Probe:
            probes.append(self.probe(rate, saturation))
            return probes[-1]

        cap = UTILIZATION_CAP * saturation
        top = record(cap)
        if top.passed:
            return _Bisection(cap, saturation, top, top, tuple(probes))
        lo, hi, lo_probe, hi_probe = 0.0, cap, None, top
        floor = MIN_RATE_FRACTION * saturation
        for _ in range(self.settings.max_probes - 1):
            if lo > 0 and (hi - lo) / hi <= self.settings.rate_tolerance:
                break
            mid = (lo + hi) / 2
            at_floor = lo == 0 and mid < floor
            rate = floor if at_floor else mid
            p = record(rate)
            if p.passed:
                lo, lo_probe = rate, p
            else:
                hi, hi_probe = rate, p
                if at_floor:
                    break
        return _Bisection(lo or None, hi, lo_probe, hi_probe, tuple(probes))


@dataclass(frozen=True)
class _Bisection:
    """One candidate's bisection: the largest rate per replica that met every target (None: none did), the
    smallest failing rate above it (the saturation rate when the cap passed), their probes, every probe."""

    best: float | None
    fail_rate: float
    best_probe: Probe | None
    fail_probe: Probe
    probes: tuple[Probe, ...]

    @property
    def limiting(self) -> str | None:
        """'saturation' when the cap passed, else the target that failed first above the best rate."""
        return "saturation" if self.fail_probe is self.best_probe else self.fail_probe.worst_target


class _Live:
    """A candidate that fits, has a knee and can meet the targets alone: what the rate-free search keeps.

    Its bisection runs at most once, the first time a ranking needs it (a second run, from another
    thread, gives the same result).
    """

    __slots__ = ("_bisection", "cand", "saturation")

    def __init__(self, cand: _Candidate, saturation: float) -> None:
        self.cand = cand
        self.saturation = saturation
        self._bisection: _Bisection | None = None

    @property
    def bisected(self) -> bool:
        return self._bisection is not None

    def bisection(self) -> _Bisection:
        if self._bisection is None:
            self._bisection = self.cand.max_rate(self.saturation)
        return self._bisection

    def common(self) -> dict:
        """The row fields every outcome of a live candidate carries."""
        return dict(
            max_num_seqs=self.cand.scheduler.max_num_seqs,
            step_time_kind=self.cand.step.kind,
            saturation_requests_per_s=self.saturation,
        )

    def lower_bound(self, target: float) -> tuple[float, int]:
        """($/hour, GPUs) at ``target`` requests/s if every replica ran at the cap: no row of it costs less."""
        reps = math.ceil(target / (UTILIZATION_CAP * self.saturation))
        gpus = reps * self.cand.gpus
        price = self.cand.hw.price_per_hour_usd
        return (gpus * price if price else math.inf, gpus)


# ------------------------------------------------------------------------------------------------
# Rows.
# ------------------------------------------------------------------------------------------------


def _draws(settings: SearchSettings, max_num_seqs: Iterable[int | None]) -> int:
    """Requests to draw once: a probe's window plus warm-up and cool-down, or the saturation waves."""
    most = max(m or 1024 for m in max_num_seqs)  # 1024: vLLM's largest default
    return max(3 * settings.requests_per_probe, SATURATION_WAVES * most)


def _label(hw: HardwareProfile | None, sc: Scenario) -> str:
    """'h100-sxm TP2 w fp8 kv auto' (+ ' PP2', ' seqs 256' when set): one replica's card, split and precision."""
    par = (
        f"TP{sc.tp}"
        + (f" PP{sc.pp}" if sc.pp > 1 else "")
        + (f" DP{sc.data_parallel_size}" if sc.data_parallel_size > 1 else "")
    )
    par += " EP" if sc.enable_expert_parallel else ""
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
        gpus_per_replica=sc.gpus_per_replica,
        **extra,
    )


def _floor_row(cand: _Candidate, common: dict) -> CandidateResult | None:
    """A 'fails-slo' row when a target is below what a request alone takes (no load meets it), else None."""
    misses = [(t, v, why) for t, v, why in cand.floors() if v > t.seconds]
    if not misses:
        return None
    t, v, why = max(misses, key=lambda m: m[1] / m[0].seconds)
    return _row(
        cand.sc,
        cand.hw,
        "fails-slo",
        f"{t.label} target {fmt_seconds(t.seconds)} cannot be met at any rate: "
        f"{why} ({v / t.seconds:.1f}x the target).",
        **common,
    )


def _bisected_row(live: _Live, costs: dict | None = None) -> CandidateResult:
    """The row of a bisected candidate: 'fails-slo' at every rate probed, or 'meets' up to its best rate
    (with ``costs``: replicas, GPUs, $/hour and, when simulated, the operating point and per-token costs)."""
    cand, found = live.cand, live.bisection()
    if found.best is None:
        return _row(
            cand.sc,
            cand.hw,
            "fails-slo",
            _infeasible(found.fail_probe, cand.slo, cand.floors()),
            probes=found.probes,
            first_failing_rate_per_s=found.fail_rate,
            limiting_target=found.fail_probe.worst_target,
            **live.common(),
        )
    costs = costs or {}
    op = costs.get("operating_point")
    return _row(
        cand.sc,
        cand.hw,
        "meets",
        f"up to {found.best:.2f} req/s per replica ({_limit(found.limiting, found.fail_rate, live.saturation)})",
        probes=found.probes + ((op,) if op is not None else ()),
        max_rate_per_replica_per_s=found.best,
        first_failing_rate_per_s=found.fail_rate,
        limiting_target=found.limiting,
        **costs,
        **live.common(),
    )


def _not_cheaper_row(live: _Live, lb_cost: float, lb_gpus: int) -> CandidateResult:
    """A candidate not bisected: even at the cap its replicas cost more than the best found."""
    return _row(
        live.cand.sc,
        live.cand.hw,
        "not-cheaper",
        (
            f"not bisected: needs >= {lb_gpus} GPUs"
            + (f" (${lb_cost:,.2f}/h)" if math.isfinite(lb_cost) else "")
            + f" even at {UTILIZATION_CAP:.0%} of its saturation"
            + "; a cheaper one meets the SLO"
        ),
        total_gpus=lb_gpus,
        **live.common(),
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


# ------------------------------------------------------------------------------------------------
# The search: candidates and their capacity (rate-free), then the plan at a rate.
# ------------------------------------------------------------------------------------------------


class CapacitySearch:
    """What an SLO search finds that does not depend on the total request rate: every candidate's verdict
    up to its bisection (invalid, does not fit, a target below what a request alone takes, no knee), the
    knee of the others, and their bisections (the largest rate per replica that meets the SLO), each run
    once, the first time a ranking needs it.

    ``plan_at_rate(search, rate)`` answers at a total rate; ``plan_slo`` is ``search_capacity`` then
    ``plan_at_rate`` at the workload's own rate. One search serves every Poisson rate of the same workload
    shape (lengths, prefix hits, seed): probes scale arrival times drawn once at 1 req/s.
    """

    def __init__(
        self,
        model: ModelSpec,
        slo: SLO,
        settings: SearchSettings,
        traffic: _Traffic,
        screened: list[CandidateResult | _Live],
        notes: list[str],
        seconds: float,
    ) -> None:
        self.model, self.slo, self.settings, self.traffic = model, slo, settings, traffic
        self.screened = screened  # one entry per candidate, in the order of CandidateSpace.scenarios()
        self.notes = tuple(notes)
        self.seconds = seconds  # wall time spent so far: screening, knees and bisections

    @property
    def rate_per_s(self) -> float:
        """The workload's own total rate (Poisson rate, or a trace's mean rate), in requests per second."""
        return self.traffic.rate

    @property
    def rows(self) -> list[CandidateResult]:
        """Candidates settled without a bisection, in space order."""
        return [s for s in self.screened if isinstance(s, CandidateResult)]

    @property
    def live(self) -> list[_Live]:
        """Candidates whose rate per replica a bisection finds, in space order."""
        return [s for s in self.screened if isinstance(s, _Live)]


def search_capacity(
    model: ModelSpec,
    slo: SLO,
    workload: Workload,
    space: CandidateSpace,
    settings: SearchSettings | None = None,
    efficiency: Efficiency | None = None,
    profiles: dict[str, HardwareProfile] | None = None,
    prices: Mapping[str, float] | None = None,
    draft_model: ModelSpec | None = None,
) -> CapacitySearch:
    """The rate-free half of ``plan_slo`` (same arguments): every candidate of ``space`` screened (card, TP
    within a node, memory plan, floors) and the knee of each that passes. Bisections run later, in
    ``plan_at_rate``, once per candidate however many rates it is asked about.

    A caller whose only change is the request rate keeps the search and calls ``plan_at_rate`` again:
    with every needed bisection done, that is one operating-point simulation per costed row (one in all
    with ``operating_points="recommendation"``).
    """
    started = time.perf_counter()
    cap = workload.max_in_flight
    if cap is not None:
        raise ScenarioError(
            f"the deployment search sizes replicas for a request rate, but a client cap of {cap:,} requests in flight "
            f"bounds the whole deployment (at most {cap:,} / latency requests per second, however many replicas), "
            "which the search does not model.",
            hint="Search without the cap (max_concurrency / --max-concurrency), then simulate the capped load on the "
            "deployment it recommends.",
        )
    prices = resolve_prices(prices, "prices", profiles)
    settings = settings or SearchSettings()
    traffic = _Traffic(workload, _draws(settings, space.max_num_seqs))
    notes: list[str] = []
    scenarios = space.scenarios()
    if space.base.max_model_len is None:
        chosen = workload_max_model_len(model, traffic)
        notes.append(
            f"max_model_len {chosen:,} tokens (the workload's longest request, rounded up to 256); "
            f"set it in the base scenario to plan another."
        )
        scenarios = [sc.model_copy(update={"max_model_len": chosen}) for sc in scenarios]

    def card(gpu: str) -> HardwareProfile:
        return priced(profiles[gpu] if profiles and gpu in profiles else get_profile(gpu), prices)

    steps: dict[str, StepTimeModel | SpeculativeStepCost] = {}

    def step_model(hw: HardwareProfile, sc: Scenario) -> StepTimeModel | SpeculativeStepCost:
        """One step model per (card, split, precision): max_num_seqs does not change step times. With
        ``sc.speculative`` the steps are speculative (``replica_step_cost``), as the simulator's."""
        key = sc.model_copy(update={"max_num_seqs": None}).model_dump_json()
        if key not in steps:
            steps[key] = replica_step_cost(model, hw, sc, efficiency, draft_model)
        return steps[key]

    screened = [_screen(model, sc, card, step_model, traffic, slo, settings) for sc in scenarios]
    return CapacitySearch(model, slo, settings, traffic, screened, notes, time.perf_counter() - started)


def _screen(
    model: ModelSpec,
    sc: Scenario,
    card: Callable[[str], HardwareProfile],
    step_model: Callable[[HardwareProfile, Scenario], StepTimeModel | SpeculativeStepCost],
    traffic: _Traffic,
    slo: SLO,
    settings: SearchSettings,
) -> CandidateResult | _Live:
    """One candidate up to its bisection: the row that says why it stops, or the live candidate and its knee."""
    try:
        hw = card(sc.gpu)
    except (HardwareProfileError, KeyError) as err:
        return _row(sc, None, "invalid", str(err))
    sc = sc.model_copy(update={"gpu": hw.id})
    if sc.tp > hw.gpus_per_node:
        return _row(
            sc,
            hw,
            "invalid",
            f"TP {sc.tp} exceeds the {hw.gpus_per_node} GPUs that share "
            f"{hw.name}'s fast link in one node; tensor parallelism stays inside a node.",
        )
    try:
        plan = plan_memory(model, hw, sc, suggest=False)
    except PlannerError as err:
        return _row(sc, hw, "invalid", str(err))
    if not plan.fits or plan.num_gpu_blocks < 1:
        return _row(sc, hw, "does-not-fit", plan.reason, max_num_seqs=plan.resolved.max_num_seqs)
    step = step_model(hw, sc)
    try:
        cand = _Candidate(model, hw, sc, plan, step, traffic, slo, settings)
    except PlannerError as err:
        return _row(sc, hw, "invalid", str(err), max_num_seqs=plan.resolved.max_num_seqs)
    common = dict(max_num_seqs=cand.scheduler.max_num_seqs, step_time_kind=step.kind)
    below_floor = _floor_row(cand, common)
    if below_floor is not None:
        return below_floor
    saturation = cand.saturate()
    if not saturation > 0:
        return _row(sc, hw, "invalid", "the saturation run completed no request.", **common)
    return _Live(cand, saturation)


def plan_at_rate(
    search: CapacitySearch,
    rate_per_s: float | None = None,
    *,
    operating_points: Literal["all", "recommendation"] = "all",
) -> SLOPlan:
    """The plan of ``search`` at ``rate_per_s`` total requests per second (None: the workload's own rate).

    Ranks the live candidates by their lower bound at that rate, bisects (once per candidate, kept in
    ``search``) those that can still beat the best found, costs the ones that meet the SLO and reports.
    Equal to ``plan_slo`` of the same workload at that rate. ``operating_points="all"`` simulates every
    'meets' row at its operating point (GPU-hours, $ and energy per 1M tokens; as ``plan_slo``);
    ``"recommendation"`` only the recommended one (the other rows keep replicas, GPUs and $/hour, and
    leave the per-token figures None): after a change of rate alone, one simulation. The plan's
    ``search_seconds`` counts the search's screening, knees and bisections (whenever they ran) plus this call.
    """
    started = time.perf_counter()
    target = search.rate_per_s if rate_per_s is None else rate_per_s
    if not (target > 0 and math.isfinite(target)):
        raise ScenarioError(
            f"rate_per_s={target!r} is not a request rate.", hint="Give a finite rate above 0 requests per second."
        )
    notes = list(search.notes)
    live = sorted(search.live, key=lambda item: item.lower_bound(target))  # most promising first: it prunes
    ranked_by = _ranking([item.cand.hw for item in live], notes)
    rows = search.rows
    deployments = _bisect_by_promise(live, target, ranked_by, search.settings.exhaustive, rows)
    _cost_operating_points(rows, deployments, target, ranked_by, operating_points)
    search.seconds += time.perf_counter() - started
    return _report(search, target, rows, ranked_by, notes)


def _bisect_by_promise(
    live: list[_Live], target: float, ranked_by: str, exhaustive: bool, rows: list[CandidateResult]
) -> dict[int, tuple[_Live, int]]:
    """Append a row per live candidate to ``rows``, in ``live`` order: bisected, or 'not-cheaper' when its
    lower bound already costs more than the best found (unless ``exhaustive``). Returns, by row index, each
    'meets' row's candidate and replicas, for the operating points."""
    deployments: dict[int, tuple[_Live, int]] = {}
    best_key: tuple[float, int] | None = None
    for item in live:
        lb_cost, lb_gpus = item.lower_bound(target)
        lb_key = (lb_cost if ranked_by == "usd_per_hour" else lb_gpus, lb_gpus)
        prunable = ranked_by == "gpus" or math.isfinite(lb_cost)  # an unpriced card's cost is unknown, not high
        if not exhaustive and best_key is not None and prunable and lb_key > best_key:
            rows.append(_not_cheaper_row(item, lb_cost, lb_gpus))
            continue
        found = item.bisection()
        if found.best is None:
            rows.append(_bisected_row(item))
            continue
        replicas = math.ceil(target / found.best - 1e-9)
        deployment = _deployment(item, target, replicas)
        row = _bisected_row(item, deployment)
        deployments[len(rows)] = (item, replicas)
        rows.append(row)
        cost = row.usd_per_hour if row.usd_per_hour is not None else math.inf
        gpus: int = deployment["total_gpus"]
        key = ((cost if ranked_by == "usd_per_hour" else gpus), gpus)
        if best_key is None or key < best_key:
            best_key = key
    return deployments


def _cost_operating_points(
    rows: list[CandidateResult],
    deployments: dict[int, tuple[_Live, int]],
    target: float,
    ranked_by: str,
    which: Literal["all", "recommendation"],
) -> None:
    """Replace 'meets' rows in ``rows`` by their costed form: one simulation each at target / replicas."""
    if which == "recommendation":
        first = next((r for r in _order(rows, ranked_by) if r.status == "meets"), None)
        deployments = {i: d for i, d in deployments.items() if rows[i] is first}
    for i, (item, replicas) in deployments.items():
        rows[i] = _bisected_row(item, _costed(item, target, replicas))


def _report(
    search: CapacitySearch, target: float, rows: list[CandidateResult], ranked_by: str, notes: list[str]
) -> SLOPlan:
    """The plan: rows best first, the recommendation, the Pareto front of every probe, the notes."""
    ordered = _order(rows, ranked_by)
    recommendation = next((r for r in ordered if r.status == "meets"), None)
    if not search.settings.exhaustive and any(r.status == "not-cheaper" for r in rows):
        notes.append(
            "rows marked not-cheaper were not bisected (lower bound above the best); "
            "search exhaustively for their exact rates."
        )
    traffic = search.traffic
    return SLOPlan(
        step_time_kind=recommendation.step_time_kind if recommendation else None,
        model_name=search.model.name,
        target_rate_per_s=target,
        slo=search.slo,
        mean_input_tokens=float(np.mean(traffic.inputs)),
        mean_output_tokens=float(np.mean(traffic.outputs)),
        recommendation=recommendation,
        ranked_by=ranked_by,
        candidates=tuple(ordered),
        saturation_requests_per_s=recommendation.saturation_requests_per_s if recommendation else None,
        overloaded=recommendation.overloaded if recommendation else None,
        pareto=pareto_front([(r.label, p) for r in rows for p in r.probes]),
        notes=tuple(notes),
        search_seconds=search.seconds,
    )


def plan_slo(
    model: ModelSpec,
    slo: SLO,
    workload: Workload,
    space: CandidateSpace,
    settings: SearchSettings | None = None,
    efficiency: Efficiency | None = None,
    profiles: dict[str, HardwareProfile] | None = None,
    prices: Mapping[str, float] | None = None,
    draft_model: ModelSpec | None = None,
) -> SLOPlan:
    """The cheapest deployment of ``model`` that serves ``workload`` (its Poisson rate is the total
    target) within ``slo``, every candidate of ``space`` with its verdict, and the Pareto front.

    ``workload.num_requests`` is ignored for Poisson traffic (each probe measures
    ``settings.requests_per_probe``); a trace is replayed whole, time-scaled to each probed rate.
    ``efficiency`` overrides every card's step-time factors (None: calibrated where saved, else defaults).
    ``prices`` sets US dollars per GPU-hour by card (id or alias), over the profiles' ``price_per_hour_usd``.
    The two halves, for a caller that changes only the rate: ``search_capacity`` and ``plan_at_rate``.
    """
    return plan_at_rate(
        search_capacity(model, slo, workload, space, settings, efficiency, profiles, prices, draft_model)
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


def _deployment(live: _Live, target: float, replicas: int) -> dict:
    """Replicas, GPUs, $/hour and whether one replica at the operating point is above its knee."""
    total_gpus = replicas * live.cand.gpus
    price = live.cand.hw.price_per_hour_usd
    return dict(
        replicas=replicas,
        total_gpus=total_gpus,
        usd_per_hour=total_gpus * price if price else None,
        overloaded=target / replicas > live.saturation,
    )


def _costed(live: _Live, target: float, replicas: int) -> dict:
    """``_deployment`` plus the operating point (one simulation at target / replicas) and what it gives:
    GPU-hours, $ and energy (an upper bound, at TDP) per 1M input and per 1M output tokens."""
    cand = live.cand
    hw = cand.hw
    deployment = _deployment(live, target, replicas)
    total_gpus = deployment["total_gpus"]
    price = hw.price_per_hour_usd
    recorder = _Recording(cand.step)
    op = cand.probe(target / replicas, live.saturation, recorder=recorder)
    share = recorder.prefill_share()
    in_per_s = target * float(np.mean(cand.traffic.inputs))
    out_per_s = target * float(np.mean(cand.traffic.outputs))
    tdp = hw.tdp_watts
    return dict(
        deployment,
        operating_point=op,
        gpu_hours_per_1m_input_tokens=gpu_hours_per_million_tokens(total_gpus, in_per_s, share),
        gpu_hours_per_1m_output_tokens=gpu_hours_per_million_tokens(total_gpus, out_per_s, 1 - share),
        usd_per_1m_input_tokens=usd_per_million_tokens(price, total_gpus, in_per_s, share),
        usd_per_1m_output_tokens=usd_per_million_tokens(price, total_gpus, out_per_s, 1 - share),
        energy_kwh_per_1m_input_tokens_upper_bound=kwh_per_million_tokens_upper_bound(tdp, total_gpus, in_per_s, share),
        energy_kwh_per_1m_output_tokens_upper_bound=kwh_per_million_tokens_upper_bound(
            tdp, total_gpus, out_per_s, 1 - share
        ),
    )


def _limit(limiting: str | None, fail_rate: float, saturation: float) -> str:
    if limiting == "saturation":
        return f"capped at {UTILIZATION_CAP:.0%} of saturation"
    return f"{limiting or 'a target'} fails at {fail_rate:.2f} req/s"


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
    pts = [(label, p, user) for label, p in points if (user := p.output_tokens_per_s_per_user) is not None]
    pts.sort(key=lambda lpu: (-lpu[1].output_tokens_per_s_per_gpu, -lpu[2]))
    front, best_user = [], -math.inf
    for label, p, user in pts:
        if user > best_user:
            best_user = user
            front.append(
                ParetoPoint(
                    candidate=label,
                    request_rate_per_s=p.request_rate_per_s,
                    output_tokens_per_s_per_gpu=p.output_tokens_per_s_per_gpu,
                    output_tokens_per_s_per_user=user,
                    meets_slo=bool(p.passed),
                )
            )
    return tuple(sorted(front, key=lambda f: f.output_tokens_per_s_per_gpu))


# ------------------------------------------------------------------------------------------------
# Sweeps and single candidates (for the page and the tests).
# ------------------------------------------------------------------------------------------------


def _single(model, hw, sc, workload, slo, settings, efficiency, step, draft_model=None) -> _Live:
    settings = settings or SearchSettings()
    traffic = _Traffic(workload, _draws(settings, (sc.max_num_seqs,)))
    plan = plan_memory(model, hw, sc, suggest=False)
    if not plan.fits or plan.num_gpu_blocks < 1:
        raise ScenarioError(
            f"{model.name} on {sc.tp * sc.pp} x {hw.name}: {plan.reason}.",
            hint="Pick a scenario the Memory page says fits.",
        )
    step = step or replica_step_cost(model, hw, sc, efficiency, draft_model)
    cand = _Candidate(model, hw, sc, plan, step, traffic, slo, settings)
    return _Live(cand, cand.saturate())


def sweep_rates(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    rates: Sequence[float] | None = None,
    slo: SLO | None = None,
    settings: SearchSettings | None = None,
    efficiency: Efficiency | None = None,
    step_model: StepTimeModel | SpeculativeStepCost | None = None,
    draft_model: ModelSpec | None = None,
) -> tuple[float, tuple[Probe, ...]]:
    """(saturation rate, probes) of one replica at each rate: latency percentiles vs load.

    ``rates`` default to 10 steps up to the utilization cap. With ``slo`` each probe has a verdict. With
    ``sc.speculative`` the steps are speculative (``draft_model``: the draft's spec for method draft).
    """
    live = _single(model, hw, sc, workload, slo, settings, efficiency, step_model, draft_model)
    saturation = live.saturation
    if rates is None:
        rates = [UTILIZATION_CAP * saturation * k / 10 for k in range(1, 11)]
    return saturation, tuple(live.cand.probe(float(r), saturation) for r in rates)


def max_rate_per_replica(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    slo: SLO,
    settings: SearchSettings | None = None,
    efficiency: Efficiency | None = None,
    step_model: StepTimeModel | SpeculativeStepCost | None = None,
    draft_model: ModelSpec | None = None,
) -> CandidateResult:
    """The bisection for one scenario: largest rate per replica that meets ``slo`` (no costing)."""
    live = _single(model, hw, sc, workload, slo, settings, efficiency, step_model, draft_model)
    return _floor_row(live.cand, live.common()) or _bisected_row(live)


#: Most xPyD layouts ``search_disaggregated`` simulates (each one run at the whole target rate).
MAX_DISAGG_PROBES = 24
#: It tries layouts of up to this many times the aggregated recommendation's GPUs.
DISAGG_GPU_HEADROOM = 1.5


def search_disaggregated(
    model: ModelSpec,
    plan: SLOPlan,
    workload: Workload,
    settings: SearchSettings | None = None,
    efficiency: Efficiency | None = None,
    prices: Mapping[str, float] | None = None,
    kv_transfer_link: KVLinkKind = "rdma",
) -> DisaggSearch:
    """The fewest GPUs a prefill/decode split of the recommended card needs to meet ``plan.slo`` at its rate.

    Layouts: prefill and decode TP each from the recommendation's TP, half and double it (those that start),
    x and y instances; tried by increasing GPU count (then fewer instances), up to ``DISAGG_GPU_HEADROOM`` x
    the aggregated GPUs and ``MAX_DISAGG_PROBES`` simulations, each at the whole target rate with the
    search's requests per probe. The first that meets every target is the answer: no layout with fewer GPUs
    met it among those tried.
    """
    settings = settings or SearchSettings()
    rec = plan.recommendation
    if rec is None or rec.total_gpus is None:
        raise ScenarioError(
            "comparing disaggregated layouts needs an aggregated recommendation to start from; none met the SLO.",
            hint="Loosen the targets or widen the candidates (--gpus, --tp) first.",
        )
    hw = get_profile(rec.gpu)
    sc = rec.scenario
    tps = []
    for tp in sorted({max(1, rec.tp // 2), rec.tp, rec.tp * 2}):
        try:
            planned_replica(model, hw, sc.model_copy(update={"tp": tp, "num_gpus": None}))
            tps.append(tp)
        except ScenarioError:
            continue
    cap = math.floor(rec.total_gpus * DISAGG_GPU_HEADROOM)
    splits = (
        DisaggLayout(
            prefill_instances=x, prefill_tp=p, decode_instances=y, decode_tp=d, kv_transfer_link=kv_transfer_link
        )
        for p in tps
        for d in tps
        for x in range(1, cap + 1)
        for y in range(1, cap + 1)
        if x * p + y * d <= cap
    )
    layouts = sorted(
        (lay for lay in splits if lay.gpus_on(sc) <= cap),  # every instance is pp x dp engines of its TP
        key=lambda lay: (lay.gpus_on(sc), lay.prefill_instances + lay.decode_instances, -lay.decode_tp),
    )
    price = (prices or {}).get(hw.id, hw.price_per_hour_usd)
    probe = (
        workload.model_copy(update={"num_requests": settings.requests_per_probe}) if not workload.classes else workload
    )
    tried: list[DisaggCandidate] = []
    best = None
    for layout in layouts[:MAX_DISAGG_PROBES]:
        try:
            res = simulate_disaggregated(model, hw, sc, probe, layout, efficiency)
        except ScenarioError:
            continue
        stats = {"ttft": res.ttft_seconds, "tpot": res.tpot_seconds, "e2e": res.e2e_seconds}
        failing = next(
            (
                f"{t.label} {v * 1e3:,.1f} ms > {t.seconds * 1e3:,.1f} ms" if v is not None else f"{t.label} unknown"
                for t in plan.slo.targets
                if (v := t.value(stats)) is None or v > t.seconds
            ),
            None,
        )
        cand = DisaggCandidate(
            layout=layout,
            gpus=res.gpus,
            usd_per_hour=None if price is None else price * res.gpus,
            meets=failing is None and res.num_rejected == 0,
            failing=failing,
            ttft_p99_seconds=res.ttft_seconds.p99 if res.ttft_seconds else None,
            tpot_p99_seconds=res.tpot_seconds.p99 if res.tpot_seconds else None,
        )
        tried.append(cand)
        if cand.meets:
            best = cand
            break
    agg = f"{rec.replicas} x {rec.label}"
    if best is None:
        verdict = (
            f"aggregated wins: {agg} meets the SLO on {rec.total_gpus} GPUs; no prefill/decode split of "
            f"{hw.id} up to {cap} GPUs did ({len(tried)} tried"
            + (f"; the last failed on {tried[-1].failing}" if tried and tried[-1].failing else "")
            + ")."
        )
    else:
        fewer = best.gpus < rec.total_gpus
        same = best.gpus == rec.total_gpus
        winner = "disaggregated wins" if fewer else ("a tie on GPUs" if same else "aggregated wins")
        verdict = (
            f"{winner}: {best.layout.label} meets the SLO on {best.gpus} GPUs against {rec.total_gpus} for {agg}"
            f" (the aggregated rate per replica is bound by {rec.limiting_target or 'no single target'}). "
            "A split pays when TPOT binds (decode steps without prefill chunks); when TTFT binds, the prefill "
            "pool and the KV transfer add to every first token."
        )
    return DisaggSearch(
        aggregated_label=agg,
        aggregated_gpus=rec.total_gpus,
        aggregated_usd_per_hour=rec.usd_per_hour,
        aggregated_limiting_target=rec.limiting_target,
        best=best,
        tried=tuple(tried),
        kv_transfer_link=kv_transfer_link,
        verdict=verdict,
    )
