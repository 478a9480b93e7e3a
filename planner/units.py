"""Units: byte and time constants, and formatting at the edges.

Inside the planner every quantity is in base units (bytes, seconds, FLOPs, FLOP/s, bytes/s).
Convert only when printing. GiB is 2**30 bytes, GB is 10**9 bytes; labels say which.
"""

from __future__ import annotations

import math

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
KB = 1000
MB = 1000**2
GB = 1000**3
TB = 1000**4
TERA = 1e12
GIGA = 1e9
MS_PER_S = 1000.0


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers: cdiv(17, 16) == 2."""
    return -(-a // b)


def round_up(value: int, multiple: int) -> int:
    """Round ``value`` up to a multiple of ``multiple``: round_up(50257, 64) == 50304."""
    return cdiv(value, multiple) * multiple


def fmt_gib(num_bytes: float | None, digits: int = 1) -> str:
    """'12.3 GiB' (binary), or 'unknown' for None."""
    if num_bytes is None:
        return "unknown"
    return f"{num_bytes / GiB:,.{digits}f} GiB"


def _scaled(value: float | None, units: tuple[tuple[str, float], ...], bare: str) -> str:
    """``value`` in the largest of ``units`` (largest first) it reaches, two decimals; below them all, a
    whole number with ``bare`` after it; 'unknown' for None."""
    if value is None:
        return "unknown"
    value = float(value)
    for unit, size in units:
        if abs(value) >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f}{bare}"


def fmt_bytes(num_bytes: float | None) -> str:
    """Pick B/KiB/MiB/GiB/TiB so the number reads well."""
    return _scaled(num_bytes, (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)), " B")


def fmt_seconds(seconds: float | None) -> str:
    """'12.3 ms', '1.20 s', '45.0 µs'."""
    if seconds is None:
        return "unknown"
    if seconds >= 1.0:
        return f"{seconds:,.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:,.2f} ms"
    return f"{seconds * 1e6:,.1f} µs"


def fmt_count(value: float | None) -> str:
    """'8.03 B', '124.4 M', '37' for parameter or token counts."""
    return _scaled(value, (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)), "")


def fmt_int(value: float | None) -> str:
    """'131,072'; 'unknown' for None."""
    return "unknown" if value is None else f"{value:,.0f}"


def fmt_requests(concurrency: float | None) -> str:
    """Requests at once, one decimal, rounded down so it never claims more than fits: 3.947 -> '3.9',
    3.96 -> '3.9', 4.0 -> '4.0'; 'unknown' for None."""
    if concurrency is None:
        return "unknown"
    return f"{math.floor(concurrency * 10 + 1e-9) / 10:,.1f}"


def fmt_flop_count(flops: float | None) -> str:
    """'1.23 TFLOP', '456 MFLOP' (decimal SI prefixes, as FLOP counts are quoted)."""
    return _scaled(flops, (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)), " FLOP")
