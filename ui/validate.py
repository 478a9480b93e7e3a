"""What the Validate page shows that the report does not hold as such: the GPUs seen before any run,
and the report's rows as tables and chart points.

Before the user starts a run the page must not import torch (``planner.bench`` imports it only
inside ``run_validation``), so :func:`scan_gpus` looks for NVIDIA GPUs without it: NVML through
``pynvml`` (nvidia-ml-py) when it is installed, else the driver's ``/proc/driver/nvidia/gpus``
folder. Both are read-only. The run itself decides with torch; the report says what it ran on.

Everything else here is a small pure function over a ``ValidationReport`` (tables, the chart's
points, the y = x line's span, a file name). Nothing here imports Streamlit or torch.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from planner.bench.report import BoundHit, CalibrationResult, UtilizationReport, ValidationReport
from planner.bench.suite import default_time_limits
from planner.efficiency import Efficiency
from planner.hardware import match_profile
from planner.model.spec import ModelSpec

PROC_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
"""One folder per GPU the NVIDIA kernel driver sees, each with an ``information`` file ('Model: ...')."""

DEVICES = ("auto", "cpu", "cuda")
"""The device choices, as ``run_validation(device=...)`` takes them."""

CPU_SLOW_PARAMS = 1_000_000_000
"""Above this many parameters a CPU run of the model's real shapes is slow: each layer's weights are
allocated and multiplied in fp32 on the host (a quick CPU run of GPT-2, 124 M parameters, takes a few
seconds; one of Llama-3.1-8B takes tens of seconds and some checks hit the time limits)."""

SMALL_CATALOG_MODEL = "openai-community/gpt2"
"""A catalog model small enough for a CPU run in seconds."""


# ------------------------------------------------------------------------------ GPUs seen without torch


@dataclass(frozen=True)
class SeenGpu:
    """One NVIDIA GPU as NVML or the driver lists it, and the hardware profile its name matches."""

    index: int
    name: str
    memory_total_bytes: int | None
    driver_version: str | None
    profile_id: str | None
    """The built-in profile matching the name and memory (``planner.hardware.match_profile``); None: none does."""


@dataclass(frozen=True)
class GpuScan:
    """The GPUs found (possibly none), where they were looked for, and, when none, why."""

    gpus: tuple[SeenGpu, ...]
    source: str
    reason: str | None = None

    @property
    def found(self) -> bool:
        return bool(self.gpus)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _matched(name: str, memory_bytes: int | None) -> str | None:
    profile = match_profile(name, memory_bytes)
    return profile.id if profile is not None else None


def _scan_nvml(nvml) -> GpuScan:
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver / no device: say so, never fail the page
        return GpuScan((), "NVML", f"NVML could not start ({exc})")
    try:
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001
            driver = None
        gpus = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            try:
                memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            except Exception:  # noqa: BLE001
                memory = None
            gpus.append(SeenGpu(index, name, memory, driver, _matched(name, memory)))
    except Exception as exc:  # noqa: BLE001
        return GpuScan((), "NVML", f"NVML could not list the devices ({exc})")
    finally:
        with contextlib.suppress(Exception):  # shutting NVML down can fail after a failed init; nothing to do
            nvml.nvmlShutdown()
    return GpuScan(tuple(gpus), "NVML", None if gpus else "NVML lists no device")


def _scan_proc(folder: Path) -> GpuScan:
    gpus = []
    for index, gpu in enumerate(sorted(folder.glob("*/information")) if folder.is_dir() else []):
        try:
            fields = dict(line.split(":", 1) for line in gpu.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        name = fields.get("Model", "").strip()
        if name:
            gpus.append(SeenGpu(index, name, None, None, _matched(name, None)))
    reason = None if gpus else f"pynvml (nvidia-ml-py) is not installed and {folder} lists no GPU"
    return GpuScan(tuple(gpus), str(folder), reason)


def scan_gpus(nvml=None, proc_folder: Path = PROC_NVIDIA_GPUS) -> GpuScan:
    """The NVIDIA GPUs on this machine, read without torch: NVML (``nvml``, default ``pynvml``), else
    ``proc_folder``."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return _scan_proc(proc_folder)
    return _scan_nvml(nvml)


def device_options(scan: GpuScan) -> tuple[str, ...]:
    """The device choices the page offers: 'cuda' only when a GPU was seen."""
    return DEVICES if scan.found else tuple(d for d in DEVICES if d != "cuda")


def expected_kind(choice: str, scan: GpuScan) -> Literal["cpu", "cuda"]:
    """Where a run with ``choice`` is expected to go ('auto' -> cuda when a GPU was seen); torch decides at run time."""
    if choice == "auto":
        return "cuda" if scan.found else "cpu"
    return "cuda" if choice == "cuda" else "cpu"


def slow_on_cpu(model: ModelSpec) -> bool:
    """True when benchmarking ``model``'s real shapes on CPU takes long (see CPU_SLOW_PARAMS)."""
    return model.total_params > CPU_SLOW_PARAMS


def default_time_limit_s(kind: str, quick: bool) -> float:
    """The suite's time limit ``run_validation`` uses when none is given, in seconds."""
    return default_time_limits(kind, quick)[0]


# ------------------------------------------------------------------------------ progress


def progress_fraction(done: int, total: int) -> float:
    """Share of the checks done, in [0, 1] (``progress(name, i, n)`` counts from 1)."""
    return min(max(done / total, 0.0), 1.0) if total > 0 else 0.0


def progress_label(name: str, done: int, total: int) -> str:
    return f"{done} of {total} checks: {name}"


def group_progress_label(group: str, done: int, total: int) -> str:
    """One benchmark's bar: 'gemm: 5 of 12 checks'."""
    return f"{group}: {done} of {total} checks"


# ------------------------------------------------------------------------------ tables


def calibrated_errors(report: ValidationReport) -> dict[str, float]:
    """Check name -> error % after calibration, for the checks the fit used."""
    cal = report.calibration
    return {e.name: e.error_pct_after for e in cal.errors} if cal is not None else {}


def checks_table(report: ValidationReport) -> pd.DataFrame:
    """One row per check: predicted and measured seconds as the report holds them, errors in %, status."""
    after = calibrated_errors(report)
    return pd.DataFrame(
        [
            {
                "benchmark": c.benchmark,
                "check": c.name,
                "predicted (s)": c.predicted_seconds,
                "kind": c.predicted_kind,
                "measured (s)": c.measured_seconds,
                "error (%)": c.error_pct,
                "after calibration (%)": after.get(c.name),
                "FLOP/s of peak": c.flops_fraction_of_peak,
                "B/s of peak": c.bytes_fraction_of_peak,
                "status": c.status,
                "why": c.reason or "",
            }
            for c in report.checks
        ]
    )


@dataclass(frozen=True)
class ChartPoints:
    """(predicted, measured, check name) series for the predicted-vs-measured chart."""

    by_benchmark: dict[str, tuple[list[float], list[float], list[str]]]
    calibrated: tuple[list[float], list[float], list[str]]
    span: tuple[float, float] | None
    """(lowest, highest) seconds over every point, for the y = x line; None without points."""


def chart_points(report: ValidationReport) -> ChartPoints:
    """Checks that finished, grouped by benchmark, and the calibrated predictions of the same checks."""
    groups: dict[str, tuple[list[float], list[float], list[str]]] = {}
    values: list[float] = []
    for c in report.checks:
        if c.status != "ok" or not c.predicted_seconds or not c.measured_seconds:
            continue
        xs, ys, names = groups.setdefault(c.benchmark, ([], [], []))
        xs.append(c.predicted_seconds)
        ys.append(c.measured_seconds)
        names.append(c.name)
        values += [c.predicted_seconds, c.measured_seconds]
    cal = ([], [], [])
    if report.calibration is not None:
        for e in report.calibration.errors:
            if e.predicted_seconds_after > 0:
                cal[0].append(e.predicted_seconds_after)
                cal[1].append(e.measured_seconds)
                cal[2].append(e.name)
                values.append(e.predicted_seconds_after)
    span = (min(values), max(values)) if values else None
    return ChartPoints(groups, cal, span)


def utilization_table(util: UtilizationReport) -> pd.DataFrame:
    """One row per benchmark group: NVML utilizations (%) and the bound they imply."""
    return pd.DataFrame(
        [
            {
                "benchmark": r.benchmark,
                "samples": r.samples,
                "GPU busy (%)": r.gpu_util_pct,
                "memory busy (%)": r.memory_util_pct,
                "implies": r.diagnosis or "no samples",
            }
            for r in util.readings
        ]
    )


FACTORS = tuple(name for name in Efficiency.model_fields if name not in ("kind", "source"))
"""The efficiency factors a calibration fits, in the model's order."""


def factors_table(cal: CalibrationResult) -> pd.DataFrame:
    """One row per efficiency factor: before, after (None when not fitted), what it was fitted from, its meaning."""
    rows = []
    for name in FACTORS:
        rows.append(
            {
                "factor": name,
                "before": getattr(cal.factors_before, name),
                "after": getattr(cal.factors_after, name) if cal.factors_after is not None else None,
                "fitted from": cal.fitted_from.get(name, "kept"),
                "meaning": Efficiency.model_fields[name].description or "",
            }
        )
    return pd.DataFrame(rows)


def calibration_question(cal: CalibrationResult) -> str:
    """What writing a 'fitted' (dry run) calibration would do, as a question: where it goes, what it keeps."""
    keep = (
        f" The calibration there now is kept, dated, as `{cal.previous_file}`."
        if cal.previous_file
        else " No earlier calibration of this card is there."
    )
    return (
        f"Fitted the factors of **{cal.profile_id}** (a dry run: nothing is written yet). Write them to "
        f"`{cal.target_file}` so later plans on this card use them?{keep} Check the factors and any bound they "
        "hit below first."
    )


def bound_hit_text(hit: BoundHit) -> str:
    """'step_overhead_seconds: the fit asked for 1.7 seconds, clipped to 0.05 (high): ...' for one clipped factor."""
    return (
        f"**{hit.factor}**: the measurements asked for {hit.fitted:.4g} {hit.unit}, outside its physical range, so it "
        f"was clipped to {hit.clipped_to:.4g} (the {hit.side} bound). {hit.reason}"
    )


def report_file_name(report: ValidationReport) -> str:
    """'validation-openai-community-gpt2-cpu.json': model and device, safe as a file name."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{report.model.name}-{report.device.kind}").strip("-")
    return f"validation-{stem}.json"
