"""Roofline: which ceiling binds each layer op of a prefill step and of a decode step on this card."""

import streamlit as st

from ui import charts
from ui.derived import ROOFLINE_FORMATS, ROOFLINE_LABELS, readable, roofline_table
from ui.errors import shown_errors
from ui.format import fmt_bytes, fmt_flop_count, fmt_seconds, kind_badge
from ui.state import current_inputs
from ui.sweeps import roofline_stages

st.title("Roofline")
inputs = current_inputs()
model, hw, sc = inputs.model, inputs.hardware, inputs.scenario

st.caption(f"{model.name} on {hw.name}, per GPU at TP {inputs.resolved.tp} · batch {sc.workload.batch_size}, "
           f"{sc.workload.input_len:,} prompt tokens (set under Workload)")

mode = st.segmented_control(
    "Efficiency", ["auto", "bound"], default="auto", key="roofline_mode", required=True,
    format_func=lambda m: {"auto": "estimate (fitted or calibrated factors)", "bound": "bound (datasheet peaks)"}[m],
    help="bound: every op at the card's peak FLOP/s or bandwidth, no overheads. estimate: derated by "
         "efficiency factors fitted to public measurements (calibrated when the card has measured ones).",
)
if hw.hbm_bandwidth_bytes_per_s is None or not hw.peak_flops_per_s:
    st.error(f"{hw.name} has no datasheet bandwidth or FLOP/s in its profile, so it has no roofline. "
             "Pick another GPU, or measure this one on the Validate page.")
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
            st.caption(f"step {fmt_seconds(stage.total_seconds)} · {fmt_flop_count(stage.total_flops)} · "
                       f"{fmt_bytes(stage.total_bytes)} moved")

st.plotly_chart(charts.roofline_chart(hw, (prefill, decode), table), key="roofline_chart")
st.caption("Each point is one op per layer (identical layers grouped); all-reduce and the engine's step overhead "
           "move no HBM bytes and are only in the table.")

st.subheader("Every op")
st.dataframe(
    readable(table, ROOFLINE_FORMATS), hide_index=True, key="roofline_table", width="stretch",
    column_config={
        **{key: st.column_config.Column(label) for key, label in ROOFLINE_LABELS.items()},
        "share_of_step": st.column_config.ProgressColumn("share of step", format="percent", min_value=0.0, max_value=1.0),
    },
)
st.download_button(
    "Download the table (CSV)", table.to_csv(index=False).encode(), file_name="roofline.csv", mime="text/csv",
    key="roofline_csv", on_click="ignore", icon=":material/download:",
)
