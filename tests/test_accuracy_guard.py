"""CI guard: the planner's accuracy on published measurements must not regress.

Two fast runs, each against the medians recorded in ``tests/golden/accuracy_guard.json``:

* ``public``: ``planner.verify.public_records_report.evaluate(fast=True)``, per source family and metric
  (TensorRT-LLM tables, Vidur per-op timings, vLLM/SGLang serving sweeps, startup logs);
* ``vllm_v0.15``: the open-loop vLLM 0.15.1 runs (``planner.verify.serving_runs``) simulated with
  the fitted vllm-v1-async profile, per metric (mean TPOT, E2E, TTFT);
* ``corpus``: every other run of the public serving corpus (``planner.verify.serving_corpus``:
  vLLM V1, SGLang, TensorRT-LLM; bursts, concurrency caps and rates) simulated with each engine
  profile's fitted factors, per engine family and metric with at least ``CORPUS_MIN_RECORDS`` records.

A family whose median |error| rises more than ``TOLERANCE_POINTS`` above its recorded value fails
the test. After an intended improvement, record the new values with
``PLANNER_RECORD_ACCURACY=1 python -m pytest -q tests/test_accuracy_guard.py`` and commit the file
with the change that earned them.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest

from planner.verify import serving_corpus, static_batch
from planner.verify.public_records_report import evaluate
from planner.verify.serving_runs import METRICS, load_runs, stage_predictions

GOLDEN = Path(__file__).parent / "golden" / "accuracy_guard.json"
TOLERANCE_POINTS = 2.0
REQUESTS_PER_STAGE = 100
CORPUS_STRIDE = 1  # the whole corpus (~15 s): a sample moved its medians whenever a run was added
CORPUS_MIN_RECORDS = 3
RECORD = os.environ.get("PLANNER_RECORD_ACCURACY") == "1"


def _recorded(section: str) -> dict[str, float]:
    if not GOLDEN.exists():
        return {}
    return json.loads(GOLDEN.read_text()).get(section, {})


def _record(section: str, values: dict[str, float]) -> None:
    data = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    data[section] = {k: round(v, 1) for k, v in sorted(values.items())}
    data["tolerance_points"] = TOLERANCE_POINTS
    GOLDEN.write_text(json.dumps(data, indent=1) + "\n")


def _check(section: str, now: dict[str, float]) -> None:
    if RECORD:
        _record(section, now)
        return
    recorded = _recorded(section)
    assert recorded, f"no recorded accuracy for {section}: run with PLANNER_RECORD_ACCURACY=1 once"
    missing = sorted(set(recorded) - set(now))
    assert not missing, f"families no longer predicted: {missing}"
    worse = {
        k: (recorded[k], round(v, 1)) for k, v in now.items() if k in recorded and v > recorded[k] + TOLERANCE_POINTS
    }
    assert not worse, f"median |error| regressed by more than {TOLERANCE_POINTS} points (recorded, now): {worse}"


def test_public_records_do_not_regress():
    report = evaluate(fast=True)
    now = {
        f"{s.family} / {s.metric}": s.median_abs_error_pct
        for s in report.summaries
        if s.median_abs_error_pct is not None
    }
    _check("public", now)


def test_public_corpus_does_not_regress():
    expressed, _ = serving_corpus.express_all(serving_corpus.load_all())
    runs = serving_corpus.subsample(expressed, CORPUS_STRIDE)
    preds = [p for run in runs for p in serving_corpus.predict(run)]
    # expert-parallel runs are guarded apart ("+ EP"): they came in with expert parallelism and must not move
    # the TP-only families' medians by joining them
    now = {}
    for suffix, group in (
        ("", [p for p in preds if not p.expert_parallel]),
        (" + EP", [p for p in preds if p.expert_parallel]),
    ):
        for s in serving_corpus.summarize(group):
            if s.count >= CORPUS_MIN_RECORDS:
                now[f"{s.family}{suffix} / {s.metric}"] = s.median_abs_error_pct
    assert len(now) >= 8, f"too few engine families and metrics predicted on the corpus: {sorted(now)}"
    _check("corpus", now)


def test_static_batch_does_not_regress():
    """vLLM benchmark_latency static batches (reference/static_batch_latency.json), per engine profile and thread."""
    report = static_batch.evaluate()
    now = {f"profile {g.group}": g.median_abs_error_pct for g in report.by_engine_profile}
    now.update({f"thread {g.group}": g.median_abs_error_pct for g in report.by_thread})
    assert len(report.predictions) >= 8, f"too few static-batch records predicted: {len(report.predictions)}"
    _check("static_batch", now)


@pytest.mark.parametrize("metric", METRICS)
def test_vllm_v015_runs_do_not_regress(metric, vllm015_predictions):
    errs = [abs(p.error(metric)) * 100 for p in vllm015_predictions]
    _check(f"vllm_v0.15_{metric}", {"median": statistics.median(errs)})


@pytest.fixture(scope="module")
def vllm015_predictions():
    preds = []
    for run in load_runs():
        out = stage_predictions(run, None, REQUESTS_PER_STAGE)
        if not isinstance(out, str):
            preds += [p for p in out if not p.unmodelled]  # stages with an unmodelled server flag are not scored
    assert len(preds) >= 10
    return preds
