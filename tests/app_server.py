"""`streamlit run app.py` headless on a free 127.0.0.1 port, offline: one harness for the browser test
(tests/test_browser.py) and the first-page benchmark (benchmarks/bench_app_start.py).

The server gets an empty Hugging Face home and an unreachable Hub endpoint, so nothing leaves the
machine; Chromium is Debian's, with the flags that keep it off the network.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def offline_env(home: Path, root: Path = ROOT) -> dict[str, str]:
    """This process's environment with the Hub unreachable and an empty cache in ``home``; ``root``'s code first."""
    env = {
        **os.environ,
        "HF_ENDPOINT": "http://127.0.0.1:9",
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(root),
    }
    env.pop("HF_TOKEN", None)
    return env


def wait_health(url: str, process: subprocess.Popen, deadline: float, poll_s: float = 0.02) -> None:
    """Return once ``url``/_stcore/health answers "ok"; RuntimeError if the server exits or the deadline
    (time.monotonic()) passes first."""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.read().strip() == b"ok":
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if process.poll() is not None:
            raise RuntimeError(f"streamlit on {url} exited with code {process.returncode}")
        time.sleep(poll_s)
    raise RuntimeError(f"streamlit did not answer {url}/_stcore/health in time")


@contextmanager
def app_server(
    home: Path, log: IO[str] | int = subprocess.DEVNULL, start_timeout_s: float = 60, root: Path = ROOT
) -> Iterator[str]:
    """A freshly started server of ``root``'s app.py (this checkout's by default, or another checkout's, or a
    folder with another app.py); yields its base URL once it is healthy."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1", "--server.headless", "true"]
    command += ["--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    stderr = subprocess.STDOUT if log is not subprocess.DEVNULL else subprocess.DEVNULL
    process = subprocess.Popen(command, cwd=root, env=offline_env(home, root), stdout=log, stderr=stderr)
    try:
        try:
            wait_health(url, process, time.monotonic() + start_timeout_s)
        except RuntimeError as err:
            where = getattr(log, "name", None)
            raise RuntimeError(f"{err}{f'; see {where}' if where else ''}") from None
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
