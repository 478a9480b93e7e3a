"""Validate: the sidebar model's real shapes benchmarked on this machine's GPU (or CPU) beside the planner's
predictions, the utilization readings, and the calibration fitted from them.

A thin view over ``planner.bench.run_validation``. torch is imported only when the user presses the
start button (inside ``planner.bench``); before that the card is looked up without it
(``ui.validate.scan_gpus``). The last report is kept in the session, so reruns draw it again
instead of running the benchmarks again.
"""

from __future__ import annotations

import streamlit as st

from planner.bench import NoGPUError
from planner.bench.calibrate import write_calibration
from planner.bench.report import CheckResult, Summary, ValidationReport
from planner.hardware import load_profiles
from ui import charts
from ui.errors import ShownError, describe, plain
from ui.format import fmt_bytes, fmt_count, fmt_seconds, kind_badge, plotted
from ui.params import apply_to_sidebar
from ui.state import current_inputs
from ui.validate import (
    SMALL_CATALOG_MODEL,
    GpuScan,
    bound_hit_text,
    calibration_question,
    chart_points,
    checks_table,
    default_time_limit_s,
    device_options,
    expected_kind,
    factors_table,
    group_progress_label,
    progress_fraction,
    progress_label,
    report_file_name,
    scan_gpus,
    slow_on_cpu,
    utilization_table,
)

REPORT_KEY = "validate_report_json"
"""Session key of the last report, as JSON (a plain string survives module reloads)."""
WRITE_ERROR_KEY = "validate_write_error"
"""Session key of why the last press of the write button wrote nothing."""

st.title("Validate on this machine")
inputs = current_inputs()
model = inputs.model

st.caption(
    f"Micro-benchmarks built from {model.name}'s real shapes with random weights (no download): memory "
    "bandwidth, GEMMs, decode attention, one decoder layer scaled to the model, a KV-cache allocation and launch "
    "overhead, each beside the planner's prediction for it. Predictions use the profile of the card the run finds "
    f"(`cpu` on CPU), not the sidebar's GPU ({inputs.hardware.id})."
)


# ------------------------------------------------------------------ the card


def detected_card(scan: GpuScan) -> None:
    if not scan.found:
        st.info(
            "No CUDA GPU found: the benchmarks run on this machine's CPU against the `cpu` profile.",
            icon=":material/memory:",
        )
        st.caption(
            f"Looked for NVIDIA GPUs without importing torch: {scan.reason}. When you start, torch decides: "
            "the report says what the benchmarks ran on."
        )
        return
    with st.container(border=True):
        st.markdown(f"**Detected** (read by {scan.source}, without torch)")
        for gpu in scan.gpus:
            profile = (
                f"profile **{gpu.profile_id}**"
                if gpu.profile_id
                else "no profile matches: the run measures the peaks with a probe copy and GEMM"
            )
            st.markdown(
                f"GPU {gpu.index}: **{gpu.name}** · {fmt_bytes(gpu.memory_total_bytes)} · driver "
                f"{gpu.driver_version or 'unknown'} · {profile}"
            )
        if len(scan.gpus) > 1:
            st.caption("A cuda run uses GPU 0.")


scan = scan_gpus()
detected_card(scan)

# ------------------------------------------------------------------ options

options = device_options(scan)
with st.container(border=True):
    where, quick_col, limit_col, memory_col = st.columns([1.2, 0.9, 0.9, 1.2])
    device = where.radio(
        "Device",
        options,
        horizontal=True,
        key="validate_device",
        help="auto: the first NVIDIA GPU when torch sees one, else the CPU.",
    )
    if "cuda" not in options:
        where.caption(":material/block: cuda is unavailable: no CUDA GPU found.")
    quick = quick_col.toggle(
        "Quick mode",
        value=True,
        key="validate_quick",
        help="Fewer shapes and repeats: a small model runs in seconds on CPU.",
    )
    kind = expected_kind(device, scan)
    time_limit_s = limit_col.number_input(
        "Time limit (s)",
        min_value=5.0,
        max_value=3600.0,
        value=None,
        step=10.0,
        key="validate_time_limit",
        placeholder=f"default {default_time_limit_s(kind, quick):g}",
        help="Whole-suite time limit in seconds; benchmarks after it are skipped (shown as such, never hidden). "
        "Empty: the default for the device and mode.",
    )
    memory_fraction = memory_col.slider(
        "Memory fraction",
        min_value=0.05,
        max_value=0.9,
        value=0.5,
        step=0.05,
        key="validate_memory_fraction",
        help="Largest fraction of the free memory one allocation step may take; a step that needs more is refused "
        "and reported as oom.",
    )

if kind == "cpu" and slow_on_cpu(model):
    st.warning(
        f"{model.name} has {fmt_count(model.total_params)} parameters: on CPU its real shapes are slow to "
        "benchmark (each layer's weights are allocated and multiplied in fp32), and later checks may hit the "
        f"time limit. Keep quick mode on, or pick a small catalog model such as `{SMALL_CATALOG_MODEL}` in "
        "the sidebar.",
        icon=":material/hourglass_top:",
    )

# ------------------------------------------------------------------ run

if st.button("Run the benchmarks", type="primary", key="validate_start", icon=":material/play_arrow:"):
    bar = st.progress(0.0, text="Starting: importing torch and detecting the device")
    group_area = st.container(key="validate_group_bars")
    group_bars: dict = {}

    def progress(name: str, done: int, total: int) -> None:
        bar.progress(progress_fraction(done, total), text=progress_label(name, done, total))

    def group_progress(group: str, done: int, total: int) -> None:  # one bar per benchmark
        if group not in group_bars:
            group_bars[group] = group_area.progress(0.0)
        group_bars[group].progress(progress_fraction(done, total), text=group_progress_label(group, done, total))

    try:
        from planner.bench import run_validation

        report = run_validation(
            model,
            None,
            device,
            time_limit_s=time_limit_s,
            memory_fraction=memory_fraction,
            quick=quick,
            calibrate=True,
            write_calibration=False,
            progress=progress,
            group_progress=group_progress,
        )
    except NoGPUError as err:
        bar.empty()
        st.error(
            f"The benchmarks did not run: {describe(err)} On this page: choose **cpu** or **auto** above.",
            icon=":material/error:",
        )
        st.stop()
    except ShownError as err:
        bar.empty()
        st.error(f"The benchmarks did not run: {describe(err)}", icon=":material/error:")
        st.stop()
    except ImportError as err:
        bar.empty()
        st.error(
            f"The benchmarks need torch, which could not be imported ({err}). Install torch (the CUDA build for a "
            "GPU, the CPU build otherwise) and start again.",
            icon=":material/error:",
        )
        st.stop()
    except Exception as err:  # noqa: BLE001 - the page shows a message, never a traceback
        bar.empty()
        st.error(
            f"The benchmarks stopped: {describe(err)}. Try quick mode, a lower memory fraction or a smaller "
            "model, and start again.",
            icon=":material/error:",
        )
        st.stop()
    bar.progress(1.0, text=f"Done: {report.summary.checks} checks in {fmt_seconds(report.summary.wall_seconds)}")
    st.session_state[REPORT_KEY] = report.model_dump_json()

if REPORT_KEY not in st.session_state:
    st.info(
        "Press **Run the benchmarks** to measure. Quick mode on CPU takes seconds for a small model.",
        icon=":material/info:",
    )
    st.stop()

report = ValidationReport.model_validate_json(st.session_state[REPORT_KEY])
dev, prof, bench_model, summary = report.device, report.profile, report.model, report.summary

# ------------------------------------------------------------------ what it ran on

st.subheader("What ran")
if bench_model.name != model.name:
    st.info(
        f"This report is for {bench_model.name}; the sidebar now holds {model.name}. Run again to validate it.",
        icon=":material/info:",
    )
with st.container(border=True):
    st.markdown(
        f"**{dev.name}** ({dev.kind}) · {fmt_bytes(dev.memory_total_bytes)} · torch {dev.torch_version} · "
        f"profile **{prof.id}** · {bench_model.name} ({fmt_count(bench_model.params)} parameters) in "
        f"{bench_model.bench_dtype}"
    )
    extras = [
        f"driver {dev.driver_version}" if dev.driver_version else None,
        f"compute capability {dev.compute_capability}" if dev.compute_capability else None,
        f"{dev.cpu_threads} CPU threads" if dev.cpu_threads else None,
        f"started {report.started_at}",
    ]
    st.caption(" · ".join(e for e in extras if e) + f" · profile {prof.origin}: {prof.note}")
    for note in dev.notes + bench_model.notes:
        st.caption(f":material/info: {note}")
    if bench_model.scaled:
        st.warning(
            f"Widths and heads were scaled by {bench_model.models_scale:g}: these are NOT the real model's shapes."
        )

# ------------------------------------------------------------------ predicted vs measured

st.subheader("Predicted vs measured")
head, *numbers = st.columns([1.2, 1, 1, 1])
with head:
    kind_badge(prof.prediction_kind)
    st.caption(
        f"Predictions before calibration: the planner's own roofline over each check's ops, with the "
        f"{prof.id} profile's factors."
    )
numbers[0].metric("Checks", f"{summary.checks}", help=", ".join(f"{k} {v}" for k, v in summary.by_status.items()))
numbers[1].metric(
    "Median |error|",
    "-" if summary.median_abs_error_pct is None else f"{summary.median_abs_error_pct:.0f}%",
    help=Summary.model_fields["median_abs_error_pct"].description,
)
numbers[2].metric("Wall time", fmt_seconds(summary.wall_seconds))
st.caption(
    "Statuses: "
    + ", ".join(f"{k} {v}" for k, v in summary.by_status.items())
    + ". error = (predicted - measured) / measured: positive means the planner over-predicts the time."
)

_FIELD = CheckResult.model_fields
_NUMBER = st.column_config.NumberColumn
st.dataframe(
    checks_table(report),
    hide_index=True,
    key="validate_checks",
    column_config={
        "predicted (s)": _NUMBER(format="%.3g", help=_FIELD["predicted_seconds"].description),
        "measured (s)": _NUMBER(format="%.3g", help=_FIELD["measured_seconds"].description),
        "error (%)": _NUMBER(format="%+.0f%%", help=_FIELD["error_pct"].description),
        "after calibration (%)": _NUMBER(
            format="%+.0f%%", help="The same error with the fitted factors (checks the fit used)."
        ),
        "FLOP/s of peak": _NUMBER(format="percent", help=_FIELD["flops_fraction_of_peak"].description),
        "B/s of peak": _NUMBER(format="percent", help=_FIELD["bytes_fraction_of_peak"].description),
        "why": st.column_config.TextColumn(help=_FIELD["reason"].description),
    },
)

points = chart_points(report)
if points.span is None:
    st.info("No check finished, so there is nothing to chart.", icon=":material/info:")
else:
    plotted(charts.predicted_vs_measured, points, prof.prediction_kind, key="validate_chart")
    st.caption(
        "Points above the line took longer than predicted (the planner under-predicts); below it, less. "
        "Open circles: the same checks predicted with the calibrated factors."
    )

# ------------------------------------------------------------------ utilization

st.subheader("Utilization while it ran")
util = report.utilization
if util.status != "ok":
    st.info(f"Utilization: unavailable ({util.reason}).", icon=":material/info:")
elif not util.readings:
    st.info("Utilization: no readings were taken.", icon=":material/info:")
else:
    st.dataframe(utilization_table(util), hide_index=True, key="validate_utilization")
    st.caption(f"NVML sampled every {fmt_seconds(util.interval_s)}. How a reading implies a bound: {util.rule}.")

# ------------------------------------------------------------------ calibration

st.subheader("Calibration")
cal = report.calibration


def write_fitted() -> None:
    """on_click of the write button: write the dry run's profile, keep the result (or the refusal) in the report."""
    current = ValidationReport.model_validate_json(st.session_state[REPORT_KEY])
    try:
        written = write_calibration(current.calibration)
    except ShownError as err:
        st.session_state[WRITE_ERROR_KEY] = describe(err)
        return
    st.session_state.pop(WRITE_ERROR_KEY, None)
    st.session_state[REPORT_KEY] = current.model_copy(update={"calibration": written}).model_dump_json()


if cal is None:
    st.info("Calibration was not requested.", icon=":material/info:")
else:
    if cal.status == "written":
        st.success(
            f"Wrote the calibrated profile **{cal.profile_id}** to `{cal.file}`."
            + (f" The previous calibration is kept as `{cal.previous_file}`." if cal.previous_file else ""),
            icon=":material/save:",
        )
    elif cal.status == "fitted":
        st.info(calibration_question(cal), icon=":material/help:")
        st.button(
            f"Write {cal.profile_id}",
            key="validate_write",
            type="primary",
            icon=":material/save:",
            on_click=write_fitted,
            help="Save the fitted factors so later plans on this card use them; the current "
            "calibration, if any, is kept dated in calibration-history/.",
        )
    elif cal.status == "refused":
        st.warning(
            f"Calibration refused, nothing can be written: {cal.reason} Run the benchmarks again (on the card the "
            "profile is for, with quick mode off for more shapes) until the fit improves its own checks.",
            icon=":material/block:",
        )
    else:
        st.warning(f"Calibration {cal.status.replace('_', ' ')}: {cal.reason}", icon=":material/warning:")
    if WRITE_ERROR_KEY in st.session_state:
        st.error(f"Not written: {st.session_state[WRITE_ERROR_KEY]}", icon=":material/error:")
    for hit in cal.bounds_hit:
        st.warning(bound_hit_text(hit), icon=":material/straighten:")
    for line in cal.worse_checks:
        st.caption(f":material/trending_down: {plain(line)}")
    if cal.factors_after is not None:
        left, right, use = st.columns([1, 1, 2])
        left.metric(
            "Median |error| before",
            "-" if cal.median_abs_error_pct_before is None else f"{cal.median_abs_error_pct_before:.0f}%",
            help="With the profile's factors, over the checks fitted.",
        )
        right.metric(
            "Median |error| after",
            "-" if cal.median_abs_error_pct_after is None else f"{cal.median_abs_error_pct_after:.0f}%",
            help="With the fitted factors, over the same checks.",
        )
        with use:
            if cal.status == "written":
                kind_badge("calibrated")
                st.markdown(
                    f"Later plans use profile **{cal.profile_id}** (pick it as the sidebar's GPU); its "
                    "predictions are labelled **calibrated**."
                )
                if cal.profile_visible and cal.profile_id in load_profiles():
                    st.button(
                        f"Plan with {cal.profile_id}",
                        key="validate_use_profile",
                        on_click=apply_to_sidebar,
                        args=({"gpu": cal.profile_id},),
                    )
            if cal.note and cal.status == "written":
                st.caption(cal.note)
        st.dataframe(
            factors_table(cal),
            hide_index=True,
            key="validate_factors",
            column_config={
                "before": st.column_config.NumberColumn(format="%.4g"),
                "after": st.column_config.NumberColumn(format="%.4g"),
            },
        )
        if cal.peaks_raised:
            st.caption(
                "Peaks the measurement beat, raised in the calibrated profile: "
                + ", ".join(f"{k} -> {v:.4g}" for k, v in cal.peaks_raised.items())
                + "."
            )

# ------------------------------------------------------------------ download

st.download_button(
    "Download the report (JSON)",
    data=report.model_dump_json(indent=2),
    file_name=report_file_name(report),
    mime="application/json",
    key="validate_download",
    icon=":material/download:",
)
st.caption("The same report as `python -m planner validate MODEL --format json`.")
