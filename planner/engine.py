"""EngineProfile: how one serving engine, in one range of versions, spends a step and sizes memory.

Engines differ in what the planner's step cost depends on (``planner.estimate.step``): whether the
scheduler's host work overlaps the GPU (vLLM's async scheduling from v0.14, SGLang's overlap
scheduler), which batches run as CUDA graphs and up to what size, whether a custom all-reduce
takes small TP messages, whether the CUDA-graph pool is reserved before the KV cache is sized,
and the fitted efficiency factors of its kernels. Each profile is a cited YAML file in
``planner/engines/`` (``<id>.yaml``); the fitted factors of every profile are in
``planner/engines/fitted.yaml``, written by ``benchmarks/serving_accuracy.py --write``.

An engine is named ``ENGINE@VERSION`` (``vllm@0.15.1``, ``sglang@0.5.4``, ``trtllm@1.2``) or by a
profile id (``vllm-v1-async``); ``resolve_engine`` picks the profile whose version range holds the
version. The default is the version the exports target (``DEFAULT_ENGINE``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.efficiency import Efficiency
from planner.errors import PlannerError

ENGINES_DIR = Path(__file__).resolve().parent / "engines"
FITTED_FILE = ENGINES_DIR / "fitted.yaml"
#: The engine and version the exports target (vLLM's argument names and defaults of this release).
DEFAULT_ENGINE = "vllm@0.33.0"


class EngineError(PlannerError):
    """An engine name or version the planner has no profile for, or a malformed profile file."""


@functools.lru_cache(maxsize=1024)
def parse_version(text: str) -> tuple[int, ...]:
    """'0.15.1' -> (0, 15, 1); 'v0.5.4.post2' -> (0, 5, 4); '1.2.0rc1' -> (1, 2, 0). Kept per text: a plan's
    re-plans read the profile's version steps again and again."""
    parts = re.findall(r"\d+", text.lstrip("vV").split("rc")[0].split(".post")[0].split("+")[0])
    if not parts:
        raise EngineError(f"engine version {text!r} has no number.", hint="Write it as e.g. vllm@0.15.1.")
    return tuple(int(p) for p in parts[:4])


def at_or_after(version: str | None, first: str) -> bool:
    """Whether ``version`` is ``first`` or later; None (a profile's newest) is."""
    return version is None or parse_version(version) >= parse_version(first)


class MoeWeightLayout(BaseModel):
    """How an engine holds a quantized checkpoint's routed-expert weights once loaded, on one range of cards.

    The kernel backend an engine picks for a weight format depends on the card (vLLM's ``mxfp4.py``: Marlin
    below SM90, triton_kernels on Hopper, FlashInfer on Blackwell), and each backend pads the expert shapes
    or keeps extra copies, so the resident bytes differ from the checkpoint's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    weight_format: str = Field(description="Expert weight format the rule is for, as WeightFormat names it (mxfp4).")
    backend: str = Field(description="Kernel backend the engine picks on these cards (marlin, triton, flashinfer).")
    min_compute_capability: float = Field(description="Lowest CUDA compute capability it holds for (included).")
    max_compute_capability: float | None = Field(
        None, description="First compute capability it no longer holds for (excluded); None: no upper end."
    )
    pad_intermediate_to: int = Field(
        1, ge=1, description="Each rank's expert FFN width is rounded up to a multiple of this, in elements."
    )
    pad_hidden_to: int = Field(1, ge=1, description="The hidden size of the expert weights is rounded up to this.")
    scale_bits_per_weight: float = Field(
        0.0, ge=0, description="The format's scale bits per weight (MXFP4: one 8-bit E8M0 scale per 32 = 0.25)."
    )
    scale_copies: int = Field(
        1, ge=1, description="Copies of the scales held after loading (triton_kernels keeps the loaded ones too)."
    )
    bias_bytes_per_element: float | None = Field(
        None, gt=0, description="Bytes per expert-bias element after loading (fp32: 4); None: the model dtype."
    )
    source: str = Field(description="Where the rule comes from, and a measurement that checks it.")

    def holds(self, weight_format: str, compute_capability: str | None) -> bool:
        """Whether the rule applies to experts stored as ``weight_format`` on a card of ``compute_capability``."""
        if compute_capability is None or weight_format != self.weight_format:
            return False
        cc = float(compute_capability)
        return cc >= self.min_compute_capability and (
            self.max_compute_capability is None or cc < self.max_compute_capability
        )


class OutputReserve(BaseModel):
    """KV an engine holds back, at admission, for output tokens not generated yet.

    A waiting prompt is admitted only while the tokens in use, plus ``running_ratio`` of the running requests'
    remaining output tokens, plus ``new_request`` of each request admitted in the same pass's output tokens
    (its own included), stay below the KV pool. vLLM reserves nothing (it admits on the prompt's blocks and
    preempts when decodes run out); SGLang reserves a decaying share (``PrefillAdder``: running requests at
    ``new_token_ratio``, new ones at their whole ``max_new_tokens``); TensorRT-LLM's default
    GUARANTEED_NO_EVICT reserves every started request's whole output, so it never evicts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    new_request: float = Field(
        ge=0, le=1, description="Share of a request's output tokens reserved by the pass that admits it."
    )
    running_initial: float = Field(
        ge=0, le=1, description="Share of the running requests' remaining output tokens reserved, after idle."
    )
    running_floor: float = Field(ge=0, le=1, description="The share it decays to.")
    decay_steps: int = Field(ge=0, description="Decode steps from running_initial down to running_floor (0: no decay).")
    clip_tokens: int | None = Field(
        None, ge=1, description="Most output tokens one request's estimate counts (None: no cap)."
    )

    def words(self) -> str:
        """The reserve in a sentence: 'a new request's whole output, the running ones' remaining x 0.7 falling to
        0.098 over 600 decode steps, at most 4,096 tokens each'."""
        new = "its whole output" if self.new_request == 1 else f"{self.new_request:g} of its output"
        decays = bool(self.decay_steps) and self.running_floor != self.running_initial
        if self.running_initial == 1 and not decays:
            running = "the running requests' whole remaining outputs"
        else:
            running = f"the running requests' remaining outputs x {self.running_initial:g}"
        if decays:
            running += f" falling to {self.running_floor:g} over {self.decay_steps:,} decode steps"
        clip = f", at most {self.clip_tokens:,} tokens a request" if self.clip_tokens is not None else ""
        return f"a prompt is admitted only while KV is left for {new} and for {running}{clip}"

    def running_ratio(self, decode_steps: int) -> float:
        """The running requests' share after ``decode_steps`` decode steps since the engine was last idle."""
        if self.decay_steps == 0 or decode_steps <= 0:
            return self.running_initial
        fall = (self.running_initial - self.running_floor) * decode_steps / self.decay_steps
        return max(self.running_initial - fall, self.running_floor)


class LongContextChunking(BaseModel):
    """vLLM V0's rule (vllm-project/vllm #6666, from 0.5.4): with ``--enable-chunked-prefill`` unset, chunked prefill is
    on for a max_model_len above ``above_tokens``, "to avoid OOM errors in the initial memory profiling phase", except
    for models or features it did not support: multimodal models, layers of ``exempt_kv_kinds``, speculative decoding
    and LoRA (``resolve.chunked_prefill``; the planner applies every exception at every version of the rule)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    above_tokens: int = Field(
        ge=1, description="The rule turns chunked prefill on above this max_model_len, in tokens."
    )
    from_version: str = Field(description="First version with the rule.")
    exempt_kv_kinds: frozenset[str] = Field(
        description="KV-cache kinds (planner.model.kv: 'mla', 'sliding_window', ...) of models the rule leaves out."
    )

    def holds(self, version: str | None, max_model_len: int, exempt: Callable[[], bool]) -> bool:
        """Whether the rule turns chunked prefill on at ``version`` (None: the range's newest); ``exempt()`` is asked
        only when the version and the length would turn it on."""
        return max_model_len > self.above_tokens and at_or_after(version, self.from_version) and not exempt()


#: Without chunked prefill, a max_model_len above the step budget: vLLM refuses to start (its SchedulerConfig check);
#: TensorRT-LLM starts and refuses each prompt above the budget (``LLM._check_arguments``).
LongPrompts = Literal["refused_at_start", "refused_per_request"]
#: How an engine sizes its KV cache: "budget" (vLLM: a fraction of the card less weights, activation peak, graph pool
#: and the rest), "static_pool" (SGLang: a fraction of the card holds weights + KV, activations and graphs outside it),
#: "free_fraction" (TensorRT-LLM: a fraction of the memory free after weights, activations and graphs).
MemoryRule = Literal["budget", "static_pool", "free_fraction"]
#: Engine family -> its name in words.
ENGINE_NAMES: dict[str, str] = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
#: An engine's name in words -> its family (how published records name it).
ENGINE_FAMILIES: dict[str, str] = {name: family for family, name in ENGINE_NAMES.items()}
#: Each rule's flag for the fraction the scenario's gpu_memory_utilization stands for: vLLM's budget, SGLang's static
#: pool, TensorRT-LLM's share of the free memory (trtllm-serve's spelling).
FRACTION_FLAGS: dict[str, str] = {
    "budget": "--gpu-memory-utilization",
    "static_pool": "--mem-fraction-static",
    "free_fraction": "--kv_cache_free_gpu_memory_fraction",
}


class CardDefaults(BaseModel):
    """An engine's batch defaults on cards below a memory size (SGLang picks them by the card's memory)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    below_mib: int | None = Field(description="Cards with less memory than this, in MiB (None: every larger card).")
    chunked_prefill_size: int = Field(ge=1, description="Default prefill chunk, in tokens (--chunked-prefill-size).")
    cuda_graph_max_bs: int = Field(ge=1, description="Largest captured decode batch below TP 4 (--cuda-graph-max-bs).")
    cuda_graph_max_bs_tp4: int = Field(ge=1, description="Largest captured decode batch from TP 4 on.")


class StaticMemory(BaseModel):
    """An engine that sizes one static pool (weights + KV cache) as a fraction of the card, and keeps activations
    and CUDA graphs in the rest: SGLang's ``--mem-fraction-static``. Its KV cache is the pool less the weights
    (``ModelRunner.profile_max_num_token``: free memory after loading - total x (1 - fraction)), where vLLM's is
    its budget less the weights, the activation peak and the graph pool.

    The default fraction changed with sgl-project/sglang#10975 (``ServerArgs._handle_gpu_memory_settings``, from
    ``heuristic_from``): before, a table by TP size; since, (card - reserved) / card in MiB, rounded to 3 places,
    with reserved = base + per-prefill-token x max(chunk, min) + per-graph-sequence x cuda_graph_max_bs +
    per-rank x TP x PP (+ the speculative draft's), at least ``floor_mib`` on cards above ``floor_above_mib``.
    The chunk and the largest graph batch are by card memory then too (``card_defaults``; ``legacy_card_defaults``
    before)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp_fractions: tuple[tuple[int, float], ...] = Field(
        description="Before heuristic_from: (smallest TP, fraction) pairs, largest TP first; the first whose TP the "
        "deployment's reaches is the default."
    )
    heuristic_from: str = Field(description="First version whose default is the reserved-memory rule.")
    base_mib: float = Field(ge=0, description="Reserved for constant metadata, MiB.")
    prefill_mib_per_token: float = Field(ge=0, description="Reserved per token of the prefill chunk, MiB.")
    min_prefill_tokens: int = Field(ge=0, description="The chunk counts at least this many tokens.")
    graph_mib_per_seq: float = Field(ge=0, description="Reserved per sequence of the largest captured batch, MiB.")
    rank_mib: float = Field(ge=0, description="Reserved per rank of the TP x PP group, MiB.")
    draft_head_mib: float = Field(ge=0, description="Reserved for an EAGLE / MTP draft head and its graphs, MiB.")
    draft_model_mib: float = Field(ge=0, description="Reserved for a separate draft model and its graphs, MiB.")
    floor_mib: float = Field(ge=0, description="Least reserved on cards above floor_above_mib, MiB.")
    floor_above_mib: float = Field(ge=0, description="Cards above this memory reserve at least floor_mib, MiB.")
    card_defaults: tuple[CardDefaults, ...] = Field(
        description="From heuristic_from: batch defaults by card memory, smallest bucket first, the last unbounded."
    )
    legacy_card_defaults: tuple[CardDefaults, ...] = Field(description="Before heuristic_from: the same.")
    requests_per_context: int = Field(
        ge=1, description="Request slots by default per context length of pool tokens (ModelRunner's 512)."
    )
    min_requests: int = Field(ge=1, description="Fewest request slots by default.")
    max_requests: int = Field(ge=1, description="Most request slots by default.")

    def running_requests(self, pool_tokens: int, context_len: int) -> int:
        """Requests the engine runs at once by default (``--max-running-requests`` unset): the request slots it
        sizes from its KV pool of ``pool_tokens`` tokens and its context length, min(max(pool / context x
        requests_per_context, min_requests), max_requests), at most half the pool's tokens."""
        slots = min(
            max(int(pool_tokens / context_len * self.requests_per_context), self.min_requests), self.max_requests
        )
        return max(1, min(slots, pool_tokens // 2))

    def heuristic(self, version: str | None) -> bool:
        """Whether ``version``'s default is the reserved-memory rule (None: the range's newest, so yes)."""
        return at_or_after(version, self.heuristic_from)

    def card(self, version: str | None, memory_mib: float) -> CardDefaults:
        """The batch defaults of a card with ``memory_mib`` at ``version``."""
        buckets = self.card_defaults if self.heuristic(version) else self.legacy_card_defaults
        return next(b for b in buckets if b.below_mib is None or memory_mib < b.below_mib)

    def graph_max_bs(self, version: str | None, memory_mib: float, tp: int) -> int:
        """The largest captured decode batch by default (``cuda_graph_max_bs``)."""
        card = self.card(version, memory_mib)
        return card.cuda_graph_max_bs_tp4 if tp >= 4 else card.cuda_graph_max_bs

    def fraction(
        self, version: str | None, memory_mib: float, tp: int, pp: int, chunk_tokens: int, speculative: str | None
    ) -> float:
        """The default static fraction at ``version`` for this card, group size, prefill chunk and speculative
        method (None: none; 'ngram' drafts without a model and reserves nothing)."""
        if not self.heuristic(version):
            return next((f for least, f in self.tp_fractions if tp >= least), self.tp_fractions[-1][1])
        reserved = (
            self.base_mib
            + self.prefill_mib_per_token * max(chunk_tokens, self.min_prefill_tokens)
            + self.graph_mib_per_seq * self.graph_max_bs(version, memory_mib, tp)
            + self.rank_mib * tp * pp
        )
        if memory_mib > self.floor_above_mib:
            reserved = max(reserved, self.floor_mib)
        if speculative == "draft":  # SGLang's STANDALONE drafter
            reserved += self.draft_model_mib
        elif speculative not in (None, "ngram"):
            reserved += self.draft_head_mib
        return round((memory_mib - reserved) / memory_mib, 3)


class EngineProfile(BaseModel):
    """One engine family over a range of versions (``min_version`` <= v < ``max_version``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Profile id, the file name without .yaml (e.g. vllm-v1-async).")
    engine: Literal["vllm", "sglang", "trtllm"] = Field(description="Engine family.")
    name: str = Field(description="Human name with the version range.")
    min_version: str = Field(description="First version the profile holds for (included).")
    max_version: str | None = Field(description="First version it no longer holds for (excluded); None: still current.")
    async_scheduling: bool = Field(
        description="Host work of step N+1 overlaps the GPU's step N by default (a step lasts max(gpu, host); "
        "else gpu + host)."
    )
    cuda_graph_mode: Literal["full_and_piecewise", "piecewise", "decode_only"] = Field(
        description="Which batches replay CUDA graphs: decode_only / full_and_piecewise give pure-decode steps "
        "full graphs; mixed steps launch attention eagerly."
    )
    max_cuda_graph_batch: int = Field(ge=1, le=8192, description="Largest captured decode batch, in sequences.")
    no_full_graph_kv: tuple[str, ...] = Field(
        (),
        description="KV-cache kinds (planner.model.kv: 'chunked_local', ...) whose attention backend this engine "
        "cannot capture in a full CUDA graph: a model with any such layer runs its decode steps with piecewise "
        "graphs (every attention launched eagerly), the engine's fallback for the whole model.",
    )
    custom_allreduce: bool = Field(
        description="A custom all-reduce takes small TP messages (< 8 MiB, NVLink or 2 ranks)."
    )
    custom_allreduce_off: tuple[tuple[str, str], ...] = Field(
        (),
        description="Version ranges [first, first excluded) inside this profile whose default runs every "
        "all-reduce through NCCL (custom all-reduce not yet there, or off by default).",
    )
    custom_allreduce_graph_fit: bool = Field(
        True,
        description="A custom all-reduce replayed inside a CUDA graph is priced with the in-graph fit "
        "(planner.estimate.step); false: with the eager fit, for profiles whose factors were fitted that way.",
    )
    reserves_cuda_graph_memory: bool = Field(
        description="The CUDA-graph pool is estimated and reserved before the KV cache is sized."
    )
    reserves_cuda_graph_memory_from: str | None = Field(
        description="Version from which reserves_cuda_graph_memory holds inside this range (None: the whole range)."
    )
    chunked_prefill_default: bool = Field(description="Chunked prefill is on by default.")
    chunked_prefill_long_context: LongContextChunking | None = Field(
        None,
        description="A rule that turns chunked prefill on by default for long contexts (vLLM V0); None: none.",
    )
    chunked_prefill_budgets: tuple[tuple[str, int], ...] = Field(
        (),
        description="(first version, tokens) steps, oldest first: the token budget with chunked prefill when the "
        "command sets none, from that version on (vLLM V0's SchedulerConfig: 512, then 2048); empty: vLLM's by card, "
        "or default_max_num_batched_tokens.",
    )
    gpu_memory_utilization_steps: tuple[tuple[str, float], ...] = Field(
        (),
        description="(first version, fraction) steps, oldest first: vLLM's default --gpu-memory-utilization from that "
        "version on (0.9, then 0.92 from 0.33.0); empty: not vLLM's budget rule (SGLang's static pool, TensorRT-LLM's "
        "share of the free memory).",
    )
    long_prompts: LongPrompts = Field(
        "refused_at_start", description="A prompt above the step without chunked prefill (``LongPrompts``)."
    )
    unchunked_min_batched_tokens: int | None = Field(
        None,
        ge=1,
        description="Without chunked prefill the budget is max(max_model_len, this) when the command sets none (vLLM "
        "V0's SchedulerConfig: 2048); None: max(max_model_len, vLLM's budget by card).",
    )
    mixed_batches: Literal["always", "with_chunked_prefill", "never"] = Field(
        "always",
        description="Whether a step carries prefill chunks and decodes together: 'always' (vLLM V1's token budget, "
        "TensorRT-LLM's in-flight batching); 'with_chunked_prefill' (vLLM V0: without it a step that admits "
        "prefills runs only prefills); 'never' (SGLang without --enable-mixed-chunk: prefill first, decodes wait).",
    )
    output_reserve: OutputReserve | None = Field(
        None,
        description="KV held back at admission for outputs not generated yet (None: none, vLLM's admission).",
    )
    prefix_caching_default: bool = Field(
        False,
        description="Prefix caching is on by default (vLLM V1's automatic prefix caching, SGLang's radix cache, "
        "TensorRT-LLM's KV block reuse): freed blocks stay cached, so a preempted request finds its computed blocks "
        "again when re-admitted (the simulator's SchedulerConfig.prefix_caching).",
    )
    kv_fraction_of_free: float | None = Field(
        None,
        gt=0,
        le=1,
        description="The engine gives its KV cache this fraction of the memory free after the weights, the activation "
        "peak and the graph pool (TensorRT-LLM's kv_cache_free_gpu_memory_fraction); None: not this rule.",
    )
    static_memory: StaticMemory | None = Field(
        None,
        description="The engine sizes a static pool (weights + KV) as a fraction of the card, activations and graphs "
        "outside it (SGLang); None: vLLM's budget (the fraction less weights, activation peak and graph pool).",
    )
    default_max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="Sequences per step when the command sets none; None: vLLM's by card "
        "(``scenario.default_batch_limits``), or the static pool's request slots (``StaticMemory.running_requests``).",
    )
    default_max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens per step when the command sets none; None: vLLM's by card, or the static "
        "pool's prefill chunk by card (``StaticMemory.card``).",
    )
    profile_requests: Literal["max_num_seqs", "context_requests"] = Field(
        "max_num_seqs",
        description="Whose logits the profiling forward that sizes the KV cache holds: 'max_num_seqs' rows (vLLM's "
        "sampler run), or one per dummy context request (TensorRT-LLM: requests of min(max_num_tokens, max_seq_len) "
        "tokens until max_num_tokens are filled, each with one output token).",
    )
    moe_weight_layouts: tuple[MoeWeightLayout, ...] = Field(
        (), description="Resident layouts of quantized expert weights by card; none listed: the checkpoint's bytes."
    )
    sources: dict[str, str] = Field(default_factory=dict, description="Field -> citation.")
    efficiency: Efficiency = Field(
        default_factory=Efficiency, description="Fitted kernel and host factors for this engine (fitted.yaml)."
    )

    @property
    def memory_rule(self) -> MemoryRule:
        """How the engine sizes its KV cache: vLLM's budget, SGLang's static pool or TensorRT-LLM's share of the free
        memory (``planner.estimate.memory``)."""
        if self.static_memory is not None:
            return "static_pool"
        return "free_fraction" if self.kv_fraction_of_free is not None else "budget"

    def profiled_rows(self, step_tokens: int, max_model_len: int) -> int | None:
        """Rows of logits in the profiling forward when they are not max_num_seqs (``profile_requests``): the dummy
        context requests of min(step_tokens, max_model_len) tokens that fill ``step_tokens``; None: max_num_seqs."""
        if self.profile_requests == "max_num_seqs":
            return None
        return -(-step_tokens // max(1, min(step_tokens, max_model_len)))

    def holds(self, version: tuple[int, ...]) -> bool:
        lo = parse_version(self.min_version)
        return version >= lo and (self.max_version is None or version < parse_version(self.max_version))

    def full_decode_graphs(self, kv_kinds: Iterable[str]) -> bool:
        """Whether a pure-decode step replays one full CUDA graph for a model with layers of ``kv_kinds``: the
        mode captures full graphs and no layer's attention backend refuses them (``no_full_graph_kv``).
        vLLM checks every backend's support at start-up and, for one that says NEVER, sets the whole engine
        to PIECEWISE ('CUDAGraphMode.FULL_AND_PIECEWISE is not supported with ChunkedLocalAttentionBuilder
        backend ...; setting cudagraph_mode=PIECEWISE', vllm-project/vllm #26034)."""
        if self.cuda_graph_mode == "piecewise":
            return False
        return not any(kind in self.no_full_graph_kv for kind in kv_kinds)

    def chunked_prefill_at(self, version: str | None, max_model_len: int, exempt: Callable[[], bool]) -> bool:
        """Whether chunked prefill is on when the command does not say, at ``version`` (None: the range's newest),
        for ``max_model_len``; ``exempt()``: the model or the features keep the long-context rule off
        (``LongContextChunking``), asked only where the rule would apply."""
        rule = self.chunked_prefill_long_context
        return self.chunked_prefill_default or (rule is not None and rule.holds(version, max_model_len, exempt))

    def chunked_budget_at(self, version: str | None) -> int | None:
        """The token budget with chunked prefill at ``version`` when the command sets none (None: not this rule)."""
        return _step_at(self.chunked_prefill_budgets, version)

    def gpu_memory_utilization_at(self, version: str | None) -> float | None:
        """vLLM's default --gpu-memory-utilization at ``version`` (None: not this profile's rule)."""
        return _step_at(self.gpu_memory_utilization_steps, version)

    def mixes_batches(self, chunked_prefill: bool) -> bool:
        """Whether prefill chunks and decodes share a step with chunked prefill on or off (``mixed_batches``)."""
        return self.mixed_batches == "always" or (self.mixed_batches == "with_chunked_prefill" and chunked_prefill)

    def moe_weight_layout(self, weight_format: str, compute_capability: str | None) -> MoeWeightLayout | None:
        """The rule for experts stored as ``weight_format`` on a card of ``compute_capability``, if any."""
        return next((r for r in self.moe_weight_layouts if r.holds(weight_format, compute_capability)), None)

    def custom_allreduce_at(self, version: str | None) -> bool:
        """Whether the custom all-reduce is on by default at ``version`` (None: the range's newest)."""
        if not self.custom_allreduce:
            return False
        if version is None:
            return True
        v = parse_version(version)
        return not any(parse_version(lo) <= v < parse_version(hi) for lo, hi in self.custom_allreduce_off)

    def reserves_graph_memory_at(self, version: str | None) -> bool:
        """Whether the graph pool is reserved before KV sizing at ``version`` (None: the range's newest)."""
        first = self.reserves_cuda_graph_memory_from
        return self.reserves_cuda_graph_memory and (first is None or at_or_after(version, first))


def engine_name(engine_version: str | None) -> str:
    """The display name of the engine an ``--engine-version`` names ('vLLM', 'SGLang', 'TensorRT-LLM'; None: the
    default engine's)."""
    return ENGINE_NAMES[resolve_engine(engine_version or DEFAULT_ENGINE)[0].engine]


def _step_at(steps: tuple[tuple[str, Any], ...], version: str | None) -> Any:
    """The value of ``(first version, value)`` steps (oldest first) at ``version``: the last step at or before it;
    None: the newest; before the first step, the first value. None when there are no steps."""
    if not steps:
        return None
    held = [value for first, value in steps if at_or_after(version, first)]
    return held[-1] if held else steps[0][1]


@functools.lru_cache(maxsize=1)
def engine_profiles() -> dict[str, EngineProfile]:
    """Every profile in planner/engines/, with its fitted factors, by id."""
    fitted = _read_yaml(FITTED_FILE) if FITTED_FILE.exists() else {}
    out: dict[str, EngineProfile] = {}
    for path in sorted(ENGINES_DIR.glob("*.yaml")):
        if path == FITTED_FILE:
            continue
        data = _read_yaml(path)
        factors = fitted.get(data.get("id"))
        if factors:
            data["efficiency"] = factors
        try:
            out[data["id"]] = EngineProfile(**data)
        except (ValidationError, KeyError, TypeError) as err:
            raise EngineError(f"engine profile {path.name} is malformed: {err}") from None
    return out


def _read_yaml(path: Path) -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as fh:
        data = yaml.load(fh, Loader=loader)  # noqa: S506 (a safe loader)
    if not isinstance(data, dict):
        raise EngineError(f"engine profile {path.name} is not a mapping.")
    return data


@functools.lru_cache(maxsize=256)
def resolve_engine(spec: str = DEFAULT_ENGINE) -> tuple[EngineProfile, str | None]:
    """(profile, version or None) for ``ENGINE@VERSION``, ``ENGINE`` (its newest profile) or a profile id."""
    profiles = engine_profiles()
    text = spec.strip().lower()
    if text in profiles:
        return profiles[text], None
    if text[:1].isdigit() or text[:2] == "v0":  # a bare version: vLLM's
        text = f"vllm@{text}"
    name, _, version = text.partition("@")
    family = [p for p in profiles.values() if p.engine == name]
    if not family:
        raise EngineError(
            f"unknown engine {spec!r}.",
            hint=f"Use ENGINE@VERSION with ENGINE one of {', '.join(sorted({p.engine for p in profiles.values()}))} "
            f"(e.g. {DEFAULT_ENGINE}), or a profile id: {', '.join(sorted(profiles))}.",
        )
    if not version:
        newest = max(family, key=lambda p: parse_version(p.min_version))
        return newest, None
    v = parse_version(version)
    for profile in family:
        if profile.holds(v):
            return profile, version
    raise EngineError(
        f"no {name} profile holds version {version}.",
        hint="Known ranges: " + "; ".join(f"{p.id} {p.min_version}-{p.max_version or 'now'}" for p in family),
    )
