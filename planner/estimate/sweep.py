"""Vectorized what-if sweep: decode speed and fit over (model, GPU, TP, weight dtype, batch, context).

The same step model as ``StepTimeModel`` (its hardware-free ``StepWork`` per model, TP and dtype),
evaluated with numpy over every card, batch size and context length at once, so a million points
take about a second. A point "fits" when batch x (KV bytes of one sequence at that context, sliding
layers capped at their window) fits the KV budget of the memory plan (block rounding ignored:
within one block per sequence of ``plan_memory``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.estimate.latency import StepWork, step_work
from planner.estimate.memory import activation_peak_bytes, cuda_graph_bytes, non_torch_bytes, resolve, stage_weight_bytes
from planner.estimate.roofline import efficiency_for
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario


@dataclass(frozen=True)
class SweepResult:
    """Flat arrays, one entry per point (a DataFrame can be built from ``columns()``)."""

    model: np.ndarray
    gpu: np.ndarray
    tp: np.ndarray
    weight_dtype: np.ndarray
    batch: np.ndarray
    context_len: np.ndarray
    tpot_seconds: np.ndarray
    throughput_tokens_per_s: np.ndarray
    fits: np.ndarray

    def __len__(self) -> int:
        return len(self.tpot_seconds)

    def columns(self) -> dict[str, np.ndarray]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _gemm_fraction(eff_small, eff_large, knee, m):
    x = np.clip(np.log(np.maximum(m, 1)) / np.log(np.maximum(knee, 2)), 0.0, 1.0)
    return eff_small + (eff_large - eff_small) * x


def decode_seconds(w: StepWork, peak, bw, link, eff: dict[str, np.ndarray], graphs: bool, batch, context):
    """TPOT of a pure decode step over arrays (the formula of ``StepTimeModel.step_seconds``)."""
    T = batch
    frac = _gemm_fraction(eff["gemm_fraction_small"], eff["gemm_fraction_large"], eff["gemm_m_knee_tokens"], T)
    t_lin = np.maximum(T * w.lin_flops_per_token / (peak * frac),
                       (w.lin_weight_bytes + T * w.lin_act_per_token) / (bw * eff["bandwidth_fraction"]))
    for E, k, per_expert, flops, act in w.moe:
        touched = E * (1.0 - (1.0 - k / E) ** T)
        rows = np.maximum(1, np.round(T * k / np.maximum(touched, 1.0)))
        mfrac = _gemm_fraction(eff["gemm_fraction_small"], eff["gemm_fraction_large"], eff["gemm_m_knee_tokens"], rows)
        g = eff["grouped_gemm_fraction"]
        t_lin = t_lin + np.maximum(T * flops / (peak * mfrac * g), (per_expert * touched + T * act) / (bw * eff["bandwidth_fraction"] * g))
    kv_tokens = batch * context
    t_attn = np.maximum(kv_tokens * w.attn_flops_per_pair / (peak * eff["attention_fraction"]),
                        (kv_tokens * w.kv_bytes_per_token + T * w.kv_write_per_token) / (bw * eff["attention_fraction"]))
    t_scan = 0.0
    if w.state_bytes_per_seq:
        t_scan = np.maximum(T * w.scan_flops_per_token / (peak * eff["attention_fraction"]),
                            batch * w.state_bytes_per_seq / (bw * eff["bandwidth_fraction"]))
    t_head = np.maximum(w.head_weight_bytes / (bw * eff["bandwidth_fraction"]),
                        batch * w.head_flops_per_seq / (peak * _gemm_fraction(eff["gemm_fraction_small"], eff["gemm_fraction_large"], eff["gemm_m_knee_tokens"], batch)))
    t_comm = 0.0
    if w.tp > 1:
        t_comm = w.allreduces * eff["allreduce_latency_seconds"] + 2 * (w.tp - 1) / w.tp * T * w.comm_bytes_per_token / (link * eff["allreduce_fraction"])
    launch = w.kernels * (eff["graph_launch_seconds"] if graphs else eff["kernel_launch_seconds"])
    return np.maximum(t_lin + t_attn + t_scan + t_head + t_comm, launch) + eff["step_overhead_seconds"]


def _kv_per_sequence(model: ModelSpec, tp: int, kv_bytes: float, context: np.ndarray) -> np.ndarray:
    """``KVSpec.sequence_bytes`` over an array of contexts: min(context, cap) x bytes/token + fixed."""
    out = np.zeros_like(context, dtype=float)
    for spec in model.kv_specs(tp, kv_bytes):
        cap = np.inf if spec.token_cap is None else spec.token_cap
        out += np.minimum(context, cap) * spec.bytes_per_token + spec.fixed_bytes
    return out


def sweep(
    models: dict[str, ModelSpec],
    gpus: list[HardwareProfile],
    tps: list[int],
    weight_dtypes: list[str],
    batches: list[int],
    contexts: list[int],
    engine: str = "cuda-graphs",
) -> SweepResult:
    """Decode TPOT, tokens/s and fit for every combination; impossible (model, TP, dtype) are skipped."""
    B, C = np.meshgrid(np.asarray(batches, float), np.asarray(contexts, float), indexing="ij")
    B, C = B.ravel(), C.ravel()
    n_shape = len(B)
    effs = [efficiency_for(hw).model_dump() for hw in gpus]
    eff = {k: np.asarray([e[k] for e in effs], float)[:, None] for k in effs[0] if isinstance(effs[0][k], (int, float))}
    bw = np.asarray([hw.hbm_bandwidth_bytes_per_s for hw in gpus], float)[:, None]
    link = np.asarray([hw.unidirectional_interconnect_bytes_per_s or 32e9 for hw in gpus], float)[:, None]
    parts: dict[str, list] = {k: [] for k in SweepResult.__dataclass_fields__}
    for name, model in models.items():
        for tp in tps:
            for dtype in weight_dtypes:
                sc = Scenario(gpu=gpus[0].id, tp=tp, weight_dtype=dtype, engine=engine)
                try:
                    res = resolve(model, gpus[0], sc)
                except PlannerError:
                    continue
                w = step_work(model, res)
                peak = np.asarray([hw.peak_flops_for(w.compute_dtype) or hw.peak_flops_for("bf16") for hw in gpus], float)[:, None]
                tpot = decode_seconds(w, peak, bw, link, eff, engine == "cuda-graphs", B[None, :], C[None, :])
                weights = max(stage_weight_bytes(model, res))
                budget = np.asarray([
                    math.ceil(hw.memory_bytes * res.gpu_memory_utilization) - weights - non_torch_bytes(sc)
                    - activation_peak_bytes(model, resolve(model, hw, sc)) - cuda_graph_bytes(model, sc, model.num_layers)
                    for hw in gpus], float)[:, None]
                fits = B[None, :] * _kv_per_sequence(model, tp, res.kv_bytes_per_element, C)[None, :] <= budget
                G = len(gpus)
                parts["model"].append(np.full(G * n_shape, name, dtype=object))
                parts["gpu"].append(np.repeat(np.asarray([hw.id for hw in gpus], dtype=object), n_shape))
                parts["tp"].append(np.full(G * n_shape, tp))
                parts["weight_dtype"].append(np.full(G * n_shape, dtype, dtype=object))
                parts["batch"].append(np.tile(B, G))
                parts["context_len"].append(np.tile(C, G))
                parts["tpot_seconds"].append(tpot.ravel())
                parts["throughput_tokens_per_s"].append((B[None, :] / tpot).ravel())
                parts["fits"].append(fits.ravel())
    if not parts["tpot_seconds"]:
        raise PlannerError("the sweep has no valid (model, TP, dtype) combination.", hint="Check that TP divides the heads.")
    return SweepResult(**{k: np.concatenate(v) for k, v in parts.items()})
