"""The CUDA-graph pool sits where the engine's release puts it (``EngineProfile.reserves_graph_memory_at``): vLLM
from 0.21.0 reserves it before sizing the KV cache (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on by default, vllm#41099),
earlier releases (V0, and V1 through 0.20) capture the graphs after, so the pool takes memory beyond
--gpu-memory-utilization and none from the KV cache (vllm#30515; shared/reference/engines.md section 4). Until
2026-12-07 every plan took it from the KV cache, whatever --engine-version said: a vLLM 0.15 plan at
--gpu-memory-utilization 0.25 had a quarter less KV cache than that release allocates.
"""

from __future__ import annotations

import pytest

from planner.estimate.memory import plan_memory, terms_outside
from planner.hardware import get_profile
from planner.scenario import Scenario
from planner.verify.public_records import catalog_model
from planner.verify.reconcile import reconcile
from planner.verify.vllm_log import parse_vllm_log
from ui import charts
from ui.derived import memory_terms_table

GiB = 1 << 30
MODEL = "meta-llama/Llama-3.1-8B"


def _plan(release: str, utilization: float, **fields):
    sc = Scenario(engine_version=release, max_model_len=8192, gpu_memory_utilization=utilization, **fields)
    return plan_memory(catalog_model(MODEL), get_profile("h100-sxm"), sc)


@pytest.mark.parametrize("utilization", [0.25, 0.9])
def test_before_0_21_the_graph_pool_is_not_taken_from_the_kv_cache(utilization):
    old, new = _plan("vllm@0.15.1", utilization), _plan("vllm@0.21.0", utilization)
    graphs = new.cuda_graph_bytes_per_gpu
    assert graphs > 0 and old.cuda_graph_bytes_per_gpu == graphs
    assert old.kv_cache_bytes_per_gpu == new.kv_cache_bytes_per_gpu + graphs  # the same arithmetic, but for the pool
    assert not old.resolved.reserves_cuda_graph_memory and new.resolved.reserves_cuda_graph_memory
    assert old.resolved.model_dump()["reserves_cuda_graph_memory"] is False
    assert "reserves_cuda_graph_memory" not in new.resolved.model_dump()  # dumps of current releases unchanged
    assert terms_outside(old.resolved) == {"cuda_graphs"} and not terms_outside(new.resolved)
    # the terms still add up to the card; the pool is listed after the terms inside the fraction (the bar's order)
    for plan in (old, new):
        assert sum(t.bytes for t in plan.terms) == plan.total_memory_bytes_per_gpu
    assert [t.name for t in old.terms] == ["weights", "kv_cache", "activations", "non_torch", "cuda_graphs", "free"]
    assert [t.name for t in new.terms] == ["weights", "kv_cache", "activations", "cuda_graphs", "non_torch", "free"]


def test_at_0_25_a_fifth_more_kv_cache_on_an_8b_model():
    """The issue's case: a small fraction makes the pool a large share of the KV cache (0.625 GiB of 2.5 GiB)."""
    old, new = _plan("vllm@0.15.1", 0.25), _plan("vllm@0.21.0", 0.25)
    assert old.kv_cache_bytes_per_gpu / new.kv_cache_bytes_per_gpu == pytest.approx(1.25, abs=0.01)


@pytest.mark.parametrize("engine", ["vllm@0.6.3", "vllm@0.10.1", "vllm@0.20.0"])
def test_every_release_before_0_21_captures_after(engine):
    assert not _plan(engine, 0.9).resolved.reserves_cuda_graph_memory


def test_eager_has_no_pool_either_way():
    old, new = _plan("vllm@0.15.1", 0.9, engine="eager"), _plan("vllm@0.21.0", 0.9, engine="eager")
    assert old.cuda_graph_bytes_per_gpu == new.cuda_graph_bytes_per_gpu == 0
    assert old.kv_cache_bytes_per_gpu == new.kv_cache_bytes_per_gpu


def test_a_pool_that_does_not_fit_beyond_the_fraction_does_not_start():
    """0.995 of an H100 leaves 0.4 GiB beyond it, short of the 0.625 GiB pool: capture would run out of memory.
    0.21.0 takes the pool from the KV cache instead and starts."""
    old, new = _plan("vllm@0.15.1", 0.995), _plan("vllm@0.21.0", 0.995)
    assert new.fits and not old.fits
    assert "captures its CUDA graphs after sizing the KV cache" in old.reason
    assert "--gpu-memory-utilization 0.99 or less" in old.reason and "--enforce-eager" in old.reason
    assert any(s.startswith("fits with --enforce-eager") for s in old.suggestions)
    assert _plan("vllm@0.15.1", 0.99).fits  # the fraction the reason names is enough
    what = dict(zip(memory_terms_table(old)["term"], memory_terms_table(old)["what"], strict=True))
    assert what["cuda_graphs"] == "CUDA-graph pool, beyond gpu_memory_utilization (vLLM < 0.21.0)"
    assert (
        "beyond"
        not in dict(zip(memory_terms_table(new)["term"], memory_terms_table(new)["what"], strict=True))["cuda_graphs"]
    )
    fig = charts.memory_bar(old)  # the band past the card is drawn, as for SGLang's peaks outside its pool
    assert any("outside the fraction, past the card" in (a.text or "") for a in fig.layout.annotations)


def test_sglang_and_tensorrt_llm_keep_their_rules():
    sglang = plan_memory(
        catalog_model(MODEL), get_profile("h100-sxm"), Scenario(engine_version="sglang@0.5.4", max_model_len=8192)
    )
    trt = plan_memory(catalog_model(MODEL), get_profile("h100-sxm"), Scenario(engine_version="trtllm@1.2.0"))
    assert sglang.resolved.reserves_cuda_graph_memory and trt.resolved.reserves_cuda_graph_memory
    assert terms_outside(sglang.resolved) == {"activations", "cuda_graphs", "encoder_activations"}
    assert not terms_outside(trt.resolved)


def test_a_v1_log_is_planned_with_its_releases_rule():
    """A vLLM 0.11 log (vllm-project/vllm's H200 70B FP8 TP4 log, its graph pool set to a positive 0.5 GiB): planned
    with vllm@0.11.2, whose KV budget holds no graph pool, so the pool stays out of the KV gap and the KV cache lands
    within 1% of the printed one, as with the log's own 'took -0.17 GiB'."""
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "logs" / "v1_tp4_ansi_llama33_70b_fp8.log").read_text()
    report = parse_vllm_log(text).model_copy(update={"cuda_graph_bytes": GiB // 2})
    rec = reconcile(report, {"weight_dtype": "fp8"}, get_profile("h200"), model="meta-llama/Llama-3.3-70B-Instruct")
    assert rec.scenario.engine_version == "vllm@0.11.2" and not rec.resolved.reserves_cuda_graph_memory
    assert any("graph pool is not taken from the KV budget" in a for a in rec.assumptions)
    assert "cuda_graphs" not in rec.kv_gap_by_term
    kv = next(t for t in rec.terms if t.name == "kv_cache_memory")
    assert kv.difference_pct is not None and abs(kv.difference_pct) < 1.0
