"""Latency: how many seconds to the first token, per output token, and per request.

From the roofline of the two stages (``planner.estimate.roofline``):

    TTFT  = prefill of the batch's prompts, in ceil(batch x input / max_num_batched_tokens) steps,
            each paying the step overhead
    TPOT  = one decode step at the batch's mean context (input + output / 2)
    E2E   = TTFT + (output - 1) x TPOT
    throughput = batch x output / E2E tokens/s;  requests/s = batch / E2E

That is a static batch (all requests start together), the setting of the published static-batch
tables; a served load with arrivals and queueing is the simulator's job (``planner.serve``), which
uses ``StepTimeModel`` below for each step's mix of prefill chunks and decodes.

Every figure carries its kind: ``bound`` (pure roofline, no overheads), ``estimate`` (factors
fitted to public measurements) or ``calibrated`` (factors measured on this card).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.estimate.memory import plan_memory, resolve
from planner.estimate.roofline import (
    PredictionKind, efficiency_for, gemm_fraction, layer_groups, model_ops, prediction_kind, roofline, step_shape,
)
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.units import cdiv


class LatencyEstimate(BaseModel):
    """TTFT, TPOT and throughput of one static batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_size: int = Field(description="Requests in the batch.")
    input_len: int = Field(description="Prompt tokens per request.")
    output_len: int = Field(description="Generated tokens per request.")
    ttft_seconds: float = Field(description="Time to the first token of the batch (all prompts prefilled), seconds.")
    tpot_seconds: float = Field(description="Time per output token after the first (one decode step), seconds.")
    decode_context_len: int = Field(description="Context of the decode step TPOT is taken at: input + output / 2, tokens.")
    e2e_seconds: float = Field(description="TTFT + (output_len - 1) x TPOT, seconds.")
    throughput_tokens_per_s: float = Field(description="Output tokens per second of the whole deployment (all replicas).")
    throughput_tokens_per_s_per_gpu: float = Field(description="Output tokens per second per GPU.")
    requests_per_s: float = Field(description="Completed requests per second of the whole deployment.")
    prefill_steps: int = Field(description="Steps the prefill takes under the max_num_batched_tokens budget.")
    prefill_bound: str = Field(description="Ceiling that binds the prefill.")
    decode_bound: str = Field(description="Ceiling that binds the decode step.")
    kind: PredictionKind = Field(description="bound, estimate or calibrated.")
    fits_in_kv_cache: bool | None = Field(None, description="Whether batch x (input + output) tokens fit the planned KV cache.")


def decode_context_len(input_len: int, output_len: int) -> int:
    """The mean context of a request's decode steps: input + output / 2 (at least one token more)."""
    return input_len + max(1, output_len // 2)


def estimate_latency(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    batch_size: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    efficiency: Efficiency | None = None,
    check_memory: bool = True,
) -> LatencyEstimate:
    """TTFT, TPOT and throughput for a static batch (defaults from ``sc.workload``)."""
    wl = sc.workload
    B, n_in, n_out = batch_size or wl.batch_size, input_len or wl.input_len, output_len or wl.output_len
    eff = efficiency or efficiency_for(hw)
    res = resolve(model, hw, sc)
    steps = cdiv(B * n_in, res.max_num_batched_tokens) if sc.enable_chunked_prefill else B
    pre = roofline(model, hw, sc, "prefill", B, n_in, eff)
    ttft = pre.total_seconds + (steps - 1) * eff.step_overhead_seconds
    decode_context = decode_context_len(n_in, n_out)
    dec = roofline(model, hw, sc, "decode", B, decode_context, eff)
    tpot = dec.total_seconds
    e2e = ttft + (n_out - 1) * tpot
    replicas = sc.replicas
    tokens_per_s = B * n_out / e2e * replicas
    fits = None
    if check_memory:
        plan = plan_memory(model, hw, sc, suggest=False)
        fits = plan.fits and plan.kv_cache_tokens >= B * (n_in + n_out)
    return LatencyEstimate(
        batch_size=B, input_len=n_in, output_len=n_out, ttft_seconds=ttft, tpot_seconds=tpot,
        decode_context_len=decode_context, e2e_seconds=e2e,
        throughput_tokens_per_s=tokens_per_s, throughput_tokens_per_s_per_gpu=tokens_per_s / sc.total_gpus,
        requests_per_s=B / e2e * replicas, prefill_steps=steps, prefill_bound=pre.bound, decode_bound=dec.bound,
        kind=prediction_kind(eff), fits_in_kv_cache=fits,
    )


class StepWork(BaseModel):
    """Hardware-free work of one engine step, linear in the step's counts (one TP rank).

    Coefficients come from the same layer ops the roofline uses, evaluated once per distinct layer
    at a one-token decode shape; ``StepTimeModel`` binds them to a card, and the vectorized sweep
    (``planner.estimate.sweep``) binds them to many cards at once.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(description="Tensor-parallel size the work is split over.")
    compute_dtype: str = Field(description="Math dtype of the linear layers (before the card's fallback).")
    lin_flops_per_token: float = Field(description="Linear-layer FLOPs per token.")
    lin_act_per_token: float = Field(description="Activation bytes per token (linear layers, norms, elementwise).")
    lin_weight_bytes: float = Field(description="Dense weight bytes read once per step (attention, dense MLP, shared experts).")
    moe: list[tuple[int, int, float, float, float]] = Field(
        description="Per routing (experts E, top-k): bytes of one expert, FLOPs per token and activation bytes per token, "
        "each summed over the layers with that routing. Bound on their own, as GEMMs of T x k / touched rows.")
    attn_flops_per_pair: float = Field(description="Attention FLOPs per (query, key) pair, all layers.")
    kv_bytes_per_token: float = Field(description="KV bytes read per cached token attended, all layers.")
    kv_write_per_token: float = Field(description="KV bytes written per new token, all layers.")
    scan_flops_per_token: float = Field(description="Selective-scan FLOPs per token (Mamba layers).")
    state_bytes_per_seq: float = Field(description="Recurrent-state bytes read and written per sequence per step.")
    head_flops_per_seq: float = Field(description="lm_head + sampler FLOPs per sampled sequence.")
    head_weight_bytes: float = Field(description="lm_head weight bytes read once per step.")
    comm_bytes_per_token: float = Field(description="All-reduce payload bytes per token, all layers.")
    allreduces: int = Field(description="All-reduce calls per step.")
    kernels: int = Field(description="Kernel launches per step.")


def step_work(model: ModelSpec, res) -> StepWork:
    """Sum every distinct layer's ops at a one-token decode shape, times its count."""
    one = step_shape(model, res, "decode", 1, 1)
    acc = dict(lin_flops=0.0, lin_act=0.0, lin_weights=0.0, pair=0.0, kv=0.0, kv_write=0.0, scan=0.0, state=0.0, comm=0.0)
    moe: dict[tuple[int, int], list[float]] = {}
    kernels = allreduces = 0
    compute_dtype = "bf16"
    for _, idx in layer_groups(model):
        layer, n = model.layers[idx[0]], len(idx)
        for op in layer.ops(one):
            kernels += op.kernels * n
            if op.kind == "grouped_gemm":
                row = moe.setdefault((layer.ffn.num_experts, layer.ffn.experts_per_token), [0.0, 0.0, 0.0])
                row[0] += n * op.weight_bytes / layer.ffn.expected_distinct_experts(1)
                row[1] += n * op.flops
                row[2] += n * op.activation_bytes
            elif op.kind == "gemm":
                acc["lin_flops"] += op.flops * n
                acc["lin_act"] += op.activation_bytes * n
                acc["lin_weights"] += op.weight_bytes * n
                compute_dtype = op.compute_dtype
            elif op.kind == "attention":
                acc["pair"] += op.flops * n
                acc["kv"] += op.kv_bytes * n
            elif op.kind == "scan":  # recurrent state: read and written once per sequence per step
                acc["scan"] += op.flops * n
                acc["state"] += op.kv_bytes * n
                acc["lin_act"] += op.activation_bytes * n
            elif op.kind == "allreduce":
                acc["comm"] += op.comm_bytes * n
                allreduces += n
            else:
                acc["lin_act"] += op.activation_bytes * n
                acc["kv_write"] += op.kv_bytes * n
    head = model_ops(model, one)
    return StepWork(
        tp=res.tp, compute_dtype=compute_dtype, lin_flops_per_token=acc["lin_flops"], lin_act_per_token=acc["lin_act"],
        lin_weight_bytes=acc["lin_weights"], moe=[(E, k, *row) for (E, k), row in moe.items()],
        attn_flops_per_pair=acc["pair"], kv_bytes_per_token=acc["kv"], kv_write_per_token=acc["kv_write"],
        scan_flops_per_token=acc["scan"], state_bytes_per_seq=acc["state"],
        head_flops_per_seq=sum(op.flops for op in head), head_weight_bytes=sum(op.weight_bytes for op in head),
        comm_bytes_per_token=acc["comm"], allreduces=allreduces, kernels=kernels + sum(op.kernels for op in head),
    )


class StepTimeModel:
    """Seconds of one engine step with any mix of prefill chunks and decodes (for the simulator).

    The step's work (``StepWork``) is linear in four counts; it is bound to the card op class by
    op class, as the roofline binds single ops:

    * dense linear layers: FLOPs and activation bytes per token, weight bytes per step, bound as
      GEMMs with M = tokens; routed experts likewise but bound on their own (weights of the experts
      that many tokens touch), since they are often memory-bound while the dense part is not;
    * attention: FLOPs per (query, key) pair, KV bytes per cached token read, at the attention
      efficiency; recurrent state per sequence for Mamba layers;
    * lm_head and sampler: weights once, FLOPs per sequence that samples a token;
    * TP all-reduce: payload per token; plus launch costs (CUDA graphs for pure-decode steps when
      the engine uses them) and the fixed step overhead.

    Sliding-window layers are costed as full attention over the whole context here (an upper
    bound above the window); the per-op roofline caps them. ``step_seconds`` costs a few
    microseconds, so 10,000 simulated requests stay well under a second.
    """

    def __init__(self, model: ModelSpec, hw: HardwareProfile, sc: Scenario, efficiency: Efficiency | None = None):
        self.eff = efficiency or efficiency_for(hw)
        self.kind = prediction_kind(self.eff)
        self.hw, self.sc = hw, sc
        self.graphs = sc.engine == "cuda-graphs"
        self.work = w = step_work(model, resolve(model, hw, sc))
        self.tp = w.tp
        self.peak = hw.peak_flops_per_s[hw.compute_dtype_for(w.compute_dtype) or "bf16"]
        self.bw = hw.hbm_bandwidth_bytes_per_s
        self.link = hw.unidirectional_interconnect_bytes_per_s or 32e9

    def step_seconds(self, *, prefill_tokens: int, prefill_attention_pairs: float, decode_seqs: int, decode_kv_tokens: int) -> float:
        """Seconds of one step: ``prefill_tokens`` prompt tokens (with ``prefill_attention_pairs``
        causal (query, key) pairs) plus ``decode_seqs`` decodes over ``decode_kv_tokens`` cached tokens."""
        eff, w = self.eff, self.work
        T = prefill_tokens + decode_seqs
        if T <= 0:
            return 0.0
        frac = gemm_fraction(eff, T)
        t_lin = max(T * w.lin_flops_per_token / (self.peak * frac),
                    (w.lin_weight_bytes + T * w.lin_act_per_token) / (self.bw * eff.bandwidth_fraction))
        for E, k, per_expert, flops, act in w.moe:
            touched = E * (1.0 - (1.0 - k / E) ** T)
            rows = max(1, round(T * k / max(touched, 1.0)))  # tokens per touched expert: the GEMMs' M
            g = eff.grouped_gemm_fraction
            t_lin += max(T * flops / (self.peak * gemm_fraction(eff, rows) * g),
                         (per_expert * touched + T * act) / (self.bw * eff.bandwidth_fraction * g))
        pairs = prefill_attention_pairs + decode_kv_tokens
        kv_read = (decode_kv_tokens + prefill_tokens) * w.kv_bytes_per_token + T * w.kv_write_per_token
        t_attn = max(pairs * w.attn_flops_per_pair / (self.peak * eff.attention_fraction),
                     kv_read / (self.bw * eff.attention_fraction))
        sampled = decode_seqs + (1 if prefill_tokens else 0)
        t_scan = 0.0
        if w.state_bytes_per_seq:
            t_scan = max(T * w.scan_flops_per_token / (self.peak * eff.attention_fraction),
                         sampled * w.state_bytes_per_seq / (self.bw * eff.bandwidth_fraction))
        t_head = max(w.head_weight_bytes / (self.bw * eff.bandwidth_fraction),
                     sampled * w.head_flops_per_seq / (self.peak * gemm_fraction(eff, sampled)))
        t_comm = 0.0
        if self.tp > 1:
            t_comm = w.allreduces * eff.allreduce_latency_seconds + 2 * (self.tp - 1) / self.tp * T * w.comm_bytes_per_token / (
                self.link * eff.allreduce_fraction)
        graphs = self.graphs and prefill_tokens == 0
        launch = w.kernels * (eff.graph_launch_seconds if graphs else eff.kernel_launch_seconds)
        return max(t_lin + t_attn + t_scan + t_head + t_comm, launch) + eff.step_overhead_seconds
