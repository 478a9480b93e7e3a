"""A request's KV blocks over every KV-cache group (``KVBlockGroups``): the memory plan's layout says which groups
a model's layers form (vLLM's hybrid KV-cache manager), and the simulator charges each request its blocks in all of
them. Before, it charged one full-attention group at the resolved block size: gpt-oss, Gemma-2/3 and Phi-3 held more
requests than vLLM does (their sliding groups were free), and Jamba, Qwen3-Next and Mamba-Codestral were charged
16-token blocks of a pool whose blocks hold 80 to 544 tokens, and nothing for their recurrent state.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import ScenarioError
from planner.estimate.memory import plan_memory
from planner.hardware import get_profile
from planner.model.kv import KVBlockGroups
from planner.scenario import Scenario
from planner.serve.replica import planned_replica, scheduler_config
from planner.serve.saturation import full_batch_requests
from planner.serve.simulate import LinearStepCost, SchedulerConfig, run_engine
from planner.serve.workload import ConcurrencyArrivals, FixedLength, Workload, generate_requests
from planner.verify.public_records import catalog_model

H100 = "h100-sxm"


def _plan(repo: str, **fields):
    fields = {"max_model_len": 8192, **fields}
    return plan_memory(catalog_model(repo), get_profile(H100), Scenario(**fields), suggest=False)


@pytest.mark.parametrize(
    "repo,fields,groups",
    [
        # 12 sliding (window 128) + 12 full layers: one group each; a window holds cdiv(128, 16) + 1 = 9 blocks
        ("openai/gpt-oss-20b", {}, KVBlockGroups(block_tokens=16, full_groups=1, window_groups=((1, 9),))),
        # 29 sliding (window 1,024) + 5 full: groups of 5 layers, so 6 sliding groups of cdiv(1024, 16) + 1 = 65
        ("google/gemma-3-4b-it", {}, KVBlockGroups(block_tokens=16, full_groups=1, window_groups=((6, 65),))),
        # 28 Mamba + 4 attention layers: the block grows to 80 tokens for a Mamba page; 7 state groups
        ("ai21labs/AI21-Jamba-1.5-Mini", {"tp": 2}, KVBlockGroups(block_tokens=80, full_groups=1, state_blocks=7)),
        # every layer a Mamba layer: one block (one state) per request, whatever its length
        ("mistralai/Mamba-Codestral-7B-v0.1", {"max_model_len": 2048}, None),
    ],
)
def test_the_plan_names_the_groups_a_request_draws_blocks_from(repo, fields, groups):
    plan = _plan(repo, **fields)
    if groups is not None:
        assert plan.kv_block_groups == groups
    else:
        found = plan.kv_block_groups
        assert found is not None and (found.full_groups, found.window_groups, found.state_blocks) == (0, (), 1)
        assert found.blocks(1) == found.blocks(2000) == 1
    assert "kv_block_groups" in plan.model_dump(mode="json")


def test_one_kind_of_layer_is_one_group_and_the_dump_is_unchanged():
    for repo in ("meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V2-Lite"):
        plan = _plan(repo)
        assert plan.kv_block_groups is None
        assert "kv_block_groups" not in plan.model_dump(mode="json")
        assert scheduler_config(plan, Scenario(max_model_len=8192)).kv_block_groups is None


def test_a_window_as_long_as_the_context_is_full_attention():
    """Phi-3-mini's 2,047-token window at a 2,048-token context holds every block a request can have."""
    assert _plan("microsoft/Phi-3-mini-4k-instruct", max_model_len=2048).kv_block_groups is None
    window = KVBlockGroups(block_tokens=16, full_groups=0, window_groups=((1, 129),))
    assert _plan("microsoft/Phi-3-mini-4k-instruct", max_model_len=4096).kv_block_groups == window


def test_blocks_by_hand():
    groups = KVBlockGroups(block_tokens=16, full_groups=1, window_groups=((2, 9), (1, 40)), state_blocks=3)
    # 1,000 tokens: 63 blocks in the full group, 2 x 9 in the 128-token windows, 40 in the longer one, 3 states
    assert groups.blocks(1000) == 63 + 18 + 40 + 3
    assert groups.blocks(100) == 7 + 2 * 7 + 7 + 3
    assert groups.blocks(0) == 0
    tokens = np.array([0, 1, 16, 17, 100, 1000, 5000])
    assert groups.blocks_array(tokens).tolist() == [groups.blocks(int(t)) for t in tokens]
    assert groups.fractional_blocks(160.0) == pytest.approx(10 + 2 * 9 + 10 + 3)
    assert groups.words() == (
        "cdiv(t, 16) x 1 full-attention group + min(cdiv(t, 16), 9) x 2 sliding-window groups + "
        "min(cdiv(t, 16), 40) x 1 sliding-window group + 3 recurrent-state blocks"
    )


def test_the_scheduler_takes_the_plans_block_size_with_its_groups():
    plan, scheduler = planned_replica(catalog_model("ai21labs/AI21-Jamba-1.5-Mini"), get_profile(H100), Scenario(tp=2))
    assert plan.resolved.block_size == 16 and scheduler.block_size_tokens == 80
    assert scheduler.kv_block_groups == plan.kv_block_groups
    with pytest.raises(ScenarioError, match="blocks of 80 tokens but block_size_tokens=16"):
        SchedulerConfig(num_gpu_blocks=100, block_size_tokens=16, kv_block_groups=plan.kv_block_groups)


def _one_request_trace(scheduler: SchedulerConfig, prompt: int, output: int) -> np.ndarray:
    requests = generate_requests(
        Workload(
            arrivals=ConcurrencyArrivals(concurrency=1),
            num_requests=1,
            input_tokens=FixedLength(tokens=prompt),
            output_tokens=FixedLength(tokens=output),
        )
    )
    cost = LinearStepCost(fixed_seconds=1e-3, per_token_seconds=1e-6)
    return run_engine(requests, scheduler, cost).used_blocks


@pytest.mark.parametrize("prompt,output", [(100, 300), (5, 200), (600, 40)])
@pytest.mark.parametrize("mixed", [True, False])
def test_a_request_holds_its_blocks_in_every_group_at_every_step(prompt, output, mixed):
    """With one-token blocks the plain pool counts a request's tokens; the grouped pool must hold exactly
    ``blocks`` of that many tokens at every step (prefill, each decode step, the window filling then sliding)."""
    groups = KVBlockGroups(block_tokens=16, full_groups=1, window_groups=((2, 9), (1, 20)), state_blocks=3)
    plain = SchedulerConfig(num_gpu_blocks=10**6, block_size_tokens=1, mixed_batches=mixed)
    tokens = _one_request_trace(plain, prompt, output)
    held = _one_request_trace(
        SchedulerConfig(num_gpu_blocks=10**6, block_size_tokens=16, kv_block_groups=groups, mixed_batches=mixed),
        prompt,
        output,
    )
    assert held.tolist() == [groups.blocks(int(t)) for t in tokens]
    assert tokens.max() > 9 * 16  # the 9-block windows filled and slid within the run


def test_a_pool_holds_fewer_requests_when_every_group_is_charged():
    """A burst of 400 requests of 1,000 + 200 tokens into 20,000 blocks: one group holds 20,000 / 75 = 266 at
    their full length; with a 128-token window beside it (9 blocks more each) 20,000 / 84 = 238."""
    requests = generate_requests(
        Workload(
            arrivals=ConcurrencyArrivals(concurrency=400),
            num_requests=400,
            input_tokens=FixedLength(tokens=1000),
            output_tokens=FixedLength(tokens=200),
        )
    )
    cost = LinearStepCost(fixed_seconds=5e-3, per_token_seconds=2e-5)
    one = run_engine(requests, SchedulerConfig(num_gpu_blocks=20_000, max_num_seqs=1024), cost)
    groups = KVBlockGroups(block_tokens=16, full_groups=1, window_groups=((1, 9),))
    two = run_engine(requests, SchedulerConfig(num_gpu_blocks=20_000, max_num_seqs=1024, kv_block_groups=groups), cost)
    assert one.used_blocks.max() <= 20_000 and two.used_blocks.max() <= 20_000
    peak_one, peak_two = int(one.decode_seqs.max()), int(two.decode_seqs.max())
    assert 255 <= peak_one <= 320  # admitted on their prompts (63 blocks), then preempted as they grow
    assert peak_two < peak_one and peak_two <= 20_000 // (63 + 9) + 1


def test_a_request_larger_than_the_pool_is_refused_with_its_blocks():
    groups = KVBlockGroups(block_tokens=16, full_groups=1, window_groups=((4, 9),), state_blocks=2)
    requests = generate_requests(
        Workload(
            arrivals=ConcurrencyArrivals(concurrency=1),
            num_requests=2,
            input_tokens=FixedLength(tokens=1000),
            output_tokens=FixedLength(tokens=25),
        )
    )
    # 1,024 tokens held at the last step: 64 + 4 x 9 + 2 = 102 blocks; 101 is one short
    cost = LinearStepCost(fixed_seconds=1e-3)
    run = run_engine(requests, SchedulerConfig(num_gpu_blocks=101, kv_block_groups=groups), cost)
    assert run.rejected.all()
    assert "need up to 102 KV blocks" in run.rejection_reasons[0]
    assert not run_engine(requests, SchedulerConfig(num_gpu_blocks=102, kv_block_groups=groups), cost).rejected.any()


def test_the_analytic_full_batch_counts_every_group():
    plain = SchedulerConfig(num_gpu_blocks=72_000)
    groups = KVBlockGroups(block_tokens=16, full_groups=1, window_groups=((1, 9),))
    grouped = SchedulerConfig(num_gpu_blocks=72_000, kv_block_groups=groups)
    assert full_batch_requests(plain, 1000, 152) == 1000  # 72,000 x 16 / 1,152 = 1,000 (max_num_seqs 1,024)
    assert full_batch_requests(grouped, 1000, 152) == int(72_000 / (72 + 9))  # 888
