"""Issue 11, the app side: parallelism from the sidebar, the Plan page's placement picture, and the Simulate page's
disaggregated prefill/decode section (AppTest, no browser, no network).

The "Parallelism" inputs set ``Scenario.pp``, ``num_nodes``, ``enable_expert_parallel``, ``data_parallel_size``,
``all2all_backend`` and ``expert_load_imbalance``; each test checks what a page shows against the core's own answer
for the same scenario (the placement's ranks, the memory plan, ``compare_layouts``), a bad layout against the core's
message, and that the inputs travel in the link like every other input.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, urlsplit

import pytest
from streamlit.testing.v1 import AppTest

from planner.errors import PlannerError
from planner.estimate.memory import plan_memory
from planner.estimate.placement import place
from planner.estimate.resolve import resolve
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.disagg import DisaggLayout, compare_layouts
from planner.serve.replica import length_distribution
from planner.serve.slo import SLO, CandidateSpace, SearchSettings, plan_slo
from planner.serve.workload import PoissonArrivals, Workload
from tests import app_test
from ui.errors import describe, plain
from ui.format import fmt_bytes, fmt_gib, fmt_seconds
from ui.params import ALL2ALL_BACKENDS, PARAMS, sidebar_updates
from ui.sidebar import ALL2ALL_LABELS, PARALLELISM_BOX
from ui.state import scenario_from

TIMEOUT_S = 120
LLAMA_70B = "meta-llama/Llama-3.1-70B"
QWEN_MOE = "Qwen/Qwen3-30B-A3B"  # 48 layers, 128 routed experts
PARALLEL_KEYS = ("pp", "nodes", "ep", "dp", "a2a", "imbalance", "nccl")
SIDEBAR_KEYS = tuple(p.key for p in PARAMS)


def spec_of(name: str):
    loaded = load_config(name)
    return build_spec(loaded.config, loaded.name)


def fresh(page: str | None = None, query: dict[str, str] | None = None, box_open: bool = True) -> AppTest:
    """A first run of the app; the sidebar's Parallelism expander open (closed, it draws none of its inputs)."""
    return app_test.fresh(page, query, state={PARALLELISM_BOX: True} if box_open else None, timeout_s=TIMEOUT_S)


def chart(at: AppTest, key: str) -> dict:
    """The plotly figure (as JSON) of the chart drawn under ``key``."""
    found = [c for c in at.get("plotly_chart") if key in c.proto.id]
    assert found, f"no chart {key}: {[c.proto.id for c in at.get('plotly_chart')]}"
    return json.loads(found[0].proto.spec)


def gpu_cells(fig: dict) -> list[dict]:
    """The figure's GPU cells: its rectangles named 'GPU <rank>'."""
    return [s for s in fig["layout"]["shapes"] if s.get("type") == "rect" and s.get("name", "").startswith("GPU ")]


def cell_traces(fig: dict) -> list[dict]:
    """One trace per pipeline stage holding a point (label, hover) per GPU of the stage."""
    return [t for t in fig["data"] if t.get("customdata") is not None]


def said(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for kind in (at.error, at.warning) for e in kind]
    return "\n".join(str(p) for p in parts)


# ------------------------------------------------------------------------------ the sidebar's inputs


def test_the_parallelism_expander_is_collapsed_and_draws_nothing_until_opened() -> None:
    closed = fresh(box_open=False)
    box = next(e for e in closed.sidebar.expander if e.label == "Parallelism")
    assert box.proto.expanded is False
    assert [w for kind in ("number_input", "toggle", "selectbox") for w in box.get(kind)] == []
    at = fresh()
    box = next(e for e in at.sidebar.expander if e.label == "Parallelism")
    inside = {w.key for kind in ("number_input", "toggle", "selectbox") for w in box.get(kind)}
    assert inside == set(PARALLEL_KEYS)
    sc = scenario_from({k: at.session_state[k] for k in PARALLEL_KEYS})
    assert (sc.pp, sc.num_nodes, sc.enable_expert_parallel, sc.data_parallel_size) == (1, None, False, 1)
    assert sc == Scenario()


def test_every_all2all_backend_has_a_label() -> None:
    assert (
        set(ALL2ALL_LABELS)
        == set(ALL2ALL_BACKENDS)
        == {
            "allgather_reducescatter",
            "deepep_low_latency",
            "deepep_high_throughput",
        }
    )


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(tp=4, pp=2, num_nodes=2),
        Scenario(
            tp=2,
            enable_expert_parallel=True,
            data_parallel_size=4,
            all2all_backend="deepep_low_latency",
            expert_load_imbalance=1.55,
        ),
        Scenario(enable_expert_parallel=True, tp=8, expert_load_imbalance=1.0),
    ],
    ids=["pp-across-nodes", "dp-ep-deepep", "ep-over-tp"],
)
def test_sidebar_updates_invert_scenario_from_for_parallelism(scenario: Scenario) -> None:
    from tests.test_app import SIDEBAR_DEFAULTS

    values = {**SIDEBAR_DEFAULTS, **sidebar_updates(scenario.model_dump())}
    assert scenario_from(values) == scenario


def test_expert_parallel_is_disabled_on_a_dense_model_and_the_sidebar_says_why() -> None:
    dense = fresh()
    assert dense.toggle(key="ep").disabled is True
    assert dense.number_input(key="dp").disabled is True and dense.selectbox(key="a2a").disabled is True
    assert any("is dense (no routed experts)" in c.value for c in dense.sidebar.caption)
    moe = fresh(query={"model": QWEN_MOE})
    assert moe.toggle(key="ep").disabled is False
    assert not any("is dense" in c.value for c in moe.sidebar.caption)
    moe.toggle(key="ep").set_value(True).run()
    assert moe.number_input(key="dp").disabled is False and moe.number_input(key="imbalance").disabled is False
    assert moe.selectbox(key="a2a").disabled is True  # the backend is the dispatch under DP only
    moe.number_input(key="dp").set_value(2).run()
    assert moe.selectbox(key="a2a").disabled is False


def test_a_dense_model_turns_expert_and_data_parallelism_off_and_says_so() -> None:
    at = fresh(query={"model": QWEN_MOE, "tp": "2", "ep": "1", "dp": "2"})
    assert not at.error
    at.selectbox(key="model").set_value("meta-llama/Llama-3.1-8B").run()  # a dense model after a MoE one
    assert (at.toggle(key="ep").value, at.number_input(key="dp").value) == (False, 1)
    assert at.toggle(key="ep").disabled is True
    assert any(
        w.value.startswith("Expert and data parallelism turned off: meta-llama/Llama-3.1-8B is dense")
        for w in at.sidebar.warning
    )
    assert not at.error and "ep" not in at.query_params and "dp" not in at.query_params
    linked = fresh(query={"ep": "1"})  # a link that asks for EP on a dense model: the same
    assert linked.toggle(key="ep").value is False and not linked.error


def test_turning_expert_parallel_off_takes_data_parallel_back_to_one() -> None:
    at = fresh(query={"model": QWEN_MOE, "ep": "1", "dp": "4"})
    at.toggle(key="ep").set_value(False).run()
    assert at.number_input(key="dp").value == 1 and at.number_input(key="dp").disabled is True
    assert not at.error  # not 'DP 4 without --enable-expert-parallel'


# ------------------------------------------------------------------------------ the Scenario the pages plan


def test_values_set_in_the_expander_stay_when_it_closes() -> None:
    at = fresh(query={"model": LLAMA_70B, "tp": "4"})
    at.number_input(key="pp").set_value(2).run()
    at.session_state[PARALLELISM_BOX] = False
    at.run()
    assert at.session_state["pp"] == 2 and at.query_params["pp"] in ("2", ["2"])
    assert any(c.value == "PP 2" for c in at.sidebar.caption)  # said under the closed expander


def test_the_inputs_change_the_scenario_the_plan_page_plans() -> None:
    at = fresh(query={"model": LLAMA_70B, "tp": "4"})
    one_stage = at.metric[3].value  # "Weights per GPU"
    at.number_input(key="pp").set_value(2)
    at.number_input(key="nodes").set_value(2).run()
    assert not at.exception and not at.error
    sc = Scenario(tp=4, pp=2, num_nodes=2)
    plan = plan_memory(spec_of(LLAMA_70B), get_profile("h100-sxm"), sc)
    shown = {m.label: m.value for m in at.metric}
    assert shown["Weights per GPU"] == fmt_gib(plan.weight_bytes_per_gpu) != one_stage  # half the layers per GPU
    assert any(c.value == "PP 2 · 2 node(s)" for c in at.sidebar.caption)  # seen with the expander closed


def test_expert_and_data_parallel_change_the_plan_as_the_core_plans_them() -> None:
    at = fresh(query={"model": QWEN_MOE, "tp": "2", "ep": "1", "dp": "2"})
    assert not at.error
    sc = Scenario(tp=2, enable_expert_parallel=True, data_parallel_size=2)
    plan = plan_memory(spec_of(QWEN_MOE), get_profile("h100-sxm"), sc)
    shown = {m.label: m.value for m in at.metric}
    assert shown["Weights per GPU"] == fmt_gib(plan.weight_bytes_per_gpu)
    tp_only = plan_memory(spec_of(QWEN_MOE), get_profile("h100-sxm"), Scenario(tp=2))
    assert plan.weight_bytes_per_gpu < tp_only.weight_bytes_per_gpu  # each GPU holds a quarter of the experts
    assert any(c.value.startswith("expert parallel 4 (TP 2 x DP 2)") for c in at.sidebar.caption)


# ------------------------------------------------------------------------------ Plan: the placement picture


def test_the_placement_picture_has_one_cell_per_gpu_colored_by_stage() -> None:
    at = fresh(query={"model": LLAMA_70B, "tp": "4", "pp": "2"})
    fig = chart(at, "plan_placement")
    cells = gpu_cells(fig)
    assert len(cells) == 8  # TP 4 x PP 2
    assert len({c["fillcolor"] for c in cells[:4]}) == 1 and len({c["fillcolor"] for c in cells[4:]}) == 1
    assert cells[0]["fillcolor"] != cells[4]["fillcolor"]
    traces = cell_traces(fig)
    assert [len(t["customdata"]) for t in traces] == [4, 4]  # 2 stages of a TP group of 4
    assert [t["customdata"] for t in traces] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # stage-major ranks, as vLLM numbers
    # 80 layers in 2 stages by hand (vLLM's get_pp_indices: 40 each), embedding first, lm_head last
    assert all("layers 0-39 +emb" in label for label in traces[0]["text"])
    assert all("layers 40-79 +head" in label for label in traces[1]["text"])
    core = place(spec_of(LLAMA_70B), get_profile("h100-sxm"), Scenario(tp=4, pp=2))
    for r, label in zip(core.ranks, traces[0]["text"] + traces[1]["text"]):
        assert label.endswith(f"KV {fmt_bytes(r.kv_cache_bytes)}")
    assert {round(c["y0"]) for c in cells} == {0}  # one node: one row
    caption = next(c.value for c in at.caption if "GPUs on" in c.value)
    assert caption.startswith("8 GPUs on 1 node of 8; each TP group of 4 all-reduces over NVLink")
    assert "stage 0 → 1 over NVLink" in caption


def test_across_two_nodes_the_picture_has_a_row_per_node_and_the_send_pays_the_network() -> None:
    at = fresh(query={"model": LLAMA_70B, "tp": "4", "pp": "2", "nodes": "2"})
    fig = chart(at, "plan_placement")
    rows = [round(c["y0"]) for c in gpu_cells(fig)]
    assert rows == [0, 0, 0, 0, 1, 1, 1, 1]  # 4 GPUs per node's pod: ranks 0-3 on node 0, 4-7 on node 1
    assert fig["layout"]["yaxis"]["ticktext"] == ["node 0", "node 1"]
    core = place(spec_of(LLAMA_70B), get_profile("h100-sxm"), Scenario(tp=4, pp=2, num_nodes=2))
    assert core.stages[0].send_link == "network"
    assert "stage 0 → 1 over the network (InfiniBand/RoCE)" in said(at)


def test_with_expert_parallel_each_cell_names_its_experts() -> None:
    at = fresh(query={"model": QWEN_MOE, "ep": "1", "dp": "4"})
    fig = chart(at, "plan_placement")
    assert len(gpu_cells(fig)) == 4
    labels = cell_traces(fig)[0]["text"]
    # 128 experts over EP 4 by hand: 32 each, contiguous (vLLM's linear expert map)
    assert [label.split("<br>")[2] for label in labels] == [
        "experts 0-31",
        "experts 32-63",
        "experts 64-95",
        "experts 96-127",
    ]
    assert [label.split("<br>")[0] for label in labels] == [f"GPU {r} · DP {r}" for r in range(4)]
    assert "the routed experts are split over 4 EP ranks (TP 1 x DP 4), their dispatch/combine over NVLink" in said(at)


def test_one_gpu_draws_no_placement() -> None:
    at = fresh()
    assert [c.proto.id for c in at.get("plotly_chart") if "plan_placement" in c.proto.id] == []
    assert not any("GPUs on" in c.value for c in at.caption)


def test_the_plan_download_carries_the_clis_placement(monkeypatch) -> None:
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    from planner.commands.common import to_jsonable

    seen: dict[str, bytes] = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def record(self, path_or_data, mimetype, kind, filename=None):
        if filename is not None:
            seen[filename] = path_or_data if isinstance(path_or_data, bytes) else str(path_or_data).encode()
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", record)
    fresh(query={"model": LLAMA_70B, "tp": "4", "pp": "2"})
    document = json.loads(seen["plan.json"])
    core = place(spec_of(LLAMA_70B), get_profile("h100-sxm"), Scenario(tp=4, pp=2))
    assert document["placement"] == to_jsonable(core)  # what `python -m planner plan --format json` writes


# ------------------------------------------------------------------------------ bad layouts: the core's message


def core_error(model: str, **fields) -> str:
    """The message the core gives for this scenario, as a page shows it."""
    with pytest.raises(PlannerError) as err:
        resolve(spec_of(model), get_profile(fields.pop("gpu", "h100-sxm")), Scenario(**fields))
    return describe(err.value)


@pytest.mark.parametrize(
    ("query", "model", "fields", "words"),
    [
        ({"model": QWEN_MOE, "dp": "2"}, QWEN_MOE, {"data_parallel_size": 2}, "without --enable-expert-parallel"),
        ({"model": QWEN_MOE, "ep": "1"}, QWEN_MOE, {"enable_expert_parallel": True}, "on one GPU"),
        (
            {"model": QWEN_MOE, "ep": "1", "dp": "2", "pp": "2"},
            QWEN_MOE,
            {"enable_expert_parallel": True, "data_parallel_size": 2, "pp": 2},
            "does not model pipeline stages inside",
        ),
        (
            {"model": LLAMA_70B, "tp": "4", "pp": "2", "nodes": "3"},
            LLAMA_70B,
            {"tp": 4, "pp": 2, "num_nodes": 3},
            "do not split evenly over --num-nodes 3",
        ),
        ({"model": LLAMA_70B, "pp": "81"}, LLAMA_70B, {"pp": 81}, "exceeds the 80 layers"),
    ],
    ids=["dp-without-ep", "ep-one-gpu", "dp-with-pp", "nodes-uneven", "pp-past-layers"],
)
def test_a_bad_layout_shows_the_cores_message_not_a_traceback(query, model, fields, words) -> None:
    expected = core_error(model, **fields)
    assert words in expected
    for page in (None, "views/simulate.py"):
        at = fresh(page, query)
        assert [e.value for e in at.error] == [expected]
        assert at.toggle(key="ep") is not None  # the sidebar stays usable


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        ({"dp": "0"}, "Ignored dp=0 from the link: must be between 1 and 1,024."),
        ({"imbalance": "9"}, "Ignored imbalance=9 from the link: must be between 1 and 8."),
        ({"a2a": "nccl"}, "Ignored a2a=nccl from the link: must be one of allgather\\_reducescatter"),
        ({"ep": "maybe"}, "Ignored ep=maybe from the link: must be 1 or 0."),
    ],
)
def test_a_bad_parallelism_link_value_is_dropped_with_a_warning(query, shown) -> None:
    at = fresh(query=query)
    assert any(w.value.startswith(shown) for w in at.sidebar.warning), [w.value for w in at.sidebar.warning]
    assert not at.error and next(iter(query)) not in at.query_params


# ------------------------------------------------------------------------------ share links


def test_parallelism_inputs_round_trip_through_the_link() -> None:
    at = fresh(query={"model": QWEN_MOE})
    at.number_input(key="tp").set_value(2)
    at.toggle(key="ep").set_value(True).run()  # DP and the imbalance are enabled with EP
    at.number_input(key="dp").set_value(4).run()
    at.selectbox(key="a2a").set_value("deepep_high_throughput")
    at.number_input(key="imbalance").set_value(1.5).run()
    assert not at.error, [e.value for e in at.error]
    query = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert {k: query[k] for k in ("ep", "dp", "a2a", "imbalance")} == {
        "ep": "1",
        "dp": "4",
        "a2a": "deepep_high_throughput",
        "imbalance": "1.5",
    }
    again = fresh(query=query)
    keys = ("model", "tp", *PARALLEL_KEYS)
    assert {k: again.session_state[k] for k in keys} == {k: at.session_state[k] for k in keys}
    assert [m.value for m in again.metric] == [m.value for m in at.metric]


# ------------------------------------------------------------------------------ Simulate: disaggregated prefill/decode


def page_workload(rate: float = 10.0) -> Workload:
    """The Simulate page's default traffic: Poisson at the rate, 1,000 requests, the sidebar's 1,024 / 256 tokens."""
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=rate),
        num_requests=1000,
        input_tokens=length_distribution("fixed", 1024, 0, "prompt length"),
        output_tokens=length_distribution("fixed", 256, 0, "output length"),
        prefix_cache_hit_rate=0.0,
        seed=0,
    )


def test_the_disaggregated_section_is_collapsed_and_draws_nothing_by_default() -> None:
    at = fresh("views/simulate.py")
    box = next(e for e in at.expander if e.label == "Disaggregated prefill/decode")
    assert box.proto.expanded is False
    assert [w for kind in ("toggle", "number_input", "selectbox") for w in box.get(kind)] == []
    assert not any(d.proto.id.endswith("simulate_pd_table") for d in at.dataframe)


def test_disaggregation_on_shows_the_cores_comparison() -> None:
    query = {"pd": "1", "pd_d": "2", "pd_link": "nvlink"}
    at = fresh("views/simulate.py", query)
    assert not at.error, [e.value for e in at.error]
    layout = DisaggLayout(prefill_instances=1, decode_instances=2, kv_transfer_link="nvlink")
    core = compare_layouts(
        spec_of("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm"), Scenario(), page_workload(), layout
    )
    table = next(d for d in at.dataframe if "layout" in d.value.columns).value
    dis = core.disaggregated
    assert list(table["layout"]) == [
        f"disaggregated {layout.label}, {dis.gpus} GPUs",
        f"aggregated: {core.aggregated_replicas} replica(s)",
    ]
    assert dis.gpus == 3 and core.aggregated_replicas == 3  # 1 + 2 one-GPU instances; 3 TP-1 replicas
    assert list(table["TTFT P99"]) == [fmt_seconds(dis.ttft_seconds.p99), fmt_seconds(core.aggregated_ttft_seconds.p99)]
    assert list(table["TPOT P50"]) == [fmt_seconds(dis.tpot_seconds.p50), fmt_seconds(core.aggregated_tpot_seconds.p50)]
    assert plain(core.verdict) in [m.value for m in at.markdown]
    assert f"{dis.kv_link_bytes_per_s / 1e9:,.1f} GB/s" in said(at)
    assert dis.kv_transfer_seconds is not None and dis.kv_transfer_seconds.mean > 0  # the TTFT includes the transfer
    assert any(s.value.startswith("Cheapest deployment") for s in at.subheader)  # the rest of the page still draws


def test_disaggregation_inputs_set_on_the_page_travel_in_the_link() -> None:
    at = fresh("views/simulate.py")
    at.session_state["simulate_pd_box"] = True  # the user opens the expander
    at.run()
    at.toggle(key="simulate_pd").set_value(True)
    at.number_input(key="simulate_pd_p").set_value(2)
    at.number_input(key="simulate_pd_dtp").set_value(2)
    at.selectbox(key="simulate_pd_link").set_value("tcp").run()
    assert not at.error, [e.value for e in at.error]
    query = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert {k: query.get(k) for k in ("pd", "pd_p", "pd_ptp", "pd_d", "pd_dtp", "pd_link")} == {
        "pd": "1",
        "pd_p": "2",
        "pd_ptp": None,
        "pd_d": None,
        "pd_dtp": "2",
        "pd_link": "tcp",
    }
    again = fresh("views/simulate.py", query)
    first = next(d for d in at.dataframe if "layout" in d.value.columns).value
    second = next(d for d in again.dataframe if "layout" in d.value.columns).value
    assert first.equals(second) and "2P1D (prefill TP1, decode TP2, KV over tcp)" in first["layout"][0]


def test_a_bad_disaggregated_layout_shows_the_cores_message_and_the_page_goes_on() -> None:
    at = fresh("views/simulate.py", {"pd": "1", "pd_ptp": "3"})  # 3 does not divide Llama-3.1-8B's 32 heads
    layout = DisaggLayout(prefill_tp=3)
    with pytest.raises(PlannerError) as err:
        compare_layouts(
            spec_of("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm"), Scenario(), page_workload(), layout
        )
    assert [e.value for e in at.error] == [f"Disaggregated prefill/decode: {describe(err.value)}"]
    assert any(s.value.startswith("Cheapest deployment") for s in at.subheader)


# ------------------------------------------------------------------------------ Simulate: the search keeps the layout


def page_search(model: str, sc: Scenario, tps=(1, 2, 4, 8)):
    """The Simulate page's default search (P99 TTFT <= 1 s, P99 TPOT <= 50 ms at 10 req/s, H100, the sidebar's
    weights and KV precision) with the sidebar's layout, as the core runs it."""
    space = CandidateSpace(
        gpus=("h100-sxm",),
        tp=tuple(tps),
        pp=(sc.pp,),
        data_parallel_size=(sc.data_parallel_size,),
        enable_expert_parallel=sc.enable_expert_parallel,
        weight_dtypes=(sc.weight_dtype,),
        kv_cache_dtypes=(sc.kv_cache_dtype,),
        base=sc,
    )
    return plan_slo(spec_of(model), SLO.of(p99_ttft=1.0, p99_tpot=0.05), page_workload(), space, SearchSettings())


def candidates(at: AppTest):
    return next(d.value for d in at.dataframe if "replica" in d.value.columns)


def link_query_of(at: AppTest) -> dict[str, str]:
    (button,) = at.get("link_button")
    assert button.proto.url.startswith("./export?")
    return dict(parse_qsl(urlsplit(button.proto.url).query))


def test_the_search_keeps_the_sidebars_expert_parallel_layout_and_differs_from_plain_tp() -> None:
    at = fresh("views/simulate.py", {"model": QWEN_MOE, "tp": "2", "ep": "1"})
    assert not at.error, [e.value for e in at.error]
    ep = page_search(QWEN_MOE, Scenario(tp=2, enable_expert_parallel=True))
    plain_tp = page_search(QWEN_MOE, Scenario(tp=2))
    table = candidates(at)
    assert list(table["replica"]) == [c.label for c in ep.candidates] != [c.label for c in plain_tp.candidates]
    assert list(table["status"]) == [c.status for c in ep.candidates]
    assert all(c.scenario.enable_expert_parallel for c in ep.candidates)
    best, tp_best = ep.recommendation, plain_tp.recommendation
    assert best.label == "h100-sxm TP2 EP w auto kv auto" and tp_best.label == "h100-sxm TP1 w auto kv auto"
    assert f"{best.replicas} replica(s) of {best.label}" in said(at)
    # TP 1 with EP and no DP splits nothing: that candidate's row is the core's refusal, the search goes on
    refused = next(c for c in ep.candidates if c.tp == 1)
    assert refused.status == "invalid" and "--enable-expert-parallel on one GPU" in refused.reason
    assert "Every candidate keeps the sidebar's layout (PP 1, expert parallel over TP x DP 1" in said(at)


def test_the_export_link_carries_expert_and_data_parallelism() -> None:
    at = fresh("views/simulate.py", {"model": QWEN_MOE, "ep": "1", "dp": "2", "imbalance": "1.5"})
    assert not at.error, [e.value for e in at.error]
    sc = Scenario(enable_expert_parallel=True, data_parallel_size=2, expert_load_imbalance=1.5)
    best = page_search(QWEN_MOE, sc).recommendation
    assert (best.tp, best.scenario.data_parallel_size, best.scenario.enable_expert_parallel) == (1, 2, True)
    query = link_query_of(at)
    assert {k: query.get(k) for k in ("ep", "dp", "imbalance", "tp", "gpus")} == {
        "ep": "1",
        "dp": "2",
        "imbalance": "1.5",
        "tp": None,  # TP 1, the default
        "gpus": str(best.total_gpus),
    }
    export = fresh("views/export.py", query)  # the link opens the Export page with that layout, no error
    assert not export.error, [e.value for e in export.error]
    assert (export.session_state["ep"], export.session_state["dp"], export.session_state["imbalance"]) == (True, 2, 1.5)


def test_a_search_whose_every_candidate_the_core_refuses_says_why_per_row() -> None:
    at = fresh("views/simulate.py", {"model": QWEN_MOE, "tp": "2", "ep": "1"})
    at.multiselect(key="simulate_tps").set_value([1]).run()  # EP over one GPU: vLLM splits nothing
    assert not at.exception
    core = page_search(QWEN_MOE, Scenario(tp=2, enable_expert_parallel=True), tps=(1,))
    assert core.recommendation is None
    assert any(e.value.startswith("No candidate meets") for e in at.error)
    table = candidates(at)
    assert list(table["status"]) == ["invalid"]
    assert "--enable-expert-parallel on one GPU" in table["why"][0] == core.candidates[0].reason
    assert not at.get("link_button")


# ------------------------------------------------------------------------------ Simulate: P/D with the sidebar's layout

DRAFT = "meta-llama/Llama-3.2-1B"


def test_the_disaggregated_pools_take_the_sidebars_draft_model() -> None:
    query = {"spec": "draft", "draft": DRAFT, "pd": "1", "pd_d": "2", "pd_link": "nvlink"}
    at = fresh("views/simulate.py", query)
    assert not at.error, [e.value for e in at.error]
    sc = scenario_from({key: at.session_state[key] for key in SIDEBAR_KEYS})
    assert sc.speculative is not None and sc.speculative.draft_model == DRAFT
    layout = DisaggLayout(prefill_instances=1, decode_instances=2, kv_transfer_link="nvlink")
    model, hw = spec_of("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm")
    core = compare_layouts(model, hw, sc, page_workload(), layout, draft_model=spec_of(DRAFT))
    plain_pools = compare_layouts(model, hw, Scenario(), page_workload(), layout)
    table = next(d for d in at.dataframe if "layout" in d.value.columns).value
    dis = core.disaggregated
    assert list(table["TPOT P50"]) == [fmt_seconds(dis.tpot_seconds.p50), fmt_seconds(core.aggregated_tpot_seconds.p50)]
    assert dis.tpot_seconds.p50 < plain_pools.disaggregated.tpot_seconds.p50  # the decode pool speculates
    assert plain(core.verdict) in [m.value for m in at.markdown]
    assert "The decode pool and the aggregated replicas run the sidebar's speculative decoding (draft, k = 3" in said(
        at
    )


def test_the_disaggregated_pools_with_data_parallel_count_every_dp_engine() -> None:
    at = fresh("views/simulate.py", {"model": QWEN_MOE, "ep": "1", "dp": "2", "pd": "1"})
    assert not at.error, [e.value for e in at.error]
    sc = Scenario(enable_expert_parallel=True, data_parallel_size=2)
    core = compare_layouts(spec_of(QWEN_MOE), get_profile("h100-sxm"), sc, page_workload(), DisaggLayout())
    table = next(d for d in at.dataframe if "layout" in d.value.columns).value
    assert core.disaggregated.gpus == 4 and core.aggregated_replicas == 2  # (1 + 1) x DP 2; 4 / (TP 1 x DP 2)
    assert list(table["layout"]) == [
        f"disaggregated {core.disaggregated.layout.label}, 4 GPUs",
        "aggregated: 2 replica(s)",
    ]
    assert "Each instance of either pool is 2 DP engines of its TP" in said(at)
    assert any(s.value.startswith("Cheapest deployment") for s in at.subheader)
