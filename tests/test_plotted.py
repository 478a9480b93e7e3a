"""``ui.format.plotted``: a ``ui.charts`` figure drawn as an element that an unchanged rerun replays from
``st.cache_data`` instead of building and marshalling the figure again; new inputs draw a new element, in the
container the call sits in, and inputs that do not pickle are drawn directly every run."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from ui.format import _plotted

SCRIPT = """
import streamlit as st
import plotly.graph_objects as go
from ui.format import plotted

calls = st.session_state.setdefault("calls", [])

def bars(values, title, label=str):
    calls.append(title)
    return go.Figure(go.Bar(y=list(values), text=[label(v) for v in values]), layout={"title": {"text": title}})

values = st.session_state.get("values", (1, 2, 3))
left, right = st.columns(2)
with right:
    plotted(bars, values, "load", key="chart")
if st.session_state.get("direct"):
    plotted(bars, (9,), "unpicklable", lambda v: f"{v} s", key="unpicklable")  # a lambda does not pickle
    plotted(lambda: bars((8,), "lambda"), key="lambda")  # no stable name: two lambdas must not share an element
"""


@pytest.fixture(autouse=True)
def empty_cache():
    """Each test starts from an empty element cache (it is the process's, as a server's is)."""
    _plotted.clear()


def _figures(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def test_an_unchanged_rerun_replays_the_element_and_new_inputs_draw_anew():
    at = AppTest.from_string(SCRIPT, default_timeout=30).run()
    assert not at.exception
    (first,) = _figures(at)
    assert first["data"][0]["y"] == [1, 2, 3] and first["layout"]["title"]["text"] == "load"
    assert at.session_state["calls"] == ["load"]
    at.run()
    assert _figures(at) == [first] and at.session_state["calls"] == ["load"]  # replayed: the builder did not run
    at.session_state["values"] = (4, 5)
    at.run()
    (changed,) = _figures(at)
    assert changed["data"][0]["y"] == [4, 5] and at.session_state["calls"] == ["load", "load"]


def test_the_element_lands_in_the_container_of_the_call():
    at = AppTest.from_string(SCRIPT, default_timeout=30).run()
    at.run()  # the replayed element too
    right = at.columns[1]
    assert len(right.get("plotly_chart")) == 1 and not at.columns[0].get("plotly_chart")


def test_inputs_that_do_not_pickle_and_lambdas_are_drawn_every_run():
    at = AppTest.from_string(SCRIPT, default_timeout=30)
    at.session_state["direct"] = True
    at.run()
    at.run()
    calls = at.session_state["calls"]
    assert calls.count("unpicklable") == 2 and calls.count("lambda") == 2 and calls.count("load") == 1
    assert [f["layout"]["title"]["text"] for f in _figures(at)] == ["load", "unpicklable", "lambda"]
