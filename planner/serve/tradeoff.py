"""The chunked-prefill token budget's trade: newcomers' TTFT against the running requests' TPOT.

vLLM gives each step ``--max-num-batched-tokens`` tokens: every decoding request takes one, prefill chunks
take the rest. A small budget cuts long prompts into many chunks, so a decode step carries little prefill
work and TPOT stays low, but a newcomer waits several steps for its first token; a large budget does the
reverse (vLLM's docs, "Performance tuning: chunked prefill": smaller values give better ITL, larger values
better TTFT). ``budget_tradeoff`` simulates the same workload once per budget on one replica and returns
the percentiles of both sides, so the curve can be read for a target (a TPOT SLO and the best TTFT under it).
Each point is a simulation under the step-cost model, not a measurement.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.errors import ScenarioError
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.workload import Workload

#: Most budgets one sweep simulates (each is a whole simulation of the workload).
MAX_BUDGETS = 12


class BudgetPoint(BaseModel):
    """One token budget and what the simulated replica gave at it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_num_batched_tokens: int = Field(description="The step's token budget (vLLM --max-num-batched-tokens).")
    ttft_p50_seconds: float | None = Field(description="Median time to first token, queueing included, seconds.")
    ttft_p99_seconds: float | None = Field(description="99th-percentile time to first token, seconds.")
    tpot_p50_seconds: float | None = Field(description="Median time per output token after the first, seconds.")
    tpot_p99_seconds: float | None = Field(description="99th-percentile time per output token, seconds.")
    throughput_tokens_per_s: float | None = Field(description="Output tokens per second of the run.")
    overloaded: bool | None = Field(description="The offered rate is above this budget's sustainable rate.")


def budget_tradeoff(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: Workload,
    budgets: Sequence[int],
    efficiency: Efficiency | None = None,
) -> tuple[BudgetPoint, ...]:
    """``workload`` on one replica of ``sc`` at each token budget (chunked prefill on), in budget order.

    A budget below ``max_num_seqs`` is refused by the scheduler (every running request needs a token), so
    the sweep says which ones and why instead of simulating them.
    """
    wanted = sorted(set(budgets))
    if not wanted or len(wanted) > MAX_BUDGETS:
        raise ScenarioError(
            f"a budget sweep takes 1 to {MAX_BUDGETS} token budgets; got {len(wanted)}.",
            hint="Pass a few, e.g. --budget-sweep 512,1024,2048,4096,8192.",
        )
    points = []
    for budget in wanted:
        at = sc.model_copy(update={"max_num_batched_tokens": budget, "enable_chunked_prefill": True})
        res = simulate_scenario(model, hw, at, workload, efficiency)
        ttft, tpot = res.ttft_seconds, res.tpot_seconds
        points.append(
            BudgetPoint(
                max_num_batched_tokens=budget,
                ttft_p50_seconds=ttft.p50 if ttft else None,
                ttft_p99_seconds=ttft.p99 if ttft else None,
                tpot_p50_seconds=tpot.p50 if tpot else None,
                tpot_p99_seconds=tpot.p99 if tpot else None,
                throughput_tokens_per_s=res.throughput_tokens_per_s,
                overloaded=res.overloaded,
            )
        )
    return tuple(points)
