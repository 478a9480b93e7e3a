"""Benchmark: how long a rerun of each of the eight pages takes (Streamlit AppTest, no browser).

A rerun is what every click in the sidebar costs. Timed, median of ``RUNS`` each:

* unchanged inputs, on every page: every core call comes from ``st.cache_data`` and every figure
  from ``ui.charts``' kept copies; what is left is Streamlit running the frame (the sidebar's
  widgets), the page, and sending the figures and tables (target: 40 ms);
* for Plan and Roofline, a changed input too (gpu_memory_utilization alternating 0.90 / 0.91, two
  values never seen before at first, then cached): the page's core calls run again on the first pass.

The sidebar alone (the frame with an empty page) is timed as well: no page is faster than it.

Each unchanged rerun is timed three ways: AppTest's ``run()`` as a whole (it also turns every message into its
element tree, which a server does not), the script run itself (``ScriptRunner._run_script``, the time a
server's script thread spends on the rerun; the websocket is written from another thread), and that thread's
CPU time (``time.thread_time``: the same work without the waits for a core that a loaded box adds).

A server compiles each script once (its ``ScriptCache`` lives as long as the server); AppTest makes a new
cache on every run, so it would recompile ``app.py`` and the page each time (0.5-2 ms a page). The runs
here share one cache, as a server's sessions do.

First it prints what the page's core calls cost with a cold cache (what a changed-input rerun
adds to an unchanged one), then the measurements, then one line of JSON.
Usage, from the repository root (the app's ``ui`` folder is not part of the installed package):

    python -m benchmarks.bench_app_rerun [--pages plan simulate]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

from streamlit.runtime.scriptrunner import script_runner
from streamlit.runtime.scriptrunner.script_cache import ScriptCache
from streamlit.testing.v1 import AppTest, app_test, local_script_runner

from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from ui.sweeps import concurrency_vs_context, memory_plan, roofline_stages

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("plan", "roofline", "latency", "compare", "export", "validate", "simulate", "diagnose")
CHANGED_INPUT_PAGES = ("plan", "roofline")

RUNS = 11
TIMEOUT_S = 60


def core_seconds() -> dict[str, float]:
    """What one rerun of each page spends in its (cached) core calls when the cache is cold: median of RUNS."""
    loaded = load_config("meta-llama/Llama-3.1-8B")
    spec = build_spec(loaded.config, loaded.name)
    hw, sc = get_profile("h100-sxm"), Scenario()  # the sidebar's defaults
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


def share_one_script_cache() -> None:
    """Every AppTest run compiles from one ``ScriptCache``, as every rerun of a server does (module docstring)."""
    shared = ScriptCache()
    for module in (app_test, local_script_runner):
        module.ScriptCache = lambda: shared  # type: ignore[attr-defined, misc]


SCRIPT_RUNS: list[float] = []
"""Seconds of each script run (``time_script_runs``), the latest last."""
SCRIPT_CPU: list[float] = []
"""CPU seconds of the script thread in each script run (``time.thread_time``): what the rerun costs the server,
without the waits a loaded box adds to the wall time."""


def time_script_runs() -> None:
    """Record how long each script run takes inside AppTest's runner thread (module docstring)."""
    run_script = script_runner.ScriptRunner._run_script

    def timed(self, *args, **kwargs):
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return run_script(self, *args, **kwargs)
        finally:
            SCRIPT_RUNS.append(time.perf_counter() - start)
            SCRIPT_CPU.append(time.thread_time() - cpu)

    script_runner.ScriptRunner._run_script = timed  # type: ignore[method-assign]


def app() -> AppTest:
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)


def timed_run(at: AppTest) -> float:
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    if at.exception:
        raise SystemExit(f"the page raised: {at.exception[0].value}")
    return elapsed


def measure(page: str, changed_input: bool) -> dict[str, float]:
    at = app()
    first = timed_run(at)  # imports, catalog, first core calls
    if page != "plan":
        at.switch_page(f"views/{page}.py")
        first = timed_run(at)
    unchanged, scripts, cpus = [], [], []
    for _ in range(RUNS):
        unchanged.append(timed_run(at))
        scripts.append(SCRIPT_RUNS[-1])
        cpus.append(SCRIPT_CPU[-1])
    out = {
        "first_s": first,
        "unchanged_median_s": statistics.median(unchanged),
        "unchanged_script_median_s": statistics.median(scripts),
        "unchanged_script_cpu_median_s": statistics.median(cpus),
    }
    if changed_input:
        changed = []
        for i in range(RUNS):
            at.slider(key="util").set_value(0.90 if i % 2 == 0 else 0.91)
            changed.append(timed_run(at))
        out.update(changed_median_s=statistics.median(changed), changed_first_s=changed[0])
    return out


def sidebar_only_seconds() -> float:
    """An unchanged rerun of the frame alone (set_page_config and the sidebar over an empty page): median of RUNS."""
    script = """
import streamlit as st
from ui import sidebar
st.set_page_config(page_title="LLM inference planner", layout="wide")
sidebar.render()
st.title("empty page")
"""
    at = AppTest.from_string(script, default_timeout=TIMEOUT_S)
    timed_run(at)
    return statistics.median(timed_run(at) for _ in range(RUNS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", nargs="+", choices=PAGES, default=PAGES, help="the pages to time (default: all)")
    pages = parser.parse_args().pages
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    share_one_script_cache()
    time_script_runs()
    core = core_seconds()
    print("Expected: the page's core calls with a cold cache (no Streamlit), added to a rerun with a new input:")
    for name, seconds in core.items():
        print(f"  {name:9s} {seconds * 1e3:8.1f} ms")
    results = {name: measure(name, name in CHANGED_INPUT_PAGES) for name in pages}
    sidebar_s = sidebar_only_seconds()
    print(f"\nMeasured with AppTest, median of {RUNS} reruns (the sidebar alone: {sidebar_s * 1e3:.0f} ms):")
    print(
        f"  {'page':9s} {'first run':>10s} {'unchanged':>10s} {'(script)':>10s} {'(CPU)':>10s} {'new input':>10s} "
        f"{'changed':>10s}"
    )
    for name, r in results.items():
        changed = (
            f"{r['changed_first_s'] * 1e3:7.0f} ms {r['changed_median_s'] * 1e3:7.0f} ms"
            if "changed_median_s" in r
            else f"{'':>10s} {'':>10s}"
        )
        print(
            f"  {name:9s} {r['first_s'] * 1e3:8.0f} ms {r['unchanged_median_s'] * 1e3:7.1f} ms "
            f"{r['unchanged_script_median_s'] * 1e3:7.1f} ms "
            f"{r['unchanged_script_cpu_median_s'] * 1e3:7.1f} ms {changed}"
        )
    line = {
        "benchmark": "app_rerun",
        "runs": RUNS,
        "sidebar_only_median_s": round(sidebar_s, 4),
        "slowest_unchanged_rerun_s": round(max(r["unchanged_median_s"] for r in results.values()), 4),
        "slowest_unchanged_script_s": round(max(r["unchanged_script_median_s"] for r in results.values()), 4),
    }
    for name, r in results.items():
        line[f"{name}_rerun_median_s"] = round(r["unchanged_median_s"], 4)
        line[f"{name}_script_median_s"] = round(r["unchanged_script_median_s"], 4)
        line[f"{name}_script_cpu_median_s"] = round(r["unchanged_script_cpu_median_s"], 4)
        if "changed_median_s" in r:
            line[f"{name}_changed_input_median_s"] = round(r["changed_median_s"], 4)
    for name, seconds in core.items():
        line[f"{name}_core_uncached_s"] = round(seconds, 4)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
