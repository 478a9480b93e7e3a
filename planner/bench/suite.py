"""The Validate suite: run the benchmark groups under the safety rules and assemble the report.

``run_validation`` is the public entry (the app's Validate page, ``python -m planner validate``
and ``benchmarks/gpu_check.py`` call it): detect the device and its profile, plan every check
(``planner.bench.benchmarks``), run the groups in order with NVML sampling in the background,
predict each check with the planner's ``bind`` (``planner.bench.plan.predict``), then calibrate
(``planner.bench.calibrate``).

Safety (``planner.bench.safety``): the memory guard checks every allocation step against a
fraction of free memory, out-of-memory becomes an ``oom`` row, each group has a time limit and the
suite one more (later groups are ``skipped`` with the reason); everything is freed at the end.
The ``Runner`` turns every failure of a check into a status with its reason; one failure never
ends the suite.
"""

from __future__ import annotations

import datetime as _dt
import statistics
import time
from collections.abc import Callable

from planner.bench.benchmarks import BENCHMARKS, GROUPS, Ctx, Outcome, probe_profile
from planner.bench.device import detect_device, profile_for_device
from planner.bench.limits import SuiteLimits
from planner.bench.plan import CheckPlan, op_totals, predict, scale_model
from planner.bench.report import (
    CheckResult,
    ModelInfo,
    ProfileInfo,
    SuiteSettings,
    SuiteSizes,
    Summary,
    UtilizationReport,
    ValidationReport,
)
from planner.bench.safety import BenchTimeout, Deadline, MemoryGuard, MemoryGuardRefused, is_oom, release
from planner.bench.sampler import UtilizationSampler
from planner.efficiency import Efficiency
from planner.errors import PlannerError
from planner.estimate.roofline import efficiency_for, prediction_kind
from planner.hardware import HardwareProfile, get_profile
from planner.model.spec import ModelSpec

__all__ = ["BENCHMARKS", "default_sizes", "default_time_limits", "run_validation"]

ProgressFn = Callable[[str, int, int], None]

_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


# ------------------------------------------------------------------------------ settings


def default_sizes(device_kind: str, quick: bool = False) -> SuiteSizes:
    """Sizes that finish in about a minute per model on a datacenter GPU, and in seconds on CPU."""
    if device_kind == "cuda":
        if quick:
            return SuiteSizes(
                copy_bytes=512 * 2**20,
                gemm_prefill_tokens=(2048,),
                gemm_decode_tokens=(1, 64),
                attention_batches=(1, 32),
                attention_contexts=(4096,),
                layer_prefill_tokens=(1024,),
                layer_decode=((1, 2048), (16, 2048)),
                kv_alloc_cap_bytes=None,
                launches=200,
                warmup=3,
                repeats=8,
                max_seconds_per_check=0.5,
                rotation_cache_multiple=4.0,
                max_rotation_slots=64,
            )
        return SuiteSizes(
            copy_bytes=2**30,
            gemm_prefill_tokens=(512, 2048, 8192),
            gemm_decode_tokens=(1, 4, 16, 64, 256),
            attention_batches=(1, 16, 64),
            attention_contexts=(1024, 8192, 32768),
            layer_prefill_tokens=(2048,),
            layer_decode=((1, 4096), (32, 4096)),
            kv_alloc_cap_bytes=None,
            launches=200,
            warmup=3,
            repeats=15,
            max_seconds_per_check=1.0,
            rotation_cache_multiple=4.0,
            max_rotation_slots=64,
        )
    if quick:
        return SuiteSizes(
            copy_bytes=32 * 2**20,
            gemm_prefill_tokens=(64,),
            gemm_decode_tokens=(1, 8),
            attention_batches=(1, 2),
            attention_contexts=(256,),
            layer_prefill_tokens=(64,),
            layer_decode=((1, 256), (2, 256)),
            kv_alloc_cap_bytes=16 * 2**20,
            launches=100,
            warmup=1,
            repeats=3,
            max_seconds_per_check=0.25,
            rotation_cache_multiple=1.0,
            max_rotation_slots=2,
        )
    return SuiteSizes(
        copy_bytes=128 * 2**20,
        gemm_prefill_tokens=(128, 512),
        gemm_decode_tokens=(1, 16),
        attention_batches=(1, 4),
        attention_contexts=(512, 2048),
        layer_prefill_tokens=(128,),
        layer_decode=((1, 512), (4, 512)),
        kv_alloc_cap_bytes=256 * 2**20,
        launches=200,
        warmup=1,
        repeats=5,
        max_seconds_per_check=0.5,
        rotation_cache_multiple=2.0,
        max_rotation_slots=8,
    )


def default_time_limits(device_kind: str, quick: bool) -> tuple[float, float]:
    """(suite, per benchmark group) seconds."""
    if device_kind == "cuda":
        return (120.0, 45.0) if quick else (240.0, 90.0)
    return (60.0, 20.0) if quick else (120.0, 40.0)


# --------------------------------------------------------------------------------- runner


class Runner:
    """Runs checks one by one, turning every failure into a status with its reason."""

    def __init__(
        self,
        ctx: Ctx,
        suite: Deadline,
        benchmark_limit_s: float,
        progress: ProgressFn | None,
        total: int,
        sampler: UtilizationSampler,
        group_progress: ProgressFn | None = None,
        group_totals: dict[str, int] | None = None,
    ):
        self.ctx, self.suite, self.limit = ctx, suite, benchmark_limit_s
        self.progress, self.total, self.done = progress, total, 0
        self.group_progress, self.group_totals = group_progress, group_totals or {}
        self.group_done: dict[str, int] = {}
        self.sampler = sampler
        self.outcomes: dict[str, Outcome] = {}

    def _tick(self, name: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(name, self.done, self.total)

    def record(self, plan: CheckPlan, outcome: Outcome) -> None:
        if plan.name not in self.outcomes:
            self.outcomes[plan.name] = outcome
            self._tick(plan.name)
            group = plan.benchmark
            self.group_done[group] = self.group_done.get(group, 0) + 1
            if self.group_progress is not None:
                self.group_progress(group, self.group_done[group], self.group_totals.get(group, self.group_done[group]))

    def unavailable(self, plan: CheckPlan) -> None:
        """Record a check the planner marked unavailable here (it never runs)."""
        self.record(plan, Outcome(status="unavailable", reason=plan.unavailable))

    def check(self, plan: CheckPlan, fn: Callable[[], Outcome]) -> None:
        """Run one check under the group's deadline; every exception becomes a row."""
        if plan.unavailable:
            return self.unavailable(plan)
        if self.suite.expired():
            return self.record(
                plan, Outcome(status="skipped", reason=f"suite time limit of {self.suite.seconds:g} s reached")
            )
        if self.ctx.deadline.expired():
            return self.record(
                plan,
                Outcome(
                    status="timeout",
                    reason=f"benchmark time limit of {self.ctx.deadline.seconds:.3g} s "
                    f"({self.ctx.deadline.label}) reached before this check",
                ),
            )
        try:
            outcome = fn()
        except MemoryGuardRefused as exc:
            outcome = Outcome(status="oom", reason=f"refused by the memory guard before allocating: {exc}")
        except BenchTimeout as exc:
            outcome = Outcome(status="timeout", reason=str(exc))
        except Exception as exc:  # noqa: BLE001 - one failure is a row, never the end of the suite
            if is_oom(exc):
                self.ctx.cache.clear()
                release(self.ctx.kind)
                outcome = Outcome(status="oom", reason=f"out of memory while running: {str(exc).splitlines()[0][:300]}")
            else:
                outcome = Outcome(
                    status="error", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
                )
        self.record(plan, outcome)

    def run_group(self, name: str, plans: list[CheckPlan], run: Callable[[Ctx, list[CheckPlan], Runner], None]) -> None:
        ctx = self.ctx
        self.sampler.tag(name)
        if self.suite.expired():
            for p in plans:
                self.record(
                    p, Outcome(status="skipped", reason=f"suite time limit of {self.suite.seconds:g} s reached")
                )
            return
        ctx.deadline = self.suite.within(self.limit, f"benchmark {name}")
        try:
            run(ctx, [p for p in plans if not p.parts], self)
        except Exception as exc:  # noqa: BLE001 - a setup failure outside check(): the group's rows say so
            status = "oom" if is_oom(exc) or isinstance(exc, MemoryGuardRefused) else "error"
            for p in plans:
                if not p.parts:
                    self.record(p, Outcome(status=status, reason=f"{type(exc).__name__}: {exc}"))
        finally:
            ctx.cache.clear()
            release(ctx.kind)
        for p in plans:
            if p.parts:
                self.record(p, derive(p, self.outcomes))
            elif p.name not in self.outcomes:
                self.record(p, Outcome(status="error", reason="the benchmark did not reach this check"))


def derive(plan: CheckPlan, outcomes: dict[str, Outcome]) -> Outcome:
    """A whole-model row: sum of its parts' measurements x their counts, when all parts are ok."""
    total, how = 0.0, []
    for name, count in plan.parts:
        part = outcomes.get(name)
        if part is None or part.status != "ok":
            status = part.status if part is not None else "missing"
            reason = f"derived from '{name}', which is {status}" + (f" ({part.reason})" if part and part.reason else "")
            return Outcome(status="unavailable" if status == "unavailable" else "skipped", reason=reason)
        assert part.seconds is not None, f"'{name}' is ok without seconds"  # an ok Outcome comes from _measured
        total += count * part.seconds
        how.append(f"{count} x '{name}'" if count > 1 else f"'{name}'")
    return Outcome(status="ok", seconds=total, how="derived, not timed: " + " + ".join(how))


# ----------------------------------------------------------------------------------- entry


def _bench_dtype(model: ModelSpec, kind: str, dtype: str | None) -> str:
    if dtype:
        key = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)
        if key not in _TORCH_DTYPES:
            raise PlannerError(f"benchmark dtype {dtype!r} is not supported;", hint="use fp32, bf16 or fp16.")
        return key
    if kind == "cpu":
        return "fp32"
    return model.dtype if model.dtype in _TORCH_DTYPES else "bf16"


def _model_notes(model: ModelSpec, bench_dtype: str, kind: str) -> tuple[str, ...]:
    notes = []
    if model.quantization is not None:
        notes.append(
            f"the checkpoint is quantized ({model.quantization.method}); "
            f"the benchmarks multiply {bench_dtype} weights, and the predictions count {bench_dtype} bytes"
        )
    if kind == "cpu" and bench_dtype == "fp32":
        notes.append("CPU run in fp32 (bf16 matmul is emulated on most CPUs); predictions use the same dtype")
    if any(layer.mixer.kind != "attention" for layer in model.layers):
        notes.append(
            "layers with MLA or Mamba mixers have no plain-torch forward here: their layer rows are unavailable"
        )
    if model.is_moe:
        notes.append("the MoE layer runs a naive per-expert loop, slower than a fused MoE kernel, above all in decode")
    return tuple(notes)


def run_validation(
    model_spec: ModelSpec,
    hw_profile: HardwareProfile | str | None = None,
    device: str = "cpu",
    *,
    time_limit_s: float | None = None,
    benchmark_time_limit_s: float | None = None,
    memory_fraction: float = 0.5,
    models_scale: float = 1.0,
    dtype: str | None = None,
    quick: bool = False,
    sizes: SuiteSizes | None = None,
    benchmarks: tuple[str, ...] | list[str] | None = None,
    calibrate: bool = True,
    write_calibration: bool = False,
    calibration_dir: str | None = None,
    progress: ProgressFn | None = None,
    group_progress: ProgressFn | None = None,
    sampler_interval_s: float = 0.05,
    cpu_threads: int | None = None,
    nvml=None,
    free_bytes: Callable[[], int | None] | None = None,
) -> ValidationReport:
    """Benchmark ``model_spec``'s shapes on ``device`` and compare with the planner's predictions.

    ``hw_profile``: the profile to predict with (None: matched to the device, ``cpu`` on CPU).
    ``time_limit_s`` / ``benchmark_time_limit_s``: suite and per-group budgets (defaults by device).
    ``memory_fraction``: the most of the free memory one allocation step may take.
    ``models_scale`` < 1 shrinks widths and heads (labelled in the report) for big models on small devices.
    ``progress(name, i, n)`` is called after each check, and ``group_progress(benchmark, i, n)`` with
    the count within that check's benchmark group (one progress bar per benchmark). ``calibrate`` fits efficiency
    factors (each held to its
    physical range; a fit that worsens its own checks is refused) and, only with
    ``write_calibration``, saves ``<card>-calibrated.yaml``, keeping an earlier one dated
    (``planner.bench.calibrate``); without it the result is a dry run that ``write_calibration`` can save later.
    ``cpu_threads`` sets torch's CPU threads for the run (restored after); 1 gives steadier times on
    a shared machine. ``nvml`` and ``free_bytes`` replace pynvml and the free-memory reader (tests).
    Every limit is checked first (``planner.bench.limits.SuiteLimits``): NaN, inf or out-of-range
    values raise a PlannerError naming the flag. Raises NoGPUError for device='cuda' without a GPU;
    every other failure is a row of the report.
    """
    limits = SuiteLimits.checked(
        time_limit_s=time_limit_s,
        benchmark_time_limit_s=benchmark_time_limit_s,
        memory_fraction=memory_fraction,
        models_scale=models_scale,
        cpu_threads=cpu_threads,
        sampler_interval_s=sampler_interval_s,
    )
    import torch

    threads_before = torch.get_num_threads()
    if limits.cpu_threads is not None:
        torch.set_num_threads(limits.cpu_threads)
    try:
        return _run(
            model_spec,
            hw_profile,
            device,
            limits.time_limit_s,
            limits.benchmark_time_limit_s,
            limits.memory_fraction,
            limits.models_scale,
            dtype,
            quick,
            sizes,
            benchmarks,
            calibrate,
            write_calibration,
            calibration_dir,
            progress,
            limits.sampler_interval_s,
            nvml,
            free_bytes,
            group_progress,
        )
    finally:
        torch.set_num_threads(threads_before)


def _run(
    model_spec,
    hw_profile,
    device,
    time_limit_s,
    benchmark_time_limit_s,
    memory_fraction,
    models_scale,
    dtype,
    quick,
    sizes,
    benchmarks,
    calibrate,
    write_calibration,
    calibration_dir,
    progress,
    sampler_interval_s,
    nvml,
    free_bytes,
    group_progress=None,
) -> ValidationReport:
    import torch

    from planner.bench.calibrate import calibrate_report

    started = _dt.datetime.now(_dt.UTC)
    t_start = time.monotonic()
    unknown = set(benchmarks or ()) - set(BENCHMARKS)
    if unknown:
        raise PlannerError(
            f"unknown benchmark(s) {', '.join(sorted(unknown))};", hint=f"choose among {', '.join(BENCHMARKS)}."
        )
    names = [b for b in BENCHMARKS if benchmarks is None or b in benchmarks]
    dev = detect_device(device)
    kind = dev.kind
    if isinstance(hw_profile, str):
        hw_profile = get_profile(hw_profile)
    suite_s, group_s = default_time_limits(kind, quick)
    suite_s = time_limit_s if time_limit_s is not None else suite_s
    group_s = benchmark_time_limit_s if benchmark_time_limit_s is not None else min(group_s, suite_s)
    sizes = sizes or default_sizes(kind, quick)
    model = scale_model(model_spec, models_scale)
    bench_dtype = _bench_dtype(model, kind, dtype)
    tdtype = getattr(torch, _TORCH_DTYPES[bench_dtype])
    guard = MemoryGuard(kind, memory_fraction, free_bytes)
    suite = Deadline(suite_s, "suite")
    tdevice = torch.device("cuda", dev.index or 0) if kind == "cuda" else torch.device("cpu")

    hw, origin, note = profile_for_device(dev, hw_profile)
    ctx = Ctx(
        torch=torch,
        dev=dev,
        device=tdevice,
        dtype_name=bench_dtype,
        dtype=tdtype,
        model=model,
        hw=hw or get_profile("cpu"),
        sizes=sizes,
        guard=guard,
        deadline=suite,
    )
    if hw is None:
        hw = probe_profile(ctx, suite.within(group_s, "probe"))
        ctx.hw = hw
    eff_before = efficiency_for(hw)

    groups = [(name, GROUPS[name][0](model, sizes, dev, hw, bench_dtype)) for name in names]
    _unique_names([p for _, plans in groups for p in plans])
    total = sum(len(p) for _, p in groups)

    sampler = UtilizationSampler(kind, dev.index or 0, sampler_interval_s, nvml=nvml, pci_bus_id=dev.pci_bus_id).start()
    group_totals: dict[str, int] = {}
    for _, plans in groups:
        for plan in plans:
            group_totals[plan.benchmark] = group_totals.get(plan.benchmark, 0) + 1
    runner = Runner(ctx, suite, group_s, progress, total, sampler, group_progress, group_totals)
    try:
        for name, plans in groups:
            runner.run_group(name, plans, GROUPS[name][1])
    finally:
        utilization: UtilizationReport = sampler.stop()
        ctx.cache.clear()
        release(kind, collect=True)

    all_plans = [p for _, plans in groups for p in plans]
    checks = [result_row(p, runner.outcomes[p.name], hw, eff_before) for p in all_plans]
    calibration = None
    if calibrate:
        calibration = calibrate_report(
            checks, hw, eff_before, dev, model.name, bench_dtype, write=write_calibration, folder=calibration_dir
        )
    errors = [abs(c.error_pct) for c in checks if c.error_pct is not None]
    by_status: dict[str, int] = {}
    for c in checks:
        by_status[c.status] = by_status.get(c.status, 0) + 1
    return ValidationReport(
        device=dev,
        profile=ProfileInfo(
            id=hw.id,
            name=hw.name,
            origin=origin,
            prediction_kind=prediction_kind(eff_before),
            hbm_bandwidth_bytes_per_s=hw.hbm_bandwidth_bytes_per_s,
            peak_flops_per_s=dict(hw.peak_flops_per_s),
            efficiency=eff_before,
            note=note,
        ),
        model=ModelInfo(
            name=model.name,
            hidden_size=model.hidden_size,
            num_layers=model.num_layers,
            checkpoint_dtype=model.dtype,
            bench_dtype=bench_dtype,
            models_scale=models_scale,
            scaled=models_scale != 1.0,
            params=model.total_params,
            notes=_model_notes(model, bench_dtype, kind),
        ),
        settings=SuiteSettings(
            time_limit_s=suite_s, benchmark_time_limit_s=group_s, memory_fraction=memory_fraction, sizes=sizes
        ),
        checks=checks,
        utilization=utilization,
        calibration=calibration,
        summary=Summary(
            checks=len(checks),
            by_status=by_status,
            median_abs_error_pct=statistics.median(errors) if errors else None,
            wall_seconds=round(time.monotonic() - t_start, 3),
        ),
        started_at=started.isoformat(timespec="seconds"),
    )


def _unique_names(plans: list[CheckPlan]) -> None:
    """Number repeated check names ('... #2'): rows are keyed by name."""
    seen: dict[str, int] = {}
    for p in plans:
        seen[p.name] = seen.get(p.name, 0) + 1
        if seen[p.name] > 1:
            p.name = f"{p.name} #{seen[p.name]}"


def result_row(plan: CheckPlan, outcome: Outcome, hw: HardwareProfile, eff: Efficiency) -> CheckResult:
    """The report row of one check: the planner's prediction beside the outcome."""
    predicted, bound, cdt = predict(plan, hw, eff) if plan.ops else (None, None, None)
    flops, nbytes = op_totals(plan)
    row = dict(
        benchmark=plan.benchmark,
        name=plan.name,
        shape=dict(plan.shape),
        ops=list(plan.ops),
        graphs=plan.graphs,
        includes_step_overhead=plan.step_overhead,
        predicted_seconds=predicted,
        predicted_kind=prediction_kind(eff),
        predicted_bound=bound,
        status=outcome.status,
        reason=outcome.reason,
        details=dict(outcome.details),
        measured_how=outcome.how,
        repeats=outcome.repeats,
    )
    t = outcome.seconds
    if outcome.status == "ok" and t and t > 0:
        peak = hw.peak_flops_per_s.get(cdt) if cdt else None
        row.update(
            measured_seconds=t,
            error_pct=(predicted - t) / t * 100 if predicted is not None else None,
            achieved_flops_per_s=flops / t if flops else None,
            achieved_bytes_per_s=nbytes / t if nbytes else None,
            flops_fraction_of_peak=(flops / t / peak) if flops and peak else None,
            bytes_fraction_of_peak=(nbytes / t / hw.hbm_bandwidth_bytes_per_s)
            if nbytes and hw.hbm_bandwidth_bytes_per_s
            else None,
        )
    return CheckResult(**row)
