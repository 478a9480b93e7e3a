"""SGLang sizes memory its own way (planner/engines/sglang.yaml ``static_memory``): one static pool of weights + KV
cache as ``--mem-fraction-static`` of the card, activations and CUDA graphs outside it, and a default fraction
that changed in v0.5.3 (sgl-project/sglang#10975) from a table by TP size to a reserved-memory rule.

The expected fractions are SGLang's arithmetic done by hand here (``ServerArgs._handle_gpu_memory_settings``,
memory in MiB as ``nvidia-smi`` reports it), not the planner's code run twice."""

from __future__ import annotations

import math

import pytest

from planner.deploy.export import export_bundle
from planner.engine import resolve_engine
from planner.estimate.memory import plan_memory
from planner.estimate.resolve import resolve
from planner.estimate.roofline import engine_of
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import DEFAULT_GPU_MEMORY_UTILIZATION, Scenario
from planner.units import MiB
from planner.verify import serving_corpus

STATIC = resolve_engine("sglang@0.5.5")[0].static_memory
H100_MIB, H200_MIB, L40S_MIB = 81559, 143771, 46068  # nvidia-smi memory.total


def spec(name: str = "meta-llama/Llama-3.1-8B"):
    loaded = load_config(name)
    return build_spec(loaded.config, loaded.name), loaded


@pytest.mark.parametrize(
    ("version", "mib", "tp", "chunk", "speculative", "expected"),
    [
        # 512 + 8192 x 1.5 + 256 x 2 + 1 x 1 / 8 x 1024 = 13,440 MiB (above the 10 GiB floor)
        ("0.5.5", H100_MIB, 1, 8192, None, round((81559 - 13440) / 81559, 3)),  # 0.835
        # TP 8: graphs to 512 -> 512 + 12,288 + 1,024 + 1,024 = 14,848 MiB
        ("0.5.3", H100_MIB, 8, 8192, None, round((81559 - 14848) / 81559, 3)),  # 0.818
        ("0.5.9", H200_MIB, 1, 8192, None, round((143771 - 13440) / 143771, 3)),  # 0.907
        # below 60 GiB: chunks of 4,096 and graphs to 32, no floor: 512 + 6,144 + 64 + 128 = 6,848 MiB
        ("0.5.5", L40S_MIB, 1, 4096, None, round((46068 - 6848) / 46068, 3)),  # 0.851
        # a small chunk still counts 2,048 tokens: 512 + 3,072 + 512 + 128 = 4,224 -> the 10 GiB floor
        ("0.5.5", H100_MIB, 1, 512, None, round((81559 - 10240) / 81559, 3)),
        # EAGLE adds 2 GiB after the floor, a separate draft model 6 GiB, n-gram nothing
        ("0.5.5", H100_MIB, 1, 8192, "eagle3", round((81559 - 13440 - 2048) / 81559, 3)),
        ("0.5.5", H100_MIB, 1, 8192, "draft", round((81559 - 13440 - 6144) / 81559, 3)),
        ("0.5.5", H100_MIB, 1, 8192, "ngram", 0.835),
        # before v0.5.3: the table by TP size, whatever the card
        ("0.4.7", H100_MIB, 1, 8192, None, 0.88),
        ("0.4.7", H200_MIB, 2, 8192, None, 0.87),
        ("0.5.2", H100_MIB, 4, 8192, None, 0.85),
        ("0.5.2", H100_MIB, 8, 8192, "eagle", 0.81),
        ("0.4.1", H100_MIB, 16, 8192, None, 0.79),
    ],
)
def test_default_fraction_is_sglangs_rule(version, mib, tp, chunk, speculative, expected) -> None:
    assert STATIC is not None
    assert STATIC.fraction(version, mib, tp, 1, chunk, speculative) == expected


def test_batch_defaults_follow_the_card_and_the_version() -> None:
    assert STATIC is not None
    assert (STATIC.card("0.5.5", H100_MIB).chunked_prefill_size, STATIC.graph_max_bs("0.5.5", H100_MIB, 1)) == (
        8192,
        256,
    )
    assert STATIC.graph_max_bs("0.5.5", H100_MIB, 4) == 512
    assert STATIC.card("0.5.5", 183359).chunked_prefill_size == 16384  # B200
    assert STATIC.card("0.5.5", L40S_MIB).chunked_prefill_size == 4096
    assert (STATIC.card("0.4.7", H100_MIB).chunked_prefill_size, STATIC.graph_max_bs("0.4.7", H100_MIB, 8)) == (
        8192,
        160,
    )
    # the step model captures decode batches up to that size on that card and TP size
    assert engine_of(Scenario(gpu="h100-sxm", tp=4, engine_version="sglang@0.5.5")).max_cuda_graph_batch == 512
    assert engine_of(Scenario(gpu="h100-sxm", tp=1, engine_version="sglang@0.5.5")).max_cuda_graph_batch == 256
    assert engine_of(Scenario(gpu="l40s", tp=1, engine_version="sglang@0.5.5")).max_cuda_graph_batch == 32
    assert engine_of(Scenario(gpu="h100-sxm", tp=8, engine_version="sglang@0.4.7")).max_cuda_graph_batch == 160
    assert engine_of(Scenario(gpu="l40s", tp=1)).max_cuda_graph_batch == resolve_engine()[0].max_cuda_graph_batch


def test_resolve_takes_the_engines_default_unless_the_scenario_sets_one() -> None:
    model, _ = spec()
    hw = get_profile("h100-sxm")
    mib = hw.memory_bytes / MiB
    sglang = resolve(model, hw, Scenario(engine_version="sglang@0.5.5", max_model_len=8192))
    assert STATIC is not None
    assert sglang.static_pool and sglang.gpu_memory_utilization == STATIC.fraction("0.5.5", mib, 1, 1, 8192, None)
    assert sglang.max_num_batched_tokens == 8192
    legacy = resolve(model, hw, Scenario(engine_version="sglang@0.4.7", tp=2, max_model_len=8192))
    assert legacy.gpu_memory_utilization == 0.87
    chosen = resolve(model, hw, Scenario(engine_version="sglang@0.5.5", gpu_memory_utilization=0.7))
    assert chosen.gpu_memory_utilization == 0.7
    vllm = resolve(model, hw, Scenario(max_model_len=8192))
    assert not vllm.static_pool and vllm.gpu_memory_utilization == DEFAULT_GPU_MEMORY_UTILIZATION
    assert "static_pool" not in vllm.model_dump()  # vLLM's resolved scenario reads as before
    b200 = resolve(model, get_profile("b200"), Scenario(gpu="b200", engine_version="sglang@0.5.5", max_model_len=8192))
    assert b200.max_num_batched_tokens == 16384


def test_the_static_pool_holds_weights_and_kv_and_the_rest_holds_activations_and_graphs() -> None:
    model, _ = spec()
    hw = get_profile("h100-sxm")
    fraction = 0.85
    sglang = plan_memory(model, hw, Scenario(engine_version="sglang@0.5.5", gpu_memory_utilization=fraction))
    vllm = plan_memory(model, hw, Scenario(gpu_memory_utilization=fraction))
    requested = math.ceil(hw.memory_bytes * fraction)
    assert sglang.requested_memory_bytes_per_gpu == vllm.requested_memory_bytes_per_gpu == requested
    pool_kv = requested - sglang.weight_bytes_per_gpu - sglang.non_torch_bytes_per_gpu
    assert sglang.kv_cache_bytes_per_gpu == pool_kv
    # vLLM takes the activation peak and the graph pool out of the same budget; SGLang does not
    outside = vllm.activation_bytes_per_gpu + vllm.cuda_graph_bytes_per_gpu
    assert vllm.kv_cache_bytes_per_gpu == pool_kv - outside
    assert sglang.fits and sglang.num_gpu_blocks > vllm.num_gpu_blocks


def test_a_pool_that_leaves_too_little_for_activations_and_graphs_does_not_start() -> None:
    model, _ = spec()
    hw = get_profile("h100-sxm")
    plan = plan_memory(model, hw, Scenario(engine_version="sglang@0.5.5", gpu_memory_utilization=0.995))
    assert not plan.fits
    assert "outside its static pool" in plan.reason and "--mem-fraction-static" in plan.reason
    most = float(plan.reason.rsplit("--mem-fraction-static ", 1)[1].split()[0])
    outside = plan.activation_bytes_per_gpu + plan.cuda_graph_bytes_per_gpu
    assert hw.memory_bytes * (1 - most) >= outside  # the way out it names is one that works
    assert plan_memory(model, hw, Scenario(engine_version="sglang@0.5.5", gpu_memory_utilization=most)).fits
    assert plan.max_model_len_that_fits is None  # no shorter context helps: the shortfall is outside the pool
    assert not any("--max-model-len" in s for s in plan.suggestions)


def test_suggestions_name_sglangs_flag() -> None:
    model, _ = spec()
    hw = get_profile("h100-sxm")
    sc = Scenario(engine_version="sglang@0.5.5", tp=8, kv_cache_dtype="fp8", gpu_memory_utilization=0.6)
    plan = plan_memory(model, hw, sc)
    assert any("--mem-fraction-static 0.95" in s for s in plan.suggestions), plan.suggestions
    assert not any("--gpu-memory-utilization" in s for s in plan.suggestions)


def test_the_sglang_export_writes_the_fraction_the_plan_used() -> None:
    model, loaded = spec()
    sc = Scenario(engine_version="sglang@0.5.5", max_model_len=8192)
    hw = get_profile(sc.gpu)
    bundle = export_bundle(model, hw, sc, loaded=loaded)
    text = bundle.artefact("throughput", "sglang").text
    fraction = bundle.profile("throughput").plan.resolved.gpu_memory_utilization
    assert f"--mem-fraction-static {fraction:g}" in text
    # the vLLM files keep vLLM's own budget: SGLang's default pool says nothing of it
    vllm_yaml = bundle.artefact("throughput", "vllm-yaml").text
    assert f"gpu-memory-utilization: {DEFAULT_GPU_MEMORY_UTILIZATION}" in vllm_yaml
    chosen = export_bundle(model, hw, sc.model_copy(update={"gpu_memory_utilization": 0.8}), loaded=loaded)
    assert "gpu-memory-utilization: 0.8" in chosen.artefact("throughput", "vllm-yaml").text
    assert "--mem-fraction-static 0.8" in chosen.artefact("throughput", "sglang").text


def test_corpus_reads_sglangs_flags_from_the_serving_command() -> None:
    record = next(
        r for r in serving_corpus.load_all() if "SGLang" in r.engine and "--mem-fraction-static" in r.engine_flags
    )
    flags = serving_corpus.stated_flags(record)
    stated = float(record.engine_flags.split("--mem-fraction-static", 1)[1].split()[0].strip("= "))
    assert flags["gpu_memory_utilization"] == stated


def test_the_cli_plan_names_sglangs_flag_and_fraction(capsys: pytest.CaptureFixture[str]) -> None:
    from planner.cli import main

    argv = ["plan", "meta-llama/Llama-3.1-8B", "--max-model-len", "8192"]
    assert main([*argv, "--engine-version", "sglang@0.5.5"]) == 0
    model, _ = spec()
    hw = get_profile("h100-sxm")
    fraction = resolve(model, hw, Scenario(engine_version="sglang@0.5.5", max_model_len=8192)).gpu_memory_utilization
    assert f"mem-fraction-static {fraction}" in capsys.readouterr().out
    assert main(argv) == 0
    assert f"gpu-memory-utilization {DEFAULT_GPU_MEMORY_UTILIZATION}" in capsys.readouterr().out


def test_the_running_requests_are_the_slots_sglang_sizes_from_its_pool() -> None:
    """--max-running-requests unset: ModelRunner sizes min(max(pool tokens / context x 512, 2048), 4096) request slots
    (worked here by hand on the plan's pool), and the simulator admits that many; a command's own limit wins."""
    hw = get_profile("h100-sxm")
    model, _ = spec("Qwen/Qwen3-14B")  # 40,960-token context: the pool sizes slots between the floor and the cap
    plan = plan_memory(model, hw, Scenario(engine_version="sglang@0.5.5"), suggest=False)
    pool = plan.num_gpu_blocks * 16
    assert 40960 * 4 < pool < 40960 * 8  # so the slots are pool / 80 tokens, inside [2048, 4096]
    assert plan.resolved.max_num_seqs == int(pool / 40960 * 512) > 1024  # not vLLM's 1,024
    assert resolve(model, hw, Scenario(engine_version="sglang@0.5.5")).max_num_seqs == 4096  # before the pool: the cap
    short = plan_memory(model, hw, Scenario(engine_version="sglang@0.5.5", max_model_len=4096), suggest=False)
    assert short.resolved.max_num_seqs == 4096  # a short context: the cap
    tiny = plan_memory(model, hw, Scenario(engine_version="sglang@0.5.5", gpu_memory_utilization=0.38), suggest=False)
    assert 0 < tiny.num_gpu_blocks * 16 / 40960 * 512 < 2048 and tiny.resolved.max_num_seqs == 2048  # the floor
    assert plan_memory(model, hw, Scenario(engine_version="sglang@0.5.5", max_num_seqs=64)).resolved.max_num_seqs == 64
    # the slots' fp32 logits are part of the peak kept outside the pool (vLLM's sampler term, 1,024 rows there)
    vllm = plan_memory(model, hw, Scenario(), suggest=False)
    vocab_bytes = model.padded_vocab_size * 4
    logits_more = (plan.resolved.max_num_seqs - vllm.resolved.max_num_seqs) * vocab_bytes
    assert plan.activation_bytes_per_gpu - vllm.activation_bytes_per_gpu == pytest.approx(logits_more, abs=1)


def test_a_burst_runs_past_vllms_limit_under_sglangs_slots() -> None:
    """The simulator takes the plan's slots: 1,500 short requests at once all run together under SGLang's default,
    where vLLM's default holds 1,024 of them back."""
    from planner.serve.replica import simulate_scenario
    from planner.serve.workload import ConcurrencyArrivals, FixedLength, Workload

    hw = get_profile("h100-sxm")
    model, _ = spec()
    workload = Workload(
        arrivals=ConcurrencyArrivals(concurrency=1500),
        num_requests=1500,
        input_tokens=FixedLength(tokens=64),
        output_tokens=FixedLength(tokens=64),
    )
    peaks = {}
    for engine in ("sglang@0.5.5", "vllm@0.15.1"):
        sc = Scenario(engine_version=engine, max_model_len=4096)
        result = simulate_scenario(model, hw, sc, workload, saturation=False)
        peaks[engine] = max(result.timeline.running_requests)
    assert peaks == {"sglang@0.5.5": 1500, "vllm@0.15.1": 1024}
