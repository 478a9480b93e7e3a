"""config.json -> ModelSpec, one small family class per architecture.

A family is a table row more than code: which keys it reads, which biases and norms its layers
carry, which layers slide or route to experts, and the defaults of its transformers config class
(used when a key is absent from config.json). Families share the ``DecoderFamily`` machinery and
override only what differs; ``FAMILIES`` maps every ``model_type`` to its handler. An unknown
``model_type`` with the usual dense keys gets the generic decoder (labelled, with a warning); one
without them, or with expert, recurrent-state or unknown layer-kind keys (``NOT_DENSE_KEYS``), gets
an ``UnknownArchitectureError`` naming those keys and listing the known model_types.

Key-resolution rules follow vLLM 0.33.0 and transformers 5.24.0 (shared/reference/formulas.md, 1.0
and 1.1).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from planner.errors import ConfigError, UnknownArchitectureError
from planner.model import encoders, validation
from planner.model.layers import (
    MLA,
    Attention,
    DecoderLayer,
    DenseMLP,
    GatedDeltaNet,
    Mamba,
    Mamba2,
    MoE,
    SparseMLA,
)
from planner.model.quantization import canonical_dtype, checkpoint_quantization
from planner.model.spec import ModelSpec

KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
#: rope types whose factor vLLM multiplies into max_model_len (all others already account for it).
ROPE_TYPES_THAT_EXTEND = ("linear", "dynamic")
DEFAULT_MAX_LEN = 2048


class Cfg:
    """A config.json dict with the family's class defaults behind it and alias lookup."""

    def __init__(self, raw: dict[str, Any], defaults: dict[str, Any]):
        self.raw = raw
        self.defaults = defaults
        self.read: dict[str, Any] = {}  # key -> checked value, for naming keys in later checks

    def get(self, *keys: str, default: Any = None) -> Any:
        """First key present with a non-null value in config.json, else in the class defaults,
        checked by its rule in ``planner.model.validation`` (``default`` is returned as given)."""
        for source in (self.raw, self.defaults):
            for key in keys:
                if source.get(key) is not None:
                    self.read[key] = validation.check_value(key, source[key])
                    return self.read[key]
        return default

    def require(self, *names: tuple[str, ...] | str) -> None:
        """Raise one ConfigError naming every missing key (each name may list aliases)."""
        missing = []
        for name in names:
            aliases = (name,) if isinstance(name, str) else name
            if self.get(*aliases) is None:
                missing.append(" or ".join(aliases))
        if missing:
            raise ConfigError(
                f"config.json lacks {', '.join(repr(m) for m in missing)}.",
                hint="Check that the file is the model's config.json (not generation_config.json or a tokenizer file).",
            )

    def int(self, *keys: str, default: Any = None) -> int:
        """An integer key, range-checked by its rule (or ``validation.GENERIC_INT``) before any use."""
        value = self.get(*keys, default=default)
        if value is None:
            self.require(keys)
        key = next((k for k in keys if k in self.read), keys[0])
        return validation.check_int(key, value)


class DecoderFamily:
    """Llama-style decoder: RMSNorm, gated MLP, GQA; the base of most families."""

    model_types: ClassVar[tuple[str, ...]] = ("llama",)
    #: Defaults of the transformers config class, for keys absent from config.json.
    defaults: ClassVar[dict[str, Any]] = {"tie_word_embeddings": False}
    #: Attention biases: True/False, or a config key whose value (default False) decides.
    qkv_bias: ClassVar[bool | str] = "attention_bias"
    o_bias: ClassVar[bool | str] = "attention_bias"
    mlp_bias: ClassVar[bool | str] = "mlp_bias"
    qk_norm: ClassVar[bool | str] = False
    sinks: ClassVar[bool] = False
    gated_mlp: ClassVar[bool] = True
    norms_per_layer: ClassVar[int] = 2
    norm_params_per_h: ClassVar[int] = 1  # 1: RMSNorm (weight); 2: LayerNorm (weight + bias)
    final_norm: ClassVar[bool] = True
    generic: ClassVar[bool] = False

    # -------------------------------------------------------------- building blocks

    def flag(self, cfg: Cfg, rule: bool | str) -> bool:
        return bool(cfg.get(rule, default=False)) if isinstance(rule, str) else rule

    def required(self) -> tuple:
        return (
            ("num_hidden_layers", "n_layer"),
            ("hidden_size", "n_embd", "d_model"),
            ("num_attention_heads", "n_head"),
            ("intermediate_size", "n_inner", "ffn_dim"),
            "vocab_size",
        )

    def num_layers(self, cfg: Cfg) -> int:
        return cfg.int("num_hidden_layers", "n_layer", "num_layers")

    def hidden(self, cfg: Cfg) -> int:
        return cfg.int("hidden_size", "n_embd", "d_model", "n_embed")

    def heads(self, cfg: Cfg) -> int:
        return cfg.int("num_attention_heads", "n_head")

    def kv_heads(self, cfg: Cfg) -> int:
        return cfg.int(*KV_HEAD_KEYS, default=self.heads(cfg))

    def head_dim(self, cfg: Cfg) -> int:
        """head_dim when config.json gives it, else hidden / heads (refused when the heads do not divide it)."""
        if cfg.get("head_dim") is not None:
            return cfg.int("head_dim")
        return validation.check_head_dim_derivable(self.hidden(cfg), self.heads(cfg), cfg.read)

    def intermediate(self, cfg: Cfg) -> int:
        return cfg.int("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")

    def sliding_window(self, cfg: Cfg) -> int | None:
        window = cfg.get("sliding_window")
        return int(window) if window else None  # 0 / null: disabled

    def default_window_pattern(self, cfg: Cfg, num_layers: int, window: int) -> list[int | None]:
        """Per-layer window when config.json has no layer_types: none slide by default."""
        return [None] * num_layers

    def windows(self, cfg: Cfg, num_layers: int) -> list[int | None]:
        """Per-layer sliding window: ``layer_types`` when given, else the family's pattern."""
        window = self.sliding_window(cfg)
        layer_types = cfg.raw.get("layer_types")
        if layer_types:
            if len(layer_types) < num_layers:
                raise ConfigError(f"layer_types lists {len(layer_types)} layers but num_hidden_layers is {num_layers}.")
            return [window if t == "sliding_attention" and window else None for t in layer_types[:num_layers]]
        if window is None:
            return [None] * num_layers
        return self.default_window_pattern(cfg, num_layers, window)

    def attention(self, cfg: Cfg, i: int, window: int | None) -> Attention | MLA | Mamba:
        return Attention(
            hidden_size=self.hidden(cfg),
            num_heads=self.heads(cfg),
            num_kv_heads=self.kv_heads(cfg),
            head_dim=self.head_dim(cfg),
            qkv_bias=self.flag(cfg, self.qkv_bias),
            o_bias=self.flag(cfg, self.o_bias),
            qk_norm=self.flag(cfg, self.qk_norm),
            sinks=self.sinks,
            window_tokens=window,
        )

    def dense(self, cfg: Cfg, intermediate: int | None = None) -> DenseMLP:
        return DenseMLP(
            hidden_size=self.hidden(cfg),
            intermediate_size=intermediate or self.intermediate(cfg),
            gated=self.gated_mlp,
            bias=self.flag(cfg, self.mlp_bias),
        )

    def ffn(self, cfg: Cfg, i: int) -> DenseMLP | MoE | None:
        return self.dense(cfg)

    def layer_norm_params(self, cfg: Cfg, i: int) -> int:
        return self.norms_per_layer * self.norm_params_per_h * self.hidden(cfg)

    def vocab(self, cfg: Cfg) -> int:
        return cfg.int("vocab_size", "padded_vocab_size")

    def embedding_dim(self, cfg: Cfg) -> int:
        return self.hidden(cfg)

    def position_rows(self, cfg: Cfg) -> int:
        return 0

    def final_norm_params(self, cfg: Cfg) -> int:
        return self.norm_params_per_h * self.hidden(cfg) if self.final_norm else 0

    def warnings(self, cfg: Cfg) -> list[str]:
        return []

    def lm_head_bias(self, cfg: Cfg) -> bool:
        return False

    #: What vLLM's --kv-cache-dtype auto gives when it is not the model dtype (``ModelSpec.kv_auto_dtype``).
    kv_auto_dtype: ClassVar[str | None] = None

    # ---------------------------------------------------------------------- build

    def build(self, raw: dict[str, Any], name: str) -> ModelSpec:
        cfg = Cfg(raw, self.defaults)
        cfg.require(*self.required())
        num_layers = self.num_layers(cfg)
        if num_layers <= 0:
            raise ConfigError(f"num_hidden_layers is {num_layers}; a decoder needs at least one layer.")
        validation.check_per_layer_lists(cfg.raw, num_layers)
        windows = self.windows(cfg, num_layers)
        layers = [
            DecoderLayer(
                mixer=self.attention(cfg, i, windows[i]),
                ffn=self.ffn(cfg, i),
                norm_params=self.layer_norm_params(cfg, i),
            )
            for i in range(num_layers)
        ]
        shared: dict[str, DecoderLayer] = {}  # identical layers become one shared (frozen) object
        layers = [shared.setdefault(layer.model_dump_json(), layer) for layer in layers]
        validation.check_layers(layers, cfg.read)  # relations between resolved values, before any count
        dtype, dtype_note = served_dtype(cfg.get("dtype", "torch_dtype"))
        notes = self.warnings(cfg) + ([dtype_note] if dtype_note else [])
        return ModelSpec(
            name=name,
            model_type=str(raw.get("model_type") or "unknown"),
            family="generic" if self.generic else type(self).__name__.removesuffix("Family").lower(),
            generic=self.generic,
            hidden_size=self.hidden(cfg),
            vocab_size=self.vocab(cfg),
            embedding_dim=self.embedding_dim(cfg),
            position_embedding_rows=self.position_rows(cfg),
            tie_word_embeddings=cfg.get("tie_word_embeddings", default=False),
            lm_head_bias=self.lm_head_bias(cfg),
            final_norm_params=self.final_norm_params(cfg),
            layers=tuple(layers),
            max_position_embeddings=max_context(cfg),
            dtype=dtype,
            config_dtype=cfg.get("dtype", "torch_dtype"),
            quantization=checkpoint_quantization(raw),
            warnings=tuple(notes),
            kv_auto_dtype=self.kv_auto_dtype,
        )


def served_dtype(config_dtype: Any) -> tuple[str, str | None]:
    """vLLM's --dtype auto: the config dtype, except float32 (and missing) become bf16."""
    if config_dtype is None:
        return "bf16", "config.json names no dtype; assuming bf16 (vLLM would read the safetensors header)."
    dtype = canonical_dtype(config_dtype)
    if dtype == "fp32":
        return "bf16", "the checkpoint is float32; vLLM serves it in bf16 with --dtype auto (weights planned in bf16)."
    if dtype not in ("bf16", "fp16"):
        return "bf16", f"unrecognised dtype {config_dtype!r}; assuming bf16."
    return dtype, None


def max_context(cfg: Cfg) -> int:
    """Longest context, vLLM-style: min over the length keys present, times a linear/dynamic rope factor.

    Each length key is range-checked (1 to 100M tokens); so is the result after the rope factor.
    """
    values = [cfg.int(k) for k in validation.MAX_LEN_KEYS if cfg.raw.get(k) is not None]
    if not values:
        values = [cfg.int(k) for k in validation.MAX_LEN_KEYS if cfg.defaults.get(k)]
    length = min(values) if values else DEFAULT_MAX_LEN
    rope = cfg.get("rope_scaling") or {}
    rope_type = str(rope.get("rope_type") or rope.get("type") or "")
    if rope_type in ROPE_TYPES_THAT_EXTEND and cfg.raw.get("model_type") not in ("gemma3", "gemma3_text"):
        factor = validation.as_number(
            "rope_scaling.factor", rope.get("factor", 1.0), validation.MAX_ROPE_FACTOR, "context multiplier"
        )
        length = validation.as_int(
            "max_position_embeddings x rope_scaling.factor",
            int(length * factor),
            1,
            validation.MAX_CONTEXT_TOKENS,
            "the longest context, in tokens",
        )
    return length


# ------------------------------------------------------------------------ llama kin


class MistralFamily(DecoderFamily):
    """Mistral: biases hard-wired off; sliding_window (if set) applies to every layer."""

    model_types = ("mistral",)
    defaults = {"tie_word_embeddings": False, "num_key_value_heads": 8}
    qkv_bias = o_bias = mlp_bias = False

    def default_window_pattern(self, cfg, num_layers, window):
        return [window] * num_layers


class MixtralFamily(MistralFamily):
    """Mixtral: every layer is MoE of num_local_experts experts of width intermediate_size."""

    model_types = ("mixtral",)

    def ffn(self, cfg, i):
        return MoE(
            hidden_size=self.hidden(cfg),
            num_experts=cfg.int("num_local_experts", "num_experts"),
            experts_per_token=cfg.int("num_experts_per_tok"),
            expert_intermediate_size=self.intermediate(cfg),
        )


class Qwen2Family(DecoderFamily):
    """Qwen2/2.5: q,k,v biases hard-wired on, o off; sliding only if use_sliding_window, from max_window_layers.
    Qwen2.5-VL's language model is this decoder (its config may be flat, the vision tower beside it)."""

    model_types: ClassVar[tuple[str, ...]] = (
        "qwen2",
        "qwen2_5_vl",
        "qwen2_5_vl_text",
    )  # annotated: subclasses list one
    defaults = {"tie_word_embeddings": False, "num_key_value_heads": 32}
    # annotated again: subclasses set them to config keys (mypy would narrow an unannotated value to bool)
    qkv_bias: ClassVar[bool | str] = True
    o_bias: ClassVar[bool | str] = False
    mlp_bias: ClassVar[bool | str] = False

    def sliding_window(self, cfg):
        return super().sliding_window(cfg) if cfg.get("use_sliding_window", default=False) else None

    def default_window_pattern(self, cfg, num_layers, window):
        first = cfg.int("max_window_layers", default=num_layers)
        return [window if i >= first else None for i in range(num_layers)]


class Qwen2MoeFamily(Qwen2Family):
    """Qwen2-MoE: routed experts + a gated shared expert; dense layers in mlp_only_layers or off the sparse step."""

    model_types = ("qwen2_moe",)
    qkv_bias = "qkv_bias"
    defaults = {"tie_word_embeddings": False, "qkv_bias": True, "decoder_sparse_step": 1}

    def is_moe_layer(self, cfg, i):
        step = cfg.int("decoder_sparse_step", default=1)
        return i not in (cfg.get("mlp_only_layers") or []) and step > 0 and (i + 1) % step == 0

    def ffn(self, cfg, i):
        if not self.is_moe_layer(cfg, i):
            return self.dense(cfg)
        return MoE(
            hidden_size=self.hidden(cfg),
            num_experts=cfg.int("num_experts"),
            experts_per_token=cfg.int("num_experts_per_tok"),
            expert_intermediate_size=cfg.int("moe_intermediate_size"),
            shared_intermediate_size=cfg.int("shared_expert_intermediate_size", default=0),
            shared_gate=bool(cfg.get("shared_expert_intermediate_size")),
        )


class Qwen3Family(Qwen2Family):
    """Qwen3: explicit head_dim, q/k RMSNorm, attention_bias (default off) on q,k,v and o."""

    model_types = ("qwen3", "qwen3_vl", "qwen3_vl_text")  # Qwen3-VL's language model (text_config) is this decoder
    qkv_bias = o_bias = "attention_bias"
    qk_norm = True


class Qwen3MoeFamily(Qwen2MoeFamily):
    """Qwen3-MoE: Qwen3 attention, routed experts only (no shared expert)."""

    model_types = ("qwen3_moe",)
    qkv_bias = o_bias = "attention_bias"
    qk_norm = True
    defaults = {"tie_word_embeddings": False, "decoder_sparse_step": 1}

    def ffn(self, cfg, i):
        if not self.is_moe_layer(cfg, i):
            return self.dense(cfg)
        # transformers 5 maps num_experts -> num_local_experts and saves configs with the new name
        return MoE(
            hidden_size=self.hidden(cfg),
            num_experts=cfg.int("num_experts", "num_local_experts"),
            experts_per_token=cfg.int("num_experts_per_tok"),
            expert_intermediate_size=cfg.int("moe_intermediate_size"),
        )


class GemmaFamily(DecoderFamily):
    """Gemma: explicit head_dim (256 for 7B, where h/H = 192), tied embeddings."""

    model_types: ClassVar[tuple[str, ...]] = ("gemma",)  # annotated again: Gemma 3 lists two
    defaults = {"tie_word_embeddings": True}


class Gemma2Family(GemmaFamily):
    """Gemma 2: four RMSNorms per layer; even layers slide (window 4096) unless layer_types says otherwise."""

    model_types: ClassVar[tuple[str, ...]] = ("gemma2",)  # annotated again: Gemma 3 lists two
    norms_per_layer = 4

    def default_window_pattern(self, cfg, num_layers, window):
        return [window if i % 2 == 0 else None for i in range(num_layers)]


class Gemma3Family(Gemma2Family):
    """Gemma 3 text: q/k norms; layer i is global iff (i + 1) % sliding_window_pattern == 0 (5 local : 1 global)."""

    model_types = ("gemma3_text", "gemma3")
    qk_norm = True
    #: transformers 5.24.0 Gemma3TextConfig defaults (multimodal text_config often omits them).
    defaults = {
        "tie_word_embeddings": True,
        "vocab_size": 262_208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131_072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    }

    def default_window_pattern(self, cfg, num_layers, window):
        pattern = cfg.int("sliding_window_pattern", default=6)
        return [None if (i + 1) % pattern == 0 else window for i in range(num_layers)]


class Phi3Family(DecoderFamily):
    """Phi-3/3.5/4-mini: fused qkv and gate_up (same counts), no biases;
    vLLM slides every layer if sliding_window is set."""

    model_types = ("phi3",)
    qkv_bias = o_bias = mlp_bias = False

    def default_window_pattern(self, cfg, num_layers, window):
        return [window] * num_layers


class GptOssFamily(DecoderFamily):
    """gpt-oss: attention sinks, biases everywhere, even layers slide (128), MoE with expert and router biases."""

    model_types = ("gpt_oss",)
    defaults = {"tie_word_embeddings": False, "attention_bias": True}
    sinks = True

    def default_window_pattern(self, cfg, num_layers, window):
        return [window if i % 2 == 0 else None for i in range(num_layers)]

    def ffn(self, cfg, i):
        return MoE(
            hidden_size=self.hidden(cfg),
            num_experts=cfg.int("num_local_experts", "num_experts"),
            experts_per_token=cfg.int("num_experts_per_tok", "experts_per_token"),
            expert_intermediate_size=self.intermediate(cfg),
            expert_bias=True,
            router_bias=True,
        )


class DeepseekFamily(DecoderFamily):
    """DeepSeek V2/V3/R1: MLA attention; MoE from first_k_dense_replace on, shared experts as one wide MLP.

    num_key_value_heads in config.json is meaningless here (vLLM uses 1); MTP layers
    (num_nextn_predict_layers) are not part of the main model and are not counted.
    """

    model_types: ClassVar[tuple[str, ...]] = ("deepseek_v2", "deepseek_v3")  # annotated: V3.2 lists its own
    defaults = {"tie_word_embeddings": False, "first_k_dense_replace": 0, "moe_layer_freq": 1, "n_shared_experts": 0}

    def required(self):
        return super().required() + ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")

    def attention(self, cfg, i, window):
        return MLA(
            hidden_size=self.hidden(cfg),
            num_heads=self.heads(cfg),
            q_lora_rank=cfg.get("q_lora_rank"),
            kv_lora_rank=cfg.int("kv_lora_rank"),
            qk_nope_head_dim=cfg.int("qk_nope_head_dim"),
            qk_rope_head_dim=cfg.int("qk_rope_head_dim"),
            v_head_dim=cfg.int("v_head_dim"),
            bias=bool(cfg.get("attention_bias", default=False)),
        )

    def ffn(self, cfg, i):
        experts = cfg.get("n_routed_experts")
        freq = cfg.int("moe_layer_freq", default=1)
        if not experts or i < cfg.int("first_k_dense_replace", default=0) or i % freq != 0:
            return self.dense(cfg)
        moe_width = cfg.int("moe_intermediate_size")
        return MoE(
            hidden_size=self.hidden(cfg),
            num_experts=int(experts),
            experts_per_token=cfg.int("num_experts_per_tok"),
            expert_intermediate_size=moe_width,
            shared_intermediate_size=moe_width * cfg.int("n_shared_experts", default=0),
        )


class DeepseekV32Family(DeepseekFamily):
    """DeepSeek-V3.2: V3's layers with DeepSeek sparse attention (``SparseMLA``: a lightning indexer picks the
    index_topk cached tokens each query attends). vLLM's --kv-cache-dtype auto is fp8 for it, in the fp8_ds_mla
    layout ("The default config uses a custom fp8 kvcache", vllm-project/recipes DeepSeek/DeepSeek-V3_2.md)."""

    model_types = ("deepseek_v32",)
    defaults = {**DeepseekFamily.defaults, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048}
    kv_auto_dtype = "fp8"

    def required(self):
        return super().required() + ("q_lora_rank",)

    def attention(self, cfg, i, window):
        mla = super().attention(cfg, i, window)
        return SparseMLA(
            **mla.model_dump(exclude={"kind"}),
            index_n_heads=cfg.int("index_n_heads"),
            index_head_dim=cfg.int("index_head_dim"),
            index_topk=cfg.int("index_topk"),
        )


# ------------------------------------------------------------- LayerNorm + plain MLP


class GptNeoxFamily(DecoderFamily):
    """GPT-NeoX / Pythia: LayerNorms, plain GELU MLP, biases on every linear, separate embed_out."""

    # annotated again: subclasses list more model types and take the biases from config keys
    model_types: ClassVar[tuple[str, ...]] = ("gpt_neox",)
    defaults = {"tie_word_embeddings": False}
    qkv_bias: ClassVar[bool | str] = True
    o_bias: ClassVar[bool | str] = True
    mlp_bias: ClassVar[bool | str] = True
    gated_mlp = False
    norm_params_per_h = 2


class Gpt2Family(GptNeoxFamily):
    """GPT-2: Conv1D layers with biases, learned positions (n_positions rows), tied head, n_inner = 4h by default."""

    model_types = ("gpt2",)
    defaults = {"tie_word_embeddings": True}

    def required(self):
        return (
            ("n_layer", "num_hidden_layers"),
            ("n_embd", "hidden_size"),
            ("n_head", "num_attention_heads"),
            "vocab_size",
        )

    def intermediate(self, cfg):
        return cfg.int("n_inner", default=4 * self.hidden(cfg))

    def position_rows(self, cfg):
        return cfg.int("n_positions", "max_position_embeddings", default=1024)


class OptFamily(GptNeoxFamily):
    """OPT: learned positions with max_position_embeddings + 2 rows, word_embed_proj_dim, optional final LayerNorm."""

    model_types = ("opt",)
    defaults = {"tie_word_embeddings": True, "enable_bias": True, "do_layer_norm_before": True}
    qkv_bias = o_bias = mlp_bias = "enable_bias"

    def intermediate(self, cfg):
        return cfg.int("ffn_dim")

    def embedding_dim(self, cfg):
        return cfg.int("word_embed_proj_dim", default=self.hidden(cfg))

    def position_rows(self, cfg):
        return cfg.int("max_position_embeddings") + 2

    def final_norm_params(self, cfg):
        keep = cfg.get("do_layer_norm_before", default=True) and not cfg.raw.get("_remove_final_layer_norm", False)
        return 2 * self.hidden(cfg) if keep else 0


class FalconFamily(GptNeoxFamily):
    """Falcon: fused qkv, plain MLP, tied head; 7B's multi_query gives 1 KV head (HF's object says 71).

    New decoder architecture (40B/180B): num_kv_heads KV heads and num_ln_in_parallel_attn (2) LayerNorms.
    Old architecture: one LayerNorm with parallel attention, two without.
    """

    model_types = ("falcon", "RefinedWeb", "RefinedWebModel")
    defaults = {"tie_word_embeddings": True, "bias": False, "parallel_attn": True}
    qkv_bias = o_bias = mlp_bias = "bias"

    def required(self):
        return (
            ("num_hidden_layers", "n_layer"),
            ("hidden_size", "n_embed"),
            ("num_attention_heads", "n_head"),
            "vocab_size",
        )

    def kv_heads(self, cfg):
        if cfg.get("new_decoder_architecture", default=False):
            return cfg.int("num_kv_heads", "n_head_kv", default=self.heads(cfg))
        return 1 if cfg.get("multi_query", default=True) else self.heads(cfg)

    def intermediate(self, cfg):
        return cfg.int("ffn_hidden_size", default=4 * self.hidden(cfg))

    def layer_norm_params(self, cfg, i):
        if cfg.get("new_decoder_architecture", default=False):
            count = cfg.int("num_ln_in_parallel_attn", default=2)
        else:
            count = 1 if cfg.get("parallel_attn", default=True) else 2
        return count * 2 * self.hidden(cfg)


# ------------------------------------------------------------------- state-space


class MambaFamily(DecoderFamily):
    """Mamba-1: every layer a selective-SSM mixer with one RMSNorm, no attention, no FFN; tied head."""

    model_types = ("mamba",)
    defaults = {
        "tie_word_embeddings": True,
        "state_size": 16,
        "conv_kernel": 4,
        "expand": 2,
        "use_bias": False,
        "use_conv_bias": True,
        "time_step_rank": "auto",
    }

    def required(self):
        return (("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), "vocab_size")

    def mamba(self, cfg, d_inner, d_state, d_conv, dt_rank, proj_bias, conv_bias, inner_norms) -> Mamba:
        h = self.hidden(cfg)
        rank = math.ceil(h / 16) if dt_rank in (None, "auto") else int(dt_rank)
        return Mamba(
            hidden_size=h,
            d_inner=int(d_inner),
            d_state=int(d_state),
            d_conv=int(d_conv),
            dt_rank=rank,
            proj_bias=bool(proj_bias),
            conv_bias=bool(conv_bias),
            inner_norms=inner_norms,
        )

    def attention(self, cfg, i, window):
        h = self.hidden(cfg)
        return self.mamba(
            cfg,
            cfg.get("intermediate_size", default=cfg.int("expand") * h),
            cfg.get("state_size"),
            cfg.get("conv_kernel"),
            cfg.get("time_step_rank"),
            cfg.get("use_bias"),
            cfg.get("use_conv_bias"),
            False,
        )

    def ffn(self, cfg, i):
        return None

    def layer_norm_params(self, cfg, i):
        return self.hidden(cfg)


class JambaFamily(MambaFamily):
    """Jamba: attention every attn_layer_period layers (offset), Mamba elsewhere; MoE every expert_layer_period."""

    model_types = ("jamba",)
    defaults = {
        "tie_word_embeddings": False,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_dt_rank": "auto",
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
        "num_experts": 16,
        "num_experts_per_tok": 2,
    }
    qkv_bias = o_bias = mlp_bias = False

    def required(self):
        return DecoderFamily.required(self)

    def attention(self, cfg, i, window):
        if i % cfg.int("attn_layer_period") == cfg.int("attn_layer_offset"):
            return DecoderFamily.attention(self, cfg, i, window)
        h = self.hidden(cfg)
        return self.mamba(
            cfg,
            cfg.int("mamba_expand") * h,
            cfg.get("mamba_d_state"),
            cfg.get("mamba_d_conv"),
            cfg.get("mamba_dt_rank"),
            cfg.get("mamba_proj_bias"),
            cfg.get("mamba_conv_bias"),
            True,
        )

    def ffn(self, cfg, i):
        if cfg.int("num_experts") > 1 and i % cfg.int("expert_layer_period") == cfg.int("expert_layer_offset"):
            return MoE(
                hidden_size=self.hidden(cfg),
                num_experts=cfg.int("num_experts"),
                experts_per_token=cfg.int("num_experts_per_tok"),
                expert_intermediate_size=self.intermediate(cfg),
            )
        return self.dense(cfg)

    def layer_norm_params(self, cfg, i):
        return 2 * self.hidden(cfg)


# ------------------------------------------------------------- newer MoE and hybrid decoders


class Llama4Family(DecoderFamily):
    """Llama 4 text (Scout, Maverick): MoE layers with one shared expert, dense layers in between,
    chunked local attention on RoPE layers and a global NoPE layer every no_rope_layer_interval.

    MoE layers: ``moe_layers``, else every ``interleave_moe_layer_step``-th (Scout 1: all 48;
    Maverick 2: the odd ones); each has E = num_local_experts experts and a shared expert, both of
    width intermediate_size; dense layers use intermediate_size_mlp. ``no_rope_layers[i]`` is 1 for
    a RoPE layer; vLLM runs those as chunked local attention of attention_chunk_size tokens and the
    NoPE ones as full attention (``vllm/model_executor/models/llama4.py``). The q/k L2 norm has no
    weights. The vision tower of the multimodal wrapper is not counted.
    """

    model_types = ("llama4_text", "llama4")
    #: transformers 5.24.0 Llama4TextConfig defaults (the wrapper's text_config often omits some).
    defaults = {
        "tie_word_embeddings": False,
        "vocab_size": 202_048,
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16_384,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 131_072,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "no_rope_layer_interval": 4,
        "attention_chunk_size": 8192,
    }
    qkv_bias = o_bias = "attention_bias"
    mlp_bias = False

    def moe_layers(self, cfg: Cfg) -> list[int]:
        """moe_layers as given, else range(step - 1, L, step) (Llama4TextConfig.__post_init__)."""
        given = cfg.get("moe_layers")
        if given is not None:
            return [int(i) for i in given]
        step = cfg.int("interleave_moe_layer_step")
        return list(range(step - 1, self.num_layers(cfg), step)) if step > 0 else []

    def uses_rope(self, cfg: Cfg, i: int) -> bool:
        """no_rope_layers[i] (1 = RoPE), else every no_rope_layer_interval-th layer is NoPE."""
        flags = cfg.get("no_rope_layers")
        if flags:
            return bool(flags[i])
        return (i + 1) % cfg.int("no_rope_layer_interval") != 0

    def attention(self, cfg, i, window):
        chunk = (
            None
            if "attention_chunk_size" in cfg.raw and cfg.raw["attention_chunk_size"] is None
            else cfg.int("attention_chunk_size")
        )
        attn = super().attention(cfg, i, window)
        if chunk and self.uses_rope(cfg, i):
            attn = Attention(**{**attn.model_dump(exclude={"kind"}), "chunk_tokens": chunk})
        return attn

    def ffn(self, cfg, i):
        if i not in self.moe_layers(cfg):
            return self.dense(cfg, cfg.int("intermediate_size_mlp"))
        width = self.intermediate(cfg)
        return MoE(
            hidden_size=self.hidden(cfg),
            num_experts=cfg.int("num_local_experts"),
            experts_per_token=cfg.int("num_experts_per_tok"),
            expert_intermediate_size=width,
            shared_intermediate_size=width,
        )


class Glm4MoeFamily(DecoderFamily):
    """GLM-4.5 / 4.6 MoE: q,k,v biases (attention_bias), optional q/k RMSNorm (use_qk_norm); dense
    layers below first_k_dense_replace, then n_routed_experts routed experts plus n_shared_experts
    shared ones of moe_intermediate_size. The MTP layers (num_nextn_predict_layers) are not part of
    the main model (transformers does not build them) and are not counted.
    """

    model_types = ("glm4_moe",)
    #: transformers 5.24.0 Glm4MoeConfig defaults.
    defaults = {
        "tie_word_embeddings": False,
        "vocab_size": 151_552,
        "hidden_size": 4096,
        "intermediate_size": 10_944,
        "num_hidden_layers": 46,
        "num_attention_heads": 96,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131_072,
        "moe_intermediate_size": 1408,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "n_routed_experts": 128,
        "first_k_dense_replace": 1,
        "attention_bias": False,
        "use_qk_norm": False,
    }
    qkv_bias = "attention_bias"
    o_bias = mlp_bias = False
    qk_norm = "use_qk_norm"

    def ffn(self, cfg, i):
        if i < cfg.int("first_k_dense_replace"):
            return self.dense(cfg)
        width = cfg.int("moe_intermediate_size")
        return MoE(
            hidden_size=self.hidden(cfg),
            num_experts=cfg.int("n_routed_experts", "num_local_experts"),
            experts_per_token=cfg.int("num_experts_per_tok"),
            expert_intermediate_size=width,
            shared_intermediate_size=width * cfg.int("n_shared_experts"),
        )


class PhimoeFamily(DecoderFamily):
    """Phi-3.5-MoE: LayerNorms (weight and bias), biases on q,k,v and o (attention_bias), every layer
    MoE of num_local_experts experts, an lm_head bias (lm_head_bias); a set sliding_window applies
    to every layer, as for Phi-3.
    """

    model_types = ("phimoe",)
    #: transformers 5.24.0 PhimoeConfig defaults.
    defaults = {
        "tie_word_embeddings": False,
        "vocab_size": 32_064,
        "hidden_size": 4096,
        "intermediate_size": 6400,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131_072,
        "num_local_experts": 16,
        "num_experts_per_tok": 2,
        "attention_bias": False,
        "lm_head_bias": False,
    }
    qkv_bias = o_bias = "attention_bias"
    mlp_bias = False
    norm_params_per_h = 2

    def default_window_pattern(self, cfg, num_layers, window):
        return [window] * num_layers

    def ffn(self, cfg, i):
        return MoE(
            hidden_size=self.hidden(cfg),
            num_experts=cfg.int("num_local_experts"),
            experts_per_token=cfg.int("num_experts_per_tok"),
            expert_intermediate_size=self.intermediate(cfg),
        )

    def lm_head_bias(self, cfg):
        return bool(cfg.get("lm_head_bias", default=False))


class Qwen3NextFamily(Qwen2MoeFamily):
    """Qwen3-Next: 3 gated-delta-net (linear attention) layers to 1 gated full-attention layer, all MoE.

    Layer kinds: ``layer_types``, else full attention iff (i + 1) % full_attention_interval == 0 (4).
    Full attention: q/k RMSNorm and an output gate (q_proj twice as wide). FFN as Qwen2-MoE: routed
    experts plus a gated shared expert, dense where mlp_only_layers or decoder_sparse_step say so.
    The gated delta net keeps a fixed state per sequence (see ``GatedDeltaNet``).
    """

    model_types = ("qwen3_next",)
    qkv_bias = o_bias = "attention_bias"
    qk_norm = True
    #: transformers 5.24.0 Qwen3NextConfig defaults.
    defaults = {
        "tie_word_embeddings": False,
        "vocab_size": 151_936,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "max_position_embeddings": 32_768,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "decoder_sparse_step": 1,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "num_experts_per_tok": 10,
        "num_experts": 512,
        "full_attention_interval": 4,
    }

    def is_linear(self, cfg: Cfg, i: int) -> bool:
        layer_types = cfg.get("layer_types")
        if layer_types:
            return layer_types[i] == "linear_attention"
        return (i + 1) % cfg.int("full_attention_interval") != 0

    def attention(self, cfg, i, window):
        if not self.is_linear(cfg, i):
            attn = super().attention(cfg, i, window)
            return Attention(**{**attn.model_dump(exclude={"kind"}), "output_gate": True})
        return GatedDeltaNet(
            hidden_size=self.hidden(cfg),
            num_key_heads=cfg.int("linear_num_key_heads"),
            num_value_heads=cfg.int("linear_num_value_heads"),
            key_head_dim=cfg.int("linear_key_head_dim"),
            value_head_dim=cfg.int("linear_value_head_dim"),
            d_conv=cfg.int("linear_conv_kernel_dim"),
        )

    def is_moe_layer(self, cfg, i):
        return cfg.int("num_experts") > 0 and super().is_moe_layer(cfg, i)


class Mamba2Family(MambaFamily):
    """Mamba-2 (mamba2, e.g. Mamba-Codestral): every layer a Mamba-2 mixer with one RMSNorm, no FFN."""

    model_types = ("mamba2",)
    #: transformers 5.24.0 Mamba2Config defaults.
    defaults = {
        "tie_word_embeddings": False,
        "num_heads": 128,
        "head_dim": 64,
        "vocab_size": 32_768,
        "hidden_size": 4096,
        "state_size": 128,
        "num_hidden_layers": 64,
        "expand": 2,
        "conv_kernel": 4,
        "n_groups": 8,
        "use_bias": False,
        "use_conv_bias": True,
    }

    def attention(self, cfg, i, window):
        h = self.hidden(cfg)
        return Mamba2(
            hidden_size=h,
            d_inner=int(cfg.get("expand") * h),
            num_heads=cfg.int("num_heads"),
            head_dim=cfg.int("head_dim"),
            n_groups=cfg.int("n_groups"),
            d_state=cfg.int("state_size"),
            d_conv=cfg.int("conv_kernel"),
            proj_bias=bool(cfg.get("use_bias")),
            conv_bias=bool(cfg.get("use_conv_bias")),
        )


class GenericFamily(DecoderFamily):
    """Unknown model_type with the usual keys: estimated as a Llama-style decoder, and labelled so."""

    generic = True

    def warnings(self, cfg):
        return [
            f"model_type {cfg.raw.get('model_type')!r} is not a known family; this is a generic Llama-style estimate "
            "(GQA attention, gated MLP, RMSNorm). Parameter counts may be off by biases, norms or special layers."
        ]


FAMILY_CLASSES: tuple[type[DecoderFamily], ...] = (
    DecoderFamily,
    MistralFamily,
    MixtralFamily,
    Qwen2Family,
    Qwen2MoeFamily,
    Qwen3Family,
    Qwen3MoeFamily,
    GemmaFamily,
    Gemma2Family,
    Gemma3Family,
    Phi3Family,
    GptOssFamily,
    DeepseekFamily,
    DeepseekV32Family,
    GptNeoxFamily,
    Gpt2Family,
    OptFamily,
    FalconFamily,
    MambaFamily,
    JambaFamily,
    Llama4Family,
    Glm4MoeFamily,
    PhimoeFamily,
    Qwen3NextFamily,
    Mamba2Family,
)
FAMILIES: dict[str, DecoderFamily] = {mt: cls() for cls in FAMILY_CLASSES for mt in cls.model_types}
#: Multimodal wrappers whose language model lives in ``text_config``.
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config")


def text_config(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The language-model part of a config: ``text_config`` of multimodal wrappers, else the config."""
    for key in TEXT_CONFIG_KEYS:
        sub = raw.get(key)
        if isinstance(sub, dict):
            merged = dict(sub)
            for inherit in ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"):
                if inherit in raw and inherit not in merged:
                    merged[inherit] = raw[inherit]
            for name, value in WRAPPED_TEXT_DEFAULTS.get(str(merged.get("model_type")), {}).items():
                merged.setdefault(name, value)
            return merged, []
    return raw, []


#: Class defaults of a text config nested in a wrapper that names only what differs from them
#: (llava-1.5's text_config gives 7 keys: LlavaConfig builds LlamaConfig(**text_config)); transformers
#: 5.24.0 LlamaConfig defaults. A standalone config still has to name its keys.
WRAPPED_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {
        "vocab_size": 32_000,
        "hidden_size": 4096,
        "intermediate_size": 11_008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 2048,
    },
}


def encoder_notes(raw: dict[str, Any]) -> list[str]:
    """The warning for a multimodal config whose encoder the planner cannot count (none when it can)."""
    what = encoders.unsupported_encoder(raw)
    if what is None:
        return []
    known = ", ".join(
        f"{mt} with {' or '.join(t for t in reader.vision_types if t)}"
        for mt, reader in sorted(encoders.ENCODERS.items())
    )
    return [
        f"multimodal model: the {what} is not modelled, so its weights are not counted and --images-per-request "
        f"is refused; the language model is planned alone (encoders modelled: {known})."
    ]


#: Keys that name experts, recurrent state or per-layer block kinds: a config carrying one (with a
#: value that switches it on) is not a plain dense decoder, and the generic reading would miss
#: most of its parameters (Llama-4 was 74% low, Qwen3-Next 96%), so it is refused instead.
NOT_DENSE_KEYS = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "moe_layers",
    "moe_layer_freq",
    "expert_layer_period",
    "first_k_dense_replace",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "attn_layer_period",
    "hybrid_override_pattern",
    "layers_block_type",
    "block_types",
    "state_size",
    "ssm_state_size",
    "mamba_d_state",
    "linear_num_value_heads",
    "attention_chunk_size",
    "kv_lora_rank",
)
#: Layer kinds the generic (Llama-style) reading understands.
GENERIC_LAYER_TYPES = ("full_attention", "sliding_attention")


def not_dense_evidence(cfg: dict[str, Any]) -> list[str]:
    """Keys of ``cfg`` that show experts, recurrent layers or layer kinds a dense decoder lacks."""
    found = [k for k in NOT_DENSE_KEYS if cfg.get(k) not in (None, 0, 1, False, [], "", {})]
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        odd = sorted({str(t) for t in layer_types} - set(GENERIC_LAYER_TYPES))
        found += [f"layer_types {', '.join(odd)}"] if odd else []
    return found


def build_spec(raw: Any, name: str = "model") -> ModelSpec:
    """Parse a config.json dict into a ModelSpec (family by model_type; generic for unknown types)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{name}: a config.json must be a JSON object, got {type(raw).__name__}.")
    try:
        validation.check_structure(raw)  # sub-configs are objects, names are strings, before anything reads them
        cfg, notes = text_config(raw)
        validation.check_structure(cfg)
    except ConfigError as err:
        raise type(err)(f"{name}: {err.message}", hint=err.hint) from None
    model_type = cfg.get("model_type") or raw.get("model_type")
    family = FAMILIES.get(str(model_type))
    if family is None:
        evidence = not_dense_evidence(cfg)
        if evidence:
            raise UnknownArchitectureError(
                f"{name}: unknown model_type {model_type!r} with {', '.join(evidence)}: experts or layer kinds that a "
                "generic dense estimate would miss, so it is refused rather than planned low.",
                hint=f"Known model_types: {', '.join(sorted(FAMILIES))}. A config of one of them plans exactly; "
                "a dense Llama-style config with an unknown model_type gets a labelled generic estimate.",
            )
        generic = GenericFamily()
        try:
            Cfg(cfg, {}).require(*generic.required())
        except ConfigError as err:
            raise UnknownArchitectureError(
                f"{name}: unknown model_type {model_type!r} and {err.message[0].lower() + err.message[1:]}",
                hint=f"Known families: {', '.join(sorted(FAMILIES))}. A generic estimate needs num_hidden_layers, "
                "hidden_size, num_attention_heads, intermediate_size and vocab_size.",
            ) from None
        family = generic
    try:
        spec = family.build(cfg, name)
    except ConfigError as err:
        raise type(err)(f"{name}: {err.message}", hint=err.hint) from None
    except (TypeError, ValueError, ArithmeticError) as err:
        raise ConfigError(
            f"{name}: config.json has a value of the wrong type or size ({err}).",
            hint="Compare the file with the model's config.json on the Hub.",
        ) from None
    try:
        encoder = encoders.encoder_from_config(raw, spec.hidden_size)
    except ConfigError as err:
        raise type(err)(f"{name}: {err.message}", hint=err.hint) from None
    notes += encoder_notes(raw)
    unsupported = encoders.unsupported_encoder(raw)
    if encoder is None and unsupported is None and not notes:
        return spec
    update: dict[str, Any] = {"encoder": encoder, "unsupported_encoder": unsupported}
    if notes:
        update["warnings"] = tuple(notes) + spec.warnings
    return spec.model_copy(update=update)
