"""The vLLM 0.15 fit's objective gives each model one vote (benchmarks/serving_accuracy.py).

The folds of its cross-validation leave whole models out, so neither the API server's time per request
(fitted in closed form) nor the grid's loss may let a model measured at more rates outvote the others:
before 2026-12-04 every stage voted, and Llama-4-Scout's five stages (of sixteen) set the API-server time
of every fold they were in (docs/calibration.md).
"""

from __future__ import annotations

import math

import pytest

from planner.verify.serving_runs import StagePrediction
from tests.scripts import load_script


@pytest.fixture(scope="module")
def fit():
    return load_script("benchmarks/serving_accuracy.py")


def stage(model: str, ttft_gap_ms: float, error: float = 0.0) -> StagePrediction:
    """A stage whose predicted TTFT is ``ttft_gap_ms`` below the measured one and whose TPOT and E2E are off by
    ``error`` (predicted / measured - 1)."""
    return StagePrediction(
        run_id=model,
        model=model,
        tp=1,
        rate_rps=1.0,
        predicted_ms={"ttft": 20.0, "tpot": 10.0 * (1 + error), "e2e": 1000.0 * (1 + error)},
        measured_ms={"ttft": 20.0 + ttft_gap_ms, "tpot": 10.0, "e2e": 1000.0},
    )


def test_the_api_server_time_is_the_median_model_not_the_median_stage(fit):
    # five stages of one model 30 ms behind, one stage each of three models 10-12 ms behind
    preds = [stage("scout", 30.0)] * 5 + [stage("a", 10.0), stage("b", 11.0), stage("c", 12.0)]
    assert fit.frontend_seconds(preds, lambda m: True) == pytest.approx(0.0115)  # median of 30, 10, 11, 12
    # stage votes would have taken the heavy model's 30 ms (median of 8 stages: 30)
    assert fit.frontend_seconds(preds, lambda m: m != "scout") == pytest.approx(0.011)
    assert fit.frontend_seconds([stage("a", -5.0)], lambda m: True) == 0.0  # never negative
    assert fit.frontend_seconds([stage("a", 500.0)], lambda m: True) == fit.FRONTEND_MAX_SECONDS


def test_the_grid_loss_weighs_models_not_stages(fit):
    """Ten stages of a model 20% off and one stage of a model exact: the loss is the two models' mean."""
    off = [stage("many", 0.0, error=0.2)] * 10
    exact = [stage("one", 0.0)]
    many = 2 * math.log(1.2) / 3  # TPOT and E2E off, TTFT exact (every gap is 0 ms: no API-server shift)
    assert fit.loss(off + exact, lambda m: True) == pytest.approx(many / 2)
    assert fit.loss(off + exact, lambda m: m == "one") == pytest.approx(0.0)
