"""Weight precision: storage bits per weight (scales included) and the math dtype, per component.

A checkpoint's ``quantization_config`` (AWQ, GPTQ, fp8, compressed-tensors, bitsandbytes, MXFP4,
ModelOpt) and the user's choices (``--weight-dtype``, per-component overrides for mixed
precision) resolve to one ``WeightFormat`` per component: embedding, attention, mlp, experts,
mamba, lm_head. Norms, biases and routers always stay in the activation dtype.

Storage bits (shared/reference/formulas.md, table 1.2):
* AWQ / GPTQ 4-bit, group 128: 4 + (16-bit scale + 4-bit zero) / 128 = 4.156 bits (0.5195 B/param)
* fp8 block 128x128 (DeepSeek-V3): 8 + 32 / (128*128); per-channel fp8 / int8: 8 bits + a row scale
* bitsandbytes nf4: 4 + 32/64 (fp32 absmax per 64) = 4.5; with double quant 4 + 8/64 + 32/(64*256)
* MXFP4: 4 + 8/32 = 4.25 (E8M0 scale per 32); NVFP4: 4 + 8/16 = 4.5 (FP8 scale per 16)

Every field a parser reads is type- and range-checked first (``planner.model.validation``), the
key named in the message: bits from the set the method supports, group sizes and fp8 blocks of
positive integers, switches true/false, sub-objects JSON objects.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import ConfigError, ScenarioError
from planner.model.validation import MAX_WIDTH, as_bool, as_int, as_int_in, as_list, as_mapping, as_str, optional

Q = "quantization_config"
#: Bits the integer weight formats support (vLLM 0.33.0 GPTQ: 2, 3, 4, 8; AWQ and compressed-tensors within them).
INT_BITS = (2, 3, 4, 8)
#: Most module names an exclusion list may hold (real ones: a few hundred, one per layer and module).
MAX_EXCLUDED = 100_000

COMPONENTS = ("embedding", "attention", "mlp", "experts", "mamba", "lm_head")
QUANTIZED_BY_DEFAULT = ("attention", "mlp", "experts", "mamba")


class WeightFormat(BaseModel):
    """How one component's linear weights are stored and multiplied."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Format label: bf16, fp16, fp32, fp8, int8, int4-g128, mxfp4, nvfp4, nf4 ...")
    bits_per_weight: float = Field(gt=0, description="Storage bits per weight, scales and zero points included.")
    compute_dtype: str = Field(
        description="Dtype of the GEMM math: bf16/fp16 for weight-only formats, fp8/int8/fp4 for W8A8/W4A4."
    )


def _fmt(name: str, bits: float, compute: str) -> WeightFormat:
    return WeightFormat(name=name, bits_per_weight=bits, compute_dtype=compute)


#: Formats a user may name with --weight-dtype or a per-component override.
NAMED_FORMATS: dict[str, WeightFormat] = {
    "fp32": _fmt("fp32", 32, "fp32"),
    "bf16": _fmt("bf16", 16, "bf16"),
    "fp16": _fmt("fp16", 16, "fp16"),
    "fp8": _fmt("fp8", 8 + 32 / 4096, "fp8"),  # W8A8 dynamic, per-channel fp32 scale (~4096-wide rows)
    "int8": _fmt("int8", 8 + 32 / 4096, "int8"),  # W8A8 SmoothQuant-style
    "int4": _fmt("int4-g128", 4 + 20 / 128, "bf16"),  # AWQ/GPTQ W4A16
    "awq": _fmt("int4-g128 (awq)", 4 + 20 / 128, "bf16"),
    "gptq": _fmt("int4-g128 (gptq)", 4 + 20 / 128, "bf16"),
    "mxfp4": _fmt("mxfp4", 4.25, "bf16"),
    "nvfp4": _fmt("nvfp4", 4.5, "fp4"),
    "nf4": _fmt("nf4", 4.5, "bf16"),
}

DTYPE_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "e4m3": "fp8",
}


def canonical_dtype(name: str) -> str:
    """The planner's spelling of a storage dtype: 'bfloat16' -> 'bf16', 'torch.float16' -> 'fp16'.

    Spelling only: formats stay distinct ('nvfp4', 'mxfp4') and unknown names pass through lowercased,
    for the caller to refuse in its own words. Which tensor-core peak a dtype runs at is
    ``planner.hardware.math_dtype``.
    """
    key = str(name).lower().removeprefix("torch.")
    return DTYPE_ALIASES.get(key, key)


class QuantizationSpec(BaseModel):
    """A checkpoint's quantization, normalized."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str = Field(
        description="quant_method as written in config.json (awq, gptq, fp8, compressed-tensors, bitsandbytes, mxfp4, "
        "modelopt)."
    )
    weight_format: WeightFormat = Field(description="Format of the quantized linear weights.")
    components: tuple[str, ...] = Field(description="Components whose linear weights are quantized.")
    group_size: int | None = Field(
        None, description="Weights per scale group along the input dimension; None for per-channel/tensor."
    )
    kv_cache_dtype: str | None = Field(
        None, description="KV-cache dtype the checkpoint ships scales for (e.g. fp8), if any."
    )
    excluded_modules: tuple[str, ...] = Field(
        (), description="Module patterns left unquantized, as written in the config."
    )


_COMPONENT_PATTERNS = {
    "lm_head": ("lm_head", "embed_out", "output"),
    "embedding": ("embed_tokens", "wte", "embed_in", "word_embeddings", "embedding"),
    "attention": ("self_attn", "attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj", "qkv"),
    "experts": ("experts",),
    "mlp": ("mlp", "feed_forward", "ffn"),
    "mamba": ("mamba", "mixer"),
}


def _excluded_components(patterns: list[str]) -> set[str]:
    """Which components a list of excluded module names/patterns covers (e.g. 'model.layers.*.self_attn')."""
    out: set[str] = set()
    for raw in patterns:
        pattern = str(raw).removeprefix("re:")
        last = re.split(r"[.*]", pattern.rstrip(".*$"))[-1] if pattern else ""
        for component, keys in _COMPONENT_PATTERNS.items():
            if any(key == last or fnmatch.fnmatch(last, key) for key in keys):
                # A router ('mlp.router', 'mlp.gate') is never quantized anyway: do not exclude the mlp for it.
                out.add(component)
                break
    return out


def _group_bits(bits: int, group_size: int | None, zero: bool = True) -> float:
    if not group_size or group_size <= 0:
        return bits + 32 / 4096
    return bits + (16 + (bits if zero else 0)) / group_size


def _group_size(key: str, value: Any) -> int | None:
    """A scale-group width: -1 or null for per-channel, else 1..131,072 weights."""
    if value is None or (value == -1 and not isinstance(value, bool)):
        return None
    return as_int(key, value, 1, MAX_WIDTH, "weights per scale group; -1 for per-channel")


def _awq_gptq(cfg: Mapping) -> tuple[WeightFormat, int | None]:
    bits_key = "bits" if "bits" in cfg else "w_bit"
    bits = as_int_in(f"{Q}.{bits_key}", cfg.get(bits_key, 4), INT_BITS, "bits per weight")
    group_key = "group_size" if "group_size" in cfg else "q_group_size"
    group = _group_size(f"{Q}.{group_key}", cfg.get(group_key, 128))
    method = cfg.get("quant_method")
    compute = "int8" if bits == 8 and method == "gptq" else "bf16"
    return _fmt(f"int{bits}-g{group or 'channel'} ({method})", _group_bits(bits, group), compute), group


def _fp8_block(value: Any) -> list[int] | None:
    """weight_block_size: null (per-channel) or a pair [rows, columns] of positive integers."""
    if value is None:
        return None
    key = f"{Q}.weight_block_size"
    pair = as_list(key, value, 2)
    if len(pair) != 2:
        raise ConfigError(
            f"config.json key {key!r} should be a pair [rows, columns] such as [128, 128], got {value!r}.",
            hint="Compare the file with the model's config.json on the Hub.",
        )
    return [as_int(f"{key}[{i}]", v, 1, MAX_WIDTH, "fp8 scale-block size") for i, v in enumerate(pair)]


def _fp8(cfg: Mapping) -> tuple[WeightFormat, int | None]:
    block = _fp8_block(cfg.get("weight_block_size"))
    bits = 8 + (32 / (block[0] * block[1]) if block else 32 / 4096)
    return _fmt("fp8" + (f" block {block[0]}x{block[1]}" if block else ""), bits, "fp8"), None


#: compressed-tensors QuantizationStrategy values (compressed-tensors 0.x, quant_scheme.py).
CT_STRATEGIES = ("tensor", "channel", "group", "block", "token", "tensor_group", "attn_head")


def _compressed_tensors(cfg: Mapping) -> tuple[WeightFormat, int | None]:
    groups = optional(as_mapping, f"{Q}.config_groups", cfg.get("config_groups")) or {}
    if not groups:
        raise ConfigError(
            "quantization_config (compressed-tensors) has no config_groups; cannot tell the weight format."
        )
    name, first = next(iter(groups.items()))
    where = f"{Q}.config_groups.{name}"
    first = as_mapping(where, first)
    weights = optional(as_mapping, f"{where}.weights", first.get("weights")) or {}
    bits = as_int_in(f"{where}.weights.num_bits", weights.get("num_bits", 8), INT_BITS, "bits per weight")
    kind = as_str(f"{where}.weights.type", weights.get("type", "int"), ("int", "float"))
    strategy = as_str(f"{where}.weights.strategy", weights.get("strategy", "channel"), CT_STRATEGIES)
    group = (
        as_int(f"{where}.weights.group_size", weights.get("group_size"), 1, MAX_WIDTH, "weights per scale group")
        if strategy == "group"
        else None
    )
    acts = optional(as_mapping, f"{where}.input_activations", first.get("input_activations"))
    if kind == "float" and bits == 4:
        return _fmt("nvfp4", 4.5, "fp4"), 16
    if kind == "float":
        return _fmt("fp8", 8 + 32 / 4096, "fp8" if acts else "bf16"), None
    compute = ("int8" if bits == 8 else "bf16") if acts else "bf16"
    zero = not as_bool(f"{where}.weights.symmetric", weights.get("symmetric", True))
    return _fmt(f"int{bits}" + (f"-g{group}" if group else ""), _group_bits(bits, group, zero), compute), group


def _bitsandbytes(cfg: Mapping) -> tuple[WeightFormat, int | None]:
    if any(optional(as_bool, f"{Q}.{key}", cfg.get(key)) for key in ("load_in_8bit", "_load_in_8bit")):
        return _fmt("int8 (bnb)", 8 + 32 / 4096, "bf16"), None
    double = as_bool(f"{Q}.bnb_4bit_use_double_quant", cfg.get("bnb_4bit_use_double_quant", False))
    bits = 4 + (8 / 64 + 32 / (64 * 256) if double else 32 / 64)
    return _fmt(
        as_str(f"{Q}.bnb_4bit_quant_type", cfg.get("bnb_4bit_quant_type", "nf4"), ("nf4", "fp4")), bits, "bf16"
    ), 64


def _mxfp4(cfg: Mapping) -> tuple[WeightFormat, int | None]:
    return NAMED_FORMATS["mxfp4"], 32


def _modelopt(cfg: Mapping) -> tuple[WeightFormat, int | None]:
    inner = optional(as_mapping, f"{Q}.quantization", cfg.get("quantization")) or {}
    algo = (
        optional(as_str, f"{Q}.quantization.quant_algo", inner.get("quant_algo"))
        or optional(as_str, f"{Q}.quant_algo", cfg.get("quant_algo"))
        or "FP8"
    )
    algo = algo.upper()
    if "FP4" in algo:
        return NAMED_FORMATS["nvfp4"], 16
    return NAMED_FORMATS["fp8"], None


#: quant_method -> parser of the rest of quantization_config.
PARSERS: dict[str, Callable[[Mapping], tuple[WeightFormat, int | None]]] = {
    "awq": _awq_gptq,
    "gptq": _awq_gptq,
    "fp8": _fp8,
    "fbgemm_fp8": _fp8,
    "compressed-tensors": _compressed_tensors,
    "bitsandbytes": _bitsandbytes,
    "mxfp4": _mxfp4,
    "modelopt": _modelopt,
    "modelopt_fp4": _modelopt,
}

#: Components a method quantizes unless the config says otherwise.
DEFAULT_COMPONENTS: dict[str, tuple[str, ...]] = {"mxfp4": ("experts",)}


def checkpoint_quantization(config: Mapping[str, Any]) -> QuantizationSpec | None:
    """A config.json's quantization: ``quantization_config``, else legacy ``compression_config``; None when neither."""
    for key in ("quantization_config", "compression_config"):
        value = config.get(key)
        if value is not None and value != {}:
            return parse_quantization(as_mapping(key, value))
    return None


def _excluded_modules(raw: Mapping[str, Any]) -> list[str]:
    """Module names/patterns left unquantized, under whichever key the method uses."""
    for key in ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules", "llm_int8_skip_modules"):
        if raw.get(key):
            entries = as_list(f"{Q}.{key}", raw[key], MAX_EXCLUDED)
            return [as_str(f"{Q}.{key}[{i}]", e) for i, e in enumerate(entries)]
    return []


def parse_quantization(raw: Mapping[str, Any] | None) -> QuantizationSpec | None:
    """Normalize ``quantization_config`` (or legacy ``compression_config``); None when absent."""
    if raw is None:
        return None
    raw = as_mapping(Q, raw)
    if not raw:
        return None
    method = (optional(as_str, f"{Q}.quant_method", raw.get("quant_method")) or "").lower()
    producer = optional(as_mapping, f"{Q}.producer", raw.get("producer")) or {}
    if not method and producer.get("name") == "modelopt":
        method = "modelopt"
    if not method and ("load_in_4bit" in raw or "load_in_8bit" in raw):
        method = "bitsandbytes"
    parser = PARSERS.get(method)
    if parser is None:
        raise ConfigError(
            f"quantization_config has quant_method '{method or '(missing)'}', which the planner does not know.",
            hint=f"Known methods: {', '.join(sorted(PARSERS))}. Remove quantization_config to plan the unquantized "
            f"model, "
            "or use --weight-dtype to say how the weights are stored.",
        )
    fmt, group = parser(raw)
    excluded = _excluded_modules(raw)
    components = tuple(
        c for c in DEFAULT_COMPONENTS.get(method, QUANTIZED_BY_DEFAULT) if c not in _excluded_components(excluded)
    )
    kv = optional(as_mapping, f"{Q}.kv_cache_scheme", raw.get("kv_cache_scheme")) or optional(
        as_str, f"{Q}.kv_cache_quant_algo", raw.get("kv_cache_quant_algo")
    )
    return QuantizationSpec(
        method=method,
        weight_format=fmt,
        components=components,
        group_size=group,
        kv_cache_dtype="fp8" if kv else None,
        excluded_modules=tuple(str(e) for e in excluded),
    )


def resolve_formats(
    model_dtype: str,
    quantization: QuantizationSpec | None,
    weight_dtype: str = "auto",
    overrides: dict[str, str] | None = None,
) -> dict[str, WeightFormat]:
    """Per-component weight format: checkpoint, then --weight-dtype, then per-component overrides.

    ``weight_dtype='auto'`` keeps the checkpoint (quantized components in their format, the rest in
    the model dtype). A named format applies to the quantizable components (attention, mlp,
    experts, mamba) as vLLM's ``--quantization`` does; embedding and lm_head stay in the model
    dtype unless overridden. A quantized checkpoint cannot be re-quantized to another format.
    """
    base = NAMED_FORMATS.get(canonical_dtype(model_dtype), NAMED_FORMATS["bf16"])
    formats = {c: base for c in COMPONENTS}
    if quantization is not None:
        for c in quantization.components:
            formats[c] = quantization.weight_format
    wd = canonical_dtype(weight_dtype or "auto")
    if wd != "auto":
        fmt = NAMED_FORMATS.get(wd)
        if fmt is None:
            raise ScenarioError(
                f"unknown --weight-dtype '{weight_dtype}'.", hint=f"Use one of: auto, {', '.join(NAMED_FORMATS)}."
            )
        if quantization is not None and fmt.bits_per_weight >= 16:
            raise ScenarioError(
                f"--weight-dtype {weight_dtype} asks for unquantized weights, but the checkpoint is already "
                f"{quantization.method}-quantized ({quantization.weight_format.name}).",
                hint="Use --weight-dtype auto for this checkpoint, or pick the unquantized repo.",
            )
        if quantization is not None and fmt.name != quantization.weight_format.name:
            raise ScenarioError(
                f"--weight-dtype {weight_dtype} conflicts with the checkpoint's {quantization.method} quantization "
                f"({quantization.weight_format.name}): vLLM cannot re-quantize a quantized checkpoint.",
                hint="Use --weight-dtype auto, or plan the unquantized model with the format you want.",
            )
        if fmt.bits_per_weight >= 16:
            formats = {c: fmt for c in COMPONENTS}
        else:
            for c in QUANTIZED_BY_DEFAULT:
                formats[c] = fmt
    for component, name in (overrides or {}).items():
        if component not in COMPONENTS:
            raise ScenarioError(
                f"unknown component '{component}' in a precision override.",
                hint=f"Use one of: {', '.join(COMPONENTS)}.",
            )
        fmt = NAMED_FORMATS.get(canonical_dtype(name))
        if fmt is None:
            raise ScenarioError(
                f"unknown dtype '{name}' for {component}.", hint=f"Use one of: {', '.join(NAMED_FORMATS)}."
            )
        formats[component] = fmt
    return formats
