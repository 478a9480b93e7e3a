"""Replica: one planned deployment (model, card, Scenario) served by the simulator.

The bridge between the planner's static estimates and the serving simulator. For one replica of
``sc`` (tp x pp GPUs) it reads the engine limits vLLM would start with from the memory plan
(``plan_memory``: KV blocks, block size, max_num_seqs, max_num_batched_tokens, max_model_len,
chunked prefill), times every engine step with the planner's own roofline
(``StepTimeModel``: calibrated factors when the card has them, else the fitted defaults, or a
pure bound), and runs ``simulate``. The numbers it returns are simulated, and say from what:
``step_time_kind`` is "estimate", "calibrated" or "bound" like the latency model behind them.

Each result also carries the replica's sustainable rate for the workload's shape (its knee,
``planner.serve.saturation``) and whether the offered rate is above it or the run's queue grew
(``overloaded``, with the reason and what would carry the load), so a rate past the knee is never
shown as plain percentiles.

With ``sc.speculative`` the steps are timed by ``SpeculativeStepCost``: a pure-decode step is the
speculative step of ``planner.estimate.speculative`` (draft + verification of k + 1 tokens per
sequence, the same functions the ``latency`` estimate calls), and the simulator advances every
decoding request by the expected accepted tokens per step (``planner.serve.simulate``); the result
carries the estimate's ``speculative`` block at the run's mean decode batch for comparison.

With attention data parallelism (``sc.data_parallel_size`` > 1) a replica is dp engines that step together
(every MoE layer serves all of their tokens): the simulator runs DP rank 0 with every dp-th request (vLLM's DP
load balancer spreads requests over the ranks; round robin here, a closed loop's concurrency split evenly), each
step timed by ``StepTimeModel`` with the MoE layers' dispatch over all ranks (the others assumed as busy), and
the replica's throughput and knee are dp times the rank's; latencies are rank 0's.

With images (``--images-per-request`` / ``--image-size``, or a workload file's classes with ``images_per_request`` /
``image_size``), ``request_images`` gives each request its images' prompt tokens (``planner.estimate.multimodal``)
and the vision encoder's seconds per image (``planner.estimate.multimodal.encoder_seconds``, the ops and binding of
the latency estimate's prefill roofline), and the simulator charges them in the step that schedules each image's
first token (``planner.serve.simulate``); the memory plan counts the encoder's weights and cache. The knee's
full-batch run gives its requests the same images (``planner.serve.saturation``, ``prepare``), for one stream; for
request classes with images it is not computed (that run keeps no classes), and the overload verdict is the
queue's growth.

``static_vs_continuous`` runs the same requests twice, once with vLLM's continuous batching and
once with static batches, to show what continuous batching buys on that workload.
``length_distribution`` turns the faces' "mean and spread" inputs into a workload length spec.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.errors import ScenarioError
from planner.estimate import multimodal
from planner.estimate.latency import StepTimeModel
from planner.estimate.memory import MemoryPlan, plan_memory
from planner.estimate.roofline import PredictionKind, engine_of
from planner.estimate.speculative import (
    SpeculativeEstimate,
    SpeculativeStepModel,
    estimate_speculation,
    speculative_step_model,
)
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.serve.saturation import (
    Prepare,
    Saturation,
    carry_load_options,
    offered_rate_per_s,
    overload_verdict,
    queue_growth,
    replica_saturation,
)
from planner.serve.simulate import (
    DecodeSpeculation,
    EngineRun,
    SchedulerConfig,
    SimulationResult,
    run_engine,
    summarize,
)
from planner.serve.workload import (
    FixedLength,
    LognormalLength,
    NormalLength,
    RequestSet,
    TraceArrivals,
    UniformLength,
    Workload,
    generate_requests,
    rank_share,
)

_SPEC = ConfigDict(frozen=True, extra="forbid")


LENGTH_DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")
LengthSpec = FixedLength | UniformLength | NormalLength | LognormalLength


def length_distribution(kind: str, mean_tokens: float, std_tokens: float = 0.0, name: str = "length") -> LengthSpec:
    """A request-length distribution from its mean and standard deviation, in tokens.

    fixed: every request ``mean_tokens`` long (a whole number, no spread); uniform: whole numbers in
    mean +- sqrt(3) x std (that range has the given std); normal and lognormal: the given mean and
    std (rounded, clipped to >= 1). ``name`` is how the caller calls the input, for the message.
    Example: uniform, mean 512, std 100 -> 339 to 685 tokens.
    """
    if kind not in LENGTH_DISTRIBUTIONS:
        raise ScenarioError(
            f"unknown length distribution {kind!r}.", hint=f"Use one of {', '.join(LENGTH_DISTRIBUTIONS)}."
        )
    if kind == "fixed":
        if std_tokens:
            raise ScenarioError(
                f"{name} spread {std_tokens:g} needs a length distribution, but it is fixed.",
                hint="Pick lognormal (or uniform, normal), or set the spread to 0.",
            )
        if mean_tokens < 1 or mean_tokens != int(mean_tokens):
            raise ScenarioError(
                f"{name} {mean_tokens:g}: a fixed length is a whole number of tokens >= 1.",
                hint=f"Use e.g. {max(1, round(mean_tokens))}.",
            )
        return FixedLength(tokens=int(mean_tokens))
    if not mean_tokens > 0 or std_tokens < 0:
        raise ScenarioError(
            f"{name} mean {mean_tokens:g} with spread {std_tokens:g}: the mean must be > 0 and the spread >= 0.",
            hint="For example a mean of 512 tokens and a spread of 128.",
        )
    if kind == "uniform":
        half = math.sqrt(3.0) * std_tokens
        return UniformLength(
            low_tokens=max(1, round(mean_tokens - half)), high_tokens=max(1, round(mean_tokens + half))
        )
    if kind == "normal":
        return NormalLength(mean_tokens=mean_tokens, std_tokens=std_tokens)
    return LognormalLength(mean_tokens=mean_tokens, std_tokens=std_tokens)


class ServingResult(SimulationResult):
    """A simulated replica of a planned deployment: the simulator's metrics, labelled with their source.

    Every field of ``SimulationResult`` (TTFT, TPOT, ITL, E2E as ``vllm bench serve`` defines them;
    throughput; preemptions; timeline) plus what produced them. All numbers are per replica.
    """

    step_time_kind: PredictionKind = Field(
        description="What timed each step: 'estimate' (roofline with factors fitted to public "
        "measurements), 'calibrated' (factors measured on this card) or 'bound' (pure roofline, "
        "no overheads: a lower bound on latency)."
    )
    label: str = Field(description="One-line label for the numbers, e.g. 'simulated (estimate step times)'.")
    model_name: str = Field(description="Model the replica serves (repo id, catalog name or path).")
    gpu_name: str = Field(description="Card of the replica, as its profile names it.")
    gpus_per_replica: int = Field(description="GPUs of one replica: tp x pp (x data-parallel ranks), a count.")
    scheduler: SchedulerConfig = Field(description="Engine limits the replica ran with (from the memory plan).")
    memory_verdict: str = Field(description="The memory plan's one-line verdict for this scenario.")
    offered_requests_per_s: float | None = Field(
        None,
        description="Open-loop rate offered: the Poisson rate or a trace's mean rate, in requests per second; "
        "None in a closed loop (its load follows the replica).",
    )
    max_in_flight: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The client's cap on requests in flight with a Poisson rate (vllm bench serve --max-concurrency "
        "with --request-rate), for the whole deployment; absent without one.",
    )
    saturation_requests_per_s: float | None = Field(
        None,
        description="Sustainable rate of this replica for the workload's shape (the knee): its throughput kept "
        "at full batch (or as full as the client's cap, max_in_flight, lets it be), in requests per second; above it "
        "the queue grows without bound (planner.serve.saturation). None when not computed or unknown.",
    )
    overloaded: bool | None = Field(
        None,
        description="The offered rate is above the knee, or the run's queue grew (overload_reason says "
        "which); its percentiles then depend on how long the load lasts. None when neither could be judged.",
    )
    overload_reason: str | None = Field(
        None,
        description="Why the run is overloaded, with the numbers (rate above the knee, queue growth or "
        "both); None when it is not.",
    )
    overload_options: tuple[str, ...] = Field(
        (),
        description="What would carry the offered load: ceil(rate / knee) replicas, a larger TP, an fp8 KV "
        "cache; empty when not overloaded by rate.",
    )
    data_parallel_ranks: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="With --data-parallel-size: the DP ranks (engines) of the replica; the run simulated rank 0 with "
        "every dp-th request: its latencies and counts are rank 0's, throughput and knee dp x rank 0's. None: one "
        "engine.",
    )
    image_tokens_per_request: float | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="With images: the prompt tokens of each request's images, mean over the requests (they are in "
        "the prompts, the KV cache and the prefill); absent without images.",
    )
    encoder_seconds: float | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="With images: the vision encoder's seconds for one request's images (one pass; a preempted "
        "request encodes them again), mean over the requests, inside its TTFT; absent without images.",
    )
    speculative: SpeculativeEstimate | None = Field(
        None,
        exclude_if=lambda v: v is None,  # a plain dump stays what it was before speculation existed
        description="Speculative decoding as the latency estimate costs it, at the run's mean decode batch "
        "(time-weighted, rounded) and mean context (input + output / 2): tokens per step, draft and verify "
        "seconds, estimated TPOT and break-even batch; absent when speculation is off.",
    )


class StaticVsContinuous(BaseModel):
    """The same requests served with continuous batching and with static batches."""

    model_config = _SPEC

    continuous: ServingResult = Field(description="vLLM V1 continuous batching.")
    static: ServingResult = Field(
        description="Static batching: up to max_num_seqs requests per batch, prefill, decode until the "
        "longest is done, nothing admitted meanwhile."
    )
    throughput_gain: float | None = Field(
        description="Continuous over static output throughput (tokens/s ratio, unitless); None when "
        "either served nothing."
    )
    ttft_p50_ratio: float | None = Field(
        description="Static over continuous median TTFT (unitless); None when unknown."
    )


def scheduler_config(
    plan: MemoryPlan, sc: Scenario, mode: Literal["continuous", "static"] = "continuous"
) -> SchedulerConfig:
    """The engine limits vLLM would start with, read from the memory plan (not re-derived)."""
    res = plan.resolved
    return SchedulerConfig(
        num_gpu_blocks=plan.num_gpu_blocks,
        block_size_tokens=plan.block_tokens,
        kv_block_groups=plan.kv_block_groups,
        max_num_seqs=res.max_num_seqs,
        max_num_batched_tokens=res.max_num_batched_tokens,
        enable_chunked_prefill=res.enable_chunked_prefill,
        max_model_len=res.max_model_len,
        mixed_batches=engine_of(sc).mixes_batches(res.enable_chunked_prefill),
        long_prompts=engine_of(sc).long_prompts,
        output_reserve=engine_of(sc).output_reserve,
        scheduling_policy=sc.scheduling_policy,
        prefix_caching=engine_of(sc).prefix_caching_default,
        mode=mode,
    )


def planned_replica(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, images: bool = False
) -> tuple[MemoryPlan, SchedulerConfig]:
    """Memory plan and scheduler limits of one replica; ScenarioError when vLLM would not start.

    ``images``: the caller gives the requests their images (``simulate_scenario``); the other callers (the
    SLO search, the rate sweep, disaggregated pools) draw text-only requests and refuse a scenario with images."""
    if sc.workload.images_per_request and not images:  # its requests would lack the images' tokens and encoder
        raise ScenarioError(
            f"--images-per-request {sc.workload.images_per_request}: only the one-replica simulation (simulate, "
            "its --budget-sweep and --compare-pools) serves images; this search or layout does not model them yet.",
            hint="Drop --images-per-request here, or simulate the replica: python -m planner simulate MODEL "
            "--images-per-request N --image-size WxH --qps R.",
        )
    plan = plan_memory(model, hw, sc, suggest=False)
    if not plan.fits or plan.num_gpu_blocks < 1:
        hint = "Try a larger --tp, --weight-dtype fp8, --kv-cache-dtype fp8 or a smaller --max-model-len."
        full = plan_memory(model, hw, sc, suggest=True)
        if full.suggestions:
            hint = "Options: " + "; ".join(full.suggestions) + "."
        raise ScenarioError(f"{model.name} on {sc.tp * sc.pp} x {hw.name}: {plan.reason}.", hint=hint)
    return plan, scheduler_config(plan, sc)


class SpeculativeStepCost:
    """Seconds of one engine step with speculative decoding, for the simulator (``StepCost`` with ``speculation``).

    decode_seqs each verify k + 1 tokens and decode_kv_tokens is the sum of their contexts with those
    k + 1 included (what ``planner.serve.simulate`` passes when ``speculation`` is set).

    - pure decode: ``SpeculativeStepModel.step_seconds(batch, mean context)``, the latency estimate's own
      speculative step (draft + verify + host work);
    - prefill only: the target's step (``StepTimeModel.step_seconds``), as without speculation;
    - mixed: the target's mixed step with one-token decodes, plus what speculation adds to a pure-decode
      step of the same batch (speculative step - plain decode step, never below 0). The verification's
      extra tokens are thus costed at the pure-decode step's graph mode, not re-bound inside the mixed
      step: an approximation, for steps that are few at low load and share the batch's weights anyway.

    Speed: the speculative step is evaluated for a batch at CONTEXT_BLOCK whole contexts at once (one
    vectorized call, ~1 ms, instead of ~0.4 ms per step) and kept; a fractional mean context is
    interpolated between its two whole neighbours (the step is piecewise linear in the context).
    """

    CONTEXT_BLOCK = 256
    MAX_BLOCKS = 4096

    def __init__(self, spec: SpeculativeStepModel):
        self.spec = spec
        self.target = spec.target
        self.eff, self.kind = spec.target.eff, spec.target.kind
        self.speculation = DecodeSpeculation(
            num_speculative_tokens=spec.k, tokens_per_step=min(spec.tokens_per_step, spec.k + 1.0)
        )
        self._blocks: dict[tuple[int, int], np.ndarray] = {}

    def speculative_seconds(self, decode_seqs: int, context: float) -> float:
        """The pure-decode speculative step of ``decode_seqs`` sequences of ``context`` tokens (k + 1 new):
        ``SpeculativeStepModel.step_seconds``, exact at whole contexts, interpolated between them."""
        whole = math.floor(context)
        start = whole - whole % self.CONTEXT_BLOCK
        key = (int(decode_seqs), start)
        seconds = self._blocks.get(key)
        if seconds is None:
            if len(self._blocks) >= self.MAX_BLOCKS:
                self._blocks.clear()
            contexts = np.arange(start, start + self.CONTEXT_BLOCK + 1, dtype=float)
            seconds = self._blocks[key] = self.spec.step_seconds(np.full_like(contexts, decode_seqs), contexts)
        i = whole - start
        low = float(seconds[i])
        return low if context == whole else low + (context - whole) * (float(seconds[i + 1]) - low)

    def step_seconds(
        self,
        *,
        prefill_tokens: int,
        prefill_attention_pairs: float,
        decode_seqs: int,
        decode_kv_tokens: int,
    ) -> float:
        """Duration of one step, in seconds (arguments as ``planner.serve.simulate.StepCost``)."""
        if not decode_seqs:
            return self.target.step_seconds(
                prefill_tokens=prefill_tokens,
                prefill_attention_pairs=prefill_attention_pairs,
                decode_seqs=0,
                decode_kv_tokens=0,
            )
        context = decode_kv_tokens / decode_seqs
        if not prefill_tokens:
            return self.speculative_seconds(decode_seqs, context)
        drafts = self.spec.k  # the plain decode attends one new token, not k + 1
        plain = self.target.decode_seconds(float(decode_seqs), context - drafts)
        extra = max(self.speculative_seconds(decode_seqs, context) - float(plain), 0.0)
        mixed = self.target.step_seconds(
            prefill_tokens=prefill_tokens,
            prefill_attention_pairs=prefill_attention_pairs,
            decode_seqs=decode_seqs,
            decode_kv_tokens=decode_kv_tokens - decode_seqs * drafts,
        )
        return mixed + extra


def replica_step_cost(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    efficiency: Efficiency | None = None,
    draft_model: ModelSpec | None = None,
    step_model: StepTimeModel | None = None,
) -> StepTimeModel | SpeculativeStepCost:
    """What times the replica's steps: ``step_model`` (or a new ``StepTimeModel``), wrapped in a
    ``SpeculativeStepCost`` when ``sc.speculative`` is set (``draft_model``: the draft's spec, method draft)."""
    step = step_model or StepTimeModel(model, hw, sc, efficiency)
    if sc.speculative is None:
        return step
    return SpeculativeStepCost(speculative_step_model(model, hw, sc, step.eff, draft_model, target=step))


def image_groups(sc: Scenario, workload: Workload) -> list[tuple[int, tuple[int, int] | None]]:
    """(images per request, image size) of each request class (``workload.classes``), or of the one stream
    (``sc.workload``: --images-per-request, --image-size). Images given both ways are refused."""
    if not workload.classes:
        return [(sc.workload.images_per_request, sc.workload.image_size)]
    if sc.workload.images_per_request:
        raise ScenarioError(
            f"--images-per-request {sc.workload.images_per_request} beside request classes: each class gives its own "
            "images.",
            hint="Drop --images-per-request and --image-size, and set images_per_request / image_size in the classes.",
        )
    return [(c.images_per_request, c.image_size) for c in workload.classes]


def scenario_with_images(sc: Scenario, groups: list[tuple[int, tuple[int, int] | None]]) -> Scenario:
    """``sc`` as the memory plan must see it when request classes carry images (``groups``: ``image_groups``): the
    most images of any class (and that class's size), so the encoder's weights and cache are counted; ``sc`` itself
    when it has its images already (one stream) or no request has any."""
    most = max(groups, key=lambda g: g[0])
    if sc.workload.images_per_request or not most[0]:
        return sc
    shape = sc.workload.model_copy(update={"images_per_request": most[0], "image_size": most[1]})
    return sc.model_copy(update={"workload": shape})


def request_images(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    groups: list[tuple[int, tuple[int, int] | None]],
    requests: RequestSet,
    efficiency: Efficiency | None = None,
) -> RequestSet:
    """``requests`` with their images: each request's count, its images' tokens added to its prompt
    (``multimodal.images``: tokens per image from the encoder's config and the image size) and the encoder's
    seconds per image (``multimodal.encoder_seconds`` of the request's images in one batch, over their count: a
    request's images cost what the latency estimate's ``encoder_seconds`` says at batch 1). Unchanged without
    images; refused with the reason where the model cannot take them (a text-only model, a --tp that does not
    divide the ViT's heads, no --image-size for a dynamic-resolution encoder). ``groups``: (images, size) of each
    request class, or of the one stream (``image_groups``)."""
    if not any(n for n, _ in groups):
        return requests
    count, tokens, seconds = [], [], []
    for n, size in groups:
        shape = sc.workload.model_copy(update={"images_per_request": n, "image_size": size})
        at = sc.model_copy(update={"workload": shape})
        imgs = multimodal.images(model, at)  # None for a class without images; else them, or the refusal
        count.append(n)
        tokens.append(imgs.tokens_per_image if imgs else 1)
        seconds.append(multimodal.encoder_seconds(model, hw, at, n, efficiency) / n if imgs else 0.0)
    group = np.zeros(len(requests), dtype=np.int64) if requests.class_id is None else requests.class_id
    images = np.asarray(count, dtype=np.int64)[group]
    per_image = np.asarray(tokens, dtype=np.int64)[group]
    return replace(
        requests,
        input_tokens=requests.input_tokens + images * per_image,
        images=images,
        image_tokens=per_image,
        image_seconds=np.asarray(seconds, dtype=np.float64)[group],
    )


def image_fields(requests: RequestSet) -> dict[str, float]:
    """ServingResult's image fields: the mean image tokens and encoder seconds per request (none without images)."""
    if requests.images is None or requests.image_tokens is None or requests.image_seconds is None:
        return {}
    return {
        "image_tokens_per_request": float(np.mean(requests.images * requests.image_tokens)),
        "encoder_seconds": float(np.mean(requests.images * requests.image_seconds)),
    }


def mean_decode_batch(run: EngineRun) -> int:
    """Decoding requests per step, time-weighted over the steps that decode, rounded (at least 1)."""
    decoding = run.decode_seqs > 0
    seconds = run.step_seconds[decoding]
    if not decoding.any() or seconds.sum() <= 0:
        return 1
    return max(1, round(float(np.dot(run.decode_seqs[decoding], seconds) / seconds.sum())))


def speculative_at_run(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    run: EngineRun,
    step: SpeculativeStepCost,
    draft_model: ModelSpec | None,
) -> SpeculativeEstimate:
    """The latency estimate's speculative block at the run's mean decode batch and mean context (the served
    requests' mean input + mean output / 2, as ``latency`` takes it)."""
    served = ~run.rejected
    context = 1
    if served.any():
        context = max(1, round(float(np.mean(run.input_tokens[served]) + np.mean(run.output_tokens[served]) / 2)))
    batch = mean_decode_batch(run)
    return estimate_speculation(model, hw, sc, batch, context, step.eff, draft_model, target=step.target)


def simulate_scenario(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    efficiency: Efficiency | None = None,
    *,
    mode: Literal["continuous", "static"] = "continuous",
    step_model: StepTimeModel | None = None,
    saturation: bool = True,
    draft_model: ModelSpec | None = None,
) -> ServingResult:
    """Simulate ``workload`` on one replica of ``sc``; raises ScenarioError if the plan does not start.

    ``step_model`` reuses a ``StepTimeModel`` built for this model, card and scenario (the SLO
    search builds each once); by default one is built here with ``efficiency`` (None: the card's
    calibration when it has one, else the fitted defaults). With ``saturation`` the replica's knee
    for the workload's shape is found too (one more simulation at full batch, 0.1-0.5 s for an 8B
    model) and the run is judged overloaded or not; without it those fields are None.
    With ``sc.speculative`` the steps are speculative (``SpeculativeStepCost``; ``draft_model`` is the
    draft's spec for method draft) and ``speculative`` carries the estimate at the run's mean batch.
    """
    groups = image_groups(sc, workload)
    sc = scenario_with_images(sc, groups)
    plan, scheduler = planned_replica(model, hw, sc, images=True)
    if mode != "continuous":
        scheduler = scheduler.model_copy(update={"mode": mode})
    step = replica_step_cost(model, hw, sc, efficiency, draft_model, step_model)
    dp = sc.data_parallel_size
    requests = dp_rank_requests(request_images(model, hw, sc, groups, generate_requests(workload), step.eff), dp)
    run = run_engine(requests, scheduler, step)
    result = label_result(
        summarize(run, step_cost_model=type(step).__name__), step, model, hw, sc, scheduler, plan.reason
    )
    if requests.images is not None:
        result = result.model_copy(update=image_fields(requests))
    if dp > 1:
        result = dp_replica_result(result, dp)
    if isinstance(step, SpeculativeStepCost):
        result = result.model_copy(update={"speculative": speculative_at_run(model, hw, sc, run, step, draft_model)})
    offered = offered_rate_per_s(workload, run)
    cap = workload.max_in_flight
    result = result.model_copy(update={"max_in_flight": cap})
    if not saturation:
        return result.model_copy(update={"offered_requests_per_s": offered})
    if requests.images is not None and workload.classes:  # a class mix's full-batch run keeps no classes to give
        overloaded, reason = overload_verdict(offered, None, queue_growth(run))  # images to: judge by the queue
        return result.model_copy(
            update={"offered_requests_per_s": offered, "overloaded": overloaded, "overload_reason": reason}
        )
    prepare = None
    if requests.images is not None:  # one stream: every full-batch request carries the same images

        def prepare(drawn: RequestSet) -> RequestSet:
            return request_images(model, hw, sc, groups, drawn, step.eff)

    # a DP rank's knee is under its share of the client's cap (``dp_rank_requests``)
    rank_workload = workload.with_max_in_flight(rank_share(cap, dp)) if dp > 1 else workload
    knee = kept_saturation(model, hw, sc, rank_workload, scheduler, step, draft_model, prepare).requests_per_s
    if knee is not None and dp > 1:
        knee *= dp  # every DP rank carries its share at the rank's knee
    overloaded, reason = overload_verdict(offered, knee, queue_growth(run))
    options = (
        carry_load_options(offered, knee, sc, hw, cap)
        if offered is not None and knee is not None and offered > knee
        else ()
    )
    return result.model_copy(
        update={
            "offered_requests_per_s": offered,
            "saturation_requests_per_s": knee,
            "overloaded": overloaded,
            "overload_reason": reason,
            "overload_options": options,
        }
    )


def dp_rank_requests(requests: RequestSet, dp: int) -> RequestSet:
    """DP rank 0's share of ``requests`` over ``dp`` ranks: every dp-th request in arrival order (round robin), a
    closed loop's concurrency and an open loop's cap divided evenly (at least 1). ``dp`` 1 returns ``requests``."""
    if dp <= 1:
        return requests
    return replace(
        requests.take(slice(None, None, dp)),
        concurrency=rank_share(requests.concurrency, dp),
        max_in_flight=rank_share(requests.max_in_flight, dp),
    )


def dp_replica_result(result: ServingResult, dp: int) -> ServingResult:
    """The replica of ``dp`` DP ranks from rank 0's run: throughput x dp, latencies rank 0's, labelled."""

    def times(v: float | None) -> float | None:
        return None if v is None else v * dp

    return result.model_copy(
        update={
            "throughput_tokens_per_s": times(result.throughput_tokens_per_s),
            "total_throughput_tokens_per_s": times(result.total_throughput_tokens_per_s),
            "requests_per_s": times(result.requests_per_s),
            "data_parallel_ranks": dp,
            "label": f"{result.label}, DP rank 0 of {dp} (every {dp}-th request; throughput x {dp})",
        }
    )


KNEES_KEPT = 64
"""Knees ``simulate_scenario`` keeps, least recently used dropped first (a few hundred bytes each)."""
_KNEES: OrderedDict[bytes, Saturation] = OrderedDict()
_KNEES_LOCK = threading.Lock()  # a server (the app) simulates from several threads


def kept_saturation(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    scheduler: SchedulerConfig,
    step: StepTimeModel | SpeculativeStepCost,
    draft_model: ModelSpec | None = None,
    prepare: Prepare = None,
) -> Saturation:
    """``replica_saturation`` of this replica, computed once per workload shape and kept (``KNEES_KEPT``).
    ``prepare`` gives the full-batch requests their images (``request_images``; the scenario, part of the key,
    says which).

    The knee does not depend on the request rate or the request count: ``workload_lengths`` draws its
    requests at 1 req/s, ``SATURATION_WAVES x max_num_seqs`` of them, whatever the workload's arrivals (but a
    trace's, whose lengths it repeats). So the key is everything the full-batch run reads except those: the
    JSON of the model, card, scenario, the workload with its Poisson or closed-loop arrivals and count set to
    one value, the scheduler limits, the step's efficiency and kind, and the draft. A new rate of the same
    shape (the Simulate page after a new rate) costs no second full-batch run; the value is the one a
    fresh ``replica_saturation`` returns, number for number.
    """
    shape = workload if isinstance(workload.arrivals, TraceArrivals) else workload.at_unit_rate(1)
    parts = [m.model_dump_json() for m in (model, hw, sc, shape, scheduler, step.eff)]
    parts += [type(step).__name__, draft_model.model_dump_json() if draft_model is not None else ""]
    key = hashlib.blake2b("\n".join(parts).encode(), digest_size=20).digest()
    with _KNEES_LOCK:
        kept = _KNEES.get(key)
        if kept is not None:
            _KNEES.move_to_end(key)
            return kept
    knee = replica_saturation(workload, scheduler, step, prepare)
    with _KNEES_LOCK:
        _KNEES[key] = knee
        while len(_KNEES) > KNEES_KEPT:
            _KNEES.popitem(last=False)
    return knee


def saturation_requests_per_s(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    step_model: StepTimeModel | None = None,
    efficiency: Efficiency | None = None,
    draft_model: ModelSpec | None = None,
) -> float | None:
    """The knee of one replica of ``sc`` for ``workload``'s shape (lengths, prefix-cache hits), in
    requests/s: the throughput it sustains at full batch (``planner.serve.saturation``); None when
    unknown. Raises ScenarioError when the scenario does not start."""
    _, scheduler = planned_replica(model, hw, sc)
    step = replica_step_cost(model, hw, sc, efficiency, draft_model, step_model)
    return replica_saturation(workload, scheduler, step).requests_per_s


def label_result(
    result: SimulationResult,
    step: StepTimeModel | SpeculativeStepCost,
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    scheduler: SchedulerConfig,
    memory_verdict: str,
) -> ServingResult:
    """Attach what produced a simulation's numbers (step-time kind, deployment, limits), and add the
    API server's per-request time (``frontend_seconds_per_request``) to TTFT and end-to-end latency."""
    fields = {name: getattr(result, name) for name in SimulationResult.model_fields}
    front = step.eff.frontend_seconds_per_request  # the API server's time: outside the engine, per request
    for name in ("ttft_seconds", "e2e_seconds"):
        stats = fields[name]
        if stats is not None and front:
            fields[name] = stats.model_copy(
                update={k: getattr(stats, k) + front for k in ("mean", "p50", "p90", "p99")}
            )
    return ServingResult(
        **fields,
        step_time_kind=step.kind,
        label=f"simulated ({step.kind} step times)",
        model_name=model.name,
        gpu_name=hw.name,
        gpus_per_replica=sc.gpus_per_replica,
        scheduler=scheduler,
        memory_verdict=memory_verdict,
    )


def static_vs_continuous(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    efficiency: Efficiency | None = None,
) -> StaticVsContinuous:
    """Serve the same requests (same seed) with continuous and with static batching.

    Static batching pads every batch to its longest answer and admits nothing until the batch
    is done, so with varied output lengths continuous batching finishes the same work sooner.
    """
    step = StepTimeModel(model, hw, sc, efficiency)
    cont = simulate_scenario(model, hw, sc, workload, mode="continuous", step_model=step)
    stat = simulate_scenario(model, hw, sc, workload, mode="static", step_model=step)
    gain = None
    if cont.throughput_tokens_per_s and stat.throughput_tokens_per_s:
        gain = cont.throughput_tokens_per_s / stat.throughput_tokens_per_s
    ttft_ratio = None
    if cont.ttft_seconds and stat.ttft_seconds and cont.ttft_seconds.p50 > 0:
        ttft_ratio = stat.ttft_seconds.p50 / cont.ttft_seconds.p50
    return StaticVsContinuous(continuous=cont, static=stat, throughput_gain=gain, ttft_p50_ratio=ttft_ratio)
