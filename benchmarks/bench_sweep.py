"""Claim: a vectorized sweep evaluates 1M (model, GPU, TP, dtype, batch, context) points in under 2 s.

Prints the point count and wall time (median of 3), then one JSON line.
    python benchmarks/bench_sweep.py [--points-per-config N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from planner.estimate.sweep import sweep
from planner.hardware import load_profiles
from planner.model.families import build_spec
from planner.model.sources import load_config

MODELS = [
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen2.5-7B",
    "mistralai/Mistral-7B-v0.1",
    "google/gemma-2-9b",
    "deepseek-ai/DeepSeek-V3",
    "openai/gpt-oss-120b",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=32)
    parser.add_argument("--contexts", type=int, default=40)
    args = parser.parse_args()
    models = {m: build_spec(load_config(m).config, m) for m in MODELS}
    gpus = [hw for hw in load_profiles().values() if hw.kind == "gpu"]
    batches = [2**i for i in range(args.batches // 4)] + list(range(3, 3 + args.batches - args.batches // 4))
    contexts = [256 * (i + 1) for i in range(args.contexts)]
    tps, dtypes = [1, 2, 4, 8], ["auto", "fp8", "int4"]
    times, n = [], 0
    for _ in range(3):
        t0 = time.perf_counter()
        result = sweep(models, gpus, tps, dtypes, batches, contexts)
        times.append(time.perf_counter() - t0)
        n = len(result)
    median = statistics.median(times)
    print(
        f"{len(models)} models x {len(gpus)} GPUs x TP {tps} x dtypes {dtypes} x {len(batches)} batches x "
        f"{len(contexts)} contexts"
    )
    print(
        f"{n:,} points in {median:.3f} s (median of 3) = {n / median / 1e6:.2f} M points/s; fits: "
        f"{result.fits.mean():.0%}"
    )
    print(
        json.dumps({"benchmark": "sweep", "points": n, "seconds": round(median, 4), "points_per_s": round(n / median)})
    )


if __name__ == "__main__":
    main()
