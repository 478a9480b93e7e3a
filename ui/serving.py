"""Cached serving simulations, rate sweeps, SLO searches and scores: the Simulate and Diagnose pages' core calls.

The same caching style as ``ui.sweeps`` (whose settings these extend with the serving inputs' models, hashed by
their JSON), in a module of its own so that only the pages that simulate import the simulator.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import streamlit as st

from planner.hardware import HardwareProfile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.serve.disagg import DisaggLayout, LayoutComparison, compare_layouts
from planner.serve.replica import ServingResult, simulate_scenario
from planner.serve.slo import (
    SLO,
    CandidateSpace,
    CapacitySearch,
    Probe,
    SearchSettings,
    SLOPlan,
    plan_at_rate,
    search_capacity,
    sweep_rates,
)
from planner.serve.workload import PoissonArrivals
from planner.serve.workload import Workload as ServedWorkload
from planner.verify.bench_results import BenchResult
from planner.verify.scoring import Score, score
from ui.sweeps import CACHE, frozen_key

_SERVING_MODELS = (ServedWorkload, SLO, CandidateSpace, SearchSettings, BenchResult, DisaggLayout)
SIMULATION = {
    **CACHE,
    "hash_funcs": {**CACHE["hash_funcs"], **dict.fromkeys(_SERVING_MODELS, frozen_key)},
    "show_spinner": "Simulating...",
    "max_entries": 64,
}


@st.cache_data(**SIMULATION)
def simulated(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, workload: ServedWorkload, draft: ModelSpec | None = None
) -> ServingResult:
    """One replica of ``sc`` serving ``workload`` (``planner.serve.replica.simulate_scenario``; ``draft``: the draft
    model's spec with speculative method draft)."""
    return simulate_scenario(model, hw, sc, workload, draft_model=draft)


@st.cache_data(**SIMULATION)
def disaggregated(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: ServedWorkload,
    layout: DisaggLayout,
    draft: ModelSpec | None = None,
) -> LayoutComparison:
    """``layout``'s prefill and decode pools against aggregated replicas of ``sc`` on the same GPUs, serving
    ``workload`` (``planner.serve.disagg.compare_layouts``: three simulations; ``draft``: the draft model's spec
    with speculative method draft, for the decode pool and the replicas)."""
    return compare_layouts(model, hw, sc, workload, layout, draft_model=draft)


def rate_sweep(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: ServedWorkload,
    slo: SLO | None,
    draft: ModelSpec | None = None,
) -> tuple[float, tuple[Probe, ...]]:
    """(sustainable rate, probes) of one replica over request rates (``planner.serve.slo.sweep_rates``).

    The sweep picks its own rates and draws its own request count, so a Poisson workload's rate and
    ``num_requests`` do not change it: both are set to one value before the cache looks, and a new
    request rate on the page is a cache hit here.
    """
    return _rate_sweep(model, hw, sc, _sweep_key_workload(workload), slo, draft)


def _sweep_key_workload(workload: ServedWorkload) -> ServedWorkload:
    """``workload`` with what ``sweep_rates`` ignores fixed (Poisson rate 1 req/s, 1 request); others unchanged,
    the client's cap on requests in flight too (it holds at every probed rate).

    ``sweep_rates`` draws Poisson traffic at 1 req/s with its own count and divides the arrival times by each
    probe's rate (``planner.serve.slo._Traffic``).
    """
    return workload.at_unit_rate(1) if isinstance(workload.arrivals, PoissonArrivals) else workload


@st.cache_data(**SIMULATION)
def _rate_sweep(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    workload: ServedWorkload,
    slo: SLO | None,
    draft: ModelSpec | None = None,
) -> tuple[float, tuple[Probe, ...]]:
    return sweep_rates(model, hw, sc, workload, slo=slo, draft_model=draft)


@st.cache_data(**SIMULATION)
def cheapest(
    model: ModelSpec,
    slo: SLO,
    workload: ServedWorkload,
    space: CandidateSpace,
    settings: SearchSettings,
    prices: dict[str, float] | None = None,
    draft: ModelSpec | None = None,
) -> SLOPlan:
    """The cheapest deployment in ``space`` that meets ``slo`` at the workload's rate, with the user's $/GPU-hour
    by card over the profiles' (``ui.prices``): ``planner.serve.slo.plan_slo``, in its two halves.

    The rate-free half (every candidate screened, its knee and its bisection) is kept across reruns and
    sessions (:func:`_capacity_search`); a new request rate only costs ``plan_at_rate`` (the operating points
    of the rows that meet the targets). The answer is ``plan_slo``'s, number for number.
    """
    shared = _capacity_search(model, slo, _sweep_key_workload(workload), space, settings, prices or None, draft)
    rate = workload.arrivals.request_rate_per_s if isinstance(workload.arrivals, PoissonArrivals) else None
    with shared.lock:  # plan_at_rate runs a candidate's bisection once, into the shared search
        return plan_at_rate(shared.search, rate)


@dataclass
class SharedSearch:
    """A capacity search every session may extend (bisections run once), one plan at a time."""

    search: CapacitySearch
    lock: threading.Lock = field(default_factory=threading.Lock)


SEARCHES_KEPT = 8
"""Capacity searches kept, least recently used dropped first (each holds its candidates' traffic and probes)."""
_SEARCHES: OrderedDict[bytes, SharedSearch] = OrderedDict()
_SEARCHES_LOCK = threading.Lock()  # Streamlit runs each session's script in its own thread


def _capacity_search(
    model: ModelSpec,
    slo: SLO,
    workload: ServedWorkload,
    space: CandidateSpace,
    settings: SearchSettings,
    prices: dict[str, float] | None,
    draft: ModelSpec | None = None,
) -> SharedSearch:
    """``search_capacity`` for a Poisson workload at 1 req/s (``_sweep_key_workload``): it scales one draw of
    arrivals to every rate, so every rate of the same shape shares it.

    Kept here, not in ``st.cache_data``: that would hand each call a copy, losing the bisections
    ``plan_at_rate`` adds to the search. The kept object holds only core results (no figure, no widget), is
    keyed on the JSON of every input, and is extended under its own lock.
    """
    parts = [m.model_dump_json() for m in (model, slo, workload, space, settings)]
    parts.append(draft.model_dump_json() if draft is not None else "")
    parts.append(json.dumps(sorted((prices or {}).items())))
    key = hashlib.blake2b("\n".join(parts).encode(), digest_size=20).digest()
    with _SEARCHES_LOCK:
        shared = _SEARCHES.get(key)
        if shared is not None:
            _SEARCHES.move_to_end(key)
            return shared
    shared = SharedSearch(search_capacity(model, slo, workload, space, settings, prices=prices, draft_model=draft))
    with _SEARCHES_LOCK:
        shared = _SEARCHES.setdefault(key, shared)  # another session may have searched meanwhile: keep one
        while len(_SEARCHES) > SEARCHES_KEPT:
            _SEARCHES.popitem(last=False)
    return shared


# ------------------------------------------------------------------------------ your runs (Diagnose page)


@st.cache_data(**{**SIMULATION, "show_spinner": "Simulating the run...", "max_entries": 32})
def scored(bench: BenchResult, model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> Score:
    """A benchmark result scored against the planner's prediction of the same run (a simulation, up to a second)."""
    return score(bench, model, hw, sc)
