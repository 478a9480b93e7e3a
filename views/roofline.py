"""Roofline: which ceiling binds each layer op of a prefill step and of a decode step on this card."""

import streamlit as st

from ui import charts
from ui.derived import ROOFLINE_FORMATS, ROOFLINE_LABELS, roofline_table
from ui.errors import shown_errors
from ui.format import fmt_bytes, fmt_flop_count, fmt_seconds, formatted_table, kind_badge, plotted
from ui.state import current_inputs
from ui.sweeps import roofline_stages

#: The columns the page shows, so the table fits its container; the CSV keeps every column of ``roofline_table``.
SHOWN_COLUMNS = (
    "stage",
    "op",
    "bound",
    "compute_dtype",
    "flops",
    "bytes",
    "intensity_flop_per_byte",
    "total_time_us",
    "share_of_step",
    "attained_flop_per_s",
)
COLUMN_WIDTHS = {
    "stage": 60,
    "op": 229,
    "bound": 84,
    "compute_dtype": 50,
    "flops": 88,
    "bytes": 80,
    "intensity_flop_per_byte": 72,
    "total_time_us": 80,
    "share_of_step": 86,
    "attained_flop_per_s": 100,
}
"""Pixels per shown column, 929 in all: the main block is 940 px wide at a 1,400-px window with the sidebar open."""

st.title("Roofline")
inputs = current_inputs()
model, hw, sc = inputs.model, inputs.hardware, inputs.scenario

st.caption(
    f"{model.name} on {hw.name}, per GPU at TP {inputs.resolved.tp} · batch {sc.workload.batch_size}, "
    f"{sc.workload.input_len:,} prompt tokens (set under Workload)"
)

mode = st.segmented_control(
    "Efficiency",
    ["auto", "bound"],
    default="auto",
    key="roofline_mode",
    required=True,
    format_func=lambda m: {"auto": "estimate (fitted or calibrated factors)", "bound": "bound (datasheet peaks)"}[m],
    help="bound: every op at the card's peak FLOP/s or bandwidth, no overheads. estimate: derated by "
    "efficiency factors fitted to public measurements (calibrated when the card has measured ones).",
)
if hw.hbm_bandwidth_bytes_per_s is None or not hw.peak_flops_per_s:
    st.error(
        f"{hw.name} has no datasheet bandwidth or FLOP/s in its profile, so it has no roofline. "
        "Pick another GPU, or measure this one on the Validate page."
    )
    st.stop()

with shown_errors():
    prefill, decode = roofline_stages(model, hw, sc, mode or "auto")
table = roofline_table((prefill, decode))

for stage in (prefill, decode):
    with st.container(border=True):
        left, right = st.columns([4, 1.4])
        left.markdown(f"**{stage.stage.capitalize()}**: {stage.verdict}")
        with right:
            kind_badge(stage.kind)
            st.caption(
                f"step {fmt_seconds(stage.total_seconds)} · {fmt_flop_count(stage.total_flops)} · "
                f"{fmt_bytes(stage.total_bytes)} moved"
            )

plotted(charts.roofline_chart, hw, (prefill, decode), table, key="roofline_chart")
st.caption(
    "Each point is one op per layer (identical layers grouped); all-reduce and the engine's step overhead "
    "move no HBM bytes and are only in the table."
)

st.subheader("Every op")
formatted_table(
    table,
    ROOFLINE_FORMATS,
    hide_index=True,
    key="roofline_table",
    width="stretch",
    column_order=SHOWN_COLUMNS,
    column_config={
        **{key: st.column_config.Column(label, width=COLUMN_WIDTHS.get(key)) for key, label in ROOFLINE_LABELS.items()},
        "op": st.column_config.Column(
            ROOFLINE_LABELS["op"],
            width=COLUMN_WIDTHS["op"],
            help="layers first-last (how many) / op: identical layers are one row",
        ),
        "share_of_step": st.column_config.ProgressColumn(
            "share of step", format="percent", min_value=0.0, max_value=1.0, width=COLUMN_WIDTHS["share_of_step"]
        ),
    },
)
st.caption(
    "Each op's count is in its name; µs each, the kernel, the layer group and the kind are in the CSV "
    "(each stage's kind is its badge above)."
)
st.download_button(
    "Download the table (CSV)",
    table.to_csv(index=False).encode(),
    file_name="roofline.csv",
    mime="text/csv",
    key="roofline_csv",
    on_click="ignore",
    icon=":material/download:",
)
