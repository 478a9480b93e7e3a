"""The chunked-prefill token budget sweep (``simulate --budget-sweep``): TTFT against TPOT, one run per budget."""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from planner.errors import ScenarioError
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.tradeoff import MAX_BUDGETS, budget_tradeoff
from planner.serve.workload import FixedLength, PoissonArrivals, UniformLength, Workload

MODEL = build_spec(load_config("meta-llama/Llama-3.1-8B").config, "meta-llama/Llama-3.1-8B")
HW = get_profile("h100-sxm")
SC = Scenario(max_model_len=16384, max_num_seqs=256)
LONG_PROMPTS = Workload(
    arrivals=PoissonArrivals(request_rate_per_s=5.0),
    num_requests=400,
    input_tokens=UniformLength(low_tokens=500, high_tokens=8000),
    output_tokens=FixedLength(tokens=200),
)


def test_a_small_budget_keeps_tpot_low_and_a_large_one_gets_first_tokens_sooner():
    points = budget_tradeoff(MODEL, HW, SC, LONG_PROMPTS, [8192, 256, 1024])
    assert [p.max_num_batched_tokens for p in points] == [256, 1024, 8192]  # sorted
    small, mid, large = points
    assert small.tpot_p50_seconds < mid.tpot_p50_seconds < large.tpot_p50_seconds
    assert small.ttft_p50_seconds > mid.ttft_p50_seconds > large.ttft_p50_seconds
    assert not any(p.overloaded for p in points)


def test_each_point_is_the_simulation_at_that_budget():
    (point,) = budget_tradeoff(MODEL, HW, SC, LONG_PROMPTS, [2048])
    direct = simulate_scenario(MODEL, HW, SC.model_copy(update={"max_num_batched_tokens": 2048}), LONG_PROMPTS)
    assert point.ttft_p99_seconds == direct.ttft_seconds.p99 and point.tpot_p50_seconds == direct.tpot_seconds.p50


@pytest.mark.parametrize(
    ("budgets", "message"),
    [(list(range(512, 512 * (MAX_BUDGETS + 2), 512)), "1 to 12 token budgets"), ([128], "below max_num_seqs=256")],
)
def test_bad_sweeps_are_refused(budgets, message):
    with pytest.raises(ScenarioError, match=message):
        budget_tradeoff(MODEL, HW, SC, LONG_PROMPTS, budgets)


def test_the_cli_adds_the_sweep_to_the_json_and_the_table(capsys):
    argv = ["simulate", "meta-llama/Llama-3.1-8B", "--qps", "2", "--num-requests", "100", "--budget-sweep", "512,4096"]
    assert main([*argv, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["max_num_batched_tokens"] for p in data["budget_tradeoff"]] == [512, 4096]
    assert main(argv) == 0
    assert "chunked-prefill token budget" in capsys.readouterr().out
    assert main([*argv[:-1], "512,x"]) == 2
    assert "'x' is not a token count" in capsys.readouterr().err
