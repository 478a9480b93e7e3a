"""config.json checks: every value a family reads is checked against what a real model can have.

One table (``RULES``) says, per config key, what the value must be: an integer in a range, a
boolean, a string, a mapping (a sub-config), a list of layer indices or of layer kinds. The
family machinery (``planner.model.families.Cfg``) applies it to every key it reads, *before* any
arithmetic uses the value, so a family added later is checked for free; a key read as an integer
with no row of its own gets ``GENERIC_INT`` (a whole number from 0 to the context bound). After
a family has resolved the values into layer blocks, ``check_layers`` checks the relations between
them (query heads divisible by KV heads, 1 <= top-k <= experts).

What counts as an integer: a JSON integer, or a float that is a whole number (``4096.0``; some
exporters write those). ``true``/``false`` are not integers, strings are not ("4096" is refused),
NaN and infinities are not numbers here.

Upper bounds are several times the largest value a real model has (the ``evidence`` of each row);
they exist so that a tiny hostile file cannot ask for a million layers (the planner builds one
object per layer) or for sizes no hardware could hold. Largest real values, from the catalog
(``planner/model/catalog``) unless named otherwise: 126 layers, hidden 16,384 and FFN 53,248
(Llama-3.1-405B); 232 query heads (Falcon-180B); vocabulary 262,208 (Gemma 3); 256 routed experts
(DeepSeek-V3), 512 in Qwen3-Next, 2,048 in Switch-C; context 10,485,760 tokens (Llama-4 Scout).

Layer kinds are transformers 5.24.0's ``ALLOWED_ATTN_LAYER_TYPES`` plus its legacy names
(``configuration_utils.py``); like transformers, ``layer_types`` must list exactly one kind per layer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import ConfigError
from planner.model.layers import Attention, GatedDeltaNet, Mamba2, MoE

HINT = "Compare the file with the model's config.json on the Hub."

MAX_LAYERS = 1_000
MAX_WIDTH = 131_072
MAX_CONTEXT_TOKENS = 100_000_000
#: Largest rope_scaling factor accepted (real: 8 for Llama 3.1 and Gemma 3, 32 for Llama 3.2, 40 for DeepSeek-V3's
# yarn).
MAX_ROPE_FACTOR = 1_024.0

#: transformers 5.24.0 ALLOWED_ATTN_LAYER_TYPES + the legacy names it remaps (_LEGACY_LAYER_TYPE_REMAP).
KNOWN_LAYER_TYPES = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "window_attention",
    "indexed_attention",
    "compressed_sparse_attention",
    "heavily_compressed_attention",
    "minimax_m3_sparse",
    "conv",
    "moe",
    "hybrid",
    "hybrid_sliding",
    "reference_sliding_attention",
    "linear_attention",
    "mamba",
    "attention",
    "deepseek_sparse_attention",
    "qwen_sparse_attention",
)


class Rule(BaseModel):
    """What the value of one config key (and its aliases) must be."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    keys: tuple[str, ...] = Field(description="The config key and the aliases families read for the same thing.")
    kind: Literal["int", "bool", "str", "mapping", "int_list", "str_list"] = Field(
        "int",
        description="int: a whole number in [minimum, maximum]; int_list: a list of such; str_list: of known words.",
    )
    minimum: int = Field(1, description="Smallest allowed integer (for lists: of each entry).")
    maximum: int = Field(
        MAX_CONTEXT_TOKENS, description="Largest allowed integer (for lists: of each entry, and the length)."
    )
    what: str = Field("", description="What the key means, shown in the message.")
    evidence: str = Field("", description="The largest values real models have, the reason for the bound.")
    words: tuple[str, ...] = Field(
        (), description="Strings accepted as they are (e.g. 'auto'), or the allowed list entries."
    )
    per_layer: bool = Field(
        False, description="A list with one entry per layer (checked against the layer count; [] = not given)."
    )


def _int_rule(
    keys: tuple[str, ...], minimum: int, maximum: int, what: str, evidence: str = "", words: tuple[str, ...] = ()
) -> Rule:
    return Rule(keys=keys, minimum=minimum, maximum=maximum, what=what, evidence=evidence, words=words)


#: Keys vLLM takes the minimum over to derive the longest context (``derive_max_model_len_and_key``).
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


LAYERS = _int_rule(
    ("num_hidden_layers", "n_layer", "num_layers"),
    1,
    MAX_LAYERS,
    "the number of decoder layers; a decoder needs at least one layer",
    "126 (Llama-3.1-405B); DeepNet trained 1,000",
)
HIDDEN = _int_rule(
    ("hidden_size", "n_embd", "d_model", "n_embed"),
    1,
    MAX_WIDTH,
    "the model width",
    "16,384 (Llama-3.1-405B), 18,432 (PaLM-540B)",
)
HEADS = _int_rule(
    ("num_attention_heads", "n_head"), 1, 4_096, "the query heads", "232 (Falcon-180B), 128 (DeepSeek-V3)"
)
KV_HEADS = _int_rule(
    ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups"),
    1,
    4_096,
    "the key/value heads (1 for multi-query attention)",
    "8 (Llama-3.1-405B), 1 (Falcon-7B); never more than the query heads",
)
EXPERTS = _int_rule(
    ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    1,
    4_096,
    "the routed experts of an MoE layer; a model without experts has no such key",
    "256 (DeepSeek-V3), 512 (Qwen3-Next), 2,048 (Switch-C)",
)
TOP_K = _int_rule(
    ("num_experts_per_tok", "experts_per_token", "moe_topk"),
    1,
    4_096,
    "the experts each token is routed to (top-k), at least one and at most the experts",
    "8 (DeepSeek-V3, Qwen3-MoE), 10 (Qwen3-Next)",
)
LINEAR_KEY_HEADS = _int_rule(
    ("linear_num_key_heads",), 1, 4_096, "the key heads of a linear-attention layer", "16 (Qwen3-Next)"
)
LINEAR_VALUE_HEADS = _int_rule(
    ("linear_num_value_heads",), 1, 4_096, "the value heads of a linear-attention layer", "32 (Qwen3-Next)"
)
SSM_HEADS = _int_rule(
    ("num_heads", "mamba_num_heads"), 1, 8_192, "the SSM heads of a Mamba-2 layer", "128 (Mamba-Codestral-7B)"
)
SSM_GROUPS = _int_rule(
    ("n_groups", "mamba_n_groups"), 1, 4_096, "the B/C groups of a Mamba-2 layer", "8 (Mamba-Codestral-7B)"
)
EXPAND = _int_rule(("expand", "mamba_expand"), 1, 64, "the Mamba inner-width factor", "2 (every real Mamba)")
HEAD_DIM = _int_rule(
    ("head_dim",), 1, 8_192, "the size of one attention (or Mamba-2) head", "256 (Gemma), 64 (Mamba-Codestral-7B)"
)

#: Every key with a rule. Keys read as integers without a row here get GENERIC_INT.
RULE_TABLE: tuple[Rule, ...] = (
    LAYERS,
    HIDDEN,
    HEADS,
    KV_HEADS,
    EXPERTS,
    TOP_K,
    LINEAR_KEY_HEADS,
    LINEAR_VALUE_HEADS,
    SSM_HEADS,
    SSM_GROUPS,
    EXPAND,
    HEAD_DIM,
    _int_rule(("word_embed_proj_dim",), 1, MAX_WIDTH, "the token-embedding width", "768 (OPT-350m)"),
    _int_rule(
        ("linear_key_head_dim", "linear_value_head_dim", "mamba_head_dim"),
        1,
        8_192,
        "the head size of a linear-attention or SSM layer",
        "128 (Qwen3-Next)",
    ),
    _int_rule(
        ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"),
        1,
        8_192,
        "an MLA head part",
        "64 (rope) and 128 (nope, v) in DeepSeek-V3",
    ),
    _int_rule(
        ("kv_lora_rank", "q_lora_rank"), 1, MAX_WIDTH, "an MLA low-rank width", "512 (kv) and 1,536 (q) in DeepSeek-V3"
    ),
    _int_rule(
        (
            "intermediate_size",
            "n_inner",
            "ffn_dim",
            "ffn_hidden_size",
            "moe_intermediate_size",
            "intermediate_size_mlp",
        ),
        1,
        1_048_576,
        "an FFN width",
        "53,248 (Llama-3.1-405B), 73,728 (PaLM-540B)",
    ),
    _int_rule(
        ("shared_expert_intermediate_size",),
        0,
        1_048_576,
        "the shared expert's width (0: none)",
        "20,480 (Qwen2-57B-A14B)",
    ),
    _int_rule(("n_shared_experts",), 0, 4_096, "the shared experts (0: none)", "2 (DeepSeek-V2-Lite), 1 (DeepSeek-V3)"),
    _int_rule(("vocab_size", "padded_vocab_size"), 1, 4_194_304, "the vocabulary size", "262,208 (Gemma 3)"),
    _int_rule(
        MAX_LEN_KEYS,
        1,
        MAX_CONTEXT_TOKENS,
        "a context length in tokens",
        "10,485,760 (Llama-4 Scout)",
    ),
    _int_rule(
        ("sliding_window",),
        0,
        MAX_CONTEXT_TOKENS,
        "the sliding-window size in tokens (0 or null: none)",
        "4,096 (Gemma 2, Mistral-7B-v0.1), 262,144 (Phi-3.5-mini)",
    ),
    _int_rule(
        (
            "sliding_window_pattern",
            "decoder_sparse_step",
            "moe_layer_freq",
            "attn_layer_period",
            "expert_layer_period",
            "interleave_moe_layer_step",
            "no_rope_layer_interval",
            "full_attention_interval",
        ),
        1,
        MAX_LAYERS,
        "a layer period (every n-th layer)",
        "6 (Gemma 3), 8 (Jamba), 4 (Llama 4, Qwen3-Next)",
    ),
    _int_rule(
        ("attention_chunk_size",),
        1,
        MAX_CONTEXT_TOKENS,
        "the chunk of chunked local attention, in tokens",
        "8,192 (Llama 4)",
    ),
    _int_rule(
        ("attn_layer_offset", "expert_layer_offset", "first_k_dense_replace", "max_window_layers"),
        0,
        MAX_LAYERS,
        "a layer index or count",
        "3 (DeepSeek-V3 first_k_dense_replace), 94 (Qwen3-235B max_window_layers)",
    ),
    _int_rule(
        ("state_size", "mamba_d_state", "ssm_state_size"),
        1,
        1_024,
        "the SSM state size per channel",
        "16 (Mamba-1, Jamba), 128 (Mamba-2)",
    ),
    _int_rule(
        ("conv_kernel", "mamba_d_conv", "linear_conv_kernel_dim"),
        1,
        64,
        "a causal-convolution width",
        "4 (every real Mamba, Qwen3-Next)",
    ),
    _int_rule(
        ("time_step_rank", "mamba_dt_rank"),
        1,
        MAX_WIDTH,
        "the Mamba time-step rank, or 'auto'",
        "256 (Jamba-1.5-Mini)",
        words=("auto",),
    ),
    _int_rule(("num_ln_in_parallel_attn",), 1, 8, "LayerNorms per Falcon layer", "2 (Falcon-40B, Falcon-180B)"),
    Rule(
        keys=("mlp_only_layers", "moe_layers"), kind="int_list", minimum=0, maximum=MAX_LAYERS - 1, what="layer indices"
    ),
    Rule(
        keys=("no_rope_layers",),
        kind="int_list",
        minimum=0,
        maximum=1,
        what="1 for a RoPE layer, 0 for NoPE",
        per_layer=True,
    ),
    Rule(
        keys=("layer_types",),
        kind="str_list",
        maximum=MAX_LAYERS,
        what="one layer kind per layer",
        words=KNOWN_LAYER_TYPES,
        per_layer=True,
    ),
    Rule(
        keys=(
            "tie_word_embeddings",
            "attention_bias",
            "mlp_bias",
            "qkv_bias",
            "enable_bias",
            "bias",
            "use_bias",
            "use_conv_bias",
            "mamba_conv_bias",
            "mamba_proj_bias",
            "new_decoder_architecture",
            "multi_query",
            "parallel_attn",
            "do_layer_norm_before",
            "use_sliding_window",
            "use_qk_norm",
            "lm_head_bias",
        ),
        kind="bool",
        what="a switch",
    ),
    Rule(keys=("model_type", "dtype", "torch_dtype"), kind="str", what="a name"),
    Rule(
        keys=(
            "text_config",
            "language_config",
            "llm_config",
            "quantization_config",
            "compression_config",
            "rope_scaling",
        ),
        kind="mapping",
        what="a sub-config",
    ),
)
RULES: dict[str, Rule] = {key: rule for rule in RULE_TABLE for key in rule.keys}
GENERIC_INT = Rule(keys=("(any)",), minimum=0, what="a size or count")


# ------------------------------------------------------------------------------ values


def show(value: Any) -> str:
    """A value as the message quotes it: short, with huge numbers and long texts cut."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        digits = int(math.log10(abs(value))) + 1  # str() refuses more than 4,300 digits
        digits -= 10 ** (digits - 1) > abs(value)  # log10 rounds up just below a power of ten
        return f"a {digits:,}-digit integer"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind_of(value: Any) -> str:
    names = {bool: "a boolean", str: "a string", list: "a list", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def as_int(
    key: str, value: Any, minimum: int = 0, maximum: int = MAX_CONTEXT_TOKENS, what: str = "", evidence: str = ""
) -> int:
    """``value`` as an int in [minimum, maximum], else a ConfigError naming ``key``, the range and why."""
    meaning = f" ({what})" if what else ""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"config.json key {key!r} should be an integer from {minimum:,} to {maximum:,}{meaning}, "
            f"got {show(value)} ({_kind_of(value)}).",
            hint=HINT,
        )
    if not minimum <= value <= maximum:
        why = f" Largest in real models: {evidence}." if evidence else ""
        raise ConfigError(
            f"config.json key {key!r} should be an integer from {minimum:,} to {maximum:,}{meaning}, got "
            f"{show(value)}.",
            hint=f"{HINT}{why}",
        )
    return value


def as_number(key: str, value: Any, maximum: float, what: str) -> float:
    """A finite number in (0, maximum] (rope factors and the like)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= maximum
    ):
        raise ConfigError(
            f"config.json key {key!r} should be a number above 0 and at most {maximum:g} ({what}), got {show(value)}.",
            hint=HINT,
        )
    return float(value)


def as_mapping(key: str, value: Any) -> Mapping[str, Any]:
    """A JSON object (a sub-config), else a ConfigError naming ``key``."""
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"config.json key {key!r} should be a JSON object (a sub-config), got {show(value)} ({_kind_of(value)}).",
            hint=f"{HINT} Remove the key if the model has no such part.",
        )
    return value


def as_bool(key: str, value: Any) -> bool:
    """JSON true/false only (the string 'false' is not false)."""
    if not isinstance(value, bool):
        raise ConfigError(
            f"config.json key {key!r} should be true or false, got {show(value)} ({_kind_of(value)}).", hint=HINT
        )
    return value


def as_str(key: str, value: Any, choices: tuple[str, ...] = ()) -> str:
    """A string, one of ``choices`` when given."""
    if not isinstance(value, str) or (choices and value not in choices):
        wanted = f"one of {', '.join(choices)}" if choices else "a string"
        raise ConfigError(
            f"config.json key {key!r} should be {wanted}, got {show(value)} ({_kind_of(value)}).", hint=HINT
        )
    return value


def as_int_in(key: str, value: Any, choices: tuple[int, ...], what: str = "") -> int:
    """An integer that is one of ``choices`` (e.g. quantization bits)."""
    number = as_int(key, value, min(choices), max(choices), what)
    if number not in choices:
        meaning = f" ({what})" if what else ""
        raise ConfigError(
            f"config.json key {key!r} should be one of {', '.join(map(str, choices))}{meaning}, got {number}.",
            hint=HINT,
        )
    return number


def optional(check: Any, key: str, value: Any, *args: Any) -> Any:
    """``check(key, value, *args)``, or None when the value is null/absent."""
    return None if value is None else check(key, value, *args)


def as_list(key: str, value: Any, max_length: int) -> list:
    """A JSON list of at most ``max_length`` entries."""
    if not isinstance(value, list):
        raise ConfigError(
            f"config.json key {key!r} should be a list, got {show(value)} ({_kind_of(value)}).", hint=HINT
        )
    if len(value) > max_length:
        raise ConfigError(
            f"config.json key {key!r} lists {len(value):,} entries; at most {max_length:,} are allowed.", hint=HINT
        )
    return value


def _apply_int(rule: Rule, key: str, value: Any) -> Any:
    if rule.words and value in rule.words:
        return value
    return as_int(key, value, rule.minimum, rule.maximum, rule.what, rule.evidence)


def _apply_int_list(rule: Rule, key: str, value: Any) -> list[int]:
    entries = as_list(key, value, MAX_LAYERS)
    return [as_int(f"{key}[{i}]", entry, rule.minimum, rule.maximum, rule.what) for i, entry in enumerate(entries)]


def _apply_str_list(rule: Rule, key: str, value: Any) -> list[str]:
    entries = as_list(key, value, rule.maximum)
    return [as_str(f"{key}[{i}]", entry, rule.words) for i, entry in enumerate(entries)]


#: Rule kind -> its check (rule, key, value) -> the value, normalized.
_APPLY = {
    "int": _apply_int,
    "bool": lambda rule, key, value: as_bool(key, value),
    "str": lambda rule, key, value: as_str(key, value),
    "mapping": lambda rule, key, value: as_mapping(key, value),
    "int_list": _apply_int_list,
    "str_list": _apply_str_list,
}


def apply(rule: Rule, key: str, value: Any) -> Any:
    """Check ``value`` of ``key`` against ``rule``; returns it normalized (whole floats become ints)."""
    return _APPLY[rule.kind](rule, key, value)


def check_value(key: str, value: Any) -> Any:
    """``value`` of ``key`` checked by its rule (unchanged when the key has none)."""
    rule = RULES.get(key)
    return value if rule is None else apply(rule, key, value)


def check_int(key: str, value: Any) -> int:
    """``value`` of ``key`` read as an integer: by the key's int rule, else by ``GENERIC_INT``."""
    rule = RULES.get(key)
    if rule is None or rule.kind != "int":
        rule = GENERIC_INT
    checked = apply(rule, key, value)
    if not isinstance(checked, int):  # a word such as 'auto' where an integer is needed
        return as_int(key, checked, rule.minimum, rule.maximum, rule.what)
    return checked


# --------------------------------------------------------------------------- structure


def check_structure(raw: Mapping[str, Any]) -> None:
    """Sub-configs, names and switches present in ``raw`` have the right JSON type (before anything reads them)."""
    for key, value in raw.items():
        rule = RULES.get(key)
        if rule is not None and rule.kind in ("mapping", "str") and value is not None:
            apply(rule, key, value)


def check_per_layer_lists(raw: Mapping[str, Any], num_layers: int) -> None:
    """Per-layer lists (``layer_types``, ``no_rope_layers``), when given: valid entries, exactly one per layer
    (as transformers requires of layer_types); an empty list counts as not given."""
    for rule in RULE_TABLE:
        for key in rule.keys if rule.per_layer else ():
            if raw.get(key) is None or raw.get(key) == []:
                continue
            entries = apply(rule, key, raw[key])
            if len(entries) != num_layers:
                raise ConfigError(
                    f"{key} lists {len(entries)} layers but num_hidden_layers is {num_layers}; it needs one entry per "
                    f"layer.",
                    hint=f"{HINT} transformers refuses such a config too.",
                )


# ------------------------------------------------------------------------ block checks


def read_key(rule: Rule, read: Mapping[str, Any]) -> str:
    """The alias of ``rule`` the family actually read (for the message), else its main key."""
    return next((key for key in rule.keys if key in read), rule.keys[0])


def _divisors_near(n: int, k: int) -> str:
    """The divisors of ``n`` closest to ``k`` from below and above, e.g. 4 and 8 for (32, 7)."""
    below = next(d for d in range(min(k, n), 0, -1) if n % d == 0)
    above = next((d for d in range(max(k, 1), n + 1) if n % d == 0), n)
    return str(below) if below == above else f"{below} or {above}"


def check_attention(block: Any, read: Mapping[str, Any]) -> None:
    """Grouped-query attention: the KV heads divide the query heads (each serves H / K of them)."""
    heads, kv = block.num_heads, block.num_kv_heads
    if kv < 1 or heads % kv:
        kv_key, heads_key = read_key(KV_HEADS, read), read_key(HEADS, read)
        raise ConfigError(
            f"config.json key {kv_key!r} is {kv}, which does not divide {heads_key!r} ({heads}): in grouped-query "
            f"attention every KV head serves the same number of query heads.",
            hint=(
                f"{HINT} With {heads} query heads, {kv_key} must divide {heads}, e.g. "
                f"{_divisors_near(heads, max(kv, 1))}."
            ),
        )


def check_moe(block: Any, read: Mapping[str, Any]) -> None:
    """Routing: 1 <= top-k <= experts."""
    if not 1 <= block.experts_per_token <= block.num_experts:
        k_key, e_key = read_key(TOP_K, read), read_key(EXPERTS, read)
        raise ConfigError(
            f"config.json key {k_key!r} is {block.experts_per_token} but {e_key!r} is {block.num_experts}: a token is "
            f"routed to "
            f"between 1 and {e_key} experts.",
            hint=HINT,
        )


def check_mamba2(block: Any, read: Mapping[str, Any]) -> None:
    """Mamba-2: heads x head_dim is the inner width (expand x h), and the B/C groups divide the heads."""
    heads_key, groups_key = read_key(SSM_HEADS, read), read_key(SSM_GROUPS, read)
    if block.num_heads * block.head_dim != block.d_inner:
        raise ConfigError(
            f"config.json key {heads_key!r} ({block.num_heads}) x 'head_dim' ({block.head_dim}) is "
            f"{block.num_heads * block.head_dim}, but the inner width {read_key(EXPAND, read)} x hidden_size is "
            f"{block.d_inner}: "
            "a Mamba-2 layer splits its inner width into heads.",
            hint=HINT,
        )
    if block.num_heads % block.n_groups:
        raise ConfigError(
            f"config.json key {groups_key!r} ({block.n_groups}) does not divide {heads_key!r} ({block.num_heads}).",
            hint=f"{HINT} Each B/C group serves the same number of SSM heads.",
        )


def check_gated_delta_net(block: Any, read: Mapping[str, Any]) -> None:
    """Gated delta net: the key heads divide the value heads (each key head serves nv / nk value heads)."""
    if block.num_value_heads % block.num_key_heads:
        raise ConfigError(
            f"config.json key {read_key(LINEAR_KEY_HEADS, read)!r} ({block.num_key_heads}) does not divide "
            f"{read_key(LINEAR_VALUE_HEADS, read)!r} ({block.num_value_heads}).",
            hint=f"{HINT} Each key head serves the same number of value heads.",
        )


def check_head_dim_derivable(hidden: int, heads: int, read: Mapping[str, Any]) -> int:
    """hidden / heads when config.json gives no head_dim: only when the heads divide the width."""
    if hidden % heads:
        hidden_key, heads_key = read_key(HIDDEN, read), read_key(HEADS, read)
        raise ConfigError(
            f"config.json key {hidden_key!r} ({hidden}) is not a multiple of {heads_key!r} ({heads}) and there is no "
            "'head_dim': the head size is unknown.",
            hint=f"{HINT} Add head_dim, or use a {heads_key} that divides {hidden}.",
        )
    return hidden // heads


def _no_negative_fields(block: BaseModel, read: Mapping[str, Any]) -> None:
    """Any block: no integer field below 0 (a catch-all for blocks without their own check)."""
    for field, value in block:
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise ConfigError(
                f"the config gives a {type(block).__name__} layer a negative {field} ({value}).", hint=HINT
            )


#: Block class -> its invariant. Looked up along the class's MRO, so subclasses inherit checks.
BLOCK_CHECKS: dict[type, Any] = {
    Attention: check_attention,
    MoE: check_moe,
    Mamba2: check_mamba2,
    GatedDeltaNet: check_gated_delta_net,
}


def check_layers(layers: Any, read: Mapping[str, Any]) -> None:
    """Every distinct mixer and FFN of ``layers`` against its architecture's invariants."""
    seen: set[int] = set()
    for layer in layers:
        for block in (layer.mixer, layer.ffn):
            if block is None or id(block) in seen:
                continue
            seen.add(id(block))
            _no_negative_fields(block, read)
            check = next((BLOCK_CHECKS[c] for c in type(block).__mro__ if c in BLOCK_CHECKS), None)
            if check is not None:
                check(block, read)
