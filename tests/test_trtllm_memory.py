"""TensorRT-LLM sizes its KV cache as a share of the memory free after the weights and buffers
(``--kv_cache_free_gpu_memory_fraction``, 0.9 by default: planner/engines/trtllm.yaml ``kv_fraction_of_free``), not
as vLLM's budget of the whole card. The plan's numbers are checked against that rule done by hand on the plan's own
terms, and against vLLM's plan of the same deployment."""

from __future__ import annotations

import math

import pytest

from planner.deploy.export import export_bundle
from planner.estimate.memory import plan_memory
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import DEFAULT_GPU_MEMORY_UTILIZATION, Scenario

TRTLLM = "trtllm@1.2"


def spec(name: str):
    loaded = load_config(name)
    return build_spec(loaded.config, loaded.name), loaded


@pytest.mark.parametrize(("name", "tp", "fraction"), [("meta-llama/Llama-3.1-8B", 1, None), ("Qwen/Qwen3-32B", 2, 0.5)])
def test_kv_is_the_share_of_what_weights_and_buffers_leave(name, tp, fraction) -> None:
    model, _ = spec(name)
    hw = get_profile("h100-sxm")
    plan = plan_memory(model, hw, Scenario(engine_version=TRTLLM, tp=tp, gpu_memory_utilization=fraction))
    share = 0.9 if fraction is None else fraction
    assert plan.resolved.gpu_memory_utilization == share and plan.resolved.memory_rule == "free_fraction"
    others = (
        plan.weight_bytes_per_gpu
        + plan.non_torch_bytes_per_gpu
        + plan.activation_bytes_per_gpu
        + plan.cuda_graph_bytes_per_gpu
    )
    assert plan.kv_cache_bytes_per_gpu == math.floor(share * (hw.memory_bytes - others))
    # what the engine then holds: everything but the (1 - share) of the free memory it leaves
    assert plan.requested_memory_bytes_per_gpu == others + plan.kv_cache_bytes_per_gpu


def test_a_tight_fit_gets_more_kv_than_vllms_budget_of_the_card() -> None:
    model, _ = spec("meta-llama/Llama-3.1-70B")
    hw = get_profile("h100-sxm")
    trt = plan_memory(model, hw, Scenario(engine_version=TRTLLM, tp=2, max_model_len=8192))
    vllm = plan_memory(model, hw, Scenario(tp=2, max_model_len=8192))
    # 65.7 GiB of weights per GPU: 0.92 of the card leaves vLLM 3.7 GiB; 0.9 of the free memory is 9.0 GiB
    assert trt.fits and vllm.fits
    assert trt.kv_cache_bytes_per_gpu > 2 * vllm.kv_cache_bytes_per_gpu


def test_a_plan_that_does_not_start_names_trtllms_flag() -> None:
    model, _ = spec("meta-llama/Llama-3.1-70B")
    hw = get_profile("h100-sxm")
    plan = plan_memory(model, hw, Scenario(engine_version=TRTLLM, tp=2, max_model_len=131072))
    assert not plan.fits
    assert "--kv_cache_free_gpu_memory_fraction 0.9 of it is" in plan.reason
    assert "131,072-token request needs" in plan.reason


def test_the_cli_header_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from planner.cli import main

    assert main(["plan", "meta-llama/Llama-3.1-8B", "--max-model-len", "8192", "--engine-version", TRTLLM]) == 0
    assert "kv_cache_free_gpu_memory_fraction 0.9" in capsys.readouterr().out


def test_the_vllm_files_keep_vllms_budget() -> None:
    model, loaded = spec("meta-llama/Llama-3.1-8B")
    sc = Scenario(engine_version=TRTLLM, max_model_len=8192, gpu_memory_utilization=0.5)
    bundle = export_bundle(model, get_profile(sc.gpu), sc, loaded=loaded)
    # 0.5 is TensorRT-LLM's share of the free memory, not a share of the card for vLLM
    assert (
        f"gpu-memory-utilization: {DEFAULT_GPU_MEMORY_UTILIZATION}" in bundle.artefact("throughput", "vllm-yaml").text
    )


def test_trtllm_serves_its_own_batch_defaults() -> None:
    """trtllm-serve's --max_batch_size 2048 and --max_num_tokens 8192 (trtllm.yaml), fixed with or without chunked
    prefill, where vLLM's are 1,024 / 8,192 on an H100 and widen to a whole prompt without chunked prefill."""
    hw = get_profile("h100-sxm")
    model, _ = spec("meta-llama/Llama-3.1-8B")
    for chunked in (True, False):
        res = plan_memory(model, hw, Scenario(engine_version=TRTLLM, enable_chunked_prefill=chunked)).resolved
        assert (res.max_num_seqs, res.max_num_batched_tokens) == (2048, 8192)
    vllm = plan_memory(model, hw, Scenario(enable_chunked_prefill=False, max_model_len=32768)).resolved
    assert (vllm.max_num_seqs, vllm.max_num_batched_tokens) == (1024, 32768)
    own = plan_memory(model, hw, Scenario(engine_version=TRTLLM, max_num_seqs=96, max_num_batched_tokens=4096))
    assert (own.resolved.max_num_seqs, own.resolved.max_num_batched_tokens) == (96, 4096)


def test_the_throughput_profile_is_capped_at_the_engines_own_default() -> None:
    """Short requests the KV cache holds by the thousand: the offline profile takes as many as the engine runs by
    default, TensorRT-LLM's 2,048 where vLLM's is 1,024, and says whose default it is."""
    from planner.estimate.operating_points import throughput_profile
    from planner.scenario import RequestShape

    hw = get_profile("h100-sxm")
    model, _ = spec("meta-llama/Llama-3.1-8B")
    shape = {"max_model_len": 256, "workload": RequestShape(input_len=128, output_len=64)}
    trt = throughput_profile(model, hw, Scenario(engine_version=TRTLLM, **shape))
    vllm = throughput_profile(model, hw, Scenario(**shape))
    assert (trt.max_num_seqs, vllm.max_num_seqs) == (2048, 1024)
    assert "at most TensorRT-LLM's default 2048" in trt.rule and "at most vLLM's default 1024" in vllm.rule


@pytest.mark.parametrize(("max_len", "rows"), [(131072, 1), (2048, 4), (3000, 3)])
def test_the_profiling_forward_holds_one_logits_row_per_dummy_request(max_len, rows) -> None:
    """TensorRT-LLM sizes its KV cache after a forward of dummy context requests of min(max_num_tokens, max_seq_len)
    tokens that fill max_num_tokens, one output token each (trtllm.yaml profile_requests): its activation peak is
    vLLM's for 8,192 tokens with that many sampled rows, not its 2,048-request batch's."""
    hw = get_profile("h100-sxm")
    model, _ = spec("meta-llama/Llama-3.1-8B")
    trt = plan_memory(model, hw, Scenario(engine_version=TRTLLM, max_model_len=max_len), suggest=False)
    same = Scenario(max_model_len=max_len, max_num_batched_tokens=8192, max_num_seqs=rows)
    assert trt.resolved.max_num_seqs == 2048
    assert trt.activation_bytes_per_gpu == plan_memory(model, hw, same, suggest=False).activation_bytes_per_gpu
