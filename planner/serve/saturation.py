"""Saturation: the highest Poisson request rate one replica sustains for a workload shape (its knee).

**Definition.** The knee ``K`` (requests/s) of a replica for a workload shape (length
distributions, prefix-cache hit rate) is the throughput it delivers while its queue never empties:
below ``K`` a Poisson load is stable (the requests in the system stay bounded), above it the backlog
grows by about ``rate - K`` requests every second, so every latency percentile depends only on how
long the load lasts. It is measured, not guessed:

1. **Closed-form first estimate** (``capacity_estimate``): at full batch ``B`` requests are in flight,
   B = min(max_num_seqs, KV tokens / mean(prompt + output)). A cycle serves each of them once: it
   needs ``B x output`` decode tokens and ``B x prompt`` prefill tokens (cached prefix excluded), in
   n = max(output, B x (prompt + output) / max_num_batched_tokens) steps of the same mix, each timed
   by the step model: K0 = B / (n x T_step). Example (Llama-3.1-8B, H100, 512 in / 128 out, bf16):
   B = min(1024, 28,435 blocks x 16 / 640) = 710, n = max(128, 55) = 128 steps of 2,840 prefill
   tokens + 710 decodes, ~0.10 s each: K0 = 710 / 13.0 s = 54.6 req/s.
2. **Simulated refinement** (``saturated_run``): the simulator keeps the replica full, a closed loop
   of ``B`` requests in flight (a new one the moment one finishes) for ``SATURATION_WAVES`` x B
   requests drawn from the workload's shape; the knee is the completions per second from the end of
   the first wave (whose prefills all start at once) to the last arrival. That run has the
   scheduler's real mix (chunked prefill beside decodes, KV blocks, length spread) that the closed
   form averages away; on the shapes tried it lands within 5% of K0 (8B H100: 53.1 vs 54.6 req/s;
   8B L40S: 17.16 vs 17.18; 8B A100 4000 in / 100 out: 3.06 vs 3.06). Cost, 2 cores: 0.1-0.5 s for
   an 8B model, 1.6 s for 1,024-token answers (more steps); at most 4 x 1,024 requests.

Why not a bisection of Poisson runs: whether a run of a few hundred Poisson requests "keeps up"
(95% of its arrivals served after warm-up) swung by +-20% between neighbouring rates (8B H100 512/128:
served/offered 0.95 at 0.8 K, 1.20 at 0.9 K), a noisier answer than the one full-batch run.

With images (``prepare``: ``planner.serve.replica.request_images`` for one stream of requests that all carry the
same images), the full-batch run's requests get their images as the served ones do: their tokens in the prompts
(and in ``B``'s mean prompt) and the vision encoder in the step that reaches them; the closed form counts the
tokens but not the encoder.

A rate is **overloaded** (``overload_verdict``) when it exceeds the knee, or when the run itself shows
the queue growing: over the second half of the arrivals fewer than ``KEEP_UP_FRACTION`` (95%) of the
requests that arrived completed, and more were waiting at the last arrival than at the half-way
arrival. Short runs may not show the growth; the rate test does not depend on the run's length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.hardware import HardwareProfile
from planner.scenario import Scenario
from planner.serve.simulate import (
    EngineRun,
    SchedulerConfig,
    StepCost,
    cached_prefix_tokens,
    run_engine,
)
from planner.serve.workload import (
    ConcurrencyArrivals,
    PoissonArrivals,
    RequestSet,
    TraceArrivals,
    Workload,
    generate_requests,
)

_SPEC = ConfigDict(frozen=True, extra="forbid")

SATURATION_WAVES = 4
"""The saturation run sends this many times the requests in flight (the first wave is not counted)."""
KEEP_UP_FRACTION = 0.95
"""A run keeps up when at least this fraction of the requests arriving in its second half complete in it."""
MIN_WINDOW_ARRIVALS = 20
"""Fewest arrivals in the second half of a run for its queue growth to be judged at all."""


class Saturation(BaseModel):
    """The knee of one replica for a workload shape, and how it was found."""

    model_config = _SPEC
    requests_per_s: float | None = Field(
        description="Sustainable rate (the knee): completions per second of the replica kept at full batch, in "
        "requests per second; None when that simulation completed no request."
    )
    estimate_requests_per_s: float | None = Field(
        description="Closed-form capacity at full batch (B / (steps per cycle x step time)), in requests per second; "
        "None when no request of the shape fits the KV cache."
    )
    full_batch_requests: int = Field(
        description="Requests in flight at full batch: min(max_num_seqs, KV tokens / mean(prompt + output)), a count."
    )
    engine_seconds: float | None = Field(
        description="Mean first-token-to-last-token time of the requests of the full-batch run, in seconds."
    )


def full_batch_requests(scheduler: SchedulerConfig, mean_input_tokens: float, mean_output_tokens: float) -> int:
    """Requests in flight when the replica is full: the max_num_seqs limit or what the KV cache holds at
    their full length, whichever is lower (at least 1; more would only wait or be preempted)."""
    tokens = mean_input_tokens + mean_output_tokens
    groups = scheduler.kv_block_groups
    if groups is None:
        kv_requests = scheduler.num_gpu_blocks * scheduler.block_size_tokens / tokens
    else:  # every KV-cache group's blocks (sliding windows capped, recurrent state per request)
        kv_requests = scheduler.num_gpu_blocks / groups.fractional_blocks(tokens)
    return max(1, min(scheduler.max_num_seqs, int(kv_requests)))


def capacity_estimate(
    scheduler: SchedulerConfig,
    step: StepCost,
    mean_input_tokens: float,
    mean_output_tokens: float,
    hit_rate: float = 0.0,
) -> tuple[float, float]:
    """(K0 requests/s, cycle seconds) at full batch, from one step of the steady mix (module docstring, step 1).

    A cycle is the time a request spends in the engine at full batch (Little: B / K0). Prefill tokens
    exclude the prefix-cache hits; attention pairs are those of whole prompts, p^2 / 2 per request.
    """
    batch = full_batch_requests(scheduler, mean_input_tokens, mean_output_tokens)
    prompt = float(mean_input_tokens) - float(
        cached_prefix_tokens(np.asarray([round(mean_input_tokens)]), hit_rate, scheduler.block_size_tokens)[0]
    )
    steps = max(mean_output_tokens, batch * (prompt + mean_output_tokens) / scheduler.max_num_batched_tokens, 1.0)
    prefill = batch * prompt / steps
    decodes = batch * mean_output_tokens / steps
    seconds = step.step_seconds(
        prefill_tokens=round(prefill),
        prefill_attention_pairs=prefill * (prompt + 1) / 2,
        decode_seqs=max(1, round(decodes)),
        decode_kv_tokens=round(decodes * (mean_input_tokens + mean_output_tokens / 2)),
    )
    cycle = steps * seconds
    return (batch / cycle if cycle > 0 else math.inf), cycle


#: What gives a full-batch run's requests their images (``planner.serve.replica.request_images``), or None.
Prepare = Callable[[RequestSet], RequestSet] | None


def saturated_run(
    inputs: np.ndarray,
    outputs: np.ndarray,
    scheduler: SchedulerConfig,
    step: StepCost,
    hit_rate: float = 0.0,
    in_flight: int | None = None,
    waves: int = SATURATION_WAVES,
    prepare: Prepare = None,
) -> tuple[float, float, int]:
    """(requests/s, seconds a request spends in the engine, requests in flight) of a replica kept full.

    A closed loop: ``in_flight`` requests (default: ``full_batch_requests``, since more would only
    queue), each replaced as it finishes, for ``waves`` times that many requests (drawn in order from
    ``inputs`` / ``outputs``). The first wave starts all at once and its prefills pile up, so the rate
    counts the requests finished from the end of that wave to the last arrival, while every slot is
    still refilled. ``prepare`` gives the requests their images (module docstring).
    """
    drawn = RequestSet(None, inputs, outputs, None, hit_rate)
    if prepare is not None:
        drawn = prepare(drawn)
    if in_flight is None:
        in_flight = full_batch_requests(scheduler, float(np.mean(drawn.input_tokens)), float(np.mean(outputs)))
    conc = max(1, in_flight)
    count = min(len(inputs), waves * conc)
    if count < 2 * conc:  # too few requests for two waves: one wave, counted whole
        conc = max(1, count // 2)
    requests = replace(drawn.take(slice(None, count)), concurrency=conc)
    run = run_engine(requests, scheduler, step)
    done = ~np.isnan(run.finish_time_s)
    if not done.any():
        return 0.0, 0.0, conc
    finish = np.sort(run.finish_time_s[done])
    last_arrival = float(np.nanmax(run.arrival_time_s))
    start = finish[min(conc, len(finish)) - 1]
    in_window = int(np.sum((finish > start) & (finish <= last_arrival)))
    rate = in_window / (last_arrival - start) if last_arrival > start and in_window else len(finish) / float(finish[-1])
    engine_seconds = float(np.mean(run.finish_time_s[done] - run.first_token_time_s[done]))
    return rate, engine_seconds, conc


def measure_saturation(
    inputs: np.ndarray,
    outputs: np.ndarray,
    scheduler: SchedulerConfig,
    step: StepCost,
    hit_rate: float = 0.0,
    prepare: Prepare = None,
    max_in_flight: int | None = None,
) -> Saturation:
    """The knee of a replica for requests drawn in order from ``inputs`` / ``outputs`` (module docstring):
    the closed-form estimate, then one full-batch simulation (``prepare``: the requests' images, or None).
    ``max_in_flight``: the client's cap on requests in flight (``PoissonArrivals.max_concurrency``); the replica is
    then kept only as full as the cap lets it be."""
    prompts = inputs if prepare is None else prepare(RequestSet(None, inputs, outputs, None, hit_rate)).input_tokens
    mean_in, mean_out = float(np.mean(prompts)), float(np.mean(outputs))
    batch = full_batch_requests(scheduler, mean_in, mean_out)
    if max_in_flight is not None:
        batch = min(batch, max_in_flight)
    estimate, _ = capacity_estimate(scheduler, step, mean_in, mean_out, hit_rate)
    rate, engine, conc = saturated_run(inputs, outputs, scheduler, step, hit_rate, in_flight=batch, prepare=prepare)
    return Saturation(
        requests_per_s=rate if rate > 0 else None,
        estimate_requests_per_s=estimate if 0 < estimate < math.inf else None,
        full_batch_requests=conc,
        engine_seconds=engine if rate > 0 else None,
    )


def workload_lengths(workload: Workload, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) token counts of ``count`` requests shaped like ``workload``: drawn from its length
    distributions with its seed, or a trace's lengths in order (repeated when the trace is shorter). For a
    mixed workload, each class's share of ``count`` follows its share of the rate (at least one each), shared
    prefixes included in the prompts."""
    if workload.classes:
        drawn = generate_requests(_class_mix(workload, count))
        return drawn.input_tokens, drawn.output_tokens
    if isinstance(workload.arrivals, TraceArrivals):
        drawn = generate_requests(workload)
        return np.resize(drawn.input_tokens, count), np.resize(drawn.output_tokens, count)
    drawn = generate_requests(workload.at_unit_rate(count))
    return drawn.input_tokens, drawn.output_tokens


def _class_mix(workload: Workload, count: int) -> Workload:
    """``workload``'s classes with ``count`` requests in all, split as their rates are (at least one each)."""
    total = sum(c.request_rate_per_s for c in workload.classes)
    classes = tuple(
        c.model_copy(update={"num_requests": max(1, round(count * c.request_rate_per_s / total))})
        for c in workload.classes
    )
    return Workload(classes=classes, seed=workload.seed)


def hit_rate_of(workload: Workload, count: int) -> float:
    """The prefix-cache hit rate the knee is measured at: the workload's, or for request classes the share of
    prompt tokens their shared system prompts cover, over a mix of ``count`` requests."""
    if not workload.classes:
        return workload.prefix_cache_hit_rate
    drawn = generate_requests(_class_mix(workload, count))
    shared = drawn.shared_prefix_tokens
    return 0.0 if shared is None else float(shared.sum() / drawn.input_tokens.sum())


def replica_saturation(
    workload: Workload, scheduler: SchedulerConfig, step: StepCost, prepare: Prepare = None
) -> Saturation:
    """The knee of one replica with these limits and step times for ``workload``'s shape (``prepare``: what gives
    its requests their images, for one stream of them)."""
    count = SATURATION_WAVES * scheduler.max_num_seqs
    inputs, outputs = workload_lengths(workload, count)
    return measure_saturation(
        inputs, outputs, scheduler, step, hit_rate_of(workload, count), prepare, workload.max_in_flight
    )


# ------------------------------------------------------------------------------------------------
# Verdict on one run.
# ------------------------------------------------------------------------------------------------


def offered_rate_per_s(workload: Workload, run: EngineRun) -> float | None:
    """The open-loop rate offered, in requests/s: the Poisson rate (the sum of the classes' rates for a mixed
    workload), or a trace's (n - 1) / span; None in a closed loop (its load adapts to the replica) or for a
    trace with one arrival time."""
    if workload.classes:
        return sum(c.request_rate_per_s for c in workload.classes)
    arrivals = workload.arrivals
    if isinstance(arrivals, ConcurrencyArrivals):
        return None
    if isinstance(arrivals, PoissonArrivals):
        return arrivals.request_rate_per_s
    times = run.arrival_time_s
    span = float(times[-1] - times[0]) if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else None


def queue_growth(run: EngineRun) -> int | None:
    """Requests the backlog grew by over the second half of an open-loop run's arrivals (0: it kept up);
    None when there are too few arrivals to judge or arrivals are closed-loop.

    Growth = arrivals - completions in (middle arrival, last arrival], counted only when fewer than
    ``KEEP_UP_FRACTION`` of those arrivals completed and more requests waited at the last arrival
    than at the middle one (a run still filling its batch admits everyone, so nothing waits).
    """
    times = run.arrival_time_s
    n = len(times)
    if n < 2 * MIN_WINDOW_ARRIVALS or np.isnan(times).any() or not len(run.step_start_s):
        return None
    middle, last = float(times[n // 2]), float(times[-1])
    arrived = int(np.sum((times > middle) & (times <= last) & ~run.rejected))
    completed = int(np.sum((run.finish_time_s > middle) & (run.finish_time_s <= last)))
    if arrived < MIN_WINDOW_ARRIVALS:
        return None

    def waiting_at(t: float) -> int:
        return int(run.waiting[max(0, int(np.searchsorted(run.step_start_s, t, side="right")) - 1)])

    if completed < KEEP_UP_FRACTION * arrived and waiting_at(last) > waiting_at(middle):
        return arrived - completed
    return 0


def overload_verdict(
    offered_per_s: float | None,
    knee_per_s: float | None,
    growth_requests: int | None,
) -> tuple[bool | None, str | None]:
    """(overloaded, why) from the offered rate, the knee and the run's queue growth; (None, None) when
    neither test can be made."""
    above = None if offered_per_s is None or knee_per_s is None else offered_per_s > knee_per_s
    grows = None if growth_requests is None else growth_requests > 0
    if above is None and grows is None:
        return None, None
    if not (above or grows):
        return False, None
    rate = (
        f"{offered_per_s:,.1f} req/s offered is above the {knee_per_s:,.1f} req/s this replica sustains"
        if above
        else ""
    )
    queue = f"the queue grew by {growth_requests:,} requests over the second half of the arrivals" if grows else ""
    if above and grows:
        return True, f"{rate}, and {queue}"
    if above:
        return True, rate
    if above is False:
        return True, f"{queue}, although {offered_per_s:,.1f} req/s is below the {knee_per_s:,.1f} req/s knee"
    return True, queue


def carry_load_options(
    offered_per_s: float,
    knee_per_s: float,
    sc: Scenario,
    hw: HardwareProfile,
    max_in_flight: int | None = None,
) -> tuple[str, ...]:
    """What would serve ``offered_per_s``: ceil(rate / knee) replicas, a larger TP within the node, an fp8
    KV cache (more requests in flight) where not already. Under a client cap (``max_in_flight``) replicas do not
    lift it (the cap is the deployment's): the first option is a cap that large, by Little's law (requests in
    flight = rate x time in flight)."""
    if max_in_flight is None:
        replicas = math.ceil(offered_per_s / knee_per_s)
        options = [f"{replicas} replicas (ceil({offered_per_s:,.1f} / {knee_per_s:,.1f}))"]
    else:
        needed = math.ceil(max_in_flight * offered_per_s / knee_per_s)
        options = [
            f"a client cap of about {needed:,} in flight ({max_in_flight:,} carry about {knee_per_s:,.1f} req/s), "
            "with the replicas to hold them"
        ]
    if sc.tp * 2 <= hw.gpus_per_node:
        options.append(f"a larger tensor-parallel size (--tp {sc.tp * 2})")
    if "fp8" not in sc.kv_cache_dtype:
        options.append("an fp8 KV cache (--kv-cache-dtype fp8)")
    return tuple(options)


def overload_warning(
    offered_per_s: float | None,
    knee_per_s: float | None,
    reason: str | None,
    options: tuple[str, ...],
    max_in_flight: int | None = None,
) -> str:
    """The one warning both faces print: 'Overloaded: 60.0 req/s offered, this replica sustains about 22.6
    req/s. ... To carry the load: 3 replicas (ceil(60.0 / 22.6)), or ...'. ``max_in_flight``: the client's cap on
    requests in flight, behind which the queue grows instead (and outside the latencies)."""
    if offered_per_s is not None and knee_per_s is not None and offered_per_s > knee_per_s:
        head = f"Overloaded: {offered_per_s:,.1f} req/s offered, this replica sustains about {knee_per_s:,.1f} req/s"
    else:
        head = f"Overloaded: {reason}"
    if max_in_flight is None:
        text = head + ". The queue grows for as long as the load lasts, so the percentiles depend on the run's length."
    else:
        text = (
            head + f" at most {max_in_flight:,} in flight. The requests beyond them wait at the client, and that "
            "wait, which grows for as long as the load lasts, is not in the latencies (they count from the send)."
        )
    if options:
        text += " To carry the load: " + ", or ".join(options) + "."
    return text
