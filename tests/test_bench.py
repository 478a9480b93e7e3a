"""The Validate suite on CPU torch: every benchmark runs, predictions are the planner's own,
calibration moves them the right way and is picked up, and the failure paths (memory guard,
out-of-memory, time limits, no GPU, no NVML) end as report rows or clear messages, never crashes.

Sizes are tiny so the whole file runs in well under a minute on two cores.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from planner.bench import NoGPUError, detect_device, run_validation  # noqa: E402
from planner.bench.calibrate import calibrate_report, plan_of  # noqa: E402
from planner.bench.plan import bench_shape, forward_plans, predict, scale_model  # noqa: E402
from planner.bench.report import SuiteSizes  # noqa: E402
from planner.bench.safety import MemoryGuard, MemoryGuardRefused, is_oom, meminfo_bytes  # noqa: E402
from planner.bench.sampler import UtilizationSampler, diagnose  # noqa: E402
from planner.estimate.roofline import bind, efficiency_for, roofline  # noqa: E402
from planner.hardware import calibrated_for, get_profile  # noqa: E402
from planner.model.families import build_spec  # noqa: E402
from planner.model.ops import Op  # noqa: E402
from planner.scenario import Scenario  # noqa: E402
from tests.conftest import TINY_LLAMA_CONFIG  # noqa: E402
from tests.scripts import load_script  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available()

TINY_MOE_CONFIG = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 3,
    "mlp_only_layers": [0],
    "vocab_size": 1000,
    "max_position_embeddings": 1024,
    "torch_dtype": "bfloat16",
}

TINY = SuiteSizes(
    copy_bytes=4 * 2**20,
    gemm_prefill_tokens=(32,),
    gemm_decode_tokens=(1, 4),
    attention_batches=(1, 2),
    attention_contexts=(128,),
    layer_prefill_tokens=(32,),
    layer_decode=((1, 128), (2, 128)),
    kv_alloc_cap_bytes=4 * 2**20,
    launches=50,
    warmup=1,
    repeats=2,
    max_seconds_per_check=0.05,
    rotation_cache_multiple=0.5,
    max_rotation_slots=2,
)
OK_OR_UNAVAILABLE = {"ok", "unavailable"}


def validate(spec, **kw):
    kw.setdefault("sizes", TINY)
    kw.setdefault("cpu_threads", 1)
    kw.setdefault("write_calibration", False)
    return run_validation(spec, None, "cpu", **kw)


@pytest.fixture(scope="module")
def tiny_spec():
    return build_spec(TINY_LLAMA_CONFIG, "tiny-llama")


@pytest.fixture(scope="module")
def tiny_report(tiny_spec):
    return validate(tiny_spec)


@pytest.fixture(scope="module")
def moe_report():
    return validate(build_spec(TINY_MOE_CONFIG, "tiny-moe"), benchmarks=["gemm", "layer_forward"])


# ------------------------------------------------------------------------- every benchmark


def test_importing_planner_does_not_import_torch():
    code = (
        "import sys, planner, planner.bench, planner.bench.suite, planner.commands.validate; "
        "print('torch' in sys.modules, 'pynvml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["False", "False"]


def _finite_positive(x):
    return x is not None and math.isfinite(x) and x > 0


@pytest.mark.parametrize("fixture", ["tiny_report", "moe_report"])
def test_every_benchmark_yields_finite_positive_numbers(fixture, request):
    report = request.getfixturevalue(fixture)
    assert report.checks
    benchmarks = {c.benchmark for c in report.checks}
    if fixture == "tiny_report":
        assert benchmarks == {
            "memory_bandwidth",
            "launch_overhead",
            "gemm",
            "gemm_fp8",
            "attention_decode",
            "layer_forward",
            "kv_cache",
        }
    for c in report.checks:
        assert c.status in OK_OR_UNAVAILABLE, (c.name, c.status, c.reason)
        assert _finite_positive(c.predicted_seconds), c.name
        if c.status == "ok":
            assert _finite_positive(c.measured_seconds), c.name
            assert math.isfinite(c.error_pct)
            assert _finite_positive(c.achieved_bytes_per_s) or _finite_positive(c.achieved_flops_per_s), c.name
        else:
            assert c.reason and c.measured_seconds is None
    unavailable = {c.benchmark for c in report.checks if c.status == "unavailable"}
    assert unavailable <= {"gemm_fp8", "launch_overhead"}  # CPU: no fp8, no CUDA graphs


def test_cpu_run_is_labelled(tiny_report):
    r = tiny_report
    assert r.device.kind == "cpu" and r.profile.id == "cpu" and r.profile.origin == "cpu"
    assert r.profile.prediction_kind == "estimate" and r.model.bench_dtype == "fp32" and not r.model.scaled
    assert r.utilization.status == "unavailable" and "cpu" in r.utilization.reason
    graph = next(c for c in r.checks if c.name.endswith("CUDA graph"))
    assert "GPU" in graph.reason
    kv = next(c for c in r.checks if c.benchmark == "kv_cache")
    assert kv.details["allocated_bytes"] <= TINY.kv_alloc_cap_bytes < kv.details["planned_kv_bytes"]
    assert "size cap" in kv.reason
    assert set(json.loads(r.model_dump_json())) >= {"device", "profile", "checks", "utilization", "calibration"}


def test_moe_layers_and_whole_model_rows(moe_report):
    names = [c.name for c in moe_report.checks if c.benchmark == "layer_forward"]
    assert any("+moe" in n for n in names) and any(
        "(full_attention)" in n for n in names
    )  # dense layer 0 and MoE layers
    whole = [c for c in moe_report.checks if c.includes_step_overhead]
    assert whole and all(c.status == "ok" and "derived" in c.measured_how for c in whole)


# ------------------------------------------------------------------- the planner's own numbers


def test_predicted_seconds_are_bind_over_the_checks_ops(tiny_report):
    hw = get_profile("cpu")
    eff = efficiency_for(hw)
    for c in tiny_report.checks:
        bound = [(oc.count, bind(oc.op, hw, eff, 1, c.graphs)) for oc in c.ops]
        # the ops' times, unless their host launches together take longer (planner.estimate.step)
        expected = max(sum(n * b[0] for n, b in bound), sum(n * b[4] for n, b in bound))
        # plus a synchronous step's host work (step overhead + per-sequence work) when the check is a forward
        host = eff.step_overhead_seconds + eff.host_seconds_per_seq * float(c.shape.get("batch", 1))
        expected += host if c.includes_step_overhead else 0.0
        assert c.predicted_seconds == pytest.approx(expected, rel=1e-12), c.name
    copy = next(c for c in tiny_report.checks if c.benchmark == "memory_bandwidth")
    op = Op(name="copy", kind="elementwise", flops=0.0, activation_bytes=2.0 * TINY.copy_bytes)
    assert copy.predicted_seconds == bind(op, hw, eff, 1, False)[0]


@pytest.mark.parametrize("stage,batch,seq", [("prefill", 1, 256), ("decode", 8, 2048)])
def test_whole_model_prediction_equals_roofline(tiny_spec, stage, batch, seq):
    """In the model's own dtype, the derived whole-model row predicts exactly what roofline() does for a
    synchronous engine (a bare forward, like the benchmark's, has no scheduler to overlap its host work)."""
    hw = get_profile("h100-sxm")
    _, _, whole = forward_plans(tiny_spec, stage, batch, seq, tiny_spec.dtype)
    rf = roofline(tiny_spec, hw, Scenario(gpu="h100-sxm", engine="eager", engine_version="vllm-v1"), stage, batch, seq)
    assert predict(whole, hw, efficiency_for(hw))[0] == pytest.approx(rf.total_seconds, rel=1e-9)


def test_bench_shape_counts_the_benchmark_dtype():
    shape = bench_shape("decode", 4, 100, "fp32")
    assert (shape.tokens, shape.act_bytes, shape.wbytes("mlp", 10), shape.cdtype("attention")) == (4, 4.0, 40.0, "fp32")


def test_models_scale_is_labelled_and_keeps_gqa(tiny_spec):
    small = scale_model(tiny_spec, 0.5)
    assert small.hidden_size == 128 and "dims x0.5" in small.name
    attn = small.layers[0].mixer
    assert attn.num_heads % attn.num_kv_heads == 0 and attn.head_dim == tiny_spec.layers[0].mixer.head_dim
    report = validate(tiny_spec, models_scale=0.5, benchmarks=["gemm"], calibrate=False)
    assert report.model.scaled and report.model.models_scale == 0.5 and report.model.hidden_size == 128


# -------------------------------------------------------------------------------- calibration


def _synthetic(report, factor):
    """The report's ok rows with measurements = factor x the planner's prediction."""
    return [
        c.model_copy(update={"measured_seconds": c.predicted_seconds * factor})
        for c in report.checks
        if c.status == "ok"
    ]


@pytest.mark.parametrize("factor", [3.0, 0.5])
def test_calibration_moves_predictions_toward_measurements(tiny_report, tmp_path, factor):
    hw = get_profile("cpu")
    cal = calibrate_report(
        _synthetic(tiny_report, factor), hw, efficiency_for(hw), tiny_report.device, "tiny", "fp32", write=False
    )
    assert cal.status == "fitted" and cal.factors_after.kind == "calibrated"
    for e in cal.errors:
        if factor > 1:  # measured > predicted: calibrated predictions rise
            assert e.predicted_seconds_after > e.predicted_seconds_before, e.name
        else:
            assert e.predicted_seconds_after < e.predicted_seconds_before, e.name
    assert cal.median_abs_error_pct_after < cal.median_abs_error_pct_before
    if factor < 1:  # the CPU placeholder was beaten: its peaks are raised, not fractions above 1
        assert "hbm_bandwidth_bytes_per_s" in cal.peaks_raised


def test_calibration_on_real_measurements_single_factor_checks(tiny_report):
    """Bandwidth and launch factors are fitted from one check each: the sign must follow the measurement.

    Fitted from those checks alone: their fit is exact, so it is never refused, while the whole
    report's fit (with the CPU GEMMs) may be refused on a loaded machine (tests/test_calibration_bounds.py).
    """
    hw = get_profile("cpu")
    exact = [c for c in tiny_report.checks if c.benchmark in ("memory_bandwidth", "launch_overhead")]
    assert exact, "the tiny report ran no bandwidth or launch check"
    cal = calibrate_report(exact, hw, efficiency_for(hw), tiny_report.device, "tiny", "fp32")
    assert cal.status == "fitted", cal.reason
    assert any(e.name.startswith("copy") for e in cal.errors) and any(e.name.startswith("launch") for e in cal.errors)
    # a factor clipped to its physical range (a fast CPU's launches, under 2 us) cannot match exactly
    clipped = {b.factor for b in cal.bounds_hit}
    factor_of = {"copy": "bandwidth_fraction", "launch": "kernel_launch_seconds"}
    for e in cal.errors:
        if e.name.startswith(("copy", "launch")):
            if factor_of[e.name.split()[0]] not in clipped:
                assert abs(e.error_pct_after) < 1e-6
            assert (e.predicted_seconds_after - e.predicted_seconds_before) * (
                e.measured_seconds - e.predicted_seconds_before
            ) >= 0


def test_calibrated_profile_is_written_and_loaded(tiny_spec, tmp_path, monkeypatch):
    monkeypatch.setenv("PLANNER_HARDWARE_DIR", str(tmp_path))
    # single-factor checks: their fit is exact, so it is never refused (a CPU GEMM fit may be:
    # tests/test_calibration_bounds.py)
    report = validate(tiny_spec, benchmarks=["memory_bandwidth", "launch_overhead"], write_calibration=True)
    cal = report.calibration
    assert cal.status == "written" and cal.profile_visible and Path(cal.file) == tmp_path / "cpu-calibrated.yaml"
    loaded = get_profile("cpu-calibrated")
    assert loaded.efficiency.kind == "calibrated" and loaded.is_calibrated
    assert calibrated_for("cpu").id == "cpu-calibrated"
    assert set(loaded.calibration_info) >= {"card", "driver", "torch_version", "date"}
    assert loaded.efficiency.bandwidth_fraction == pytest.approx(cal.factors_after.bandwidth_fraction)
    rf = roofline(tiny_spec, loaded, Scenario(gpu="cpu-calibrated"), "decode", 1, 64)
    assert rf.kind == "calibrated"


def test_calibration_outside_the_search_path_says_how_to_use_it(tiny_report, tmp_path, monkeypatch):
    monkeypatch.delenv("PLANNER_HARDWARE_DIR", raising=False)
    hw = get_profile("cpu")
    exact = [c for c in tiny_report.checks if c.benchmark in ("memory_bandwidth", "launch_overhead")]  # never refused
    cal = calibrate_report(
        exact, hw, efficiency_for(hw), tiny_report.device, "tiny", "fp32", write=True, folder=tmp_path
    )
    assert cal.status == "written" and not cal.profile_visible and f"PLANNER_HARDWARE_DIR={tmp_path}" in cal.note


def test_plan_of_round_trips_a_row(tiny_report):
    hw = get_profile("cpu")
    for c in tiny_report.checks:
        if c.ops:
            assert predict(plan_of(c), hw, efficiency_for(hw))[0] == pytest.approx(c.predicted_seconds)


# ------------------------------------------------------------------------------------ safety


def test_memory_guard_refuses_and_the_suite_reports_oom(tiny_spec):
    report = validate(tiny_spec, free_bytes=lambda: 10_000, calibrate=False)
    for bench in ("memory_bandwidth", "gemm", "attention_decode", "layer_forward", "kv_cache"):
        row = next(c for c in report.checks if c.benchmark == bench and not c.includes_step_overhead)
        assert row.status == "oom" and "memory guard" in row.reason, (bench, row.reason)
    eager = next(c for c in report.checks if c.name.endswith("eager"))
    assert eager.status == "ok"  # 4 KiB of tiny kernels is below the guard's notice


def test_memory_guard_message_has_the_numbers():
    guard = MemoryGuard("cpu", 0.5, free_bytes=lambda: 2**30)
    guard.check(2**29, "fits exactly")
    with pytest.raises(MemoryGuardRefused, match=r"needs 1\.00 GiB.*50% of 1\.00 GiB free = 512\.00 MiB"):
        guard.check(2**30, "too big")
    assert meminfo_bytes("MemTotal") is None or meminfo_bytes("MemTotal") > 0


def test_injected_out_of_memory_is_a_row(tiny_spec, monkeypatch):
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(torch, "mm", oom)
    report = validate(tiny_spec, benchmarks=["gemm", "attention_decode"], calibrate=False)
    gemms = [c for c in report.checks if c.benchmark == "gemm"]
    assert gemms and all(c.status == "oom" and "out of memory while running" in c.reason for c in gemms)
    assert all(c.status == "ok" for c in report.checks if c.benchmark == "attention_decode")


@pytest.mark.parametrize(
    "exc,expected",
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (MemoryError(), True),
        (RuntimeError("shape mismatch"), False),
        (ValueError("out of memory"), False),
    ],
)
def test_is_oom(exc, expected):
    assert is_oom(exc) is expected


def test_benchmark_time_limit_times_out_checks(tiny_spec):
    report = validate(tiny_spec, benchmarks=["gemm", "attention_decode"], benchmark_time_limit_s=1e-9, calibrate=False)
    assert {c.status for c in report.checks} == {"timeout"}
    assert all("time limit" in c.reason for c in report.checks)


def test_suite_time_limit_skips_the_rest(tiny_spec):
    report = validate(tiny_spec, time_limit_s=1e-9, calibrate=False)
    assert {c.status for c in report.checks} <= {"skipped", "unavailable"}
    assert any(c.status == "skipped" and "suite time limit" in c.reason for c in report.checks)


def test_progress_reports_every_check(tiny_spec):
    seen = []
    report = validate(
        tiny_spec,
        benchmarks=["memory_bandwidth", "launch_overhead"],
        calibrate=False,
        progress=lambda name, i, n: seen.append((name, i, n)),
    )
    assert [i for _, i, _ in seen] == list(range(1, len(report.checks) + 1))
    assert {n for _, _, n in seen} == {len(report.checks)}


def test_group_progress_counts_each_benchmark_on_its_own(tiny_spec):
    seen: dict[str, list] = {}
    report = validate(
        tiny_spec,
        benchmarks=["memory_bandwidth", "launch_overhead"],
        calibrate=False,
        group_progress=lambda group, i, n: seen.setdefault(group, []).append((i, n)),
    )
    for group in {c.benchmark for c in report.checks}:
        total = sum(c.benchmark == group for c in report.checks)
        assert seen[group] == [(i, total) for i in range(1, total + 1)], group


# ------------------------------------------------------------------------- no GPU, no NVML


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_no_gpu_is_a_clear_error(tiny_spec):
    message = "no CUDA GPU found (torch.cuda.is_available() is False); run with --device cpu"
    with pytest.raises(NoGPUError, match=message.replace("(", r"\(").replace(")", r"\)")):
        detect_device("cuda")
    with pytest.raises(NoGPUError):
        run_validation(tiny_spec, None, "cuda")


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_cli_no_gpu_exits_2(tmp_path, capsys):
    from planner.cli import main

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA_CONFIG))
    assert main(["validate", str(config), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU found (torch.cuda.is_available() is False)" in err and "--device cpu" in err


def test_cli_validate_cpu_json(tmp_path, capsys, monkeypatch):
    from planner.cli import main

    monkeypatch.setenv("PLANNER_HARDWARE_DIR", str(tmp_path))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA_CONFIG))
    argv = [
        "validate",
        str(config),
        "--device",
        "cpu",
        "--quick",
        "--cpu-threads",
        "1",
        "--format",
        "json",
        "--benchmarks",
        "memory_bandwidth,attention_decode",
        "--write",
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"device", "profile", "checks", "calibration"} <= set(data)
    assert all(
        {"name", "predicted_seconds", "measured_seconds", "error_pct", "status"} <= set(c) for c in data["checks"]
    )
    assert data["calibration"]["status"] == "written"
    assert main([*argv[:-3], "--format", "table", "--no-calibrate", "--benchmarks", "memory_bandwidth"]) == 0
    assert "copy" in capsys.readouterr().out


class _Rates:
    def __init__(self, gpu, memory):
        self.gpu, self.memory = gpu, memory


class FakeNVML:
    """Just enough of pynvml for the sampler; ``fail`` makes nvmlInit raise."""

    def __init__(self, fail: bool = False, rates=(90, 10)):
        self.fail, self.rates, self.shutdowns = fail, rates, 0

    def nvmlInit(self):
        if self.fail:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return _Rates(*self.rates)


def test_sampler_without_nvml_is_unavailable_not_a_crash(monkeypatch):
    failing = UtilizationSampler("cuda", nvml=FakeNVML(fail=True)).start().stop()
    assert failing.status == "unavailable" and "NVML Shared Library Not Found" in failing.reason
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    missing = UtilizationSampler("cuda").start().stop()
    assert missing.status == "unavailable" and "pynvml" in missing.reason


def test_sampler_files_samples_per_benchmark():
    fake = FakeNVML(rates=(95, 12))
    s = UtilizationSampler("cuda", interval_s=0.005, nvml=fake).start()
    s.tag("gemm")
    import time

    time.sleep(0.05)
    report = s.stop()
    assert report.status == "ok" and fake.shutdowns == 1
    gemm = next(r for r in report.readings if r.benchmark == "gemm")
    assert gemm.samples >= 1 and gemm.diagnosis == "compute-bound"


@pytest.mark.parametrize(
    "gpu,memory,expected",
    [
        (95, 10, "compute-bound"),
        (30, 85, "memory-bound"),
        (95, 90, "memory-bound"),
        (10, 5, "overhead/scheduling-bound"),
        (50, 40, "mixed"),
    ],
)
def test_diagnosis_reads_like_the_seed(gpu, memory, expected):
    assert diagnose(gpu, memory) == expected


# ------------------------------------------------------------------------------ gpu_check


def test_gpu_check_cpu_smoke(tmp_path):
    gpu_check = load_script("benchmarks/gpu_check.py")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA_CONFIG))
    out = tmp_path / "out"
    assert (
        gpu_check.main(["--device", "cpu", "--quick", "--out", str(out), "--cpu-threads", "1", "--models", str(config)])
        == 0
    )
    data = json.loads((out / "report.json").read_text())
    assert data["models"][0]["report"]["checks"]
    summary = (out / "summary.md").read_text()
    assert "| check | predicted | measured | error | status |" in summary
    cal = data["calibration"]
    # Every check of a whole model is fitted here (GEMMs, layers, forwards), and a loaded CPU measures
    # them noisily: the core may refuse a fit that worsens its own checks (CI saw 26.1% -> 30.5% once).
    # Both outcomes are the script's job to report; which one a run gets is the CPU's, not the script's.
    assert cal["status"] in ("written", "refused"), cal
    written = out / "hardware" / "cpu-calibrated.yaml"
    if cal["status"] == "written":
        assert written.exists() and cal["file"] == str(written)
        assert cal["median_abs_error_pct_after"] <= cal["median_abs_error_pct_before"]
    else:
        assert not written.exists() and cal["file"] is None
        assert cal["reason"].startswith("the fit makes its own checks worse") and "%" in cal["reason"]


def test_unmatched_device_gets_a_probed_profile(tiny_spec, monkeypatch):
    """No profile names the device: a copy and a GEMM measure its peaks, and the report says so."""
    import planner.bench.suite as suite

    monkeypatch.setattr(suite, "profile_for_device", lambda dev, given: (None, "detected", "no profile matches"))
    report = validate(tiny_spec, benchmarks=["memory_bandwidth", "attention_decode"], calibrate=False)
    assert report.profile.origin == "detected" and report.profile.id.startswith("detected-")
    assert _finite_positive(report.profile.hbm_bandwidth_bytes_per_s) and _finite_positive(
        report.profile.peak_flops_per_s["fp32"]
    )
    assert all(c.status == "ok" and _finite_positive(c.predicted_seconds) for c in report.checks)
