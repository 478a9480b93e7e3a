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
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
RUNS = 5
START_TIMEOUT_S = 90
#: The Plan page has answered: its verdict box (success or error) is drawn and nothing is running.
ANSWERED_JS = """() => !document.querySelector('[data-testid="stStatusWidget"]')
  && !!document.querySelector('[data-testid="stMain"] h1')
  && !!document.querySelector('[data-testid="stMain"] [data-testid="stAlertContainer"]')"""
IMPORTS = "import streamlit, ui.sidebar, ui.state, ui.charts, ui.sweeps, ui.derived"
SERVER_IMPORTS = "import streamlit.web.bootstrap"  # loaded before the server answers /_stcore/health


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def offline_env(home: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("HF_TOKEN", None)
    return env


def wait_health(url: str, process: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.read().strip() == b"ok":
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if process.poll() is not None:
            raise SystemExit(f"streamlit exited with {process.returncode}")
        time.sleep(0.02)
    raise SystemExit(f"streamlit did not answer {url}/_stcore/health within {START_TIMEOUT_S} s")


def one_start(browser) -> dict[str, float]:
    """Start a server, open the app once it is healthy, time until the first page has answered."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as home:
        start = time.monotonic()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.port",
                str(port),
                "--server.address",
                "127.0.0.1",
                "--server.headless",
                "true",
                "--browser.gatherUsageStats",
                "false",
                "--server.fileWatcherType",
                "none",
            ],
            cwd=ROOT,
            env=offline_env(Path(home)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = start + START_TIMEOUT_S
            wait_health(url, process, deadline)
            health = time.monotonic() - start
            context = browser.new_context(viewport={"width": 1440, "height": 1000})
            page = context.new_page()
            page.goto(url)
            while not page.evaluate(ANSWERED_JS):
                if time.monotonic() > deadline:
                    raise SystemExit("the first page did not answer in time")
                time.sleep(0.02)
            first_page = time.monotonic() - start
            context.close()
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
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
