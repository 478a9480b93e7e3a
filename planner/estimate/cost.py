"""Cost: GPU-hours, dollars and energy per million tokens, from a throughput and the cards' price and power.

    GPU-hours per 1M tokens = GPUs x share of their time / (tokens/s x 3600) x 1e6
    $ per 1M tokens          = GPU-hours x price per GPU-hour
    kWh per 1M tokens       <= GPU-hours x TDP / 1000     (an upper bound: cards rarely sit at TDP)

``share`` splits the GPUs' time between kinds of tokens (e.g. the fraction of step time spent in
prefill, for input tokens). Unknown inputs give None, never 0.
"""

from __future__ import annotations

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6
WATTS_PER_KILOWATT = 1000.0


def gpu_hours_per_million_tokens(gpus: int, tokens_per_s: float, share: float = 1.0) -> float | None:
    """GPU-hours that one million tokens take when ``gpus`` cards spend ``share`` of their time on them."""
    if tokens_per_s <= 0:
        return None
    return gpus * share / (tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_MILLION


def usd_per_million_tokens(
    price_per_gpu_hour_usd: float | None, gpus: int, tokens_per_s: float, share: float = 1.0
) -> float | None:
    """Dollars per million tokens; None without a price or a throughput."""
    hours = gpu_hours_per_million_tokens(gpus, tokens_per_s, share)
    return None if hours is None or price_per_gpu_hour_usd is None else hours * price_per_gpu_hour_usd


def kwh_per_million_tokens_upper_bound(
    tdp_watts: float | None, gpus: int, tokens_per_s: float, share: float = 1.0
) -> float | None:
    """kWh per million tokens if every card drew its TDP (an upper bound); None without a TDP."""
    hours = gpu_hours_per_million_tokens(gpus, tokens_per_s, share)
    return None if hours is None or tdp_watts is None else hours * tdp_watts / WATTS_PER_KILOWATT
