"""Poisson arrivals with a cap on requests in flight (``vllm bench serve --request-rate R --max-concurrency N``):
an arrival beyond the cap waits at the client and is sent when a request finishes; its latencies count from the
send."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from planner.errors import ScenarioError
from planner.serve.simulate import LinearStepCost, SchedulerConfig, run_engine, simulate
from planner.serve.workload import FixedLength, PoissonArrivals, Workload, generate_requests

COST = LinearStepCost(
    fixed_seconds=5e-3, per_token_seconds=5e-5, per_attention_pair_seconds=1e-11, per_kv_token_seconds=1e-7
)
ROOMY = SchedulerConfig(num_gpu_blocks=100_000, max_num_seqs=256, max_num_batched_tokens=4096)


def workload(rate: float, cap: int | None, n: int = 400) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate, max_concurrency=cap),
        num_requests=n,
        input_tokens=FixedLength(tokens=512),
        output_tokens=FixedLength(tokens=128),
        seed=3,
    )


def test_the_cap_bounds_the_requests_in_the_engine():
    # 200 req/s is far past what the card serves: uncapped, the queue grows; capped, at most 16 are ever inside
    requests = generate_requests(workload(200.0, 16))
    assert requests.max_in_flight == 16
    run = run_engine(requests, ROOMY, COST)
    assert (run.running + run.waiting).max() == 16
    assert np.isfinite(run.finish_time_s).all()
    uncapped = run_engine(generate_requests(workload(200.0, None)), ROOMY, COST)
    assert (uncapped.running + uncapped.waiting).max() > 100


def test_latencies_count_from_the_send_not_the_arrival():
    capped = simulate(workload(200.0, 16), ROOMY, COST)
    uncapped = simulate(workload(200.0, None), ROOMY, COST)
    # the wait for a slot happens at the client: TTFT stays near one prefill behind at most 15 others
    assert capped.ttft_seconds.p99 < uncapped.ttft_seconds.p99 / 5
    # Little's law at the cap: 16 always in flight, each for its end-to-end latency from the send
    assert capped.requests_per_s == pytest.approx(16 / capped.e2e_seconds.mean, rel=0.1)
    assert capped.requests_per_s < uncapped.requests_per_s  # a batch of 16 serves less than one of up to 256
    # sends happen no earlier than the arrivals drawn, and the held ones later
    drawn = generate_requests(workload(200.0, 16)).arrival_time_s
    sent = run_engine(generate_requests(workload(200.0, 16)), ROOMY, COST).arrival_time_s
    assert (sent >= drawn).all() and (sent > drawn).sum() > 100


def test_a_cap_never_reached_changes_nothing():
    light = simulate(workload(2.0, 10_000), ROOMY, COST)
    free = simulate(workload(2.0, None), ROOMY, COST)
    assert light.ttft_seconds == free.ttft_seconds
    assert light.e2e_seconds == free.e2e_seconds


def test_the_cli_takes_a_rate_and_a_cap_together():
    base = [sys.executable, "-m", "planner", "simulate", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm"]
    flags = ["--num-requests", "300", "--input-len", "512", "--output-len", "128", "--format", "json"]

    def run(*extra: str) -> dict:
        out = subprocess.run([*base, *extra, *flags], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    capped, uncapped = run("--qps", "200", "--max-concurrency", "8"), run("--qps", "200")
    assert capped["ttft_seconds"]["p99"] < uncapped["ttft_seconds"]["p99"] / 5
    # the knee is the replica kept as full as the cap lets it be: 8 in flight serve far less than a full batch
    assert capped["max_in_flight"] == 8 and "max_in_flight" not in uncapped
    assert capped["saturation_requests_per_s"] < uncapped["saturation_requests_per_s"] / 2
    assert capped["requests_per_s"] == pytest.approx(capped["saturation_requests_per_s"], rel=0.15)
    assert capped["overloaded"] and uncapped["overloaded"]
    # replicas do not lift a client's cap: the first way out is a larger one (Little's law), not more replicas
    assert capped["overload_options"][0].startswith("a client cap of about")
    assert not any(o.endswith(")") and "replicas (ceil(" in o for o in capped["overload_options"])
    assert "replicas (ceil(" in uncapped["overload_options"][0]
    text = subprocess.run(
        [*base, "--qps", "200", "--max-concurrency", "8", *flags[:-2]], capture_output=True, text=True
    )
    assert "client cap" in text.stdout and "wait at the client" in text.stdout
    refused = subprocess.run([*base, "--trace", "x.csv", "--concurrency", "4", *flags], capture_output=True, text=True)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "--concurrency" in refused.stderr and "--trace" in refused.stderr


def test_disaggregated_pools_refuse_a_cap():
    from planner.hardware import get_profile
    from planner.model.families import build_spec
    from planner.model.sources import load_config
    from planner.scenario import Scenario
    from planner.serve.disagg import DisaggLayout, simulate_disaggregated

    model = build_spec(load_config("meta-llama/Llama-3.1-8B").config, "meta-llama/Llama-3.1-8B")
    layout = DisaggLayout(prefill_instances=1, prefill_tp=1, decode_instances=1, decode_tp=1)
    with pytest.raises(ScenarioError, match="max-concurrency"):
        simulate_disaggregated(model, get_profile("h100-sxm"), Scenario(gpu="h100-sxm"), workload(5.0, 8), layout)


def test_the_rate_sweep_keeps_the_cap_and_the_app_key_does_too():
    from planner.hardware import get_profile
    from planner.model.families import build_spec
    from planner.model.sources import load_config
    from planner.scenario import Scenario
    from planner.serve.slo import sweep_rates
    from ui.serving import _sweep_key_workload

    model = build_spec(load_config("meta-llama/Llama-3.1-8B").config, "meta-llama/Llama-3.1-8B")
    hw, sc = get_profile("h100-sxm"), Scenario(max_model_len=4096)
    capped, free = workload(5.0, 4, n=200), workload(5.0, None, n=200)
    assert _sweep_key_workload(capped).arrivals.max_concurrency == 4  # the app's cache key (and call) keeps it
    knee_capped, probes_capped = sweep_rates(model, hw, sc, capped, rates=(1.0, 20.0))
    knee_free, probes_free = sweep_rates(model, hw, sc, free, rates=(1.0, 20.0))
    assert knee_capped < knee_free / 3  # four in flight serve far less than a full batch
    # past the knee the capped client holds the queue: TTFT from the send stays bounded where the open loop's grows
    assert probes_capped[-1].ttft_seconds.p99 < probes_free[-1].ttft_seconds.p99


def test_the_deployment_search_refuses_a_cap_with_the_way_out():
    from planner.model.families import build_spec
    from planner.model.sources import load_config
    from planner.scenario import Scenario
    from planner.serve.slo import SLO, CandidateSpace, SearchSettings, plan_slo

    model = build_spec(load_config("meta-llama/Llama-3.1-8B").config, "meta-llama/Llama-3.1-8B")
    space = CandidateSpace(gpus=("h100-sxm",), tp=(1,), base=Scenario(max_model_len=4096))
    with pytest.raises(ScenarioError, match="client cap of 8 requests in flight") as err:
        plan_slo(model, SLO.of(p99_ttft=1.0), workload(50.0, 8), space, SearchSettings())
    assert "Search without the cap" in (err.value.hint or "")
