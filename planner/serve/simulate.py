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

A request holds cdiv(computed_tokens, block_size) blocks. A step that completes a request's
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
happens only on admission, completion and preemption.

Metrics are those of ``vllm bench serve`` (``vllm/benchmarks/serve.py``): TTFT = first token time
- arrival (queueing included); TPOT = (E2E - TTFT) / (output_tokens - 1) per request with more
than one output token; ITL = every gap between consecutive tokens of a request, pooled;
E2E = finish - arrival. Tokens count as delivered at the end of the step that produced them
(no detokenisation or network time).
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.errors import ScenarioError
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
        x = math.ceil(tokens / self.tokens_per_step)
        while self.position(x) < tokens:
            x += 1
        while x > 0 and self.position(x - 1) >= tokens:
            x -= 1
        return x


PLAIN_DECODING = DecodeSpeculation(num_speculative_tokens=0, tokens_per_step=1.0)


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
    mode: Literal["continuous", "static"] = Field(
        "continuous",
        description="'continuous': vLLM V1 continuous batching; 'static': take up to max_num_seqs "
        "requests, prefill them, decode until the longest finishes, admit nothing meanwhile.",
    )

    @model_validator(mode="after")
    def _limits_agree(self) -> SchedulerConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ScenarioError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} is below "
                f"max_num_seqs={self.max_num_seqs}: a step could not give every running request a token.",
                hint=f"Raise max_num_batched_tokens to >= {self.max_num_seqs} or lower max_num_seqs.",
            )
        if (
            not self.enable_chunked_prefill
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


@dataclass(frozen=True, slots=True)
class EngineRun:
    """Raw outcome of ``run_engine``: per-request and per-step arrays (NaN: did not happen).

    Per request (arrival order): arrival_time_s, first_token_time_s, finish_time_s, rejected.
    Per step: step_start_s, step_seconds, running, waiting, used_blocks, prefill_tokens,
    decode_seqs, itl_weight (tokens whose gap to the previous token is exactly this step).
    itl_extra_seconds: the other gaps (across a preemption; the first decode gap in static mode).
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
    preemptions: int
    recomputed_tokens: int
    num_gpu_blocks: int
    mode: Literal["continuous", "static"]


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
    peak_blocks = -(-(total - 1 + lookahead_tokens) // bs)
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
    if not scheduler.enable_chunked_prefill:
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


def run_engine(requests: RequestSet, scheduler: SchedulerConfig, step_cost: StepCost) -> EngineRun:
    """Run the engine over ``requests`` until every one has finished or been refused."""
    cached = cached_prefix_tokens(requests.input_tokens, requests.prefix_cache_hit_rate, scheduler.block_size_tokens)
    speculation = decode_speculation(step_cost)
    rejected, reasons = rejections(requests, scheduler, cached, speculation.num_speculative_tokens)
    if scheduler.mode == "static" and speculation != PLAIN_DECODING:
        raise ScenarioError(
            "the static-batching simulation does not model speculative decoding.",
            hint="Simulate continuous batching (drop --static), or drop --speculative-method.",
        )
    engine = _run_static if scheduler.mode == "static" else _run_continuous
    return engine(requests, scheduler, step_cost, cached, rejected, reasons)


class _Recorder:
    """Per-step records in compact arrays (no Python object per step)."""

    def __init__(self) -> None:
        self.start = array("d")
        self.seconds = array("d")
        self.running = array("q")
        self.waiting = array("q")
        self.used = array("q")
        self.prefill = array("q")
        self.decode = array("q")
        self.itl_weight = array("q")

    def arrays(self) -> dict[str, np.ndarray]:
        as_np = lambda a, dtype: np.frombuffer(a, dtype=dtype).copy() if len(a) else np.zeros(0, dtype)  # noqa: E731
        return dict(
            step_start_s=as_np(self.start, np.float64),
            step_seconds=as_np(self.seconds, np.float64),
            running=as_np(self.running, np.int64),
            waiting=as_np(self.waiting, np.int64),
            used_blocks=as_np(self.used, np.int64),
            prefill_tokens=as_np(self.prefill, np.int64),
            decode_seqs=as_np(self.decode, np.int64),
            itl_weight=as_np(self.itl_weight, np.int64),
        )


def _bad_step(seconds: float, prefill_tokens: int, decode_seqs: int) -> ScenarioError:
    return ScenarioError(
        f"the step-cost model returned {seconds!r} s for a step of {prefill_tokens} prefill tokens "
        f"and {decode_seqs} decoding requests; a step must take a finite time >= 0.",
        hint="Check the hardware numbers behind the latency model (zero bandwidth or FLOP/s?).",
    )


def _run_continuous(requests, scheduler, step_cost, cached_arr, rejected_arr, reasons) -> EngineRun:
    n = len(requests)
    prompt = requests.input_tokens.tolist()
    out = requests.output_tokens.tolist()
    cached = cached_arr.tolist()
    rejected = rejected_arr.tolist()
    bs = scheduler.block_size_tokens
    total_blocks = scheduler.num_gpu_blocks
    token_budget = scheduler.max_num_batched_tokens
    max_seqs = scheduler.max_num_seqs
    chunked = scheduler.enable_chunked_prefill
    step_seconds = step_cost.step_seconds
    speculation = decode_speculation(step_cost)
    pos = speculation.position  # G(s): tokens gained by a request decoding since step 0 (plain: s)
    reach = speculation.first_step_at
    grows: dict[tuple[int, int], list[int]] = {}  # new blocks per c0 mod bs, by the step's slot window
    verified = speculation.verified_tokens  # per decoding request and step (plain: 1)

    nan = math.nan
    first_t = [nan] * n
    finish_t = [nan] * n
    last_tok = [nan] * n  # time of the last token before the latest preemption
    ntok = prompt[:]  # tokens the request holds: prompt + generated (target of its (re)prefill)
    gen = [0] * n  # output tokens generated so far
    comp = [0] * n  # computed tokens, while in (re)prefill
    c0 = [0] * n  # while decoding: computed tokens = c0 + G(step index)
    last_step = [0] * n  # while decoding: the step that gives its last token

    waiting: deque[int] = deque()
    decoding: dict[int, None] = {}  # insertion-ordered set: admission order
    phase_count = [0] * bs  # decoding requests by c0 mod bs
    finish_at: dict[int, list[int]] = {}  # step index -> decoding requests that finish in it
    c0_sum = 0
    used = 0  # KV blocks held by running requests
    prefilling = -1  # the running request still in (re)prefill; at most one, last in running order
    preemptions = 0
    recomputed = 0
    itl_extra: list[float] = []
    rec = _Recorder()

    closed = requests.concurrency is not None
    if closed:
        arrival = [nan] * n
        arr_list: list[float] = []
        next_closed = 0
    else:
        arrival = requests.arrival_time_s.tolist()
        arr_list = arrival
    next_open = 0

    def send_next(now: float) -> None:
        """Closed loop: the next request arrives now (refused ones free their slot at once)."""
        nonlocal next_closed
        while next_closed < n:
            rid = next_closed
            next_closed += 1
            arrival[rid] = now
            if not rejected[rid]:
                waiting.append(rid)
                return

    t = arr_list[0] if (not closed and n) else 0.0
    if closed:
        for _ in range(min(requests.concurrency, n)):
            send_next(0.0)

    next_arrival = math.inf if closed or not n else arr_list[0]
    record_start, record_seconds = rec.start.append, rec.seconds.append
    record_running, record_waiting, record_used = rec.running.append, rec.waiting.append, rec.used.append
    record_prefill, record_decode = rec.prefill.append, rec.decode.append

    s = 0  # step index
    g_prev, g_now, g_next = pos(-1), pos(0), pos(1)  # G(s - 1), G(s), G(s + 1)
    while True:
        if t >= next_arrival:
            while next_open < n and arr_list[next_open] <= t:
                if not rejected[next_open]:
                    waiting.append(next_open)
                next_open += 1
            next_arrival = arr_list[next_open] if next_open < n else math.inf
        n_dec = len(decoding)
        if not n_dec and prefilling < 0 and not waiting:
            if closed or next_open >= n:
                break
            t = arr_list[next_open]  # idle until the next arrival
            continue

        # During step s a decoding request holds cdiv(c0 + G(s) + k + 1) blocks; it held cdiv(c0 + G(s-1) + k + 1).
        hold_prev, hold_now = g_prev + verified, g_now + verified
        reserve = verified - (g_next - g_now)  # lookahead slots a request finishing its prefill now takes
        budget = token_budget - n_dec * verified
        free = total_blocks - used
        need = 0
        if n_dec:  # one block per decoding request whose new slots cross a block start
            for j in range(hold_prev, hold_now):
                need += phase_count[-j % bs]
        preempted = False
        if need > free:
            # Slow path (vLLM order): walk the decoding requests; one that needs a block when none
            # is free preempts from the end of the running list (the prefilling request first,
            # then the newest decodes) until a block frees or it has preempted itself.
            # New blocks of a decoding request this step, by c0 mod bs: cdiv(c0 + hold_now) - cdiv(c0 + hold_prev).
            grow_key = (hold_prev % bs, hold_now - hold_prev)
            grow_by_phase = grows.get(grow_key)
            if grow_by_phase is None:
                grow_by_phase = grows[grow_key] = [-(-(p + hold_now) // bs) + (p + hold_prev) // -bs for p in range(bs)]
            order = list(decoding)
            end = len(order)
            i = 0
            while i < end:
                rid = order[i]
                grow = grow_by_phase[c0[rid] % bs]
                if grow:
                    self_preempted = False
                    while free < grow:
                        if prefilling >= 0:
                            victim = prefilling
                            computed = comp[victim]
                            held = computed
                            prefilling = -1
                        else:
                            end -= 1
                            victim = order[end]
                            cv = c0[victim]
                            del decoding[victim]
                            phase_count[cv % bs] -= 1
                            c0_sum -= cv
                            finish_at[last_step[victim]].remove(victim)
                            computed = cv + g_now
                            held = cv + hold_prev
                            gen[victim] = computed - prompt[victim] + 1
                            ntok[victim] = prompt[victim] + gen[victim]
                            last_tok[victim] = t
                            self_preempted = victim == rid
                        blocks = -(-held // bs)
                        recomputed += computed - cached[victim]
                        used -= blocks
                        free += blocks
                        waiting.appendleft(victim)
                        preemptions += 1
                        if self_preempted:
                            break
                    if self_preempted:
                        break
                    free -= grow
                    used += grow
                i += 1
            need = 0  # allocated above
            n_dec = len(decoding)
            budget = token_budget - n_dec
            preempted = True
        used += need
        free -= need

        prefill_tokens = 0
        pairs = 0.0
        chunks: list[tuple[int, int, int]] = []
        if prefilling >= 0 and budget > 0:
            rid = prefilling
            start = comp[rid]
            c = ntok[rid] - start
            if c > budget:
                c = budget
            extra = reserve if start + c == ntok[rid] else 0
            blocks = -(-(start + c + extra) // bs) + (start // -bs)  # cdiv(start + c + extra) - cdiv(start)
            if blocks > free:
                # It cannot grow; the last running request (itself) is preempted.
                blocks = -(-start // bs)
                used -= blocks
                free += blocks
                recomputed += start - cached[rid]
                waiting.appendleft(rid)
                preemptions += 1
                prefilling = -1
                preempted = True
            else:
                used += blocks
                free -= blocks
                budget -= c
                prefill_tokens += c
                pairs += c * (start + (c + 1) * 0.5)
                chunks.append((rid, start, c))
        n_run = n_dec + (prefilling >= 0)

        if not preempted:
            while waiting and budget > 0 and n_run < max_seqs:
                rid = waiting[0]
                start = cached[rid]
                c = ntok[rid] - start
                if c > budget:
                    if not chunked:
                        break
                    c = budget
                blocks = -(-(start + c + (reserve if start + c == ntok[rid] else 0)) // bs)
                if blocks > free:
                    break
                waiting.popleft()
                used += blocks
                free -= blocks
                budget -= c
                prefill_tokens += c
                pairs += c * (start + (c + 1) * 0.5)
                chunks.append((rid, start, c))
                n_run += 1

        if not prefill_tokens and not n_dec:
            continue  # only a self-preemption happened; the next pass admits from the queue

        dt = step_seconds(
            prefill_tokens=prefill_tokens,
            prefill_attention_pairs=pairs,
            decode_seqs=n_dec,
            decode_kv_tokens=c0_sum + n_dec * hold_now,
        )
        if not 0.0 <= dt < math.inf:
            raise _bad_step(dt, prefill_tokens, n_dec)
        record_start(t)
        record_seconds(dt)
        record_running(n_run)
        record_waiting(len(waiting))
        record_used(used)
        record_prefill(prefill_tokens)
        record_decode(n_dec)
        t += dt

        if n_dec:
            done = finish_at.pop(s, None)
            if done:
                for rid in done:
                    c = c0[rid]
                    del decoding[rid]
                    phase_count[c % bs] -= 1
                    c0_sum -= c
                    used -= -(-(c + hold_now) // bs)
                    gen[rid] = out[rid]
                    finish_t[rid] = t
                    if closed:
                        send_next(t)
        for rid, start, c in chunks:
            computed = start + c
            if computed < ntok[rid]:
                comp[rid] = computed
                prefilling = rid
                continue
            if prefilling == rid:
                prefilling = -1
            g = gen[rid]
            if g == 0:
                first_t[rid] = t
            else:
                itl_extra.append(t - last_tok[rid])
            g += 1
            gen[rid] = g
            if g == out[rid]:
                used -= -(-(computed + reserve) // bs)
                finish_t[rid] = t
                if closed:
                    send_next(t)
            else:
                c = computed - g_next
                c0[rid] = c
                decoding[rid] = None
                phase_count[c % bs] += 1
                c0_sum += c
                # The step whose tokens reach out: the first m with G(m + 1) >= G(s + 1) + out - g.
                key = reach(g_next + out[rid] - g) - 1
                last_step[rid] = key
                bucket = finish_at.get(key)
                if bucket is None:
                    finish_at[key] = [rid]
                else:
                    bucket.append(rid)
        s += 1
        g_prev, g_now, g_next = g_now, g_next, pos(s + 1)

    rec.itl_weight = rec.decode  # every decode token's gap is exactly its step
    return EngineRun(
        arrival_time_s=np.asarray(arrival, dtype=np.float64),
        first_token_time_s=np.asarray(first_t, dtype=np.float64),
        finish_time_s=np.asarray(finish_t, dtype=np.float64),
        input_tokens=requests.input_tokens,
        output_tokens=requests.output_tokens,
        rejected=rejected_arr,
        rejection_reasons=reasons,
        itl_extra_seconds=np.asarray(itl_extra, dtype=np.float64),
        preemptions=preemptions,
        recomputed_tokens=recomputed,
        num_gpu_blocks=total_blocks,
        mode="continuous",
        **rec.arrays(),
    )


def _run_static(requests, scheduler, step_cost, cached_arr, rejected_arr, reasons) -> EngineRun:
    """Static batching: form a batch, prefill all of it, decode until its longest request ends.

    The batch takes up to max_num_seqs waiting requests, FCFS, while their full-length KV
    (cdiv(prompt + output - 1, block_size) blocks each) fits, as a server without paging must
    reserve. Prefill packs prompt chunks into steps of max_num_batched_tokens. Decode runs
    max(output) - 1 steps over the whole batch: finished requests are padded and still computed
    (as in HF ``generate``). Nothing is admitted until the batch is over.
    """
    n = len(requests)
    prompt = requests.input_tokens.tolist()
    out = requests.output_tokens.tolist()
    cached = cached_arr.tolist()
    rejected = rejected_arr.tolist()
    bs = scheduler.block_size_tokens
    token_budget = scheduler.max_num_batched_tokens
    chunked = scheduler.enable_chunked_prefill
    step_seconds = step_cost.step_seconds
    nan = math.nan
    first_t = [nan] * n
    finish_t = [nan] * n
    itl_extra: list[float] = []
    rec = _Recorder()
    waiting: deque[int] = deque()

    closed = requests.concurrency is not None
    arrival = [nan] * n if closed else requests.arrival_time_s.tolist()
    next_id = 0

    def arrive(now: float, finished: int = 0) -> None:
        """Open loop: queue arrivals up to ``now``. Closed loop: one arrival per finished request."""
        nonlocal next_id
        if closed:
            while finished and next_id < n:
                arrival[next_id] = now
                if not rejected[next_id]:
                    waiting.append(next_id)
                    finished -= 1
                next_id += 1
            return
        while next_id < n and arrival[next_id] <= now:
            if not rejected[next_id]:
                waiting.append(next_id)
            next_id += 1

    def step(
        now: float, running: int, used: int, prefill: int, pairs: float, decode: int, kv: int, itl_weight: int
    ) -> float:
        dt = step_seconds(
            prefill_tokens=prefill, prefill_attention_pairs=pairs, decode_seqs=decode, decode_kv_tokens=kv
        )
        if not 0.0 <= dt < math.inf:
            raise _bad_step(dt, prefill, decode)
        rec.start.append(now)
        rec.seconds.append(dt)
        rec.running.append(running)
        rec.waiting.append(len(waiting))
        rec.used.append(used)
        rec.prefill.append(prefill)
        rec.decode.append(decode)
        rec.itl_weight.append(itl_weight)
        return now + dt

    t = 0.0
    if closed:
        arrive(0.0, finished=requests.concurrency)
    elif n:
        t = arrival[0]
    while True:
        arrive(t)
        if not waiting:
            if closed or next_id >= n:
                break
            t = arrival[next_id]
            continue
        batch: list[int] = []
        used = 0
        while waiting and len(batch) < scheduler.max_num_seqs:
            blocks = -(-(prompt[waiting[0]] + out[waiting[0]] - 1) // bs)
            if used + blocks > scheduler.num_gpu_blocks:
                break
            batch.append(waiting.popleft())
            used += blocks
        size = len(batch)
        alive = size  # unfinished requests of the batch (padded rows are not requests)

        pending = deque(batch)
        computed = {rid: cached[rid] for rid in batch}
        while pending:
            budget = token_budget
            prefill = 0
            pairs = 0.0
            completed = []
            while pending and budget > 0:
                rid = pending[0]
                start = computed[rid]
                c = prompt[rid] - start
                if c > budget:
                    if not chunked:
                        break
                    c = budget
                computed[rid] = start + c
                prefill += c
                pairs += c * (start + (c + 1) * 0.5)
                budget -= c
                if computed[rid] == prompt[rid]:
                    completed.append(pending.popleft())
            t = step(t, alive, used, prefill, pairs, 0, 0, 0)
            arrive(t)
            for rid in completed:
                first_t[rid] = t
                if out[rid] == 1:
                    finish_t[rid] = t
                    alive -= 1
                    arrive(t, finished=1)

        by_length: dict[int, list[int]] = {}
        for rid in batch:
            by_length.setdefault(out[rid], []).append(rid)
        prompt_sum = sum(prompt[rid] for rid in batch)
        active = sum(1 for rid in batch if out[rid] > 1)
        longest = max(out[rid] for rid in batch)
        for k in range(1, longest):
            # Decode step k emits token k + 1; the first decode gap is per request (prefill ends differ).
            t = step(t, active, used, 0, 0.0, size, prompt_sum + size * k, active if k > 1 else 0)
            arrive(t)
            if k == 1:
                itl_extra.extend(t - first_t[rid] for rid in batch if out[rid] > 1)
            for rid in by_length.get(k + 1, ()):
                finish_t[rid] = t
                active -= 1
                arrive(t, finished=1)

    return EngineRun(
        arrival_time_s=np.asarray(arrival, dtype=np.float64),
        first_token_time_s=np.asarray(first_t, dtype=np.float64),
        finish_time_s=np.asarray(finish_t, dtype=np.float64),
        input_tokens=requests.input_tokens,
        output_tokens=requests.output_tokens,
        rejected=rejected_arr,
        rejection_reasons=reasons,
        itl_extra_seconds=np.asarray(itl_extra, dtype=np.float64),
        preemptions=0,
        recomputed_tokens=0,
        num_gpu_blocks=scheduler.num_gpu_blocks,
        mode="static",
        **rec.arrays(),
    )


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


def summarize(run: EngineRun, *, step_cost_model: str) -> SimulationResult:
    """Turn an ``EngineRun`` into the metrics of ``vllm bench serve`` plus engine statistics."""
    done = ~np.isnan(run.finish_time_s)
    arrival = run.arrival_time_s[done]
    ttft = run.first_token_time_s[done] - arrival
    e2e = run.finish_time_s[done] - arrival
    out = run.output_tokens[done]
    multi = out > 1
    tpot = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
    itl = weighted_latency_stats(
        np.concatenate([run.step_seconds, run.itl_extra_seconds]),
        np.concatenate([run.itl_weight, np.ones(len(run.itl_extra_seconds), dtype=np.int64)]),
    )

    num_completed = int(done.sum())
    input_tokens = int(run.input_tokens[done].sum())
    output_tokens = int(out.sum())
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
        ttft_seconds=latency_stats(ttft),
        tpot_seconds=latency_stats(tpot),
        itl_seconds=itl,
        e2e_seconds=latency_stats(e2e),
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
    )


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
