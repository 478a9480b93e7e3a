"""Read a serving-benchmark result file into one shape: latencies in seconds, rates per second.

Three tools are recognised, by the keys in the file:

``vllm_bench_serve``
    ``vllm bench serve --save-result`` / ``benchmarks/benchmark_serving.py --save-result``: one
    JSON object (or one per line with ``--append-result``) with ``mean_ttft_ms``,
    ``median_tpot_ms``, ``p99_itl_ms``, ``request_throughput``, ``total_input_tokens``, ... and,
    with ``--save-detailed``, the arrays ``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
    ``latencies``, ``errors``. Older releases wrote the goodput key as ``"request_goodput:"``.
``guidellm``
    A GuideLLM report: ``{"benchmarks": [{"config": {"strategy": ...}, "metrics": {...}}, ...]}``,
    each metric a status breakdown (``successful``/``incomplete``/``errored``/``total``) of a
    distribution summary (``mean``, ``median``, ``std_dev``, ``percentiles.p99``). One result per
    benchmark (a sweep holds several).
``genai_perf``
    NVIDIA genai-perf ``profile_export_genai_perf.json`` (AIPerf's ``profile_export_aiperf.json``
    kept the layout): ``{"time_to_first_token": {"unit": "ms", "avg": .., "p50": .., "p99": ..},
    ..., "input_config": {...}}``.

The same word means different things in these tools; ``BenchResult.definitions`` says, per
metric, what was measured. Verified in the tools' source:

* vLLM (``vllm/benchmarks/serve.py`` @ 009e6d4a, ``calculate_metrics``): TTFT per request; TPOT =
  (latency - TTFT) / (output_tokens - 1) per request with more than one output token, so it excludes
  the first token; ITL = every gap between consecutive streamed chunks, pooled over all requests;
  E2EL = request latency. All client side; statistics over successful requests only.
* genai-perf (``genai_perf/profile_data_parser/llm_profile_data_parser.py`` @ 00168fe7):
  ``inter_token_latency`` = (request_latency - TTFT) / (output_tokens - 1) per request, the same
  definition as vLLM's TPOT, so it is filed here as ``tpot_seconds``. Old releases (the README table
  in triton-inference-server/server ``docs/perf_benchmark/genai-perf-README.rst``) averaged gaps per
  response chunk instead. Times are exported in ms (``Statistics.scale_data``; early releases: ns).
* GuideLLM (``src/guidellm/schemas/request_stats.py``, ``benchmark/schemas/generative/metrics.py``
  @ 06cef291): ``inter_token_latency_ms`` = (last token - first token) / (output_tokens - 1) per
  request, aggregated weighted by output_tokens - 1, so its mean equals vLLM's pooled ITL mean
  while its percentiles are of per-request averages; filed as ``itl_seconds``.
  ``time_per_output_token_ms`` = (last token - request start) / output_tokens INCLUDES the TTFT,
  unlike vLLM's TPOT; it is filed under its own name, ``tpot_incl_first_token_seconds``.
  ``request_latency`` is in seconds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import ConfigError
from planner.units import MS_PER_S
from planner.verify.reading import MAX_RESULT_BYTES, check_text, loads_json, read_text_file

__all__ = [
    "BenchFormat",
    "BenchResult",
    "LatencySummary",
    "load_bench_result",
    "load_bench_results",
]

BenchFormat = Literal["vllm_bench_serve", "guidellm", "genai_perf"]

MAX_SECONDS = 1e7
"""Longest time a result may hold, seconds (about 116 days; a benchmark runs minutes to hours)."""
MAX_COUNT = 1e12
"""Most requests or tokens a result may count."""
MAX_RATE = 1e12
"""Highest rate a result may hold, per second (requests/s or tokens/s)."""
MAX_MEAN_TOKENS = 1e8
"""Longest mean prompt or answer, tokens (10x the longest context window served today)."""

Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
Rate = Annotated[float, Field(ge=0, le=MAX_RATE)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Tokens = Annotated[float, Field(ge=0, le=MAX_MEAN_TOKENS)]
_RESULT_SPEC = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
ArrivalPattern = Literal["poisson", "gamma", "constant", "unlimited", "closed_loop", "ramp_up"]

TTFT = "ttft_seconds"
TPOT = "tpot_seconds"
ITL = "itl_seconds"
E2E = "e2e_seconds"
TPOT_INCL_FIRST = "tpot_incl_first_token_seconds"

DEFINITIONS: dict[BenchFormat, dict[str, str]] = {
    "vllm_bench_serve": {
        TTFT: "Client-side time from sending the request to the first streamed token; "
        "successful requests only (vllm/benchmarks/serve.py calculate_metrics).",
        TPOT: "(E2E latency - TTFT) / (output_tokens - 1) per request with >1 output token: "
        "excludes the first token; statistics over requests (vllm serve.py).",
        ITL: "Every gap between consecutive streamed chunks, pooled over all requests "
        "(serve.py: itls += output.itl); a chunk may carry several tokens.",
        E2E: "Client-side request latency, send to last token (serve.py 'e2el').",
    },
    "genai_perf": {
        TTFT: "Time between sending a request and its first non-empty response "
        "(genai-perf llm_profile_data_parser.py).",
        TPOT: "genai-perf 'inter_token_latency' = (request_latency - TTFT) / (output_tokens - 1) "
        "per request: the same definition as vLLM's TPOT (llm_profile_data_parser.py; releases "
        "before it averaged per-chunk gaps).",
        E2E: "genai-perf 'request_latency': last response timestamp minus request timestamp.",
    },
    "guidellm": {
        TTFT: "GuideLLM 'time_to_first_token_ms': first token iteration - request start "
        "(guidellm schemas/request_stats.py).",
        ITL: "GuideLLM 'inter_token_latency_ms' = (last token - first token) / (output_tokens - 1) "
        "per request, distribution weighted by output_tokens - 1: the mean equals the pooled "
        "mean gap (vLLM ITL mean), percentiles are of per-request averages.",
        TPOT_INCL_FIRST: "GuideLLM 'time_per_output_token_ms' = (last token - request start) / "
        "output_tokens: INCLUDES the TTFT, unlike vLLM's TPOT (request_stats.py).",
        E2E: "GuideLLM 'request_latency' = request end - request start, in seconds.",
    },
}

RECOGNISED_FORMATS = (
    "vllm_bench_serve (`vllm bench serve --save-result` JSON: 'mean_ttft_ms', "
    "'request_throughput', 'total_input_tokens', ...)",
    "guidellm (report with 'benchmarks': [{'config': ..., 'metrics': {'time_to_first_token_ms': ...}}])",
    "genai_perf (profile_export_genai_perf.json: 'time_to_first_token': {'unit': 'ms', 'avg': ...}, 'input_config')",
)


class LatencySummary(BaseModel):
    """Distribution of one latency metric, in seconds. Unknown is None."""

    model_config = _RESULT_SPEC

    mean: Seconds | None = Field(default=None, description="Mean, seconds (0 to 1e7).")
    p50: Seconds | None = Field(default=None, description="Median (50th percentile), seconds (0 to 1e7).")
    p90: Seconds | None = Field(default=None, description="90th percentile, seconds (0 to 1e7).")
    p99: Seconds | None = Field(default=None, description="99th percentile, seconds (0 to 1e7).")
    std: Seconds | None = Field(default=None, description="Standard deviation, seconds (0 to 1e7).")
    other_percentiles: dict[str, Seconds] = Field(
        default_factory=dict,
        description="Further percentiles the file holds, keyed 'p95', 'p99.9', ..., seconds.",
    )


class BenchResult(BaseModel):
    """One benchmark run at one load point, whatever tool wrote it. Unknown is None.

    Every number is finite and >= 0 (a rate > 0) and below the bounds above; a file whose values
    are not is refused with the field named.
    """

    model_config = _RESULT_SPEC

    format: BenchFormat = Field(description="Which tool's file this came from.")
    model: str | None = Field(default=None, description="Model name the tool sent requests for.")
    backend: str | None = Field(default=None, description="API or backend the tool drove, as the tool names it.")
    label: str | None = Field(
        default=None, description="The tool's label for this run (vLLM --label, GuideLLM strategy)."
    )
    request_rate_per_s: Annotated[float, Field(gt=0, le=MAX_RATE)] | None = Field(
        default=None,
        description="Target arrival rate, requests/s; None when unlimited ('inf'), closed-loop "
        "(fixed concurrency) or not recorded - see arrival_pattern.",
    )
    arrival_pattern: ArrivalPattern | None = Field(
        default=None,
        description="How requests arrived: poisson/gamma/constant at request_rate_per_s, "
        "'unlimited' (all at once, rate inf), 'closed_loop' (fixed number in flight), "
        "'ramp_up'; None when the file does not say.",
    )
    max_concurrency: Count | None = Field(
        default=None, description="Cap on requests in flight, requests; None when uncapped."
    )
    num_prompts: Count | None = Field(
        default=None, description="Requests the run sent (successful + failed), requests."
    )
    completed_requests: Count | None = Field(default=None, description="Requests that finished successfully, requests.")
    failed_requests: Count | None = Field(default=None, description="Requests that errored, requests.")
    duration_seconds: Seconds | None = Field(default=None, description="Measured benchmark duration, seconds.")
    mean_input_tokens: Tokens | None = Field(
        default=None, description="Mean prompt length over successful requests, tokens."
    )
    mean_output_tokens: Tokens | None = Field(
        default=None, description="Mean generated length over successful requests, tokens."
    )
    metrics: dict[str, LatencySummary] = Field(
        default_factory=dict,
        description="Latency distributions by name (ttft_seconds, tpot_seconds, itl_seconds, "
        "e2e_seconds, tpot_incl_first_token_seconds), seconds; see definitions.",
    )
    throughput_tokens_per_s: Rate | None = Field(
        default=None, description="Output (generated) tokens per second over the run, tokens/s."
    )
    total_throughput_tokens_per_s: Rate | None = Field(
        default=None, description="Prompt + output tokens per second over the run, tokens/s."
    )
    requests_per_s: Rate | None = Field(
        default=None, description="Successful requests per second over the run, requests/s."
    )
    goodput_requests_per_s: Rate | None = Field(
        default=None, description="Requests per second that met the run's SLOs, requests/s."
    )
    definitions: dict[str, str] = Field(
        default_factory=dict,
        description="What each metric in 'metrics' measures in this tool, with its source.",
    )
    warnings: tuple[str, ...] = Field(default=(), description="Things to know before comparing these numbers.")


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


BenchInput = Mapping[str, Any] | Sequence[Any] | str | Path
"""A parsed JSON object or list, JSON text, or a path to a JSON / JSON-lines file."""


def load_bench_results(data: BenchInput) -> tuple[BenchResult, ...]:
    """All runs in ``data``: a parsed dict/list, JSON text, or a path to a JSON/JSON-lines file.

    A vLLM file written with ``--append-result`` holds one run per line; a GuideLLM report holds
    one per benchmark. Files are read through ``planner.verify.reading`` (at most
    ``MAX_RESULT_BYTES``, UTF-8 or UTF-16 text, bounded JSON). Raises :class:`ConfigError` for an
    unreadable or unrecognised file, and for values out of range, naming the field.
    """
    results: list[BenchResult] = []
    for origin, document in _documents(data):
        results.extend(_from_document(document, origin))
    return tuple(results)


def load_bench_result(data: BenchInput, *, index: int | None = None) -> BenchResult:
    """The one run in ``data`` (auto-detecting the format); ``index`` picks one of several."""
    results = load_bench_results(data)
    if index is not None:
        if not -len(results) <= index < len(results):
            raise ConfigError(f"index {index} is out of range: the file holds {len(results)} benchmark runs.")
        return results[index]
    if len(results) != 1:
        raise ConfigError(
            f"the file holds {len(results)} benchmark runs, not one.",
            hint="Pass index=N to pick one, or call load_bench_results() for all of them.",
        )
    return results[0]


def _documents(data: BenchInput, origin: str = "the given data") -> list[tuple[str, Mapping[str, Any]]]:
    """(where, JSON object) pairs: 'FILE', 'FILE line 3' or 'the given text item 2'."""
    if isinstance(data, Mapping):
        return [(origin, data)]
    if isinstance(data, Path) or (isinstance(data, str) and _looks_like_path(data)):
        text = read_text_file(
            data,
            max_bytes=MAX_RESULT_BYTES,
            what="benchmark result",
            hint="Such a file holds per-request arrays: save the run without --save-detailed.",
        )
        return _documents_from_text(text, origin=str(data))
    if isinstance(data, str):
        if len(data) > MAX_RESULT_BYTES:
            raise ConfigError(
                f"the given text is {len(data):,} characters; a benchmark result of at most "
                f"{MAX_RESULT_BYTES:,} characters is read."
            )
        return _documents_from_text(check_text(data, "the given text"), origin="the given text")
    if isinstance(data, Sequence):
        documents = [d for d in data if isinstance(d, Mapping)]
        if len(documents) != len(data) or not documents:
            raise ConfigError(f"{origin}: a list of benchmark results must hold JSON objects only.")
        many = len(documents) > 1
        return [(f"{origin} item {i}" if many else origin, d) for i, d in enumerate(documents)]
    raise ConfigError(f"expected a dict, JSON text or a path, got {type(data).__name__}.")


def _looks_like_path(text: str) -> bool:
    """A str is a path unless it starts like JSON or could not name a file (a newline, NUL, U+FFFD, 4 KiB)."""
    if text.lstrip().startswith(("{", "[")) or len(text) > 4096:
        return False
    return not any(ch in text for ch in ("\n", "\x00", "\ufffd"))


def _documents_from_text(text: str, *, origin: str) -> list[tuple[str, Mapping[str, Any]]]:
    try:
        parsed = loads_json(text, origin)
    except json.JSONDecodeError:
        parsed = None
    if isinstance(parsed, Mapping):
        return [(origin, parsed)]
    if isinstance(parsed, list):
        return _documents(parsed, origin)
    documents: list[tuple[str, Mapping[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{origin} line {number}"
        try:
            item = loads_json(line, where)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{origin} is neither JSON nor JSON lines (line {number}: {err.msg}).") from None
        if not isinstance(item, Mapping):
            raise ConfigError(f"{origin} line {number} is not a JSON object.")
        documents.append((where, item))
    if not documents:
        raise ConfigError(f"{origin} holds no benchmark result.")
    return documents


def _from_document(document: Mapping[str, Any], origin: str) -> list[BenchResult]:
    """The runs of one JSON object; a value out of range is a ConfigError naming the field."""
    try:
        return _runs_of(document, origin)
    except ValidationError as err:
        raise _out_of_range(err, origin) from None
    except BadValue as err:
        raise ConfigError(f"{origin}: {err}") from None


def _runs_of(document: Mapping[str, Any], origin: str) -> list[BenchResult]:
    if _is_guidellm_report(document):
        return [_from_guidellm(b, document) for b in document["benchmarks"]]
    if _is_guidellm_benchmark(document):
        return [_from_guidellm(document, {})]
    if _is_genai_perf(document):
        return [_from_genai_perf(document)]
    if _is_vllm(document):
        return [_from_vllm(document)]
    keys = sorted(str(k)[:60] for k in document)
    shown = ", ".join(keys[:25]) + (f", ... ({len(keys)} keys)" if len(keys) > 25 else "")
    raise ConfigError(
        f"{origin}: unrecognised benchmark result format; recognised formats: "
        + "; ".join(RECOGNISED_FORMATS)
        + f". Keys seen: [{shown}]."
    )


def _out_of_range(err: ValidationError, origin: str) -> ConfigError:
    """'FILE: metrics.ttft_seconds.mean = -0.005 is out of range (>= 0) ...' from pydantic's first error."""
    first = err.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "a value"
    value = first.get("input")
    shown = repr(value)[:80]
    return ConfigError(
        f"{origin}: {where} = {shown} is out of range ({first['msg'].lower()}); a benchmark result holds finite "
        f"numbers >= 0 (times in seconds up to {MAX_SECONDS:g}, counts up to {MAX_COUNT:g}, mean lengths up to "
        f"{MAX_MEAN_TOKENS:g} tokens, a request rate > 0), after conversion from the tool's units.",
        hint="Check the file the tool wrote; a hand-edited value may be off.",
    )


class BadValue(ValueError):
    """A value of the file that no run can hold (raised by the converters, named with its key)."""


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """A finite float from a number or numeric string; None otherwise (inf/NaN included)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return None if number is None else round(number)


def _text(value: Any) -> str | None:
    """A name from the file: a string (or a number written as one); None for anything else."""
    if isinstance(value, str):
        return value[:500] or None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    return None


def _samples(d: Mapping[str, Any], key: str, unit: str) -> list[float] | None:
    """The per-request array ``d[key]`` as floats; None when absent. Refuses a non-number or a
    negative entry, naming it: 'ttfts'[1] is None."""
    values = d.get(key)
    if values is None:
        return None
    if not isinstance(values, list):
        raise BadValue(f"'{key}' is {type(values).__name__}; a list of {unit} per request is expected.")
    return [_sample(v, f"'{key}'[{i}]", unit) for i, v in enumerate(values)]


def _sample(value: Any, where: str, unit: str) -> float:
    number = None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)
    if number is None or not math.isfinite(number) or number < 0:
        raise BadValue(f"{where} is {_shown(value)}; per-request arrays hold finite numbers >= 0 ({unit}).")
    return number


def _shown(value: Any) -> str:
    """A value as the JSON file spells it (null, "a", 1e400 -> Infinity), cut to 80 characters."""
    try:
        return json.dumps(value)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]


def _gap_lists(d: Mapping[str, Any]) -> list[list[float]] | None:
    """``itls``: one list of inter-token gaps (seconds) per request; None when absent."""
    values = d.get("itls")
    if values is None:
        return None
    if not isinstance(values, list):
        raise BadValue(f"'itls' is {type(values).__name__}; a list of per-request lists of seconds is expected.")
    out = []
    for i, gaps in enumerate(values):
        if gaps is None:
            gaps = []
        if not isinstance(gaps, list):
            raise BadValue(f"'itls'[{i}] is {gaps!r}; each request's entry is a list of gaps in seconds.")
        out.append([_sample(g, f"'itls'[{i}][{j}]", "seconds") for j, g in enumerate(gaps)])
    return out


def _dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    rank = q / 100.0 * (len(sorted_values) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (rank - low)


def _summary_from_samples(samples: Sequence[float], name: str) -> LatencySummary | None:
    """Mean, median, p90, p99 and population std of samples in seconds."""
    if not samples:
        return None
    values = sorted(samples)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) * (v - mean) for v in values) / len(values))
    return _latency_summary(
        name,
        mean=mean,
        p50=_percentile(values, 50),
        p90=_percentile(values, 90),
        p99=_percentile(values, 99),
        std=std,
    )


def _latency_summary(name: str, **fields: Any) -> LatencySummary:
    """LatencySummary(**fields), or BadValue naming the metric and statistic that is out of range."""
    try:
        return LatencySummary(**fields)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BadValue(
            f"{name} {where} = {first.get('input')!r} s is out of range ({first['msg'].lower()}); "
            f"latencies are finite numbers of seconds from 0 to {MAX_SECONDS:g}, after conversion "
            "from the tool's unit."
        ) from None


def _percentile_label(number: str) -> str:
    """'99' -> 'p99', '99.9' -> 'p99.9' (the key patterns bound the digits, so this is finite)."""
    value = float(number)
    return f"p{int(value)}" if value.is_integer() else f"p{value:g}"


def _summary(
    mean: Any, p50: Any, std: Any, percentiles: Mapping[str, Any], scale: float, name: str
) -> LatencySummary | None:
    """Build a summary from values in some unit; ``scale`` converts that unit to seconds."""

    def s(value: Any) -> float | None:
        number = _number(value)
        return None if number is None else number * scale

    others = {k: s(v) for k, v in percentiles.items() if k not in ("p50", "p90", "p99")}
    summary = _latency_summary(
        name,
        mean=s(mean),
        p50=s(percentiles.get("p50")) if percentiles.get("p50") is not None else s(p50),
        p90=s(percentiles.get("p90")),
        p99=s(percentiles.get("p99")),
        std=s(std),
        other_percentiles={k: v for k, v in others.items() if v is not None},
    )
    if summary.mean is None and summary.p50 is None and summary.p99 is None:
        return None
    return summary


# ---------------------------------------------------------------------------------------------
# vLLM bench serve
# ---------------------------------------------------------------------------------------------

_VLLM_METRICS = {"ttft": TTFT, "tpot": TPOT, "itl": ITL, "e2el": E2E}
_VLLM_PERCENTILE_RE = re.compile(r"^p(\d{1,3}(?:\.\d{1,6})?)_(ttft|tpot|itl|e2el)_ms$")
_VLLM_MARKERS = ("mean_ttft_ms", "median_ttft_ms", "mean_e2el_ms", "mean_tpot_ms")


def _is_vllm(d: Mapping[str, Any]) -> bool:
    if any(key in d for key in _VLLM_MARKERS):
        return True
    if any(_VLLM_PERCENTILE_RE.match(str(key)) for key in d):
        return True
    if isinstance(d.get("ttfts"), list) and isinstance(d.get("itls"), list):
        return True  # --save-detailed arrays
    return ("completed" in d and "duration" in d) or ("request_throughput" in d and "output_throughput" in d)


def _success_mask(d: Mapping[str, Any], n: int) -> list[bool]:
    errors = d.get("errors")
    if isinstance(errors, list) and len(errors) == n:
        return [not e for e in errors]
    output_lens = d.get("output_lens")
    if isinstance(output_lens, list) and len(output_lens) == n:
        return [bool(x) for x in output_lens]
    return [True] * n


def _vllm_from_arrays(d: Mapping[str, Any]) -> dict[str, LatencySummary]:
    """Recompute latency summaries from --save-detailed arrays, as calculate_metrics does."""
    ttfts = _samples(d, "ttfts", "seconds")
    out: dict[str, LatencySummary] = {}
    if ttfts is None:
        return out
    itls, latencies = _gap_lists(d), _samples(d, "latencies", "seconds")
    output_lens = _samples(d, "output_lens", "tokens")
    ok = _success_mask(d, len(ttfts))
    summary = _summary_from_samples([t for t, good in zip(ttfts, ok) if good], "'ttfts'")
    if summary:
        out[TTFT] = summary
    if itls is not None and len(itls) == len(ttfts):
        gaps = [g for gap_list, good in zip(itls, ok) if good for g in gap_list]
        summary = _summary_from_samples(gaps, "'itls'")
        if summary:
            out[ITL] = summary
    if latencies is not None and len(latencies) == len(ttfts):
        summary = _summary_from_samples([lat for lat, good in zip(latencies, ok) if good], "'latencies'")
        if summary:
            out[E2E] = summary
        if output_lens is not None and len(output_lens) == len(ttfts):
            tpots = [
                max(lat - ttft, 0.0) / (n - 1)
                for lat, ttft, n, good in zip(latencies, ttfts, output_lens, ok)
                if good and n > 1
            ]
            summary = _summary_from_samples(tpots, "TPOT from 'latencies', 'ttfts', 'output_lens'")
            if summary:
                out[TPOT] = summary
    return out


def _vllm_metrics(d: Mapping[str, Any]) -> dict[str, LatencySummary]:
    out: dict[str, LatencySummary] = {}
    for short, name in _VLLM_METRICS.items():
        percentiles: dict[str, Any] = {}
        for key, value in d.items():
            match = _VLLM_PERCENTILE_RE.match(str(key))
            if match and match.group(2) == short:
                percentiles[_percentile_label(match.group(1))] = value
        summary = _summary(
            d.get(f"mean_{short}_ms"),
            d.get(f"median_{short}_ms"),
            d.get(f"std_{short}_ms"),
            percentiles,
            1.0 / MS_PER_S,
            f"'{short}' (the *_{short}_ms keys)",
        )
        if summary is not None:
            out[name] = summary
    return out


def _mean_tokens(d: Mapping[str, Any], total_key: str, array_key: str) -> float | None:
    total, completed = _number(d.get(total_key)), _number(d.get("completed"))
    if total is not None and completed:
        return total / completed
    values = _samples(d, array_key, "tokens")
    if values:
        ok = _success_mask(d, len(values))
        kept = [v for v, good in zip(values, ok) if good]
        if kept:
            return sum(kept) / len(kept)
    return None


def _from_vllm(d: Mapping[str, Any]) -> BenchResult:
    warnings: list[str] = []
    metrics = _vllm_metrics(d)
    from_arrays = _vllm_from_arrays(d)
    filled = sorted(set(from_arrays) - set(metrics))
    for name in filled:
        metrics[name] = from_arrays[name]
    if filled:
        warnings.append("computed from the per-request arrays (no summary keys in the file): " + ", ".join(filled))

    raw_rate = d.get("request_rate")
    rate = _number(raw_rate)
    unlimited = raw_rate == "inf" or (isinstance(raw_rate, float) and math.isinf(raw_rate))
    burstiness = _number(d.get("burstiness"))
    arrival: ArrivalPattern | None
    if d.get("ramp_up_strategy"):
        arrival = "ramp_up"
    elif unlimited:
        arrival = "unlimited"
    elif rate is not None:
        arrival = "poisson" if burstiness in (None, 1.0) else "gamma"
    else:
        arrival = None

    completed = _integer(d.get("completed"))
    failed = _integer(d.get("failed"))
    if failed is None and isinstance(d.get("errors"), list):
        failed = sum(1 for e in d["errors"] if e)
    if failed:
        warnings.append(f"{failed} requests failed; latencies cover the {completed} that succeeded")

    goodput = d.get("request_goodput", d.get("request_goodput:"))
    return BenchResult(
        format="vllm_bench_serve",
        model=_text(d.get("model_id")) or _text(d.get("model")),
        backend=_text(d.get("backend")) or _text(d.get("endpoint_type")),
        label=_text(d.get("label")),
        request_rate_per_s=None if unlimited else rate,
        arrival_pattern=arrival,
        max_concurrency=_integer(d.get("max_concurrency")),
        num_prompts=_integer(d.get("num_prompts")),
        completed_requests=completed,
        failed_requests=failed,
        duration_seconds=_number(d.get("duration")),
        mean_input_tokens=_mean_tokens(d, "total_input_tokens", "input_lens"),
        mean_output_tokens=_mean_tokens(d, "total_output_tokens", "output_lens"),
        metrics=metrics,
        throughput_tokens_per_s=_number(d.get("output_throughput")),
        total_throughput_tokens_per_s=_number(d.get("total_token_throughput")),
        requests_per_s=_number(d.get("request_throughput")),
        goodput_requests_per_s=_number(goodput),
        definitions={k: v for k, v in DEFINITIONS["vllm_bench_serve"].items() if k in metrics},
        warnings=tuple(warnings),
    )


# ---------------------------------------------------------------------------------------------
# GuideLLM
# ---------------------------------------------------------------------------------------------

_GUIDELLM_METRICS = (
    ("time_to_first_token_ms", TTFT, 1.0 / MS_PER_S),
    ("inter_token_latency_ms", ITL, 1.0 / MS_PER_S),
    ("time_per_output_token_ms", TPOT_INCL_FIRST, 1.0 / MS_PER_S),
    ("request_latency", E2E, 1.0),
)
_GUIDELLM_PERCENTILE_NAMES = {
    "p001": "p0.1",
    "p01": "p1",
    "p05": "p5",
    "p10": "p10",
    "p25": "p25",
    "p50": "p50",
    "p75": "p75",
    "p90": "p90",
    "p95": "p95",
    "p99": "p99",
    "p999": "p99.9",
}


def _is_guidellm_benchmark(d: Mapping[str, Any]) -> bool:
    metrics = d.get("metrics")
    return isinstance(metrics, Mapping) and any(
        key in metrics for key in ("time_to_first_token_ms", "requests_per_second")
    )


def _is_guidellm_report(d: Mapping[str, Any]) -> bool:
    benchmarks = d.get("benchmarks")
    return (
        isinstance(benchmarks, list)
        and bool(benchmarks)
        and all(isinstance(b, Mapping) and _is_guidellm_benchmark(b) for b in benchmarks)
    )


def _successful(metric: Any) -> Mapping[str, Any] | None:
    """The 'successful' distribution of a status breakdown (or the distribution itself)."""
    if not isinstance(metric, Mapping):
        return None
    dist = metric.get("successful", metric)
    return dist if isinstance(dist, Mapping) else None


def _guidellm_summary(metric: Any, scale: float, key: str) -> LatencySummary | None:
    dist = _successful(metric)
    if dist is None or _number(dist.get("count")) == 0:
        return None
    stated = dist.get("percentiles")
    raw: Mapping[str, Any] = stated if isinstance(stated, Mapping) else {}  # JSON: string keys
    percentiles = {_GUIDELLM_PERCENTILE_NAMES.get(k, k): v for k, v in raw.items()}
    return _summary(dist.get("mean"), dist.get("median"), dist.get("std_dev"), percentiles, scale, f"'{key}'")


def _strategy_fields(strategy: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(strategy.get("type_") or strategy.get("type") or "")
    streams = _integer(strategy.get("streams") or strategy.get("max_concurrency"))
    rate = _number(strategy.get("rate"))
    if kind == "synchronous":
        return {"arrival_pattern": "closed_loop", "max_concurrency": 1, "label": kind}
    if kind == "concurrent":
        return {
            "arrival_pattern": "closed_loop",
            "max_concurrency": streams,
            "label": f"concurrent@{streams}" if streams else kind,
        }
    if kind == "throughput":
        return {"arrival_pattern": "unlimited", "max_concurrency": streams, "label": kind}
    if kind in ("constant", "poisson"):
        return {
            "arrival_pattern": kind,
            "request_rate_per_s": rate,
            "label": f"{kind}@{rate:g}" if rate is not None else kind,
        }
    return {"label": kind or None}


def _from_guidellm(bench: Mapping[str, Any], report: Mapping[str, Any]) -> BenchResult:
    metrics_in = bench["metrics"]
    strategy = _dig(bench, "config", "strategy") or _dig(bench, "args", "strategy") or {}
    fields = _strategy_fields(strategy) if isinstance(strategy, Mapping) else {}

    metrics: dict[str, LatencySummary] = {}
    for key, name, scale in _GUIDELLM_METRICS:
        summary = _guidellm_summary(metrics_in.get(key), scale, key)
        if summary is not None:
            metrics[name] = summary

    totals = metrics_in.get("request_totals") or _dig(bench, "run_stats", "requests_made") or {}
    if not isinstance(totals, Mapping):
        totals = {}
    errored, incomplete = _integer(totals.get("errored")), _integer(totals.get("incomplete"))
    warnings: list[str] = []
    if errored or incomplete:
        warnings.append(
            f"{errored or 0} errored and {incomplete or 0} incomplete requests; latencies cover the successful ones"
        )
    duration = _number(bench.get("duration"))
    if duration is None:
        start, end = _number(bench.get("start_time")), _number(bench.get("end_time"))
        duration = end - start if start is not None and end is not None else None

    def mean_of(key: str) -> float | None:
        dist = _successful(metrics_in.get(key))
        return None if dist is None else _number(dist.get("mean"))

    model = (
        _text(_dig(bench, "config", "backend", "model"))
        or _text(_dig(bench, "worker", "backend_model"))
        or _text(_dig(report, "args", "model"))
    )
    backend = (
        _text(_dig(bench, "config", "backend", "type_"))
        or _text(_dig(bench, "worker", "backend_type"))
        or _text(_dig(report, "args", "backend"))
        or _text(_dig(report, "args", "backend_type"))
    )
    return BenchResult(
        format="guidellm",
        model=model,
        backend=backend,
        label=fields.get("label"),
        request_rate_per_s=fields.get("request_rate_per_s"),
        arrival_pattern=fields.get("arrival_pattern"),
        max_concurrency=fields.get("max_concurrency"),
        num_prompts=_integer(totals.get("total")),
        completed_requests=_integer(totals.get("successful")),
        failed_requests=errored,
        duration_seconds=duration,
        mean_input_tokens=mean_of("prompt_token_count"),
        mean_output_tokens=mean_of("output_token_count"),
        metrics=metrics,
        throughput_tokens_per_s=mean_of("output_tokens_per_second"),
        total_throughput_tokens_per_s=mean_of("tokens_per_second"),
        requests_per_s=mean_of("requests_per_second"),
        definitions={k: v for k, v in DEFINITIONS["guidellm"].items() if k in metrics},
        warnings=tuple(warnings),
    )


# ---------------------------------------------------------------------------------------------
# genai-perf
# ---------------------------------------------------------------------------------------------

_GENAI_PERF_METRICS = (
    ("time_to_first_token", TTFT),
    ("inter_token_latency", TPOT),
    ("request_latency", E2E),
)
_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
_GENAI_PERF_STATS = {"avg", "min", "max", "std", "unit"}


def _is_genai_perf(d: Mapping[str, Any]) -> bool:
    return any(
        isinstance(d.get(key), Mapping) and ("avg" in d[key] or "unit" in d[key])
        for key in (
            "time_to_first_token",
            "request_latency",
            "inter_token_latency",
            "output_token_throughput",
            "request_throughput",
        )
    )


def _genai_perf_summary(metric: Any, warnings: list[str], name: str) -> LatencySummary | None:
    if not isinstance(metric, Mapping):
        return None
    unit = str(metric.get("unit", "")).strip().lower()
    if unit not in _TIME_UNITS:
        warnings.append(f"{name}: unit {unit or 'missing'!r} read as ms")
    scale = _TIME_UNITS.get(unit, 1e-3)
    percentiles = {
        _percentile_label(k[1:]): v
        for k, v in metric.items()
        if k not in _GENAI_PERF_STATS and re.fullmatch(r"p\d{1,3}(?:\.\d{1,6})?", str(k))
    }
    return _summary(metric.get("avg"), None, metric.get("std"), percentiles, scale, f"'{name}'")


def _from_genai_perf(d: Mapping[str, Any]) -> BenchResult:
    warnings: list[str] = []
    metrics: dict[str, LatencySummary] = {}
    for key, name in _GENAI_PERF_METRICS:
        summary = _genai_perf_summary(d.get(key), warnings, key)
        if summary is not None:
            metrics[name] = summary

    ttft, e2e = metrics.get(TTFT), metrics.get(E2E)
    if ttft and e2e and ttft.mean == e2e.mean and ttft.p99 == e2e.p99:
        warnings.append(
            "time_to_first_token equals request_latency: a non-streaming run, so TTFT is the "
            "whole request and there is no inter-token latency"
        )

    stated = d.get("input_config")
    config = stated if isinstance(stated, Mapping) else {}
    model = config.get("model") or config.get("model_names")
    if isinstance(model, list):
        model = ",".join(str(m)[:200] for m in model[:16]) or None
    model = _text(model)
    service, endpoint = config.get("service_kind"), config.get("endpoint_type")
    backend = "/".join(str(x) for x in (service, endpoint) if x) or None
    concurrency = _integer(config.get("concurrency") or _dig(config, "perf_analyzer", "stimulus", "concurrency"))
    rate = _number(config.get("request_rate") or _dig(config, "perf_analyzer", "stimulus", "request_rate"))

    def avg(key: str, *fallbacks: str) -> float | None:
        for name in (key, *fallbacks):
            if isinstance(d.get(name), Mapping):
                return _number(d[name].get("avg"))
        return None

    request_count = avg("request_count")
    return BenchResult(
        format="genai_perf",
        model=model,
        backend=backend,
        request_rate_per_s=rate,
        arrival_pattern="closed_loop" if concurrency and rate is None else None,
        max_concurrency=concurrency,
        num_prompts=None if request_count is None else int(request_count),
        mean_input_tokens=avg("input_sequence_length", "num_input_token"),
        mean_output_tokens=avg("output_sequence_length", "num_output_token"),
        metrics=metrics,
        throughput_tokens_per_s=avg("output_token_throughput"),
        requests_per_s=avg("request_throughput"),
        goodput_requests_per_s=avg("request_goodput"),
        definitions={k: v for k, v in DEFINITIONS["genai_perf"].items() if k in metrics},
        warnings=tuple(warnings),
    )
