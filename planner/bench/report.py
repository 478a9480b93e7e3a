"""The Validate report: per check, what the planner predicted beside what the card measured.

Every number says what it is. ``predicted_seconds`` comes from ``planner.estimate.roofline.bind``
over the check's own ``Op`` list (kept in the report, so anyone can recompute it);
``measured_seconds`` is a median of timed repeats, or, for the whole-model rows, a sum of measured
parts (``measured_how`` says which). ``error_pct = (predicted - measured) / measured x 100``:
positive means the planner over-predicts the time.

This module imports no torch: the app and the CLI read and draw reports without it.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.hardware import HardwareProfile
from planner.model.ops import Op
from planner.units import fmt_seconds

CheckStatus = Literal["ok", "oom", "timeout", "skipped", "unavailable", "error"]
PredictionKind = Literal["bound", "estimate", "calibrated"]
Detail = float | int | str | bool | None


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DeviceInfo(_Frozen):
    """What the benchmarks ran on, as torch and NVML report it (read-only queries)."""

    kind: Literal["cpu", "cuda"] = Field(description="'cuda' for an NVIDIA GPU, 'cpu' for host-CPU torch; no unit.")
    name: str = Field(description="Device name as torch/NVML report it, e.g. 'NVIDIA H200', or the CPU model; no unit.")
    index: int | None = Field(None, description="CUDA device index; None on CPU.")
    pci_bus_id: str | None = Field(
        None, description="PCI bus id of the GPU ('00000000:65:00.0'), used to find it in NVML; None on CPU."
    )
    memory_total_bytes: int | None = Field(
        None, description="Total memory: torch.cuda.mem_get_info()[1] on a GPU, MemTotal on CPU, in bytes."
    )
    memory_free_bytes: int | None = Field(
        None,
        description="Free memory when detected: mem_get_info()[0] on a GPU; on CPU the smaller of MemAvailable and "
        "the memory cgroup's headroom (a container's cap), in bytes.",
    )
    nvml_memory_total_bytes: int | None = Field(
        None, description="Total that NVML / nvidia-smi reports, in bytes; None without NVML."
    )
    compute_capability: str | None = Field(None, description="CUDA compute capability, e.g. '9.0'; None on CPU.")
    multiprocessors: int | None = Field(None, description="Streaming multiprocessors on the GPU, a count; None on CPU.")
    l2_cache_bytes: int | None = Field(
        None, description="Last-level cache (GPU L2, CPU L3) in bytes, used to size rotated inputs."
    )
    driver_version: str | None = Field(None, description="NVIDIA driver version from NVML; None when unknown.")
    cuda_version: str | None = Field(
        None, description="CUDA runtime torch was built with (torch.version.cuda); None on CPU builds."
    )
    torch_version: str = Field(description="torch.__version__ of the run; no unit.")
    sm_clock_mhz: int | None = Field(None, description="Current SM clock from NVML, in MHz (read, never set).")
    sm_clock_max_mhz: int | None = Field(None, description="Maximum SM clock from NVML, in MHz.")
    memory_clock_mhz: int | None = Field(None, description="Current memory clock from NVML, in MHz.")
    power_limit_watts: float | None = Field(
        None, description="Enforced power limit from NVML, in watts (read, never set)."
    )
    cpu_threads: int | None = Field(None, description="Threads torch uses on CPU (torch.get_num_threads()), a count.")
    fp8_supported: bool = Field(
        False, description="torch._scaled_mm with float8_e4m3fn can run here (compute capability >= 8.9)."
    )
    cuda_graphs_supported: bool = Field(False, description="CUDA graphs can be captured here (any CUDA device).")
    notes: tuple[str, ...] = Field((), description="What could not be read, and why; free text.")


class ProfileInfo(_Frozen):
    """Which hardware profile the predictions used, and how it was chosen."""

    id: str = Field(description="Hardware profile id, e.g. 'h200' or 'cpu'; no unit.")
    name: str = Field(description="Profile's card name; no unit.")
    origin: Literal["given", "matched", "cpu", "detected"] = Field(
        description="'given' by the caller, 'matched' to the detected device name, 'cpu' (the host profile), or "
        "'detected' (no profile matched; peaks measured by a probe copy and GEMM); no unit."
    )
    prediction_kind: PredictionKind = Field(
        description="What the predictions before calibration are: 'bound', 'estimate' (planner defaults) or "
        "'calibrated'."
    )
    hbm_bandwidth_bytes_per_s: float | None = Field(description="Profile's peak memory bandwidth, bytes/s.")
    peak_flops_per_s: dict[str, float] = Field(description="Profile's dense peaks per dtype, FLOP/s.")
    efficiency: Efficiency = Field(description="Efficiency factors the 'before' predictions used.")
    note: str = Field("", description="Why this profile (or that none matched); free text.")


class ModelInfo(_Frozen):
    """The model whose shapes the benchmarks use."""

    name: str = Field(description="Model name as given; no unit.")
    hidden_size: int = Field(description="Model width h used by the benchmarks, in elements (after models_scale).")
    num_layers: int = Field(description="Decoder layers, a count (never scaled).")
    checkpoint_dtype: str = Field(description="Dtype the checkpoint is served in (bf16, fp16).")
    bench_dtype: str = Field(
        description="Dtype the benchmarks ran in (the checkpoint's on a GPU; fp32 by default on CPU)."
    )
    models_scale: float = Field(
        description="Factor applied to widths and head counts (1.0 = the real model); unitless."
    )
    scaled: bool = Field(description="True when models_scale != 1: the shapes are NOT the real model's.")
    params: int = Field(description="Parameters of the (possibly scaled) model, a count.")
    notes: tuple[str, ...] = Field((), description="What the benchmarks leave out for this model; free text.")


class SuiteSizes(_Frozen):
    """Sizes and repeat counts of the suite (``planner.bench.suite.default_sizes`` picks safe defaults)."""

    copy_bytes: int = Field(description="Bytes of the source buffer of the bandwidth copy (traffic is twice that).")
    gemm_prefill_tokens: tuple[int, ...] = Field(description="GEMM rows M for prefill-shaped GEMMs, in tokens.")
    gemm_decode_tokens: tuple[int, ...] = Field(description="GEMM rows M for decode-shaped GEMMs (= batch), in tokens.")
    attention_batches: tuple[int, ...] = Field(description="Batch sizes of the decode-attention checks, in sequences.")
    attention_contexts: tuple[int, ...] = Field(description="KV lengths of the decode-attention checks, in tokens.")
    layer_prefill_tokens: tuple[int, ...] = Field(
        description="Prompt lengths of the layer prefill checks (batch 1), in tokens."
    )
    layer_decode: tuple[tuple[int, int], ...] = Field(description="(batch, context tokens) of the layer decode checks.")
    kv_alloc_cap_bytes: int | None = Field(
        description="Largest KV-cache allocation tried, in bytes; None: the guard alone limits it."
    )
    launches: int = Field(description="Tiny kernels per timed call in the launch-overhead checks, a count.")
    warmup: int = Field(ge=0, description="Untimed calls before timing, a count.")
    repeats: int = Field(ge=1, description="Timed calls per check (the median is reported), a count.")
    max_seconds_per_check: float = Field(
        gt=0, description="Stop repeating once the timed calls of one check exceed this, in seconds (>= 1 call)."
    )
    rotation_cache_multiple: float = Field(
        description="Rotated input sets are allocated until they span this many times the last-level cache; unitless."
    )
    max_rotation_slots: int = Field(ge=1, description="Most copies of the inputs rotated between calls, a count.")


class OpCount(_Frozen):
    """One planner op and how many times the check runs it."""

    op: Op = Field(description="The planner's op (FLOPs and bytes), as planner.model builds it.")
    count: int = Field(ge=1, description="Occurrences in the check (e.g. layers of a group), a count.")


class CheckResult(_Frozen):
    """One benchmark check: planner prediction vs measurement."""

    benchmark: str = Field(
        description="Benchmark group: memory_bandwidth, launch_overhead, gemm, gemm_fp8, attention_decode, "
        "layer_forward, kv_cache."
    )
    name: str = Field(description="Check name with its shape, e.g. 'gemm mlp.gate_up_proj M=512'; no unit.")
    shape: dict[str, Detail] = Field(description="The shape that was run: M/N/K, batch, context, bytes, dtype ...")
    ops: list[OpCount] = Field(description="The planner ops whose bound times sum to predicted_seconds.")
    graphs: bool = Field(description="Ops bound with CUDA-graph launch cost (True) or eager launch cost (False).")
    includes_step_overhead: bool = Field(
        description="predicted_seconds adds the efficiency's step_overhead_seconds (whole-model forward rows)."
    )
    predicted_seconds: float | None = Field(
        description="Sum over ops of count x bind(op).seconds (+ step overhead), in seconds."
    )
    predicted_kind: PredictionKind = Field(
        description="bound, estimate or calibrated: which efficiency factors predicted it."
    )
    predicted_bound: str | None = Field(
        description="Ceiling that binds the op with the largest share of the predicted time."
    )
    measured_seconds: float | None = Field(
        None, description="Median of timed repeats (or the derived sum), in seconds; None unless status is ok."
    )
    measured_how: str | None = Field(
        None, description="How measured_seconds was obtained (timer, repeats, or the parts it sums); free text."
    )
    repeats: int | None = Field(None, description="Timed repeats behind the median, a count.")
    error_pct: float | None = Field(
        None, description="(predicted - measured) / measured x 100, in percent; positive over-predicts."
    )
    achieved_flops_per_s: float | None = Field(None, description="Op FLOPs / measured seconds, FLOP/s.")
    achieved_bytes_per_s: float | None = Field(None, description="Op bytes / measured seconds, bytes/s.")
    flops_fraction_of_peak: float | None = Field(
        None, description="achieved_flops_per_s / the profile's dense peak for the math dtype; unitless."
    )
    bytes_fraction_of_peak: float | None = Field(
        None, description="achieved_bytes_per_s / the profile's memory bandwidth; unitless."
    )
    status: CheckStatus = Field(
        description="ok, oom (guard refused or out of memory), timeout, skipped, unavailable, error."
    )
    reason: str | None = Field(None, description="Why the status is not ok (with the numbers), or a caveat; free text.")
    details: dict[str, Detail] = Field(
        default_factory=dict, description="Extra numbers of the check (units in the key names)."
    )


class UtilizationReading(_Frozen):
    """NVML utilization averaged over one benchmark group, and what it implies."""

    benchmark: str = Field(description="Benchmark group the samples were taken during.")
    samples: int = Field(description="NVML samples taken, a count.")
    gpu_util_pct: float | None = Field(description="Mean NVML 'gpu' utilization: % of time a kernel was running.")
    memory_util_pct: float | None = Field(
        description="Mean NVML 'memory' utilization: % of time device memory was read or written."
    )
    diagnosis: str | None = Field(
        description="compute-bound, memory-bound, overhead/scheduling-bound or mixed; None without samples."
    )


class UtilizationReport(_Frozen):
    """Utilization sampled by NVML in a background thread while the benchmarks ran."""

    status: Literal["ok", "unavailable"] = Field(
        description="'unavailable' when NVML could not be used (reason says why)."
    )
    reason: str | None = Field(None, description="Why sampling was unavailable; free text.")
    interval_s: float = Field(description="Sampling period, in seconds.")
    readings: list[UtilizationReading] = Field(default_factory=list, description="One reading per benchmark group.")
    rule: str = Field(
        "gpu >= 60% and memory < 30%: compute-bound; memory >= 60%: memory-bound; both < 30%: "
        "overhead/scheduling-bound; "
        "otherwise mixed",
        description="How diagnoses are read from the two utilizations; free text.",
    )


class CheckError(_Frozen):
    """One check's error before and after calibration."""

    name: str = Field(description="Check name.")
    measured_seconds: float = Field(description="Measured time, in seconds.")
    predicted_seconds_before: float = Field(description="Prediction with the profile's factors, in seconds.")
    predicted_seconds_after: float = Field(description="Prediction with the calibrated factors, in seconds.")
    error_pct_before: float = Field(description="(before - measured) / measured x 100, in percent.")
    error_pct_after: float = Field(description="(after - measured) / measured x 100, in percent.")


class BoundHit(_Frozen):
    """A fitted factor that left its physical range and was clipped to it
    (``planner.bench.calibrate.FACTOR_BOUNDS``)."""

    factor: str = Field(description="Efficiency field, e.g. 'step_overhead_seconds'; no unit.")
    fitted: float = Field(description="The value the measurements asked for, in the factor's unit (see 'unit').")
    clipped_to: float = Field(description="The bound it was clipped to (the value kept), in the factor's unit.")
    side: Literal["low", "high"] = Field(
        description="'low': the fit wanted less than the lower bound; 'high': more than the upper."
    )
    unit: str = Field(description="Unit of fitted and clipped_to: 'fraction' (of a peak) or 'seconds'.")
    reason: str = Field(
        description="Why the bound holds on a GPU and what a fit beyond it says about the measurement; free text."
    )


class CalibrationResult(_Frozen):
    """Efficiency factors fitted to the measurements, and the profile written (or that would be written) with them."""

    status: Literal["written", "fitted", "refused", "not_fitted", "failed"] = Field(
        description="'written' (profile saved), 'fitted' (a dry run: not saved, 'target_file' says where it would go), "
        "'refused' (the fit makes its own checks worse: nothing may be written), 'not_fitted' (no usable checks), "
        "'failed'."
    )
    reason: str | None = Field(None, description="Why it was not written or fitted; free text.")
    factors_before: Efficiency = Field(description="Factors the predictions used before calibration.")
    factors_after: Efficiency | None = Field(None, description="Fitted factors (kind 'calibrated').")
    fitted_from: dict[str, str] = Field(
        default_factory=dict, description="Factor name -> the checks it was fitted from; free text."
    )
    peaks_raised: dict[str, float] = Field(
        default_factory=dict,
        description="Profile peaks the card beat and that were raised to the measured value (key "
        "'hbm_bandwidth_bytes_per_s' or "
        "'peak_flops_per_s.<dtype>'), in bytes/s or FLOP/s.",
    )
    diagnostics: dict[str, float] = Field(
        default_factory=dict,
        description="Numbers behind the fit (units in the names): copy_bandwidth_fraction, "
        "decode_gemm_bandwidth_fraction (weights "
        "streamed by M <= 16 GEMMs / (seconds x bandwidth)), gemm_fraction_small_floor, "
        "decode_forward_residual_seconds.",
    )
    errors: list[CheckError] = Field(default_factory=list, description="Per check: error before and after.")
    median_abs_error_pct_before: float | None = Field(
        None, description="Median |error| over the checks, before, in percent."
    )
    median_abs_error_pct_after: float | None = Field(
        None, description="Median |error| over the checks, after, in percent."
    )
    bounds_hit: list[BoundHit] = Field(
        default_factory=list,
        description="Factors clipped to their physical range: the measurement behind each is suspect.",
    )
    worse_checks: list[str] = Field(
        default_factory=list,
        description="Checks the fit leaves more than WORSE_CHECK_FACTOR times further off than before; "
        "any, or a higher median |error|, refuses the fit. Free text with the numbers.",
    )
    profile: HardwareProfile | None = Field(
        None,
        description="The calibrated profile ('<card>-calibrated') as written, or as a dry run would write it; None "
        "without a fit.",
    )
    file: str | None = Field(None, description="Path of the calibrated profile YAML written; None when not written.")
    target_file: str | None = Field(
        None,
        description="Where the profile goes ('<folder>/<card>-calibrated.yaml'): written "
        "there, or would be by a dry run.",
    )
    previous_file: str | None = Field(
        None,
        description="The earlier calibration of this card, kept dated under '<folder>/calibration-history/' (written), "
        "or "
        "where it would be kept (dry run); None when there was none.",
    )
    profile_id: str | None = Field(None, description="Id of the calibrated profile ('<card>-calibrated').")
    profile_visible: bool = Field(
        False,
        description="True when the file's folder is searched (PLANNER_HARDWARE_DIR or the calibration folder), so "
        "get_profile finds it.",
    )
    note: str = Field("", description="How to use the calibrated profile, and its limits; free text.")


class SuiteSettings(_Frozen):
    """Limits the suite ran under."""

    time_limit_s: float = Field(description="Whole-suite time limit, in seconds; benchmarks after it are skipped.")
    benchmark_time_limit_s: float = Field(
        description="Time limit of one benchmark group, in seconds; its later checks time out."
    )
    memory_fraction: float = Field(
        description="Largest fraction of the free memory one allocation step may take; unitless."
    )
    sizes: SuiteSizes = Field(description="Sizes and repeats used.")


class Summary(_Frozen):
    """Counts and the headline error."""

    checks: int = Field(description="Checks planned, a count.")
    by_status: dict[str, int] = Field(description="Checks per status, counts.")
    median_abs_error_pct: float | None = Field(
        description="Median |error_pct| over ok checks, before calibration, in percent."
    )
    wall_seconds: float = Field(description="Wall time of the whole validation, in seconds.")


class ValidationReport(_Frozen):
    """Everything the Validate page and ``python -m planner validate`` show."""

    device: DeviceInfo = Field(description="The device the benchmarks ran on.")
    profile: ProfileInfo = Field(description="The hardware profile the predictions used.")
    model: ModelInfo = Field(description="The model whose shapes were benchmarked.")
    settings: SuiteSettings = Field(description="Time and memory limits, sizes.")
    checks: list[CheckResult] = Field(description="One row per check: predicted vs measured.")
    utilization: UtilizationReport = Field(description="NVML utilization while the benchmarks ran, or why unavailable.")
    calibration: CalibrationResult | None = Field(
        description="Fitted factors and errors before/after; None when not requested."
    )
    summary: Summary = Field(description="Counts and the headline error.")
    started_at: str = Field(description="UTC start time, ISO 8601.")


# ------------------------------------------------------------------------------ rendering


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0f}%"


def _frac(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.0%}"


def render_table(report: ValidationReport) -> str:
    """Plain-text table: predicted first, then measured, error, achieved fractions, status."""
    dev, prof = report.device, report.profile
    lines = [
        f"device: {dev.name} ({dev.kind}, torch {dev.torch_version}"
        + (f", driver {dev.driver_version}" if dev.driver_version else "")
        + ")",
        f"profile: {prof.id} ({prof.origin}; predictions: {prof.prediction_kind})",
        f"model: {report.model.name}, bench dtype {report.model.bench_dtype}"
        + (f", dims x{report.model.models_scale:g} (SCALED, not the real model)" if report.model.scaled else ""),
        "",
    ]
    cal = report.calibration
    after = {e.name: e for e in cal.errors} if cal else {}
    header = (
        f"{'check':<52} {'predicted':>10} {'measured':>10} {'error':>7} {'after cal':>9} "
        f"{'FLOP/s':>7} {'B/s':>6}  status"
    )
    lines += [header, "-" * len(header)]
    for c in report.checks:
        e = after.get(c.name)
        lines.append(
            f"{c.name[:52]:<52} {fmt_seconds(c.predicted_seconds):>10} "
            f"{fmt_seconds(c.measured_seconds) if c.measured_seconds else '-':>10} "
            f"{_pct(c.error_pct):>7} {_pct(e.error_pct_after) if e else '-':>9} {_frac(c.flops_fraction_of_peak):>7} "
            f"{_frac(c.bytes_fraction_of_peak):>6}  {c.status}"
            + (f": {c.reason}" if c.status != "ok" and c.reason else "")
        )
    lines.append("")
    s = report.summary
    lines.append(
        f"{s.checks} checks: "
        + ", ".join(f"{k} {v}" for k, v in s.by_status.items())
        + f"; median |error| {_pct(s.median_abs_error_pct).lstrip('+')} in {s.wall_seconds:.1f} s"
    )
    util = report.utilization
    if util.status == "ok":
        for r in util.readings:
            lines.append(
                f"utilization {r.benchmark}: gpu {r.gpu_util_pct if r.gpu_util_pct is not None else '-'}%, "
                f"memory {r.memory_util_pct if r.memory_util_pct is not None else '-'}% -> "
                f"{r.diagnosis or 'no samples'}"
            )
    else:
        lines.append(f"utilization: unavailable ({util.reason})")
    if cal is not None:
        lines.append(
            f"calibration: {cal.status}; median |error| {_pct(cal.median_abs_error_pct_before).lstrip('+')} before -> "
            f"{_pct(cal.median_abs_error_pct_after).lstrip('+')} after"
            + (f"; wrote {cal.file}" if cal.file else "")
            + (f" ({cal.reason})" if cal.reason else "")
        )
        for h in cal.bounds_hit:
            lines.append(
                f"  {h.factor}: fitted {h.fitted:.3g}, kept {h.clipped_to:.3g} {h.unit} ({h.side} bound): {h.reason}"
            )
        if cal.note:
            lines.append(f"  {cal.note}")
    return "\n".join(lines)
