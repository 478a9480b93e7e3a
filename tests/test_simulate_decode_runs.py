"""The simulator's decode runs change no number (issue 15's simulator row).

``_Continuous._decode_run`` takes runs of plain decode-only steps in a tighter loop, and ``StepTimeModel``
keeps each batch's decode steps (``decode_steps``) and what a step's tokens and sequences fix
(``_decode_batch``, ``_rows_by_tokens``). Here random workloads run both ways, in runs and step by step
(``_Continuous.DECODE_RUNS = False``): every per-request timestamp and every per-step array is the same to
the last bit, and a step cost that counts its calls is asked the same steps in the same order.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.estimate.latency import StepTimeModel
from planner.hardware import get_profile
from planner.model.kv import KVBlockGroups
from planner.scenario import Scenario
from planner.serve.replica import planned_replica
from planner.serve.simulate import EngineRun, LinearStepCost, SchedulerConfig, _Continuous, run_engine
from planner.serve.workload import (
    ConcurrencyArrivals,
    FixedLength,
    LognormalLength,
    PoissonArrivals,
    RequestClass,
    UniformLength,
    Workload,
    generate_requests,
)
from planner.verify.public_records import catalog_model


def _bitwise_equal(a: EngineRun, b: EngineRun) -> None:
    for field in dataclasses.fields(EngineRun):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, field.name
            assert x.tobytes() == y.tobytes(), field.name  # NaN where NaN, every bit of every float
        else:
            assert x == y, field.name


def _both_ways(requests, scheduler, make_cost, monkeypatch):
    """(in runs, step by step), each on a fresh step cost."""
    runs = run_engine(requests, scheduler, make_cost())
    with monkeypatch.context() as m:
        m.setattr(_Continuous, "DECODE_RUNS", False)
        steps = run_engine(requests, scheduler, make_cost())
    return runs, steps


def _workload(seed: int, rate: float, n: int = 600) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate),
        num_requests=n,
        seed=seed,
        input_tokens=UniformLength(low_tokens=1, high_tokens=1500),
        output_tokens=LognormalLength(mean_tokens=150, std_tokens=150),
    )


MODELS = [  # dense GQA with graphs, sliding windows eager, MLA (prefill and decode tables differ), MoE at TP 2
    ("meta-llama/Llama-3.1-8B", {}),
    ("google/gemma-2-9b", {"engine": "eager"}),
    ("deepseek-ai/DeepSeek-V2-Lite", {}),
    ("mistralai/Mixtral-8x7B-v0.1", {"tp": 2}),
    ("meta-llama/Llama-3.1-8B", {"pp": 2}),
    ("openai/gpt-oss-20b", {}),  # a sliding group of 9 blocks beside the full one
    ("ai21labs/AI21-Jamba-1.5-Mini", {"tp": 2}),  # 80-token blocks, 7 state blocks per request
]


@pytest.mark.parametrize("repo,scenario", MODELS)
@pytest.mark.parametrize("seed", [0, 1])
def test_decode_runs_match_step_by_step_on_the_step_model(repo, scenario, seed, monkeypatch):
    model, hw = catalog_model(repo), get_profile("h100-sxm")
    sc = Scenario(max_model_len=4096, **scenario)
    _, planned = planned_replica(model, hw, sc)
    tight = planned.model_copy(update={"num_gpu_blocks": 700, "max_num_seqs": 40})  # preemptions, full batches
    rng = np.random.default_rng(seed)
    for scheduler in (planned, tight, tight.model_copy(update={"mixed_batches": False})):
        requests = generate_requests(_workload(seed, float(rng.uniform(2.0, 40.0))))
        runs, steps = _both_ways(requests, scheduler, lambda: StepTimeModel(model, hw, sc), monkeypatch)
        _bitwise_equal(runs, steps)
        assert len(runs.step_seconds) > 1000
    assert tight.num_gpu_blocks < planned.num_gpu_blocks


class _Counting:
    """A step cost without ``decode_steps`` that records every call (as the SLO search's recorder does)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def step_seconds(self, **mix) -> float:
        self.calls.append(tuple(sorted(mix.items())))
        return self.inner.step_seconds(**mix)


SCHEDULERS = [
    SchedulerConfig(num_gpu_blocks=26_000),
    SchedulerConfig(num_gpu_blocks=400, max_num_seqs=32, max_num_batched_tokens=2048),
    SchedulerConfig(num_gpu_blocks=400, max_num_seqs=32, mixed_batches=False),
    SchedulerConfig(num_gpu_blocks=3_000, enable_chunked_prefill=False, max_num_batched_tokens=4096),
    SchedulerConfig(num_gpu_blocks=200_000, block_size_tokens=1),
    SchedulerConfig(num_gpu_blocks=500, scheduling_policy="priority"),
    SchedulerConfig(num_gpu_blocks=400, max_num_seqs=48, prefix_caching=True),  # preempted prefixes found again
    SchedulerConfig(  # hybrid KV groups: two windows, state blocks, a pool tight enough to preempt
        num_gpu_blocks=3_000,
        max_num_seqs=64,
        kv_block_groups=KVBlockGroups(block_tokens=16, full_groups=1, window_groups=((3, 9), (1, 40)), state_blocks=2),
    ),
    SchedulerConfig(
        num_gpu_blocks=1_500,
        block_size_tokens=32,
        mixed_batches=False,
        kv_block_groups=KVBlockGroups(block_tokens=32, full_groups=0, window_groups=((2, 17),)),
    ),
]


@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=range(len(SCHEDULERS)))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decode_runs_match_step_by_step_and_ask_the_same_steps(scheduler, seed, monkeypatch):
    linear = LinearStepCost(
        fixed_seconds=4e-3, per_token_seconds=3e-5, per_attention_pair_seconds=1e-12, per_kv_token_seconds=4e-8
    )
    rng = np.random.default_rng(100 + seed)
    workloads = [
        _workload(seed, float(rng.uniform(1.0, 60.0))),
        _workload(seed, 5.0).model_copy(update={"prefix_cache_hit_rate": 0.4}),
        Workload(
            arrivals=ConcurrencyArrivals(concurrency=int(rng.integers(1, 40))),
            num_requests=400,
            seed=seed,
            input_tokens=UniformLength(low_tokens=1, high_tokens=900),
            output_tokens=UniformLength(low_tokens=1, high_tokens=400),
        ),
        Workload(
            seed=seed,
            classes=(
                RequestClass(name="chat", request_rate_per_s=8.0, num_requests=300, priority=0),
                RequestClass(
                    name="docs",
                    request_rate_per_s=2.0,
                    num_requests=80,
                    priority=1,
                    input_tokens=FixedLength(tokens=3000),
                    output_tokens=FixedLength(tokens=64),
                ),
            ),
        ),
    ]
    for workload in workloads:
        requests = generate_requests(workload)
        counted: list[_Counting] = []

        def make(counted=counted):
            counted.append(_Counting(linear))
            return counted[-1]

        runs, steps = _both_ways(requests, scheduler, make, monkeypatch)
        _bitwise_equal(runs, steps)
        assert counted[0].calls == counted[1].calls
        assert len(counted[0].calls) == len(runs.step_seconds)


@pytest.mark.parametrize("seed", [0, 1])
def test_decode_runs_match_step_by_step_with_images(seed, monkeypatch):
    """With images the engine wraps the step cost (the encoder's seconds in the step that reaches an image);
    its decode-only steps are the inner cost's, in runs or not."""
    model, hw = catalog_model("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm")
    sc = Scenario(max_model_len=4096)
    rng = np.random.default_rng(seed)
    base = generate_requests(_workload(seed, 12.0, n=400))
    images = rng.integers(0, 4, len(base))
    requests = dataclasses.replace(
        base,
        input_tokens=base.input_tokens + images * 64,
        images=images,
        image_tokens=np.full(len(base), 64, dtype=np.int64),
        image_seconds=rng.uniform(0.001, 0.02, len(base)),
    )
    for scheduler in (SchedulerConfig(num_gpu_blocks=20_000), SchedulerConfig(num_gpu_blocks=600, max_num_seqs=24)):
        runs, steps = _both_ways(requests, scheduler, lambda: StepTimeModel(model, hw, sc), monkeypatch)
        _bitwise_equal(runs, steps)
        counted: list[_Counting] = []

        def make(counted=counted):
            counted.append(_Counting(StepTimeModel(model, hw, sc)))
            return counted[-1]

        runs, steps = _both_ways(requests, scheduler, make, monkeypatch)
        _bitwise_equal(runs, steps)
        assert counted[0].calls == counted[1].calls
        text = run_engine(
            dataclasses.replace(requests, images=None, image_tokens=None, image_seconds=None), scheduler, make()
        )
        assert not np.array_equal(runs.first_token_time_s, text.first_token_time_s)  # the encoder's seconds count


def test_kept_decode_steps_are_the_step_models_steps():
    """``decode_steps(b)[kv]`` is ``step_seconds`` of that decode-only mix on a fresh model (nothing kept), and
    a pure-decode step after mixed steps of the same tokens and sequences is unchanged by what they kept."""
    model, hw = catalog_model("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm")
    sc = Scenario(max_model_len=4096)
    kept = StepTimeModel(model, hw, sc)
    rng = np.random.default_rng(7)
    for b, c in zip(rng.integers(1, 700, 40).tolist(), rng.integers(1, 4000, 40).tolist(), strict=True):
        kv = b * c + int(rng.integers(0, b))
        kept.step_seconds(prefill_tokens=b, prefill_attention_pairs=b * 3.0, decode_seqs=0, decode_kv_tokens=0)
        fresh = StepTimeModel(model, hw, sc)
        assert kept.decode_steps(b)[kv] == fresh.step_seconds(
            prefill_tokens=0, prefill_attention_pairs=0.0, decode_seqs=b, decode_kv_tokens=kv
        )
        assert kept.decode_steps(b)[kv] == StepTimeModel(model, hw, sc).decode_seconds(b, kv / b)
