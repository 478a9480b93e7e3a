"""Numbers and labels for the page: units at the edge (GiB is 2**30 bytes), and prediction kinds.

Byte and second formatting comes from ``planner.units``; this module adds the few shapes the app
needs (rates, money, counts with a unit) and the words for "what kind of number is this".
"""

from __future__ import annotations

import streamlit as st

from planner.units import GiB, fmt_bytes, fmt_count, fmt_gib, fmt_seconds

__all__ = ["GiB", "fmt_bytes", "fmt_count", "fmt_gib", "fmt_seconds", "fmt_flops", "fmt_rate", "fmt_usd", "fmt_int",
           "KIND_HELP", "kind_badge", "kind_legend"]

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


def fmt_flops(flops: float | None) -> str:
    """'1.23 TFLOP', '456 MFLOP' (decimal SI prefixes, as FLOP counts are quoted)."""
    if flops is None:
        return "unknown"
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(flops) >= size:
            return f"{flops / size:,.2f} {unit}"
    return f"{flops:,.0f} FLOP"


def fmt_usd(dollars: float | None) -> str:
    """'$0.42'; 'no price' for None (the card has no price_per_hour_usd)."""
    if dollars is None:
        return "no price"
    return f"${dollars:,.3f}" if dollars < 1 else f"${dollars:,.2f}"


def fmt_int(value: float | None) -> str:
    """'131,072'; 'unknown' for None."""
    return "unknown" if value is None else f"{value:,.0f}"


def kind_badge(kind: str) -> None:
    """A small coloured badge naming what a number is: bound, estimate, calibrated or exact."""
    st.badge(kind, color=_KIND_COLOR.get(kind, "gray"), help=KIND_HELP.get(kind))


def kind_legend() -> None:
    """The legend of prediction kinds, for the sidebar."""
    lines = [f"**{kind}**: {text}" for kind, text in KIND_HELP.items()]
    st.caption("What the numbers are  \n" + "  \n".join(lines))
