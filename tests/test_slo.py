"""Replica bridge and SLO planner: the plan feeds the simulator, the search finds the edge, costs add up.

Known values come from the planner's own latency model (``estimate_latency``) and the hardware
profiles' prices and TDPs; invariants are checked on the search's outputs (the rate it returns
passes, the next one fails, the cheapest wins, the Pareto front is non-dominated).
"""

from __future__ import annotations

import math

import pytest

from planner.errors import ScenarioError
from planner.estimate.latency import StepTimeModel, estimate_latency
from planner.estimate.memory import plan_memory
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.replica import simulate_scenario, static_vs_continuous
from planner.serve.slo import (
    SLO,
    UTILIZATION_CAP,
    CandidateSpace,
    SearchSettings,
    SLOTarget,
    max_rate_per_replica,
    pareto_front,
    plan_slo,
    sweep_rates,
)
from planner.serve.workload import (
    ConcurrencyArrivals,
    FixedLength,
    LognormalLength,
    PoissonArrivals,
    UniformLength,
    Workload,
)

FAST = SearchSettings(requests_per_probe=200)


def spec(name: str):
    loaded = load_config(name, prefer="catalog")
    return build_spec(loaded.config, loaded.name)


@pytest.fixture(scope="module")
def llama8b():
    return spec("meta-llama/Llama-3.1-8B")


@pytest.fixture(scope="module")
def llama70b():
    return spec("meta-llama/Llama-3.1-70B")


def poisson(rate: float, n: int = 300, inp: int = 1024, out: int = 128, seed: int = 0) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate),
        num_requests=n,
        input_tokens=FixedLength(tokens=inp),
        output_tokens=FixedLength(tokens=out),
        seed=seed,
    )


H100 = Scenario(gpu="h100-sxm", max_model_len=4096)

# --------------------------------------------------------------------------------------------
# The bridge.
# --------------------------------------------------------------------------------------------


def test_bridge_runs_with_the_memory_plans_limits(llama8b):
    hw = get_profile("h100-sxm")
    sc = H100.model_copy(update={"kv_cache_dtype": "fp8", "max_num_seqs": 128})
    plan = plan_memory(llama8b, hw, sc)
    result = simulate_scenario(llama8b, hw, sc, poisson(2.0, n=50))
    assert result.scheduler.num_gpu_blocks == plan.num_gpu_blocks
    assert result.scheduler.block_size_tokens == plan.resolved.block_size
    assert result.scheduler.max_num_seqs == plan.resolved.max_num_seqs == 128
    assert result.scheduler.max_num_batched_tokens == plan.resolved.max_num_batched_tokens
    assert result.scheduler.max_model_len == plan.resolved.max_model_len == 4096
    assert result.scheduler.enable_chunked_prefill is True
    assert result.kind == "simulated" and result.step_time_kind == "estimate"
    assert result.label == "simulated (estimate step times)"
    assert result.memory_verdict == plan.reason
    assert result.num_completed == 50


def test_bridge_labels_bound_step_times(llama8b):
    from planner.efficiency import BOUND

    result = simulate_scenario(llama8b, get_profile("h100-sxm"), H100, poisson(2.0, n=20), efficiency=BOUND)
    assert result.step_time_kind == "bound"
    faster = simulate_scenario(llama8b, get_profile("h100-sxm"), H100, poisson(2.0, n=20))
    assert result.ttft_seconds.p50 < faster.ttft_seconds.p50  # a bound is never slower than the estimate


def test_bridge_refuses_a_scenario_that_does_not_start_with_the_plans_reason(llama70b):
    hw = get_profile("l40s")
    sc = Scenario(gpu="l40s", max_model_len=4096)
    reason = plan_memory(llama70b, hw, sc).reason
    with pytest.raises(ScenarioError) as err:
        simulate_scenario(llama70b, hw, sc, poisson(1.0, n=10))
    assert reason in str(err.value)
    assert "does not start" in str(err.value) and "GiB" in str(err.value)


@pytest.mark.parametrize("n_in", [128, 512, 2048])
def test_light_load_ttft_is_the_single_request_prefill_of_the_latency_model(llama8b, n_in):
    # 0.05 req/s, 16-token answers (~0.15 s each): requests rarely overlap, the median TTFT is one prefill.
    # The simulator's step model (latency.StepTimeModel) binds the same ops as estimate_latency through
    # planner.estimate.step, so the two agree to rounding (both add the API server's time per request).
    hw = get_profile("h100-sxm")
    result = simulate_scenario(llama8b, hw, H100, poisson(0.05, n=30, inp=n_in, out=16))
    single = estimate_latency(llama8b, hw, H100, batch_size=1, input_len=n_in, output_len=16)
    assert result.ttft_seconds.p50 == pytest.approx(single.ttft_seconds, rel=1e-9)
    assert result.tpot_seconds.p50 == pytest.approx(single.tpot_seconds, rel=0.02)


def test_continuous_batching_beats_static_on_the_same_requests(llama8b):
    workload = Workload(
        arrivals=ConcurrencyArrivals(concurrency=64),
        num_requests=256,
        input_tokens=FixedLength(tokens=512),
        output_tokens=UniformLength(low_tokens=16, high_tokens=512),
    )
    both = static_vs_continuous(llama8b, get_profile("h100-sxm"), H100, workload)
    assert both.continuous.mode == "continuous" and both.static.mode == "static"
    assert both.continuous.output_tokens == both.static.output_tokens  # same requests, every token once
    assert both.throughput_gain > 1.3
    assert both.throughput_gain == pytest.approx(
        both.continuous.throughput_tokens_per_s / both.static.throughput_tokens_per_s
    )


# --------------------------------------------------------------------------------------------
# The SLO spec.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "no SLO target"),
        ({"p99_ttft": None}, "no SLO target"),
        ({"p95_ttft": 1.0}, "unknown SLO key"),
        ({"p99_itl": 1.0}, "unknown SLO key"),
    ],
)
def test_bad_slo_specs_say_what_to_write(kwargs, message):
    with pytest.raises(ScenarioError, match=message):
        SLO.of(**kwargs)


def test_slo_labels_and_duplicates():
    slo = SLO.of(p99_ttft=1.0, p90_tpot=0.05, mean_e2e=10.0)
    assert [t.label for t in slo.targets] == ["P99 TTFT", "P90 TPOT", "Mean E2E"]
    assert slo.describe() == "P99 TTFT <= 1.00 s, P90 TPOT <= 50.00 ms, Mean E2E <= 10.00 s"
    target = SLOTarget(metric="ttft", seconds=1.0)
    with pytest.raises(ScenarioError, match="twice"):
        SLO(targets=(target, target))
    with pytest.raises(ValueError):
        SLOTarget(metric="ttft", seconds=0.0)


def test_slo_search_needs_an_open_loop_workload(llama8b):
    closed = Workload(arrivals=ConcurrencyArrivals(concurrency=8))
    with pytest.raises(ScenarioError, match="fixed concurrency"):
        plan_slo(llama8b, SLO.of(p99_ttft=1.0), closed, CandidateSpace(tp=(1,)), FAST)


# --------------------------------------------------------------------------------------------
# Bisection.
# --------------------------------------------------------------------------------------------


def test_bisection_returns_a_passing_rate_and_a_slightly_higher_failing_one(llama8b):
    hw = get_profile("h100-sxm")
    slo = SLO.of(p99_tpot=0.020)  # binds well below saturation (~8 ms alone, ~60 ms when full)
    wl = poisson(10.0, inp=1024, out=128)
    row = max_rate_per_replica(llama8b, hw, H100, wl, slo, FAST)
    assert row.status == "meets", row.reason
    best, fail = row.max_rate_per_replica_per_s, row.first_failing_rate_per_s
    assert row.limiting_target == "P99 TPOT"
    assert best < fail <= best * (1 + FAST.rate_tolerance) + 1e-9
    assert best < UTILIZATION_CAP * row.saturation_requests_per_s
    # Re-simulated independently (same seed): the returned rate meets the SLO, the next one does not.
    _, (at_best, above) = sweep_rates(llama8b, hw, H100, wl, [best, fail], slo, FAST)
    assert at_best.passed and at_best.tpot_seconds.p99 <= 0.020
    assert not above.passed and above.tpot_seconds.p99 > 0.020
    assert above.worst_target == "P99 TPOT" and above.worst_ratio > 1


def test_latencies_grow_with_the_rate(llama8b):
    hw = get_profile("h100-sxm")
    saturation, probes = sweep_rates(llama8b, hw, H100, poisson(1.0), settings=FAST)
    assert len(probes) == 10 and probes[-1].request_rate_per_s == pytest.approx(UTILIZATION_CAP * saturation)
    tpot = [p.tpot_seconds.p50 for p in probes]
    assert tpot == sorted(tpot)
    assert probes[-1].ttft_seconds.p99 > probes[0].ttft_seconds.p99
    assert all(p.passed is None for p in probes)  # no SLO given


def test_the_search_is_deterministic_with_a_seed(llama8b):
    space = CandidateSpace(gpus=("h100-sxm",), tp=(1, 2), base=H100)
    slo = SLO.of(p99_ttft=0.5, p99_tpot=0.03)
    a = plan_slo(llama8b, slo, poisson(30.0), space, FAST)
    b = plan_slo(llama8b, slo, poisson(30.0), space, FAST)
    assert a.model_dump(exclude={"search_seconds"}) == b.model_dump(exclude={"search_seconds"})
    c = plan_slo(llama8b, slo, poisson(30.0, seed=1), space, FAST.model_copy(update={"exhaustive": True}))
    assert c.recommendation is not None


# --------------------------------------------------------------------------------------------
# The plan: cheapest, infeasible, costs, Pareto.
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def typical(llama8b):
    """8B at 20 req/s, P99 TTFT 1 s and TPOT 50 ms, on H100 and L40S, TP 1/2, bf16/fp8, every candidate bisected."""
    space = CandidateSpace(gpus=("h100-sxm", "l40s"), tp=(1, 2), weight_dtypes=("auto", "fp8"))
    wl = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=20.0),
        input_tokens=LognormalLength(mean_tokens=1024, std_tokens=512),
        output_tokens=LognormalLength(mean_tokens=256, std_tokens=128),
    )
    return plan_slo(
        llama8b, SLO.of(p99_ttft=1.0, p99_tpot=0.05), wl, space, FAST.model_copy(update={"exhaustive": True})
    )


def test_the_cheapest_deployment_that_meets_the_slo_wins(typical, llama8b):
    meets = [c for c in typical.candidates if c.status == "meets"]
    assert len(meets) == 8 and typical.ranked_by == "usd_per_hour"  # both cards have prices
    best = typical.recommendation
    assert best is meets[0]
    assert best.usd_per_hour == min(c.usd_per_hour for c in meets)
    # Pruned search (the default) recommends the same deployment.
    pruned = plan_slo(
        llama8b,
        typical.slo,
        Workload(
            arrivals=PoissonArrivals(request_rate_per_s=20.0),
            input_tokens=LognormalLength(mean_tokens=1024, std_tokens=512),
            output_tokens=LognormalLength(mean_tokens=256, std_tokens=128),
        ),
        CandidateSpace(gpus=("h100-sxm", "l40s"), tp=(1, 2), weight_dtypes=("auto", "fp8")),
        FAST,
    )
    assert pruned.recommendation.label == best.label
    assert pruned.recommendation.usd_per_hour == best.usd_per_hour
    skipped = [c for c in pruned.candidates if c.status == "not-cheaper"]
    assert skipped and all(c.max_rate_per_replica_per_s is None and c.total_gpus for c in skipped)
    assert len(pruned.candidates) == len(typical.candidates) == 8


def test_replicas_gpus_and_cost_arithmetic(typical):
    target = typical.target_rate_per_s
    for c in (r for r in typical.candidates if r.status == "meets"):
        hw = get_profile(c.gpu)
        assert c.replicas == math.ceil(target / c.max_rate_per_replica_per_s)
        assert c.total_gpus == c.replicas * c.tp * c.pp
        assert c.usd_per_hour == pytest.approx(c.total_gpus * hw.price_per_hour_usd)
        assert c.usd_per_1m_input_tokens == pytest.approx(c.gpu_hours_per_1m_input_tokens * hw.price_per_hour_usd)
        assert c.usd_per_1m_output_tokens == pytest.approx(c.gpu_hours_per_1m_output_tokens * hw.price_per_hour_usd)
        assert c.energy_kwh_per_1m_output_tokens_upper_bound == pytest.approx(
            c.gpu_hours_per_1m_output_tokens * hw.tdp_watts / 1000
        )
        # Every GPU-hour is charged to input or output tokens: the two shares add up to the fleet.
        tokens_in_per_hour = target * typical.mean_input_tokens * 3600
        tokens_out_per_hour = target * typical.mean_output_tokens * 3600
        gpus = (
            c.gpu_hours_per_1m_input_tokens * tokens_in_per_hour / 1e6
            + c.gpu_hours_per_1m_output_tokens * tokens_out_per_hour / 1e6
        )
        assert gpus == pytest.approx(c.total_gpus)
        assert c.usd_per_1m_output_tokens > c.usd_per_1m_input_tokens  # decode is the dear phase
        op = c.operating_point
        assert op.request_rate_per_s == pytest.approx(target / c.replicas)
        assert op.passed


def test_pareto_front_is_non_dominated_and_from_the_probes(typical):
    front = typical.pareto
    assert front
    probes = [(c.label, p) for c in typical.candidates for p in c.probes]
    for f in front:
        assert not any(
            p.output_tokens_per_s_per_gpu > f.output_tokens_per_s_per_gpu
            and p.output_tokens_per_s_per_user > f.output_tokens_per_s_per_user
            for _, p in probes
        )
    gpu = [f.output_tokens_per_s_per_gpu for f in front]
    user = [f.output_tokens_per_s_per_user for f in front]
    assert gpu == sorted(gpu) and user == sorted(user, reverse=True)
    assert pareto_front(probes) == front


def test_a_target_below_the_single_request_floor_is_explained_without_simulating(llama70b):
    space = CandidateSpace(gpus=("l40s",), tp=(2,), weight_dtypes=("fp8",))
    plan = plan_slo(llama70b, SLO.of(p99_ttft=1.0, p99_tpot=0.05), poisson(5.0), space, FAST)
    row = plan.candidates[0]
    assert plan.recommendation is None and row.status == "fails-slo" and not row.probes
    assert row.reason.startswith(
        "P99 TPOT target 50.00 ms cannot be met at any rate: one decode step of a request alone takes"
    )
    assert "x the target" in row.reason


def test_a_target_missed_at_the_lowest_rate_says_by_how_much(llama8b):
    # One request at a time (max_num_seqs 1): a prefill takes ~25 ms but any overlap waits seconds.
    space = CandidateSpace(gpus=("h100-sxm",), tp=(1,), max_num_seqs=(1,), base=H100)
    plan = plan_slo(llama8b, SLO.of(p99_ttft=0.05), poisson(1.0, inp=1024, out=64), space, FAST)
    row = plan.candidates[0]
    assert row.status == "fails-slo" and row.limiting_target == "P99 TTFT"
    assert "at the lowest rate probed" in row.reason and "target 50.00 ms" in row.reason
    assert "prefill of 1,024 tokens alone takes" in row.reason
    lowest = min(p.request_rate_per_s for p in row.probes)
    assert f"({lowest:.3g} req/s)" in row.reason
    assert row.first_failing_rate_per_s == pytest.approx(lowest)


def test_rows_that_cannot_run_say_why(llama70b):
    space = CandidateSpace(gpus=("l40s", "no-such-card"), tp=(1, 3), weight_dtypes=("auto",))
    plan = plan_slo(llama70b, SLO.of(p99_ttft=1.0), poisson(1.0), space, FAST)
    by = {(c.gpu, c.tp): c for c in plan.candidates}
    assert by[("l40s", 1)].status == "does-not-fit" and "does not start" in by[("l40s", 1)].reason
    assert by[("l40s", 3)].status == "invalid" and "--tp 3 does not divide" in by[("l40s", 3)].reason
    assert by[("no-such-card", 1)].status == "invalid" and "unknown GPU" in by[("no-such-card", 1)].reason
    assert plan.recommendation is None and plan.step_time_kind is None


def test_unpriced_cards_rank_by_gpu_count(llama8b):
    # Only when no candidate has a price (a mix ranks by cost: tests/test_prices.py).
    assert get_profile("gaudi3").price_per_hour_usd is None and get_profile("h20").price_per_hour_usd is None
    space = CandidateSpace(gpus=("gaudi3", "h20"), tp=(1,), base=H100)
    plan = plan_slo(llama8b, SLO.of(p99_ttft=1.0), poisson(5.0), space, FAST)
    assert plan.ranked_by == "gpus"
    assert any("no price for gaudi3, h20" in note and "--price-per-gpu-hour" in note for note in plan.notes)
    gaudi = next(c for c in plan.candidates if c.gpu == "gaudi3")
    assert gaudi.usd_per_hour is None and gaudi.usd_per_1m_output_tokens is None
    assert gaudi.energy_kwh_per_1m_output_tokens_upper_bound is not None  # TDP is known


def test_max_model_len_follows_the_workload_unless_given(llama8b):
    space = CandidateSpace(gpus=("h100-sxm",), tp=(1,))
    plan = plan_slo(llama8b, SLO.of(p99_ttft=1.0), poisson(1.0, inp=1000, out=100), space, FAST)
    assert plan.candidates[0].scenario.max_model_len == 1280
    too_long = poisson(1.0, inp=200_000, out=100)
    with pytest.raises(ScenarioError, match="allows 131,072"):
        plan_slo(llama8b, SLO.of(p99_ttft=1.0), too_long, space, FAST)


def test_step_models_are_shared_across_max_num_seqs(llama8b, monkeypatch):
    import planner.serve.slo as slo_module

    built = []

    class Counting(StepTimeModel):
        def __init__(self, *a, **k):
            built.append(1)
            super().__init__(*a, **k)

    import planner.serve.replica as replica_module

    monkeypatch.setattr(slo_module, "StepTimeModel", Counting)
    monkeypatch.setattr(replica_module, "StepTimeModel", Counting)  # replica_step_cost builds the search's
    space = CandidateSpace(gpus=("h100-sxm",), tp=(1,), max_num_seqs=(64, 128, 256), base=H100)
    plan_slo(llama8b, SLO.of(p99_ttft=1.0), poisson(2.0), space, FAST)
    assert len(built) == 1


def test_a_trace_is_time_scaled_to_each_probed_rate(llama8b, tmp_path):
    import numpy as np

    rng = np.random.default_rng(1)
    times = np.cumsum(rng.exponential(0.2, size=300))  # ~5 req/s
    lines = ["arrival_time_s,input_tokens,output_tokens"]
    lines += [f"{t:.4f},{int(rng.integers(100, 900))},{int(rng.integers(20, 200))}" for t in times]
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(lines) + "\n")
    from planner.serve.workload import TraceArrivals

    wl = Workload(arrivals=TraceArrivals(path=str(trace)), num_requests=None)
    plan = plan_slo(llama8b, SLO.of(p99_ttft=0.5), wl, CandidateSpace(gpus=("h100-sxm",), tp=(1,)), FAST)
    assert plan.target_rate_per_s == pytest.approx(299 / (times[-1] - times[0]))
    best = plan.recommendation
    assert best is not None and best.replicas == 1
    assert all(p.measured_requests == 300 for p in best.probes)  # the whole trace at every rate
    assert best.scenario.max_model_len == 1280  # longest row < 1,100 tokens, rounded up to 256
