"""Compare: two to four deployments side by side (memory, concurrency, latency, throughput, cost).

Rows B-D name their model by a catalog name, a Hub repo id (loaded as the sidebar loads one) or the name of a
config.json uploaded on the page; the table travels in the link as ``?rows=`` (``ui.params.dump_rows``), an
upload by its name only.
"""

import pandas as pd
import streamlit as st

from planner.errors import ScenarioError
from planner.hardware import get_profile
from ui import params
from ui.derived import COMPARE_LABELS, fmt_requests, summary_row
from ui.errors import ShownError, describe, plain
from ui.format import (
    GiB,
    fmt_kv_cache,
    fmt_rate,
    fmt_seconds,
    fmt_usd,
    formatted_table,
    kind_badge,
    kv_cache_metric,
)
from ui.prices import price_inputs, unpriced, with_user_price
from ui.state import COMPARE_COLUMNS, UPLOAD_KEY, current_inputs, load_model, load_named_model, variant_from_row
from ui.sweeps import scenario_summary

#: Scenarios B-D to start from (the issue's example: 70B BF16 on 4 x H100, 70B INT4 on 2 x L40S, an 8B on 1 x L4).
STARTING_ROWS = pd.DataFrame(
    [
        ("meta-llama/Llama-3.1-70B", "h100-sxm", 4, 1, "auto", "auto", "8192"),
        ("meta-llama/Llama-3.1-70B", "l40s", 2, 1, "int4", "auto", "8192"),
        ("meta-llama/Llama-3.1-8B", "l4", 1, 1, "auto", "auto", "8192"),
    ],
    columns=list(COMPARE_COLUMNS),  # model, gpu, tp, pp, weights, kv, len (max_model_len as text: a number or 'auto')
)
MAX_EXTRA = 3
#: The table's columns, so it fits its container; each card above shows the rest, and the CSV keeps every column.
SHOWN_COLUMNS = (
    "scenario",
    "model",
    "gpu",
    "gpus",
    "max_concurrency",
    "ttft_s",
    "tpot_s",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "usd_per_million_tokens",
)
COLUMN_WIDTHS = {
    "scenario": 64,
    "model": 190,
    "gpu": 160,
    "gpus": 50,
    "max_concurrency": 80,
    "ttft_s": 70,
    "tpot_s": 70,
    "tokens_per_s": 75,
    "tokens_per_s_per_gpu": 75,
    "usd_per_million_tokens": 86,
}
"""Pixels per shown column, 920 in all: the main block is 940 px wide at a 1,400-px window with the sidebar open."""
SHORT_LABELS = {
    "max_concurrency": "requests",
    "tokens_per_s": "tokens/s",
    "tokens_per_s_per_gpu": "per GPU",
    "usd_per_million_tokens": "$/1M tokens",
}
"""Headers short enough for their column; the full label is the header's tooltip."""
EDITOR_KEY = "compare_rows"
BASE_KEY = "compare_base"
"""The rows the table started from on this visit (the editor's edits are kept relative to them)."""
SAVED_KEY = "compare_saved"
"""The table as last seen in this session, to start from when the user comes back to the page."""
UPLOADS_KEY = "compare_uploads"


def starting_rows() -> pd.DataFrame:
    """The rows the editor starts from: this visit's, else the session's last table, else the link's, else the
    default."""
    if EDITOR_KEY in st.session_state and BASE_KEY in st.session_state:
        return st.session_state[BASE_KEY]
    if SAVED_KEY in st.session_state:
        rows = st.session_state[SAVED_KEY]
    elif params.ROWS_QUERY in st.query_params:
        rows, warnings = params.parse_rows(st.query_params[params.ROWS_QUERY], COMPARE_COLUMNS)
        for warning in warnings:
            st.warning(warning, icon=":material/link_off:")
    else:
        rows = STARTING_ROWS.to_dict("records")
    base = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS)) if rows else STARTING_ROWS.iloc[0:0].copy()
    # a text cell: 8192 -> '8192', None (the model's maximum) -> 'auto', never an empty cell the grid shows as 'None'
    base["len"] = [params.BY_KEY["len"].dump(params.table_cell(value)) for value in base["len"]]
    st.session_state[BASE_KEY] = base
    return base


def sync_rows(rows: pd.DataFrame) -> None:
    """Remember the table for this session and put it in the URL (no parameter while it is the starting rows)."""
    records = rows.to_dict("records")
    st.session_state[SAVED_KEY] = records
    text = params.dump_rows(records, COMPARE_COLUMNS)
    if text == params.dump_rows(STARTING_ROWS.to_dict("records"), COMPARE_COLUMNS):
        if params.ROWS_QUERY in st.query_params:
            del st.query_params[params.ROWS_QUERY]
    elif st.query_params.get(params.ROWS_QUERY) != text:
        st.query_params[params.ROWS_QUERY] = text


def upload_names(files: list) -> dict[str, object]:
    """Each uploaded file under the name a row gives it: its file name, '-2', '-3' ... for a repeated one."""
    named: dict[str, object] = {}
    for upload in files:
        name, count = upload.name, 1
        while name in named:
            count += 1
            name = f"{upload.name.removesuffix('.json')}-{count}.json"
        named[name] = upload
    return named


def row_cells(row: dict, label: str) -> dict:
    """``row`` with its max_model_len cell read as the sidebar reads one ('auto' or empty: None); ScenarioError
    if it is neither a number nor 'auto'."""
    text = "" if params.table_cell(row.get("len")) is None else str(params.table_cell(row["len"])).strip()
    try:
        length = params.BY_KEY["len"].parse(text)
    except ValueError:
        raise ScenarioError(
            f"scenario {label}'s max_model_len {text!r} is neither a whole number of tokens (1 or more) nor auto.",
            hint="Type a number of tokens, or auto for the model's maximum.",
        ) from None
    return {**row, "len": length}


def row_spec(name: str, uploads: dict[str, object]):
    """The ModelSpec a row names: an upload on this page, else a catalog name or Hub repo id (the sidebar's loader)."""
    if name in uploads:
        return load_model({UPLOAD_KEY: uploads[name]}).spec
    if params.UPLOAD_NAME.match(name):
        raise ScenarioError(
            f"no config.json named '{name}' is uploaded on this page.",
            hint="Upload it under 'config.json files for the table' (uploads do not travel in a link), "
            "or name a catalog model or Hub repo id.",
        )
    return load_named_model(name).spec


st.title("Compare")
inputs = current_inputs()
wl = inputs.scenario.workload

st.caption(
    f"A is the sidebar's plan; B, C and D come from the table (edit, add or delete rows; the first "
    f"{MAX_EXTRA} count). All share the sidebar's workload ({wl.batch_size} x {wl.input_len:,} + {wl.output_len:,} "
    "tokens), memory limits and engine."
)

rows = st.data_editor(
    starting_rows(),
    key=EDITOR_KEY,
    num_rows="dynamic",
    hide_index=True,
    column_config={
        "model": st.column_config.TextColumn(
            "model",
            required=True,
            width="large",
            help="A catalog name (the sidebar's list, e.g. meta-llama/Llama-3.1-8B), any Hub repo id (org/name), "
            "or the name of a config.json uploaded below.",
        ),
        "gpu": st.column_config.SelectboxColumn("GPU", options=params.gpu_ids(), required=True),
        "tp": st.column_config.NumberColumn("TP", min_value=1, step=1, required=True),
        "pp": st.column_config.NumberColumn("PP", min_value=1, step=1, required=True),
        "weights": st.column_config.SelectboxColumn("weights", options=params.WEIGHT_DTYPES, required=True),
        "kv": st.column_config.SelectboxColumn("KV cache", options=params.KV_DTYPES, required=True),
        "len": st.column_config.TextColumn(
            "max_model_len",
            validate=r"^\s*(auto|[0-9]+)?\s*$",
            help="Tokens, or auto (or empty): the model's maximum, as vLLM defaults.",
        ),
    },
)

sync_rows(rows)
with st.expander("config.json files for the table", icon=":material/upload_file:"):
    uploads = upload_names(
        st.file_uploader(
            "config.json",
            type=["json"],
            accept_multiple_files=True,
            key=UPLOADS_KEY,
            help="Models that are on neither the catalog nor the Hub: type a file's name in a row's model cell.",
        )
    )
    if uploads:
        st.caption("In the model column: " + ", ".join(f"`{plain(name)}`" for name in uploads))
st.caption(
    "The address bar holds this table: copy it to share the comparison. An uploaded config.json travels "
    "by name only; whoever opens the link uploads it again."
)

scenarios = [("A", inputs.model, inputs.hardware, inputs.scenario)]
for label, row in zip("BCD", rows.head(MAX_EXTRA).to_dict("records")):
    try:
        name, scenario = variant_from_row(inputs.scenario, row_cells(row, label), label)
        scenarios.append((label, row_spec(name.strip(), uploads), get_profile(scenario.gpu), scenario))
    except ShownError as err:
        st.error(f"Scenario {label}: {describe(err)}", icon=":material/error:")

cards = [hw.id for _, _, hw, _ in scenarios]
with st.expander("Prices ($/GPU-hour)", expanded=bool(unpriced(cards)), icon=":material/payments:"):
    price_inputs(cards, "compare")
    st.caption(
        "Each card starts at its profile's cited on-demand price (its source is under each column below); "
        "type your own to cost the tokens with it. Prices you set here also rank Simulate's search."
    )
scenarios = [(label, model, with_user_price(hw), scenario) for label, model, hw, scenario in scenarios]

results = []
for label, model, hw, scenario in scenarios:
    try:
        summary = scenario_summary(model, hw, scenario, inputs.draft)
        results.append(summary_row(label, model, hw, scenario, summary))
    except ShownError as err:
        st.error(f"Scenario {label}: {describe(err)}", icon=":material/error:")

if not results:
    st.stop()

for column, result in zip(st.columns(len(results), border=True), results):
    with column:
        st.subheader(f"{result['scenario']}: {result['model'].split('/')[-1]}")
        st.caption(
            f"{result['gpus']} x {result['gpu']} · TP {result['tp']} · PP {result['pp']} · weights "
            f"{result['weights']} · KV {result['kv_cache_dtype']} · {result['max_model_len']:,} tokens"
        )
        if result["starts"]:
            st.success(
                f"starts: {fmt_requests(result['max_concurrency'])} requests at once", icon=":material/check_circle:"
            )
        else:
            st.error(result["verdict"], icon=":material/block:")
        st.metric("Weights per GPU", f"{result['weights_gib_per_gpu']:,.1f} GiB")
        kv_cache_metric(st, "KV cache per GPU", result["kv_cache_gib_per_gpu"] * GiB)
        st.metric("TTFT", fmt_seconds(result["ttft_s"]))
        st.metric("TPOT", fmt_seconds(result["tpot_s"]))
        st.metric("Output tokens/s", fmt_rate(result["tokens_per_s"]))
        st.metric("Tokens/s per GPU", fmt_rate(result["tokens_per_s_per_gpu"]))
        st.metric(
            "Cost per 1M output tokens",
            fmt_usd(result["usd_per_million_tokens"]),
            help="GPU-hour price x GPUs / tokens per hour; 'no price' until the card has a $/GPU-hour.",
        )
        st.metric("$/GPU-hour", fmt_usd(result["usd_per_gpu_hour"]))
        st.caption(
            f"Price: {plain(result['price_source'], max_chars=240)}"
            if result["price_source"]
            else "No price for this card: type its $/GPU-hour under **Prices** above."
        )
        kind_badge(result["kind"])

table = pd.DataFrame(results)
formatted_table(
    table,
    {
        "ttft_s": fmt_seconds,
        "tpot_s": fmt_seconds,
        "max_concurrency": fmt_requests,
        "usd_per_million_tokens": fmt_usd,
        "usd_per_gpu_hour": fmt_usd,
        "tokens_per_s": fmt_rate,
        "tokens_per_s_per_gpu": fmt_rate,
        "weights_gib_per_gpu": lambda g: fmt_kv_cache(g * GiB),
        "kv_cache_gib_per_gpu": lambda g: fmt_kv_cache(g * GiB),
    },
    hide_index=True,
    key="compare_table",
    width="stretch",
    column_order=SHOWN_COLUMNS,
    column_config={
        key: st.column_config.Column(SHORT_LABELS.get(key, label), width=COLUMN_WIDTHS.get(key), help=label)
        for key, label in COMPARE_LABELS.items()
    },
)
st.caption(
    "Precision, max_model_len, memory per GPU, the price and its source are in each card above; the CSV has "
    "every column."
)
st.download_button(
    "Download the comparison (CSV)",
    table.to_csv(index=False).encode(),
    file_name="compare.csv",
    mime="text/csv",
    key="compare_csv",
    on_click="ignore",
    icon=":material/download:",
)
