"""KV-cache specs: how many bytes one layer keeps per token or per sequence, vLLM's way.

Modelled on vLLM's ``vllm/v1/kv_cache_interface.py`` (0.33.0): each layer kind is a small frozen
class answering ``page_size_bytes`` (one block of ``block_size`` tokens), ``max_memory_usage_bytes``
(what one request of ``max_model_len`` tokens may hold) and ``sequence_bytes`` (one sequence of
``context_len`` tokens, no block rounding). Sizes here are *per TP rank*; the model layer that
builds them applies ``max(1, K // tp)`` replication, MLA's no-sharding and Mamba's ``I / tp``.

Worked example (the seed's): 32 layers x 2 (K and V) x 8 KV heads x 128 head_dim x 2 bytes
x 2048 tokens = 268,435,456 bytes = 256 MiB per sequence (not 536 MB).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.units import cdiv

if TYPE_CHECKING:  # numpy is imported where an array is asked for: the plan command never loads it
    import numpy as np


class KVSpec(BaseModel):
    """Base of the per-layer cache specs (one layer, one TP rank)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(
        description="The layer's kind ('full_attention', 'chunked_local', 'mamba', ...), each subclass's tag; "
        "not its KV-cache group (group_key), which vLLM may promote (chunked local to full attention)."
    )

    def page_size_bytes(self, block_size: int) -> int:
        """Bytes of one block of ``block_size`` tokens in this layer."""
        raise NotImplementedError

    def blocks_per_request(self, max_model_len: int, block_size: int, max_in_flight_tokens: int) -> int:
        """Blocks one request of ``max_model_len`` tokens may hold (vLLM max_memory_usage / page)."""
        raise NotImplementedError

    def sequence_bytes(self, context_len: int) -> int:
        """Bytes one sequence of ``context_len`` tokens keeps in this layer (no block rounding):
        min(context, token_cap) x bytes_per_token + fixed_bytes."""
        tokens = context_len if self.token_cap is None else min(context_len, self.token_cap)
        return tokens * self.bytes_per_token + self.fixed_bytes

    @property
    def bytes_per_token(self) -> int:
        """Bytes per cached token below every window (0 for recurrent state)."""
        return 0

    @property
    def token_cap(self) -> int | None:
        """Most tokens a sequence keeps (the sliding window); None when unbounded."""
        return None

    @property
    def fixed_bytes(self) -> int:
        """Bytes a sequence holds whatever its length (recurrent state)."""
        return 0

    @property
    def is_recurrent(self) -> bool:
        """True for a per-sequence state (one page per request, padded to the attention page)."""
        return False

    @property
    def group_key(self) -> tuple:
        """Layers with equal keys share a vLLM KV-cache group (same kind and page)."""
        raise NotImplementedError

    def describe(self, layers: int) -> tuple[str, str]:
        """(the formula of ``layers`` such layers with their numbers, a note on what it means)."""
        raise NotImplementedError


#: fp8_ds_mla: one fp32 scale per this many latent values (FlashMLA's layout: 4 scales for the 512).
FP8_DS_MLA_SCALE_GROUP = 128


def _layers(n: int) -> str:
    return f"{n} layer{'s' if n != 1 else ''}"


def _elt(dtype_bytes: float) -> str:
    return f"{dtype_bytes:g} B"


class FullAttentionKV(KVSpec):
    """Full (global) attention: K and V for every token, ``2 * kv_heads * head_dim * bytes``."""

    kind: Literal["full_attention"] = "full_attention"
    kv_heads: int = Field(description="KV heads held on this rank: max(1, K // tp).")
    head_dim: int = Field(description="Key head size, in elements.")
    head_dim_v: int = Field(description="Value head size, in elements (0 when values are not cached, as in MLA).")
    dtype_bytes: float = Field(description="Bytes per cached element (2 for bf16, 1 for fp8).")

    @property
    def bytes_per_token(self) -> int:
        return int(self.kv_heads * (self.head_dim + self.head_dim_v) * self.dtype_bytes)

    @property
    def group_key(self) -> tuple:
        return (self.kind, self.bytes_per_token)

    def page_size_bytes(self, block_size: int) -> int:
        return block_size * self.bytes_per_token

    def blocks_per_request(self, max_model_len: int, block_size: int, max_in_flight_tokens: int) -> int:
        return cdiv(max_model_len, block_size)

    def describe(self, layers: int) -> tuple[str, str]:
        heads = f"{self.kv_heads} KV head{'s' if self.kv_heads != 1 else ''}"
        if self.head_dim_v == self.head_dim:
            text = f"2 (K and V) x {_layers(layers)} x {heads} x {self.head_dim} head_dim x {_elt(self.dtype_bytes)}"
        else:
            text = (
                f"{_layers(layers)} x {heads} x ({self.head_dim} K + {self.head_dim_v} V) head_dim x "
                f"{_elt(self.dtype_bytes)}"
            )
        return f"{text} = {layers * self.bytes_per_token:,} B/token", ""


class MLAKV(FullAttentionKV):
    """Multi-head latent attention: one 'head' of kv_lora_rank + qk_rope_head_dim, no V, no TP split."""

    kind: Literal["mla"] = "mla"  # type: ignore[assignment]  # its own tag in the union; full attention's fields

    def describe(self, layers: int) -> tuple[str, str]:
        text = f"{_layers(layers)} x 1 latent x {self.head_dim} (kv_lora_rank + rope dims) x {_elt(self.dtype_bytes)}"
        return (
            f"{text} = {layers * self.bytes_per_token:,} B/token",
            "MLA: one compressed latent per token, not split by tensor parallelism",
        )


class SparseMLAKV(MLAKV):
    """DeepSeek sparse attention (V3.2): the MLA latent plus the lightning indexer's key cache, per token.

    vLLM registers two caches per layer, both ``MLAAttentionSpec`` (one vector per token, not split by TP): the
    latent, in DeepSeek's ``fp8_ds_mla`` layout when the cache is fp8 (its default for V3.2, ``--kv-cache-dtype
    auto``: kv_lora_rank fp8 values, one fp32 scale per 128 of them, the rope dims in bf16: 512 + 16 + 128 = 656 B,
    ``FlashMLASparseBackend.get_kv_cache_shape``), else kv_lora_rank + rope elements of the cache dtype; and the
    indexer's keys, ``DeepseekV32IndexerCache`` of index_head_dim fp8 bytes plus a 4-byte scale per 128
    (128 + 4 = 132 B, ``deepseek_v2.py``)."""

    kind: Literal["sparse_mla"] = "sparse_mla"  # type: ignore[assignment]  # its own tag in the union
    rope_dim: int = Field(description="qk_rope_head_dim: the rope part of the latent (bf16 in the fp8 layout).")
    index_bytes: int = Field(description="Bytes of the indexer's key cache per token (132 for V3.2).")

    @property
    def latent_bytes(self) -> int:
        """The latent's bytes per token: the fp8_ds_mla layout at 1 byte per element, else dtype x width."""
        if self.dtype_bytes == 1:
            r = self.head_dim - self.rope_dim
            return r + (r // FP8_DS_MLA_SCALE_GROUP) * 4 + self.rope_dim * 2
        return int(self.head_dim * self.dtype_bytes)

    @property
    def bytes_per_token(self) -> int:
        return self.latent_bytes + self.index_bytes

    def describe(self, layers: int) -> tuple[str, str]:
        latent = (
            f"{self.latent_bytes} B fp8_ds_mla latent"
            if self.dtype_bytes == 1
            else f"{self.head_dim} x {_elt(self.dtype_bytes)} latent"
        )
        return (
            f"{_layers(layers)} x ({latent} + {self.index_bytes} B indexer keys) = "
            f"{layers * self.bytes_per_token:,} B/token",
            "DeepSeek sparse attention: the MLA latent and the lightning indexer's fp8 keys, not split by tensor "
            "parallelism; attention reads at most index_topk of the latents per query",
        )


class SlidingWindowKV(FullAttentionKV):
    """Sliding-window attention: a sequence keeps at most about ``window`` tokens.

    vLLM reserves ``cdiv(min(window - 1 + max_in_flight_tokens, max_model_len), block_size) + 1``
    blocks per request (``SlidingWindowSpec.max_memory_usage_bytes``): the window, plus the tokens
    a step may add before old blocks are freed, plus one block of misalignment.
    """

    kind: Literal["sliding_window"] = "sliding_window"  # type: ignore[assignment]  # its own tag in the union; full attention's fields
    window_tokens: int = Field(description="Sliding window size, in tokens.")

    @property
    def group_key(self) -> tuple:
        return (self.kind, self.bytes_per_token, self.window_tokens)

    def blocks_per_request(self, max_model_len: int, block_size: int, max_in_flight_tokens: int) -> int:
        span = min(self.window_tokens - 1 + max_in_flight_tokens, max_model_len)
        return cdiv(span, block_size) + 1

    @property
    def token_cap(self) -> int | None:
        return self.window_tokens

    def describe(self, layers: int) -> tuple[str, str]:
        text, _ = super().describe(layers)
        return text, f"sliding window: a sequence keeps at most {self.window_tokens:,} tokens here"


class ChunkedLocalKV(FullAttentionKV):
    """Chunked local attention (Llama 4's RoPE layers): a query sees only its own chunk of tokens.

    vLLM's ``ChunkedLocalAttentionSpec`` would keep ``cdiv(min(chunk + max_in_flight_tokens,
    max_model_len), block_size)`` blocks per request, but only under the hybrid KV-cache manager,
    and vLLM turns that manager off for any model with ``attention_chunk_size`` unless
    ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1`` (``VllmConfig.__post_init__``;
    shared/reference/formulas.md 2.3). With it off, ``unify_hybrid_kv_cache_specs`` promotes these
    layers to full attention. ``hybrid_manager`` False (vLLM's default) plans exactly that: every
    token kept, one group with the full-attention layers. Worked case, Llama-4-Scout at
    max_model_len 4096, block 16: 256 blocks per request either way (4096 < the 8192 chunk).
    """

    kind: Literal["chunked_local"] = "chunked_local"  # type: ignore[assignment]  # its own tag in the union; full attention's fields
    chunk_tokens: int = Field(description="attention_chunk_size, in tokens.")
    hybrid_manager: bool = Field(
        False,
        description=(
            "vLLM's hybrid KV-cache manager is on (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1): "
            "blocks outside the current chunk are freed."
        ),
    )

    @property
    def group_key(self) -> tuple:
        if not self.hybrid_manager:
            return ("full_attention", self.bytes_per_token)
        return (self.kind, self.bytes_per_token, self.chunk_tokens)

    def blocks_per_request(self, max_model_len: int, block_size: int, max_in_flight_tokens: int) -> int:
        if not self.hybrid_manager:
            return cdiv(max_model_len, block_size)
        return cdiv(min(self.chunk_tokens + max_in_flight_tokens, max_model_len), block_size)

    @property
    def token_cap(self) -> int | None:
        return self.chunk_tokens if self.hybrid_manager else None

    def describe(self, layers: int) -> tuple[str, str]:
        text, _ = super().describe(layers)
        if self.hybrid_manager:
            return text, f"chunked local attention: a sequence keeps at most about {self.chunk_tokens:,} tokens here"
        return text, (
            f"chunked local attention ({self.chunk_tokens:,}-token chunks), kept in full: vLLM disables its "
            "hybrid KV-cache manager for chunked-attention models by default"
        )


class MambaStateKV(KVSpec):
    """Recurrent (Mamba/SSM) layer: a fixed conv + SSM state per sequence, nothing per token."""

    kind: Literal["mamba"] = "mamba"
    state_bytes: int = Field(description="Bytes of conv state plus SSM state for one sequence on this rank.")

    @property
    def group_key(self) -> tuple:
        return (self.kind, self.state_bytes)

    def page_size_bytes(self, block_size: int) -> int:
        return self.state_bytes

    def blocks_per_request(self, max_model_len: int, block_size: int, max_in_flight_tokens: int) -> int:
        return 1

    @property
    def fixed_bytes(self) -> int:
        return self.state_bytes

    @property
    def is_recurrent(self) -> bool:
        return True

    def describe(self, layers: int) -> tuple[str, str]:
        return (
            f"{_layers(layers)} x {self.state_bytes:,} B of recurrent state",
            "per sequence, whatever its length (Mamba conv + SSM state)",
        )


class KVBlockGroups(BaseModel):
    """The KV-cache groups one request draws blocks from, as vLLM's hybrid KV-cache manager lays out a model
    whose layers are not all of one kind (``planner.estimate.memory.kv_layout``): every group has its own block
    table over one shared pool of blocks of ``block_tokens`` tokens, so a request of t tokens holds
    ``full_groups`` x cdiv(t, block) blocks for its full-attention groups, min(cdiv(t, block), cap) in each
    sliding-window group (vLLM frees the blocks that leave the window; ``cap`` is
    ``SlidingWindowSpec.max_memory_usage_bytes`` at one token in flight, in blocks), and ``state_blocks`` for its
    recurrent-state groups whatever t is (one block per Mamba group).

    Worked case, gpt-oss-20b on one H100 (12 sliding layers of window 128 + 12 full, block 16): one group of each;
    a request of 1,000 tokens holds 63 + min(63, 9) = 72 blocks, not 63. Gemma-3-4B (29 sliding of window 1,024 +
    5 full): 1 full group and 6 sliding groups, 7 x 63 blocks at 1,000 tokens. Jamba-1.5-Mini (28 Mamba + 4
    attention layers): the block grows to 80 tokens so that a Mamba state fits one page, and a request holds
    cdiv(t, 80) + 7 blocks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    block_tokens: int = Field(ge=1, description="Tokens per block of the pool, after hybrid alignment.")
    full_groups: int = Field(ge=0, description="Groups whose blocks grow with every token (full attention).")
    window_groups: tuple[tuple[int, int], ...] = Field(
        (),
        description="(groups, most blocks a request holds in each) of the sliding-window groups, by window.",
    )
    state_blocks: int = Field(0, ge=0, description="Blocks a request holds whatever its length (recurrent state).")

    def over_groups(self, n: Any, minimum: Callable[[Any, int], Any] = min) -> Any:
        """The blocks of a request whose full-attention groups hold ``n`` blocks (an int, a float or, with
        ``minimum=np.minimum``, an array): ``full_groups`` x n, min(n, cap) in each window group, the state blocks.
        The one formula ``blocks``, ``blocks_array`` and ``fractional_blocks`` evaluate."""
        held = self.full_groups * n + self.state_blocks
        for g, cap in self.window_groups:
            held = held + g * minimum(n, cap)
        return held

    def blocks(self, tokens: int) -> int:
        """Blocks a request of ``tokens`` tokens holds over every group (0 for none)."""
        return self.over_groups(-(-tokens // self.block_tokens)) if tokens > 0 else 0

    def blocks_array(self, tokens: np.ndarray) -> np.ndarray:
        """``blocks`` of each element of ``tokens`` (integers)."""
        import numpy as np

        return np.where(tokens > 0, self.over_groups(-(-tokens // self.block_tokens), np.minimum), 0)

    def fractional_blocks(self, tokens: float) -> float:
        """Blocks a request of ``tokens`` tokens holds, without rounding to whole blocks (the analytic capacity)."""
        return self.over_groups(tokens / self.block_tokens)

    def words(self) -> str:
        """What a request of t tokens holds, in words: 'cdiv(t, 16) x 1 full-attention group + min(cdiv(t, 16), 9) x
        1 sliding-window group'."""
        n = f"cdiv(t, {self.block_tokens})"
        plural = lambda count, word: f"{count} {word}{'s' if count != 1 else ''}"  # noqa: E731
        parts = [f"{n} x {plural(self.full_groups, 'full-attention group')}"] if self.full_groups else []
        parts += [f"min({n}, {cap}) x {plural(g, 'sliding-window group')}" for g, cap in self.window_groups]
        if self.state_blocks:
            parts.append(plural(self.state_blocks, "recurrent-state block"))
        return " + ".join(parts)
