"""Serving corpus: published ``vllm bench serve`` results as simulated planner predictions.

Two files share one schema (one number per record, with its full conditions):
``shared/reference/serving_public_modern.json`` (486 records, GPUStack performance lab: vLLM V1
0.10-0.13, SGLang 0.5, TensorRT-LLM 1.x on H100 / A100 / H200, mostly burst loads) and
``reference/serving_corpus.json`` (439 records from 30 other publishers, many flagged; the text behind the later
ones in ``reference/serving_corpus_evidence.json``).

Each *run* (the records of one result block: same conditions, several metrics) becomes one
simulation of one replica, with ``planner.serve.replica.simulate_scenario(..., saturation=False)``:

* scenario: the card (``match_gpu``), TP, the weight precision of the checkpoint, and
  ``engine_version`` from the record's engine string (``vLLM v0.11.0`` -> ``vllm@0.11.0``, or the
  ``vllm-v1-async`` profile when the command passes ``--async-scheduling``); the serving flags the
  command states (``--max-model-len``, ``--max-num-seqs``, ``--max-num-batched-tokens``,
  ``--gpu-memory-utilization``, ``--max_seq_len``), else that engine profile's defaults for the version;
* load: a burst (``request_rate`` inf, no ``max_concurrency``: every prompt at t = 0) is a closed
  loop whose concurrency is the number of prompts, simulated in full (its TTFT is queueing and grows
  with the prompts, so it is never cut); a ``--max-concurrency`` run is a closed loop at that
  concurrency and a rate is Poisson arrivals, both capped at ``MAX_PACED_REQUESTS``;
* lengths: the measured means (total tokens / successful requests); log-normal around the means for ShareGPT
  (spread as ``public_records_express.SHAREGPT_STD_OVER_MEAN``), uniform for SGLang's random dataset as its client
  draws it (``sglang_random_ranges``: up to the requested length by default), fixed for other random datasets;
* step cost: the fitted factors of the engine's profile (``planner/engines/fitted.yaml``).

A record that cannot be expressed comes back as ``Unexpressed`` with the reason: a flag of the
corpus (INCOMPLETE, ASSUMED, ...), a card variant the source does not print, a model not in the
catalog, expert / data / pipeline parallelism (not modelled), a PR's tuned kernel config, a
metric the simulator has no counterpart for, or a scenario the planner says does not start.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.engine import ENGINE_FAMILIES, EngineProfile, resolve_engine
from planner.errors import PlannerError
from planner.estimate.memory import plan_memory
from planner.hardware import HardwareProfile, get_profile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.serve.replica import ServingResult, planned_replica, simulate_scenario
from planner.serve.simulate import LatencyStats
from planner.serve.workload import (
    ConcurrencyArrivals,
    FixedLength,
    LognormalLength,
    PoissonArrivals,
    UniformLength,
    Workload,
)
from planner.verify.public_records import catalog_model, match_gpu, match_model, reference_dir
from planner.verify.public_records_express import SHAREGPT_STD_OVER_MEAN

_SPEC = ConfigDict(frozen=True, extra="forbid")

MODERN_FILE = "serving_public_modern.json"
#: The project's own cited corpus (reference/ at the repository root).
CORPUS_PATH = Path(__file__).resolve().parents[2] / "reference" / "serving_corpus.json"
#: Requests simulated for a run at a rate or a concurrency cap (the published runs send 100; the
#: means settle well before 500). Bursts are never cut: all their prompts are simulated.
MAX_PACED_REQUESTS = 500
#: Largest burst simulated (the published bursts send 100 to 6,000 prompts; a burst is never cut).
MAX_BURST_REQUESTS = 6000
SEED = 0

#: Words of ``notes`` that mark a record whose conditions are not all printed at the source
#: (``reference/serving_corpus.md``: "filter on the flags in notes").
FLAGS = ("INCOMPLETE", "ASSUMED", "AMBIGUOUS", "INFERRED", "OUT OF TARGET SIZE RANGE")
#: The corpus's mark of a run that shared its server with other runs whose prompts it may find in the prefix cache
#: (``record_check``): how much of each prompt was cached is not printed, so only a decode step's time is scored.
SHARED_SERVER = "SHARED SERVER"
#: Metrics of a decode step alone, which a warm prefix cache does not move: the median gap between two tokens (the
#: prefill stalls sit in the tail of the gaps).
DECODE_STEP_METRICS = frozenset({"median_itl_ms"})
#: A kernel-tuning PR's "after" column runs the PR's config file, not the engine's default.
TUNED_CONFIG = re.compile(r"\b[Aa]fter \(PR's")


# ------------------------------------------------------------------------------------ records


class ServingRecord(BaseModel):
    """One published serving number with its conditions (schema of ``serving_public_modern.md``)."""

    model_config = _SPEC

    file: str = Field(description="File the record comes from (modern or corpus).")
    index: int = Field(description="Position of the record in its file (0-based).")
    source: str = Field(description="Where the number was published (repository, file, line or thread, block).")
    model: str = Field(description="Model id as the source names it.")
    gpu: str = Field(description="Card as the source names it.")
    n_gpus: int = Field(description="GPUs the serving command uses (TP x PP x DP).")
    tp: int = Field(description="Tensor-parallel size.")
    pp: int = Field(description="Pipeline-parallel size.")
    ep_dp: str | None = Field(description="Expert / data parallelism, as the source states it; None: none.")
    dtype: str = Field(description="Activation precision label.")
    quant: str = Field(description="Weight quantization label.")
    kv_cache_dtype: str = Field(description="KV-cache dtype label.")
    engine: str = Field(description="Engine and version as the source states them.")
    engine_flags: str = Field(description="Serving command, then '; client:' and the benchmark command.")
    workload: str = Field(description="Dataset and requested lengths, in words.")
    input_len: float | None = Field(description="Mean prompt tokens per successful request; None: unknown.")
    output_len: float | None = Field(description="Mean output tokens per successful request; None: unknown.")
    request_rate: float | str | None = Field(
        description="Requests/s, 'inf' (all at t = 0), or None under a concurrency cap."
    )
    max_concurrency: int | None = Field(description="Client's --max-concurrency; None: not capped.")
    num_prompts: int | None = Field(description="Requests sent.")
    metric: str = Field(description="What was measured (vllm bench serve's names).")
    value: float = Field(description="The measured number, in the metric's unit (ms, tok/s, req/s).")
    notes: str = Field(description="Conditions, caveats and flags.")


def load_records(path: str | Path | None = None, file: str | None = None) -> list[ServingRecord]:
    """Records of one file (default: the modern file in ``reference_dir()``)."""
    path = Path(path) if path is not None else reference_dir() / MODERN_FILE
    if not path.is_file():
        raise PlannerError(
            f"the serving measurements file {path} does not exist.",
            hint="Check out the shared reference folder beside the repository (../shared/reference), "
            f"or set PLANNER_REFERENCE_DIR to the folder holding {MODERN_FILE}.",
        )
    label = file or path.name
    rows = json.loads(path.read_text(encoding="utf-8"))
    return [ServingRecord(file=label, index=i, **row) for i, row in enumerate(rows)]


def load_all() -> list[ServingRecord]:
    """The modern file, then the project's corpus."""
    return load_records(file="modern") + load_records(CORPUS_PATH, file="corpus")


# ------------------------------------------------------------------------------------ tables


def _mean_ms(stats: LatencyStats | None) -> float | None:
    return None if stats is None else stats.mean * 1e3


def _median_ms(stats: LatencyStats | None) -> float | None:
    return None if stats is None else stats.p50 * 1e3


#: Metric -> its value in a simulated result, in the record's unit; None when the run gave none.
METRICS: dict[str, Callable[[ServingResult], float | None]] = {
    "mean_tpot_ms": lambda r: _mean_ms(r.tpot_seconds),
    "median_tpot_ms": lambda r: _median_ms(r.tpot_seconds),
    "mean_ttft_ms": lambda r: _mean_ms(r.ttft_seconds),
    "median_ttft_ms": lambda r: _median_ms(r.ttft_seconds),
    "mean_itl_ms": lambda r: _mean_ms(r.itl_seconds),
    "median_itl_ms": lambda r: _median_ms(r.itl_seconds),
    "mean_e2el_ms": lambda r: _mean_ms(r.e2e_seconds),
    "median_e2el_ms": lambda r: _median_ms(r.e2e_seconds),
    "output_throughput_tok_s": lambda r: r.throughput_tokens_per_s,
    "request_throughput_rps": lambda r: r.requests_per_s,
}

#: Weight-quantization label (lowercase, searched, first match wins) -> Scenario.weight_dtype.
#: Checkpoints that carry their quantization in config.json (gpt-oss MXFP4, DeepSeek block FP8)
#: keep ``auto``; a re-upload (Qwen3-8B-FP8) is the catalog's bf16 config at that dtype.
QUANT_TABLE: tuple[tuple[str, str], ...] = (
    (r"mxfp4|native", "auto"),
    (r"awq", "awq"),
    (r"fp8", "fp8"),
    (r"none|bf16|fp16", "auto"),
)


#: --gpu-memory-utilization of the corpus's vLLM runs where the command sets none: every one expressed is a release
#: from 0.8.5 to 0.19, whose default is 0.9 (the engine profiles' ``gpu_memory_utilization_steps``). Stated here
#: because the runs with --async-scheduling are named by the profile id (``engine_version``: vllm-v1-async, no
#: version), whose newest default (0.92 from 0.33.0) is not theirs.
VLLM_RUNS_MEMORY_FRACTION = 0.9
#: Engines that size their KV pool and start even when one full-context request would not fit (vLLM refuses to start):
#: a run whose plan does not start at the model's context is planned at the longest context its pool holds. The
#: serving defaults themselves (memory fraction, request slots, step budget, chunked prefill) are each engine
#: profile's for the record's version and card (``resolve``).
STARTS_SHORT_OF_ONE_CONTEXT: dict[str, str] = {
    "sglang": "SGLang sizes a token pool from --mem-fraction-static (ModelRunner.profile_max_num_token) and starts "
    "with whatever it holds",
    "trtllm": "trtllm-serve sizes the KV pool from --kv_cache_free_gpu_memory_fraction of the free memory "
    "(KvCacheCreator) and starts with whatever it holds",
}

#: Serving-command flag -> Scenario field and type (vLLM's and trtllm-serve's spellings).
FLAG_FIELDS: tuple[tuple[str, str, type], ...] = (
    (r"--max-model-len[ =](\d+)", "max_model_len", int),
    (r"--max_seq_len[ =](\d+)", "max_model_len", int),
    (r"--max-num-seqs[ =](\d+)", "max_num_seqs", int),
    (r"--max-num-batched-tokens[ =](\d+)", "max_num_batched_tokens", int),
    (r"--gpu-memory-utilization[ =](0?\.\d+)", "gpu_memory_utilization", float),
    (r"--mem-fraction-static[ =](0?\.\d+)", "gpu_memory_utilization", float),  # SGLang's static pool
    (r"--kv_cache_free_gpu_memory_fraction[ =](0?\.\d+)", "gpu_memory_utilization", float),  # TensorRT-LLM's
    (r"--chunked-prefill-size[ =](\d+)", "max_num_batched_tokens", int),
    (r"--max-running-requests[ =](\d+)", "max_num_seqs", int),
)
#: Serving-command switches (no value) -> Scenario field and the value they set.
SWITCH_FIELDS: tuple[tuple[str, str, Any], ...] = ((r"--enforce-eager\b", "engine", "eager"),)

# ------------------------------------------------------------------------------------ reasons


class Unexpressible(Exception):
    """Raised while expressing a run: it cannot become a prediction, and why."""

    def __init__(self, kind: str, reason: str):
        self.kind, self.reason = kind, reason
        super().__init__(reason)


class Unexpressed(BaseModel):
    """A record the planner does not predict, and why."""

    model_config = _SPEC

    file: str = Field(description="File of the record.")
    index: int = Field(description="Position in its file.")
    model: str = Field(description="Model as published.")
    metric: str = Field(description="What was measured.")
    reason_kind: str = Field(description="Category of the reason, for counting.")
    reason: str = Field(description="Why, with the specifics.")


def record_check(record: ServingRecord) -> None:
    """Raise ``Unexpressible`` for a record whose own notes or metric stop it (before any run)."""
    flags = [f for f in FLAGS if f in record.notes]
    if flags:
        raise Unexpressible("flagged in notes", f"the corpus flags it {'/'.join(flags)}: a condition is not printed")
    if SHARED_SERVER in record.notes and record.metric not in DECODE_STEP_METRICS:
        raise Unexpressible(
            "prefix cache state not given",
            f"{record.metric} depends on the prefill, and the run shared its server with earlier runs whose prompts "
            "it may find cached (the corpus marks it SHARED SERVER; the cached share is not printed); only "
            f"{', '.join(sorted(DECODE_STEP_METRICS))} is scored",
        )
    if TUNED_CONFIG.search(record.notes):
        raise Unexpressible("non-default kernel config", "runs a PR's tuned kernel config, not the engine's default")
    if record.metric not in METRICS:
        raise Unexpressible("metric not modelled", f"metric '{record.metric}' has no simulated counterpart")


# ------------------------------------------------------------------------------------ runs


#: The conditions of a published run: records equal in all of them come from one run (``run_key``).
RUN_FIELDS = (
    "file",
    "source",
    "model",
    "gpu",
    "n_gpus",
    "tp",
    "pp",
    "ep_dp",
    "quant",
    "engine",
    "engine_flags",
    "workload",
    "input_len",
    "output_len",
    "request_rate",
    "max_concurrency",
    "num_prompts",
)


def run_key(record: ServingRecord) -> tuple:
    """Records with equal keys come from one run: every condition equal, only metric and value differ."""
    return tuple(getattr(record, f) for f in RUN_FIELDS)


@dataclass(frozen=True)
class RunPlan:
    """One run ready to simulate: the deployment, the load and the engine profile that times it."""

    model: ModelSpec
    hw: HardwareProfile
    scenario: Scenario
    workload: Workload
    profile: EngineProfile
    load: str
    how: str

    def simulate(self, efficiency: Efficiency | None = None) -> ServingResult:
        """Simulated replica with ``efficiency`` (default: the profile's fitted factors)."""
        eff = efficiency or self.profile.efficiency
        return simulate_scenario(self.model, self.hw, self.scenario, self.workload, eff, saturation=False)


def engine_version(record: ServingRecord) -> str:
    """The planner's engine for a record: 'vLLM v0.11.0 (V1 engine)' -> 'vllm@0.11.0'; 'TensorRT-LLM (PyTorch
    backend, trtllm-serve) v1.2.0rc1' -> 'trtllm@1.2.0'; a vLLM V1 command with --async-scheduling -> the
    'vllm-v1-async' profile (its host work overlaps the GPU); no version printed -> the engine's newest profile."""
    found = re.search(r"(TensorRT-LLM|vLLM|SGLang)", record.engine)
    if found is None:
        raise Unexpressible("engine not stated", f"engine not identified: '{record.engine}'")
    name = ENGINE_FAMILIES[found.group(1)]
    if name == "vllm" and "--async-scheduling" in serving_command(record):
        return "vllm-v1-async"
    version = re.search(r"(\d+\.\d+(?:\.\d+)?)", record.engine[found.end() :])
    return f"{name}@{version.group(1)}" if version else name


def serving_command(record: ServingRecord) -> str:
    return record.engine_flags.split("; client:")[0]


def stated_flags(record: ServingRecord) -> dict[str, Any]:
    """Scenario fields the serving command sets."""
    command = serving_command(record)
    out: dict[str, Any] = {}
    for pattern, name, cast in FLAG_FIELDS:
        found = re.search(pattern, command)
        if found:
            out[name] = cast(found.group(1))
    for pattern, name, value in SWITCH_FIELDS:
        if re.search(pattern, command):
            out[name] = value
    return out


def _card(record: ServingRecord) -> HardwareProfile:
    if "not printed" in record.gpu or " or " in record.gpu:
        raise Unexpressible("GPU variant not stated", f"card variant not printed: '{record.gpu}'")
    known, profile = match_gpu(record.gpu)
    if not known:
        raise Unexpressible("GPU not stated", f"card not identified: '{record.gpu}'")
    if profile is None:
        raise Unexpressible("GPU not profiled", f"no hardware profile for '{record.gpu}'")
    return get_profile(profile)


def _model(record: ServingRecord) -> ModelSpec:
    match = match_model(record.model)
    if match is None or match.repo_id is None:
        what = match.note if match else record.model
        raise Unexpressible("model not in catalog", f"{what} is not in the bundled catalog")
    return catalog_model(match.repo_id)


#: The corpus's expert / data-parallel labels (``ep_dp``) and the layout each runs, when the planner models it:
#: (pattern, what it means). "EP=N" and vLLM's "expert-parallel (EP over TP*DP ranks)" with TP = the GPUs is
#: expert parallelism over the TP group (vLLM -tp N --enable-expert-parallel, SGLang --tp N --ep-size N,
#: TensorRT-LLM moe_expert_parallel_size N): attention TP N, whole experts split over the N ranks, no
#: all-to-all. SGLang's --enable-dp-attention with dp-size 1 is plain TP. Attention DP > 1 stays refused: with
#: TP-sharded experts (SGLang without --ep-size) the planner has no layout for it, and with EP the simulator runs
#: one DP rank without splitting the published load over the ranks.
EP_DP_LABELS: tuple[tuple[str, str], ...] = (
    (r"^EP=(\d+)$", "ep_over_tp"),
    (r"^expert-parallel \(EP over TP\*DP ranks\)$", "ep_over_tp"),
    (r"^DP-attention \(dp-size=1 inside the TP group\)$", "tp"),
)


#: Marks an expert-parallel run in its ``how`` (``CorpusPrediction.expert_parallel``).
EP_MARK = " + EP"


def _parallelism(record: ServingRecord) -> dict[str, Any]:
    """The scenario's parallel fields for the record (tp, and --enable-expert-parallel when it states EP)."""
    fields: dict[str, Any] = {}
    if record.ep_dp is not None:
        layout = next((kind for pattern, kind in EP_DP_LABELS if re.match(pattern, record.ep_dp)), None)
        size = re.match(r"^EP=(\d+)$", record.ep_dp)
        if layout is None or (size is not None and int(size.group(1)) != record.tp):
            raise Unexpressible(
                "parallelism not modelled",
                f"{record.ep_dp}: attention-data parallel (dp > 1) is not simulated (one DP rank, the load not split)",
            )
        if layout == "ep_over_tp":
            fields["enable_expert_parallel"] = True
    if record.pp > 1:
        raise Unexpressible("parallelism not modelled", f"pipeline parallel PP{record.pp} is not simulated")
    if record.n_gpus != record.tp:
        raise Unexpressible(
            "parallelism not modelled", f"{record.n_gpus} GPUs at TP{record.tp}: data parallel is not modelled"
        )
    return {"tp": record.tp, **fields}


def _weight_dtype(record: ServingRecord) -> str:
    low = record.quant.lower()
    if "assumed" in low:
        raise Unexpressible("flagged in notes", f"precision assumed by the corpus: '{record.quant}'")
    for pattern, dtype in QUANT_TABLE:
        if re.search(pattern, low):
            return dtype
    raise Unexpressible("condition not given", f"precision not understood: '{record.quant}'")


#: ``sglang.bench_serving --dataset-name random`` draws each request's lengths uniformly
#: (``sample_random_requests``, python/sglang/bench_serving.py): input from [max(int(L_in x r), 1), L_in],
#: output from [int(L_out x r), L_out], with r = ``--random-range-ratio`` (default 0.0: "up to the requested
#: value") and L = ``--random-input-len`` / ``--random-output-len`` (default 1024 each; older clients spell them
#: ``--random-input`` / ``--random-output``). r = 1 is a fixed length.
SGLANG_RANDOM_DEFAULTS = {"input": 1024, "output": 1024, "range_ratio": 0.0}
#: Largest relative gap between a published mean length and the mean of the range it was drawn from; the corpus's
#: measured means sit within 0.95-1.06 of theirs.
MEAN_MISMATCH = 0.15
_SGLANG_CLIENT = re.compile(r"sglang\.bench_serving")
_RANDOM_DATASET = re.compile(r"--dataset-name[ =]random(?![-\w])")


def _flag_number(flags: str, names: tuple[str, ...]) -> float | None:
    """The number after the last of ``names`` in ``flags`` (``--name N`` or ``--name=N``), or None."""
    hits = re.findall(
        r"(?:^|\s)(?:" + "|".join(re.escape(n) for n in names) + r")[ =]([0-9]+(?:\.[0-9]+)?)(?!\S)", flags
    )
    return float(hits[-1]) if hits else None


def sglang_random_ranges(record: ServingRecord) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The (input, output) ranges SGLang's client drew the run's lengths from (``SGLANG_RANDOM_DEFAULTS``), or None
    when the run is not ``sglang.bench_serving``'s random dataset as its command shows it."""
    flags = record.engine_flags
    if not (_SGLANG_CLIENT.search(flags) and _RANDOM_DATASET.search(flags)):
        return None
    r = _flag_number(flags, ("--random-range-ratio",))
    ratio = SGLANG_RANDOM_DEFAULTS["range_ratio"] if r is None else r
    ranges = []
    for side, names in (
        ("input", ("--random-input-len", "--random-input")),
        ("output", ("--random-output-len", "--random-output")),
    ):
        value = _flag_number(flags, names)
        top = int(SGLANG_RANDOM_DEFAULTS[side] if value is None else value)
        low = int(top * ratio)
        ranges.append((max(low, 1) if side == "input" else low, top))
    return ranges[0], ranges[1]


def _lengths(record: ServingRecord) -> tuple[Any, Any]:
    """(input, output) length distributions: ShareGPT log-normal around the means; SGLang's random dataset uniform
    over the range its client drew from (``sglang_random_ranges``) with the top moved so the mean is the measured
    one (the published means are token totals over requests: e.g. outputs cut short by EOS); else fixed at the
    means."""
    if record.input_len is None or record.output_len is None:
        raise Unexpressible(
            "condition not given", f"lengths not given (input {record.input_len!r}, output {record.output_len!r})"
        )
    fixed_out = "--sharegpt-output-len" in record.engine_flags

    def spread(mean: float, fixed: bool) -> Any:
        if fixed:
            return FixedLength(tokens=max(1, round(mean)))
        return LognormalLength(mean_tokens=mean, std_tokens=SHAREGPT_STD_OVER_MEAN * mean)

    def drawn(mean: float, low: int, top: int) -> Any:
        low = max(1, low)  # the simulator's requests have at least one token (the client may ask for 0 outputs)
        high = min(top, round(2.0 * mean - low))
        if high <= low:
            return FixedLength(tokens=max(1, round(mean)))
        if abs((low + high) / 2.0 / mean - 1.0) > MEAN_MISMATCH:
            raise Unexpressible(
                "condition not given",
                f"published mean length {mean:g} is not the mean of a draw from [{low}, {top}], the range the "
                "command's sglang.bench_serving samples (a requested length given as the mean?)",
            )
        return UniformLength(low_tokens=low, high_tokens=high)

    sharegpt = "sharegpt" in record.workload.lower()
    ranges = None if sharegpt else sglang_random_ranges(record)
    if ranges is not None:
        (in_low, in_top), (out_low, out_top) = ranges
        return drawn(record.input_len, in_low, in_top), drawn(record.output_len, out_low, out_top)
    return spread(record.input_len, not sharegpt), spread(record.output_len, fixed_out or not sharegpt)


def _arrivals(record: ServingRecord) -> tuple[Any, int, str, str]:
    """(arrivals, requests simulated, load kind, words) for the record's load."""
    n = record.num_prompts
    if n is None:
        raise Unexpressible("condition not given", "number of prompts not given")
    if record.max_concurrency is not None and isinstance(record.request_rate, (int, float)):
        k = min(n, MAX_PACED_REQUESTS)
        return (
            PoissonArrivals(request_rate_per_s=float(record.request_rate), max_concurrency=record.max_concurrency),
            k,
            "rate",
            f"{k} requests at {record.request_rate} req/s, at most {record.max_concurrency} in flight",
        )
    if record.max_concurrency is not None:
        k = min(n, MAX_PACED_REQUESTS)
        return (
            ConcurrencyArrivals(concurrency=record.max_concurrency),
            k,
            "concurrency",
            f"{k} requests at concurrency {record.max_concurrency}",
        )
    if isinstance(record.request_rate, (int, float)):
        k = min(n, MAX_PACED_REQUESTS)
        return (
            PoissonArrivals(request_rate_per_s=float(record.request_rate)),
            k,
            "rate",
            f"{k} requests at {record.request_rate} req/s",
        )
    if record.request_rate == "inf":
        if n > MAX_BURST_REQUESTS:
            raise Unexpressible(
                "condition not given", f"a burst of {n} prompts is above the {MAX_BURST_REQUESTS} simulated"
            )
        return ConcurrencyArrivals(concurrency=n), n, "burst", f"burst of {n} requests at t=0"
    raise Unexpressible("condition not given", f"load not understood (rate {record.request_rate!r})")


def express_run(record: ServingRecord) -> RunPlan:
    """The run of ``record`` as a simulation plan; raises ``Unexpressible`` with the reason."""
    hw = _card(record)
    model = _model(record)
    parallel = _parallelism(record)
    tp = parallel["tp"]
    spec = engine_version(record)
    profile, _ = resolve_engine(spec)
    settings = {  # what the command does not set is the engine profile's default at the version (``resolve``)
        "gpu": hw.id,
        **parallel,
        "weight_dtype": _weight_dtype(record),
        "engine_version": spec,
        **stated_flags(record),
    }
    if profile.engine == "vllm":
        settings.setdefault("gpu_memory_utilization", VLLM_RUNS_MEMORY_FRACTION)
    longest = min(settings.get("max_model_len") or model.max_position_embeddings, model.max_position_embeddings)
    step_tokens = settings.get("max_num_batched_tokens") or profile.default_max_num_batched_tokens
    if not profile.chunked_prefill_default and step_tokens:
        # without chunked prefill a prompt must fit one step: longer requests are refused by the engine
        longest = min(longest, step_tokens)
    sc = Scenario(**{**settings, "max_model_len": longest})
    inputs, outputs = _lengths(record)
    arrivals, n, kind, load = _arrivals(record)
    workload = Workload(arrivals=arrivals, num_requests=n, input_tokens=inputs, output_tokens=outputs, seed=SEED)
    plan = plan_memory(model, hw, sc, suggest=False)
    if not plan.fits and profile.engine in STARTS_SHORT_OF_ONE_CONTEXT and plan.max_model_len_that_fits:
        sc = sc.model_copy(update={"max_model_len": plan.max_model_len_that_fits})  # the pool it would size
        plan = plan_memory(model, hw, sc, suggest=False)
    if not plan.fits or plan.num_gpu_blocks < 1:
        raise Unexpressible("planner refused", f"the planner says it does not start: {plan.reason}")
    planned_replica(model, hw, sc)  # the simulator's own checks (limits agree), ScenarioError if not
    ep = EP_MARK if sc.enable_expert_parallel else ""
    how = (
        f"{load}, TP{tp}{ep} x {hw.id}, {profile.id}, max_num_seqs {plan.resolved.max_num_seqs}, "
        f"{plan.num_gpu_blocks:,} KV blocks"
    )
    return RunPlan(model=model, hw=hw, scenario=sc, workload=workload, profile=profile, load=kind, how=how)


# ------------------------------------------------------------------------------------ predictions


class CorpusPrediction(BaseModel):
    """One expressed record: measured, predicted, error."""

    model_config = _SPEC

    file: str = Field(description="File of the record.")
    index: int = Field(description="Position in its file.")
    family: str = Field(description="Engine profile that timed the run (vllm-v1, vllm-v1-async, sglang, trtllm, ...).")
    metric: str = Field(description="What was measured.")
    model: str = Field(description="Model as published.")
    gpu: str = Field(description="Card as published.")
    load: str = Field(description="Load kind: burst (all at t = 0), concurrency (closed loop) or rate (Poisson).")
    measured: float = Field(description="Published value, in the metric's unit.")
    predicted: float | None = Field(description="Simulated value, same unit; None when the run gave none.")
    how: str = Field(description="The simulated run, in words.")

    @property
    def expert_parallel(self) -> bool:
        """The run serves the model with --enable-expert-parallel (an ``EP_DP_LABELS`` layout)."""
        return EP_MARK + " x " in self.how

    @property
    def error(self) -> float | None:
        """predicted / measured - 1 (negative: predicted low); None without a prediction."""
        if self.predicted is None or not math.isfinite(self.predicted) or self.measured == 0:
            return None
        return self.predicted / self.measured - 1.0


@dataclass
class Expressed:
    """A run and the records it answers."""

    plan: RunPlan
    records: list[ServingRecord]


def express_all(records: list[ServingRecord]) -> tuple[list[Expressed], list[Unexpressed]]:
    """Group the records into runs and express each run once; nothing is dropped silently."""
    runs: dict[tuple, list[ServingRecord]] = {}
    unexpressed: list[Unexpressed] = []
    for record in records:
        try:
            record_check(record)
        except Unexpressible as why:
            unexpressed.append(_unexpressed(record, why.kind, why.reason))
            continue
        runs.setdefault(run_key(record), []).append(record)
    expressed: list[Expressed] = []
    for group in runs.values():
        try:
            expressed.append(Expressed(plan=express_run(group[0]), records=group))
        except Unexpressible as why:
            unexpressed += [_unexpressed(r, why.kind, why.reason) for r in group]
        except PlannerError as err:
            unexpressed += [_unexpressed(r, "planner refused", str(err)) for r in group]
    return expressed, unexpressed


def _unexpressed(record: ServingRecord, kind: str, reason: str) -> Unexpressed:
    return Unexpressed(
        file=record.file, index=record.index, model=record.model, metric=record.metric, reason_kind=kind, reason=reason
    )


def predict(run: Expressed, efficiency: Efficiency | None = None) -> list[CorpusPrediction]:
    """Simulate the run once and read every record's metric from it."""
    result = run.plan.simulate(efficiency)
    out = []
    for r in run.records:
        value = METRICS[r.metric](result)
        out.append(
            CorpusPrediction(
                file=r.file,
                index=r.index,
                family=run.plan.profile.id,
                metric=r.metric,
                model=r.model,
                gpu=r.gpu,
                load=run.plan.load,
                measured=r.value,
                predicted=None if value is None else float(value),
                how=run.plan.how,
            )
        )
    return out


def subsample(runs: list[Expressed], stride: int) -> list[Expressed]:
    """About one run in ``stride``, for a faster check: the runs whose key (``run_key``) hashes to 0 modulo
    ``stride``. Each run's membership depends on that run alone, so expressing a new run never changes which
    of the others are in the sample (taking every stride-th run by position did: one more run shifted the
    rest, and the guard's medians moved with no prediction changed)."""
    stride = max(1, stride)
    if stride == 1:
        return list(runs)
    digest = lambda run: hashlib.blake2b(repr(run_key(run.records[0])).encode(), digest_size=8).digest()  # noqa: E731
    return [run for run in runs if int.from_bytes(digest(run), "big") % stride == 0]


# ------------------------------------------------------------------------------------ summary


class MetricSummary(BaseModel):
    """|error| statistics of one engine family and metric."""

    model_config = _SPEC

    family: str = Field(description="Engine profile.")
    metric: str = Field(description="Metric.")
    count: int = Field(description="Records with a prediction.")
    median_abs_error_pct: float = Field(description="Median |error|, %.")
    p90_abs_error_pct: float = Field(description="90th percentile of |error| (nearest rank), %.")
    median_error_pct: float = Field(description="Median signed error, % (negative: predicted low).")


def summarize(predictions: list[CorpusPrediction], by_load: bool = False) -> list[MetricSummary]:
    """Per engine family (and load kind, with ``by_load``: 'sglang / burst') and metric."""
    groups: dict[tuple[str, str], list[float]] = {}
    for p in predictions:
        if p.error is not None:
            family = f"{p.family} / {p.load}" if by_load else p.family
            groups.setdefault((family, p.metric), []).append(p.error * 100)
    out = []
    for (family, metric), errs in sorted(groups.items()):
        abs_errs = sorted(abs(e) for e in errs)
        p90 = abs_errs[min(len(abs_errs) - 1, math.ceil(0.9 * len(abs_errs)) - 1)]
        out.append(
            MetricSummary(
                family=family,
                metric=metric,
                count=len(errs),
                median_abs_error_pct=round(statistics.median(abs_errs), 1),
                p90_abs_error_pct=round(p90, 1),
                median_error_pct=round(statistics.median(errs), 1),
            )
        )
    return out


class CardPair(BaseModel):
    """One published run measured on two cards (everything else equal): how much faster the second card was, as
    measured and as predicted. The planner's cards differ only by their datasheets, so where one publisher's
    pages disagree on that ratio across engines and models, no card-level model fits them all."""

    model_config = _SPEC

    family: str = Field(description="Engine profile that timed the runs.")
    model: str = Field(description="Model as published.")
    workload: str = Field(description="The runs' workload and load, in words.")
    metric: str = Field(description="The metric compared (a throughput: higher is faster).")
    gpu_a: str = Field(description="The first card, as published.")
    gpu_b: str = Field(description="The second card, as published.")
    measured_ratio: float = Field(description="Measured value on gpu_b / on gpu_a.")
    predicted_ratio: float = Field(description="Predicted value on gpu_b / on gpu_a.")

    @property
    def ratio_error(self) -> float:
        """predicted ratio / measured ratio - 1 (positive: the planner expects gpu_b to gain more than it did)."""
        return self.predicted_ratio / self.measured_ratio - 1.0


#: What must be equal for two records to be one run on two cards: ``RUN_FIELDS`` without the card, the page and file
#: it was published in, the engine string (the pair's engine family is compared instead: pages state their own
#: versions) and the measured mean lengths (the requested ones are in ``workload``).
_SAME_RUN_BUT_CARD = tuple(
    f for f in RUN_FIELDS if f not in ("file", "source", "gpu", "engine", "input_len", "output_len")
)


def card_pairs(
    predictions: list[CorpusPrediction],
    records: list[ServingRecord],
    metric: str = "output_throughput_tok_s",
) -> list[CardPair]:
    """Every pair of predicted records of ``metric`` that are one run (``_SAME_RUN_BUT_CARD`` and the engine family
    equal) on two different cards, ordered by card name within the pair."""
    by_place = {(r.file, r.index): r for r in records}
    groups: dict[tuple, list[tuple[ServingRecord, CorpusPrediction]]] = {}
    for p in predictions:
        record = by_place.get((p.file, p.index))
        if p.metric != metric or record is None or not p.predicted or not p.measured:
            continue
        key = (p.family, *(getattr(record, f) for f in _SAME_RUN_BUT_CARD))
        groups.setdefault(key, []).append((record, p))
    pairs = []
    for members in groups.values():
        members.sort(key=lambda rp: rp[0].gpu)
        for i, (ra, pa) in enumerate(members):
            for rb, pb in members[i + 1 :]:
                if ra.gpu == rb.gpu or pa.predicted is None or pb.predicted is None:
                    continue
                pairs.append(
                    CardPair(
                        family=pa.family,
                        model=ra.model,
                        workload=ra.workload,
                        metric=metric,
                        gpu_a=ra.gpu,
                        gpu_b=rb.gpu,
                        measured_ratio=rb.value / ra.value,
                        predicted_ratio=pb.predicted / pa.predicted,
                    )
                )
    return pairs


def reason_counts(unexpressed: list[Unexpressed]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for u in unexpressed:
        counts[u.reason_kind] = counts.get(u.reason_kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
