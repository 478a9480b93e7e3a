"""Plotly figures shared by the pages: the memory bar, concurrency vs context, the roofline, latency curves.

Builders take core results (or the tables of ``ui.derived`` / ``ui.sweeps``) and return a
``go.Figure``; they compute nothing but the points of a curve they draw (a roof is
``min(peak, bandwidth x intensity)`` sampled on a log grid).

Building a plotly figure costs 40-70 ms (plotly validates every property), more than the core
calls behind it, so builders are cached with ``st.cache_resource``: a rerun with unchanged
inputs hands Streamlit the same figure object. Callers must not modify a returned figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

import streamlit as st

from planner.estimate.memory import MemoryPlan
from planner.estimate.roofline import Roofline
from planner.hardware import HardwareProfile
from planner.units import GiB
from ui.derived import OperatingPoint, plottable_ops

TERM_COLORS = {
    "weights": "#4C78A8", "kv_cache": "#54A24B", "activations": "#F58518", "cuda_graphs": "#B279A2",
    "non_torch": "#9D755D", "free": "#D9D9D9",
}
KIND_STYLE = {"estimate": ("#4C78A8", "solid"), "calibrated": ("#54A24B", "solid"), "bound": ("#7F7F7F", "dot")}
STAGE_STYLE = {"prefill": ("#E45756", "circle"), "decode": ("#4C78A8", "diamond")}
_cached = st.cache_resource(
    hash_funcs={MemoryPlan: lambda m: m.model_dump_json(), Roofline: lambda r: r.model_dump_json(),
                HardwareProfile: lambda h: h.model_dump_json()},
    show_spinner=False, max_entries=64,
)
_LAYOUT = {"margin": {"l": 10, "r": 10, "t": 40, "b": 10}, "legend": {"orientation": "h", "y": -0.2}}


@_cached
def memory_bar(plan: MemoryPlan) -> go.Figure:
    """One GPU's memory as a stacked bar (exact and estimated terms), against the requested and total capacity."""
    fig = go.Figure()
    for term in plan.terms:
        fig.add_bar(
            y=["per GPU"], x=[term.bytes / GiB], orientation="h", name=f"{term.name} ({term.kind})",
            marker_color=TERM_COLORS.get(term.name), marker_pattern_shape="/" if term.kind == "estimate" else "",
            hovertemplate=f"{term.name}: %{{x:,.2f}} GiB ({term.kind})<extra></extra>",
        )
    requested = plan.requested_memory_bytes_per_gpu / GiB
    total = plan.total_memory_bytes_per_gpu / GiB
    fig.add_vline(x=requested, line_dash="dash", line_color="#333",
                  annotation_text=f"gpu_memory_utilization {plan.resolved.gpu_memory_utilization:g} → {requested:,.1f} GiB",
                  annotation_position="top left", annotation_font_size=11)
    fig.add_vline(x=total, line_color="#000", annotation_text=f"total {total:,.1f} GiB",
                  annotation_position="bottom left", annotation_font_size=11)
    fig.update_layout(barmode="stack", height=230, margin={"l": 10, "r": 10, "t": 30, "b": 10},
                      legend={"orientation": "h", "y": -0.35, "traceorder": "normal"})
    fig.update_xaxes(title=None, ticksuffix=" GiB", range=[0, total * 1.02])
    fig.update_yaxes(showticklabels=False)
    return fig


@_cached
def concurrency_vs_context(sweep: pd.DataFrame, current_len: int) -> go.Figure:
    """Requests of max_model_len tokens the KV cache holds at once, for each max_model_len (log-log)."""
    fig = go.Figure()
    fig.add_scatter(
        x=sweep["max_model_len"], y=sweep["max_concurrency"], mode="lines+markers", name="max concurrency (exact)",
        customdata=sweep[["kv_cache_tokens", "fits"]],
        hovertemplate="max_model_len %{x:,}<br>%{y:,.1f} requests at once<br>KV cache %{customdata[0]:,} tokens"
                      "<br>starts: %{customdata[1]}<extra></extra>",
    )
    fig.add_hline(y=1, line_dash="dot", line_color="#E45756", annotation_text="1 request: below it vLLM does not start",
                  annotation_position="top left", annotation_font_size=11)
    fig.add_vline(x=current_len, line_dash="dash", annotation_text=f"this plan: {current_len:,}")
    fig.update_xaxes(type="log", title="max_model_len (tokens)", dtick=np.log10(2), tickformat=",d")
    fig.update_yaxes(type="log", title="requests at once", dtick=1, tickformat=",~g")
    fig.update_layout(height=360, showlegend=False, **_LAYOUT)
    return fig


@_cached
def roofline_chart(hw: HardwareProfile, stages: tuple[Roofline, ...], table: pd.DataFrame) -> go.Figure:
    """Log-log roofline of the card: a compute roof per dtype, the HBM slope, the ridge point, and every op."""
    points = plottable_ops(table)
    lo = min([points["intensity_flop_per_byte"].min() / 3 if len(points) else 0.1, 0.1])
    hi = max([points["intensity_flop_per_byte"].max() * 3 if len(points) else 1e4, 1e4])
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    bandwidth = hw.hbm_bandwidth_bytes_per_s
    fig = go.Figure()
    by_peak: dict[float, list[str]] = {}
    for dtype, peak in hw.peak_flops_per_s.items():
        by_peak.setdefault(peak, []).append(dtype)
    for peak, dtypes in sorted(by_peak.items()):
        name = "/".join(dtypes)
        fig.add_scatter(x=x, y=np.minimum(peak, bandwidth * x), mode="lines", name=f"{name} roof {peak / 1e12:,.0f} TFLOP/s",
                        line={"width": 1.5}, hovertemplate=f"{name} roof<br>%{{x:,.2f}} FLOP/B → %{{y:.3s}}FLOP/s<extra></extra>")
    main = stages[0]
    fig.add_scatter(x=x[x <= main.ridge_point * 1.0001], y=bandwidth * x[x <= main.ridge_point * 1.0001], mode="lines",
                    name=f"HBM {bandwidth / 1e12:,.2f} TB/s", line={"color": "#000", "width": 2.5},
                    hovertemplate="bandwidth slope<br>%{x:,.2f} FLOP/B → %{y:.3s}FLOP/s<extra></extra>")
    fig.add_scatter(x=[main.ridge_point], y=[main.peak_flops_per_s], mode="markers+text", name="ridge point",
                    marker={"symbol": "x", "size": 12, "color": "#000"}, text=[f"ridge {main.ridge_point:,.0f} FLOP/B"],
                    textposition="top left", hovertemplate="ridge point %{x:,.1f} FLOP/B<extra></extra>")
    for stage in stages:
        color, symbol = STAGE_STYLE[stage.stage]
        ops = points[points["stage"] == stage.stage]
        fig.add_scatter(
            x=ops["intensity_flop_per_byte"], y=ops["attained_flop_per_s"], mode="markers",
            name=f"{stage.stage} ops (batch {stage.batch}, {stage.seq_len:,} tokens, {stage.kind})",
            marker={"color": color, "symbol": symbol, "size": 9, "line": {"width": 0.5, "color": "#fff"}},
            customdata=ops[["op", "flops", "bytes", "bound", "time_us", "count"]],
            hovertemplate="<b>%{customdata[0]}</b> x%{customdata[5]}<br>FLOPs %{customdata[1]:.3s}"
                          "<br>bytes %{customdata[2]:.3s}B<br>intensity %{x:,.2f} FLOP/B"
                          "<br>attained %{y:.3s}FLOP/s<br>bound: %{customdata[3]}<br>time %{customdata[4]:,.2f} µs"
                          "<extra>" + stage.stage + "</extra>",
        )
    floor = points["attained_flop_per_s"].min() / 3 if len(points) else bandwidth * lo
    top = max(hw.peak_flops_per_s.values()) * 2.5
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP per HBM byte)", dtick=1, tickformat=",~g")
    decades = range(int(np.floor(np.log10(floor))), int(np.ceil(np.log10(top))) + 1)
    fig.update_yaxes(type="log", title="attained FLOP/s (dense)", range=[np.log10(floor), np.log10(top)],
                     tickvals=[10.0**k for k in decades], ticktext=[_si(10.0**k) for k in decades])
    fig.update_layout(height=520, **_LAYOUT)
    return fig


def _si(value: float) -> str:
    """1e12 -> '1T', 1e14 -> '100T' (decimal prefixes, for FLOP/s tick labels)."""
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:g}{prefix}"
    return f"{value:g}"


_METRICS = (("ttft_s", "TTFT (s)"), ("tpot_s", "TPOT (s)"), ("tokens_per_s", "output tokens/s"))


@_cached
def latency_curves(sweep: pd.DataFrame, x: str, x_title: str, points: list[OperatingPoint] | None = None) -> go.Figure:
    """TTFT, TPOT and tokens/s against ``x`` (batch or input length), one line per kind (bound dotted)."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[title for _, title in _METRICS], horizontal_spacing=0.07)
    for col, (metric, title) in enumerate(_METRICS, start=1):
        for kind, rows in sweep.groupby("kind", sort=False):
            fits = rows["fits_in_kv_cache"].map(lambda v: "unknown" if v is None else ("fits" if v else "exceeds the KV cache"))
            fig.add_scatter(
                x=rows[x], y=rows[metric], mode="lines+markers", name=kind, legendgroup=kind, showlegend=col == 1,
                line={"color": KIND_STYLE[kind][0], "dash": KIND_STYLE[kind][1]}, marker={"size": 5},
                row=1, col=col, customdata=fits,
                hovertemplate=f"{x_title} %{{x:,}}<br>{title} %{{y:.4g}}<br>%{{customdata}}<extra>{kind}</extra>",
            )
        for point in points or []:
            fig.add_scatter(
                x=[point.row[x]], y=[point.row[metric]], mode="markers", row=1, col=col,
                marker={"symbol": "star", "size": 16, "color": "#E45756" if point.serving == "online" else "#F58518",
                        "line": {"width": 1, "color": "#fff"}},
                name=f"{point.label} ({point.serving})", legendgroup=point.label, showlegend=col == 1,
                hovertemplate=f"{point.label}, {point.serving}: {x_title} %{{x:,}}<extra></extra>",
            )
        fig.update_xaxes(type="log", dtick=np.log10(2), tickformat=",d", title=x_title, row=1, col=col)
        fig.update_yaxes(type="log", dtick=1, tickformat=",~g", row=1, col=col)
    fig.update_layout(height=400, margin={"l": 10, "r": 10, "t": 70, "b": 10},
                      legend={"orientation": "h", "y": 1.22, "x": 0})
    return fig
