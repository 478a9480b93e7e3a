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
        description="Memory outside the torch allocator (CUDA context, NCCL, cuBLAS), bytes.",
    )
    activation_peak_bytes: int | None = Field(
        default=None,
        description="Peak torch memory increase during the profiling forward pass "
        "(activations), bytes.",
    )
    peak_torch_memory_bytes: int | None = Field(
        default=None,
        description="Absolute torch peak during profiling, weights included "
        "(V0 0.6.4 'peak_torch_memory='), bytes.",
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
        default=None, description="Memory left for the KV cache on this worker, bytes."
    )
    cuda_graph_bytes: int | None = Field(
        default=None,
        description="Memory the captured CUDA graphs took, measured; may be slightly "
        "negative from allocator noise, bytes.",
    )
    cuda_graph_estimate_bytes: int | None = Field(
        default=None,
        description="CUDA-graph memory vLLM estimated before capture and subtracted from "
        "the KV budget, bytes.",
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
        description="Engine generation named in 'Initializing a V1 LLM engine'; None when "
        "the log does not say.",
    )
    vllm_version: str | None = Field(
        default=None, description="vLLM version as printed, without a leading 'v'."
    )
    model: str | None = Field(default=None, description="Model name or path served.")
    dtype: str | None = Field(
        default=None, description="Model compute dtype, e.g. 'bfloat16' (torch. prefix dropped)."
    )
    quantization: str | None = Field(
        default=None, description="Quantization method, e.g. 'fp8'; None when none or not printed."
    )
    kv_cache_dtype: str | None = Field(
        default=None, description="KV cache dtype as printed; 'auto' means the model dtype."
    )
    tensor_parallel_size: int | None = Field(
        default=None, description="Tensor-parallel degree (GPUs per pipeline stage), count."
    )
    pipeline_parallel_size: int | None = Field(
        default=None, description="Pipeline-parallel degree (stages), count."
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
        description="Torch peak increase in the profiling run (activations), bytes "
        "(minimum over workers).",
    )
    peak_torch_memory_bytes: int | None = Field(
        default=None,
        description="Absolute torch peak incl. weights (V0 0.6.4 format only), bytes "
        "(minimum over workers).",
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
        description="Measured CUDA-graph memory, bytes (minimum over workers); can be "
        "slightly negative.",
    )
    cuda_graph_estimate_bytes: int | None = Field(
        default=None,
        description="CUDA-graph memory estimated before capture, bytes (minimum over workers).",
    )
    num_gpu_blocks: int | None = Field(
        default=None, description="KV cache blocks per GPU ('# GPU blocks'), count."
    )
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
        description="The N in 'Maximum concurrency for N tokens per request' "
        "(max_model_len), tokens.",
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
    warnings: tuple[str, ...] = Field(
        default=(), description="Things to know before trusting the numbers."
    )


# ---------------------------------------------------------------------------------------------
# Line cleaning and process prefixes
# ---------------------------------------------------------------------------------------------

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|\[\d{1,3}(?:;\d{1,3})*m")
"""Escape sequences, and the bare "[1;36m" left when a paste dropped the ESC byte."""
_RAY_REPEAT_RE = re.compile(r"\s*\[repeated (\d+)x across cluster\]")
_LEVEL_RE = re.compile(r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b")
_PROCESS_RE = re.compile(r"\(([^()]*?\bpid=\d+[^()]*)\)")


def _clean(line: str) -> str:
    """Drop colour codes, the Ray de-duplication suffix and surrounding whitespace/borders."""
    line = _ANSI_RE.sub("", line)
    line = _RAY_REPEAT_RE.sub("", line)
    return line.strip().rstrip("│|").rstrip()


def _process_label(line: str) -> str:
    """The innermost "(name pid=N)" prefix before the log level, or 'main' when there is none.

    Nested prefixes occur with data parallelism: "(EngineCore_1 pid=7) (VllmWorker rank=1 pid=8)".
    """
    level = _LEVEL_RE.search(line)
    head = line[: level.start()] if level else line
    labels = _PROCESS_RE.findall(head)
    return " ".join(labels[-1].split()) if labels else MAIN_PROCESS


def _label_name(label: str) -> str:
    """The process name without its pid, to recognise a restart of the same process."""
    return re.sub(r"\s*pid=\d+.*", "", label)


# ---------------------------------------------------------------------------------------------
# The pattern table
# ---------------------------------------------------------------------------------------------

_NUM = r"(-?\d+(?:\.\d+)?)"
_INT = r"(\d[\d,]*)"


def _gib(text: str) -> int:
    return round(float(text) * GiB)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _float(text: str) -> float:
    return float(text)


class _Rule(NamedTuple):
    """One phrasing: a regex, and per capture group (field, converter); scope: worker or engine."""

    pattern: re.Pattern[str]
    fields: tuple[tuple[str, Callable[[str], object]], ...]
    scope: Literal["worker", "engine"]


def _rule(regex: str, scope: Literal["worker", "engine"], *fields: tuple[str, Callable]) -> _Rule:
    return _Rule(re.compile(regex, re.IGNORECASE), tuple(fields), scope)


_RULES: tuple[_Rule, ...] = (
    # --- weights -------------------------------------------------------------------------------
    _rule(rf"Loading model weights took {_NUM} ?GB", "worker", ("model_weights_bytes", _gib)),
    _rule(
        rf"Model loading took {_NUM} ?GiB(?: memory)?(?: and {_NUM} ?s)?",
        "worker",
        ("model_weights_bytes", _gib),
        ("model_load_seconds", _float),
    ),
    _rule(rf"model weights take\s*{_NUM} ?GiB", "worker", ("model_weights_bytes", _gib)),
    _rule(rf"weights memory:\s*{_NUM} ?GiB", "worker", ("model_weights_bytes", _gib)),
    _rule(rf"{_NUM} ?GiB for weight\b", "worker", ("model_weights_bytes", _gib)),
    _rule(rf"Loading weights took {_NUM} ?s", "worker", ("weights_load_seconds", _float)),
    # --- profiling: totals ---------------------------------------------------------------------
    _rule(
        rf"can use total_gpu_memory \({_NUM} ?GiB\) x gpu_memory_utilization \({_NUM}\)"
        rf" = {_NUM} ?GiB",
        "worker",
        ("total_gpu_memory_bytes", _gib),
        ("gpu_memory_utilization", _float),
        ("requested_memory_bytes", _gib),
    ),
    _rule(rf"total_gpu_memory\s*=?\s*{_NUM} ?GiB", "worker", ("total_gpu_memory_bytes", _gib)),
    _rule(rf"gpu_memory_utilization\s*=?\s*{_NUM}\b", "worker", ("gpu_memory_utilization", _float)),
    _rule(rf"the current vLLM instance can use\s+{_NUM} ?GiB", "worker",
          ("requested_memory_bytes", _gib)),
    _rule(rf"requested memory:\s*{_NUM} ?GiB", "worker", ("requested_memory_bytes", _gib)),
    _rule(
        rf"Free memory on device \({_NUM}/{_NUM} ?GiB\)",
        "worker",
        ("", _float),
        ("total_gpu_memory_bytes", _gib),
    ),
    _rule(
        rf"Desired GPU memory utilization is \({_NUM}, {_NUM} ?GiB\)",
        "worker",
        ("gpu_memory_utilization", _float),
        ("requested_memory_bytes", _gib),
    ),
    _rule(rf"Memory profiling takes {_NUM} ?s", "worker", ("memory_profiling_seconds", _float)),
    _rule(rf"(?<![\w])duration\s*=?\s*{_NUM} ?seconds", "worker",
          ("memory_profiling_seconds", _float)),
    _rule(r"Memory profiling results:", "worker"),
    # --- profiling: parts ----------------------------------------------------------------------
    _rule(rf"non_torch_memory(?: takes)?\s*=?\s*{_NUM} ?GiB", "worker",
          ("non_torch_memory_bytes", _gib)),
    _rule(rf"non-torch forward increase memory:\s*{_NUM} ?GiB", "worker",
          ("non_torch_memory_bytes", _gib)),
    _rule(rf"{_NUM} ?GiB for non-torch memory", "worker", ("non_torch_memory_bytes", _gib)),
    _rule(rf"PyTorch activation peak memory(?: takes)?\s*{_NUM} ?GiB", "worker",
          ("activation_peak_bytes", _gib)),
    _rule(rf"torch peak memory increase:\s*{_NUM} ?GiB", "worker", ("activation_peak_bytes", _gib)),
    _rule(rf"{_NUM} ?GiB for peak activation", "worker", ("activation_peak_bytes", _gib)),
    _rule(rf"peak_torch_memory\s*=\s*{_NUM} ?GiB", "worker", ("peak_torch_memory_bytes", _gib)),
    _rule(rf"Total non KV cache memory:\s*{_NUM} ?GiB", "worker",
          ("non_kv_cache_memory_bytes", _gib)),
    _rule(rf"{_NUM} ?GiB for consumed memory", "worker", ("consumed_memory_bytes", _gib)),
    # --- KV budget -----------------------------------------------------------------------------
    _rule(rf"Available KV cache memory:\s*{_NUM} ?GiB", "worker", ("kv_cache_memory_bytes", _gib)),
    _rule(rf"the rest of the memory reserved for KV Cache is {_NUM} ?GiB", "worker",
          ("kv_cache_memory_bytes", _gib)),
    _rule(rf"kv_cache_size\s*=\s*{_NUM} ?GiB", "worker", ("kv_cache_memory_bytes", _gib)),
    _rule(rf"available_kv_cache_memory\s*=?\s*{_NUM} ?GiB", "worker",
          ("kv_cache_memory_bytes", _gib)),
    _rule(rf"Current kv cache memory in use is {_NUM} ?GiB", "worker",
          ("kv_cache_memory_bytes", _gib)),
    # --- CUDA graphs ---------------------------------------------------------------------------
    _rule(
        rf"Graph capturing finished in {_NUM} ?secs?(?:, took {_NUM} ?GiB)?",
        "worker",
        ("graph_capture_seconds", _float),
        ("cuda_graph_bytes", _gib),
    ),
    _rule(
        rf"CUDA graph pool memory:\s*{_NUM} ?GiB \(actual\)(?:, {_NUM} ?GiB \(estimated\))?",
        "worker",
        ("cuda_graph_bytes", _gib),
        ("cuda_graph_estimate_bytes", _gib),
    ),
    _rule(rf"Estimated CUDA graph memory:\s*{_NUM} ?GiB", "worker",
          ("cuda_graph_estimate_bytes", _gib)),
    _rule(rf"{_NUM} ?GiB for CUDAGraph memory", "worker", ("cuda_graph_estimate_bytes", _gib)),
    # --- engine-wide capacity ------------------------------------------------------------------
    _rule(rf"(?<![A-Za-z])#?\s*(?:GPU|CUDA|NPU|XPU|HPU) blocks:\s*{_INT}", "engine",
          ("num_gpu_blocks", _int)),
    _rule(rf"GPU KV cache size:\s*{_INT} tokens", "engine", ("kv_cache_tokens", _int)),
    _rule(
        rf"Maximum concurrency for {_INT} tokens per request:\s*{_NUM}x",
        "engine",
        ("max_concurrency_tokens_per_request", _int),
        ("max_concurrency", _float),
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
    _rule(rf"(?:Setting attention block size to|Block size is set to) {_INT}", "engine",
          ("block_size", _int)),
    _rule(rf"vLLM API server version (\S+)", "engine", ("vllm_version", str)),
    _rule(rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} ?s", "engine",
          ("init_engine_seconds", _float)),
    _rule(
        rf"torch\.compile (?:takes|and initial profiling/warmup run together took)"
        rf" {_NUM} ?s in total",
        "engine",
        ("torch_compile_seconds", _float),
    ),
)

_STARTUP_ERROR_RE = re.compile(
    r"No available memory for the cache blocks|To serve at least one request|"
    r"larger than the maximum number of tokens that can be stored in KV cache",
    re.IGNORECASE,
)
_ENGINE_INIT_RE = re.compile(
    r"Initializing an? (?:(V[01]) )?LLM engine \(v?([^)\s]+)\) with config:(.*)", re.IGNORECASE
)
_NON_DEFAULT_ARGS_RE = re.compile(r"non-default args:\s*(\{.*\})")
_NAMESPACE_RE = re.compile(r"\bargs: Namespace\((.*?)\)?$")
"""Old api_server's 'args: Namespace(...)' dump; a truncated paste may lack the final ')'."""
_COMMAND_RE = re.compile(
    r"^(?:\$\s*)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:python3?\s+-m\s+)?"
    r"(?:vllm serve|vllm\.entrypoints\.\S+)\s+(.*)"
)
"""A pasted launch command: optional '$ ', env assignments, then `vllm serve` or the module."""
_RELEVANT_RE = re.compile(
    r"GiB|\bGB\b|KV cache|blocks?:|memory|concurrency|max_model_len|max seq len", re.IGNORECASE
)
_RUNTIME_STATS_RE = re.compile(r"Avg prompt throughput|GPU KV cache usage|Prefix cache hit rate")

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
    "quantization": "quantization",
    "enforce_eager": "enforce_eager",
    "kv_cache_dtype": "kv_cache_dtype",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "block_size": "block_size",
    "max_num_batched_tokens": "max_num_batched_tokens",
}
_CLI_ALIASES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "q": "quantization"}
_INT_FIELDS = {
    "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "block_size",
    "max_num_batched_tokens",
}


def _config_value(field: str, raw: object) -> object:
    """Normalise one config value; None for values that mean 'not set'."""
    if raw is None:
        return None
    text = str(raw).strip().strip("'\"")
    if text in ("", "None", "none", "null"):
        return None
    if field == "enforce_eager":
        return text.lower() in ("true", "1", "")
    if field in _INT_FIELDS:
        try:
            return int(text)
        except ValueError:
            return None
    if field == "gpu_memory_utilization":
        try:
            return float(text)
        except ValueError:
            return None
    if field == "dtype":
        dtype = text.removeprefix("torch.")
        return None if dtype == "auto" else dtype  # 'auto' is resolved later, in the config line
    return text


def _config_from_engine_line(rest: str) -> dict[str, object]:
    """Pick the known keys out of "model='m', dtype=torch.bfloat16, max_seq_len=4096, ..."."""
    found: dict[str, object] = {}
    for key, field in _CONFIG_KEYS.items():
        match = re.search(rf"(?<![\w.]){key}=('[^']*'|[^,\s)]+)", rest)
        if match:
            found[field] = _config_value(field, match.group(1))
    return found


def _config_from_dict_text(text: str) -> dict[str, object]:
    """Parse "{'model': 'x', 'max_model_len': 60000}"; falls back to per-key regex."""
    try:
        mapping = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        mapping = None
    found: dict[str, object] = {}
    if isinstance(mapping, dict):
        for key, value in mapping.items():
            if key in _CONFIG_KEYS:
                found[_CONFIG_KEYS[key]] = _config_value(_CONFIG_KEYS[key], value)
        return found
    for key, field in _CONFIG_KEYS.items():
        match = re.search(rf"'{key}':\s*('[^']*'|[^,}}]+)", text)
        if match:
            found[field] = _config_value(field, match.group(1))
    return found


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
        if field == "enforce_eager":
            found[field] = True if not inline else _config_value(field, inline)
            continue
        value = inline or (tokens[i + 1] if i + 1 < len(tokens) else None)
        found[field] = _config_value(field, value)
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
        if _ENGINE_INIT_RE.search(previous) or any(r.pattern.search(previous) for r in _RULES):
            break
        begin -= 1
        if any(rx.search(previous) for rx in (_NON_DEFAULT_ARGS_RE, _NAMESPACE_RE, _COMMAND_RE)):
            break
    return begin, len(restarts) + 1


def parse_vllm_log(text: str) -> VllmStartupReport:
    """Parse vLLM server output (V0 or V1, any prefix) into a :class:`VllmStartupReport`.

    ``text`` is the server's stdout/stderr as captured (``docker logs``, a journal, a pasted issue).
    Raises :class:`planner.errors.ConfigError` when no known startup line is present.
    """
    raw_lines = text.splitlines()
    lines = [_clean(line) for line in raw_lines]
    labels = [_process_label(line) for line in lines]
    begin, n_starts = _last_start(lines, labels)
    ray_folded = sum(
        int(m.group(1)) for line in raw_lines[begin:] for m in _RAY_REPEAT_RE.finditer(line)
    )
    warnings: list[str] = []
    if n_starts > 1:
        warnings.append(
            f"the log holds {n_starts} starts of the same engine; only the last one "
            f"(from line {begin + 1}) is read"
        )

    engine: dict[str, object] = {}
    workers: dict[str, dict[str, object]] = {}
    unparsed: list[str] = []
    matched_any = False

    def put(target: dict[str, object], field: str, value: object) -> None:
        if field and value is not None and field not in target:
            target[field] = value

    for line, label in zip(lines[begin:], labels[begin:]):
        if not line:
            continue
        matched = False

        init = _ENGINE_INIT_RE.search(line)
        if init:
            matched = True
            put(engine, "engine", init.group(1).upper() if init.group(1) else None)
            put(engine, "vllm_version", init.group(2))
            for field, value in _config_from_engine_line(init.group(3)).items():
                put(engine, field, value)
        for regex, parser in (
            (_NON_DEFAULT_ARGS_RE, _config_from_dict_text),
            (_NAMESPACE_RE, _config_from_engine_line),
        ):
            found = regex.search(line)
            if found:
                matched = True
                for field, value in parser(found.group(1)).items():
                    put(engine, field, value)
        command = _COMMAND_RE.search(line)
        if command and not init:
            matched = True
            use_v1 = re.search(r"\bVLLM_USE_V1=([01])\b", line)
            if use_v1:
                put(engine, "engine", f"V{use_v1.group(1)}")
            for field, value in _config_from_command(command.group(1)).items():
                put(engine, field, value)

        for rule in _RULES:
            found = rule.pattern.search(line)
            if not found:
                continue
            matched = True
            target = engine if rule.scope == "engine" else workers.setdefault(label, {})
            for group, (field, convert) in enumerate(rule.fields, start=1):
                raw = found.group(group)
                if raw is None or not field:
                    continue
                if field == "gpu_memory_utilization":
                    put(engine, field, convert(raw))
                else:
                    put(target, field, convert(raw))

        if _STARTUP_ERROR_RE.search(line):
            matched = True
            put(engine, "startup_error", line[:400])

        if matched:
            matched_any = True
        elif _RELEVANT_RE.search(line) and not _RUNTIME_STATS_RE.search(line):
            unparsed.append(line)

    if not matched_any:
        raise ConfigError(
            f"no vLLM startup lines found in the log ({len(raw_lines)} lines read); "
            f"expected lines such as {', '.join(_EXPECTED_LINES)}.",
            hint="Pass the server's own output from its start, e.g. `docker logs <container> "
            "2>&1` or the terminal where `vllm serve` ran.",
        )

    per_worker = tuple(
        WorkerMemory(worker=label, **values) for label, values in workers.items() if values
    )
    summary = _summarise(per_worker, warnings)
    per_worker_min = (
        WorkerMemory(worker="min", **_field_minimum(per_worker)) if len(per_worker) > 1 else None
    )

    if ray_folded:
        warnings.append(
            f"Ray folded {ray_folded} repeated worker lines ('[repeated Nx across cluster]'); "
            "per_worker lists only the workers whose lines were printed"
        )
    if engine.get("max_model_len") is None and engine.get("max_concurrency_tokens_per_request"):
        engine["max_model_len"] = engine["max_concurrency_tokens_per_request"]
    cuda_graph = summary.get("cuda_graph_bytes")
    if isinstance(cuda_graph, int) and cuda_graph < 0:
        warnings.append(
            f"CUDA-graph memory is printed as negative ({cuda_graph / GiB:.2f} GiB): allocator "
            "noise, treat it as about zero"
        )
    if engine.get("startup_error"):
        warnings.append("the engine refused to start for lack of KV cache memory")
    if len(unparsed) > _MAX_UNPARSED_LINES:
        warnings.append(
            f"{len(unparsed)} relevant lines matched no known phrasing; the first "
            f"{_MAX_UNPARSED_LINES} are kept"
        )
        unparsed = unparsed[:_MAX_UNPARSED_LINES]

    return VllmStartupReport(
        **engine,
        **summary,
        per_worker=per_worker,
        per_worker_min=per_worker_min,
        unparsed_relevant_lines=tuple(unparsed),
        warnings=tuple(warnings),
    )


_MAX_OVER_WORKERS = {
    "weights_load_seconds", "model_load_seconds", "memory_profiling_seconds",
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
