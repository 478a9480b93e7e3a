"""Safety: the benchmarks never take more than a fraction of free memory, nor more than their time.

* ``MemoryGuard`` checks, before every allocation step, that the step's bytes stay under
  ``fraction`` x the memory free right now (``torch.cuda.mem_get_info`` plus the caching
  allocator's unused blocks on a GPU, MemAvailable from /proc/meminfo on CPU), and refuses with
  the numbers otherwise.
* ``is_oom`` recognises an out-of-memory from torch (``torch.OutOfMemoryError`` or a RuntimeError
  saying "out of memory"), so the suite records it as a result instead of crashing.
* ``Deadline`` is a wall-clock budget: one for the suite, one per benchmark group.
* ``release`` frees what the benchmarks held (the CUDA caching allocator, garbage collection).

Nothing here changes clocks, power limits or device modes; the suite only reads them.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from pathlib import Path

from planner.errors import PlannerError
from planner.units import fmt_bytes


class MemoryGuardRefused(PlannerError):
    """An allocation step would take more than the allowed fraction of free memory."""


class BenchTimeout(PlannerError):
    """A benchmark ran out of its time budget before one timed repeat finished."""


def meminfo_bytes(key: str, path: str = "/proc/meminfo") -> int | None:
    """A /proc/meminfo field in bytes ('MemAvailable', 'MemTotal'); None where there is no such file."""
    try:
        for line in Path(path).read_text().splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == key:
                value, *unit = rest.split()
                return int(value) * (1024 if unit and unit[0].lower() == "kb" else 1)
    except (OSError, ValueError):
        return None
    return None


def host_free_bytes() -> int | None:
    """Memory the host could hand out now: MemAvailable, else psutil, else free pages; None if unknown."""
    free = meminfo_bytes("MemAvailable")
    if free is not None:
        return free
    try:
        import psutil  # optional

        return int(psutil.virtual_memory().available)
    except Exception:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class MemoryGuard:
    """Refuses any allocation step larger than ``fraction`` x the memory free at that moment."""

    def __init__(self, device_kind: str, fraction: float, free_bytes: Callable[[], int | None] | None = None):
        if not 0 < fraction <= 1:
            raise PlannerError(f"memory_fraction must be in (0, 1], got {fraction};", hint="use e.g. 0.5 (the default).")
        self.device_kind = device_kind
        self.fraction = fraction
        self._free = free_bytes or self._default_free

    def _default_free(self) -> int | None:
        if self.device_kind == "cuda":
            import torch

            # Blocks torch's caching allocator holds but no tensor uses are free to us too.
            cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
            return int(torch.cuda.mem_get_info()[0] + max(cached, 0))
        return host_free_bytes()

    def free_bytes(self) -> int | None:
        return self._free()

    def allowance_bytes(self) -> int | None:
        """Bytes one step may allocate now; None when free memory cannot be read (nothing is allowed)."""
        free = self.free_bytes()
        return None if free is None else int(free * self.fraction)

    def check(self, nbytes: float, what: str) -> None:
        """Raise MemoryGuardRefused when ``nbytes`` exceed the allowance (or free memory is unknown)."""
        free = self.free_bytes()
        if free is None:
            raise MemoryGuardRefused(
                f"{what}: free memory cannot be read on this system, so the guard allows nothing;",
                hint="run on Linux (/proc/meminfo) or install psutil.",
            )
        allowed = free * self.fraction
        if nbytes > allowed:
            raise MemoryGuardRefused(
                f"{what} needs {fmt_bytes(nbytes)}, more than the memory guard allows: {self.fraction:.0%} of "
                f"{fmt_bytes(free)} free = {fmt_bytes(allowed)};",
                hint="free memory, raise memory_fraction (--memory-fraction), or use a smaller model or models_scale < 1.",
            )


def is_oom(exc: BaseException) -> bool:
    """True for torch's out-of-memory errors (CUDA or host allocator)."""
    try:
        import torch

        if isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
            return True
    except ImportError:
        pass
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


class Deadline:
    """A wall-clock budget of ``seconds`` from now (monotonic clock)."""

    def __init__(self, seconds: float, label: str):
        self.seconds = seconds
        self.label = label
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float:
        return self.seconds - self.elapsed()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def within(self, seconds: float, label: str) -> Deadline:
        """A child budget: ``seconds`` from now, but never past this one."""
        return Deadline(min(seconds, max(self.remaining(), 0.0)), label)


def release(device_kind: str, collect: bool = False) -> None:
    """Hand cached CUDA blocks back to the driver; ``collect`` also runs the garbage collector
    (slow with many live objects, so the suite does it once, at the end)."""
    if collect:
        gc.collect()
    if device_kind == "cuda":
        try:
            import torch

            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:  # freeing must never raise
            pass
