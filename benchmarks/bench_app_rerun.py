"""Benchmark: how long a rerun of the Plan and Roofline pages takes (Streamlit AppTest, no browser).

A rerun is what every click in the sidebar costs. Two kinds are timed, median of ``RUNS`` each:

* unchanged inputs: every core call comes from ``st.cache_data``; what is left is Streamlit
  running the frame, the page and building the plotly figures;
* a changed input (gpu_memory_utilization alternating 0.90 / 0.91, two values never seen before
  at first, then cached): the page's core calls run again on the first pass.

First it prints what the page's core calls cost with a cold cache (what a changed-input rerun
adds to an unchanged one), then the measurements, then one line of JSON.
Usage, from the repository root (the app's ``ui`` folder is not part of the installed package):

    python -m benchmarks.bench_app_rerun
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
from ui.sweeps import concurrency_vs_context, memory_plan, roofline_stages

ROOT = Path(__file__).resolve().parents[1]

RUNS = 15
TIMEOUT_S = 60


def core_seconds() -> dict[str, float]:
    """What one rerun of each page spends in its (cached) core calls when the cache is cold: median of RUNS."""
    loaded = load_config("meta-llama/Llama-3.1-8B")
    spec = build_spec(loaded.config, loaded.name)
    hw, sc = get_profile("h100-sxm"), Scenario(max_model_len=8192)
    pages = {
        "plan": [(memory_plan, (spec, hw, sc)), (concurrency_vs_context, (spec, hw, sc))],
        "roofline": [(roofline_stages, (spec, hw, sc, "auto"))],
    }
    out = {}
    for name, calls in pages.items():
        times = []
        for _ in range(RUNS):
            for cached, _args in calls:
                cached.clear()
            start = time.perf_counter()
            for cached, args in calls:
                cached(*args)
            times.append(time.perf_counter() - start)
        out[name] = statistics.median(times)
    return out


def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)


def timed_run(at: AppTest) -> float:
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    if at.exception:
        raise SystemExit(f"the page raised: {at.exception[0].value}")
    return elapsed


def measure(page: str) -> dict[str, float]:
    at = app()
    first = timed_run(at)  # imports, catalog, first core calls
    if page != "views/plan.py":
        at.switch_page(page)
        first = timed_run(at)
    unchanged = [timed_run(at) for _ in range(RUNS)]
    changed = []
    for i in range(RUNS):
        at.slider(key="util").set_value(0.90 if i % 2 == 0 else 0.91)
        changed.append(timed_run(at))
    return {
        "first_s": first,
        "unchanged_median_s": statistics.median(unchanged),
        "changed_median_s": statistics.median(changed),
        "changed_first_s": changed[0],
    }


def main() -> None:
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    core = core_seconds()
    print("Expected: the page's core calls with a cold cache (no Streamlit), added to a rerun with a new input:")
    for name, seconds in core.items():
        print(f"  {name:9s} {seconds * 1e3:8.1f} ms")
    results = {}
    for name, page in (("plan", "views/plan.py"), ("roofline", "views/roofline.py")):
        results[name] = measure(page)
    print(f"\nMeasured with AppTest, median of {RUNS} reruns:")
    print(f"  {'page':9s} {'first run':>10s} {'unchanged':>10s} {'new input':>10s} {'changed':>10s}")
    for name, r in results.items():
        print(
            f"  {name:9s} {r['first_s'] * 1e3:8.0f} ms {r['unchanged_median_s'] * 1e3:7.0f} ms "
            f"{r['changed_first_s'] * 1e3:7.0f} ms {r['changed_median_s'] * 1e3:7.0f} ms"
        )
    line = {"benchmark": "app_rerun", "runs": RUNS}
    for name, r in results.items():
        line[f"{name}_rerun_median_s"] = round(r["unchanged_median_s"], 4)
        line[f"{name}_changed_input_median_s"] = round(r["changed_median_s"], 4)
        line[f"{name}_core_uncached_s"] = round(core[name], 4)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
