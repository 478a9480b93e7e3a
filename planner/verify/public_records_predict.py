"""Public-record predictions: each kind of published measurement as a planner quantity, timed for any
efficiency factors (so a fit can try many factor sets on the same records).

* max-throughput tables (TensorRT-LLM ``trtllm-bench``, all requests queued): the static-batch
  estimate at the largest batches whose ``input + output`` tokens fit the KV cache, the best of them;
* static-batch tables (batch and lengths given): ``estimate_latency``'s throughput or TTFT;
* Vidur per-layer linear ops and NCCL all-reduce: the same ops bound to the card (``roofline.bind``);
* serving sweeps (a request rate, or all prompts at once): the simulator with ``StepTimeModel`` as
  step cost and the memory plan's KV blocks;
* startup logs: ``plan_memory`` (weights, KV GiB, blocks, tokens, concurrency).

Every step is costed by the one step-cost model, ``planner.estimate.step``: ``StepOps`` binds each op
with ``roofline.bind``; ``StepOpsBatch`` lays the ops of many steps (of different models and cards)
into one array and calls the same ``step`` functions on it (``op_seconds``, ``allreduce_seconds``,
``launch_seconds``, the floors, ``gpu_step_seconds``, ``combine_step``), which a fit needs to try
hundreds of factor sets quickly. ``StepTimeModel`` cannot stand in for it: it is built per (model,
card, scenario) with its factors fixed. ``tests/test_step_cost.py`` checks the three agree op by op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.efficiency import Efficiency
from planner.estimate import step
from planner.estimate.latency import StepTimeModel, first_token_seconds
from planner.estimate.resolve import resolve
from planner.estimate.roofline import (
    MAX_GEMM_ROWS,
    Stage,
    bind,
    engine_of,
    layer_groups,
    model_ops,
    step_graphs,
    step_shape,
)
from planner.hardware import HardwareProfile
from planner.model.ops import Op
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.units import GiB, cdiv

#: Vidur's collective profiler times torch.distributed (NCCL) all-reduce: no custom all-reduce.
NCCL_ONLY = engine_of(None).model_copy(update={"custom_allreduce": False})
_GROUPS: dict[int, list[tuple[str, list[int]]]] = {}


def _layer_groups(model: ModelSpec) -> list[tuple[str, list[int]]]:
    """``roofline.layer_groups``, memoized per spec object (catalog specs are cached, so stable)."""
    key = id(model)
    if key not in _GROUPS:
        _GROUPS[key] = layer_groups(model)
    return _GROUPS[key]


class StepOps:
    """The ops of one forward step on one rank, built once, timed for any efficiency factors.

    ``seconds(eff)`` equals ``roofline(...).total_seconds`` for the same step: every op bound by
    ``roofline.bind`` times the layers that run it, combined with the engine's host work
    (``planner.estimate.step.combine_step``).
    """

    def __init__(self, model: ModelSpec, hw: HardwareProfile, sc: Scenario, stage: Stage, batch: int, seq_len: int):
        res = resolve(model, hw, sc)
        self.engine = engine_of(sc)
        captured, self.graphs, self.piecewise = step_graphs(model, sc, self.engine, stage, batch, seq_len)
        run_batch = int(step.graph_padded_batch(batch, self.engine.max_cuda_graph_batch)) if captured else batch
        shape = step_shape(model, res, stage, run_batch, seq_len)
        self.hw, self.tp, self.batch, self.run_batch = hw, res.tp, batch, run_batch
        self.link = step.Link.for_group(hw, res.tp)
        rows: list[tuple[Op, int]] = []
        for _group, idx in _layer_groups(model):
            rows += [(op, len(idx)) for op in model.layers[idx[0]].ops(shape)]
        rows += [(op, 1) for op in model_ops(model, shape)]
        self.rows = rows
        self._memo: tuple[Efficiency, float] | None = None

    def in_graph(self, op: Op) -> bool:
        """Whether ``op`` replays in a CUDA graph in this step (``planner.estimate.step.replays_graph``)."""
        return bool(step.replays_graph(step.KIND_CODES[op.kind], self.graphs, self.piecewise))

    def seconds(self, eff: Efficiency) -> float:
        if self._memo is not None and self._memo[0] is eff:
            return self._memo[1]
        bound = [
            (count, bind(op, self.hw, eff, self.tp, self.in_graph(op), self.engine, self.run_batch))
            for op, count in self.rows
        ]
        gpu = float(step.gpu_step_seconds(sum(c * b[0] for c, b in bound), sum(c * b[4] for c, b in bound)))
        return float(step.combine_step(gpu, step.host_seconds(eff, self.batch), self.engine.async_scheduling))


class StepOpsBatch:
    """Many ``StepOps`` timed at once with numpy, for fits that try hundreds of factor sets.

    ``prime(eff)`` computes every step's seconds with ``planner.estimate.step`` (``op_seconds`` and
    ``allreduce_seconds``, the functions ``roofline.bind`` calls) over one array of all their ops,
    and memoizes it in each ``StepOps`` for that ``eff`` object. ``StepOps.seconds`` stays the
    reference: the tests check that both agree on every record.
    """

    def __init__(self, works: list[StepOps]):
        self.works = works
        cols: dict[str, list[float]] = {
            k: [] for k in ("kind", "flops", "bytes", "m", "peak", "bw", "comm", "kernels", "graphs", "count", "seqs")
        }
        owner: list[int] = []
        for w, work in enumerate(works):
            hw = work.hw
            for op, count in work.rows:
                dtype = hw.compute_dtype_for(op.compute_dtype) or hw.compute_dtype_for("bf16") or "fp32"
                cols["kind"].append(step.KIND_CODES[op.kind])
                cols["flops"].append(op.flops)
                cols["bytes"].append(op.bytes)
                cols["m"].append(MAX_GEMM_ROWS if op.gemm_m_tokens is None else max(op.gemm_m_tokens, 1))
                cols["peak"].append(hw.peak_flops_per_s.get(dtype, math.inf) if op.kind != "allreduce" else math.inf)
                # a card without a bandwidth gives None, which the float column turns into nan
                cols["bw"].append(hw.hbm_bandwidth_bytes_per_s)  # type: ignore[arg-type]
                cols["comm"].append(op.comm_bytes)
                cols["kernels"].append(op.kernels)
                cols["graphs"].append(1.0 if work.in_graph(op) else 0.0)
                cols["count"].append(count)
                cols["seqs"].append(work.run_batch)
                owner.append(w)
        self.a = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
        self.owner = np.asarray(owner, dtype=np.int64)
        self.reduce_rows = [
            np.nonzero((self.owner == w) & (self.a["kind"] == step.KIND_CODES["allreduce"]))[0]
            for w in range(len(works))
        ]

    def prime(self, eff: Efficiency) -> np.ndarray:
        a = self.a
        launch = step.launch_seconds(eff, a["kernels"], a["graphs"] > 0)
        floor = step.kernel_floor_seconds(eff, a["kernels"]) + step.attention_floor_seconds(
            eff, a["kind"], a["kernels"], a["seqs"]
        )
        t, _, _ = step.op_seconds(eff, a["kind"], a["flops"], a["bytes"], a["m"], a["peak"], a["bw"], floor)
        for work, rows in zip(self.works, self.reduce_rows):
            if len(rows):
                t[rows] = np.maximum(
                    step.allreduce_seconds(
                        eff,
                        a["comm"][rows],
                        work.tp,
                        work.link,
                        work.engine.custom_allreduce,
                        a["graphs"][rows] > 0,
                        work.engine.custom_allreduce_graph_fit,
                    ),
                    floor[rows],
                )
        kernels = np.bincount(self.owner, weights=t * a["count"], minlength=len(self.works))
        launches = np.bincount(self.owner, weights=launch * a["count"], minlength=len(self.works))
        gpu = step.gpu_step_seconds(kernels, launches)
        steps = np.asarray(
            [
                float(step.combine_step(g, step.host_seconds(eff, w.batch), w.engine.async_scheduling))
                for g, w in zip(gpu, self.works)
            ]
        )
        for work, value in zip(self.works, steps):
            work._memo = (eff, float(value))
        return steps


@dataclass
class StaticBatch:
    """``estimate_latency`` of one static batch: all prompts prefilled, then decoded together.

    TTFT = prefill step + (prefill steps - 1) x step overhead; TPOT = one decode step at the mean
    context; throughput = batch x output / (TTFT + (output - 1) x TPOT) x replicas.
    """

    model: ModelSpec
    hw: HardwareProfile
    sc: Scenario
    batch: int
    input_len: int
    output_len: int
    _prefill: StepOps = field(init=False, repr=False)
    _decode: StepOps = field(init=False, repr=False)

    def __post_init__(self) -> None:
        res = resolve(self.model, self.hw, self.sc)
        self.steps = (
            cdiv(self.batch * self.input_len, res.max_num_batched_tokens) if res.enable_chunked_prefill else self.batch
        )
        self._prefill = StepOps(self.model, self.hw, self.sc, "prefill", self.batch, self.input_len)
        self._decode = StepOps(
            self.model, self.hw, self.sc, "decode", self.batch, self.input_len + max(1, self.output_len // 2)
        )

    def ttft_seconds(self, eff: Efficiency) -> float:
        return first_token_seconds(self._prefill.seconds(eff), self.steps, self.batch, eff, self._prefill.engine)

    def tpot_seconds(self, eff: Efficiency) -> float:
        return self._decode.seconds(eff)

    def tokens_per_s(self, eff: Efficiency) -> float:
        e2e = self.ttft_seconds(eff) + (self.output_len - 1) * self.tpot_seconds(eff)
        return self.batch * self.output_len / e2e * self.sc.replicas


@dataclass
class ThroughputPrediction:
    """Output tokens/s of a static batch (or the best of several), whole deployment or per GPU."""

    batches: list[StaticBatch]
    per_gpu: bool
    how: str

    def predict(self, eff: Efficiency) -> float:
        best = max(b.tokens_per_s(eff) for b in self.batches)
        return best / self.batches[0].sc.total_gpus if self.per_gpu else best


@dataclass
class TTFTPrediction:
    """Time to the first token of a static batch, in ms."""

    batch: StaticBatch
    how: str

    def predict(self, eff: Efficiency) -> float:
        return self.batch.ttft_seconds(eff) * 1e3


@dataclass
class OpsPrediction:
    """Summed time of a list of single ops bound to the card (Vidur's operator timings), in ms."""

    ops: list[Op]
    hw: HardwareProfile
    tp: int
    how: str

    def predict(self, eff: Efficiency) -> float:
        bound = [bind(op, self.hw, eff, self.tp, False, NCCL_ONLY) for op in self.ops]
        return sum(max(b[0], b[4]) for b in bound) * 1e3  # a lone timed kernel: it waits for its launch


@dataclass
class ServingRun:
    """One simulated serving benchmark; several records (throughput, ITL, ...) read the same run."""

    model: ModelSpec
    hw: HardwareProfile
    sc: Scenario
    workload: Any
    scheduler: Any
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def result(self, eff: Efficiency):
        from planner.serve import simulate

        key = eff.model_dump_json()
        if key not in self._cache:
            self._cache.clear()
            self._cache[key] = simulate(self.workload, self.scheduler, StepTimeModel(self.model, self.hw, self.sc, eff))
        return self._cache[key]


#: Serving metric -> (value from a SimulationResult and the replica count) in the record's unit.
SERVING_METRICS: dict[str, Callable[[Any, int], float | None]] = {
    "output_throughput_total": lambda r, n: (
        None if r.throughput_tokens_per_s is None else r.throughput_tokens_per_s * n
    ),
    "request_throughput": lambda r, n: None if r.requests_per_s is None else r.requests_per_s * n,
    "median_itl": lambda r, n: None if r.itl_seconds is None else r.itl_seconds.p50 * 1e3,
    "median_tpot": lambda r, n: None if r.tpot_seconds is None else r.tpot_seconds.p50 * 1e3,
    "median_ttft": lambda r, n: None if r.ttft_seconds is None else r.ttft_seconds.p50 * 1e3,
    "median_e2e_latency": lambda r, n: None if r.e2e_seconds is None else r.e2e_seconds.p50 * 1e3,
}


@dataclass
class ServingPrediction:
    run: ServingRun
    metric: str
    replicas: int
    how: str

    def predict(self, eff: Efficiency) -> float:
        value = SERVING_METRICS[self.metric](self.run.result(eff), self.replicas)
        return float("nan") if value is None else value


#: Startup-log metric -> value of a MemoryPlan in the record's unit.
MEMORY_METRICS: dict[str, Callable[[Any], float]] = {
    "model_weights_gib": lambda p: p.weight_bytes_per_gpu / GiB,
    "available_kv_cache_gib": lambda p: p.kv_cache_bytes_per_gpu / GiB,
    "num_gpu_blocks": lambda p: p.num_gpu_blocks,
    "kv_cache_tokens": lambda p: p.kv_cache_tokens,
    "max_concurrency_x": lambda p: p.max_concurrency,
    "peak_torch_memory_gib": lambda p: (p.weight_bytes_per_gpu + p.activation_bytes_per_gpu) / GiB,
    "cuda_graph_gib": lambda p: p.cuda_graph_bytes_per_gpu / GiB,
}


@dataclass
class MemoryPrediction:
    """A startup-log figure from the memory plan (independent of the efficiency factors)."""

    value: float
    how: str

    def predict(self, eff: Efficiency) -> float:
        return self.value


Prediction = ThroughputPrediction | TTFTPrediction | OpsPrediction | ServingPrediction | MemoryPrediction


def step_ops(predictions: list[Any]) -> list[StepOps]:
    """Every ``StepOps`` the static-batch predictions read (for ``StepOpsBatch``)."""
    out: list[StepOps] = []
    for p in predictions:
        batches = (
            p.batches if isinstance(p, ThroughputPrediction) else [p.batch] if isinstance(p, TTFTPrediction) else []
        )
        for b in batches:
            out += [b._prefill, b._decode]
    return out
