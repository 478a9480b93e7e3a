"""planner.verify.public_records: published measurements expressed as planner predictions.

Known values come from ../shared/reference/measured_public.json (schema and sources in
../shared/reference/README.md); records are found by their fields, not their position, so a
corrected reference file does not silently point a test at another record.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from planner.efficiency import BOUND
from planner.errors import PlannerError
from planner.estimate.defaults import FITTED
from planner.estimate.latency import estimate_latency
from planner.estimate.roofline import roofline
from planner.verify.public_records import PublicRecord, load_records, match_gpu, reference_dir
from planner.verify.public_records_express import VIDUR_LINEAR_OPS, Expressed, Unexpressed, express, express_all
from planner.verify.public_records_predict import (
    MemoryPrediction,
    OpsPrediction,
    ServingPrediction,
    StepOpsBatch,
    ThroughputPrediction,
    TTFTPrediction,
    step_ops,
)
from planner.verify.public_records_report import evaluate, fast_subset

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def records() -> list[PublicRecord]:
    return load_records()


@pytest.fixture(scope="module")
def fast_report():
    return evaluate(fast=True)


def _matches(record: PublicRecord, key: str, value) -> bool:
    if key.endswith("__has"):
        return value in str(getattr(record, key.removesuffix("__has")))
    if isinstance(value, str) and value.endswith("*"):
        return str(getattr(record, key)).startswith(value[:-1])
    return getattr(record, key) == value


def find(records: list[PublicRecord], **conditions) -> PublicRecord:
    """The first record matching every condition: equal, a prefix ('text*'), or a substring (field__has=)."""
    for r in records:
        if all(_matches(r, k, v) for k, v in conditions.items()):
            return r
    raise AssertionError(f"no record with {conditions}")


def expressed(record: PublicRecord) -> Expressed:
    out = express(record)
    assert isinstance(out, Expressed), getattr(out, "reason", out)
    return out


# ------------------------------------------------------------------------------------ loading


def test_reference_file_loads_every_record(records):
    assert len(records) == len(json.loads((reference_dir() / "measured_public.json").read_text()))
    assert [r.index for r in records] == list(range(len(records)))


def test_missing_reference_folder_says_where_to_put_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PLANNER_REFERENCE_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(PlannerError, match="PLANNER_REFERENCE_DIR"):
        load_records()


# ------------------------------------------------------------------------- expressed records


def test_startup_log_weights_within_3_percent(records):
    # vllm-project/vllm#10517: 'Loading model weights took 14.9888 GB' (GiB) for Llama-3.1-8B-Instruct, bf16.
    r = find(records, model="meta-llama/Llama-3.1-8B-Instruct", metric="model_weights_gib")
    e = expressed(r)
    assert isinstance(e.prediction, MemoryPrediction)
    assert e.predict(FITTED) == pytest.approx(r.value, rel=0.03)
    # vllm-project/vllm#12569: 67.7229 GiB of W8A8 int8 70B weights (the card is not stated; weights do not need it).
    r = find(records, model="neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", metric="model_weights_gib")
    assert expressed(r).predict(FITTED) == pytest.approx(r.value, rel=0.03)


def test_static_batch_record_maps_to_its_scenario(records):
    # TRT-LLM v0.5 'High Throughput' table: Llama-2-7B, H100, FP8 weights + FP8 KV, batch 64, 128 in / 128 out.
    r = find(records, model="Llama-2-7B", gpu="H100-SXM-80GB", batch_or_concurrency=64, input_len=128, output_len=128)
    e = expressed(r)
    assert e.repo_id == "meta-llama/Llama-2-7b-hf" and e.gpu_id == "h100-sxm"
    assert isinstance(e.prediction, ThroughputPrediction) and len(e.prediction.batches) == 1
    b = e.prediction.batches[0]
    assert (b.batch, b.input_len, b.output_len, b.steps) == (64, 128, 128, 1)
    assert (b.sc.tp, b.sc.weight_dtype, b.sc.kv_cache_dtype, b.sc.gpu) == (1, "fp8", "fp8", "h100-sxm")


def test_max_throughput_record_tries_the_largest_batches_that_fit(records):
    r = find(
        records,
        model="Llama-3.1-8B",
        gpu="H200-SXM-141GB",
        input_len=128,
        output_len=128,
        metric="output_throughput_total",
    )
    e = expressed(r)
    p = e.prediction
    assert isinstance(p, ThroughputPrediction) and not p.per_gpu
    sizes = [b.batch for b in p.batches]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] <= 4096
    assert p.predict(FITTED) == max(b.tokens_per_s(FITTED) for b in p.batches)


def test_per_gpu_record_divides_by_the_gpus(records):
    r = find(records, model="Llama-3.3-70B-Instruct", metric="output_throughput_per_gpu", tp=2, gpu="H200-SXM-141GB")
    p = expressed(r).prediction
    assert p.per_gpu and p.batches[0].sc.total_gpus == 2
    assert p.predict(FITTED) == pytest.approx(max(b.tokens_per_s(FITTED) for b in p.batches) / 2)


def test_vidur_linear_ops_are_the_layer_projections(records):
    r = find(records, model="Llama-2-7b-hf", gpu="A100-80GB*", tp=1, batch_or_concurrency="1 tokens*")
    p = expressed(r).prediction
    assert isinstance(p, OpsPrediction)
    assert sorted(op.name for op in p.ops) == sorted(VIDUR_LINEAR_OPS)
    assert all(op.gemm_m_tokens in (1, None) for op in p.ops)


def test_allreduce_record_carries_the_message(records):
    r = find(
        records, metric="all_reduce_time_median", gpu="H100-SXM DGX*", tp=8, batch_or_concurrency="message = 33554432*"
    )
    p = expressed(r).prediction
    assert p.tp == 8 and p.ops[0].comm_bytes == 33554432 * 2


def test_serving_record_is_simulated_at_its_rate(records):
    r = find(records, engine="SGLang*", qps=4, metric="median_tpot", model="Llama-3.1-8B-Instruct")
    p = expressed(r).prediction
    assert isinstance(p, ServingPrediction)
    assert p.run.workload.arrivals.request_rate_per_s == 4 and p.run.workload.num_requests == 1200
    assert 0 < p.predict(FITTED) < 1000  # ms per output token


def test_ttft_record_is_a_prefill(records):
    r = find(
        records, metric="ttft (first token latency = prefill)", model="Llama-2-7B", gpu="H100-SXM-80GB", input_len=2048
    )
    p = expressed(r).prediction
    assert isinstance(p, TTFTPrediction) and p.batch.batch == 1 and p.batch.input_len == 2048


# ----------------------------------------------------------------------- unexpressed records

UNEXPRESSED_CASES = [
    # (conditions, expected reason category, phrase of the reason)
    (dict(model="GPT-J-6B", metric="output_throughput_total"), "model not in catalog", "GPT-J-6B"),
    (dict(model="Llama-4-Scout-17B-16E (MoE)"), "model not in catalog", "Llama-4-Scout"),
    (dict(notes__has="Parallelism: DEP4", model="DeepSeek-R1*"), "parallelism not modelled", "DEP4"),
    (
        dict(engine="vLLM v0.5.4 (chunked prefill on, scheduler steps N/A)"),
        "flagged INCOMPLETE/AMBIGUOUS",
        "GPU type inferred",
    ),
    (
        dict(
            metric="median_itl",
            engine="vLLM v0.6.0 (--num-scheduler-steps 10, max_model_len 4096, gpu_memory_utilization 0.9)",
        ),
        "metric not modelled",
        "multi-step",
    ),
    (
        dict(model="Llama-2-70B", tp="max TP/PP/DP config (not specified)"),
        "flagged INCOMPLETE/AMBIGUOUS",
        "parallelism",
    ),
    (
        dict(model="neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", metric="num_gpu_blocks"),
        "flagged INCOMPLETE/AMBIGUOUS",
        "GPU model not stated",
    ),
    (dict(model="Llama-3.3-70B-Instruct", notes__has="Parallelism: TP1,PP2"), "parallelism not modelled", "PP2"),
    # The same pipeline-parallel row moved to another profiled card: the parallelism is still the reason.
    (
        dict(model="Llama-3.3-70B-Instruct", notes__has="Parallelism: TP1,PP2", _as_gpu="B200-180GB"),
        "parallelism not modelled",
        "PP2",
    ),
]


@pytest.mark.parametrize("conditions, kind, phrase", UNEXPRESSED_CASES)
def test_unexpressed_records_carry_their_reason(records, conditions, kind, phrase):
    conditions = dict(conditions)
    as_gpu = conditions.pop("_as_gpu", None)
    record = find(records, **conditions)
    if as_gpu:
        record = record.model_copy(update={"gpu": as_gpu})
    out = express(record)
    assert isinstance(out, Unexpressed)
    assert out.reason_kind == kind
    assert phrase in out.reason


def test_every_record_is_expressed_or_explained(records):
    subset = fast_subset(records)
    done, missing = express_all(subset)
    assert len(done) + len(missing) == len(subset)
    assert {e.record.index for e in done}.isdisjoint({u.index for u in missing})
    assert all(u.reason.strip() and u.reason_kind for u in missing)


# ------------------------------------------------------------------------------ the report


def test_report_counts_add_up(fast_report):
    r = fast_report
    assert r.fast and r.total_records == r.expressed + r.unexpressed_count == len(r.results) + len(r.unexpressed)
    assert sum(s.count for s in r.summaries) <= r.expressed
    assert sum(r.reasons.values()) == r.unexpressed_count
    for s in r.summaries:
        assert s.count >= 1 and 0 <= s.median_abs_error_pct <= s.p90_abs_error_pct + 1e-9
        assert len(s.worst) == min(5, s.count)


def test_fitted_defaults_beat_the_bare_roofline(fast_report):
    bound = evaluate(efficiency=BOUND, fast=True)
    assert fast_report.median_abs_error_pct < bound.median_abs_error_pct
    assert fast_report.p90_abs_error_pct < bound.p90_abs_error_pct


def test_fast_run_finishes_quickly():
    t0 = time.perf_counter()
    evaluate(fast=True)
    assert time.perf_counter() - t0 < 30


def test_cli_prints_the_report_as_json():
    out = subprocess.run(
        [sys.executable, "-m", "planner", "accuracy", "--fast", "--format", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["total_records"] == data["expressed"] + data["unexpressed_count"]
    assert {"summaries", "unexpressed", "reasons"} <= set(data)


# -------------------------------------------------------------- the fast paths agree with the core


def test_cached_static_batches_equal_estimate_latency(records):
    subset = fast_subset(records)
    done, _ = express_all(subset)
    checked = 0
    for e in done:
        p = e.prediction
        batches = (
            p.batches[:1] if isinstance(p, ThroughputPrediction) else [p.batch] if isinstance(p, TTFTPrediction) else []
        )
        for b in batches:
            for eff in (FITTED, BOUND):
                ref = estimate_latency(
                    b.model,
                    b.hw,
                    b.sc,
                    batch_size=b.batch,
                    input_len=b.input_len,
                    output_len=b.output_len,
                    efficiency=eff,
                    check_memory=False,
                )
                assert b.tokens_per_s(eff) == pytest.approx(ref.throughput_tokens_per_s, rel=1e-9)
                assert b.ttft_seconds(eff) == pytest.approx(ref.ttft_seconds, rel=1e-9)
            checked += 1
    assert checked > 50
    b = batches[0] if batches else None
    if b is not None:  # one step against the roofline itself
        step = roofline(b.model, b.hw, b.sc, "decode", b.batch, b.input_len + max(1, b.output_len // 2), FITTED)
        assert b.tpot_seconds(FITTED) == pytest.approx(step.total_seconds, rel=1e-12)


def test_vectorized_step_times_equal_the_reference(records):
    done, _ = express_all(fast_subset(records))
    works = step_ops([e.prediction for e in done])
    batch = StepOpsBatch(works)
    for eff in (FITTED, BOUND):
        for w in works:
            w._memo = None
        reference = np.array([w.seconds(eff) for w in works])
        assert np.allclose(batch.prime(eff), reference, rtol=1e-12)


@pytest.mark.parametrize(
    ("published", "profile"),
    [
        ("H100 SXM 80GB", "h100-sxm"),
        ("H100-80GB", "h100-sxm"),
        ("H100 PCIe 80GB", "h100-pcie"),
        ("H100 NVL 95GB", "h100-nvl"),
        ("A100-SXM4-80GB", "a100-80gb"),
        ("A100-80G", "a100-80gb"),
        ("A100 SXM 40GB", "a100-40gb"),
        ("A100 PCIe 80GB", "a100-pcie-80gb"),
        ("A100 PCIe 40GB", None),
        ("H20 96GB", "h20"),
        ("H20-3e 141GB", None),
    ],
)
def test_a_printed_card_variant_picks_its_own_profile(published, profile):
    """A variant the source names is never read as its family's other card: an H100 PCIe is not timed as the
    SXM card, a 141 GB H20 is not planned with 96 GB, and a variant without a profile says so (None)."""
    assert match_gpu(published) == (True, profile)
