"""The Validate suite's limits hold: a container's memory cap, torch's CPU out-of-memory, time limits
inside each check, and refused knobs (NaN time limits, negative threads) with the flag named.

Cgroups are faked with a folder (the root paths are arguments); time limits with sleeping steps.
Timings are measured, and asserted only against generous guards (a loaded 2-core machine is slow).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from planner.bench import benchmarks as bench_mod  # noqa: E402
from planner.bench import run_validation  # noqa: E402
from planner.bench.limits import SuiteLimits  # noqa: E402
from planner.bench.safety import (  # noqa: E402
    BenchTimeout,
    Deadline,
    MemoryGuard,
    MemoryGuardRefused,
    cgroup_headroom_bytes,
    fill,
    host_free_bytes,
    is_oom,
)
from planner.bench.timing import measure  # noqa: E402
from planner.errors import PlannerError  # noqa: E402
from planner.model.families import build_spec  # noqa: E402
from tests.conftest import TINY_LLAMA_CONFIG  # noqa: E402
from tests.test_bench import TINY  # noqa: E402 (the suite sizes the bench tests run at)

GiB = 2**30
V1_UNLIMITED = "9223372036854771712"


@pytest.fixture(scope="module")
def tiny_spec():
    return build_spec(TINY_LLAMA_CONFIG, "tiny-llama")


def _write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)


def _meminfo(tmp_path: Path, available_bytes: int) -> str:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       {64 * GiB // 1024} kB\nMemAvailable:   {available_bytes // 1024} kB\n")
    return str(path)


# --------------------------------------------------------------------------------- cgroups


def test_cgroup_v2_cap_wins_over_host_free_memory(tmp_path):
    """The issue's case: 13 GiB free on the host, a 6 GiB container cap: the guard must not allow 6.5 GiB."""
    root = tmp_path / "cgroup"
    _write(root, memory__max=str(6 * GiB), memory__current=str(GiB // 2), memory__stat="anon 1\ninactive_file 0\n")
    proc = tmp_path / "self_cgroup"
    proc.write_text("0::/\n")
    free = host_free_bytes(_meminfo(tmp_path, 13 * GiB), str(root), str(proc))
    assert free == 6 * GiB - GiB // 2
    guard = MemoryGuard("cpu", 0.5, free_bytes=lambda: free)
    guard.check(2.7 * GiB, "fits under the cap")
    with pytest.raises(MemoryGuardRefused, match=r"needs 6\.50 GiB.*50% of 5\.50 GiB free"):
        guard.check(6.5 * GiB, "what the host alone would allow")


def test_cgroup_v2_page_cache_is_headroom_and_max_means_no_limit(tmp_path):
    root = tmp_path / "cgroup"
    _write(root, memory__max=str(4 * GiB), memory__current=str(3 * GiB), memory__stat=f"inactive_file {2 * GiB}\n")
    proc = tmp_path / "self_cgroup"
    proc.write_text("0::/\n")
    assert cgroup_headroom_bytes(str(root), str(proc)) == 3 * GiB  # 4 - (3 - 2 reclaimable)
    _write(root, memory__max="max\n")
    assert cgroup_headroom_bytes(str(root), str(proc)) is None
    assert host_free_bytes(_meminfo(tmp_path, 13 * GiB), str(root), str(proc)) == 13 * GiB


def test_cgroup_v2_nested_group_and_its_parent(tmp_path):
    """/proc/self/cgroup names a nested group; a tighter limit on a parent applies too."""
    root = tmp_path / "cgroup"
    _write(root / "user.slice", memory__max=str(2 * GiB), memory__current=str(GiB))
    _write(root / "user.slice" / "job", memory__max=str(8 * GiB), memory__current=str(GiB // 4))
    proc = tmp_path / "self_cgroup"
    proc.write_text("0::/user.slice/job\n")
    assert cgroup_headroom_bytes(str(root), str(proc)) == GiB


def test_cgroup_v1_limit_usage_and_unlimited(tmp_path):
    root = tmp_path / "cgroup"
    mem = root / "memory"
    _write(mem, memory__limit_in_bytes=V1_UNLIMITED, memory__usage_in_bytes=str(5 * GiB))
    _write(
        mem / "docker" / "abc",
        memory__limit_in_bytes=str(6 * GiB),
        memory__usage_in_bytes=str(2 * GiB),
        memory__stat=f"cache {GiB}\ntotal_inactive_file {GiB // 2}\n",
    )
    proc = tmp_path / "self_cgroup"
    proc.write_text("12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n")
    assert cgroup_headroom_bytes(str(root), str(proc)) == 6 * GiB - (2 * GiB - GiB // 2)
    _write(mem / "docker" / "abc", memory__limit_in_bytes=V1_UNLIMITED)
    assert cgroup_headroom_bytes(str(root), str(proc)) is None


def test_no_cgroup_files_fall_back_to_the_host(tmp_path):
    assert cgroup_headroom_bytes(str(tmp_path / "none"), str(tmp_path / "none")) is None
    assert host_free_bytes(_meminfo(tmp_path, 3 * GiB), str(tmp_path / "none"), str(tmp_path / "none")) == 3 * GiB


def test_cgroup_over_its_limit_leaves_zero_not_negative(tmp_path):
    root = tmp_path / "cgroup"
    _write(root, memory__max=str(GiB), memory__current=str(2 * GiB))
    assert cgroup_headroom_bytes(str(root), str(tmp_path / "none")) == 0


# ---------------------------------------------------------------------------- out of memory


def _cpu_alloc_error() -> RuntimeError:
    try:
        torch.empty(2**62, dtype=torch.uint8)
    except RuntimeError as err:
        return err
    pytest.skip("this host allocated 4 EiB")


def test_torch_cpu_allocation_failure_is_oom():
    err = _cpu_alloc_error()
    assert is_oom(err), str(err)
    assert is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 8 bytes."))
    assert not is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


def test_cpu_allocation_failure_in_a_check_is_an_oom_row(tiny_spec, monkeypatch):
    err = _cpu_alloc_error()

    def failing_mm(*args, **kwargs):
        raise err

    monkeypatch.setattr(torch, "mm", failing_mm)
    report = run_validation(tiny_spec, None, "cpu", sizes=TINY, cpu_threads=1, benchmarks=["gemm"], calibrate=False)
    assert report.checks and {c.status for c in report.checks} == {"oom"}
    assert all("can't allocate memory" in c.reason for c in report.checks)


# ------------------------------------------------------------------------------ time limits


def _sleeper(seconds: float):
    calls = []

    def step(i):
        calls.append(i)
        time.sleep(seconds)

    return step, calls


@pytest.mark.parametrize("warmup", [0, 1, 3])
def test_measure_stops_within_one_call_of_the_limit(warmup):
    step, calls = _sleeper(0.2)
    deadline = Deadline(0.7, "test")
    t0 = time.monotonic()
    timing = measure(torch, "cpu", step, warmup=warmup, repeats=50, deadline=deadline, max_seconds=100.0)
    elapsed = time.monotonic() - t0
    assert timing.repeats >= 1 and timing.median_seconds >= 0.2
    assert elapsed <= 0.7 + 0.2 + 0.5, (elapsed, len(calls))  # limit + one call + scheduling slack


def test_measure_times_out_when_one_call_is_longer_than_the_time_left():
    step, calls = _sleeper(0.3)
    t0 = time.monotonic()
    with pytest.raises(BenchTimeout, match=r"one call takes 0\.3\d* s"):
        measure(torch, "cpu", step, warmup=1, repeats=5, deadline=Deadline(0.2, "test"), max_seconds=10.0)
    assert len(calls) == 1 and time.monotonic() - t0 < 0.3 + 0.5


def test_fill_sizes_the_rotation_from_the_first_set():
    t0 = time.monotonic()
    items = fill(lambda: time.sleep(0.15) or "x", 20, Deadline(0.5, "test"), "inputs")
    elapsed = time.monotonic() - t0
    assert 1 <= len(items) < 20
    assert elapsed <= 0.5 + 0.15 + 0.5, elapsed
    with pytest.raises(BenchTimeout, match="while preparing inputs"):
        fill(lambda: time.sleep(0.1), 3, Deadline(0.05, "test"), "inputs")


def test_slow_setup_cannot_overrun_the_group_limit(tiny_spec, monkeypatch):
    """Each tensor takes 0.2 s to draw (a set of q, k, v 0.6 s): the old loops drew all 8 sets of a
    check (4.8 s) before looking at the clock; now a group ends within its limit plus about one set."""
    real = bench_mod.random_tensor

    def slow_random(*args, **kwargs):
        time.sleep(0.2)
        return real(*args, **kwargs)

    monkeypatch.setattr(bench_mod, "random_tensor", slow_random)
    sizes = TINY.model_copy(
        update={"max_rotation_slots": 8, "rotation_cache_multiple": 1e6, "repeats": 50, "max_seconds_per_check": 100.0}
    )
    t0 = time.monotonic()
    report = run_validation(
        tiny_spec,
        None,
        "cpu",
        sizes=sizes,
        cpu_threads=1,
        benchmarks=["attention_decode"],
        benchmark_time_limit_s=1.0,
        calibrate=False,
    )
    elapsed = time.monotonic() - t0
    assert {c.status for c in report.checks} <= {"ok", "timeout"}
    assert elapsed < 1.0 + 0.6 + 1.5, elapsed  # limit + one set + setup slack; the old code took 5.5 s


# ------------------------------------------------------------------------- refused settings


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"time_limit_s": math.nan}, "--time-limit (time_limit_s) is nan"),
        ({"time_limit_s": math.inf}, "--time-limit (time_limit_s) is inf"),
        ({"time_limit_s": -1.0}, "--time-limit (time_limit_s) is -1.0"),
        ({"time_limit_s": 0.0}, "--time-limit"),
        ({"time_limit_s": 1e9}, "at most one day"),
        ({"benchmark_time_limit_s": math.nan}, "--benchmark-time-limit (benchmark_time_limit_s) is nan"),
        ({"cpu_threads": -1}, "--cpu-threads (cpu_threads) is -1"),
        ({"cpu_threads": 0}, "a count from 1 to 4096"),
        ({"cpu_threads": True}, "--cpu-threads"),
        ({"memory_fraction": math.nan}, "--memory-fraction (memory_fraction) is nan"),
        ({"memory_fraction": 1.5}, "in (0, 1]"),
        ({"models_scale": 0.0}, "--models-scale"),
        ({"sampler_interval_s": -0.1}, "sampler_interval_s is -0.1"),
    ],
)
def test_run_validation_refuses_bad_limits_naming_the_flag(tiny_spec, kwargs, fragment):
    with pytest.raises(PlannerError) as info:
        run_validation(tiny_spec, None, "cpu", sizes=TINY, calibrate=False, **kwargs)
    assert fragment in str(info.value)
    assert "Pass e.g." in str(info.value)


def test_limits_model_accepts_the_defaults_and_none():
    limits = SuiteLimits.checked(time_limit_s=None, benchmark_time_limit_s=5.0, cpu_threads=2)
    assert limits.time_limit_s is None and limits.benchmark_time_limit_s == 5.0 and limits.cpu_threads == 2


def test_deadline_refuses_nan():
    with pytest.raises(PlannerError, match="finite number"):
        Deadline(math.nan, "suite")
