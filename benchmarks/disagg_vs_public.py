"""Disaggregated prefill/decode in the simulator against a published 1P1D run: predicted vs measured.

The record (cited, copied by hand from the thread; no aggregated baseline was run beside it):

* vLLM pull request #18242, "[V1][P/D] An native implementation of xPyD based on P2P NCCL"
  (https://github.com/vllm-project/vllm/pull/18242), comment by KuntaiDu (a vLLM maintainer), 2025-06-16:
  "Device: 8xH100. 1P1D", Llama-3.1-8B-Instruct, ``benchmark_serving.py --dataset-name random
  --random-input-len 8000 --random-output-len 200 --num-prompts 200 --burstiness 100 --request-rate 3.6
  --metric-percentiles 95 --ignore-eos``; "Perf of this PR": mean / median / P95 TTFT 309.84 / 298.10 /
  359.73 ms, mean / median / P95 TPOT 10.45 / 10.37 / 11.34 ms; "~30ms overhead for 10000 tokens".
* The instances as the PR's guide starts them (vllm docs/design/p2p_nccl_connector.md, "Run xPyD"): one GPU
  each (``--tensor-parallel-size 1``), ``--max-num-batched-tokens 10000 --max-num-seqs 256
  --max-model-len 10000``, P2pNcclConnector: the KV cache goes GPU to GPU inside the node (NVLink on an
  8xH100 SXM box). The comment does not restate the flags; this script assumes the guide's.

The simulation: ``simulate_disaggregated`` (planner.serve.disagg) with one prefill and one decode instance at
TP 1 on h100-sxm, the vLLM 0.9 engine profile, KV over NVLink; 200 requests of exactly 8,000 + 200 tokens
(``--ignore-eos``; the random dataset's range ratio was 0 then) arriving as ``vllm bench serve`` sends them
with ``--burstiness 100``: gamma-distributed gaps of shape 100 and mean 1 / 3.6 s, the first at t = 0 (a
trace file written from a seeded draw, since the planner's own open-loop arrivals are Poisson, which at a
prefill utilisation near 0.9 would queue far more than this near-regular stream). Differences left in: the
decode instance ran at ``--gpu-memory-utilization 0.7`` (the scenario has one value, 0.9; the KV cache of
either is far more than ~8 requests in flight need) and ``--dtype float16`` (the same bytes as bf16).

    python benchmarks/disagg_vs_public.py          # ~1 s

Prints the table, then one line of JSON.

Recorded 2026-12-02: median TTFT 349 ms predicted vs 298 measured (+17%), mean 520 vs 310 (+68%); mean TPOT
66.5 ms vs 10.45 (+537%). The TPOT error is the decode step at long context, not the disaggregation: one decode
step at the measured operating point (batch ~8 by Little's law, 8,100-token contexts) costs 18.5 ms in the step
model, 10.2 ms of it decode attention (8.5 GB of KV read at ~0.84 TB/s, a quarter of the card's bandwidth),
against the 10.45 ms measured; at 18.5 ms a step the simulated decode instance's capacity (~770 tokens/s) is
barely above the 720 tokens/s the load asks, so its batch grows and TPOT with it. The KV transfer (1.05 GB at
NVLink speed, 2.9 ms) is a tenth of the "~30ms overhead for 10000 tokens" the comment states for P2P NCCL.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.disagg import DisaggLayout, DisaggResult, simulate_disaggregated
from planner.serve.replica import replica_step_cost
from planner.serve.workload import FixedLength, TraceArrivals, Workload

SOURCE = (
    "https://github.com/vllm-project/vllm/pull/18242 (KuntaiDu, 2025-06-16), "
    "setup per vllm docs/design/p2p_nccl_connector.md"
)
MODEL = "meta-llama/Llama-3.1-8B"  # the catalog config of the Instruct model's architecture
GPU = "h100-sxm"
ENGINE = "vllm@0.9.1"
INPUT_TOKENS, OUTPUT_TOKENS = 8000, 200
NUM_PROMPTS, REQUEST_RATE, BURSTINESS = 200, 3.6, 100.0
LAYOUT = DisaggLayout(prefill_instances=1, prefill_tp=1, decode_instances=1, decode_tp=1, kv_transfer_link="nvlink")
#: (metric, statistic) -> the run's figure in ms, as the comment prints it.
MEASURED_MS = {
    ("ttft", "mean"): 309.84,
    ("ttft", "p50"): 298.10,
    ("ttft", "p95"): 359.73,
    ("tpot", "mean"): 10.45,
    ("tpot", "p50"): 10.37,
    ("tpot", "p95"): 11.34,
}


def burst_trace(path: Path, seed: int = 0) -> Path:
    """The arrivals ``vllm bench serve --burstiness B --request-rate R`` draws: gamma gaps (shape B, mean 1/R)."""
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=BURSTINESS, scale=1.0 / (REQUEST_RATE * BURSTINESS), size=NUM_PROMPTS)
    gaps[0] = 0.0
    lines = ["arrival_time_s,input_tokens,output_tokens"]
    lines += [f"{t:.6f},{INPUT_TOKENS},{OUTPUT_TOKENS}" for t in np.cumsum(gaps)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def scenario() -> Scenario:
    """Each instance as the PR's guide starts it (TP 1, its token budget, sequence cap and length)."""
    return Scenario(
        gpu=GPU,
        tp=1,
        max_model_len=10000,
        max_num_batched_tokens=10000,
        max_num_seqs=256,
        engine_version=ENGINE,
    )


def spec():
    return build_spec(load_config(MODEL, prefer="catalog").config, MODEL)


def simulate(trace: Path) -> DisaggResult:
    workload = Workload(
        arrivals=TraceArrivals(path=str(trace)),
        num_requests=NUM_PROMPTS,
        input_tokens=FixedLength(tokens=INPUT_TOKENS),
        output_tokens=FixedLength(tokens=OUTPUT_TOKENS),
        seed=0,
    )
    return simulate_disaggregated(spec(), get_profile(GPU), scenario(), workload, LAYOUT)


def decode_step_at_measured_batch() -> dict[str, float]:
    """One decode step of the decode instance at the batch the measurement implies (Little's law: requests in
    decode = rate x output tokens x measured mean TPOT), every sequence at the mean context: the step cost alone,
    without the simulator's queueing, set against the measured mean TPOT."""
    batch = REQUEST_RATE * OUTPUT_TOKENS * MEASURED_MS[("tpot", "mean")] / 1e3
    step = replica_step_cost(spec(), get_profile(GPU), scenario())
    context = INPUT_TOKENS + OUTPUT_TOKENS / 2
    seconds = float(step.decode_seconds(round(batch), context))
    return {"batch": round(batch), "context": context, "step_ms": seconds * 1e3}


def rows(run: DisaggResult) -> list[dict]:
    """Predicted next to measured for every figure the record gives. The simulator reports P90 and P99, not P95:
    the measured P95 is set against both (it should lie between them), the error against their midpoint."""
    out = []
    for (metric, stat), measured in MEASURED_MS.items():
        stats = run.ttft_seconds if metric == "ttft" else run.tpot_seconds
        assert stats is not None, f"the simulation completed no request with a {metric}"
        if stat == "p95":
            low, high = stats.p90 * 1e3, stats.p99 * 1e3
            predicted, shown = (low + high) / 2, f"{low:.2f}-{high:.2f}"
        else:
            predicted = getattr(stats, stat) * 1e3
            shown = f"{predicted:.2f}"
        out.append(
            {
                "metric": f"{stat} {metric.upper()}",
                "predicted_ms": round(predicted, 2),
                "predicted_shown": shown,
                "measured_ms": measured,
                "error_pct": round((predicted / measured - 1) * 100, 1),
            }
        )
    return out


def main() -> int:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        run = simulate(burst_trace(Path(tmp) / "burstiness100.csv"))
    table = rows(run)
    print(f"{MODEL} on {GPU}, {LAYOUT.label}, {ENGINE}; {NUM_PROMPTS} requests of {INPUT_TOKENS:,} + {OUTPUT_TOKENS}")
    print(f"tokens at {REQUEST_RATE} req/s, burstiness {BURSTINESS:g}\nmeasured: {SOURCE}\n")
    print(f"{'figure':10s} {'predicted (ms)':>16s} {'measured (ms)':>14s} {'error':>7s}")
    for row in table:
        print(f"{row['metric']:10s} {row['predicted_shown']:>16s} {row['measured_ms']:14.2f} {row['error_pct']:+6.1f}%")
    print("(P95: the simulator's P90-P99; the error is against their midpoint)")
    assert run.kv_transfer_seconds is not None and run.prefill_queue_seconds is not None
    assert run.decode_queue_seconds is not None
    print(
        f"\npredicted TTFT parts (mean): prefill queue + compute {run.prefill_queue_seconds.mean * 1e3:.1f} ms, "
        f"KV transfer {run.kv_transfer_seconds.mean * 1e3:.2f} ms "
        f"({run.kv_transfer_bytes_per_gpu_mean / 1e6:,.0f} MB at {run.kv_link_bytes_per_s / 1e9:,.0f} GB/s), "
        f"decode queue + first step {run.decode_queue_seconds.mean * 1e3:.1f} ms; "
        f"{run.num_completed}/{run.num_requests} completed"
    )
    alone = decode_step_at_measured_batch()
    print(
        f"one decode step at the measured operating point (batch {alone['batch']} by Little's law, context "
        f"{alone['context']:,.0f}): {alone['step_ms']:.2f} ms predicted vs {MEASURED_MS[('tpot', 'mean')]} ms mean "
        f"TPOT measured ({(alone['step_ms'] / MEASURED_MS[('tpot', 'mean')] - 1) * 100:+.0f}%)"
    )
    print(
        json.dumps(
            {
                "disagg_vs_public": table,
                "source": SOURCE,
                "kv_transfer_ms_mean": round(run.kv_transfer_seconds.mean * 1e3, 3),
                "decode_step_ms_at_measured_batch": round(alone["step_ms"], 2),
                "completed": run.num_completed,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
