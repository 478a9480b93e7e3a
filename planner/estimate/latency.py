"""Latency: how many seconds to the first token, per output token, and per request.

From the roofline of the two stages (``planner.estimate.roofline``):

    TTFT  = prefill of the batch's prompts, in ceil(batch x input / max_num_batched_tokens) steps
            (each further step paying the host work the engine does not hide), plus the API server's
            time per request (``frontend_seconds_per_request``)
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

import copy
import math
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.errors import ScenarioError
from planner.estimate import multimodal, step
from planner.estimate.memory import MemoryPlan, plan_memory
from planner.estimate.resolve import resolve
from planner.estimate.roofline import (
    PredictionKind,
    Roofline,
    Stage,
    efficiency_for,
    engine_of,
    full_decode_graphs,
    layer_groups,
    model_ops,
    prediction_kind,
    roofline,
    stage_op_counts,
    step_shape,
)
from planner.estimate.speculative import SpeculativeEstimate, estimate_speculation
from planner.hardware import HardwareProfile
from planner.model.encoders import ENCODER_GROUP
from planner.model.layers import DecoderLayer, MoE
from planner.model.ops import LORA_OP_PREFIX, Op
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.units import cdiv


class PipelineEstimate(BaseModel):
    """How the static batch runs through the pipeline stages (``pp`` > 1; ``step.pipeline_seconds``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    in_flight_batches: int = Field(
        description="Decode micro-batches in flight, min(pp, batch): the batch split evenly, one per stage."
    )
    micro_batch_size: int = Field(description="Sequences per decode micro-batch, ceil(batch / in_flight_batches).")
    decode_stage_seconds: list[float] = Field(description="GPU seconds of each stage on one decode micro-batch.")
    decode_send_seconds: list[float] = Field(description="Activation send after each stage but the last, seconds.")
    decode_latency_seconds: float = Field(
        description="One decode micro-batch through every stage: stages + sends (+ host work without async), seconds."
    )
    decode_interval_seconds: float = Field(
        description="Between decode micro-batches leaving the last stage: max(latency / in flight, slowest stage, "
        "host), seconds; TPOT is in_flight_batches x this."
    )
    prefill_chunks: int = Field(description="Prefill batches (chunks) that flow through the stages back to back.")
    prefill_interval_seconds: float = Field(description="Between prefill chunks leaving the last stage, seconds.")


class LatencyEstimate(BaseModel):
    """TTFT, TPOT and throughput of one static batch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_size: int = Field(description="Requests in the batch.")
    input_len: int = Field(description="Prompt tokens per request.")
    output_len: int = Field(description="Generated tokens per request.")
    ttft_seconds: float = Field(description="Time to the first token of the batch (all prompts prefilled), seconds.")
    tpot_seconds: float = Field(description="Time per output token after the first (one decode step), seconds.")
    decode_context_len: int = Field(
        description="Context of the decode step TPOT is taken at: input + output / 2, tokens."
    )
    e2e_seconds: float = Field(description="TTFT + (output_len - 1) x TPOT, seconds.")
    throughput_tokens_per_s: float = Field(
        description="Output tokens per second of the whole deployment (all replicas)."
    )
    throughput_tokens_per_s_per_gpu: float = Field(description="Output tokens per second per GPU.")
    requests_per_s: float = Field(description="Completed requests per second of the whole deployment.")
    prefill_steps: int = Field(description="Steps the prefill takes under the max_num_batched_tokens budget.")
    prefill_bound: str = Field(description="Ceiling that binds the prefill.")
    decode_bound: str = Field(description="Ceiling that binds the decode step.")
    kind: PredictionKind = Field(description="bound, estimate or calibrated.")
    fits_in_kv_cache: bool | None = Field(
        None, description="Whether batch x (input + output) tokens fit the planned KV cache."
    )
    does_not_start: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The memory plan's verdict when vLLM would not start with this scenario (max_model_len or the "
        "weights): the figures are then the steps' times as if it had; absent when it starts or was not checked.",
    )
    speculative: SpeculativeEstimate | None = Field(
        None,
        exclude_if=lambda v: v is None,  # a plain dump stays what it was before speculation existed
        description="Speculative decoding's step at the decode context (TPOT above is its tpot_seconds); "
        "absent when speculation is off.",
    )
    pipeline_bubble_fraction: float | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Share of the pipeline stages' time idle during decode: 1 - sum of stage times / (pp x "
        "interval); (pp - 1) / pp with one micro-batch in flight, near 0 with pp. Absent at pp 1.",
    )
    pipeline: PipelineEstimate | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The pipeline's stages, sends and micro-batches behind TTFT and TPOT; absent at pp 1.",
    )
    image_tokens_per_request: int | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Prompt tokens each request's images become (--images-per-request x tokens per image), "
        "prefilled with the input_len text tokens; absent without images.",
    )
    encoder_seconds: float | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The vision encoder's forward over the batch's images, inside TTFT (its rows of the prefill "
        "roofline), seconds; absent without images.",
    )


def decode_context_len(input_len: int, output_len: int) -> int:
    """The mean context of a request's decode steps: input + output / 2 (at least one token more)."""
    return input_len + max(1, output_len // 2)


def first_token_seconds(prefill_seconds: float, prefill_steps: int, batch: int, eff: Efficiency, engine) -> float:
    """TTFT of a static batch: its prefill, the host work of each further prefill step that the engine does
    not hide behind the GPU (all of it without async scheduling), and the API server's time per request."""
    chunk_host = 0.0 if engine.async_scheduling else float(step.host_seconds(eff, batch))
    return prefill_seconds + (prefill_steps - 1) * chunk_host + eff.frontend_seconds_per_request


def estimate_latency(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    batch_size: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    efficiency: Efficiency | None = None,
    check_memory: bool = True,
    draft_model: ModelSpec | None = None,
    prefill_roofline: Roofline | None = None,
    decode_roofline: Roofline | None = None,
    memory_plan: MemoryPlan | None = None,
) -> LatencyEstimate:
    """TTFT, TPOT and throughput for a static batch (defaults from ``sc.workload``).

    With ``sc.speculative`` TPOT is the speculative step's time per token (``planner.estimate.speculative``;
    ``draft_model`` is the draft's spec for method draft) and E2E and throughput follow from it.

    A caller that has already computed, for this same model, card and scenario, the prefill roofline of the
    batch's prompts, the decode roofline at ``decode_context_len`` (pp 1) or the memory plan may pass them
    (``prefill_roofline``, ``decode_roofline``, ``memory_plan``) instead of having them computed again; each is
    checked against the step it stands for (stage, batch, length, kind, card, TP; the plan's resolved scenario)
    and refused with a ScenarioError when it is another's.
    """
    wl = sc.workload
    B, n_in, n_out = batch_size or wl.batch_size, input_len or wl.input_len, output_len or wl.output_len
    eff = efficiency or efficiency_for(hw, sc=sc)
    res = resolve(model, hw, sc)
    n_text, n_in = n_in, multimodal.prompt_tokens(model, sc, n_in)  # the images' tokens are prefilled too
    steps = cdiv(B * n_in, res.max_num_batched_tokens) if res.enable_chunked_prefill else B
    pre = _given_or_roofline(prefill_roofline, model, hw, sc, eff, "prefill", B, n_in, res.tp)
    ttft = first_token_seconds(pre.total_seconds, steps, B, eff, engine_of(sc))
    decode_context = decode_context_len(n_in, n_out)
    pipeline = None
    if res.pp > 1:
        if decode_roofline is not None:
            raise ScenarioError(
                f"a decode roofline was passed to estimate_latency with --pp {res.pp}: a pipelined batch decodes "
                "in micro-batches, whose rooflines it computes itself.",
                hint="Pass decode_roofline only at --pp 1.",
            )
        ttft, dec, pipeline = pipelined_batch(model, hw, sc, eff, B, n_in, steps, decode_context, pre)
        tpot = pipeline.decode_interval_seconds * pipeline.in_flight_batches
    else:
        dec = _given_or_roofline(decode_roofline, model, hw, sc, eff, "decode", B, decode_context, res.tp)
        tpot = dec.total_seconds
    speculative = None
    if sc.speculative is not None:
        speculative = estimate_speculation(model, hw, sc, B, decode_context, eff, draft_model)
        tpot = speculative.tpot_seconds
    e2e = ttft + (n_out - 1) * tpot
    replicas = sc.replicas * sc.data_parallel_size  # each DP rank serves its own batch of B
    tokens_per_s = B * n_out / e2e * replicas
    fits, does_not_start = None, None
    if check_memory:
        if memory_plan is not None and (memory_plan.resolved != res or memory_plan.gpu_name != hw.name):
            raise ScenarioError(
                "the memory plan passed to estimate_latency is another scenario's (its resolved settings or card "
                "differ from this one's).",
                hint="Pass the plan_memory result of the same model, card and scenario, or none.",
            )
        plan = memory_plan or plan_memory(model, hw, sc, suggest=False)
        # the tokens alone: whether vLLM starts at all (max_model_len, the weights) is the plan's verdict, said apart
        fits = plan.kv_cache_tokens >= B * (n_in + n_out)
        does_not_start = None if plan.fits else plan.reason
    images = n_in > n_text
    return LatencyEstimate(
        batch_size=B,
        input_len=n_text,
        output_len=n_out,
        ttft_seconds=ttft,
        tpot_seconds=tpot,
        decode_context_len=decode_context,
        e2e_seconds=e2e,
        throughput_tokens_per_s=tokens_per_s,
        throughput_tokens_per_s_per_gpu=tokens_per_s / sc.total_gpus,
        requests_per_s=B / e2e * replicas,
        prefill_steps=steps,
        prefill_bound=pre.bound,
        decode_bound=dec.bound,
        kind=prediction_kind(eff),
        fits_in_kv_cache=fits,
        does_not_start=does_not_start,
        speculative=speculative,
        pipeline_bubble_fraction=None if pipeline is None else _decode_bubble(pipeline),
        pipeline=pipeline,
        image_tokens_per_request=n_in - n_text if images else None,
        encoder_seconds=sum(r.total_seconds for r in pre.layers if r.group.startswith(ENCODER_GROUP))
        if images
        else None,
    )


def _given_or_roofline(
    given: Roofline | None,
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    eff: Efficiency,
    stage: Stage,
    batch: int,
    length: int,
    tp: int,
) -> Roofline:
    """The caller's roofline of this step when it passed one (checked to be of this step), else computed."""
    if given is None:
        return roofline(model, hw, sc, stage, batch, length, eff)
    want = (stage, batch, length, prediction_kind(eff), hw.name, tp)
    got = (given.stage, given.batch, given.seq_len, given.kind, given.gpu, given.tp)
    if got != want:
        raise ScenarioError(
            f"the {stage} roofline passed to estimate_latency is of another step: (stage, batch, length, kind, card, "
            f"tp) {got}, where this estimate needs {want}.",
            hint=f"Pass roofline(model, hw, sc, {stage!r}, {batch}, {length}) of the same scenario, or none.",
        )
    return given


def _decode_bubble(p: PipelineEstimate) -> float:
    return 1.0 - sum(p.decode_stage_seconds) / (len(p.decode_stage_seconds) * p.decode_interval_seconds)


def pipelined_batch(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    eff: Efficiency,
    batch: int,
    input_len: int,
    prefill_steps: int,
    decode_context: int,
    pre: Roofline,
) -> tuple[float, Roofline, PipelineEstimate]:
    """(TTFT, decode roofline, pipeline) of a static batch on ``pp`` > 1 stages (``step.pipeline_seconds``).

    Prefill: the batch's ``prefill_steps`` chunks (each 1 / steps of the prefill roofline's per-stage time,
    its tokens' activations sent between stages) flow through the stages back to back, min(steps, pp) in
    flight: TTFT = latency of one chunk + (steps - 1) x interval + the API server's time. One chunk (a
    batch within the token budget) crosses the stages one after the other: no overlap.

    Decode: the batch split evenly into min(pp, batch) micro-batches, one per stage in flight (vLLM V1's
    batch queue of pp batches); TPOT = in flight x interval = max(latency, in flight x slowest stage).
    vLLM V1's scheduler does not itself split a batch that arrived at once (vllm-project/vllm#41682):
    requests that start together can stay in one micro-batch, whose TPOT is the latency (one in flight,
    bubble (pp - 1) / pp); the even split is the steady state of a served load, where arrivals spread
    the requests over the batches in flight.
    """
    from planner.estimate import placement

    res = resolve(model, hw, sc)
    engine = engine_of(sc)
    links, tp_link = placement.stage_links(hw, sc), placement.tp_link(hw, sc)
    chunk_tokens = batch * input_len / prefill_steps

    def sends(tokens: float) -> list[float]:
        return [
            float(
                step.activation_send_seconds(
                    eff, tokens, model.hidden_size, res.act_bytes_per_element, res.tp, link, tp_link
                )
            )
            for link in links
        ]

    prefill = step.pipeline_seconds(
        [st.gpu_seconds / prefill_steps for st in pre.pipeline or []],
        sends(chunk_tokens),
        min(prefill_steps, res.pp),
        float(step.host_seconds(eff, batch)),
        engine.async_scheduling,
    )
    ttft = float(prefill.seconds_for(prefill_steps)) + eff.frontend_seconds_per_request
    in_flight = min(res.pp, batch)
    micro = cdiv(batch, in_flight)
    dec = roofline(model, hw, sc, "decode", micro, decode_context, eff)
    stage_seconds = [st.gpu_seconds for st in dec.pipeline or []]
    send_seconds = [st.send_seconds for st in (dec.pipeline or [])[:-1]]
    decode = step.pipeline_seconds(
        stage_seconds, send_seconds, in_flight, float(step.host_seconds(eff, micro)), engine.async_scheduling
    )
    return (
        ttft,
        dec,
        PipelineEstimate(
            in_flight_batches=in_flight,
            micro_batch_size=micro,
            decode_stage_seconds=stage_seconds,
            decode_send_seconds=send_seconds,
            decode_latency_seconds=float(decode.latency_seconds),
            decode_interval_seconds=float(decode.interval_seconds),
            prefill_chunks=prefill_steps,
            prefill_interval_seconds=float(prefill.interval_seconds),
        ),
    )


#: Step features the op table is linear in: [1, tokens T, sequences S, (query, key) pairs P, cached
#: tokens read K]. Every op of ``planner.model.layers`` has FLOPs, bytes, GEMM rows and all-reduce
#: payload linear in them (MoE expert weights aside, which follow the touched experts).
FEATURES = ("one", "tokens", "seqs", "pairs", "kv_tokens")


def _decode_features(batch: float, context: float) -> list[float]:
    return [1.0, batch, batch, batch * context, batch * context]


def _prefill_features(batch: float, query: float, context: float | None = None) -> list[float]:
    """Features of a prefill chunk of ``query`` tokens per sequence on top of ``context - query`` cached."""
    c = query if context is None else context
    return [1.0, batch * query, batch, batch * (query * (c - query) + query * (query + 1) / 2), batch * c]


#: Basis shapes the table is solved on: (stage, batch, length[, context]). Small contexts so that no
#: sliding window binds (windows are applied per row when the table is evaluated).
_BASIS: tuple[tuple[Stage, int, int] | tuple[Stage, int, int, int], ...] = (
    ("decode", 1, 1),
    ("decode", 2, 1),
    ("decode", 1, 3),
    ("decode", 3, 5),
    ("prefill", 1, 4),
    ("prefill", 1, 8),
    ("prefill", 2, 4),
    ("prefill", 3, 2),
    ("prefill", 1, 16),
    ("prefill", 1, 4, 9),
    ("prefill", 2, 3, 7),
)


def _signature(ops: list[Op]) -> list[tuple[str, str]]:
    """What identifies each op across shapes: its kind and name (MoE names carry a count: cut it)."""
    return [(op.kind, op.name.split(" (")[0]) for op in ops]


def _features(stage: str, batch: int, length: int, context: int | None = None) -> list[float]:
    return _decode_features(batch, length) if stage == "decode" else _prefill_features(batch, length, context)


def _basis_shape(model: ModelSpec, res, stage: Stage, batch: int, length: int, context: int | None = None):
    shape = step_shape(model, res, stage, batch, length)
    return shape if context is None else shape.model_copy(update={"context_len": context})


#: ``StepTimeModel._scalar_rows``' constants of one op row: flops, other-bytes and GEMM-row coefficients
#: (5 features each), sliding window (None for full attention), GEMM-like, grouped derate, compute and memory
#: fractions, peak FLOP/s, layer count, kernel floor, launch seconds, carries the per-sequence attention floor.
_ScalarRow = tuple[
    tuple[float, ...],
    tuple[float, ...],
    tuple[float, ...],
    float | None,
    bool,
    float,
    float,
    float,
    float,
    float,
    float,
    float,
    bool,
]


#: ``StepTimeModel._scalar_prefix``'s row: flops over features 0-2 and its coefficients of features 3 and 4,
#: the same for bytes, the window in (pairs, KV tokens) or None, a GEMM-like row's (GEMM rows over features 0-2,
#: their coefficients of 3 and 4, grouped derate, peak) or None, peak x compute fraction, bandwidth x memory
#: fraction, kernel floor, layer count.
_RowPrefix = tuple[
    float,
    float,
    float,
    float,
    float,
    float,
    tuple[float, float] | None,
    tuple[float, float, float, float, float] | None,
    float,
    float,
    float,
    float,
]


#: ``StepTimeModel._decode_batch``: table, batch run, (full, piecewise) graph flags, token-row kernel and launch
#: seconds, attention prefix (or None) and launch seconds, host seconds.
_DecodeBatch = tuple["OpTable", float, tuple[bool, bool], float, float, list[_RowPrefix] | None, float, float]
#: ``StepTimeModel._rows_by_tokens``: piecewise graphs, token-row kernel and launch seconds, attention prefix (or
#: None) and launch seconds.
_TokenRows = tuple[bool, float, float, list[_RowPrefix] | None, float]


class OpTable:
    """Every op of one stage's step as rows linear in the step features (one TP rank).

    Built once per (model, scenario) by evaluating the layers' own ``ops`` at the basis shapes and
    solving for each row's coefficients (exact: the residual is checked). ``evaluate`` gives each
    row's FLOPs, bytes, GEMM rows and all-reduce payload for any step's features, so a step costs
    the same rows the roofline binds, op by op. Rows are the ops of one layer per distinct layer
    (``count`` = layers that run it) and the model's own ops (embedding, final norm, lm_head,
    sampler); MoE expert rows keep their routing so their weight bytes follow the touched experts.
    """

    def __init__(self, model: ModelSpec, res, stages: tuple[str, ...]):
        bases = [b for b in _BASIS if b[0] in stages]
        per_basis: list[list[tuple[Op, int, DecoderLayer | None]]] = []
        #: Each row's layers (the model's own ops: the op's name), for ``for_stage``.
        self.layer_ids: list[tuple[int, ...] | str] = []
        for basis in bases:
            shape = _basis_shape(model, res, *basis)
            rows: list[tuple[Op, int, DecoderLayer | None]] = []
            ids: list[tuple[int, ...] | str] = []
            for _group, idx in layer_groups(model):
                layer = model.layers[idx[0]]
                layer_ops = layer.ops(shape)
                rows += [(op, len(idx), layer) for op in layer_ops]
                ids += [tuple(idx)] * len(layer_ops)
            model_rows = model_ops(model, shape)
            rows += [(op, 1, None) for op in model_rows]
            ids += [op.name for op in model_rows]
            per_basis.append(rows)
            if not self.layer_ids:
                self.layer_ids = ids
        first = per_basis[0]
        X = np.asarray([_features(*b) for b in bases], float)
        self.kind = np.asarray([step.KIND_CODES[op.kind] for op, _, _ in first], float)
        self.count = np.asarray([c for _, c, _ in first], float)
        self.kernels = np.asarray([op.kernels for op, _, _ in first], float)
        self.compute_dtypes = [op.compute_dtype for op, _, _ in first]
        self.names = [op.name for op, _, _ in first]
        #: The layer object whose ops each row is (None for the model's own ops: embedding, norm, lm_head, sampler).
        self.owner = [layer for _, _, layer in first]
        self.window = np.asarray(
            [
                getattr(layer.mixer, "window_tokens", None) or np.inf
                if layer is not None and op.kind == "attention"
                else np.inf
                for op, _, layer in first
            ],
            float,
        )
        #: (row, MoE block, ep, dp, imbalance, bytes of one expert): the row's weight bytes and GEMM rows follow
        #: the experts its tokens touch (``MoE.rank_routing``).
        self.moe: list[tuple[int, MoE, int, int, float, float]] = []
        self.lora = _lora_rows(first, res, X[0])  # (row, slots, bytes of one adapter [of one expert], E, k)
        lora_rows = {row for row, *_ in self.lora}
        quantities: dict[str, list[list[float]]] = {"flops": [], "other_bytes": [], "m": [], "comm": []}
        for rows in per_basis:
            quantities["flops"].append([op.flops for op, _, _ in rows])
            quantities["other_bytes"].append(
                [
                    op.bytes - (op.weight_bytes if op.kind == "grouped_gemm" or i in lora_rows else 0.0)
                    for i, (op, _, _) in enumerate(rows)
                ]
            )
            quantities["m"].append([0 if op.kind == "grouped_gemm" else op.gemm_m_tokens or 0 for op, _, _ in rows])
            quantities["comm"].append([op.comm_bytes for op, _, _ in rows])
        for i, (op, _, owner) in enumerate(first):
            if op.kind == "grouped_gemm":
                ffn = owner.ffn if owner is not None else None
                assert isinstance(ffn, MoE), f"grouped GEMM {op.name} outside an MoE block"  # only MoE.ops emits one
                ep, dp, imbalance = (res.ep, res.dp, res.expert_load_imbalance) if res.ep > 1 else (1, 1, 1.0)
                touched = ffn.rank_routing(int(X[0, 1]), ep, dp, imbalance)[0]
                self.moe.append((i, ffn, ep, dp, imbalance, op.weight_bytes / touched))
        self.coef = {}
        for name, values in quantities.items():
            Y = np.asarray(values, float)  # bases x rows
            C, *_ = np.linalg.lstsq(X, Y, rcond=None)
            scale = np.maximum(np.abs(Y).max(axis=0), 1.0)
            if np.abs(X @ C - Y).max(axis=0).__truediv__(scale).max() > 1e-9:
                raise AssertionError(f"op table for {model.name} {stages}: {name} is not linear in the step features")
            C[np.abs(C) < 1e-9 * np.maximum(np.abs(C).max(axis=0), 1.0)] = 0.0  # lstsq noise on unused features
            self.coef[name] = C.T  # rows x features
        self.is_gemm = np.asarray([op.gemm_m_tokens is not None and op.kind != "grouped_gemm" for op, _, _ in first])
        self._finish()
        #: Rows whose work depends on the step's tokens and sequences only / on its attention too.
        attends = (np.abs(self.coef["flops"][:, 3:]) + np.abs(self.coef["other_bytes"][:, 3:])).sum(axis=1) > 0
        self.attention_rows = np.nonzero(attends)[0]
        self.token_rows = np.nonzero(~attends)[0]
        self._subsets: dict[bytes, OpTable] = {}
        #: For a ``subset``: the table it was cut from and its rows there (None for a whole table).
        self.parent: tuple[OpTable, np.ndarray] | None = None
        self._fractions: dict[int, tuple[Efficiency, dict[str, np.ndarray]]] = {}  # fractions', by id(eff)

    def _finish(self) -> None:
        """Derived arrays (call after the rows or coefficients change)."""
        self.gemm_like = self.is_gemm | (self.kind == step.KIND_CODES["grouped_gemm"])
        self.allreduce_rows = np.nonzero(self.kind == step.KIND_CODES["allreduce"])[0]
        self.alltoall_rows = np.nonzero(self.kind == step.KIND_CODES["alltoall"])[0]
        self.window_rows = np.nonzero(np.isfinite(self.window))[0]
        self.n = len(self.kind)
        # One matrix for the four quantities: rows of flops, other bytes, GEMM rows, payload.
        self._all = np.vstack([self.coef["flops"], self.coef["other_bytes"], self.coef["m"], self.coef["comm"]])

    def subset(self, rows: np.ndarray) -> OpTable:
        """The same table restricted to ``rows`` (cached per row set)."""
        key = rows.tobytes()
        hit = self._subsets.get(key)
        if hit is None:
            hit = object.__new__(OpTable)
            hit.kind, hit.count, hit.kernels = self.kind[rows], self.count[rows], self.kernels[rows]
            hit.compute_dtypes = [self.compute_dtypes[i] for i in rows]
            hit.names = [self.names[i] for i in rows]
            hit.owner = [self.owner[i] for i in rows]
            hit.window, hit.is_gemm = self.window[rows], self.is_gemm[rows]
            hit.coef = {k: v[rows] for k, v in self.coef.items()}
            where = {int(r): j for j, r in enumerate(rows)}
            hit.moe = [(where[i], ffn, ep, dp, imb, b) for i, ffn, ep, dp, imb, b in self.moe if i in where]
            hit.lora = [(where[i], slots, per, E, k) for i, slots, per, E, k in self.lora if i in where]
            hit._finish()
            hit._subsets = {}
            hit.parent = (self, rows)
            hit._fractions = {}
            self._subsets[key] = hit
        return hit

    def for_stage(self, layers: range, first: bool, last: bool) -> OpTable:
        """The same rows with each count cut to one pipeline stage (``roofline.stage_op_counts``): a layer
        row runs once per layer of its group inside ``layers``; the model's own ops on their stage."""
        hit = copy.copy(self)
        hit.count = np.asarray(stage_op_counts(self.layer_ids, layers, first, last), float)
        hit._subsets = {}
        return hit

    def fractions(self, eff: Efficiency) -> dict[str, np.ndarray]:
        """Each row's factors under ``eff`` that depend on no step and no card: non-GEMM compute fraction,
        memory fraction and grouped-GEMM derate (``step.op_fractions`` with the GEMM rows' M left open), kept
        per efficiency (every card of a sweep that shares one computes them once); a subset's are its whole
        table's at its rows (elementwise: the same numbers)."""
        hit = self._fractions.get(id(eff))
        if hit is None or hit[0] is not eff:
            if self.parent is not None:
                whole, rows = self.parent
                value = {k: v[rows] for k, v in whole.fractions(eff).items()}
            else:
                compute, memory = step.op_fractions(eff, self.kind, np.full(self.n, float(step.MAX_GEMM_ROWS)))
                value = {
                    "compute": np.asarray(compute, float),
                    "memory": np.asarray(memory, float) * np.ones(self.n),
                    "grouped": np.where(self.kind == step.KIND_CODES["grouped_gemm"], eff.grouped_gemm_fraction, 1.0),
                }
            hit = self._fractions[id(eff)] = (eff, value)
        return hit[1]

    def peaks(self, hw: HardwareProfile) -> np.ndarray:
        """Peak FLOP/s of each row's math dtype on ``hw`` (after the card's dtype fallback)."""
        peak = {
            d: hw.peak_flops_per_s[hw.compute_dtype_for(d) or hw.compute_dtype_for("bf16") or "fp32"]
            for d in set(self.compute_dtypes)
        }
        return np.asarray([peak[d] for d in self.compute_dtypes], float)

    def evaluate(self, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(flops, bytes, GEMM rows, all-reduce bytes) of every row for features ``f`` (5,) or (5, N)."""
        f = np.asarray(f, float)
        q = self._all @ f
        n = self.n
        flops, nbytes, m, comm = q[:n], q[n : 2 * n], q[2 * n : 3 * n], q[3 * n :]
        if len(self.window_rows):  # sliding layers: a sequence attends at most its window
            w = self.window[self.window_rows]
            w = w if f.ndim == 1 else w[:, None]
            d_pairs = np.minimum(f[3], f[1] * w) - f[3]
            d_kv = np.minimum(f[4], f[2] * w) - f[4]
            for name, out in (("flops", flops), ("other_bytes", nbytes)):
                c = self.coef[name][self.window_rows]
                c3, c4 = (c[:, 3], c[:, 4]) if f.ndim == 1 else (c[:, 3:4], c[:, 4:5])
                out[self.window_rows] += c3 * d_pairs + c4 * d_kv
        m = np.maximum(m, 1.0)
        tokens = f[1]
        for i, ffn, ep, dp, imbalance, per_expert in self.moe:
            touched, pairs = ffn.rank_routing(tokens, ep, dp, imbalance)
            nbytes[i] = nbytes[i] + per_expert * touched
            m[i] = np.maximum(1, np.round(pairs / np.maximum(touched, 1.0)))
        for i, slots, per_adapter, E, k in self.lora:  # the active adapters' A and B (of the touched experts)
            touched = E * (1.0 - (1.0 - k / E) ** tokens) if E else 1.0
            nbytes[i] = nbytes[i] + per_adapter * np.minimum(f[2], slots) * touched
        return flops, nbytes, m, comm


def _lora_rows(
    first: list[tuple[Op, int, DecoderLayer | None]], res, basis
) -> list[tuple[int, int, float, float, float]]:
    """The LoRA kernels' rows (``planner.model.ops.lora_op``): their adapter reads follow min(sequences, slots)
    and, for routed experts, the touched experts, so they are kept out of the linear fit (as MoE weights are)."""
    if res.lora is None:
        return []
    out = []
    adapters = min(float(basis[2]), res.lora.max_loras)
    for i, (op, _, layer) in enumerate(first):
        if not op.name.startswith(LORA_OP_PREFIX):
            continue
        ffn = layer.ffn if layer is not None else None
        if op.name.startswith(LORA_OP_PREFIX + "experts.") and isinstance(ffn, MoE):  # routed experts
            E, k, touched = ffn.num_experts, ffn.experts_per_token, ffn.expected_distinct_experts(int(basis[1]))
        else:
            E, k, touched = 0, 0, 1.0
        out.append((i, res.lora.max_loras, op.weight_bytes / (adapters * touched), float(E), float(k)))
    return out


def op_tables(model: ModelSpec, res) -> tuple[OpTable, OpTable]:
    """(decode table, prefill table) of one model and resolved scenario; the same object when both
    stages run the same ops."""
    if same_ops_in_both_stages(model, res):
        table = OpTable(model, res, ("decode", "prefill"))
        return table, table
    return OpTable(model, res, ("decode",)), OpTable(model, res, ("prefill",))


def same_ops_in_both_stages(model: ModelSpec, res) -> bool:
    """Whether a prefill step runs the same ops as a decode step (not so for MLA: expanded vs absorbed)."""
    sigs = []
    for st in ("decode", "prefill"):
        shape = step_shape(model, res, st, 1, 4)
        sigs.append([sig for _, idx in layer_groups(model) for sig in _signature(model.layers[idx[0]].ops(shape))])
    return sigs[0] == sigs[1]


class DecodeSteps(dict):
    """``StepTimeModel.decode_steps``: decode-only step seconds of one batch size, by tokens attended in all,
    each computed on first use (``_decode_scalar`` of the batch at context kv / batch) and kept."""

    __slots__ = ("batch", "line", "model")

    def __init__(self, model: StepTimeModel, batch: int):
        super().__init__()
        self.model, self.batch = model, batch
        self.line = None if model.pp > 1 else model._decode_line(float(batch))  # pp > 1: _decode_scalar each time

    def __missing__(self, kv: int) -> float:
        model = self.model
        if model.decode_steps_kept >= model.DECODE_STEPS_KEPT:
            for steps in model._decode_steps.values():
                steps.clear()
            model.decode_steps_kept = 0
        model.decode_steps_kept += 1
        context = kv / self.batch
        line = self.line
        if line is None:
            seconds = model._decode_scalar(float(self.batch), context)
        elif line[5] is None:
            seconds = model._decode_seconds(line, context)
        else:  # ``_decode_seconds`` of a line whose attention rows are scalar, its lookups inlined (the same floats)
            x = line[1] * context
            gpu = step.gpu_step_seconds(line[3] + model._scalar_kernels(line[5], x, x), line[4] + line[6])
            seconds = step.combine_step(gpu, line[7], model.engine.async_scheduling)
        self[kv] = seconds
        return seconds


class DecodeGrid(NamedTuple):
    """``StepTimeModel.decode_grid``: pure-decode points and what they cost before a card enters."""

    key: tuple
    """The op table's id, graph mode, largest captured graph and pp it was made for (``decode_on`` checks it)."""
    batch: np.ndarray
    context: np.ndarray
    rows: tuple | None
    """(index of each point's batch among the distinct padded batches, (features, graph flags, ``evaluate``) of
    the token rows at the distinct batches, the same of the attention rows at the points); None with pp > 1."""
    terms: dict[int, tuple]
    """``decode_on``'s ``efficiency_terms`` of the token and attention rows, by id of the efficiency."""


class StepTimeModel:
    """Seconds of one engine step with any mix of prefill chunks and decodes (for the simulator).

    The ops of the step come from ``OpTable`` (the same layer ops the roofline binds, as rows linear in
    the step's tokens, sequences, attention pairs and cached tokens); each row is bound by
    ``planner.estimate.step.op_seconds`` / ``allreduce_seconds`` exactly as ``roofline.bind`` binds
    the op, then the engine's host work is combined with the GPU time (``step.combine_step``:
    overlapped under async scheduling). A pure-decode step at batch B and context C costs what
    ``roofline(decode, B, C).total_seconds`` says (tested op by op); a pure-decode batch replaying a
    CUDA graph runs at the padded graph size. Mixed steps use the prefill table when the model's
    prefill and decode ops differ (MLA's expanded vs absorbed attention): the decode part is then
    costed with the decode table and the two added.

    With pipeline parallelism (pp > 1) each stage has its own tables (``OpTable.for_stage``) and a step
    is ``step.pipeline_seconds`` over them, as the latency estimate's: the step's sequences spread evenly
    over min(pp, sequences) micro-batches in flight, and a step lasts until every sequence has its next
    token. The simulator's loop advances every running request once per step, so this is the steady
    state of pp batches in flight, not vLLM V1's unbalanced batch queue (vllm-project/vllm#41682), and
    one long prompt's successive chunks are costed one whole pass each (vLLM overlaps them).
    """

    #: Decode steps ``decode_steps`` keeps over all batches (then it starts again): ~100 bytes each.
    DECODE_STEPS_KEPT = 1 << 20

    def __init__(
        self,
        model: ModelSpec,
        hw: HardwareProfile,
        sc: Scenario,
        efficiency: Efficiency | None = None,
        tables: tuple[OpTable, OpTable] | None = None,
    ):
        self.eff = efficiency or efficiency_for(hw, sc=sc)
        self.kind = prediction_kind(self.eff)
        self.hw, self.sc = hw, sc
        self.engine = engine_of(sc)
        self.graphs = sc.engine == "cuda-graphs"
        #: A pure-decode step replays one full graph (else the piecewise graphs the engine falls back to).
        self.full_graphs = full_decode_graphs(model, self.engine)
        res = self.res = resolve(model, hw, sc)
        self.tp = res.tp
        self.link = step.Link.for_group(hw, res.tp)
        self.ep, self.ep_link = res.ep, step.Link.for_group(hw, res.ep)  # the expert dispatch's group
        self.decode_table, self.prefill_table = tables or op_tables(model, res)
        self.shared = self.decode_table is self.prefill_table
        self.pp = res.pp
        if self.pp > 1:
            self._pipeline_setup(model, hw, sc, res)
        self._fixed: dict[int, dict[str, np.ndarray]] = {}
        self._memo: dict[tuple, _TokenRows] = {}  # _rows_by_tokens's
        self._steady: dict[tuple, tuple] = {}
        self._scalar: dict[tuple, list[_ScalarRow] | None] = {}
        self._decode_steps: dict[int, DecodeSteps] = {}  # decode_steps's, by batch
        self.decode_steps_kept = 0  # entries in all of them
        self._decode_batches: dict[tuple[int, float], _DecodeBatch] = {}  # _decode_batch's
        self._attention_tables: dict[tuple[int, bool, bool], tuple[OpTable, list[_ScalarRow] | None]] = {}

    def gpu_seconds(
        self,
        table: OpTable,
        f: np.ndarray,
        graphs,
        rows: np.ndarray | None = None,
        piecewise=False,
        quantities: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
        terms: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> tuple[float | np.ndarray, float | np.ndarray]:
        """(kernel seconds, launch seconds): sums over the table's rows (or the subset ``rows``) of each
        op's bound time and launch cost x layers; numbers for features ``f`` of shape (5,), arrays (N,)
        for (5, N). ``quantities``: that table's (or subset's) ``evaluate(f)``, when the caller has it (it
        depends on no card: ``decode_grid``); ``terms``: its ``efficiency_terms`` under this model's
        efficiency, likewise. Both are read, never written."""
        eff = self.eff
        if rows is not None:
            table = table.subset(rows)
        flops, nbytes, m, comm = table.evaluate(f) if quantities is None else quantities
        col = (lambda a: a) if np.ndim(f) == 1 else (lambda a: a[:, None])
        launch, floor, f_compute, f_memory = (
            self.efficiency_terms(table, f, graphs, piecewise, m) if terms is None else terms
        )
        t, _, _ = step.bound_seconds(
            flops,
            nbytes,
            f_compute,
            f_memory,
            col(self._fixed_for(table)["peak"]),
            self.hw.hbm_bandwidth_bytes_per_s,
            floor,
        )
        ar = table.allreduce_rows
        if len(ar):
            t[ar] = np.maximum(
                step.allreduce_seconds(
                    eff,
                    comm[ar],
                    self.tp,
                    self.link,
                    self.engine.custom_allreduce,
                    step.replays_graph(step.KIND_CODES["allreduce"], graphs, piecewise),
                    self.engine.custom_allreduce_graph_fit,
                ),
                floor[ar],
            )
        a2a = table.alltoall_rows
        if len(a2a):
            t[a2a] = np.maximum(step.alltoall_seconds(eff, comm[a2a], self.ep, self.ep_link), floor[a2a])
        count = col(table.count)
        return (t * count).sum(axis=0), (launch * count).sum(axis=0)

    def efficiency_terms(
        self, table: OpTable, f: np.ndarray, graphs, piecewise, m: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``gpu_seconds``' terms of ``table`` (a subset's rows) at features ``f`` with GEMM rows ``m`` that
        depend on the efficiency but on no card's peaks, bandwidth or links: each row's launch seconds, its
        floor (kernels and, for attention, sequences), its compute fraction (a GEMM's at its rows) and its
        memory fraction."""
        eff = self.eff
        col = (lambda a: a) if np.ndim(f) == 1 else (lambda a: a[:, None])
        kind, fixed = col(table.kind), table.fractions(eff)
        # Terms that do not depend on the step's features are computed once per (table, graph mode).
        scalar = np.ndim(graphs) == 0 and np.ndim(piecewise) == 0
        key = (id(table), bool(graphs), bool(piecewise), np.ndim(f)) if scalar else None
        steady = self._steady.get(key) if key is not None else None
        if steady is None:
            launch = step.launch_seconds(eff, col(table.kernels), step.replays_graph(kind, graphs, piecewise))
            steady = (launch, step.kernel_floor_seconds(eff, col(table.kernels)), bool(table.gemm_like.any()))
            if key is not None:
                self._steady[key] = steady
        launch, floor, any_gemm = steady
        f_compute = col(fixed["compute"])
        if any_gemm:
            f_compute = np.where(col(table.gemm_like), step.gemm_fraction(eff, m) * col(fixed["grouped"]), f_compute)
        if eff.attention_seconds_per_seq:
            floor = floor + step.attention_floor_seconds(eff, kind, col(table.kernels), f[2])
        return launch, floor, f_compute, col(fixed["memory"])

    def _scalar_rows(self, table: OpTable, graphs: bool, piecewise: bool) -> list[_ScalarRow] | None:
        """Per-row constants of ``table`` for ``_scalar_seconds`` (None when a row needs the array path:
        MoE rows, whose bytes follow the touched experts, and all-reduce rows)."""
        key = (id(table), graphs, piecewise)
        if key in self._scalar:
            return self._scalar[key]
        rows: list[_ScalarRow] | None = None
        if not table.moe and not len(table.allreduce_rows) and not len(table.alltoall_rows):
            fixed = self._fixed_for(table)
            launch = step.launch_seconds(self.eff, table.kernels, step.replays_graph(table.kind, graphs, piecewise))
            floor = step.kernel_floor_seconds(self.eff, table.kernels)
            attention_floor = (table.kind == step.KIND_CODES["attention"]) & (table.kernels > 0)
            rows = []
            for i in range(table.n):
                w = float(table.window[i])
                rows.append(
                    (
                        tuple(float(x) for x in table.coef["flops"][i]),
                        tuple(float(x) for x in table.coef["other_bytes"][i]),
                        tuple(float(x) for x in table.coef["m"][i]),
                        None if math.isinf(w) else w,
                        bool(table.gemm_like[i]),
                        float(fixed["grouped"][i]),
                        float(fixed["compute"][i]),
                        float(fixed["memory"][i]),
                        float(fixed["peak"][i]),
                        float(table.count[i]),
                        float(floor[i]),
                        float(launch[i]),
                        bool(attention_floor[i]),
                    )
                )
        self._scalar[key] = rows
        return rows

    def _scalar_seconds(self, rows: list[_ScalarRow], f: tuple[float, ...]) -> tuple[float, float]:
        """``gpu_seconds`` of one step in plain floats: the same expressions as ``OpTable.evaluate``
        and ``step.bound_seconds``, row by row (a simulation calls this for every step), in two stages:
        ``_scalar_prefix`` of the features a simulation's steps repeat (one, tokens, sequences), then
        ``_scalar_kernels`` of the attention features (pairs, KV tokens)."""
        prefix, launches = self._scalar_prefix(rows, f[0], f[1], f[2])
        return self._scalar_kernels(prefix, f[3], f[4]), launches

    def _scalar_prefix(self, rows: list[_ScalarRow], f0: float, f1: float, f2: float) -> tuple[list[_RowPrefix], float]:
        """Each row's terms of features 0-2 (its flops, bytes and GEMM rows summed over them in the order
        ``_scalar_seconds`` adds them, its window in pairs and KV tokens, its floor and divisors), and the
        rows' launch seconds, which depend on no feature."""
        eff, bw = self.eff, self.hw.known_hbm_bandwidth_bytes_per_s("a step time")
        per_seq = eff.attention_seconds_per_seq
        out: list[_RowPrefix] = []
        launches = 0.0
        for cf, cb, cm, w, gemm_like, grouped, compute, memory, peak, count, floor, launch, attn in rows:
            out.append(
                (
                    cf[0] * f0 + cf[1] * f1 + cf[2] * f2,
                    cf[3],
                    cf[4],
                    cb[0] * f0 + cb[1] * f1 + cb[2] * f2,
                    cb[3],
                    cb[4],
                    None if w is None else (f1 * w, f2 * w),  # a sliding layer: a sequence attends at most w
                    (cm[0] * f0 + cm[1] * f1 + cm[2] * f2, cm[3], cm[4], grouped, peak) if gemm_like else None,
                    peak * compute,
                    bw * memory,
                    floor + f2 * per_seq if per_seq and attn else floor,
                    count,
                )
            )
            launches += launch * count
        return out, launches

    def _scalar_kernels(self, prefix: list[_RowPrefix], f3: float, f4: float) -> float:
        """Kernel seconds of rows ``_scalar_prefix`` began, at attention features ``f3`` (pairs), ``f4`` (KV)."""
        kernels = 0.0
        for pf, c3, c4, pb, b3, b4, window, gemm, divisor, memory, floor, count in prefix:
            flops = pf + c3 * f3 + c4 * f4
            nbytes = pb + b3 * f3 + b4 * f4
            if window is not None:
                d_pairs = min(f3, window[0]) - f3
                d_kv = min(f4, window[1]) - f4
                flops += c3 * d_pairs + c4 * d_kv
                nbytes += b3 * d_pairs + b4 * d_kv
            if gemm is not None:
                pm, m3, m4, grouped, peak = gemm
                divisor = peak * (step.gemm_fraction(self.eff, max(pm + m3 * f3 + m4 * f4, 1.0)) * grouped)
            t = max(flops / divisor, nbytes / memory, floor)
            kernels += t * count
        return kernels

    def _fixed_for(self, table: OpTable) -> dict[str, np.ndarray]:
        """Per-row factors that do not depend on the step, kept: ``OpTable.fractions`` under this model's
        efficiency and the peak FLOP/s of each row's math dtype on its card (a subset's: its whole table's at
        its rows, elementwise, so the same numbers)."""
        hit = self._fixed.get(id(table))
        if hit is None:
            if table.parent is None:
                peak = table.peaks(self.hw)
            else:
                whole, rows = table.parent
                peak = self._fixed_for(whole)["peak"][rows]
            hit = self._fixed[id(table)] = {**table.fractions(self.eff), "peak": peak}
        return hit

    def decode_seconds(self, batch, context) -> np.ndarray | float:
        """Wall time of pure-decode steps at ``batch`` sequences of ``context`` tokens (1-d arrays allowed).

        A batch the engine captured as a CUDA graph runs at the padded graph size.
        """
        if (isinstance(batch, (int, float)) and isinstance(context, (int, float))) or np.ndim(batch) == np.ndim(
            context
        ) == 0:
            return self._decode_scalar(float(batch), float(context))
        out = self.decode_on(self.decode_grid(batch, context))
        return float(out) if np.ndim(out) == 0 else out

    def decode_grid(self, batch, context) -> DecodeGrid:
        """What ``decode_seconds`` over arrays ``batch`` x ``context`` computes before any card enters: the
        graph-padded batches, the step features and each op row's FLOPs, bytes, GEMM rows and payload
        (``OpTable.evaluate``). Every ``StepTimeModel`` on the same op tables, engine and graph mode (the
        sweep's cards of one model, TP and dtype) can cost it with ``decode_on``."""
        batch, context = np.broadcast_arrays(np.asarray(batch, float), np.asarray(context, float))
        key = self._grid_key()
        if self.pp > 1:  # the pipeline's micro-batches: one point at a time (``decode_on``)
            return DecodeGrid(key, batch, context, None, {})
        cap = self.engine.max_cuda_graph_batch
        graphs = np.logical_and(self.graphs, batch <= cap)
        run = np.where(graphs, step.graph_padded_batch(batch, cap), batch)
        table = self.decode_table
        # Rows that follow the tokens only are costed once per distinct batch, attention rows per point.
        unique, inverse = np.unique(run, return_inverse=True)
        u_graphs = np.logical_and(self.graphs, unique <= cap)  # padded sizes keep the graph flag
        zeros = np.zeros_like(unique)
        f0 = np.stack([np.ones_like(unique), unique, unique, zeros, zeros])
        f1 = np.stack([np.ones_like(run), run, run, run * context, run * context])
        q0 = table.subset(table.token_rows).evaluate(f0)
        q1 = table.subset(table.attention_rows).evaluate(f1)
        return DecodeGrid(key, batch, context, (inverse, (f0, u_graphs, q0), (f1, graphs, q1)), {})

    def _grid_key(self) -> tuple:
        """What a ``DecodeGrid`` depends on besides the card: op tables, graph modes, largest graph, pp."""
        return (id(self.decode_table), self.graphs, self.full_graphs, self.engine.max_cuda_graph_batch, self.pp)

    def decode_on(self, grid: DecodeGrid) -> np.ndarray:
        """``decode_seconds`` of the points of ``grid`` (``decode_grid``, of this model or one sharing its op
        tables, engine and graph mode) on this model's card."""
        if grid.key != self._grid_key():
            raise ValueError("decode_on: the grid was made for other op tables, engine or graph mode")
        batch, context = grid.batch, grid.context
        if grid.rows is None:
            flat = [
                self._decode_scalar(float(b), float(c)) for b, c in zip(batch.ravel(), context.ravel(), strict=True)
            ]
            return np.asarray(flat, float).reshape(batch.shape)
        inverse, (f0, u_graphs, q0), (f1, graphs, q1) = grid.rows
        table = self.decode_table
        tokens, attention = table.subset(table.token_rows), table.subset(table.attention_rows)
        full0, pw0 = step.decode_graph_flags(u_graphs, self.full_graphs)
        full1, pw1 = step.decode_graph_flags(graphs, self.full_graphs)
        hit = grid.terms.get(id(self.eff))  # cards of one efficiency share its terms
        if hit is None or hit[0] is not self.eff:
            hit = grid.terms[id(self.eff)] = (
                self.eff,
                self.efficiency_terms(tokens, f0, full0, pw0, q0[2]),
                self.efficiency_terms(attention, f1, full1, pw1, q1[2]),
            )
        k0, l0 = self.gpu_seconds(tokens, f0, full0, piecewise=pw0, quantities=q0, terms=hit[1])
        k1, l1 = self.gpu_seconds(attention, f1, full1, piecewise=pw1, quantities=q1, terms=hit[2])
        gpu = step.gpu_step_seconds(np.asarray(k0)[inverse] + k1, np.asarray(l0)[inverse] + l1)
        return step.combine_step(gpu, step.host_seconds(self.eff, batch), self.engine.async_scheduling)

    def decode_steps(self, decode_seqs: int) -> DecodeSteps:
        """The pure-decode steps of ``decode_seqs`` sequences by the tokens they attend in all: ``steps[kv]`` is
        ``step_seconds(prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=decode_seqs,
        decode_kv_tokens=kv)`` (which reads it here), each computed once. A simulation's steady state repeats
        them (the 100,000-request benchmark: 78,735 distinct of 712,237 decode steps), and its decode runs
        index the batch's mapping directly."""
        steps = self._decode_steps.get(decode_seqs)
        if steps is None:
            steps = self._decode_steps[decode_seqs] = DecodeSteps(self, decode_seqs)
        return steps

    def _decode_scalar(self, batch: float, context: float) -> float:
        """``decode_seconds`` of one step: what does not depend on the context once per batch
        (``_decode_batch``), attention rows per call."""
        if self.pp > 1:
            return self._pipelined_decode(batch, context)
        return self._decode_seconds(self._decode_line(batch), context)

    def _decode_line(self, batch: float) -> _DecodeBatch:
        """``_decode_batch`` of the decode table (pp 1), kept."""
        return self._decode_batches.get((id(self.decode_table), batch)) or self._decode_batch(self.decode_table, batch)

    def _decode_seconds(self, line: _DecodeBatch, context: float) -> float:
        """``_decode_scalar`` from the batch's ``_decode_line``."""
        kernels, launches = self._decode_line_gpu(line, context)
        gpu = step.gpu_step_seconds(kernels, launches)
        return float(step.combine_step(gpu, line[-1], self.engine.async_scheduling))

    def _decode_gpu(self, table: OpTable, batch: float, context: float) -> tuple[float, float]:
        """(kernel, launch) seconds of ``table``'s rows on one pure-decode step (the graph-padded batch)."""
        return self._decode_line_gpu(
            self._decode_batches.get((id(table), batch)) or self._decode_batch(table, batch), context
        )

    def _decode_line_gpu(self, line: _DecodeBatch, context: float) -> tuple[float, float]:
        """``_decode_gpu`` from the batch's ``_decode_batch``."""
        table, run, (full, piecewise), token_kernels, token_launches, prefix, attention_launches, _ = line
        x = run * context
        if prefix is None:
            k1, l1 = self._attention_part(table, (1.0, run, run, x, x), full, piecewise)
            return token_kernels + k1, token_launches + l1
        return token_kernels + self._scalar_kernels(prefix, x, x), token_launches + attention_launches

    def _decode_batch(self, table: OpTable, batch: float) -> _DecodeBatch:
        """What a pure-decode step of ``batch`` sequences on ``table`` costs whatever its context, kept: the table,
        the batch it runs at (graph-padded) and its (full, piecewise) graph flags, the kernel and launch seconds of
        its token rows, its attention rows' ``_scalar_prefix`` (None: they take the array path) and launch
        seconds, and the step's host seconds."""
        cap = self.engine.max_cuda_graph_batch
        graphs = bool(self.graphs and batch <= cap)
        run = float(step.graph_padded_batch(batch, cap)) if graphs else batch
        full, piecewise = step.decode_graph_flags(graphs, self.full_graphs)
        k0, l0 = self.gpu_seconds(
            table, np.asarray([1.0, run, run, 0.0, 0.0]), full, rows=table.token_rows, piecewise=piecewise
        )
        rows = self._attention_rows(table, full, piecewise)[1]
        prefix, launches = (None, 0.0) if rows is None else self._scalar_prefix(rows, 1.0, run, run)
        if len(self._decode_batches) >= self.DECODE_STEPS_KEPT:
            self._decode_batches.clear()
        host = float(step.host_seconds(self.eff, batch))
        line = self._decode_batches[(id(table), batch)] = (
            table,
            run,
            (full, piecewise),
            float(k0),
            float(l0),
            prefix,
            launches,
            host,
        )
        return line

    # ------------------------------------------------------------------ pipeline parallelism (pp > 1)

    def _pipeline_setup(self, model: ModelSpec, hw: HardwareProfile, sc: Scenario, res) -> None:
        """Per-stage op tables (each row's count cut to the stage's layers) and the links between stages."""
        from planner.estimate import memory, placement

        ranges = memory.stage_layers(model.num_layers, res.pp)
        last = len(ranges) - 1
        self.stage_tables = []
        for k, layers in enumerate(ranges):
            dec = self.decode_table.for_stage(layers, k == 0, k == last)
            pre = dec if self.shared else self.prefill_table.for_stage(layers, k == 0, k == last)
            self.stage_tables.append((dec, pre))
        self.send_links = placement.stage_links(hw, sc)
        self.hidden_size, self.act_bytes = model.hidden_size, res.act_bytes_per_element

    def _pipelined(self, stage_gpu: list[float], tokens: float, seqs: float, in_flight: int) -> step.PipelineTime:
        """``step.pipeline_seconds`` for ``in_flight`` micro-batches of ``tokens`` tokens and ``seqs`` sequences
        each (stage GPU times ``stage_gpu``); its period is the time until every sequence has its next token."""
        sends = [
            float(
                step.activation_send_seconds(
                    self.eff, tokens, self.hidden_size, self.act_bytes, self.tp, link, self.link
                )
            )
            for link in self.send_links
        ]
        host = float(step.host_seconds(self.eff, seqs))
        return step.pipeline_seconds(stage_gpu, sends, in_flight, host, self.engine.async_scheduling)

    def _pipelined_decode(self, batch: float, context: float) -> float:
        """A pure-decode step on pp stages: the batch in min(pp, batch) even micro-batches (the largest,
        ceil(batch / in flight), costed), one per stage in flight (``pipelined_batch`` says why)."""
        in_flight = max(1, min(self.pp, int(batch)))
        micro = float(math.ceil(batch / in_flight))
        stage_gpu = [
            float(step.gpu_step_seconds(*self._decode_gpu(dec, micro, context))) for dec, _ in self.stage_tables
        ]
        return float(self._pipelined(stage_gpu, micro, micro, in_flight).period_seconds)

    def _piecewise(self, tokens: float) -> bool:
        return step.piecewise_graphs(self.engine.cuda_graph_mode, self.graphs, tokens, self.engine.max_cuda_graph_batch)

    def _rows_by_tokens(self, table: OpTable, tokens: float, seqs: float) -> _TokenRows:
        """What the step's tokens and sequences alone fix, memoized (a simulation repeats them): whether it
        replays piecewise graphs, the kernel and launch seconds of the rows that depend on nothing else (GEMMs,
        norms, MoE, all-reduce, lm_head: everything but attention), and the attention rows' ``_scalar_prefix``
        (None: the array path) and launch seconds."""
        key = (id(table), tokens, seqs)
        hit = self._memo.get(key)
        if hit is None:
            piecewise = self._piecewise(tokens)
            f = np.asarray([1.0, tokens, seqs, 0.0, 0.0])
            k, l_ = self.gpu_seconds(table, f, False, rows=table.token_rows, piecewise=piecewise)
            rows = self._attention_rows(table, False, piecewise)[1]
            prefix, launches = (None, 0.0) if rows is None else self._scalar_prefix(rows, 1.0, tokens, seqs)
            hit = self._memo[key] = (piecewise, float(k), float(l_), prefix, launches)
            if len(self._memo) > 200_000:
                self._memo.clear()
        return hit

    def mixed_gpu_seconds(self, table: OpTable, f) -> tuple[float, float]:
        """(kernel seconds, launch seconds) of a step that is not a pure decode (features ``f``).

        Engines with piecewise CUDA graphs (vLLM V1) replay everything but attention as graphs when
        the step's tokens fit the largest captured size; attention is launched eagerly.
        """
        piecewise, k0, l0, prefix, l1 = self._rows_by_tokens(table, float(f[1]), float(f[2]))
        if prefix is None:
            k1, l1 = self._attention_part(
                table, f if isinstance(f, tuple) else tuple(float(x) for x in f), False, piecewise
            )
            return k0 + k1, l0 + l1
        return k0 + self._scalar_kernels(prefix, float(f[3]), float(f[4])), l0 + l1

    def _attention_rows(self, table: OpTable, graphs: bool, piecewise: bool) -> tuple[OpTable, list[_ScalarRow] | None]:
        """The table's attention rows (``OpTable.subset``) and their ``_scalar_rows``, kept per graph mode."""
        key = (id(table), graphs, piecewise)
        hit = self._attention_tables.get(key)
        if hit is None:
            sub = table.subset(table.attention_rows)
            hit = self._attention_tables[key] = (sub, self._scalar_rows(sub, graphs, piecewise))
        return hit

    def _attention_part(
        self, table: OpTable, f: tuple[float, ...], graphs: bool, piecewise: bool
    ) -> tuple[float, float]:
        """(kernel, launch) seconds of the table's attention rows for one step's features ``f``."""
        sub, rows = self._attention_rows(table, graphs, piecewise)
        if rows is None:
            k, l_ = self.gpu_seconds(sub, np.asarray(f), graphs, piecewise=piecewise)
            return float(k), float(l_)
        return self._scalar_seconds(rows, f)

    def step_seconds(
        self,
        *,
        prefill_tokens: int,
        prefill_attention_pairs: float,
        decode_seqs: int,
        decode_kv_tokens: int,
        prefill_seqs: int | None = None,
    ) -> float:
        """Seconds of one step: ``prefill_tokens`` prompt tokens (with ``prefill_attention_pairs``
        causal (query, key) pairs, in ``prefill_seqs`` chunks, default 1 when there are any) plus
        ``decode_seqs`` decodes over ``decode_kv_tokens`` cached tokens."""
        if prefill_tokens + decode_seqs <= 0:
            return 0.0
        if prefill_tokens == 0:
            return self.decode_steps(decode_seqs)[decode_kv_tokens]
        chunks = prefill_seqs if prefill_seqs is not None else 1
        seqs = decode_seqs + chunks
        if self.shared and self.pp == 1:  # the simulator's mixed step: the path below, its lookups inlined
            table = self.prefill_table
            tokens, f2 = float(prefill_tokens + decode_seqs), float(seqs)
            hit = self._memo.get((id(table), tokens, f2)) or self._rows_by_tokens(table, tokens, f2)
            if hit[3] is not None:
                kernels = hit[1] + self._scalar_kernels(
                    hit[3], float(prefill_attention_pairs + decode_kv_tokens), float(prefill_tokens + decode_kv_tokens)
                )
                gpu = step.gpu_step_seconds(kernels, hit[2] + hit[4])
                host = float(step.host_seconds(self.eff, seqs))
                return step.combine_step(gpu, host, self.engine.async_scheduling)
        if self.pp > 1:
            return self._pipelined_mixed(prefill_tokens, prefill_attention_pairs, chunks, decode_seqs, decode_kv_tokens)
        tables = (self.prefill_table, self.decode_table)
        kernels, launches = self._mixed_gpu(
            tables, prefill_tokens, prefill_attention_pairs, chunks, decode_seqs, decode_kv_tokens
        )
        gpu = step.gpu_step_seconds(float(kernels), float(launches))
        return float(step.combine_step(gpu, float(step.host_seconds(self.eff, seqs)), self.engine.async_scheduling))

    def _mixed_gpu(
        self,
        tables: tuple[OpTable, OpTable],
        prefill_tokens: float,
        prefill_attention_pairs: float,
        chunks: float,
        decode_seqs: float,
        decode_kv_tokens: float,
    ) -> tuple[float, float]:
        """(kernel, launch) seconds of a step with prefill chunks and decodes on (prefill, decode) ``tables``."""
        prefill_table, decode_table = tables
        if self.shared:
            f = (
                1.0,
                float(prefill_tokens + decode_seqs),
                float(decode_seqs + chunks),
                float(prefill_attention_pairs + decode_kv_tokens),
                float(prefill_tokens + decode_kv_tokens),
            )
            return self.mixed_gpu_seconds(prefill_table, f)
        f = (1.0, float(prefill_tokens), float(chunks), float(prefill_attention_pairs), float(prefill_tokens))
        kernels, launches = self.mixed_gpu_seconds(prefill_table, f)
        if decode_seqs:
            k, l_ = self.mixed_gpu_seconds(
                decode_table,
                tuple(float(x) for x in _decode_features(decode_seqs, decode_kv_tokens / decode_seqs)),
            )
            kernels, launches = kernels + k, launches + l_
        return kernels, launches

    def _pipelined_mixed(
        self, prefill_tokens: int, pairs: float, chunks: int, decode_seqs: int, decode_kv_tokens: int
    ) -> float:
        """A step with prefill chunks on pp stages: its sequences (chunks and decodes) spread over
        min(pp, sequences) micro-batches in flight. The even share (1 / in flight of every feature) paces the
        stages (period = in flight x interval); a chunk is not cut, so when there are fewer chunks than
        micro-batches the heaviest holds a whole chunk (1 / chunks of the prefill) and its latency through
        every stage bounds the step from below: one long chunk crosses the stages one after the other."""
        in_flight = max(1, min(self.pp, chunks + decode_seqs))
        even = self._pipelined_share(prefill_tokens, pairs, chunks, decode_seqs, decode_kv_tokens, 1.0 / in_flight)
        period = float(even.period_seconds)
        if chunks < in_flight:
            x = 1.0 / in_flight
            heavy = self._pipelined_share(prefill_tokens, pairs, chunks, decode_seqs, decode_kv_tokens, x, 1.0 / chunks)
            period = max(period, float(heavy.latency_seconds))
        return period

    def _pipelined_share(
        self,
        prefill_tokens: int,
        pairs: float,
        chunks: int,
        decode_seqs: int,
        decode_kv_tokens: int,
        x: float,
        x_prefill: float | None = None,
    ) -> step.PipelineTime:
        """The pipeline of micro-batches holding ``x_prefill`` (default ``x``) of the step's prefill and ``x``
        of its decodes, ``round(1 / x)`` in flight."""
        xp = x if x_prefill is None else x_prefill
        stage_gpu = [
            float(
                step.gpu_step_seconds(
                    *self._mixed_gpu(
                        (pre, dec), prefill_tokens * xp, pairs * xp, chunks * xp, decode_seqs * x, decode_kv_tokens * x
                    )
                )
            )
            for dec, pre in self.stage_tables
        ]
        tokens, seqs = prefill_tokens * xp + decode_seqs * x, chunks * xp + decode_seqs * x
        return self._pipelined(stage_gpu, tokens, seqs, round(1.0 / x))
