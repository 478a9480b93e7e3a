"""Roofline: which ceiling binds each operation, and how long it takes.

For one forward step (prefill of ``batch`` prompts of ``seq_len`` tokens, or one decode token for
``batch`` sequences at context ``seq_len``) every layer op of ``planner.model.layers`` is bound to
the card:

    t_compute  = FLOPs / (peak FLOP/s of its math dtype x efficiency)
    t_memory   = bytes / (HBM bandwidth x efficiency)
    t_launch   = kernels x launch cost (eager: per kernel; CUDA graphs: per replayed kernel)
    t          = max(t_compute, t_memory, t_launch);  bound = whichever is largest
    all-reduce = latency + 2 (tp - 1) / tp x payload / (one-way link bandwidth x efficiency)

Arithmetic intensity = FLOPs / bytes; the card's ridge point = peak FLOP/s / bandwidth. An op
below the ridge is memory-bound. With ``efficiency=BOUND`` every factor is 1 and every overhead 0:
the result is a pure roofline *bound*; with the fitted defaults it is an *estimate*; with a
card's measured factors it is *calibrated*.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import BOUND, Efficiency
from planner.engine import DEFAULT_ENGINE, EngineProfile, resolve_engine
from planner.estimate import lora, multimodal, step
from planner.estimate.resolve import Resolved, resolve
from planner.hardware import Dtype, HardwareProfile, get_profile
from planner.model.ops import Op, StepShape, elementwise, gemm
from planner.model.spec import ModelSpec, derived, dtype_bytes
from planner.scenario import Scenario
from planner.units import MiB

Bound = Literal["compute", "memory", "interconnect", "overhead"]
Stage = Literal["prefill", "decode"]
PredictionKind = Literal["bound", "estimate", "calibrated"]
#: vLLM captures CUDA graphs for decode batches up to this size (max_cudagraph_capture_size default 512).
MAX_GRAPH_BATCH = 512
MAX_GEMM_ROWS = step.MAX_GEMM_ROWS
gemm_fraction = step.gemm_fraction


class OpTime(BaseModel):
    """One op bound to the card: its work, intensity, binding ceiling and time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Op name, prefixed by its layer group, e.g. 'L0-31 full_attention / attn.q_proj'.")
    group: str = Field(
        description="Layer group: identical layers share one row set, e.g. 'layers 0-31: full_attention'."
    )
    count: int = Field(description="How many layers run this op per step (the group's size).")
    kind: str = Field(description="Kernel class: gemm, attention, elementwise, scan, allreduce, overhead.")
    flops: float = Field(description="FLOPs per occurrence, per rank.")
    bytes: float = Field(description="HBM bytes per occurrence, per rank.")
    arithmetic_intensity: float | None = Field(description="FLOPs per HBM byte; None when the op moves no bytes.")
    compute_dtype: str = Field(description="Math dtype on this card (after fallback).")
    bound: Bound = Field(description="The ceiling that binds: compute, memory, interconnect or overhead.")
    compute_seconds: float = Field(description="FLOPs / achievable FLOP/s, per occurrence.")
    memory_seconds: float = Field(description="Bytes / achievable bandwidth, per occurrence.")
    overhead_seconds: float = Field(description="Launch cost, per occurrence.")
    seconds: float = Field(description="max of the three (or the all-reduce time), per occurrence.")
    total_seconds: float = Field(description="seconds x count.")


class StageTime(BaseModel):
    """One pipeline stage's share of a step (``pp`` > 1): its layers' ops, and its send to the next stage."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: int = Field(description="Pipeline stage (pp rank), 0 first.")
    layer_start: int = Field(description="First decoder layer of the stage.")
    layer_stop: int = Field(description="One past the stage's last decoder layer.")
    gpu_seconds: float = Field(
        description="GPU time of the stage's ops on one batch (its layers; the embedding on the first stage, "
        "the final norm, lm_head and sampler on the last), seconds."
    )
    send_seconds: float = Field(
        description="Activation send to the next stage (hidden state and residual over the boundary's link, "
        "the receiver's TP all-gather included), seconds; 0 on the last stage."
    )
    send_link: str | None = Field(description="Link the send crosses: nvlink, pcie or network; None on the last.")


class Roofline(BaseModel):
    """Per-op roofline of one forward step, with totals and the stage's verdict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: Stage = Field(description="prefill or decode.")
    batch: int = Field(description="Sequences in the step.")
    seq_len: int = Field(description="Prompt length (prefill) or context length (decode), in tokens.")
    kind: PredictionKind = Field(description="bound (pure roofline), estimate (fitted defaults) or calibrated.")
    gpu: str = Field(description="Card name.")
    tp: int = Field(description="Tensor-parallel size.")
    ridge_point: float = Field(description="Card's ridge point for the model's main math dtype, FLOP/byte.")
    peak_flops_per_s: float = Field(description="Dense peak of that dtype, FLOP/s.")
    hbm_bandwidth_bytes_per_s: float = Field(description="Datasheet HBM bandwidth, bytes/s.")
    layers: list[OpTime] = Field(description="Every op of the step (grouped identical layers), plus the step overhead.")
    total_seconds: float = Field(
        description="Step time: sum of every op's time x count, plus the step overhead; with pp > 1, one batch "
        "through every pipeline stage in turn (the activation sends included)."
    )
    total_flops: float = Field(description="FLOPs of the step on one rank.")
    total_bytes: float = Field(description="HBM bytes of the step on one rank.")
    seconds_by_bound: dict[str, float] = Field(description="Step time split by binding ceiling.")
    bound: Bound = Field(description="Ceiling that binds most of the step's time.")
    verdict: str = Field(description="The stage's bound in words, with the numbers behind it.")
    pipeline: list[StageTime] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Per pipeline stage: layers, GPU seconds and the send to the next stage; absent at pp 1.",
    )


_set = object.__setattr__


def computed_row(values: dict[str, Any]) -> OpTime:
    """An ``OpTime`` of values the roofline computed itself from validated ops and the card (every field given,
    each of its type: floats from ``bind``, the op's own name, kind and counts), built without validating them
    again: what ``OpTime.model_construct`` does (set the instance's ``__dict__`` and its fields-set), without
    its per-field default and alias handling, which costs more than validation. The ``Roofline`` that holds
    the rows is validated as usual; tests/test_roofline_latency.py checks that every row equals its
    validated copy, dump for dump."""
    row = OpTime.__new__(OpTime)
    _set(row, "__dict__", values)
    _set(row, "__pydantic_fields_set__", set(values))
    _set(row, "__pydantic_extra__", None)
    _set(row, "__pydantic_private__", None)
    return row


def prediction_kind(eff: Efficiency) -> PredictionKind:
    """The kind of a prediction made with these factors: the factors' own kind (one word for both)."""
    return eff.kind


def engine_of(sc: Scenario | None) -> EngineProfile:
    """The engine profile a scenario's steps are timed with (``sc.engine_version``), its custom all-reduce
    off where that version's default or the scenario (``disable_custom_all_reduce``) turns it off."""
    if sc is None:
        return resolve_engine(DEFAULT_ENGINE)[0]
    return _engine_at(sc.engine_version, sc.disable_custom_all_reduce, sc.gpu, sc.tp * sc.data_parallel_size)


@functools.lru_cache(maxsize=64)
def _engine_at(spec: str, disable_custom_all_reduce: bool, gpu: str, group: int) -> EngineProfile:
    """The profile at that version; an engine that sizes its captured batches by card and TP size (SGLang's
    ``cuda_graph_max_bs``: ``StaticMemory.graph_max_bs``) with the largest for ``gpu`` and a TP group of ``group``."""
    profile, version = resolve_engine(spec)
    update: dict[str, Any] = {}
    if profile.custom_allreduce and (disable_custom_all_reduce or not profile.custom_allreduce_at(version)):
        update["custom_allreduce"] = False
    if profile.static_memory is not None:
        memory = get_profile(gpu).memory_bytes / MiB
        update["max_cuda_graph_batch"] = profile.static_memory.graph_max_bs(version, memory, group)
    return profile.model_copy(update=update) if update else profile


def efficiency_for(
    hw: HardwareProfile, mode: Literal["auto", "bound"] = "auto", sc: Scenario | None = None
) -> Efficiency:
    """BOUND for a pure roofline; the card's calibration if it has one; else the engine's fitted factors."""
    if mode == "bound":
        return BOUND
    return hw.efficiency or engine_of(sc).efficiency


def bind(
    op: Op,
    hw: HardwareProfile,
    eff: Efficiency,
    tp: int,
    graphs: bool,
    engine: EngineProfile | None = None,
    seqs: int = 1,
    ep: int = 1,
) -> tuple[float, Bound, float, float, float, Dtype]:
    """(seconds, bound, t_compute, t_memory, t_launch, math dtype) of one op on one rank.

    The op's seconds are its compute/memory (or link) bound, at least its kernels' GPU floor; its host
    launch cost is returned apart: the host enqueues kernels ahead of the GPU, so launches bind only
    when the step's launches together outlast its kernels (``step.gpu_step_seconds``).

    The physics is ``planner.estimate.step`` (op_seconds, allreduce_seconds, launch_seconds); this
    only looks up the card's peaks for the op and names the ceiling that binds (``Binder``).
    """
    return Binder(hw, eff, tp, engine, seqs, ep)(op, graphs)


#: Kind codes of the collectives (``step.KIND_CODES``): bound by their link, not by the card's peaks.
_ALLREDUCE, _ALLTOALL = step.KIND_CODES["allreduce"], step.KIND_CODES["alltoall"]
_COLLECTIVES = frozenset({_ALLREDUCE, _ALLTOALL})


#: Kept signature tables (``Binder``), per (card, efficiency, sequences) object triple; oldest dropped first.
SIGNATURE_TABLES = 64
_SIGNATURE_TABLES: OrderedDict[tuple[int, int, int], tuple[Any, Any, dict]] = OrderedDict()


def _signature_table(hw: HardwareProfile, eff: Efficiency, seqs: int) -> dict:
    """The signature table of (card, efficiency, sequences), shared by every binder of them.

    A signature's values are pure functions of the card, the efficiency factors and the step's sequence count
    (``Binder._signature``), all frozen, so a table fills once and stays right. Keyed by the objects' identity
    (the card registry and the engine profiles hand out the same objects while their files are unchanged); the
    entry holds the objects, so an id is not reused while its table is kept."""
    key = (id(hw), id(eff), seqs)
    entry = _SIGNATURE_TABLES.get(key)
    if entry is None or entry[0] is not hw or entry[1] is not eff:
        entry = (hw, eff, {})
        _SIGNATURE_TABLES[key] = entry
        while len(_SIGNATURE_TABLES) > SIGNATURE_TABLES:
            _SIGNATURE_TABLES.popitem(last=False)
    return entry[2]


class Binder:
    """``bind`` for the many ops of one step: the same ``planner.estimate.step`` calls, each made once per
    distinct input, since the functions are pure: what depends only on an op's math dtype, kind, GEMM rows,
    kernels and graph replay (the card's dtype and peak, the achieved fractions, the launch cost and the GPU
    floor) once per such signature, kept across calls per (card, efficiency, sequences) (``_signature_table``);
    a collective once per payload within the binder, which lives for one roofline call."""

    def __init__(
        self,
        hw: HardwareProfile,
        eff: Efficiency,
        tp: int,
        engine: EngineProfile | None = None,
        seqs: int = 1,
        ep: int = 1,
    ) -> None:
        self.hw, self.eff, self.tp, self.engine, self.seqs, self.ep = hw, eff, tp, engine, seqs, ep
        self._signatures: dict[tuple[str, int, int | None, int, bool], tuple[Any, ...]] = _signature_table(
            hw, eff, seqs
        )
        self._collective: dict[tuple[int, float, int, bool], float] = {}

    def _signature(self, op_dtype: str, code: int, m: int | None, kernels: int, graphs: bool) -> tuple[Any, ...]:
        """(math dtype, launch seconds, compute fraction, memory fraction, peak FLOP/s, GPU floor seconds)."""
        hw, eff = self.hw, self.eff
        compute_dtype = hw.compute_dtype_for(op_dtype) or hw.compute_dtype_for("bf16") or "fp32"
        launch = float(step.launch_seconds(eff, kernels, graphs))
        if code in _COLLECTIVES:
            return compute_dtype, launch, None, None, None, None
        f_compute, f_memory = step.op_fractions(eff, code, m if m is not None else MAX_GEMM_ROWS)
        floor = step.kernel_floor_seconds(eff, kernels) + step.attention_floor_seconds(eff, code, kernels, self.seqs)
        return compute_dtype, launch, f_compute, f_memory, hw.peak_flops_per_s[compute_dtype], floor

    def __call__(self, op: Op, graphs: bool) -> tuple[float, Bound, float, float, float, Dtype]:
        code = step.KIND_CODES[op.kind]
        key = (op.compute_dtype, code, op.gemm_m_tokens, op.kernels, graphs)
        known = self._signatures.get(key)
        if known is None:
            known = self._signatures[key] = self._signature(*key)
        compute_dtype, launch, f_compute, f_memory, peak, floor = known
        if code in _COLLECTIVES:
            return self._collective_seconds(op, code, graphs), "interconnect", 0.0, 0.0, launch, compute_dtype
        # step.op_seconds is op_fractions (above, per signature), then bound_seconds
        t, t_c, t_m = step.bound_seconds(
            op.flops, op.bytes, f_compute, f_memory, peak, self.hw.hbm_bandwidth_bytes_per_s, floor
        )
        t, t_c, t_m = float(t), float(t_c), float(t_m)
        bound: Bound = "compute" if t == t_c and t_c > 0 else ("memory" if t == t_m and t_m > 0 else "overhead")
        return t, bound, t_c, t_m, launch, compute_dtype

    def _collective_seconds(self, op: Op, code: int, graphs: bool) -> float:
        key = (code, op.comm_bytes, op.kernels, graphs)
        t = self._collective.get(key)
        if t is not None:
            return t
        eff, hw = self.eff, self.hw
        if code == _ALLREDUCE:
            profile = self.engine or engine_of(None)
            t = max(
                step.allreduce_seconds(
                    eff,
                    op.comm_bytes,
                    self.tp,
                    step.Link.for_group(hw, self.tp),
                    profile.custom_allreduce,
                    graphs,
                    profile.custom_allreduce_graph_fit,
                ),
                float(step.kernel_floor_seconds(eff, op.kernels)),
            )
        else:  # expert dispatch / combine over the EP group (tp x dp ranks)
            t = max(
                float(step.alltoall_seconds(eff, op.comm_bytes, self.ep, step.Link.for_group(hw, self.ep))),
                float(step.kernel_floor_seconds(eff, op.kernels)),
            )
        self._collective[key] = t
        return t


@functools.lru_cache(maxsize=8)
def _replays(full: bool, piecewise: bool) -> dict[str, bool]:
    """Whether each op kind replays inside a CUDA graph in a step with these graph flags (``step.replays_graph``)."""
    return {kind: bool(step.replays_graph(code, full, piecewise)) for kind, code in step.KIND_CODES.items()}


def uses_graphs(sc: Scenario, engine: EngineProfile, stage: Stage, batch: int) -> bool:
    """A pure-decode step replays a CUDA graph when the engine captures one of that size (not eager)."""
    return sc.engine == "cuda-graphs" and stage == "decode" and batch <= engine.max_cuda_graph_batch


def full_decode_graphs(model: ModelSpec, engine: EngineProfile) -> bool:
    """Whether ``engine`` replays ``model``'s pure-decode steps as one full CUDA graph (every layer's KV kind
    has a backend it can capture: ``EngineProfile.full_decode_graphs``)."""
    return engine.full_decode_graphs(model.kv_kinds)


def step_graphs(
    model: ModelSpec, sc: Scenario, engine: EngineProfile, stage: Stage, batch: int, seq_len: int
) -> tuple[bool, bool, bool]:
    """(captured, full, piecewise) of one step: whether a pure-decode step runs at a captured (padded) size, and
    the graph flags ``step.replays_graph`` takes: one full graph for such a decode step where the engine
    captures the whole model, else piecewise graphs; a prefill step replays piecewise graphs where its tokens
    fit the largest captured size (``step.piecewise_graphs``)."""
    captured = uses_graphs(sc, engine, stage, batch)
    full, piecewise = step.decode_graph_flags(captured, full_decode_graphs(model, engine))
    prefill_pieces = stage == "prefill" and step.piecewise_graphs(
        engine.cuda_graph_mode, sc.engine == "cuda-graphs", batch * seq_len, engine.max_cuda_graph_batch
    )
    return captured, bool(full), bool(piecewise or prefill_pieces)


def step_shape(model: ModelSpec, res: Resolved, stage: Stage, batch: int, seq_len: int) -> StepShape:
    formats = res.weight_formats
    return StepShape(
        num_seqs=batch,
        query_len=seq_len if stage == "prefill" else 1,
        context_len=seq_len,
        causal=stage == "prefill",
        tp=res.tp,
        act_bytes=res.act_bytes_per_element,
        kv_bytes_per_element=res.kv_bytes_per_element,
        state_bytes=dtype_bytes(model.dtype),
        weight_bits={c: f.bits_per_weight for c, f in formats.items()},
        compute_dtypes={
            c: f.compute_dtype if f.compute_dtype not in ("bf16", "fp16") else model.dtype for c, f in formats.items()
        },
        **lora.shape_fields(res),
        **expert_parallel_fields(res),
    )


def expert_parallel_fields(res: Resolved) -> dict:
    """StepShape's expert-parallel fields from the resolved scenario (none without --enable-expert-parallel)."""
    if res.ep == 1:
        return {}
    return {
        "ep": res.ep,
        "dp": res.dp,
        "expert_load_imbalance": res.expert_load_imbalance,
        "all2all_backend": res.all2all_backend,
    }


def model_ops(model: ModelSpec, shape: StepShape) -> list[Op]:
    """Ops outside the layers: embedding gather, final norm, lm_head over the sampled rows."""
    h, B = model.hidden_size, shape.num_seqs
    vocab = model.padded_vocab_size
    return [
        Op(
            name="embedding",
            kind="elementwise",
            flops=0.0,
            activation_bytes=shape.tokens * h * shape.act_bytes,
            weight_bytes=shape.tokens * model.embedding_dim * shape.act_bytes,
        ),
        elementwise(shape, "final_norm", B * h, 4.0),
        gemm(shape, "lm_head", "lm_head", B, vocab, model.embedding_dim),
        elementwise(shape, "sampler", B * vocab / shape.tp, 6.0, passes=3.0),
    ] + lora.model_lora_ops(model, shape)


def layer_groups(model: ModelSpec) -> list[tuple[str, list[int]]]:
    """Identical consecutive-or-not layers grouped: [('layers 0-31: full_attention', [0..31]), ...].

    Layers are equal when their JSON is; each distinct layer object is serialised once (the families
    share one object among identical layers), and the grouping is memoized per spec.
    """
    memo = derived(model)
    if "layer_groups" not in memo:
        memo["layer_groups"] = tuple((label, tuple(idx)) for label, idx in _layer_groups(model))
    return [(label, list(idx)) for label, idx in memo["layer_groups"]]


def _layer_groups(model: ModelSpec) -> list[tuple[str, list[int]]]:
    groups: OrderedDict[str, list[int]] = OrderedDict()
    dumped: dict[int, str] = {}
    for i, layer in enumerate(model.layers):
        if id(layer) not in dumped:
            dumped[id(layer)] = layer.model_dump_json()
        groups.setdefault(dumped[id(layer)], []).append(i)
    out = []
    for idx in groups.values():
        span = f"{idx[0]}-{idx[-1]}" if len(idx) > 1 else f"{idx[0]}"
        out.append((f"layers {span} ({len(idx)}): {model.layers[idx[0]].kind}", idx))
    return out


def _time_only_row(name: str, group: str, bound: Bound, seconds: float, overhead_seconds: float) -> OpTime:
    """A row that moves no HBM bytes and does no math, only takes time (engine overhead, a pipeline send)."""
    return OpTime(
        name=name,
        group=group,
        count=1,
        kind="overhead",
        flops=0.0,
        bytes=0.0,
        arithmetic_intensity=None,
        compute_dtype="-",
        bound=bound,
        compute_seconds=0.0,
        memory_seconds=0.0,
        overhead_seconds=overhead_seconds,
        seconds=seconds,
        total_seconds=seconds,
    )


def engine_row(name: str, seconds: float) -> OpTime:
    """A row of engine time that moves no bytes and does no math (launches or host work the GPU waits for)."""
    return _time_only_row(name, "engine", "overhead", seconds, overhead_seconds=seconds)


def roofline(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    stage: Stage,
    batch: int,
    seq_len: int,
    efficiency: Efficiency | None = None,
) -> Roofline:
    """Per-op roofline of one prefill or decode step on one rank of ``sc``'s deployment."""
    res = resolve(model, hw, sc)
    bandwidth = hw.known_hbm_bandwidth_bytes_per_s("a roofline")
    eff = efficiency or efficiency_for(hw, sc=sc)
    engine = engine_of(sc)
    captured, graphs, piecewise = step_graphs(model, sc, engine, stage, batch, seq_len)
    run_batch = int(step.graph_padded_batch(batch, engine.max_cuda_graph_batch)) if captured else batch
    shape = step_shape(model, res, stage, run_batch, seq_len)
    rows: list[OpTime] = []
    row_layers: list[tuple[int, ...] | str] = []  # each row's layers, or the model op's name

    binder = Binder(hw, eff, res.tp, engine, shape.num_seqs, res.ep)
    replays = _replays(graphs, piecewise)
    kernels_gpu = launches = 0.0

    def add(ops: list[Op], group: str, prefix: str, count: int, eager: bool = False) -> None:
        """Bind ``ops`` (each run ``count`` times a step) and append their rows; the step's kernel and launch
        sums follow."""
        nonlocal kernels_gpu, launches
        for op in ops:
            t, bound, t_c, t_m, t_l, cdt = binder(op, not eager and replays[op.kind])
            flops, nbytes = op.flops, op.bytes
            total_t = t * count
            kernels_gpu += total_t
            launches += t_l * count
            rows.append(
                computed_row(
                    {
                        "name": f"{prefix} / {op.name}",
                        "group": group,
                        "count": count,
                        "kind": op.kind,
                        "flops": flops,
                        "bytes": nbytes,
                        "arithmetic_intensity": (flops / nbytes) if nbytes else None,
                        "compute_dtype": cdt,
                        "bound": bound,
                        "compute_seconds": t_c,
                        "memory_seconds": t_m,
                        "overhead_seconds": t_l,
                        "seconds": t,
                        "total_seconds": total_t,
                    }
                )
            )

    for group, idx in layer_groups(model):
        layer_ops = model.layers[idx[0]].ops(shape)
        add(layer_ops, group, group.split(":")[0], len(idx))
        row_layers.extend([tuple(idx)] * len(layer_ops))
    if stage == "prefill":  # the images' encoder forward runs in the step that prefills their tokens, eagerly
        for group, count, ops in multimodal.encoder_rows(model, sc, shape, batch):  # (outside the CUDA graphs)
            add(ops, group, group.split(":")[0], count, eager=True)
            row_layers.extend([ENCODER_ROW] * len(ops))
    extra_ops = model_ops(model, shape)
    add(extra_ops, "model", "model", 1)
    row_layers.extend(op.name for op in extra_ops)
    gpu = float(step.gpu_step_seconds(kernels_gpu, launches))
    stages = None
    if res.pp > 1:
        stages = pipeline_stages(model, hw, sc, res, eff, rows, row_layers, shape.tokens)
        gpu = sum(st.gpu_seconds for st in stages)  # each stage binds its own kernels and launches
        if gpu > kernels_gpu:
            rows.append(engine_row("engine / kernel launches not hidden behind the GPU", gpu - kernels_gpu))
        for st in stages[:-1]:
            rows.append(send_row(st))
        gpu += sum(st.send_seconds for st in stages)
    elif gpu > kernels_gpu:
        rows.append(engine_row("engine / kernel launches not hidden behind the GPU", gpu - kernels_gpu))
    visible_host = float(step.combine_step(gpu, step.host_seconds(eff, batch), engine.async_scheduling)) - gpu
    if visible_host > 0:
        hidden = " not hidden by async scheduling" if engine.async_scheduling else ""
        rows.append(engine_row(f"engine / host work{hidden} (scheduler, input prep, outputs)", visible_host))
    total = sum(r.total_seconds for r in rows)
    by_bound: dict[str, float] = {}
    for r in rows:
        by_bound[r.bound] = by_bound.get(r.bound, 0.0) + r.total_seconds
    bound = max(by_bound, key=lambda b: by_bound[b])
    main_dtype = shape.cdtype("mlp") if shape.cdtype("mlp") else model.dtype
    cdt = hw.compute_dtype_for(main_dtype) or "bf16"
    ridge = hw.peak_flops_per_s[cdt] / bandwidth
    flops = sum(r.flops * r.count for r in rows)
    nbytes = sum(r.bytes * r.count for r in rows)
    return Roofline(
        stage=stage,
        batch=batch,
        seq_len=seq_len,
        kind=prediction_kind(eff),
        gpu=hw.name,
        tp=res.tp,
        ridge_point=ridge,
        peak_flops_per_s=hw.peak_flops_per_s[cdt],
        hbm_bandwidth_bytes_per_s=bandwidth,
        layers=rows,
        total_seconds=total,
        total_flops=flops,
        total_bytes=nbytes,
        seconds_by_bound=by_bound,
        bound=bound,
        verdict=verdict(
            stage,
            bound,
            by_bound,
            total,
            flops,
            nbytes,
            ridge,
            batch,
            seq_len,
            sum(r.total_seconds for r in rows if r.kind == "alltoall"),
        ),
        pipeline=stages,
    )


#: Row tag of the vision encoder's ops: vLLM runs the encoder on the first pipeline rank only
#: (``GPUModelRunner`` gathers multimodal embeddings where ``get_pp_group().is_first_rank``).
ENCODER_ROW = "vision_encoder"
#: Model ops (outside the layers) that run on the first pipeline stage; the others (final norm, lm_head,
#: sampler, the lm_head's LoRA) run on the last, as vLLM places them (``PPMissingLayer`` elsewhere).
FIRST_STAGE_MODEL_OPS = frozenset({"embedding", ENCODER_ROW})


def stage_op_counts(row_layers: list[tuple[int, ...] | str], layers: range, first: bool, last: bool) -> list[int]:
    """How many times each row runs on the stage holding ``layers``: a layer row, the layers of its group
    inside the stage; a model op, once on its stage (``FIRST_STAGE_MODEL_OPS``, else the last)."""
    out = []
    for ids in row_layers:
        if isinstance(ids, str):
            out.append(int(first if ids in FIRST_STAGE_MODEL_OPS else last))
        else:
            out.append(sum(1 for i in ids if layers.start <= i < layers.stop))
    return out


def pipeline_stages(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    res: Resolved,
    eff: Efficiency,
    rows: list[OpTime],
    row_layers: list[tuple[int, ...] | str],
    tokens: int,
) -> list[StageTime]:
    """Each pipeline stage's GPU time on this step (its rows' times x its counts, launches bound per stage:
    ``step.gpu_step_seconds``) and its activation send of ``tokens`` tokens to the next stage
    (``step.activation_send_seconds`` over the boundary's link, ``planner.estimate.placement``)."""
    from planner.estimate import memory, placement

    layer_ranges = memory.stage_layers(model.num_layers, res.pp)
    links, tp_link = placement.stage_links(hw, sc), placement.tp_link(hw, sc)
    out = []
    for k, layers in enumerate(layer_ranges):
        last = k == len(layer_ranges) - 1
        counts = stage_op_counts(row_layers, layers, k == 0, last)
        kernels = sum(r.seconds * n for r, n in zip(rows, counts, strict=True))
        launches = sum(r.overhead_seconds * n for r, n in zip(rows, counts, strict=True))
        send = 0.0
        if not last:
            send = float(
                step.activation_send_seconds(
                    eff, tokens, model.hidden_size, res.act_bytes_per_element, res.tp, links[k], tp_link
                )
            )
        out.append(
            StageTime(
                stage=k,
                layer_start=layers.start,
                layer_stop=layers.stop,
                gpu_seconds=float(step.gpu_step_seconds(float(kernels), float(launches))),
                send_seconds=send,
                send_link=None if last else links[k].kind,
            )
        )
    return out


def send_row(st: StageTime) -> OpTime:
    """The roofline row of one stage's activation send (interconnect-bound: link latency and bandwidth)."""
    name = f"pipeline / activation send stage {st.stage} -> {st.stage + 1} ({st.send_link})"
    return _time_only_row(name, "pipeline", "interconnect", st.send_seconds, overhead_seconds=0.0)


def verdict(stage, bound, by_bound, total, flops, nbytes, ridge, batch, seq_len, dispatch_seconds=0.0) -> str:
    """The seed's classification in words: compute-, memory- or overhead/scheduling-bound, and why
    (``dispatch_seconds``: the expert dispatch/combine's share of the interconnect time names it when it is most)."""
    intensity = flops / nbytes if nbytes else float("inf")
    share = by_bound[bound] / total if total else 0.0
    collective = (
        "expert dispatch/combine" if dispatch_seconds > by_bound.get("interconnect", 0.0) / 2 else "TP all-reduce"
    )
    what = {
        "compute": "compute-bound",
        "memory": "memory-bandwidth-bound",
        "interconnect": f"interconnect-bound ({collective})",
        "overhead": "overhead/scheduling-bound",
    }[bound]
    side = "above" if intensity >= ridge else "below"
    return (
        f"{stage} (batch {batch}, {seq_len:,} tokens) is {what}: {share:.0%} of the step's time is in {bound}-bound "
        f"ops; "
        f"the step's arithmetic intensity is {intensity:,.1f} FLOP/B, {side} the card's ridge point of {ridge:,.0f} "
        f"FLOP/B."
    )
