"""The SLO search split in two: the rate-free capacity search, then the plan at a rate.

Invariants: ``plan_at_rate(search_capacity(...), r)`` is ``plan_slo`` at rate r, for rates below, at and
above the workload's, in any order, with the pruned and the exhaustive search; a rate change after every
bisection is done costs one simulation with ``operating_points="recommendation"``; a bisection runs once
per candidate however many rates ask for it. Known values: ``request_latencies`` on a hand-timed run.
Error case: a rate that is not one is refused naming the argument.
"""

from __future__ import annotations

import numpy as np
import pytest

import planner.serve.slo as slo_module
from planner.errors import ScenarioError
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.simulate import LinearStepCost, SchedulerConfig, request_latencies, run_engine
from planner.serve.slo import SLO, CandidateSpace, SearchSettings, plan_at_rate, plan_slo, search_capacity
from planner.serve.workload import PoissonArrivals, RequestSet, UniformLength, Workload

FAST = SearchSettings(requests_per_probe=100)
SPACE = CandidateSpace(gpus=("h100-sxm", "l40s"), tp=(1, 2), base=Scenario(max_model_len=4096))
TARGETS = SLO.of(p99_ttft=1.0, p99_tpot=0.05)


@pytest.fixture(scope="module")
def llama8b():
    loaded = load_config("meta-llama/Llama-3.1-8B", prefer="catalog")
    return build_spec(loaded.config, loaded.name)


def workload(rate: float) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate),
        input_tokens=UniformLength(low_tokens=200, high_tokens=1800),
        output_tokens=UniformLength(low_tokens=20, high_tokens=300),
    )


def comparable(plan) -> dict:
    return plan.model_dump(exclude={"search_seconds"})


class CountingRuns:
    """Counts ``run_engine`` calls made by the SLO search (probes and operating points)."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        monkeypatch.setattr(slo_module, "run_engine", self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return run_engine(*args, **kwargs)


@pytest.mark.parametrize(("exhaustive", "rates"), [(False, (20.0, 4.0, 60.0, 20.0)), (True, (20.0, 60.0))])
def test_one_search_answers_every_rate_as_plan_slo_does(llama8b, exhaustive, rates):
    settings = FAST.model_copy(update={"exhaustive": exhaustive})
    search = search_capacity(llama8b, TARGETS, workload(1.0), SPACE, settings)
    for rate in rates:
        direct = plan_slo(llama8b, TARGETS, workload(rate), SPACE, settings)
        assert comparable(plan_at_rate(search, rate)) == comparable(direct), rate
    assert comparable(plan_at_rate(search)) == comparable(plan_slo(llama8b, TARGETS, workload(1.0), SPACE, settings))


def test_a_new_rate_is_one_simulation_once_the_bisections_are_done(llama8b, monkeypatch):
    search = search_capacity(llama8b, TARGETS, workload(20.0), SPACE, FAST.model_copy(update={"exhaustive": True}))
    first = plan_at_rate(search)
    assert sum(c.status == "meets" for c in first.candidates) >= 2
    runs = CountingRuns(monkeypatch)
    again = plan_at_rate(search, 35.0, operating_points="recommendation")
    assert runs.calls == 1
    meets = [c for c in again.candidates if c.status == "meets"]
    assert meets[0] is again.recommendation and again.recommendation.operating_point is not None
    assert all(c.operating_point is None and c.usd_per_1m_output_tokens is None for c in meets[1:])
    assert all(c.usd_per_hour is not None and c.replicas for c in meets)  # ranking needs no simulation
    full = plan_at_rate(search, 35.0)
    assert full.recommendation == again.recommendation
    assert [c.label for c in full.candidates] == [c.label for c in again.candidates]


def test_each_candidate_is_bisected_once(llama8b, monkeypatch):
    search = search_capacity(llama8b, TARGETS, workload(20.0), SPACE, FAST.model_copy(update={"exhaustive": True}))
    runs = CountingRuns(monkeypatch)
    plan_at_rate(search, operating_points="recommendation")
    bisections = runs.calls - 1
    assert bisections >= len(search.live) > 0
    runs.calls = 0
    plan_at_rate(search, 50.0, operating_points="recommendation")
    assert runs.calls == 1


@pytest.mark.parametrize("rate", [0.0, -3.0, float("inf"), float("nan")])
def test_a_rate_that_is_not_one_is_refused(llama8b, rate):
    search = search_capacity(llama8b, TARGETS, workload(20.0), CandidateSpace(gpus=("h100-sxm",), tp=(8,)), FAST)
    with pytest.raises(ScenarioError, match="rate_per_s"):
        plan_at_rate(search, rate)


def test_request_latencies_of_a_hand_timed_run():
    # Two requests at t = 0 and 1 s, 100-token prompts, 3 and 1 output tokens; every step costs 0.25 s.
    requests = RequestSet(np.array([0.0, 1.0]), np.array([100, 100]), np.array([3, 1]), None, 0.0)
    run = run_engine(
        requests, SchedulerConfig(num_gpu_blocks=100), LinearStepCost(fixed_seconds=0.25, per_token_seconds=0.0)
    )
    both = request_latencies(run)
    # Request 0: prefill step [0, 0.25] gives token 1, decodes [0.25, 0.5], [0.5, 0.75]; request 1: [1, 1.25].
    np.testing.assert_allclose(both.ttft_s, [0.25, 0.25])
    np.testing.assert_allclose(both.e2e_s, [0.75, 0.25])
    np.testing.assert_allclose(both.tpot_s, [0.25])  # only the request with more than one token
    assert both.completed.tolist() == [True, True]
    second = request_latencies(run, slice(1, 2))
    assert second.output_tokens.tolist() == [1] and second.tpot_s.size == 0
    assert second.stats()["tpot"] is None and second.stats()["e2e"].p99 == pytest.approx(0.25)
