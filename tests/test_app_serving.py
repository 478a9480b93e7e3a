"""The Simulate page's cached SLO search (``ui.serving.cheapest``): a new request rate reuses the rate-free half
of the search, and the plan is ``plan_slo``'s for that rate, number for number.

Run without a Streamlit server (``st.cache_data`` and ``st.cache_resource`` keep their values in memory).
"""

from __future__ import annotations

import pytest
import streamlit as st

import planner.serve.slo as slo_module
import ui.serving as serving
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.replica import length_distribution
from planner.serve.slo import SLO, CandidateSpace, SearchSettings, plan_slo
from planner.serve.workload import PoissonArrivals, Workload

#: A small space (one card, TP 1 and 2) so the test runs in seconds.
SPACE = CandidateSpace(
    gpus=("h100-sxm",), tp=(1, 2), weight_dtypes=("auto",), kv_cache_dtypes=("auto",), base=Scenario(max_model_len=8192)
)
TARGETS = SLO.of(p99_ttft=1.0, p99_tpot=0.05)


def workload(rate_per_s: float) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate_per_s),
        num_requests=1000,
        input_tokens=length_distribution("fixed", 512, 0, "prompt length"),
        output_tokens=length_distribution("fixed", 128, 0, "output length"),
    )


@pytest.fixture
def searches(monkeypatch) -> list[float]:
    """Fresh caches; the rate of every search_capacity call the app makes (its workload's Poisson rate)."""
    st.cache_data.clear()
    serving._SEARCHES.clear()
    seen: list[float] = []
    original = slo_module.search_capacity

    def counted(model, slo, wl, *args, **kwargs):
        seen.append(wl.arrivals.request_rate_per_s)
        return original(model, slo, wl, *args, **kwargs)

    monkeypatch.setattr(serving, "search_capacity", counted)
    return seen


def test_a_new_rate_reuses_the_search_and_answers_as_plan_slo(searches: list[float]) -> None:
    loaded = load_config("meta-llama/Llama-3.1-8B")
    model = build_spec(loaded.config, loaded.name)
    for rate in (10.0, 10.1, 25.0):
        plan = serving.cheapest(model, TARGETS, workload(rate), SPACE, SearchSettings())
        expected = plan_slo(model, TARGETS, workload(rate), SPACE, SearchSettings())
        assert plan.target_rate_per_s == rate
        assert plan.model_dump(exclude={"search_seconds"}) == expected.model_dump(exclude={"search_seconds"})
    assert searches == [1.0]  # one search, at the shape's 1 req/s, for all three rates


def test_another_shape_or_price_is_another_search(searches: list[float]) -> None:
    model = build_spec(load_config("Qwen/Qwen3-8B").config, "Qwen/Qwen3-8B")
    serving.cheapest(model, TARGETS, workload(5.0), SPACE, SearchSettings())
    serving.cheapest(model, TARGETS, workload(5.0), SPACE, SearchSettings(), {"h100-sxm": 1.0})
    longer = workload(5.0).model_copy(update={"output_tokens": length_distribution("fixed", 256, 0, "output length")})
    plan = serving.cheapest(model, TARGETS, longer, SPACE, SearchSettings(), {"h100-sxm": 1.0})
    assert len(searches) == 3
    expected = plan_slo(model, TARGETS, longer, SPACE, SearchSettings(), prices={"h100-sxm": 1.0})
    assert plan.model_dump(exclude={"search_seconds"}) == expected.model_dump(exclude={"search_seconds"})
    assert get_profile("h100-sxm").price_per_hour_usd != 1.0  # the typed price, not the profile's, was searched
