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

Every fitted factor is then held to a physical range (``FACTOR_BOUNDS``: fractions in (0, 1] with
a floor below which the check was not measuring what it names, launch costs in microseconds, the
step overhead at most 50 ms). A factor that leaves its range is clipped to it and listed in
``bounds_hit`` with the value the measurement asked for and what that says about the measurement
(on a CPU device: its timings are not a GPU's).

A fit must make its own checks better: if the calibrated predictions' median |error| over the
fitted checks is above the uncalibrated one, or any check ends ``WORSE_CHECK_FACTOR`` times further
off than before, the fit is ``refused`` with the numbers, and nothing can be written.

Writing is a separate, explicit step (``write_calibration``; ``calibrate_report(write=True)``): a
dry run (the default) returns the profile and says where it would go. The calibrated profile is
the card's profile with the factors (``efficiency.kind: calibrated``), the raised peaks, and
``calibration_info`` (card, driver, torch, date and time), written as ``<card>-calibrated.yaml``
into the first ``PLANNER_HARDWARE_DIR`` folder, where ``get_profile`` / ``calibrated_for`` find it;
without that variable it goes to the user's calibration folder (``$PLANNER_CALIBRATION_DIR``,
default ``~/.cache/llm-planner/hardware``), which is searched too. An earlier calibration there is
never overwritten: it moves to ``<folder>/calibration-history/<card>-calibrated-<UTC time>.yaml``
(a subfolder, so the profile loader does not read it; ``calibration_history`` lists them).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from planner import __version__
from planner.bench.plan import CheckPlan, op_totals, predict
from planner.bench.report import BoundHit, CalibrationResult, CheckError, CheckResult, DeviceInfo
from planner.efficiency import Efficiency
from planner.errors import PlannerError
from planner.hardware import CALIBRATED_SUFFIX, ENV_VAR, HardwareProfile, calibrated_for, save_profile, user_dir

_FRACTION_FLOOR = 1e-3

#: A check the fit leaves this many times further off than before (max(p/m, m/p) after / before) refuses the fit.
#: Healthy fits move single checks up to about 3x (44 repeated tiny CPU runs, 2026-12: at most 3.3x), so 4x
#: separates a fit that breaks a check from noise; the issue that asked for this saw checks 5-10x worse.
WORSE_CHECK_FACTOR = 4.0

#: Subfolder of the calibration folder where earlier calibrations are kept, dated (the profile loader skips it).
HISTORY_DIR = "calibration-history"


class CalibrationRefusedError(PlannerError):
    """A calibration that must not be written: refused (it makes its own checks worse) or never fitted."""


# ------------------------------------------------------------------------- physical ranges


@dataclass(frozen=True)
class FactorBound:
    """The range a fitted factor can take on a real GPU, and what a fit outside it says about the measurement."""

    low: float
    high: float
    unit: str  # 'fraction' (of a datasheet peak) or 'seconds'
    low_means: str
    high_means: str
    source: str


#: One row per fitted Efficiency field. Fractions: above 1 the datasheet was beaten (the fit raises the
#: peak instead); below the floor the check did not run the kernel it names at speed. Overheads: the
#: published ranges, with a margin of about 10x.
FACTOR_BOUNDS: dict[str, FactorBound] = {
    "bandwidth_fraction": FactorBound(
        0.3,
        1.0,
        "fraction",
        low_means="the copy did not stream memory at HBM speed (a buffer held in cache, another job on the card, or no "
        "HBM)",
        high_means="the copy beat the datasheet bandwidth, so the profile's figure is wrong",
        source="streaming copies reach 0.6-0.85 of the datasheet bandwidth (shared/reference/hardware.md, notes)",
    ),
    "gemm_fraction_large": FactorBound(
        0.2,
        1.0,
        "fraction",
        low_means="large GEMMs ran far below the dense peak (not on the dtype's tensor cores, a throttled card, or no "
        "tensor cores)",
        high_means="a GEMM beat the datasheet peak, so the profile's figure is wrong",
        source="cuBLAS GEMMs with M >= 1024 reach 0.6-0.85 of dense peak (the fitted defaults, docs/calibration.md)",
    ),
    "gemm_fraction_small": FactorBound(
        0.005,
        1.0,
        "fraction",
        low_means="M = 1 GEMMs ran slower than streaming their weights explains (a launch-bound or non-GPU device)",
        high_means="a GEMM beat the datasheet peak, so the profile's figure is wrong",
        source="below 0.5% of peak an M = 1 GEMM's math would outlast its weight stream on every profiled card; "
        "floored further at 4 x bandwidth / peak (small_gemm_floor)",
    ),
    "attention_fraction": FactorBound(
        0.05,
        1.0,
        "fraction",
        low_means="decode attention ran at under 5% of the card's bandwidth (a naive kernel, a launch-bound shape, or "
        "no GPU)",
        high_means="attention beat the datasheet, so the profile's figure is wrong",
        source="decode attention streams KV at 0.5-0.9 of HBM bandwidth (docs/calibration.md, 'One attention factor')",
    ),
    "kernel_launch_seconds": FactorBound(
        2e-6,
        50e-6,
        "seconds",
        low_means="launches were faster than a CUDA driver's few microseconds: the check timed queued work, not "
        "launches",
        high_means="each launch took longer than on a serving host (a busy or slow host, a debug build, or not a GPU's "
        "launches)",
        source="an eager CUDA launch costs a few microseconds of host time (the global fit: 6.8 us, "
        "docs/calibration.md)",
    ),
    "graph_launch_seconds": FactorBound(
        0.2e-6,
        20e-6,
        "seconds",
        low_means="a kernel took less GPU time than a launch's tail: the timer missed work",
        high_means="each tiny kernel took longer than a GPU's launch latency (a busy card, or not a GPU)",
        source="a kernel in a replayed CUDA graph costs 0.4-4 us of GPU time (the fits in docs/calibration.md)",
    ),
    "step_overhead_seconds": FactorBound(
        0.0,
        50e-3,
        "seconds",
        low_means="the calibrated ops already take longer than the measured whole forward",
        high_means="the forward spends time its ops do not explain, more than any engine's host step (Python, the "
        "allocator, "
        "or a device whose ops are not a GPU's)",
        source="vLLM's host work is about 5 ms per step (Llama-8B, H100) and 7 ms on Tenstorrent "
        "(shared/reference/engines.md, "
        "section 1); 50 ms is 10x that",
    ),
}


def bound_hit(
    factor: str, wanted: float, low: float | None = None, device_kind: str = "cuda", floor_note: str | None = None
) -> BoundHit | None:
    """``wanted`` against ``FACTOR_BOUNDS[factor]`` (lower bound raised to ``low`` when given): the hit, or None inside.

    The reason names the bound's source and what a fit beyond it means; on a CPU device it adds
    that the timings are not a GPU's, so no GPU's range is expected to hold.
    """
    b = FACTOR_BOUNDS[factor]
    lo = b.low if low is None else max(b.low, low)
    if lo <= wanted <= b.high:
        return None
    side = "low" if wanted < lo else "high"
    reason = (b.low_means if side == "low" else b.high_means) + f"; range {lo:.3g} .. {b.high:.3g} {b.unit}: "
    reason += floor_note if side == "low" and floor_note and lo > b.low else b.source
    if device_kind != "cuda":
        reason = f"{device_kind.upper()} device: timings are not a GPU's; " + reason
    return BoundHit(
        factor=factor, fitted=wanted, clipped_to=lo if side == "low" else b.high, side=side, unit=b.unit, reason=reason
    )


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


def _search(
    plans, hw, eff: Efficiency, keys: tuple[str, ...], n: int = 28, floors: dict[str, float] | None = None
) -> Efficiency:
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
        if best is None:  # every error NaN: a measured time that is not a number
            raise PlannerError(f"calibration of {', '.join(keys)}: no grid point gives a finite error.")
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
    bounds_hit: list[BoundHit] = field(default_factory=list)


def _clipped(hit: BoundHit | None, value: float, hits: list[BoundHit]) -> float:
    """``value``, or the bound it hit (recorded in ``hits``)."""
    if hit is None:
        return value
    hits.append(hit)
    return hit.clipped_to


def _search_bounded(
    plans,
    hw,
    eff: Efficiency,
    keys: tuple[str, ...],
    hits: list[BoundHit],
    device_kind: str,
    n: int = 28,
    floors: dict[str, float] | None = None,
    floor_note: str | None = None,
) -> Efficiency:
    """``_search`` over the full (0, 1] range; a key that lands outside its bound is reported and held at it.

    Holding one key can push another out (a GEMM fraction floored at M = 1 drags the large-M one
    down), so the search repeats, at most once per key, until no free key leaves its range.
    """
    held: dict[str, float] = {}
    for _ in range(len(keys) + 1):
        found = _search(plans, hw, eff, keys, n=n, floors={k: held.get(k, _FRACTION_FLOOR) for k in keys})
        new = [
            h
            for k in keys
            if k not in held
            and (h := bound_hit(k, getattr(found, k), (floors or {}).get(k), device_kind, floor_note)) is not None
        ]
        if not new:
            return found
        hits.extend(new)
        held.update({h.factor: h.clipped_to for h in new})
    return found


def fit_efficiency(
    ok: list[tuple[CheckPlan, float]],
    hw: HardwareProfile,
    prior: Efficiency,
    source: str = "measured by planner.bench",
    device_kind: str = "cuda",
) -> Fit:
    """Factors from ``ok`` = [(plan, measured seconds)], each held to ``FACTOR_BOUNDS``;
    factors without checks keep the prior's value."""
    hw, raised = _raise_peaks(ok, hw)
    eff = prior.model_copy(update={"kind": "calibrated", "source": source})
    used: dict[str, str] = {}
    diag: dict[str, float] = {}
    hits: list[BoundHit] = []
    by = lambda bench: [(p, t) for p, t in ok if p.benchmark == bench]  # noqa: E731
    bw = hw.hbm_bandwidth_bytes_per_s

    copies = by("memory_bandwidth")
    if copies and bw:
        frac = statistics.median(op_totals(p)[1] / t / bw for p, t in copies)
        diag["copy_bandwidth_fraction"] = frac
        frac = _clipped(bound_hit("bandwidth_fraction", frac, device_kind=device_kind), frac, hits)
        eff = eff.model_copy(update={"bandwidth_fraction": frac})
        used["bandwidth_fraction"] = ", ".join(p.name for p, _ in copies)
    for plan, t in by("launch_overhead"):
        key = "graph_launch_seconds" if plan.graphs else "kernel_launch_seconds"
        per_kernel = t / max(1, sum(oc.op.kernels for oc in plan.ops))
        eff = eff.model_copy(
            update={key: _clipped(bound_hit(key, per_kernel, device_kind=device_kind), per_kernel, hits)}
        )
        used[key] = plan.name
    eager = [t / max(1, sum(oc.op.kernels for oc in p.ops)) for p, t in by("launch_overhead") if not p.graphs]
    if eager and "graph_launch_seconds" not in used and min(eager) < eff.graph_launch_seconds:
        # An eager tiny kernel lasts max(host launch, GPU time per kernel): one measured faster than the
        # prior's GPU floor proves the floor is at most that (else the eager fit could not be met).
        floor = min(eager)
        hit = bound_hit("graph_launch_seconds", floor, device_kind=device_kind)
        eff = eff.model_copy(update={"graph_launch_seconds": _clipped(hit, floor, hits)})
        used["graph_launch_seconds"] = f"at most the eager per-kernel time ({used['kernel_launch_seconds']})"
    gemms = by("gemm") + by("gemm_fp8")
    if gemms:
        dtype = gemms[0][0].ops[0].op.compute_dtype
        floor = small_gemm_floor(hw, eff, dtype)
        note = (
            f"floored at 4 x bandwidth / peak = {floor:.3g} so that 4-bit decode GEMMs stay memory-bound; a lower fit "
            "explains slow weight streaming, not slow math (see decode_gemm_bandwidth_fraction)"
        )
        eff = _search_bounded(
            gemms,
            hw,
            eff,
            ("gemm_fraction_small", "gemm_fraction_large"),
            hits,
            device_kind,
            floors={"gemm_fraction_small": floor},
            floor_note=note,
        )
        ms = [p.count("m") for p, _ in gemms]
        used["gemm_fraction_small"] = used["gemm_fraction_large"] = (
            f"{len(gemms)} GEMM checks (M = {min(ms)} .. {max(ms)})"
        )
        diag["gemm_fraction_small_floor"] = floor
        streaming = [(p, t) for p, t in by("gemm") if p.count("m") <= 16]
        if streaming and bw:
            diag["decode_gemm_bandwidth_fraction"] = sum(op_totals(p)[1] for p, _ in streaming) / (
                bw * sum(t for _, t in streaming)
            )
    attention = by("attention_decode")
    if attention:
        eff = _search_bounded(attention, hw, eff, ("attention_fraction",), hits, device_kind, n=60)
        used["attention_fraction"] = f"{len(attention)} decode-attention checks"
    forwards = [(p, t) for p, t in by("layer_forward") if p.step_overhead and p.shape.get("stage") == "decode"]
    if forwards:
        ops_only = eff.model_copy(update={"step_overhead_seconds": 0.0})
        residual = statistics.median(t - predict(plan, hw, ops_only)[0] for plan, t in forwards)
        diag["decode_forward_residual_seconds"] = residual
        hit = bound_hit("step_overhead_seconds", residual, device_kind=device_kind)
        eff = eff.model_copy(update={"step_overhead_seconds": _clipped(hit, residual, hits)})
        used["step_overhead_seconds"] = f"median layer-vs-sum residual of {len(forwards)} whole-model decode forward(s)"
    return Fit(Efficiency.model_validate(eff.model_dump()), hw, used, raised, diag, hits)


def calibrated_profile(hw: HardwareProfile, eff: Efficiency, info: dict[str, str]) -> HardwareProfile:
    """``hw`` as ``<id>-calibrated`` with ``eff`` and ``calibration_info``."""
    base = hw.id.removesuffix(CALIBRATED_SUFFIX)
    data = hw.model_dump()
    data.update(
        id=base + CALIBRATED_SUFFIX,
        name=hw.name if hw.name.endswith("(calibrated)") else f"{hw.name} (calibrated)",
        efficiency=eff.model_dump(),
        calibration_info=info,
        notes=(hw.notes + " " if hw.notes else "")
        + f"Efficiency factors measured on {info.get('card', 'this device')} "
        f"by planner.bench on {info.get('date', '?')}; re-run validate to refresh them.",
    )
    return HardwareProfile.model_validate(data)


def plan_of(check: CheckResult) -> CheckPlan:
    """The plan behind a report row (its ops, launch mode and step overhead), to re-predict it."""
    return CheckPlan(
        check.benchmark,
        check.name,
        dict(check.shape),
        list(check.ops),
        graphs=check.graphs,
        step_overhead=check.includes_step_overhead,
    )


def _off(predicted: float, measured: float) -> float:
    """How many times off a prediction is, >= 1 (2.0 for half or twice the measurement)."""
    ratio = max(predicted, 1e-15) / measured
    return max(ratio, 1.0 / ratio)


def check_errors(
    ok: list[tuple[CheckPlan, float]],
    hw_before: HardwareProfile,
    eff_before: Efficiency,
    hw_after: HardwareProfile,
    eff_after: Efficiency,
) -> list[CheckError]:
    """Each check predicted before (the profile's factors) and after (the fitted ones), against its measurement."""
    errors = []
    for plan, t in ok:
        before = predict(plan, hw_before, eff_before)[0]
        after = predict(plan, hw_after, eff_after)[0]
        errors.append(
            CheckError(
                name=plan.name,
                measured_seconds=t,
                predicted_seconds_before=before,
                predicted_seconds_after=after,
                error_pct_before=(before - t) / t * 100,
                error_pct_after=(after - t) / t * 100,
            )
        )
    return errors


def worse_checks(errors: list[CheckError], factor: float = WORSE_CHECK_FACTOR) -> list[str]:
    """The checks the fit leaves more than ``factor`` times further off than before, each with its numbers."""
    found = []
    for e in errors:
        ratio = _off(e.predicted_seconds_after, e.measured_seconds) / _off(
            e.predicted_seconds_before, e.measured_seconds
        )
        if ratio > factor:
            found.append(
                f"'{e.name}' {ratio:.1f}x further off ({e.error_pct_before:+.0f}% -> {e.error_pct_after:+.0f}%)"
            )
    return found


def refusal(
    errors: list[CheckError], median_before: float, median_after: float, factor: float = WORSE_CHECK_FACTOR
) -> str | None:
    """Why a fit must not be kept (its median |error| rose, or a check got ``factor`` times worse), or None."""
    why = []
    if median_after > median_before:
        why.append(
            f"median |error| over the {len(errors)} fitted checks rises from {median_before:.0f}% to "
            f"{median_after:.0f}%"
        )
    worse = worse_checks(errors, factor)
    if worse:
        why.append(
            f"{len(worse)} check(s) end more than {factor:g}x further off than before: "
            + "; ".join(worse[:3])
            + (f"; and {len(worse) - 3} more" if len(worse) > 3 else "")
        )
    if not why:
        return None
    return (
        "the fit makes its own checks worse: " + ", and ".join(why) + ". Nothing is written; the measurements stand "
        "(see bounds_hit for factors the device pushed out of a GPU's range)."
    )


def _info(dev: DeviceInfo, model_label: str, bench_dtype: str, checks_fitted: int, now: _dt.datetime) -> dict[str, str]:
    return {
        "card": dev.name,
        "device": dev.kind,
        "driver": dev.driver_version or "n/a",
        "cuda": dev.cuda_version or "n/a",
        "torch_version": dev.torch_version,
        "date": now.date().isoformat(),
        "time_utc": now.isoformat(timespec="seconds"),
        "model": model_label,
        "bench_dtype": bench_dtype,
        "planner_version": __version__,
        "checks_fitted": str(checks_fitted),
    }


def fit_calibration(
    checks: list[CheckResult],
    hw: HardwareProfile,
    eff_before: Efficiency,
    dev: DeviceInfo,
    model_label: str,
    bench_dtype: str,
    folder: str | os.PathLike[str] | None = None,
) -> CalibrationResult:
    """Fit on every ok row of ``checks`` and judge the fit; writes nothing (a dry run).

    Status 'fitted' carries the calibrated ``profile`` and where ``write_calibration`` would put it
    (``target_file``, and ``previous_file`` for the calibration it would keep dated); 'refused' says
    with the numbers how the fit makes its own checks worse; 'not_fitted' / 'failed' say why.
    """
    ok = [(plan_of(c), c.measured_seconds) for c in checks if c.ops and c.status == "ok" and c.measured_seconds]
    if not ok:
        return CalibrationResult(
            status="not_fitted", reason="no check finished, so there is nothing to fit", factors_before=eff_before
        )
    now = _dt.datetime.now(_dt.UTC)
    try:
        fit = fit_efficiency(
            ok,
            hw,
            eff_before,
            source=f"measured on {dev.name} by planner.bench, {now.date().isoformat()}",
            device_kind=dev.kind,
        )
    except Exception as exc:  # noqa: BLE001 - a failed fit is reported, the measurements stand
        return CalibrationResult(status="failed", reason=f"{type(exc).__name__}: {exc}", factors_before=eff_before)
    errors = check_errors(ok, hw, eff_before, fit.profile, fit.efficiency)
    before = statistics.median(abs(e.error_pct_before) for e in errors)
    after = statistics.median(abs(e.error_pct_after) for e in errors)
    profile = calibrated_profile(fit.profile, fit.efficiency, _info(dev, model_label, bench_dtype, len(ok), now))
    target, previous = calibration_target(profile.id, folder)
    refused = refusal(errors, before, after)
    return CalibrationResult(
        status="refused" if refused else "fitted",
        reason=refused or "a dry run: nothing written",
        factors_before=eff_before,
        factors_after=fit.efficiency,
        fitted_from=fit.fitted_from,
        peaks_raised=fit.peaks_raised,
        diagnostics=fit.diagnostics,
        errors=errors,
        median_abs_error_pct_before=before,
        median_abs_error_pct_after=after,
        bounds_hit=fit.bounds_hit,
        worse_checks=worse_checks(errors),
        profile=profile,
        profile_id=profile.id,
        target_file=None if refused else str(target),
        previous_file=None if refused or previous is None else str(previous),
        note=""
        if refused
        else (
            f"would write {target}"
            + (f", keeping the current one as {previous}" if previous else "")
            + "; write it with write_calibration() (python -m planner validate --write)."
        ),
    )


# ---------------------------------------------------------------------------------- writing


def _stamp(path: Path) -> str:
    """UTC time a calibration file was written (its mtime), as 20260105T142233Z: sortable and safe in a file name."""
    return _dt.datetime.fromtimestamp(path.stat().st_mtime, _dt.UTC).strftime("%Y%m%dT%H%M%SZ")


def _kept_as(current: Path) -> Path:
    """Where the calibration at ``current`` is kept once a newer one replaces it (a free name in the history folder)."""
    history = current.parent / HISTORY_DIR
    candidate = history / f"{current.stem}-{_stamp(current)}.yaml"
    n = 2
    while candidate.exists():
        candidate = history / f"{current.stem}-{_stamp(current)}-{n}.yaml"
        n += 1
    return candidate


def calibration_target(profile_id: str, folder: str | os.PathLike[str] | None = None) -> tuple[Path, Path | None]:
    """(where ``<profile_id>.yaml`` goes, where the calibration now there would be kept; None when there is none)."""
    target = calibration_folder(folder) / f"{profile_id}.yaml"
    return target, (_kept_as(target) if target.is_file() else None)


def calibration_history(profile_id: str, folder: str | os.PathLike[str] | None = None) -> list[Path]:
    """Earlier calibrations of ``profile_id`` ('<card>-calibrated') kept in ``folder``'s history, oldest first."""
    history = calibration_folder(folder) / HISTORY_DIR
    if not history.is_dir():
        return []
    return sorted(p for p in history.glob(f"{profile_id}-*.yaml") if p.is_file())


def write_calibration(result: CalibrationResult, folder: str | os.PathLike[str] | None = None) -> CalibrationResult:
    """Save a 'fitted' result's profile as ``<folder>/<card>-calibrated.yaml``; an earlier file there is kept, dated.

    The earlier calibration moves to ``<folder>/calibration-history/`` (``previous_file``) before the
    new one is written. Raises CalibrationRefusedError for a result that is not 'fitted' (refused,
    not fitted, failed, or already written). An OSError becomes status 'failed' with the folder.
    """
    if result.status != "fitted" or result.profile is None:
        raise CalibrationRefusedError(
            f"calibration status is '{result.status}' ({result.reason or 'no reason given'}); only a 'fitted' "
            f"calibration "
            "can be written;",
            hint="re-run the benchmarks (on the GPU the profile is for) until the fit improves its checks.",
        )
    target, previous = calibration_target(result.profile.id, folder)
    try:
        if previous is not None:
            previous.parent.mkdir(parents=True, exist_ok=True)
            target.replace(previous)
        path = save_profile(result.profile, target.parent)
    except OSError as exc:
        return result.model_copy(update={"status": "failed", "reason": f"could not write into {target.parent}: {exc}"})
    base = result.profile.id.removesuffix(CALIBRATED_SUFFIX)
    visible = _on_env_path(target.parent)
    if visible:
        loaded = calibrated_for(base)
        visible = loaded is not None and loaded.is_calibrated
    note = (
        f"get_profile('{result.profile.id}') and calibrated_for('{base}') now load it; predictions with it are "
        f"labelled "
        "'calibrated'."
        if visible
        else f"set {ENV_VAR}={target.parent} so get_profile('{result.profile.id}') finds it."
    )
    if previous is not None:
        note += f" The previous calibration is kept as {previous}."
    note += " step_overhead_seconds is the eager forward's own overhead; an engine's scheduler adds to it."
    return result.model_copy(
        update={
            "status": "written",
            "reason": None,
            "file": str(path),
            "target_file": str(path),
            "previous_file": None if previous is None else str(previous),
            "profile_visible": visible,
            "note": note,
        }
    )


def calibrate_report(
    checks: list[CheckResult],
    hw: HardwareProfile,
    eff_before: Efficiency,
    dev: DeviceInfo,
    model_label: str,
    bench_dtype: str,
    *,
    write: bool = False,
    folder: str | os.PathLike[str] | None = None,
) -> CalibrationResult:
    """``fit_calibration``, then (``write``, and only a fit that improves its checks) ``write_calibration``."""
    result = fit_calibration(checks, hw, eff_before, dev, model_label, bench_dtype, folder=folder)
    if not write or result.status != "fitted":
        return result
    return write_calibration(result, folder)
