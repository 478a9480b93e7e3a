"""Cost per million tokens: GPU-hours, dollars, energy (upper bound)."""

import pytest

from planner.estimate.cost import (
    gpu_hours_per_million_tokens,
    kwh_per_million_tokens_upper_bound,
    usd_per_million_tokens,
)


def test_worked_example():
    # 4 GPUs at $2.50/GPU-hour serving 1,000 tokens/s: 1e6 tokens take 1,000 s = 0.2778 h x 4 GPUs = 1.111 GPU-hours
    assert gpu_hours_per_million_tokens(4, 1000.0) == pytest.approx(1e6 / 1000 / 3600 * 4)
    assert usd_per_million_tokens(2.5, 4, 1000.0) == pytest.approx(1.111111 * 2.5, rel=1e-5)
    # at 700 W per card the energy is at most 1.111 GPU-hours x 0.7 kW = 0.778 kWh
    assert kwh_per_million_tokens_upper_bound(700, 4, 1000.0) == pytest.approx(0.77778, rel=1e-4)


def test_share_splits_gpu_time():
    whole = gpu_hours_per_million_tokens(8, 5000.0)
    assert gpu_hours_per_million_tokens(8, 5000.0, 0.25) + gpu_hours_per_million_tokens(
        8, 5000.0, 0.75
    ) == pytest.approx(whole)


def test_unknown_inputs_are_none_not_zero():
    assert usd_per_million_tokens(None, 1, 100.0) is None
    assert kwh_per_million_tokens_upper_bound(None, 1, 100.0) is None
    assert gpu_hours_per_million_tokens(1, 0.0) is None
