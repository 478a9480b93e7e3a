"""``ui.format.formatted_table``: a table shown through its formatters, replayed on an unchanged rerun.

The element is drawn inside ``st.cache_data``; Streamlit cannot hash functions, so the formatters enter the key
by what they are (``_formats_key``). These tests check the two ways that could go wrong: a rerun that should
replay draws something else, and two formatters that show different text share one cached element.
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from ui.format import _formats_key, fmt_seconds

SCRIPT = """
import pandas as pd
import streamlit as st
from ui.format import formatted_table

unit = st.session_state.get("unit", "ms")
scale = {"ms": 1e3, "us": 1e6}[unit]
table = pd.DataFrame({"op": ["a", "b"], "t": [0.0012, 0.5]})
formatted_table(table, {"t": lambda s: f"{s * scale:.1f} {unit}"}, hide_index=True, key="t")
"""


def _shown(at: AppTest) -> bytes:
    """The bytes of the text the grid shows (the Styler's display values as Streamlit sent them)."""
    (frame,) = at.dataframe
    return frame.proto.arrow_data.styler.display_values


def test_an_unchanged_rerun_replays_the_same_element_and_a_new_formatter_draws_anew():
    at = AppTest.from_string(SCRIPT, default_timeout=30).run()
    assert not at.exception
    first = _shown(at)
    assert b"1.2 ms" in first and b"500.0 ms" in first
    assert _shown(at.run()) == first  # replayed from the cache: the same text
    at.session_state["unit"] = "us"  # same code, another value closed over: another key
    shown = _shown(at.run())
    assert b"1200.0 us" in shown and b"1.2 ms" not in shown
    at.session_state["unit"] = "ms"
    assert _shown(at.run()) == first


def test_the_formatters_key_follows_their_code_and_closed_over_values():
    def make(unit: str):
        return lambda s: f"{s} {unit}"

    assert _formats_key({"t": make("ms")}) == _formats_key({"t": make("ms")})  # rebuilt each rerun: one key
    assert _formats_key({"t": make("ms")}) != _formats_key({"t": make("us")})
    assert _formats_key({"t": fmt_seconds}) != _formats_key({"t": lambda s: f"{s} s"})
    assert _formats_key({"a": fmt_seconds, "b": str}) == _formats_key({"b": str, "a": fmt_seconds})
    assert _formats_key({"t": fmt_seconds}) != _formats_key({"u": fmt_seconds})  # the column matters too


def test_the_table_is_part_of_the_key():
    at = AppTest.from_string(
        SCRIPT.replace("[0.0012, 0.5]", 'st.session_state.get("values", [0.0012, 0.5])'), default_timeout=30
    ).run()
    first = _shown(at)
    at.session_state["values"] = [0.002, 0.5]
    assert b"2.0 ms" in _shown(at.run()) and _shown(at) != first


def test_the_arguments_are_part_of_the_key():
    """The digest covers the keyword arguments too (a new column label is a new element, not the old one replayed)."""
    script = SCRIPT.replace(
        'hide_index=True, key="t")',
        'hide_index=True, key="t", '
        'column_config={"t": st.column_config.Column(st.session_state.get("label", "time"))})',
    )
    at = AppTest.from_string(script, default_timeout=30).run()
    assert not at.exception
    (frame,) = at.dataframe
    assert "time" in frame.proto.columns and "seconds" not in frame.proto.columns
    at.session_state["label"] = "seconds"
    (frame,) = at.run().dataframe
    assert "seconds" in frame.proto.columns and "time" not in frame.proto.columns


def test_a_table_that_does_not_pickle_is_drawn_every_run():
    """A cell holding a lambda has no digest: the table is drawn directly, on every run (the lambda is a new object
    each run, so its text differs; the formatted column does not)."""
    script = """
import pandas as pd
from ui.format import formatted_table

formatted_table(pd.DataFrame({"op": ["a"], "f": [lambda: 1]}), {"op": str.upper}, hide_index=True, key="t")
"""
    at = AppTest.from_string(script, default_timeout=30).run()
    assert not at.exception
    assert _shown_column(at, 0) == ["A"] and "<lambda>" in _shown_column(at, 1)[0]
    at.run()
    assert not at.exception and _shown_column(at, 0) == ["A"]


def _shown_column(at: AppTest, index: int) -> list[str]:
    """The text the grid shows in one column (the Styler's display values, an Arrow table)."""
    import pyarrow as pa

    shown = pa.ipc.open_stream(_shown(at)).read_all()
    return [str(v) for v in shown.column(index).to_pylist()]
