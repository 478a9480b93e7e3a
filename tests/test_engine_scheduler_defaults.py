"""Scheduler defaults by engine and version, from the engine profiles (issue 16, item 2).

vLLM V0 (the ``vllm-v0`` and ``vllm-legacy`` profiles) starts with ``max_num_seqs`` 256 on every card, chunked prefill
off unless the context is longer than 32K tokens (vllm#6666, from 0.5.4, with exceptions), a 512-token step with
chunked prefill (2,048 from 0.6.5, vllm#10544) and max(max_model_len, 2048) without it. vLLM V1 keeps its by-card
limits, SGLang its chunked prefill, TensorRT-LLM runs without chunked prefill. A command's own flag wins. The plan,
the latency estimate, the simulator's scheduler, the operating points and the CLI all read the one resolved value.
"""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from planner.estimate.latency import estimate_latency
from planner.estimate.memory import plan_memory
from planner.estimate.operating_points import latency_profile, throughput_profile
from planner.estimate.resolve import resolve
from planner.hardware import get_profile
from planner.scenario import RequestShape, Scenario
from planner.serve.replica import planned_replica
from planner.verify.public_records import catalog_model

H100 = get_profile("h100-sxm")
A100 = get_profile("a100-80gb")
LLAMA = catalog_model("meta-llama/Llama-3.1-8B")


def _res(model=LLAMA, hw=H100, **fields):
    return resolve(model, hw, Scenario(gpu=hw.id, **fields))


@pytest.mark.parametrize("version", ["vllm@0.5.4", "vllm@0.6.3", "vllm@0.7.3"])
@pytest.mark.parametrize(("length", "budget"), [(8192, 8192), (4096, 4096), (1024, 2048)])
def test_v0_runs_256_sequences_without_chunked_prefill_below_32k(version, length, budget):
    for hw in (H100, A100):  # on every card: the by-card 1,024 is V1's
        res = _res(hw=hw, engine_version=version, max_model_len=length)
        assert (res.max_num_seqs, res.enable_chunked_prefill, res.max_num_batched_tokens) == (256, False, budget)


@pytest.mark.parametrize(("version", "budget"), [("vllm@0.5.4", 512), ("vllm@0.6.4", 512), ("vllm@0.6.5", 2048)])
def test_v0_turns_chunked_prefill_on_above_32k_with_its_versions_budget(version, budget):
    res = _res(engine_version=version, max_model_len=32769)
    assert (res.enable_chunked_prefill, res.max_num_batched_tokens, res.max_num_seqs) == (True, budget, 256)
    assert not _res(engine_version=version, max_model_len=32768).enable_chunked_prefill  # above, not at, 32K


def test_the_long_context_rule_starts_with_0_5_4():
    assert not _res(engine_version="vllm@0.5.3", max_model_len=65536).enable_chunked_prefill
    assert _res(engine_version="vllm@0.5.4", max_model_len=65536).enable_chunked_prefill


@pytest.mark.parametrize(
    ("repo", "extra"),
    [
        ("openai/gpt-oss-20b", {}),  # sliding-window layers
        ("deepseek-ai/DeepSeek-V2-Lite", {}),  # MLA
        ("google/gemma-3-4b-it", {}),  # multimodal (and sliding windows)
        ("mistralai/Mistral-Nemo-Base-2407", {"enable_lora": True}),
        (
            "mistralai/Mistral-Nemo-Base-2407",
            {"speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.7}},
        ),
    ],
)
def test_the_long_context_rule_keeps_its_exceptions_off(repo, extra):
    model = catalog_model(repo)
    fields = {"engine_version": "vllm@0.6.6", "max_model_len": 65536}
    if extra.pop("enable_lora", False):
        fields["lora"] = {"max_lora_rank": 16}
    res = resolve(model, H100, Scenario(gpu="h100-sxm", tp=2, **fields, **extra))
    assert not res.enable_chunked_prefill
    assert res.max_num_batched_tokens == 65536  # the whole prompt fits one step
    plain = {"engine_version": "vllm@0.6.6", "max_model_len": 65536}
    nemo = resolve(catalog_model("mistralai/Mistral-Nemo-Base-2407"), H100, Scenario(gpu="h100-sxm", tp=2, **plain))
    assert nemo.enable_chunked_prefill and nemo.max_num_batched_tokens == 2048  # the same context, no exception


def test_a_commands_flag_wins_over_every_engines_default():
    on = _res(engine_version="vllm@0.6.3", max_model_len=8192, enable_chunked_prefill=True)
    assert (on.enable_chunked_prefill, on.max_num_batched_tokens) == (True, 512)
    off = _res(engine_version="vllm@0.6.3", max_model_len=65536, enable_chunked_prefill=False)
    assert (off.enable_chunked_prefill, off.max_num_batched_tokens) == (False, 65536)
    v1 = _res(max_model_len=4096, enable_chunked_prefill=False)  # V1 off: max(max_model_len, its by-card budget)
    assert (v1.enable_chunked_prefill, v1.max_num_batched_tokens, v1.max_num_seqs) == (False, 8192, 1024)
    trt = _res(engine_version="trtllm@1.2", max_model_len=4096, enable_chunked_prefill=True)
    assert (trt.enable_chunked_prefill, trt.max_num_batched_tokens) == (True, 8192)  # trtllm-serve's fixed budget


def test_v1_sglang_and_tensorrt_llm_keep_their_defaults():
    for hw, limits in ((H100, (1024, 8192)), (A100, (256, 2048))):
        res = _res(hw=hw, engine_version="vllm@0.11.0", max_model_len=8192)
        assert (res.enable_chunked_prefill, res.max_num_seqs, res.max_num_batched_tokens) == (True, *limits)
    assert _res(engine_version="sglang@0.5.5", max_model_len=8192).enable_chunked_prefill
    trt = _res(engine_version="trtllm@1.2", max_model_len=8192)
    assert (trt.enable_chunked_prefill, trt.max_num_seqs, trt.max_num_batched_tokens) == (False, 2048, 8192)


def test_the_resolved_value_leaves_v1_dumps_unchanged():
    assert "enable_chunked_prefill" not in _res(max_model_len=8192).model_dump()  # on: V1's, excluded
    assert _res(engine_version="vllm@0.6.3", max_model_len=8192).model_dump()["enable_chunked_prefill"] is False


def test_every_consumer_reads_the_resolved_value():
    sc = Scenario(
        gpu="h100-sxm",
        engine_version="vllm@0.6.3",
        max_model_len=8192,
        workload=RequestShape(input_len=4000, output_len=64, batch_size=8),
    )
    plan = plan_memory(LLAMA, H100, sc)
    assert (plan.resolved.max_num_seqs, plan.resolved.enable_chunked_prefill) == (256, False)
    _, scheduler = planned_replica(LLAMA, H100, sc)
    assert (scheduler.enable_chunked_prefill, scheduler.mixed_batches, scheduler.max_num_seqs) == (False, False, 256)
    assert estimate_latency(LLAMA, H100, sc).prefill_steps == 8  # one prompt a step, not 32,000 / 8,192 tokens
    chunked = sc.model_copy(update={"enable_chunked_prefill": True})
    assert estimate_latency(LLAMA, H100, chunked).prefill_steps == 63  # 32,000 tokens in 512-token steps
    _, scheduler = planned_replica(LLAMA, H100, chunked)
    assert (scheduler.enable_chunked_prefill, scheduler.mixed_batches) == (True, True)
    for profile in (latency_profile(LLAMA, H100, sc), throughput_profile(LLAMA, H100, sc)):
        assert profile.enable_chunked_prefill is False
        assert profile.max_num_batched_tokens >= 8192  # without chunked prefill a step holds a whole prompt
    assert throughput_profile(LLAMA, H100, sc).max_num_seqs <= 256  # at most V0's default


def test_tensorrt_llm_refuses_a_prompt_above_its_step_without_chunked_prefill():
    from planner.serve.replica import simulate_scenario
    from planner.serve.workload import FixedLength, PoissonArrivals, Workload

    sc = Scenario(gpu="h100-sxm", engine_version="trtllm@1.2", max_model_len=16384)
    workload = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=2.0),
        num_requests=20,
        input_tokens=FixedLength(tokens=9000),
        output_tokens=FixedLength(tokens=16),
    )
    refused = simulate_scenario(LLAMA, H100, sc, workload, saturation=False)
    assert refused.num_completed == 0 and refused.num_rejected == 20
    assert refused.rejection_reasons == (
        "20 request(s) have prompts of up to 9000 tokens but without chunked prefill the engine refuses a prompt "
        "above max_num_tokens=8192; enable chunked prefill or raise max_num_tokens.",
    )
    chunked = sc.model_copy(update={"enable_chunked_prefill": True})
    served = simulate_scenario(LLAMA, H100, chunked, workload, saturation=False)
    assert served.num_completed == 20


def test_the_cli_takes_either_flag_and_neither(capsys):
    def resolved(*flags):
        code = main(["plan", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm", "--engine-version", "vllm@0.6.3", *flags])
        out, _ = capsys.readouterr()
        assert code == 0
        return json.loads(out)["resolved"]

    json_out = ("--format", "json")
    assert resolved("--max-model-len", "8192", *json_out).get("enable_chunked_prefill") is False
    assert "enable_chunked_prefill" not in resolved("--max-model-len", "8192", "--enable-chunked-prefill", *json_out)
    assert resolved("--no-enable-chunked-prefill", *json_out).get("enable_chunked_prefill") is False  # vLLM's name
    assert main(["plan", "meta-llama/Llama-3.1-8B", "--enable-chunked-prefill", "--no-chunked-prefill"]) == 2
    assert "not allowed with argument --enable-chunked-prefill" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("version", "fraction"),
    [("vllm@0.5.4", 0.9), ("vllm@0.6.3", 0.9), ("vllm@0.11.0", 0.9), ("vllm@0.15.1", 0.9), ("vllm@0.33.0", 0.92)],
)
def test_vllms_default_memory_fraction_follows_its_version(version, fraction):
    res = _res(engine_version=version, max_model_len=8192)
    assert res.gpu_memory_utilization == fraction
    sc = Scenario(engine_version=version, max_model_len=8192)
    same = plan_memory(LLAMA, H100, sc.model_copy(update={"gpu_memory_utilization": fraction}))
    plan = plan_memory(LLAMA, H100, sc)
    assert plan.kv_cache_tokens == same.kv_cache_tokens  # the default is that fraction, to the token
    assert _res(engine_version=version, max_model_len=8192, gpu_memory_utilization=0.8).gpu_memory_utilization == 0.8


def test_the_log_reconciler_takes_the_releases_default_fraction_from_its_profile():
    from planner.verify.reconcile import _default_utilization

    assert _default_utilization("0.6.3", "V0") == _default_utilization(None, "V0") == 0.9
    assert _default_utilization("0.11.2rc1+rhai0.cuda", "V1") == 0.9
    assert _default_utilization("0.33.1", "V1") == _default_utilization(None, None) == 0.92
