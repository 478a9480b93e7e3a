"""LLM-inference capacity planner: the Streamlit frame and router.

Run with ``streamlit run app.py``. This file draws the shared scenario inputs in the sidebar
(bound to the URL, see ``ui/params.py``) and routes to one page under ``pages/``; pages are thin
views over ``planner`` (their contract is in ``ui/__init__.py``). Pages added by other parts of
the project (validate, simulate, diagnose) join the navigation when their file exists.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui import sidebar
from ui.state import ensure_navigation

PAGES_DIR = Path(__file__).resolve().parent / "pages"

#: (file, title, icon); the first is the default page. Optional pages are listed only if present.
CORE_PAGES = (
    ("plan.py", "Plan", ":material/memory:"),
    ("roofline.py", "Roofline", ":material/show_chart:"),
    ("latency.py", "Latency & throughput", ":material/speed:"),
    ("compare.py", "Compare", ":material/compare_arrows:"),
    ("export.py", "Export", ":material/download:"),
)
OPTIONAL_PAGES = (
    ("validate.py", "Validate", ":material/fact_check:"),
    ("simulate.py", "Simulate", ":material/timeline:"),
    ("diagnose.py", "Diagnose", ":material/troubleshoot:"),
)


def navigation_pages() -> list[st.Page]:
    pages = [
        st.Page(PAGES_DIR / name, title=title, icon=icon, default=(i == 0))
        for i, (name, title, icon) in enumerate(CORE_PAGES)
    ]
    pages += [
        st.Page(PAGES_DIR / name, title=title, icon=icon)
        for name, title, icon in OPTIONAL_PAGES
        if (PAGES_DIR / name).is_file()
    ]
    return pages


ensure_navigation()
st.set_page_config(page_title="LLM inference planner", page_icon="🧮", layout="wide")
sidebar.render()
st.navigation(navigation_pages()).run()
