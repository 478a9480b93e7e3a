"""Benchmark: the first page after a server start, in headless Chromium (as a user meets the app).

Each run starts ``streamlit run app.py --server.headless true`` on a free 127.0.0.1 port (offline:
the Hub endpoint is a closed local port), and times these moments from the process start:

* ``health``: ``/_stcore/health`` answers "ok" (Streamlit's own start: Python, Tornado);
* ``loaded``: a fresh Chromium tab opened at that moment has loaded the frontend (its ``load`` event);
* ``first_page``: the tab shows the Plan page's verdict (an ``st.success`` or ``st.error`` under the
  title) and no "running" status: what a user reads first;
* ``page``: the whole Plan page is drawn: both charts rendered, the table's grid, the KV formula's total;
* ``app_run``: ``first_page - health``: the frontend's load, the app's imports, its first cache fills.

The floors: the same harness times a bare app (a title and an ``st.success``: nothing of this project's),
and one with the Plan page's kinds of element and the sidebar's kinds of widget, each once, with nothing
to compute (the frontend fetches and runs each kind's code the first time it meets one), in the same run,
interleaved with this checkout's app, so all see the same load. ``--before DIR`` times another checkout's app too (e.g.
``git worktree add /tmp/before HEAD`` before a change), interleaved.

Also printed: what ``import``-ing the app's modules costs in a fresh interpreter (the part of
``app_run`` that lazy imports can cut). Median of ``RUNS`` (``--runs``), the minimum too, then one line
of JSON. Skipped with a message where /usr/bin/chromium or Playwright is missing. Usage, from the
repository root:

    python -m benchmarks.bench_app_start [--runs 5] [--before /tmp/before]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.app_server import CHROMIUM, CHROMIUM_ARGS, ROOT, app_server, offline_env

RUNS = 5
START_TIMEOUT_S = 90
POLL_S = 0.02
#: The Plan page has answered: its verdict box (success or error) is drawn and nothing is running.
ANSWERED_JS = """() => !document.querySelector('[data-testid="stStatusWidget"]')
  && !!document.querySelector('[data-testid="stMain"] h1')
  && !!document.querySelector('[data-testid="stMain"] [data-testid="stAlertContainer"]')"""
#: The whole Plan page is drawn: its two charts rendered, its table's grid, and the KV formula's total (its end).
PAGE_JS = """() => !document.querySelector('[data-testid="stStatusWidget"]')
  && [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stPlotlyChart"]')]
       .filter(chart => chart.querySelector('.main-svg')).length >= 2
  && !!document.querySelector('[data-testid="stMain"] [data-testid="stDataFrame"] canvas')
  && document.querySelector('[data-testid="stMain"]').innerText.includes('B per token')"""
#: The floor: an app of nothing but what the Plan page's verdict check looks for.
BARE_APP = 'import streamlit as st\n\nst.title("Plan")\nst.success("fits")\n'
#: The floor of a page drawn with the Plan page's kinds of element and the sidebar's kinds of widget (metrics,
#: two plotly charts, a table, a code block; pickers, number fields, a slider, an uploader, ...): the frontend
#: fetches and runs each kind's code the first time it meets one (the plotly chart's is 4.7 MB).
ELEMENTS_APP = """import pandas as pd
import plotly.graph_objects as go
import streamlit as st

st.set_page_config(page_title="LLM inference planner", page_icon="🧮", layout="wide")
with st.sidebar:
    st.subheader("Model")
    st.selectbox("Catalog model", ["a", "b"])
    st.text_input("Or any Hub repo id")
    with st.expander("Upload a config.json"):
        st.file_uploader("config.json", type=["json"])
    st.caption("a model")
    left, right = st.columns(2)
    left.number_input("Tensor parallel", min_value=1, step=1)
    right.number_input("Pipeline parallel", min_value=1, step=1)
    st.toggle("Mixed precision")
    st.slider("gpu_memory_utilization", min_value=0.5, max_value=1.0, step=0.01, value=0.9)
    st.radio("Engine", ["CUDA graphs", "eager"], horizontal=True)
    st.checkbox("Chunked prefill")
    st.divider()
pages = [st.Page(lambda: None, title=t, url_path=t.lower(), default=t == "Plan") for t in ("Plan", "Roofline")]
st.navigation(pages).run()
st.title("Plan")
st.success("fits")
st.columns(5)[0].metric("Max concurrency", "1")
st.plotly_chart(go.Figure(go.Bar(x=[1.0], y=["per GPU"], orientation="h")), key="bar")
st.dataframe(pd.DataFrame({"term": ["weights"], "GiB": [1.0]}), hide_index=True)
st.download_button("Download the plan (JSON)", "{}", file_name="plan.json")
left, right = st.columns(2)
left.plotly_chart(go.Figure(go.Scatter(x=[1, 2], y=[2, 1])), key="line")
right.code("2 x 32 layers", language=None, wrap_lines=True)
right.markdown("Total 1 B per token")
"""
IMPORTS = "import streamlit, ui.sidebar, ui.state, ui.charts, ui.sweeps, ui.derived"
SERVER_IMPORTS = "import streamlit.web.bootstrap"  # loaded before the server answers /_stcore/health


def wait_for(page, script: str, deadline: float) -> float:
    """time.monotonic() once ``script`` holds in ``page``; SystemExit past ``deadline``."""
    while not page.evaluate(script):
        if time.monotonic() > deadline:
            raise SystemExit("the first page did not answer in time")
        time.sleep(POLL_S)
    return time.monotonic()


def one_start(browser, root: Path, page_js: str) -> dict[str, float]:
    """Start ``root``'s app, open it once it is healthy, time until the first page has answered and is drawn."""
    with tempfile.TemporaryDirectory() as home:
        start = time.monotonic()
        try:
            server = app_server(Path(home), start_timeout_s=START_TIMEOUT_S, root=root)
            with server as url:
                health = time.monotonic() - start
                context = browser.new_context(viewport={"width": 1440, "height": 1000})
                page = context.new_page()
                page.goto(url)  # returns at the frontend's load event
                loaded = time.monotonic() - start
                first_page = wait_for(page, ANSWERED_JS, start + START_TIMEOUT_S) - start
                drawn = wait_for(page, page_js, start + START_TIMEOUT_S) - start
                context.close()
        except RuntimeError as err:
            raise SystemExit(str(err)) from None
    return {
        "health_s": health,
        "loaded_s": loaded,
        "first_page_s": first_page,
        "page_s": drawn,
        "app_run_s": first_page - health,
    }


def import_seconds() -> float:
    """Wall time of a fresh interpreter importing the app's modules, minus one importing what the server had
    loaded before it was healthy: median of RUNS."""

    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=offline_env(Path(tempfile.gettempdir())), check=True)
        return time.perf_counter() - start

    return statistics.median(run(IMPORTS) - run(SERVER_IMPORTS) for _ in range(RUNS))


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    """Median of every moment, and the minimum of the two the page is judged by."""
    out = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    out.update(first_page_min_s=min(r["first_page_s"] for r in runs), page_min_s=min(r["page_s"] for r in runs))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="server starts per app (median)")
    parser.add_argument("--before", type=Path, help="another checkout whose app.py to time too, interleaved")
    args = parser.parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("skipped: Playwright (python) is not installed")
        return
    if not CHROMIUM.exists():
        print(f"skipped: {CHROMIUM} is missing")
        return
    imports = import_seconds()
    print(f"Expected: importing the app's modules costs {imports:.2f} s of the app's first run")
    with tempfile.TemporaryDirectory() as bare_dir, tempfile.TemporaryDirectory() as elements_dir:
        (Path(bare_dir) / "app.py").write_text(BARE_APP)
        (Path(elements_dir) / "app.py").write_text(ELEMENTS_APP)
        apps = {
            "app": (ROOT, PAGE_JS),
            "bare": (Path(bare_dir), ANSWERED_JS),
            "elements": (Path(elements_dir), PAGE_JS),
        }
        if args.before:
            apps["before"] = (args.before.resolve(), PAGE_JS)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in apps}
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            for i in range(args.runs):
                names = list(apps)
                for name in names[i % len(names) :] + names[: i % len(names)]:  # each app first in turn
                    results[name].append(one_start(browser, *apps[name]))
            browser.close()
    medians = {name: summary(runs) for name, runs in results.items()}
    print(f"Measured over {args.runs} server starts each, interleaved (median; min):")
    for name, m in medians.items():
        print(
            f"  {name:7s} healthy {m['health_s']:.2f} s, frontend loaded {m['loaded_s']:.2f} s, verdict shown "
            f"{m['first_page_s']:.2f} s (min {m['first_page_min_s']:.2f}), page drawn {m['page_s']:.2f} s "
            f"(min {m['page_min_s']:.2f})"
        )
    app, bare, elements = medians["app"], medians["bare"], medians["elements"]
    print(
        f"The floors: a bare app answers after {bare['first_page_s']:.2f} s; one with the Plan page's kinds of "
        f"element is drawn after {elements['page_s']:.2f} s. The app's own share: verdict "
        f"{app['first_page_s'] - bare['first_page_s']:.2f} s above the bare app, whole page "
        f"{app['page_s'] - elements['page_s']:.2f} s above the elements' floor"
    )
    line: dict[str, object] = {
        "benchmark": "app_start",
        "runs": args.runs,
        **{k: round(v, 3) for k, v in app.items()},
        "imports_s": round(imports, 3),
        **{f"bare_{k}": round(v, 3) for k, v in bare.items() if k in ("health_s", "first_page_s", "first_page_min_s")},
        **{f"elements_{k}": round(v, 3) for k, v in elements.items() if k in ("page_s", "page_min_s")},
    }
    if "before" in medians:
        line.update({f"before_{k}": round(v, 3) for k, v in medians["before"].items()})
    print(json.dumps(line))


if __name__ == "__main__":
    main()
