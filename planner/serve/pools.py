"""One shared pool or a pool per request class: the field's advice, with numbers.

Serving guides (vLLM's "Optimization and tuning", the llm-d / Dynamo docs on workload-aware routing) advise
giving interactive traffic and long offline or document traffic separate configs or replicas, because long
prompts in the same batches hold up the short requests' first tokens and stretch their TPOT. ``compare_pools``
puts numbers on it for a mixed workload (``Workload.classes``) on the same GPUs both ways:

* shared: as many replicas as classes, each taking 1 / R of every class's traffic (a round-robin router),
  the mix simulated on one of them;
* separate: one replica per class, each serving only its class.

Same scenario, same card count; every figure is a simulation under the step-cost model. What it leaves out:
per-pool tuning (each pool could take its own budget or max_num_seqs: ``budget_tradeoff``), and a router
smarter than round robin.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.errors import ScenarioError
from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.simulate import ClassResult
from planner.serve.workload import Workload, round_robin_share


class PoolsComparison(BaseModel):
    """Each class's latencies in one shared pool and in a pool of its own, on the same GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int = Field(description="Replicas both ways: one per class.")
    gpus: int = Field(description="GPUs both ways: replicas x tp x pp.")
    shared: tuple[ClassResult, ...] = Field(description="Per class, one replica of the shared pool (1/R of the mix).")
    separate: tuple[ClassResult, ...] = Field(description="Per class, its own replica serving only that class.")
    shared_overloaded: bool | None = Field(description="A shared replica is past its sustainable rate.")
    separate_overloaded: tuple[bool | None, ...] = Field(description="Per class, its own replica is overloaded.")


def compare_pools(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, workload: Workload, efficiency: Efficiency | None = None
) -> PoolsComparison:
    """Simulate ``workload``'s classes in a shared pool and in separate pools (module docstring)."""
    classes = workload.classes
    if len(classes) < 2:
        raise ScenarioError(
            "comparing pools needs a workload of two or more request classes.",
            hint="Give --workload-file a file with several classes.",
        )
    r = len(classes)
    mixed = simulate_scenario(model, hw, sc, round_robin_share(workload, r), efficiency)
    alone = [simulate_scenario(model, hw, sc, Workload(classes=(c,), seed=workload.seed), efficiency) for c in classes]
    return PoolsComparison(
        replicas=r,
        gpus=r * sc.gpus_per_replica,
        shared=mixed.classes,
        separate=tuple(res.classes[0] for res in alone),
        shared_overloaded=mixed.overloaded,
        separate_overloaded=tuple(res.overloaded for res in alone),
    )
