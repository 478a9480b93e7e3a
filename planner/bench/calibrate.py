"""Calibration: fit the planner's efficiency factors to what this card measured, and save them.

Each factor is fitted from the checks that depend on it, with predictions made by the planner's
own ``bind`` (``planner.bench.plan.predict``), so the fitted factors are the ones that make the
planner reproduce the measurements:

* peaks first: a card cannot beat its datasheet, so a copy faster than the profile's bandwidth or
  a GEMM faster than its peak means the profile is wrong (the rough ``cpu`` profile, a detected
  card); that peak is raised to the measured value and reported in ``peaks_raised``;
* ``bandwidth_fraction``: copy bytes / (seconds x bandwidth);
* ``kernel_launch_seconds`` / ``graph_launch_seconds``: tiny-kernel time / kernels, eager and graph;
* ``gemm_fraction_small`` and ``gemm_fraction_large``: a grid search over both (log-spaced, then
  refined) minimising the squared log error over every GEMM check; ``gemm_fraction_small`` sets
  M = 1 and ``gemm_fraction_large`` M >= the knee, log-interpolated in between as
  ``roofline.gemm_fraction`` does, so decode-sized (M = 1..16) and prefill-sized checks pin them.
  ``gemm_fraction_small`` is floored at 4 x bandwidth / peak (``small_gemm_floor``) so that slow
  weight streaming is never mistaken for slow math: 4-bit decode GEMMs stay memory-bound. How fast
  decode GEMMs actually stream weights is reported as ``decode_gemm_bandwidth_fraction``, beside the
  copy's, since the planner has one bandwidth factor and it is the copy's;
* ``attention_fraction``: the same 1-D search over the decode-attention checks;
* ``step_overhead_seconds``: measured whole-model decode forward minus the calibrated sum of its
  ops (the layer-vs-sum residual), never below 0. It is the eager PyTorch forward's own overhead on
  this card; an engine's scheduler adds its own on top.

The calibrated profile is the card's profile with these factors (``efficiency.kind:
calibrated``), the raised peaks, and ``calibration_info`` (card, driver, torch, date), written as
``<card>-calibrated.yaml`` into the first ``PLANNER_HARDWARE_DIR`` folder, where ``get_profile`` /
``calibrated_for`` find it; without that variable it goes to the user's calibration folder
(``$PLANNER_CALIBRATION_DIR``, default ``~/.cache/llm-planner/hardware``), which is searched too.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from planner import __version__
from planner.efficiency import Efficiency
from planner.hardware import CALIBRATED_SUFFIX, ENV_VAR, HardwareProfile, calibrated_for, save_profile, user_dir

from planner.bench.plan import CheckPlan, op_totals, predict
from planner.bench.report import CalibrationResult, CheckError, CheckResult, DeviceInfo

_FRACTION_FLOOR = 1e-3


def calibration_folder(folder: str | os.PathLike[str] | None = None) -> Path:
    """Where calibrated profiles go: ``folder``, else PLANNER_HARDWARE_DIR's first entry, else the user cache."""
    if folder:
        return Path(folder).expanduser()
    first = next((p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()), None)
    return Path(first).expanduser() if first else user_dir()


def _on_env_path(folder: Path) -> bool:
    dirs = [Path(p).expanduser().resolve() for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
    return folder.resolve() in dirs + [user_dir().resolve()]


def _log_error(plans: list[tuple[CheckPlan, float]], hw: HardwareProfile, eff: Efficiency) -> float:
    total = 0.0
    for plan, measured in plans:
        predicted = predict(plan, hw, eff)[0]
        total += math.log(max(predicted, 1e-15) / measured) ** 2
    return total


def _grid(lo: float, hi: float, n: int) -> list[float]:
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]


def _search(plans, hw, eff: Efficiency, keys: tuple[str, ...], n: int = 28, floors: dict[str, float] | None = None) -> Efficiency:
    """Grid search (log-spaced, then a finer grid around the best point) over ``keys``, each in [floor, 1]."""
    lows = [min(1.0, max(_FRACTION_FLOOR, (floors or {}).get(k, _FRACTION_FLOOR))) for k in keys]

    def best_over(axes: list[list[float]]) -> tuple[float, ...]:
        best, best_err = None, math.inf
        points: list[tuple[float, ...]] = [()]
        for axis in axes:
            points = [p + (v,) for p in points for v in axis]
        for p in points:
            err = _log_error(plans, hw, eff.model_copy(update=dict(zip(keys, p))))
            if err < best_err:
                best, best_err = p, err
        return best

    first = best_over([_grid(lo, 1.0, n) if lo < 1.0 else [1.0] for lo in lows])
    steps = [(1.0 / lo) ** (1 / (n - 1)) if lo < 1.0 else 1.0 for lo in lows]
    fine = [_grid(max(lo, c / st), min(1.0, c * st), 9) if st > 1.0 else [1.0] for c, lo, st in zip(first, lows, steps)]
    return eff.model_copy(update=dict(zip(keys, best_over(fine))))


def small_gemm_floor(hw: HardwareProfile, eff: Efficiency, dtype: str) -> float:
    """Lowest gemm_fraction_small the fit may choose: 4 x bandwidth / peak.

    An M = 1 GEMM does 2 FLOPs per weight; with 4-bit weights (0.5 byte) that is 4 FLOP/B. Below
    this floor the calibrated planner would call a 4-bit decode GEMM compute-bound, which it is
    not; a fit that wanted to go lower is explaining slow weight streaming, not slow math (see
    ``diagnostics['decode_gemm_bandwidth_fraction']``). H200 bf16: 4 x 4.8e12 x 0.9 / 989e12 = 0.017.
    """
    peak = hw.peak_flops_for(dtype)
    if not peak or not hw.hbm_bandwidth_bytes_per_s:
        return _FRACTION_FLOOR
    return min(1.0, 4.0 * hw.hbm_bandwidth_bytes_per_s * eff.bandwidth_fraction / peak)


def _raise_peaks(ok: list[tuple[CheckPlan, float]], hw: HardwareProfile) -> tuple[HardwareProfile, dict[str, float]]:
    raised: dict[str, float] = {}
    bw = hw.hbm_bandwidth_bytes_per_s
    for plan, t in ok:
        if plan.benchmark == "memory_bandwidth":
            achieved = op_totals(plan)[1] / t
            if bw is None or achieved > bw:
                raised["hbm_bandwidth_bytes_per_s"] = bw = achieved
    peaks = dict(hw.peak_flops_per_s)
    for plan, t in ok:
        if plan.benchmark in ("gemm", "gemm_fp8"):
            dtype = hw.compute_dtype_for(plan.ops[0].op.compute_dtype)
            achieved = op_totals(plan)[0] / t
            if dtype is not None and achieved > peaks.get(dtype, 0.0):
                raised[f"peak_flops_per_s.{dtype}"] = peaks[dtype] = achieved
    if not raised:
        return hw, raised
    sources = dict(hw.sources)
    for key, value in raised.items():
        sources[key] = f"raised to {value:.4g}, measured by planner.bench (the profile's figure was beaten)"
    data = hw.model_dump()
    data.update(hbm_bandwidth_bytes_per_s=bw, peak_flops_per_s=peaks, sources=sources)
    return HardwareProfile.model_validate(data), raised


@dataclass
class Fit:
    """What ``fit_efficiency`` found."""

    efficiency: Efficiency
    profile: HardwareProfile  # the input profile with any beaten peak raised
    fitted_from: dict[str, str] = field(default_factory=dict)
    peaks_raised: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, float] = field(default_factory=dict)


def fit_efficiency(ok: list[tuple[CheckPlan, float]], hw: HardwareProfile, prior: Efficiency,
                   source: str = "measured by planner.bench") -> Fit:
    """Factors from ``ok`` = [(plan, measured seconds)]; factors without checks keep the prior's value."""
    hw, raised = _raise_peaks(ok, hw)
    eff = prior.model_copy(update={"kind": "calibrated", "source": source})
    used: dict[str, str] = {}
    diag: dict[str, float] = {}
    by = lambda bench: [(p, t) for p, t in ok if p.benchmark == bench]  # noqa: E731
    bw = hw.hbm_bandwidth_bytes_per_s

    copies = by("memory_bandwidth")
    if copies and bw:
        frac = min(1.0, max(_FRACTION_FLOOR, statistics.median(op_totals(p)[1] / t / bw for p, t in copies)))
        eff = eff.model_copy(update={"bandwidth_fraction": frac})
        used["bandwidth_fraction"] = ", ".join(p.name for p, _ in copies)
        diag["copy_bandwidth_fraction"] = frac
    for plan, t in by("launch_overhead"):
        key = "graph_launch_seconds" if plan.graphs else "kernel_launch_seconds"
        eff = eff.model_copy(update={key: t / max(1, sum(oc.op.kernels for oc in plan.ops))})
        used[key] = plan.name
    gemms = by("gemm") + by("gemm_fp8")
    if gemms:
        dtype = gemms[0][0].ops[0].op.compute_dtype
        floor = small_gemm_floor(hw, eff, dtype)
        eff = _search(gemms, hw, eff, ("gemm_fraction_small", "gemm_fraction_large"), floors={"gemm_fraction_small": floor})
        ms = [int(p.shape["m"]) for p, _ in gemms]
        used["gemm_fraction_small"] = used["gemm_fraction_large"] = f"{len(gemms)} GEMM checks (M = {min(ms)} .. {max(ms)})"
        diag["gemm_fraction_small_floor"] = floor
        streaming = [(p, t) for p, t in by("gemm") if int(p.shape["m"]) <= 16]
        if streaming and bw:
            diag["decode_gemm_bandwidth_fraction"] = sum(op_totals(p)[1] for p, _ in streaming) / (bw * sum(t for _, t in streaming))
    attention = by("attention_decode")
    if attention:
        eff = _search(attention, hw, eff, ("attention_fraction",), n=60)
        used["attention_fraction"] = f"{len(attention)} decode-attention checks"
    forwards = [(p, t) for p, t in by("layer_forward") if p.step_overhead and p.shape.get("stage") == "decode"]
    if forwards:
        residuals = []
        for plan, t in forwards:
            ops_only = predict(plan, hw, eff.model_copy(update={"step_overhead_seconds": 0.0}))[0]
            residuals.append(t - ops_only)
        diag["decode_forward_residual_seconds"] = statistics.median(residuals)
        fitted = max(0.0, statistics.median(residuals))
        cap = _upper_bound("step_overhead_seconds")
        used["step_overhead_seconds"] = f"median layer-vs-sum residual of {len(forwards)} whole-model decode forward(s)"
        if cap is not None and fitted > cap:
            used["step_overhead_seconds"] += f"; {fitted:.3g} s is above the field's bound, kept at {cap:g} s"
            fitted = cap
        eff = eff.model_copy(update={"step_overhead_seconds": fitted})
    return Fit(Efficiency.model_validate(eff.model_dump()), hw, used, raised, diag)


def _upper_bound(field: str) -> float | None:
    """The ``le`` bound of an Efficiency field, None without one (a fitted value stays inside it)."""
    for rule in Efficiency.model_fields[field].metadata:
        le = getattr(rule, "le", None)
        if le is not None:
            return float(le)
    return None


def calibrated_profile(hw: HardwareProfile, eff: Efficiency, info: dict[str, str]) -> HardwareProfile:
    """``hw`` as ``<id>-calibrated`` with ``eff`` and ``calibration_info``."""
    base = hw.id.removesuffix(CALIBRATED_SUFFIX)
    data = hw.model_dump()
    data.update(
        id=base + CALIBRATED_SUFFIX,
        name=hw.name if hw.name.endswith("(calibrated)") else f"{hw.name} (calibrated)",
        efficiency=eff.model_dump(),
        calibration_info=info,
        notes=(hw.notes + " " if hw.notes else "") + f"Efficiency factors measured on {info.get('card', 'this device')} "
        f"by planner.bench on {info.get('date', '?')}; re-run validate to refresh them.",
    )
    return HardwareProfile.model_validate(data)


def plan_of(check: CheckResult) -> CheckPlan:
    """The plan behind a report row (its ops, launch mode and step overhead), to re-predict it."""
    return CheckPlan(check.benchmark, check.name, dict(check.shape), list(check.ops), graphs=check.graphs,
                     step_overhead=check.includes_step_overhead)


def calibrate_report(
    checks: list[CheckResult],
    hw: HardwareProfile,
    eff_before: Efficiency,
    dev: DeviceInfo,
    model_label: str,
    bench_dtype: str,
    *,
    write: bool = True,
    folder: str | os.PathLike[str] | None = None,
) -> CalibrationResult:
    """Fit on every ok row of ``checks``, compare errors before/after, and (``write``) save the profile."""
    ok = [(plan_of(c), c.measured_seconds) for c in checks if c.ops and c.status == "ok" and c.measured_seconds]
    if not ok:
        return CalibrationResult(status="not_fitted", reason="no check finished, so there is nothing to fit", factors_before=eff_before)
    date = _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    try:
        fit = fit_efficiency(ok, hw, eff_before, source=f"measured on {dev.name} by planner.bench, {date}")
    except Exception as exc:  # noqa: BLE001 - a failed fit is reported, the measurements stand
        return CalibrationResult(status="failed", reason=f"{type(exc).__name__}: {exc}", factors_before=eff_before)
    errors = []
    for plan, t in ok:
        before = predict(plan, hw, eff_before)[0]
        after = predict(plan, fit.profile, fit.efficiency)[0]
        errors.append(CheckError(name=plan.name, measured_seconds=t, predicted_seconds_before=before, predicted_seconds_after=after,
                                 error_pct_before=(before - t) / t * 100, error_pct_after=(after - t) / t * 100))
    result = dict(
        factors_before=eff_before, factors_after=fit.efficiency, fitted_from=fit.fitted_from, peaks_raised=fit.peaks_raised,
        diagnostics=fit.diagnostics, errors=errors,
        median_abs_error_pct_before=statistics.median(abs(e.error_pct_before) for e in errors),
        median_abs_error_pct_after=statistics.median(abs(e.error_pct_after) for e in errors),
    )
    info = {
        "card": dev.name, "device": dev.kind, "driver": dev.driver_version or "n/a", "cuda": dev.cuda_version or "n/a",
        "torch_version": dev.torch_version, "date": date, "model": model_label, "bench_dtype": bench_dtype,
        "planner_version": __version__, "checks_fitted": str(len(ok)),
    }
    profile = calibrated_profile(fit.profile, fit.efficiency, info)
    if not write:
        return CalibrationResult(status="fitted", reason="writing was not requested", profile_id=profile.id, **result)
    target = calibration_folder(folder)
    try:
        path = save_profile(profile, target)
    except OSError as exc:
        return CalibrationResult(status="failed", reason=f"could not write into {target}: {exc}", profile_id=profile.id, **result)
    visible = _on_env_path(target)
    if visible:
        loaded = calibrated_for(hw.id.removesuffix(CALIBRATED_SUFFIX))
        visible = loaded is not None and loaded.is_calibrated
    note = (f"get_profile('{profile.id}') and calibrated_for('{hw.id.removesuffix(CALIBRATED_SUFFIX)}') now load it; predictions "
            "with it are labelled 'calibrated'." if visible else
            f"set {ENV_VAR}={target} so get_profile('{profile.id}') finds it.")
    note += " step_overhead_seconds is the eager forward's own overhead; an engine's scheduler adds to it."
    return CalibrationResult(status="written", file=str(path), profile_id=profile.id, profile_visible=visible, note=note, **result)
