"""Engines that never put prefill and decode in one step (SGLang's default, vLLM V0 without chunked prefill).

``SchedulerConfig.mixed_batches=False``: a step that admits prefills runs only prefills; the decodes wait.
Checked: no step mixes; every token is still counted once; a decode gap that spans prefill-only steps is
one ITL sample of that length (so the weighted ITL sum equals each request's first-to-last token time);
under a burst the decodes wait, so TPOT rises and TTFT falls against the mixed engine; the engine
profiles carry the rule with its source.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.engine import engine_profiles
from planner.serve.simulate import LinearStepCost, SchedulerConfig, run_engine, summarize
from planner.serve.workload import PoissonArrivals, UniformLength, Workload, generate_requests

COST = LinearStepCost(
    fixed_seconds=5e-3, per_token_seconds=5e-5, per_attention_pair_seconds=1e-11, per_kv_token_seconds=1e-7
)


def _burst(n: int = 300) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=200.0),
        num_requests=n,
        input_tokens=UniformLength(low_tokens=64, high_tokens=1500),
        output_tokens=UniformLength(low_tokens=2, high_tokens=200),
        seed=3,
    )


def _run(mixed: bool, blocks: int = 100_000, max_num_seqs: int = 128):
    scheduler = SchedulerConfig(
        num_gpu_blocks=blocks, max_num_seqs=max_num_seqs, max_num_batched_tokens=2048, mixed_batches=mixed
    )
    reqs = generate_requests(_burst())
    run = run_engine(reqs, scheduler, COST)
    return reqs, run, summarize(run, step_cost_model="LinearStepCost")


@pytest.mark.parametrize("blocks", [100_000, 400])
def test_no_step_carries_prefill_and_decode(blocks):
    _, run, _ = _run(False, blocks)
    assert not np.any((run.prefill_tokens > 0) & (run.decode_seqs > 0))
    _, mixed_run, _ = _run(True, blocks)
    assert np.any((mixed_run.prefill_tokens > 0) & (mixed_run.decode_seqs > 0))  # the default does mix


@pytest.mark.parametrize("blocks", [100_000, 400])
def test_every_token_is_counted_once(blocks):
    reqs, run, result = _run(False, blocks)
    done = ~np.isnan(run.finish_time_s)
    assert result.num_completed == len(reqs.input_tokens) and not run.rejected.any()
    once = int((reqs.input_tokens + reqs.output_tokens - 1)[done].sum())
    assert run.prefill_tokens.sum() + run.decode_seqs.sum() == once + result.recomputed_tokens
    # one ITL sample per token after the first, however the gaps were grouped
    assert result.itl_seconds.count == int((reqs.output_tokens[done] - 1).sum())


def test_itl_samples_add_up_to_each_requests_decode_time():
    _, run, result = _run(False)  # ample KV: no preemption, every gap is between two of its tokens
    assert run.preemptions == 0
    gaps = np.concatenate([run.step_seconds, run.itl_extra_seconds])
    weights = np.concatenate([run.itl_weight, run.itl_extra_weight])
    decode_time = float(np.nansum(run.finish_time_s - run.first_token_time_s))
    assert float((gaps * weights).sum()) == pytest.approx(decode_time, rel=1e-9)
    assert result.itl_seconds.mean > float(run.step_seconds[run.decode_seqs > 0].mean())  # stalls in the gaps


def test_a_burst_waits_in_decode_and_starts_sooner_unmixed():
    """With room for every request (the token budget, not max_num_seqs, limits admission), prefill first
    admits the queue sooner and the decodes wait for it."""
    _, _, mixed = _run(True, max_num_seqs=1024)
    _, _, unmixed = _run(False, max_num_seqs=1024)
    assert unmixed.tpot_seconds.mean > mixed.tpot_seconds.mean
    assert unmixed.ttft_seconds.mean < mixed.ttft_seconds.mean


@pytest.mark.parametrize(
    ("profile", "chunked", "mixes"),
    [
        ("vllm-v1-async", False, True),
        ("vllm-v1", True, True),
        ("trtllm", False, True),
        ("vllm-v0", True, True),
        ("vllm-v0", False, False),
        ("vllm-legacy", False, False),
        ("sglang", True, False),
    ],
)
def test_engine_profiles_say_whether_they_mix(profile, chunked, mixes):
    p = engine_profiles()[profile]
    assert p.mixes_batches(chunked) is mixes
    assert "mixed_batches" in p.sources
