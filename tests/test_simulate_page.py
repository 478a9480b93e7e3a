"""The Simulate page: it draws without errors, and the numbers it shows are the core's for its inputs.

Streamlit's AppTest runs ``app.py`` (frame and sidebar) routed to ``views/simulate.py``; the
expected values are computed here with the same core calls on the scenario the sidebar holds.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from streamlit.testing.v1 import AppTest

from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.serve.replica import simulate_scenario
from planner.serve.slo import SLO, CandidateSpace, SearchSettings, plan_slo
from planner.serve.workload import FixedLength, LognormalLength, PoissonArrivals, Workload
from planner.units import fmt_seconds
from ui.format import fmt_rate, fmt_usd
from ui.params import BY_KEY
from ui.state import scenario_from

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def sidebar_scenario(at: AppTest):
    values = {
        key: at.session_state[key]
        for key in (
            "gpu",
            "gpus",
            "tp",
            "pp",
            "weights",
            "mixed",
            "hi",
            "lo",
            "kv",
            "len",
            "util",
            "block",
            "seqs",
            "tokens",
            "engine",
            "chunked",
            "in",
            "out",
            "batch",
        )
    }
    loaded = load_config(at.session_state["model"], prefer="catalog")
    return build_spec(loaded.config, loaded.name), get_profile(values["gpu"]), scenario_from(values)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.fixture(scope="module")
def page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.switch_page("views/simulate.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_page_draws_and_shows_the_simulated_replica(page):
    at = page
    assert at.title[0].value == "Simulate serving"
    model, hw, sc = sidebar_scenario(at)
    workload = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=10.0),
        num_requests=1000,
        input_tokens=FixedLength(tokens=sc.workload.input_len),
        output_tokens=FixedLength(tokens=sc.workload.output_len),
    )
    expected = simulate_scenario(model, hw, sc, workload)
    shown = metrics(at)
    assert shown["P99 TTFT"] == fmt_seconds(expected.ttft_seconds.p99)
    assert shown["Output tokens/s"] == fmt_rate(expected.throughput_tokens_per_s)
    assert len(at.get("plotly_chart")) == 2  # TTFT and TPOT vs rate; the timeline and Pareto tabs are closed
    at.session_state["simulate_result_tab"] = "Queue and KV cache over time"
    at.session_state["simulate_search_tab"] = "Throughput vs interactivity"
    at.run()
    assert len(at.get("plotly_chart")) == 4  # a tab's chart is drawn once it is open
    assert not at.dataframe  # and the closed tabs' tables are not
    at.session_state["simulate_result_tab"] = "Latency percentiles"
    at.session_state["simulate_search_tab"] = "Candidates"
    at.run()


def test_changed_inputs_change_the_answer_and_the_recommendation_is_the_cores(page):
    at = page
    at.number_input(key="simulate_rate").set_value(20.0)
    at.segmented_control(key="simulate_dist").set_value("lognormal").run()  # enables the spreads
    at.number_input(key="simulate_in").set_value(1024)
    at.number_input(key="simulate_in_std").set_value(512)
    at.number_input(key="simulate_out").set_value(256)
    at.number_input(key="simulate_out_std").set_value(128)
    at.number_input(key="simulate_requests").set_value(400)
    at.number_input(key="simulate_ttft").set_value(1.0)
    at.number_input(key="simulate_tpot").set_value(0.05)
    at.multiselect(key="simulate_tps").set_value([1, 2])
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    model, hw, sc = sidebar_scenario(at)
    workload = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=20.0),
        num_requests=400,
        input_tokens=LognormalLength(mean_tokens=1024, std_tokens=512),
        output_tokens=LognormalLength(mean_tokens=256, std_tokens=128),
    )
    replica = simulate_scenario(model, hw, sc, workload)
    assert metrics(at)["P99 TPOT"] == fmt_seconds(replica.tpot_seconds.p99)
    space = CandidateSpace(
        gpus=(hw.id,),
        tp=(1, 2),
        weight_dtypes=(sc.weight_dtype,),
        kv_cache_dtypes=(sc.kv_cache_dtype,),
        base=sc.model_copy(update={"num_gpus": None}),
    )
    plan = plan_slo(model, SLO.of(p99_ttft=1.0, p99_tpot=0.05), workload, space, SearchSettings())
    text = " ".join(m.value for m in at.markdown)
    if plan.recommendation is None:
        assert any("No candidate meets" in e.value for e in at.error)
    else:
        best = plan.recommendation
        assert f"{best.replicas} replica(s) of {best.label}" in text
        assert metrics(at)["$/hour"] == fmt_usd(best.usd_per_hour)
        link = at.get("link_button")
        assert link and link[0].proto.url.startswith("./export?")
        query = dict(parse_qsl(urlsplit(link[0].proto.url).query))
        sidebar = {
            key: BY_KEY[key].parse(query[key]) if key in query else BY_KEY[key].default
            for key in ("gpu", "gpus", "tp", "pp", "weights", "kv", "len")
        }
        assert sidebar == {
            "gpu": best.gpu,
            "gpus": best.total_gpus,
            "tp": best.tp,
            "pp": best.pp,
            "weights": best.weight_dtype,
            "kv": best.kv_cache_dtype,
            "len": best.scenario.max_model_len,
        }
    table = next(d.value for d in at.dataframe if "replica" in d.value.columns)
    assert list(table["replica"]) == [c.label for c in plan.candidates]
    assert list(table["status"]) == [c.status for c in plan.candidates]


def test_no_target_asks_for_one(page):
    at = page
    at.checkbox(key="simulate_ttft_on").uncheck()
    at.checkbox(key="simulate_tpot_on").uncheck()
    at.run()
    assert not at.exception
    assert any("Set at least one target" in i.value for i in at.info)


def test_a_client_cap_is_simulated_and_said(page):
    at = page
    at.segmented_control(key="simulate_dist").set_value("fixed").run()
    at.checkbox(key="simulate_ttft_on").check()  # a target, so the deployment search runs
    at.number_input(key="simulate_in").set_value(512)
    at.number_input(key="simulate_out").set_value(128)
    at.number_input(key="simulate_rate").set_value(200.0)
    at.number_input(key="simulate_cap").set_value(8)
    at.number_input(key="simulate_requests").set_value(300)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    model, hw, sc = sidebar_scenario(at)
    workload = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=200.0, max_concurrency=8),
        num_requests=300,
        input_tokens=FixedLength(tokens=512),
        output_tokens=FixedLength(tokens=128),
        prefix_cache_hit_rate=at.session_state["simulate_hit"],
        seed=at.session_state["simulate_seed"],
    )
    expected = simulate_scenario(model, hw, sc, workload)
    assert expected.max_in_flight == 8 and expected.overloaded
    assert metrics(at)["P99 TTFT"] == fmt_seconds(expected.ttft_seconds.p99)
    assert any("at most 8 in flight" in w.value and "wait at the client" in w.value for w in at.warning)
    assert at.query_params["cap"] == "8"  # the link carries it
    # the deployment search runs without the cap (it bounds the whole deployment) and says so
    assert any("Searched without the client cap" in c.value for c in at.caption)
    at.number_input(key="simulate_cap").set_value(0)
    at.run()
    assert "cap" not in at.query_params
