"""ModelSpec: a normalized decoder architecture, whatever config.json it came from.

It holds the layers (each a mixer + FFN, see ``planner.model.layers``), the embeddings and the
checkpoint precision, and answers parameter counts and KV-cache sizes. Building one from a
config.json is ``planner.model.families``' job.

"Active" parameters (pinned definition): total minus, for every MoE layer, (E - k) x the
parameters of one routed expert. Router, shared experts, attention, embeddings and lm_head all
count as active. This matches DeepSeek-V3's "37B" and Qwen3-30B-A3B's "3.3B"; OpenAI's gpt-oss
figure (5.13B for 120b) leaves out the input embedding, which ``active_params_excl_embedding``
gives (shared/reference/formulas.md, 2.1).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.model.encoders import VisionEncoderSpec
from planner.model.kv import KVSpec
from planner.model.layers import MLA, Attention, DecoderLayer, MoE, ParamGroup
from planner.model.quantization import QuantizationSpec, canonical_dtype
from planner.units import round_up

#: vLLM pads the vocabulary of the embedding and lm_head to a multiple of 64
#: (DEFAULT_VOCAB_PADDING_SIZE, vllm/model_executor/layers/vocab_parallel_embedding.py).
VLLM_VOCAB_PADDING = 64

#: Specs whose derived facts are kept (``derived``); the app and the CLI hold a handful at a time.
DERIVED_CACHE_SPECS = 64
_DERIVED: OrderedDict[int, tuple[Any, dict[Any, Any]]] = OrderedDict()


def derived(spec: Any) -> dict[Any, Any]:
    """A memo of facts derived from one frozen spec object (layer groups, KV specs per rank, widths).

    Keyed by the object's identity, not its value: hashing a spec walks every layer, and a frozen spec
    cannot change, so nothing cached can go stale. The entry holds the spec, so its id is not reused
    while cached; the oldest of ``DERIVED_CACHE_SPECS`` entries is dropped first. A copy
    (``model_copy``) is a new object with a memo of its own.
    """
    entry = _DERIVED.get(id(spec))
    if entry is None or entry[0] is not spec:
        entry = (spec, {})
        _DERIVED[id(spec)] = entry
        while len(_DERIVED) > DERIVED_CACHE_SPECS:
            _DERIVED.popitem(last=False)
    return entry[1]


class ModelSpec(BaseModel):
    """Normalized architecture of a causal LM, as the planner sees it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Repo id, catalog name or path the spec was built from.")
    model_type: str = Field(description="config.json model_type (of the text model for multimodal wrappers).")
    family: str = Field(description="Family handler that parsed it, or 'generic' for an unknown model_type.")
    generic: bool = Field(
        False, description="True when the spec is a generic-decoder estimate for an unknown model_type."
    )
    hidden_size: int = Field(gt=0, description="Model width h, in elements.")
    vocab_size: int = Field(gt=0, description="Vocabulary size V, as in config.json (before vLLM's padding to 64).")
    embedding_dim: int = Field(
        gt=0, description="Width of the token embedding (OPT's word_embed_proj_dim; otherwise h)."
    )
    position_embedding_rows: int = Field(
        0, ge=0, description="Rows of a learned absolute position embedding (GPT-2, OPT); 0 for rotary/ALiBi."
    )
    tie_word_embeddings: bool = Field(description="lm_head shares the input embedding (counted once).")
    lm_head_bias: bool = Field(
        False, description="lm_head carries a bias of vocab_size elements (Phi-MoE's lm_head_bias)."
    )
    final_norm_params: int = Field(
        ge=0, description="Parameters of the final norm (h for RMSNorm, 2h for LayerNorm, 0 for none)."
    )
    layers: tuple[DecoderLayer, ...] = Field(description="The decoder layers, in order.")
    max_position_embeddings: int = Field(
        gt=0, description="Longest context the config allows, in tokens (vLLM's derived max_model_len)."
    )
    dtype: str = Field(
        description="Checkpoint dtype as served: bf16, fp16 (fp32 checkpoints are served in bf16 by vLLM)."
    )
    config_dtype: str | None = Field(None, description="dtype / torch_dtype as written in config.json, if any.")
    kv_auto_dtype: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The KV-cache dtype vLLM's --kv-cache-dtype auto picks when it is not the model dtype (fp8 for "
        "DeepSeek-V3.2: its fp8_ds_mla cache); None: the model dtype.",
    )
    quantization: QuantizationSpec | None = Field(None, description="The checkpoint's quantization, if any.")
    warnings: tuple[str, ...] = Field((), description="Things the parser had to assume, shown to the user.")
    encoder: VisionEncoderSpec | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The multimodal wrapper's vision encoder and projector (planner.model.encoders); None for a "
        "text-only model or an encoder kind the planner does not model (see unsupported_encoder). Not in "
        "total_params, which counts the language model.",
    )
    unsupported_encoder: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The vision/audio sub-config the planner cannot count, e.g. 'vision_config (pixtral) of "
        "model_type mistral3'; None otherwise.",
    )

    # ------------------------------------------------------------------ parameters

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def model_param_groups(self) -> list[ParamGroup]:
        """Embedding, position embedding, projections, final norm and lm_head (not the layers)."""
        e, h = self.embedding_dim, self.hidden_size
        groups = [
            ParamGroup(
                component="embedding", sharded_linear=self.vocab_size * e, other=self.position_embedding_rows * h
            )
        ]
        if e != h:  # OPT-350m: project_in / project_out, replicated in vLLM
            groups.append(ParamGroup(component="embedding", replicated_linear=2 * e * h))
        groups.append(ParamGroup(component="norms", other=self.final_norm_params))
        if not self.tie_word_embeddings:
            groups.append(ParamGroup(component="lm_head", sharded_linear=self.vocab_size * e))
        if self.lm_head_bias:
            groups.append(ParamGroup(component="lm_head", other=self.vocab_size))
        return groups

    def param_groups(self) -> list[ParamGroup]:
        """All parameters: model-level groups plus every layer's."""
        groups = self.model_param_groups()
        for layer in self.layers:
            groups += layer.param_groups()
        return groups

    @property
    def total_params(self) -> int:
        """Every parameter, as sum(p.numel() for p in model.parameters()) counts it (tied head once)."""
        return sum(g.total for g in self.model_param_groups()) + sum(layer.params for layer in self.layers)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: total - sum over MoE layers of (E - k) x params per routed expert."""
        return self.total_params - sum(layer.inactive_params for layer in self.layers)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.embedding_dim

    @property
    def active_params_excl_embedding(self) -> int:
        """Active parameters without the input token embedding (OpenAI's gpt-oss convention)."""
        return self.active_params - self.embedding_params

    def params_by_component(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for g in self.param_groups():
            out[g.component] += g.total
        return dict(out)

    @property
    def is_moe(self) -> bool:
        return any(isinstance(layer.ffn, MoE) for layer in self.layers)

    # -------------------------------------------------------------------- KV cache

    @property
    def default_kv_dtype(self) -> str:
        """KV dtype with --kv-cache-dtype auto: the model dtype, unless the architecture's engine default differs
        (``kv_auto_dtype``)."""
        return self.kv_auto_dtype or self.dtype

    def kv_specs(self, tp: int = 1, kv_bytes_per_element: float = 2.0) -> list[KVSpec]:
        """One cache spec per layer, per TP rank (state in the model dtype)."""
        memo = derived(self)
        key = ("kv_specs", tp, kv_bytes_per_element)
        if key not in memo:
            memo[key] = tuple(self._kv_specs(tp, kv_bytes_per_element))
        return list(memo[key])

    @property
    def kv_kinds(self) -> frozenset[str]:
        """The layers' cache kinds (``KVSpec.kind``: 'full_attention', 'chunked_local', 'mamba', ...), kept."""
        memo = derived(self)
        if "kv_kinds" not in memo:
            memo["kv_kinds"] = frozenset(spec.kind for spec in self.kv_specs())
        return memo["kv_kinds"]

    def _kv_specs(self, tp: int, kv_bytes_per_element: float) -> list[KVSpec]:
        state_bytes = dtype_bytes(self.dtype)
        made: dict[int, KVSpec] = {}  # identical layers share one mixer object
        out = []
        for layer in self.layers:
            key = id(layer.mixer)
            if key not in made:
                made[key] = layer.mixer.kv_spec(tp, kv_bytes_per_element, state_bytes)
            out.append(made[key])
        return out

    def kv_bytes_per_token(self, kv_bytes_per_element: float = 2.0, tp: int = 1) -> int:
        """Bytes per token over all attention layers, below every window, on one rank."""
        return sum(spec.bytes_per_token for spec in self.kv_specs(tp, kv_bytes_per_element))

    def kv_bytes_per_sequence(self, context_len: int, kv_bytes_per_element: float = 2.0, tp: int = 1) -> int:
        """One sequence of ``context_len`` tokens: sliding layers capped at their window, no block
        rounding, recurrent state excluded (see ``state_bytes_per_sequence``)."""
        return sum(
            spec.sequence_bytes(context_len) for spec in self.kv_specs(tp, kv_bytes_per_element) if spec.bytes_per_token
        )

    def state_bytes_per_sequence(self, tp: int = 1) -> int:
        """Fixed recurrent (Mamba) state one sequence holds, whatever its length."""
        return sum(spec.sequence_bytes(0) for spec in self.kv_specs(tp) if not spec.bytes_per_token)

    # ------------------------------------------------------------------- shape facts

    @property
    def attention_layers(self) -> list[Attention | MLA]:
        memo = derived(self)
        if "attention_layers" not in memo:
            memo["attention_layers"] = tuple(
                layer.mixer for layer in self.layers if isinstance(layer.mixer, (Attention, MLA))
            )
        return list(memo["attention_layers"])

    @property
    def num_attention_heads(self) -> int | None:
        layers = self.attention_layers
        return layers[0].num_heads if layers else None

    @property
    def num_kv_heads(self) -> int | None:
        """KV heads vLLM uses: 1 for MLA, K for attention, None for attention-free models."""
        layers = self.attention_layers
        if not layers:
            return None
        return layers[0].cache_kv_heads

    @property
    def head_dim(self) -> int | None:
        """vLLM's head size: head_dim for attention, kv_lora_rank + qk_rope_head_dim (576) for MLA."""
        layers = self.attention_layers
        if not layers:
            return None
        return layers[0].cache_head_size

    @property
    def padded_vocab_size(self) -> int:
        return round_up(self.vocab_size, VLLM_VOCAB_PADDING)

    def layer_kinds(self) -> list[str]:
        return [layer.kind for layer in self.layers]

    def layer_kind_counts(self) -> dict[str, int]:
        return dict(Counter(self.layer_kinds()))


_DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5}


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype name ('bfloat16', 'bf16', 'fp8', ...)."""
    key = canonical_dtype(name)
    if key not in _DTYPE_BYTES:
        raise KeyError(key)
    return _DTYPE_BYTES[key]
