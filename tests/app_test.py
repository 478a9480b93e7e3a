"""The app under Streamlit's AppTest, as the page tests start it: a first run with fresh caches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT_S = 120


def fresh(
    page: str | None = None,
    query: dict[str, str] | None = None,
    state: dict[str, Any] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> AppTest:
    """A first run of the app (caches cleared) on ``page`` with link parameters ``query`` and session ``state``
    set before it; fails on any exception the run raised."""
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=timeout_s)
    for key, value in (state or {}).items():
        at.session_state[key] = value
    for key, value in (query or {}).items():
        at.query_params[key] = value
    if page:
        at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at
