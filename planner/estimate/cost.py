"""Cost: dollars and energy per million tokens, from a throughput and the cards' price and power.

    $ per 1M tokens = price per GPU-hour x GPUs / 3600 / (tokens/s) x 1e6
    J per 1M tokens <= TDP x GPUs / (tokens/s) x 1e6     (an upper bound: cards rarely sit at TDP)

Unknown inputs give None, never 0.
"""

from __future__ import annotations

SECONDS_PER_HOUR = 3600.0
TOKENS_PER_MILLION = 1e6
JOULES_PER_KWH = 3.6e6


def usd_per_million_tokens(price_per_gpu_hour_usd: float | None, gpus: int, tokens_per_s: float) -> float | None:
    """Dollars per million tokens at ``tokens_per_s`` on ``gpus`` cards; None without a price."""
    if price_per_gpu_hour_usd is None or tokens_per_s <= 0:
        return None
    return price_per_gpu_hour_usd * gpus / SECONDS_PER_HOUR / tokens_per_s * TOKENS_PER_MILLION


def kwh_per_million_tokens_upper_bound(tdp_watts: float | None, gpus: int, tokens_per_s: float) -> float | None:
    """kWh per million tokens if every card drew its TDP (an upper bound); None without a TDP."""
    if tdp_watts is None or tokens_per_s <= 0:
        return None
    return tdp_watts * gpus / tokens_per_s * TOKENS_PER_MILLION / JOULES_PER_KWH
