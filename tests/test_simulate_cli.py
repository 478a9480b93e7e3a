"""``python -m planner simulate`` and ``slo``: JSON keys, agreement with the library, and bad flags -> exit 2.

In-process through ``planner.cli.main`` (capsys captures stdout and stderr); models come from the
bundled catalog, so nothing touches the network.
"""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.workload import FixedLength, PoissonArrivals, Workload

MODEL = "meta-llama/Llama-3.1-8B"
STAT_KEYS = {"count", "mean", "p50", "p90", "p99"}


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def json_of(capsys, argv: list[str]) -> dict:
    code, out, err = run_cli(capsys, argv + ["--format", "json"])
    assert code == 0, err
    return json.loads(out)


def test_simulate_json_has_the_vllm_bench_serve_keys(capsys):
    data = json_of(
        capsys,
        [
            "simulate",
            MODEL,
            "--qps",
            "5",
            "--num-requests",
            "200",
            "--input-len",
            "512",
            "--output-len",
            "256",
            "--max-model-len",
            "4096",
        ],
    )
    for key in ("ttft_seconds", "tpot_seconds", "itl_seconds", "e2e_seconds"):
        assert set(data[key]) >= STAT_KEYS, key
        assert data[key]["p50"] <= data[key]["p90"] <= data[key]["p99"]
    for key in (
        "throughput_tokens_per_s",
        "requests_per_s",
        "preemptions",
        "kind",
        "step_time_kind",
        "timeline",
        "scheduler",
        "num_completed",
        "model",
        "gpu_id",
    ):
        assert key in data, key
    assert data["kind"] == "simulated" and data["step_time_kind"] == "estimate"
    assert data["num_completed"] == 200 and data["output_tokens"] == 200 * 256
    assert data["gpu_id"] == "h100-sxm"


def test_simulate_matches_the_library(capsys):
    data = json_of(
        capsys,
        [
            "simulate",
            MODEL,
            "--gpu",
            "l40s",
            "--qps",
            "2",
            "--num-requests",
            "100",
            "--input-len",
            "1000",
            "--output-len",
            "100",
            "--max-model-len",
            "2048",
            "--seed",
            "3",
        ],
    )
    loaded = load_config(MODEL, prefer="catalog")
    spec = build_spec(loaded.config, loaded.name)
    workload = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=2.0),
        num_requests=100,
        input_tokens=FixedLength(tokens=1000),
        output_tokens=FixedLength(tokens=100),
        seed=3,
    )
    lib = simulate_scenario(spec, get_profile("l40s"), Scenario(gpu="l40s", max_model_len=2048), workload)
    assert data["ttft_seconds"]["p99"] == pytest.approx(lib.ttft_seconds.p99)
    assert data["tpot_seconds"]["mean"] == pytest.approx(lib.tpot_seconds.mean)
    assert data["throughput_tokens_per_s"] == pytest.approx(lib.throughput_tokens_per_s)


def test_simulate_same_seed_same_numbers_other_seed_other(capsys):
    argv = [
        "simulate",
        MODEL,
        "--qps",
        "20",
        "--num-requests",
        "150",
        "--length-dist",
        "lognormal",
        "--input-len",
        "800",
        "--input-len-std",
        "400",
        "--output-len",
        "150",
        "--output-len-std",
        "100",
        "--max-model-len",
        "8192",
    ]
    a, b = json_of(capsys, argv + ["--seed", "7"]), json_of(capsys, argv + ["--seed", "7"])
    c = json_of(capsys, argv + ["--seed", "8"])
    assert a["ttft_seconds"] == b["ttft_seconds"] and a["input_tokens"] == b["input_tokens"]
    assert a["input_tokens"] != c["input_tokens"]


def test_simulate_concurrency_trace_static_and_prefix_cache(capsys, tmp_path):
    closed = json_of(
        capsys,
        [
            "simulate",
            MODEL,
            "--concurrency",
            "8",
            "--num-requests",
            "64",
            "--input-len",
            "256",
            "--output-len",
            "64",
            "--max-model-len",
            "1024",
        ],
    )
    assert max(closed["timeline"]["running_requests"]) + max(closed["timeline"]["waiting_requests"]) <= 8
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_time_s,input_tokens,output_tokens\n0.0,100,10\n0.5,200,20\n1.0,300,30\n")
    replay = json_of(capsys, ["simulate", MODEL, "--trace", str(trace), "--max-model-len", "1024"])
    assert replay["num_completed"] == 3 and replay["output_tokens"] == 60 and replay["input_tokens"] == 600
    common = [
        "simulate",
        MODEL,
        "--concurrency",
        "32",
        "--num-requests",
        "128",
        "--input-len",
        "512",
        "--output-len",
        "128",
        "--length-dist",
        "uniform",
        "--output-len-std",
        "60",
        "--max-model-len",
        "1024",
    ]
    static = json_of(capsys, common + ["--static"])
    cont = json_of(capsys, common)
    assert static["mode"] == "static" and cont["mode"] == "continuous"
    assert cont["throughput_tokens_per_s"] > static["throughput_tokens_per_s"]
    long_prompts = [
        "simulate",
        MODEL,
        "--qps",
        "1",
        "--num-requests",
        "30",
        "--input-len",
        "4000",
        "--output-len",
        "16",
        "--max-model-len",
        "8192",
    ]
    cached = json_of(capsys, long_prompts + ["--prefix-cache-hit-rate", "0.75"])
    cold = json_of(capsys, long_prompts)
    assert cached["ttft_seconds"]["p50"] < 0.5 * cold["ttft_seconds"]["p50"]


def test_simulate_table_is_readable(capsys):
    code, out, err = run_cli(
        capsys, ["simulate", MODEL, "--qps", "4", "--num-requests", "100", "--max-model-len", "4096"]
    )
    assert code == 0, err
    for text in (
        "TTFT (queueing included)",
        "TPOT",
        "ITL",
        "P99",
        "output throughput",
        "preemptions",
        "simulated (estimate step times)",
        "28,",
    ):
        assert text in out, text


def test_slo_json_and_table(capsys):
    argv = [
        "slo",
        MODEL,
        "--qps",
        "20",
        "--p99-ttft",
        "1.0",
        "--p99-tpot",
        "0.05",
        "--gpus",
        "h100-sxm,l40s",
        "--tp",
        "1,2",
        "--weight-dtypes",
        "auto,fp8",
        "--requests-per-probe",
        "200",
    ]
    data = json_of(capsys, argv)
    for key in (
        "recommendation",
        "candidates",
        "pareto",
        "ranked_by",
        "slo",
        "target_rate_per_s",
        "kind",
        "step_time_kind",
        "notes",
        "search_seconds",
    ):
        assert key in data, key
    best = data["recommendation"]
    assert best["status"] == "meets" and best["replicas"] >= 1 and best["usd_per_hour"] > 0
    assert len(data["candidates"]) == 8
    assert {
        "usd_per_1m_input_tokens",
        "usd_per_1m_output_tokens",
        "energy_kwh_per_1m_output_tokens_upper_bound",
    } <= set(best)
    code, out, err = run_cli(capsys, argv)
    assert code == 0, err
    for text in (
        "recommended",
        "deployment",
        "/hour;",
        "per 1M output tokens",
        "upper bound",
        "candidates",
        "Pareto front",
        "not-cheaper",
        best["label"],
    ):
        assert text in out, text


def test_slo_infeasible_is_a_result_not_an_error(capsys):
    data = json_of(
        capsys,
        [
            "slo",
            "meta-llama/Llama-3.1-70B",
            "--qps",
            "5",
            "--p99-tpot",
            "0.01",
            "--gpus",
            "l40s",
            "--tp",
            "2,4",
            "--weight-dtypes",
            "fp8",
        ],
    )
    assert data["recommendation"] is None
    assert all(c["status"] == "fails-slo" and "cannot be met at any rate" in c["reason"] for c in data["candidates"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", MODEL, "--trace", "t.csv", "--concurrency", "4"], "--trace gives the arrivals itself"),
        (["simulate", MODEL, "--qps", "5", "--trace", "t.csv"], "not allowed with argument"),
        (["simulate", MODEL, "--qps", "0"], "--qps must be greater than 0 (got 0); allowed: > 0"),
        (["simulate", MODEL, "--qps", "inf"], "--concurrency N instead of an infinite rate"),
        (["simulate", MODEL, "--input-len-std", "100"], "needs a length distribution, but --length-dist is fixed"),
        (["simulate", MODEL, "--input-len", "512.5"], "a fixed length is a whole number of tokens"),
        (["simulate", MODEL, "--length-dist", "zipf"], "invalid choice: 'zipf'"),
        (["simulate", MODEL, "--prefix-cache-hit-rate", "1.5"], "less than or equal to 1"),
        (["simulate", MODEL, "--trace", "/nonexistent/trace.csv"], "trace file /nonexistent/trace.csv does not exist"),
        (["simulate", MODEL, "--num-requests", "abc"], "invalid int value: 'abc'"),
        (["simulate", "meta-llama/Llama-3.1-70B", "--gpu", "l40s", "--max-model-len", "4096"], "does not start"),
        (
            ["simulate", MODEL, "--max-num-seqs", "512", "--max-num-batched-tokens", "256", "--max-model-len", "4096"],
            "max_num_batched_tokens=256 is below max_num_seqs=512",
        ),
        (["slo", MODEL, "--qps", "5"], "no SLO target given"),
        (["slo", MODEL, "--p99-ttft", "1"], "one of the arguments --qps/--request-rate --trace is required"),
        (["slo", MODEL, "--qps", "5", "--p99-ttft", "1", "--tp", "1,x"], "'x' is not an integer"),
        (["slo", MODEL, "--qps", "5", "--p99-ttft", "-1"], "greater than 0"),
        (["slo", MODEL, "--qps", "5", "--p99-ttft", "1", "--concurrency", "4"], "unrecognized arguments"),
        (["slo", MODEL, "--qps", "5", "--p99-ttft", "1", "--input-len", "300000"], "allows 131,072"),
    ],
)
def test_bad_flags_exit_2_with_a_clear_error(capsys, argv, message):
    code, out, err = run_cli(capsys, argv)
    assert code == 2, (out, err)
    assert out == ""
    assert "error:" in err and message in err, err
    assert "Traceback" not in err
