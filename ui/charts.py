"""Plotly figures of every page: the memory bar, concurrency vs context, the roofline, latency curves,
serving over time and vs rate, the SLO search's Pareto chart, and predicted vs measured seconds.

Builders take core results (or the tables of ``ui.derived`` / ``ui.sweeps`` / ``ui.validate``) and
return a new ``go.Figure``; they compute nothing but the points of a curve they draw (a roof is
``min(peak, bandwidth x intensity)`` sampled on a log grid). Nothing here imports Streamlit.

No figure is shared: a figure is a mutable object, and a cached one would be shared by every
session. What is kept is each builder's output as plain data (``Figure.to_dict()``), validated by
plotly once, keyed on the builder's inputs, and every call gets a new figure made from a copy of
it (:func:`_memoized`). Building a figure through plotly's validators costs 10-90 ms; a copy of a
known-good one about 1 ms, which is what an unchanged rerun of a page costs per chart.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from planner.estimate.memory import terms_outside  # what the budget does not hold (ui.derived imports the module too)
from planner.units import GiB
from ui.derived import PLACEMENT_COLUMNS, digest, placement_cells, placement_rows_per_node, plottable_ops

if TYPE_CHECKING:  # types only: the first page after a server start does not import the simulator
    import pandas as pd

    from planner.estimate.memory import MemoryPlan
    from planner.estimate.placement import Placement
    from planner.estimate.roofline import Roofline
    from planner.hardware import HardwareProfile
    from planner.serve.replica import ServingResult
    from planner.serve.slo import Probe, SLOPlan
    from ui.derived import OperatingPoint
    from ui.sweeps import ContextPoint
    from ui.validate import ChartPoints

TERM_COLORS = {
    "weights": "#4C78A8",
    "kv_cache": "#54A24B",
    "activations": "#F58518",
    "cuda_graphs": "#B279A2",
    "non_torch": "#9D755D",
    "free": "#D9D9D9",
    "lora": "#EECA3B",
}
KIND_STYLE = {"estimate": ("#4C78A8", "solid"), "calibrated": ("#54A24B", "solid"), "bound": ("#7F7F7F", "dot")}
PIPELINE_STAGE_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#E45756", "#72B7B2", "#9D755D", "#EECA3B")
"""Fill of a placement cell by pipeline stage (cycled past eight stages)."""
LABELLED_CELLS = 64
"""Up to this many GPUs a placement cell carries its label; beyond, the cells are too small and only hover says."""
STAGE_STYLE = {"prefill": ("#E45756", "circle"), "decode": ("#4C78A8", "diamond")}
MEMO_ENTRIES = 128
"""Figures kept as plain data, least recently used dropped first (a few to 100 kB each)."""
_MEMO: OrderedDict[bytes, dict] = OrderedDict()
_MEMO_LOCK = threading.Lock()  # Streamlit runs each session's script in its own thread


def inputs_key(builder: Callable[..., go.Figure], args: tuple, kwargs: dict | None = None) -> bytes | None:
    """A digest of a builder (by its module and name) and its inputs (``ui.derived.digest``): equal for equal
    inputs, None if they do not pickle or the builder has no stable name (a lambda or a local function). The kept
    figures (``_memoized``) and the elements ``ui.format.plotted`` replays are keyed on it."""
    name = f"{builder.__module__}.{builder.__qualname__}"
    return None if "<" in name else digest((name, args, kwargs or {}))


def _figure_from(spec: dict) -> go.Figure:
    """A new figure from a figure's ``to_dict()``, without validating it again (it was, when built).

    ``go.Figure`` deep-copies what it is given, so the kept ``spec`` never changes with the figure.
    """
    try:
        return go.Figure(spec, _validate=False)
    except TypeError:  # a plotly without the private switch: validate again (slower, same figure)
        return go.Figure(spec)


def _memoized(builder: Callable[..., go.Figure]) -> Callable[..., go.Figure]:
    """``builder`` that builds (and validates) each distinct figure once and returns a new figure per call.

    Two calls never share an object: the kept value is a plain dict, copied into each figure returned.
    """

    @functools.wraps(builder)
    def build(*args, **kwargs) -> go.Figure:
        key = inputs_key(builder, args, kwargs)
        with _MEMO_LOCK:
            spec = _MEMO.get(key) if key is not None else None
            if spec is not None:
                _MEMO.move_to_end(key)
        if spec is None:
            spec = builder(*args, **kwargs).to_dict()
            if key is not None:
                with _MEMO_LOCK:
                    _MEMO[key] = spec
                    while len(_MEMO) > MEMO_ENTRIES:
                        _MEMO.popitem(last=False)
        return _figure_from(spec)

    return build


_LAYOUT = {"margin": {"l": 10, "r": 10, "t": 40, "b": 10}, "legend": {"orientation": "h", "y": -0.2}}


@_memoized
def memory_bar(plan: MemoryPlan) -> go.Figure:
    """One GPU's memory as a stacked bar (exact and estimated terms), against the requested and total capacity."""
    fig = go.Figure()
    for term in plan.terms:
        fig.add_bar(
            y=["per GPU"],
            x=[term.bytes / GiB],
            orientation="h",
            name=f"{term.name} ({term.kind})",
            marker_color=TERM_COLORS.get(term.name),
            marker_pattern_shape="/" if term.kind == "estimate" else "",
            hovertemplate=f"{term.name}: %{{x:,.2f}} GiB ({term.kind})<extra></extra>",
        )
    requested = plan.requested_memory_bytes_per_gpu / GiB
    total = plan.total_memory_bytes_per_gpu / GiB
    outside = terms_outside(plan.resolved)  # SGLang's peaks, or the graph pool of vLLM through 0.20: not in the budget
    used = sum(term.bytes for term in plan.terms if term.name != "free" and term.name not in outside) / GiB
    beyond = sum(term.bytes for term in plan.terms if term.name in outside) / GiB
    # does not start: how far past the budget the terms reach, or past the card the terms outside it
    over = [(requested, used, "over the budget")] if used > requested else []
    if outside and requested + beyond > total:
        over.append((total, requested + beyond, "outside the fraction, past the card"))
    for x0, x1, words in over:
        fig.add_vrect(
            x0=x0,
            x1=x1,
            fillcolor="#E45756",
            opacity=0.25,
            line_width=0,
            layer="below",
            annotation_text=f"{words} by {x1 - x0:,.1f} GiB",
            annotation_position="top right",
            annotation_font_size=12,
            annotation_font_color="#B22222",
        )
    # the engine's own name of the fraction: vLLM's gpu_memory_utilization, SGLang's mem_fraction_static (its static
    # pool of weights + KV), TensorRT-LLM's kv_cache_free_gpu_memory_fraction (its KV share of the free memory)
    res = plan.resolved
    fraction_name = res.fraction_flag.lstrip("-").replace("-", "_")
    if res.memory_rule == "free_fraction":
        label = f"{fraction_name} {res.gpu_memory_utilization:g} of the free memory → {requested:,.1f} GiB in use"
    else:
        label = f"{fraction_name} {res.gpu_memory_utilization:g} → {requested:,.1f} GiB"
    fig.add_vline(
        x=requested,
        line_dash="dash",
        line_color="#333",
        annotation_text=label,
        annotation_position="top left",
        annotation_yshift=12,
        annotation_font_size=11,
    )
    fig.add_vline(
        x=total,
        line_color="#000",
        annotation_text=f"total {total:,.1f} GiB",
        annotation_position="bottom right",
        annotation_yshift=-12,
        annotation_font_size=11,
    )
    fig.update_layout(
        barmode="stack",
        height=250,
        margin={"l": 10, "r": 10, "t": 45, "b": 30},
        legend={"orientation": "h", "y": -0.45, "traceorder": "normal"},
    )
    fig.update_xaxes(title=None, ticksuffix=" GiB", range=[0, max(total, used) * 1.1])  # room for the labels
    fig.update_yaxes(showticklabels=False)
    return fig


@_memoized
def placement_map(p: Placement) -> go.Figure:
    """One cell per GPU of the replica, grouped by node (a row of up to eight per node, the y axis names it),
    colored by pipeline stage and labelled with what the rank holds (``ui.derived.placement_cells``)."""
    cells = placement_cells(p)
    rows = p.num_nodes * placement_rows_per_node(p)
    columns = min(p.gpus_per_pod, PLACEMENT_COLUMNS)
    fig = go.Figure()
    gap = 0.05
    for cell in cells:
        fig.add_shape(
            type="rect",
            x0=cell.column + gap,
            x1=cell.column + 1 - gap,
            y0=cell.row + gap,
            y1=cell.row + 1 - gap,
            fillcolor=PIPELINE_STAGE_COLORS[cell.stage % len(PIPELINE_STAGE_COLORS)],
            line={"width": 0},
            layer="below",
            name=f"GPU {cell.rank}",
        )
    per_node = placement_rows_per_node(p)
    for node in range(1, p.num_nodes):  # a rule between nodes
        fig.add_hline(y=node * per_node, line_color="#333", line_dash="dot", line_width=1)
    labelled = len(cells) <= LABELLED_CELLS
    for stage in p.stages:
        mine = [c for c in cells if c.stage == stage.stage]
        fig.add_scatter(
            x=[c.column + 0.5 for c in mine],
            y=[c.row + 0.5 for c in mine],
            mode="text+markers" if labelled else "markers",
            text=[c.label for c in mine] if labelled else None,
            textfont={"color": "white", "size": 11},
            marker={"size": 1, "opacity": 0},  # the hover target; the cell itself is the shape
            hovertext=[c.hover for c in mine],
            hoverinfo="text",
            customdata=[c.rank for c in mine],
            name=f"stage {stage.stage}: layers {stage.layer_start}-{stage.layer_stop - 1}",
            showlegend=False,
        )
        color = PIPELINE_STAGE_COLORS[stage.stage % len(PIPELINE_STAGE_COLORS)]
        if p.pp > 1:  # the legend entry: a colored square (the cells' trace draws no marker)
            fig.add_scatter(
                x=[None],
                y=[None],
                mode="markers",
                marker={"symbol": "square", "size": 12, "color": color},
                name=f"stage {stage.stage}: layers {stage.layer_start}-{stage.layer_stop - 1}",
            )
    fig.update_xaxes(visible=False, range=[0, columns], fixedrange=True)
    fig.update_yaxes(
        range=[rows, 0],
        tickvals=[(node + 0.5) * per_node for node in range(p.num_nodes)],
        ticktext=[f"node {node}" for node in range(p.num_nodes)],
        showgrid=False,
        zeroline=False,
        fixedrange=True,
    )
    fig.update_layout(
        height=60 + 88 * rows + (30 if p.pp > 1 else 0),
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
        legend={"orientation": "h", "y": -0.02, "yanchor": "top"},
        plot_bgcolor="white",
    )
    return fig


@_memoized
def concurrency_vs_context(sweep: Sequence[ContextPoint], current_len: int, engine: str = "vLLM") -> go.Figure:
    """Requests of max_model_len tokens the KV cache holds at once, for each max_model_len (log-log); ``engine``
    names the engine that would not start below one request."""
    fig = go.Figure()
    fig.add_scatter(
        x=[point.max_model_len for point in sweep],
        y=[point.max_concurrency for point in sweep],
        mode="lines+markers",
        name="max concurrency (exact)",
        customdata=[[point.kv_cache_tokens, point.fits] for point in sweep],
        hovertemplate="max_model_len %{x:,}<br>%{y:,.1f} requests at once<br>KV cache %{customdata[0]:,} tokens"
        "<br>starts: %{customdata[1]}<extra></extra>",
    )
    fig.add_hline(
        y=1,
        line_dash="dot",
        line_color="#E45756",
        annotation_text=f"1 request: below it {engine} does not start",
        annotation_position="top left",
        annotation_font_size=11,
        annotation_y=0,
    )  # log axis: log10(1)
    fig.add_vline(
        x=current_len,
        line_dash="dash",
        annotation_text=f"this plan: {current_len:,}",
        annotation_x=np.log10(current_len),
    )  # log axis: an annotation's x is the exponent
    fig.update_xaxes(type="log", title="max_model_len (tokens)", dtick=np.log10(2), tickformat=",d")
    fig.update_yaxes(type="log", title="requests at once", dtick=1, tickformat=",~g")
    fig.update_layout(height=360, showlegend=False, **_LAYOUT)
    return fig


@_memoized
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
        fig.add_scatter(
            x=x,
            y=np.minimum(peak, bandwidth * x),
            mode="lines",
            name=f"{name} roof {peak / 1e12:,.0f} TFLOP/s",
            line={"width": 1.5},
            hovertemplate=f"{name} roof<br>%{{x:,.2f}} FLOP/B → %{{y:.3s}}FLOP/s<extra></extra>",
        )
    main = stages[0]
    fig.add_scatter(
        x=x[x <= main.ridge_point * 1.0001],
        y=bandwidth * x[x <= main.ridge_point * 1.0001],
        mode="lines",
        name=f"HBM {bandwidth / 1e12:,.2f} TB/s",
        line={"color": "#000", "width": 2.5},
        hovertemplate="bandwidth slope<br>%{x:,.2f} FLOP/B → %{y:.3s}FLOP/s<extra></extra>",
    )
    fig.add_scatter(
        x=[main.ridge_point],
        y=[main.peak_flops_per_s],
        mode="markers+text",
        name="ridge point",
        marker={"symbol": "x", "size": 12, "color": "#000"},
        text=[f"ridge {main.ridge_point:,.0f} FLOP/B"],
        textposition="top left",
        hovertemplate="ridge point %{x:,.1f} FLOP/B<extra></extra>",
    )
    for stage in stages:
        color, symbol = STAGE_STYLE[stage.stage]
        ops = points[points["stage"] == stage.stage]
        fig.add_scatter(
            x=ops["intensity_flop_per_byte"],
            y=ops["attained_flop_per_s"],
            mode="markers",
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
    fig.update_yaxes(
        type="log",
        title="attained FLOP/s (dense)",
        range=[np.log10(floor), np.log10(top)],
        tickvals=[10.0**k for k in decades],
        ticktext=[_si(10.0**k) for k in decades],
    )
    fig.update_layout(height=520, **_LAYOUT)
    return fig


def _si(value: float) -> str:
    """1e12 -> '1T', 1e14 -> '100T' (decimal prefixes, for FLOP/s tick labels)."""
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:g}{prefix}"
    return f"{value:g}"


_METRICS = (("ttft_s", "TTFT (ms)", 1e3), ("tpot_s", "TPOT (ms)", 1e3), ("tokens_per_s", "output tokens/s", 1.0))
"""(sweep column, panel title, scale to the axis unit): seconds are drawn in milliseconds."""
EXCEEDS_COLOR = "#BBBBBB"


def _fits_word(value: bool | None) -> str:
    return "unknown" if value is None else ("fits" if value else "exceeds the KV cache")


def log_ticks(lo: float, hi: float, most: int = 8) -> list[float] | None:
    """Tick values for a log axis over [lo, hi]: 1-2-5 per decade, or only the decades when that would
    crowd the axis (more than ``most`` labels); None (plotly's own) inside one 1-2-5 step."""
    if not (0 < lo <= hi) or not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    for mantissas in ((1, 2, 5), (1,)):
        ticks = [m * 10.0**k for k in decades for m in mantissas if lo / 1.2 <= m * 10.0**k <= hi * 1.2]
        if len(ticks) <= most:
            return ticks if len(ticks) >= 2 else None
    return ticks


@_memoized
def latency_curves(sweep: pd.DataFrame, x: str, x_title: str, points: list[OperatingPoint] | None = None) -> go.Figure:
    """TTFT, TPOT (ms) and tokens/s against ``x`` (batch or input length), one line per kind (bound dotted);
    points whose batch exceeds the KV cache are drawn apart as grey crosses, off the line."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=[title for _, title, _ in _METRICS], horizontal_spacing=0.08)
    shown_exceeds = False
    for col, (metric, title, scale) in enumerate(_METRICS, start=1):
        for kind, rows in sweep.groupby("kind", sort=False):
            over = rows["fits_in_kv_cache"].map(lambda v: v is False).astype(bool)
            ok = rows[~over]
            fig.add_scatter(
                x=ok[x],
                y=ok[metric] * scale,
                mode="lines+markers",
                name=kind,
                legendgroup=kind,
                showlegend=col == 1,
                line={"color": KIND_STYLE[kind][0], "dash": KIND_STYLE[kind][1]},
                marker={"size": 5},
                row=1,
                col=col,
                customdata=ok["fits_in_kv_cache"].map(_fits_word),
                hovertemplate=f"{x_title} %{{x:,}}<br>{title} %{{y:,.4g}}<br>%{{customdata}}<extra>{kind}</extra>",
            )
            if over.any():
                bad = rows[over]
                fig.add_scatter(
                    x=bad[x],
                    y=bad[metric] * scale,
                    mode="markers",
                    name="exceeds the KV cache (queued)",
                    legendgroup="exceeds",
                    showlegend=not shown_exceeds,
                    row=1,
                    col=col,
                    marker={"symbol": "x", "size": 8, "color": EXCEEDS_COLOR},
                    hovertemplate=f"{x_title} %{{x:,}}<br>{title} %{{y:,.4g}}<br>exceeds the KV cache: the engine "
                    f"would queue or preempt<extra>{kind}</extra>",
                )
                shown_exceeds = True
        for point in points or []:
            fig.add_scatter(
                x=[point.row[x]],
                y=[point.row[metric] * scale],
                mode="markers",
                row=1,
                col=col,
                marker={
                    "symbol": "star",
                    "size": 16,
                    "color": "#E45756" if point.serving == "online" else "#F58518",
                    "line": {"width": 1, "color": "#fff"},
                },
                name=f"{point.label} ({point.serving})",
                legendgroup=point.label,
                showlegend=col == 1,
                hovertemplate=f"{point.label}, {point.serving}: {x_title} %{{x:,}}<extra></extra>",
            )
        fig.update_xaxes(type="log", dtick=np.log10(2), tickformat=",d", title=x_title, row=1, col=col)
        values = (sweep[metric] * scale).to_numpy(dtype=float)
        values = values[np.isfinite(values) & (values > 0)]
        ticks = log_ticks(float(values.min()), float(values.max())) if len(values) else None
        fig.update_yaxes(type="log", tickformat=",~g", tickvals=ticks, row=1, col=col)
    fig.update_layout(
        height=400, margin={"l": 10, "r": 10, "t": 70, "b": 10}, legend={"orientation": "h", "y": 1.22, "x": 0}
    )
    return fig


@_memoized
def speculative_speedup(sweep: pd.DataFrame, break_even_batch: int | None) -> go.Figure:
    """Speculative decoding's speed-up over plain decoding (the core's ``speedup``) against the batch, one line per
    kind (bound dotted), plain decoding's 1x, and the break-even batch with the batches past it shaded."""
    fig = go.Figure()
    for kind, rows in sweep.groupby("kind", sort=False):
        fig.add_scatter(
            x=rows["batch"],
            y=rows["speedup"],
            mode="lines+markers",
            name=kind,
            line={"color": KIND_STYLE[kind][0], "dash": KIND_STYLE[kind][1]},
            marker={"size": 6},
            hovertemplate=f"batch %{{x:,}}<br>speed-up %{{y:.2f}}x<extra>{kind}</extra>",
        )
    fig.add_hline(
        y=1,
        line_dash="dash",
        line_color="#333",
        annotation_text="plain decoding (1x)",
        annotation_position="bottom left",
        annotation_font_size=11,
    )
    if break_even_batch is not None:
        fig.add_vrect(
            x0=break_even_batch,
            x1=max(int(sweep["batch"].max()), break_even_batch),
            fillcolor="#E45756",
            opacity=0.12,
            line_width=0,
            layer="below",
        )
        fig.add_vline(
            x=break_even_batch,
            line_dash="dash",
            line_color="#E45756",
            annotation_text=f"break-even: batch {break_even_batch:,}",
            annotation_x=np.log10(break_even_batch),
            annotation_position="top right",
            annotation_font_color="#B22222",
            annotation_font_size=12,
        )  # log axis: an annotation's x is the exponent
    fig.update_xaxes(type="log", dtick=np.log10(2), tickformat=",d", title="batch size")
    fig.update_yaxes(title="speed-up over plain decoding", ticksuffix="x", tickformat=".2f", rangemode="tozero")
    fig.update_layout(height=360, **_LAYOUT)
    return fig


# ------------------------------------------------------------------------------ serving (Simulate page)

STATS = ("p50", "p90", "p99")
STAT_STYLE = {"p50": "dot", "p90": "dash", "p99": "solid"}
_MARGIN = {"l": 10, "r": 10, "t": 30, "b": 10}


@_memoized
def latency_vs_rate(probes: tuple[Probe, ...], metric: str, title: str, target: float | None, rate: float) -> go.Figure:
    """P50/P90/P99 of ``metric`` (a ``Probe`` field of LatencyStats) against the request rate, with the SLO
    and your rate.

    Built in one ``go.Figure(data, layout)`` call (the lines as plain shapes): ``add_hline`` and
    ``add_vline`` would validate the layout again for each of them.
    """
    x = [p.request_rate_per_s for p in probes]
    traces = []
    for stat in STATS:
        y = [None if getattr(p, metric) is None else getattr(getattr(p, metric), stat) * 1e3 for p in probes]
        traces.append(
            {
                "type": "scatter",
                "x": x,
                "y": y,
                "mode": "lines+markers",
                "name": stat.upper(),
                "line": {"dash": STAT_STYLE[stat]},
                "hovertemplate": f"{stat.upper()} %{{y:,.4g}} ms at %{{x:.2f}} req/s<extra></extra>",
            }
        )
    shapes, notes = [], []
    if target is not None:  # what add_hline(y, annotation_position="top left") draws
        shapes.append(
            {
                "type": "line",
                "xref": "x domain",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": target * 1e3,
                "y1": target * 1e3,
                "line": {"color": "#E45756", "dash": "dash"},
            }
        )
        notes.append(
            {
                "text": "SLO",
                "showarrow": False,
                "xref": "x domain",
                "x": 0,
                "xanchor": "left",
                "yref": "y",
                "y": target * 1e3,
                "yanchor": "bottom",
            }
        )
    shapes.append(
        {
            "type": "line",
            "xref": "x",
            "x0": rate,
            "x1": rate,
            "yref": "y domain",
            "y0": 0,
            "y1": 1,
            "line": {"color": "#7F7F7F", "dash": "dot"},
        }
    )  # add_vline(x, annotation_position="top right")
    notes.append(
        {
            "text": "your rate",
            "showarrow": False,
            "xref": "x",
            "x": rate,
            "xanchor": "left",
            "yref": "y domain",
            "y": 1,
            "yanchor": "top",
        }
    )
    layout = {
        "title": {"text": title},
        "xaxis": {"title": {"text": "request rate per replica (req/s)"}},
        "yaxis": {"title": {"text": "milliseconds"}, "tickformat": ",~g"},
        "shapes": shapes,
        "annotations": notes,
        "margin": {**_MARGIN, "t": 40},
        "legend": {"orientation": "h", "y": -0.25},
    }
    return go.Figure(data=traces, layout=layout)


@_memoized
def serving_timeline(result: ServingResult) -> go.Figure:
    """Running and waiting requests (left axis) and the share of KV blocks in use (right axis) over simulated time.

    The two y axes are laid out as ``make_subplots(specs=[[{"secondary_y": True}]])`` lays them out,
    in one ``go.Figure`` call (make_subplots and three add_scatter calls cost 3x as much).
    The points go in as numpy arrays: plotly validates and sends them as typed arrays, where tuples of
    2,000 numbers cost some 25 ms to validate and 35 ms to encode on every rerun.
    """
    line = result.timeline
    seconds = np.asarray(line.time_seconds)  # arrays: up to 2,000 points a line, sent as typed arrays (10x faster)
    traces = [
        {
            "type": "scatter",
            "x": seconds,
            "y": np.asarray(line.running_requests),
            "name": "running",
            "line": {"color": "#4C78A8"},
        },
        {
            "type": "scatter",
            "x": seconds,
            "y": np.asarray(line.waiting_requests),
            "name": "waiting",
            "line": {"color": "#F58518"},
        },
        {
            "type": "scatter",
            "x": seconds,
            "y": np.asarray(line.kv_utilization),
            "name": "KV cache in use",
            "line": {"color": "#54A24B", "dash": "dot"},
            "xaxis": "x",
            "yaxis": "y2",
        },
    ]
    layout = {
        "xaxis": {"anchor": "y", "domain": [0.0, 0.94], "title": {"text": "simulated time (s)"}},
        "yaxis": {"anchor": "x", "domain": [0.0, 1.0], "title": {"text": "requests"}},
        "yaxis2": {
            "anchor": "x",
            "overlaying": "y",
            "side": "right",
            "title": {"text": "KV blocks in use"},
            "tickformat": ".0%",
            "range": [0, 1.05],
        },
        "margin": _MARGIN,
        "legend": {"orientation": "h", "y": -0.25},
    }
    return go.Figure(data=traces, layout=layout)


@_memoized
def pareto_chart(plan: SLOPlan) -> go.Figure:
    """Every simulated rate of every candidate (x: failed the SLO), tokens/s per GPU vs per user, and the
    Pareto front."""
    fig = go.Figure()
    for row in plan.candidates:
        if not row.probes:
            continue
        fig.add_scatter(
            x=[p.output_tokens_per_s_per_user for p in row.probes],
            y=[p.output_tokens_per_s_per_gpu for p in row.probes],
            mode="markers",
            name=row.label,
            opacity=0.5,
            marker={"symbol": ["circle" if p.passed else "x" for p in row.probes]},
            hovertemplate="%{y:,.0f} tok/s per GPU, %{x:,.1f} tok/s per user<extra>" + row.label + "</extra>",
        )
    fig.add_scatter(
        x=[p.output_tokens_per_s_per_user for p in plan.pareto],
        y=[p.output_tokens_per_s_per_gpu for p in plan.pareto],
        mode="lines",
        name="Pareto front",
        line={"color": "black"},
    )
    fig.update_layout(
        xaxis_title="output tokens/s per user (1 / mean TPOT)",
        yaxis_title="output tokens/s per GPU",
        margin=_MARGIN,
        legend={"orientation": "h", "y": -0.3},
    )
    return fig


# ------------------------------------------------------------------------------ measured (Validate page)


@_memoized
def predicted_vs_measured(points: ChartPoints, prediction_kind: str) -> go.Figure:
    """Log-log predicted vs measured time per check (milliseconds), by benchmark, with y = x and the calibrated
    predictions.

    ``points.span`` must not be None (some check finished).
    """
    ms = lambda values: [v * 1e3 for v in values]  # noqa: E731 - seconds to the axis unit
    fig = go.Figure()
    lo, hi = points.span
    fig.add_scatter(
        x=[lo * 1e3, hi * 1e3],
        y=[lo * 1e3, hi * 1e3],
        mode="lines",
        name="y = x (exact)",
        line={"color": "#7F7F7F", "dash": "dash"},
        hoverinfo="skip",
    )
    for benchmark, (xs, ys, names) in points.by_benchmark.items():
        fig.add_scatter(
            x=ms(xs),
            y=ms(ys),
            mode="markers",
            name=benchmark,
            text=names,
            marker={"size": 9},
            hovertemplate="%{text}<br>predicted %{x:,.4g} ms, measured %{y:,.4g} ms<extra></extra>",
        )
    xs, ys, names = points.calibrated
    if xs:
        fig.add_scatter(
            x=ms(xs),
            y=ms(ys),
            mode="markers",
            name="after calibration",
            text=names,
            marker={"symbol": "circle-open", "size": 11, "color": "#54A24B"},
            hovertemplate="%{text}<br>calibrated %{x:,.4g} ms, measured %{y:,.4g} ms<extra></extra>",
        )
    fig.update_xaxes(type="log", title_text=f"predicted ms ({prediction_kind})", tickformat=",~g")
    fig.update_yaxes(type="log", title_text="measured ms", tickformat=",~g")
    fig.update_layout(margin=_MARGIN, legend={"orientation": "h", "y": -0.2})
    return fig
