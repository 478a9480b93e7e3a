"""Speculative decoding in the simulator (planner.serve.simulate / replica) and the ``simulate`` command.

Known values: the clock G(s) = floor(E x s) and its inverse; one request's steps and TPOT under a flat step
cost. Invariants: k = 0, E = 1 is the plain engine, run for run; KV blocks balance and never exceed the
cache under preemption; a request whose peak with the k lookahead slots does not fit is refused. Against
the estimate: acceptance 0 costs the draft and buys nothing; at high acceptance and batch 1 the simulated
TPOT is the estimate's speculative TPOT within 2%; at high load speculation gains less. Deterministic
(same seed, same result). Bad flags refused naming the flag.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from planner.cli import main
from planner.errors import ScenarioError
from planner.estimate.speculative import estimate_speculation
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario, SpeculativeDecoding
from planner.serve.replica import SpeculativeStepCost, replica_step_cost, simulate_scenario
from planner.serve.simulate import (
    PLAIN_DECODING,
    DecodeSpeculation,
    LinearStepCost,
    SchedulerConfig,
    run_engine,
    summarize,
)
from planner.serve.workload import ConcurrencyArrivals, FixedLength, PoissonArrivals, RequestSet, Workload

LLAMA = "meta-llama/Llama-3.1-8B"
DRAFT = "meta-llama/Llama-3.2-1B"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
H100 = get_profile("h100-sxm")
IN, OUT = 512, 256


@pytest.fixture(scope="module")
def llama():
    return build_spec(load_config(LLAMA).config, LLAMA)


@pytest.fixture(scope="module")
def draft():
    return build_spec(load_config(DRAFT).config, DRAFT)


def spec_scenario(method: str, k: int, a: float) -> Scenario:
    head = {"draft": DRAFT, "eagle3": EAGLE3}.get(method)
    return Scenario(
        speculative=SpeculativeDecoding(method=method, num_speculative_tokens=k, acceptance_rate=a, draft_model=head)
    )


def workload(arrivals, n: int, seed: int = 0) -> Workload:
    return Workload(
        arrivals=arrivals,
        num_requests=n,
        input_tokens=FixedLength(tokens=IN),
        output_tokens=FixedLength(tokens=OUT),
        seed=seed,
    )


def mean_tpot(model, sc: Scenario, wl: Workload, draft_model=None) -> float:
    result = simulate_scenario(model, H100, sc, wl, saturation=False, draft_model=draft_model)
    assert result.tpot_seconds is not None
    return result.tpot_seconds.mean


@dataclass(frozen=True)
class SpeculativeLinear:
    """A flat step cost that says it prices speculative steps (for engine-only tests)."""

    base: LinearStepCost
    speculation: DecodeSpeculation

    def step_seconds(self, **mix) -> float:
        return self.base.step_seconds(**mix)


# ---------------------------------------------------------------------------------- the clock


@pytest.mark.parametrize(("e", "k"), [(1.0, 0), (1.0, 3), (2.533, 3), (3.99, 3), (4.0, 3), (1.7, 32)])
def test_the_clock_gives_e_tokens_per_step_and_inverts(e, k):
    spec = DecodeSpeculation(num_speculative_tokens=k, tokens_per_step=e)
    gains = np.diff([spec.position(s) for s in range(1001)])
    assert spec.position(1000) == math.floor(e * 1000)
    assert set(gains.tolist()) <= {math.floor(e), math.ceil(e)}
    for tokens in range(0, 400, 7):
        x = spec.first_step_at(tokens)
        assert spec.position(x) >= tokens and (x == 0 or spec.position(x - 1) < tokens)


def test_plain_decoding_is_one_token_per_step():
    assert [PLAIN_DECODING.position(s) for s in range(-1, 50)] == list(range(-1, 50))
    assert PLAIN_DECODING.verified_tokens == 1


@pytest.mark.parametrize(
    ("k", "e", "message"), [(3, 4.5, "exceeds k \\+ 1 = 4"), (3, 0.5, "greater than or equal to 1")]
)
def test_impossible_speculation_is_refused(k, e, message):
    with pytest.raises((ScenarioError, ValueError), match=message):
        DecodeSpeculation(num_speculative_tokens=k, tokens_per_step=e)


# --------------------------------------------------------------------------------- the engine

ONE = RequestSet(np.array([0.0]), np.array([100]), np.array([101]), None, 0.0)
ROOMY = SchedulerConfig(num_gpu_blocks=1000, block_size_tokens=16, max_num_seqs=8, max_num_batched_tokens=512)
FLAT = LinearStepCost(fixed_seconds=0.01, per_token_seconds=0.0)


@pytest.mark.parametrize(("e", "k", "decode_steps"), [(1.0, 0, 100), (2.5, 3, 40), (4.0, 3, 25), (1.7, 40, 59)])
def test_one_request_takes_ceil_of_its_tokens_over_e_steps(e, k, decode_steps):
    """100 tokens after the first: the step reaching G(m) >= 100 is the last; TPOT = steps x 10 ms / 100."""
    cost = SpeculativeLinear(FLAT, DecodeSpeculation(num_speculative_tokens=k, tokens_per_step=e))
    result = summarize(run_engine(ONE, ROOMY, cost), step_cost_model="flat")
    assert result.num_steps == 1 + decode_steps
    assert result.tpot_seconds is not None and result.tpot_seconds.mean == pytest.approx(decode_steps * 0.01 / 100)
    assert result.output_tokens == 101
    assert result.itl_seconds is not None and result.itl_seconds.count == decode_steps  # one chunk per step


def busy_requests(seed: int = 7) -> RequestSet:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / 50, 400))
    return RequestSet(arrivals, rng.integers(50, 900, 400), rng.integers(2, 900, 400), None, 0.0)


def test_plain_speculation_object_is_the_plain_engine():
    sched = SchedulerConfig(num_gpu_blocks=600, block_size_tokens=16, max_num_seqs=64, max_num_batched_tokens=2048)
    cost = LinearStepCost(per_kv_token_seconds=1e-8)
    plain = run_engine(busy_requests(), sched, cost)
    same = run_engine(busy_requests(), sched, SpeculativeLinear(cost, PLAIN_DECODING))
    assert plain.preemptions > 0
    for name in ("finish_time_s", "first_token_time_s", "step_seconds", "used_blocks", "decode_seqs"):
        assert np.array_equal(getattr(plain, name), getattr(same, name), equal_nan=True), name


@pytest.mark.parametrize("block", [16, 5, 1])
@pytest.mark.parametrize(("e", "k"), [(2.533, 3), (1.3, 20)])
def test_blocks_stay_within_the_cache_under_preemption(block, e, k):
    sched = SchedulerConfig(
        num_gpu_blocks=9600 // block, block_size_tokens=block, max_num_seqs=64, max_num_batched_tokens=2048
    )
    cost = SpeculativeLinear(
        LinearStepCost(per_kv_token_seconds=1e-8), DecodeSpeculation(num_speculative_tokens=k, tokens_per_step=e)
    )
    requests = busy_requests()
    run = run_engine(requests, sched, cost)
    assert run.preemptions > 0
    assert run.used_blocks.min() >= 0 and run.used_blocks.max() <= sched.num_gpu_blocks
    assert not np.isnan(run.finish_time_s).any()  # all served, each with its own output tokens
    result = summarize(run, step_cost_model="flat")
    assert result.output_tokens == int(requests.output_tokens.sum())


def test_a_request_whose_lookahead_does_not_fit_is_refused():
    """95 + 66 - 1 = 160 tokens fill 10 blocks of 16; with k = 3 lookahead slots it needs 11."""
    sched = SchedulerConfig(num_gpu_blocks=10, block_size_tokens=16, max_num_seqs=4, max_num_batched_tokens=512)
    one = RequestSet(np.array([0.0]), np.array([95]), np.array([66]), None, 0.0)
    plain = summarize(run_engine(one, sched, FLAT), step_cost_model="flat")
    spec = SpeculativeLinear(FLAT, DecodeSpeculation(num_speculative_tokens=3, tokens_per_step=2.0))
    refused = summarize(run_engine(one, sched, spec), step_cost_model="flat")
    assert plain.num_completed == 1 and refused.num_rejected == 1
    assert "11 KV blocks (163 tokens)" in refused.rejection_reasons[0]


def test_static_batching_refuses_speculation():
    sched = ROOMY.model_copy(update={"mode": "static"})
    spec = SpeculativeLinear(FLAT, DecodeSpeculation(num_speculative_tokens=3, tokens_per_step=2.0))
    with pytest.raises(ScenarioError, match="static-batching simulation does not model speculative decoding"):
        run_engine(ONE, sched, spec)


# ------------------------------------------------------------------------- against the estimate


@pytest.mark.parametrize("method", ["ngram", "eagle3", "draft"])
def test_acceptance_zero_is_no_better_than_plain_and_costs_the_draft(llama, draft, method):
    wl = workload(ConcurrencyArrivals(concurrency=4), 16)
    plain = mean_tpot(llama, Scenario(), wl)
    spec = mean_tpot(llama, spec_scenario(method, 3, 0.0), wl, draft if method == "draft" else None)
    assert spec >= plain
    if method != "ngram":  # a drafter on the GPU: its k passes are paid every step
        assert spec > 1.1 * plain


def test_high_acceptance_at_low_load_approaches_the_estimate(llama):
    """Batch 1: the simulated TPOT is the estimate's speculative TPOT within 2% (the last step of each
    request yields fewer than E tokens, and the context grows along the answer instead of sitting at
    input + output / 2)."""
    sc = spec_scenario("eagle3", 3, 0.9)
    est = estimate_speculation(llama, H100, sc, 1, IN + OUT // 2)
    sim = mean_tpot(llama, sc, workload(ConcurrencyArrivals(concurrency=1), 8))
    assert sim == pytest.approx(est.tpot_seconds, rel=0.02)
    assert est.baseline_tpot_seconds / sim > 2.5  # it pays: E = 3.44


def test_speculation_gains_less_at_high_load(llama):
    sc = spec_scenario("eagle3", 3, 0.8)
    gains = []
    for arrivals, n in ((ConcurrencyArrivals(concurrency=1), 6), (ConcurrencyArrivals(concurrency=256), 512)):
        wl = workload(arrivals, n)
        gains.append(mean_tpot(llama, Scenario(), wl) / mean_tpot(llama, sc, wl))
    low, high = gains
    assert low > 2.0 and high < 0.8 * low


def test_the_simulation_is_deterministic(llama):
    sc = spec_scenario("eagle3", 3, 0.7)
    runs = [
        simulate_scenario(llama, H100, sc, workload(PoissonArrivals(request_rate_per_s=8), 60, seed), saturation=False)
        for seed in (1, 1, 2)
    ]
    assert runs[0].model_dump() == runs[1].model_dump()
    assert runs[0].model_dump() != runs[2].model_dump()


def test_the_step_cost_is_the_estimates_speculative_step(llama):
    """A pure-decode step is SpeculativeStepModel.step_seconds (whole contexts exact, fractions between)."""
    sc = spec_scenario("eagle3", 3, 0.8)
    cost = replica_step_cost(llama, H100, sc)
    assert isinstance(cost, SpeculativeStepCost)
    for batch, context in ((1, 600), (37, 1291), (512, 4000)):
        want = float(cost.spec.step_seconds(batch, context)[0])
        got = cost.step_seconds(
            prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=batch, decode_kv_tokens=batch * context
        )
        assert got == pytest.approx(want, rel=1e-12)
    between = cost.speculative_seconds(37, 1291.5)
    assert cost.speculative_seconds(37, 1291) <= between <= cost.speculative_seconds(37, 1292)


# ----------------------------------------------------------------------------------------- CLI

BASE = [
    "simulate",
    LLAMA,
    "--gpu",
    "h100-sxm",
    "--concurrency",
    "2",
    "--num-requests",
    "8",
    "--input-len",
    "256",
    "--output-len",
    "64",
]
SPEC = [
    "--speculative-method",
    "eagle3",
    "--num-speculative-tokens",
    "3",
    "--acceptance-rate",
    "0.8",
    "--draft-model",
    EAGLE3,
]


def test_simulate_json_carries_the_speculative_block(capsys):
    assert main([*BASE, *SPEC, "--format", "json"]) == 0
    spec_out = json.loads(capsys.readouterr().out)
    assert main([*BASE, "--format", "json"]) == 0
    plain_out = json.loads(capsys.readouterr().out)
    assert "speculative" not in plain_out
    block = spec_out["speculative"]
    assert block["method"] == "eagle3" and block["tokens_per_step"] == pytest.approx(2.952)
    assert {"draft_seconds", "verify_seconds", "tpot_seconds", "break_even_batch"} <= set(block)
    assert spec_out["step_cost_model"] == "SpeculativeStepCost"
    assert spec_out["tpot_seconds"]["mean"] < plain_out["tpot_seconds"]["mean"]
    assert spec_out["ttft_seconds"]["p50"] == pytest.approx(plain_out["ttft_seconds"]["p50"], rel=0.05)
    assert main([*BASE, *SPEC]) == 0
    assert "speculative decoding (eagle3, k=3, a=0.8)" in capsys.readouterr().out


BAD_FLAGS = [
    (["--acceptance-rate", "0.5"], "--acceptance-rate given without --speculative-method"),
    (["--speculative-method", "eagle3", "--acceptance-rate", "0.5"], "needs --num-speculative-tokens"),
    (
        ["--speculative-method", "ngram", "--num-speculative-tokens", "3", "--acceptance-rate", "1"],
        "--acceptance-rate",
    ),
    (
        ["--speculative-method", "ngram", "--num-speculative-tokens", "0", "--acceptance-rate", "0.5"],
        "--num-speculative-tokens",
    ),
    (
        ["--speculative-method", "draft", "--num-speculative-tokens", "3", "--acceptance-rate", "0.5"],
        "needs --draft-model",
    ),
    ([*SPEC, "--static"], "drop --static"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_FLAGS)
def test_bad_flags_are_refused_naming_the_flag(capsys, flags, message):
    code = main([*BASE, *flags])
    _, err = capsys.readouterr()
    assert code == 2 and message in err, err
