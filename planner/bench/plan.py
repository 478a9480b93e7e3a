"""What each check runs, and what the planner predicts for it (no torch here).

A check is planned before anything is timed: its shape, and the planner's own ``Op`` list for that
shape, built by the same code the roofline uses (``DecoderLayer.ops``, ``gemm``, ``model_ops``).
The prediction is then ``sum(count x bind(op, hw, eff, tp=1, graphs).seconds)`` (plus the step
overhead for a whole-model forward, as ``roofline()`` adds it), so a check's predicted seconds are
the planner's, never a separate formula. The benchmark side (``planner.bench.suite``) runs the
same shape in torch and fills in the measurement.

Shapes use the benchmark's dtype for every component (``bench_shape``): the suite multiplies in
that dtype, so the ops count its bytes, not a quantized checkpoint's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.bench.report import Detail, OpCount
from planner.efficiency import Efficiency
from planner.estimate import step
from planner.estimate.roofline import bind, layer_groups, model_ops
from planner.hardware import Dtype, HardwareProfile
from planner.model.layers import Attention, DecoderLayer, DenseMLP, MoE
from planner.model.ops import Op, StepShape, gemm
from planner.model.quantization import COMPONENTS
from planner.model.spec import ModelSpec, dtype_bytes

#: Components a benchmark shape sets explicitly (quantization's, plus the MoE router).
_BENCH_COMPONENTS = (*COMPONENTS, "router")


@dataclass
class CheckPlan:
    """One check before it runs: name, shape, the planner's ops, and how it is bound."""

    benchmark: str
    name: str
    shape: dict[str, Detail]
    ops: list[OpCount]
    graphs: bool = False
    step_overhead: bool = False
    #: Parts of a derived check (names of other checks whose measurements it sums, with counts).
    parts: list[tuple[str, int]] = field(default_factory=list)
    #: Filled by the planner when a check cannot run here at all (status 'unavailable').
    unavailable: str | None = None

    def count(self, key: str, default: int | None = None) -> int:
        """A whole number of the shape (batch, m, bytes, ...), as the planner wrote it; ``default`` when absent."""
        value = self.shape.get(key, default)
        if not isinstance(value, int | float):
            raise TypeError(f"check {self.name!r}: shape[{key!r}] is {value!r}, not a number")
        return int(value)


def bench_shape(stage: str, batch: int, seq_len: int, dtype: str) -> StepShape:
    """StepShape of a benchmark step: every component stored and multiplied in ``dtype``, tp = 1.

    Prefill: ``batch`` prompts of ``seq_len`` tokens (causal). Decode: one new token for each of
    ``batch`` sequences whose context is ``seq_len`` tokens.
    """
    elt = dtype_bytes(dtype)
    return StepShape(
        num_seqs=batch,
        query_len=seq_len if stage == "prefill" else 1,
        context_len=seq_len,
        causal=stage == "prefill",
        tp=1,
        act_bytes=elt,
        kv_bytes_per_element=elt,
        state_bytes=elt,
        weight_bits={c: 8 * elt for c in _BENCH_COMPONENTS},
        compute_dtypes={c: dtype for c in _BENCH_COMPONENTS},
    )


def predict(plan: CheckPlan, hw: HardwareProfile, eff: Efficiency) -> tuple[float, str | None, Dtype | None]:
    """(seconds, binding ceiling of the largest op, math dtype of the largest op) with the planner's bind."""
    total, launches, best, bound, dtype = 0.0, 0.0, -1.0, None, None
    for oc in plan.ops:
        t, b, _, _, launch, cdt = bind(oc.op, hw, eff, 1, plan.graphs)
        total += oc.count * t
        launches += oc.count * launch
        if oc.count * t > best:
            best, bound, dtype = oc.count * t, b, cdt
    total = float(step.gpu_step_seconds(total, launches))
    if plan.step_overhead:  # a synchronous step's host work, as the roofline adds it (step.host_seconds)
        total += float(step.host_seconds(eff, float(plan.count("batch", 1))))
    return total, bound, dtype


def op_totals(plan: CheckPlan) -> tuple[float, float]:
    """(FLOPs, bytes) the check's ops do in all, for achieved FLOP/s and bytes/s."""
    flops = sum(oc.count * oc.op.flops for oc in plan.ops)
    nbytes = sum(oc.count * oc.op.bytes for oc in plan.ops)
    return flops, nbytes


# ------------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class GemmShape:
    """A linear layer of the model: y[M, n] = x[M, k] @ W[k, n]."""

    name: str
    component: str
    n: int
    k: int


def layer_gemms(layer: DecoderLayer) -> list[GemmShape]:
    """The distinct linear layers of one decoder layer (attention q/k/o, MLP or one expert's)."""
    out: list[GemmShape] = []
    mixer = layer.mixer
    if isinstance(mixer, Attention):
        h, H, K, d = mixer.hidden_size, mixer.num_heads, mixer.num_kv_heads, mixer.head_dim
        out += [
            GemmShape("attn.q_proj", "attention", H * d, h),
            GemmShape("attn.k_proj", "attention", K * d, h),
            GemmShape("attn.o_proj", "attention", h, H * d),
        ]
    ffn = layer.ffn
    if isinstance(ffn, DenseMLP):
        up = 2 * ffn.intermediate_size if ffn.gated else ffn.intermediate_size
        out += [
            GemmShape("mlp.gate_up_proj" if ffn.gated else "mlp.up_proj", ffn.component, up, ffn.hidden_size),
            GemmShape("mlp.down_proj", ffn.component, ffn.hidden_size, ffn.intermediate_size),
        ]
    elif isinstance(ffn, MoE):
        out += [
            GemmShape("moe.router", "router", ffn.num_experts, ffn.hidden_size),
            GemmShape(
                "moe.expert.gate_up_proj (one expert)", "experts", 2 * ffn.expert_intermediate_size, ffn.hidden_size
            ),
            GemmShape("moe.expert.down_proj (one expert)", "experts", ffn.hidden_size, ffn.expert_intermediate_size),
        ]
        if ffn.shared is not None:
            out += [GemmShape("moe.shared.gate_up_proj", "mlp", 2 * ffn.shared_intermediate_size, ffn.hidden_size)]
    seen: set[tuple[int, int]] = set()
    unique = []
    for g in out:
        if (g.n, g.k) not in seen:
            seen.add((g.n, g.k))
            unique.append(g)
    return unique


def gemm_op(g: GemmShape, m: int, dtype: str) -> Op:
    """The planner's op for ``g`` with ``m`` rows, via ``planner.model.ops.gemm``."""
    return gemm(bench_shape("decode", m, 1, dtype), g.name, g.component, m, g.n, g.k)


def first_attention(model: ModelSpec) -> Attention | None:
    return next((layer.mixer for layer in model.layers if isinstance(layer.mixer, Attention)), None)


def attention_decode_ops(attn: Attention, batch: int, context: int, dtype: str) -> list[Op]:
    """The attention kernel's ops (score, softmax, value) of one decode step, from ``Attention.ops``."""
    shape = bench_shape("decode", batch, context, dtype)
    return [op for op in attn.ops(shape) if op.kind == "attention"]


def layer_ops(layer: DecoderLayer, stage: str, batch: int, seq_len: int, dtype: str) -> list[Op]:
    return layer.ops(bench_shape(stage, batch, seq_len, dtype))


def forward_plans(
    model: ModelSpec, stage: str, batch: int, seq_len: int, dtype: str
) -> tuple[list[CheckPlan], CheckPlan, CheckPlan]:
    """Per distinct layer group one layer check, a head check (embedding, final norm, lm_head,
    sampler) and the derived whole-model forward (groups x their layer count + head + step overhead)."""
    shape = bench_shape(stage, batch, seq_len, dtype)
    what = f"B={batch} x {seq_len} tokens" if stage == "prefill" else f"B={batch}, context {seq_len}"
    layer_plans, parts, all_ops = [], [], []
    for _group, idx in layer_groups(model):
        layer = model.layers[idx[0]]
        ops = layer.ops(shape)
        name = f"layer {idx[0]} ({layer.kind}) {stage} {what}"
        plan = CheckPlan(
            "layer_forward",
            name,
            {
                "stage": stage,
                "batch": batch,
                "seq_len": seq_len,
                "layer": idx[0],
                "layers_like_it": len(idx),
                "dtype": dtype,
            },
            [OpCount(op=op, count=1) for op in ops],
        )
        if not isinstance(layer.mixer, Attention):
            plan.unavailable = (
                f"the plain-torch layer covers attention mixers; this layer's mixer is {layer.mixer.kind}"
            )
        layer_plans.append(plan)
        parts.append((name, len(idx)))
        all_ops += [OpCount(op=op, count=len(idx)) for op in ops]
    head_ops = [OpCount(op=op, count=1) for op in model_ops(model, shape)]
    head = CheckPlan(
        "layer_forward",
        f"head (embedding, norm, lm_head, sampler) {stage} {what}",
        {"stage": stage, "batch": batch, "seq_len": seq_len, "vocab": model.padded_vocab_size, "dtype": dtype},
        head_ops,
    )
    parts.append((head.name, 1))
    whole = CheckPlan(
        "layer_forward",
        f"model forward {stage} {what} (scaled from layers)",
        {"stage": stage, "batch": batch, "seq_len": seq_len, "layers": model.num_layers, "dtype": dtype},
        all_ops + head_ops,
        step_overhead=True,
        parts=parts,
    )
    return layer_plans, head, whole


# ------------------------------------------------------------------------------ scaling


def scale_model(model: ModelSpec, scale: float) -> ModelSpec:
    """The model with widths and head counts multiplied by ``scale`` (layers, head_dim, vocab kept).

    Used only when asked (``models_scale``), to fit a big model's layer on a small device; the
    result is labelled in its name. Heads round to keep query heads a multiple of KV heads.
    """
    if scale == 1.0:
        return model
    if not 0 < scale <= 1:
        raise ValueError(f"models_scale must be in (0, 1], got {scale}")

    def s(x: int, lo: int = 1) -> int:
        return max(lo, round(x * scale))

    h = s(model.hidden_size, 8)
    layers = []
    for layer in model.layers:
        mixer, ffn = layer.mixer, layer.ffn
        upd: dict = {"hidden_size": h}
        if isinstance(mixer, Attention):
            kv = s(mixer.num_kv_heads)
            group = max(1, mixer.num_heads // mixer.num_kv_heads)
            upd.update(num_kv_heads=kv, num_heads=kv * group)
        elif hasattr(mixer, "num_heads"):
            upd.update(num_heads=s(mixer.num_heads))
        if hasattr(mixer, "d_inner"):
            upd.update(d_inner=s(mixer.d_inner, 8))
        new_mixer = mixer.model_copy(update=upd)
        new_ffn = ffn
        if isinstance(ffn, DenseMLP):
            new_ffn = ffn.model_copy(update={"hidden_size": h, "intermediate_size": s(ffn.intermediate_size, 8)})
        elif isinstance(ffn, MoE):
            new_ffn = ffn.model_copy(
                update={
                    "hidden_size": h,
                    "expert_intermediate_size": s(ffn.expert_intermediate_size, 8),
                    "shared_intermediate_size": s(ffn.shared_intermediate_size, 8)
                    if ffn.shared_intermediate_size
                    else 0,
                }
            )
        layers.append(
            layer.model_copy(
                update={
                    "mixer": new_mixer,
                    "ffn": new_ffn,
                    "norm_params": round(layer.norm_params * h / model.hidden_size),
                }
            )
        )
    emb = h if model.embedding_dim == model.hidden_size else s(model.embedding_dim, 8)
    return model.model_copy(
        update={
            "name": f"{model.name} (dims x{scale:g})",
            "hidden_size": h,
            "embedding_dim": emb,
            "layers": tuple(layers),
            "final_norm_params": round(model.final_norm_params * h / model.hidden_size),
        }
    )
