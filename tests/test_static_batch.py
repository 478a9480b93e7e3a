"""Static-batch latency records (reference/static_batch_latency.json) and their predictions.

Loading (schema, citations, no forbidden source), expressing (scenario, engine profile, prefill
budget), predicting (the same numbers as ``estimate_latency``, the decode split adding up) and
the reasons a record is set aside, as a table with an expected-reason column.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest

from planner.estimate.latency import estimate_latency
from planner.verify import static_batch
from planner.verify.static_batch import (
    REFERENCE_PATH,
    StaticBatchRecord,
    Unexpressed,
    evaluate,
    express,
    load_records,
    predict,
)
from tests.scripts import load_script

FORBIDDEN_SOURCE_PATTERNS = ("inference-sim",)


@pytest.fixture(scope="module")
def records() -> list[StaticBatchRecord]:
    return load_records()


@pytest.fixture(scope="module")
def report():
    return evaluate()


def _record(**changes) -> StaticBatchRecord:
    """The first record of the file (Mixtral-8x22B, A100-80G, TP4, batch 8, 32/128) with ``changes``."""
    base = json.loads(REFERENCE_PATH.read_text())[0]
    return StaticBatchRecord(index=0, **{**base, **changes})


# ------------------------------------------------------------------------------ loading


def test_enough_records_from_enough_threads(records):
    assert len(records) >= 8
    assert len({r.thread for r in records}) >= 3


def test_every_source_cites_a_thread_and_none_is_forbidden(records):
    for r in records:
        assert r.source.startswith("https://github.com/"), r.source
        assert r.thread.count("#") == 1, r.thread
        assert not any(p in r.source.lower() or p in r.notes.lower() for p in FORBIDDEN_SOURCE_PATTERNS), r.source


def test_values_are_positive_seconds_and_lengths_match_the_command(records):
    for r in records:
        assert r.metric == "avg_latency_s"
        assert 0 < r.value < 600 and math.isfinite(r.value)
        assert r.n_gpus == r.tp
        if "--input-len" in r.command:  # stated lengths are the record's; else the script's defaults are assumed
            assert f"--input-len {r.input_len}" in r.command and f"--output-len {r.output_len}" in r.command
        else:
            assert (r.input_len, r.output_len) == (32, 128)
            assert any("32/128" in a for a in r.assumed)


def test_no_duplicate_measurement(records):
    keys = [(r.source, r.value) for r in records]
    assert len(keys) == len(set(keys))


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(Exception, match="does not exist"):
        load_records(tmp_path / "none.json")


# ---------------------------------------------------------------------------- expressing


def test_every_record_is_predicted_or_set_aside_with_a_reason(records, report):
    assert len(report.predictions) + len(report.unexpressed) == len(records) == report.total_records
    indices = [p.index for p in report.predictions] + [u.index for u in report.unexpressed]
    assert sorted(indices) == list(range(len(records)))
    assert all(u.reason for u in report.unexpressed)
    assert len(report.predictions) >= 8


def test_scenario_follows_the_record():
    e = express(_record())
    assert not isinstance(e, Unexpressed)
    assert e.sc.engine_version == "vllm@0.4.0" and e.sc.tp == 4 and e.hw.id == "a100-80gb"
    assert e.repo_id.startswith("mistralai/Mixtral-8x22B")
    assert e.sc.max_num_batched_tokens == 8 * 32  # the whole batch fits V0's budget: one prefill step


def test_v0_prefill_budget_is_the_model_context():
    """Llama-2-70B (4,096-token context): 64 x 256 prompt tokens take 4 prefill steps of 4,096."""
    e = express(
        _record(checkpoint="meta-llama/Llama-2-70b-hf", batch=64, input_len=256, output_len=256, vllm_version="0.3.0")
    )
    assert not isinstance(e, Unexpressed)
    assert e.sc.max_num_batched_tokens == 4096
    assert predict(e).prefill_steps == 4


@pytest.mark.parametrize(
    "changes, reason_kind, phrase",
    [
        ({}, None, None),
        ({"checkpoint": "databricks/dbrx-instruct"}, "model not in catalog", "dbrx-instruct"),
        ({"gpu": "T4"}, "GPU not profiled", "'T4'"),
        ({"gpu": "A30"}, "GPU not profiled", "'A30'"),
        ({"not_in_release": "a PR's unmerged kernel config"}, "engine not a profiled release", "unmerged"),
        ({"checkpoint": "meta-llama/Llama-3.1-405B", "tp": 1, "n_gpus": 1}, "planner refused", "does not start"),
    ],
)
def test_reasons_a_record_is_set_aside(changes, reason_kind, phrase):
    out = express(_record(**changes))
    if reason_kind is None:
        assert not isinstance(out, Unexpressed)
        return
    assert isinstance(out, Unexpressed), out
    assert out.reason_kind == reason_kind
    assert phrase in out.reason


def test_reference_file_reasons_are_the_documented_ones(report):
    kinds = {u.reason_kind for u in report.unexpressed}
    assert kinds <= {"model not in catalog", "GPU not profiled", "engine not a profiled release", "planner refused"}
    by_model = {u.model: u.reason_kind for u in report.unexpressed}
    assert by_model["databricks/dbrx-instruct"] == "model not in catalog"


# ---------------------------------------------------------------------------- predicting


def test_prediction_is_estimate_latency(records):
    """No second latency formula: the predicted seconds are estimate_latency's e2e, the decode split sums to TPOT."""
    e = express(records[0])
    assert not isinstance(e, Unexpressed)
    p = predict(e)
    est = estimate_latency(e.model, e.hw, e.sc, 8, 32, 128)
    assert p.predicted_seconds == pytest.approx(est.e2e_seconds, rel=1e-12)
    assert p.predicted_seconds == pytest.approx(p.ttft_seconds + 127 * p.tpot_seconds, rel=1e-9)
    assert sum(p.decode_seconds_by_bound.values()) == pytest.approx(p.tpot_seconds, rel=1e-9)
    assert p.engine_profile == "vllm-legacy"
    assert p.error_pct == pytest.approx((p.predicted_seconds - p.measured_seconds) / p.measured_seconds * 100)


def test_latency_grows_with_batch(report):
    """Same thread, card, TP and lengths: a larger batch never finishes sooner."""
    groups: dict[tuple, list] = {}
    for p in report.predictions:
        groups.setdefault((p.thread, p.gpu, p.tp, p.input_len, p.output_len, p.engine_version), []).append(p)
    checked = 0
    for rows in groups.values():
        rows.sort(key=lambda p: p.batch)
        for a, b in itertools.pairwise(rows):
            if a.batch < b.batch:
                assert a.predicted_seconds < b.predicted_seconds
                checked += 1
    assert checked >= 5


def test_summaries_cover_every_prediction(report):
    assert sum(g.count for g in report.by_engine_profile) == len(report.predictions)
    assert sum(g.count for g in report.by_thread) == len(report.predictions)
    for g in report.by_engine_profile + report.by_thread:
        assert 0 <= g.median_abs_error_pct <= g.max_abs_error_pct
        assert 0 <= g.within_target <= g.count


def test_report_script_prints_one_json_line(capsys):
    module = load_script("benchmarks/static_batch_accuracy.py")
    assert module.main([]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads(last)
    assert summary["records"] == len(load_records())
    assert set(summary["by_engine_profile"]) == {g.group for g in static_batch.evaluate().by_engine_profile}
