"""Expert parallelism against public DeepSeek / Qwen3 MoE deployments: predicted vs measured.

Two kinds of published figure:

* the public serving corpus' expert-parallel runs (``planner.verify.serving_corpus``: "EP=N" at TP N, vLLM's
  "expert-parallel (EP over TP*DP ranks)"; GPUStack performance lab, bursts of 1,000 ShareGPT prompts), each
  simulated with the engine profile's fitted factors: output tokens/s per GPU, predicted and measured, and the
  same run simulated without --enable-expert-parallel (the TP-only layout) for comparison;
* vLLM's wide-EP decode figure, "a sustained throughput of 2.2k tokens/s per H200 GPU" (DeepSeek, CoreWeave H200
  with ConnectX-7 InfiniBand, DP + EP with DeepEP, dual-batch overlap and EPLB; blog.vllm.ai 2025-12-17
  "vLLM Large Scale Serving: DeepSeek @ 2.2k tok/s/H200 with Wide-EP", whose text gives neither the EP size
  nor the batch per rank): the roofline decode step of DeepSeek-R1 at DP = EP 16 over two H200 nodes with DeepEP
  low-latency kernels, per-rank batches 64 / 128 / 256 at a 3,000-token context, tokens/s per GPU = batch / step.
  The planner does not overlap dispatch with compute (no DBO), so it should read below the figure.

    python benchmarks/expert_parallel_vs_public.py

Prints both tables and one JSON line.
"""

from __future__ import annotations

import json
import statistics
import time

from planner.estimate.roofline import roofline
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.verify import serving_corpus

WIDE_EP_MEASURED_TOK_S_PER_GPU = 2200.0
WIDE_EP_BATCHES = (64, 128, 256)
WIDE_EP_CONTEXT = 3000
WIDE_EP_DP = 16


def corpus_rows() -> list[dict]:
    """Every expert-parallel corpus run's output tokens/s: predicted with EP, without it, and measured."""
    expressed, _ = serving_corpus.express_all(serving_corpus.load_all())
    rows = []
    for run in (e for e in expressed if e.plan.scenario.enable_expert_parallel):
        tp_only = serving_corpus.Expressed(
            plan=serving_corpus.RunPlan(
                **{
                    **run.plan.__dict__,
                    "scenario": run.plan.scenario.model_copy(update={"enable_expert_parallel": False}),
                }
            ),
            records=run.records,
        )
        without = {p.metric: p.predicted for p in serving_corpus.predict(tp_only)}
        for p in serving_corpus.predict(run):
            if p.metric != "output_throughput_tok_s" or p.predicted is None:
                continue
            gpus = run.plan.scenario.gpus_per_replica
            rows.append(
                {
                    "model": p.model,
                    "gpu": p.gpu,
                    "family": p.family,
                    "layout": f"TP{run.plan.scenario.tp} + EP",
                    "measured_tok_s_per_gpu": round(p.measured / gpus, 1),
                    "predicted_tok_s_per_gpu": round(p.predicted / gpus, 1),
                    "tp_only_predicted_tok_s_per_gpu": round((without.get(p.metric) or float("nan")) / gpus, 1),
                }
            )
    return rows


def wide_ep_rows() -> list[dict]:
    model = build_spec(load_config("deepseek-ai/DeepSeek-R1", prefer="catalog").config, "deepseek-ai/DeepSeek-R1")
    hw = get_profile("h200")
    sc = Scenario(
        gpu="h200",
        data_parallel_size=WIDE_EP_DP,
        enable_expert_parallel=True,
        all2all_backend="deepep_low_latency",
        max_model_len=8192,
    )
    out = []
    for batch in WIDE_EP_BATCHES:
        r = roofline(model, hw, sc, "decode", batch, WIDE_EP_CONTEXT)
        dispatch = sum(row.total_seconds for row in r.layers if row.kind == "alltoall")
        out.append(
            {
                "batch_per_rank": batch,
                "step_seconds": round(r.total_seconds, 5),
                "dispatch_combine_seconds": round(dispatch, 5),
                "predicted_tok_s_per_gpu": round(batch / r.total_seconds, 1),
            }
        )
    return out


def main() -> None:
    t0 = time.perf_counter()
    corpus = corpus_rows()
    print("public corpus, expert-parallel runs (output tokens/s per GPU):")
    print(f"{'model':40s} {'gpu':16s} {'engine':8s} {'layout':9s} {'measured':>9s} {'EP pred':>8s} {'TP pred':>8s}")
    for row in corpus:
        print(
            f"{row['model'][:40]:40s} {row['gpu'][:16]:16s} {row['family']:8s} {row['layout']:9s} "
            f"{row['measured_tok_s_per_gpu']:9.1f} {row['predicted_tok_s_per_gpu']:8.1f} "
            f"{row['tp_only_predicted_tok_s_per_gpu']:8.1f}"
        )
    ratios = [r["predicted_tok_s_per_gpu"] / r["measured_tok_s_per_gpu"] for r in corpus]
    wide = wide_ep_rows()
    print(
        f"\nvLLM wide-EP decode, DeepSeek-R1 on H200, DP = EP {WIDE_EP_DP} (2 nodes), DeepEP LL, context "
        f"{WIDE_EP_CONTEXT:,}; measured {WIDE_EP_MEASURED_TOK_S_PER_GPU:,.0f} tok/s per GPU (conditions not stated):"
    )
    for row in wide:
        print(
            f"  batch {row['batch_per_rank']:4d} per rank: step {row['step_seconds'] * 1e3:6.1f} ms "
            f"(dispatch + combine {row['dispatch_combine_seconds'] * 1e3:5.1f} ms) -> "
            f"{row['predicted_tok_s_per_gpu']:,.0f} tok/s per GPU"
        )
    print(
        json.dumps(
            {
                "benchmark": "expert_parallel_vs_public",
                "corpus_runs": len(corpus),
                "corpus_median_predicted_over_measured": round(statistics.median(ratios), 3) if ratios else None,
                "corpus": corpus,
                "wide_ep_measured_tok_s_per_gpu": WIDE_EP_MEASURED_TOK_S_PER_GPU,
                "wide_ep": wide,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
