"""The sidebar's "NCCL all-reduce only" toggle (Parallelism expander): it is the Scenario's
disable_custom_all_reduce (vLLM --disable-custom-all-reduce), it moves the Latency page's TP4 decode, and
it round-trips through the share link."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

from ui.sidebar import PARALLELISM_BOX

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def _run(query: dict[str, str]) -> AppTest:
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state[PARALLELISM_BOX] = True
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page("views/latency.py")
    at.run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    return at


def test_the_toggle_moves_the_latency_and_round_trips() -> None:
    base = {"model": "meta-llama/Llama-3.1-70B", "gpu": "h100-sxm", "tp": "4"}
    custom = _run(base)
    at = _run(base)
    at.toggle(key="nccl").set_value(True).run()
    assert not at.exception and not at.error
    query = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert query.get("nccl") == "1"
    assert [m.value for m in at.metric] != [m.value for m in custom.metric]  # NCCL prices every TP all-reduce
    again = _run(query)
    assert again.session_state["nccl"] is True
    assert [m.value for m in again.metric] == [m.value for m in at.metric]
