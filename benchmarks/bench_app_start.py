"""Benchmark: the first page after a server start, in headless Chromium (as a user meets the app).

Each run starts ``streamlit run app.py --server.headless true`` on a free 127.0.0.1 port (offline:
the Hub endpoint is a closed local port), and times three moments from the process start:

* ``health``: ``/_stcore/health`` answers "ok" (Streamlit's own start: Python, Tornado);
* ``first_page``: a fresh Chromium tab opened at that moment shows the Plan page's verdict
  (an ``st.success`` or ``st.error`` under the title, i.e. the page ran to its answer);
* ``app_run``: ``first_page - health``: the app's imports, the catalog and the first cache fills.

Also printed: what ``import``-ing the app's modules costs in a fresh interpreter (the part of
``app_run`` that lazy imports can cut). Median of ``RUNS``, then one line of JSON. Skipped with a
message where /usr/bin/chromium or Playwright is missing. Usage, from the repository root:

    python -m benchmarks.bench_app_start
"""

from __future__ import annotations

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
#: The Plan page has answered: its verdict box (success or error) is drawn and nothing is running.
ANSWERED_JS = """() => !document.querySelector('[data-testid="stStatusWidget"]')
  && !!document.querySelector('[data-testid="stMain"] h1')
  && !!document.querySelector('[data-testid="stMain"] [data-testid="stAlertContainer"]')"""
IMPORTS = "import streamlit, ui.sidebar, ui.state, ui.charts, ui.sweeps, ui.derived"
SERVER_IMPORTS = "import streamlit.web.bootstrap"  # loaded before the server answers /_stcore/health


def one_start(browser) -> dict[str, float]:
    """Start a server, open the app once it is healthy, time until the first page has answered."""
    with tempfile.TemporaryDirectory() as home:
        start = time.monotonic()
        try:
            server = app_server(Path(home), start_timeout_s=START_TIMEOUT_S)
            with server as url:
                health = time.monotonic() - start
                context = browser.new_context(viewport={"width": 1440, "height": 1000})
                page = context.new_page()
                page.goto(url)
                while not page.evaluate(ANSWERED_JS):
                    if time.monotonic() > start + START_TIMEOUT_S:
                        raise SystemExit("the first page did not answer in time")
                    time.sleep(0.02)
                first_page = time.monotonic() - start
                context.close()
        except RuntimeError as err:
            raise SystemExit(str(err)) from None
    return {"health_s": health, "first_page_s": first_page, "app_run_s": first_page - health}


def import_seconds() -> float:
    """Wall time of a fresh interpreter importing the app's modules, minus one importing what the server had
    loaded before it was healthy: median of RUNS."""

    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=offline_env(Path(tempfile.gettempdir())), check=True)
        return time.perf_counter() - start

    return statistics.median(run(IMPORTS) - run(SERVER_IMPORTS) for _ in range(RUNS))


def main() -> None:
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
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        runs = [one_start(browser) for _ in range(RUNS)]
        browser.close()
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(
        f"Measured over {RUNS} server starts (median): healthy after {median['health_s']:.2f} s, first page "
        f"answered after {median['first_page_s']:.2f} s (the app's first run: {median['app_run_s']:.2f} s)"
    )
    line = {
        "benchmark": "app_start",
        "runs": RUNS,
        **{k: round(v, 3) for k, v in median.items()},
        "imports_s": round(imports, 3),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
