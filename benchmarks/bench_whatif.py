"""Claim: one what-if (memory plan + prefill and decode roofline + latency) for a 70B model takes < 20 ms.

Model loading is excluded (the app caches it); the config is parsed once. Prints the median of 50
runs per part, then one JSON line.
    python benchmarks/bench_whatif.py
"""

from __future__ import annotations

import json
import statistics
import time

from planner.estimate.latency import estimate_latency
from planner.estimate.memory import plan_memory
from planner.estimate.roofline import roofline
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario, Workload


def timed(fn, repeat: int = 50) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    model = build_spec(load_config("meta-llama/Llama-3.1-70B").config, "meta-llama/Llama-3.1-70B")
    hw = get_profile("h100-sxm")
    sc = Scenario(gpu="h100-sxm", tp=4, max_model_len=8192, workload=Workload(input_len=2048, output_len=256, batch_size=32))
    parts = {
        "plan_memory (with checked suggestions)": lambda: plan_memory(model, hw, sc),
        "roofline prefill": lambda: roofline(model, hw, sc, "prefill", 32, 2048),
        "roofline decode": lambda: roofline(model, hw, sc, "decode", 32, 2304),
        "estimate_latency": lambda: estimate_latency(model, hw, sc),
    }
    figures = {name: timed(fn) for name, fn in parts.items()}

    def whatif():
        plan_memory(model, hw, sc)
        roofline(model, hw, sc, "prefill", 32, 2048)
        roofline(model, hw, sc, "decode", 32, 2304)
        estimate_latency(model, hw, sc)

    total = timed(whatif)
    plan = plan_memory(model, hw, sc)
    lat = estimate_latency(model, hw, sc)
    print(f"Llama-3.1-70B on 4 x H100 SXM: {plan.reason}")
    print(f"  TTFT {lat.ttft_seconds * 1e3:.1f} ms, TPOT {lat.tpot_seconds * 1e3:.2f} ms, {lat.throughput_tokens_per_s:,.0f} tok/s ({lat.kind})")
    for name, seconds in figures.items():
        print(f"  {name:40s} {seconds * 1e3:7.2f} ms")
    print(f"  {'what-if total':40s} {total * 1e3:7.2f} ms (target < 20 ms)")
    print(json.dumps({"benchmark": "whatif_70b", "seconds": round(total, 5), **{k: round(v, 5) for k, v in figures.items()}}))


if __name__ == "__main__":
    main()
