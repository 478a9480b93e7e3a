"""Step cost: how one op, one collective and one whole engine step bind on a card under an engine.

This is the one definition of the physics of a step. The roofline (``planner.estimate.roofline``),
the latency estimate, the simulator's ``StepTimeModel``, the vectorized sweep and the public-record
predictions all call these functions; none of them re-derives a bound. Every function takes plain
numbers *or* numpy arrays (only ``np.maximum``/``np.where``-style arithmetic inside), so the
vectorized callers run the same code path as the scalar ones.

One op on one rank (FLOPs ``F``, HBM bytes ``Q``, GEMM rows ``m``)::

    t_compute = F / (peak FLOP/s of its math dtype x f(kind, m))
    t_memory  = Q / (HBM bandwidth x b(kind))
    t_floor   = kernels x the least GPU time of a kernel (launch latency and tail), plus for an
                attention kernel sequences x the least time of one sequence's attention
    t_op      = max(t_compute, t_memory, t_floor)
    t_launch  = kernels x the host's eager launch cost (0 inside a replayed CUDA graph), summed over
                the step: the GPU's step is max(sum of t_op, sum of t_launch) (the host runs ahead)

``f`` is the GEMM fraction of peak, log-interpolated in ``m`` between ``gemm_fraction_small`` (M=1)
and ``gemm_fraction_large`` (M >= knee); fused-MoE grouped GEMMs reach ``grouped_gemm_fraction`` of
that in FLOP/s but stream the touched experts' weights at the card's full ``bandwidth_fraction``
(weights are read once per expert, as a dense GEMM reads them); attention kernels use
``attention_fraction`` for both.

One all-reduce of ``P`` bytes over ``n`` ranks (``allreduce_seconds``), as the engine dispatches it
(``shared/reference/engines.md`` 3a):

* custom all-reduce replayed inside a CUDA graph (a decode step, or a piecewise-graph step):
  ``6.0 us + (n - 1) x P / (one-way link bandwidth x 0.83)`` (the one-stage kernel reads every peer's
  buffer), fitted to the ``ca_1stage`` rows of vLLM's device-communicator benchmark on H100 TP4
  (vllm-project/vllm#24111 and #24532: 0.5 / 1 / 1.5 / 2 MiB in 10 / 14.5 / 19 / 22.5 us, the two runs
  within 1 us of each other) and checked at TP2 (0.5 MiB: 7 us measured, 7.4 us modelled); the engine
  dispatches whichever of it and NCCL is faster for the size (#24111, #33839), so the cost is the
  smaller of the two;
* custom all-reduce launched eagerly, when the engine has one, ``n`` is 2, 4, 6 or 8,
  ``P`` < 8 MiB and the ranks share NVLink (or ``n`` = 2 over PCIe): ``alpha_n + P / beta_n`` with
  ``alpha``/``beta`` fitted to the published vLLM custom all-reduce latencies on H100 NVLink
  (sgl-project/sglang#2904, eager, 512 B - 1 MiB; least squares on four sizes per world size:
  TP2 8.7 us + P / 58.9 GB/s, TP4 9.8 us + P / 33.7 GB/s, TP8 11.8 us + P / 30.8 GB/s), the
  bandwidth term scaled by the link's speed relative to NVLink 4; bytes beyond the measured 1 MiB
  stream at the ring bandwidth below (the two-shot kernel);
* otherwise NCCL's ring: ``latency(link) + 2 (n - 1) / n x P / (one-way link bandwidth x
  allreduce_fraction)``; the latency is 12.5 us inside an NVLink domain (8 x H20, DeepEP#303),
  42 us over PCIe (8 x RTX 4090, nccl#1530) and 46 us across nodes (2 x 8 H20, nccl#1244); TP
  that spans nodes runs at the network's per-GPU bandwidth.

One engine step: ``gpu = max(sum of op times + collectives, sum of launches)``; host work (scheduling, input
preparation, output processing) is ``step_overhead_seconds + host_seconds_per_seq x sequences``.
An engine with async scheduling (vLLM >= 0.14, SGLang's overlap scheduler, TensorRT-LLM's
PyExecutor) prepares step N+1 while the GPU runs step N, so a step lasts ``max(gpu, host)``;
a synchronous engine pays ``gpu + host``.

Pipeline parallelism (pp > 1, ``pipeline_seconds``): each stage's step is the same op costs over its
layers; a batch crosses the stages in turn with an activation send between them
(``activation_send_seconds``: hidden state and residual over the boundary's link), and up to pp
batches are in flight, so one request's next token takes ``max(sum of stages + sends, in flight x
slowest stage)``.

Expert parallelism (``--enable-expert-parallel``, ``planner.model.layers.MoE.rank_routing``): each rank's
grouped GEMM runs its whole local experts on the (token, expert) pairs routed to them, T x dp x k x L / E x the
stated load imbalance (busiest rank over the mean); with attention data parallelism (dp > 1) each MoE layer
adds a dispatch and a combine (``alltoall_seconds``: latency by link + payload / link bandwidth, the EP group's
link; payload by vLLM's --all2all-backend, ``planner.model.ops.EXPERT_DISPATCH``). With dp 1 there is no
all-to-all: the TP all-reduce after the layer sums the ranks' experts, as without EP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from planner.efficiency import Efficiency
from planner.estimate.links import Link  # re-exported: step.Link, as callers use it


def _ndim(x: Any) -> int:
    """``np.ndim``, without its ~2 us for a plain Python number (the roofline's one-op hot path)."""
    return 0 if isinstance(x, (int, float)) else np.ndim(x)


#: Custom all-reduce fit per world size on H100 NVLink 4: (latency s, bandwidth bytes/s); see the
#: module docstring for the source and the fit. 6 ranks interpolated between 4 and 8.
CUSTOM_ALLREDUCE_H100: dict[int, tuple[float, float]] = {
    2: (8.72e-6, 58.9e9),
    4: (9.81e-6, 33.7e9),
    6: (10.8e-6, 32.2e9),
    8: (11.8e-6, 30.8e9),
}
#: Custom all-reduce inside a CUDA graph: latency and the fraction of the one-way link bandwidth its
#: one-stage kernel reaches reading the peers' buffers (fit in the module docstring).
CUSTOM_ALLREDUCE_GRAPH_LATENCY_SECONDS = 6.0e-6
CUSTOM_ALLREDUCE_GRAPH_LINK_FRACTION = 0.83
#: One-way NVLink 4 bandwidth of an H100 SXM (900 GB/s bidirectional), the reference of the fit.
NVLINK4_ONE_WAY_BYTES_PER_S = 450e9
#: Largest message of the published custom all-reduce timings the fit is drawn from.
CUSTOM_ALLREDUCE_FIT_MAX_BYTES = 1024 * 1024
#: vLLM's custom all-reduce buffer: messages of at least this many bytes go to NCCL.
CUSTOM_ALLREDUCE_MAX_BYTES = 8 * 1024 * 1024
#: NCCL small-message latency by where the ranks sit, seconds (engines.md 3b).
NCCL_LATENCY_SECONDS = {"nvlink": 12.5e-6, "pcie": 42e-6, "network": 46e-6}


def gemm_fraction(eff: Efficiency, m_tokens: Any) -> Any:
    """Achieved fraction of peak for a GEMM with ``m`` rows: log-interpolated from M=1 to the knee.

    Example (small 0.06, large 0.66, knee 2435): M=1 -> 0.06, M=49 (half the log range) -> 0.36,
    M >= 2435 -> 0.66. ``m`` may be an array.
    """
    knee = max(eff.gemm_m_knee_tokens, 2)
    if _ndim(m_tokens) == 0:  # one op: the same expression in plain floats (the roofline's hot path)
        x = min(max(math.log(max(float(m_tokens), 1.0)) / math.log(knee), 0.0), 1.0)
        return eff.gemm_fraction_small + (eff.gemm_fraction_large - eff.gemm_fraction_small) * x
    x = np.clip(np.log(np.maximum(m_tokens, 1)) / math.log(knee), 0.0, 1.0)
    out = eff.gemm_fraction_small + (eff.gemm_fraction_large - eff.gemm_fraction_small) * x
    return float(out) if _ndim(out) == 0 else out


#: GEMM rows assumed for ops that are not GEMMs (their compute fraction is then the large-GEMM one).
MAX_GEMM_ROWS = 1 << 30

#: Op kinds as codes, for the array form of ``op_seconds``.
KIND_CODES = {"gemm": 0, "attention": 1, "elementwise": 2, "scan": 2, "allreduce": 3, "grouped_gemm": 4, "alltoall": 5}


def op_fractions(eff: Efficiency, kind_code: Any, m_tokens: Any) -> tuple[Any, Any]:
    """(fraction of peak FLOP/s, fraction of HBM bandwidth) an op of this kind reaches."""
    gemm = gemm_fraction(eff, m_tokens)
    if _ndim(kind_code) == 0 and _ndim(m_tokens) == 0:  # one op, in plain floats
        attention = kind_code == KIND_CODES["attention"]
        compute = (
            gemm
            if kind_code == KIND_CODES["gemm"]
            else gemm * eff.grouped_gemm_fraction
            if kind_code == KIND_CODES["grouped_gemm"]
            else eff.attention_fraction
            if attention
            else eff.gemm_fraction_large
        )
        return compute, eff.attention_fraction if attention else eff.bandwidth_fraction
    compute = np.where(
        kind_code == 0,
        gemm,
        np.where(
            kind_code == 4,
            gemm * eff.grouped_gemm_fraction,
            np.where(kind_code == 1, eff.attention_fraction, eff.gemm_fraction_large),
        ),
    )
    memory = np.where(kind_code == 1, eff.attention_fraction, eff.bandwidth_fraction)
    return compute, memory


def bound_seconds(
    flops: Any,
    nbytes: Any,
    compute_fraction: Any,
    memory_fraction: Any,
    peak_flops_per_s: Any,
    hbm_bytes_per_s: Any,
    launch: Any,
) -> tuple[Any, Any, Any]:
    """(t_op, t_compute, t_memory): the roofline of one op at the given achieved fractions."""
    t_compute = flops / (peak_flops_per_s * compute_fraction)
    t_memory = nbytes / (hbm_bytes_per_s * memory_fraction)
    if _ndim(t_compute) == 0 and _ndim(t_memory) == 0 and _ndim(launch) == 0:
        return max(t_compute, t_memory, launch), t_compute, t_memory
    return np.maximum(np.maximum(t_compute, t_memory), launch), t_compute, t_memory


def op_seconds(
    eff: Efficiency,
    kind_code: Any,
    flops: Any,
    nbytes: Any,
    m_tokens: Any,
    peak_flops_per_s: Any,
    hbm_bytes_per_s: Any,
    launch_seconds: Any,
) -> tuple[Any, Any, Any]:
    """(t_op, t_compute, t_memory) of compute/memory ops (every kind but collectives).

    ``m_tokens`` is the GEMM's rows (use a large number when the op is not a GEMM).
    """
    f_compute, f_memory = op_fractions(eff, kind_code, m_tokens)
    return bound_seconds(flops, nbytes, f_compute, f_memory, peak_flops_per_s, hbm_bytes_per_s, launch_seconds)


def launch_seconds(eff: Efficiency, kernels: Any, graphs: Any) -> Any:
    """Host (CPU) time to launch ``kernels`` kernels: per eager launch; 0 inside a replayed CUDA graph
    (one launch for the whole graph). Summed over a step, it bounds the step from below."""
    if _ndim(graphs) == 0:
        return 0.0 * kernels if graphs else kernels * eff.kernel_launch_seconds
    return kernels * np.where(graphs, 0.0, eff.kernel_launch_seconds)


def attention_floor_seconds(eff: Efficiency, kind_code: Any, kernels: Any, seqs: Any) -> Any:
    """Least GPU time of an attention kernel over ``seqs`` sequences: ``attention_seconds_per_seq`` each
    (0 for other kinds and for ops fused into another kernel)."""
    if _ndim(kind_code) == 0 and _ndim(kernels) == 0:
        return (
            seqs * eff.attention_seconds_per_seq if kind_code == KIND_CODES["attention"] and kernels > 0 else 0.0 * seqs
        )
    return np.where((kind_code == KIND_CODES["attention"]) & (kernels > 0), seqs * eff.attention_seconds_per_seq, 0.0)


def kernel_floor_seconds(eff: Efficiency, kernels: Any) -> Any:
    """Least GPU time of an op of ``kernels`` kernels: each kernel occupies the GPU at least
    ``graph_launch_seconds`` (launch latency and tail), however little it computes."""
    return kernels * eff.graph_launch_seconds


def custom_allreduce_applies(payload_bytes: Any, ranks: int, link: Link, engine_has_custom: bool) -> Any:
    """Whether the engine's custom all-reduce takes this call (engines.md 3a: world size 2/4/6/8,
    < 8 MiB, a fully NVLink-connected group, or 2 ranks over PCIe; never across nodes)."""
    topology_ok = link.kind == "nvlink" or (link.kind == "pcie" and ranks == 2)
    if not (engine_has_custom and ranks in CUSTOM_ALLREDUCE_H100 and topology_ok):
        return np.zeros_like(payload_bytes, dtype=bool) if _ndim(payload_bytes) else False
    return payload_bytes < CUSTOM_ALLREDUCE_MAX_BYTES


def allreduce_seconds(
    eff: Efficiency,
    payload_bytes: Any,
    ranks: int,
    link: Link,
    engine_has_custom: bool,
    in_graph: Any = False,
    custom_graph_fit: bool = True,
) -> Any:
    """Seconds of one all-reduce of ``payload_bytes`` over ``ranks`` GPUs (0 for one rank); ``in_graph``
    (a bool or an array like ``payload_bytes``): it is replayed inside a CUDA graph.

    Worked example: 70B decode at batch 16, TP4 on H100: P = 16 x 8192 x 2 B = 256 KiB ->
    eager custom all-reduce 9.8 us + 262,144 / 33.7 GB/s = 17.6 us; inside the decode step's CUDA graph
    6.0 us + 3 x 262,144 / (450 GB/s x 0.83) = 8.1 us (NCCL ring: 12.5 us + 1.5 x 256 KiB /
    (450 GB/s x 0.82) = 13.6 us; the engine picks custom below 8 MiB as vLLM does).
    """
    if ranks <= 1:
        return payload_bytes * 0.0
    alpha, beta = CUSTOM_ALLREDUCE_H100.get(ranks, CUSTOM_ALLREDUCE_H100[8])
    scale = link.one_way_bytes_per_s / NVLINK4_ONE_WAY_BYTES_PER_S
    ring_bytes_per_s = link.one_way_bytes_per_s * eff.allreduce_fraction / (2 * (ranks - 1) / ranks)
    # The fit holds over the measured 512 B - 1 MiB; above it the two-shot kernel streams at the link's
    # ring bandwidth, so the rest of the message is priced at that rate.
    # one formula for a payload and for arrays of them: numpy's elementwise min / select, or Python's on floats
    # (numpy costs ~10 us per call on a scalar, the roofline's case)
    scalar = _ndim(payload_bytes) == 0 and _ndim(in_graph) == 0
    minimum, select, both = (min, _select, _both) if scalar else (np.minimum, np.where, np.logical_and)
    measured = minimum(payload_bytes, CUSTOM_ALLREDUCE_FIT_MAX_BYTES)
    custom = alpha + measured / (beta * scale) + (payload_bytes - measured) / ring_bytes_per_s
    ring = NCCL_LATENCY_SECONDS[link.kind] + payload_bytes / ring_bytes_per_s
    ring = ring + select(in_graph, eff.nccl_graph_latency_seconds, 0.0)
    graph = CUSTOM_ALLREDUCE_GRAPH_LATENCY_SECONDS + (ranks - 1) * payload_bytes / (
        link.one_way_bytes_per_s * CUSTOM_ALLREDUCE_GRAPH_LINK_FRACTION
    )
    custom = select(both(in_graph, custom_graph_fit), minimum(graph, ring), custom)
    use_custom = custom_allreduce_applies(payload_bytes, ranks, link, engine_has_custom)
    out = select(use_custom, custom, ring)
    return float(out) if _ndim(out) == 0 else out


def _select(condition: Any, if_true: Any, if_false: Any) -> Any:
    """``np.where`` for one element (a Python truth value)."""
    return if_true if condition else if_false


def _both(a: Any, b: Any) -> bool:
    """``np.logical_and`` for one element."""
    return bool(a) and bool(b)


def alltoall_seconds(eff: Efficiency, payload_bytes: Any, ranks: int, link: Link) -> Any:
    """Seconds of one expert-parallel dispatch or combine in which each of ``ranks`` GPUs sends
    ``payload_bytes`` (``planner.model.ops.expert_dispatch``: tokens x copies x hidden x bytes per element) over
    ``link`` (the EP group's: NVLink inside one domain, the network when the group leaves it; the slowest hop
    paces the exchange, so a group across nodes sends all of it at the network's per-GPU bandwidth)::

        t = latency(link) + payload / (one-way bandwidth(link) x allreduce_fraction)

    with NCCL's small-message latency by link (``NCCL_LATENCY_SECONDS``: 12.5 us inside an NVLink domain, 46 us
    across nodes), the all-gather / reduce-scatter vLLM's default backend runs. DeepEP's published low-latency
    kernels (README, H800 with CX7 400 Gb/s, 128 tokens, hidden 7168, top-8, fp8 dispatch): EP 8 dispatch 77 us at
    98 GB/s, combine 114 us at 127 GB/s; EP 16 118 / 195 us; its normal kernels reach 153 / 158 GB/s over NVLink
    (EP 8) and 43 GB/s over RDMA (EP 16). Worked example, that EP 8 dispatch on one node of H100 (450 GB/s one way)
    at the BOUND factors: payload 128 x 8 x 7/8 x 7168 x 1.03 B = 6.6 MB, 12.5 us + 6.6 MB / 450 GB/s = 27 us;
    over a 50 GB/s network 46 us + 132 us = 178 us (DeepEP measured 77 us: its RDMA figure counts NVLink-local
    traffic, so across nodes this bounds it from above). ``ranks`` <= 1 costs nothing.
    """
    if ranks <= 1:
        return payload_bytes * 0.0
    return NCCL_LATENCY_SECONDS[link.kind] + payload_bytes / (link.one_way_bytes_per_s * eff.allreduce_fraction)


def gpu_step_seconds(kernel_seconds: Any, launch_seconds_total: Any) -> Any:
    """GPU time of a step: its kernels back to back, unless launching them takes longer (the host
    enqueues ahead of the GPU, so launches bind only in aggregate: tiny eager kernels)."""
    if isinstance(kernel_seconds, float) and isinstance(launch_seconds_total, float):
        return max(kernel_seconds, launch_seconds_total)
    return np.maximum(kernel_seconds, launch_seconds_total)


def host_seconds(eff: Efficiency, num_seqs: Any) -> Any:
    """CPU work of one engine step (schedule, prepare inputs, process outputs) for ``num_seqs`` sequences."""
    return eff.step_overhead_seconds + eff.host_seconds_per_seq * num_seqs


def combine_step(gpu_seconds: Any, host: Any, async_scheduling: bool) -> Any:
    """Wall time of one step: ``max(gpu, host)`` when the engine overlaps the next step's host work with
    this step's GPU work (async scheduling), else ``gpu + host``."""
    if async_scheduling:
        if isinstance(gpu_seconds, float) and isinstance(host, float):
            return max(gpu_seconds, host)
        return np.maximum(gpu_seconds, host)
    return gpu_seconds + host


def piecewise_graphs(cuda_graph_mode: str, graphs_on: bool, tokens: float, max_graph_batch: int) -> bool:
    """Whether a step that is not a pure decode replays piecewise CUDA graphs: the engine captures them
    (vLLM V1's FULL_AND_PIECEWISE / PIECEWISE), graphs are on and the step's tokens fit the largest size."""
    return graphs_on and cuda_graph_mode in ("full_and_piecewise", "piecewise") and tokens <= max_graph_batch


def decode_graph_flags(graphs: Any, full_graphs: bool) -> tuple[Any, Any]:
    """(full, piecewise) graph flags of a pure-decode step that fits a captured size where ``graphs`` holds:
    one full graph when the engine captures the whole model (``EngineProfile.full_decode_graphs``), else the
    piecewise graphs it falls back to (attention launched eagerly, the rest replayed)."""
    return (graphs, False) if full_graphs else (False, graphs)


def replays_graph(kind_code: Any, full: Any, piecewise: Any) -> Any:
    """Whether an op runs inside a replayed CUDA graph: every op of a full-graph (pure decode) step; every op
    but attention, which piecewise graphs leave out, of a piecewise step."""
    if _ndim(kind_code) == 0 and _ndim(full) == 0 and _ndim(piecewise) == 0:
        return bool(full or (piecewise and kind_code != KIND_CODES["attention"]))
    return np.logical_or(full, np.logical_and(piecewise, kind_code != KIND_CODES["attention"]))


def graph_padded_batch(batch: Any, max_graph_batch: int) -> Any:
    """The CUDA-graph size a pure-decode batch runs at: the smallest captured size >= batch.

    vLLM captures [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16) (engines.md 2); a batch
    above the largest captured size runs eagerly at its own size. Example: 13 -> 16, 250 -> 256,
    300 -> 304.
    """
    if _ndim(batch) == 0:
        b = float(batch)
        if b > max_graph_batch or b <= 2:
            return b
        size = 4.0 if b <= 4 else (math.ceil(b / 8) * 8.0 if b < 256 else math.ceil(b / 16) * 16.0)
        return min(size, float(max(max_graph_batch, 1)))
    arr = np.asarray(batch, dtype=float)
    padded = np.where(
        arr <= 2, arr, np.where(arr <= 4, 4.0, np.where(arr < 256, np.ceil(arr / 8) * 8, np.ceil(arr / 16) * 16))
    )
    padded = np.where(arr > max_graph_batch, arr, np.minimum(padded, max(max_graph_batch, 1)))
    return float(padded) if _ndim(padded) == 0 else padded


# ----------------------------------------------------------------------------- pipeline parallelism

#: Tensors one pipeline stage hands the next, per token: the hidden state and the residual (vLLM's
#: ``IntermediateTensors({"hidden_states", "residual"})``, ``LlamaModel.make_empty_intermediate_tensors``).
PP_SEND_TENSORS = 2


def activation_send_seconds(
    eff: Efficiency, tokens: Any, hidden_size: int, act_bytes: float, tp: int, link: Link, tp_link: Link
) -> Any:
    """Seconds to hand one batch's activations from a pipeline stage to the next (``tokens`` may be an array).

    vLLM sends them with ``send_tensor_dict(..., all_gather_group=tp_group)`` and receives them with
    ``recv_tensor_dict(all_gather_group=tp_group)`` (vllm/v1/worker/gpu_worker.py): each of the ``tp``
    ranks sends 1/tp of the tensors to its peer of the next stage over the boundary's ``link``, and the
    receiving stage all-gathers the pieces over its own TP group (``tp_link``)::

        P        = PP_SEND_TENSORS x tokens x hidden x act_bytes
        t_send   = latency(link) + P / tp / (one-way bandwidth(link) x allreduce_fraction)
        t_gather = latency(tp_link) + (tp - 1) / tp x P / (one-way bandwidth(tp_link) x allreduce_fraction)  (tp > 1)

    The latencies are NCCL's small-message figures by link (``NCCL_LATENCY_SECONDS``: 12.5 us inside an
    NVLink domain, 42 us over PCIe, 46 us across nodes; module docstring). Worked example, Llama-3.1-70B
    (hidden 8192, bf16) decode of 64 sequences, TP 4, the boundary across nodes (50 GB/s per GPU), at the
    BOUND factors (fraction 1): P = 2 x 64 x 8192 x 2 = 2 MiB; t_send = 46 us + 524,288 / 50 GB/s = 56.5 us;
    t_gather (NVLink 450 GB/s) = 12.5 us + 0.75 x 2,097,152 / 450 GB/s = 16.0 us; 72.5 us in all.
    """
    payload = PP_SEND_TENSORS * tokens * hidden_size * act_bytes
    send = NCCL_LATENCY_SECONDS[link.kind] + payload / tp / (link.one_way_bytes_per_s * eff.allreduce_fraction)
    if tp <= 1:
        return send
    gather = NCCL_LATENCY_SECONDS[tp_link.kind] + (tp - 1) / tp * payload / (
        tp_link.one_way_bytes_per_s * eff.allreduce_fraction
    )
    return send + gather


class PipelineTime(NamedTuple):
    """How batches flow through the pipeline's stages (``pipeline_seconds``); seconds, or arrays of them."""

    latency_seconds: Any
    """One batch through every stage, start to end: the stages, the sends between them (and the host's
    work on it without async scheduling)."""
    interval_seconds: Any
    """Time between batches leaving the last stage with ``in_flight`` batches in flight."""
    period_seconds: Any
    """Time between two tokens of one request: its batch comes round once per ``in_flight`` batches."""
    bubble_fraction: Any
    """Share of the stages' time spent idle: 1 - sum of stage times / (stages x interval)."""

    def seconds_for(self, batches: int) -> Any:
        """``batches`` batches back to back (a prompt's chunks): the first's latency, then one interval each."""
        return self.latency_seconds + (batches - 1) * self.interval_seconds


def pipeline_seconds(
    stage_seconds: Sequence[Any],
    send_seconds: Sequence[Any],
    in_flight: int,
    host_seconds: Any = 0.0,
    async_scheduling: bool = True,
) -> PipelineTime:
    """How long a step takes when the model runs as ``len(stage_seconds)`` pipeline stages.

    ``stage_seconds[i]``: GPU time of stage i on one batch (its layers' ops, ``gpu_step_seconds``);
    ``send_seconds[i]``: its activation send to stage i + 1 (``activation_send_seconds``; one fewer than
    the stages); ``host_seconds``: the engine's host work for one batch (``host_seconds``). A batch passes
    the stages in turn, so one batch alone takes ``L = sum(stages) + sum(sends)`` (plus the host's work
    when the engine does not overlap it). vLLM V1 keeps up to pp batches in flight, one per stage
    (``EngineCore.batch_queue`` of ``max_concurrent_batches`` = pipeline_parallel_size,
    vllm/v1/engine/core.py ``step_with_batch_queue`` and vllm/v1/executor/multiproc_executor.py), so with
    ``m`` batches in flight the slowest stage (or the host, which prepares one batch at a time) paces them:

        interval = max(L / m, max(stage), host)       one batch leaves the last stage per interval
        period   = m x interval                        a request's next token (its batch comes round again)
        bubble   = 1 - sum(stage) / (stages x interval)

    With one stage this is ``combine_step``: ``max(gpu, host)`` with async scheduling, ``gpu + host``
    without. Worked example: two stages of 10 ms, a 0.1 ms send: one batch in flight, L = interval =
    period = 20.1 ms, bubble 1 - 20 / (2 x 20.1) = 0.50 ((pp - 1) / pp); two in flight, interval =
    max(10.05, 10) = 10.05 ms, period 20.1 ms, bubble 0.005: twice the batches in the same time.
    """
    stages = len(stage_seconds)
    gpu = _sum(stage_seconds)
    latency = gpu + _sum(send_seconds)
    if not async_scheduling:
        latency = latency + host_seconds
    slowest = _reduce_max(list(stage_seconds) + [host_seconds])
    interval = _maximum(latency / in_flight, slowest)
    return PipelineTime(latency, interval, in_flight * interval, 1.0 - gpu / (stages * interval))


def _sum(values: Sequence[Any]) -> Any:
    total: Any = 0.0
    for v in values:
        total = total + v
    return total


def _maximum(a: Any, b: Any) -> Any:
    if _ndim(a) == 0 and _ndim(b) == 0:
        return max(float(a), float(b))
    return np.maximum(a, b)


def _reduce_max(values: Sequence[Any]) -> Any:
    out = values[0]
    for v in values[1:]:
        out = _maximum(out, v)
    return out
