"""planner.verify.scoring, planner.verify.history and ``python -m planner score``.

The result files under tests/data/bench/ are public benchmark outputs (sources in
tests/test_bench_results.py). What is checked here is the comparison: that the same run is
predicted (rate or concurrency, requests, lengths, replicas), that each metric is set against the
predicted quantity with the same definition, and the arithmetic of the error; not how close the
planner's estimate is, which is the accuracy report's job.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.verify.bench_results import BenchResult, LatencySummary, load_bench_results
from planner.verify.history import (
    HistoryEntry,
    append,
    entries_from_reconciliation,
    entries_from_score,
    history_path,
    read_history,
    summarize,
)
from planner.verify.scoring import bench_with_overrides, score

BENCH = Path(__file__).parent / "data" / "bench"
SWEEP = BENCH / "vllm_nerdalert_llama32_3b_l40s_sweep.json"


def spec(name: str):
    loaded = load_config(name, prefer="catalog")
    return build_spec(loaded.config, loaded.name)


def rows(result) -> dict:
    return {(m.metric, m.statistic): m for m in result.metrics}


@pytest.fixture(scope="module")
def llama3b():
    return spec("meta-llama/Llama-3.2-3B-Instruct")


@pytest.fixture(scope="module")
def qwen8b():
    return spec("Qwen/Qwen3-8B")


L40S_X4 = Scenario(gpu="l40s", num_gpus=4, max_model_len=8192)


def test_rate_run_is_simulated_per_replica(llama3b):
    """A Poisson run at 10 req/s on 4 replicas: each replica simulated at 2.5 req/s, throughput x 4."""
    bench = load_bench_results(SWEEP)[0]
    assert bench.request_rate_per_s == 10.0 and bench.num_prompts == 300
    result = score(bench, llama3b, get_profile("l40s"), L40S_X4)
    assert result.predicted_by == "simulator" and result.prediction_label.startswith("simulated")
    assert result.workload["arrivals"] == {"kind": "poisson", "request_rate_per_s": 2.5}
    assert result.workload["num_requests_per_replica"] == 75 and result.workload["replicas"] == 4
    assert result.workload["input_tokens"] == 999 and result.workload["output_tokens"] == 270  # the run's means
    r = rows(result)
    # the file holds mean, median and p99 (no p90): exactly those rows, plus throughput
    assert {k for k in r if k[0] == "ttft_seconds"} == {("ttft_seconds", s) for s in ("mean", "p50", "p99")}
    assert ("throughput_tokens_per_s", "value") in r and ("requests_per_s", "value") in r
    for row in result.metrics:
        assert row.error_pct == pytest.approx((row.predicted - row.measured) / row.measured * 100)
    assert "excludes the first token" in result.definitions["tpot_seconds"]
    assert result.definitions["tpot_seconds"].count("excludes the first token") == 2  # tool and simulator agree
    assert any("4 replicas" in n for n in result.notes)


def test_a_rate_run_with_a_concurrency_cap_is_simulated_with_the_cap(llama3b):
    """vllm bench serve --request-rate 10 --max-concurrency 8 on 4 replicas: Poisson at 2.5 req/s, at most 2 in
    flight per replica (until 2026-12-07 the cap was dropped with a note)."""
    bench, _ = bench_with_overrides(load_bench_results(SWEEP)[0], max_concurrency=8)
    result = score(bench, llama3b, get_profile("l40s"), L40S_X4)
    assert result.workload["arrivals"] == {"kind": "poisson", "request_rate_per_s": 2.5, "max_concurrency": 2}
    assert any("at most 2 in flight per replica" in n for n in result.notes)


def test_unlimited_rate_is_a_closed_loop_as_wide_as_the_run(llama3b):
    bench = load_bench_results(SWEEP)[2]
    assert bench.arrival_pattern == "unlimited" and bench.num_prompts == 900
    result = score(bench, llama3b, get_profile("l40s"), L40S_X4)
    assert result.workload["arrivals"] == {"kind": "concurrency", "concurrency": 225}
    assert any("every request sent at t = 0" in n for n in result.notes)


def test_guidellm_definitions(qwen8b):
    """GuideLLM: ITL percentiles are per-request averages (compared with TPOT's); its TPOT includes the first token."""
    bench = load_bench_results(BENCH / "guidellm_sweep_two_strategies.json")[0]
    assert bench.arrival_pattern == "closed_loop" and bench.max_concurrency == 4
    result = score(bench, qwen8b, get_profile("h100-sxm"), Scenario(max_model_len=8192))
    assert result.workload["arrivals"] == {"kind": "concurrency", "concurrency": 4}
    r = rows(result)
    assert "per-request averages" in r[("itl_seconds", "p50")].predicted_how
    assert r[("itl_seconds", "mean")].predicted_how == "simulated itl_seconds mean"
    for stat in ("mean", "p50", "p90", "p99"):
        incl = r[("tpot_incl_first_token_seconds", stat)]
        assert incl.predicted == pytest.approx(r[("e2e_seconds", stat)].predicted / 128)
        assert "includes the first token" in incl.predicted_how
    assert "INCLUDES the TTFT" in result.definitions["tpot_incl_first_token_seconds"]


def test_genai_perf_non_streaming_ttft_is_not_compared():
    bench = load_bench_results(BENCH / "genai_perf_issue298_trtllm_non_streaming.json")[0]
    result = score(bench, spec("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm"), Scenario(max_model_len=8192))
    r = rows(result)
    assert r[("ttft_seconds", "mean")].predicted is None and r[("ttft_seconds", "mean")].error_pct is None
    assert "non-streaming" in r[("ttft_seconds", "mean")].predicted_how
    assert r[("e2e_seconds", "mean")].error_pct is not None
    assert any("non-streaming" in n for n in result.notes)


def test_genai_perf_itl_is_scored_as_tpot():
    bench = load_bench_results(BENCH / "genai_perf_issue298_trtllm_streaming.json")[0]
    result = score(bench, spec("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm"), Scenario(max_model_len=8192))
    assert ("tpot_seconds", "mean") in rows(result) and ("itl_seconds", "mean") not in rows(result)
    assert "same definition as vLLM's TPOT" in result.definitions["tpot_seconds"]


def test_no_rate_or_concurrency_is_a_static_estimate(qwen8b):
    bench = BenchResult(
        format="vllm_bench_serve",
        model="Qwen/Qwen3-8B",
        mean_input_tokens=512,
        mean_output_tokens=128,
        metrics={"tpot_seconds": LatencySummary(mean=0.01, p99=0.02), "ttft_seconds": LatencySummary(mean=0.05)},
    )
    result = score(bench, qwen8b, get_profile("h100-sxm"), Scenario(max_model_len=8192))
    assert result.predicted_by == "static_estimate" and result.workload["batch_size"] == 1
    r = rows(result)
    assert r[("tpot_seconds", "mean")].predicted > 0
    assert r[("tpot_seconds", "p99")].predicted is None
    assert "no distribution" in r[("tpot_seconds", "p99")].predicted_how
    assert any("static batch" in n for n in result.notes)


def test_overrides_win_over_the_file():
    bench = load_bench_results(SWEEP)[0]
    changed, overridden = bench_with_overrides(bench, request_rate_per_s=4.0, mean_output_tokens=None)
    assert changed.request_rate_per_s == 4.0 and changed.arrival_pattern == "poisson"
    assert overridden == {"request_rate_per_s": {"file": 10.0, "given": 4.0}}
    closed, _ = bench_with_overrides(load_bench_results(SWEEP)[2], max_concurrency=8)
    assert closed.arrival_pattern == "closed_loop" and closed.max_concurrency == 8
    with pytest.raises(TypeError):
        bench_with_overrides(bench, gpu="h100")


# ------------------------------------------------------------------------------------------ history


def test_history_append_read_summarize(tmp_path: Path, llama3b):
    path = tmp_path / "h.jsonl"
    result = score(load_bench_results(SWEEP)[0], llama3b, get_profile("l40s"), L40S_X4, engine_version="0.9.0")
    entries = entries_from_score(result, date="2025-05-30T19:47:38+00:00")
    assert len(entries) == sum(1 for m in result.metrics if m.predicted is not None)
    assert entries[0].engine_version == "0.9.0" and entries[0].card == "l40s" and entries[0].source == "score"
    append(entries, path)
    append(entries_from_score(result, date="2025-06-02T10:00:00+00:00"), path)
    with path.open("a") as handle:
        handle.write("{not json\n")
    read, skipped = read_history(path)
    assert len(read) == 2 * len(entries) and skipped == 1
    summary = summarize(path=path)
    assert summary.entries == 2 * len(entries) and summary.skipped_lines == 1
    assert [r.key["month"] for r in summary.by_month] == ["2025-05", "2025-06"]
    tpot = next(r for r in summary.by_metric if r.key == {"metric": "tpot_seconds", "statistic": "mean"})
    expected = abs(rows(result)[("tpot_seconds", "mean")].error_pct)
    assert tpot.count == 2 and tpot.median_abs_error_pct == pytest.approx(expected)
    assert tpot.first_date.startswith("2025-05") and tpot.last_date.startswith("2025-06")


def test_history_summary_arithmetic():
    def entry(error: float, date: str = "2025-01-01T00:00:00+00:00") -> HistoryEntry:
        return HistoryEntry(
            date=date,
            model="m",
            card="c",
            engine_version=None,
            source="score",
            metric="tpot_seconds",
            statistic="mean",
            unit="seconds",
            predicted=1 + error / 100,
            measured=1.0,
            error_pct=error,
            predicted_by="test",
        )

    summary = summarize([entry(e) for e in (-10.0, 5.0, 20.0, -40.0)])
    row = summary.by_metric[0]
    assert row.count == 4 and row.median_abs_error_pct == 15.0  # |errors| 5, 10, 20, 40
    assert row.p90_abs_error_pct == 40.0 and row.mean_error_pct == pytest.approx(-6.25)
    assert summary.path is None


def test_history_from_reconciliation():
    from planner.verify.reconcile import reconcile
    from planner.verify.vllm_log import parse_vllm_log

    text = (Path(__file__).parent / "data" / "logs" / "v0_pr10511_profiling_table.log").read_text()
    rec = reconcile(parse_vllm_log(text))
    entries = entries_from_reconciliation(rec, label="pr10511")
    assert {e.metric for e in entries} == {"weights", "non_torch", "activation_peak", "kv_cache_memory"}
    assert all(e.source == "reconcile" and e.unit == "bytes" for e in entries)


def test_history_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PLANNER_HISTORY_PATH", str(tmp_path / "mine.jsonl"))
    assert history_path() == tmp_path / "mine.jsonl"
    assert read_history() == ([], 0)
    monkeypatch.delenv("PLANNER_HISTORY_PATH")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert history_path() == tmp_path / "home" / ".cache" / "llm-planner" / "accuracy_history.jsonl"


# --------------------------------------------------------------------------------------------- CLI


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_score_json(capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PLANNER_HISTORY_PATH", str(tmp_path / "h.jsonl"))
    code, out, err = run_cli(
        capsys,
        "score",
        str(SWEEP),
        "--gpu",
        "l40s",
        "--num-gpus",
        "4",
        "--max-model-len",
        "8192",
        "--index",
        "0",
        "--request-rate",
        "8",
        "--record",
        "--format",
        "json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"bench_file", "runs", "median_abs_error_pct", "mismatches", "recorded_to", "calibration_used"}
    assert data["mismatches"] == []  # the file names the model it is scored on
    run = data["runs"][0]
    assert len(data["runs"]) == 1 and run["card"] == "l40s" and run["model"] == "meta-llama/Llama-3.2-3B-Instruct"
    assert run["workload"]["arrivals"]["request_rate_per_s"] == 2.0  # --request-rate 8 wins over the file's 10, / 4
    assert run["overridden"] == {"request_rate_per_s": {"file": 10.0, "given": 8.0}}
    for metric in run["metrics"]:
        assert {"metric", "statistic", "predicted", "measured", "error_pct"} <= set(metric)
    assert data["recorded_to"] == str(tmp_path / "h.jsonl") and read_history(tmp_path / "h.jsonl")[0]


def test_cli_score_applies_the_adopted_overheads(capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("PLANNER_CALIBRATION_DIR", str(tmp_path / "cal"))
    log = Path(__file__).parent / "data" / "logs" / "v0_pr10511_profiling_table.log"
    assert main(["reconcile", str(log), "--adopt", "--engine-version", "0.6.5", "--format", "json"]) == 0
    capsys.readouterr()
    code, out, err = run_cli(
        capsys,
        "score",
        str(SWEEP),
        "meta-llama/Meta-Llama-3-8B",
        "--gpu",
        "h100-sxm",
        "--max-model-len",
        "8192",
        "--index",
        "0",
        "--engine-version",
        "0.6.5",
        "--format",
        "json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["calibration_used"].startswith("memory overheads adopted for h100-sxm / vLLM 0.6.5")
    assert data["runs"][0]["scenario"]["non_torch_memory_bytes"] == pytest.approx(1.79 * 2**30, abs=2)


def test_cli_score_every_run_and_table(capsys):
    code, out, err = run_cli(
        capsys, "score", str(BENCH / "guidellm_sweep_two_strategies.json"), "--max-model-len", "8192"
    )
    assert code == 0, err
    assert "run 0 (concurrent@4)" in out and "run 1 (constant@2)" in out and "definitions" in out
    assert "does not say which card" in err


@pytest.mark.parametrize(
    ("argv", "message", "status"),
    [
        (["score", "NOFILE.json"], "cannot read benchmark result", 2),
        (["score", str(SWEEP), "--index", "99"], "out of range", 2),
        # the file names 'ensemble', looked up on the (unreachable) Hub: a runtime failure, exit 1
        (["score", str(BENCH / "genai_perf_issue298_trtllm_streaming.json")], "ensemble", 1),
    ],
)
def test_cli_score_bad_input_exits_2(capsys, argv, message, status):
    code, out, err = run_cli(capsys, *argv)
    assert code == status and out == "" and message in err and "Traceback" not in err


def test_cli_score_garbage_file(capsys, tmp_path: Path):
    path = tmp_path / "result.json"
    path.write_text("no json here")
    code, _out, err = run_cli(capsys, "score", str(path))
    assert code == 2 and "neither JSON nor JSON lines" in err


def test_cli_score_flags_a_result_file_of_another_model(capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A Llama-3.2-3B result scored against Qwen2.5-7B is flagged before any error is read (issue 10, point 1)."""
    monkeypatch.setenv("PLANNER_HISTORY_PATH", str(tmp_path / "h.jsonl"))
    code, out, err = run_cli(
        capsys, "score", str(SWEEP), "Qwen/Qwen2.5-7B", "--gpu", "l40s", "--index", "0", "--format", "json"
    )
    assert code == 0, err
    mismatches = json.loads(out)["mismatches"]
    assert [m["kind"] for m in mismatches] == ["model"]
    assert "Llama-3.2-3B" in mismatches[0]["run"] and mismatches[0]["plan"] == "Qwen/Qwen2.5-7B"
    assert "warning: not the same model" in err and "Llama-3.2-3B" in err
