"""Timing: warm up, time each call on the device's own clock, report the median.

``measure(step, ...)`` calls ``step(i)`` ``warmup`` times (not reported), then up to ``repeats``
times timed, each with a new ``i`` so the step can rotate between several input sets (caches then
cannot serve a repeat from the previous one). On a GPU each call sits between two CUDA events and
the host waits for the end event before the next call, so a time is the device's, not the
launch queue's; on CPU it is ``time.perf_counter``. Every call is timed, the first one too, and
sizes the next: a call starts only while the deadline holds one more at that pace (warm-up keeps
room for one timed call), and repeats also stop once the timed calls of the check exceed
``max_seconds``. A check therefore passes its time limit by at most one call.

Also here: random fills (never zeros, which some kernels and caches shortcut) and the rotation
count that makes a step's inputs span several times the last-level cache.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from planner.bench.safety import Deadline


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
        return (
            f"median of {self.repeats} timed calls "
            f"({self.clock}; min {self.min_seconds:.3g} s, max {self.max_seconds:.3g} s)"
        )


def synchronize(torch, device_kind: str) -> None:
    if device_kind == "cuda":
        torch.cuda.synchronize()


def _timed_call(torch, device_kind: str, step: Callable[[int], object], i: int) -> float:
    """Seconds of one ``step(i)`` on the device's clock (CUDA events) or the host's (perf_counter)."""
    if device_kind == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(i)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    step(i)
    return time.perf_counter() - t0


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
    """Time ``step(i)``; raise BenchTimeout when the deadline leaves no room for one timed call.

    Every call is timed, the first one included, and the last call's time sizes the next: a call
    starts only while the time left holds one more at that pace (a warm-up call only while it
    holds two, so one timed call stays possible), so a check passes its limit by at most one
    call. With ``warmup`` 0 the first call is the first timed one.
    """
    if deadline.expired():
        raise deadline.timeout("before the first call")
    synchronize(torch, device_kind)
    last = _timed_call(torch, device_kind, step, 0)
    samples: list[float] = [] if warmup else [last]
    i, warm_left = 1, max(warmup - 1, 0)
    while warm_left > 0 and deadline.remaining() > 2 * last:
        last = _timed_call(torch, device_kind, step, i)
        i, warm_left = i + 1, warm_left - 1
    while len(samples) < repeats and (not samples or sum(samples) <= max_seconds):
        if deadline.remaining() <= last:
            break
        last = _timed_call(torch, device_kind, step, i)
        samples.append(last)
        i += 1
    if not samples:
        raise deadline.timeout(
            f"during warm-up: one call takes {last:.3g} s and {max(deadline.remaining(), 0.0):.3g} s "
            "are left, too little for a timed call"
        )
    return Timing(
        median_seconds=statistics.median(samples),
        min_seconds=min(samples),
        max_seconds=max(samples),
        repeats=len(samples),
        clock="CUDA events" if device_kind == "cuda" else "perf_counter",
    )


def rotation_slots(
    bytes_per_slot: float, cache_bytes: int | None, multiple: float, max_slots: int, allowance_bytes: int | None
) -> int:
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
