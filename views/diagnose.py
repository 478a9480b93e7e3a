"""Diagnose: check the planner against your own runs, and find what limits them.

Five tabs, each a thin view over ``planner.verify``: a vLLM startup log reconciled term by term
(with the measured overheads adoptable as calibration), a benchmark result scored metric by metric,
a baseline classified against the roofline of the sidebar's scenario (where the time goes, and a
table of symptoms with the scenario change that tests each fix), a changed run compared with the
baseline, and the accuracy history.
"""

from __future__ import annotations

import streamlit as st

from planner.verify.bench_results import load_bench_results
from planner.verify.diagnose import (
    Baseline,
    baseline_from_bench,
    baseline_from_typed,
    classify,
    compare,
    scenario_rooflines,
    scenario_settings,
    symptom_table,
    what_if,
    where_time_goes,
)
from planner.verify.history import append, entries_from_reconciliation, entries_from_score, history_path, summarize
from planner.verify.mismatch import log_mismatches, model_mismatch
from planner.verify.reconcile import adopt_overheads, format_term_value, overheads_path, reconcile
from planner.verify.vllm_log import parse_vllm_log
from ui.errors import TOGGLE, ShownError, describe, note_on_page, on_page, plain
from ui.format import fmt_change_pct, fmt_measure, fmt_seconds, kind_badge
from ui.params import apply_to_sidebar
from ui.serving import scored
from ui.state import current_inputs, hub_token

SAVED_BASELINE = "diagnose_saved_baseline"
IMPORTED_BASELINE = "diagnose_imported_baseline"
TRY_KEY = "diagnose_try"

st.title("Diagnose")
inputs = current_inputs()
model, hw, sc = inputs.model, inputs.hardware, inputs.scenario

st.caption(
    f"Your runs against the planner, on the sidebar's scenario: {model.name} on {sc.gpus_per_replica} x {hw.name} "
    f"(tp {sc.tp}, pp {sc.pp})."
)


def _error(err: BaseException, context: str) -> None:
    st.error(f"{context}: {describe(err)}", icon=":material/error:")


def _uploaded_text(key: str) -> str | None:
    upload = st.session_state.get(key)
    return None if upload is None else upload.getvalue().decode("utf-8", errors="replace")


log_tab, bench_tab, diagnose_tab, compare_tab, history_tab = st.tabs(
    ["Startup log", "Benchmark result", "Baseline & diagnosis", "Compare a change", "Accuracy history"]
)

# ------------------------------------------------------------------------------ startup log
with log_tab:
    st.markdown(
        "Paste or upload the vLLM server output from its start; the planner re-plans the scenario it "
        "describes and compares every memory term with what vLLM printed."
    )
    left, right = st.columns([3, 2])
    left.text_area(
        "vLLM server log",
        key="diagnose_log_text",
        height=180,
        placeholder="INFO ... Initializing a V1 LLM engine (v0.11.0) with config: model=...",
    )
    right.file_uploader("or a log file", key="diagnose_log_file")
    right.toggle(
        "Plan with the sidebar's model and GPU",
        key="diagnose_log_sidebar",
        help="Off: the model the log names and the GPU matched by the memory it printed. On: the sidebar's.",
    )
    text = _uploaded_text("diagnose_log_file") or st.session_state.get("diagnose_log_text") or ""
    if text.strip():
        use_sidebar = st.session_state.get("diagnose_log_sidebar", False)
        try:
            report = parse_vllm_log(text)
            rec = reconcile(
                report, None, hw if use_sidebar else None, model=model if use_sidebar else None, token=hub_token()
            )
        except ShownError as err:
            st.error(f"Cannot reconcile this log: {on_page(err)}", icon=":material/error:")
        else:
            mismatches = log_mismatches(report, rec, model.name if use_sidebar else None, hw if use_sidebar else None)
            for found in mismatches:
                st.warning(
                    f"**Not the same {found.kind}.** {plain(found.message)} "
                    + (
                        f"Set the sidebar to the log's {found.kind}, or turn off {TOGGLE} to plan what the log names."
                        if use_sidebar
                        else f"Set the sidebar's **Weights** (or TP) to what the log served and turn on {TOGGLE}."
                    ),
                    icon=":material/compare_arrows:",
                )
            if mismatches:
                st.caption("The table below compares different things until the mismatch above is fixed.")
            st.markdown(
                f"**{rec.model}** on **{rec.card_name}**, tp {rec.scenario.tp}, vLLM "
                f"{rec.engine_version or 'version not printed'}"
            )
            st.caption(rec.card_how)
            st.dataframe(
                [
                    {
                        "term (per GPU)": t.name,
                        "planner": format_term_value(t.predicted, t.unit),
                        "vLLM printed": format_term_value(t.reported, t.unit),
                        "difference": fmt_change_pct(t.difference_pct),
                        "planner is": t.predicted_kind,
                        "from the log": t.reported_how,
                    }
                    for t in rec.terms
                ],
                hide_index=True,
                key="diagnose_log_terms",
            )
            st.info(rec.summary, icon=":material/balance:")
            with st.expander(f"Read from the log, assumed ({len(rec.assumptions)}), warnings ({len(rec.warnings)})"):
                st.json(rec.read_from_log, expanded=False)
                for line in rec.assumptions:
                    st.markdown(f"- {note_on_page(line)}")
                for line in rec.warnings:
                    st.warning(note_on_page(line))
            a, b = st.columns(2)
            if a.button(
                "Adopt the measured overheads as calibration",
                key="diagnose_adopt",
                help=f"Writes non-torch, activation and CUDA-graph memory for {rec.card} / vLLM "
                f"{rec.engine_version or 'unknown'} to {overheads_path()}.",
            ):
                try:
                    path = adopt_overheads(rec, source="Diagnose page")
                    st.success(f"Adopted into {path}", icon=":material/check:")
                except ShownError as err:
                    _error(err, "Cannot adopt")
            if b.button("Record to the accuracy history", key="diagnose_log_record"):
                st.success(f"Recorded to {append(entries_from_reconciliation(rec, label='Diagnose page'))}")

# -------------------------------------------------------------------------- benchmark result
with bench_tab:
    st.markdown(
        "A `vllm bench serve --save-result` file (or `benchmark_serving.py`, GuideLLM, genai-perf): the "
        "planner predicts the same run on the sidebar's scenario and scores each metric."
    )
    left, right = st.columns([3, 2])
    left.text_area("Result JSON", key="diagnose_bench_text", height=140, placeholder='{"mean_ttft_ms": ...}')
    right.file_uploader("or a result file", type=["json", "jsonl"], key="diagnose_bench_file")
    bench_text = _uploaded_text("diagnose_bench_file") or st.session_state.get("diagnose_bench_text") or ""
    if bench_text.strip():
        try:
            runs = load_bench_results(bench_text)
        except ShownError as err:
            _error(err, "Cannot read this result")
            runs = ()
        if runs:
            index = st.selectbox(
                "Run",
                range(len(runs)),
                key="diagnose_bench_run",
                format_func=lambda i: f"{i}: {runs[i].label or runs[i].format} ({runs[i].model or '?'})",
            )
            bench = runs[index or 0]
            found = model_mismatch(bench.model, model.name)
            if found is not None:
                st.warning(
                    f"**Not the same model.** {plain(found.message)} Pick {plain(bench.model)} in the sidebar "
                    "(catalog, Hub repo id or an uploaded config.json) to score the run against its own model.",
                    icon=":material/compare_arrows:",
                )
            try:
                result = scored(bench, model, hw, sc)
            except ShownError as err:
                _error(err, "Cannot predict this run")
            else:
                st.markdown(f"Predicted: **{result.prediction_label}**")
                kind_badge(result.prediction_kind)
                st.dataframe(
                    [
                        {
                            "metric": m.metric,
                            "stat": m.statistic,
                            "predicted": fmt_measure(m.predicted, m.unit),
                            "measured": fmt_measure(m.measured, m.unit),
                            "error": fmt_change_pct(m.error_pct),
                        }
                        for m in result.metrics
                    ],
                    hide_index=True,
                    key="diagnose_bench_scores",
                )
                if result.median_abs_error_pct is not None:
                    st.caption(f"median |error| {result.median_abs_error_pct:.1f}%")
                with st.expander("Definitions and notes"):
                    for metric, text in result.definitions.items():
                        st.markdown(f"- **{metric}**: {text}")
                    for note in result.notes:
                        st.markdown(f"- {note}")
                a, b = st.columns(2)
                if a.button("Use this run as the baseline", key="diagnose_bench_baseline"):
                    st.session_state[IMPORTED_BASELINE] = baseline_from_bench(
                        bench, settings=scenario_settings(sc)
                    ).model_dump()
                    st.success("The Baseline tab now offers this run.")
                if b.button("Record to the accuracy history", key="diagnose_bench_record"):
                    st.success(f"Recorded to {append(entries_from_score(result))}")


def _typed_baseline(prefix: str, label: str) -> Baseline:
    """Number inputs for one run (empty = unknown), read into a Baseline by the core."""
    cols = st.columns(3)
    ttft = cols[0].number_input("TTFT mean (ms)", min_value=0.0, value=None, key=f"{prefix}_ttft_ms")
    ttft_p90 = cols[0].number_input("TTFT P90 (ms)", min_value=0.0, value=None, key=f"{prefix}_ttft_p90_ms")
    ttft_p99 = cols[0].number_input("TTFT P99 (ms)", min_value=0.0, value=None, key=f"{prefix}_ttft_p99_ms")
    tpot = cols[1].number_input(
        "TPOT mean (ms)",
        min_value=0.0,
        value=None,
        key=f"{prefix}_tpot_ms",
        help="Time per output token after the first (vLLM's TPOT).",
    )
    tpot_p90 = cols[1].number_input("TPOT P90 (ms)", min_value=0.0, value=None, key=f"{prefix}_tpot_p90_ms")
    tpot_p99 = cols[1].number_input("TPOT P99 (ms)", min_value=0.0, value=None, key=f"{prefix}_tpot_p99_ms")
    tokens = cols[2].number_input("Output tokens/s", min_value=0.0, value=None, key=f"{prefix}_tokens_per_s")
    gpu = cols[2].number_input(
        "GPU utilization (%)",
        min_value=0.0,
        max_value=100.0,
        value=None,
        key=f"{prefix}_gpu_util_pct",
        help=Baseline.model_fields["gpu_utilization_pct"].description,
    )
    kind = cols[2].radio(
        "GPU utilization is",
        ["sm_throughput", "busy_time"],
        key=f"{prefix}_gpu_util_kind",
        horizontal=True,
        format_func=lambda k: {"sm_throughput": "SM/tensor throughput", "busy_time": "nvidia-smi GPU-Util"}[k],
    )
    bw = cols[2].number_input(
        "Memory-bandwidth utilization (%)", min_value=0.0, max_value=100.0, value=None, key=f"{prefix}_bw_util_pct"
    )
    concurrency = cols[1].number_input(
        "Requests in flight",
        min_value=1,
        value=None,
        step=1,
        key=f"{prefix}_concurrency",
        placeholder=f"sidebar batch ({sc.workload.batch_size})",
    )
    return baseline_from_typed(
        label=label,
        ttft_ms=ttft,
        ttft_p90_ms=ttft_p90,
        ttft_p99_ms=ttft_p99,
        tpot_ms=tpot,
        tpot_p90_ms=tpot_p90,
        tpot_p99_ms=tpot_p99,
        throughput_tokens_per_s=tokens,
        gpu_utilization_pct=gpu,
        gpu_utilization_kind=kind,
        memory_bandwidth_utilization_pct=bw,
        concurrency=concurrency,
        settings=scenario_settings(sc),
    )


# ------------------------------------------------------------------------ baseline & diagnosis
with diagnose_tab:
    sources = ["typed"] + (["imported"] if st.session_state.get(IMPORTED_BASELINE) else [])
    source = st.radio(
        "Baseline",
        sources,
        key="diagnose_baseline_source",
        horizontal=True,
        format_func=lambda s: {"typed": "numbers typed in", "imported": "the imported run"}[s],
    )
    if source == "imported":
        baseline = Baseline.model_validate(st.session_state[IMPORTED_BASELINE])
        st.json(baseline.model_dump(exclude={"settings"}, exclude_none=True), expanded=False)
    else:
        baseline = _typed_baseline("diagnose", "baseline")
    rooflines = None
    try:
        rooflines = scenario_rooflines(model, hw, sc, baseline)
    except (ShownError, KeyError, TypeError) as err:
        st.warning(f"No roofline for this scenario ({describe(err)}); the diagnosis uses the utilizations only.")
    diagnosis = classify(baseline, rooflines)
    st.subheader("Diagnosis")
    st.markdown(f"**{diagnosis.bound.replace('_', ' ')}** · confidence: {diagnosis.confidence}")
    st.markdown(diagnosis.summary)
    if diagnosis.evidence:
        st.dataframe(
            [
                {
                    "evidence": e.name,
                    "points to": e.points_to or "context",
                    "weight": e.weight,
                    "in numbers": e.statement,
                }
                for e in diagnosis.evidence
            ],
            hide_index=True,
            key="diagnose_evidence",
        )
    if st.button("Keep this as the baseline to compare against", key="diagnose_keep"):
        st.session_state[SAVED_BASELINE] = baseline.model_dump()
        st.success("Saved. Change one setting (sidebar or a fix below), then fill the Compare tab.")

    if rooflines is not None:
        st.subheader("Where the time goes")
        for stage_roofline in (rooflines.decode_estimate, rooflines.prefill_estimate):
            breakdown = where_time_goes(stage_roofline)
            with st.container(border=True):
                st.markdown(breakdown.summary)
                kind_badge(breakdown.kind)
                st.dataframe(
                    [
                        {
                            "op": o.name,
                            "kind": o.kind,
                            "bound": o.bound,
                            "x layers": o.count,
                            "time": fmt_seconds(o.seconds),
                            "share": f"{o.share_pct:.1f}%",
                        }
                        for o in breakdown.top_ops
                    ],
                    hide_index=True,
                    key=f"diagnose_ops_{breakdown.stage}",
                )

    st.subheader("Symptoms, causes and fixes")
    ranked = diagnosis.symptom_ids
    symptoms = sorted(symptom_table(sc), key=lambda s: ranked.index(s.id) if s.id in ranked else len(ranked))
    for symptom in symptoms:
        fits = symptom.id in diagnosis.symptom_ids
        with st.expander(("★ " if fits else "") + symptom.symptom, expanded=False):
            st.markdown(
                f"**Likely cause:** {symptom.likely_cause}  \n**Fix:** {symptom.fix}  \n"
                f"**Test it:** {symptom.change_label}; measure {symptom.how_to_test}"
            )
            if symptom.scenario_change and st.button("Try it on the planner", key=f"diagnose_try_{symptom.id}"):
                st.session_state[TRY_KEY] = symptom.id
    tried = next((s for s in symptoms if s.id == st.session_state.get(TRY_KEY)), None)
    if tried is not None and tried.scenario_change:
        try:
            effect = what_if(model, hw, sc, tried.scenario_change)
        except ShownError as err:
            _error(err, "Cannot re-plan")
        else:
            with st.container(border=True):
                st.markdown(f"**What if** {effect.change_label}")
                if effect.error:
                    st.error(effect.error)
                else:
                    st.dataframe(
                        [
                            {
                                "figure": r["name"],
                                "now": fmt_measure(r["before"], r["unit"]),
                                "with the change": fmt_measure(r["after"], r["unit"]),
                                "change": fmt_change_pct(r["change_pct"]),
                            }
                            for r in effect.rows
                        ],
                        hide_index=True,
                        key="diagnose_what_if",
                    )
                    kind_badge(effect.kind)
                    st.button(
                        "Apply the change to the sidebar",
                        key="diagnose_apply",
                        on_click=apply_to_sidebar,
                        args=(tried.scenario_change,),
                    )

# -------------------------------------------------------------------------- compare a change
with compare_tab:
    saved = st.session_state.get(SAVED_BASELINE)
    if not saved:
        st.info("Keep a baseline first (Baseline & diagnosis tab), then change one setting and type the new run here.")
    else:
        before = Baseline.model_validate(saved)
        st.caption(f"Baseline: {before.label}. The changed run's settings are the sidebar's now.")
        after = _typed_baseline("diagnose_new", "changed run")
        comparison = compare(before, after)
        st.markdown(comparison.summary)
        if comparison.changed_settings:
            st.dataframe(
                [
                    {"setting": k, "baseline": str(v["before"]), "changed run": str(v["after"])}
                    for k, v in comparison.changed_settings.items()
                ],
                hide_index=True,
                key="diagnose_changed_settings",
            )
        if comparison.rows:
            st.dataframe(
                [
                    {
                        "metric": r.metric,
                        "baseline": fmt_measure(r.before, r.unit),
                        "changed run": fmt_measure(r.after, r.unit),
                        "change": fmt_change_pct(r.change_pct),
                        "verdict": r.verdict,
                    }
                    for r in comparison.rows
                ],
                hide_index=True,
                key="diagnose_compare_rows",
            )

# --------------------------------------------------------------------------- accuracy history
with history_tab:
    try:
        summary = summarize()
    except ShownError as err:
        _error(err, "Cannot read the history")
    else:
        st.caption(
            f"{summary.entries} entries in {history_path()}"
            + (f" ({summary.skipped_lines} unreadable lines skipped)" if summary.skipped_lines else "")
        )
        if summary.entries:
            st.dataframe(
                [
                    {
                        **r.key,
                        "count": r.count,
                        "median |error| %": r.median_abs_error_pct,
                        "P90 |error| %": r.p90_abs_error_pct,
                        "bias %": r.mean_error_pct,
                        "last": r.last_date,
                    }
                    for r in summary.by_metric
                ],
                hide_index=True,
                key="diagnose_history_metrics",
            )
            st.dataframe(
                [{**r.key, "count": r.count, "median |error| %": r.median_abs_error_pct} for r in summary.by_month],
                hide_index=True,
                key="diagnose_history_months",
            )
        else:
            st.info(
                "Nothing recorded yet: use 'Record to the accuracy history' on the first two tabs, or "
                "`python -m planner score BENCH.json --record`."
            )
