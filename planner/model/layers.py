"""Layer building blocks of a decoder: token mixers (attention, MLA, Mamba) and FFNs (dense, MoE).

Each block is a small frozen class that answers three questions about itself, so no code
elsewhere branches on the kind of layer:

* ``param_groups()``: its parameters, split into TP-sharded linear weights, replicated linear
  weights and small "other" tensors (biases, norms, routers) that stay in the activation dtype;
* ``kv_spec(tp, kv_bytes_per_element, state_bytes)``: what it caches (see ``planner.model.kv``);
* ``ops(shape)``: FLOPs and bytes of one forward step (see ``planner.model.ops``).

Parameter formulas follow transformers 5.24.0 module definitions; the derivations are in
``shared/reference/formulas.md`` (part 2.1), checked against counts of models built on the meta
device (``tests/golden``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.errors import ConfigError, ScenarioError
from planner.model.kv import (
    MLAKV,
    ChunkedLocalKV,
    FullAttentionKV,
    KVSpec,
    MambaStateKV,
    SlidingWindowKV,
    SparseMLAKV,
)
from planner.model.ops import (
    W8A8_DTYPES,
    LoRALinear,
    Op,
    StepShape,
    allreduce,
    elementwise,
    expert_dispatch,
    gemm,
    lora_op,
)


class ParamGroup(BaseModel):
    """Parameters of one component, split by how they are stored and sharded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    component: str = Field(description="embedding, attention, mlp, experts, router, mamba, norms or lm_head.")
    sharded_linear: int = Field(0, description="Linear weights split over TP ranks (quantizable), in parameters.")
    replicated_linear: int = Field(
        0, description="Linear weights held whole on every rank (quantizable), in parameters."
    )
    other: int = Field(0, description="Biases, norms, routers, scales: replicated, activation dtype, in parameters.")

    @property
    def total(self) -> int:
        return self.sharded_linear + self.replicated_linear + self.other


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def param_groups(self) -> list[ParamGroup]:
        raise NotImplementedError

    def ops(self, shape: StepShape) -> list[Op]:
        raise NotImplementedError

    def lora_linears(self, tp: int) -> list[LoRALinear] | None:
        """The linears vLLM wraps with LoRA on one rank of ``tp`` (``LoRALinear``); None: not modelled here."""
        return None

    def lora_ops(self, shape: StepShape) -> list[Op]:
        """The LoRA kernels of this block's linears (``planner.model.ops.lora_op``)."""
        return [lora_op(shape, linear) for linear in self._lora_linears(shape.tp)]

    def _lora_linears(self, tp: int) -> list[LoRALinear]:
        linears = self.lora_linears(tp)
        if linears is None:
            raise ScenarioError(
                f"LoRA buffers of a {getattr(self, 'kind', type(self).__name__)} block are not modelled.",
                hint="--enable-lora is costed for attention, MLA, dense and MoE blocks; drop it for this model.",
            )
        return linears

    @property
    def params(self) -> int:
        return sum(g.total for g in self.param_groups())


# ----------------------------------------------------------------------------------- mixers


class Attention(_Block):
    """Multi-head / grouped-query / multi-query attention, optionally with a sliding window.

    Params: q h*H*d, k and v h*K*d each, o H*d*h (note q/o width H*d may differ from h),
    plus biases (q,k,v: H*d + 2*K*d; o: h), q/k RMSNorms over head_dim (2*d) and sinks (H).
    An output gate (Qwen3-Next) doubles q_proj to h*2*H*d: half queries, half a sigmoid gate.
    Chunked local attention (Llama 4's RoPE layers) attends within blocks of ``chunk_tokens``.
    """

    kind: Literal["attention"] = "attention"
    hidden_size: int = Field(description="Model width h, in elements.")
    num_heads: int = Field(description="Query heads H.")
    num_kv_heads: int = Field(description="Key/value heads K (K = H: MHA; K = 1: MQA).")
    head_dim: int = Field(description="Head size d, in elements (explicit in config.json when given).")
    qkv_bias: bool = Field(False, description="q, k and v projections carry biases.")
    o_bias: bool = Field(False, description="The output projection carries a bias.")
    qk_norm: bool = Field(False, description="RMSNorm over head_dim on queries and keys (Qwen3, Gemma3).")
    sinks: bool = Field(False, description="One learned attention-sink logit per head (gpt-oss).")
    window_tokens: int | None = Field(None, description="Sliding-window size in tokens; None for full attention.")
    chunk_tokens: int | None = Field(
        None,
        description=(
            "Chunked local attention: tokens attend within chunks of this many tokens (Llama 4 "
            "attention_chunk_size); None otherwise."
        ),
    )
    output_gate: bool = Field(
        False, description="q_proj also yields a per-head sigmoid gate on the output (Qwen3-Next), doubling its width."
    )

    def param_groups(self) -> list[ParamGroup]:
        h, H, K, d = self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim
        other = (H * d + 2 * K * d if self.qkv_bias else 0) + (h if self.o_bias else 0)
        other += 2 * d if self.qk_norm else 0
        other += H if self.sinks else 0
        q_width = 2 * H * d if self.output_gate else H * d
        return [ParamGroup(component="attention", sharded_linear=h * q_width + H * d * h + 2 * h * K * d, other=other)]

    def lora_linears(self, tp: int) -> list[LoRALinear]:
        """qkv_proj (column, q / k / v packed: 3 slices, KV heads per rank as cached) and o_proj (row)."""
        H, d = self.num_heads, self.head_dim
        q = (2 if self.output_gate else 1) * H * d / tp
        kv = self.kv_heads_per_rank(tp) * d
        return [
            LoRALinear(name="qkv_proj", parallel="column", in_features=self.hidden_size, out_slices=(q, kv, kv)),
            LoRALinear(name="o_proj", parallel="row", in_features=H * d, out_slices=(self.hidden_size,)),
        ]

    @property
    def local_span_tokens(self) -> int | None:
        """Most past tokens one query attends to: the sliding window or the chunk; None when unbounded."""
        return self.window_tokens if self.window_tokens is not None else self.chunk_tokens

    @property
    def cache_kv_heads(self) -> int:
        """KV heads vLLM caches (before TP): K."""
        return self.num_kv_heads

    @property
    def cache_head_size(self) -> int:
        """vLLM's head size: head_dim."""
        return self.head_dim

    def kv_heads_per_rank(self, tp: int) -> int:
        """vLLM ``get_num_kv_heads``: max(1, K // tp); heads are replicated when tp > K."""
        return max(1, self.num_kv_heads // tp)

    def kv_spec(self, tp: int, kv_bytes_per_element: float, state_bytes: float) -> KVSpec:
        common = dict(
            kv_heads=self.kv_heads_per_rank(tp),
            head_dim=self.head_dim,
            head_dim_v=self.head_dim,
            dtype_bytes=kv_bytes_per_element,
        )
        if self.chunk_tokens is not None:
            return ChunkedLocalKV(chunk_tokens=self.chunk_tokens, **common)
        if self.window_tokens is None:
            return FullAttentionKV(**common)
        return SlidingWindowKV(window_tokens=self.window_tokens, **common)

    def ops(self, shape: StepShape) -> list[Op]:
        h, H, K, d = self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim
        T = shape.tokens
        H_r = H / shape.tp
        K_r = self.kv_heads_per_rank(shape.tp)
        local = self.local_span_tokens
        span = shape.context_len if local is None else min(shape.context_len, local)
        pairs = shape.attended_pairs_per_seq()
        if local is not None and shape.causal:
            pairs = min(pairs, shape.query_len * local)
        elif local is not None:
            pairs = shape.query_len * span
        B = shape.num_seqs
        kv_elt = shape.kv_bytes_per_element
        new_kv = T * 2 * K_r * d * kv_elt
        return [
            gemm(shape, "attn.q_proj", "attention", T, (2 if self.output_gate else 1) * H * d, h),
            gemm(shape, "attn.k_proj", "attention", T, K * d, h),
            gemm(shape, "attn.v_proj", "attention", T, K * d, h),
            Op(name="attn.kv_cache_write", kind="elementwise", flops=0.0, kv_bytes=new_kv),
            Op(
                name="attn.score (QK^T)",
                kind="attention",
                flops=2.0 * B * H_r * pairs * d,
                kv_bytes=B * span * K_r * d * kv_elt,
                activation_bytes=T * H_r * d * shape.act_bytes,
            ),
            Op(
                name="attn.softmax",
                kind="attention",
                flops=5.0 * B * H_r * pairs,
                kernels=0,  # fused into the FlashAttention kernel: no HBM traffic, no launch
            ),
            Op(
                name="attn.value (PV)",
                kind="attention",
                flops=2.0 * B * H_r * pairs * d,
                kv_bytes=B * span * K_r * d * kv_elt,
                activation_bytes=T * H_r * d * shape.act_bytes,
                kernels=0,  # same kernel as the score product
            ),
            gemm(shape, "attn.o_proj", "attention", T, h, H * d),
        ]


class MLA(_Block):
    """DeepSeek multi-head latent attention (V2, V3, R1).

    Params: q = h*H*(nope+rope) without q LoRA, else h*q_lora + q_lora (norm) + q_lora*H*(nope+rope);
    kv_a = h*(kv_lora+rope) + kv_lora (norm); kv_b = kv_lora*H*(nope+v); o = H*v*h.
    Cache: kv_lora + rope values per token, one 'head', no V, the same on every TP rank.
    Decode uses the absorbed form (attention over the 576-wide latent), prefill the expanded one.
    """

    kind: Literal["mla"] = "mla"
    hidden_size: int = Field(description="Model width h.")
    num_heads: int = Field(description="Query heads H.")
    q_lora_rank: int | None = Field(
        description="Rank of the query down-projection; None means a full q_proj (V2-Lite)."
    )
    kv_lora_rank: int = Field(description="Width of the cached latent (512 for V2/V3).")
    qk_nope_head_dim: int = Field(description="Non-rotary part of each query/key head.")
    qk_rope_head_dim: int = Field(description="Rotary part, shared across heads and cached.")
    v_head_dim: int = Field(description="Value head size.")
    bias: bool = Field(False, description="Attention projections carry biases (attention_bias).")

    def param_groups(self) -> list[ParamGroup]:
        h, H = self.hidden_size, self.num_heads
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        sharded = self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim) + H * self.v_head_dim * h
        replicated = h * (self.kv_lora_rank + self.qk_rope_head_dim)
        other = self.kv_lora_rank
        if self.q_lora_rank is None:
            sharded += h * H * qk
        else:
            replicated += h * self.q_lora_rank
            other += self.q_lora_rank
            sharded += self.q_lora_rank * H * qk
        if self.bias:
            other += h
        return [ParamGroup(component="attention", sharded_linear=sharded, replicated_linear=replicated, other=other)]

    def lora_linears(self, tp: int) -> list[LoRALinear]:
        """q_a / kv_a (replicated), q_b or q_proj and kv_b (column), o_proj (row), as vLLM's DeepSeek-V2 builds them."""
        h, H = self.hidden_size, self.num_heads
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        latent = self.kv_lora_rank + self.qk_rope_head_dim
        out = [LoRALinear(name="kv_a_proj_with_mqa", parallel="replicated", in_features=h, out_slices=(latent,))]
        if self.q_lora_rank is None:
            out.append(LoRALinear(name="q_proj", parallel="column", in_features=h, out_slices=(H * qk / tp,)))
        else:
            out.append(
                LoRALinear(name="q_a_proj", parallel="replicated", in_features=h, out_slices=(self.q_lora_rank,))
            )
            out.append(
                LoRALinear(name="q_b_proj", parallel="column", in_features=self.q_lora_rank, out_slices=(H * qk / tp,))
            )
        kv_b = H * (self.qk_nope_head_dim + self.v_head_dim) / tp
        out.append(LoRALinear(name="kv_b_proj", parallel="column", in_features=self.kv_lora_rank, out_slices=(kv_b,)))
        out.append(LoRALinear(name="o_proj", parallel="row", in_features=H * self.v_head_dim, out_slices=(h,)))
        return out

    @property
    def cache_kv_heads(self) -> int:
        """vLLM caches one latent 'head' for MLA."""
        return 1

    @property
    def cache_head_size(self) -> int:
        """vLLM's head size for MLA: kv_lora_rank + qk_rope_head_dim (576 for DeepSeek V2/V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def kv_spec(self, tp: int, kv_bytes_per_element: float, state_bytes: float) -> MLAKV:
        return MLAKV(
            kv_heads=self.cache_kv_heads,
            head_dim=self.cache_head_size,
            head_dim_v=0,
            dtype_bytes=kv_bytes_per_element,
        )

    def ops(self, shape: StepShape) -> list[Op]:
        h, H = self.hidden_size, self.num_heads
        T, B = shape.tokens, shape.num_seqs
        nope, rope, v, r = self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim, self.kv_lora_rank
        latent_bytes = self.latent_bytes(shape)
        ops: list[Op] = []
        if self.q_lora_rank is None:
            ops.append(gemm(shape, "mla.q_proj", "attention", T, H * (nope + rope), h))
        else:
            ops.append(gemm(shape, "mla.q_a_proj", "attention", T, self.q_lora_rank, h, sharded=False))
            ops.append(gemm(shape, "mla.q_b_proj", "attention", T, H * (nope + rope), self.q_lora_rank))
        ops.append(gemm(shape, "mla.kv_a_proj", "attention", T, r + rope, h, sharded=False))
        ops.append(Op(name="mla.latent_cache_write", kind="elementwise", flops=0.0, kv_bytes=T * latent_bytes))
        ops += self.selection_ops(shape)
        if self.expanded(shape):
            # Expanded: up-project every context token's latent to per-head K (nope) and V.
            ctx_tokens = B * shape.context_len
            ops.append(gemm(shape, "mla.kv_b_proj", "attention", ctx_tokens, H * (nope + v), r))
            ops += self._attention_ops(shape, nope + rope, v, latent_bytes)
        else:
            # Absorbed: queries move into the latent space, attention runs over the cached latent.
            ops.append(gemm(shape, "mla.q_absorb (W_UK)", "attention", T, H * r, nope))
            ops += self._attention_ops(shape, r + rope, r, latent_bytes, **self.absorbed_span(shape))
            ops.append(gemm(shape, "mla.v_absorb (W_UV)", "attention", T, H * v, r))
        ops.append(gemm(shape, "mla.o_proj", "attention", T, h, H * v))
        return ops

    # What sparse attention (``SparseMLA``) changes in these ops; plain MLA's answers below.

    def latent_bytes(self, shape: StepShape) -> float:
        """Bytes of one token's cached latent: kv_lora_rank + rope elements of the cache dtype."""
        return (self.kv_lora_rank + self.qk_rope_head_dim) * shape.kv_bytes_per_element

    def selection_ops(self, shape: StepShape) -> list[Op]:
        """Ops that pick the keys each query attends (none: every cached token)."""
        return []

    def expanded(self, shape: StepShape) -> bool:
        """Whether the step runs the expanded (per-head K and V) form: a prefill; decode runs absorbed."""
        return shape.causal

    def absorbed_span(self, shape: StepShape) -> dict[str, Any]:
        """``_attention_ops``' pairs and latents read in the absorbed form (none given: every causal pair)."""
        return {}

    def _attention_ops(
        self,
        shape: StepShape,
        qk_dim: int,
        v_dim: int,
        latent_bytes: float,
        pairs: float | None = None,
        read_tokens: float | None = None,
        sparse: bool = False,
    ) -> list[Op]:
        """Score, softmax and value over the cached latent, with ``qk_dim``-wide queries and keys and
        ``v_dim``-wide values per head: nope + rope and v_head_dim expanded, kv_lora_rank + rope and
        kv_lora_rank absorbed. ``pairs`` (per sequence) and ``read_tokens`` (latents read, all sequences)
        default to every causal pair and every cached token; sparse attention passes its top-k's."""
        T, B, H_r = shape.tokens, shape.num_seqs, self.num_heads / shape.tp
        pairs = shape.attended_pairs_per_seq() if pairs is None else pairs
        read_tokens = B * shape.context_len if read_tokens is None else read_tokens
        what = "sparse " if sparse else ""
        return [
            Op(
                name=f"mla.{what}score (QK^T{' over the top-k' if sparse else ''})",
                kind="attention",
                flops=2.0 * B * H_r * pairs * qk_dim,
                kv_bytes=read_tokens * latent_bytes,
                activation_bytes=T * H_r * qk_dim * shape.act_bytes,
            ),
            Op(name="mla.softmax", kind="attention", flops=5.0 * B * H_r * pairs, kernels=0),
            Op(
                name=f"mla.{what}value (PV)",
                kind="attention",
                flops=2.0 * B * H_r * pairs * v_dim,
                kernels=0,
                activation_bytes=T * H_r * v_dim * shape.act_bytes,
            ),
        ]


#: Bytes per token of DeepSeek-V3.2's indexer key cache: index_head_dim fp8 values and one 4-byte scale per 128
#: (vLLM ``DeepseekV32IndexerCache(head_dim=idx_dim + idx_dim // 128 * 4, dtype=uint8)``).
INDEX_SCALE_GROUP = 128


class SparseMLA(MLA):
    """DeepSeek sparse attention (DSA, DeepSeek-V3.2): MLA whose queries attend only the ``index_topk`` cached
    tokens a lightning indexer picks.

    Params: MLA's, plus the indexer: wq_b q_lora_rank x (index_n_heads x index_head_dim), wk h x index_head_dim,
    k_norm (LayerNorm) 2 x index_head_dim, weights_proj h x index_n_heads (transformers 5.24.0
    ``DeepseekV32Indexer``). vLLM builds the indexer's linears replicated (``ReplicatedLinear``): every TP rank
    holds and runs all of it.
    Work per step: the indexer projects each new token (q from the query latent, k and the head weights from the
    hidden state) and scores it against every cached key (index_n_heads x index_head_dim per pair, fp8 in
    DeepGEMM's ``fp8_mqa_logits``), then attention runs over at most index_topk latents per query, in the
    absorbed (MQA) form. A prefill no longer than index_topk runs plain MLA (vLLM ``use_dense_mha``: "for
    short-sequence prefilling ... a masked MHA mode to simulate DSA")."""

    kind: Literal["sparse_mla"] = "sparse_mla"  # type: ignore[assignment]
    index_n_heads: int = Field(gt=0, description="Indexer heads (index_n_heads: 64).")
    index_head_dim: int = Field(gt=0, description="Indexer head size (index_head_dim: 128).")
    index_topk: int = Field(gt=0, description="Cached tokens each query attends (index_topk: 2048).")

    @model_validator(mode="after")
    def _indexer_reads_the_query_latent(self) -> SparseMLA:
        if self.q_lora_rank is None:
            raise ConfigError(
                "index_topk (DeepSeek sparse attention) without q_lora_rank: the indexer's queries come from the "
                "query latent, so a sparse-attention config needs q_lora_rank.",
                hint="Compare q_lora_rank with the model's config.json on the Hub (1536 for DeepSeek-V3.2).",
            )
        return self

    @property
    def query_latent(self) -> int:
        """q_lora_rank, which a sparse-attention layer always has (``_indexer_reads_the_query_latent``)."""
        assert self.q_lora_rank is not None
        return self.q_lora_rank

    def param_groups(self) -> list[ParamGroup]:
        (mla,) = super().param_groups()
        h, n, d = self.hidden_size, self.index_n_heads, self.index_head_dim
        indexer = self.query_latent * n * d + h * d + h * n
        return [
            mla.model_copy(update={"replicated_linear": mla.replicated_linear + indexer, "other": mla.other + 2 * d})
        ]

    @property
    def index_bytes_per_token(self) -> int:
        return self.index_head_dim + self.index_head_dim // INDEX_SCALE_GROUP * 4

    def kv_spec(self, tp: int, kv_bytes_per_element: float, state_bytes: float) -> SparseMLAKV:
        """MLA's latent cache (``MLA.kv_spec``) plus the rope width of its fp8 layout and the indexer's keys."""
        latent = super().kv_spec(tp, kv_bytes_per_element, state_bytes)
        return SparseMLAKV(
            **latent.model_dump(exclude={"kind"}),
            rope_dim=self.qk_rope_head_dim,
            index_bytes=self.index_bytes_per_token,
        )

    def sparse_pairs_per_seq(self, shape: StepShape) -> float:
        """(query, key) pairs per sequence with each query's keys capped at index_topk: query i of the step sees
        c - q + i + 1 keys (c the context after the step, q its new tokens), at most k of them."""
        q, c, k = shape.query_len, shape.context_len, self.index_topk
        first = c - q + 1  # keys the step's first query sees
        if first >= k:
            return float(q * k)
        below = min(q, k - first + 1)  # queries that see fewer than k keys: first, first + 1, ...
        return below * first + below * (below - 1) / 2 + (q - below) * k

    def latent_bytes(self, shape: StepShape) -> float:
        """The latent's bytes in its cache layout (``SparseMLAKV.latent_bytes``: 656 B in fp8_ds_mla)."""
        return self.kv_spec(shape.tp, shape.kv_bytes_per_element, shape.state_bytes).latent_bytes

    def selection_ops(self, shape: StepShape) -> list[Op]:
        return self._indexer_ops(shape)

    def expanded(self, shape: StepShape) -> bool:
        """A prefill no longer than index_topk keeps every key: vLLM's dense MHA mode, the expanded form."""
        return shape.causal and shape.context_len <= self.index_topk

    def absorbed_span(self, shape: StepShape) -> dict[str, Any]:
        """At most index_topk latents per query (FlashMLA's sparse kernel); the latents read are the distinct ones
        the step's queries pick, at most the context."""
        read = shape.num_seqs * min(shape.context_len, self.index_topk * shape.query_len)
        return {"pairs": self.sparse_pairs_per_seq(shape), "read_tokens": read, "sparse": True}

    def _indexer_ops(self, shape: StepShape) -> list[Op]:
        """The lightning indexer on every rank (replicated): its projections, its key-cache write, and the fp8
        scores of every new token against every cached key (causal pairs), then the top-k pick."""
        h, n, d = self.hidden_size, self.index_n_heads, self.index_head_dim
        T, B = shape.tokens, shape.num_seqs
        pairs = B * shape.attended_pairs_per_seq()
        return [
            gemm(shape, "indexer.wq_b", "attention", T, n * d, self.query_latent, sharded=False),
            gemm(shape, "indexer.wk", "attention", T, d, h, sharded=False),
            gemm(shape, "indexer.weights_proj", "attention", T, n, h, sharded=False),
            Op(
                name="indexer.key_cache_write",
                kind="elementwise",
                flops=0.0,
                kv_bytes=T * self.index_bytes_per_token,
            ),
            Op(
                name="indexer.logits (fp8 MQA over every cached key)",
                kind="attention",
                flops=2.0 * n * d * pairs + 2.0 * n * pairs,
                kv_bytes=B * shape.context_len * self.index_bytes_per_token,
                compute_dtype="fp8",
            ),
            Op(name="indexer.top-k", kind="elementwise", flops=2.0 * pairs, activation_bytes=pairs * 4.0),
        ]


class Mamba(_Block):
    """Mamba-1 selective-state-space mixer (Mamba, Jamba).

    Params: in_proj h*2I (+2I bias), depthwise conv I*k (+I bias), x_proj I*(R+2N), dt_proj R*I + I,
    A_log I*N, D I, out_proj I*h (+h bias), and Jamba's dt/B/C RMSNorms R + 2N.
    State per sequence (vLLM ``mamba1_state_shape``): conv (I/tp)*(k-1) + ssm (I/tp)*N elements.
    """

    kind: Literal["mamba"] = "mamba"
    hidden_size: int = Field(description="Model width h.")
    d_inner: int = Field(description="Inner width I = expand * h.")
    d_state: int = Field(description="SSM state size N per channel.")
    d_conv: int = Field(description="Depthwise convolution kernel width k.")
    dt_rank: int = Field(description="Rank R of the time-step projection.")
    proj_bias: bool = Field(False, description="in_proj and out_proj carry biases.")
    conv_bias: bool = Field(True, description="The convolution carries a bias.")
    inner_norms: bool = Field(False, description="RMSNorms on dt, B and C (Jamba).")

    def param_groups(self) -> list[ParamGroup]:
        h, I, N, R, k = self.hidden_size, self.d_inner, self.d_state, self.dt_rank, self.d_conv
        sharded = h * 2 * I + I * (R + 2 * N) + R * I + I * h
        other = I * k + (I if self.conv_bias else 0) + I + I * N + I  # conv, dt bias, A_log, D
        other += (2 * I + h) if self.proj_bias else 0
        other += (R + 2 * N) if self.inner_norms else 0
        return [ParamGroup(component="mamba", sharded_linear=sharded, other=other)]

    def kv_spec(self, tp: int, kv_bytes_per_element: float, state_bytes: float) -> KVSpec:
        inner = self.d_inner // tp
        elements = inner * (self.d_conv - 1) + inner * self.d_state
        return MambaStateKV(state_bytes=int(elements * state_bytes))

    def ops(self, shape: StepShape) -> list[Op]:
        h, I, N, R = self.hidden_size, self.d_inner, self.d_state, self.dt_rank
        T, B = shape.tokens, shape.num_seqs
        I_r = I / shape.tp
        state = B * I_r * (N + self.d_conv - 1) * shape.state_bytes
        return [
            gemm(shape, "mamba.in_proj", "mamba", T, 2 * I, h),
            elementwise(shape, "mamba.conv1d", T * I_r, 2.0 * self.d_conv),
            gemm(shape, "mamba.x_proj", "mamba", T, R + 2 * N, I),
            gemm(shape, "mamba.dt_proj", "mamba", T, I, R),
            Op(
                name="mamba.selective_scan",
                kind="scan",
                flops=9.0 * T * I_r * N,
                kv_bytes=2 * state,
                activation_bytes=4 * T * I_r * shape.act_bytes,
            ),
            gemm(shape, "mamba.out_proj", "mamba", T, h, I),
        ]


def _extra_groups_for_head_shards(groups: int, tp: int) -> int:
    """vLLM ``extra_groups_for_head_shards``: groups replicated so every rank holds its heads' groups."""
    return 0 if groups % tp == 0 else tp - groups


class Mamba2(_Block):
    """Mamba-2 state-space-duality mixer (Mamba2, and Nemotron-H's mamba blocks).

    Params (transformers ``Mamba2Mixer``): in_proj h*(2I + 2GN + nh) (+ bias), depthwise conv
    (I + 2GN)*k (+ bias), dt_bias, A_log and D nh each, a gated RMSNorm I, out_proj I*h (+ bias h);
    I = expand*h = nh*head_dim, G = n_groups, N = state size.
    State per sequence (vLLM ``mamba2_state_shape``): conv ((I + 2G'N)/tp)*(k-1) + ssm (nh/tp)*head_dim*N
    elements, G' = G plus the groups replicated when tp does not divide G.
    Worked case, Mamba-Codestral-7B (h 4096, I 8192, G 8, N 128, nh 128, head_dim 64, k 4) at tp 1:
    (8192 + 2048) * 3 + 128 * 64 * 128 = 1,079,296 elements = 2,158,592 B in bf16 per layer.
    """

    kind: Literal["mamba2"] = "mamba2"
    hidden_size: int = Field(description="Model width h.")
    d_inner: int = Field(description="Inner width I = expand * h (= num_heads * head_dim).")
    num_heads: int = Field(description="SSM heads nh.")
    head_dim: int = Field(description="Channels per SSM head.")
    n_groups: int = Field(description="Groups G sharing B and C projections.")
    d_state: int = Field(description="SSM state size N.")
    d_conv: int = Field(description="Depthwise convolution kernel width k.")
    proj_bias: bool = Field(False, description="in_proj and out_proj carry biases.")
    conv_bias: bool = Field(True, description="The convolution carries a bias.")

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state

    def param_groups(self) -> list[ParamGroup]:
        h, I, nh = self.hidden_size, self.d_inner, self.num_heads
        in_width = 2 * I + 2 * self.n_groups * self.d_state + nh
        other = self.conv_dim * self.d_conv + (self.conv_dim if self.conv_bias else 0) + 3 * nh + I
        other += (in_width + h) if self.proj_bias else 0
        return [ParamGroup(component="mamba", sharded_linear=h * in_width + I * h, other=other)]

    def state_elements(self, tp: int) -> int:
        groups = self.n_groups + _extra_groups_for_head_shards(self.n_groups, tp)
        conv = (self.d_inner + 2 * groups * self.d_state) // tp * (self.d_conv - 1)
        return conv + self.num_heads // tp * self.head_dim * self.d_state

    def kv_spec(self, tp: int, kv_bytes_per_element: float, state_bytes: float) -> KVSpec:
        return MambaStateKV(state_bytes=int(self.state_elements(tp) * state_bytes))

    def ops(self, shape: StepShape) -> list[Op]:
        h, I, N, T, B = self.hidden_size, self.d_inner, self.d_state, shape.tokens, shape.num_seqs
        state = B * self.state_elements(shape.tp) * shape.state_bytes
        in_width = 2 * I + 2 * self.n_groups * N + self.num_heads
        return [
            gemm(shape, "mamba2.in_proj", "mamba", T, in_width, h),
            elementwise(shape, "mamba2.conv1d", T * self.conv_dim / shape.tp, 2.0 * self.d_conv),
            Op(
                name="mamba2.ssd_scan",
                kind="scan",
                flops=9.0 * T * I / shape.tp * N,
                kv_bytes=2 * state,
                activation_bytes=4 * T * I / shape.tp * shape.act_bytes,
            ),
            gemm(shape, "mamba2.out_proj", "mamba", T, h, I),
        ]


class GatedDeltaNet(_Block):
    """Gated delta-rule linear attention (Qwen3-Next's ``linear_attention`` layers).

    Params (transformers ``Qwen3NextGatedDeltaNet``), with key width Kd = nk*dk and value width
    Vd = nv*dv: in_proj_qkvz h*(2Kd + 2Vd), in_proj_ba h*2nv, depthwise conv (2Kd + Vd)*k (no bias),
    dt_bias and A_log nv each, a gated RMSNorm dv, out_proj Vd*h.
    State per sequence (vLLM ``gated_delta_net_state_shape``): conv ((2Kd + Vd)/tp)*(k-1) plus the
    recurrent matrix (nv/tp)*dk*dv elements, in the model dtype (mamba_ssm_cache_dtype auto).
    Worked case, Qwen3-Next-80B-A3B (nk 16, nv 32, dk = dv = 128, k 4) at tp 1:
    8192 * 3 + 32 * 128 * 128 = 548,864 elements = 1,097,728 B in bf16 per layer.
    """

    kind: Literal["gated_delta_net"] = "gated_delta_net"
    hidden_size: int = Field(description="Model width h.")
    num_key_heads: int = Field(description="Key (and query) heads nk.")
    num_value_heads: int = Field(description="Value heads nv.")
    key_head_dim: int = Field(description="Key head size dk.")
    value_head_dim: int = Field(description="Value head size dv.")
    d_conv: int = Field(description="Depthwise convolution kernel width k.")

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def param_groups(self) -> list[ParamGroup]:
        h, nv = self.hidden_size, self.num_value_heads
        sharded = h * (2 * self.key_dim + 2 * self.value_dim) + h * 2 * nv + self.value_dim * h
        other = self.conv_dim * self.d_conv + 2 * nv + self.value_head_dim
        return [ParamGroup(component="mamba", sharded_linear=sharded, other=other)]

    def state_elements(self, tp: int) -> int:
        conv = self.conv_dim // tp * (self.d_conv - 1)
        return conv + self.num_value_heads // tp * self.key_head_dim * self.value_head_dim

    def kv_spec(self, tp: int, kv_bytes_per_element: float, state_bytes: float) -> KVSpec:
        return MambaStateKV(state_bytes=int(self.state_elements(tp) * state_bytes))

    def ops(self, shape: StepShape) -> list[Op]:
        h, T, B = self.hidden_size, shape.tokens, shape.num_seqs
        nv_r = self.num_value_heads / shape.tp
        state = B * self.state_elements(shape.tp) * shape.state_bytes
        return [
            gemm(shape, "gdn.in_proj_qkvz", "mamba", T, 2 * self.key_dim + 2 * self.value_dim, h),
            gemm(shape, "gdn.in_proj_ba", "mamba", T, 2 * self.num_value_heads, h),
            elementwise(shape, "gdn.conv1d", T * self.conv_dim / shape.tp, 2.0 * self.d_conv),
            # per token and value head: S <- g*S + b*(v - S k) k^T and o = S q, ~6 dk*dv FLOPs
            Op(
                name="gdn.delta_rule",
                kind="scan",
                flops=6.0 * T * nv_r * self.key_head_dim * self.value_head_dim,
                kv_bytes=2 * state,
                activation_bytes=4 * T * self.conv_dim / shape.tp * shape.act_bytes,
            ),
            gemm(shape, "gdn.out_proj", "mamba", T, h, self.value_dim),
        ]


Mixer = Annotated[Attention | MLA | SparseMLA | Mamba | Mamba2 | GatedDeltaNet, Field(discriminator="kind")]


# ------------------------------------------------------------------------------------- FFNs


class DenseMLP(_Block):
    """Feed-forward block: gated (SwiGLU/GeGLU, 3 matrices) or plain (2 matrices, GPT-2/OPT/NeoX/Falcon)."""

    kind: Literal["dense"] = "dense"
    hidden_size: int = Field(description="Model width h.")
    intermediate_size: int = Field(description="FFN width I.")
    gated: bool = Field(True, description="Gated (gate, up, down) rather than plain (up, down).")
    bias: bool = Field(False, description="The linear layers carry biases.")
    component: str = Field("mlp", description="Component name for precision and reporting (mlp or experts).")

    def param_groups(self) -> list[ParamGroup]:
        h, I = self.hidden_size, self.intermediate_size
        mats = 3 if self.gated else 2
        bias = ((2 if self.gated else 1) * I + h) if self.bias else 0
        return [ParamGroup(component=self.component, sharded_linear=mats * h * I, other=bias)]

    def lora_linears(self, tp: int) -> list[LoRALinear]:
        """gate_up_proj (column, gate / up packed: 2 slices) or up_proj, and down_proj (row)."""
        h, I = self.hidden_size, self.intermediate_size
        up = (I / tp, I / tp) if self.gated else (I / tp,)
        return [
            LoRALinear(
                name="gate_up_proj" if self.gated else "up_proj", parallel="column", in_features=h, out_slices=up
            ),
            LoRALinear(name="down_proj", parallel="row", in_features=I, out_slices=(h,)),
        ]

    def ops(self, shape: StepShape) -> list[Op]:
        h, I, T = self.hidden_size, self.intermediate_size, shape.tokens
        up = 2 * I if self.gated else I
        return [
            gemm(shape, "mlp.gate_up_proj" if self.gated else "mlp.up_proj", self.component, T, up, h),
            elementwise(shape, "mlp.act", T * I / shape.tp, 4.0, passes=3.0 if self.gated else 2.0),
            gemm(shape, "mlp.down_proj", self.component, T, h, I),
        ]


class MoE(_Block):
    """Mixture of experts: a router, E routed experts of which k fire per token, optional shared expert.

    Params per layer: router E*h (+E bias), E experts of 3*h*I_e (+ biases 2*I_e + h for gpt-oss),
    shared expert 3*h*I_s (+ an h->1 gate for Qwen2-MoE).
    """

    kind: Literal["moe"] = "moe"
    hidden_size: int = Field(description="Model width h.")
    num_experts: int = Field(description="Routed experts E.")
    experts_per_token: int = Field(description="Experts each token is routed to (top-k).")
    expert_intermediate_size: int = Field(description="FFN width of one routed expert.")
    expert_bias: bool = Field(False, description="Expert linears carry biases (gpt-oss).")
    router_bias: bool = Field(False, description="The router carries a bias (gpt-oss).")
    shared_intermediate_size: int = Field(0, description="Total FFN width of the shared expert(s); 0 for none.")
    shared_gate: bool = Field(False, description="A sigmoid gate h->1 scales the shared expert (Qwen2-MoE).")

    @property
    def expert(self) -> DenseMLP:
        return DenseMLP(
            hidden_size=self.hidden_size,
            intermediate_size=self.expert_intermediate_size,
            bias=self.expert_bias,
            component="experts",
        )

    @property
    def shared(self) -> DenseMLP | None:
        if not self.shared_intermediate_size:
            return None
        return DenseMLP(hidden_size=self.hidden_size, intermediate_size=self.shared_intermediate_size)

    @property
    def params_per_expert(self) -> int:
        return self.expert.params

    def param_groups(self) -> list[ParamGroup]:
        E, h = self.num_experts, self.hidden_size
        e = self.expert.param_groups()[0]
        groups = [
            ParamGroup(component="experts", sharded_linear=E * e.sharded_linear, other=E * e.other),
            ParamGroup(
                component="router", other=E * h + (E if self.router_bias else 0) + (h if self.shared_gate else 0)
            ),
        ]
        if self.shared is not None:
            groups += self.shared.param_groups()
        return groups

    def lora_linears(self, tp: int) -> list[LoRALinear]:
        """The router (``gate``, replicated), the routed experts as vLLM's ``FusedMoEWithLoRA`` allocates them
        (vllm/lora/layers/fused_moe.py ``_create_lora_a_weights`` / ``_create_lora_b_weights``: per expert w13
        A [r, h] x 2 slices, w13 B [I / tp, r] x 2, w2 A [r, I / tp], w2 B [h, r]: the gated MLP's rule, E
        copies, no expert parallelism), the shared expert's MLP and its gate (Qwen2-MoE)."""
        h = self.hidden_size
        expert = self.expert.lora_linears(tp)
        out = [LoRALinear(name="gate", parallel="replicated", in_features=h, out_slices=(self.num_experts,))]
        out += [
            linear.model_copy(update={"name": f"experts.{linear.name}", "copies": self.num_experts})
            for linear in expert
        ]
        if self.shared is not None:
            shared = self.shared.lora_linears(tp)
            out += [linear.model_copy(update={"name": f"shared_expert.{linear.name}"}) for linear in shared]
        if self.shared_gate:
            out.append(LoRALinear(name="shared_expert_gate", parallel="replicated", in_features=h, out_slices=(1,)))
        return out

    def lora_ops(self, shape: StepShape) -> list[Op]:
        """As any block's, the routed experts' kernels on the k experts each token uses (the touched ones read)."""
        routed = (self.experts_per_token, self.expected_distinct_experts(shape.tokens))
        return [
            lora_op(shape, linear, routed if linear.copies > 1 else None) for linear in self._lora_linears(shape.tp)
        ]

    def expected_distinct_experts(self, tokens: int) -> float:
        """Experts touched by ``tokens`` tokens under uniform routing: E (1 - (1 - k/E)^tokens)."""
        E, k = self.num_experts, self.experts_per_token
        return E * (1.0 - (1.0 - k / E) ** tokens)

    def local_experts(self, ep: int) -> int:
        """Routed experts on the fullest of ``ep`` expert-parallel ranks: ceil(E / ep) (vLLM's
        ``determine_expert_map``, vllm/model_executor/layers/fused_moe/expert_map_manager.py: E // ep each, one more
        on the first E % ep ranks, contiguous under the default 'linear' placement)."""
        return -(-self.num_experts // ep)

    def rank_routing(self, tokens: Any, ep: int = 1, dp: int = 1, imbalance: float = 1.0) -> tuple[Any, Any]:
        """(experts touched, routed (token, expert) pairs) on the busiest rank of one MoE layer, for ``tokens``
        tokens in each DP rank's step (numbers or numpy arrays).

        Without expert parallelism (ep 1) every rank holds a TP slice of every expert: E (1 - (1 - k/E)^T)
        touched (uniform routing), T k pairs. With it the fullest rank holds L = ceil(E / ep) whole experts and
        serves the tokens of all dp ranks (T dp): touched = L (1 - (1 - k/E)^(T dp)), pairs = T dp k L / E x the
        load imbalance (busiest rank over the mean). Example, DeepSeek-V3 (E 256, k 8) at EP 8 x DP 8 (TP 1),
        64 tokens per rank, imbalance 1.3: L 32, T dp 512, touched 32 (1 - (31/32)^512) = 32.0, pairs
        512 x 8 x 32 / 256 x 1.3 = 665.6.
        """
        E, k = self.num_experts, self.experts_per_token
        if ep == 1:
            return E * (1.0 - (1.0 - k / E) ** tokens), tokens * k
        local = self.local_experts(ep)
        gathered = tokens * dp
        return local * (1.0 - (1.0 - k / E) ** gathered), gathered * k * local / E * imbalance

    def _routing_ops(self, shape: StepShape, compute_dtype: str) -> list[Op]:
        """The fused-MoE layer's small kernels around its two expert GEMMs, each a launch of its own.

        As vLLM's Triton fused-MoE path runs them (``fused_moe.py``: ``fused_topk`` / a model's custom
        routing function, then ``TritonExperts.apply``: ``moe_align_block_size``, w13 GEMM, activation,
        ``moe_kernel_quantize_input`` of the intermediate, w2 GEMM; the prepare step quantizes the input
        and the finalize step weights and sums the k expert outputs): top-k selection over the router's
        T x E logits, the sort of the T k (token, expert) pairs into expert blocks, the gated activation
        on T k x 2I/tp, the weighted sum of the k outputs into T x h, and, when the experts' math is W8A8
        (fp8/int8/fp4), the per-token quantization of the GEMMs' two inputs. Memory-bound and tiny at
        decode: what they cost there is their kernel floor each (``planner.estimate.step``). SGLang's
        Triton path is the same sequence (``fused_moe_triton``); other backends (CUTLASS, FlashInfer)
        permute and unpermute instead of sorting, the same count within a kernel.
        """
        h, I, E, k = self.hidden_size, self.expert_intermediate_size, self.num_experts, self.experts_per_token
        T = shape.tokens
        routed = T * k
        mid = routed * I / shape.tp
        if shape.ep > 1:  # the rank's whole experts on the pairs routed to them (no TP split of an expert)
            routed = self.rank_routing(T, shape.ep, shape.dp, shape.expert_load_imbalance)[1]
            mid = routed * I
        ops = [
            elementwise(shape, "moe.topk", T * E, 2.0, passes=1.0 + 2.0 * k / E),
            elementwise(shape, "moe.align", routed, 1.0, passes=2.0),
            elementwise(shape, "moe.act", mid, 4.0, passes=3.0),
            elementwise(shape, "moe.reduce", T * h, k, passes=k + 1.0),
        ]
        if compute_dtype in W8A8_DTYPES:  # one read of the bf16 input, a write at 8 bits or less
            ops += [
                elementwise(shape, "moe.quant_input", T * h, 2.0, passes=1.5),
                elementwise(shape, "moe.quant_intermediate", mid, 2.0, passes=1.5),
            ]
        return ops

    def ops(self, shape: StepShape) -> list[Op]:
        h, I, E, k = self.hidden_size, self.expert_intermediate_size, self.num_experts, self.experts_per_token
        T = shape.tokens
        touched, routed_tokens = self.rank_routing(T, shape.ep, shape.dp, shape.expert_load_imbalance)
        expert_tp = 1 if shape.ep > 1 else shape.tp  # FusedMoEParallelConfig.make: tp_size 1 under EP
        expert_weights = shape.wbytes("experts", 3 * h * I / expert_tp) * touched
        compute_dtype = shape.cdtype("experts")
        ops = [
            Op(
                name="moe.router",
                kind="gemm",
                flops=2.0 * T * E * h,
                weight_bytes=E * h * shape.act_bytes,
                activation_bytes=T * (h + E) * shape.act_bytes,
                gemm_m_tokens=T,
            ),
            *self._routing_ops(shape, compute_dtype),
            Op(
                name=f"moe.experts ({touched:.1f} of {E} touched)",
                kind="grouped_gemm",
                flops=2.0 * routed_tokens * 3 * h * I / expert_tp,
                weight_bytes=expert_weights,
                activation_bytes=routed_tokens * (2 * h + 3 * I / expert_tp) * shape.act_bytes,
                gemm_m_tokens=max(1, round(routed_tokens / max(touched, 1.0))),
                compute_dtype=compute_dtype,
                kernels=2,
            ),
            *expert_dispatch(shape, h, k),
        ]
        if self.shared is not None:
            ops += [op.replace(name="shared_" + op.name) for op in self.shared.ops(shape)]
        return ops


FFN = Annotated[DenseMLP | MoE, Field(discriminator="kind")]


# ------------------------------------------------------------------------------------ layer


class DecoderLayer(BaseModel):
    """One decoder layer: a token mixer, an optional FFN and its norms."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mixer: Mixer = Field(description="Token mixer: attention, MLA, Mamba, Mamba-2 or gated delta net.")
    ffn: FFN | None = Field(description="Feed-forward block; None for Mamba-only layers.")
    norm_params: int = Field(description="Parameters of the layer's norms (RMSNorm h each, LayerNorm 2h each).")

    @property
    def kind(self) -> str:
        """Human label: full_attention, sliding_attention(4096), mla, mamba, plus '+moe'."""
        mixer = self.mixer
        label: str = mixer.kind
        if isinstance(mixer, Attention) and mixer.chunk_tokens is not None:
            label = f"chunked_attention({mixer.chunk_tokens})"
        elif isinstance(mixer, Attention):
            label = "full_attention" if mixer.window_tokens is None else f"sliding_attention({mixer.window_tokens})"
        return label + ("+moe" if isinstance(self.ffn, MoE) else "")

    def param_groups(self) -> list[ParamGroup]:
        groups = self.mixer.param_groups() + (self.ffn.param_groups() if self.ffn else [])
        return groups + [ParamGroup(component="norms", other=self.norm_params)]

    @property
    def params(self) -> int:
        return sum(g.total for g in self.param_groups())

    @property
    def inactive_params(self) -> int:
        """Routed-expert params a token does not use: (E - k) x params_per_expert."""
        if isinstance(self.ffn, MoE):
            return (self.ffn.num_experts - self.ffn.experts_per_token) * self.ffn.params_per_expert
        return 0

    def ops(self, shape: StepShape) -> list[Op]:
        h, T = self.mixer.hidden_size, shape.tokens
        ops = [elementwise(shape, "input_norm", T * h, 4.0)]
        ops += self.mixer.ops(shape)
        reduce = allreduce(shape, "tp.allreduce (mixer)", h)
        ops += [reduce] if reduce else []
        if self.ffn is not None:
            ops.append(elementwise(shape, "post_attention_norm", T * h, 4.0))
            ops += self.ffn.ops(shape)
            reduce = allreduce(shape, "tp.allreduce (ffn)", h)
            ops += [reduce] if reduce else []
        if shape.lora_rank is not None:  # vLLM --enable-lora: every wrapped linear runs its shrink and expand
            ops += self.mixer.lora_ops(shape) + (self.ffn.lora_ops(shape) if self.ffn is not None else [])
        return ops

    def lora_linears(self, tp: int) -> list[LoRALinear]:
        """Every linear of the layer vLLM wraps with LoRA (mixer, then FFN), on one rank of ``tp``."""
        return self.mixer._lora_linears(tp) + (self.ffn._lora_linears(tp) if self.ffn is not None else [])


def ceil_div_rank(h: int) -> int:
    """Mamba's dt_rank 'auto': ceil(h / 16)."""
    return math.ceil(h / 16)
