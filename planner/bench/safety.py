"""Safety: the benchmarks never take more than a fraction of free memory, nor more than their time.

* ``MemoryGuard`` checks, before every allocation step, that the step's bytes stay under
  ``fraction`` x the memory free right now (``torch.cuda.mem_get_info`` plus the caching
  allocator's unused blocks on a GPU; on CPU the smaller of MemAvailable from /proc/meminfo and
  the headroom of every memory cgroup above this process, ``cgroup_headroom_bytes``), and refuses
  with the numbers otherwise.
* ``is_oom`` recognises an out-of-memory from torch (``torch.OutOfMemoryError``, which
  ``torch.cuda.OutOfMemoryError`` names too, the CPU allocator's "DefaultCPUAllocator: can't
  allocate memory", a RuntimeError saying "out of memory", ``MemoryError``), so the suite records
  it as an ``oom`` row instead of an ``error``.
* ``Deadline`` is a wall-clock budget: one for the suite, one per benchmark group. ``fill`` and
  ``planner.bench.timing.measure`` check it inside their loops and size the work from the first
  item, so a check passes its limit by at most one repetition.
* ``release`` frees what the benchmarks held (the CUDA caching allocator, garbage collection).

Nothing here changes clocks, power limits or device modes; the suite only reads them.
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from planner.errors import PlannerError
from planner.units import fmt_bytes

T = TypeVar("T")


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


#: Where the kernel mounts the cgroup file systems, and where it says which cgroups this process is in.
CGROUP_ROOT = "/sys/fs/cgroup"
PROC_SELF_CGROUP = "/proc/self/cgroup"
#: A cgroup v1 memory limit at or above this means "no limit" (the kernel prints 2^63 rounded down to a page).
_V1_UNLIMITED = 2**60


def _read_int(path: Path) -> int | None:
    """The integer a cgroup file holds; None for 'max', a missing file or anything else."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and len(text) <= 20 else None


def _stat_field(path: Path, key: str) -> int:
    """One 'key value' line of a cgroup memory.stat (0 when missing)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _cgroup_paths(proc_self_cgroup: str) -> dict[str, str]:
    """This process's cgroup path per hierarchy: 'v2' from '0::/path', 'v1' from 'N:...memory...:/path'."""
    out: dict[str, str] = {}
    try:
        lines = Path(proc_self_cgroup).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            out["v2"] = parts[2]
        elif "memory" in parts[1].split(","):
            out["v1"] = parts[2]
    return out


def _dirs_up(mount: Path, rel: str) -> list[Path]:
    """The cgroup folder at ``rel`` under ``mount`` and each parent up to the mount (a limit on any applies).

    The mount itself is always included: inside a container it is the container's own cgroup even
    when /proc/self/cgroup still names the host's path.
    """
    dirs = [mount]
    parts = [p for p in rel.strip("/").split("/") if p not in ("", ".", "..")]
    for i in range(1, len(parts) + 1):
        folder = mount.joinpath(*parts[:i])
        if folder.is_dir():
            dirs.append(folder)
    return dirs


def _headroom(limit: int | None, usage: int | None, inactive_file: int) -> int | None:
    """limit - (usage - reclaimable page cache), never below 0; None without a limit.

    ``usage`` counts the page cache, which the kernel reclaims before it refuses memory, so the
    inactive file pages are taken out as ``docker stats`` does (usage minus inactive_file).
    """
    if limit is None or limit >= _V1_UNLIMITED:
        return None
    used = max((usage or 0) - inactive_file, 0)
    return max(limit - used, 0)


def cgroup_headroom_bytes(root: str = CGROUP_ROOT, proc_self_cgroup: str = PROC_SELF_CGROUP) -> int | None:
    """Bytes this process may still allocate before a memory cgroup (a container's cap) stops it.

    cgroup v2: ``memory.max`` - ``memory.current`` (+ ``inactive_file`` of ``memory.stat``);
    cgroup v1: ``memory.limit_in_bytes`` - ``memory.usage_in_bytes`` (+ ``total_inactive_file``),
    under ``<root>/memory``. Every folder from the process's own cgroup up to the mount counts and
    the smallest headroom wins. None when no cgroup sets a limit (or none can be read).

    Example: a container capped at 6 GiB (``memory.max`` 6442450944) using 0.5 GiB has 5.5 GiB of
    headroom, even when the host's MemAvailable says 13 GiB.
    """
    mount_root = Path(root)
    rels = _cgroup_paths(proc_self_cgroup)
    # (hierarchy root, this process's path in it, limit file, usage file, reclaimable page-cache key)
    hierarchies = [(mount_root, rels.get("v2", "/"), "memory.max", "memory.current", "inactive_file")]
    v1 = mount_root / "memory"
    if v1.is_dir():
        hierarchies.append(
            (v1, rels.get("v1", "/"), "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        )
    found: list[int] = []
    for base, rel, limit, usage, inactive in hierarchies:
        for folder in _dirs_up(base, rel):
            room = _headroom(
                _read_int(folder / limit), _read_int(folder / usage), _stat_field(folder / "memory.stat", inactive)
            )
            if room is not None:
                found.append(room)
    return min(found) if found else None


def host_free_bytes(
    meminfo: str = "/proc/meminfo", cgroup_root: str = CGROUP_ROOT, proc_self_cgroup: str = PROC_SELF_CGROUP
) -> int | None:
    """Memory this process could get now: the smaller of the host's free memory and the cgroup headroom.

    Host: MemAvailable, else psutil, else free pages. Cgroup: ``cgroup_headroom_bytes``. None
    when neither can be read.
    """
    candidates = [
        v
        for v in (_host_available_bytes(meminfo), cgroup_headroom_bytes(cgroup_root, proc_self_cgroup))
        if v is not None
    ]
    return min(candidates) if candidates else None


def _host_available_bytes(meminfo: str) -> int | None:
    """MemAvailable, else psutil's available, else free pages; None if unknown."""
    free = meminfo_bytes("MemAvailable", meminfo)
    if free is not None:
        return free
    try:
        import psutil  # optional

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 (psutil is optional: any failure falls back)
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class MemoryGuard:
    """Refuses any allocation step larger than ``fraction`` x the memory free at that moment."""

    def __init__(self, device_kind: str, fraction: float, free_bytes: Callable[[], int | None] | None = None):
        if not 0 < fraction <= 1:
            raise PlannerError(
                f"memory_fraction must be in (0, 1], got {fraction};", hint="use e.g. 0.5 (the default)."
            )
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
                hint=(
                    "free memory, raise memory_fraction (--memory-fraction), or use a smaller model or models_scale < "
                    "1."
                ),
            )


#: Phrases of torch's allocator failures: CUDA ("CUDA out of memory"), the CPU allocator on Linux
#: ("DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes. Error code 12
#: (Cannot allocate memory)") and on Windows ("DefaultCPUAllocator: not enough memory").
_OOM_PHRASES = ("out of memory", "can't allocate memory", "cannot allocate memory", "not enough memory")


def is_oom(exc: BaseException) -> bool:
    """True for an out-of-memory from torch (CUDA or host allocator) or Python's MemoryError."""
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        # torch.cuda.OutOfMemoryError is the same class as torch.OutOfMemoryError (torch >= 2.1).
        kinds = tuple(
            k
            for k in (
                getattr(torch, "OutOfMemoryError", None),
                getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None),
            )
            if isinstance(k, type)
        )
        if kinds and isinstance(exc, kinds):
            return True
    except ImportError:
        pass
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(phrase in text for phrase in _OOM_PHRASES)


class Deadline:
    """A wall-clock budget of ``seconds`` from now (monotonic clock).

    ``seconds`` must be a finite number >= 0 (NaN would never expire, so it is refused here too;
    ``planner.bench.limits`` gives the user-facing message naming the flag).
    """

    def __init__(self, seconds: float, label: str):
        if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
            raise PlannerError(
                f"time limit of {label} must be a finite number of seconds >= 0, got {seconds!r};", hint="pass e.g. 60."
            )
        self.seconds = float(seconds)
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

    def timeout(self, during: str, hint: str = "raise the time limit or use smaller sizes.") -> BenchTimeout:
        """The BenchTimeout to raise when this budget ran out ``during`` some phase."""
        return BenchTimeout(f"time limit of {self.seconds:.3g} s ({self.label}) reached {during};", hint=hint)


def fill(make: Callable[[], T], count: int, deadline: Deadline, what: str) -> list[T]:
    """Up to ``count`` results of ``make()`` (rotated input sets), as many as fit in the deadline.

    The first call is timed and sizes the rest: another is made only while the time left holds
    one more call of that length, so the budget is passed by at most one call. Raises BenchTimeout
    when the deadline has already passed after the first one (nothing could be measured with it).
    """
    if deadline.expired():
        raise deadline.timeout(f"before preparing {what}")
    t0 = time.monotonic()
    items = [make()]
    each = time.monotonic() - t0
    if deadline.expired():
        raise deadline.timeout(f"while preparing {what} (one set took {each:.3g} s)")
    while len(items) < count and deadline.remaining() > each:
        items.append(make())
    return items


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
        except Exception:  # noqa: BLE001 (freeing must never raise)
            pass
