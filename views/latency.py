"""Latency & throughput: TTFT, TPOT and tokens/s of a static batch, against batch size and context length."""

import streamlit as st

from ui import charts
from ui.derived import LATENCY_FORMATS, LATENCY_LABELS, break_even_sentence
from ui.errors import plain, shown_errors
from ui.format import fmt_bytes, fmt_rate, fmt_seconds, formatted_table, kind_badge, plotted
from ui.state import current_inputs
from ui.sweeps import latency_at, latency_vs_batch, latency_vs_context, memory_plan, serving_points

st.title("Latency & throughput")
inputs = current_inputs()
model, hw, sc, draft = inputs.model, inputs.hardware, inputs.scenario, inputs.draft
wl = sc.workload

st.caption(
    f"{model.name} on {sc.total_gpus} x {hw.name} · static batch of {wl.batch_size} request(s), "
    f"{wl.input_len:,} prompt + {wl.output_len:,} output tokens · a served load with arrivals is the simulator's job"
)

with shown_errors():
    plan = memory_plan(model, hw, sc)
    estimate, bound = latency_at(model, hw, sc, draft)
    by_batch = latency_vs_batch(model, hw, sc, draft)
    by_context = latency_vs_context(model, hw, sc, draft)
starts = plan.fits
if not starts:  # one reason for every figure below, not a per-batch "does not fit" that would blame the batch
    fix = (
        f" At max_model_len {plan.max_model_len_that_fits:,} or less it starts." if plan.max_model_len_that_fits else ""
    )
    st.error(
        f"This deployment {plain(plan.reason)}{fix} The figures below are the steps' times as if it had started; "
        "the Plan page says what would make it start.",
        icon=":material/block:",
    )

for result in (estimate, bound):
    with st.container(border=True):
        badge, note = st.columns([1, 8], vertical_alignment="center")
        with badge:
            kind_badge(result.kind)
        note.caption(f"prefill {result.prefill_bound}-bound · decode {result.decode_bound}-bound")
        cols = st.columns(5)
        cols[0].metric(
            "TTFT", fmt_seconds(result.ttft_seconds), help=type(result).model_fields["ttft_seconds"].description
        )
        cols[1].metric(
            "TPOT", fmt_seconds(result.tpot_seconds), help=type(result).model_fields["tpot_seconds"].description
        )
        cols[2].metric(
            "End to end", fmt_seconds(result.e2e_seconds), help=type(result).model_fields["e2e_seconds"].description
        )
        cols[3].metric(
            "Output tokens/s",
            fmt_rate(result.throughput_tokens_per_s, unit=""),
            help=type(result).model_fields["throughput_tokens_per_s"].description,
        )
        cols[4].metric(
            "Tokens/s per GPU",
            fmt_rate(result.throughput_tokens_per_s_per_gpu, unit=""),
            help=type(result).model_fields["throughput_tokens_per_s_per_gpu"].description,
        )
if estimate.image_tokens_per_request:
    size = f"of {wl.image_size[0]} x {wl.image_size[1]}" if wl.image_size else "at the encoder's own size"
    st.caption(
        f"Images: {wl.images_per_request} per request {size}, {estimate.image_tokens_per_request:,} prompt tokens "
        f"per request; the vision encoder takes {fmt_seconds(estimate.encoder_seconds or 0.0)} of the estimate's "
        "TTFT. Host-side image preprocessing is not timed: against published Qwen3-VL runs this TTFT is ~2x too fast "
        "on one request (docs/multimodal.md)."
    )
if starts and estimate.fits_in_kv_cache is False:
    st.warning(
        f"{wl.batch_size} request(s) of {wl.input_len:,} + {wl.output_len:,} tokens do not fit the planned KV "
        "cache (see Plan): the engine would queue or preempt some, so these figures are optimistic.",
        icon=":material/warning:",
    )

spec = estimate.speculative
if spec is not None:
    st.subheader("Speculative decoding")
    badge, note = st.columns([1, 8], vertical_alignment="center")
    with badge:
        kind_badge(estimate.kind)
    note.caption(
        f"{spec.method}, k = {spec.num_speculative_tokens}, a = {spec.acceptance_rate:g} · draft: "
        f"{plain(spec.draft_cost)}"
    )
    fields = type(spec).model_fields
    cols = st.columns(4)
    cols[0].metric(f"Speed-up at batch {wl.batch_size:,}", f"{spec.speedup:.2f}x", help=fields["speedup"].description)
    cols[1].metric(
        "Tokens per step", f"{spec.tokens_per_step:.3f}", help=fields["tokens_per_step"].description + " Exact."
    )
    cols[2].metric("Draft per step", fmt_seconds(spec.draft_seconds), help=fields["draft_seconds"].description)
    cols[3].metric("Verify per step", fmt_seconds(spec.verify_seconds), help=fields["verify_seconds"].description)
    st.markdown(break_even_sentence(spec, wl.batch_size))
    plotted(
        charts.speculative_speedup,
        by_batch[["batch", "kind", "speedup"]],
        spec.break_even_batch,
        key="latency_speculative",
    )
    st.caption(
        f"Plain TPOT over speculative TPOT at each batch (prompts of {wl.input_len:,}, answers of "
        f"{wl.output_len:,} tokens); dotted: the roofline bound; the break-even marked is the solid line's "
        f"({estimate.kind}). The drafter adds "
        f"{fmt_bytes(spec.draft_weight_bytes_per_gpu)} of weights and {spec.draft_kv_bytes_per_token:,} B of KV "
        "cache per token on each GPU, which the Plan does not subtract."
    )

with shown_errors():
    points = serving_points(model, hw, sc, draft)
st.subheader("Operating points")
if points:
    for point in points:
        row = point.row
        st.markdown(
            f"- **{point.label}** ({point.serving} serving): batch {row['batch']:,} · "
            f"TTFT {fmt_seconds(row['ttft_s'])} · TPOT {fmt_seconds(row['tpot_s'])} · "
            f"{fmt_rate(row['tokens_per_s'])} ({fmt_rate(row['tokens_per_s_per_gpu'])} per GPU) · {row['kind']}"
        )
        st.caption(point.rule)
if starts and not any(point.row["fits_in_kv_cache"] for point in points):
    st.error(
        "No batch size fits the planned KV cache, so there is no operating point. See the Plan page's suggestions."
    )

tab_batch, tab_context = st.tabs(["vs batch size", "vs context length"])
with tab_batch:
    plotted(charts.latency_curves, by_batch, "batch", "batch size", points, key="latency_batch")
    st.caption(
        f"Prompts of {wl.input_len:,} tokens, answers of {wl.output_len:,}. Dotted: the roofline bound "
        "(no real run is faster); solid: the estimate; grey crosses: batches the KV cache cannot hold at once "
        "(the engine would queue or preempt them, so those figures are not reachable)."
    )
with tab_context:
    plotted(charts.latency_curves, by_context, "input_len", "prompt tokens", key="latency_context")
    st.caption(f"Batch {wl.batch_size}, answers of {wl.output_len:,} tokens, prompts up to max_model_len.")

# drawn only while open (a rerun opens it): its two formatted tables cost more than the rest of the page
with st.expander("The numbers behind the curves", key="latency_numbers", on_change="rerun") as numbers:
    if numbers.open:
        labels = {key: st.column_config.Column(label) for key, label in LATENCY_LABELS.items()}
        formatted_table(by_batch, LATENCY_FORMATS, hide_index=True, key="latency_batch_table", column_config=labels)
        formatted_table(by_context, LATENCY_FORMATS, hide_index=True, key="latency_context_table", column_config=labels)
