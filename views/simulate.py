"""Simulate: the sidebar's deployment under a served load (P50/P90/P99 vs request rate, queue and KV over
time), and the cheapest deployment that meets latency targets at that rate."""

import streamlit as st

from planner.estimate.roofline import engine_of
from planner.hardware import load_profiles
from planner.scenario import Scenario
from planner.serve.disagg import KV_LINKS, MAX_INSTANCES, DisaggLayout
from planner.serve.replica import LENGTH_DISTRIBUTIONS, ServingResult, length_distribution
from planner.serve.saturation import overload_warning
from planner.serve.slo import SLO, UTILIZATION_CAP, CandidateResult, CandidateSpace, SearchSettings
from planner.serve.workload import PoissonArrivals, Workload
from ui import charts
from ui.derived import (
    CANDIDATE_FORMATS,
    candidates_table,
    carry_load_actions,
    disagg_table,
    latency_percentiles,
    probe_note,
)
from ui.errors import ShownError, describe, plain, shown_errors
from ui.format import fmt_bytes, fmt_rate, fmt_seconds, fmt_usd, formatted_table, kind_badge, plotted
from ui.params import (
    WEIGHT_DTYPES,
    apply_to_sidebar,
    disagg_url_inputs,
    page_inputs,
    simulate_url_inputs,
    sync_page_inputs,
)
from ui.prices import price_inputs, unpriced
from ui.serving import cheapest, disaggregated, rate_sweep, simulated
from ui.sidebar import ALL2ALL_LABELS
from ui.state import current_inputs, link_to

KV_OPTIONS = ("auto", "fp8")
URL_INPUTS = simulate_url_inputs(LENGTH_DISTRIBUTIONS)
PD_URL_INPUTS = disagg_url_inputs(DisaggLayout)
LINK_LABELS = {"nvlink": "NVLink (one node)", "rdma": "RDMA", "tcp": "TCP"}
TP_OPTIONS = (1, 2, 4, 8)
LAYOUT_FIELDS = (
    "num_nodes",
    "enable_expert_parallel",
    "data_parallel_size",
    "all2all_backend",
    "expert_load_imbalance",
    "disable_custom_all_reduce",
)
"""The sidebar's layout beyond TP and PP, which every searched candidate keeps and the Export link carries."""


def export_link(best: CandidateResult) -> str | None:
    """A link to the Export page with the sidebar set to ``best`` (the URL carries every shared input)."""
    sc = best.scenario
    return link_to(
        "export",
        {
            "gpu": sc.gpu,
            "num_gpus": best.total_gpus,
            "tp": sc.tp,
            "pp": sc.pp,
            "weight_dtype": sc.weight_dtype,
            "precision_overrides": {},
            "kv_cache_dtype": sc.kv_cache_dtype,
            "max_model_len": sc.max_model_len,
            "max_num_seqs": sc.max_num_seqs,
            **{field: getattr(sc, field) for field in LAYOUT_FIELDS},
        },
    )


def search_layout_note(sc: Scenario) -> str:
    """What every searched candidate keeps from the sidebar's Parallelism section (the page picks TP)."""
    kept = [f"PP {sc.pp}"]
    if sc.num_nodes is not None:
        kept.append(f"{sc.num_nodes} node(s) per replica")
    if sc.enable_expert_parallel:
        kept.append(f"expert parallel over TP x DP {sc.data_parallel_size}")
        kept.append(f"expert load imbalance {sc.expert_load_imbalance:g}")
        if sc.data_parallel_size > 1:
            kept.append(f"all-to-all {ALL2ALL_LABELS.get(sc.all2all_backend, sc.all2all_backend)}")
    else:
        kept.append("no expert parallelism")
    return (
        f"Every candidate keeps the sidebar's layout ({', '.join(kept)}) at each TP picked here: one replica is "
        f"TP x {sc.pp * sc.data_parallel_size} GPUs. Change it in the sidebar's **Parallelism** section."
    )


st.title("Simulate serving")
inputs = current_inputs()
model, hw, sc = inputs.model, inputs.hardware, inputs.scenario
page_inputs(URL_INPUTS)
page_inputs(PD_URL_INPUTS)

st.caption(
    f"{model.name} · one replica of {sc.gpus_per_replica} x {hw.name} (TP {sc.tp}, PP {sc.pp}"
    + (f", DP {sc.data_parallel_size}" if sc.data_parallel_size > 1 else "")
    + (", expert parallel" if sc.enable_expert_parallel else "")
    + ") from the sidebar · "
    f"a discrete-event simulation of continuous batching as {plain(sc.engine_version)} schedules it "
    f"({plain(engine_of(sc).name)}), timed step by step with the planner's latency model. Numbers are simulated, "
    "not measured."
)

with st.container(border=True):
    traffic, lengths, targets = st.columns([1, 1.4, 1])
    with traffic:
        st.markdown("**Traffic**")
        rate = st.number_input(
            "Request rate (req/s)",
            min_value=0.01,
            step=1.0,
            key="simulate_rate",
            help="Poisson arrivals: the total rate to serve; the first chart simulates one replica at it.",
        )
        cap = st.number_input(
            "Client cap: requests in flight (0: none)",
            min_value=0,
            max_value=1_000_000,
            step=8,
            key="simulate_cap",
            help="vllm bench serve --max-concurrency with a rate: an arrival with this many requests in flight "
            "waits at the client and is sent when one finishes; latencies count from the send. 0: no cap.",
        )
        num_requests = st.number_input(
            "Requests to simulate",
            min_value=50,
            max_value=20_000,
            step=100,
            key="simulate_requests",
            help=Workload.model_fields["num_requests"].description,
        )
        hit_rate = st.slider(
            "Prefix-cache hit rate",
            0.0,
            0.95,
            step=0.05,
            key="simulate_hit",
            help=Workload.model_fields["prefix_cache_hit_rate"].description,
        )
        seed = st.number_input(
            "Seed", min_value=0, step=1, key="simulate_seed", help=Workload.model_fields["seed"].description
        )
    with lengths:
        st.markdown("**Request lengths** (tokens)")
        dist = st.segmented_control("Distribution", LENGTH_DISTRIBUTIONS, key="simulate_dist")
        spread = dist not in (None, "fixed")
        left, right = st.columns(2)
        in_mean = left.number_input(
            "Prompt, mean", min_value=1, value=sc.workload.input_len, step=128, key="simulate_in"
        )
        in_std = left.number_input(
            "Prompt, std", min_value=0, value=0, step=64, key="simulate_in_std", disabled=not spread
        )
        out_mean = right.number_input(
            "Output, mean", min_value=1, value=sc.workload.output_len, step=64, key="simulate_out"
        )
        out_std = right.number_input(
            "Output, std", min_value=0, value=0, step=32, key="simulate_out_std", disabled=not spread
        )
    with targets:
        st.markdown("**Targets** (seconds; untick: none)")
        statistic = st.segmented_control("Percentile", ("p99", "p90"), key="simulate_stat")
        chosen_targets = {}
        for metric, label, step in (("ttft", "TTFT", 0.1), ("tpot", "TPOT", 0.01), ("e2e", "End to end", 1.0)):
            tick, value = st.columns([1, 2], vertical_alignment="bottom")
            enabled = tick.checkbox(label, key=f"simulate_{metric}_on")
            seconds = value.number_input(
                f"{label} target (s)",
                min_value=0.001,
                step=step,
                format="%.3f",
                key=f"simulate_{metric}",
                disabled=not enabled,
                label_visibility="collapsed",
            )
            chosen_targets[metric] = seconds if enabled else None

stat = statistic or "p99"
sync_page_inputs(URL_INPUTS)
with shown_errors():
    workload = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate, max_concurrency=int(cap) or None),
        num_requests=int(num_requests),
        input_tokens=length_distribution(dist or "fixed", in_mean, in_std if spread else 0, "prompt length"),
        output_tokens=length_distribution(dist or "fixed", out_mean, out_std if spread else 0, "output length"),
        prefix_cache_hit_rate=hit_rate,
        seed=int(seed),
    )
    chosen = {f"{stat}_{metric}": seconds for metric, seconds in chosen_targets.items()}
    slo = SLO.of(**chosen) if any(v is not None for v in chosen.values()) else None

# ------------------------------------------------------------------ one replica at the rate

st.subheader(f"One replica at {rate:g} req/s")
with shown_errors("Simulating the sidebar's deployment"):
    result = simulated(model, hw, sc, workload, inputs.draft)
if result.overloaded:
    st.warning(
        overload_warning(
            result.offered_requests_per_s,
            result.saturation_requests_per_s,
            result.overload_reason,
            result.overload_options,
            result.max_in_flight,
        ),
        icon=":material/warning:",
    )
    actions = carry_load_actions(sc, hw)
    buttons = st.columns(len(actions) + 1, vertical_alignment="center")
    for column, (label, changes) in zip(buttons, actions):
        column.button(
            label,
            key=f"simulate_try_{next(iter(changes))}",
            on_click=apply_to_sidebar,
            args=(changes,),
            icon=":material/tune:",
        )
    buttons[-1].caption(
        "Replicas: **Cheapest deployment** below sizes them for this rate. Above the knee the "
        'percentiles below grow with the number of requests simulated: read them as "the queue '
        'never drains", not as a latency to plan with.'
        if result.max_in_flight is None
        else "Under the client cap the latencies below count from the send and stay bounded; what grows is the "
        "wait at the client, which they leave out. **Cheapest deployment** below sizes replicas for this rate "
        "without the cap."
    )
head, *cols = st.columns([1.2, 1, 1, 1, 1])
with head:
    kind_badge(result.step_time_kind)
    st.caption(result.label)
ttft, tpot = result.ttft_seconds, result.tpot_seconds
cols[0].metric(
    f"{stat.upper()} TTFT",
    fmt_seconds(None if ttft is None else getattr(ttft, stat)),
    help=ServingResult.model_fields["ttft_seconds"].description,
)
cols[1].metric(
    f"{stat.upper()} TPOT",
    fmt_seconds(None if tpot is None else getattr(tpot, stat)),
    help=ServingResult.model_fields["tpot_seconds"].description,
)
cols[2].metric(
    "Output tokens/s",
    fmt_rate(result.throughput_tokens_per_s),
    help=ServingResult.model_fields["throughput_tokens_per_s"].description,
)
cols[3].metric("Preemptions", f"{result.preemptions:,}", help=ServingResult.model_fields["preemptions"].description)
for reason in result.rejection_reasons:
    st.error(f"Refused: {reason}", icon=":material/block:")

# A tab's content is drawn while it is the open one (a rerun switches): the timeline, ~100 kB of chart JSON,
# is not redrawn on every rerun behind a closed tab.
stats_tab, time_tab = st.tabs(
    ["Latency percentiles", "Queue and KV cache over time"], key="simulate_result_tab", on_change="rerun"
)
with stats_tab:
    if stats_tab.open:
        st.dataframe(latency_percentiles(result), hide_index=True, key="simulate_stats")
        st.caption(
            "As vllm bench serve defines them: TTFT from arrival (queueing included) to the first token; "
            "TPOT per request = (E2E - TTFT) / (output tokens - 1); ITL = every gap between tokens."
        )
with time_tab:
    if time_tab.open:
        plotted(charts.serving_timeline, result, key="simulate_timeline")
        st.caption(
            f"{result.num_completed:,} requests over {fmt_seconds(result.duration_seconds)} of simulated time; "
            f"KV cache of {result.scheduler.num_gpu_blocks:,} blocks of {result.scheduler.block_size_tokens} "
            "tokens from the memory plan"
            + (
                "."
                if result.scheduler.kv_block_groups is None
                else f"; a request of t tokens holds {result.scheduler.kv_block_groups.words()}."
            )
        )

# ------------------------------------------------------------------ latency vs rate

st.subheader("Latency vs request rate")
with shown_errors("Sweeping the request rate"):
    saturation, probes = rate_sweep(model, hw, sc, workload, slo, inputs.draft)
left, right = st.columns(2)
targets_by_metric = {t.metric: t.seconds for t in slo.targets} if slo else {}
with left:
    plotted(
        charts.latency_vs_rate,
        probes,
        "ttft_seconds",
        "TTFT (queueing included)",
        targets_by_metric.get("ttft"),
        rate,
        key="simulate_ttft_chart",
    )
with right:
    plotted(
        charts.latency_vs_rate,
        probes,
        "tpot_seconds",
        "TPOT",
        targets_by_metric.get("tpot"),
        rate,
        key="simulate_tpot_chart",
    )
st.caption(
    f"One replica kept full serves {saturation:,.2f} req/s (its knee: the sustainable rate); the sweep stops at "
    f"{UTILIZATION_CAP:.0%} of it, beyond which the queue grows without bound. Each point measures the "
    "requests that arrive after the batch has filled and before the load stops."
)

# ------------------------------------------------------------------ disaggregated prefill/decode


def pools_note(sc: Scenario) -> str:
    """What the pools take from the sidebar beyond their TP: DP engines per instance, speculative decoding."""
    note = ""
    if sc.data_parallel_size > 1:
        note += (
            f" Each instance of either pool is {sc.data_parallel_size} DP engines of its TP (the sidebar's data "
            "parallel), the router's round robin over every engine."
        )
    spec = sc.speculative
    if spec is not None:
        drafter = f", drafter {plain(spec.draft_model)}" if spec.draft_model else ""
        note += (
            f" The decode pool and the aggregated replicas run the sidebar's speculative decoding ({spec.method}, "
            f"k = {spec.num_speculative_tokens}, a = {spec.acceptance_rate:g}{drafter}); the prefill pool does not "
            "(it computes the prompt and one token)."
        )
    return note


def disaggregation_section() -> None:
    """A prefill pool and a decode pool (xPyD) against aggregated replicas on the same GPUs, at this page's
    workload: the core's comparison (``compare_layouts``), drawn and run only while the expander is open and on."""
    st.session_state.setdefault("simulate_pd_box", bool(st.session_state["simulate_pd"]))  # a link that turns it on
    with st.expander(
        "Disaggregated prefill/decode", key="simulate_pd_box", on_change="rerun", icon=":material/call_split:"
    ) as box:
        if not box.open:
            return
        fields = DisaggLayout.model_fields
        on = st.toggle(
            "Compare a prefill pool and a decode pool with aggregated replicas on the same GPUs",
            key="simulate_pd",
            help="As vLLM's P/D connectors (NixlConnector) and llm-d run it: each request prefills on a prefill "
            "instance, its KV cache goes over the link to a decode instance, which generates every token.",
        )
        cols = st.columns(5)
        prefill = cols[0].number_input(
            "Prefill instances",
            min_value=1,
            max_value=MAX_INSTANCES,
            step=1,
            key="simulate_pd_p",
            help=fields["prefill_instances"].description,
        )
        prefill_tp = cols[1].number_input(
            "Prefill TP",
            min_value=1,
            max_value=64,
            step=1,
            key="simulate_pd_ptp",
            help=fields["prefill_tp"].description,
        )
        decode = cols[2].number_input(
            "Decode instances",
            min_value=1,
            max_value=MAX_INSTANCES,
            step=1,
            key="simulate_pd_d",
            help=fields["decode_instances"].description,
        )
        decode_tp = cols[3].number_input(
            "Decode TP", min_value=1, max_value=64, step=1, key="simulate_pd_dtp", help=fields["decode_tp"].description
        )
        link = cols[4].selectbox(
            "KV link",
            tuple(KV_LINKS),
            key="simulate_pd_link",
            format_func=lambda kind: LINK_LABELS.get(kind, kind),
            help=fields["kv_transfer_link"].description,
        )
        if not on:
            st.caption("Turn it on to simulate both pools at the request rate and lengths above.")
            return
        try:
            layout = DisaggLayout(
                prefill_instances=int(prefill),
                prefill_tp=int(prefill_tp),
                decode_instances=int(decode),
                decode_tp=int(decode_tp),
                kv_transfer_link=link,
            )
            cmp = disaggregated(model, hw, sc, workload, layout, inputs.draft)
        except ShownError as err:  # the rest of the page still draws
            st.error(f"Disaggregated prefill/decode: {describe(err)}", icon=":material/error:")
            return
        kind_badge("simulated")
        formatted_table(disagg_table(cmp), hide_index=True, key="simulate_pd_table")
        st.markdown(plain(cmp.verdict))
        dis = cmp.disaggregated
        kv = dis.kv_transfer_seconds
        st.caption(
            f"At {rate:g} req/s: the disaggregated pools take every request, each aggregated replica 1/"
            f"{cmp.aggregated_replicas} of them. KV transfer {fmt_seconds(None if kv is None else kv.mean)} mean per "
            f"request, {fmt_bytes(dis.kv_transfer_bytes_per_gpu_mean)} per GPU at "
            f"{dis.kv_link_bytes_per_s / 1e9:,.1f} GB/s ({plain(dis.kv_link_source)})."
            + (" An aggregated replica is past its knee at this rate." if cmp.aggregated_overloaded else "")
            + pools_note(sc)
        )


disaggregation_section()
sync_page_inputs(PD_URL_INPUTS)

# ------------------------------------------------------------------ cheapest deployment

st.subheader(f"Cheapest deployment for {rate:g} req/s")
if slo is None:
    st.info("Set at least one target above to search for the cheapest deployment.", icon=":material/info:")
    st.stop()
cards = sorted(load_profiles())
opts = st.columns([2, 1.6, 1, 1, 0.9])
gpus = opts[0].multiselect("Cards", cards, default=[hw.id] if hw.id in cards else [], key="simulate_gpus")
tps = opts[1].multiselect("TP", TP_OPTIONS, default=list(TP_OPTIONS), key="simulate_tps")
weights = opts[2].multiselect("Weights", WEIGHT_DTYPES, default=[sc.weight_dtype], key="simulate_weights")
kvs = opts[3].multiselect(
    "KV cache",
    KV_OPTIONS,
    default=[sc.kv_cache_dtype] if sc.kv_cache_dtype in KV_OPTIONS else ["auto"],
    key="simulate_kvs",
)
exhaustive = opts[4].toggle(
    "Search all", value=False, key="simulate_exhaustive", help=SearchSettings.model_fields["exhaustive"].description
)
if not (gpus and tps and weights and kvs):
    st.info("Pick at least one card, TP size, weight and KV precision.", icon=":material/info:")
    st.stop()
with st.expander("Prices ($/GPU-hour)", expanded=bool(unpriced(gpus)), icon=":material/payments:"):
    prices = price_inputs(gpus, "simulate")
    st.caption(
        "Each card starts at its profile's cited on-demand price (hover the field for the source); "
        "type your own to rank by it. Prices you set here also cost the Compare page."
    )
missing = unpriced(gpus)
if missing and len(missing) == len(gpus):
    st.warning(
        f"No card has a price ({', '.join(missing)}), so the search ranks by GPU count, not cost. Type a "
        "$/GPU-hour under **Prices** above to rank by cost.",
        icon=":material/money_off:",
    )
elif missing:
    st.warning(
        f"No price for {', '.join(missing)}: ranked by $/hour, with {'it' if len(missing) == 1 else 'them'} "
        "after the priced cards. Type a $/GPU-hour under **Prices** above to cost "
        f"{'it' if len(missing) == 1 else 'them'}.",
        icon=":material/money_off:",
    )
base = sc.model_copy(update={"num_gpus": None})
st.caption(search_layout_note(sc))
searched = workload
if cap:  # the search sizes replicas for the rate; a client cap bounds the whole deployment (planner.serve.slo)
    searched = workload.with_max_in_flight(None)
    st.caption(
        f"Searched without the client cap: {int(cap):,} requests in flight bound the whole deployment (at most "
        f"{int(cap):,} / latency req/s, however many replicas), which the search does not model. Simulate the "
        "deployment it recommends with the cap above."
    )
with shown_errors("Searching deployments"):
    space = CandidateSpace(
        gpus=tuple(gpus),
        tp=tuple(tps),
        pp=(sc.pp,),
        data_parallel_size=(sc.data_parallel_size,),
        enable_expert_parallel=sc.enable_expert_parallel,
        weight_dtypes=tuple(weights),
        kv_cache_dtypes=tuple(kvs),
        base=base,
    )
    plan = cheapest(model, slo, searched, space, SearchSettings(exhaustive=exhaustive), prices, inputs.draft)

best = plan.recommendation
if best is None:
    st.error(
        "No candidate meets " + plan.slo.describe() + ". The table says which target fails first and by how much.",
        icon=":material/block:",
    )
else:
    with st.container(border=True):
        st.markdown(
            f"**{best.replicas} replica(s) of {best.label}**: {best.total_gpus} GPU(s) in all · up to "
            f"{best.max_rate_per_replica_per_s:,.2f} req/s per replica (limit: {best.limiting_target})"
        )
        m = st.columns(5)
        m[0].metric("$/hour", fmt_usd(best.usd_per_hour), help=CandidateResult.model_fields["usd_per_hour"].description)
        m[1].metric(
            "$ per 1M input tokens",
            fmt_usd(best.usd_per_1m_input_tokens),
            help=CandidateResult.model_fields["usd_per_1m_input_tokens"].description,
        )
        m[2].metric(
            "$ per 1M output tokens",
            fmt_usd(best.usd_per_1m_output_tokens),
            help=CandidateResult.model_fields["usd_per_1m_output_tokens"].description,
        )
        energy = best.energy_kwh_per_1m_output_tokens_upper_bound
        m[3].metric(
            "kWh per 1M output tokens",
            "unknown" if energy is None else f"≤ {energy:,.3f}",
            help=CandidateResult.model_fields["energy_kwh_per_1m_output_tokens_upper_bound"].description,
        )
        op = best.operating_point
        m[4].metric(
            f"{stat.upper()} TTFT (steady state)",
            fmt_seconds(None if op.ttft_seconds is None else getattr(op.ttft_seconds, stat)),
            help="Simulated at the operating point: the target rate shared by the replicas.",
        )
        st.caption(probe_note(op.request_rate_per_s, op.measured_requests, int(num_requests)))
        link = export_link(best)
        if link:
            st.link_button("Open the Export page with this deployment", link, icon=":material/download:")
            st.caption(
                "Opens in a new tab with the sidebar set to this deployment (the rest of your inputs kept), "
                "where the Export page writes its vLLM, SGLang and Kubernetes files."
            )
        else:
            st.caption(
                "An uploaded config.json cannot travel in a link: set the sidebar to this deployment by hand, "
                "then open the Export page."
            )
ranked = {"usd_per_hour": "cost ($/hour)", "gpus": "GPU count (no card has a price)"}.get(
    plan.ranked_by, plan.ranked_by
)
notes = [n for n in plan.notes if "--price-per-gpu-hour" not in n]  # the CLI's words; the warning above says it here
st.caption(
    f"Ranked by {ranked} · simulated ({plan.step_time_kind or 'no'} step times) · "
    f"search took {plan.search_seconds:.1f} s. " + " ".join(notes)
)
table_tab, pareto_tab = st.tabs(
    ["Candidates", "Throughput vs interactivity"], key="simulate_search_tab", on_change="rerun"
)  # drawn while open, as above
with table_tab:
    if table_tab.open:
        formatted_table(candidates_table(plan), CANDIDATE_FORMATS, hide_index=True, key="simulate_candidates")
with pareto_tab:
    if pareto_tab.open:
        plotted(charts.pareto_chart, plan, key="simulate_pareto")
        st.caption(
            "Every simulated rate of every candidate (x: failed the SLO); the line joins the probes no other "
            "beats on both axes."
        )
