"""Benchmark: the Simulate page after a new input (Streamlit AppTest, no browser).

What a user waits for after typing a new request rate on the Simulate page: the rerun simulates
the sidebar's replica at that rate, sweeps the request rate, searches the cheapest deployment
for the default targets, and draws the four charts. Each run types a rate never seen before
(10.1, 10.2, ... req/s), so every call keyed on the rate misses; the rate sweep and the rate-free half
of the search (``search_capacity``, kept by ``ui.serving``) do not depend on it. Median of ``RUNS``.

First it prints what the page's core calls cost for the same inputs without Streamlit (the part
no page code can cut), then the measured rerun, then one line of JSON. Usage, from the repository
root (the app's ``ui`` folder is not part of the installed package):

    python -m benchmarks.bench_app_simulate
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.replica import length_distribution, simulate_scenario
from planner.serve.slo import SLO, CandidateSpace, SearchSettings, plan_at_rate, search_capacity, sweep_rates
from planner.serve.workload import PoissonArrivals, Workload

ROOT = Path(__file__).resolve().parents[1]
RUNS = 7
TIMEOUT_S = 120
FIRST_RATE = 10.0


def rate_of(i: int) -> float:
    """The request rate of run ``i``: 10.1, 10.2, ... (new to every cache)."""
    return round(FIRST_RATE + 0.1 * (i + 1), 1)


def core_seconds() -> dict[str, float]:
    """The page's core calls at the benchmark's rates, without Streamlit: median of RUNS each. ``cheapest`` is
    what a new rate costs the page (``plan_at_rate`` on a kept search); ``search`` the search itself, once."""
    loaded = load_config("meta-llama/Llama-3.1-8B")
    model = build_spec(loaded.config, loaded.name)
    hw, sc = get_profile("h100-sxm"), Scenario()  # the sidebar's defaults
    slo = SLO.of(p99_ttft=1.0, p99_tpot=0.05)
    space = CandidateSpace(
        gpus=(hw.id,),
        tp=(1, 2, 4, 8),
        weight_dtypes=(sc.weight_dtype,),
        kv_cache_dtypes=(sc.kv_cache_dtype,),
        base=sc.model_copy(update={"num_gpus": None}),
    )

    def workload(rate: float, requests: int = 1000) -> Workload:
        return Workload(
            arrivals=PoissonArrivals(request_rate_per_s=rate),
            num_requests=requests,
            input_tokens=length_distribution("fixed", sc.workload.input_len, 0, "prompt length"),
            output_tokens=length_distribution("fixed", sc.workload.output_len, 0, "output length"),
        )

    start = time.perf_counter()
    search = search_capacity(model, slo, workload(1.0, 1), space, SearchSettings())
    plan_at_rate(search, FIRST_RATE)  # the page's first visit: every bisection it needs
    times: dict[str, list[float]] = {"simulate": [], "rate_sweep": [], "cheapest": [], "search": []}
    times["search"].append(time.perf_counter() - start)
    for i in range(RUNS):
        rate = rate_of(i)
        served = workload(rate)
        for name, call in (
            ("simulate", lambda w=served: simulate_scenario(model, hw, sc, w)),
            ("rate_sweep", lambda w=served: sweep_rates(model, hw, sc, w, slo=slo)),
            ("cheapest", lambda r=rate: plan_at_rate(search, r)),
        ):
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def measure() -> dict[str, float]:
    """First visit of the page, unchanged reruns, and reruns after a new request rate."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.run()
    at.switch_page("views/simulate.py")
    start = time.perf_counter()
    at.run()
    first = time.perf_counter() - start
    changed = []
    for i in range(RUNS):
        at.number_input(key="simulate_rate").set_value(rate_of(i))
        start = time.perf_counter()
        at.run()
        changed.append(time.perf_counter() - start)
        if at.exception:
            raise SystemExit(f"the page raised: {at.exception[0].value}")
    return {"first_s": first, "new_input_median_s": statistics.median(changed), "new_input_min_s": min(changed)}


def main() -> None:
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    core = core_seconds()
    print(f"Expected: the page's core calls at a new rate, without Streamlit (median of {RUNS}; the floor of a rerun):")
    for name, seconds in core.items():
        print(f"  {name:10s} {seconds * 1e3:8.1f} ms")
    paid = core["simulate"] + core["cheapest"]  # the rate sweep and the search are cache hits at a new rate
    print(f"  a new rate pays simulate + cheapest: {paid * 1e3:.1f} ms (the rate sweep and the search are kept)")
    result = measure()
    print(
        f"\nMeasured with AppTest: first visit {result['first_s'] * 1e3:.0f} ms; after a new request rate "
        f"median {result['new_input_median_s'] * 1e3:.0f} ms (min {result['new_input_min_s'] * 1e3:.0f} ms) "
        f"of {RUNS} runs"
    )
    line = {
        "benchmark": "app_simulate",
        "runs": RUNS,
        "new_input_median_s": round(result["new_input_median_s"], 4),
        "first_visit_s": round(result["first_s"], 4),
        "core_new_rate_s": round(core["simulate"] + core["cheapest"], 4),
        **{f"core_{name}_s": round(seconds, 4) for name, seconds in core.items()},
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
