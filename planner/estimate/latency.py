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
    PredictionKind, efficiency_for, gemm_fraction, model_ops, prediction_kind, roofline, step_shape,
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
    e2e_seconds: float = Field(description="TTFT + (output_len - 1) x TPOT, seconds.")
    throughput_tokens_per_s: float = Field(description="Output tokens per second of the whole deployment (all replicas).")
    throughput_tokens_per_s_per_gpu: float = Field(description="Output tokens per second per GPU.")
    requests_per_s: float = Field(description="Completed requests per second of the whole deployment.")
    prefill_steps: int = Field(description="Steps the prefill takes under the max_num_batched_tokens budget.")
    prefill_bound: str = Field(description="Ceiling that binds the prefill.")
    decode_bound: str = Field(description="Ceiling that binds the decode step.")
    kind: PredictionKind = Field(description="bound, estimate or calibrated.")
    fits_in_kv_cache: bool | None = Field(None, description="Whether batch x (input + output) tokens fit the planned KV cache.")


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
    dec = roofline(model, hw, sc, "decode", B, n_in + max(1, n_out // 2), eff)
    tpot = dec.total_seconds
    e2e = ttft + (n_out - 1) * tpot
    replicas = sc.replicas
    tokens_per_s = B * n_out / e2e * replicas
    fits = None
    if check_memory:
        plan = plan_memory(model, hw, sc, suggest=False)
        fits = plan.fits and plan.kv_cache_tokens >= B * (n_in + n_out)
    return LatencyEstimate(
        batch_size=B, input_len=n_in, output_len=n_out, ttft_seconds=ttft, tpot_seconds=tpot, e2e_seconds=e2e,
        throughput_tokens_per_s=tokens_per_s, throughput_tokens_per_s_per_gpu=tokens_per_s / sc.total_gpus,
        requests_per_s=B / e2e * replicas, prefill_steps=steps, prefill_bound=pre.bound, decode_bound=dec.bound,
        kind=prediction_kind(eff), fits_in_kv_cache=fits,
    )


class StepTimeModel:
    """Seconds of one engine step with any mix of prefill chunks and decodes (for the simulator).

    The step's work is linear in four counts, with coefficients taken from the same layer ops the
    roofline uses (evaluated once at unit shapes), then bound to the card op class by op class:

    * linear layers: FLOPs and activation bytes per token, weight bytes per step (MoE: experts
      touched by that many tokens), bound as GEMMs with M = tokens;
    * attention: FLOPs per (query, key) pair, KV bytes per cached token read, bound at the
      attention efficiency;
    * lm_head and sampler: per sequence that samples a token;
    * TP all-reduce: payload per token; plus launch costs (CUDA graphs for pure-decode steps when
      the engine uses them) and the fixed step overhead.

    ``step_seconds`` costs a few microseconds, so 10,000 simulated requests stay well under a second.
    """

    def __init__(self, model: ModelSpec, hw: HardwareProfile, sc: Scenario, efficiency: Efficiency | None = None):
        self.eff = eff = efficiency or efficiency_for(hw)
        self.kind = prediction_kind(eff)
        self.hw, self.sc = hw, sc
        res = resolve(model, hw, sc)
        self.tp = res.tp
        self.graphs = sc.engine == "cuda-graphs"
        one = step_shape(model, res, "decode", 1, 1)
        lin_flops = lin_act = lin_weights = attn_pair_flops = kv_per_token = kv_write = comm = 0.0
        scan_flops = state_per_seq = 0.0
        moe: dict[tuple[int, int], float] = {}
        kernels = 0
        self.compute_dtype = "bf16"
        for layer in model.layers:
            for op in layer.ops(one):
                kernels += op.kernels
                if op.kind == "gemm":
                    lin_flops += op.flops
                    lin_act += op.activation_bytes
                    if op.name.startswith("moe.experts"):
                        key = (layer.ffn.num_experts, layer.ffn.experts_per_token)
                        moe[key] = moe.get(key, 0.0) + op.weight_bytes / layer.ffn.expected_distinct_experts(1)
                    else:
                        lin_weights += op.weight_bytes
                    self.compute_dtype = op.compute_dtype
                elif op.kind == "attention":
                    attn_pair_flops += op.flops
                    kv_per_token += op.kv_bytes
                elif op.kind == "scan":  # recurrent state: read and written once per sequence per step
                    scan_flops += op.flops
                    state_per_seq += op.kv_bytes
                    lin_act += op.activation_bytes
                elif op.kind == "allreduce":
                    comm += op.comm_bytes
                else:
                    lin_act += op.activation_bytes
                    kv_write += op.kv_bytes
        # (E, k, bytes of one expert summed over the layers that have this routing)
        self._moe = [(E, k, per) for (E, k), per in moe.items()]
        self.kv_write_per_token = kv_write
        self.scan_flops_per_token, self.state_bytes_per_seq = scan_flops, state_per_seq
        head = model_ops(model, one)
        self.lin_flops_per_token, self.lin_act_per_token, self.lin_weight_bytes = lin_flops, lin_act, lin_weights
        self.attn_flops_per_pair, self.kv_bytes_per_token = attn_pair_flops, kv_per_token
        self.comm_bytes_per_token = comm
        self.allreduces = sum(1 for layer in model.layers for op in layer.ops(one) if op.kind == "allreduce")
        self.head_ops = head
        self.kernels = kernels + sum(op.kernels for op in head)
        peak_dtype = hw.compute_dtype_for(self.compute_dtype) or "bf16"
        self.peak = hw.peak_flops_per_s[peak_dtype]
        self.bw = hw.hbm_bandwidth_bytes_per_s
        self.link = hw.unidirectional_interconnect_bytes_per_s or 32e9
        self.head_flops_per_seq = sum(op.flops for op in head)
        self.head_weight_seconds = sum(op.weight_bytes for op in head) / (self.bw * eff.bandwidth_fraction)

    def _gemm_fraction(self, m: int) -> float:
        return gemm_fraction(self.eff, m)

    def step_seconds(self, *, prefill_tokens: int, prefill_attention_pairs: float, decode_seqs: int, decode_kv_tokens: int) -> float:
        """Seconds of one step: ``prefill_tokens`` prompt tokens (with ``prefill_attention_pairs``
        causal (query, key) pairs) plus ``decode_seqs`` decodes over ``decode_kv_tokens`` cached tokens."""
        eff = self.eff
        T = prefill_tokens + decode_seqs
        if T <= 0:
            return 0.0
        weights = self.lin_weight_bytes + sum(per * E * (1.0 - (1.0 - k / E) ** T) for E, k, per in self._moe)
        t_lin = max(T * self.lin_flops_per_token / (self.peak * self._gemm_fraction(T)),
                    (weights + T * self.lin_act_per_token) / (self.bw * eff.bandwidth_fraction))
        pairs = prefill_attention_pairs + decode_kv_tokens
        kv_read = (decode_kv_tokens + prefill_tokens) * self.kv_bytes_per_token + T * self.kv_write_per_token
        t_attn = max(pairs * self.attn_flops_per_pair / (self.peak * eff.attention_fraction),
                     kv_read / (self.bw * eff.attention_fraction))
        sampled = decode_seqs + (1 if prefill_tokens else 0)
        t_scan = 0.0
        if self.state_bytes_per_seq:
            t_scan = max(T * self.scan_flops_per_token / (self.peak * eff.attention_fraction),
                         sampled * self.state_bytes_per_seq / (self.bw * eff.bandwidth_fraction))
        t_head = max(self.head_weight_seconds, sampled * self.head_flops_per_seq / (self.peak * self._gemm_fraction(sampled)))
        t_comm = 0.0
        if self.tp > 1:
            t_comm = self.allreduces * eff.allreduce_latency_seconds + 2 * (self.tp - 1) / self.tp * T * self.comm_bytes_per_token / (
                self.link * eff.allreduce_fraction)
        graphs = self.graphs and prefill_tokens == 0
        launch = self.kernels * (eff.graph_launch_seconds if graphs else eff.kernel_launch_seconds)
        return max(t_lin + t_attn + t_scan + t_head + t_comm, launch) + eff.step_overhead_seconds
