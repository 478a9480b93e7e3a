"""``inspect``: a model's architecture, parameter counts, weight bytes and KV-cache bytes."""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.commands.common import (
    Number,
    add_model_argument,
    field_descriptions,
    fmt_bytes,
    fmt_count,
    heading,
    load_model,
    render,
    table,
    warn,
)
from planner.errors import ScenarioError
from planner.estimate.memory import weight_bytes
from planner.estimate.resolve import kv_bytes_per_element
from planner.model.layers import Attention, MoE
from planner.model.spec import ModelSpec
from planner.scenario import MAX_TOKENS

NAME = "inspect"
HELP = "Show a model's architecture, exact parameter counts, weight bytes and KV-cache bytes per token and sequence."
EXAMPLE = "python -m planner inspect meta-llama/Llama-3.1-8B --context-len 8192 --format json"


class Inspection(BaseModel):
    """What inspect reports about one model (all byte counts for one copy, no tensor parallelism)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Repo id, catalog name or path the config came from.")
    source: str = Field(description="Where the config.json was read: catalog entry, Hub URL with commit, or file path.")
    model_type: str = Field(description="config.json model_type (of the text model for multimodal wrappers).")
    family: str = Field(description="Family handler that parsed it ('generic' for an unknown model_type).")
    generic: bool = Field(description="True when the numbers are a generic-decoder estimate for an unknown model_type.")
    dtype: str = Field(description="Served checkpoint dtype (bf16, fp16).")
    total_params: int = Field(description="All parameters, exact (tied embeddings counted once).")
    active_params: int = Field(
        description="Parameters one token uses: total minus (E - k) routed experts per MoE layer."
    )
    active_params_excl_embedding: int = Field(
        description="Active parameters without the input embedding (gpt-oss convention)."
    )
    params_by_component: dict[str, int] = Field(
        description="Parameters per component (embedding, attention, mlp, experts, router, norms, lm_head ...)."
    )
    weight_dtype: str = Field(description="--weight-dtype the weight bytes are for (auto: the checkpoint's).")
    weight_bytes: int = Field(
        description="Weights of the whole model at that precision, bytes (scales included, vocab unpadded)."
    )
    kv_cache_dtype: str = Field(description="KV-cache dtype the KV bytes are for (auto resolved to the model dtype).")
    context_len: int = Field(description="Tokens in the sequence of kv_bytes_per_sequence (--context-len).")
    kv_bytes_per_token: int = Field(
        description="KV bytes one token adds over all attention layers, below every sliding window."
    )
    kv_bytes_per_sequence: int = Field(
        description=(
            "KV bytes of one context_len-token sequence: sliding layers capped at their window, no block rounding."
        )
    )
    state_bytes_per_sequence: int = Field(
        description="Fixed recurrent (Mamba) state per sequence, bytes; 0 for pure attention models."
    )
    num_layers: int = Field(description="Decoder layers.")
    hidden_size: int = Field(description="Model width h.")
    vocab_size: int = Field(description="Vocabulary size as in config.json.")
    heads: int | None = Field(description="Query heads; None for attention-free models.")
    kv_heads: int | None = Field(description="KV heads vLLM caches (1 for MLA); None for attention-free models.")
    head_dim: int | None = Field(
        description=(
            "Attention head size; None for MLA (its dims are under attention: qk_nope_head_dim, "
            "qk_rope_head_dim, v_head_dim, kv_lora_rank) and for attention-free models."
        )
    )
    sliding_windows: list[int] = Field(
        description="Distinct sliding-window sizes, tokens; empty when every attention layer is full."
    )
    attention: dict[str, Any] | None = Field(
        description="The first attention layer's full description (kind, heads, dims, biases, window or MLA ranks)."
    )
    moe: dict[str, Any] | None = Field(
        description=(
            "Mixture of experts: num_experts, experts_per_token, expert_intermediate_size, "
            "shared_intermediate_size, moe_layers; None for dense models."
        )
    )
    quantization: dict[str, Any] | None = Field(
        description=(
            "The checkpoint's quantization_config, normalized (method, bits per weight, group size, "
            "components); None if unquantized."
        )
    )
    max_position_embeddings: int = Field(description="Longest context the config allows, tokens.")
    tie_word_embeddings: bool = Field(description="lm_head shares the input embedding.")
    layers: list[str] = Field(
        description="Kind of every layer in order: full_attention, sliding_attention(W), mla, mamba, with '+moe'."
    )
    layer_kind_counts: dict[str, int] = Field(description="How many layers of each kind.")
    warnings: list[str] = Field(
        description="What the parser had to assume, and where the config came from if not fresh."
    )
    encoder: dict[str, Any] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The multimodal model's vision encoder (planner.model.encoders): kind, params (exact, "
        "transformers' count; not in total_params), layers, tokens_per_image at its native size (None: dynamic "
        "resolution); absent for a text-only model.",
    )


OUTPUT_KEYS = field_descriptions(Inspection)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument(
        "--context-len",
        metavar="N",
        type=Number(int, "--context-len", ge=1, le=MAX_TOKENS),
        default=None,
        help=f"Tokens in one sequence for kv_bytes_per_sequence, 1 to {MAX_TOKENS:,}. Default: the model's "
        "maximum context.",
    )
    parser.add_argument(
        "--kv-dtype",
        "--kv-cache-dtype",
        dest="kv_cache_dtype",
        metavar="D",
        default="auto",
        help="KV-cache dtype: auto (the model dtype), bf16, fp16, fp8, int8. Default: %(default)s.",
    )
    parser.add_argument(
        "--weight-dtype",
        metavar="D",
        default="auto",
        help="Weight precision for weight_bytes: auto (the checkpoint's), bf16, fp8, int4, ... Default: %(default)s.",
    )


def _moe(spec: ModelSpec) -> dict[str, Any] | None:
    moe_layers = [layer.ffn for layer in spec.layers if isinstance(layer.ffn, MoE)]
    if not moe_layers:
        return None
    first = moe_layers[0]
    return {
        "num_experts": first.num_experts,
        "experts_per_token": first.experts_per_token,
        "expert_intermediate_size": first.expert_intermediate_size,
        "shared_intermediate_size": first.shared_intermediate_size,
        "moe_layers": len(moe_layers),
    }


def _head_dim(spec: ModelSpec) -> int | None:
    first = next((m for m in spec.attention_layers if isinstance(m, Attention)), None)
    return None if first is None else first.head_dim


def run(args: argparse.Namespace) -> Inspection:
    spec, loaded = load_model(args)
    context = args.context_len if args.context_len is not None else spec.max_position_embeddings
    if context < 1:
        raise ScenarioError(f"--context-len must be at least 1 token, got {context}.")
    if context > spec.max_position_embeddings:
        warn(
            f"--context-len {context:,} exceeds the model's maximum context of {spec.max_position_embeddings:,} tokens."
        )
    kv_name, kv_b = kv_bytes_per_element(spec, args.kv_cache_dtype)
    attention = spec.attention_layers
    windows = sorted({m.window_tokens for m in attention if isinstance(m, Attention) and m.window_tokens})
    return Inspection(
        name=spec.name,
        source=loaded.source,
        model_type=spec.model_type,
        family=spec.family,
        generic=spec.generic,
        dtype=spec.dtype,
        total_params=spec.total_params,
        active_params=spec.active_params,
        active_params_excl_embedding=spec.active_params_excl_embedding,
        params_by_component=spec.params_by_component(),
        weight_dtype=args.weight_dtype,
        weight_bytes=weight_bytes(spec, args.weight_dtype),
        kv_cache_dtype=kv_name,
        context_len=context,
        kv_bytes_per_token=spec.kv_bytes_per_token(kv_bytes_per_element=kv_b),
        kv_bytes_per_sequence=spec.kv_bytes_per_sequence(context, kv_bytes_per_element=kv_b),
        state_bytes_per_sequence=spec.state_bytes_per_sequence(),
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        vocab_size=spec.vocab_size,
        heads=spec.num_attention_heads,
        kv_heads=spec.num_kv_heads,
        head_dim=_head_dim(spec),
        sliding_windows=windows,
        attention=attention[0].model_dump(mode="json") if attention else None,
        moe=_moe(spec),
        quantization=spec.quantization.model_dump(mode="json") if spec.quantization else None,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        layers=spec.layer_kinds(),
        layer_kind_counts=spec.layer_kind_counts(),
        warnings=[*loaded.warnings, *spec.warnings],
        encoder=_encoder(spec),
    )


def _encoder(spec) -> dict[str, Any] | None:
    enc = spec.encoder
    if enc is None:
        return None
    native = None if enc.dynamic_resolution else enc.tokens_per_image(enc.image_size, enc.image_size)
    return {"kind": enc.kind, "params": enc.params, "layers": enc.num_layers, "tokens_per_image": native}


def render_table(r: Inspection) -> str:
    generic = " (GENERIC ESTIMATE: unknown model_type)" if r.generic else ""
    rows = [
        ("model_type / family", f"{r.model_type} / {r.family}{generic}", ""),
        ("dtype", r.dtype, ""),
        ("parameters", f"{fmt_count(r.total_params)} ({r.total_params:,})", "exact"),
        ("active parameters", f"{fmt_count(r.active_params)} ({r.active_params:,})", "exact"),
        (f"weights ({r.weight_dtype})", fmt_bytes(r.weight_bytes), "exact"),
        (f"KV per token ({r.kv_cache_dtype})", fmt_bytes(r.kv_bytes_per_token), "exact"),
        (
            f"KV per {r.context_len:,}-token sequence",
            f"{fmt_bytes(r.kv_bytes_per_sequence)} ({r.kv_bytes_per_sequence:,} B)",
            "exact",
        ),
        ("state per sequence", fmt_bytes(r.state_bytes_per_sequence), "exact"),
        ("layers", f"{r.num_layers}: " + ", ".join(f"{n} x {k}" for k, n in r.layer_kind_counts.items()), ""),
        ("hidden / vocab", f"{r.hidden_size:,} / {r.vocab_size:,}", ""),
        ("heads / KV heads / head_dim", f"{r.heads} / {r.kv_heads} / {r.head_dim}", ""),
        ("max context", f"{r.max_position_embeddings:,} tokens", ""),
    ]
    if r.sliding_windows:
        rows.append(("sliding windows", ", ".join(f"{w:,}" for w in r.sliding_windows), ""))
    if r.encoder:
        e = r.encoder
        per_image = f"{e['tokens_per_image']:,} tokens per image" if e["tokens_per_image"] else "tokens follow the size"
        rows.append(
            (
                "vision encoder",
                f"{e['kind']}: {fmt_count(e['params'])} ({e['params']:,}), {e['layers']} layers, {per_image}",
                "exact",
            )
        )
    if r.moe:
        rows.append(
            (
                "MoE",
                f"{r.moe['num_experts']} experts, {r.moe['experts_per_token']} per token, "
                f"{r.moe['moe_layers']} MoE layers",
                "",
            )
        )
    if r.quantization:
        q = r.quantization
        rows.append(
            (
                "quantization",
                f"{q['method']}: {q['weight_format']['name']} "
                f"({q['weight_format']['bits_per_weight']:.3f} bits/weight) on {', '.join(q['components'])}",
                "",
            )
        )
    parts = [table(["", "value", "kind"], rows, title=f"{r.name}"), f"source: {r.source}"]
    for message in r.warnings:
        parts.append(heading(f"warning: {message}"))
    return render(*parts)
