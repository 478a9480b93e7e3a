"""Compare: two to four deployments side by side (memory, concurrency, latency, throughput, cost)."""

import pandas as pd
import streamlit as st

from planner.hardware import get_profile
from ui import params
from ui.derived import COMPARE_LABELS, fmt_requests, readable, summary_row
from ui.errors import ShownError, describe, plain
from ui.format import GiB, fmt_kv_cache, fmt_rate, fmt_seconds, fmt_usd, kind_badge, kv_cache_metric
from ui.prices import price_inputs, unpriced, with_user_price
from ui.state import current_inputs, load_named_model, variant_from_row
from ui.sweeps import scenario_summary

#: Scenarios B-D to start from (the issue's example: 70B BF16 on 4 x H100, 70B INT4 on 2 x L40S, an 8B on 1 x L4).
STARTING_ROWS = pd.DataFrame([
    {"model": "meta-llama/Llama-3.1-70B", "gpu": "h100-sxm", "tp": 4, "pp": 1, "weights": "auto", "kv": "auto", "len": 8192},
    {"model": "meta-llama/Llama-3.1-70B", "gpu": "l40s", "tp": 2, "pp": 1, "weights": "int4", "kv": "auto", "len": 8192},
    {"model": "meta-llama/Llama-3.1-8B", "gpu": "l4", "tp": 1, "pp": 1, "weights": "auto", "kv": "auto", "len": 8192},
])
MAX_EXTRA = 3

st.title("Compare")
inputs = current_inputs()
wl = inputs.scenario.workload

st.caption(f"A is the sidebar's plan; B, C and D come from the table (edit, add or delete rows; the first "
           f"{MAX_EXTRA} count). All share the sidebar's workload ({wl.batch_size} x {wl.input_len:,} + {wl.output_len:,} "
           "tokens), memory limits and engine.")

rows = st.data_editor(
    STARTING_ROWS, key="compare_rows", num_rows="dynamic", hide_index=True,
    column_config={
        "model": st.column_config.SelectboxColumn("model", options=params.catalog_ids(), required=True, width="large"),
        "gpu": st.column_config.SelectboxColumn("GPU", options=params.gpu_ids(), required=True),
        "tp": st.column_config.NumberColumn("TP", min_value=1, step=1, required=True),
        "pp": st.column_config.NumberColumn("PP", min_value=1, step=1, required=True),
        "weights": st.column_config.SelectboxColumn("weights", options=params.WEIGHT_DTYPES, required=True),
        "kv": st.column_config.SelectboxColumn("KV cache", options=params.KV_DTYPES, required=True),
        "len": st.column_config.NumberColumn("max_model_len", min_value=1, step=1024, help="Empty: the model's maximum."),
    },
)

scenarios = [("A", inputs.model, inputs.hardware, inputs.scenario)]
for label, row in zip("BCD", rows.head(MAX_EXTRA).to_dict("records")):
    try:
        name, scenario = variant_from_row(inputs.scenario, row, label)
        scenarios.append((label, load_named_model(name).spec, get_profile(scenario.gpu), scenario))
    except ShownError as err:
        st.error(f"Scenario {label}: {describe(err)}", icon=":material/error:")

cards = [hw.id for _, _, hw, _ in scenarios]
with st.expander("Prices ($/GPU-hour)", expanded=bool(unpriced(cards)), icon=":material/payments:"):
    price_inputs(cards, "compare")
    st.caption("Each card starts at its profile's cited on-demand price (its source is under each column below); "
               "type your own to cost the tokens with it. Prices you set here also rank Simulate's search.")
scenarios = [(label, model, with_user_price(hw), scenario) for label, model, hw, scenario in scenarios]

results = []
for label, model, hw, scenario in scenarios:
    try:
        results.append(summary_row(label, model, hw, scenario, scenario_summary(model, hw, scenario)))
    except ShownError as err:
        st.error(f"Scenario {label}: {describe(err)}", icon=":material/error:")

if not results:
    st.stop()

for column, result in zip(st.columns(len(results), border=True), results):
    with column:
        st.subheader(f"{result['scenario']}: {result['model'].split('/')[-1]}")
        st.caption(f"{result['gpus']} x {result['gpu']} · TP {result['tp']} · PP {result['pp']} · weights "
                   f"{result['weights']} · KV {result['kv_cache_dtype']} · {result['max_model_len']:,} tokens")
        if result["starts"]:
            st.success(f"starts: {fmt_requests(result['max_concurrency'])} requests at once", icon=":material/check_circle:")
        else:
            st.error(result["verdict"], icon=":material/block:")
        st.metric("Weights per GPU", f"{result['weights_gib_per_gpu']:,.1f} GiB")
        kv_cache_metric(st, "KV cache per GPU", result["kv_cache_gib_per_gpu"] * GiB)
        st.metric("TTFT", fmt_seconds(result["ttft_s"]))
        st.metric("TPOT", fmt_seconds(result["tpot_s"]))
        st.metric("Output tokens/s", fmt_rate(result["tokens_per_s"]))
        st.metric("Tokens/s per GPU", fmt_rate(result["tokens_per_s_per_gpu"]))
        st.metric("Cost per 1M output tokens", fmt_usd(result["usd_per_million_tokens"]),
                  help="GPU-hour price x GPUs / tokens per hour; 'no price' until the card has a $/GPU-hour.")
        st.metric("$/GPU-hour", fmt_usd(result["usd_per_gpu_hour"]))
        st.caption(f"Price: {plain(result['price_source'], max_chars=240)}" if result["price_source"] else
                   "No price for this card: type its $/GPU-hour under **Prices** above.")
        kind_badge(result["kind"])

table = pd.DataFrame(results)
st.dataframe(readable(table, {"ttft_s": fmt_seconds, "tpot_s": fmt_seconds, "max_concurrency": fmt_requests,
                              "usd_per_million_tokens": fmt_usd, "usd_per_gpu_hour": fmt_usd,
                              "tokens_per_s": fmt_rate, "tokens_per_s_per_gpu": fmt_rate,
                              "weights_gib_per_gpu": lambda g: fmt_kv_cache(g * GiB),
                              "kv_cache_gib_per_gpu": lambda g: fmt_kv_cache(g * GiB)}),
             hide_index=True, key="compare_table",
             column_config={key: st.column_config.Column(label) for key, label in COMPARE_LABELS.items()})
st.download_button("Download the comparison (CSV)", table.to_csv(index=False).encode(), file_name="compare.csv",
                   mime="text/csv", key="compare_csv", on_click="ignore", icon=":material/download:")
