"""Cached core calls and sweeps for the pages: memory plans, rooflines, latency curves, simulations, scores.

Every function here only calls ``planner`` (one call per point of a grid) and is cached with
``st.cache_data``, the one caching style of the app: each session gets its own copy of the result
(core results and tables, never a figure or another mutable object shared across sessions).
Specs, cards, scenarios and the other frozen core models are hashed by their JSON, so an unchanged
sidebar reruns a page from cache. Grids are powers of two, which is what the log axes show.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from planner.deploy.export import ExportBundle, export_bundle
from planner.efficiency import BOUND
from planner.estimate.latency import LatencyEstimate, decode_context_len, estimate_latency
from planner.estimate.memory import MemoryPlan, plan_memory, resolve
from planner.estimate.roofline import Roofline, efficiency_for, roofline
from planner.hardware import HardwareProfile
from planner.model.sources import LoadedConfig
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.serve.replica import ServingResult, simulate_scenario
from planner.serve.slo import SLO, CandidateSpace, Probe, SearchSettings, SLOPlan, plan_slo, sweep_rates
from planner.serve.workload import PoissonArrivals
from planner.serve.workload import Workload as ServedWorkload
from planner.verify.bench_results import BenchResult
from planner.verify.scoring import Score, score
from ui.derived import ScenarioSummary, operating_points, summarize


def _json(obj) -> str:
    return obj.model_dump_json()


_HASHED_BY_JSON = (
    ModelSpec,
    HardwareProfile,
    Scenario,
    LoadedConfig,
    ServedWorkload,
    SLO,
    CandidateSpace,
    SearchSettings,
    BenchResult,
)
_HASH = dict.fromkeys(_HASHED_BY_JSON, _json)
_CACHE = {"hash_funcs": _HASH, "show_spinner": False, "max_entries": 256}
_SIMULATION = {**_CACHE, "show_spinner": "Simulating...", "max_entries": 64}


def powers_of_two(low: int, high: int) -> list[int]:
    """low, 2 low, 4 low, ... up to high, with high itself last: powers_of_two(1, 12) == [1, 2, 4, 8, 12]."""
    out, value = [], max(1, low)
    while value < high:
        out.append(value)
        value *= 2
    out.append(high)
    return out


@st.cache_data(**_CACHE)
def memory_plan(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> MemoryPlan:
    """``plan_memory`` with its suggestions (each suggestion re-plans, so this is worth caching)."""
    return plan_memory(model, hw, sc)


@st.cache_data(**_CACHE)
def concurrency_vs_context(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> pd.DataFrame:
    """Max concurrency, KV tokens and the verdict for max_model_len over powers of two up to the model's maximum."""
    rows = []
    for length in powers_of_two(512, model.max_position_embeddings):
        plan = plan_memory(model, hw, sc.model_copy(update={"max_model_len": length}), suggest=False)
        rows.append(
            {
                "max_model_len": length,
                "max_concurrency": plan.max_concurrency,
                "kv_cache_tokens": plan.kv_cache_tokens,
                "fits": plan.fits,
            }
        )
    return pd.DataFrame(rows)


@st.cache_data(**_CACHE)
def roofline_stages(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, mode: str = "auto"
) -> tuple[Roofline, Roofline]:
    """(prefill, decode) rooflines of the workload: prefill of the batch's prompts, decode at the mean context.

    ``mode="bound"`` gives the pure datasheet roofline; ``"auto"`` the card's calibration or the fitted defaults.
    """
    eff = efficiency_for(hw, "bound" if mode == "bound" else "auto", sc=sc)
    wl = sc.workload
    prefill = roofline(model, hw, sc, "prefill", wl.batch_size, wl.input_len, eff)
    decode = roofline(model, hw, sc, "decode", wl.batch_size, decode_context_len(wl.input_len, wl.output_len), eff)
    return prefill, decode


@st.cache_data(**_CACHE)
def latency_at(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> tuple[LatencyEstimate, LatencyEstimate]:
    """(estimate or calibrated, bound) latency of the sidebar's workload."""
    return estimate_latency(model, hw, sc), estimate_latency(model, hw, sc, efficiency=BOUND)


def _latency_row(est: LatencyEstimate) -> dict:
    return {
        "batch": est.batch_size,
        "input_len": est.input_len,
        "output_len": est.output_len,
        "kind": est.kind,
        "ttft_s": est.ttft_seconds,
        "tpot_s": est.tpot_seconds,
        "e2e_s": est.e2e_seconds,
        "tokens_per_s": est.throughput_tokens_per_s,
        "tokens_per_s_per_gpu": est.throughput_tokens_per_s_per_gpu,
        "fits_in_kv_cache": est.fits_in_kv_cache,
        "prefill_bound": est.prefill_bound,
        "decode_bound": est.decode_bound,
    }


def _efficiencies(hw: HardwareProfile, sc: Scenario) -> list:
    return [efficiency_for(hw, sc=sc), BOUND]


@st.cache_data(**_CACHE)
def latency_vs_batch(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> pd.DataFrame:
    """TTFT, TPOT and tokens/s for batch 1, 2, 4, ... up to max_num_seqs, estimate and bound."""
    limit = resolve(model, hw, sc).max_num_seqs
    rows = []
    for eff in _efficiencies(hw, sc):
        for batch in powers_of_two(1, limit):
            rows.append(_latency_row(estimate_latency(model, hw, sc, batch_size=batch, efficiency=eff)))
    return pd.DataFrame(rows)


@st.cache_data(**_CACHE)
def latency_vs_context(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> pd.DataFrame:
    """TTFT, TPOT and tokens/s for prompts of 128, 256, ... tokens up to max_model_len - output, estimate and bound."""
    res = resolve(model, hw, sc)
    longest = max(1, res.max_model_len - sc.workload.output_len)
    rows = []
    for eff in _efficiencies(hw, sc):
        for length in powers_of_two(min(128, longest), longest):
            rows.append(_latency_row(estimate_latency(model, hw, sc, input_len=length, efficiency=eff)))
    return pd.DataFrame(rows)


@st.cache_data(**_CACHE)
def scenario_summary(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> ScenarioSummary:
    """Memory plan, workload latency and token cost of one scenario (the Compare page's column)."""
    return summarize(model, hw, sc)


@st.cache_data(**_CACHE)
def deployment_bundle(model: ModelSpec, hw: HardwareProfile, sc: Scenario, loaded: LoadedConfig) -> ExportBundle:
    """Both serving profiles and every export target's file (``planner.deploy.export.export_bundle``)."""
    return export_bundle(model, hw, sc, loaded=loaded)


@st.cache_data(**_CACHE)
def serving_points(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> list:
    """The latency- and throughput-optimized operating points (the Export page's two profiles)."""
    return operating_points(model, hw, sc)


# ------------------------------------------------------------------------------ serving (Simulate page)


@st.cache_data(**_SIMULATION)
def simulated(model: ModelSpec, hw: HardwareProfile, sc: Scenario, workload: ServedWorkload) -> ServingResult:
    """One replica of ``sc`` serving ``workload`` (``planner.serve.replica.simulate_scenario``)."""
    return simulate_scenario(model, hw, sc, workload)


def rate_sweep(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, workload: ServedWorkload, slo: SLO | None
) -> tuple[float, tuple[Probe, ...]]:
    """(sustainable rate, probes) of one replica over request rates (``planner.serve.slo.sweep_rates``).

    The sweep picks its own rates and draws its own request count, so a Poisson workload's rate and
    ``num_requests`` do not change it: both are set to one value before the cache looks, and a new
    request rate on the page is a cache hit here.
    """
    return _rate_sweep(model, hw, sc, _sweep_key_workload(workload), slo)


def _sweep_key_workload(workload: ServedWorkload) -> ServedWorkload:
    """``workload`` with what ``sweep_rates`` ignores fixed (Poisson rate 1 req/s, 1 request); others unchanged.

    ``sweep_rates`` draws Poisson traffic at 1 req/s with its own count and divides the arrival times by each
    probe's rate (``planner.serve.slo._Traffic``).
    """
    if not isinstance(workload.arrivals, PoissonArrivals):
        return workload
    return workload.model_copy(update={"arrivals": PoissonArrivals(request_rate_per_s=1.0), "num_requests": 1})


@st.cache_data(**_SIMULATION)
def _rate_sweep(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, workload: ServedWorkload, slo: SLO | None
) -> tuple[float, tuple[Probe, ...]]:
    return sweep_rates(model, hw, sc, workload, slo=slo)


@st.cache_data(**_SIMULATION)
def cheapest(
    model: ModelSpec,
    slo: SLO,
    workload: ServedWorkload,
    space: CandidateSpace,
    settings: SearchSettings,
    prices: dict[str, float] | None = None,
) -> SLOPlan:
    """The cheapest deployment in ``space`` that meets ``slo`` (``planner.serve.slo.plan_slo``), with the
    user's $/GPU-hour by card over the profiles' (``ui.prices``)."""
    return plan_slo(model, slo, workload, space, settings, prices=prices or None)


# ------------------------------------------------------------------------------ your runs (Diagnose page)


@st.cache_data(**{**_SIMULATION, "show_spinner": "Simulating the run...", "max_entries": 32})
def scored(bench: BenchResult, model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> Score:
    """A benchmark result scored against the planner's prediction of the same run (a simulation, up to a second)."""
    return score(bench, model, hw, sc)
