"""Timing: warm up, time each call on the device's own clock, report the median.

``measure(step, ...)`` calls ``step(i)`` ``warmup`` times untimed, then up to ``repeats`` times
timed, each with a new ``i`` so the step can rotate between several input sets (caches then
cannot serve a repeat from the previous one). On a GPU each call sits between two CUDA events and
the host waits for the end event before the next call, so a time is the device's, not the
launch queue's; on CPU it is ``time.perf_counter``. Repeats stop early when the deadline passes
(after at least one) or when the timed calls of the check exceed ``max_seconds``.

Also here: random fills (never zeros, which some kernels and caches shortcut) and the rotation
count that makes a step's inputs span several times the last-level cache.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from planner.bench.safety import BenchTimeout, Deadline


@dataclass(frozen=True)
class Timing:
    """Median (and spread) of the timed calls of one check, in seconds."""

    median_seconds: float
    min_seconds: float
    max_seconds: float
    repeats: int
    clock: str

    @property
    def how(self) -> str:
        return f"median of {self.repeats} timed calls ({self.clock}; min {self.min_seconds:.3g} s, max {self.max_seconds:.3g} s)"


def synchronize(torch, device_kind: str) -> None:
    if device_kind == "cuda":
        torch.cuda.synchronize()


def measure(
    torch,
    device_kind: str,
    step: Callable[[int], object],
    *,
    warmup: int,
    repeats: int,
    deadline: Deadline,
    max_seconds: float,
) -> Timing:
    """Time ``step(i)``; raise BenchTimeout when the deadline passes before one timed call."""
    for i in range(warmup):
        step(i)
        if deadline.expired():
            break
    synchronize(torch, device_kind)
    if deadline.expired():
        raise BenchTimeout(
            f"time limit of {deadline.seconds:.3g} s ({deadline.label}) reached during warm-up, before any timed call;",
            hint="raise the time limit or use smaller sizes.",
        )
    samples: list[float] = []
    for r in range(repeats):
        i = warmup + r
        if device_kind == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(i)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            step(i)
            samples.append(time.perf_counter() - t0)
        if deadline.expired() or sum(samples) > max_seconds:
            break
    return Timing(
        median_seconds=statistics.median(samples), min_seconds=min(samples), max_seconds=max(samples),
        repeats=len(samples), clock="CUDA events" if device_kind == "cuda" else "perf_counter",
    )


def rotation_slots(bytes_per_slot: float, cache_bytes: int | None, multiple: float, max_slots: int, allowance_bytes: int | None) -> int:
    """How many input sets to rotate so together they span ``multiple`` x the cache (1 if one already does).

    Bounded by ``max_slots`` and by what the memory guard allows. 64 MiB of weights against a
    50 MiB L2 with multiple 4: ceil(200 / 64) = 4 slots.
    """
    if bytes_per_slot <= 0:
        return 1
    target = (cache_bytes or 32 * 2**20) * multiple
    slots = max(1, math.ceil(target / bytes_per_slot))
    if allowance_bytes is not None:
        slots = min(slots, max(1, int(allowance_bytes // bytes_per_slot)))
    return min(slots, max_slots)


def random_tensor(torch, shape, dtype, device, scale: float = 1.0):
    """Uniform values in [-scale, scale) (never all zeros); fp8 tensors are drawn in bf16 and cast."""
    draw_dtype = dtype if dtype.is_floating_point and dtype.itemsize >= 2 else torch.bfloat16
    t = torch.empty(shape, dtype=draw_dtype, device=device).uniform_(-scale, scale)
    return t if draw_dtype == dtype else t.to(dtype)
