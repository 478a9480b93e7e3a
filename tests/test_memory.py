"""Memory plan: vLLM's KV sizing rules, published startup logs, verdicts and suggestions."""

from __future__ import annotations

import pytest

from planner.errors import ScenarioError
from planner.estimate.memory import kv_layout, plan_memory, stage_layers, weight_bytes
from planner.estimate.resolve import resolve
from planner.hardware import get_profile, load_profiles, profile_from_detected
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.units import GiB


def spec(repo: str):
    return build_spec(load_config(repo, prefer="catalog").config, repo)


def test_rtx3090_log_of_vllm_issue_10517():
    """measured_public.json, vllm-project/vllm#10517 (V0 log, Llama-3.1-8B-Instruct, RTX 3090):
    total 23.58 GiB, util 0.9, weights 14.99 GiB, non-torch 0.35 GiB, profile over max_model_len
    20000 tokens (no chunked prefill) -> 'Available KV cache memory' 3.81 GiB, 1952 blocks."""
    hw = profile_from_detected(
        "NVIDIA GeForce RTX 3090", int(23.58 * GiB), hbm_bandwidth_bytes_per_s=936e9, peak_flops_per_s={"bf16": 71e12}
    )
    sc = Scenario(
        gpu=hw.id,
        max_model_len=20000,
        gpu_memory_utilization=0.9,
        enable_chunked_prefill=False,
        non_torch_memory_bytes=int(0.35 * GiB),
        engine="eager",
        max_num_seqs=256,
    )
    plan = plan_memory(spec("meta-llama/Llama-3.1-8B"), hw, sc)
    assert plan.weight_bytes_per_gpu / GiB == pytest.approx(14.99, rel=0.01)
    assert plan.kv_cache_bytes_per_gpu / GiB == pytest.approx(3.81, rel=0.03)
    assert plan.num_gpu_blocks == pytest.approx(1952, rel=0.03)
    assert plan.max_concurrency == pytest.approx(1.56, rel=0.03)
    # the same user at max_model_len 29000: activation peak +0.92 GiB, KV 2.89 GiB, 0.82x -> refuses to start
    longer = plan_memory(spec("meta-llama/Llama-3.1-8B"), hw, sc.model_copy(update={"max_model_len": 29000}))
    assert (longer.activation_bytes_per_gpu - plan.activation_bytes_per_gpu) / GiB == pytest.approx(0.92, rel=0.05)
    assert longer.kv_cache_bytes_per_gpu / GiB == pytest.approx(2.89, rel=0.05)
    assert not longer.fits and longer.max_concurrency == pytest.approx(0.82, rel=0.05)


def test_uniform_blocks_follow_vllm_formula():
    """num_blocks = avail // (L x block_size x 2 x K x d x b); tokens = blocks x block_size."""
    model = spec("meta-llama/Meta-Llama-3-8B")
    plan = plan_memory(model, get_profile("h100-sxm"), Scenario(max_model_len=8192))
    assert plan.bytes_per_block == 32 * 16 * 2 * 8 * 128 * 2
    assert plan.num_gpu_blocks == plan.kv_cache_bytes_per_gpu // plan.bytes_per_block
    assert plan.kv_cache_tokens == plan.num_gpu_blocks * 16
    assert plan.max_concurrency == pytest.approx(plan.num_gpu_blocks / (8192 / 16), abs=0.01)


def test_kv_dtype_fp8_halves_block_bytes_and_roughly_doubles_tokens():
    model, hw = spec("meta-llama/Meta-Llama-3-8B"), get_profile("h100-sxm")
    bf16 = plan_memory(model, hw, Scenario(max_model_len=8192))
    fp8 = plan_memory(model, hw, Scenario(max_model_len=8192, kv_cache_dtype="fp8"))
    assert fp8.bytes_per_block * 2 == bf16.bytes_per_block
    assert fp8.num_gpu_blocks == pytest.approx(2 * bf16.num_gpu_blocks, abs=1)


def test_gemma2_hybrid_groups_cap_sliding_layers():
    """21 sliding + 21 full -> 2 groups of 21; sliding reserves cdiv(min(W-1+in_flight, len), bs) + 1 blocks."""
    model = spec("google/gemma-2-9b")
    res = resolve(model, get_profile("h100-sxm"), Scenario(max_model_len=8192, max_num_batched_tokens=2048))
    layout = kv_layout(model.kv_specs(1, 2.0), res)
    page = 16 * 2 * 8 * 256 * 2
    assert layout.bytes_per_block == 21 * page
    assert layout.blocks_per_request == 8192 // 16 + (-(-(4096 - 1 + 2048) // 16) + 1)


def test_gemma3_five_to_one_groups():
    """gemma-3-1b: 22 sliding (512) + 4 global -> group size 4: 6 sliding groups (2 padding layers) + 1 global."""
    model = spec("google/gemma-3-1b-pt")
    res = resolve(model, get_profile("l4"), Scenario(gpu="l4", max_model_len=32768, max_num_batched_tokens=2048))
    layout = kv_layout(model.kv_specs(1, 2.0), res)
    assert layout.bytes_per_block == 4 * 16 * 2 * 1 * 256 * 2
    assert layout.blocks_per_request == 6 * (-(-(512 - 1 + 2048) // 16) + 1) + 32768 // 16


def test_mla_block_size_64_and_kv_not_sharded():
    model = spec("deepseek-ai/DeepSeek-V3")
    hw = get_profile("h200")
    p8 = plan_memory(model, hw, Scenario(gpu="h200", tp=8, max_model_len=32768))
    assert p8.resolved.block_size == 64
    assert p8.kv_bytes_per_token_per_gpu == 61 * 576 * 2


def test_mamba_state_is_per_sequence_and_jamba_block_aligned():
    mamba = spec("state-spaces/mamba-130m-hf")
    assert mamba.kv_bytes_per_token() == 0
    assert mamba.state_bytes_per_sequence() == 24 * 1536 * (3 + 16) * 2
    jamba = spec("ai21labs/AI21-Jamba-1.5-Mini")
    res = resolve(jamba, get_profile("h100-sxm"), Scenario(max_model_len=8192))
    layout = kv_layout(jamba.kv_specs(1, 2.0), res)
    # formulas.md 2.3: mamba page 311,296 B vs 4,096 B/token attention page -> block_size 80
    assert layout.block_size == 80


def test_pipeline_split_like_vllm():
    """vllm/distributed/utils.py get_pp_indices: the remainder goes to partitions[-2], [-3], ..."""
    assert [len(r) for r in stage_layers(61, 4)] == [15, 15, 16, 15]
    assert [len(r) for r in stage_layers(62, 4)] == [15, 16, 16, 15]
    assert [len(r) for r in stage_layers(32, 2)] == [16, 16]


def test_70b_on_one_h100_does_not_start_and_says_what_would():
    plan = plan_memory(spec("meta-llama/Llama-3.1-70B"), get_profile("h100-sxm"), Scenario(max_model_len=8192))
    assert not plan.fits
    assert "does not start" in plan.reason and "GiB" in plan.reason
    assert any("--tensor-parallel-size" in s for s in plan.suggestions)


def test_fits_if_max_model_len_is_exact():
    model, hw = spec("meta-llama/Llama-3.1-8B"), get_profile("l4")
    sc = Scenario(gpu="l4", max_model_len=131072)
    plan = plan_memory(model, hw, sc)
    assert not plan.fits
    best = plan.max_model_len_that_fits
    assert best and any(f"--max-model-len <= {best:,}" in s for s in plan.suggestions)
    assert plan_memory(model, hw, sc.model_copy(update={"max_model_len": best})).fits
    assert not plan_memory(model, hw, sc.model_copy(update={"max_model_len": best + 16})).fits


BAD_SCENARIOS = [
    ("tp does not divide heads", "meta-llama/Llama-3.1-8B", dict(tp=3), "does not divide the 32 attention heads"),
    (
        "too long",
        "meta-llama/Llama-2-7b-hf",
        dict(max_model_len=100_000),
        "exceeds the model's maximum context of 4,096",
    ),
    ("bad kv dtype", "meta-llama/Llama-3.1-8B", dict(kv_cache_dtype="fp3"), "unknown --kv-cache-dtype"),
    ("bad weight dtype", "meta-llama/Llama-3.1-8B", dict(weight_dtype="int3"), "unknown --weight-dtype"),
    ("requantize", "Qwen/Qwen3-4B-AWQ", dict(weight_dtype="bf16"), "already awq-quantized"),
    ("pp > layers", "openai-community/gpt2", dict(pp=13), "exceeds the 12 layers"),
]


@pytest.mark.parametrize("case,repo,change,fragment", BAD_SCENARIOS, ids=[c[0] for c in BAD_SCENARIOS])
def test_impossible_scenarios_raise_clear_errors(case, repo, change, fragment):
    with pytest.raises(ScenarioError) as info:
        plan_memory(spec(repo), get_profile("h100-sxm"), Scenario(**change))
    assert fragment in str(info.value)


def test_num_gpus_fewer_than_tp_pp():
    with pytest.raises(ScenarioError, match="fewer than --tp 4 x --pp 2"):
        Scenario(tp=4, pp=2, num_gpus=4)


def test_quantized_weights_shrink():
    model = spec("meta-llama/Llama-3.1-70B")
    bf16, fp8, int4 = (weight_bytes(model, d) for d in ("auto", "fp8", "int4"))
    assert fp8 < 0.56 * bf16 and int4 < 0.32 * bf16
    # a 70B W8A8 checkpoint loads 67.72 GiB in vLLM (measured_public.json, vllm PR #12569)
    assert fp8 / GiB == pytest.approx(67.72, rel=0.02)


def test_every_profile_plans_a_small_model():
    model = spec("Qwen/Qwen2.5-0.5B")
    for hw in load_profiles().values():
        plan = plan_memory(model, hw, Scenario(gpu=hw.id, max_model_len=4096))
        assert plan.fits, (hw.id, plan.reason)
