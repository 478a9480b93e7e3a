"""An engine that cannot capture a model's attention in a full CUDA graph decodes it with piecewise graphs.

vLLM V1 asks every attention backend whether it supports full graphs and, when one says NEVER (the
chunked local attention of Llama 4: vllm-project/vllm #26034, kept by #28739), runs the whole model
PIECEWISE: every decode step launches its attention kernels eagerly between graph pieces. The engine
profiles say which KV kinds do that (``EngineProfile.no_full_graph_kv``); the roofline, the step model
and the public-record ``StepOps`` all take it from ``roofline.full_decode_graphs``.
"""

from __future__ import annotations

import pytest

from planner.engine import resolve_engine
from planner.estimate.latency import StepTimeModel
from planner.estimate.roofline import full_decode_graphs, roofline
from planner.hardware import get_profile
from planner.scenario import Scenario
from planner.verify.public_records import catalog_model

SCOUT = "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"


def _attention_launch_seconds(model, sc: Scenario, batch: int = 8, context: int = 600) -> float:
    rf = roofline(model, get_profile("h100-sxm"), sc, "decode", batch, context)
    rows = [r for r in rf.layers if r.kind == "attention"]
    assert rows
    return sum(r.overhead_seconds * r.count for r in rows)


@pytest.mark.parametrize(
    "engine,repo,full",
    [
        ("vllm@0.15.1", SCOUT, False),  # chunked local attention: NEVER -> PIECEWISE
        ("vllm@0.11.0", SCOUT, False),
        ("vllm@0.15.1", "openai/gpt-oss-20b", True),  # sliding windows: FlashAttention captures them
        ("vllm@0.15.1", "meta-llama/Llama-3.1-8B", True),
        ("sglang@0.5.3", SCOUT, True),  # no such rule recorded for SGLang
    ],
)
def test_which_models_an_engine_decodes_in_one_full_graph(engine, repo, full):
    model = catalog_model(repo)
    assert full_decode_graphs(model, resolve_engine(engine)[0]) is full
    launches = _attention_launch_seconds(model, Scenario(gpu="h100-sxm", tp=2, engine_version=engine))
    assert (launches == 0.0) is full  # inside a full graph attention launches nothing; eagerly it pays per kernel


def test_eager_mode_launches_attention_whatever_the_engine():
    model = catalog_model("meta-llama/Llama-3.1-8B")
    assert _attention_launch_seconds(model, Scenario(gpu="h100-sxm", engine="eager")) > 0


def test_the_fallback_costs_only_where_launches_bind(monkeypatch):
    """A step lasts max(kernels, launches) (the host enqueues ahead of the GPU): the eager attention launches
    of the fallback cost nothing while the kernels take longer, and the whole difference when the host is
    slow enough to bind (here a 150 us eager launch, a loaded host), never less than the full graph."""
    import planner.estimate.latency as latency

    model = catalog_model(SCOUT)
    hw = get_profile("h100-sxm")
    sc = Scenario(gpu="h100-sxm", tp=8, engine_version="vllm@0.15.1", max_model_len=4096)
    base = StepTimeModel(model, hw, sc).eff
    slow_host = base.model_copy(update={"kernel_launch_seconds": 150e-6})
    eager = _attention_launch_seconds(model, sc, batch=1, context=512)

    def decode(eff):
        return [StepTimeModel(model, hw, sc, efficiency=eff).decode_seconds(b, 512) for b in (1, 64)]

    piecewise, piecewise_slow = decode(base), decode(slow_host)
    monkeypatch.setattr(latency, "full_decode_graphs", lambda model, engine: True)
    full, full_slow = decode(base), decode(slow_host)
    assert eager > 0
    assert piecewise == pytest.approx(full, rel=1e-12)  # kernels bind: the launches hide behind them
    # batch 1: 48 eager attention launches x 150 us (7.2 ms) outlast the kernels (3.9 ms): the step is its launches;
    # batch 64: they do not
    assert piecewise_slow[0] > full_slow[0] + 1e-3
    assert piecewise_slow[0] == pytest.approx(eager * 150e-6 / 20e-6, rel=1e-9)
    assert piecewise_slow[1] == pytest.approx(full_slow[1], rel=1e-12)
    assert full_slow == pytest.approx(full, rel=1e-12)  # inside a full graph the host's launch cost is gone
