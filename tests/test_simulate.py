"""Simulator: invariants (conservation, Little's law, limits), known values, and error cases."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from pydantic import ValidationError

from planner.errors import ConfigError, ScenarioError
from planner.serve.simulate import (
    LinearStepCost,
    SchedulerConfig,
    latency_stats,
    run_engine,
    simulate,
    summarize,
    weighted_latency_stats,
)
from planner.serve.workload import (
    ConcurrencyArrivals,
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    NormalLength,
    PoissonArrivals,
    RequestSet,
    TraceArrivals,
    UniformLength,
    Workload,
    generate_requests,
    load_trace,
)

# A small card: 5 ms per step, 0.05 ms per token, 0.1 us per KV token read by a decode.
COST = LinearStepCost(
    fixed_seconds=5e-3, per_token_seconds=5e-5, per_attention_pair_seconds=1e-11, per_kv_token_seconds=1e-7
)
ROOMY = SchedulerConfig(num_gpu_blocks=100_000, max_num_seqs=256, max_num_batched_tokens=4096)


class RecordingCost:
    """A StepCost that remembers every mix it was asked about and delegates to COST."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def step_seconds(self, **mix) -> float:
        self.calls.append(mix)
        return COST.step_seconds(**mix)


def poisson(rate: float, n: int = 400, *, inp=None, out=None, seed: int = 0, hit: float = 0.0) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate),
        num_requests=n,
        input_tokens=inp or FixedLength(tokens=512),
        output_tokens=out or FixedLength(tokens=64),
        prefix_cache_hit_rate=hit,
        seed=seed,
    )


def requests(inputs, outputs, arrivals=None, *, concurrency=None, hit=0.0) -> RequestSet:
    inputs = np.asarray(inputs, dtype=np.int64)
    outputs = np.asarray(outputs, dtype=np.int64)
    arr = None if concurrency else np.asarray(arrivals if arrivals is not None else np.zeros(len(inputs)), float)
    return RequestSet(arr, inputs, outputs, concurrency, hit)


# --------------------------------------------------------------------------------------------
# Conservation and accounting.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["continuous", "static"])
@pytest.mark.parametrize("blocks", [300, 100_000])
def test_every_request_finishes_or_is_rejected_and_tokens_are_counted_once(mode, blocks):
    workload = poisson(
        40.0, 300, inp=UniformLength(low_tokens=16, high_tokens=2000), out=UniformLength(low_tokens=1, high_tokens=300)
    )
    scheduler = SchedulerConfig(
        num_gpu_blocks=blocks, max_num_seqs=64, max_num_batched_tokens=1024, max_model_len=2200, mode=mode
    )
    reqs = generate_requests(workload)
    run = run_engine(reqs, scheduler, COST)
    result = summarize(run, step_cost_model="LinearStepCost")

    done = ~np.isnan(run.finish_time_s)
    assert result.num_completed + result.num_rejected == result.num_requests == 300
    assert not np.any(done & run.rejected)
    assert result.num_rejected == int((reqs.input_tokens + reqs.output_tokens > 2200).sum()) > 0
    assert result.output_tokens == int(reqs.output_tokens[~run.rejected].sum())
    # Tokens emitted: decode tokens + one per completed (re)prefill; equals the outputs asked for.
    emitted = run.decode_seqs.sum() + done.sum() + len(run.itl_extra_seconds)
    if mode == "static":  # padded decode rows emit nothing; the first decode gaps are itl_extra
        emitted = run.itl_weight.sum() + done.sum() + len(run.itl_extra_seconds)
    assert emitted == result.output_tokens
    assert result.itl_seconds.count == int((reqs.output_tokens[done] - 1).sum())
    # Work: each request computes prompt + output - 1 tokens once, plus what preemptions discarded.
    if mode == "continuous":
        once = int((reqs.input_tokens + reqs.output_tokens - 1)[done].sum())
        assert run.prefill_tokens.sum() + run.decode_seqs.sum() == once + result.recomputed_tokens
    else:
        assert run.prefill_tokens.sum() == int(reqs.input_tokens[done].sum())
    assert np.all(run.first_token_time_s[done] >= run.arrival_time_s[done])
    assert np.all(run.finish_time_s[done] >= run.first_token_time_s[done])
    assert run.used_blocks.max() <= blocks
    assert run.running.max() <= 64
    if blocks == 300 and mode == "continuous":
        assert result.preemptions > 0
    assert result.rejection_reasons and "max_model_len=2200" in result.rejection_reasons[0]


def test_littles_law_holds():
    result = simulate(poisson(20.0, 2000, out=UniformLength(low_tokens=16, high_tokens=256)), ROOMY, COST)
    littles = result.requests_per_s * result.e2e_seconds.mean
    assert result.mean_requests_in_system == pytest.approx(littles, rel=0.10)


def test_mean_itl_equals_mean_tpot_weighted_by_tokens_without_preemption():
    reqs = generate_requests(poisson(30.0, 300, out=UniformLength(low_tokens=2, high_tokens=200)))
    run = run_engine(reqs, ROOMY, COST)
    result = summarize(run, step_cost_model="x")
    done = ~np.isnan(run.finish_time_s)
    gaps = (run.finish_time_s - run.first_token_time_s)[done]
    assert result.itl_seconds.mean == pytest.approx(gaps.sum() / (reqs.output_tokens[done] - 1).sum(), rel=1e-9)


# --------------------------------------------------------------------------------------------
# Load: far below and far above capacity.
# --------------------------------------------------------------------------------------------


def test_light_load_ttft_is_the_single_request_prefill_step():
    workload = poisson(0.05, 200, out=FixedLength(tokens=16))
    result = simulate(workload, ROOMY, COST)
    alone = COST.step_seconds(
        prefill_tokens=512, prefill_attention_pairs=512 * (0 + 513 / 2), decode_seqs=0, decode_kv_tokens=0
    )
    assert result.ttft_seconds.mean == pytest.approx(alone, rel=0.03)
    assert result.ttft_seconds.p50 == pytest.approx(alone, rel=1e-9)
    # TPOT alone: one decode of a context growing from 513 to 527 tokens.
    assert result.tpot_seconds.p50 == pytest.approx(5e-3 + 5e-5 + 520e-7, rel=0.01)


def test_overload_grows_queue_and_ttft_over_time():
    workload = poisson(200.0, 1500, out=FixedLength(tokens=128))
    run = run_engine(generate_requests(workload), ROOMY, COST)
    result = summarize(run, step_cost_model="x")
    assert result.requests_per_s < 0.5 * 200.0  # far above capacity
    arriving = run.waiting[run.step_start_s < run.arrival_time_s[-1]]  # while requests still arrive
    tenth = len(arriving) // 10
    assert arriving[:tenth].mean() < 0.5 * arriving[-tenth:].mean()
    assert np.all(np.diff(arriving[::tenth]) > 0)
    ttft = run.first_token_time_s - run.arrival_time_s
    assert ttft[-150:].mean() > 5 * ttft[:150].mean()
    waiting = np.asarray(result.timeline.waiting_requests)
    assert waiting.max() > 500


# --------------------------------------------------------------------------------------------
# KV capacity and preemption.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("blocks", "preempts"), [(200, True), (100_000, False)])
def test_preemption_only_when_the_cache_is_small(blocks, preempts):
    scheduler = SchedulerConfig(num_gpu_blocks=blocks, max_num_seqs=128, max_num_batched_tokens=4096)
    result = simulate(poisson(50.0, 300, out=UniformLength(low_tokens=50, high_tokens=400)), scheduler, COST)
    assert (result.preemptions > 0) is preempts
    assert (result.recomputed_tokens > 0) is preempts
    assert result.num_completed == 300
    assert max(result.timeline.kv_utilization) <= 1.0


def test_preempted_request_gap_enters_itl():
    # Two requests whose KV cannot both grow: the newer is preempted, recomputed, resumed.
    scheduler = SchedulerConfig(num_gpu_blocks=6, block_size_tokens=16, max_num_seqs=8, max_num_batched_tokens=64)
    run = run_engine(requests([30, 30], [40, 40]), scheduler, COST)
    result = summarize(run, step_cost_model="x")
    assert result.preemptions >= 1 and result.num_completed == 2
    assert len(run.itl_extra_seconds) >= 1
    assert result.itl_seconds.count == 2 * 39
    assert run.itl_extra_seconds.max() > run.step_seconds.max()  # the wait while preempted


@pytest.mark.parametrize(
    ("inputs", "outputs", "scheduler", "message"),
    [
        ([100, 5000], [10, 10], dict(num_gpu_blocks=1000, max_model_len=4096), "max_model_len=4096"),
        ([100, 5000], [10, 10], dict(num_gpu_blocks=100), "the cache holds 100 blocks (1600 tokens)"),
        (
            [100, 3000],
            [10, 10],
            dict(num_gpu_blocks=1000, enable_chunked_prefill=False, max_num_batched_tokens=2048, max_num_seqs=16),
            "chunked prefill is off",
        ),
    ],
)
def test_impossible_requests_are_rejected_with_the_numbers_not_hung(inputs, outputs, scheduler, message):
    run = run_engine(requests(inputs, outputs), SchedulerConfig(**scheduler), COST)
    result = summarize(run, step_cost_model="x")
    assert result.num_completed == 1 and result.num_rejected == 1
    assert message in result.rejection_reasons[0]


def test_all_rejected_gives_unknown_latencies():
    result = summarize(
        run_engine(requests([5000], [10]), SchedulerConfig(num_gpu_blocks=10), COST), step_cost_model="x"
    )
    assert result.num_rejected == 1 and result.ttft_seconds is None and result.throughput_tokens_per_s is None


# --------------------------------------------------------------------------------------------
# Scheduling modes and limits.
# --------------------------------------------------------------------------------------------


def test_static_batching_is_slower_than_continuous_on_varied_outputs():
    workload = Workload(
        arrivals=ConcurrencyArrivals(concurrency=64),
        num_requests=640,
        input_tokens=FixedLength(tokens=256),
        output_tokens=UniformLength(low_tokens=8, high_tokens=512),
    )
    base = dict(num_gpu_blocks=100_000, max_num_seqs=64, max_num_batched_tokens=4096)
    continuous = simulate(workload, SchedulerConfig(**base), COST)
    static = simulate(workload, SchedulerConfig(**base, mode="static"), COST)
    assert static.output_tokens == continuous.output_tokens
    assert static.throughput_tokens_per_s < 0.8 * continuous.throughput_tokens_per_s


@pytest.mark.parametrize("mode", ["continuous", "static"])
def test_fixed_concurrency_keeps_at_most_n_in_flight(mode):
    workload = Workload(
        arrivals=ConcurrencyArrivals(concurrency=12),
        num_requests=200,
        input_tokens=UniformLength(low_tokens=32, high_tokens=1024),
        output_tokens=UniformLength(low_tokens=1, high_tokens=128),
    )
    run = run_engine(generate_requests(workload), SchedulerConfig(num_gpu_blocks=100_000, mode=mode), COST)
    in_flight = run.running + run.waiting
    assert in_flight.max() == 12
    # Exact check from the per-request times: at no step start are more than 12 in flight.
    for start in run.step_start_s[::7]:
        alive = (run.arrival_time_s <= start) & (run.finish_time_s > start)
        assert alive.sum() <= 12


def test_chunked_prefill_bounds_tokens_per_step():
    cost = RecordingCost()
    scheduler = SchedulerConfig(num_gpu_blocks=100_000, max_num_seqs=32, max_num_batched_tokens=2048)
    run_engine(generate_requests(poisson(5.0, 40, inp=FixedLength(tokens=20_000))), scheduler, cost)
    per_step = [c["prefill_tokens"] + c["decode_seqs"] for c in cost.calls]
    assert max(per_step) == 2048  # full steps, never more
    assert max(c["prefill_tokens"] for c in cost.calls) == 2048


def test_step_mix_has_causal_pairs_and_context_lengths():
    cost = RecordingCost()
    scheduler = SchedulerConfig(num_gpu_blocks=100, max_num_seqs=8, max_num_batched_tokens=64)
    run_engine(requests([100], [3]), scheduler, cost)
    assert cost.calls == [
        # chunk of 64 after 0 cached: 64 * (0 + 65/2); then 36 after 64: 36 * (64 + 37/2)
        dict(prefill_tokens=64, prefill_attention_pairs=2080.0, decode_seqs=0, decode_kv_tokens=0),
        dict(prefill_tokens=36, prefill_attention_pairs=2970.0, decode_seqs=0, decode_kv_tokens=0),
        dict(prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=1, decode_kv_tokens=101),
        dict(prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=1, decode_kv_tokens=102),
    ]


def test_max_num_seqs_caps_running_requests():
    scheduler = SchedulerConfig(num_gpu_blocks=100_000, max_num_seqs=10, max_num_batched_tokens=4096)
    run = run_engine(generate_requests(poisson(100.0, 200)), scheduler, COST)
    assert run.running.max() == 10


def test_prefix_cache_hits_lower_ttft():
    cold = simulate(poisson(5.0, 300, inp=FixedLength(tokens=2048)), ROOMY, COST)
    warm = simulate(poisson(5.0, 300, inp=FixedLength(tokens=2048), hit=0.75), ROOMY, COST)
    assert warm.ttft_seconds.mean < 0.5 * cold.ttft_seconds.mean
    assert warm.input_tokens == cold.input_tokens  # cached tokens are still prompt tokens


# --------------------------------------------------------------------------------------------
# Determinism and workloads.
# --------------------------------------------------------------------------------------------


def test_same_seed_same_result_different_seed_different():
    make = lambda seed: poisson(30.0, 300, inp=LognormalLength(mean_tokens=500, std_tokens=300), seed=seed)  # noqa: E731
    first, again, other = (simulate(make(s), ROOMY, COST) for s in (7, 7, 8))
    assert first == again
    assert first != other
    a, b = generate_requests(make(7)), generate_requests(make(7))
    assert np.array_equal(a.arrival_time_s, b.arrival_time_s) and np.array_equal(a.input_tokens, b.input_tokens)


@pytest.mark.parametrize(
    ("distribution", "mean", "low", "high"),
    [
        (FixedLength(tokens=300), 300, 300, 300),
        (UniformLength(low_tokens=10, high_tokens=20), 15, 10, 20),
        (NormalLength(mean_tokens=400, std_tokens=50), 400, 1, None),
        (LognormalLength(mean_tokens=256, std_tokens=256), 256, 1, None),
        (EmpiricalLength(values_tokens=(5, 7, 9)), 7, 5, 9),
    ],
)
def test_length_distributions(distribution, mean, low, high):
    lengths = distribution.sample(np.random.default_rng(0), 50_000)
    assert lengths.dtype == np.int64
    assert lengths.mean() == pytest.approx(mean, rel=0.02)
    assert lengths.min() >= low
    if high is not None:
        assert lengths.max() == high


def test_lognormal_matches_its_std_and_normal_clips_at_one():
    lengths = LognormalLength(mean_tokens=256, std_tokens=256).sample(np.random.default_rng(1), 200_000)
    assert lengths.std() == pytest.approx(256, rel=0.05)
    assert NormalLength(mean_tokens=2, std_tokens=10).sample(np.random.default_rng(1), 1000).min() == 1


def test_poisson_arrivals_start_at_zero_with_the_given_rate():
    reqs = generate_requests(poisson(4.0, 20_000))
    assert reqs.arrival_time_s[0] == 0.0
    assert np.all(np.diff(reqs.arrival_time_s) >= 0)
    assert 1 / np.diff(reqs.arrival_time_s).mean() == pytest.approx(4.0, rel=0.03)


# --------------------------------------------------------------------------------------------
# Traces.
# --------------------------------------------------------------------------------------------


def test_trace_csv_and_jsonl_load_sorted(tmp_path):
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("arrival_time_s,input_tokens,output_tokens,note\n0.5,100,10,a\n0.0,200.0,20,b\n\n")
    jsonl_path = tmp_path / "t.jsonl"
    jsonl_path.write_text(
        json.dumps(dict(arrival_time_s=0.5, input_tokens=100, output_tokens=10))
        + "\n\n"
        + json.dumps(dict(arrival_time_s=0, input_tokens=200, output_tokens=20))
        + "\n"
    )
    for path in (csv_path, jsonl_path):
        arrival, inputs, outputs = load_trace(path)
        assert arrival.tolist() == [0.0, 0.5] and inputs.tolist() == [200, 100] and outputs.tolist() == [20, 10]
    workload = Workload(arrivals=TraceArrivals(path=str(csv_path)), num_requests=None)
    result = simulate(workload, ROOMY, COST)
    assert result.num_completed == 2 and result.output_tokens == 30
    assert Workload.model_validate_json(workload.model_dump_json()) == workload  # round trip
    one = simulate(Workload(arrivals=TraceArrivals(path=str(csv_path)), num_requests=1), ROOMY, COST)
    assert one.num_completed == 1


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("t.csv", "arrival_time_s,input_tokens\n0,1\n", "line 1: the header"),
        ("t.csv", "arrival_time_s,input_tokens,output_tokens\n0,10,5\n1,abc,5\n", "line 3: input_tokens='abc'"),
        ("t.csv", "arrival_time_s,input_tokens,output_tokens\n0,10,5\n1,10,0\n", "line 3: output_tokens='0'"),
        ("t.csv", "arrival_time_s,input_tokens,output_tokens\n-1,10,5\n", "line 2: arrival_time_s='-1'"),
        ("t.csv", "arrival_time_s,input_tokens,output_tokens\n0,10.5,5\n", "line 2: input_tokens='10.5'"),
        ("t.csv", "arrival_time_s,input_tokens,output_tokens\n0,10\n", "line 2: 2 fields"),
        ("t.csv", "arrival_time_s,input_tokens,output_tokens\n", "has no requests"),
        ("t.jsonl", '{"arrival_time_s": 0, "input_tokens": 1, "output_tokens": 1}\n{oops\n', "line 2: not valid JSON"),
        ("t.jsonl", '{"arrival_time_s": 0, "input_tokens": 1}\n', "line 1: missing output_tokens"),
        ("t.jsonl", "[1, 2, 3]\n", "line 1: expected a JSON object"),
        ("t.jsonl", '{"arrival_time_s": 0, "input_tokens": true, "output_tokens": 1}\n', "line 1: input_tokens=True"),
        (
            "t.jsonl",
            '{"arrival_time_s": 0, "input_tokens": 1' + "0" * 400 + ', "output_tokens": 1}\n',
            "line 1: input_tokens=",
        ),
        ("t.jsonl", '{"arrival_time_s": [0], "input_tokens": 1, "output_tokens": 1}\n', "line 1: arrival_time_s=[0]"),
        ("t.txt", "whatever", "expected .csv or .jsonl"),
    ],
)
def test_bad_trace_names_the_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_trace(path)
    assert message in str(err.value)


def test_missing_trace_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_trace(tmp_path / "nope.csv")


# --------------------------------------------------------------------------------------------
# Specs: impossible settings.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: SchedulerConfig(num_gpu_blocks=10, max_num_seqs=512, max_num_batched_tokens=256),
            "below max_num_seqs=512",
        ),
        (
            lambda: SchedulerConfig(num_gpu_blocks=10, enable_chunked_prefill=False, max_model_len=32768),
            "max_model_len=32768 exceeds max_num_batched_tokens=8192",
        ),
        (lambda: UniformLength(low_tokens=20, high_tokens=10), "high_tokens=10 is below low_tokens=20"),
        (lambda: Workload(num_requests=None), "means 'every row of the trace'"),
    ],
)
def test_impossible_settings_raise_scenario_error(build, message):
    with pytest.raises(ScenarioError, match=message):
        build()


def test_trace_shorter_than_num_requests(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,input_tokens,output_tokens\n0,10,5\n")
    with pytest.raises(ScenarioError, match=r"has 1 rows\. .*None to replay every row"):
        generate_requests(Workload(arrivals=TraceArrivals(path=str(path)), num_requests=5))


def test_specs_are_frozen_and_strict():
    with pytest.raises(ValidationError):
        SchedulerConfig(num_gpu_blocks=10, max_num_sequences=3)
    config = SchedulerConfig(num_gpu_blocks=10)
    with pytest.raises(ValidationError):
        config.max_num_seqs = 3  # type: ignore[misc]
    for model in (SchedulerConfig, Workload, LinearStepCost):
        assert all(f.description for f in model.model_fields.values()), model


def test_bad_step_cost_is_reported():
    class Broken:
        def step_seconds(self, **mix):
            return float("nan")

    with pytest.raises(ScenarioError, match="finite time"):
        run_engine(requests([10], [2]), ROOMY, Broken())


# --------------------------------------------------------------------------------------------
# Statistics and layering.
# --------------------------------------------------------------------------------------------


def test_weighted_stats_equal_stats_of_the_repeated_sample():
    rng = np.random.default_rng(3)
    values, weights = rng.random(50), rng.integers(0, 40, 50)
    expected = latency_stats(np.repeat(values, weights))
    got = weighted_latency_stats(values, weights)
    assert got.count == expected.count
    for field in ("mean", "p50", "p90", "p99"):
        assert getattr(got, field) == pytest.approx(getattr(expected, field), rel=1e-12)


def test_timeline_is_thinned_to_2000_points():
    result = simulate(poisson(20.0, 1000), ROOMY, COST)
    assert result.num_steps > 2000
    assert len(result.timeline.time_seconds) == 2000
    assert list(result.timeline.time_seconds) == sorted(result.timeline.time_seconds)


def test_serve_imports_neither_streamlit_nor_torch():
    code = "import sys, planner.serve; print(any(m in sys.modules for m in ('streamlit', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------------------------
# Cross-check against a direct, slow transcription of the vLLM V1 scheduling loop.
# --------------------------------------------------------------------------------------------


def reference_engine(reqs: RequestSet, scheduler: SchedulerConfig, cost) -> dict:
    """Walk the running list request by request each step, as vllm/v1/core/sched/scheduler.py does.

    No aggregates, no step-indexed bookkeeping: every token time is stored. Slow but obvious.
    """
    from collections import deque

    from planner.serve.simulate import cached_prefix_tokens, rejections

    n, bs = len(reqs), scheduler.block_size_tokens
    cdiv = lambda a: -(-a // bs)  # noqa: E731
    prompt, out = reqs.input_tokens.tolist(), reqs.output_tokens.tolist()
    cached = cached_prefix_tokens(reqs.input_tokens, reqs.prefix_cache_hit_rate, bs).tolist()
    rejected = rejections(reqs, scheduler, np.asarray(cached))[0].tolist()
    closed = reqs.concurrency is not None
    arrival = [np.nan] * n if closed else reqs.arrival_time_s.tolist()
    computed, ntok, gen = [0] * n, prompt[:], [0] * n
    decoding = [False] * n
    tokens: list[list[float]] = [[] for _ in range(n)]
    finish = [np.nan] * n
    running: list[int] = []
    waiting: deque[int] = deque()
    used, preemptions, t, next_id = 0, 0, 0.0, 0

    def arrive(now, count):
        nonlocal next_id
        while count and next_id < n:
            arrival[next_id] = now
            if not rejected[next_id]:
                waiting.append(next_id)
                count -= 1
            next_id += 1

    if closed:
        arrive(0.0, reqs.concurrency)
    while True:
        while not closed and next_id < n and arrival[next_id] <= t:
            if not rejected[next_id]:
                waiting.append(next_id)
            next_id += 1
        if not running and not waiting:
            if closed or next_id >= n:
                break
            t = arrival[next_id]
            continue
        budget, free, scheduled, preempted = (
            scheduler.max_num_batched_tokens,
            scheduler.num_gpu_blocks - used,
            {},
            False,
        )
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            new = min(ntok[r] - computed[r], budget)
            need = cdiv(computed[r] + new) - cdiv(computed[r])
            gone = False
            while need > free:
                v = running.pop()
                free += cdiv(computed[v])
                used -= cdiv(computed[v])
                computed[v], decoding[v], ntok[v] = 0, False, prompt[v] + gen[v]
                waiting.appendleft(v)
                preemptions += 1
                preempted = True
                if v == r:
                    gone = True
                    break
            if gone:
                break
            free -= need
            used += need
            scheduled[r] = new
            budget -= new
            i += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < scheduler.max_num_seqs:
                r = waiting[0]
                new = ntok[r] - cached[r]
                if new > budget:
                    if not scheduler.enable_chunked_prefill:
                        break
                    new = budget
                if cdiv(cached[r] + new) > free:
                    break
                waiting.popleft()
                computed[r] = cached[r]
                free -= cdiv(cached[r] + new)
                used += cdiv(cached[r] + new)
                running.append(r)
                scheduled[r] = new
                budget -= new
        if not scheduled:
            continue
        mix = dict(prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=0, decode_kv_tokens=0)
        for r, new in scheduled.items():
            if decoding[r]:
                mix["decode_seqs"] += 1
                mix["decode_kv_tokens"] += computed[r] + 1
            else:
                mix["prefill_tokens"] += new
                mix["prefill_attention_pairs"] += new * (computed[r] + (new + 1) * 0.5)
        t += cost.step_seconds(**mix)
        for r, new in scheduled.items():
            computed[r] += new
            if computed[r] == ntok[r]:
                tokens[r].append(t)
                gen[r] += 1
                ntok[r] += 1
                decoding[r] = True
                if gen[r] == out[r]:
                    finish[r] = t
                    running.remove(r)
                    used -= cdiv(computed[r])
                    if closed:
                        arrive(t, 1)
    first = [ts[0] if ts else np.nan for ts in tokens]
    itl = np.concatenate([np.diff(ts) for ts in tokens if len(ts) > 1] or [np.zeros(0)])
    return dict(first=np.asarray(first), finish=np.asarray(finish), itl=itl, preemptions=preemptions)


@pytest.mark.parametrize(
    ("arrivals", "blocks", "chunked", "hit"),
    [
        (PoissonArrivals(request_rate_per_s=30.0), 100_000, True, 0.0),
        (PoissonArrivals(request_rate_per_s=30.0), 120, True, 0.0),
        (PoissonArrivals(request_rate_per_s=60.0), 90, True, 0.4),
        (PoissonArrivals(request_rate_per_s=60.0), 150, False, 0.0),
        (ConcurrencyArrivals(concurrency=20), 100, True, 0.2),
        (ConcurrencyArrivals(concurrency=20), 100_000, False, 0.0),
    ],
)
def test_engine_matches_the_direct_transcription(arrivals, blocks, chunked, hit):
    workload = Workload(
        arrivals=arrivals,
        num_requests=150,
        input_tokens=UniformLength(low_tokens=1, high_tokens=600),
        output_tokens=UniformLength(low_tokens=1, high_tokens=120),
        prefix_cache_hit_rate=hit,
        seed=11,
    )
    scheduler = SchedulerConfig(
        num_gpu_blocks=blocks,
        block_size_tokens=16,
        max_num_seqs=24,
        max_num_batched_tokens=512,
        enable_chunked_prefill=chunked,
    )
    reqs = generate_requests(workload)
    run = run_engine(reqs, scheduler, COST)
    expected = reference_engine(reqs, scheduler, COST)
    assert run.preemptions == expected["preemptions"]
    assert (run.preemptions > 0) is (blocks < 1000)
    np.testing.assert_allclose(run.first_token_time_s, expected["first"], rtol=1e-12)
    np.testing.assert_allclose(run.finish_time_s, expected["finish"], rtol=1e-12)
    got = summarize(run, step_cost_model="x").itl_seconds
    want = latency_stats(expected["itl"])
    assert got.count == want.count
    for field in ("mean", "p50", "p90", "p99"):
        assert getattr(got, field) == pytest.approx(getattr(want, field), rel=1e-9)
