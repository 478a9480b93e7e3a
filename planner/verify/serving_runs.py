"""Open-loop serving runs (``serving_vllm_v0.15.json``) as simulated planner predictions.

Each run of ``shared/reference/serving_vllm_v0.15.json`` (vLLM 0.15.1, H100 SXM, fixed lengths,
constant-rate stages back to back, a shared system prompt with prefix caching on) becomes one
simulation per stage: Poisson arrivals at the stage's rate, the run's engine arguments
(max_num_seqs, max_num_batched_tokens, max_model_len, gpu_memory_utilization, block size), the
input length, and the output length the client measured (``derived_mean_output_len_client``: some
models stopped early despite ``ignore_eos``). The prefix cache saves the shared prompt of every
user of a prompt but the first: hit rate = (1 - 1 / users per prompt) x shared / input tokens.

``stage_predictions`` returns, per stage, the predicted and measured mean E2E, TTFT and TPOT (ms)
or the reason the run cannot be predicted (model not in the catalog, ...). A run's extra server
flags (``engine_args.extra``) are read against ``EXTRA_FLAGS``: a flag that does not change a step's
time is ignored with its reason; a flag that does and that the planner does not model (the CPU
KV-offloading connector) is named in ``StagePrediction.unmodelled``, and such stages are reported
apart and left out of fits. An unknown flag is unmodelled until it is added to the table.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.efficiency import Efficiency
from planner.errors import PlannerError
from planner.hardware import get_profile
from planner.scenario import Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.workload import FixedLength, PoissonArrivals, Workload
from planner.verify.public_records import catalog_model, match_model, reference_dir

RUNS_FILE = "serving_vllm_v0.15.json"
#: Requests simulated per stage (the runs sent rate x 600-1200 s; the mean settles well before).
REQUESTS_PER_STAGE = 400
METRICS = ("e2e", "ttft", "tpot")


#: Extra ``vllm serve`` flags of the runs: pattern -> (modelled, why). Evidence for the offloading
#: connector: it copies KV blocks to host memory from the worker every step (vllm-project/vllm
#: #19854, #22605: "CPU kernel launching overhead slowing down the worker execution") and in 0.15.1
#: ran with async scheduling only through #27648's placeholder handling (decode blocks were skipped
#: until #33881, 2026-03); the planner has no term for that work.
EXTRA_FLAGS: tuple[tuple[str, bool, str], ...] = (
    (
        r"^--override-generation-config=.*attn_temperature_tuning",
        True,
        "Llama-4 attention temperature tuning: one scale on the query, no step-time effect",
    ),
    (
        r"^--disable-hybrid-kv-cache-manager$",
        True,
        "one KV pool for all layers; every layer of these models is full attention, so the pool is the same",
    ),
    (r"^--kv-offloading-size=", False, "CPU KV-cache offloading connector (per-step host copies not modelled)"),
)


def unmodelled_flags(run: dict[str, Any]) -> tuple[str, ...]:
    """The run's extra flags that change step time and that the planner does not model (unknown
    flags count as unmodelled)."""
    out = []
    for flag in run["engine_args"].get("extra") or ():
        rule = next((r for r in EXTRA_FLAGS if re.search(r[0], flag)), None)
        if rule is None or not rule[1]:
            out.append(flag)
    return tuple(out)


@dataclass(frozen=True)
class StagePrediction:
    run_id: str
    model: str
    tp: int
    rate_rps: float
    predicted_ms: dict[str, float]
    measured_ms: dict[str, float]
    unmodelled: tuple[str, ...] = field(default=())

    def error(self, metric: str) -> float:
        return self.predicted_ms[metric] / self.measured_ms[metric] - 1.0


def load_runs(path: str | Path | None = None) -> list[dict[str, Any]]:
    file = Path(path) if path else reference_dir() / RUNS_FILE
    with open(file, encoding="utf-8") as fh:
        return json.load(fh)["runs"]


def run_scenario(run: dict[str, Any]) -> Scenario:
    ea = run["engine_args"]
    return Scenario(
        gpu="h100-sxm",
        tp=run["tensor_parallel_size"],
        max_model_len=ea["max_model_len"],
        gpu_memory_utilization=ea["gpu_memory_utilization"],
        max_num_seqs=ea["max_num_seqs"],
        max_num_batched_tokens=ea["max_num_batched_tokens"],
        block_size=ea.get("block_size"),
        enable_chunked_prefill=ea.get("enable_chunked_prefill", True),
        engine_version=f"vllm@{run.get('vllm_version', '0.15.1')}",
    )


def stage_predictions(
    run: dict[str, Any], efficiency: Efficiency | None = None, requests_per_stage: int = REQUESTS_PER_STAGE
) -> list[StagePrediction] | str:
    """Predicted vs measured per stage, or why the run cannot be predicted."""
    match = match_model(run["model"])
    if match is None or match.repo_id is None:
        return f"{run['model']} is not in the bundled catalog"
    try:
        model = catalog_model(match.repo_id)
    except PlannerError as err:
        return f"{run['model']}: {err}"
    hw = get_profile("h100-sxm")
    sc = run_scenario(run)
    w = run["workload"]
    users = w.get("num_users_per_system_prompt") or 1
    hit = (1.0 - 1.0 / users) * w.get("shared_prefix_len", 0) / w["input_len"]
    out: list[StagePrediction] = []
    for stage, measured in zip(w["stages"], run["measured"]["stages"]):
        n_out = max(2, round(measured.get("derived_mean_output_len_client") or w["output_len"]))
        workload = Workload(
            arrivals=PoissonArrivals(request_rate_per_s=stage["rate_rps"]),
            num_requests=requests_per_stage,
            input_tokens=FixedLength(tokens=w["input_len"]),
            output_tokens=FixedLength(tokens=n_out),
            prefix_cache_hit_rate=hit,
        )
        try:
            res = simulate_scenario(model, hw, sc, workload, efficiency, saturation=False)
        except PlannerError as err:
            return f"{run['model']}: {err}"
        e2e, ttft, tpot = res.e2e_seconds, res.ttft_seconds, res.tpot_seconds
        if e2e is None or ttft is None or tpot is None:
            return f"{run['model']}: the simulation completed no request at {stage['rate_rps']} req/s"
        out.append(
            StagePrediction(
                run_id=run["id"],
                model=match.repo_id,
                tp=sc.tp,
                rate_rps=stage["rate_rps"],
                predicted_ms={"e2e": e2e.mean * 1e3, "ttft": ttft.mean * 1e3, "tpot": tpot.mean * 1e3},
                measured_ms={
                    "e2e": measured["e2e_mean_ms"],
                    "ttft": measured["ttft_mean_ms"],
                    "tpot": measured["tpot_mean_ms"],
                },
                unmodelled=unmodelled_flags(run),
            )
        )
    return out
