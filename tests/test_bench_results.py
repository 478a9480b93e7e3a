"""planner.verify.bench_results: benchmark result files in, one shape out (seconds, per second).

Sample files in tests/data/bench/ and where they come from:

* ``vllm_nerdalert_llama32_3b_l40s_sweep.json`` - verbatim copy of nerdalert/vllm-bench-automation
  ``vllm-benchmark-graphs/results.json`` @ 13ee6ea5: nine ``benchmark_serving.py --save-result``
  records appended as JSON lines (Llama-3.2-3B-Instruct, 4x L40S, request rates 10, 30, inf),
  written by a release that still spelled the goodput key ``"request_goodput:"``.
* ``vllm_bench_serve_detailed.json`` - built for these tests with exactly the keys that
  vllm/benchmarks/serve.py @ 009e6d4a writes with ``--save-result --save-detailed
  --metric-percentiles 50,90,99 --percentile-metrics ttft,tpot,itl,e2el``; six requests, one failed;
  the summary keys were computed from the arrays with numpy the way ``calculate_metrics`` does.
* ``genai_perf_issue298_trtllm_streaming.json`` / ``..._non_streaming.json`` - verbatim
  ``profile_export_genai_perf.json`` contents posted in triton-inference-server/perf_analyzer#298
  (TRT-LLM ensemble behind Triton KServe, concurrency 100, streaming on / off).
* ``guidellm_sweep_two_strategies.json`` - built for these tests from the GuideLLM schemas in
  vllm-project/guidellm (GenerativeBenchmark, BenchmarkConfig, GenerativeMetrics,
  StatusDistributionSummary, DistributionSummary, Percentiles); two benchmarks (concurrent@4,
  constant@2 req/s). Numbers are invented but consistent: e2e = ttft + (out - 1) x itl.
  ``config.backend`` is a free-form dict in the schema; this sample puts the model there.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from planner.errors import ConfigError
from planner.verify.bench_results import (
    DEFINITIONS,
    BenchResult,
    LatencySummary,
    load_bench_result,
    load_bench_results,
)

BENCH = Path(__file__).parent / "data" / "bench"
VLLM_SWEEP = BENCH / "vllm_nerdalert_llama32_3b_l40s_sweep.json"
VLLM_DETAILED = BENCH / "vllm_bench_serve_detailed.json"
GENAI_STREAM = BENCH / "genai_perf_issue298_trtllm_streaming.json"
GENAI_NO_STREAM = BENCH / "genai_perf_issue298_trtllm_non_streaming.json"
GUIDELLM = BENCH / "guidellm_sweep_two_strategies.json"


def load_json(path: Path):
    return json.loads(path.read_text())


# ---------------------------------------------------------------------------------------------
# Known values, one table per format (file, index, field -> expected); latencies in seconds
# ---------------------------------------------------------------------------------------------

KNOWN = [
    (
        VLLM_SWEEP,
        0,
        {
            "format": "vllm_bench_serve",
            "model": "meta-llama/Llama-3.2-3B-Instruct",
            "backend": "vllm",
            "request_rate_per_s": 10.0,
            "arrival_pattern": "poisson",
            "max_concurrency": None,
            "num_prompts": 300,
            "completed_requests": 300,
            "duration_seconds": 35.84472489100017,
            "mean_input_tokens": 299700 / 300,
            "mean_output_tokens": 80945 / 300,
            "throughput_tokens_per_s": 2258.212337970085,
            "total_throughput_tokens_per_s": 10619.275253401978,
            "requests_per_s": 8.369432347779671,
            "goodput_requests_per_s": None,  # "request_goodput:": null
            ("ttft_seconds", "mean"): 0.05459561144333596,
            ("ttft_seconds", "p50"): 0.052868896000063614,  # median_ttft_ms
            ("ttft_seconds", "p90"): None,  # not in the file (default --metric-percentiles 99)
            ("ttft_seconds", "p99"): 0.09869780922984769,
            ("tpot_seconds", "mean"): 0.013710971568239172,
            ("itl_seconds", "p99"): 0.03448662216016601,
            ("itl_seconds", "std"): 0.004023339545674027,
        },
    ),
    (
        VLLM_SWEEP,
        2,
        {
            "request_rate_per_s": None,  # "request_rate": "inf"
            "arrival_pattern": "unlimited",
            "num_prompts": 900,
            ("ttft_seconds", "mean"): 4.386739448253334,
            ("tpot_seconds", "p99"): 0.11856057960224177,
        },
    ),
    (
        VLLM_DETAILED,
        0,
        {
            "model": "Qwen/Qwen3-8B",
            "backend": "openai-chat",
            "max_concurrency": 4,
            "arrival_pattern": "unlimited",
            "num_prompts": 6,
            "completed_requests": 5,
            "failed_requests": 1,
            "mean_input_tokens": 2550 / 5,  # failed request's prompt not counted
            "mean_output_tokens": 41 / 5,
            ("e2e_seconds", "p90"): 0.44104000000000004,
        },
    ),
    (
        GENAI_STREAM,
        0,
        {
            "format": "genai_perf",
            "model": "ensemble",
            "backend": "triton/kserve",
            "max_concurrency": 100,
            "arrival_pattern": "closed_loop",
            "request_rate_per_s": None,
            "mean_input_tokens": 200.85,
            "mean_output_tokens": 2565.855,
            "throughput_tokens_per_s": 44190.56002502682,
            "requests_per_s": 17.222547659562533,
            "total_throughput_tokens_per_s": None,  # genai-perf does not report it
            ("ttft_seconds", "mean"): 0.18463779366666665,
            ("ttft_seconds", "p50"): 0.1728093975,
            ("ttft_seconds", "p90"): 0.30280112349999996,
            ("ttft_seconds", "p99"): 0.42502943662,
            ("tpot_seconds", "mean"): 0.0021767344516666665,  # genai-perf inter_token_latency
            ("e2e_seconds", "p99"): 5.910154859249999,
            ("itl_seconds", "mean"): "absent",
        },
    ),
    (
        GUIDELLM,
        0,
        {
            "format": "guidellm",
            "model": "Qwen/Qwen3-8B",
            "backend": "openai_http",
            "label": "concurrent@4",
            "arrival_pattern": "closed_loop",
            "max_concurrency": 4,
            "request_rate_per_s": None,
            "num_prompts": 200,
            "completed_requests": 200,
            "failed_requests": 0,
            "mean_input_tokens": 512.0,
            "mean_output_tokens": 128.0,
            ("ttft_seconds", "mean"): 0.0452,
            ("itl_seconds", "mean"): 0.0141,
            ("tpot_seconds", "mean"): "absent",  # GuideLLM's TPOT includes the first token
        },
    ),
    (
        GUIDELLM,
        1,
        {
            "label": "constant@2",
            "arrival_pattern": "constant",
            "request_rate_per_s": 2.0,
            "max_concurrency": None,
            "num_prompts": 120,
            "completed_requests": 118,
            "failed_requests": 2,
            "requests_per_s": 2.0,
            "throughput_tokens_per_s": 256.0,
            "total_throughput_tokens_per_s": 1280.0,
            ("e2e_seconds", "mean"): 0.0386 + 127 * 0.0125,
        },
    ),
]


@pytest.mark.parametrize(("path", "index", "expected"), KNOWN, ids=[f"{k[0].stem}[{k[1]}]" for k in KNOWN])
def test_known_values(path, index, expected):
    result = load_bench_results(path)[index]
    for key, want in expected.items():
        if isinstance(key, tuple):
            metric, stat = key
            if want == "absent":
                assert metric not in result.metrics, metric
                continue
            got = getattr(result.metrics[metric], stat)
        else:
            got = getattr(result, key)
        if isinstance(want, float):
            assert got == pytest.approx(want, rel=1e-12), key
        else:
            assert got == want, key


# ---------------------------------------------------------------------------------------------
# Invariants
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(9))
def test_vllm_rates_times_duration_give_the_totals(index):
    raw = load_json_lines(VLLM_SWEEP)[index]
    result = load_bench_result(VLLM_SWEEP, index=index)
    assert result.requests_per_s * result.duration_seconds == pytest.approx(raw["completed"])
    assert result.throughput_tokens_per_s * result.duration_seconds == pytest.approx(raw["total_output_tokens"])
    assert result.total_throughput_tokens_per_s * result.duration_seconds == pytest.approx(
        raw["total_input_tokens"] + raw["total_output_tokens"]
    )


def load_json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_vllm_arrays_give_the_same_summary_as_the_saved_keys():
    """With the summary keys removed, the loader recomputes them from --save-detailed arrays
    (successful requests only, TPOT = (latency - ttft) / (n - 1), ITL pooled) and must agree
    with what vLLM (numpy) wrote."""
    raw = load_json(VLLM_DETAILED)
    stripped = {k: v for k, v in raw.items() if not k.endswith("_ms")}
    for key in ("total_input_tokens", "total_output_tokens", "completed"):
        stripped.pop(key)
    saved = load_bench_result(raw)
    recomputed = load_bench_result(stripped)
    assert set(recomputed.metrics) == {"ttft_seconds", "tpot_seconds", "itl_seconds", "e2e_seconds"}
    for name, summary in saved.metrics.items():
        again = recomputed.metrics[name]
        for stat in ("mean", "p50", "p90", "p99", "std"):
            assert getattr(again, stat) == pytest.approx(getattr(summary, stat), rel=1e-9), (
                name,
                stat,
            )
    assert recomputed.mean_input_tokens == saved.mean_input_tokens
    assert recomputed.mean_output_tokens == saved.mean_output_tokens
    assert any("per-request arrays" in w for w in recomputed.warnings)


@pytest.mark.parametrize("path", [GENAI_STREAM, GENAI_NO_STREAM])
def test_genai_perf_output_throughput_is_request_rate_times_output_length(path):
    result = load_bench_result(path)
    assert result.throughput_tokens_per_s == pytest.approx(result.requests_per_s * result.mean_output_tokens, rel=1e-9)


@pytest.mark.parametrize("index", [0, 1])
def test_guidellm_units_make_e2e_equal_ttft_plus_decode(index):
    """ms (TTFT, ITL) and s (request_latency) must end up in the same unit."""
    result = load_bench_result(GUIDELLM, index=index)
    ttft = result.metrics["ttft_seconds"].mean
    itl = result.metrics["itl_seconds"].mean
    e2e = result.metrics["e2e_seconds"].mean
    assert e2e == pytest.approx(ttft + (result.mean_output_tokens - 1) * itl, rel=1e-9)
    incl = result.metrics["tpot_incl_first_token_seconds"].mean
    assert incl == pytest.approx(e2e / result.mean_output_tokens, rel=1e-9)
    assert incl > itl  # including the first token makes it larger


def every_result() -> list[BenchResult]:
    out: list[BenchResult] = []
    for path in sorted(BENCH.glob("*.json")):
        out.extend(load_bench_results(path))
    return out


def test_latencies_are_seconds_and_ordered():
    for result in every_result():
        for name, summary in result.metrics.items():
            assert summary.mean is None or 0 < summary.mean < 60, (result.format, name)
            if summary.p50 is not None and summary.p99 is not None:
                assert summary.p50 <= summary.p99
        if "ttft_seconds" in result.metrics and "e2e_seconds" in result.metrics:
            assert result.metrics["ttft_seconds"].mean <= result.metrics["e2e_seconds"].mean


def test_every_metric_has_a_definition():
    for result in every_result():
        assert set(result.definitions) == set(result.metrics), result.format


def test_definitions_say_what_differs_between_tools():
    vllm = DEFINITIONS["vllm_bench_serve"]
    assert "excludes the first token" in vllm["tpot_seconds"]
    assert "(output_tokens - 1)" in vllm["tpot_seconds"]
    assert "consecutive" in vllm["itl_seconds"]
    assert "same definition as vLLM's TPOT" in DEFINITIONS["genai_perf"]["tpot_seconds"]
    assert "INCLUDES the TTFT" in DEFINITIONS["guidellm"]["tpot_incl_first_token_seconds"]
    assert "tpot_seconds" not in DEFINITIONS["guidellm"]


# ---------------------------------------------------------------------------------------------
# Inputs: dict, JSON text, str path, Path, JSON lines; several runs
# ---------------------------------------------------------------------------------------------


def test_dict_text_str_and_path_give_the_same_result():
    raw = load_json(GENAI_STREAM)
    from_path = load_bench_result(GENAI_STREAM)
    assert load_bench_result(str(GENAI_STREAM)) == from_path
    assert load_bench_result(raw) == from_path
    assert load_bench_result(json.dumps(raw)) == from_path
    assert load_bench_result([raw]) == from_path


def test_json_lines_hold_one_run_per_line():
    results = load_bench_results(VLLM_SWEEP)
    assert len(results) == 9
    assert [r.request_rate_per_s for r in results[:3]] == [10.0, 30.0, None]
    assert load_bench_result(VLLM_SWEEP, index=-1) == results[-1]


@pytest.mark.parametrize(
    ("path", "index", "error"),
    [
        (VLLM_SWEEP, None, "holds 9 benchmark runs"),
        (GUIDELLM, None, "holds 2 benchmark runs"),
        (GUIDELLM, 2, "index 2 is out of range"),
        (BENCH / "no_such_file.json", None, "cannot read benchmark result"),
    ],
)
def test_choosing_one_run_errors(path, index, error):
    with pytest.raises(ConfigError, match=error):
        load_bench_result(path, index=index)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({}, "Keys seen: \\[\\]"),
        ({"throughput": 12.0, "latency_ms": 3.0}, "Keys seen: \\[latency_ms, throughput\\]"),
        ({"benchmarks": [{"name": "x"}]}, "Keys seen: \\[benchmarks\\]"),
        ("{not json", "neither JSON nor JSON lines"),
        ('{"a": 1}\n[2]', "line 2 is not a JSON object"),
        ("[1, 2]", "JSON objects only"),
    ],
)
def test_unknown_formats_are_config_errors(data, error):
    with pytest.raises(ConfigError, match=error) as err:
        load_bench_result(data)
    if "Keys seen" in error:
        message = str(err.value)
        for name in ("vllm_bench_serve", "guidellm", "genai_perf"):
            assert name in message


# ---------------------------------------------------------------------------------------------
# Variants of each format
# ---------------------------------------------------------------------------------------------


def test_vllm_goodput_under_either_spelling():
    raw = load_json_lines(VLLM_SWEEP)[0]
    old = dict(raw, **{"request_goodput:": 7.5})
    new = {k: v for k, v in raw.items() if k != "request_goodput:"} | {"request_goodput": 6.5}
    assert load_bench_result(old).goodput_requests_per_s == 7.5
    assert load_bench_result(new).goodput_requests_per_s == 6.5


def test_vllm_infinite_rate_written_as_a_json_infinity():
    raw = load_json_lines(VLLM_SWEEP)[2]
    raw["request_rate"] = math.inf
    result = load_bench_result(json.dumps(raw))  # json.dumps writes Infinity
    assert result.request_rate_per_s is None
    assert result.arrival_pattern == "unlimited"


def test_vllm_bursty_arrivals_and_extra_percentiles():
    raw = load_json_lines(VLLM_SWEEP)[1] | {"burstiness": 0.5, "p99.9_ttft_ms": 250.0}
    result = load_bench_result(raw)
    assert result.arrival_pattern == "gamma"
    assert result.metrics["ttft_seconds"].other_percentiles == {"p99.9": 0.25}


def test_genai_perf_non_streaming_run_is_flagged():
    result = load_bench_result(GENAI_NO_STREAM)
    assert "tpot_seconds" not in result.metrics
    assert any("non-streaming" in w for w in result.warnings)


def test_genai_perf_nanosecond_strings_of_early_releases():
    # Values and layout as in an early genai-perf export test (search-index file id 16125330606,
    # repository not resolved): times in "ns" as strings, "num_output_token"/"num_input_token".
    early = {
        "time_to_first_token": {
            "unit": "ns",
            "avg": "20757771.22095672",
            "p99": "29047316.52",
            "p90": "25826318.599999998",
            "p50": "20901523.0",
            "std": "4220849.59851806",
        },
        "inter_token_latency": {
            "unit": "ns",
            "avg": "3860101.1100274306",
            "p99": "5263723.220000001",
            "p90": "5036146.1",
            "p50": "3988754.5",
            "std": "1539307.1111368367",
        },
        "output_token_throughput": {"unit": "tokens per sec", "avg": "217.1010500160076"},
        "num_output_token": {"unit": "tokens", "avg": "17.763097949886106"},
        "num_input_token": {"unit": "tokens", "avg": "550.0523917995445"},
    }
    result = load_bench_result(early)
    assert result.format == "genai_perf"
    assert result.metrics["ttft_seconds"].mean == pytest.approx(0.02075777122095672)
    assert result.metrics["tpot_seconds"].p99 == pytest.approx(0.005263723220000001)
    assert result.mean_output_tokens == pytest.approx(17.763097949886106)
    assert result.mean_input_tokens == pytest.approx(550.0523917995445)
    assert result.throughput_tokens_per_s == pytest.approx(217.1010500160076)


def test_genai_perf_time_metric_without_unit_is_read_as_ms_with_a_warning():
    raw = load_json(GENAI_STREAM)
    del raw["time_to_first_token"]["unit"]
    result = load_bench_result(raw)
    assert result.metrics["ttft_seconds"].mean == pytest.approx(0.18463779366666665)
    assert any("time_to_first_token: unit 'missing'" in w for w in result.warnings)


def test_guidellm_v03_layout_args_strategy_and_worker_model():
    """GuideLLM 0.3 kept the strategy under 'args' and the model under 'worker.backend_model'
    (the layouts dagrayvid/guidellm-reports data_parsers.py reads)."""
    report = load_json(GUIDELLM)
    bench = copy.deepcopy(report["benchmarks"][0])
    config = bench.pop("config")
    bench["args"] = {"strategy": config["strategy"]}
    bench["worker"] = {"backend_model": "Qwen/Qwen3-8B", "backend_type": "openai_http"}
    result = load_bench_result({"benchmarks": [bench]})
    assert (result.model, result.backend, result.max_concurrency) == (
        "Qwen/Qwen3-8B",
        "openai_http",
        4,
    )
    assert load_bench_result(bench).metrics == result.metrics  # a bare benchmark object


def test_result_models_are_frozen_and_strict():
    result = load_bench_result(GENAI_STREAM)
    with pytest.raises(ValidationError):
        result.model = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        LatencySummary(mean=1.0, median=1.0)  # type: ignore[call-arg]
    for model in (BenchResult, LatencySummary):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"
