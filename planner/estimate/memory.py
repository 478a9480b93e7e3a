"""Memory plan: how many bytes each GPU holds, and whether vLLM would start.

vLLM V1 (0.33.0) semantics, per GPU (shared/reference/formulas.md, 2.4):

    requested  = ceil(total_memory x gpu_memory_utilization)
    kv_budget  = requested - weights_rank - non_torch - activation_peak - cuda_graph_pool
    num_blocks = kv_budget // bytes_per_block            (the minimum over pipeline stages)
    max_concurrency = num_blocks / blocks one max_model_len request needs (summed over KV groups)
    kv_cache_tokens = int(max_concurrency x max_model_len)

An engine with a static pool (SGLang, ``EngineProfile.static_memory``) sizes weights + KV cache as
``--mem-fraction-static`` of the card and keeps the activations and CUDA graphs in the rest:

    kv_budget  = requested - weights_rank - non_torch
    starts only if total_memory - requested >= activation_peak + cuda_graph_pool

with the fraction, when the scenario leaves it unset, SGLang's default for its version, card and TP
size (``StaticMemory.fraction``).

An engine that gives its KV cache a share of the free memory (TensorRT-LLM, ``kv_fraction_of_free``):

    kv_budget  = floor(fraction x (total_memory - weights_rank - non_torch - activation_peak - cuda_graph_pool))

One function, ``kv_budget``, applies the rule the engine profile names (``EngineProfile.memory_rule``).

Weights and KV follow from the config exactly (vocab padded to 64, GQA heads ``max(1, K // tp)``,
MLA replicated, sliding groups capped at their window, Mamba state per sequence). The three
overheads cannot be read from config.json; they are documented estimates a user can override:

* non-torch memory (CUDA context, cuBLAS, NCCL): 0.4 GiB on one GPU (a V0 log on an RTX 3090 shows
  0.35 GiB, vllm-project/vllm#10517), 1.0 GiB with tensor parallelism (NCCL and custom
  all-reduce buffers);
* activation peak of the profiling run over ``max_num_batched_tokens`` tokens:
  ``T x (3 x I_token / tp + 3 x h) x act_bytes`` plus the sampler's fp32 logits for
  ``max_num_seqs`` rows. On that RTX 3090 log (Llama-3.1-8B, profile of 20,000 and 29,000 tokens)
  the peak grew 0.92 GiB per 9,000 tokens, 109.8 KB/token; the formula gives 110.6 KB/token;
* CUDA-graph pool: 0.25 GiB + 12 MiB per layer (0.73 GiB for a 40-layer 3B model on an L40S; the
  log said 0.72 GiB); 0 with ``--enforce-eager``.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from planner.engine import DEFAULT_ENGINE, resolve_engine
from planner.estimate import lora as lora_slots
from planner.estimate import multimodal
from planner.estimate.links import Link
from planner.estimate.resident import resident_bias_bytes, resident_expert_bits
from planner.estimate.resolve import Resolved, resolve
from planner.hardware import HardwareProfile
from planner.model.kv import KVBlockGroups, KVSpec
from planner.model.layers import MoE
from planner.model.quantization import resolve_formats
from planner.model.spec import ModelSpec, derived, dtype_bytes
from planner.scenario import Scenario
from planner.units import GiB, MiB, cdiv, fmt_gib, fmt_requests, round_up

NON_TORCH_SINGLE_GPU_BYTES = int(0.4 * GiB)
NON_TORCH_TP_BYTES = int(1.0 * GiB)
CUDA_GRAPH_BASE_BYTES = int(0.25 * GiB)
CUDA_GRAPH_PER_LAYER_BYTES = 12 * MiB


class MemoryTerm(BaseModel):
    """One slice of a GPU's memory, for the stacked bar."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        description="weights, kv_cache, activations, cuda_graphs, non_torch, reserved (outside gpu_memory_utilization)."
    )
    bytes: int = Field(description="Bytes per GPU.")
    kind: Literal["exact", "estimate"] = Field(
        description="'exact' when it follows from config.json; 'estimate' for overheads."
    )


class MemoryPlan(BaseModel):
    """Per-GPU memory plan of one scenario, and its verdict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fits: bool = Field(description="vLLM would start: weights and at least one max_model_len request fit.")
    reason: str = Field(description="One line: the verdict with its numbers.")
    suggestions: list[str] = Field(
        description="Changes that would make it start (each checked), or that would hold more."
    )
    resolved: Resolved = Field(description="The scenario with defaults filled in.")
    gpu_name: str = Field(description="The card's name.")
    total_memory_bytes_per_gpu: int = Field(description="Visible memory per GPU (what CUDA reports).")
    requested_memory_bytes_per_gpu: int = Field(description="ceil(total x gpu_memory_utilization).")
    weight_bytes_per_gpu: int = Field(description="Weights on the fullest rank (the first or last pipeline stage).")
    weight_bytes_total: int = Field(description="Weights summed over all ranks of one replica.")
    non_torch_bytes_per_gpu: int = Field(description="CUDA context / NCCL / cuBLAS estimate.")
    activation_bytes_per_gpu: int = Field(description="Activation peak of the profiling run (estimate).")
    cuda_graph_bytes_per_gpu: int = Field(description="CUDA-graph pool (estimate; 0 with eager).")
    kv_cache_bytes_per_gpu: int = Field(
        description="Memory left for the KV cache (can be negative when it does not fit)."
    )
    kv_bytes_per_token_per_gpu: int = Field(
        description="KV bytes one token costs on the fullest rank, below every window."
    )
    bytes_per_block: int = Field(description="Bytes of one KV block on the fullest rank (all layers of a group).")
    num_gpu_blocks: int = Field(description="KV blocks vLLM would allocate (minimum over ranks).")
    blocks_per_request: int = Field(description="Blocks one max_model_len request may hold, summed over KV groups.")
    kv_block_groups: KVBlockGroups | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The KV-cache groups a request draws blocks from when the layers are not all of one kind "
        "(sliding windows, recurrent state): the simulator charges each request its blocks in every group; absent "
        "for one full-attention group.",
    )
    kv_cache_tokens: int = Field(description="'GPU KV cache size: N tokens' as vLLM reports it.")

    max_concurrency: float = Field(description="Requests of max_model_len tokens the cache holds at once.")
    max_model_len_that_fits: int | None = Field(
        description="Largest max_model_len with room for one request; None if even 1 token does not fit."
    )
    terms: list[MemoryTerm] = Field(description="Memory per GPU by use, for the stacked bar (sums to the total).")
    lora_bytes_per_gpu: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="LoRA adapter slots on the fullest rank (--max-loras x --max-lora-rank, planner.estimate.lora), "
        "taken from the KV cache; present with --enable-lora.",
    )
    lora_host_bytes_per_worker: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Host memory of the --max-cpu-loras adapter cache per worker (not GPU memory; an upper bound); "
        "present with --enable-lora.",
    )
    all2all_buffer_bytes_per_gpu: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="DeepEP's dispatch/combine buffers on one GPU (all2all_buffer_bytes), inside "
        "non_torch_bytes_per_gpu; present with a DeepEP --all2all-backend and data parallelism.",
    )
    encoder_bytes: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Vision encoder and projector weights on one GPU (planner.estimate.multimodal; linears split "
        "over TP as vLLM builds them, on every pipeline stage), taken from the KV cache; present with "
        "--images-per-request.",
    )
    encoder_cache_bytes: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="vLLM's encoder cache on one GPU: max(--max-num-batched-tokens, the largest image's tokens) "
        "LLM-width embeddings, taken from the KV cache; present with --images-per-request.",
    )
    encoder_activation_bytes: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="How far the ViT forward of vLLM's profiling run (a budget's worth of the largest images) "
        "peaks above the language model's activations and the encoder cache, per GPU (estimate; 0 when it does "
        "not), taken from the KV cache; present with --images-per-request.",
    )

    @property
    def block_tokens(self) -> int:
        """Tokens per block of the KV pool: the groups' (raised for a Mamba page), else the resolved block size."""
        return self.resolved.block_size if self.kv_block_groups is None else self.kv_block_groups.block_tokens


# --------------------------------------------------------------------------- weights


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """vLLM's default pipeline split: equal stages, the remainder to the stages before the last.

    vLLM's ``get_pp_indices`` (vllm/distributed/utils.py) without ``VLLM_PP_LAYER_PARTITION``: L // pp
    layers each, and one more for each of the L % pp stages counted back from the second-to-last
    (the last holds the final norm and lm_head; the first the embedding). Examples: 80 layers, pp 3 ->
    27, 27, 26; 10 layers, pp 4 -> 2, 3, 3, 2; 81 layers, pp 4 -> 20, 20, 21, 20.
    """
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out


def _group_bytes(groups, res: Resolved, tp: int, ffn: object = None) -> float:
    """Bytes on one rank: linear weights at their component's format (sharded ones / tp), the rest
    (biases, norms, routers) in the activation dtype, replicated. Routed experts the engine holds in
    another layout (``res.expert_layout``) count at their resident bits (``planner.estimate.resident``)."""
    total = 0.0
    act = res.act_bytes_per_element
    for g in groups:
        fmt = res.weight_formats.get(g.component)
        bits = fmt.bits_per_weight if fmt else act * 8
        other = act
        if g.component == "experts" and res.ep > 1 and isinstance(ffn, MoE):
            # --enable-expert-parallel: the fullest rank holds ceil(E / ep) whole experts (no TP split)
            share = ffn.local_experts(res.ep) / ffn.num_experts
            if res.expert_layout is not None:
                bits = resident_expert_bits(res.expert_layout, bits, ffn.hidden_size, ffn.expert_intermediate_size, 1)
                other = resident_bias_bytes(res.expert_layout, act)
            total += (g.sharded_linear + g.replicated_linear) * share * bits / 8 + g.other * share * other
            continue
        if g.component == "experts" and res.expert_layout is not None and isinstance(ffn, MoE):
            bits = resident_expert_bits(res.expert_layout, bits, ffn.hidden_size, ffn.expert_intermediate_size, tp)
            other = resident_bias_bytes(res.expert_layout, act)
        total += (g.sharded_linear / tp + g.replicated_linear) * bits / 8 + g.other * other
    return total


def stage_weight_bytes(model: ModelSpec, res: Resolved) -> list[int]:
    """Weight bytes on one rank of each pipeline stage (vocab padded to 64, as vLLM allocates)."""
    formats = tuple((name, fmt.bits_per_weight) for name, fmt in res.weight_formats.items())
    key = ("stage_weight_bytes", res.tp, res.pp, res.act_bytes_per_element, formats, res.expert_layout, res.ep)
    memo = derived(model)  # the sum depends on the spec and these four only
    if key not in memo:
        memo[key] = tuple(_stage_weight_bytes(model, res))
    return list(memo[key])


def _stage_weight_bytes(model: ModelSpec, res: Resolved) -> list[int]:
    tp = res.tp
    stages = stage_layers(model.num_layers, res.pp)
    vocab_rows = model.padded_vocab_size * model.embedding_dim
    emb_bits = res.weight_formats["embedding"].bits_per_weight
    head_bits = res.weight_formats["lm_head"].bits_per_weight
    per_layer: dict[int, float] = {}  # identical layers are one shared object (see families.build)
    out = []
    for s, layers in enumerate(stages):
        b = 0.0
        for i in layers:
            layer = model.layers[i]
            if id(layer) not in per_layer:
                per_layer[id(layer)] = _group_bytes(layer.param_groups(), res, tp, layer.ffn)
            b += per_layer[id(layer)]
        if s == 0:
            b += vocab_rows / tp * emb_bits / 8
            b += model.position_embedding_rows * model.hidden_size * res.act_bytes_per_element
            if model.embedding_dim != model.hidden_size:
                b += 2 * model.embedding_dim * model.hidden_size * emb_bits / 8
        if s == len(stages) - 1:
            b += model.final_norm_params * res.act_bytes_per_element
            if not model.tie_word_embeddings or res.pp > 1:
                b += vocab_rows / tp * head_bits / 8
        out.append(int(b))
    return out


def expert_bytes_per_rank_expert(model: ModelSpec, res: Resolved, layers: range) -> float:
    """Bytes one routed expert adds to an expert-parallel rank over ``layers`` (its whole weights in each MoE
    layer there): what a rank holding one expert fewer than the fullest (vLLM's uneven map) saves."""
    total = 0.0
    for i in layers:
        ffn = model.layers[i].ffn
        if isinstance(ffn, MoE):
            groups = [g for g in ffn.param_groups() if g.component == "experts"]
            total += _group_bytes(groups, res, res.tp, ffn) / ffn.local_experts(res.ep)
    return total


def weight_bytes(model: ModelSpec, weight_dtype: str = "auto") -> int:
    """Weights of the whole model at its served precision (unpadded vocab, one copy)."""
    formats = resolve_formats(model.dtype, model.quantization, weight_dtype)
    act = dtype_bytes(model.dtype)
    total = 0.0
    for g in model.param_groups():
        bits = formats.get(g.component)
        linear_bits = bits.bits_per_weight if bits else act * 8
        total += (g.sharded_linear + g.replicated_linear) * linear_bits / 8 + g.other * act
    return int(total)


# ------------------------------------------------------------------------- overheads


def activation_peak_bytes(model: ModelSpec, res: Resolved) -> int:
    """Peak transient memory of vLLM's profiling forward over max_num_batched_tokens tokens (estimate).

    T x (3 x I_token / tp + 3 x h) x act_bytes: the gate/up output (2 I), the activated product (I)
    and a few hidden-size buffers, at the widest FFN a token passes through (k experts for MoE),
    plus fp32 logits for max_num_seqs sampled rows (or the engine's own profiled rows: ``Resolved.profiled_rows``).
    """
    width = _widest_token_path(model)
    tokens = res.max_num_batched_tokens
    act = tokens * (3 * width / res.tp + 3 * model.hidden_size) * res.act_bytes_per_element
    rows = res.max_num_seqs if res.profiled_rows is None else res.profiled_rows
    logits = rows * model.padded_vocab_size / res.tp * 4
    return int(act + logits)


def _widest_token_path(model: ModelSpec) -> int:
    """The widest FFN (or Mamba inner width) a token passes through, of all layers (memoized per spec)."""
    memo = derived(model)
    if "widest_token_path" in memo:
        return memo["widest_token_path"]
    widths = []
    for layer in model.layers:
        ffn = layer.ffn
        width = 0
        if isinstance(ffn, MoE):  # the k routed experts a token visits side by side, plus the shared ones
            width = ffn.experts_per_token * ffn.expert_intermediate_size + ffn.shared_intermediate_size
        elif ffn is not None:
            width = ffn.intermediate_size
        widths.append(max(width, getattr(layer.mixer, "d_inner", 0)))
    memo["widest_token_path"] = max(widths) if widths else 4 * model.hidden_size
    return memo["widest_token_path"]


#: vLLM's DeepEP NVLink buffer, VLLM_DEEPEP_BUFFER_SIZE_MB (default 1024; vllm/envs.py), and the RDMA buffer of its
#: high-throughput kernels when the EP group spans nodes (the same size; vllm/distributed/device_communicators/
#: all2all.py ``DeepEPHTAll2AllManager._make_all2all_kwargs``).
DEEPEP_BUFFER_BYTES = 1024 * MiB


def all2all_buffer_bytes(model: ModelSpec, hw: HardwareProfile, res: Resolved) -> int:
    """Bytes per GPU of the expert dispatch's communication buffers (exact for vLLM's settings; 0 without DeepEP).

    vLLM allocates them outside torch's allocator when the MoE layer first runs, so its profile counts them as
    non-torch memory. DeepEP high throughput: the NVLink buffer, plus as much RDMA buffer across nodes. DeepEP low
    latency (vLLM ``DeepEPLLAll2AllManager``): the NVLink buffer plus DeepEP's ``get_low_latency_rdma_size_hint``
    for T = max_num_batched_tokens tokens per rank (vLLM passes ``moe.max_num_tokens``), hidden h, E experts
    (deepseek-ai/DeepEP csrc/config.hpp ``LowLatencyLayout``): two send buffers of max(T x dispatch message,
    E x T x combine message), two receive buffers of E x T x the larger message, two signaling buffers, where a
    dispatch message is 16 + max(2h, h + 4 h/128) bytes and a combine message 4 h/128 + 2h. DeepSeek-V3 (h 7168,
    E 256) at T 256: 4 x 256 x 256 x 14,560 B = 3.55 GiB (+ 4 KiB of signals), + 1 GiB."""
    if res.ep == 1 or res.dp == 1 or not res.all2all_backend.startswith("deepep"):
        return 0
    if res.all2all_backend == "deepep_high_throughput":
        across = Link.for_group(hw, res.ep).kind == "network"
        return DEEPEP_BUFFER_BYTES * (2 if across else 1)
    h, T = model.hidden_size, res.max_num_batched_tokens
    E = max(getattr(layer.ffn, "num_experts", 0) for layer in model.layers if layer.ffn is not None)
    scales = h // 128
    dispatch_msg, combine_msg = 16 + max(2 * h, h + 4 * scales), 4 * scales + 2 * h
    send = max(T * dispatch_msg, E * T * combine_msg)
    recv = E * T * max(dispatch_msg, combine_msg)
    signaling = round_up(E * 8 + -(-E // res.ep) * 4, 128)
    return DEEPEP_BUFFER_BYTES + 2 * (send + recv + signaling)


def non_torch_bytes(sc: Scenario) -> int:
    if sc.non_torch_memory_bytes is not None:
        return sc.non_torch_memory_bytes
    return NON_TORCH_TP_BYTES if sc.tp > 1 or sc.data_parallel_size > 1 else NON_TORCH_SINGLE_GPU_BYTES


def cuda_graph_bytes(model: ModelSpec, sc: Scenario, layers_on_rank: int) -> int:
    if sc.engine == "eager":
        return 0
    if sc.cuda_graph_memory_bytes is not None:
        return sc.cuda_graph_memory_bytes
    return CUDA_GRAPH_BASE_BYTES + CUDA_GRAPH_PER_LAYER_BYTES * layers_on_rank


# --------------------------------------------------------------------------- KV plan


class KVLayout(BaseModel):
    """vLLM's KV-cache groups on one rank: block bytes and blocks per max-length request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bytes_per_block: int = Field(description="Bytes of one block: group_size layers' pages (padded to one page size).")
    blocks_per_request: int = Field(description="Blocks one max_model_len request may hold, over all groups.")
    bytes_per_token: int = Field(description="KV bytes per token on this rank below every window.")
    block_size: int = Field(description="Tokens per block after hybrid alignment.")
    block_groups: KVBlockGroups | None = Field(
        None, description="The groups a request draws blocks from; None: one full-attention group."
    )


def kv_layout(specs: list[KVSpec], res: Resolved) -> KVLayout:
    """Group layers like vLLM's hybrid KV-cache manager and size one block and one request.

    One kind of layer: group = all layers, block = L x page. Several kinds (sliding + full, or
    Mamba + attention): group size = the smallest per-kind count, or the largest if max < 1.5 x min;
    each kind is split into ceil(count / group_size) groups (short ones padded); every group draws
    from one pool whose block holds group_size pages. Mamba pages are padded to the attention page
    after raising the attention block size until it is at least as large (multiples of 16).
    Worked case, Gemma-2-9B: 21 sliding + 21 full -> 2 groups of 21 layers.
    """
    return _KVGroups(specs, res.block_size).layout(res.max_model_len, res.max_num_batched_tokens)


def stage_kv_layout(model: ModelSpec, res: Resolved, layers: range) -> KVLayout:
    """The KV layout (block bytes, bytes per token) of one rank of the pipeline stage holding ``layers``."""
    return _stage_groups(model, res, layers).layout(res.max_model_len, res.max_num_batched_tokens)


def _stage_groups(model: ModelSpec, res: Resolved, layers: range) -> _KVGroups:
    """``_KVGroups`` of one pipeline stage's layers, built once per spec, rank split, KV dtype and block size."""
    key = ("kv_groups", res.tp, res.kv_bytes_per_element, layers.start, layers.stop, res.block_size)
    memo = derived(model)
    if key not in memo:
        specs = model.kv_specs(res.tp, res.kv_bytes_per_element)
        memo[key] = _KVGroups([specs[i] for i in layers], res.block_size)
    return memo[key]


class _KVGroups:
    """The grouping part of ``kv_layout``, computed once and reused for many max_model_len values."""

    def __init__(self, specs: list[KVSpec], block_size: int):
        self.block = block_size
        self.buckets: list[tuple[KVSpec, int]] = []
        self.bytes_per_token = sum(s.bytes_per_token for s in specs)
        if not specs:
            self.page = self.group_size = 0
            return
        counts: dict[tuple, list] = {}
        for spec in specs:
            counts.setdefault(spec.group_key, [spec, 0])[1] += 1
        self.buckets = [(spec, n) for spec, n in counts.values()]
        attn = [s for s, _ in self.buckets if not s.is_recurrent]
        mamba = [s for s, _ in self.buckets if s.is_recurrent]
        if attn and mamba:
            mamba_page = max(s.page_size_bytes(self.block) for s in mamba)
            attn_token = max(s.bytes_per_token for s in attn)
            self.block = max(self.block, round_up(cdiv(mamba_page, attn_token), 16))
        self.page = max(s.page_size_bytes(self.block) for s, _ in self.buckets)
        lo, hi = min(n for _, n in self.buckets), max(n for _, n in self.buckets)
        self.group_size = hi if hi < 1.5 * lo else lo

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        return sum(
            cdiv(n, self.group_size) * spec.blocks_per_request(max_model_len, self.block, in_flight_tokens)
            for spec, n in self.buckets
        )

    def block_groups(self, max_model_len: int) -> KVBlockGroups | None:
        """The groups a request of up to ``max_model_len`` tokens draws blocks from (``KVBlockGroups``); None for
        one full-attention group (every layer of one kind and page). A window that holds as many blocks as a
        max_model_len request counts as full attention (it never frees one)."""
        if not self.buckets:
            return None
        full, state = 0, 0
        windows: dict[int, int] = {}
        longest = cdiv(max_model_len, self.block)
        for spec, n in self.buckets:
            groups = cdiv(n, self.group_size)
            held = spec.blocks_per_request(max_model_len, self.block, 1)  # at one token in flight: a decode step
            if spec.is_recurrent:
                state += groups * held
            elif spec.token_cap is None or held >= longest:
                full += groups
            else:
                windows[held] = windows.get(held, 0) + groups
        if full == 1 and not state and not windows:
            return None
        return KVBlockGroups(
            block_tokens=self.block,
            full_groups=full,
            window_groups=tuple((g, cap) for cap, g in sorted(windows.items())),
            state_blocks=state,
        )

    def layout(self, max_model_len: int, in_flight_tokens: int) -> KVLayout:
        return KVLayout(
            bytes_per_block=self.group_size * self.page,
            blocks_per_request=self.blocks_per_request(max_model_len, in_flight_tokens) if self.buckets else 0,
            bytes_per_token=self.bytes_per_token,
            block_size=self.block,
            block_groups=self.block_groups(max_model_len),
        )


# ------------------------------------------------------------------------------ plan


class _Numbers(NamedTuple):
    """What a plan's verdict rests on: the resolved scenario and the fullest pipeline stage's budget."""

    res: Resolved
    stages: list[range]
    weights: list[int]
    requested: int
    act: int
    non_torch: int
    stage: int
    blocks: int
    layout: KVLayout
    graphs: int
    budget: int
    concurrency: float
    fits: bool
    lora: int
    encoder: int
    encoder_cache: int
    encoder_activations: int
    short: int  # a static pool (SGLang): bytes the memory outside it lacks for activations and graphs; else 0


def _capacity(budget: int, layout: KVLayout) -> tuple[int, float, bool]:
    """(KV blocks, max_model_len requests at once, starts) of a stage's budget: the blocks it holds, how many full
    requests they take, and whether vLLM starts (a positive budget and room for one request). Attention-free and
    stateless cannot happen (no blocks per request); the arithmetic stays total."""
    blocks = max(0, budget) // layout.bytes_per_block if layout.bytes_per_block else 0
    concurrency = blocks / layout.blocks_per_request if layout.blocks_per_request else float("inf")
    return blocks, concurrency, budget > 0 and concurrency >= 1.0


def _numbers(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> _Numbers:
    """The plan's arithmetic (module docstring), without its words: shared by the plan and each suggestion."""
    res = resolve(model, hw, sc)
    stages = stage_layers(model.num_layers, res.pp)
    weights = stage_weight_bytes(model, res)
    act = activation_peak_bytes(model, res)
    non_torch = non_torch_bytes(sc) + all2all_buffer_bytes(model, hw, res)  # DeepEP's buffers: outside torch
    adapters = lora_slots.stage_lora_bytes(model, res, stages)
    encoder = multimodal.encoder_weight_bytes(model, sc, res)
    encoder_cache = multimodal.encoder_cache_bytes(model, sc, res)
    # the profile's peak is the larger of the ViT forward and the cached outputs + the LM's forward
    encoder_act = max(0, multimodal.encoder_activation_bytes(model, sc, res) - act - encoder_cache)
    worst = None
    for s, layers in enumerate(stages):
        layout = _stage_groups(model, res, layers).layout(res.max_model_len, res.max_num_batched_tokens)
        graphs = cuda_graph_bytes(model, sc, len(layers))
        held = weights[s] + non_torch + adapters[s] + encoder + encoder_cache
        requested, budget = kv_budget(res, hw.memory_bytes, held, _peaks_split(res, act, graphs, encoder_act)[0])
        blocks = _capacity(budget, layout)[0]
        row = (blocks, s, layout, graphs, budget, requested)
        if worst is None or (blocks, -weights[s]) < (worst[0], -weights[worst[1]]):
            worst = row
    assert worst is not None, "stage_layers gives one range per pipeline stage, and pp >= 1"
    _, s, layout, graphs, budget, requested = worst
    blocks, concurrency, fits = _capacity(budget, layout)
    res, act = _pooled(model, sc, res, blocks, act)
    short = _outside_short(hw, requested, _peaks_split(res, act, graphs, encoder_act)[1])
    fits = fits and not short
    return _Numbers(
        res,
        stages,
        weights,
        requested,
        act,
        non_torch,
        s,
        blocks,
        layout,
        graphs,
        budget,
        concurrency,
        fits,
        adapters[s],
        encoder,
        encoder_cache,
        encoder_act,
        short,
    )


def pool_requests(sc: Scenario, res: Resolved, blocks: int) -> Resolved:
    """``res`` with a static pool's default request slots (SGLang, ``--max-running-requests`` unset): sized from the
    pool's ``blocks`` (``StaticMemory.running_requests`` at the context length), at most the step's token budget
    (the simulator gives every running request a token of it; SGLang itself does not cap the decodes by its prefill
    chunk, so on cards with 2,048-token chunks a pool that would size more slots is held to 2,048). ``res`` itself
    (the same object) under any other rule or when the command sets the limit; a pool of no block (it does not start)
    keeps ``resolve``'s default, the most slots."""
    if not res.static_pool or sc.max_num_seqs is not None:
        return res
    static = resolve_engine(sc.engine_version or DEFAULT_ENGINE)[0].static_memory
    assert static is not None, "a static pool's rule comes from the profile's static_memory"
    slots = static.running_requests(blocks * res.block_size, res.max_model_len) if blocks > 0 else static.max_requests
    seqs = min(slots, res.max_num_batched_tokens)
    return res if seqs == res.max_num_seqs else res.model_copy(update={"max_num_seqs": seqs})


def _pooled(model: ModelSpec, sc: Scenario, res: Resolved, blocks: int, act: int) -> tuple[Resolved, int]:
    """(res, activation peak) with the static pool's request slots (``pool_requests``): the sampler's rows of the
    peak follow them; ``res`` and ``act`` as they are when the slots do not change."""
    pooled = pool_requests(sc, res, blocks)
    return (res, act) if pooled is res else (pooled, activation_peak_bytes(model, pooled))


def kv_budget(res: Resolved, total: int, held: int, peaks: int) -> tuple[int, int]:
    """(requested, KV budget) of one GPU under the engine's rule (``Resolved.memory_rule``), with ``held`` the bytes
    resident before the KV cache (weights, non-torch memory, adapter slots, the encoder and its cache) and ``peaks``
    the peaks it makes room for (``_peaks_split``: the activation peak, the encoder's forward and, where the engine
    reserves it first, the CUDA-graph pool):

    * budget (vLLM): requested = ceil(total x fraction); the KV cache gets requested - held - peaks (vLLM through
      0.20 captures its graphs after, beyond the fraction: ``_outside_short`` checks they fit);
    * static_pool (SGLang): requested = ceil(total x fraction) holds weights + KV; the KV cache gets
      requested - held, every peak lives outside it (peaks is 0; ``_outside_short`` checks they fit);
    * free_fraction (TensorRT-LLM): the KV cache gets floor(fraction x (total - held - peaks)), and requested is
      everything the engine then holds (held + peaks + KV)."""
    fraction = res.gpu_memory_utilization
    if res.memory_rule == "free_fraction":
        free = total - held - peaks
        budget = math.floor(fraction * free) if free > 0 else free
        return held + peaks + max(0, budget), budget
    requested = math.ceil(total * fraction)
    return requested, requested - held - peaks


#: The plan's terms that are the step's peaks (activation peak, CUDA-graph pool, the encoder's forward), in the order
#: ``_peaks_split`` takes their bytes: a static pool (SGLang) keeps them all outside the fraction it requests.
PEAK_TERMS_ORDER = ("activations", "cuda_graphs", "encoder_activations")
PEAK_TERMS = frozenset(PEAK_TERMS_ORDER)


def terms_outside(res: Resolved) -> frozenset[str]:
    """The plan's terms that take memory beyond the requested fraction: every peak under a static pool (SGLang), the
    CUDA-graph pool where the engine captures its graphs after sizing the KV cache (vLLM V0 and V1 through 0.20:
    ``Resolved.reserves_cuda_graph_memory``), none otherwise."""
    if res.static_pool:
        return PEAK_TERMS
    return frozenset() if res.reserves_cuda_graph_memory else frozenset({"cuda_graphs"})


def _peaks_split(res: Resolved, act: int, graphs: int, encoder_act: int) -> tuple[int, int]:
    """(the peaks' bytes the KV budget makes room for, those kept beyond the requested fraction: ``terms_outside``)."""
    outside = terms_outside(res)
    inside = beyond = 0
    for name, nbytes in zip(PEAK_TERMS_ORDER, (act, graphs, encoder_act), strict=True):
        if name in outside:
            beyond += nbytes
        else:
            inside += nbytes
    return inside, beyond


def _outside_short(hw: HardwareProfile, requested: int, beyond: int) -> int:
    """The bytes the memory beyond the requested fraction lacks for the peaks kept there (``beyond``: a static pool's
    activations and graphs, or the graph pool that vLLM through 0.20 captures after sizing the KV cache, running out
    of memory at capture); 0 when they fit."""
    return max(0, beyond - (hw.memory_bytes - requested)) if beyond else 0


def plan_memory(model: ModelSpec, hw: HardwareProfile, sc: Scenario, *, suggest: bool = True) -> MemoryPlan:
    """The per-GPU memory plan and verdict for ``model`` on ``hw`` under ``sc``."""
    numbers = _numbers(model, hw, sc)
    res, stages, weights, requested, act, non_torch, s, blocks, layout, graphs, budget, concurrency, fits, adapters = (
        numbers[:14]
    )
    total = hw.memory_bytes
    kv_tokens = int(concurrency * res.max_model_len) if layout.blocks_per_request else 0
    best_len = None  # a static pool short of room outside it starts at no length
    if not numbers.short:
        best_len = _max_len_that_fits(model.max_position_embeddings, res, blocks, _stage_groups(model, res, stages[s]))
    reason = _verdict(fits, model, hw, sc, res, weights[s], budget, layout, concurrency, requested, numbers.short)
    peaks = [
        MemoryTerm(name="activations", bytes=act, kind="estimate"),
        MemoryTerm(name="cuda_graphs", bytes=graphs, kind="estimate"),
    ]
    non_torch_term = MemoryTerm(name="non_torch", bytes=non_torch, kind="estimate")
    terms = [
        MemoryTerm(name="weights", bytes=weights[s], kind="exact"),
        MemoryTerm(
            name="kv_cache", bytes=max(0, blocks * layout.bytes_per_block), kind="estimate"
        ),  # what the estimated overheads leave
        # the terms inside the requested fraction first, then those beyond it (``terms_outside``: a static pool's
        # peaks, or the graph pool an older vLLM captures after sizing the KV cache), as the memory bar draws them
        *sorted([*peaks, non_torch_term], key=lambda t: t.name in terms_outside(res)),
    ]
    if res.lora is not None:  # vLLM --enable-lora: the adapter slots, exact from the shapes
        terms.insert(1, MemoryTerm(name="lora", bytes=adapters, kind="exact"))
    images = sc.workload.images_per_request > 0
    if images:  # the vision encoder's weights (exact from vision_config) and vLLM's encoder cache
        terms.insert(1, MemoryTerm(name="encoder", bytes=numbers.encoder, kind="exact"))
        terms.insert(2, MemoryTerm(name="encoder_cache", bytes=numbers.encoder_cache, kind="estimate"))
        terms.insert(3, MemoryTerm(name="encoder_activations", bytes=numbers.encoder_activations, kind="estimate"))
    used = sum(t.bytes for t in terms)
    terms.append(MemoryTerm(name="free", bytes=max(0, total - used), kind="estimate"))
    plan = MemoryPlan(
        fits=fits,
        reason=reason,
        suggestions=[],
        resolved=res,
        gpu_name=hw.name,
        total_memory_bytes_per_gpu=total,
        requested_memory_bytes_per_gpu=requested,
        weight_bytes_per_gpu=weights[s],
        weight_bytes_total=sum(weights) * res.tp * res.dp,
        non_torch_bytes_per_gpu=non_torch,
        activation_bytes_per_gpu=act,
        cuda_graph_bytes_per_gpu=graphs,
        kv_cache_bytes_per_gpu=int(budget),
        kv_bytes_per_token_per_gpu=layout.bytes_per_token,
        bytes_per_block=layout.bytes_per_block,
        num_gpu_blocks=int(blocks),
        blocks_per_request=layout.blocks_per_request,
        kv_block_groups=layout.block_groups,
        kv_cache_tokens=kv_tokens,
        max_concurrency=round(concurrency, 2),
        max_model_len_that_fits=best_len,
        terms=terms,
        lora_bytes_per_gpu=adapters if res.lora is not None else None,
        lora_host_bytes_per_worker=lora_slots.host_bytes_per_worker(model, res),
        all2all_buffer_bytes_per_gpu=all2all_buffer_bytes(model, hw, res) or None,
        encoder_bytes=numbers.encoder if images else None,
        encoder_cache_bytes=numbers.encoder_cache if images else None,
        encoder_activation_bytes=numbers.encoder_activations if images else None,
    )
    if suggest:
        plan = plan.model_copy(update={"suggestions": suggestions(model, hw, sc, plan, numbers)})
    return plan


def max_len_that_fits(model, hw, sc, res: Resolved, blocks: int, specs: list[KVSpec]) -> int | None:
    """Largest max_model_len with room for one request (binary search, as vLLM does for -1)."""
    return _max_len_that_fits(model.max_position_embeddings, res, blocks, _KVGroups(specs, res.block_size))


def _max_len_that_fits(max_position_embeddings: int, res: Resolved, blocks: int, groups: _KVGroups) -> int | None:
    """``max_len_that_fits`` on groups already built (the plan's own stage)."""
    if blocks <= 0:
        return None
    lo, hi = 0, max_position_embeddings
    while lo < hi:
        mid = (lo + hi + 1) // 2
        need = groups.blocks_per_request(mid, res.max_num_batched_tokens)
        if need <= blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo or None


def _verdict(fits, model, hw, sc, res, weights, budget, layout, concurrency, requested, short=0) -> str:
    gpus = f"{sc.tp * sc.pp} x {hw.name}"
    if sc.data_parallel_size > 1:  # each DP rank is an engine with its own KV cache and batch
        gpus += f" per data-parallel rank ({sc.data_parallel_size} ranks, {sc.gpus_per_replica} GPUs)"
    if fits:
        return (
            f"fits: {fmt_requests(concurrency)} requests of {res.max_model_len:,} tokens at once on {gpus} "
            f"(KV cache {fmt_gib(budget)} per GPU)"
        )
    if short:
        outside = hw.memory_bytes - requested
        most = math.floor((hw.memory_bytes - outside - short) / hw.memory_bytes * 100) / 100
        if res.static_pool:
            return (
                f"does not start: SGLang keeps activations and CUDA graphs outside its static pool, and the "
                f"{fmt_gib(outside)} outside --mem-fraction-static {res.gpu_memory_utilization:g} is "
                f"{fmt_gib(short)} short of what they need; use --mem-fraction-static {most:.2f} or less"
            )
        return (
            f"does not start: this vLLM captures its CUDA graphs after sizing the KV cache (before 0.21.0), and "
            f"the {fmt_gib(outside)} outside --gpu-memory-utilization {res.gpu_memory_utilization:g} is "
            f"{fmt_gib(short)} short of the graph pool; use --gpu-memory-utilization {most:.2f} or less, or "
            "--enforce-eager"
        )
    need_kv = layout.blocks_per_request * layout.bytes_per_block
    if res.memory_rule == "free_fraction":  # TensorRT-LLM: a share of what weights and overheads leave
        free = hw.memory_bytes - requested + max(0, budget)
        return (
            f"does not start: one {res.max_model_len:,}-token request needs {fmt_gib(need_kv)} of KV cache per GPU; "
            f"weights ({fmt_gib(weights)}) and overheads leave {fmt_gib(max(0, free))} free, and "
            f"{res.fraction_flag} {res.gpu_memory_utilization:g} of it is {fmt_gib(max(0, budget))}"
        )
    if budget <= 0:
        fraction_name = "gpu_memory_utilization" if res.memory_rule == "budget" else res.fraction_flag
        need = requested - budget + layout.blocks_per_request * layout.bytes_per_block
        return (
            f"does not start: needs {fmt_gib(need)} per GPU for weights ({fmt_gib(weights)}), overheads and one "
            f"{res.max_model_len:,}-token request, but {fraction_name} {res.gpu_memory_utilization} x "
            f"{fmt_gib(hw.memory_bytes)} gives {fmt_gib(requested)}"
        )
    return (
        f"does not start: one {res.max_model_len:,}-token request needs {fmt_gib(need_kv)} of KV cache per GPU, "
        f"{fmt_gib(budget)} is left after weights and overheads ({concurrency:.2f} requests)"
    )


#: Candidate changes, tried in order; each is kept only if the re-plan starts (or holds more).
def _candidates(model: ModelSpec, hw: HardwareProfile, sc: Scenario, plan: MemoryPlan) -> list[tuple[str, dict]]:
    res = plan.resolved
    out: list[tuple[str, dict]] = []
    if res.kv_cache_dtype not in ("fp8", "int8"):
        out.append(("--kv-cache-dtype fp8", {"kv_cache_dtype": "fp8"}))
    for tp in (sc.tp * 2, sc.tp * 4, sc.tp * 8):
        if tp * sc.data_parallel_size <= hw.gpus_per_node:  # each DP rank would take tp GPUs
            out.append((f"--tensor-parallel-size {tp}", {"tp": tp, "num_gpus": None}))
    if model.quantization is None and res.weight_formats["mlp"].bits_per_weight > 8:
        out.append(("--quantization fp8 (weight dtype fp8)", {"weight_dtype": "fp8"}))
        out.append(("an AWQ/GPTQ int4 checkpoint (weight dtype int4)", {"weight_dtype": "int4"}))
    if res.gpu_memory_utilization < 0.95:
        out.append((f"{res.fraction_flag} 0.95", {"gpu_memory_utilization": 0.95}))
    if sc.engine != "eager":
        out.append(("--enforce-eager (frees the CUDA-graph pool)", {"engine": "eager"}))
    pp = sc.pp * 2
    where = "within one node" if sc.tp * pp <= hw.host_gpus else "across nodes"
    if sc.data_parallel_size == 1:  # the planner does not model PP inside DP ranks (resolve refuses it)
        out.append((f"--pipeline-parallel-size {pp} ({where})", {"pp": pp, "num_gpus": None}))
    return out


#: Scenario fields that move only memory terms of the budget (``requested``, the CUDA-graph pool), not the resolved
#: limits, the weights, the activations or the KV layout: a candidate changing only these is re-summed from the
#: plan's own numbers (``_budget_only``) instead of planned anew.
BUDGET_ONLY_FIELDS = frozenset({"gpu_memory_utilization", "engine"})


def _budget_only(base: _Numbers, model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> _Numbers:
    """``_numbers(model, hw, sc)`` for a scenario that differs from ``base``'s only in ``BUDGET_ONLY_FIELDS``, on one
    pipeline stage: the same arithmetic on the terms that move (tests/test_memory_suggestions.py checks it equal)."""
    fraction = base.res.gpu_memory_utilization if sc.gpu_memory_utilization is None else sc.gpu_memory_utilization
    graphs = cuda_graph_bytes(model, sc, len(base.stages[base.stage]))
    res = base.res.model_copy(update={"gpu_memory_utilization": fraction})
    held = base.weights[base.stage] + base.non_torch + base.lora + base.encoder + base.encoder_cache
    inside = _peaks_split(res, base.act, graphs, base.encoder_activations)[0]
    requested, budget = kv_budget(res, hw.memory_bytes, held, inside)
    blocks, concurrency, fits = _capacity(budget, base.layout)
    res, act = _pooled(model, sc, res, blocks, base.act)  # a static pool's blocks do not depend on its slots
    short = _outside_short(hw, requested, _peaks_split(res, act, graphs, base.encoder_activations)[1])
    return base._replace(
        res=res,
        act=act,
        requested=requested,
        graphs=graphs,
        budget=budget,
        blocks=blocks,
        concurrency=concurrency,
        fits=fits and not short,
        short=short,
    )


def suggestions(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, plan: MemoryPlan, numbers: _Numbers | None = None
) -> list[str]:
    """What would make it start (if it does not) or hold more requests (if it does); each re-planned (``numbers``:
    the plan's own, from which a budget-only change is re-summed)."""
    out = []
    if not plan.fits and plan.max_model_len_that_fits:
        out.append(f"fits if --max-model-len <= {plan.max_model_len_that_fits:,}")
    one_stage = numbers is not None and len(numbers.stages) == 1
    for label, change in _candidates(model, hw, sc, plan):
        try:  # the alternative's numbers only: its words, terms and longest fitting length are not needed
            alt_sc = sc.model_copy(update=change)
            if one_stage and numbers is not None and change.keys() <= BUDGET_ONLY_FIELDS:
                alt = _budget_only(numbers, model, hw, alt_sc)
            else:
                alt = _numbers(model, hw, alt_sc)
        except Exception:  # noqa: BLE001 (an impossible combination is simply not suggested)
            continue
        alt_concurrency = round(alt.concurrency, 2)  # as its plan would report it
        if not plan.fits and alt.fits:
            out.append(
                f"fits with {label}: {fmt_requests(alt_concurrency)} requests of {alt.res.max_model_len:,} tokens"
            )
        elif plan.fits and alt.fits and alt_concurrency > plan.max_concurrency * 1.3 and len(out) < 4:
            now = fmt_requests(plan.max_concurrency)
            out.append(f"{label}: {fmt_requests(alt_concurrency)} requests at once instead of {now}")
    return out[:6]
