"""Scenario resolution: every vLLM default a ``Scenario`` leaves as ``None``, filled for one model and card.

A ``Scenario`` says what the user chose; ``resolve`` says what vLLM would run with (max_model_len from
the config, block size 64 for MLA, the token budget and sequence limit for the card's memory, the KV
dtype behind ``auto``, the storage format of each weight) and refuses combinations vLLM refuses (TP
that does not divide the heads, a context longer than the model's). The memory plan, the roofline
and the latency model all start from the same ``Resolved``.
"""

from __future__ import annotations

from collections import OrderedDict

from pydantic import BaseModel, ConfigDict, Field

from planner.engine import DEFAULT_ENGINE, FRACTION_FLAGS, EngineProfile, MemoryRule, MoeWeightLayout, resolve_engine
from planner.errors import ScenarioError
from planner.estimate import placement
from planner.hardware import HardwareProfile
from planner.model.layers import MLA
from planner.model.quantization import WeightFormat, canonical_dtype, resolve_formats
from planner.model.spec import ModelSpec, derived, dtype_bytes
from planner.scenario import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    MLA_BLOCK_SIZE,
    LoRA,
    Scenario,
    default_batch_limits,
)
from planner.units import MiB

KV_DTYPES = ("auto", "bf16", "fp16", "fp8", "int8")
#: vLLM 0.33's token budget with DeepEP low-latency dispatch under DP (vllm/config/scheduler.py).
BATCHED_DP_MAX_NUM_BATCHED_TOKENS = 256


class Resolved(BaseModel):
    """The scenario with every vLLM default filled in for this model and card."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(description="Tensor-parallel size.")
    pp: int = Field(description="Pipeline-parallel size.")
    max_model_len: int = Field(description="Longest request, in tokens.")
    block_size: int = Field(description="Tokens per KV block.")
    kv_cache_dtype: str = Field(description="KV dtype actually used (auto resolved).")
    kv_bytes_per_element: float = Field(description="Bytes per cached KV element.")
    act_bytes_per_element: float = Field(description="Bytes per activation element (the model dtype).")
    max_num_seqs: int = Field(description="Sequences per step.")
    max_num_batched_tokens: int = Field(description="Token budget per step.")
    enable_chunked_prefill: bool = Field(
        True,
        exclude_if=lambda v: v is True,
        description="Chunked prefill on: the scenario's, else the engine's default at its version (vLLM V1 and "
        "SGLang on; TensorRT-LLM off; vLLM V0 off but above 32K tokens of context).",
    )
    profiled_rows: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Rows of fp32 logits in the engine's profiling forward when they are not max_num_seqs "
        "(TensorRT-LLM: one per dummy context request, EngineProfile.profiled_rows); None: max_num_seqs (vLLM's "
        "sampler run; SGLang's slots, whose logits live outside its pool).",
    )
    gpu_memory_utilization: float = Field(
        description="Fraction of total memory the engine may use: vLLM's --gpu-memory-utilization, SGLang's "
        "--mem-fraction-static (its static pool); the scenario's, else the engine's default."
    )
    memory_rule: MemoryRule = Field(
        "budget",
        exclude_if=lambda v: v == "budget",
        description="How the engine sizes its KV cache from that fraction (EngineProfile.memory_rule): 'budget' "
        "(vLLM), 'static_pool' (SGLang: weights + KV, activations and graphs outside), 'free_fraction' "
        "(TensorRT-LLM: a share of the memory free after weights, activations and graphs).",
    )

    reserves_cuda_graph_memory: bool = Field(
        True,
        exclude_if=lambda v: v is True,
        description="The engine sizes its KV cache after reserving the CUDA-graph pool (EngineProfile."
        "reserves_graph_memory_at: vLLM from 0.21.0, SGLang, TensorRT-LLM); False: it captures the graphs after "
        "sizing the KV cache, so they take memory beyond the fraction (vLLM V0 and V1 through 0.20).",
    )

    @property
    def fraction_flag(self) -> str:
        """The engine's flag for that fraction (``FRACTION_FLAGS`` of its rule)."""
        return FRACTION_FLAGS[self.memory_rule]

    @property
    def static_pool(self) -> bool:
        """SGLang's rule: the fraction holds weights + KV cache, activations and graphs outside it."""
        return self.memory_rule == "static_pool"

    weight_formats: dict[str, WeightFormat] = Field(description="Storage format per component.")
    expert_layout: MoeWeightLayout | None = Field(
        None,
        description="How the engine holds the routed experts on this card (padding, extra scale copies), when its "
        "profile has a rule for their format; None: the checkpoint's bytes (planner.estimate.resident).",
    )
    lora: LoRA | None = Field(
        None, exclude_if=lambda v: v is None, description="Multi-LoRA serving (--enable-lora); None: off."
    )
    ep: int = Field(
        1,
        exclude_if=lambda v: v == 1,
        description="Expert-parallel size: tp x data-parallel size with --enable-expert-parallel (vLLM's "
        "FusedMoEParallelConfig.make), else 1 (each expert split over the TP ranks).",
    )
    dp: int = Field(1, exclude_if=lambda v: v == 1, description="Attention data-parallel ranks (--data-parallel-size).")
    expert_load_imbalance: float = Field(
        1.0,
        exclude_if=lambda v: v == 1.0,
        description="Routed pairs on the busiest EP rank over the mean (the scenario's, with ep > 1; else 1).",
    )
    all2all_backend: str = Field(
        "allgather_reducescatter",
        exclude_if=lambda v: v == "allgather_reducescatter",
        description="vLLM --all2all-backend of the expert dispatch/combine (used with dp > 1).",
    )


def kv_bytes_per_element(model: ModelSpec, kv_cache_dtype: str) -> tuple[str, float]:
    """The KV dtype vLLM would use for ``--kv-cache-dtype`` (``auto`` is the model's) and its bytes per element."""
    name = canonical_dtype(kv_cache_dtype or "auto")
    if name not in KV_DTYPES:
        raise ScenarioError(
            f"unknown --kv-cache-dtype '{kv_cache_dtype}'.", hint=f"Use one of: {', '.join(KV_DTYPES)}."
        )
    if name == "auto":
        name = model.default_kv_dtype
    return name, dtype_bytes(name)


#: ``resolve``'s results by the identity of its three frozen inputs, each entry holding them (so no id is reused
#: while it is kept): one what-if resolves the same scenario in its memory plan, both rooflines and the latency.
#: Keyed on the objects, not their values: a scenario built anew (the next rerun) is resolved anew.
_RESOLVED: OrderedDict[tuple[int, int, int], tuple[ModelSpec, HardwareProfile, Scenario, Resolved]] = OrderedDict()
RESOLVED_KEPT = 64


def resolve(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> Resolved:
    """Fill vLLM's defaults and check the combination (TP vs heads, lengths); a refusal raises every time."""
    key = (id(model), id(hw), id(sc))
    hit = _RESOLVED.get(key)
    if hit is not None and hit[0] is model and hit[1] is hw and hit[2] is sc:
        return hit[3]
    resolved = _resolve(model, hw, sc)
    _RESOLVED[key] = (model, hw, sc, resolved)
    while len(_RESOLVED) > RESOLVED_KEPT:
        _RESOLVED.popitem(last=False)
    return resolved


def _resolve(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> Resolved:
    check_parallelism(model, hw, sc)
    kv_name, kv_b = kv_bytes_per_element(model, sc.kv_cache_dtype)
    max_len = sc.max_model_len or model.max_position_embeddings
    if sc.max_model_len and sc.max_model_len > model.max_position_embeddings:
        raise ScenarioError(
            f"--max-model-len {sc.max_model_len:,} exceeds the model's maximum context of "
            f"{model.max_position_embeddings:,} tokens.",
            hint=f"Use --max-model-len {model.max_position_embeddings:,} or less (vLLM refuses longer unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, which may give wrong outputs).",
        )
    profile, version = resolve_engine(sc.engine_version or DEFAULT_ENGINE)
    static = profile.static_memory
    tokens_default, seqs_default = batch_defaults(hw, profile, version)
    if sc.enable_expert_parallel and sc.data_parallel_size > 1 and sc.all2all_backend == "deepep_low_latency":
        # vLLM's batched-DP MoE (ParallelConfig.use_batched_dp_moe) defaults the token budget to 256
        # (SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP, EngineArgs defaults): DeepEP's
        # low-latency buffers are sized by it
        tokens_default = BATCHED_DP_MAX_NUM_BATCHED_TOKENS
    block = sc.block_size or (MLA_BLOCK_SIZE if model.num_kv_heads == 1 and _has_mla(model) else DEFAULT_BLOCK_SIZE)
    chunked = chunked_prefill(model, sc, profile, version, max_len)
    budget = (  # vLLM without chunked prefill widens its budget to one whole prompt; TensorRT-LLM's stays fixed
        sc.max_num_batched_tokens
        or profile.default_max_num_batched_tokens
        or (
            (profile.chunked_budget_at(version) or tokens_default)
            if chunked
            else max(max_len, profile.unchunked_min_batched_tokens or tokens_default)
        )
    )
    formats = resolve_formats(model.dtype, model.quantization, sc.weight_dtype, sc.precision_overrides)
    fraction = sc.gpu_memory_utilization
    if fraction is None:
        fraction = (
            profile.kv_fraction_of_free or profile.gpu_memory_utilization_at(version) or DEFAULT_GPU_MEMORY_UTILIZATION
        )
        if static is not None:
            method = sc.speculative.method if sc.speculative is not None else None
            group = sc.tp * sc.data_parallel_size  # SGLang's tp_size spans the attention-DP ranks
            fraction = static.fraction(version, hw.memory_bytes / MiB, group, sc.pp, budget, method)
    return Resolved(
        tp=sc.tp,
        pp=sc.pp,
        max_model_len=max_len,
        block_size=block,
        kv_cache_dtype=kv_name,
        kv_bytes_per_element=kv_b,
        act_bytes_per_element=dtype_bytes(model.dtype),
        max_num_seqs=sc.max_num_seqs or min(seqs_default, budget),
        max_num_batched_tokens=budget,
        enable_chunked_prefill=chunked,
        profiled_rows=profile.profiled_rows(budget, max_len),
        gpu_memory_utilization=fraction,
        memory_rule=profile.memory_rule,
        reserves_cuda_graph_memory=profile.reserves_graph_memory_at(version),
        weight_formats=formats,
        expert_layout=_expert_layout(formats, hw, sc),
        lora=sc.lora,
        **_expert_parallel(sc),
    )


def chunked_prefill(model: ModelSpec, sc: Scenario, profile: EngineProfile, version: str | None, max_len: int) -> bool:
    """Whether the engine runs chunked prefill: the command's ``--enable-chunked-prefill`` / ``--no-enable-chunked-
    prefill``, else the engine's default at ``version`` (``EngineProfile.chunked_prefill_at``: on for vLLM V1 and
    SGLang, off for TensorRT-LLM, and vLLM V0 off but for a long context)."""
    if sc.enable_chunked_prefill is not None:
        return sc.enable_chunked_prefill
    rule = profile.chunked_prefill_long_context

    def exempt() -> bool:  # asked only where the long-context rule would turn chunked prefill on (so rule is set)
        assert rule is not None
        multimodal = model.encoder is not None or model.unsupported_encoder is not None
        features = sc.speculative is not None or sc.lora is not None
        return multimodal or features or bool(model.kv_kinds & rule.exempt_kv_kinds)

    return profile.chunked_prefill_at(version, max_len, exempt)


def batch_defaults(hw: HardwareProfile, profile: EngineProfile, version: str | None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) an engine starts with on ``hw`` when the command sets neither, chunked
    prefill on: vLLM's by card (``default_batch_limits``); SGLang's prefill chunk by card and its most request slots
    (the plan sizes the slots from the pool: ``memory.pool_requests``); TensorRT-LLM's fixed
    ``default_max_num_batched_tokens`` / ``default_max_num_seqs``."""
    tokens, seqs = default_batch_limits(hw.memory_bytes, hw.name)
    static = profile.static_memory
    if static is not None:
        tokens, seqs = static.card(version, hw.memory_bytes / MiB).chunked_prefill_size, static.max_requests
    return profile.default_max_num_batched_tokens or tokens, profile.default_max_num_seqs or seqs


def _expert_parallel(sc: Scenario) -> dict:
    """Resolved's expert- and data-parallel fields (defaults without --enable-expert-parallel)."""
    if not sc.enable_expert_parallel:
        return {}
    return {
        "ep": sc.tp * sc.data_parallel_size,
        "dp": sc.data_parallel_size,
        "expert_load_imbalance": sc.expert_load_imbalance,
        "all2all_backend": sc.all2all_backend,
    }


def _expert_layout(formats: dict[str, WeightFormat], hw: HardwareProfile, sc: Scenario) -> MoeWeightLayout | None:
    """The engine profile's resident layout for the experts' format on this card, if it has one."""
    experts = formats.get("experts")
    if experts is None:
        return None
    profile = resolve_engine(sc.engine_version or DEFAULT_ENGINE)[0]
    return profile.moe_weight_layout(experts.name, hw.compute_capability)


def _has_mla(model: ModelSpec) -> bool:
    memo = derived(model)
    if "has_mla" not in memo:
        memo["has_mla"] = any(isinstance(layer.mixer, MLA) for layer in model.layers)  # sparse MLA too
    return memo["has_mla"]


def check_parallelism(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> None:
    """TP must divide the query heads (and K must divide by TP or TP by K); PP at most the layers, and the
    replica's GPUs laid out on its nodes (``planner.estimate.placement.check_layout``)."""
    heads = model.num_attention_heads
    if heads is not None and heads % sc.tp:
        divisors = [t for t in (1, 2, 4, 8, 16, 32, 64) if heads % t == 0 and t <= max(8, hw.gpus_per_node)]
        raise ScenarioError(
            f"--tp {sc.tp} does not divide the {heads} attention heads of {model.name}.",
            hint=f"Use --tp {' or '.join(str(t) for t in divisors)}, or add --pp to split layers instead.",
        )
    kv = model.num_kv_heads  # 1 for MLA: any TP replicates its latent
    if kv and sc.tp > kv and sc.tp % kv:
        raise ScenarioError(
            f"--tp {sc.tp} neither divides nor is a multiple of the {kv} KV heads.",
            hint=f"Use a --tp that is a multiple of {kv} or divides it.",
        )
    check_expert_parallel(model, sc)
    placement.check_layout(hw, sc, model.num_layers)  # PP at most the layers; the GPUs fit the nodes
    if sc.speculative is not None and sc.pp > 1:
        raise ScenarioError(
            f"speculative decoding with --pp {sc.pp}: vLLM does not run the two together (MTP and EAGLE fail under "
            "pipeline parallelism: vllm-project/vllm#49355, #57755), and the planner does not model it.",
            hint="Drop --speculative-method, or split with --tp and --pp 1.",
        )


def check_expert_parallel(model: ModelSpec, sc: Scenario) -> None:
    """Refuse expert/data-parallel layouts vLLM refuses or the planner does not model (each with the way out).

    vLLM 0.33: EP applies when tp x dp > 1 and --enable-expert-parallel (``FusedMoEParallelConfig.make``); a dense
    model's DP ranks are independent engines (replicas here); with DP > 1 and no EP vLLM splits every expert over
    tp x dp ranks (not modelled); the MoE LoRA layer has no expert parallelism (``FusedMoEWithLoRA``).
    Uneven experts are allowed (``determine_expert_map`` gives the first E % EP ranks one more)."""
    experts = _routed_experts(model)
    dp, ep_on = sc.data_parallel_size, sc.enable_expert_parallel
    if ep_on and experts is None:
        raise ScenarioError(
            f"--enable-expert-parallel: {model.name} has no routed experts (a dense model), so there is nothing "
            "to split.",
            hint="Drop --enable-expert-parallel; for more throughput add replicas with --num-gpus.",
        )
    if dp > 1 and experts is None:
        raise ScenarioError(
            f"--data-parallel-size {dp} with the dense {model.name}: vLLM runs each DP rank of a dense model as an "
            "independent engine, which the planner models as replicas.",
            hint=f"Use --num-gpus {sc.tp * sc.pp * dp} (that many GPUs in replicas of --tp {sc.tp} x --pp {sc.pp}) and "
            "--data-parallel-size 1.",
        )
    if dp > 1 and not ep_on:
        raise ScenarioError(
            f"--data-parallel-size {dp} without --enable-expert-parallel: vLLM then splits every expert over the "
            f"{sc.tp * dp} ranks of tp x dp, a layout the planner does not model.",
            hint="Add --enable-expert-parallel (the experts split whole over the ranks), or use --num-gpus for "
            "replicas.",
        )
    if not ep_on:
        return
    assert experts is not None  # refused above when dense
    ep = sc.tp * dp
    if ep == 1:
        raise ScenarioError(
            "--enable-expert-parallel on one GPU: the EP size is tp x data-parallel size = 1, so vLLM does not split "
            "the experts.",
            hint="Use --tp N or --data-parallel-size N with N > 1, or drop --enable-expert-parallel.",
        )
    if ep > experts:
        raise ScenarioError(
            f"EP size {ep} (--tp {sc.tp} x --data-parallel-size {dp}) exceeds the {experts} routed experts of "
            f"{model.name}: some ranks would hold none.",
            hint=f"Use tp x data-parallel size <= {experts}.",
        )
    if dp > 1 and sc.pp > 1:
        raise ScenarioError(
            f"--data-parallel-size {dp} with --pp {sc.pp}: the planner does not model pipeline stages inside "
            "data-parallel ranks.",
            hint="Use --pp 1 with data parallelism, or --data-parallel-size 1 with --pp.",
        )
    if sc.lora is not None:
        raise ScenarioError(
            "--enable-lora with --enable-expert-parallel: vLLM's MoE LoRA layer (FusedMoEWithLoRA) allocates every "
            "expert's adapters on every rank, without expert parallelism, and the planner does not model the two "
            "together.",
            hint="Drop --enable-lora or --enable-expert-parallel.",
        )


def _routed_experts(model: ModelSpec) -> int | None:
    """The routed experts of the model's MoE layers (the largest count), None for a dense model (memoized per
    spec: ``getattr`` of a field a layer lacks takes pydantic's slow missing-attribute path, 80 times a call)."""
    memo = derived(model)
    if "routed_experts" not in memo:
        counts = [getattr(layer.ffn, "num_experts", 0) for layer in model.layers if layer.ffn is not None]
        memo["routed_experts"] = max(counts, default=0) or None
    return memo["routed_experts"]
