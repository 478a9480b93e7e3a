"""Small pure functions that turn core results into what a page shows (tables, formulas, costs).

Pages do no arithmetic; when a number on the page is not a field of a core result it is made
here, from core results only, and says how. Nothing here imports Streamlit.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.estimate.cost import usd_per_million_tokens
from planner.estimate.latency import estimate_latency
from planner.estimate.memory import plan_memory, terms_outside
from planner.estimate.operating_points import latency_profile, throughput_profile
from planner.units import GiB, fmt_bytes, fmt_flop_count, fmt_seconds
from planner.units import fmt_requests as units_fmt_requests

# pandas is imported where a table is built: the first page's verdict needs none, and it is that page's slowest import
if TYPE_CHECKING:  # types only: the first page after a server start imports neither the simulator nor jinja2
    import pandas as pd
    from pandas.io.formats.style import Styler

    from planner.deploy.export import ExportBundle
    from planner.estimate.latency import LatencyEstimate
    from planner.estimate.memory import MemoryPlan
    from planner.estimate.placement import Placement
    from planner.estimate.resolve import Resolved
    from planner.estimate.roofline import Roofline
    from planner.estimate.speculative import SpeculativeEstimate
    from planner.hardware import HardwareProfile
    from planner.model.spec import ModelSpec
    from planner.scenario import Scenario
    from planner.serve.disagg import LayoutComparison
    from planner.serve.replica import ServingResult
    from planner.serve.slo import SLOPlan

TERM_NOTES: dict[str, str] = {
    "weights": "weights on the fullest rank (vocab padded to 64)",
    "kv_cache": "KV-cache blocks vLLM allocates",
    "activations": "activation peak of vLLM's profiling forward",
    "cuda_graphs": "CUDA-graph memory pool (0 with eager)",
    "non_torch": "CUDA context, NCCL and cuBLAS workspaces",
    "free": "outside gpu_memory_utilization, or left over",
    "lora": "LoRA adapter slots: --max-loras x --max-lora-rank, every target module (exact)",
}
STATIC_POOL_NOTES: dict[str, str] = {
    "kv_cache": "KV-cache pool SGLang allocates: its static pool less the weights",
    "activations": "activation peak, outside SGLang's static pool",
    "cuda_graphs": "CUDA-graph memory, outside SGLang's static pool (0 with eager)",
    "free": "outside mem_fraction_static, or left over",
}
"""The terms an engine with a static pool (SGLang) accounts differently: what ``TERM_NOTES`` says for vLLM."""
FREE_FRACTION_NOTES: dict[str, str] = {
    "kv_cache": "TensorRT-LLM's share of the memory free after weights and buffers",
    "activations": "activation peak of TensorRT-LLM's profiling forward",
    "free": "the rest of the free memory (1 - kv_cache_free_gpu_memory_fraction), or left over",
}
"""The same for an engine that gives its KV cache a share of the free memory (TensorRT-LLM)."""
NOTES_BY_RULE: dict[str, dict[str, str]] = {"static_pool": STATIC_POOL_NOTES, "free_fraction": FREE_FRACTION_NOTES}
GRAPHS_AFTER_NOTES: dict[str, str] = {
    "cuda_graphs": "CUDA-graph pool, beyond gpu_memory_utilization (vLLM < 0.21.0)",
}
"""vLLM releases that capture their CUDA graphs after sizing the KV cache (``Resolved.reserves_cuda_graph_memory``)."""


# ------------------------------------------------------------------------------ tables as the page shows them

MISSING = "—"
"""What a table cell shows for an unknown value (None / NaN), never the literal 'None'."""


def digest(value: Any) -> bytes | None:
    """A 20-byte digest of ``value``'s pickle (equal bytes, equal data), or None when it does not pickle: the key of
    the elements the pages replay (``ui.format``) and of the figures ``ui.charts`` keeps. A small table pickles and
    hashes in ~0.08 ms, where Streamlit's own hashing of it (``hash_pandas_object``) takes ~2 ms."""
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None
    return hashlib.blake2b(data, digest_size=20).digest()


def readable(table: pd.DataFrame, formats: dict[str, Callable[[Any], str]] | None = None) -> Styler:
    """``table`` for ``st.dataframe``, shown through ``formats`` (column -> formatter), unknown cells as '—'.

    A column without an unknown cell keeps its values (a test or a CSV still reads numbers; the grid sorts
    them) and only its display goes through the formatter. A column with one becomes text: the grid draws
    a missing number as 'None' whatever the Styler says. Headers are set with ``column_config``.
    """
    formats = formats or {}
    gaps = table.isna()
    has_gap = gaps.any()  # one pass over the table, not two per column (a page redraws its tables on every rerun)
    shown = table.copy()
    for name in has_gap.index[has_gap.to_numpy()]:
        fmt = formats.get(name, str)
        shown[name] = [MISSING if gone else fmt(value) for value, gone in zip(table[name], gaps[name])]
    kept = {name: fmt for name, fmt in formats.items() if name in has_gap.index and not has_gap[name]}
    return shown.style.format(kept or None, na_rep=MISSING)


def fmt_requests(concurrency: float | None) -> str:
    """``planner.units.fmt_requests`` (rounded down, as the Plan verdict says it), '—' for unknown."""
    return MISSING if concurrency is None or concurrency != concurrency else units_fmt_requests(concurrency)


# ------------------------------------------------------------------------------ memory


def memory_terms_table(plan: MemoryPlan) -> pd.DataFrame:
    """One row per slice of a GPU's memory: GiB, share of the card, and whether it is exact or an estimate."""
    import pandas as pd

    notes = NOTES_BY_RULE.get(plan.resolved.memory_rule, {})
    if terms_outside(plan.resolved) == {"cuda_graphs"}:  # an older vLLM's graph pool, beyond the fraction
        notes = {**notes, **GRAPHS_AFTER_NOTES}
    return pd.DataFrame(
        [
            {
                "term": t.name,
                "GiB": t.bytes / GiB,
                "share": t.bytes / plan.total_memory_bytes_per_gpu,
                "kind": t.kind,
                "what": notes.get(t.name, TERM_NOTES.get(t.name, "")),
            }
            for t in plan.terms
        ]
    )


@dataclass(frozen=True)
class KVFormulaLine:
    """One group of identical cache layers, written out: '2 x 32 layers x 8 KV heads x 128 head_dim x 2 B'."""

    text: str
    bytes_per_token: int
    bytes_per_sequence_fixed: int
    note: str = ""


@dataclass(frozen=True)
class KVFormula:
    lines: tuple[KVFormulaLine, ...]
    bytes_per_token: int
    bytes_per_sequence: int
    context_len: int
    tp: int


def kv_formula(model: ModelSpec, resolved: Resolved) -> KVFormula:
    """The KV-cache formula of ``model`` on one rank, with this model's numbers filled in.

    Groups the per-layer cache specs the core builds (``ModelSpec.kv_specs``) and writes each
    group as its factors. Per sequence: ``ModelSpec.kv_bytes_per_sequence`` at max_model_len
    (sliding layers capped at their window) plus any fixed recurrent state.
    """
    specs = model.kv_specs(resolved.tp, resolved.kv_bytes_per_element)
    dumped: dict[int, str] = {}  # layers share spec objects: each distinct object is written out once
    for spec in specs:
        if id(spec) not in dumped:
            dumped[id(spec)] = spec.model_dump_json()
    groups = Counter(dumped[id(spec)] for spec in specs)
    by_json = {dumped[id(spec)]: spec for spec in specs}
    lines = []
    for key, count in groups.items():
        spec = by_json[key]
        text, note = spec.describe(count)
        lines.append(KVFormulaLine(text, count * spec.bytes_per_token, count * spec.fixed_bytes, note))
    total_token = model.kv_bytes_per_token(resolved.kv_bytes_per_element, resolved.tp)
    per_sequence = model.kv_bytes_per_sequence(
        resolved.max_model_len, resolved.kv_bytes_per_element, resolved.tp
    ) + model.state_bytes_per_sequence(resolved.tp)
    return KVFormula(tuple(lines), total_token, per_sequence, resolved.max_model_len, resolved.tp)


# ------------------------------------------------------------------------------ roofline


PLACEMENT_COLUMNS = 8
"""GPU cells per row of the placement picture: one HGX node's eight side by side; larger pods wrap."""
LINK_WORDS = {"nvlink": "NVLink", "pcie": "PCIe", "network": "the network (InfiniBand/RoCE)"}
"""How the placement's link kinds read in a sentence."""


@dataclass(frozen=True)
class PlacementCell:
    """One GPU of the placement picture: where it is drawn and what its label says (from ``Placement`` only)."""

    rank: int
    stage: int
    node: int
    row: int
    """Row of the picture, top first: the node's rows, then the next node's."""
    column: int
    label: str
    """Short lines for the cell: rank, layers, experts, KV cache."""
    hover: str
    """Every field of the rank, for the tooltip."""


def _layers(start: int, stop: int) -> str:
    return f"{start}-{stop - 1}" if stop - start > 1 else str(start)


def placement_rows_per_node(p: Placement) -> int:
    """Rows one node's pod takes in the picture (``PLACEMENT_COLUMNS`` GPUs a row)."""
    return -(-p.gpus_per_pod // PLACEMENT_COLUMNS)


def placement_cells(p: Placement) -> list[PlacementCell]:
    """One cell per GPU of the replica, grouped by node (ranks fill each node's pod in order, as the core places
    them), labelled with what the rank holds: its layers (and the embedding / lm_head), its experts, its KV cache."""
    rows_per_node = placement_rows_per_node(p)
    cells = []
    for r in p.ranks:
        position = r.rank - r.node * p.gpus_per_pod
        held = _layers(r.layer_start, r.layer_stop)
        if p.pp > 1:
            held += " +emb" if r.holds_embedding else ""
            held += " +head" if r.holds_lm_head else ""
        lines = [f"GPU {r.rank}" + ("" if r.dp_rank is None else f" · DP {r.dp_rank}"), f"layers {held}"]
        if r.experts is not None:
            lines.append(f"experts {_layers(*r.experts)}")
        lines.append(f"KV {fmt_bytes(r.kv_cache_bytes)}")
        hover = [
            f"rank {r.rank} (stage {r.stage}, TP rank {r.tp_rank}) on node {r.node}",
            f"decoder layers {_layers(r.layer_start, r.layer_stop)}"
            + (" + embedding" if r.holds_embedding else "")
            + (" + final norm and lm_head" if r.holds_lm_head else ""),
        ]
        if r.experts is not None:
            hover.append(f"EP rank {r.ep_rank}: routed experts {_layers(*r.experts)} of every MoE layer")
        hover += [
            f"weights {fmt_bytes(r.weight_bytes)} (exact)",
            f"KV cache {fmt_bytes(r.kv_cache_bytes)} (estimate), {r.kv_bytes_per_token:,} B per token",
        ]
        cells.append(
            PlacementCell(
                rank=r.rank,
                stage=r.stage,
                node=r.node,
                row=r.node * rows_per_node + position // PLACEMENT_COLUMNS,
                column=position % PLACEMENT_COLUMNS,
                label="<br>".join(lines),
                hover="<br>".join(hover),
            )
        )
    return cells


def placement_caption(p: Placement) -> str:
    """The picture's caption: the GPUs and nodes, and which link each group's traffic crosses (the core's kinds)."""
    gpus = len(p.ranks)
    domain = "" if p.nvlink_domain_gpus == p.gpus_per_node else f", NVLink domains of {p.nvlink_domain_gpus}"
    nodes = "1 node" if p.num_nodes == 1 else f"{p.num_nodes} nodes"
    parts = [f"{gpus} GPUs on {nodes} of {p.gpus_per_node}{domain}"]
    if p.tp > 1:
        parts.append(
            f"each TP group of {p.tp} all-reduces over {LINK_WORDS.get(p.stages[0].tp_link, p.stages[0].tp_link)}"
        )
    sends = [
        f"{s.stage} → {s.stage + 1} over {LINK_WORDS.get(s.send_link, s.send_link)}"
        for s in p.stages
        if s.send_link is not None
    ]
    if sends:
        parts.append("activations go from stage " + ", ".join(sends))
    if p.ep is not None and p.ep_link is not None:
        dp = f" (TP {p.tp} x DP {p.data_parallel_size or 1})"
        parts.append(
            f"the routed experts are split over {p.ep} EP ranks{dp}, their dispatch/combine over "
            f"{LINK_WORDS.get(p.ep_link, p.ep_link)}"
        )
    return "; ".join(parts) + ". Weights per GPU are exact, KV cache per GPU an estimate (hover a GPU for both)."


# ------------------------------------------------------------------------------ disaggregated prefill/decode


def disagg_table(cmp: LayoutComparison) -> pd.DataFrame:
    """The xPyD pools against aggregated replicas on the same GPUs: TTFT and TPOT P50 / P99 (the core's, as the
    CLI's ``simulate --prefill-instances`` table shows them)."""
    import pandas as pd

    dis = cmp.disaggregated
    cell = lambda stats, q: fmt_seconds(None if stats is None else getattr(stats, q))  # noqa: E731
    rows = [
        (f"disaggregated {dis.layout.label}, {dis.gpus} GPUs", dis.ttft_seconds, dis.tpot_seconds),
        (f"aggregated: {cmp.aggregated_replicas} replica(s)", cmp.aggregated_ttft_seconds, cmp.aggregated_tpot_seconds),
    ]
    return pd.DataFrame(
        [
            {
                "layout": label,
                "TTFT P50": cell(ttft, "p50"),
                "TTFT P99": cell(ttft, "p99"),
                "TPOT P50": cell(tpot, "p50"),
                "TPOT P99": cell(tpot, "p99"),
            }
            for label, ttft, tpot in rows
        ]
    )


def roofline_table(stages: tuple[Roofline, ...]) -> pd.DataFrame:
    """Every op of every stage: work, intensity, binding ceiling, time, and the FLOP/s it attains."""
    import pandas as pd

    rows = []
    for r in stages:
        for op in r.layers:
            attained = op.flops / op.seconds if op.seconds > 0 and op.flops > 0 else None
            rows.append(
                {
                    "stage": r.stage,
                    "op": op.name,
                    "group": op.group,
                    "count": op.count,
                    "kernel": op.kind,
                    "flops": op.flops,
                    "bytes": op.bytes,
                    "intensity_flop_per_byte": op.arithmetic_intensity,
                    "bound": op.bound,
                    "compute_dtype": op.compute_dtype,
                    "time_us": op.seconds * 1e6,
                    "total_time_us": op.total_seconds * 1e6,
                    "share_of_step": op.total_seconds / r.total_seconds,
                    "attained_flop_per_s": attained,
                    "kind": r.kind,
                }
            )
    return pd.DataFrame(rows)


def plottable_ops(table: pd.DataFrame) -> pd.DataFrame:
    """The ops a log-log roofline can place: some FLOPs and some bytes (not all-reduce or overhead)."""
    ok = table["intensity_flop_per_byte"].notna() & table["attained_flop_per_s"].notna()
    return table[ok & (table["intensity_flop_per_byte"] > 0)]


# ------------------------------------------------------------------------------ latency


@dataclass(frozen=True)
class OperatingPoint:
    label: str
    serving: str
    row: dict
    rule: str


def operating_points(
    model: ModelSpec, hw: HardwareProfile, sc: Scenario, draft: ModelSpec | None = None
) -> list[OperatingPoint]:
    """Latency-optimized (online) and throughput-optimized (offline) batch sizes (``draft``: the draft model's spec).

    One definition for this page and the exported configs: the Export page's two serving profiles
    (``planner.estimate.operating_points.latency_profile`` / ``throughput_profile``), each with its rule.
    """
    points = []
    for profile, label, serving in (
        (latency_profile(model, hw, sc, draft_model=draft), "latency-optimized", "online"),
        (throughput_profile(model, hw, sc, draft_model=draft), "throughput-optimized", "offline"),
    ):
        lat = profile.latency
        row = {
            "batch": profile.max_num_seqs,
            "ttft_s": lat.ttft_seconds,
            "tpot_s": lat.tpot_seconds,
            "tokens_per_s": lat.throughput_tokens_per_s,
            "tokens_per_s_per_gpu": lat.throughput_tokens_per_s_per_gpu,
            "kind": lat.kind,
            "fits_in_kv_cache": lat.fits_in_kv_cache,
        }
        points.append(OperatingPoint(label, serving, row, profile.rule))
    return points


def break_even_sentence(spec: SpeculativeEstimate, batch: int) -> str:
    """Where speculative decoding stops paying, in words, from the core's break-even batch (Markdown)."""
    k = spec.num_speculative_tokens
    at = f"At the sidebar's batch of {batch:,} it is **{spec.speedup:.2f}x** plain decoding."
    if spec.break_even_batch is None:
        return (
            f"**Speculation pays at every batch up to {spec.break_even_searched_up_to:,}**, the largest searched "
            f"(max_num_seqs, or the sequences of this context the KV cache holds). {at}"
        )
    return (
        f"**Speculation stops paying at batch {spec.break_even_batch:,}**: from there on its TPOT is no better than "
        f"plain decoding's, as verifying k + 1 = {k + 1} tokens per sequence turns compute-bound. {at}"
    )


def cost_per_million_tokens(hw: HardwareProfile, total_gpus: int, tokens_per_s: float) -> float | None:
    """US dollars per 1M output tokens (``planner.estimate.cost``); None without a price."""
    return usd_per_million_tokens(hw.price_per_hour_usd, total_gpus, tokens_per_s)


LATENCY_LABELS: dict[str, str] = {
    "batch": "batch",
    "input_len": "prompt tokens",
    "output_len": "output tokens",
    "kind": "kind",
    "ttft_s": "TTFT",
    "tpot_s": "TPOT",
    "e2e_s": "end to end",
    "tokens_per_s": "output tokens/s",
    "tokens_per_s_per_gpu": "tokens/s per GPU",
    "fits_in_kv_cache": "fits the KV cache",
    "prefill_bound": "prefill bound by",
    "decode_bound": "decode bound by",
    "speedup": "speculative speed-up",
}
"""Column headers of the latency sweep tables (``ui.sweeps.latency_vs_batch`` / ``latency_vs_context``)."""
LATENCY_FORMATS: dict[str, Callable[[Any], str]] = {
    "ttft_s": fmt_seconds,
    "tpot_s": fmt_seconds,
    "e2e_s": fmt_seconds,
    "tokens_per_s": lambda v: f"{v:,.1f}",
    "tokens_per_s_per_gpu": lambda v: f"{v:,.1f}",
    "fits_in_kv_cache": lambda v: "unknown" if v is None else ("yes" if v else "no: the engine queues"),
    "speedup": lambda v: f"{v:.2f}x",
}

ROOFLINE_LABELS: dict[str, str] = {
    "stage": "stage",
    "op": "op",
    "group": "group",
    "count": "count",
    "kernel": "kernel",
    "flops": "FLOPs",
    "bytes": "bytes",
    "intensity_flop_per_byte": "FLOP/byte",
    "bound": "bound",
    "compute_dtype": "dtype",
    "time_us": "µs each",
    "total_time_us": "µs x count",
    "share_of_step": "share of step",
    "attained_flop_per_s": "attained FLOP/s",
    "kind": "kind",
}
"""Column headers of :func:`roofline_table`."""


def _fmt_flop_rate(value: float) -> str:
    return fmt_flop_count(value) + "/s"


ROOFLINE_FORMATS: dict[str, Callable[[Any], str]] = {
    "flops": fmt_flop_count,
    "bytes": fmt_bytes,
    "intensity_flop_per_byte": lambda v: f"{v:,.2f}",
    "time_us": lambda v: f"{v:,.2f}",
    "total_time_us": lambda v: f"{v:,.2f}",
    "attained_flop_per_s": _fmt_flop_rate,
    "compute_dtype": lambda v: v or MISSING,
}


# ------------------------------------------------------------------------------ compare


@dataclass(frozen=True)
class ScenarioSummary:
    """The Compare page's column for one scenario (core results plus the derived cost)."""

    plan: MemoryPlan
    latency: LatencyEstimate
    total_gpus: int
    cost_per_million_usd: float | None


def summarize(model: ModelSpec, hw: HardwareProfile, sc: Scenario, draft: ModelSpec | None = None) -> ScenarioSummary:
    """Memory plan, latency of the workload, and the cost of its tokens, for one scenario (``draft``: the draft
    model's spec with speculative method draft)."""
    plan = plan_memory(model, hw, sc, suggest=False)
    latency = estimate_latency(model, hw, sc, draft_model=draft)
    cost = cost_per_million_tokens(hw, sc.total_gpus, latency.throughput_tokens_per_s)
    return ScenarioSummary(plan, latency, sc.total_gpus, cost)


def summary_row(label: str, model: ModelSpec, hw: HardwareProfile, sc: Scenario, summary: ScenarioSummary) -> dict:
    """One row of the comparison table, numbers in display units (GiB, seconds, tokens/s, US dollars)."""
    plan, latency = summary.plan, summary.latency
    return {
        "scenario": label,
        "model": model.name,
        "gpu": hw.name,
        "gpus": summary.total_gpus,
        "tp": sc.tp,
        "pp": sc.pp,
        "weights": sc.weight_dtype,
        "kv_cache_dtype": plan.resolved.kv_cache_dtype,
        "max_model_len": plan.resolved.max_model_len,
        "starts": plan.fits,
        "weights_gib_per_gpu": plan.weight_bytes_per_gpu / GiB,
        "kv_cache_gib_per_gpu": plan.kv_cache_bytes_per_gpu / GiB,
        "max_concurrency": plan.max_concurrency,
        "ttft_s": latency.ttft_seconds,
        "tpot_s": latency.tpot_seconds,
        "tokens_per_s": latency.throughput_tokens_per_s,
        "tokens_per_s_per_gpu": latency.throughput_tokens_per_s_per_gpu,
        "usd_per_million_tokens": summary.cost_per_million_usd,
        "usd_per_gpu_hour": hw.price_per_hour_usd,
        "price_source": hw.sources.get("price_per_hour_usd") if hw.price_per_hour_usd is not None else None,
        "kind": latency.kind,
        "verdict": plan.reason,
    }


COMPARE_LABELS: dict[str, str] = {
    "scenario": "scenario",
    "model": "model",
    "gpu": "GPU",
    "gpus": "GPUs",
    "tp": "TP",
    "pp": "PP",
    "weights": "weights",
    "kv_cache_dtype": "KV cache",
    "max_model_len": "max_model_len",
    "starts": "starts",
    "weights_gib_per_gpu": "weights per GPU",
    "kv_cache_gib_per_gpu": "KV cache per GPU",
    "max_concurrency": "max concurrency",
    "ttft_s": "TTFT",
    "tpot_s": "TPOT",
    "tokens_per_s": "output tokens/s",
    "tokens_per_s_per_gpu": "tokens/s per GPU",
    "usd_per_million_tokens": "$ per 1M output tokens",
    "usd_per_gpu_hour": "$/GPU-hour",
    "price_source": "price source",
    "kind": "kind",
    "verdict": "verdict",
}
"""Column headers the Compare table shows for :func:`summary_row`'s keys (the CSV keeps the keys)."""


# ------------------------------------------------------------------------------ serving


PERCENTILES = ("p50", "p90", "p99")


def latency_percentiles(result: ServingResult) -> pd.DataFrame:
    """TTFT, TPOT, ITL and end to end of a simulated replica: mean and percentiles, as seconds for the page."""
    import pandas as pd

    rows = []
    for name, stats in (
        ("TTFT", result.ttft_seconds),
        ("TPOT", result.tpot_seconds),
        ("ITL", result.itl_seconds),
        ("end to end", result.e2e_seconds),
    ):
        rows.append(
            {
                "metric": name,
                **{k: fmt_seconds(None if stats is None else getattr(stats, k)) for k in ("mean", *PERCENTILES)},
            }
        )
    return pd.DataFrame(rows)


def carry_load_actions(sc: Scenario, hw: HardwareProfile) -> list[tuple[str, dict]]:
    """The sidebar changes behind the overload warning's options (``planner.serve.saturation.carry_load_options``):
    (button label, Scenario field changes) for twice the TP within the node and an fp8 KV cache, where they apply."""
    actions = []
    if sc.tp * 2 <= hw.gpus_per_node:
        actions.append((f"Try TP {sc.tp * 2}", {"tp": sc.tp * 2, "num_gpus": None}))
    if "fp8" not in sc.kv_cache_dtype:
        actions.append(("Try an fp8 KV cache", {"kv_cache_dtype": "fp8"}))
    return actions


def probe_note(rate_per_s: float, measured_requests: int, simulated_requests: int) -> str:
    """Why the search's TTFT is not the one-replica run's, even for the same deployment and rate."""
    return (
        f"Search figure: at {rate_per_s:,.2f} req/s per replica, {measured_requests:,} requests measured once the "
        "batch has filled (warm-up and cool-down "
        f"left out). The one-replica figures above cover all {simulated_requests:,} simulated requests from an empty "
        "server, so the two differ even for the same deployment and rate."
    )


def _usd(value: float) -> str:
    return f"${value:,.3f}" if value < 1 else f"${value:,.2f}"


CANDIDATE_FORMATS: dict[str, Callable[[Any], str]] = {
    "knee req/s": "{:,.2f}".format,
    "max req/s per replica": "{:,.2f}".format,
    "replicas": "{:,.0f}".format,
    "GPUs": "{:,.0f}".format,
    "$/hour": _usd,
    "$/1M input": _usd,
    "$/1M output": _usd,
    "kWh/1M output (TDP bound)": "{:,.3f}".format,
}
"""How :func:`candidates_table`'s cells read (unknown: '—')."""


def candidates_table(plan: SLOPlan) -> pd.DataFrame:
    """One row per deployment the SLO search tried: status, knee, rate limit, replicas, cost, energy, why."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "status": c.status,
                "replica": c.label,
                "GPUs/replica": c.gpus_per_replica,
                "knee req/s": c.saturation_requests_per_s,
                "max req/s per replica": c.max_rate_per_replica_per_s,
                "limit": c.limiting_target,
                "replicas": c.replicas,
                "GPUs": c.total_gpus,
                "$/hour": c.usd_per_hour,
                "$/1M input": c.usd_per_1m_input_tokens,
                "$/1M output": c.usd_per_1m_output_tokens,
                "kWh/1M output (TDP bound)": c.energy_kwh_per_1m_output_tokens_upper_bound,
                "why": c.reason,
            }
            for c in plan.candidates
        ]
    )


# ------------------------------------------------------------------------------ export


def artefacts_zip(bundle: ExportBundle) -> bytes:
    """Every exported file in one zip, under a folder per profile (latency/, throughput/)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for artefact in bundle.artefacts:
            archive.writestr(f"{artefact.profile}/{artefact.filename}", artefact.text)
    return buffer.getvalue()
