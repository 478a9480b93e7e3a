"""Resident expert weights: the engine's layout on the card, checked against vLLM's own load logs."""

from __future__ import annotations

import pytest

from planner.engine import resolve_engine
from planner.estimate.memory import plan_memory
from planner.estimate.resident import expert_pad_ratio
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario

GiB = 2**30


def catalog_model(repo_id: str):
    return build_spec(load_config(repo_id, prefer="catalog").config, repo_id)


def _weights_gib(model: str, gpu: str, engine: str, tp: int = 1) -> float:
    sc = Scenario(gpu=gpu, tp=tp, engine_version=engine, max_model_len=8192)
    return plan_memory(catalog_model(model), get_profile(gpu), sc, suggest=False).weight_bytes_per_gpu / GiB


@pytest.mark.parametrize(
    ("gpu", "engine", "logged_gib", "source"),
    [
        ("h100-sxm", "vllm@0.14.1", 64.38, "vllm#33155: 'Model loading took 64.38 GiB' (triton_kernels)"),
        ("a100-80gb", "vllm@0.10.1", 65.97, "vllm#23278: 'Model loading took 65.97 GiB' (Marlin)"),
    ],
)
def test_gpt_oss_120b_weights_match_vllm_load_logs(gpu, engine, logged_gib, source):
    planned = _weights_gib("openai/gpt-oss-120b", gpu, engine)
    assert planned == pytest.approx(logged_gib, rel=0.01), source


def test_checkpoint_bytes_where_the_engine_has_no_rule():
    """SGLang's profile lists no MXFP4 layout: the checkpoint's 60.9 GiB, below either vLLM layout."""
    ckpt = _weights_gib("openai/gpt-oss-120b", "h100-sxm", "sglang")
    assert ckpt == pytest.approx(60.9, abs=0.3)
    assert ckpt < _weights_gib("openai/gpt-oss-120b", "h100-sxm", "vllm@0.15.1")


def test_backend_follows_the_card():
    profile, _ = resolve_engine("vllm@0.15.1")
    picked = {cc: profile.moe_weight_layout("mxfp4", cc) for cc in ("8.0", "8.9", "9.0", "10.0", "12.0")}
    assert {cc: r.backend for cc, r in picked.items() if r} == {
        "8.0": "marlin",
        "8.9": "marlin",
        "9.0": "triton",
        "10.0": "flashinfer",
        "12.0": "marlin",
    }
    assert profile.moe_weight_layout("mxfp4", None) is None  # a card without CUDA
    assert profile.moe_weight_layout("fp8", "9.0") is None  # a format without a rule


def test_other_moe_formats_keep_checkpoint_bytes():
    sc = Scenario(gpu="h100-sxm", tp=1, max_model_len=8192)
    plan = plan_memory(catalog_model("Qwen/Qwen3-30B-A3B"), get_profile("h100-sxm"), sc, suggest=False)
    assert plan.resolved.expert_layout is None


def test_marlin_pads_each_ranks_expert_width():
    """gpt-oss: H = I = 2880. Marlin pads I/tp to 128 and H to 256: TP1 2944 x 3072, TP2 1536 x 3072."""
    profile, _ = resolve_engine("vllm@0.10.1")
    marlin = profile.moe_weight_layout("mxfp4", "8.0")
    assert expert_pad_ratio(marlin, 2880, 2880, 1) == pytest.approx(2944 * 3072 / (2880 * 2880))
    assert expert_pad_ratio(marlin, 2880, 2880, 2) == pytest.approx(1536 * 3072 / (1440 * 2880))
    assert _weights_gib("openai/gpt-oss-120b", "a100-80gb", "vllm@0.10.1", tp=2) > 65.97 / 2
