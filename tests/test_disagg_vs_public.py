"""benchmarks/disagg_vs_public.py on its record (vLLM PR #18242's 1P1D run): it runs offline, predicts every
figure the record gives, and its arrivals and KV transfer follow the arithmetic it states."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/disagg_vs_public.py")


def test_arrivals_are_vllm_bench_burstiness(bench, tmp_path):
    """Gamma gaps of shape 100 and mean 1/3.6 s, the first request at t = 0: coefficient of variation 0.1."""
    lines = bench.burst_trace(tmp_path / "t.csv").read_text().splitlines()
    assert lines[0] == "arrival_time_s,input_tokens,output_tokens"
    times = np.array([float(line.split(",")[0]) for line in lines[1:]])
    assert len(times) == bench.NUM_PROMPTS and times[0] == 0.0
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(1 / bench.REQUEST_RATE, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(bench.BURSTINESS), rel=0.25)
    assert {line.split(",", 1)[1] for line in lines[1:]} == {f"{bench.INPUT_TOKENS},{bench.OUTPUT_TOKENS}"}


def test_runs_on_the_record_and_reports_every_figure(bench, capsys):
    assert bench.main() == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    rows = summary["disagg_vs_public"]
    assert [r["metric"] for r in rows] == [f"{stat} {metric.upper()}" for metric, stat in bench.MEASURED_MS]
    for row in rows:
        assert row["measured_ms"] == bench.MEASURED_MS[(row["metric"].split()[1].lower(), row["metric"].split()[0])]
        assert np.isfinite(row["predicted_ms"]) and row["predicted_ms"] > 0
        assert row["error_pct"] == pytest.approx((row["predicted_ms"] / row["measured_ms"] - 1) * 100, abs=0.1)
    assert summary["completed"] == bench.NUM_PROMPTS
    assert "vllm-project/vllm/pull/18242" in summary["source"]


def test_ttft_includes_the_nvlink_transfer(bench, tmp_path):
    """Each request's KV (8,000 tokens x Llama-3.1-8B's 128 KiB a token at TP 1) crosses NVLink at the stated
    efficiency, and the mean TTFT holds the prefill, that transfer and the decode instance's first step."""
    run = bench.simulate(bench.burst_trace(tmp_path / "t.csv"))
    kv_per_token = 32 * 2 * 8 * 128 * 2  # layers x (K, V) x KV heads x head dim x bf16 bytes
    assert run.kv_transfer_bytes_per_gpu_mean == pytest.approx(bench.INPUT_TOKENS * kv_per_token, rel=1e-6)
    from planner.hardware import get_profile
    from planner.serve.disagg import KV_LINKS

    link = KV_LINKS["nvlink"]
    expected = run.kv_transfer_bytes_per_gpu_mean / link.bytes_per_s(get_profile("h100-sxm")) + link.latency_seconds
    assert run.kv_transfer_seconds.mean == pytest.approx(expected, rel=1e-6)
    parts = run.prefill_queue_seconds.mean + run.kv_transfer_seconds.mean + run.decode_queue_seconds.mean
    assert run.ttft_seconds.mean == pytest.approx(parts, rel=1e-6)
