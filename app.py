"""LLM-inference capacity planner: the Streamlit frame and router.

Run with ``streamlit run app.py``. This file draws the shared scenario inputs in the sidebar
(bound to the URL, see ``ui/params.py``) and routes to one view under ``views/`` with
``st.navigation``. Views are thin pages over ``planner``; all eight follow the page contract in
``ui/__init__.py``. The folder is not named "pages": Streamlit reserves that name for its
older multipage mode, which would run a page without this frame.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui import sidebar

VIEWS_DIR = Path(__file__).resolve().parent / "views"

#: (file under views/, title, icon), in navigation order; the first is the default page.
PAGES = (
    ("plan.py", "Plan", ":material/memory:"),
    ("roofline.py", "Roofline", ":material/show_chart:"),
    ("latency.py", "Latency & throughput", ":material/speed:"),
    ("compare.py", "Compare", ":material/compare_arrows:"),
    ("export.py", "Export", ":material/download:"),
    ("validate.py", "Validate", ":material/fact_check:"),
    ("simulate.py", "Simulate", ":material/timeline:"),
    ("diagnose.py", "Diagnose", ":material/troubleshoot:"),
)


def navigation_pages() -> list[st.Page]:
    """One ``st.Page`` per view; the URL path of each is its file name (``/roofline``)."""
    return [
        st.Page(VIEWS_DIR / name, title=title, icon=icon, default=(i == 0))
        for i, (name, title, icon) in enumerate(PAGES)
    ]


# an emoji icon, served by this server (a Material icon would make the browser fetch it from fonts.gstatic.com)
st.set_page_config(page_title="LLM inference planner", page_icon="🧮", layout="wide")
sidebar.render()
st.navigation(navigation_pages()).run()
