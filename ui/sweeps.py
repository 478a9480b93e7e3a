"""Cached core calls and sweeps for the pages: memory plans, rooflines, latency curves, comparisons, exports.

Every function here only calls ``planner`` (one call per point of a grid) and is cached with
``st.cache_data``, the one caching style of the app: each session gets its own copy of the result
(core results and tables, never a figure or another mutable object shared across sessions).
Specs, cards, scenarios and the other frozen core models enter the keys by their pickle's digest
(``frozen_key``), so an unchanged sidebar reruns a page from cache. Grids are powers of two, which is what
the log axes show.
Serving simulations and scores (Simulate, Diagnose) are in ``ui.serving``, with the same settings, so the
first page after a server start does not import the simulator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import streamlit as st

from planner.efficiency import BOUND
from planner.estimate.latency import LatencyEstimate, decode_context_len, estimate_latency
from planner.estimate.memory import MemoryPlan, plan_memory
from planner.estimate.placement import Placement, place
from planner.estimate.resolve import resolve
from planner.estimate.roofline import Roofline, efficiency_for, roofline
from planner.hardware import HardwareProfile
from planner.model.sources import LoadedConfig
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from ui.derived import ScenarioSummary, digest, operating_points, summarize

if TYPE_CHECKING:  # pandas where a table is built: the first page's verdict needs none (its slowest import)
    import pandas as pd

    from planner.deploy.export import ExportBundle


def frozen_key(obj: Any) -> bytes | str:
    """What a frozen core model enters a cache key as: its pickle's digest (``ui.derived.digest``), or its JSON
    when it does not pickle. A spec pickles its shared layer objects once (a 70B spec: ~1 KB, ~20 us), where its
    JSON writes all 80 layers out (~280 us, on every cached call of every rerun)."""
    key = digest(obj)
    return obj.model_dump_json() if key is None else key


HASHED_FROZEN: tuple[type, ...] = (ModelSpec, HardwareProfile, Scenario, LoadedConfig)
"""Frozen core models the cached calls take, keyed by ``frozen_key`` (``ui.serving`` adds its own)."""
CACHE: dict[str, Any] = {
    "hash_funcs": dict.fromkeys(HASHED_FROZEN, frozen_key),
    "show_spinner": False,
    "max_entries": 256,
}
"""The ``st.cache_data`` settings of every cached core call (``ui.serving`` extends them)."""


def powers_of_two(low: int, high: int) -> list[int]:
    """low, 2 low, 4 low, ... up to high, with high itself last: powers_of_two(1, 12) == [1, 2, 4, 8, 12]."""
    out, value = [], max(1, low)
    while value < high:
        out.append(value)
        value *= 2
    out.append(high)
    return out


@st.cache_data(**CACHE)
def memory_plan(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> MemoryPlan:
    """``plan_memory`` with its suggestions (each suggestion re-plans, so this is worth caching)."""
    return plan_memory(model, hw, sc)


@st.cache_data(**CACHE)
def placement(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> Placement:
    """``place``: every GPU of one replica (stage, layers, experts, node, bytes) and the links between them, as
    ``python -m planner plan --format json`` writes it under ``placement``."""
    return place(model, hw, sc)


class ContextPoint(NamedTuple):
    """One max_model_len of :func:`concurrency_vs_context`: how many such requests fit, and whether vLLM starts."""

    max_model_len: int
    max_concurrency: float
    kv_cache_tokens: int
    fits: bool


@st.cache_data(**CACHE)
def concurrency_vs_context(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> tuple[ContextPoint, ...]:
    """Max concurrency, KV tokens and the verdict for max_model_len over powers of two up to the model's maximum.

    Plain tuples, not a DataFrame: the Plan page reads this on every rerun, and a cached value is unpickled
    each time (a DataFrame costs a few milliseconds more).
    """
    points = []
    for length in powers_of_two(512, model.max_position_embeddings):
        plan = plan_memory(model, hw, sc.model_copy(update={"max_model_len": length}), suggest=False)
        points.append(ContextPoint(length, plan.max_concurrency, plan.kv_cache_tokens, plan.fits))
    return tuple(points)


@st.cache_data(**CACHE)
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


@st.cache_data(**CACHE)
def latency_at(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, draft: ModelSpec | None = None
) -> tuple[LatencyEstimate, LatencyEstimate]:
    """(estimate or calibrated, bound) latency of the sidebar's workload (``draft``: the draft model's spec)."""
    return (
        estimate_latency(model, hw, sc, draft_model=draft),
        estimate_latency(model, hw, sc, efficiency=BOUND, draft_model=draft),
    )


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
    } | ({} if est.speculative is None else {"speedup": est.speculative.speedup})


def _efficiencies(hw: HardwareProfile, sc: Scenario) -> list:
    return [efficiency_for(hw, sc=sc), BOUND]


@st.cache_data(**CACHE)
def latency_vs_batch(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, draft: ModelSpec | None = None
) -> pd.DataFrame:
    """TTFT, TPOT and tokens/s for batch 1, 2, 4, ... up to max_num_seqs, estimate and bound; with speculative
    decoding also its speed-up over plain decoding at each batch (``speedup``, the core's)."""
    import pandas as pd

    limit = plan_memory(model, hw, sc, suggest=False).resolved.max_num_seqs  # SGLang's: sized from its pool
    rows = []
    for eff in _efficiencies(hw, sc):
        for batch in powers_of_two(1, limit):
            rows.append(
                _latency_row(estimate_latency(model, hw, sc, batch_size=batch, efficiency=eff, draft_model=draft))
            )
    return pd.DataFrame(rows)


@st.cache_data(**CACHE)
def latency_vs_context(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, draft: ModelSpec | None = None
) -> pd.DataFrame:
    """TTFT, TPOT and tokens/s for prompts of 128, 256, ... tokens up to max_model_len - output, estimate and bound."""
    import pandas as pd

    res = resolve(model, hw, sc)
    longest = max(1, res.max_model_len - sc.workload.output_len)
    rows = []
    for eff in _efficiencies(hw, sc):
        for length in powers_of_two(min(128, longest), longest):
            rows.append(
                _latency_row(estimate_latency(model, hw, sc, input_len=length, efficiency=eff, draft_model=draft))
            )
    return pd.DataFrame(rows)


@st.cache_data(**CACHE)
def scenario_summary(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, draft: ModelSpec | None = None
) -> ScenarioSummary:
    """Memory plan, workload latency and token cost of one scenario (the Compare page's column)."""
    return summarize(model, hw, sc, draft)


@st.cache_data(**CACHE)
def deployment_bundle(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, loaded: LoadedConfig, draft: ModelSpec | None = None
) -> ExportBundle:
    """Both serving profiles and every export target's file (``planner.deploy.export.export_bundle``)."""
    from planner.deploy.export import export_bundle  # the Export page's alone: not imported for the first page

    return export_bundle(model, hw, sc, loaded=loaded, draft_model=draft)


@st.cache_data(**CACHE)
def serving_points(model: ModelSpec, hw: HardwareProfile, sc: Scenario, draft: ModelSpec | None = None) -> list:
    """The latency- and throughput-optimized operating points (the Export page's two profiles)."""
    return operating_points(model, hw, sc, draft)
