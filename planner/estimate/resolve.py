"""Scenario resolution: every vLLM default a ``Scenario`` leaves as ``None``, filled for one model and card.

A ``Scenario`` says what the user chose; ``resolve`` says what vLLM would run with (max_model_len from
the config, block size 64 for MLA, the token budget and sequence limit for the card's memory, the KV
dtype behind ``auto``, the storage format of each weight) and refuses combinations vLLM refuses (TP
that does not divide the heads, a context longer than the model's). The memory plan, the roofline
and the latency model all start from the same ``Resolved``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.engine import DEFAULT_ENGINE, MoeWeightLayout, resolve_engine
from planner.errors import ScenarioError
from planner.estimate import placement
from planner.hardware import HardwareProfile
from planner.model.quantization import WeightFormat, canonical_dtype, resolve_formats
from planner.model.spec import ModelSpec, derived, dtype_bytes
from planner.scenario import DEFAULT_BLOCK_SIZE, MLA_BLOCK_SIZE, LoRA, Scenario, default_batch_limits

KV_DTYPES = ("auto", "bf16", "fp16", "fp8", "int8")


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
    gpu_memory_utilization: float = Field(description="Fraction of total memory vLLM may use.")
    weight_formats: dict[str, WeightFormat] = Field(description="Storage format per component.")
    expert_layout: MoeWeightLayout | None = Field(
        None,
        description="How the engine holds the routed experts on this card (padding, extra scale copies), when its "
        "profile has a rule for their format; None: the checkpoint's bytes (planner.estimate.resident).",
    )
    lora: LoRA | None = Field(
        None, exclude_if=lambda v: v is None, description="Multi-LoRA serving (--enable-lora); None: off."
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


def resolve(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> Resolved:
    """Fill vLLM's defaults and check the combination (TP vs heads, lengths)."""
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
    tokens_default, seqs_default = default_batch_limits(hw.memory_bytes, hw.name)
    block = sc.block_size or (MLA_BLOCK_SIZE if model.num_kv_heads == 1 and _has_mla(model) else DEFAULT_BLOCK_SIZE)
    budget = sc.max_num_batched_tokens or (
        tokens_default if sc.enable_chunked_prefill else max(max_len, tokens_default)
    )
    formats = resolve_formats(model.dtype, model.quantization, sc.weight_dtype, sc.precision_overrides)
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
        gpu_memory_utilization=sc.gpu_memory_utilization,
        weight_formats=formats,
        expert_layout=_expert_layout(formats, hw, sc),
        lora=sc.lora,
    )


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
        memo["has_mla"] = any(layer.mixer.kind == "mla" for layer in model.layers)
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
    placement.check_layout(hw, sc, model.num_layers)  # PP at most the layers; the GPUs fit the nodes
    if sc.speculative is not None and sc.pp > 1:
        raise ScenarioError(
            f"speculative decoding with --pp {sc.pp}: vLLM does not run the two together (MTP and EAGLE fail under "
            "pipeline parallelism: vllm-project/vllm#49355, #57755), and the planner does not model it.",
            hint="Drop --speculative-method, or split with --tp and --pp 1.",
        )
