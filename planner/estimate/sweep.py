"""Vectorized what-if sweep: decode speed and fit over (model, GPU, TP, weight dtype, batch, context).

The same step model as the simulator: one ``StepTimeModel`` per (model, TP, dtype, card), sharing
the card-free op tables of (model, TP, dtype), evaluated with numpy over every batch size and
context length at once (``StepTimeModel.decode_seconds``: the code path of a single step). A point "fits" when batch x
(KV bytes of one sequence at that context, sliding
layers capped at their window) fits the KV budget of the memory plan (block rounding ignored:
within one block per sequence of ``plan_memory``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.estimate.latency import StepTimeModel, op_tables
from planner.estimate.memory import (
    activation_peak_bytes,
    cuda_graph_bytes,
    non_torch_bytes,
    stage_weight_bytes,
)
from planner.estimate.resolve import resolve
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


def _kv_per_sequence(model: ModelSpec, tp: int, kv_bytes_per_element: float, context: np.ndarray) -> np.ndarray:
    """``KVSpec.sequence_bytes`` over an array of contexts: min(context, cap) x bytes/token + fixed."""
    out = np.zeros_like(context, dtype=float)
    for spec in model.kv_specs(tp, kv_bytes_per_element):
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
    # label and TP columns as (value, repeats) runs, expanded once at the end (object arrays are slow to fill);
    # every slice repeats the (batch, context) grid, so those columns are one tile of it
    labels: dict[str, list[tuple[str | int, int]]] = {"model": [], "gpu": [], "weight_dtype": [], "tp": []}
    parts: dict[str, list] = {"tpot_seconds": [], "fits": []}
    for name, model in models.items():
        for tp in tps:
            for dtype in weight_dtypes:
                sc = Scenario(gpu=gpus[0].id, tp=tp, weight_dtype=dtype, engine=engine)
                try:
                    res = resolve(model, gpus[0], sc)
                except PlannerError:
                    continue
                tables = op_tables(model, res)
                steps = [
                    StepTimeModel(
                        model, hw, sc.model_copy(update={"gpu": hw.id}), efficiency_for(hw, sc=sc), tables=tables
                    )
                    for hw in gpus
                ]
                # the points' op rows are the same on every card (one table): evaluated once, bound per card
                grid = steps[0].decode_grid(B, C)
                tpot = np.stack([s.decode_on(grid) for s in steps])
                weights = max(stage_weight_bytes(model, res))
                budget = np.asarray(
                    [
                        math.ceil(hw.memory_bytes * res.gpu_memory_utilization)
                        - weights
                        - non_torch_bytes(sc)
                        - activation_peak_bytes(model, s.res)  # resolve(model, hw, sc): the card's defaults
                        - cuda_graph_bytes(model, sc, model.num_layers)
                        for hw, s in zip(gpus, steps, strict=True)
                    ],
                    float,
                )[:, None]
                fits = B[None, :] * _kv_per_sequence(model, tp, res.kv_bytes_per_element, C)[None, :] <= budget
                G = len(gpus)
                labels["model"].append((name, G * n_shape))
                labels["gpu"] += [(hw.id, n_shape) for hw in gpus]
                labels["weight_dtype"].append((dtype, G * n_shape))
                labels["tp"].append((tp, G * n_shape))
                parts["tpot_seconds"].append(tpot.ravel())
                parts["fits"].append(fits.ravel())
    if not parts["tpot_seconds"]:
        raise PlannerError(
            "the sweep has no valid (model, TP, dtype) combination.", hint="Check that TP divides the heads."
        )
    columns = {k: np.concatenate(v) for k, v in parts.items()}
    slices = len(columns["tpot_seconds"]) // n_shape
    columns["batch"], columns["context_len"] = np.tile(B, slices), np.tile(C, slices)
    columns["throughput_tokens_per_s"] = columns["batch"] / columns["tpot_seconds"]
    for k, runs in labels.items():
        values, repeats = zip(*runs)
        columns[k] = np.repeat(np.asarray(values, dtype=int if k == "tp" else object), repeats)
    return SweepResult(**columns)
