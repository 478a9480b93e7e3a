"""Public records: each published measurement of ``shared/reference/measured_public.json`` as the
planner prediction of the same quantity, or the reason it cannot be one.

The file holds 1,471 numbers from TensorRT-LLM's throughput tables, static-batch tables, vLLM and
SGLang serving sweeps, Vidur per-operator timings and vLLM startup logs (schema in
``shared/reference/README.md``). ``express`` reads one record's conditions (model, card, precision,
parallelism, batch, lengths) into a scenario and picks how the planner predicts its metric:

* max-throughput tables (TensorRT-LLM ``trtllm-bench``, all requests queued): the static-batch
  estimate at the largest batches whose ``input + output`` tokens fit the KV cache, the best of them;
* static-batch tables (batch and lengths given): ``estimate_latency``'s throughput or TTFT;
* Vidur per-layer linear ops and NCCL all-reduce: the same ops bound to the card (``roofline.bind``);
* serving sweeps (a request rate, or all prompts at once): the simulator with ``StepTimeModel`` as
  step cost and the memory plan's KV blocks;
* startup logs: ``plan_memory`` (weights, KV GiB, blocks, tokens, concurrency).

A record that cannot be expressed (model not in the catalog, card not profiled, a condition the
source leaves out, a parallelism the planner does not model) comes back as ``Unexpressed`` with
the reason; nothing is dropped silently. ``evaluate`` turns the lot into an ``AccuracyReport``:
per source family and metric the count, median and P90 absolute % error and the worst cases.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.errors import PlannerError
from planner.estimate import step
from planner.estimate.defaults import FITTED
from planner.estimate.latency import StepTimeModel, first_token_seconds
from planner.estimate.memory import plan_memory, resolve
from planner.estimate.roofline import MAX_GEMM_ROWS, bind, engine_of, layer_groups, model_ops, step_shape, uses_graphs
from planner.hardware import HardwareProfile, get_profile
from planner.model.families import build_spec
from planner.model.ops import Op
from planner.model.sources import load_config
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.units import GiB, cdiv

REFERENCE_FILE = "measured_public.json"
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


# ------------------------------------------------------------------------------------ records


class PublicRecord(BaseModel):
    """One published measurement, as ``measured_public.json`` holds it (``index``: its position)."""

    model_config = _SPEC

    index: int = Field(description="Position of the record in measured_public.json (0-based).")
    source: str = Field(description="Where the number was published (repository, file, commit or URL).")
    model: str = Field(description="Model as the source names it.")
    gpu: str = Field(description="Accelerator as the source names it.")
    n_gpus: int = Field(description="GPUs of the measured deployment.")
    tp: int | str = Field(description="Tensor-parallel size (text when the source does not give one).")
    dtype: str = Field(description="Precision label as the source gives it.")
    quant: str = Field(description="Quantization as the source gives it.")
    engine: str = Field(description="Engine, version and mode.")
    batch_or_concurrency: int | str = Field(description="Batch size, concurrency, or a description of the load.")
    qps: int | float | str = Field(description="Request rate in requests/s, 'inf' (all at once) or 'n/a'.")
    input_len: int | str | None = Field(description="Prompt tokens per request, or a description (ShareGPT).")
    output_len: int | str | None = Field(description="Output tokens per request, or a description.")
    metric: str = Field(description="What was measured.")
    value: float = Field(description="The measured number, in ``unit``.")
    unit: str = Field(description="Unit of ``value``, as the source states it.")
    notes: str = Field(description="Conditions, caveats and INCOMPLETE / AMBIGUOUS flags.")


#: A verbatim copy of shared/reference/measured_public.json, for clones without ../shared (see its README).
BUNDLED_REFERENCE_DIR = Path(__file__).resolve().parent / "reference"


def reference_dir() -> Path:
    """The reference folder: ``$PLANNER_REFERENCE_DIR``, else ``<repo>/../shared/reference`` when it
    exists, else the copy bundled in ``planner/verify/reference``."""
    env = os.environ.get("PLANNER_REFERENCE_DIR")
    if env:
        return Path(env)
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "reference"
    return shared if (shared / REFERENCE_FILE).is_file() else BUNDLED_REFERENCE_DIR


def load_records(path: str | os.PathLike[str] | None = None) -> list[PublicRecord]:
    """Read measured_public.json (default: ``reference_dir() / measured_public.json``)."""
    file = Path(path) if path is not None else reference_dir() / REFERENCE_FILE
    if not file.is_file():
        raise PlannerError(
            f"the public measurements file {file} does not exist.",
            hint="Check out the shared reference folder beside the repository (../shared/reference), "
            "or set PLANNER_REFERENCE_DIR to the folder holding measured_public.json.",
        )
    rows = json.loads(file.read_text())
    return [PublicRecord(index=i, **row) for i, row in enumerate(rows)]


# ------------------------------------------------------------------------- name tables


#: Source family by a phrase of the ``source`` field, first match wins. The label groups records
#: published together (one table, one engine release), which is how accuracy is reported.
SOURCE_FAMILIES: tuple[tuple[str, str], ...] = (
    ("generated using version 0.12.0", "trtllm-0.12 max throughput"),
    ("generated using version 0.17", "trtllm-0.17 max throughput"),
    ("NEW for v1.0", "trtllm-1.0 max throughput"),
    ("developer-guide/perf-overview.md", "trtllm-1.1 max throughput per GPU"),
    ("docs/source/performance.md", "trtllm-0.5/0.6 static batch"),
    ("release/0.5.0/docs/source/performance.md", "trtllm-0.5/0.6 static batch"),
    ("blogs/", "trtllm blogs static batch"),
    ("LambdaLabsML/vllm-benchmark", "vllm-0.5/0.6 serving (Lambda)"),
    ("benchmark_vllm_060", "sglang-0.3 / vllm-0.6 serving"),
    ("profiling/compute", "vidur linear ops"),
    ("profiling/network", "vidur all-reduce"),
    ("vllm-project/vllm", "vllm startup logs"),
    ("CodeEngine", "vllm startup logs"),
)


def source_family(record: PublicRecord) -> str:
    for phrase, family in SOURCE_FAMILIES:
        if phrase in record.source:
            return family
    return "other"


@dataclass(frozen=True)
class ModelMatch:
    """A pattern of published model names and the catalog repo id it means."""

    pattern: str
    repo_id: str | None
    note: str = ""


#: Published model name (lowercase, searched) -> catalog repo id. Instruct and quantized
#: re-uploads share their base model's architecture; a ``note`` says when the catalog entry is an
#: architecture-identical stand-in. ``repo_id=None``: not in the catalog (the reason says so).
MODEL_TABLE: tuple[ModelMatch, ...] = (
    ModelMatch(
        r"405b",
        "meta-llama/Llama-3.1-405B",
        "stand-in: -Instruct, -FP8 and Hermes-3-Llama-3.1-405B keep Llama-3.1-405B's shapes",
    ),
    ModelMatch(r"llama-3\.1-8b", "meta-llama/Llama-3.1-8B"),
    ModelMatch(r"llama-3\.1-70b", "meta-llama/Llama-3.1-70B"),
    ModelMatch(r"llama-3\.3-70b", "meta-llama/Llama-3.3-70B-Instruct"),
    ModelMatch(r"(^|/)(meta-)?llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
    ModelMatch(
        r"(^|/)(meta-)?llama-3-70b",
        "meta-llama/Llama-3.1-70B",
        "stand-in: Llama-3-70B has Llama-3.1-70B's shapes (80 x 8192, GQA 64/8, FFN 28672, vocab 128256)",
    ),
    ModelMatch(r"llama-2-7b", "meta-llama/Llama-2-7b-hf"),
    ModelMatch(r"llama-2-13b", "meta-llama/Llama-2-13b-hf"),
    ModelMatch(r"llama-2-70b", "meta-llama/Llama-2-70b-hf"),
    ModelMatch(r"llama-4-maverick", "meta-llama/Llama-4-Maverick-17B-128E-Instruct"),
    ModelMatch(r"llama-4-scout.*fp8", "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"),
    ModelMatch(r"llama-4-scout", None, "Llama-4-Scout-17B-16E (bf16)"),
    ModelMatch(r"qwen2\.5-7b", "Qwen/Qwen2.5-7B", "stand-in: Qwen2.5-7B-Instruct keeps the base model's architecture"),
    ModelMatch(r"yi-34b", "01-ai/Yi-34B"),
    ModelMatch(r"mistral-7b-instruct-v0\.3", "mistralai/Mistral-7B-Instruct-v0.3"),
    ModelMatch(r"^mistral-7b$", "mistralai/Mistral-7B-v0.1"),
    ModelMatch(
        r"mistral-nemo",
        "mistralai/Mistral-Nemo-Base-2407",
        "stand-in: Mistral-Nemo-Instruct-2407 is the base model's architecture",
    ),
    ModelMatch(r"mistral-large", None, "Mistral-Large-Instruct-2407"),
    ModelMatch(r"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"),
    ModelMatch(r"mixtral-8x22b-instruct", "mistralai/Mixtral-8x22B-Instruct-v0.1"),
    ModelMatch(
        r"mixtral-8x22b",
        "mistralai/Mixtral-8x22B-Instruct-v0.1",
        "stand-in: the base Mixtral-8x22B-v0.1 differs only in vocabulary (32000 vs 32768 tokens)",
    ),
    ModelMatch(r"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B"),
    ModelMatch(r"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"),
    ModelMatch(r"deepseek-r1", "deepseek-ai/DeepSeek-R1", "stand-in: DeepSeek-R1-0528 keeps R1's architecture"),
    ModelMatch(r"gpt-oss-120b", "openai/gpt-oss-120b"),
    ModelMatch(r"gpt-oss-20b", "openai/gpt-oss-20b"),
    ModelMatch(r"gpt-j-6b", None, "GPT-J-6B"),
    ModelMatch(r"falcon-180b", "tiiuae/falcon-180B"),
    ModelMatch(r"granite-4\.0-micro", None, "ibm-granite/granite-4.0-micro"),
    ModelMatch(r"qwen3-vl-", None, "Qwen3-VL (a vision-language checkpoint)"),
    ModelMatch(r"qwen3-coder-next", None, "Qwen3-Coder-Next"),
    ModelMatch(r"qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Instruct"),
    ModelMatch(r"qwen3-0\.6b", "Qwen/Qwen3-0.6B"),
    ModelMatch(r"qwen3-1\.7b", None, "Qwen3-1.7B"),
    ModelMatch(r"qwen3-8b", "Qwen/Qwen3-8B", "-FP8 and -AWQ re-uploads keep Qwen3-8B's shapes"),
    ModelMatch(r"qwen3-14b", None, "Qwen3-14B"),
    ModelMatch(r"qwen3-32b", "Qwen/Qwen3-32B", "-FP8 and -AWQ re-uploads keep Qwen3-32B's shapes"),
    ModelMatch(
        r"qwen2\.5-72b", "Qwen/Qwen2.5-72B", "stand-in: Qwen2.5-72B-Instruct keeps the base model's architecture"
    ),
    ModelMatch(r"glm-4\.5-air", "zai-org/GLM-4.5-Air", "-FP8 re-upload keeps GLM-4.5-Air's shapes"),
    ModelMatch(r"glm-4\.6", None, "GLM-4.6 (355B)"),
    ModelMatch(r"deepseek-v3\.2", None, "DeepSeek-V3.2 (DeepSeek Sparse Attention; the catalog has V3 only)"),
    ModelMatch(r"ministral-3-8b", None, "Ministral-3-8B"),
)

#: Published card name (lowercase, searched) -> hardware profile id; None: no profile yet.
GPU_TABLE: tuple[tuple[str, str | None], ...] = (
    (r"^gh200", "gh200"),
    (r"^h200", "h200"),
    (r"^h100 nvl", "h100-nvl"),
    (r"^h100", "h100-sxm"),
    (r"^h20\b", "h20"),
    (r"mi300x", "mi300x"),
    (r"^l20\b", None),
    (r"^a100", "a100-80gb"),
    (r"^gb200", "gb200"),
    (r"^b200", "b200"),
    (r"^l40s", "l40s"),
    (r"rtx-pro-6000", "rtx-pro-6000"),
    (r"rtx-3090", "rtx-3090"),
)

#: Quantization label (quant + dtype, lowercase, searched) -> (weight_dtype, kv_cache_dtype).
#: ModelOpt FP8/NVFP4 checkpoints ship an FP8 KV scale that TensorRT-LLM uses (assumed where the
#: table does not say); checkpoints already quantized in their config keep ``auto``.
PRECISION_TABLE: tuple[tuple[str, tuple[str, str]], ...] = (
    (r"nvfp4", ("nvfp4", "fp8")),
    (r"mxfp4|per doc column label fp8", ("auto", "auto")),
    (r"native fp8", ("auto", "fp8")),
    (r"fp8 weights\+fp8 kv|fp8_kv_cache|fp8 weights \(modelopt", ("fp8", "fp8")),
    (r"w8a8 int8|int8 w8a8", ("int8", "auto")),
    (r"fp8", ("fp8", "auto")),
    (r"^none|fp16|bf16", ("auto", "auto")),
)


def match_model(name: str) -> ModelMatch | None:
    low = name.lower()
    for entry in MODEL_TABLE:
        if re.search(entry.pattern, low):
            return entry
    return None


def match_gpu(name: str) -> tuple[bool, str | None]:
    """(known card, profile id or None)."""
    low = name.lower()
    for pattern, profile in GPU_TABLE:
        if re.search(pattern, low):
            return True, profile
    return False, None


def match_precision(record: PublicRecord) -> tuple[str, str] | None:
    text = f"{record.quant} {record.dtype}".lower()
    for pattern, dtypes in PRECISION_TABLE:
        if re.search(pattern, text):
            return dtypes
    return None


@functools.cache
def catalog_model(repo_id: str) -> ModelSpec:
    """The catalog's spec of ``repo_id`` (never the network)."""
    loaded = load_config(repo_id, prefer="catalog")
    return build_spec(loaded.config, repo_id)


@functools.cache
def _profile(profile_id: str) -> HardwareProfile:
    return get_profile(profile_id)


_GROUPS: dict[int, list[tuple[str, list[int]]]] = {}


def _layer_groups(model: ModelSpec) -> list[tuple[str, list[int]]]:
    """``roofline.layer_groups``, memoized per spec object (catalog specs are cached, so stable)."""
    key = id(model)
    if key not in _GROUPS:
        _GROUPS[key] = layer_groups(model)
    return _GROUPS[key]


# ------------------------------------------------------------------------- predictions


class StepOps:
    """The ops of one forward step on one rank, built once, timed for any efficiency factors.

    ``seconds(eff)`` equals ``roofline(...).total_seconds`` for the same step: every op bound by
    ``roofline.bind`` times the layers that run it, combined with the engine's host work
    (``planner.estimate.step.combine_step``).
    """

    def __init__(self, model: ModelSpec, hw: HardwareProfile, sc: Scenario, stage: str, batch: int, seq_len: int):
        res = resolve(model, hw, sc)
        self.engine = engine_of(sc)
        self.graphs = uses_graphs(sc, self.engine, stage, batch)  # type: ignore[arg-type]
        self.piecewise = stage == "prefill" and step.piecewise_graphs(
            self.engine.cuda_graph_mode, sc.engine == "cuda-graphs", batch * seq_len, self.engine.max_cuda_graph_batch
        )
        run_batch = int(step.graph_padded_batch(batch, self.engine.max_cuda_graph_batch)) if self.graphs else batch
        shape = step_shape(model, res, stage, run_batch, seq_len)  # type: ignore[arg-type]
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
                    step.allreduce_seconds(eff, a["comm"][rows], work.tp, work.link, work.engine.custom_allreduce),
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
    _prefill: StepOps | None = field(default=None, repr=False)
    _decode: StepOps | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        res = resolve(self.model, self.hw, self.sc)
        self.steps = (
            cdiv(self.batch * self.input_len, res.max_num_batched_tokens)
            if self.sc.enable_chunked_prefill
            else self.batch
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


# ------------------------------------------------------------------------- expressing


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
    names = {"TensorRT-LLM": "trtllm", "vLLM": "vllm", "SGLang": "sglang"}
    if found:
        return f"{names[found.group(1)]}@{found.group(2)}"
    if "TensorRT-LLM" in engine_text:
        return "trtllm@1.0"
    if "vLLM V1" in engine_text:
        return "vllm@0.8.0"
    return "vllm@0.6.0"


#: Vidur's collective profiler times torch.distributed (NCCL) all-reduce: no custom all-reduce.
NCCL_ONLY = engine_of(None).model_copy(update={"custom_allreduce": False})


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
            block_size_tokens=res.block_size,
            max_num_seqs=res.max_num_seqs,
            max_num_batched_tokens=res.max_num_batched_tokens,
            enable_chunked_prefill=chunked,
            max_model_len=max_len,
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
    except Unexpressible as why:
        return Unexpressed(
            index=record.index,
            family=family,
            model=record.model,
            gpu=record.gpu,
            metric=record.metric,
            reason_kind=why.kind,
            reason=why.reason,
        )
    except PlannerError as err:
        return Unexpressed(
            index=record.index,
            family=family,
            model=record.model,
            gpu=record.gpu,
            metric=record.metric,
            reason_kind="planner refused",
            reason=str(err),
        )
    _known, gpu_id = match_gpu(record.gpu)
    return Expressed(
        record=record, family=family, repo_id=match.repo_id if match else None, gpu_id=gpu_id, prediction=prediction
    )


def express_all(records: list[PublicRecord]) -> tuple[list[Expressed], list[Unexpressed]]:
    expressed, unexpressed = [], []
    for record in records:
        out = express(record)
        (expressed if isinstance(out, Expressed) else unexpressed).append(out)
    return expressed, unexpressed


# ------------------------------------------------------------------------------- report


class RecordResult(BaseModel):
    """One expressed record: what was measured, what the planner predicts, and the error."""

    model_config = _SPEC

    index: int = Field(description="Position in measured_public.json.")
    family: str = Field(description="Source family.")
    metric: str = Field(description="What was measured.")
    model: str = Field(description="Model as published.")
    catalog_model: str | None = Field(description="Catalog repo id the prediction uses (None for collectives).")
    gpu: str = Field(description="Card as published.")
    measured: float = Field(description="Published value, in ``unit``.")
    predicted: float | None = Field(
        description="Planner prediction, in ``unit``; None when the simulation produced none."
    )
    unit: str = Field(description="Unit of both values.")
    error_pct: float | None = Field(
        description="(predicted - measured) / measured x 100; negative means under-predicted."
    )
    how: str = Field(description="The scenario the planner predicted, in words.")


class MetricSummary(BaseModel):
    """Error statistics of one source family and metric."""

    model_config = _SPEC

    family: str = Field(description="Source family.")
    metric: str = Field(description="Metric.")
    count: int = Field(description="Expressed records with a prediction.")
    median_abs_error_pct: float = Field(description="Median of |error|, in %.")
    p90_abs_error_pct: float = Field(description="90th percentile of |error|, in %.")
    median_error_pct: float = Field(description="Median signed error, in % (negative: the planner predicts low).")
    worst: list[RecordResult] = Field(description="The records with the largest |error| (up to 5).")


class AccuracyReport(BaseModel):
    """How close the planner comes to published measurements, and which records it cannot express."""

    model_config = _SPEC

    kind: str = Field(description="Kind of the efficiency factors: bound, default (fitted) or calibrated.")
    efficiency_source: str = Field(description="Where the efficiency factors come from.")
    fast: bool = Field(description="True for the deterministic fast subset (CI), False for every record.")
    total_records: int = Field(description="Records considered (expressed + unexpressed).")
    expressed: int = Field(description="Records expressed as predictions.")
    unexpressed_count: int = Field(description="Records the planner cannot express.")
    median_abs_error_pct: float | None = Field(
        description="Median |error| over every expressed record with a prediction, %."
    )
    p90_abs_error_pct: float | None = Field(description="P90 |error| over the same records, %.")
    summaries: list[MetricSummary] = Field(description="Per source family and metric.")
    reasons: dict[str, int] = Field(description="Unexpressed records counted by reason category.")
    missing_models: dict[str, int] = Field(description="Models not in the catalog, by records they would unlock.")
    missing_gpus: dict[str, int] = Field(description="Cards without a profile, by records they would unlock.")
    results: list[RecordResult] = Field(description="Every expressed record.")
    unexpressed: list[Unexpressed] = Field(description="Every record not expressed, with its reason.")


def error_pct(predicted: float | None, measured: float) -> float | None:
    if predicted is None or not math.isfinite(predicted) or measured == 0:
        return None
    return (predicted - measured) / measured * 100.0


def fast_subset(records: list[PublicRecord], stride: int = 5) -> list[PublicRecord]:
    """A deterministic subset for CI: every ``stride``-th record of each source family (and of the
    serving families only the ones at a request rate, whose simulations are short)."""
    seen: dict[str, int] = {}
    out = []
    for record in records:
        family = source_family(record)
        k = seen.get(family, 0)
        seen[family] = k + 1
        if k % stride:
            continue
        if "serving" in family and str(record.qps) == "inf" and "5000" in str(record.batch_or_concurrency):
            continue
        out.append(record)
    return out


def results_for(expressed: list[Expressed], eff: Efficiency) -> list[RecordResult]:
    out = []
    for e in expressed:
        value = e.predict(eff)
        predicted = value if math.isfinite(value) else None
        r = e.record
        out.append(
            RecordResult(
                index=r.index,
                family=e.family,
                metric=r.metric,
                model=r.model,
                catalog_model=e.repo_id,
                gpu=r.gpu,
                measured=r.value,
                predicted=predicted,
                unit=r.unit,
                error_pct=error_pct(predicted, r.value),
                how=e.prediction.how,
            )
        )
    return out


def summarize(results: list[RecordResult], worst: int = 5) -> list[MetricSummary]:
    groups: dict[tuple[str, str], list[RecordResult]] = {}
    for r in results:
        if r.error_pct is not None:
            groups.setdefault((r.family, r.metric), []).append(r)
    out = []
    for (family, metric), rows in sorted(groups.items()):
        errs = np.array([r.error_pct for r in rows])
        abs_errs = np.abs(errs)
        order = np.argsort(-abs_errs)[:worst]
        out.append(
            MetricSummary(
                family=family,
                metric=metric,
                count=len(rows),
                median_abs_error_pct=float(np.median(abs_errs)),
                p90_abs_error_pct=float(np.percentile(abs_errs, 90)),
                median_error_pct=float(np.median(errs)),
                worst=[rows[i] for i in order],
            )
        )
    return out


def _count(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def evaluate(
    records: list[PublicRecord] | None = None, efficiency: Efficiency | None = None, fast: bool = False
) -> AccuracyReport:
    """Express every record (or the fast subset), predict the expressed ones with ``efficiency``
    (default: the fitted factors) and report the errors and the unexpressed records."""
    eff = efficiency or FITTED
    records = load_records() if records is None else records
    if fast:
        records = fast_subset(records)
    expressed, unexpressed = express_all(records)
    results = results_for(expressed, eff)
    errs = np.array([abs(r.error_pct) for r in results if r.error_pct is not None])
    missing_models = _count(
        [u.reason.split(" is not in")[0] for u in unexpressed if u.reason_kind == "model not in catalog"]
    )
    missing_gpus = _count([u.gpu for u in unexpressed if u.reason_kind == "GPU not profiled"])
    return AccuracyReport(
        kind=eff.kind,
        efficiency_source=eff.source,
        fast=fast,
        total_records=len(records),
        expressed=len(expressed),
        unexpressed_count=len(unexpressed),
        median_abs_error_pct=float(np.median(errs)) if errs.size else None,
        p90_abs_error_pct=float(np.percentile(errs, 90)) if errs.size else None,
        summaries=summarize(results),
        reasons=_count([u.reason_kind for u in unexpressed]),
        missing_models=missing_models,
        missing_gpus=missing_gpus,
        results=results,
        unexpressed=unexpressed,
    )
