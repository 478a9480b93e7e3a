"""Read a vLLM server's startup log and return the memory facts it printed, in bytes.

vLLM reports how it sized the KV cache while it starts: weights per GPU, the profiled activation
peak, non-torch memory, the KV budget, the number of blocks, the token capacity and the
"maximum concurrency" at ``max_model_len``. These are the measurements the planner's memory model
is checked against (``/work/shared/reference/measured_public.json``, metrics ``model_weights_gib``,
``available_kv_cache_gib``, ``num_gpu_blocks``, ``kv_cache_tokens``, ``max_concurrency_x``,
``cuda_graph_gib``, ``peak_torch_memory_gib``).

The wording changed with almost every release, so the parser is a table of line patterns, one per
phrasing, each searched anywhere in a line (prefixes, timestamps and colour codes never matter):

* V0 <= 0.6.3: ``Loading model weights took 14.9888 GB``; ``# GPU blocks: N, # CPU blocks: M``.
* V0 0.6.4-0.6.5: one key=value line, ``Memory profiling results: total_gpu_memory=23.58GiB
  ... peak_torch_memory=17.06GiB ... kv_cache_size=3.81GiB gpu_memory_utilization=0.90``
  (a development branch printed the same as a multi-line table, ``model weights take  14.96GiB``).
* V0/V1 0.7-0.9: ``the current vLLM instance can use total_gpu_memory (X) x
  gpu_memory_utilization (U) = Y`` and ``model weights take ...; non_torch_memory takes ...;
  PyTorch activation peak memory takes ...; the rest of the memory reserved for KV Cache is ...``.
* V1: ``Model loading took X GiB [memory] and T seconds``, ``Available KV cache memory: X GiB``,
  ``GPU KV cache size: N tokens``, ``Maximum concurrency for N tokens per request: Xx``,
  ``Graph capturing finished in T secs, took X GiB``, ``init engine (...) took T seconds``.
* V1 debug and later releases: ``Memory profiling takes T seconds. Total non KV cache memory:
  ...; torch peak memory increase: ...; non-torch forward increase memory: ...; weights memory:
  ...``; ``Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R
  GiB). Actual usage is ...``; ``CUDA graph pool memory: X GiB (actual)``.
* All: ``Initializing a V1 LLM engine (v0.x.y) with config: model='...', dtype=...,
  max_seq_len=..., tensor_parallel_size=..., ...``; ``non-default args: {...}``;
  ``args: Namespace(...)``; a pasted ``vllm serve MODEL --flag value`` command line.

Units. vLLM prints "GB" for weights in the old line but divides by ``2**30``
(``model_runner.py``: ``logger.info("Loading model weights took %.4f GB", usage / float(2**30))``),
so every printed GB/GiB value here is converted with 1 GiB = 2**30 bytes. Values carry the printed
rounding (0.01 GiB is about 10.7 MB).

Tensor parallelism. Each worker prints its own memory lines; they are kept per worker in
``per_worker`` (keyed by the "(VllmWorker rank=1 pid=..)" prefix, "main" for unprefixed lines), and
the summary fields take the minimum over workers, as vLLM sizes the cache from the worker with the
least room (``get_kv_cache_configs`` in V1, ``min(num_blocks)`` over workers in V0). Block counts,
token capacity and concurrency are printed once by the engine and are not per worker.

Bounded work and values. Every regex has bounded quantifiers and each rule is searched only in
lines holding its literal key (``_Rule.key``), so parsing is linear in the log: an 8,000-digit line
takes milliseconds (it took 8.6 s), a 10 MB log well under a few seconds. A log is read up to
``MAX_LOG_CHARS`` (64 Mi characters), as text or bytes (``planner.verify.reading``: UTF-8, UTF-16;
binary refused). A printed value no engine can have is refused with its line number: a number of
more than 20 digits, memory above 1 PiB per GPU, a count above 10^12, a duration above 10^7 s, a
gpu_memory_utilization outside (0, 1], an engine setting that is not a whole number from 1 to
10^12. Only the KV budget, non-torch memory and CUDA-graph memory may be negative (vLLM prints
them as differences; a negative KV budget is the reason a start failed).

Nothing is guessed: a field the log does not state stays ``None`` (``kv_cache_tokens`` is not
derived from blocks, ``block_size`` is not assumed to be 16). When a log holds several starts of the
same engine, only the last one is read.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import ConfigError
from planner.units import GiB
from planner.verify.reading import MAX_LOG_BYTES, check_text, decode_text

__all__ = ["VllmStartupReport", "WorkerMemory", "parse_vllm_log"]

MAIN_PROCESS = "main"
"""Worker label for lines printed without a "(name pid=N)" prefix (the driver / single process)."""

_MAX_UNPARSED_LINES = 100
_SPREAD_TOLERANCE = 0.01
"""Relative spread between workers above which a warning is raised (1 %)."""


class WorkerMemory(BaseModel):
    """What one worker process printed about its GPU memory. Unknown is None."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    worker: str = Field(
        description="Process prefix of the lines, e.g. 'VllmWorker rank=1 pid=123'; "
        "'main' for lines without one; 'min' for the per-field minimum over workers."
    )
    total_gpu_memory_bytes: int | None = Field(
        default=None, description="GPU memory the worker saw (total_gpu_memory), bytes."
    )
    requested_memory_bytes: int | None = Field(
        default=None,
        description="total_gpu_memory x gpu_memory_utilization as printed, bytes.",
    )
    model_weights_bytes: int | None = Field(
        default=None, description="Memory taken by this worker's weight shard, bytes."
    )
    non_torch_memory_bytes: int | None = Field(
        default=None,
        description="Memory outside the torch allocator (CUDA context, NCCL, cuBLAS), bytes; "
        "printed as a difference, so it can be slightly negative.",
    )
    activation_peak_bytes: int | None = Field(
        default=None,
        description="Peak torch memory increase during the profiling forward pass (activations), bytes.",
    )
    peak_torch_memory_bytes: int | None = Field(
        default=None,
        description="Absolute torch peak during profiling, weights included (V0 0.6.4 'peak_torch_memory='), bytes.",
    )
    non_kv_cache_memory_bytes: int | None = Field(
        default=None,
        description="Everything that is not KV cache ('Total non KV cache memory'), bytes.",
    )
    consumed_memory_bytes: int | None = Field(
        default=None,
        description="Weights plus non-torch memory as one figure "
        "('GiB for consumed memory (weights + non-torch)'), bytes.",
    )
    kv_cache_memory_bytes: int | None = Field(
        default=None,
        description="Memory left for the KV cache on this worker, bytes; negative when "
        "the model left no room (the engine then refuses to start).",
    )
    cuda_graph_bytes: int | None = Field(
        default=None,
        description="Memory the captured CUDA graphs took, measured; may be slightly "
        "negative from allocator noise, bytes.",
    )
    cuda_graph_estimate_bytes: int | None = Field(
        default=None,
        description="CUDA-graph memory vLLM estimated before capture and subtracted from the KV budget, bytes.",
    )
    weights_load_seconds: float | None = Field(
        default=None, description="'Loading weights took T seconds' (reading files), seconds."
    )
    model_load_seconds: float | None = Field(
        default=None,
        description="'Model loading took X GiB and T seconds' (whole load), seconds.",
    )
    memory_profiling_seconds: float | None = Field(
        default=None, description="Duration of the memory-profiling run, seconds."
    )
    graph_capture_seconds: float | None = Field(
        default=None, description="'Graph capturing finished in T secs', seconds."
    )


_WORKER_NUMBERS = tuple(name for name in WorkerMemory.model_fields if name != "worker")


class VllmStartupReport(BaseModel):
    """Facts printed by one vLLM engine start. Memory is per GPU, in bytes; unknown is None."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: Literal["V0", "V1"] | None = Field(
        default=None,
        description="Engine generation named in 'Initializing a V1 LLM engine'; None when the log does not say.",
    )
    vllm_version: str | None = Field(default=None, description="vLLM version as printed, without a leading 'v'.")
    model: str | None = Field(default=None, description="Model name or path served.")
    dtype: str | None = Field(default=None, description="Model compute dtype, e.g. 'bfloat16' (torch. prefix dropped).")
    quantization: str | None = Field(
        default=None, description="Quantization method, e.g. 'fp8'; None when none or not printed."
    )
    kv_cache_dtype: str | None = Field(
        default=None, description="KV cache dtype as printed; 'auto' means the model dtype."
    )
    tensor_parallel_size: int | None = Field(
        default=None, description="Tensor-parallel degree (GPUs per pipeline stage), count."
    )
    pipeline_parallel_size: int | None = Field(default=None, description="Pipeline-parallel degree (stages), count.")
    data_parallel_size: int | None = Field(
        default=None, description="Data-parallel ranks (--data-parallel-size), count; None when not printed."
    )
    enable_expert_parallel: bool | None = Field(
        default=None, description="True when the log sets --enable-expert-parallel; None when not printed."
    )
    max_model_len: int | None = Field(
        default=None, description="Longest request the engine admits (max_seq_len), tokens."
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        description="Tokens per scheduler step; sets the profiled activation peak, tokens.",
    )
    gpu_memory_utilization: float | None = Field(
        default=None, description="Fraction of each GPU's memory vLLM may use, 0-1."
    )
    block_size: int | None = Field(
        default=None,
        description="KV block size when the log states it, tokens per block; None otherwise "
        "(the default depends on version and attention backend).",
    )
    enforce_eager: bool | None = Field(
        default=None, description="True when CUDA graphs are disabled (--enforce-eager)."
    )
    total_gpu_memory_bytes: int | None = Field(
        default=None, description="GPU memory as vLLM saw it, bytes (minimum over workers)."
    )
    requested_memory_bytes: int | None = Field(
        default=None,
        description="total_gpu_memory x gpu_memory_utilization, bytes (minimum over workers).",
    )
    model_weights_bytes: int | None = Field(
        default=None, description="Weights resident on one GPU, bytes (minimum over workers)."
    )
    non_torch_memory_bytes: int | None = Field(
        default=None,
        description="Non-torch memory (CUDA context, NCCL, ...), bytes (minimum over workers).",
    )
    activation_peak_bytes: int | None = Field(
        default=None,
        description="Torch peak increase in the profiling run (activations), bytes (minimum over workers).",
    )
    peak_torch_memory_bytes: int | None = Field(
        default=None,
        description="Absolute torch peak incl. weights (V0 0.6.4 format only), bytes (minimum over workers).",
    )
    non_kv_cache_memory_bytes: int | None = Field(
        default=None,
        description="Total non-KV memory as printed, bytes (minimum over workers).",
    )
    consumed_memory_bytes: int | None = Field(
        default=None,
        description="Weights + non-torch as one printed figure, bytes (minimum over workers).",
    )
    kv_cache_memory_bytes: int | None = Field(
        default=None,
        description="Available KV cache memory per GPU, bytes; the minimum over workers, "
        "which is what vLLM sizes the cache from.",
    )
    cuda_graph_bytes: int | None = Field(
        default=None,
        description="Measured CUDA-graph memory, bytes (minimum over workers); can be slightly negative.",
    )
    cuda_graph_estimate_bytes: int | None = Field(
        default=None,
        description="CUDA-graph memory estimated before capture, bytes (minimum over workers).",
    )
    num_gpu_blocks: int | None = Field(default=None, description="KV cache blocks per GPU ('# GPU blocks'), count.")
    kv_cache_tokens: int | None = Field(
        default=None,
        description="KV capacity as printed ('GPU KV cache size', or the V0 'can be stored "
        "in KV cache (N)' error), tokens. Not derived from blocks.",
    )
    max_concurrency: float | None = Field(
        default=None,
        description="Requests of max_concurrency_tokens_per_request tokens that fit in the "
        "KV cache at once, as printed (the 'Xx'), requests.",
    )
    max_concurrency_tokens_per_request: int | None = Field(
        default=None,
        description="The N in 'Maximum concurrency for N tokens per request' (max_model_len), tokens.",
    )
    weights_load_seconds: float | None = Field(
        default=None, description="Reading weight files, seconds (maximum over workers)."
    )
    model_load_seconds: float | None = Field(
        default=None, description="Whole model load, seconds (maximum over workers)."
    )
    memory_profiling_seconds: float | None = Field(
        default=None, description="Memory-profiling run, seconds (maximum over workers)."
    )
    torch_compile_seconds: float | None = Field(
        default=None, description="'torch.compile takes T s in total', seconds."
    )
    graph_capture_seconds: float | None = Field(
        default=None, description="CUDA-graph capture, seconds (maximum over workers)."
    )
    init_engine_seconds: float | None = Field(
        default=None,
        description="'init engine (profile, create kv cache, warmup model) took T', seconds.",
    )
    startup_error: str | None = Field(
        default=None,
        description="The line in which vLLM refused to start for lack of KV memory, if any.",
    )
    per_worker: tuple[WorkerMemory, ...] = Field(
        default=(),
        description="Memory lines per worker process, in order of first appearance.",
    )
    per_worker_min: WorkerMemory | None = Field(
        default=None,
        description="Field-wise minimum over per_worker; None with fewer than two workers.",
    )
    unparsed_relevant_lines: tuple[str, ...] = Field(
        default=(),
        description="Lines that mention memory, blocks or KV cache but match no known "
        "phrasing (ANSI codes removed); a sign of a new vLLM wording.",
    )
    warnings: tuple[str, ...] = Field(default=(), description="Things to know before trusting the numbers.")


# ---------------------------------------------------------------------------------------------
# Line cleaning and process prefixes
# ---------------------------------------------------------------------------------------------

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]{0,32}[ -/]{0,4}[@-~]|\x1b[@-_]")
"""Escape sequences."""
_BARE_ANSI_RE = re.compile(r"\[\d{1,3}(?:;\d{1,3}){0,8}m")
"""The bare "[1;36m" left when a paste dropped the ESC byte."""
_RAY_REPEAT_RE = re.compile(r"[ \t]{0,16}\[repeated (\d{1,9})x across cluster\]")
_LEVEL_RE = re.compile(r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b")
_PROCESS_RE = re.compile(r"\(([^()]{0,200}\bpid=\d{1,10}[^()]{0,200})\)")


def _clean(line: str) -> str:
    """Drop colour codes, the Ray de-duplication suffix and surrounding whitespace/borders."""
    if "\x1b" in line:
        line = _ANSI_RE.sub("", line)
    if "m" in line and "[" in line:
        line = _BARE_ANSI_RE.sub("", line)
    if "[repeated " in line:
        line = _RAY_REPEAT_RE.sub("", line)
    return line.strip().rstrip("│|").rstrip()


def _process_label(line: str) -> str:
    """The innermost "(name pid=N)" prefix before the log level, or 'main' when there is none.

    Nested prefixes occur with data parallelism: "(EngineCore_1 pid=7) (VllmWorker rank=1 pid=8)".
    """
    if "pid=" not in line:
        return MAIN_PROCESS
    level = _LEVEL_RE.search(line)
    head = line[: level.start()] if level else line
    labels = _PROCESS_RE.findall(head)
    return " ".join(labels[-1].split()) if labels else MAIN_PROCESS


def _label_name(label: str) -> str:
    """The process name without its pid, to recognise a restart of the same process."""
    return re.sub(r"\s{0,8}pid=\d{1,10}.*", "", label)


# ---------------------------------------------------------------------------------------------
# The pattern table
# ---------------------------------------------------------------------------------------------

# Every quantifier is bounded and no two overlap, so each search is linear in the line (an
# unbounded ``\d+`` after an unanchored start was quadratic: 8,000 digits took 8.6 s). A run of
# more than 20 digits where a phrasing expects a number is refused (``_refuse_long_number``).
_NUM = r"(?<![\d.])(\d{1,20}(?:\.\d{1,20})?)"
"""A number >= 0 as vLLM prints it (no exponent, at most 20 digits either side of the point)."""
_SNUM = r"(?<![\d.])(-?\d{1,20}(?:\.\d{1,20})?)"
"""The same, signed: only KV-budget, non-torch and CUDA-graph memory can print negative."""
_INT = r"(?<![\d,])(\d{1,3}(?:,\d{3}){1,6}|\d{1,20})"
"""A count, plain (2463) or with thousands separators (1,234,560)."""
_LONG_DIGITS_RE = re.compile(r"\d{21}")
_LONG_DIGITS_ANY_RE = re.compile(r"\d{21,}")

MAX_MEMORY_BYTES = 2**50
"""Largest per-GPU memory figure read, bytes (1 PiB; the largest card has 0.3 TB)."""
MAX_COUNT = 10**12
"""Largest count read (blocks, tokens, requests)."""
MAX_SECONDS = 1e7
"""Longest duration read, seconds (about 116 days)."""


class BadLogValue(ValueError):
    """A printed value no engine can have; the parser names the line and the field."""


def _gib(text: str) -> int:
    """'14.96' (GiB) -> bytes; refuses more than ``MAX_MEMORY_BYTES`` either side of zero."""
    value = round(float(text) * GiB)
    if abs(value) > MAX_MEMORY_BYTES:
        raise BadLogValue(f"is {text} GiB; per-GPU memory of at most {MAX_MEMORY_BYTES / GiB:,.0f} GiB (1 PiB) is read")
    return value


def _int(text: str) -> int:
    """'1,234,560' -> 1234560; refuses more than ``MAX_COUNT``."""
    value = int(text.replace(",", ""))
    if value > MAX_COUNT:
        raise BadLogValue(f"is {text}; counts of at most {MAX_COUNT:.0e} are read")
    return value


def _seconds(text: str) -> float:
    """A duration in seconds; refuses more than ``MAX_SECONDS``."""
    value = float(text)
    if value > MAX_SECONDS:
        raise BadLogValue(f"is {text} s; durations of at most {MAX_SECONDS:.0e} s (about 116 days) are read")
    return value


def _fraction(text: str) -> float:
    """gpu_memory_utilization: a fraction in (0, 1]."""
    value = float(text)
    if not 0 < value <= 1:
        raise BadLogValue(f"is {text}; a fraction in (0, 1] is read (vLLM refuses any other)")
    return value


def _ratio(text: str) -> float:
    """'Maximum concurrency ...: 12.34x': requests at once, at most ``MAX_COUNT``."""
    value = float(text)
    if value > MAX_COUNT:
        raise BadLogValue(f"is {text}x; a concurrency of at most {MAX_COUNT:.0e} is read")
    return value


class _Rule(NamedTuple):
    """One phrasing: a regex, and per capture group (field, converter); scope: worker or engine.

    ``key`` is a lower-case piece of text every match contains: a line without it is not searched
    (``key in line.lower()`` is one fast scan; 50 case-insensitive searches of a 10 MB log that
    match nothing took 40 s).
    """

    pattern: re.Pattern[str]
    fields: tuple[tuple[str, Callable[[str], object]], ...]
    scope: Literal["worker", "engine"]
    key: str


def _literal_key(regex: str) -> str:
    """The longest run of plain text that every match of ``regex`` contains, lower-cased.

    Lookbehinds, optional parts ('(?: memory)?', 's?'), alternations, escapes, classes and
    quantifiers split the pattern; 'Loading model weights took (NUM) ?GB' gives
    'loading model weights took '.
    """
    for pattern in (
        r"\(\?<[!=][^()]*\)",
        r"\((?:\?:)?[^()]*\)\?",
        r"\((?:\?:)?[^()]*\|[^()]*\)",
        r"\\.",
        r"\[[^\]]*\]",
        r"\{\d+(?:,\d*)?\}",
        r".\?",
        r"[()?*+|^$]",
    ):
        regex = re.sub(pattern, "\0", regex)
    return max(regex.split("\0"), key=len).lower()


def _rule(
    regex: str, scope: Literal["worker", "engine"], *fields: tuple[str, Callable], key: str | None = None
) -> _Rule:
    return _Rule(re.compile(regex, re.IGNORECASE), tuple(fields), scope, key or _literal_key(regex))


_RULES: tuple[_Rule, ...] = (
    # --- weights -------------------------------------------------------------------------------
    _rule(rf"Loading model weights took {_NUM} ?GB", "worker", ("model_weights_bytes", _gib)),
    _rule(
        rf"Model loading took {_NUM} ?GiB(?: memory)?(?: and {_NUM} ?s)?",
        "worker",
        ("model_weights_bytes", _gib),
        ("model_load_seconds", _seconds),
    ),
    _rule(rf"model weights take\s{{0,64}}{_NUM} ?GiB", "worker", ("model_weights_bytes", _gib)),
    _rule(rf"weights memory:\s{{0,64}}{_NUM} ?GiB", "worker", ("model_weights_bytes", _gib)),
    _rule(rf"{_NUM} ?GiB for weight\b", "worker", ("model_weights_bytes", _gib)),
    _rule(rf"Loading weights took {_NUM} ?s", "worker", ("weights_load_seconds", _seconds)),
    # --- profiling: totals ---------------------------------------------------------------------
    _rule(
        rf"can use total_gpu_memory \({_NUM} ?GiB\) x gpu_memory_utilization \({_NUM}\)"
        rf" = {_NUM} ?GiB",
        "worker",
        ("total_gpu_memory_bytes", _gib),
        ("gpu_memory_utilization", _fraction),
        ("requested_memory_bytes", _gib),
    ),
    _rule(rf"total_gpu_memory\s{{0,64}}=?\s{{0,64}}{_NUM} ?GiB", "worker", ("total_gpu_memory_bytes", _gib)),
    _rule(rf"gpu_memory_utilization\s{{0,64}}=?\s{{0,64}}{_NUM}\b", "worker", ("gpu_memory_utilization", _fraction)),
    _rule(rf"the current vLLM instance can use\s{{1,64}}{_NUM} ?GiB", "worker", ("requested_memory_bytes", _gib)),
    _rule(rf"requested memory:\s{{0,64}}{_NUM} ?GiB", "worker", ("requested_memory_bytes", _gib)),
    _rule(
        rf"Free memory on device \({_NUM}/{_NUM} ?GiB\)",
        "worker",
        ("", str),
        ("total_gpu_memory_bytes", _gib),
    ),
    _rule(
        rf"Desired GPU memory utilization is \({_NUM}, {_NUM} ?GiB\)",
        "worker",
        ("gpu_memory_utilization", _fraction),
        ("requested_memory_bytes", _gib),
    ),
    _rule(rf"Memory profiling takes {_NUM} ?s", "worker", ("memory_profiling_seconds", _seconds)),
    _rule(rf"(?<![\w])duration\s{{0,64}}=?\s{{0,64}}{_NUM} ?seconds", "worker", ("memory_profiling_seconds", _seconds)),
    _rule(r"Memory profiling results:", "worker"),
    # --- profiling: parts ----------------------------------------------------------------------
    _rule(
        rf"non_torch_memory(?: takes)?\s{{0,64}}=?\s{{0,64}}{_SNUM} ?GiB", "worker", ("non_torch_memory_bytes", _gib)
    ),
    _rule(rf"non-torch forward increase memory:\s{{0,64}}{_SNUM} ?GiB", "worker", ("non_torch_memory_bytes", _gib)),
    _rule(rf"{_SNUM} ?GiB for non-torch memory", "worker", ("non_torch_memory_bytes", _gib)),
    _rule(
        rf"PyTorch activation peak memory(?: takes)?\s{{0,64}}{_NUM} ?GiB", "worker", ("activation_peak_bytes", _gib)
    ),
    _rule(rf"torch peak memory increase:\s{{0,64}}{_NUM} ?GiB", "worker", ("activation_peak_bytes", _gib)),
    _rule(rf"{_NUM} ?GiB for peak activation", "worker", ("activation_peak_bytes", _gib)),
    _rule(rf"peak_torch_memory\s{{0,64}}=\s{{0,64}}{_NUM} ?GiB", "worker", ("peak_torch_memory_bytes", _gib)),
    _rule(rf"Total non KV cache memory:\s{{0,64}}{_NUM} ?GiB", "worker", ("non_kv_cache_memory_bytes", _gib)),
    _rule(rf"{_NUM} ?GiB for consumed memory", "worker", ("consumed_memory_bytes", _gib)),
    # --- KV budget -----------------------------------------------------------------------------
    _rule(rf"Available KV cache memory:\s{{0,64}}{_SNUM} ?GiB", "worker", ("kv_cache_memory_bytes", _gib)),
    _rule(rf"the rest of the memory reserved for KV Cache is {_SNUM} ?GiB", "worker", ("kv_cache_memory_bytes", _gib)),
    _rule(rf"kv_cache_size\s{{0,64}}=\s{{0,64}}{_SNUM} ?GiB", "worker", ("kv_cache_memory_bytes", _gib)),
    _rule(rf"available_kv_cache_memory\s{{0,64}}=?\s{{0,64}}{_SNUM} ?GiB", "worker", ("kv_cache_memory_bytes", _gib)),
    _rule(rf"Current kv cache memory in use is {_NUM} ?GiB", "worker", ("kv_cache_memory_bytes", _gib)),
    # --- CUDA graphs ---------------------------------------------------------------------------
    _rule(
        rf"Graph capturing finished in {_NUM} ?secs?(?:, took {_SNUM} ?GiB)?",
        "worker",
        ("graph_capture_seconds", _seconds),
        ("cuda_graph_bytes", _gib),
    ),
    _rule(
        rf"CUDA graph pool memory:\s{{0,64}}{_SNUM} ?GiB \(actual\)(?:, {_NUM} ?GiB \(estimated\))?",
        "worker",
        ("cuda_graph_bytes", _gib),
        ("cuda_graph_estimate_bytes", _gib),
    ),
    _rule(rf"Estimated CUDA graph memory:\s{{0,64}}{_NUM} ?GiB", "worker", ("cuda_graph_estimate_bytes", _gib)),
    _rule(rf"{_NUM} ?GiB for CUDAGraph memory", "worker", ("cuda_graph_estimate_bytes", _gib)),
    # --- engine-wide capacity ------------------------------------------------------------------
    _rule(
        rf"(?<![A-Za-z])#?\s{{0,64}}(?:GPU|CUDA|NPU|XPU|HPU) blocks:\s{{0,64}}{_INT}",
        "engine",
        ("num_gpu_blocks", _int),
    ),
    _rule(rf"GPU KV cache size:\s{{0,64}}{_INT} tokens", "engine", ("kv_cache_tokens", _int)),
    _rule(
        rf"Maximum concurrency for {_INT} tokens per request:\s{{0,64}}{_NUM}x",
        "engine",
        ("max_concurrency_tokens_per_request", _int),
        ("max_concurrency", _ratio),
    ),
    _rule(
        rf"max seq len \({_INT}\) is larger than the maximum number of tokens that can be "
        rf"stored in KV cache \({_INT}\)",
        "engine",
        ("max_model_len", _int),
        ("kv_cache_tokens", _int),
    ),
    _rule(rf"Using max model len {_INT}", "engine", ("max_model_len", _int)),
    _rule(rf"max_num_batched_tokens={_INT}", "engine", ("max_num_batched_tokens", _int)),
    _rule(
        rf"(?:Setting attention block size to|Block size is set to) {_INT}",
        "engine",
        ("block_size", _int),
        key="block size",
    ),
    _rule(r"vLLM API server version (\S{1,64})", "engine", ("vllm_version", str)),
    _rule(
        rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} ?s",
        "engine",
        ("init_engine_seconds", _seconds),
    ),
    _rule(
        rf"torch\.compile (?:takes|and initial profiling/warmup run together took)"
        rf" {_NUM} ?s in total",
        "engine",
        ("torch_compile_seconds", _seconds),
    ),
)


class _Keyed:
    """A regex searched only in lines that contain one of its lower-case ``keys`` (see ``_Rule.key``)."""

    __slots__ = ("keys", "pattern")

    def __init__(self, pattern: re.Pattern[str], keys: tuple[str, ...]):
        self.pattern, self.keys = pattern, keys

    def search(self, line: str, low: str | None = None) -> re.Match[str] | None:
        """``pattern.search(line)`` when ``low`` (``line.lower()``, computed when not given) holds a key."""
        low = line.lower() if low is None else low
        for key in self.keys:
            if key in low:
                return self.pattern.search(line)
        return None


def _keyed(regex: str, *keys: str, flags: int = 0) -> _Keyed:
    return _Keyed(re.compile(regex, flags), keys)


_RULE_KEYS = tuple((rule.key, rule) for rule in _RULES)
"""(key, rule) pairs, so the per-line gate reads no attribute."""


def _anchor_words(keys: tuple[str, ...]) -> tuple[str, ...]:
    """A few words such that every key contains one (greedy set cover over the keys' words).

    A line with none of them cannot match any rule, so the 44 key checks are skipped for it
    (12 words: 'memory', 'model', 'cache', ...).
    """
    words = {w for key in keys for w in re.findall(r"[a-z]{4,}", key)}
    left, anchors = set(keys), []
    while left:
        best = max(sorted(words), key=lambda w: (sum(w in key for key in left), len(w)))
        covered = {key for key in left if best in key}
        if not covered:  # a key without a word of 4 letters: keep it as its own anchor
            best = min(left)
            covered = {best}
        anchors.append(best)
        left -= covered
    return tuple(anchors)


_ANCHORS = _anchor_words(tuple(key for key, _ in _RULE_KEYS))

_STARTUP_ERROR_RE = _keyed(
    r"No available memory for the cache blocks|To serve at least one request|"
    r"larger than the maximum number of tokens that can be stored in KV cache",
    "no available memory for the cache blocks",
    "to serve at least one request",
    "larger than the maximum number of tokens",
    flags=re.IGNORECASE,
)
_ENGINE_INIT_RE = _keyed(
    r"Initializing an? (?:(V[01]) )?LLM engine \(v?([^)\s]{1,64})\) with config:(.*)", "llm engine", flags=re.IGNORECASE
)
_NON_DEFAULT_ARGS_RE = _keyed(r"non-default args:\s{0,64}(\{.*)$", "non-default args:")
"""The dict runs to the last '}' of the line (cut in ``_config_from_dict_text``; '.*\\}' would
rescan the rest of the line from every 'non-default args:' in it)."""
_NAMESPACE_RE = _keyed(r"\bargs: Namespace\((.*)$", "args: namespace(")
"""Old api_server's 'args: Namespace(...)' dump; a truncated paste may lack the final ')'."""
_COMMAND_RE = _keyed(
    r"^(?:\$\s{0,8})?(?:[A-Z_][A-Z0-9_]{0,63}=\S{0,4096}\s{1,8}){0,32}(?:python3?\s{1,8}-m\s{1,8})?"
    r"(?:vllm serve|vllm\.entrypoints\.\S{1,200})\s{1,8}(.*)",
    "vllm serve",
    "vllm.entrypoints.",
)
"""A pasted launch command: optional '$ ', env assignments, then `vllm serve` or the module."""
_MAX_ARGS_CHARS = 65536
"""Longest 'non-default args: {...}' dict handed to ``ast.literal_eval``, characters."""
_MAX_CONFIG_DIGITS = 12
"""Longest integer read for an engine setting (max_model_len, tensor_parallel_size, ...)."""
_RELEVANT_RE = _keyed(
    r"GiB|\bGB\b|KV cache|blocks?:|memory|concurrency|max_model_len|max seq len",
    "gib",
    "gb",
    "kv cache",
    "block",
    "memory",
    "concurrency",
    "max_model_len",
    "max seq len",
    flags=re.IGNORECASE,
)
_RUNTIME_STATS_RE = _keyed(
    r"Avg prompt throughput|GPU KV cache usage|Prefix cache hit rate",
    "avg prompt throughput",
    "gpu kv cache usage",
    "prefix cache hit rate",
)

# Engine-config keys read from the config line, the non-default-args dict, a Namespace(...) or a
# command line, mapped to report fields.
_CONFIG_KEYS: dict[str, str] = {
    "model": "model",
    "model_tag": "model",
    "dtype": "dtype",
    "max_seq_len": "max_model_len",
    "max_model_len": "max_model_len",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "enable_expert_parallel": "enable_expert_parallel",
    "quantization": "quantization",
    "enforce_eager": "enforce_eager",
    "kv_cache_dtype": "kv_cache_dtype",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "block_size": "block_size",
    "max_num_batched_tokens": "max_num_batched_tokens",
}
_CLI_ALIASES = {
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "dp": "data_parallel_size",
    "q": "quantization",
}
#: Boolean switches: a bare flag on a command line is True.
_FLAG_FIELDS = {"enforce_eager", "enable_expert_parallel"}
_INT_FIELDS = {
    "max_model_len",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "block_size",
    "max_num_batched_tokens",
}


def _config_value(field: str, raw: object) -> object:
    """Normalise one config value; None for values that mean 'not set'."""
    if raw is None:
        return None
    text = str(raw).strip().strip("'\"")
    if text in ("", "None", "none", "null"):
        return None
    if field in _FLAG_FIELDS:
        return text.lower() in ("true", "1", "")
    if field in _INT_FIELDS:
        if not text.isdigit():
            return None
        if len(text) > _MAX_CONFIG_DIGITS or int(text) < 1:
            shown = text if len(text) <= 20 else f"{text[:20]}... ({len(text):,} digits)"
            raise BadLogValue(f"is {shown}; a whole number from 1 to {10**_MAX_CONFIG_DIGITS - 1:,} is read")
        return int(text)
    if field == "gpu_memory_utilization":
        try:
            float(text[:40])
        except ValueError:
            return None
        return _fraction(text[:40])
    if field == "dtype":
        dtype = text.removeprefix("torch.")
        return None if dtype == "auto" else dtype  # 'auto' is resolved later, in the config line
    return text


_CONFIG_ITEM_RE = re.compile(
    "(" + "|".join(sorted(_CONFIG_KEYS, key=len, reverse=True)) + r")=('[^']{0,1000}'|[^,\s)]{1,1000})"
)
"""'key=value' of a known key; one pass finds them all (a lookbehind first would defeat re's fast scan)."""


def _config_from_engine_line(rest: str) -> dict[str, object]:
    """Pick the known keys out of "model='m', dtype=torch.bfloat16, max_seq_len=4096, ..."; the first of each wins."""
    found: dict[str, object] = {}
    for match in _CONFIG_ITEM_RE.finditer(rest):
        key, start = match.group(1), match.start()
        if start and (rest[start - 1].isalnum() or rest[start - 1] in "_."):
            continue  # 'hf_model=' or 'a.model=' is another setting
        field = _CONFIG_KEYS[key]
        if found.get(field) is None:
            found[field] = _with_key(key, field, match.group(2))
    return found


def _with_key(key: str, field: str, raw: object) -> object:
    """``_config_value`` with the key named in a refusal: "max_model_len is 10000000000000000; ..."."""
    try:
        return _config_value(field, _scalar(raw))
    except BadLogValue as err:
        raise BadLogValue(f"{key} {err}") from None


def _config_from_dict_text(text: str) -> dict[str, object]:
    """Parse "{'model': 'x', 'max_model_len': 60000}"; falls back to per-key regex."""
    text = text[: text.rfind("}") + 1] or text
    mapping = _literal_dict(text)
    found: dict[str, object] = {}
    if mapping is not None:
        for key, value in mapping.items():
            if isinstance(key, str) and key in _CONFIG_KEYS:
                found[_CONFIG_KEYS[key]] = _with_key(key, _CONFIG_KEYS[key], value)
        return found
    for key, field in _CONFIG_KEYS.items():
        match = re.search(rf"'{key}':\s{{0,64}}('[^']{{0,1000}}'|[^,}}]{{1,1000}})", text)
        if match:
            found[field] = _with_key(key, field, match.group(1))
    return found


def _literal_dict(text: str) -> dict | None:
    """The dict a 'non-default args' line prints, or None when it is cut, too long or not a literal.

    ``ast.literal_eval`` raises more than ValueError/SyntaxError on odd input: TypeError for an
    unhashable key (``{[1]: 2}``), RecursionError or MemoryError for deep nesting.
    """
    if len(text) > _MAX_ARGS_CHARS:
        return None
    try:
        mapping = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, OverflowError):
        return None
    return mapping if isinstance(mapping, dict) else None


def _scalar(value: object) -> object:
    """A config value as text for ``_config_value``; containers and huge ints are not settings we read."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        try:
            return str(value)  # _config_value refuses more than _MAX_CONFIG_DIGITS digits with the number
        except ValueError:  # beyond Python's 4,300-digit limit for int -> str
            raise BadLogValue(
                f"is an integer of more than 4,300 digits; a whole number from 1 to "
                f"{10**_MAX_CONFIG_DIGITS - 1:,} is read"
            ) from None
    if isinstance(value, (float, str)):
        return value
    return None


def _config_from_command(args: str) -> dict[str, object]:
    """Parse a pasted 'vllm serve MODEL --flag value --switch' command line."""
    tokens = args.split()
    found: dict[str, object] = {}
    if tokens and not tokens[0].startswith("-"):
        found["model"] = tokens[0]
    for i, token in enumerate(tokens):
        if not token.startswith("-"):
            continue
        name, _, inline = token.lstrip("-").partition("=")
        name = _CLI_ALIASES.get(name, name.replace("-", "_"))
        if name == "model" and not inline and i + 1 < len(tokens):
            found["model"] = tokens[i + 1]
            continue
        field = _CONFIG_KEYS.get(name)
        if field is None:
            continue
        if field in _FLAG_FIELDS:
            found[field] = True if not inline else _config_value(field, inline)
            continue
        value = inline or (tokens[i + 1] if i + 1 < len(tokens) else None)
        found[field] = _with_key(name, field, value)
    return found


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

_EXPECTED_LINES = (
    "'Initializing a V1 LLM engine (v0.x.y) with config: model=...'",
    "'Model loading took X GiB' or 'Loading model weights took X GB'",
    "'Memory profiling results: ...' or 'model weights take X GiB; ...'",
    "'Available KV cache memory: X GiB'",
    "'# GPU blocks: N' or 'GPU KV cache size: N tokens'",
    "'Maximum concurrency for N tokens per request: Xx'",
)


def _last_start(lines: list[str], labels: list[str]) -> tuple[int, int]:
    """Index of the first line of the last engine start, and how many starts were seen.

    A second 'Initializing ... LLM engine' line from a process of the same name is a restart;
    data-parallel engines (EngineCore_DP0, EngineCore_DP1, ...) each print one and are not.
    The lines just before the restart that carry no memory facts (launch command, arguments,
    version) are taken with it.
    """
    restarts: list[int] = []
    seen: set[str] = set()
    for index, (line, label) in enumerate(zip(lines, labels)):
        if _ENGINE_INIT_RE.search(line):
            name = _label_name(label)
            if name in seen:
                restarts.append(index)
                seen = set()
            seen.add(name)
    if not restarts:
        return 0, 1
    begin = restarts[-1]
    while begin > 0:
        previous = lines[begin - 1]
        low = previous.lower()
        if _ENGINE_INIT_RE.search(previous) or any(r.key in low and r.pattern.search(previous) for r in _RULES):
            break
        begin -= 1
        if any(rx.search(previous) for rx in (_NON_DEFAULT_ARGS_RE, _NAMESPACE_RE, _COMMAND_RE)):
            break
    return begin, len(restarts) + 1


def _put(target: dict[str, object], field: str, value: object) -> None:
    """Keep the first value printed for a field (a later line never overwrites it)."""
    if field and value is not None and field not in target:
        target[field] = value


def _put_all(target: dict[str, object], found: dict[str, object]) -> None:
    """``_put`` every field of ``found``."""
    for field, value in found.items():
        _put(target, field, value)


class _Line(NamedTuple):
    """One cleaned log line as every line reader sees it."""

    text: str
    low: str
    label: str


class _Facts(NamedTuple):
    """What the lines read so far stated: engine-level fields, and memory fields per worker label."""

    engine: dict[str, object]
    workers: dict[str, dict[str, object]]


def _read_engine_init(line: _Line, facts: _Facts) -> bool:
    """'Initializing a V1 LLM engine (v0.x.y) with config: model=..., ...': engine, version, settings."""
    init = _ENGINE_INIT_RE.search(line.text, line.low)
    if not init:
        return False
    _put(facts.engine, "engine", init.group(1).upper() if init.group(1) else None)
    _put(facts.engine, "vllm_version", init.group(2))
    _put_all(facts.engine, _config_from_engine_line(init.group(3)))
    return True


def _config_from_namespace(rest: str) -> dict[str, object]:
    """Settings of an 'args: Namespace(...)' dump (its closing parenthesis may be cut)."""
    return _config_from_engine_line(rest.removesuffix(")"))


#: The argument dumps a server prints at start, and how each is read into settings.
_ARG_DUMPS: tuple[tuple[_Keyed, Callable[[str], dict[str, object]]], ...] = (
    (_NON_DEFAULT_ARGS_RE, _config_from_dict_text),
    (_NAMESPACE_RE, _config_from_namespace),
)


def _read_arg_dumps(line: _Line, facts: _Facts) -> bool:
    """'non-default args: {...}' and 'args: Namespace(...)': the engine settings they hold."""
    matched = False
    for regex, parser in _ARG_DUMPS:
        found = regex.search(line.text, line.low)
        if found:
            matched = True
            _put_all(facts.engine, parser(found.group(1)))
    return matched


def _read_launch_command(line: _Line, facts: _Facts) -> bool:
    """A pasted 'VLLM_USE_V1=1 vllm serve MODEL --flag value' line: the engine and its flags."""
    command = _COMMAND_RE.search(line.text, line.low)
    if not command or _ENGINE_INIT_RE.search(line.text, line.low):
        return False
    use_v1 = re.search(r"\bVLLM_USE_V1=([01])\b", line.text)
    if use_v1:
        _put(facts.engine, "engine", f"V{use_v1.group(1)}")
    _put_all(facts.engine, _config_from_command(command.group(1)))
    return True


def _read_memory_facts(line: _Line, facts: _Facts) -> bool:
    """The phrasings of ``_RULES`` (weights, KV budget, blocks, concurrency, ...), converted to base units."""
    low = line.low
    hits = [rule for key, rule in _RULE_KEYS if key in low] if any(a in low for a in _ANCHORS) else []
    if hits and _LONG_DIGITS_RE.search(line.text):
        _refuse_long_number(line.text, hits)
    matched = False
    for rule in hits:
        found = rule.pattern.search(line.text)
        if not found:
            continue
        matched = True
        target = facts.engine if rule.scope == "engine" else facts.workers.setdefault(line.label, {})
        for group, (field, convert) in enumerate(rule.fields, start=1):
            raw = found.group(group)
            if raw is None or not field:
                continue
            try:
                value = convert(raw)
            except BadLogValue as err:
                raise BadLogValue(f"{field} {err}") from None
            _put(facts.engine if field == "gpu_memory_utilization" else target, field, value)
    return matched


def _read_startup_error(line: _Line, facts: _Facts) -> bool:
    """The error vLLM raises when the KV cache cannot hold one request: kept as the line."""
    if not _STARTUP_ERROR_RE.search(line.text, line.low):
        return False
    _put(facts.engine, "startup_error", line.text[:_MAX_KEPT_LINE_CHARS])
    return True


#: One reader per kind of startup line, in the order they are tried on every line (the first value
#: printed for a field wins, so the order decides between an engine-config line and a later dump).
_LINE_READERS: tuple[Callable[[_Line, _Facts], bool], ...] = (
    _read_engine_init,
    _read_arg_dumps,
    _read_launch_command,
    _read_memory_facts,
    _read_startup_error,
)


def _read_line(line: _Line, facts: _Facts) -> bool:
    """File what one cleaned line states into ``facts``; True when any reader matched a phrasing."""
    matched = False
    for reader in _LINE_READERS:
        matched = reader(line, facts) or matched
    return matched


def _refuse_long_number(line: str, rules: list[_Rule]) -> None:
    """Refuse a line where a known phrasing carries a number of more than 20 digits.

    The rules read at most 20 digits (``_NUM``), so such a line would be misread or skipped. The
    run is replaced by '1' to ask whether a phrasing would match it; a long number elsewhere (a
    hash, a request id) is left alone.
    """
    probe = _LONG_DIGITS_ANY_RE.sub("1", line)
    for rule in rules:
        if rule.fields and rule.pattern.search(probe):
            digits = max(len(m) for m in _LONG_DIGITS_ANY_RE.findall(line))
            fields = ", ".join(f for f, _ in rule.fields if f)
            raise BadLogValue(
                f"{fields} is printed with a number of {digits:,} digits; numbers of at most 20 digits "
                "are read (vLLM prints about 4 decimals)"
            )


def _bad_value(number: int, line: str, err: BadLogValue) -> ConfigError:
    shown = line if len(line) <= 120 else line[:100] + f"... ({len(line):,} characters)"
    return ConfigError(
        f"line {number:,} of the log: {err} (line: {shown!r}).",
        hint="Pass the server's own output; a hand-edited or corrupted line cannot be read.",
    )


MAX_LOG_CHARS = MAX_LOG_BYTES
"""Longest log parsed, characters (the same figure as the file cap, ``MAX_LOG_BYTES``)."""
_MAX_KEPT_LINE_CHARS = 400
"""Longest line kept in a report (startup_error, unparsed_relevant_lines), characters."""


def _log_text(text: str | bytes) -> str:
    """The log as checked text: bytes decoded (``planner.verify.reading``), at most ``MAX_LOG_CHARS``."""
    text = decode_text(text, "the log") if isinstance(text, (bytes, bytearray)) else check_text(text, "the log")
    if len(text) > MAX_LOG_CHARS:
        raise ConfigError(
            f"the log is {len(text):,} characters; at most {MAX_LOG_CHARS:,} are read (a startup log is a few MiB).",
            hint="Pass the part of the log from the server's start.",
        )
    return text


class _Reading(NamedTuple):
    """The outcome of reading a log's lines from its last start."""

    facts: _Facts
    unparsed: list[str]
    n_unparsed: int
    matched_any: bool


def _read_lines(lines: list[str], labels: list[str], begin: int) -> _Reading:
    """Every line from ``begin`` through the readers; relevant lines no reader matched are kept (bounded)."""
    facts = _Facts({}, {})
    unparsed: list[str] = []
    n_unparsed = 0
    matched_any = False
    for number, (text, label) in enumerate(zip(lines[begin:], labels[begin:]), start=begin + 1):
        if not text:
            continue
        try:
            matched = _read_line(_Line(text, text.lower(), label), facts)
        except BadLogValue as err:
            raise _bad_value(number, text, err) from None
        if matched:
            matched_any = True
        elif _RELEVANT_RE.search(text) and not _RUNTIME_STATS_RE.search(text):
            n_unparsed += 1
            if len(unparsed) < _MAX_UNPARSED_LINES:
                unparsed.append(text[:_MAX_KEPT_LINE_CHARS])
    return _Reading(facts, unparsed, n_unparsed, matched_any)


def _ray_folded(raw_lines: list[str]) -> int:
    """Worker lines Ray folded into '[repeated Nx across cluster]' markers."""
    return sum(int(m.group(1)) for line in raw_lines if "[repeated " in line for m in _RAY_REPEAT_RE.finditer(line))


def _report_warnings(
    engine: dict[str, object], summary: dict[str, object], reading: _Reading, ray_folded: int
) -> list[str]:
    """What the reader of the report should know about how it was read (after the starts and worker spreads)."""
    warnings: list[str] = []
    if ray_folded:
        warnings.append(
            f"Ray folded {ray_folded} repeated worker lines ('[repeated Nx across cluster]'); "
            "per_worker lists only the workers whose lines were printed"
        )
    cuda_graph = summary.get("cuda_graph_bytes")
    if isinstance(cuda_graph, int) and cuda_graph < 0:
        warnings.append(
            f"CUDA-graph memory is printed as negative ({cuda_graph / GiB:.2f} GiB): allocator "
            "noise, treat it as about zero"
        )
    if engine.get("startup_error"):
        warnings.append("the engine refused to start for lack of KV cache memory")
    if reading.n_unparsed > _MAX_UNPARSED_LINES:
        warnings.append(
            f"{reading.n_unparsed} relevant lines matched no known phrasing; the first {_MAX_UNPARSED_LINES} are kept"
        )
    return warnings


def parse_vllm_log(text: str | bytes) -> VllmStartupReport:
    """Parse vLLM server output (V0 or V1, any prefix) into a :class:`VllmStartupReport`.

    ``text`` is the server's stdout/stderr as captured (``docker logs``, a journal, a pasted issue),
    as text or as the file's bytes (decoded by ``planner.verify.reading``: UTF-8, or UTF-16 with a
    byte-order mark). At most ``MAX_LOG_CHARS`` characters are read. Raises
    :class:`planner.errors.ConfigError` when no known startup line is present, for a binary or
    UTF-16 text read as UTF-8, and for a printed value no engine can have (a number of more than
    20 digits, per-GPU memory above 1 PiB, a utilization outside (0, 1]), naming the line.
    """
    raw_lines = _log_text(text).splitlines()
    lines = [_clean(line) for line in raw_lines]
    labels = [_process_label(line) for line in lines]
    begin, n_starts = _last_start(lines, labels)
    warnings: list[str] = []
    if n_starts > 1:
        warnings.append(
            f"the log holds {n_starts} starts of the same engine; only the last one (from line {begin + 1}) is read"
        )
    reading = _read_lines(lines, labels, begin)
    if not reading.matched_any:
        raise ConfigError(
            f"no vLLM startup lines found in the log ({len(raw_lines)} lines read); "
            f"expected lines such as {', '.join(_EXPECTED_LINES)}.",
            hint="Pass the server's own output from its start, e.g. `docker logs <container> "
            "2>&1` or the terminal where `vllm serve` ran.",
        )
    engine, workers = reading.facts
    per_worker = tuple(WorkerMemory(worker=label, **values) for label, values in workers.items() if values)
    summary = _summarise(per_worker, warnings)
    per_worker_min = WorkerMemory(worker="min", **_field_minimum(per_worker)) if len(per_worker) > 1 else None
    if engine.get("max_model_len") is None and engine.get("max_concurrency_tokens_per_request"):
        engine["max_model_len"] = engine["max_concurrency_tokens_per_request"]
    warnings += _report_warnings(engine, summary, reading, _ray_folded(raw_lines[begin:]))
    return VllmStartupReport(
        **engine,
        **summary,
        per_worker=per_worker,
        per_worker_min=per_worker_min,
        unparsed_relevant_lines=tuple(reading.unparsed),
        warnings=tuple(warnings),
    )


_MAX_OVER_WORKERS = {
    "weights_load_seconds",
    "model_load_seconds",
    "memory_profiling_seconds",
    "graph_capture_seconds",
}


def _field_minimum(workers: tuple[WorkerMemory, ...]) -> dict[str, object]:
    """Field-wise minimum over workers (fields no worker printed stay out)."""
    out: dict[str, object] = {}
    for name in _WORKER_NUMBERS:
        values = [getattr(w, name) for w in workers if getattr(w, name) is not None]
        if values:
            out[name] = min(values)
    return out


def _summarise(workers: tuple[WorkerMemory, ...], warnings: list[str]) -> dict[str, object]:
    """Report-level values: minimum over workers for memory, maximum for durations.

    Warns when workers disagree by more than 1 %, e.g. pipeline stages with different weights.
    """
    out: dict[str, object] = {}
    for name in _WORKER_NUMBERS:
        values = [getattr(w, name) for w in workers if getattr(w, name) is not None]
        if not values:
            continue
        if name in _MAX_OVER_WORKERS:
            out[name] = max(values)
            continue
        low, high = min(values), max(values)
        out[name] = low
        if high > 0 and (high - low) > _SPREAD_TOLERANCE * abs(high):
            warnings.append(
                f"workers disagree on {name}: {low / GiB:.2f} to {high / GiB:.2f} GiB; the "
                "summary holds the minimum (vLLM sizes the KV cache from the tightest worker)"
            )
    return out
