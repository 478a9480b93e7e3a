"""Saturation said out loud: the knee of a replica, the overloaded flag, and both faces showing them.

Invariants on the planner's own step model (no measured numbers): a bigger card or a larger TP
sustains more; the closed-form estimate and the full-batch simulation agree; half the knee is
served, twice the knee is flagged; the CLI JSON and the Simulate page carry the verdict.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from planner.estimate.latency import StepTimeModel
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.replica import (
    planned_replica,
    saturation_requests_per_s,
    simulate_scenario,
)
from planner.serve.saturation import (
    carry_load_options,
    measure_saturation,
    overload_verdict,
    overload_warning,
    workload_lengths,
)
from planner.serve.slo import SLO, CandidateSpace, SearchSettings, plan_slo
from planner.serve.workload import (
    FixedLength,
    LognormalLength,
    PoissonArrivals,
    Workload,
)

ROOT = Path(__file__).resolve().parent.parent
MODEL = "meta-llama/Llama-3.1-8B"


@pytest.fixture(scope="module")
def llama8b():
    loaded = load_config(MODEL, prefer="catalog")
    return build_spec(loaded.config, loaded.name)


def poisson(rate: float, n: int = 300, inp: int = 512, out: int = 128) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate),
        num_requests=n,
        input_tokens=FixedLength(tokens=inp),
        output_tokens=FixedLength(tokens=out),
    )


def scenario(gpu: str = "h100-sxm", tp: int = 1, **extra) -> Scenario:
    return Scenario(gpu=gpu, tp=tp, **{"max_model_len": 4096, **extra})


@pytest.fixture(scope="module")
def knees(llama8b) -> dict[tuple[str, int], float]:
    shape = poisson(1.0)
    return {
        (gpu, tp): saturation_requests_per_s(llama8b, get_profile(gpu), scenario(gpu, tp), shape)
        for gpu, tp in (("h100-sxm", 1), ("h100-sxm", 2), ("h100-sxm", 4), ("l40s", 1))
    }


def test_the_knee_grows_with_tp_and_with_the_card(knees):
    assert all(k is not None and k > 0 for k in knees.values())
    assert knees["h100-sxm", 1] < knees["h100-sxm", 2] < knees["h100-sxm", 4]
    assert knees["l40s", 1] < knees["h100-sxm", 1]


def test_the_knee_falls_with_longer_requests(llama8b):
    hw, sc = get_profile("h100-sxm"), scenario()
    short = saturation_requests_per_s(llama8b, hw, sc, poisson(1.0, inp=512, out=128))
    long = saturation_requests_per_s(llama8b, hw, sc, poisson(1.0, inp=2048, out=512))
    assert long < short / 2  # 4x the tokens per request


@pytest.mark.parametrize("inp, out, dist", [(512, 128, "fixed"), (2048, 256, "fixed"), (1024, 256, "lognormal")])
def test_the_closed_form_estimate_agrees_with_the_full_batch_simulation(llama8b, inp, out, dist):
    hw, sc = get_profile("h100-sxm"), scenario(max_model_len=8192)
    _, scheduler = planned_replica(llama8b, hw, sc)
    step = StepTimeModel(llama8b, hw, sc)
    lengths = (
        (FixedLength(tokens=inp), FixedLength(tokens=out))
        if dist == "fixed"
        else (
            LognormalLength(mean_tokens=inp, std_tokens=inp / 2),
            LognormalLength(mean_tokens=out, std_tokens=out / 2),
        )
    )
    shape = Workload(input_tokens=lengths[0], output_tokens=lengths[1])
    inputs, outputs = workload_lengths(shape, 4 * scheduler.max_num_seqs)
    found = measure_saturation(inputs, outputs, scheduler, step)
    assert found.requests_per_s == pytest.approx(found.estimate_requests_per_s, rel=0.15)
    assert 1 <= found.full_batch_requests <= scheduler.max_num_seqs


def test_half_the_knee_is_served_and_twice_the_knee_is_overloaded(llama8b, knees):
    hw, sc = get_profile("h100-sxm"), scenario()
    knee = knees["h100-sxm", 1]
    calm = simulate_scenario(llama8b, hw, sc, poisson(0.5 * knee, n=600))
    assert calm.overloaded is False and calm.overload_reason is None and calm.overload_options == ()
    assert calm.saturation_requests_per_s == pytest.approx(knee)
    busy = simulate_scenario(llama8b, hw, sc, poisson(2 * knee, n=600))
    assert busy.overloaded is True
    assert f"{2 * knee:,.1f} req/s offered" in busy.overload_reason and "queue grew" in busy.overload_reason
    assert busy.overload_options[0].startswith("2 replicas")
    # Served at half the knee, the output throughput keeps up with the offered tokens; at twice it cannot.
    assert calm.requests_per_s == pytest.approx(0.5 * knee, rel=0.25)
    assert busy.requests_per_s < 1.2 * knee


def test_the_knee_is_kept_across_rates_and_counts_but_not_across_shapes(llama8b, monkeypatch):
    """simulate_scenario runs the full-batch simulation once per workload shape: a new rate or request count
    reuses it (the knee a fresh run finds, to the last digit); a new shape or new limits do not; the store is
    bounded."""
    from planner.serve import replica

    hw, sc = get_profile("h100-sxm"), scenario(max_num_seqs=64)
    calls: list[int] = []
    real = replica.replica_saturation
    monkeypatch.setattr(replica, "replica_saturation", lambda *args: calls.append(1) or real(*args))
    monkeypatch.setattr(replica, "_KNEES", OrderedDict())
    monkeypatch.setattr(replica, "KNEES_KEPT", 2)
    first = simulate_scenario(llama8b, hw, sc, poisson(3.0, n=80))
    again = simulate_scenario(llama8b, hw, sc, poisson(7.5, n=120))
    assert len(calls) == 1
    fresh = real(poisson(1.0, n=1), planned_replica(llama8b, hw, sc)[1], StepTimeModel(llama8b, hw, sc))
    assert first.saturation_requests_per_s == again.saturation_requests_per_s == fresh.requests_per_s
    longer = simulate_scenario(llama8b, hw, sc, poisson(3.0, n=80, out=256))  # another shape
    fewer = simulate_scenario(llama8b, hw, scenario(max_num_seqs=32), poisson(3.0, n=80))  # other limits
    assert len(calls) == 3 and len(replica._KNEES) == 2
    assert longer.saturation_requests_per_s != first.saturation_requests_per_s != fewer.saturation_requests_per_s


def test_without_saturation_the_fields_are_unknown(llama8b):
    res = simulate_scenario(llama8b, get_profile("h100-sxm"), scenario(), poisson(5.0, n=100), saturation=False)
    assert res.saturation_requests_per_s is None and res.overloaded is None
    assert res.offered_requests_per_s == 5.0


@pytest.mark.parametrize(
    "offered, knee, growth, expected, words",
    [
        (60.0, 22.6, 0, True, "60.0 req/s offered is above the 22.6"),
        (60.0, 22.6, 120, True, "and the queue grew by 120 requests"),
        (10.0, 22.6, 0, False, None),
        (10.0, 22.6, None, False, None),
        (20.0, 22.6, 35, True, "although 20.0 req/s is below the 22.6 req/s knee"),
        (None, None, 35, True, "the queue grew by 35"),
        (None, 22.6, None, None, None),
        (30.0, None, None, None, None),
    ],
)
def test_the_verdict_says_which_test_fired(offered, knee, growth, expected, words):
    overloaded, why = overload_verdict(offered, knee, growth)
    assert overloaded is expected
    assert (why is None) if words is None else (words in why)


def test_what_would_carry_the_load(llama8b):
    h100 = get_profile("h100-sxm")
    options = carry_load_options(60.0, 22.6, scenario(), h100)
    assert options[0] == "3 replicas (ceil(60.0 / 22.6))"
    assert any("--tp 2" in o for o in options) and any("--kv-cache-dtype fp8" in o for o in options)
    full = carry_load_options(60.0, 22.6, scenario(tp=h100.gpus_per_node, kv_cache_dtype="fp8"), h100)
    assert len(full) == 1  # no larger TP in the node, the KV cache is fp8 already
    text = overload_warning(60.0, 22.6, "why", options)
    assert text.startswith("Overloaded: 60.0 req/s offered, this replica sustains about 22.6 req/s.")
    assert "To carry the load: 3 replicas" in text


def test_the_slo_search_reports_each_candidates_knee(llama8b):
    wl = poisson(20.0)
    space = CandidateSpace(gpus=("h100-sxm",), tp=(1, 2), base=Scenario(max_model_len=4096))
    plan = plan_slo(llama8b, SLO.of(p99_ttft=2.0), wl, space, SearchSettings(requests_per_probe=100, exhaustive=True))
    for row in plan.candidates:
        assert row.saturation_requests_per_s == pytest.approx(
            saturation_requests_per_s(llama8b, get_profile("h100-sxm"), row.scenario, wl)
        )
        if row.status == "meets":
            assert row.overloaded is False
            assert row.operating_point.request_rate_per_s < row.saturation_requests_per_s
    best = plan.recommendation
    assert best is not None and plan.saturation_requests_per_s == best.saturation_requests_per_s
    assert plan.overloaded is False


def test_the_cli_json_says_overloaded_with_the_knee():
    argv = [
        sys.executable,
        "-m",
        "planner",
        "simulate",
        MODEL,
        "--qps",
        "200",
        "--num-requests",
        "300",
        "--input-len",
        "512",
        "--output-len",
        "128",
        "--format",
        "json",
    ]
    done = subprocess.run(argv, check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["overloaded"] is True
    knee = data["saturation_requests_per_s"]
    assert isinstance(knee, float) and 0 < knee < 200 and math.isfinite(knee)
    assert data["offered_requests_per_s"] == 200.0
    assert data["overload_options"][0].startswith(f"{math.ceil(200 / knee)} replicas")
    table = subprocess.run(argv[:-2], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("WARNING Overloaded: 200.0 req/s offered, this replica sustains about")


def test_the_simulate_page_warns_far_above_the_knee():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.switch_page("views/simulate.py")
    at.session_state["simulate_rate"] = 500.0
    at.session_state["simulate_requests"] = 200
    at.session_state["simulate_ttft_on"] = False
    at.session_state["simulate_tpot_on"] = False
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = [w.value for w in at.warning if w.value.startswith("Overloaded: 500.0 req/s offered")]
    assert warnings and "this replica sustains about" in warnings[0] and "To carry the load:" in warnings[0]
