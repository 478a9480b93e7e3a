"""Plan: does vLLM start, how many requests fit at once, and where each GPU's memory goes."""

import json

import streamlit as st

from planner.engine import engine_name
from ui import charts
from ui.derived import fmt_requests, kv_formula, memory_terms_table, placement_caption
from ui.errors import shown_errors
from ui.format import fmt_bytes, fmt_gib, fmt_int, fmt_max_model_len, kind_badge, kv_cache_metric, plotted
from ui.state import current_inputs
from ui.sweeps import concurrency_vs_context, memory_plan, placement

st.title("Plan")
inputs = current_inputs()
model, hw, sc, res = inputs.model, inputs.hardware, inputs.scenario, inputs.resolved

st.caption(
    f"{model.name} on {sc.total_gpus} x {hw.name} · {fmt_max_model_len(res.max_model_len, sc.max_model_len)} · "
    f"config.json from the {inputs.source.origin}",
    help=f"Source: {inputs.source.citation}",
)
for warning in inputs.source.warnings:
    st.warning(warning, icon=":material/warning:")

with shown_errors():
    plan = memory_plan(model, hw, sc)
    layout = placement(model, hw, sc)

# the verdict and the metrics first: they need no table (pandas) and no sweep, and are what a user reads first
if plan.fits:
    st.success(plan.reason, icon=":material/check_circle:")
else:
    st.error(plan.reason, icon=":material/block:")
if plan.suggestions:
    st.markdown("**What would change it**\n" + "\n".join(f"- {s}" for s in plan.suggestions))

cols = st.columns(5)
cols[0].metric(
    "Max concurrency",
    fmt_requests(plan.max_concurrency),
    help=type(plan).model_fields["max_concurrency"].description + " Rounded down: never more than fits.",
)
cols[1].metric(
    "KV cache tokens", fmt_int(plan.kv_cache_tokens), help=type(plan).model_fields["kv_cache_tokens"].description
)
kv_cache_metric(
    cols[2],
    "KV cache per GPU",
    plan.kv_cache_bytes_per_gpu,
    help=type(plan).model_fields["kv_cache_bytes_per_gpu"].description,
)
cols[3].metric(
    "Weights per GPU",
    fmt_gib(plan.weight_bytes_per_gpu),
    help=type(plan).model_fields["weight_bytes_per_gpu"].description,
)
cols[4].metric(
    "KV blocks",
    fmt_int(plan.num_gpu_blocks),
    help=f"{plan.block_tokens} tokens per block; {plan.blocks_per_request:,} blocks per "
    f"{plan.resolved.max_model_len:,}-token request"
    + ("" if plan.kv_block_groups is None else f"; a request of t tokens holds {plan.kv_block_groups.words()}"),
)

st.subheader("Memory per GPU")
plotted(charts.memory_bar, plan, key="plan_memory_bar")
terms = memory_terms_table(plan)
st.dataframe(
    terms,
    hide_index=True,
    key="plan_terms",
    column_config={
        "GiB": st.column_config.NumberColumn(format="%.2f"),
        "share": st.column_config.ProgressColumn("share of the card", format="percent", min_value=0.0, max_value=1.0),
        "kind": st.column_config.TextColumn(help="exact: follows from config.json; estimate: a documented overhead"),
    },
)
if plan.lora_bytes_per_gpu is not None and res.lora is not None:
    host = plan.lora_host_bytes_per_worker
    st.caption(
        f"**lora**: {res.lora.max_loras:,} adapter slot(s) of rank {res.lora.max_lora_rank} take "
        f"**{fmt_bytes(plan.lora_bytes_per_gpu)}** per GPU (exact), taken from the KV cache"
        + (
            ""
            if host is None
            else f"; the host cache of {res.lora.cpu_loras:,} adapter(s) holds {fmt_bytes(host)} per worker"
        )
        + ".",
        help=type(plan).model_fields["lora_bytes_per_gpu"].description,
    )
plan_json = {
    "model": model.name,
    "gpu_id": hw.id,
    "scenario": sc.model_dump(mode="json"),
    **plan.model_dump(mode="json"),
    "placement": layout.model_dump(mode="json"),
}
left, right, _ = st.columns([1, 1, 2])
left.download_button(
    "Download the plan (JSON)",
    json.dumps(plan_json, indent=2),
    file_name="plan.json",
    mime="application/json",
    key="plan_json",
    on_click="ignore",
    icon=":material/download:",
    help="The keys `python -m planner plan MODEL --format json` writes (but its `kinds` legend: "
    "each term says its kind), and the scenario it was planned for.",
)
right.download_button(
    "Download the terms (CSV)",
    terms.assign(bytes=[t.bytes for t in plan.terms]).to_csv(index=False),
    file_name="plan-terms.csv",
    mime="text/csv",
    key="plan_csv",
    on_click="ignore",
    icon=":material/download:",
    help="One row per slice of a GPU's memory, as in the table above, in bytes too.",
)

if len(layout.ranks) > 1:  # one GPU holds everything: nothing to picture
    st.subheader("Placement: which GPU holds what")
    plotted(charts.placement_map, layout, key="plan_placement")
    st.caption(placement_caption(layout))

with shown_errors():
    sweep = concurrency_vs_context(model, hw, sc)
left, right = st.columns(2)
with left:
    st.subheader("Max concurrency vs context length")
    plotted(
        charts.concurrency_vs_context, sweep, res.max_model_len, engine_name(sc.engine_version), key="plan_concurrency"
    )
with right:
    st.subheader("KV cache per token")
    kind_badge("exact")
    formula = kv_formula(model, res)
    tp_note = f" on one of {res.tp} tensor-parallel ranks" if res.tp > 1 else ""
    st.markdown(f"{res.kv_cache_dtype} cache ({res.kv_bytes_per_element:g} B per element){tp_note}:")
    for line in formula.lines:
        st.code(line.text, language=None, wrap_lines=True)
        if line.note:
            st.caption(line.note)
    st.markdown(
        f"Total **{formula.bytes_per_token:,} B per token** ({fmt_bytes(formula.bytes_per_token)}); one "
        f"{formula.context_len:,}-token request holds **{fmt_bytes(formula.bytes_per_sequence)}** per GPU."
    )
