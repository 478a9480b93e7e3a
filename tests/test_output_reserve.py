"""Admission with an output reserve (engine profile ``output_reserve``): SGLang's new-token ratio and
TensorRT-LLM's GUARANTEED_NO_EVICT hold KV back for outputs not generated yet; vLLM holds none."""

from __future__ import annotations

import numpy as np
import pytest

from planner.engine import OutputReserve, engine_profiles
from planner.serve.simulate import LinearStepCost, SchedulerConfig, run_engine
from planner.serve.workload import RequestSet

COST = LinearStepCost(
    fixed_seconds=5e-3, per_token_seconds=5e-5, per_attention_pair_seconds=1e-11, per_kv_token_seconds=1e-7
)
SGLANG = OutputReserve(new_request=1.0, running_initial=0.7, running_floor=0.098, decay_steps=600, clip_tokens=4096)
NO_EVICT = OutputReserve(new_request=1.0, running_initial=1.0, running_floor=1.0, decay_steps=0)


def burst(n: int, prompt: int, output: int) -> RequestSet:
    return RequestSet(None, np.full(n, prompt, dtype=np.int64), np.full(n, output, dtype=np.int64), n, 0.0)


def run(reserve: OutputReserve | None, *, blocks: int, n: int = 64, prompt: int = 256, output: int = 256, mixed=True):
    scheduler = SchedulerConfig(
        num_gpu_blocks=blocks,
        max_num_seqs=256,
        max_num_batched_tokens=4096,
        output_reserve=reserve,
        mixed_batches=mixed,
    )
    return run_engine(burst(n, prompt, output), scheduler, COST)


def test_ratio_decays_linearly_to_its_floor():
    assert SGLANG.running_ratio(0) == 0.7
    assert SGLANG.running_ratio(300) == pytest.approx(0.7 - (0.7 - 0.098) / 2)
    assert SGLANG.running_ratio(600) == pytest.approx(0.098)
    assert SGLANG.running_ratio(10_000) == pytest.approx(0.098)
    assert NO_EVICT.running_ratio(10_000) == 1.0


def test_the_profiles_carry_the_cited_reserves():
    profiles = engine_profiles()
    assert profiles["sglang"].output_reserve == SGLANG
    assert profiles["trtllm"].output_reserve == NO_EVICT
    assert all(profiles[p].output_reserve is None for p in ("vllm-v1", "vllm-v1-async", "vllm-v0", "vllm-legacy"))


def test_a_roomy_pool_admits_everyone_at_once_either_way():
    # 64 x (256 + 256) tokens = 2,048 blocks of 16, well inside 10,000: the reserve never binds
    for reserve in (None, SGLANG, NO_EVICT):
        r = run(reserve, blocks=10_000)
        assert r.running.max() == 64
        assert r.preemptions == 0


def test_a_tight_pool_admits_fewer_with_a_reserve_and_no_evict_never_preempts():
    # 600 blocks = 9,600 tokens: every prompt fits (64 x 256 = 16,384 > 9,600 only with outputs counted)
    greedy, sglang, no_evict = (run(reserve, blocks=600) for reserve in (None, SGLANG, NO_EVICT))
    # vLLM admits on the prompt's blocks alone: 37 prompts of 16 blocks, then preempts as decodes grow
    assert greedy.running.max() > sglang.running.max() > no_evict.running.max()
    assert greedy.preemptions > 0
    assert no_evict.preemptions == 0
    # GUARANTEED_NO_EVICT: prompt + whole output = 32 blocks each, so at most 600 // 32 = 18 at once
    assert no_evict.running.max() <= 600 * 16 // (256 + 256)
    for r in (greedy, sglang, no_evict):
        assert np.isfinite(r.finish_time_s).all()  # everyone is served in the end


def test_an_unmixed_engine_interleaves_admissions_with_decodes():
    # SGLang's prefill-first engine: with the reserve, later admissions come as earlier requests finish, each a
    # prefill-only step between decode steps, so some prompts wait far longer for their first token
    free = run(None, blocks=10_000, mixed=False)
    held = run(SGLANG, blocks=600, mixed=False)
    assert np.nanmax(held.first_token_time_s) > 2 * np.nanmax(free.first_token_time_s)
    # prefill-only steps between decode steps: the steps with prefill tokens are not all at the start
    prefill_steps = np.flatnonzero(held.prefill_tokens > 0)
    decode_steps = np.flatnonzero(held.decode_seqs > 0)
    assert prefill_steps.max() > decode_steps.min()


def test_the_reserve_reads_as_a_sentence():
    assert SGLANG.words() == (
        "a prompt is admitted only while KV is left for its whole output and for the running requests' remaining "
        "outputs x 0.7 falling to 0.098 over 600 decode steps, at most 4,096 tokens a request"
    )
    assert NO_EVICT.words() == (
        "a prompt is admitted only while KV is left for its whole output and for the running requests' whole "
        "remaining outputs"
    )
