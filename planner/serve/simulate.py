"""Simulation: how one vLLM-V1-style replica serves a workload over time.

A discrete-event simulation of one engine with continuous batching. Each engine step the
scheduler picks a token mix, a ``StepCost`` says how many seconds that mix takes, and the clock
advances by it. The scheduling rules follow ``vllm/v1/core/sched/scheduler.py`` (V1,
FCFS policy):

1. Running requests first, in admission order: a decoding request gets 1 token; a request still
   in prefill gets its next chunk, at most the remaining token budget.
2. A running request that needs a new KV block when none is free preempts the most recently
   admitted running request (recompute: its blocks are freed and it returns to the *front* of the
   waiting queue; later it re-prefills prompt + generated tokens), repeatedly, until the block is
   free or it has preempted itself.
3. Only in a step without preemptions: waiting requests, FCFS, while the token budget, the
   ``max_num_seqs`` limit and free KV blocks allow; the first request that does not fit stops
   admission (no skipping ahead).

A request holds cdiv(computed_tokens, block_size) blocks, in each KV-cache group when the model's layers form
several (``SchedulerConfig.kv_block_groups``, the memory plan's: a sliding-window group holds at most its window's
blocks, a recurrent-state group one block per request whatever its length). A step that completes a request's
(re)prefill emits one token; each decode step emits one more; so a request with ``n`` output
tokens leaves after its prefill plus ``n - 1`` decode steps, and its last token's KV is never
written (its peak is cdiv(prompt + n - 1, block_size) blocks).

Speculative decoding (``DecodeSpeculation``, carried by a step cost that prices speculative steps
as its ``speculation`` attribute): each decode step verifies k + 1 tokens per decoding request
(they take k + 1 tokens of the step's budget) and every decoding request gains the *expected*
accepted tokens, deterministically: a global clock G(s) = floor(E x s) (E = (1 - a^(k+1)) /
(1 - a), ``planner.estimate.speculative``) and every decoding request gains G(s + 1) - G(s) tokens
in step s, all delivered at the end of the step (one streamed chunk: ITL is the step, as ``vllm
bench serve`` times chunks). During step s a decoding request holds KV for its computed tokens plus
the k + 1 it verifies; a request finishing its (re)prefill reserves the slots its first
verification needs (vLLM's lookahead slots), so its blocks follow the same clock. With k = 0 and
E = 1 (``PLAIN_DECODING``) G(s) = s and every rule above is the plain one. Left out: vLLM defers
decodes whose k + 1 tokens overflow the budget (here they all run; prefills get what is left), the
per-request randomness of acceptance, and the draft's own KV blocks.

Speed: decoding requests all advance the same tokens per step, so the loop never touches them one by
one. A decoding request keeps ``c0 = computed_tokens - G(step_index)``; from it follow, in O(1) per
step, the step at which it finishes, whether it needs a new block this step (a count per
``c0 mod block_size``) and the sum of context lengths (``sum(c0) + D * G(step)``). Per-request work
happens only on admission, completion and preemption: the step loop (``_Continuous.run``) keeps the
clock in locals and calls a named phase (preemption, prefill scheduling, finishing, advancing prefills)
only in a step that has that work.

Images (``RequestSet.images``, set by ``planner.serve.replica.request_images``): a request's images sit at the start
of its prompt, image i on prompt tokens [i x t, (i + 1) x t) (t: its tokens per image, part of ``input_tokens``), and
the vision encoder runs for an image in the step whose chunk reaches the image's first token, its seconds
(``image_seconds``) added to that step. This is vLLM V1's rule (``Scheduler._try_schedule_encoder_inputs``,
``vllm/v1/core/sched/scheduler.py``: an encoder input is scheduled when its placeholder tokens overlap the step's
[num_computed_tokens, num_computed_tokens + num_new_tokens) and it is not already in the encoder cache; the model
runner encodes it before that step's forward), and a preempted request's encoder outputs are freed with its KV
(``encoder_cache_manager.free(preempted_req)``, num_computed_tokens = 0), so its re-prefill encodes them again.
Left out: the encoder budget (``max_num_encoder_input_tokens``, by default max_num_batched_tokens) cutting a chunk
before an image that would overflow it, which binds only when a step's images hold more tokens than the step's
token budget; the engine steps are timed as the encoder's seconds plus the language model's (the encoder runs
first on the same GPU). Static batching does not take images.

Metrics are those of ``vllm bench serve`` (``vllm/benchmarks/serve.py``): TTFT = first token time
- arrival (queueing included); TPOT = (E2E - TTFT) / (output_tokens - 1) per request with more
than one output token; ITL = every gap between consecutive tokens of a request, pooled;
E2E = finish - arrival. Tokens count as delivered at the end of the step that produced them
(no detokenisation or network time).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.engine import LongPrompts, OutputReserve
from planner.errors import ScenarioError
from planner.model.kv import KVBlockGroups
from planner.serve.workload import RequestSet, Workload, generate_requests

_SPEC = ConfigDict(frozen=True, extra="forbid")
TIMELINE_MAX_POINTS = 2000


class StepCost(Protocol):
    """Seconds one engine step takes for a given token mix (the latency model's job)."""

    def step_seconds(
        self,
        *,
        prefill_tokens: int,
        prefill_attention_pairs: float,
        decode_seqs: int,
        decode_kv_tokens: int,
    ) -> float:
        """Duration of one step, in seconds.

        prefill_tokens: prompt-chunk tokens scheduled this step.
        prefill_attention_pairs: sum over those chunks of c * (p + (c + 1) / 2), the causal
            (query, key) pairs of a chunk of c tokens after p tokens already in the KV cache.
        decode_seqs: requests generating one token this step.
        decode_kv_tokens: sum of those requests' context lengths (tokens attended, the new one included).

        A step cost that prices speculative steps also has ``speculation`` (a ``DecodeSpeculation``):
        decode_seqs then each verify k + 1 tokens and decode_kv_tokens counts those k + 1 too.
        """
        ...


class DecodeSpeculation(BaseModel):
    """How many tokens a decode step verifies and yields per decoding request (speculative decoding).

    The engine advances every decoding request along one clock G(s) = floor(E x s): step s gives each
    of them G(s + 1) - G(s) tokens (E on average, exactly E x steps over a run, the same for all), and
    verifies k + 1 tokens each. Example: E = 2.533 (a = 0.7, k = 3): G = 0, 2, 5, 7, 10, ... so steps
    give 2, 3, 2, 3, ... tokens. ``PLAIN_DECODING`` (k = 0, E = 1) is one token per step.
    """

    model_config = _SPEC
    num_speculative_tokens: int = Field(
        ..., ge=0, description="Draft tokens verified per decoding request per step, k (0: no speculation)."
    )
    tokens_per_step: float = Field(
        ...,
        ge=1,
        allow_inf_nan=False,
        description="Expected tokens a decoding request gains per step, E (1 <= E <= k + 1).",
    )

    @model_validator(mode="after")
    def _at_most_k_plus_one(self) -> DecodeSpeculation:
        k = self.num_speculative_tokens
        if self.tokens_per_step > k + 1:
            raise ScenarioError(
                f"tokens_per_step={self.tokens_per_step:g} exceeds k + 1 = {k + 1} (num_speculative_tokens={k}).",
                hint="A step yields at most the k drafts plus one token of the target's; use E <= k + 1.",
            )
        return self

    @property
    def verified_tokens(self) -> int:
        """k + 1: tokens each decoding request runs through the target per step (and holds KV for)."""
        return self.num_speculative_tokens + 1

    def position(self, step: int) -> int:
        """G(step) = floor(E x step): tokens a request decoding since step 0 has gained by ``step``."""
        return math.floor(self.tokens_per_step * step)

    def first_step_at(self, tokens: int) -> int:
        """The smallest step x with G(x) >= ``tokens`` (the inverse of ``position``, exact on its floats)."""
        if self.tokens_per_step == 1.0:  # plain decoding: G(x) = x
            return tokens
        x = math.ceil(tokens / self.tokens_per_step)
        while self.position(x) < tokens:
            x += 1
        while x > 0 and self.position(x - 1) >= tokens:
            x -= 1
        return x


PLAIN_DECODING = DecodeSpeculation(num_speculative_tokens=0, tokens_per_step=1.0)


class DecodeStepsByKV(Protocol):
    """Seconds of the decode-only steps of one batch size, by the tokens they attend in all (``decode_steps_of``)."""

    def __getitem__(self, kv: int, /) -> float: ...


def decode_steps_of(step_cost: StepCost) -> Callable[[int], DecodeStepsByKV]:
    """``steps = decode_steps_of(cost)(decode_seqs)``; ``steps[kv]``: seconds of a decode-only step of that many
    requests attending kv tokens in all. The step cost's own ``decode_steps`` where it has one
    (``StepTimeModel``'s: what its ``step_seconds`` returns for that mix, kept), else its ``step_seconds``."""
    own = getattr(step_cost, "decode_steps", None)
    if own is not None:
        return own
    return lambda decode_seqs: _StepSecondsByKV(step_cost, decode_seqs)


class _StepSecondsByKV:
    """``step_cost.step_seconds`` of decode-only steps of one batch, by kv (called each time: a step cost
    may count its calls, as the SLO search's recorder does)."""

    __slots__ = ("decode_seqs", "step_seconds")

    def __init__(self, step_cost: StepCost, decode_seqs: int) -> None:
        self.step_seconds, self.decode_seqs = step_cost.step_seconds, decode_seqs

    def __getitem__(self, kv: int) -> float:
        return self.step_seconds(
            prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=self.decode_seqs, decode_kv_tokens=kv
        )


def decode_speculation(step_cost: StepCost) -> DecodeSpeculation:
    """The speculation a step cost prices (its ``speculation`` attribute), else ``PLAIN_DECODING``."""
    speculation = getattr(step_cost, "speculation", None)
    return PLAIN_DECODING if speculation is None else speculation


class LinearStepCost(BaseModel):
    """A step costs a fixed time plus time per token, per attention pair and per KV token read.

    seconds = fixed_seconds
              + per_token_seconds * (prefill_tokens + decode_seqs)       # GEMMs: every token
              + per_attention_pair_seconds * prefill_attention_pairs     # prefill attention FLOPs
              + per_kv_token_seconds * decode_kv_tokens                  # decode attention: KV reads

    It ignores the knee where small batches are weight-bandwidth-bound (fold that into
    ``fixed_seconds``) and any overlap of compute and memory traffic. Example for an 8B model on
    an H100-class card: 8 ms fixed (16 GB of weights at ~2.7 TB/s, plus launch and sampling),
    0.05 ms/token (16 GFLOP/token at ~320 TFLOP/s), 1.3e-12 s/pair (0.5 MFLOP/pair at ~400
    TFLOP/s), 5e-8 s/KV token (128 KiB/token at ~2.7 TB/s).
    """

    model_config = _SPEC
    fixed_seconds: float = Field(8e-3, ge=0, description="Cost of every step, in seconds.")
    per_token_seconds: float = Field(
        5e-5, ge=0, description="Cost per scheduled token (prefill or decode), in seconds."
    )
    per_attention_pair_seconds: float = Field(
        0.0, ge=0, description="Cost per causal (query, key) pair of prefill attention, in seconds."
    )
    per_kv_token_seconds: float = Field(
        0.0, ge=0, description="Cost per context token a decoding request attends to, in seconds."
    )

    def step_seconds(
        self,
        *,
        prefill_tokens: int,
        prefill_attention_pairs: float,
        decode_seqs: int,
        decode_kv_tokens: int,
    ) -> float:
        return (
            self.fixed_seconds
            + self.per_token_seconds * (prefill_tokens + decode_seqs)
            + self.per_attention_pair_seconds * prefill_attention_pairs
            + self.per_kv_token_seconds * decode_kv_tokens
        )


class SchedulerConfig(BaseModel):
    """The engine's batching limits and KV capacity.

    Defaults are those ``vllm serve`` picks on a GPU with >= 70 GiB that is not an A100
    (H100, H200, B200, MI300X): ``EngineArgs.get_batch_defaults`` in ``vllm/engine/arg_utils.py``
    gives max_num_seqs 1024 and max_num_batched_tokens 8192 there (A100 and smaller cards: 256
    and 2048; the offline ``LLM`` class: 16384 / 8192 tokens). Block size 16 is
    ``CacheConfig.DEFAULT_BLOCK_SIZE`` (``vllm/config/cache.py``).
    """

    model_config = _SPEC

    num_gpu_blocks: int = Field(
        ..., ge=1, description="KV cache capacity from the memory plan, in blocks of block_size_tokens."
    )
    block_size_tokens: int = Field(16, ge=1, description="Tokens per KV block (vLLM --block-size).")
    max_num_seqs: int = Field(1024, ge=1, description="Most requests running at once, a count (vLLM --max-num-seqs).")
    max_num_batched_tokens: int = Field(
        8192, ge=1, description="Token budget of one engine step, in tokens (vLLM --max-num-batched-tokens)."
    )
    enable_chunked_prefill: bool = Field(
        True, description="Split long prompts across steps to fit the token budget (vLLM --enable-chunked-prefill)."
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="Longest prompt + output a request may have, in tokens (vLLM --max-model-len); "
        "None: limited only by the KV cache.",
    )
    long_prompts: LongPrompts = Field(
        "refused_at_start",
        description="Without chunked prefill, a max_model_len above the step budget: vLLM refuses to start; "
        "TensorRT-LLM starts and refuses each prompt above it. From the engine profile's long_prompts.",
    )
    mixed_batches: bool = Field(
        True,
        description="Prefill chunks and decodes share a step (vLLM V1, TensorRT-LLM); False: a step that admits "
        "prefills runs only prefills and the decodes wait for the next (SGLang without --enable-mixed-chunk, "
        "vLLM V0 without chunked prefill). From the engine profile's mixed_batches.",
    )
    output_reserve: OutputReserve | None = Field(
        None,
        description="KV the engine holds back at admission for outputs not generated yet (SGLang's new-token "
        "ratio, TensorRT-LLM's GUARANTEED_NO_EVICT); None: vLLM's admission on the prompt's blocks alone. From "
        "the engine profile's output_reserve.",
    )
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "fcfs",
        description="Order of the waiting queue (vLLM --scheduling-policy): 'fcfs' by arrival, a preempted "
        "request back at the front; 'priority' by (request priority, arrival), lower first, a preempted "
        "request back at its place by that key.",
    )
    mode: Literal["continuous", "static"] = Field(
        "continuous",
        description="'continuous': vLLM V1 continuous batching; 'static': take up to max_num_seqs "
        "requests, prefill them, decode until the longest finishes, admit nothing meanwhile.",
    )
    prefix_caching: bool = Field(
        False,
        description="The engine keeps computed KV blocks cached after it frees them (vLLM V1's automatic prefix "
        "caching, SGLang's radix cache): a preempted request's whole blocks wait in the free queue behind those "
        "already free until later allocations evict them, and its re-admission recomputes only what was evicted. From "
        "the engine profile's prefix_caching_default.",
    )
    kv_block_groups: KVBlockGroups | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The KV-cache groups a request draws blocks from when the model's layers are not all of one "
        "kind (the memory plan's, ``KVBlockGroups``): a request of t tokens holds its blocks in every group; None: "
        "one full-attention group, cdiv(t, block_size_tokens) blocks.",
    )

    def request_blocks(self, tokens: int) -> int:
        """Blocks a request holding ``tokens`` tokens occupies, over every KV-cache group."""
        if self.kv_block_groups is not None:
            return self.kv_block_groups.blocks(tokens)
        return -(-tokens // self.block_size_tokens)

    @model_validator(mode="after")
    def _limits_agree(self) -> SchedulerConfig:
        groups = self.kv_block_groups
        if groups is not None and groups.block_tokens != self.block_size_tokens:
            raise ScenarioError(
                f"kv_block_groups has blocks of {groups.block_tokens} tokens but block_size_tokens="
                f"{self.block_size_tokens}.",
                hint="Give the scheduler the memory plan's block size with its groups (replica.scheduler_config).",
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ScenarioError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} is below "
                f"max_num_seqs={self.max_num_seqs}: a step could not give every running request a token.",
                hint=f"Raise max_num_batched_tokens to >= {self.max_num_seqs} or lower max_num_seqs.",
            )
        if (
            not self.enable_chunked_prefill
            and self.long_prompts == "refused_at_start"
            and self.max_model_len is not None
            and self.max_model_len > self.max_num_batched_tokens
        ):
            raise ScenarioError(
                f"without chunked prefill a whole prompt must fit one step, but max_model_len="
                f"{self.max_model_len} exceeds max_num_batched_tokens={self.max_num_batched_tokens}.",
                hint="Enable chunked prefill, raise max_num_batched_tokens or lower max_model_len.",
            )
        return self


class LatencyStats(BaseModel):
    """Mean and percentiles of one latency, in seconds (percentiles as numpy's default, linear)."""

    model_config = _SPEC
    count: int = Field(..., ge=1, description="Samples the statistics are over, a count.")
    mean: float = Field(..., description="Mean, in seconds.")
    p50: float = Field(..., description="Median, in seconds.")
    p90: float = Field(..., description="90th percentile, in seconds.")
    p99: float = Field(..., description="99th percentile, in seconds.")


class Timeline(BaseModel):
    """Engine state at the start of each step, evenly thinned to at most 2,000 points."""

    model_config = _SPEC
    time_seconds: tuple[float, ...] = Field(..., description="Step start times, in seconds from t = 0.")
    running_requests: tuple[int, ...] = Field(
        ..., description="Unfinished requests admitted to the engine during the step, a count."
    )
    waiting_requests: tuple[int, ...] = Field(..., description="Requests queued after the step's admissions, a count.")
    kv_utilization: tuple[float, ...] = Field(
        ..., description="KV blocks in use / num_gpu_blocks after the step's allocations (0 to 1)."
    )


class ClassResult(BaseModel):
    """The latencies one request class of a mixed workload got (``Workload.classes``), simulated."""

    model_config = _SPEC
    name: str = Field(..., description="The class's name.")
    num_requests: int = Field(..., description="Requests of the class offered, a count.")
    num_completed: int = Field(..., description="Requests of the class that finished, a count.")
    ttft_seconds: LatencyStats | None = Field(..., description="The class's time to first token, in seconds.")
    tpot_seconds: LatencyStats | None = Field(..., description="The class's time per output token, in seconds.")
    e2e_seconds: LatencyStats | None = Field(..., description="The class's arrival to last token, in seconds.")


class SimulationResult(BaseModel):
    """What a simulated replica delivered: latencies as vllm bench serve reports them, and more.

    Every number is a simulation under the given step-cost model, not a measurement. A latency
    or throughput is None when no request completed (or, for TPOT and ITL, none had two tokens).
    """

    model_config = _SPEC

    kind: Literal["simulated"] = Field("simulated", description="What these numbers are.")
    step_cost_model: str = Field(..., description="Name of the step-cost model that timed the steps.")
    mode: Literal["continuous", "static"] = Field(..., description="Batching mode simulated.")
    ttft_seconds: LatencyStats | None = Field(..., description="Time to first token, queueing included, in seconds.")
    tpot_seconds: LatencyStats | None = Field(
        ..., description="Time per output token after the first, per request, in seconds."
    )
    itl_seconds: LatencyStats | None = Field(
        ..., description="Gaps between consecutive tokens of a request, all pooled, in seconds."
    )
    e2e_seconds: LatencyStats | None = Field(..., description="Arrival to last token, in seconds.")
    throughput_tokens_per_s: float | None = Field(
        ..., description="Output tokens of completed requests / duration, in tokens per second."
    )
    total_throughput_tokens_per_s: float | None = Field(
        ..., description="Input + output tokens of completed requests / duration, in tokens per second."
    )
    requests_per_s: float | None = Field(..., description="Completed requests / duration, per second.")
    duration_seconds: float | None = Field(..., description="Makespan: first arrival to last finish, in seconds.")
    num_requests: int = Field(..., description="Requests offered, a count.")
    num_completed: int = Field(..., description="Requests that finished, a count.")
    num_rejected: int = Field(..., description="Requests refused at arrival, a count (see rejection_reasons).")
    rejection_reasons: tuple[str, ...] = Field(
        ..., description="Why requests were refused, with the numbers and the fix; empty when none were."
    )
    input_tokens: int = Field(..., description="Prompt tokens of completed requests, in tokens.")
    output_tokens: int = Field(..., description="Output tokens of completed requests, each counted once, in tokens.")
    preemptions: int = Field(..., description="Preemptions by recompute, a count (a request may be preempted twice).")
    recomputed_tokens: int = Field(
        ..., description="Tokens whose KV a preemption discarded and that were computed again, in tokens."
    )
    num_steps: int = Field(..., description="Engine steps executed, a count.")
    mean_requests_in_system: float | None = Field(
        ..., description="Time average of running + waiting requests over the duration, a count."
    )
    timeline: Timeline = Field(..., description="Running, waiting and KV use over time.")
    classes: tuple[ClassResult, ...] = Field(
        (),
        exclude_if=lambda v: not v,  # a single-stream dump stays what it was before classes existed
        description="Per request class of a mixed workload, its own latencies; empty for one stream.",
    )


@dataclass(frozen=True, slots=True)
class EngineRun:
    """Raw outcome of ``run_engine``: per-request and per-step arrays (NaN: did not happen).

    Per request (arrival order): arrival_time_s, first_token_time_s, finish_time_s, rejected.
    Per step: step_start_s, step_seconds, running, waiting, used_blocks, prefill_tokens,
    decode_seqs, itl_weight (tokens whose gap to the previous token is exactly this step).
    itl_extra_seconds: the other gaps (across a preemption; the first decode gap in static mode; a decode
    gap across prefill-only steps), each standing for itl_extra_weight tokens.
    """

    arrival_time_s: np.ndarray
    first_token_time_s: np.ndarray
    finish_time_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    rejected: np.ndarray
    rejection_reasons: tuple[str, ...]
    step_start_s: np.ndarray
    step_seconds: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    used_blocks: np.ndarray
    prefill_tokens: np.ndarray
    decode_seqs: np.ndarray
    itl_weight: np.ndarray
    itl_extra_seconds: np.ndarray
    itl_extra_weight: np.ndarray
    preemptions: int
    recomputed_tokens: int
    num_gpu_blocks: int
    mode: Literal["continuous", "static"]
    class_id: np.ndarray | None = None
    class_names: tuple[str, ...] = ()


def simulate(workload: Workload, scheduler: SchedulerConfig, step_cost: StepCost) -> SimulationResult:
    """Simulate ``workload`` on one replica and summarise it as ``vllm bench serve`` would."""
    run = run_engine(generate_requests(workload), scheduler, step_cost)
    return summarize(run, step_cost_model=type(step_cost).__name__)


def cached_prefix_tokens(input_tokens: np.ndarray, hit_rate: float, block_size: int) -> np.ndarray:
    """Prompt tokens served from the prefix cache: whole blocks only, never the last token.

    vLLM matches full blocks and always recomputes at least the last prompt token
    (``max_cache_hit_length = num_tokens - 1`` in ``KVCacheManager.get_computed_blocks``).
    Example: 1000-token prompt, hit rate 0.5, 16-token blocks -> floor(500 / 16) * 16 = 496.
    """
    wanted = np.minimum(np.floor(hit_rate * input_tokens), input_tokens - 1).astype(np.int64)
    return (wanted // block_size) * block_size


def request_cached_tokens(requests: RequestSet, block_size: int) -> np.ndarray:
    """Prompt tokens each request finds in the prefix cache: its class's shared system prompt where it has
    one (``RequestSet.shared_prefix_tokens``), else the workload's hit rate; whole blocks only, and never the
    last prompt token (``cached_prefix_tokens``)."""
    shared = requests.shared_prefix_tokens
    if shared is None:
        return cached_prefix_tokens(requests.input_tokens, requests.prefix_cache_hit_rate, block_size)
    return (np.minimum(shared, requests.input_tokens - 1) // block_size) * block_size


class _PriorityWaiting:
    """The waiting queue of ``--scheduling-policy priority``: a heap on (priority, arrival index), lower first.

    It answers the deque calls the engines make; ``appendleft`` (a preempted request) puts the request back
    by its key, as vLLM V1's priority queue re-adds it, not at the front.
    """

    __slots__ = ("heap", "priority")

    def __init__(self, priority: list[int]) -> None:
        self.heap: list[tuple[int, int]] = []
        self.priority = priority

    def append(self, rid: int) -> None:
        heapq.heappush(self.heap, (self.priority[rid], rid))

    appendleft = append

    def popleft(self) -> int:
        return heapq.heappop(self.heap)[1]

    def __getitem__(self, index: int) -> int:
        if index != 0:
            raise IndexError("the priority queue shows its head only")
        return self.heap[0][1]

    def __len__(self) -> int:
        return len(self.heap)

    def __bool__(self) -> bool:
        return bool(self.heap)


def rejections(
    requests: RequestSet, scheduler: SchedulerConfig, cached: np.ndarray, lookahead_tokens: int = 0
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Which requests the engine must refuse, and one message per reason (numbers and fix).

    ``lookahead_tokens``: KV slots a decoding request holds beyond its tokens (k under speculation).
    """
    prompt, out = requests.input_tokens, requests.output_tokens
    bs = scheduler.block_size_tokens
    rejected = np.zeros(len(prompt), dtype=bool)
    reasons: list[str] = []

    def note(mask: np.ndarray, message) -> None:
        fresh = mask & ~rejected
        if fresh.any():
            reasons.append(message(int(fresh.sum()), fresh))
            rejected[fresh] = True

    total = prompt + out
    if scheduler.max_model_len is not None:
        note(
            total > scheduler.max_model_len,
            lambda k, m: (
                f"{k} request(s) need up to {int(total[m].max())} tokens (prompt + output) but "
                f"max_model_len={scheduler.max_model_len}; raise max_model_len or shorten them."
            ),
        )
    groups = scheduler.kv_block_groups
    peak = total - 1 + lookahead_tokens
    peak_blocks = -(-peak // bs) if groups is None else groups.blocks_array(peak)
    note(
        peak_blocks > scheduler.num_gpu_blocks,
        lambda k, m: (
            f"{k} request(s) need up to {int(peak_blocks[m].max())} KV blocks "
            f"({int(total[m].max()) - 1 + lookahead_tokens} tokens) but the cache holds "
            f"{scheduler.num_gpu_blocks} blocks "
            f"({scheduler.num_gpu_blocks * bs} tokens); free memory for KV (more GPUs, fp8 KV cache, "
            f"smaller weights) or shorten them."
        ),
    )
    if not scheduler.enable_chunked_prefill and scheduler.long_prompts == "refused_per_request":
        note(  # TensorRT-LLM's LLM._check_arguments on the PyTorch backend: the prompt alone against max_num_tokens
            prompt > scheduler.max_num_batched_tokens,
            lambda k, m: (
                f"{k} request(s) have prompts of up to {int(prompt[m].max())} tokens but without chunked prefill "
                f"the engine refuses a prompt above max_num_tokens={scheduler.max_num_batched_tokens}; enable "
                f"chunked prefill or raise max_num_tokens."
            ),
        )
    elif not scheduler.enable_chunked_prefill:
        recompute = total - 1 - cached
        note(
            recompute > scheduler.max_num_batched_tokens,
            lambda k, m: (
                f"{k} request(s) may need to prefill up to {int(recompute[m].max())} tokens "
                f"in one step (prompt + output after a preemption) but max_num_batched_tokens="
                f"{scheduler.max_num_batched_tokens} and chunked prefill is off; enable chunked prefill "
                f"or raise max_num_batched_tokens."
            ),
        )
    return rejected, tuple(reasons)


class _EncoderStep:
    """A step cost plus the vision encoder's seconds of the images the step schedules: the engine sets ``due``
    when it schedules the step's prefill chunks (``_Engine._encode``); the step's time is the language model's
    (``inner``) plus ``due``, which is then spent. ``speculation`` is the inner cost's, and so are ``decode_steps``
    (``decode_steps_of``): a decode-only step schedules no chunk, so nothing is due in it."""

    __slots__ = ("decode_steps", "due", "inner", "speculation")

    def __init__(self, inner: StepCost) -> None:
        self.inner, self.due, self.speculation = inner, 0.0, decode_speculation(inner)
        self.decode_steps = decode_steps_of(inner)

    def step_seconds(
        self, *, prefill_tokens: int, prefill_attention_pairs: float, decode_seqs: int, decode_kv_tokens: int
    ) -> float:
        due, self.due = self.due, 0.0
        return due + self.inner.step_seconds(
            prefill_tokens=prefill_tokens,
            prefill_attention_pairs=prefill_attention_pairs,
            decode_seqs=decode_seqs,
            decode_kv_tokens=decode_kv_tokens,
        )


def run_engine(requests: RequestSet, scheduler: SchedulerConfig, step_cost: StepCost) -> EngineRun:
    """Run the engine over ``requests`` until every one has finished or been refused."""
    cached = request_cached_tokens(requests, scheduler.block_size_tokens)
    if requests.images is not None:
        if scheduler.mode == "static":
            raise ScenarioError(
                "the static-batching simulation does not model images.",
                hint="Simulate continuous batching (drop --static), or drop the images.",
            )
        if cached.any():
            raise ScenarioError(
                "requests with images and prefix-cache hits are not modelled (the cached tokens would hold the "
                "images' and skip their encoder).",
                hint="Drop --prefix-cache-hit-rate (or the images).",
            )
        step_cost = _EncoderStep(step_cost)
    speculation = decode_speculation(step_cost)
    rejected, reasons = rejections(requests, scheduler, cached, speculation.num_speculative_tokens)
    if scheduler.mode == "static" and speculation != PLAIN_DECODING:
        raise ScenarioError(
            "the static-batching simulation does not model speculative decoding.",
            hint="Simulate continuous batching (drop --static), or drop --speculative-method.",
        )
    engine = (_Static if scheduler.mode == "static" else _Continuous)(requests, scheduler, step_cost, cached, rejected)
    engine.run()
    return engine.result(requests, rejected, reasons)


class _Recorder:
    """Each step's timing and the engine state at its start, in compact arrays (no Python object per step):
    ``starts``, ``seconds`` and ``used`` (KV blocks) for every step; ``stretches`` (steps, running, waiting,
    prefill tokens, decoding requests) for each stretch of consecutive steps that share those four, in step
    order (one step, or the steps of a decode run between two finishes: ``_Continuous._decode_run``);
    ``itl_weight`` per step, or None when it is the decoding requests (continuous batching: every decode
    token's gap is its step)."""

    __slots__ = ("itl_weight", "seconds", "starts", "step", "stretches", "used")

    def __init__(self, step_cost: StepCost) -> None:
        self.starts = array("d")
        self.seconds = array("d")
        self.used = array("q")
        self.stretches = array("q")
        self.itl_weight: array | None = None
        self.step = self._timer(step_cost)

    def _timer(self, step_cost: StepCost) -> Callable[[float, int, int, int, int, float, int, int], float]:
        """``step(now, running, waiting, used, prefill, pairs, decode, kv)``: time one step of that mix
        (``StepCost.step_seconds``'s arguments), record it, return when it ends (``arrays`` refuses a
        step time that is not finite and >= 0)."""
        step_seconds, starts, seconds = step_cost.step_seconds, self.starts.append, self.seconds.append  # not hot
        used_blocks, stretches = self.used.append, self.stretches.extend

        def step(
            now: float, running: int, waiting: int, used: int, prefill: int, pairs: float, decode: int, kv: int
        ) -> float:
            dt = step_seconds(
                prefill_tokens=prefill, prefill_attention_pairs=pairs, decode_seqs=decode, decode_kv_tokens=kv
            )
            starts(now)
            seconds(dt)
            used_blocks(used)
            stretches((1, running, waiting, prefill, decode))
            return now + dt

        return step

    def arrays(self) -> dict[str, np.ndarray]:
        """The per-step arrays of ``EngineRun``."""
        copy = lambda a, dtype: np.array(np.frombuffer(a, dtype=dtype) if a else [], dtype)  # noqa: E731 (a copy)
        seconds = copy(self.seconds, np.float64)
        stretches = copy(self.stretches, np.int64).reshape(-1, 5)
        running, waiting, prefill, decode = (np.repeat(stretches[:, i], stretches[:, 0]) for i in range(1, 5))
        assert len(running) == len(seconds), "every step is in one stretch"
        bad = ~((seconds >= 0.0) & (seconds < math.inf))  # NaN fails both
        if bad.any():  # checked once at the end, not in the loop: a bad step time cannot stall the run
            first = int(np.argmax(bad))
            raise _bad_step(float(seconds[first]), int(prefill[first]), int(decode[first]))
        itl = self.itl_weight
        return dict(
            step_start_s=copy(self.starts, np.float64),
            step_seconds=seconds,
            running=running,
            waiting=waiting,
            used_blocks=copy(self.used, np.int64),
            prefill_tokens=prefill,
            decode_seqs=decode,
            itl_weight=decode.copy() if itl is None else copy(itl, np.int64),
        )


def _bad_step(seconds: float, prefill_tokens: int, decode_seqs: int) -> ScenarioError:
    return ScenarioError(
        f"the step-cost model returned {seconds!r} s for a step of {prefill_tokens} prefill tokens "
        f"and {decode_seqs} decoding requests; a step must take a finite time >= 0.",
        hint="Check the hardware numbers behind the latency model (zero bandwidth or FLOP/s?).",
    )


class _Arrivals:
    """When requests join the waiting queue: at their arrival times (open loop), or one each time a
    request leaves, ``concurrency`` in flight (closed loop). A refused request never joins it (closed
    loop: it frees its slot at once). ``time_s`` is each request's arrival (NaN: not yet, closed loop).

    An open loop with a cap (``RequestSet.max_in_flight``): a request that arrives while the cap's worth are
    in flight (queued or running) is held at the client, FCFS, and sent when one leaves; its ``time_s``
    becomes that send time, from which ``vllm bench serve`` counts its latencies."""

    __slots__ = (
        "cap",
        "closed",
        "count",
        "held",
        "in_flight",
        "next_id",
        "next_time_s",
        "rejected",
        "time_s",
        "waiting",
    )

    def __init__(self, requests: RequestSet, rejected: list[bool], waiting: deque[int] | _PriorityWaiting) -> None:
        self.count = len(requests)
        self.rejected = rejected
        self.waiting = waiting
        self.next_id = 0  # the next request to arrive
        self.closed = requests.concurrency is not None or requests.arrival_time_s is None
        self.cap = None if self.closed else requests.max_in_flight  # None: every arrival is sent at once
        self.in_flight = 0  # capped open loop: requests sent and not finished
        self.held: deque[int] = deque()  # capped open loop: arrived, waiting at the client for a slot
        if self.closed or requests.arrival_time_s is None:
            self.time_s = [math.nan] * self.count
            self.next_time_s = math.inf  # no arrival is due by the clock
            self.replace(0.0, requests.concurrency or 0)
        else:
            self.time_s = requests.arrival_time_s.tolist()
            self.next_time_s = self.time_s[0] if self.count else math.inf

    @property
    def start_s(self) -> float:
        """When the engine's clock starts: the first arrival (open loop) or 0."""
        return self.time_s[0] if self.count and not self.closed else 0.0

    def exhausted(self) -> bool:
        """No request will arrive unless a running one finishes."""
        return self.closed or self.next_id >= self.count

    def until(self, now: float) -> None:
        """Open loop: queue every request that has arrived by ``now`` (with a cap: while a slot is free)."""
        time_s, rejected, waiting, count = self.time_s, self.rejected, self.waiting, self.count
        i = self.next_id
        cap = self.cap
        while i < count and time_s[i] <= now:
            if not rejected[i]:
                if cap is None:
                    waiting.append(i)
                elif self.held or self.in_flight >= cap:
                    self.held.append(i)
                else:
                    self.in_flight += 1
                    waiting.append(i)
            i += 1
        self.next_id = i
        self.next_time_s = time_s[i] if i < count else math.inf

    def release(self, now: float) -> None:
        """Capped open loop: a request left; the first held one, if any, is sent ``now`` in its place."""
        if self.held:
            rid = self.held.popleft()
            self.time_s[rid] = now
            self.waiting.append(rid)
        else:
            self.in_flight -= 1

    def replace(self, now: float, finished: int = 1) -> None:
        """Closed loop: the next ``finished`` requests arrive ``now``, in place of those that left."""
        time_s, rejected, waiting, count = self.time_s, self.rejected, self.waiting, self.count
        i = self.next_id
        while finished and i < count:
            time_s[i] = now
            if not rejected[i]:
                waiting.append(i)
                finished -= 1
            i += 1
        self.next_id = i


class _Engine:
    """What both batching modes share: the requests, the limits, the queue, the clock and the records.

    Requests are indices in arrival order; ``first_t`` and ``finish_t`` are the times of each one's first
    and last token (NaN: not yet); ``itl_extra`` holds the token gaps that are not one step.
    """

    __slots__ = (
        "arrivals",
        "bs",
        "cached",
        "chunked",
        "encoder",
        "finish_t",
        "first_t",
        "image_seconds",
        "image_tokens",
        "images",
        "itl_extra",
        "itl_gaps",
        "kv_blocks",
        "max_seqs",
        "out",
        "preemptions",
        "prompt",
        "rec",
        "recomputed",
        "t",
        "token_budget",
        "total_blocks",
        "waiting",
    )
    mode: ClassVar[Literal["continuous", "static"]]

    def __init__(
        self, requests: RequestSet, scheduler: SchedulerConfig, step_cost: StepCost, cached: np.ndarray, rejected
    ) -> None:
        n = len(requests)
        self.prompt: list[int] = requests.input_tokens.tolist()
        self.out: list[int] = requests.output_tokens.tolist()
        self.cached: list[int] = cached.tolist()
        self.bs = scheduler.block_size_tokens
        self.total_blocks = scheduler.num_gpu_blocks
        self.kv_blocks: Callable[[int], int] = scheduler.request_blocks  # a request's blocks at t tokens
        self.token_budget = scheduler.max_num_batched_tokens
        self.max_seqs = scheduler.max_num_seqs
        self.chunked = scheduler.enable_chunked_prefill
        self.first_t = [math.nan] * n
        self.finish_t = [math.nan] * n
        self.itl_extra: list[float] = []
        self.itl_gaps: tuple[list[float], list[int]] = ([], [])  # gaps that stand for several tokens, and how many
        self.preemptions = 0
        self.recomputed = 0  # tokens computed again after preemptions
        self.rec = _Recorder(step_cost)
        self.waiting: deque[int] | _PriorityWaiting = deque()
        if scheduler.scheduling_policy == "priority" and requests.priority is not None:
            self.waiting = _PriorityWaiting(requests.priority.tolist())
        self.arrivals = _Arrivals(requests, rejected.tolist(), self.waiting)
        self.t = self.arrivals.start_s
        self.encoder = step_cost if isinstance(step_cost, _EncoderStep) else None
        if self.encoder is not None:
            assert requests.images is not None and requests.image_tokens is not None
            assert requests.image_seconds is not None
            self.images: list[int] = requests.images.tolist()
            self.image_tokens: list[int] = requests.image_tokens.tolist()
            self.image_seconds: list[float] = requests.image_seconds.tolist()

    def _encode(self, chunks: list[tuple[int, int, int]]) -> None:
        """The encoder's seconds for this step's chunks (request, tokens computed before, its tokens): image i of
        t tokens starts at token i x t and is encoded in the chunk that holds that token (module docstring)."""
        assert self.encoder is not None
        due, images, tokens, seconds = 0.0, self.images, self.image_tokens, self.image_seconds
        for rid, start, c in chunks:
            n = images[rid]
            if n:
                t = tokens[rid]
                due += (min(n, -(-(start + c) // t)) - min(n, -(-start // t))) * seconds[rid]
        self.encoder.due = due

    def _finish(self, rid: int) -> None:
        """``rid`` leaves now (closed loop: the next request arrives in its place)."""
        self.finish_t[rid] = self.t
        if self.arrivals.closed:
            self.arrivals.replace(self.t)
        elif self.arrivals.cap is not None:
            self.arrivals.release(self.t)

    def result(self, requests: RequestSet, rejected: np.ndarray, reasons: tuple[str, ...]) -> EngineRun:
        """The run's arrays, once every request has finished or been refused."""
        return EngineRun(
            arrival_time_s=np.asarray(self.arrivals.time_s, dtype=np.float64),
            first_token_time_s=np.asarray(self.first_t, dtype=np.float64),
            finish_time_s=np.asarray(self.finish_t, dtype=np.float64),
            input_tokens=requests.input_tokens,
            output_tokens=requests.output_tokens,
            rejected=rejected,
            rejection_reasons=reasons,
            itl_extra_seconds=np.asarray(self.itl_extra + self.itl_gaps[0], dtype=np.float64),
            itl_extra_weight=np.asarray([1] * len(self.itl_extra) + self.itl_gaps[1], dtype=np.int64),
            preemptions=self.preemptions,
            recomputed_tokens=self.recomputed,
            num_gpu_blocks=self.total_blocks,
            mode=self.mode,
            class_id=requests.class_id,
            class_names=requests.class_names,
            **self.rec.arrays(),
        )


class _RunFixed(NamedTuple):
    """What ``_Continuous._decode_run`` reads of its engine and never rebinds, in one tuple."""

    decoding: dict[int, None]
    waiting: deque[int] | _PriorityWaiting
    finish_at: dict[int, list[int]]
    bs: int
    phase_count: list[int]
    total_blocks: int
    decode_steps: Callable[[int], DecodeStepsByKV]
    starts: Callable[[float], None]
    seconds: Callable[[float], None]
    used: Callable[[int], None]
    stretches: Callable[[tuple[int, int, int, int, int]], None]
    itl: Callable[[int], None] | None


class _Continuous(_Engine):
    """One vLLM V1 continuous-batching run, step by step (the rules: module docstring).

    Per request: ``ntok`` tokens it holds (prompt + generated: the target of its (re)prefill), ``gen``
    output tokens so far, ``comp`` computed tokens while in (re)prefill, ``c0`` = computed tokens - G(s)
    while decoding, ``last_step`` the step that gives its last token, ``last_tok`` the time of its last
    token before its latest preemption. The engine: ``decoding`` (an insertion-ordered set: admission
    order), ``phase_count`` (decoding requests by c0 mod block size) and ``c0_sum``, ``finish_at`` (step
    -> decoding requests that finish in it), at most one ``prefilling`` request (last in running order,
    -1: none) and ``used`` KV blocks.

    The clock lives in ``run``'s locals (step index s, G(s - 1), G(s), G(s + 1) and the slots they give)
    and reaches the phases as arguments: the loop is the simulator's hot path.
    """

    __slots__ = (
        "c0",
        "c0_sum",
        "comp",
        "decode_runs",
        "decode_steps",
        "decoding",
        "end_sum",
        "epoch",
        "finish_at",
        "freed",
        "full_weight",
        "gen",
        "grows",
        "idle_s",
        "keep_cached",
        "kept",
        "last_step",
        "last_tok",
        "mixed",
        "ntok",
        "output_reserve",
        "phase_count",
        "prefilling",
        "run_fixed",
        "s_now",
        "speculation",
        "stalls",
        "step_seconds",
        "used",
        "weight",
        "window_at",
        "windows",
    )
    mode = "continuous"
    #: Take runs of plain decode-only steps in ``_decode_run`` (False: every step through the general loop;
    #: tests/test_simulate_decode_runs.py compares the two).
    DECODE_RUNS: ClassVar[bool] = True

    def __init__(self, requests, scheduler, step_cost, cached, rejected) -> None:
        super().__init__(requests, scheduler, step_cost, cached, rejected)
        n = len(requests)
        self.speculation = decode_speculation(step_cost)
        self.mixed = scheduler.mixed_batches
        self.stalls: list[tuple[float, int]] = []  # unmixed: (time, decoders whose last token came then) since a decode
        if not self.mixed:
            self.rec.itl_weight = array("q")  # a decode gap may span prefill-only steps (``_decode_gaps``)
        self.step_seconds = step_cost.step_seconds
        self.decode_steps = decode_steps_of(step_cost)
        self.decode_runs = self.DECODE_RUNS and self.speculation == PLAIN_DECODING
        self.grows: dict[tuple[int, int], list[int]] = {}  # new blocks by c0 mod bs, per slot window
        self.last_tok = [math.nan] * n
        self.ntok = self.prompt[:]
        self.gen = [0] * n
        self.comp = [0] * n
        self.c0 = [0] * n
        self.last_step = [0] * n
        self.decoding: dict[int, None] = {}
        self.phase_count = [0] * self.bs  # decoding requests' growth weights (``weight``) by c0 mod bs
        self.finish_at: dict[int, list[int]] = {}
        # KV-cache groups (``SchedulerConfig.kv_block_groups``): a decoding request's new block is one in each group
        # that still grows, its ``weight``; a sliding-window group stops growing once the request holds its window
        # (an event at that step in ``window_at``: (request, groups, its ``epoch``), stale once it stopped decoding)
        groups = scheduler.kv_block_groups
        self.full_weight = 1 if groups is None else groups.full_groups
        self.windows = () if groups is None else groups.window_groups
        self.weight = [self.full_weight] * n
        self.epoch = [0] * n
        self.window_at: dict[int, list[tuple[int, int, int]]] = {}
        self.keep_cached = scheduler.prefix_caching
        self.kept: dict[int, tuple[int, int, int]] = {}  # preempted, cached: (eviction mark, whole blocks, blocks)
        self.freed = 0  # blocks ever freed: with ``used``, the blocks ever allocated (``_requeue``)
        self.c0_sum = 0
        self.used = 0
        self.prefilling = -1
        self.output_reserve = scheduler.output_reserve  # None: admission on the prompt's blocks alone (vLLM)
        self.end_sum = 0  # the decoding requests' last steps summed (their remaining steps: ``_reserved_tokens``)
        self.s_now = self.idle_s = 0  # the step index being scheduled, and the one when the engine was last idle
        self.run_fixed = _RunFixed(  # what ``_decode_run`` reads and never rebinds
            self.decoding,
            self.waiting,
            self.finish_at,
            self.bs,
            self.phase_count,
            self.total_blocks,
            self.decode_steps,
            self.rec.starts.append,
            self.rec.seconds.append,
            self.rec.used.append,
            self.rec.stretches.extend,
            None if self.mixed else self._unmixed_itl_weight().append,  # unmixed: no stall is pending in a run
        )

    def run(self) -> None:
        """Step until every request has finished or been refused. One pass: queue arrivals; give the decodes
        their blocks (preempting if need be); schedule prefill chunks; time the step; advance requests."""
        arrivals, decoding, waiting, finish_at = self.arrivals, self.decoding, self.waiting, self.finish_at
        bs, phase_count, token_budget, total_blocks = self.bs, self.phase_count, self.token_budget, self.total_blocks
        step_seconds, starts, seconds = self.step_seconds, self.rec.starts.append, self.rec.seconds.append
        used_blocks, stretches = self.rec.used.append, self.rec.stretches.extend
        verified = self.speculation.verified_tokens  # tokens per decoding request and step (plain: 1)
        e, floor = self.speculation.tokens_per_step, math.floor  # G(x) = floor(E x), ``DecodeSpeculation.position``
        t, s, mixed = self.t, 0, self.mixed
        g_prev, g_now, g_next = floor(e * -1), floor(e * 0), floor(e * 1)  # G(s - 1), G(s), G(s + 1)
        while True:
            if t >= arrivals.next_time_s:
                arrivals.until(t)
            n_dec = len(decoding)
            if not n_dec and self.prefilling < 0 and not waiting:
                if arrivals.exhausted():
                    return
                self.t = t = arrivals.next_time_s  # idle until the next arrival
                self.idle_s = s
                continue
            if self.decode_runs and n_dec and self.prefilling < 0 and not waiting and (mixed or not self.stalls):
                steps, s = self._decode_run(s)
                t = self.t
                g_prev, g_now, g_next = s - 1, s, s + 1  # plain decoding: G(x) = x
                if steps:
                    continue  # an arrival is due, or a request left: back to the top
                # else the next step preempts: the general path below takes it
            self.s_now = s
            if not mixed and (self.prefilling >= 0 or waiting) and self._prefill_only_step(g_prev, g_now):
                t = self.t
                continue  # a prefill-only step: the decodes did not advance, so the step index s stays
            # During step s a decoding request holds cdiv(c0 + G(s) + k + 1) blocks; it held cdiv(c0 + G(s-1) + k + 1).
            hold_prev, hold_now = g_prev + verified, g_now + verified
            reserve = verified - (g_next - g_now)  # lookahead slots a request finishing its prefill now takes
            need, preempted = 0, False  # one block per decoding request whose new slots cross a block start
            if hold_now - hold_prev == 1:
                need = phase_count[-hold_prev % bs]
            else:
                for j in range(hold_prev, hold_now):
                    need += phase_count[-j % bs]
            if self.used + need > total_blocks:
                n_dec, preempted = self._preempt_for_decodes(hold_prev, hold_now, g_now), True
            else:
                self.used += need
            budget = token_budget - n_dec * verified  # each decode verifies k + 1 tokens of the step's budget
            if self.mixed and (self.prefilling >= 0 or waiting):
                n_run, prefill_tokens, pairs, chunks = self._schedule_prefills(n_dec, budget, preempted, reserve)
                if not prefill_tokens and not n_dec:
                    continue  # only a self-preemption happened; the next pass admits from the queue
            else:
                n_run, prefill_tokens, pairs, chunks = n_dec, 0, 0.0, None
            kv = self.c0_sum + n_dec * hold_now  # the step: ``_Recorder.step``, inlined
            dt = step_seconds(
                prefill_tokens=prefill_tokens, prefill_attention_pairs=pairs, decode_seqs=n_dec, decode_kv_tokens=kv
            )
            starts(t)
            seconds(dt)
            used_blocks(self.used)
            stretches((1, n_run, len(waiting), prefill_tokens, n_dec))
            self.t = t = t + dt
            if not mixed:
                self._decode_gaps(n_dec, t)
            if s in finish_at:
                self._finish_decodes(finish_at.pop(s), hold_now)
            if chunks:
                self._advance_prefills(chunks, reserve, g_next)
            if s in self.window_at:
                self._windows_held(self.window_at.pop(s))
            s += 1
            g_prev, g_now, g_next = g_now, g_next, floor(e * (s + 1))

    def _decode_run(self, s: int) -> tuple[int, int]:
        """Plain decode-only steps from step ``s`` on (no request waiting or in prefill, one token per
        decoding request and step), the general loop's arithmetic in fewer operations: during step s a
        decoding request holds cdiv(c0 + s + 1) blocks, so it needs a new one when (c0 + s) mod bs = 0
        (``phase_count[-s % bs]`` of them), and the step attends c0_sum + n_dec x (s + 1) tokens; the steps
        between two finishes are one stretch of the record. Stops after a step that ends at or after the next
        arrival, or whose finishing requests leave none decoding or bring one in (closed loop), and before a
        step that needs more blocks than are free (the general loop preempts). Returns (steps taken, the
        next step index); ``self.t`` and ``self.used`` follow.
        """
        decoding, waiting, finish_at, bs, phase_count, total_blocks, decode_steps, *_ = self.run_fixed  # the engine's
        *_, starts, seconds_, used_blocks, stretches, itl = self.run_fixed  # and the record's appenders
        t, used, start, next_arrival = self.t, self.used, s, self.arrivals.next_time_s
        window_at = self.window_at
        n_dec = len(decoding)
        kv, seconds, first = self.c0_sum + n_dec * (s + 1), decode_steps(n_dec), s
        while True:
            need = phase_count[-s % bs]
            if used + need > total_blocks:
                break  # the general loop preempts
            used += need
            dt = seconds[kv]
            starts(t)
            seconds_(dt)
            used_blocks(used)
            t += dt
            if itl is not None:
                itl(n_dec)
            if s in window_at:
                self._windows_held(window_at.pop(s))
            if s in finish_at:
                stretches((s + 1 - first, n_dec, 0, 0, n_dec))
                self.t, self.used = t, used
                self._finish_decodes(finish_at.pop(s), s + 1)
                used, n_dec, s = self.used, len(decoding), s + 1
                if not n_dec or waiting:
                    return s - start, s
                kv, seconds, first = self.c0_sum + n_dec * (s + 1), decode_steps(n_dec), s
            else:
                s += 1
                kv += n_dec
            if t >= next_arrival:
                break
        if s > first:
            stretches((s - first, n_dec, 0, 0, n_dec))
        self.t, self.used = t, used
        return s - start, s

    # ---- scheduling one step ------------------------------------------------------------------

    def _prefill_only_step(self, g_prev: int, g_now: int) -> bool:
        """An unmixed engine's step: prefill chunks from the whole token budget, the decodes waiting (as SGLang's
        ``get_next_batch_to_run`` runs a prefill batch first whenever it can form one, and vLLM V0 does without
        chunked prefill). False, and nothing done, when no chunk fits: then the step is the decodes'.

        The decodes do not advance, so the step index stays: a request finishing its prefill here starts
        decoding at that same index (its c0 and last step are taken against G(s), not G(s + 1)), and its
        lookahead reserve is the one the previous index left, k + 1 - (G(s) - G(s - 1))."""
        reserve = self.speculation.verified_tokens - (g_now - g_prev)
        n_dec = len(self.decoding)
        n_run, prefill_tokens, pairs, chunks = self._schedule_prefills(n_dec, self.token_budget, False, reserve)
        if not prefill_tokens:
            return False
        if n_dec and not self.stalls:
            self.stalls.append((self.t, n_dec))  # their last token came at the end of the last decode step
        self.t = self.rec.step(self.t, n_run, len(self.waiting), self.used, prefill_tokens, pairs, 0, 0)
        self._unmixed_itl_weight().append(0)
        self._advance_prefills(chunks, reserve, g_now)
        joined = len(self.decoding) - n_dec
        if joined:
            self.stalls.append((self.t, joined))
        return True

    def _unmixed_itl_weight(self) -> array:
        """The per-step ITL weights an unmixed engine keeps itself (set in ``__init__``)."""
        weights = self.rec.itl_weight
        assert weights is not None, "an unmixed engine records its own ITL weights"
        return weights

    def _decode_gaps(self, n_dec: int, t: float) -> None:
        """An unmixed engine's decode step ending at ``t``: without prefill-only steps since the last one, each
        decoding request's gap is this step; else a request's gap runs from its previous token (the last
        decode step's end, or the end of the prefill step that gave its first token) to ``t``."""
        itl_weight = self._unmixed_itl_weight()
        if not self.stalls:
            itl_weight.append(n_dec)
            return
        gaps, weights = self.itl_gaps
        excess = sum(count for _, count in self.stalls) - n_dec  # preempted in this step: the newest, last in
        for since, count in reversed(self.stalls):
            kept = max(0, count - excess)
            excess -= count - kept
            if kept:
                gaps.append(t - since)
                weights.append(kept)
        self.stalls.clear()
        itl_weight.append(0)

    def _preempt_for_decodes(self, hold_prev: int, hold_now: int, g_now: int) -> int:
        """The slow path, in vLLM's order: walk the decoding requests; one that needs a block when none is
        free preempts from the end of the running list (the prefilling request first, then the newest
        decodes) until a block frees or it has preempted itself. The others get their blocks. Returns the
        number of decoding requests left."""
        c0, bs = self.c0, self.bs
        grow_by_phase = self._growth_by_phase(hold_prev, hold_now)
        order = list(self.decoding)
        end = len(order)
        i = 0
        while i < end:
            rid = order[i]
            grow = grow_by_phase[c0[rid] % bs] * self.weight[rid]
            while self.total_blocks - self.used < grow:
                if self.prefilling >= 0:
                    self._preempt_prefilling()
                    continue
                end -= 1
                self._preempt_decoding(order[end], hold_prev, g_now)
                if order[end] == rid:
                    return len(self.decoding)
            self.used += grow
            i += 1
        return len(self.decoding)

    def _growth_by_phase(self, hold_prev: int, hold_now: int) -> list[int]:
        """New blocks of a decoding request this step, by c0 mod bs: cdiv(c0 + hold_now) - cdiv(c0 + hold_prev).

        It depends only on hold_prev mod bs and hold_now - hold_prev, so it is kept per that pair.
        """
        bs = self.bs
        key = (hold_prev % bs, hold_now - hold_prev)
        grow = self.grows.get(key)
        if grow is None:
            grow = self.grows[key] = [-(-(p + hold_now) // bs) + (p + hold_prev) // -bs for p in range(bs)]
        return grow

    def _schedule_prefills(
        self, n_dec: int, budget: int, preempted: bool, reserve: int
    ) -> tuple[int, int, float, list[tuple[int, int, int]]]:
        """This step's prefill chunks within ``budget`` tokens: the running request's next chunk, then (only in
        a step without preemptions) waiting requests FCFS while the budget, max_num_seqs and free blocks
        allow; the first that does not fit stops admission (no skipping ahead). ``reserve``: lookahead
        slots a request whose prefill completes takes. Returns (requests running, prefill tokens, causal
        pairs, chunks), a chunk being (request, tokens computed before it, its tokens)."""
        chunks: list[tuple[int, int, int]] = []
        if self.prefilling >= 0 and budget > 0:
            chunk = self._continue_prefill(budget, reserve)
            if chunk is None:
                preempted = True
            else:
                chunks.append(chunk)
                budget -= chunk[2]
        n_run = n_dec + (self.prefilling >= 0)
        waiting, cached, ntok, bs = self.waiting, self.cached, self.ntok, self.bs
        held = None if self.output_reserve is None or not waiting else self._reserved_tokens(n_dec)
        while not preempted and waiting and budget > 0 and n_run < self.max_seqs:
            rid = waiting[0]
            start = self._cached_again(rid) if rid in self.kept else cached[rid]
            c = min(ntok[rid] - start, budget)
            if c < ntok[rid] - start and not self.chunked:
                break
            blocks = self.kv_blocks(start + c + (reserve if start + c == ntok[rid] else 0))
            if self.used + blocks > self.total_blocks:
                break
            if held is not None:
                outputs = self._output_estimate(rid, self.output_reserve.new_request)
                if (self.used + blocks) * bs + held + outputs >= self.total_blocks * bs:
                    break  # the outputs reserved would not fit beside it (SGLang NO_TOKEN, TensorRT-LLM no-evict)
                held += outputs
            waiting.popleft()
            self.used += blocks
            budget -= c
            chunks.append((rid, start, c))
            n_run += 1
        prefill_tokens, pairs = 0, 0.0
        for _, start, c in chunks:
            prefill_tokens += c
            pairs += c * (start + (c + 1) * 0.5)  # causal pairs of c tokens after start cached ones
        if self.encoder is not None:
            self._encode(chunks)
        return n_run, prefill_tokens, pairs, chunks

    def _output_estimate(self, rid: int, share: float) -> float:
        """``share`` of the output tokens ``rid`` has still to generate, at most the profile's clip."""
        left = self.out[rid] - self.gen[rid]
        clip = self.output_reserve.clip_tokens if self.output_reserve is not None else None
        return share * (left if clip is None else min(left, clip))

    def _reserved_tokens(self, n_dec: int) -> float:
        """Tokens the engine holds back before admitting a prompt (``SchedulerConfig.output_reserve``): the
        running share of the decoding requests' remaining outputs (request r decodes through step
        ``last_step[r]``, so it has last_step[r] - s + 1 tokens to come at step s; summed, ``end_sum`` - n_dec x
        (s - 1)), plus the whole share of the request in prefill, which joined in an earlier pass of the same
        admission (SGLang re-adds a chunked request with its max_new_tokens). Approximations: the clip bounds the
        sum (at most n_dec x the clip), exact while no request has more than the clip to go; with speculative
        decoding a step yields more than one token, so the steps to go count fewer tokens than remain."""
        policy = self.output_reserve
        assert policy is not None
        s = self.s_now
        remaining = self.end_sum - n_dec * (s - 1)
        if policy.clip_tokens is not None:
            remaining = min(remaining, n_dec * policy.clip_tokens)
        held = policy.running_ratio(s - self.idle_s) * remaining
        if self.prefilling >= 0:
            held += self._output_estimate(self.prefilling, policy.new_request)
        return held

    def _continue_prefill(self, budget: int, reserve: int) -> tuple[int, int, int] | None:
        """The prefilling request's next chunk (at most ``budget`` tokens) on its new blocks; None when they do
        not fit and it, the last running request, is preempted."""
        rid = self.prefilling
        start = self.comp[rid]
        c = min(self.ntok[rid] - start, budget)
        extra = reserve if start + c == self.ntok[rid] else 0
        blocks = self.kv_blocks(start + c + extra) - self.kv_blocks(start)
        if self.used + blocks > self.total_blocks:
            self._preempt_prefilling()
            return None
        self.used += blocks
        return rid, start, c

    # ---- preemption ---------------------------------------------------------------------------

    def _preempt_prefilling(self) -> None:
        """Preempt the request in (re)prefill: its blocks are freed and it waits at the front of the queue."""
        rid = self.prefilling
        self.prefilling = -1
        self._requeue(rid, computed=self.comp[rid], held=self.comp[rid])

    def _preempt_decoding(self, rid: int, hold_prev: int, g_now: int) -> None:
        """Preempt a decoding request: it will re-prefill its prompt and the tokens it has generated."""
        c = self._stop_decoding(rid)
        self.finish_at[self.last_step[rid]].remove(rid)
        computed = c + g_now
        prompt = self.prompt[rid]
        self.gen[rid] = gen = computed - prompt + 1
        self.ntok[rid] = prompt + gen
        self.last_tok[rid] = self.t
        self._requeue(rid, computed=computed, held=c + hold_prev)

    def _requeue(self, rid: int, *, computed: int, held: int) -> None:
        """Free the blocks of a preempted request holding ``held`` tokens; it goes back to the front of the queue.

        With prefix caching (``SchedulerConfig.prefix_caching``) its blocks stay cached in the free queue behind the
        blocks already free, tail first, and an allocation takes the queue's head: once allocations pass those blocks
        ahead of them, its own are evicted from the tail. Its re-admission finds the prefix that is left
        (``_cached_again``)."""
        blocks = self.kv_blocks(held)
        ahead = self.total_blocks - self.used  # free blocks queued before its own
        self.used -= blocks
        self.freed += blocks
        self.recomputed += computed - self.cached[rid]  # less what its re-admission finds cached (``_cached_again``)
        if self.keep_cached and blocks:
            full = min(computed, self.ntok[rid] - 1) // self.bs  # whole blocks of its computed tokens, in order
            self.kept[rid] = (self.used + self.freed + ahead, full, blocks)
        self.waiting.appendleft(rid)
        self.preemptions += 1

    # ---- advancing requests after the step ----------------------------------------------------

    def _cached_again(self, rid: int) -> int:
        """Tokens of a preempted request still cached when it is re-admitted: its whole computed blocks less those the
        allocations since evicted (every block allocated beyond the free ones queued ahead of its own), the prefix
        kept; at least what it had cached before (``_requeue``). Counted out of the recomputed tokens."""
        mark, full, blocks = self.kept.pop(rid)
        evicted = max(0, self.used + self.freed - mark)
        left = full * max(0, blocks - evicted) // blocks
        start = max(self.cached[rid], left * self.bs)
        self.recomputed -= start - self.cached[rid]
        self.cached[rid] = start
        return start

    def _finish_decodes(self, done: list[int], hold_now: int) -> None:
        """Decoding requests whose last token came in this step leave, freeing the blocks of c0 + hold_now tokens."""
        bs, out, gen, c0, decoding, phase_count = self.bs, self.out, self.gen, self.c0, self.decoding, self.phase_count
        last_step, weight, kv_blocks = self.last_step, self.weight, self.kv_blocks
        freed = left = ends = 0
        for rid in done:
            c = c0[rid]  # ``_stop_decoding``, its sums kept for the end
            del decoding[rid]
            phase_count[c % bs] -= weight[rid]
            left += c
            ends += last_step[rid]
            freed += kv_blocks(c + hold_now)
            gen[rid] = out[rid]
            self._finish(rid)
        self.c0_sum -= left
        self.end_sum -= ends
        self.used -= freed
        self.freed += freed

    def _advance_prefills(self, chunks: list[tuple[int, int, int]], reserve: int, g_next: int) -> None:
        """Each chunk of the step: a request still in (re)prefill stays so; one whose prefill is done emits a
        token and leaves (its last) or starts decoding."""
        ntok, gen, out, t = self.ntok, self.gen, self.out, self.t
        for rid, start, c in chunks:
            computed = start + c
            if computed < ntok[rid]:
                self.comp[rid] = computed
                self.prefilling = rid
                continue
            if self.prefilling == rid:
                self.prefilling = -1
            g = gen[rid]
            if g == 0:
                self.first_t[rid] = t
            else:
                self.itl_extra.append(t - self.last_tok[rid])
            gen[rid] = g = g + 1
            if g == out[rid]:
                blocks = self.kv_blocks(computed + reserve)
                self.used -= blocks
                self.freed += blocks
                self._finish(rid)
            else:
                self._start_decoding(rid, computed - g_next, g_next + out[rid] - g, g_next)

    def _start_decoding(self, rid: int, c: int, tokens: int, g_first: int) -> None:
        """``rid`` decodes from the step whose clock is ``g_first`` on with c0 = ``c``; its last token comes once
        the clock has gained ``tokens`` more than at that step: in the first step m with G(m + 1) >= G(s + 1) +
        remaining."""
        self.c0[rid] = c
        self.decoding[rid] = None
        weight = self.full_weight
        if self.windows:
            weight += self._window_growth(rid, c, g_first)
        self.weight[rid] = weight
        self.phase_count[c % self.bs] += weight
        self.c0_sum += c
        key = self.speculation.first_step_at(tokens) - 1
        self.last_step[rid] = key
        self.end_sum += key
        bucket = self.finish_at.get(key)
        if bucket is None:
            self.finish_at[key] = [rid]
        else:
            bucket.append(rid)

    def _window_growth(self, rid: int, c: int, g_first: int) -> int:
        """The sliding-window groups in which ``rid`` (c0 = ``c``, decoding from the step whose clock is ``g_first``)
        still gains blocks, and the event of each at the last step it does. Step m allocates block cdiv(c + G(m - 1)
        + k + 2) when that is a new one; a window group of cap blocks takes it while that block's index is <= cap,
        so through the last step m* with G(m* - 1) <= (cap - 1) x bs - c - (k + 1)."""
        spec, bs = self.speculation, self.bs
        first = spec.first_step_at(g_first)
        self.epoch[rid] = epoch = self.epoch[rid] + 1
        growing = 0
        for groups, cap in self.windows:
            last = spec.first_step_at((cap - 1) * bs - c - spec.verified_tokens + 1)
            if last >= first:
                growing += groups
                self.window_at.setdefault(last, []).append((rid, groups, epoch))
        return growing

    def _windows_held(self, events: list[tuple[int, int, int]]) -> None:
        """After the step of these events, each request (still decoding since it set them) holds its window's blocks
        in their groups: its new blocks no longer include them."""
        decoding, weight, epoch, c0, bs, phase_count = (
            self.decoding,
            self.weight,
            self.epoch,
            self.c0,
            self.bs,
            self.phase_count,
        )
        for rid, groups, stamp in events:
            if rid in decoding and epoch[rid] == stamp:
                weight[rid] -= groups
                phase_count[c0[rid] % bs] -= groups

    def _stop_decoding(self, rid: int) -> int:
        """Take ``rid`` out of the decoding aggregates; return its c0."""
        c = self.c0[rid]
        del self.decoding[rid]
        self.phase_count[c % self.bs] -= self.weight[rid]
        self.c0_sum -= c
        self.end_sum -= self.last_step[rid]
        return c


class _Static(_Engine):
    """Static batching: form a batch, prefill all of it, decode until its longest request ends.

    The batch takes up to max_num_seqs waiting requests, FCFS, while their full-length KV
    (cdiv(prompt + output - 1, block_size) blocks each) fits, as a server without paging must
    reserve. Prefill packs prompt chunks into steps of max_num_batched_tokens. Decode runs
    max(output) - 1 steps over the whole batch: finished requests are padded and still computed
    (as in HF ``generate``). Nothing is admitted until the batch is over.
    """

    __slots__ = ("itl_weight",)
    mode = "static"

    def __init__(self, requests, scheduler, step_cost, cached, rejected) -> None:
        super().__init__(requests, scheduler, step_cost, cached, rejected)
        self.itl_weight = self.rec.itl_weight = array("q")  # the first decode gap is per request, not a step

    def run(self) -> None:
        """Form a batch from the queue, prefill it, decode it; idle until an arrival when the queue is empty."""
        arrivals = self.arrivals
        while True:
            if self.t >= arrivals.next_time_s:
                arrivals.until(self.t)
            if not self.waiting:
                if arrivals.exhausted():
                    return
                self.t = arrivals.next_time_s
                continue
            batch, used = self._form_batch()
            self._prefill(batch, used)
            self._decode(batch, used)

    def _form_batch(self) -> tuple[list[int], int]:
        """(batch, its KV blocks): FCFS while max_num_seqs and every request's full-length KV allow."""
        waiting, prompt, out = self.waiting, self.prompt, self.out
        batch: list[int] = []
        used = 0
        while waiting and len(batch) < self.max_seqs:
            blocks = self.kv_blocks(prompt[waiting[0]] + out[waiting[0]] - 1)
            if used + blocks > self.total_blocks:
                break
            batch.append(waiting.popleft())
            used += blocks
        return batch, used

    def _step(self, running: int, used: int, prefill: int, pairs: float, decode: int, kv: int, itl: int) -> None:
        """Time and record one step (``itl``: tokens whose gap to the previous is this step); queue arrivals."""
        self.t = self.rec.step(self.t, running, len(self.waiting), used, prefill, pairs, decode, kv)
        self.itl_weight.append(itl)
        if self.t >= self.arrivals.next_time_s:
            self.arrivals.until(self.t)

    def _prefill(self, batch: list[int], used: int) -> None:
        """Prefill the whole batch in steps of the token budget; a request's first token ends its prefill."""
        out, first_t = self.out, self.first_t
        alive = len(batch)  # unfinished requests of the batch (padded rows are not requests)
        pending = deque(batch)
        computed = {rid: self.cached[rid] for rid in batch}
        while pending:
            prefill, pairs, completed = self._prefill_chunks(pending, computed)
            self._step(alive, used, prefill, pairs, 0, 0, 0)
            for rid in completed:
                first_t[rid] = self.t
                if out[rid] == 1:
                    alive -= 1
                    self._finish(rid)

    def _prefill_chunks(self, pending: deque[int], computed: dict[int, int]) -> tuple[int, float, list[int]]:
        """(tokens, causal pairs, requests completed) of one prefill step: prompt chunks FCFS within the budget."""
        prompt = self.prompt
        budget = self.token_budget
        prefill = 0
        pairs = 0.0
        completed = []
        while pending and budget > 0:
            rid = pending[0]
            start = computed[rid]
            c = prompt[rid] - start
            if c > budget:
                if not self.chunked:
                    break
                c = budget
            computed[rid] = start + c
            prefill += c
            pairs += c * (start + (c + 1) * 0.5)
            budget -= c
            if computed[rid] == prompt[rid]:
                completed.append(pending.popleft())
        return prefill, pairs, completed

    def _decode(self, batch: list[int], used: int) -> None:
        """max(output) - 1 decode steps over the whole batch (finished rows padded); each request leaves at
        its last token. Decode step k emits token k + 1; the first decode gap is per request (prefills end
        at different times), the later ones are one step."""
        out, prompt, first_t = self.out, self.prompt, self.first_t
        by_length: dict[int, list[int]] = {}
        for rid in batch:
            by_length.setdefault(out[rid], []).append(rid)
        size = len(batch)
        prompt_sum = sum(prompt[rid] for rid in batch)
        active = sum(1 for rid in batch if out[rid] > 1)
        for k in range(1, max(out[rid] for rid in batch)):
            self._step(active, used, 0, 0.0, size, prompt_sum + size * k, active if k > 1 else 0)
            if k == 1:
                self.itl_extra.extend(self.t - first_t[rid] for rid in batch if out[rid] > 1)
            for rid in by_length.get(k + 1, ()):
                active -= 1
                self._finish(rid)


# ---------------------------------------------------------------------------------------------
# Summary.
# ---------------------------------------------------------------------------------------------


def latency_stats(values: np.ndarray) -> LatencyStats | None:
    """Mean and linear-interpolated percentiles (numpy's default, as vllm bench serve uses)."""
    if len(values) == 0:
        return None
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return LatencyStats(count=len(values), mean=float(np.mean(values)), p50=float(p50), p90=float(p90), p99=float(p99))


def weighted_latency_stats(values: np.ndarray, weights: np.ndarray) -> LatencyStats | None:
    """``latency_stats`` of the sample in which each value appears ``weight`` times.

    Equal (to rounding) to ``latency_stats(np.repeat(values, weights))`` without building the
    repeated array: the linear percentile at q sits at rank h = (N - 1) * q / 100 and interpolates
    between the values at ranks floor(h) and floor(h) + 1, found by a search of the cumulative weights.
    """
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    if len(values) == 0:
        return None
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    cumulative = np.cumsum(weights)
    count = int(cumulative[-1])
    ranks = (count - 1) * np.array([0.50, 0.90, 0.99])
    low = np.floor(ranks)
    at = lambda r: values[np.searchsorted(cumulative, r, side="right")]  # noqa: E731
    lower, upper = at(low), at(np.minimum(low + 1, count - 1))
    p50, p90, p99 = lower + (ranks - low) * (upper - lower)
    mean = float(np.dot(values, weights) / count)
    return LatencyStats(count=count, mean=mean, p50=float(p50), p90=float(p90), p99=float(p99))


@dataclass(frozen=True, slots=True)
class RequestLatencies:
    """The latencies of the completed requests of a run, in seconds, as ``vllm bench serve`` defines them.

    TTFT = first token - arrival (queueing included); E2E = finish - arrival; TPOT = (E2E - TTFT) /
    (output tokens - 1), over the completed requests with more than one output token.
    """

    completed: np.ndarray  # bool, one per request asked about: it finished
    output_tokens: np.ndarray  # of the completed requests
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray

    def stats(self) -> dict[str, LatencyStats | None]:
        """``latency_stats`` of each metric, by its name (ttft, tpot, e2e); None where no request has one."""
        return {
            "ttft": latency_stats(self.ttft_s),
            "tpot": latency_stats(self.tpot_s),
            "e2e": latency_stats(self.e2e_s),
        }


def request_latencies(run: EngineRun, window: slice | np.ndarray = slice(None)) -> RequestLatencies:
    """TTFT, TPOT and E2E of the requests in ``window`` (arrival order: a slice, or a mask of them) that
    completed: the one place they are computed, for ``summarize``, its classes and the SLO search's probes."""
    finish = run.finish_time_s[window]
    done = ~np.isnan(finish)
    arrival = run.arrival_time_s[window][done]
    ttft = run.first_token_time_s[window][done] - arrival
    e2e = finish[done] - arrival
    out = run.output_tokens[window][done]
    multi = out > 1
    tpot = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
    return RequestLatencies(completed=done, output_tokens=out, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e)


def summarize(run: EngineRun, *, step_cost_model: str) -> SimulationResult:
    """Turn an ``EngineRun`` into the metrics of ``vllm bench serve`` plus engine statistics."""
    latencies = request_latencies(run)
    done = latencies.completed
    stats = latencies.stats()
    itl = weighted_latency_stats(
        np.concatenate([run.step_seconds, run.itl_extra_seconds]),
        np.concatenate([run.itl_weight, run.itl_extra_weight]),
    )

    num_completed = int(done.sum())
    input_tokens = int(run.input_tokens[done].sum())
    output_tokens = int(latencies.output_tokens.sum())
    duration = None
    if num_completed:
        offered = run.arrival_time_s[~np.isnan(run.arrival_time_s)]
        duration = float(run.finish_time_s[done].max() - offered.min())
    per_s = (lambda x: x / duration) if duration else (lambda x: None)
    in_system = None
    if duration:
        in_system = float(np.dot(run.running + run.waiting, run.step_seconds) / duration)

    return SimulationResult(
        step_cost_model=step_cost_model,
        mode=run.mode,
        ttft_seconds=stats["ttft"],
        tpot_seconds=stats["tpot"],
        itl_seconds=itl,
        e2e_seconds=stats["e2e"],
        throughput_tokens_per_s=per_s(output_tokens),
        total_throughput_tokens_per_s=per_s(input_tokens + output_tokens),
        requests_per_s=per_s(num_completed),
        duration_seconds=duration,
        num_requests=len(run.rejected),
        num_completed=num_completed,
        num_rejected=int(run.rejected.sum()),
        rejection_reasons=run.rejection_reasons,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        preemptions=run.preemptions,
        recomputed_tokens=run.recomputed_tokens,
        num_steps=len(run.step_seconds),
        mean_requests_in_system=in_system,
        timeline=_timeline(run),
        classes=_class_results(run),
    )


def _class_results(run: EngineRun) -> tuple[ClassResult, ...]:
    """Each class's latencies, from the same ``request_latencies`` over its requests only."""
    if run.class_id is None:
        return ()
    out = []
    for c, name in enumerate(run.class_names):
        mine = run.class_id == c
        lat = request_latencies(run, mine)
        stats = lat.stats()
        out.append(
            ClassResult(
                name=name,
                num_requests=int(mine.sum()),
                num_completed=int(lat.completed.sum()),
                ttft_seconds=stats["ttft"],
                tpot_seconds=stats["tpot"],
                e2e_seconds=stats["e2e"],
            )
        )
    return tuple(out)


def _timeline(run: EngineRun) -> Timeline:
    steps = len(run.step_start_s)
    index = np.arange(steps)
    if steps > TIMELINE_MAX_POINTS:
        index = np.unique(np.linspace(0, steps - 1, TIMELINE_MAX_POINTS).round().astype(np.int64))
    return Timeline(
        time_seconds=tuple(run.step_start_s[index].tolist()),
        running_requests=tuple(run.running[index].tolist()),
        waiting_requests=tuple(run.waiting[index].tolist()),
        kv_utilization=tuple((run.used_blocks[index] / run.num_gpu_blocks).tolist()),
    )
