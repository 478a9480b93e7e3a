"""Numbers and labels for the page: units at the edge (GiB is 2**30 bytes), and prediction kinds.

Byte and second formatting comes from ``planner.units``; this module adds the few shapes the app
needs (rates, money, counts with a unit) and the words for "what kind of number is this".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import streamlit as st

from planner.units import GiB, fmt_bytes, fmt_count, fmt_flop_count, fmt_gib, fmt_int, fmt_seconds

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "KIND_HELP",
    "GiB",
    "fmt_bytes",
    "fmt_change_pct",
    "fmt_count",
    "fmt_flop_count",
    "fmt_gib",
    "fmt_int",
    "fmt_kv_cache",
    "fmt_max_model_len",
    "fmt_measure",
    "fmt_rate",
    "fmt_seconds",
    "fmt_usd",
    "formatted_table",
    "kind_badge",
    "kind_legend",
    "kv_cache_metric",
]

KIND_HELP: dict[str, str] = {
    "bound": "datasheet roofline: peak FLOP/s and bandwidth, no overheads; no real run is faster",
    "estimate": "roofline derated by efficiency factors fitted to public measurements",
    "calibrated": "roofline derated by factors measured on this card (Validate page)",
    "exact": "follows from config.json and vLLM's allocation rules",
}
_KIND_COLOR = {"bound": "gray", "estimate": "blue", "calibrated": "green", "exact": "violet"}


def fmt_rate(tokens_per_s: float | None, unit: str = "tok/s") -> str:
    """'1,234 tok/s', '12.5 tok/s'; 'unknown' for None."""
    if tokens_per_s is None:
        return "unknown"
    digits = 0 if tokens_per_s >= 100 else 1
    return f"{tokens_per_s:,.{digits}f} {unit}".rstrip()


def fmt_usd(dollars: float | None) -> str:
    """'$0.42'; 'no price' for None (the card has no price_per_hour_usd)."""
    if dollars is None:
        return "no price"
    return f"${dollars:,.3f}" if dollars < 1 else f"${dollars:,.2f}"


def fmt_kv_cache(num_bytes: float | None) -> str:
    """KV-cache room per GPU: '12.4 GiB', or 'short by 62.3 GiB' when the rest of the memory already overflows
    the budget (never a negative size); 'unknown' for None."""
    if num_bytes is None:
        return "unknown"
    return f"short by {fmt_gib(-num_bytes)}" if num_bytes < 0 else fmt_gib(num_bytes)


def kv_cache_metric(container, label: str, num_bytes: float | None, help: str | None = None) -> None:  # noqa: A002 (Streamlit's name for the tooltip)
    """A KV-cache metric that never shows a negative size: the room, or 'none' with 'short by 62.3 GiB' in red."""
    if num_bytes is not None and num_bytes < 0:
        container.metric(label, "none", delta=fmt_kv_cache(num_bytes), delta_color="red", delta_arrow="off", help=help)
    else:
        container.metric(label, fmt_kv_cache(num_bytes), help=help)


def fmt_change_pct(percent: float | None) -> str:
    """'+12.3%', '-4.0%' (a signed difference); '-' for None."""
    return "-" if percent is None else f"{percent:+.1f}%"


def fmt_measure(value: float | None, unit: str) -> str:
    """A measured or predicted figure in its unit: seconds as ``fmt_seconds``, else '1,234.5 tok/s'; '-' for None."""
    if value is None:
        return "-"
    return fmt_seconds(value) if unit == "seconds" else f"{value:,.1f} {unit}"


def formatted_table(table: pd.DataFrame, formats: dict[str, Callable[[Any], str]] | None = None, **kwargs: Any) -> None:
    """``st.dataframe(ui.derived.readable(table, formats), **kwargs)``: the table's numbers kept, shown through
    their formatters.

    Streamlit writes a Styler's shown text into a table of strings one cell at a time: 4-10 ms a table on every
    rerun (bench_app_rerun: Compare's 4 x 11 summary, Simulate's candidates, the Roofline page's ~40 ops). So the
    element is drawn inside ``st.cache_data`` (``_drawn``): a rerun with the same table, the same formatters and
    the same arguments replays the element Streamlit built the first time, and only a new table is marshalled.
    The key is the pickle's digest (``ui.derived.digest``, ~0.1 ms) of the table, the formatters as what they are
    (``_formats_key``: each one's code and the values it reads from outside; functions do not pickle) and the
    arguments, not Streamlit's own hashing (~2 ms for a DataFrame, ~1.5 ms for a page's column_config, on every
    rerun). What does not pickle is drawn anew every run, as ``plotted`` does.

    With pandas 3's default pyarrow-backed strings each column write also copies the column (10-18 ms for the
    Latency page's 22 x 12 table, 6-10 ms with Python-backed strings, for the same text), so the app's process
    keeps pandas' strings in Python (``mode.string_storage``), set here before the first such table; nothing
    below the faces uses pandas.
    """
    import pandas as pd

    if pd.get_option("mode.string_storage") != "python":
        pd.set_option("mode.string_storage", "python")
    from ui.derived import digest, readable

    formats = formats or {}
    key = digest((table, _formats_key(formats), kwargs))  # Streamlit's own hashing costs ~30 times a pickle's digest
    if key is None:  # a table or an argument that does not pickle: drawn anew every run
        st.dataframe(readable(table, formats), **kwargs)
        return
    _drawn(key, table, formats, kwargs)


def _formats_key(formats: dict[str, Callable[[Any], str]]) -> tuple:
    """What decides the text a formatter dict shows: per column, the function's code (bytecode, constants, the
    names it reads) and the values it reads from outside: what it closes over, its defaults and the globals it
    names (a page's lambda reads the page's variables as globals: ``lambda v: f"{v * scale} {unit}"``). Two dicts
    with equal keys format alike, as long as the functions they call do not read a changed global themselves."""

    def what(fn: Callable[[Any], str]) -> tuple:
        code = getattr(fn, "__code__", None)
        if code is None:  # a builtin or a callable object: by identity (module-level, so it lives as long)
            return ("object", id(fn))
        cells = tuple(repr(c.cell_contents) for c in (getattr(fn, "__closure__", None) or ()))
        names = getattr(fn, "__globals__", {})
        read = tuple((n, repr(names[n])) for n in code.co_names if n in names)
        return (
            fn.__module__,
            fn.__qualname__,
            code.co_code,
            repr(code.co_consts),
            code.co_names,
            cells,
            read,
            repr(getattr(fn, "__defaults__", None)),
        )

    return tuple(sorted((name, what(fn)) for name, fn in formats.items()))


def plotted(builder: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """``st.plotly_chart(builder(*args), **kwargs)`` for a ``ui.charts`` builder: the element replayed from
    ``st.cache_data`` while the builder's inputs and the arguments are unchanged.

    On an unchanged rerun the figure would otherwise be made again from its kept copy and marshalled to JSON
    (2-5 ms a chart). The key is ``ui.charts.inputs_key``: the builder's module and name and its inputs' pickle;
    inputs that do not pickle, or a builder without a stable name (a lambda, a local function), draw the figure
    directly. What is cached is the element Streamlit built, not a figure object, so no session shares a mutable
    figure.
    """
    from ui import charts

    key = charts.inputs_key(builder, args)
    if key is None:
        st.plotly_chart(builder(*args), **kwargs)
        return
    _plotted(key, builder, args, **kwargs)


@st.cache_data(show_spinner=False, max_entries=64)
def _plotted(digest: bytes, _builder: Callable[..., Any], _args: tuple, **kwargs: Any) -> None:
    """``plotted``'s element, drawn once per distinct (builder and inputs, arguments) and then replayed."""
    st.plotly_chart(_builder(*_args), **kwargs)


@st.cache_data(show_spinner=False, max_entries=64)
def _drawn(
    key: bytes, _table: pd.DataFrame, _formats: dict[str, Callable[[Any], str]], _kwargs: dict[str, Any]
) -> None:
    """``formatted_table``'s element, drawn once per ``key`` (the digest of the table, its formatters' key and the
    arguments: ``ui.derived.digest``) and then replayed."""
    from ui.derived import readable

    st.dataframe(readable(_table, _formats), **_kwargs)


def kind_badge(kind: str) -> None:
    """A small coloured badge naming what a number is: bound, estimate, calibrated or exact."""
    st.badge(kind, color=_KIND_COLOR.get(kind, "gray"), help=KIND_HELP.get(kind))


def kind_legend() -> None:
    """The legend of prediction kinds, for the sidebar."""
    lines = [f"**{kind}**: {text}" for kind, text in KIND_HELP.items()]
    st.caption("What the numbers are  \n" + "  \n".join(lines))


def fmt_max_model_len(planned_tokens: int, asked_tokens: int | None) -> str:
    """The max_model_len a page plans with and where it comes from: the model's maximum (vLLM's default, what an
    empty sidebar field means) or the length typed in the sidebar."""
    source = "the model's maximum, vLLM's default" if asked_tokens is None else "set in the sidebar"
    return f"max_model_len {planned_tokens:,} ({source})"
