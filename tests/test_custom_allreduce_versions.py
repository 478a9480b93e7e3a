"""Which all-reduce an engine version runs by default, and what NCCL inside a CUDA graph cost vLLM <= 0.5.

vLLM's custom all-reduce arrived with vllm#2192 in 0.3.0, was turned off by default by vllm#2808 (2024-02-07)
and back on by vllm#4040 (2024-04-12, first in 0.4.1); the vllm-legacy profile says so
(``custom_allreduce_off``). Its ``nccl_graph_latency_seconds`` comes from vllm#2192's own before/after pair
(Llama-2-70B, A100-80G, TP4, batch 64, 256 in / 256 out: 16.37 s NCCL, 14.57 s custom), not from an end-to-end fit.
"""

from __future__ import annotations

import pytest

from planner.engine import resolve_engine
from planner.estimate.roofline import engine_of, roofline
from planner.scenario import Scenario
from planner.verify import static_batch


@pytest.mark.parametrize(
    ("version", "custom"),
    [("0.2.7", False), ("0.3.0", True), ("0.3.3", False), ("0.4.0", False), ("0.4.1", True), ("0.5.4", True)],
)
def test_custom_allreduce_default_follows_the_version(version: str, custom: bool) -> None:
    profile, resolved = resolve_engine(f"vllm@{version}")
    assert profile.id == "vllm-legacy"
    assert profile.custom_allreduce_at(resolved) is custom
    assert engine_of(Scenario(gpu="a100-80gb", tp=2, engine_version=f"vllm@{version}")).custom_allreduce is custom


def test_the_flag_turns_custom_allreduce_off_on_any_version() -> None:
    for version in ("vllm@0.5.4", "vllm@0.15.1", "vllm@0.33.0"):
        assert engine_of(Scenario(gpu="h100-sxm", tp=4, engine_version=version)).custom_allreduce
        off = Scenario(gpu="h100-sxm", tp=4, engine_version=version, disable_custom_all_reduce=True)
        assert not engine_of(off).custom_allreduce


def test_nccl_in_graph_costs_what_vllm_2192_measured() -> None:
    """The factor's own check: the predicted NCCL - custom difference of vllm#2192's run is its measured 1.80 s
    (within 15%), and NCCL makes the decode step slower, not faster."""
    by_index = {p.index: p for p in static_batch.evaluate().predictions}
    nccl, custom = by_index[56], by_index[57]  # reference/static_batch_latency.json: the pair's two columns
    assert (nccl.engine_version, custom.engine_version) == ("vllm@0.2.7", "vllm@0.3.0")
    measured = nccl.measured_seconds - custom.measured_seconds
    predicted = nccl.predicted_seconds - custom.predicted_seconds
    assert measured == pytest.approx(1.80, abs=0.005)
    assert predicted == pytest.approx(measured, rel=0.15)


def test_disabling_custom_allreduce_slows_a_legacy_graph_decode() -> None:
    from planner.model.families import build_spec
    from planner.model.sources import load_config

    model = build_spec(load_config("meta-llama/Llama-2-70b-hf").config, "meta-llama/Llama-2-70b-hf")
    from planner.hardware import get_profile

    base = {"gpu": "a100-80gb", "tp": 4, "engine_version": "vllm@0.5.4", "max_model_len": 4096}

    hw = get_profile("a100-80gb")
    t_on = roofline(model, hw, Scenario(**base), "decode", 64, 512).total_seconds
    t_off = roofline(model, hw, Scenario(**base, disable_custom_all_reduce=True), "decode", 64, 512).total_seconds
    # 160 all-reduces a step, each ~77 us more in NCCL inside the graph
    assert t_off - t_on == pytest.approx(160 * 77e-6, rel=0.5)


def test_a_branch_measured_before_the_default_changed_runs_nccl() -> None:
    """vllm#2542 measured on 2024-01-22, before custom all-reduce (vllm#2192) shipped in 0.3.0; the record says so
    (custom_all_reduce: false) and the scenario turns it off although 0.3.0's default has it on."""
    records = [
        r for r in static_batch.load_records() if r.thread == "vllm-project/vllm#2542" and r.not_in_release is None
    ]
    assert records and all(r.custom_all_reduce is False for r in records)
    e = static_batch.express(records[0])
    assert e.sc.disable_custom_all_reduce and not engine_of(e.sc).custom_allreduce
    assert resolve_engine(e.sc.engine_version)[0].custom_allreduce_at("0.3.0")
