"""The capacity search and the rate sweep time speculative steps when the scenario speculates (as the
simulator does): a well-accepted draft carries more traffic within a TPOT target, a poorly accepted one
lowers the knee (each step verifies k + 1 tokens per sequence for little gain)."""

from __future__ import annotations

import re

from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario, SpeculativeDecoding
from planner.serve.slo import SLO, max_rate_per_replica, sweep_rates
from planner.serve.workload import FixedLength, PoissonArrivals, Workload

MODEL = build_spec(load_config("meta-llama/Llama-3.1-8B").config, "meta-llama/Llama-3.1-8B")
H100 = get_profile("h100-sxm")
WORKLOAD = Workload(
    arrivals=PoissonArrivals(request_rate_per_s=1.0),
    num_requests=200,
    input_tokens=FixedLength(tokens=512),
    output_tokens=FixedLength(tokens=256),
)
PLAIN = Scenario(max_model_len=4096)
EAGLE = PLAIN.model_copy(
    update={"speculative": SpeculativeDecoding(method="eagle", num_speculative_tokens=3, acceptance_rate=0.7)}
)
NGRAM = PLAIN.model_copy(
    update={"speculative": SpeculativeDecoding(method="ngram", num_speculative_tokens=3, acceptance_rate=0.3)}
)


def test_a_well_accepted_draft_carries_more_traffic_within_a_tpot_target():
    slo = SLO.of(p99_tpot=0.012)
    plain = max_rate_per_replica(MODEL, H100, PLAIN, WORKLOAD, slo)
    eagle = max_rate_per_replica(MODEL, H100, EAGLE, WORKLOAD, slo)
    assert eagle.max_rate_per_replica_per_s > 1.3 * plain.max_rate_per_replica_per_s


def test_a_poorly_accepted_draft_lowers_the_knee():
    plain, _ = sweep_rates(MODEL, H100, PLAIN, WORKLOAD, rates=[1.0])
    ngram, _ = sweep_rates(MODEL, H100, NGRAM, WORKLOAD, rates=[1.0])
    assert ngram < plain


def test_the_floor_of_a_tpot_target_is_the_speculative_step_over_its_expected_tokens():
    """A target below what one request alone gets is refused at the floor, before any bisection; with EAGLE
    (k = 3, a = 0.7: E = (1 - 0.7^4) / 0.3 = 2.53 tokens per step) the floor is the step over E."""
    slo = SLO.of(p99_tpot=0.001)
    floors = {}
    for name, sc in (("plain", PLAIN), ("eagle", EAGLE)):
        row = max_rate_per_replica(MODEL, H100, sc, WORKLOAD, slo)
        assert row.status == "fails-slo" and "alone takes" in row.reason
        floors[name] = float(re.search(r"alone takes ([0-9.]+) ms", row.reason).group(1))
    tokens_per_step = (1 - 0.7**4) / (1 - 0.7)
    assert floors["eagle"] < floors["plain"]
    assert 1.5 < floors["plain"] / floors["eagle"] < tokens_per_step  # the verify step costs more than a plain one
