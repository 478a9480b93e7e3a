"""Work of one operation: FLOPs and bytes moved, before any hardware is involved.

The model's layer classes describe themselves as a list of ``Op`` for a given ``StepShape``
(how many tokens and sequences a forward step carries, and how long their contexts are).
``planner.estimate.roofline`` then binds each op to a card: which ceiling (compute, memory,
interconnect, launch overhead) binds and how long it takes.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

OpKind = Literal["gemm", "grouped_gemm", "attention", "elementwise", "scan", "allreduce", "alltoall"]
#: GEMM math dtypes whose inputs are quantized activations (W8A8 / W4A4): each such GEMM is fed by a
#: quantization kernel where the engine does not fuse it into the op before.
W8A8_DTYPES = ("fp8", "int8", "fp4")


#: The kernel classes an ``Op`` may be (``Op.kind``).
OP_KINDS: frozenset[str] = frozenset(get_args(OpKind))


class OpRecord(BaseModel):
    """An ``Op``'s fields, checked, as reports store and read them (``Op`` itself is a plain class: see there)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Operation name, e.g. 'attn.q_proj' or 'moe.experts'.")
    kind: OpKind = Field(description="Kernel class: picks the efficiency factor and the compute dtype.")
    flops: float = Field(ge=0, description="Floating-point operations (a multiply-add is 2), per rank.")
    weight_bytes: float = Field(0.0, ge=0, description="Weight bytes read from HBM, per rank.")
    activation_bytes: float = Field(0.0, ge=0, description="Activation bytes read and written, per rank.")
    kv_bytes: float = Field(0.0, ge=0, description="KV-cache or recurrent-state bytes read and written, per rank.")
    comm_bytes: float = Field(0.0, ge=0, description="Bytes each rank sends in a collective (all-reduce payload).")
    gemm_m_tokens: int | None = Field(
        None, description="Rows of the GEMM (tokens), for the shape-dependent efficiency; None if not a GEMM."
    )
    compute_dtype: str = Field("bf16", description="Dtype of the math units used: bf16, fp16, fp8, int8, fp4, fp32.")
    kernels: int = Field(1, ge=0, description="Kernel launches this op costs.")


class Op:
    """FLOPs and HBM bytes of one kernel-sized operation on one TP rank, for one layer: the fields of
    ``OpRecord`` (same names, defaults and meaning), keyword or positional in that order.

    A plain slotted class, not a pydantic model: the layers build a few dozen of these per forward step, and the
    roofline, the step model and the sweep build steps by the thousand, so construction is on every hot path
    (0.8 us against pydantic's 2.1 us). It makes the checks ``OpRecord`` makes: the kind is one of ``OP_KINDS``,
    the amounts are numbers >= 0 (kept as floats), the GEMM rows and kernels whole numbers (kernels >= 0); a
    violation raises ``ValueError`` naming the op and the field. ``replace`` builds a changed copy; a pydantic
    model with an ``Op`` field validates it from an ``Op`` or its ``OpRecord`` form and dumps the record.
    """

    __slots__ = tuple(OpRecord.model_fields)

    def __init__(
        self,
        name: str,
        kind: OpKind,
        flops: float,
        weight_bytes: float = 0.0,
        activation_bytes: float = 0.0,
        kv_bytes: float = 0.0,
        comm_bytes: float = 0.0,
        gemm_m_tokens: int | None = None,
        compute_dtype: str = "bf16",
        kernels: int = 1,
    ) -> None:
        flops, weight_bytes, activation_bytes = float(flops), float(weight_bytes), float(activation_bytes)
        kv_bytes, comm_bytes = float(kv_bytes), float(comm_bytes)
        if kind not in OP_KINDS or not (
            flops >= 0.0 and weight_bytes >= 0.0 and activation_bytes >= 0.0 and kv_bytes >= 0.0 and comm_bytes >= 0.0
        ):
            raise ValueError(_op_problem(name, kind, flops, weight_bytes, activation_bytes, kv_bytes, comm_bytes))
        self.name, self.kind, self.flops = name, kind, flops
        self.weight_bytes, self.activation_bytes, self.kv_bytes, self.comm_bytes = (
            weight_bytes,
            activation_bytes,
            kv_bytes,
            comm_bytes,
        )
        self.gemm_m_tokens = None if gemm_m_tokens is None else _whole(name, "gemm_m_tokens", gemm_m_tokens)
        self.compute_dtype = compute_dtype
        self.kernels = _whole(name, "kernels", kernels)
        if self.kernels < 0:
            raise ValueError(f"op {name!r}: kernels must be >= 0, got {kernels!r}")

    @property
    def bytes(self) -> float:
        """All HBM bytes moved (weights + activations + KV)."""
        return self.weight_bytes + self.activation_bytes + self.kv_bytes

    def fields(self) -> dict:
        """The op's fields by name (``OpRecord``'s)."""
        return {field: getattr(self, field) for field in Op.__slots__}

    def replace(self, **changes) -> Op:
        """A copy with ``changes`` applied (checked as a new op is)."""
        return Op(**{**self.fields(), **changes})

    def __repr__(self) -> str:
        return f"Op({', '.join(f'{k}={v!r}' for k, v in self.fields().items())})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        """As a pydantic field: an ``Op`` as is, or its ``OpRecord`` form (a dict, or JSON) made into one;
        dumped as the record."""
        from pydantic_core import core_schema

        from_record = core_schema.no_info_after_validator_function(
            lambda record: cls(**dict(record)), handler.generate_schema(OpRecord)
        )
        return core_schema.json_or_python_schema(
            json_schema=from_record,
            python_schema=core_schema.union_schema([core_schema.is_instance_schema(cls), from_record]),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda op: op.fields()),
        )


def _whole(name: str, field: str, value) -> int:
    """``value`` as an int when it is a whole number (an int, or a float like 32.0), else ValueError."""
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(f"op {name!r}: {field} must be a whole number, got {value!r}")


def _op_problem(name, kind, *amounts: float) -> str:
    """The message of an op that fails its checks: an unknown kind, or the first negative (or NaN) amount."""
    if kind not in OP_KINDS:
        return f"op {name!r}: kind must be one of {', '.join(sorted(OP_KINDS))}, got {kind!r}"
    fields = ("flops", "weight_bytes", "activation_bytes", "kv_bytes", "comm_bytes")
    field, value = next((f, v) for f, v in zip(fields, amounts, strict=True) if not v >= 0.0)
    return f"op {name!r}: {field} must be a number >= 0, got {value!r}"


class StepShape(BaseModel):
    """What one forward step processes on one TP rank.

    Prefill of ``num_seqs`` prompts of ``query_len`` tokens: ``context_len == query_len`` and
    ``causal=True``. Decode: ``query_len == 1`` and ``context_len`` the tokens already cached + 1.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_seqs: int = Field(ge=1, description="Sequences in the step (batch).")
    query_len: int = Field(ge=1, description="New tokens per sequence in this step.")
    context_len: int = Field(ge=1, description="Tokens each sequence attends to at the end of the step (cached + new).")
    causal: bool = Field(description="True for prefill: new tokens attend causally among themselves.")
    tp: int = Field(1, ge=1, description="Tensor-parallel degree: linear layers are split over tp ranks.")
    act_bytes: float = Field(2.0, description="Bytes per activation element (2 for bf16/fp16).")
    kv_bytes_per_element: float = Field(2.0, description="Bytes per cached KV element (2 for bf16, 1 for fp8).")
    state_bytes: float = Field(2.0, description="Bytes per recurrent-state element (Mamba), the model dtype.")
    weight_bits: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Storage bits per weight of each component (embedding, attention, mlp, experts, mamba, lm_head), "
            "scales included."
        ),
    )
    compute_dtypes: dict[str, str] = Field(
        default_factory=dict, description="Math dtype of each component's GEMMs (bf16 for weight-only quantization)."
    )
    lora_rank: int | None = Field(
        None, ge=1, description="LoRA on (vLLM --enable-lora): the slots' rank, --max-lora-rank; None: off."
    )
    lora_slots: int = Field(1, ge=1, description="Adapter slots, --max-loras: most adapters one step reads.")
    lora_bytes: float = Field(2.0, description="Bytes per LoRA weight element (--lora-dtype, default the model's).")
    ep: int = Field(
        1,
        ge=1,
        description="Expert-parallel ranks (vLLM --enable-expert-parallel: tp x data-parallel size); each holds whole "
        "routed experts, none split over TP. 1: experts split over the TP ranks.",
    )
    dp: int = Field(
        1, ge=1, description="Attention data-parallel ranks whose tokens every MoE layer serves together (one each)."
    )
    expert_load_imbalance: float = Field(
        1.0, ge=1.0, description="Routed pairs on the busiest EP rank over the mean (1: uniform), with ep > 1."
    )
    all2all_backend: str = Field(
        "allgather_reducescatter",
        description="vLLM --all2all-backend of the dispatch/combine with dp > 1 (EXPERT_DISPATCH holds its bytes).",
    )

    @property
    def active_adapters(self) -> int:
        """Adapters one step reads: min(sequences, --max-loras) (each request may name its own adapter)."""
        return min(self.num_seqs, self.lora_slots)

    @property
    def tokens(self) -> int:
        """Tokens through the linear layers: num_seqs x query_len."""
        return self.num_seqs * self.query_len

    def attended_pairs_per_seq(self) -> float:
        """(query, key) pairs per sequence: causal prefill q(c - q) + q(q + 1)/2; decode c."""
        if self.causal:
            cached = self.context_len - self.query_len
            return self.query_len * cached + self.query_len * (self.query_len + 1) / 2
        return float(self.query_len * self.context_len)

    def wbytes(self, component: str, params: float) -> float:
        """Bytes of ``params`` weights of ``component`` at its storage precision."""
        return params * self.weight_bits.get(component, 16.0) / 8.0

    def cdtype(self, component: str) -> str:
        return self.compute_dtypes.get(component, "bf16")


def gemm(shape: StepShape, name: str, component: str, m: int, n: int, k: int, *, sharded: bool = True) -> Op:
    """A linear layer y[m, n] = x[m, k] @ W[k, n] (+ bias), W split over TP when ``sharded``.

    FLOPs = 2 m n k / tp; bytes = W (at its storage precision) + x + y (activations).
    """
    div = shape.tp if sharded else 1
    n_rank = n / div if sharded else n
    return Op(
        name=name,
        kind="gemm",
        flops=2.0 * m * n_rank * k,
        weight_bytes=shape.wbytes(component, n_rank * k),
        activation_bytes=(m * k + m * n_rank) * shape.act_bytes,
        gemm_m_tokens=m,
        compute_dtype=shape.cdtype(component),
    )


def elementwise(shape: StepShape, name: str, elements: float, flops_per_element: float, passes: float = 2.0) -> Op:
    """A memory-bound elementwise kernel (norm, activation, residual): reads and writes ``passes`` times."""
    return Op(
        name=name,
        kind="elementwise",
        flops=elements * flops_per_element,
        activation_bytes=elements * passes * shape.act_bytes,
    )


def allreduce(shape: StepShape, name: str, hidden_size: int) -> Op | None:
    """TP all-reduce of the hidden states after a row-parallel layer; None when tp == 1."""
    if shape.tp == 1:
        return None
    return Op(name=name, kind="allreduce", flops=0.0, comm_bytes=shape.tokens * hidden_size * shape.act_bytes)


class DispatchRule(BaseModel):
    """What one rank sends in an expert-parallel dispatch and combine of one MoE layer (dp > 1), per token it
    dispatches: ``copies(k, ep)`` hidden vectors, at ``dispatch_bytes`` / the activation bytes per element."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    copies: Literal["ep_peers", "remote_pairs", "remote_ranks"] = Field(
        description="ep_peers: every other rank of the gather gets the token (all-gather, ep - 1); remote_pairs: one "
        "copy per routed expert off this rank (k (ep - 1) / ep); remote_ranks: one per distinct remote rank its k "
        "experts sit on, (ep - 1)(1 - (1 - 1/ep)^k) under uniform routing."
    )
    dispatch_bytes: float | None = Field(
        description="Bytes per element of the dispatched hidden state (1 + 4/128 for fp8 with one fp32 scale per "
        "128 elements); None: the activation dtype."
    )


#: vLLM 0.33 ``--all2all-backend`` choices the planner prices (vllm/config/parallel.py; default
#: allgather_reducescatter, ``AgRsAll2AllManager`` in vllm/distributed/device_communicators/all2all.py: all_gatherv
#: of the ranks' hidden states, reduce_scatterv of the outputs, both in the activation dtype). DeepEP's kernels
#: dispatch fp8 and combine bf16 (DeepEP README: "FP8 dispatching and BF16 combining"); its low-latency kernels
#: send one copy per routed expert, its normal (high-throughput) kernels one per target rank.
EXPERT_DISPATCH: dict[str, DispatchRule] = {
    "allgather_reducescatter": DispatchRule(copies="ep_peers", dispatch_bytes=None),
    "deepep_low_latency": DispatchRule(copies="remote_pairs", dispatch_bytes=1.0 + 4.0 / 128),
    "deepep_high_throughput": DispatchRule(copies="remote_ranks", dispatch_bytes=1.0 + 4.0 / 128),
}


def dispatch_copies(rule: DispatchRule, top_k: int, ep: int) -> float:
    """Hidden vectors one token of this rank sends in a dispatch (and gets back in the combine)."""
    if rule.copies == "ep_peers":
        return float(ep - 1)
    if rule.copies == "remote_pairs":
        return top_k * (ep - 1) / ep
    return (ep - 1) * (1.0 - (1.0 - 1.0 / ep) ** top_k)


def expert_dispatch(shape: StepShape, hidden_size: int, top_k: int) -> list[Op]:
    """The dispatch and combine collectives of one MoE layer under expert parallelism with attention data
    parallelism (ep > 1, dp > 1; vLLM uses no all-to-all with dp 1: ``use_all2all_kernels`` needs dp > 1, and the
    TP all-reduce after the layer sums the ranks' experts instead). ``comm_bytes`` is what this rank sends:
    tokens x copies x hidden x bytes per element (``EXPERT_DISPATCH``); the time is
    ``planner.estimate.step.alltoall_seconds`` over the EP group's link.

    Each rank dispatches T / tp of its DP rank's T tokens: with TP > 1 and DP > 1 vLLM makes the MoE input
    sequence parallel (``ParallelConfig.use_sequence_parallel_moe``: the TP ranks split the replicated tokens
    and gather over the whole EP group), and with TP 1 that is all T over the DP ranks. The TP gather after the
    layer is costed as the TP all-reduce already there (an upper bound: an all-gather moves half its bytes)."""
    if shape.ep == 1 or shape.dp == 1:
        return []
    rule = EXPERT_DISPATCH[shape.all2all_backend]
    vectors = shape.tokens / shape.tp * dispatch_copies(rule, top_k, shape.ep) * hidden_size
    dispatch = rule.dispatch_bytes if rule.dispatch_bytes is not None else shape.act_bytes
    return [
        Op(name="ep.dispatch", kind="alltoall", flops=0.0, comm_bytes=vectors * dispatch),
        Op(name="ep.combine", kind="alltoall", flops=0.0, comm_bytes=vectors * shape.act_bytes),
    ]


#: Name prefix of the LoRA kernels' ops (``lora_op``): the step model keys their adapter reads on it.
LORA_OP_PREFIX = "lora."


class LoRALinear(BaseModel):
    """One LoRA-capable linear layer as vLLM wraps it, and its A / B buffers on one TP rank.

    vLLM 0.33.0 (``vllm/lora/layers/base_linear.py`` ``BaseLinearLayerWithLoRA.create_lora_weights``,
    ``column_parallel_linear.py`` ``MergedColumnParallelLinearWithLoRA.create_lora_weights``,
    ``row_parallel_linear.py`` ``RowParallelLinearWithLoRA``) allocates per slot and per packed slice
    ``A[rank, in]`` and ``B[out, rank]``, sharded as the base layer is:

    * column-parallel (qkv_proj, gate_up_proj, kv_b_proj): A whole on every rank (one per slice), B split
      (``output_size_per_partition``): A = slices x r x in, B = r x sum(out_slice / tp);
    * row-parallel (o_proj, down_proj): A split (``input_size_per_partition``), B whole: A = r x in / tp,
      B = r x out; the expand adds into the partial output before the layer's one all-reduce;
    * replicated (a MoE router, MLA's q_a / kv_a): A = r x in, B = r x out on every rank.

    ``fully_sharded_loras`` (A of column layers split too) is not modelled: vLLM's default is off.
    ``copies`` is how many such linears the op stands for (the routed experts: E of them).
    Worked case, Llama-3.1-8B qkv_proj (h 4096, q 4096, k = v 1024) at TP1, rank 16:
    A = 3 x 16 x 4096 = 196,608, B = 16 x 6,144 = 98,304 elements per slot.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="vLLM's module name: qkv_proj, o_proj, gate_up_proj, down_proj, experts ...")
    parallel: Literal["column", "row", "replicated"] = Field(description="How the base layer is split over TP.")
    in_features: int = Field(ge=1, description="Input width of the whole (unsharded) layer, elements.")
    out_slices: tuple[float, ...] = Field(
        description="Output width of each packed slice on one rank (column: already / tp), elements."
    )
    copies: int = Field(1, ge=1, description="Identical linears this one stands for (routed experts: E).")

    def a_elements(self, rank: int, tp: int) -> float:
        """A's elements per slot on one rank (all copies)."""
        width = self.in_features / tp if self.parallel == "row" else self.in_features
        return self.copies * len(self.out_slices) * rank * width

    def b_elements(self, rank: int, tp: int) -> float:
        """B's elements per slot on one rank (all copies): r x the rank's output width."""
        return self.copies * rank * sum(self.out_slices)


def lora_op(shape: StepShape, linear: LoRALinear, routed: tuple[int, float] | None = None) -> Op:
    """The punica shrink (x A^T) and expand (+= (x A^T) B^T) kernels of one LoRA linear in one step.

    Each token multiplies by its own adapter's A and B: FLOPs = 2 x rows x (A + B elements of one copy),
    rows = T tokens (T x k for routed experts, ``routed = (k, experts touched)``). Bytes: the active
    adapters' A and B (min(sequences, --max-loras) adapters; of routed experts only the touched ones), the
    input rows, the fp32 [rows, r] intermediate per slice written and read back, and the output read and
    written (the expand adds in place).
    Worked case, Llama-3.1-8B qkv_proj, rank 16, TP1, decode of 4 sequences with 4 slots: FLOPs
    2 x 4 x 294,912 = 2.36 M; adapter reads 4 x 294,912 x 2 B = 2.36 MB.
    """
    rank = shape.lora_rank or 0
    per_copy = (linear.a_elements(rank, shape.tp) + linear.b_elements(rank, shape.tp)) / linear.copies
    k, touched = routed if routed is not None else (1, float(linear.copies))
    rows = shape.tokens * k
    in_width = linear.in_features / shape.tp if linear.parallel == "row" else linear.in_features
    slices = len(linear.out_slices)
    return Op(
        name=f"{LORA_OP_PREFIX}{linear.name} (shrink+expand)",
        kind="gemm",
        flops=2.0 * rows * per_copy,
        weight_bytes=shape.active_adapters * per_copy * touched * shape.lora_bytes,
        activation_bytes=rows * (in_width + 2 * sum(linear.out_slices)) * shape.act_bytes
        + 2 * rows * slices * rank * 4.0,
        gemm_m_tokens=rows,
        kernels=2,
    )
