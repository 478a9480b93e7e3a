"""Expressing public records: one record's conditions (model, card, precision, parallelism, batch,
lengths) read into a scenario, and the prediction (``planner.verify.public_records_predict``) that
answers its metric.

A record that cannot be expressed (model not in the catalog, card not profiled, a condition the
source leaves out, a parallelism the planner does not model) comes back as ``Unexpressed`` with
the reason; nothing is dropped silently.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.engine import ENGINE_FAMILIES
from planner.errors import PlannerError
from planner.estimate.memory import plan_memory
from planner.estimate.resolve import resolve
from planner.estimate.roofline import engine_of, step_shape
from planner.hardware import HardwareProfile, get_profile
from planner.model.ops import Op
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.verify.public_records import (
    ModelMatch,
    PublicRecord,
    catalog_model,
    match_gpu,
    match_model,
    match_precision,
    source_family,
)
from planner.verify.public_records_predict import (
    MEMORY_METRICS,
    SERVING_METRICS,
    MemoryPrediction,
    OpsPrediction,
    Prediction,
    ServingPrediction,
    ServingRun,
    StaticBatch,
    ThroughputPrediction,
    TTFTPrediction,
)

_SPEC = ConfigDict(frozen=True, extra="forbid")

#: TensorRT-LLM's trtllm-bench never builds engines for more sequences than this; the
#: max-throughput search stops there (decode at such batches is compute-bound: more adds little).
MAX_THROUGHPUT_BATCH_CAP = 4096

#: TensorRT-LLM's kv_cache_free_gpu_mem_fraction in the throughput tables ("mostly 0.95").
TRTLLM_MEMORY_FRACTION = 0.95

#: Batches tried below the largest that fits (x 1, 1/2, 1/4): throughput rises with batch until the
#: KV cache stops it, so the best lies at the top; three sizes cover where it flattens.
MAX_THROUGHPUT_CANDIDATES = 3

#: ShareGPT prompt and answer lengths as the serving benchmarks draw them (vLLM / SGLang filter:
#: prompt <= 1024, prompt + output <= 2048 tokens, Llama-3 tokenizer). Means: output 194.4 tokens
#: = 4281.51 / 22.03 and 3856.01 / 19.84 (output tok/s / req/s of the offline rows of
#: sgl-project/sglang benchmark/benchmark_vllm_060/README.md); input ~213 tokens (vLLM nightly
#: ShareGPT serving row: 396.4 total - 198.5 output tok/s at 0.928 req/s). The spread is assumed
#: log-normal with a standard deviation about equal to the mean (heavy-tailed chats).
SHAREGPT_INPUT_MEAN_TOKENS = 213.0
SHAREGPT_OUTPUT_MEAN_TOKENS = 194.0
SHAREGPT_STD_OVER_MEAN = 1.1
SERVING_SEED = 0

#: SGLang's static memory fraction in sgl-project/sglang benchmark/benchmark_vllm_060 (0.88 at TP1
#: by default, set to 0.88 by hand at TP4), the share of memory for weights and KV cache.
SGLANG_MEM_FRACTION = 0.88


@functools.cache
def _profile(profile_id: str) -> HardwareProfile:
    return get_profile(profile_id)


ReasonKind = Literal[
    "model not in catalog",
    "GPU not profiled",
    "GPU not stated",
    "flagged INCOMPLETE/AMBIGUOUS",
    "parallelism not modelled",
    "condition not given",
    "metric not modelled",
    "planner refused",
]


class Unexpressible(Exception):
    """Raised while expressing a record: it cannot become a prediction, and why."""

    def __init__(self, kind: ReasonKind, reason: str):
        self.kind, self.reason = kind, reason
        super().__init__(reason)


@dataclass
class Expressed:
    """A record the planner can predict: the record, its family and how it is predicted."""

    record: PublicRecord
    family: str
    repo_id: str | None
    gpu_id: str | None
    prediction: Prediction

    def predict(self, eff: Efficiency) -> float:
        return self.prediction.predict(eff)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _check_flags(record: PublicRecord, needs_card: bool) -> None:
    """INCOMPLETE / AMBIGUOUS flags stop a record unless they cannot matter to it.

    A per-GPU-vs-total ambiguity does not matter on one GPU (the source says TP1 rows are the
    same either way); a missing card does not matter to a weights-only figure.
    """
    text = f"{record.notes} {record.metric} {record.unit}"
    flags = [m.group(0) for m in re.finditer(r"(INCOMPLETE|AMBIGUOUS)[^.;)]*", text)]
    for flag in flags:
        about_total = re.search(r"per[- ]GPU|total|TP>1|TP\d", flag) and "parallelism" not in flag
        if about_total and record.n_gpus == 1:
            continue
        if "GPU model not stated" in flag and not needs_card:
            continue
        raise Unexpressible("flagged INCOMPLETE/AMBIGUOUS", f"the source flags it: {flag.strip()}")


def _parallelism(record: PublicRecord) -> tuple[int, int]:
    """(tp, pp) from the record; raises for parallelisms the planner does not model."""
    tp = _int(record.tp)
    if tp is None:
        raise Unexpressible("condition not given", f"tensor parallelism not given ({record.tp!r})")
    notes = record.notes
    par = re.search(r"Parallelism: ([A-Z0-9,]+)", notes)
    if par and par.group(1).startswith("DEP"):
        raise Unexpressible(
            "parallelism not modelled",
            f"{par.group(1)}: attention data parallel + expert parallel over {tp} GPUs is not modelled",
        )
    if "attention DP enabled" in notes:
        raise Unexpressible(
            "parallelism not modelled", "attention data parallel (TensorRT-LLM MoE options file) is not modelled"
        )
    pp = 1
    if par:
        found = re.search(r"PP(\d+)", par.group(1))
        pp = int(found.group(1)) if found else 1
    if pp > 1:
        raise Unexpressible(
            "parallelism not modelled",
            f"pipeline parallel PP{pp}: the static-batch latency model has no pipeline schedule",
        )
    return tp, pp


def _card(record: PublicRecord) -> HardwareProfile:
    known, profile = match_gpu(record.gpu)
    if not known:
        raise Unexpressible("GPU not stated", f"card not identified: '{record.gpu}'")
    if profile is None:
        raise Unexpressible("GPU not profiled", f"no hardware profile for '{record.gpu}'")
    return _profile(profile)


def _model(record: PublicRecord) -> tuple[ModelMatch, ModelSpec]:
    match = match_model(record.model)
    if match is None or match.repo_id is None:
        what = match.note if match else record.model
        raise Unexpressible("model not in catalog", f"{what} is not in the bundled catalog")
    return match, catalog_model(match.repo_id)


def _precision(record: PublicRecord) -> tuple[str, str]:
    dtypes = match_precision(record)
    if dtypes is None:
        raise Unexpressible("condition not given", f"precision not understood: '{record.quant}' / '{record.dtype}'")
    return dtypes


def _lengths(record: PublicRecord) -> tuple[int, int]:
    n_in, n_out = _int(record.input_len), _int(record.output_len)
    if n_in is None or n_out is None:
        raise Unexpressible(
            "condition not given",
            f"lengths not given as numbers (input {record.input_len!r}, output {record.output_len!r})",
        )
    return n_in, n_out


def engine_spec(engine_text: str) -> str:
    """The planner's ENGINE@VERSION for a record's engine field: 'TensorRT-LLM 0.17 (...)' -> 'trtllm@0.17',
    'vLLM v0.5.4 (...)' -> 'vllm@0.5.4', 'SGLang v0.3.0' -> 'sglang@0.3.0'; vLLM V0/V1 without a number ->
    vllm@0.6.4 / vllm@0.8.0; anything else (Vidur's profilers) -> vllm@0.6.0."""
    found = re.search(r"(TensorRT-LLM|vLLM|SGLang)\D{0,4}?(\d+\.\d+(?:\.\d+)?)", engine_text)
    if found:
        return f"{ENGINE_FAMILIES[found.group(1)]}@{found.group(2)}"
    if "TensorRT-LLM" in engine_text:
        return "trtllm@1.0"
    if "vLLM V1" in engine_text:
        return "vllm@0.8.0"
    return "vllm@0.6.0"


def _scenario(record: PublicRecord, model: ModelSpec, hw: HardwareProfile, **extra: Any) -> Scenario:
    tp, pp = _parallelism(record)
    weight_dtype, kv_dtype = _precision(record)
    extra.setdefault("engine_version", engine_spec(record.engine))
    return Scenario(
        gpu=hw.id,
        tp=tp,
        pp=pp,
        num_gpus=max(record.n_gpus, tp * pp),
        weight_dtype=weight_dtype,
        kv_cache_dtype=kv_dtype,
        **extra,
    )


def _max_throughput(record: PublicRecord, model: ModelSpec, hw: HardwareProfile, per_gpu: bool) -> ThroughputPrediction:
    """Offline max throughput: the best static batch among the largest that fit the KV cache."""
    n_in, n_out = _lengths(record)
    max_len = min(n_in + n_out, model.max_position_embeddings)
    sc = _scenario(
        record,
        model,
        hw,
        max_model_len=max_len,
        gpu_memory_utilization=TRTLLM_MEMORY_FRACTION,
        max_num_batched_tokens=8192,
        enable_chunked_prefill=True,
    )
    plan = plan_memory(model, hw, sc, suggest=False)
    fit = min(plan.kv_cache_tokens // (n_in + n_out), MAX_THROUGHPUT_BATCH_CAP)
    if not plan.fits or fit < 1:
        raise Unexpressible("planner refused", f"the planner says it does not start: {plan.reason}")
    sizes = sorted({max(1, fit // 2**i) for i in range(MAX_THROUGHPUT_CANDIDATES)}, reverse=True)
    batches = [StaticBatch(model, hw, sc, b, n_in, n_out) for b in sizes]
    how = (
        f"best static batch of {sizes} (KV cache holds {plan.kv_cache_tokens:,} tokens = {fit:,} requests "
        f"of {n_in}+{n_out}) on {sc.tp * sc.pp} x {hw.id}"
    )
    return ThroughputPrediction(batches=batches, per_gpu=per_gpu, how=how)


def _static_batch(record: PublicRecord, model: ModelSpec, hw: HardwareProfile) -> StaticBatch:
    """A static batch as gptSessionBenchmark runs it: the whole batch prefilled in one step."""
    batch = _int(record.batch_or_concurrency)
    if batch is None:
        raise Unexpressible("condition not given", f"batch size not given ({record.batch_or_concurrency!r})")
    n_in = _int(record.input_len)
    n_out = _int(record.output_len)
    if n_in is None:
        raise Unexpressible("condition not given", f"input length not given ({record.input_len!r})")
    n_out = n_out if n_out is not None else 1
    sc = _scenario(
        record,
        model,
        hw,
        max_model_len=min(n_in + n_out, model.max_position_embeddings),
        max_num_batched_tokens=max(batch * n_in, 1),
        enable_chunked_prefill=True,
    )
    return StaticBatch(model, hw, sc, batch, n_in, n_out)


def _express_throughput(record: PublicRecord, family: str) -> Prediction:
    _match, model = _model(record)
    hw = _card(record)
    per_gpu = "per_gpu" in record.metric or "/GPU" in record.unit
    if _int(record.batch_or_concurrency) is None:  # max load: the engine picks the batch
        if "max load" not in str(record.batch_or_concurrency):
            raise Unexpressible("condition not given", f"load not understood: {record.batch_or_concurrency!r}")
        return _max_throughput(record, model, hw, per_gpu)
    if _int(record.output_len) is None:
        raise Unexpressible("condition not given", f"output length not given ({record.output_len!r})")
    batch = _static_batch(record, model, hw)
    return ThroughputPrediction(
        batches=[batch],
        per_gpu=per_gpu,
        how=f"static batch {batch.batch} x {batch.input_len}+{batch.output_len} on {batch.sc.tp} x {hw.id}",
    )


def _express_ttft(record: PublicRecord, family: str) -> Prediction:
    _match, model = _model(record)
    hw = _card(record)
    batch = _static_batch(record, model, hw)
    return TTFTPrediction(
        batch=batch, how=f"prefill of {batch.batch} x {batch.input_len} tokens on {batch.sc.tp} x {hw.id}"
    )


#: Ops of Vidur's mlp.csv row: attn_pre_proj (q, k, v), attn_post_proj (o), mlp_up_proj
#: (gate+up), mlp_act, mlp_down_proj.
VIDUR_LINEAR_OPS = (
    "attn.q_proj",
    "attn.k_proj",
    "attn.v_proj",
    "attn.o_proj",
    "mlp.gate_up_proj",
    "mlp.act",
    "mlp.down_proj",
)


def _express_linear_ops(record: PublicRecord, family: str) -> Prediction:
    _match, model = _model(record)
    hw = _card(record)
    tokens = re.match(r"(\d+) tokens", str(record.batch_or_concurrency))
    if tokens is None:
        raise Unexpressible("condition not given", f"token count not given ({record.batch_or_concurrency!r})")
    T = int(tokens.group(1))
    sc = _scenario(record, model, hw, max_model_len=min(4096, model.max_position_embeddings), engine="eager")
    res = resolve(model, hw, sc)
    shape = step_shape(model, res, "decode", T, 1)
    ops = [op for op in model.layers[0].ops(shape) if op.name in VIDUR_LINEAR_OPS]
    return OpsPrediction(ops=ops, hw=hw, tp=sc.tp, how=f"layer-0 linear ops at {T} tokens, TP{sc.tp}, on {hw.id}")


def _express_allreduce(record: PublicRecord, family: str) -> Prediction:
    hw = _card(record)
    found = re.search(r"= (\d+) fp16 elements", str(record.batch_or_concurrency))
    tp = _int(record.tp)
    if found is None or tp is None:
        raise Unexpressible("condition not given", f"message size or group not given ({record.batch_or_concurrency!r})")
    payload = int(found.group(1)) * 2
    op = Op(name="tp.allreduce", kind="allreduce", flops=0.0, comm_bytes=float(payload))
    return OpsPrediction(ops=[op], hw=hw, tp=tp, how=f"ring all-reduce of {payload:,} B over {tp} x {hw.id}")


def _sharegpt_workload(arrivals: Any, num_requests: int) -> Any:
    from planner.serve import LognormalLength, Workload

    return Workload(
        arrivals=arrivals,
        num_requests=num_requests,
        seed=SERVING_SEED,
        input_tokens=LognormalLength(
            mean_tokens=SHAREGPT_INPUT_MEAN_TOKENS, std_tokens=SHAREGPT_STD_OVER_MEAN * SHAREGPT_INPUT_MEAN_TOKENS
        ),
        output_tokens=LognormalLength(
            mean_tokens=SHAREGPT_OUTPUT_MEAN_TOKENS, std_tokens=SHAREGPT_STD_OVER_MEAN * SHAREGPT_OUTPUT_MEAN_TOKENS
        ),
    )


def _serving_conditions(record: PublicRecord) -> dict[str, Any]:
    """Engine settings the serving sources state (max_model_len, memory fraction, max_num_seqs,
    chunked prefill), read from the engine, load and notes fields."""
    text = f"{record.engine} {record.notes} {record.batch_or_concurrency}"
    out: dict[str, Any] = {}
    found = re.search(r"max[-_ ]model[-_ ]len[ =]?(\d+)|max-seq-len (\d+)", text)
    if found:
        out["max_model_len"] = int(found.group(1) or found.group(2))
    found = re.search(r"gpu_memory_utilization[ =]?(0\.\d+)", text)
    if found:
        out["gpu_memory_utilization"] = float(found.group(1))
    if "SGLang" in record.engine:  # mem_frac 0.88 at TP1 by default, set to 0.88 at TP4 (benchmark_vllm_060 README)
        found = re.search(r"mem_frac (0\.\d+)", text)
        out["gpu_memory_utilization"] = float(found.group(1)) if found else SGLANG_MEM_FRACTION
    found = re.search(r"max[-_]num[-_]seqs?[ =](\d+)", text)
    if found:
        out["max_num_seqs"] = int(found.group(1))
    return out


#: Serving runs shared by the records of one benchmark (throughput and latency of the same run).
_RUNS: dict[tuple, ServingRun] = {}


def _express_serving(record: PublicRecord, family: str) -> Prediction:
    from planner.serve import ConcurrencyArrivals, PoissonArrivals, SchedulerConfig

    if record.metric not in SERVING_METRICS:
        raise Unexpressible("metric not modelled", f"serving metric '{record.metric}' is not simulated")
    if "num-scheduler-steps 10" in record.engine and record.metric in ("median_itl", "median_ttft"):
        raise Unexpressible(
            "metric not modelled",
            "multi-step scheduling (--num-scheduler-steps 10) runs 10 decode steps per schedule: "
            "tokens arrive in bursts and new requests wait for the run to end; the simulator "
            "schedules every step",
        )
    _match, model = _model(record)
    hw = _card(record)
    cond = _serving_conditions(record)
    load = str(record.batch_or_concurrency)
    prompts = re.search(r"(\d+) prompts", f"{load} {record.notes}")
    if prompts is None:
        raise Unexpressible("condition not given", f"number of prompts not given ({load!r})")
    n = int(prompts.group(1))
    qps = record.qps
    arrivals: PoissonArrivals | ConcurrencyArrivals
    if isinstance(qps, (int, float)):
        arrivals = PoissonArrivals(request_rate_per_s=float(qps))
    elif str(qps) == "inf":
        arrivals = ConcurrencyArrivals(concurrency=n)
    else:
        raise Unexpressible("condition not given", f"request rate not given ({qps!r})")
    chunked = "chunked prefill on" in record.engine or "SGLang" in record.engine
    max_len = min(cond.get("max_model_len", 4096), model.max_position_embeddings)
    sc = _scenario(
        record,
        model,
        hw,
        max_model_len=max_len,
        gpu_memory_utilization=cond.get("gpu_memory_utilization", 0.9),
        max_num_seqs=cond.get("max_num_seqs", 256),
        enable_chunked_prefill=chunked,
        max_num_batched_tokens=None if chunked else max(max_len, 2048),
    )
    plan = plan_memory(model, hw, sc, suggest=False)
    if not plan.fits:
        raise Unexpressible("planner refused", f"the planner says it does not start: {plan.reason}")
    res = plan.resolved
    replicas = sc.replicas
    key = (model.name, hw.id, sc.model_dump_json(), n, str(qps))
    run = _RUNS.get(key)
    if run is None:
        scheduler = SchedulerConfig(
            num_gpu_blocks=plan.num_gpu_blocks,
            block_size_tokens=plan.block_tokens,
            kv_block_groups=plan.kv_block_groups,
            max_num_seqs=res.max_num_seqs,
            max_num_batched_tokens=res.max_num_batched_tokens,
            enable_chunked_prefill=chunked,
            max_model_len=max_len,
            mixed_batches=engine_of(sc).mixes_batches(chunked),
            output_reserve=engine_of(sc).output_reserve,
            prefix_caching=engine_of(sc).prefix_caching_default,
        )
        per_replica = (
            ConcurrencyArrivals(concurrency=max(1, n // replicas))
            if isinstance(arrivals, ConcurrencyArrivals)
            else (PoissonArrivals(request_rate_per_s=arrivals.request_rate_per_s / replicas))
        )
        run = _RUNS[key] = ServingRun(model, hw, sc, _sharegpt_workload(per_replica, max(1, n // replicas)), scheduler)
    how = (
        f"simulated {n} ShareGPT-like requests ({'all at once' if str(qps) == 'inf' else f'{qps} req/s'}) on "
        f"{sc.tp} x {hw.id}, {plan.num_gpu_blocks:,} KV blocks, max_num_seqs {res.max_num_seqs}"
    )
    return ServingPrediction(run=run, metric=record.metric, replicas=replicas, how=how)


def _express_memory(record: PublicRecord, family: str) -> Prediction:
    if record.metric not in MEMORY_METRICS:
        raise Unexpressible("metric not modelled", f"startup metric '{record.metric}' is not planned")
    weights_only = record.metric == "model_weights_gib"
    _match, model = _model(record)
    if weights_only:  # weights per rank do not depend on the card: any profile carries the plan
        _known, profile = match_gpu(record.gpu)
        hw = _profile(profile or "h100-sxm")
    else:
        hw = _card(record)
    text = record.notes
    conditions: dict[str, Any] = {}
    for key, cast in (("max_model_len", int), ("gpu_memory_utilization", float), ("block_size", int)):
        found = re.search(rf"{key}=([0-9.]+)", text)
        if found:
            conditions[key] = cast(found.group(1).rstrip("."))
        elif not weights_only:
            raise Unexpressible("condition not given", f"{key} not given in the log excerpt")
    if "max_model_len" in conditions:
        conditions["max_model_len"] = min(conditions["max_model_len"], model.max_position_embeddings)
    v0 = "V0" in record.engine or "0.5" in record.engine
    if v0:  # V0 sized the KV cache before capturing CUDA graphs: the graph pool was not subtracted
        conditions["cuda_graph_memory_bytes"] = 0
    sc = _scenario(record, model, hw, enable_chunked_prefill=not v0, **conditions)
    plan = plan_memory(model, hw, sc, suggest=False)
    value = MEMORY_METRICS[record.metric](plan)
    return MemoryPrediction(
        value=float(value),
        how=f"memory plan of TP{sc.tp} on {hw.id}" + (" (weights only: card-independent)" if weights_only else ""),
    )


#: Metric -> how to express it (startup metrics and serving metrics are picked by family).
METRIC_EXPRESSERS: dict[str, Callable[[PublicRecord, str], Prediction]] = {
    "output_throughput_total": _express_throughput,
    "output_throughput_per_gpu": _express_throughput,
    "output_throughput (total vs per-GPU AMBIGUOUS for TP4)": _express_throughput,
    "ttft (first token latency = prefill)": _express_ttft,
    "ttft": _express_ttft,
    "per_layer_linear_ops_time_median": _express_linear_ops,
    "all_reduce_time_median": _express_allreduce,
}
FAMILY_EXPRESSERS: dict[str, Callable[[PublicRecord, str], Prediction]] = {
    "vllm-0.5/0.6 serving (Lambda)": _express_serving,
    "sglang-0.3 / vllm-0.6 serving": _express_serving,
    "vllm startup logs": _express_memory,
}


class Unexpressed(BaseModel):
    """A record the planner cannot predict, and why."""

    model_config = _SPEC

    index: int = Field(description="Position in measured_public.json.")
    family: str = Field(description="Source family (one published table or benchmark).")
    model: str = Field(description="Model as published.")
    gpu: str = Field(description="Card as published.")
    metric: str = Field(description="What was measured.")
    reason_kind: str = Field(description="Category of the reason, for counting.")
    reason: str = Field(description="Why the record cannot be expressed, with the specifics.")


def express(record: PublicRecord) -> Expressed | Unexpressed:
    """The record as a planner prediction, or why it cannot be one."""
    family = source_family(record)
    expresser = FAMILY_EXPRESSERS.get(family) or METRIC_EXPRESSERS.get(record.metric)
    match = match_model(record.model)
    try:
        if expresser is None:
            raise Unexpressible(
                "metric not modelled", f"metric '{record.metric}' ({record.unit}) has no planner counterpart"
            )
        _check_flags(record, needs_card=record.metric != "model_weights_gib")
        prediction = expresser(record, family)
    except (Unexpressible, PlannerError) as err:
        kind, reason = (err.kind, err.reason) if isinstance(err, Unexpressible) else ("planner refused", str(err))
        return Unexpressed(
            index=record.index,
            family=family,
            model=record.model,
            gpu=record.gpu,
            metric=record.metric,
            reason_kind=kind,
            reason=reason,
        )
    _known, gpu_id = match_gpu(record.gpu)
    return Expressed(
        record=record, family=family, repo_id=match.repo_id if match else None, gpu_id=gpu_id, prediction=prediction
    )


def express_all(records: list[PublicRecord]) -> tuple[list[Expressed], list[Unexpressed]]:
    expressed: list[Expressed] = []
    unexpressed: list[Unexpressed] = []
    for record in records:
        out = express(record)
        if isinstance(out, Expressed):
            expressed.append(out)
        else:
            unexpressed.append(out)
    return expressed, unexpressed
