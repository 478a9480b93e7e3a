"""The Streamlit app, page by page, with Streamlit's AppTest (no browser, no network).

Each test sets inputs the way a user would (widgets, or the URL's query parameters), runs the
app, and checks what the page shows against the planner core's own answer for the same inputs.
Bad inputs must show an ``st.error`` that says what to do, and never an exception.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from planner.estimate.latency import estimate_latency
from planner.estimate.memory import plan_memory
from planner.estimate.operating_points import latency_profile
from planner.estimate.roofline import roofline
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import LoRA, RequestShape, Scenario, SpeculativeDecoding
from planner.units import fmt_requests
from tests.conftest import TINY_LLAMA_CONFIG
from ui import charts
from ui.format import fmt_seconds
from ui.params import BY_KEY, PARAMS, sidebar_updates
from ui.state import TOKEN_KEY, UPLOAD_KEY, scenario_from

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
VIEWS = ROOT / "views"
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B"
TIMEOUT_S = 60


@pytest.fixture
def app() -> AppTest:
    """A fresh app (not run yet) with empty caches; every run goes through app.py's frame and st.navigation."""
    st.cache_data.clear()
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT_S)
    return at


def core(model: str = DEFAULT_MODEL, **scenario):
    """The core's own spec, card and scenario for the same inputs the test gives the app."""
    loaded = load_config(model)
    spec = build_spec(loaded.config, loaded.name)
    sc = Scenario(**scenario)  # max_model_len: the model's maximum, the app's default as vLLM's and the CLI's
    return spec, get_profile(sc.gpu), sc


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def texts(at: AppTest) -> str:
    """Everything the main area and the sidebar say, for "is it there / is it absent" checks."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [c.value for c in at.code]
    parts += [e.value for kind in (at.error, at.warning, at.success, at.info) for e in kind]
    parts += [m.value for m in at.metric] + [t.value for t in at.title]
    return "\n".join(str(p) for p in parts)


# ------------------------------------------------------------------------------ Plan


def test_plan_default_answers_llama_8b_on_one_h100(app: AppTest) -> None:
    app.run()
    assert_clean(app)
    spec, hw, sc = core()
    plan = plan_memory(spec, hw, sc)
    assert plan.fits
    assert [s.value for s in app.success] == [plan.reason]
    assert app.success[0].value.startswith("fits: ")
    # max_model_len: the model's maximum; concurrency rounded down, never more than fits
    assert f"{fmt_requests(plan.max_concurrency)} requests of 131,072 tokens" in app.success[0].value
    assert app.metric[0].label == "Max concurrency" and app.metric[0].value == fmt_requests(plan.max_concurrency)
    assert app.metric[1].value == f"{plan.kv_cache_tokens:,}"
    for suggestion in plan.suggestions:
        assert suggestion in app.markdown[0].value or any(suggestion in m.value for m in app.markdown)


def test_plan_shows_memory_terms_with_their_kind(app: AppTest) -> None:
    app.run()
    spec, hw, sc = core()
    plan = plan_memory(spec, hw, sc)
    terms = app.dataframe[0].value
    assert list(terms["term"]) == [t.name for t in plan.terms]
    assert list(terms["kind"]) == [t.kind for t in plan.terms]
    assert terms.set_index("term").loc["weights", "GiB"] == pytest.approx(plan.weight_bytes_per_gpu / 2**30)
    assert len(app.get("plotly_chart")) == 2  # the memory bar and concurrency vs context


def test_plan_kv_formula_has_this_models_numbers(app: AppTest) -> None:
    app.run()
    assert [c.value for c in app.code] == [
        "2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 2 B = 131,072 B/token"
    ]
    app.selectbox(key="kv").set_value("fp8").run()
    assert_clean(app)
    assert [c.value for c in app.code] == ["2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 1 B = 65,536 B/token"]
    spec, hw, sc = core(kv_cache_dtype="fp8")
    assert app.success[0].value == plan_memory(spec, hw, sc).reason


def test_plan_kv_formula_per_rank_with_tensor_parallel(app: AppTest) -> None:
    app.run()
    app.number_input(key="tp").set_value(4).run()
    assert_clean(app)
    assert app.code[0].value == "2 (K and V) x 32 layers x 2 KV heads x 128 head_dim x 2 B = 32,768 B/token"


def test_plan_that_does_not_fit_is_an_error_with_the_fix(app: AppTest) -> None:
    app.run()
    app.selectbox(key="model").set_value("meta-llama/Llama-3.1-70B")
    app.selectbox(key="gpu").set_value("l4").run()
    assert_clean(app)
    spec, hw, sc = core("meta-llama/Llama-3.1-70B", gpu="l4")
    plan = plan_memory(spec, hw, sc)
    assert not plan.fits
    assert app.error[0].value == plan.reason and plan.reason.startswith("does not start")
    assert not app.success
    for suggestion in plan.suggestions:
        assert any(suggestion in m.value for m in app.markdown)


def test_mixed_precision_shrinks_the_weights(app: AppTest) -> None:
    app.run()
    assert app.selectbox(key="lo").disabled  # the two precisions are live only in mixed precision
    app.toggle(key="mixed").set_value(True).run()
    assert_clean(app)
    for low in ("int4", "fp8"):
        app.selectbox(key="lo").set_value(low).run()
        assert_clean(app)
        spec, hw, sc = core(precision_overrides={"attention": "bf16", "lm_head": "bf16", "mlp": low, "experts": low})
        plan = plan_memory(spec, hw, sc)
        assert app.success[0].value == plan.reason
        assert app.metric[3].value == f"{plan.weight_bytes_per_gpu / 2**30:,.1f} GiB"
    assert app.query_params == {"mixed": "1", "lo": "fp8"}


# ------------------------------------------------------------------------------ bad input


def test_tp_not_dividing_the_heads_is_an_error_then_the_app_recovers(app: AppTest) -> None:
    app.run()
    app.number_input(key="tp").set_value(3).run()
    assert_clean(app)
    assert len(app.error) == 1
    assert "--tp 3 does not divide the 32 attention heads" in app.error[0].value
    assert "Use --tp 1 or 2 or 4 or 8" in app.error[0].value
    for page in ("views/roofline.py", "views/latency.py", "views/export.py"):
        app.switch_page(page).run()
        assert_clean(app)
        assert "--tp 3 does not divide" in app.error[0].value
    app.number_input(key="tp").set_value(2).run()
    assert_clean(app)
    assert not app.error and app.title[0].value == "Export"


def test_unknown_repo_id_is_an_error(app: AppTest, hub) -> None:
    hub.add_repo("acme/exists", {"config.json": TINY_LLAMA_CONFIG})
    app.run()
    app.text_input(key="repo").set_value("acme/does-not-exist").run()
    assert_clean(app)
    assert "no repo 'acme/does-not-exist' on the Hub" in app.error[0].value
    assert "Check the id" in app.error[0].value
    app.text_input(key="repo").set_value("acme/exists").run()
    assert_clean(app)
    assert not app.error
    assert "acme/exists" in app.caption[0].value


def test_gated_repo_needs_a_token_which_never_shows(app: AppTest, hub) -> None:
    token = "hf_test_secret_token_123"
    hub.add_repo("acme/gated-model", {"config.json": TINY_LLAMA_CONFIG}, gated_token=token)
    app.run()
    app.text_input(key="repo").set_value("acme/gated-model").run()
    assert_clean(app)
    assert "gated" in app.error[0].value and "token" in app.error[0].value
    app.text_input(key="hf_token").set_value(token).run()
    assert_clean(app)
    assert not app.error, [e.value for e in app.error]
    spec = build_spec(TINY_LLAMA_CONFIG, "acme/gated-model")
    plan = plan_memory(spec, get_profile("h100-sxm"), Scenario(max_model_len=2048))
    assert app.success[0].value == plan.reason  # the default: the model's maximum, 2,048
    assert token not in texts(app)
    assert token not in json.dumps(app.query_params)
    assert app.query_params.get("repo") == "acme/gated-model"


def test_max_model_len_beyond_the_model_is_an_error_with_the_limit(app: AppTest) -> None:
    app.run()
    app.selectbox(key="model").set_value("facebook/opt-125m").run()
    assert_clean(app)
    assert "of 2,048 tokens" in app.success[0].value  # the untouched default is the model's maximum
    assert "the model's maximum, **2,048 tokens**, as vLLM" in " ".join(c.value for c in app.sidebar.caption)
    app.number_input(key="len").set_value(4096).run()  # a length the user asks for is not silently cut
    assert_clean(app)
    assert "exceeds the model's maximum context of 2,048 tokens" in app.error[0].value
    assert "Use --max-model-len 2,048 or less" in app.error[0].value


@pytest.mark.parametrize(
    ("filename", "content", "expected"),
    [
        (
            "tokenizer_config.json",
            json.dumps({"tokenizer_class": "LlamaTokenizer"}).encode(),
            "not a Transformers config.json",
        ),
        ("config.json", b"{not json", "is not valid JSON"),
        ("config.json", b"[1, 2, 3]", "holds a JSON array"),
        ("config.json", json.dumps({"model_type": "llama"}).encode(), "lacks"),
    ],
    ids=["tokenizer-config", "broken-json", "json-array", "missing-keys"],
)
def test_upload_that_is_not_a_config_is_an_error(app: AppTest, filename: str, content: bytes, expected: str) -> None:
    app.run()
    app.file_uploader(key="upload").upload(filename, content, "application/json").run()
    assert_clean(app)
    assert expected in app.error[0].value, app.error[0].value
    app.file_uploader(key="upload").clear().run()  # removing the upload brings the catalog model back
    assert_clean(app)
    assert app.success[0].value.startswith("fits: ")


def test_uploaded_config_is_planned(app: AppTest) -> None:
    app.run()
    app.file_uploader(key="upload").upload(
        "config.json", json.dumps(TINY_LLAMA_CONFIG).encode(), "application/json"
    ).run()
    assert_clean(app)
    spec = build_spec(TINY_LLAMA_CONFIG, "config.json")
    plan = plan_memory(spec, get_profile("h100-sxm"), Scenario(max_model_len=2048))
    assert app.success[0].value == plan.reason
    assert app.code[0].value == "2 (K and V) x 4 layers x 2 KV heads x 32 head_dim x 2 B = 1,024 B/token"
    assert "upload" not in app.query_params


# ------------------------------------------------------------------------------ shared URL


def test_a_shared_link_reopens_the_exact_plan(app: AppTest) -> None:
    app.query_params.update({"gpu": "h200", "tp": "2", "len": "4096", "kv": "fp8", "util": "0.85", "in": "2048"})
    app.run()
    assert_clean(app)
    assert app.selectbox(key="gpu").value == "h200"
    assert app.number_input(key="tp").value == 2
    assert app.number_input(key="len").value == 4096
    assert app.selectbox(key="kv").value == "fp8"
    assert app.slider(key="util").value == pytest.approx(0.85)
    assert app.number_input(key="in").value == 2048
    spec, hw, sc = core(
        gpu="h200",
        tp=2,
        max_model_len=4096,
        kv_cache_dtype="fp8",
        gpu_memory_utilization=0.85,
        workload=RequestShape(input_len=2048),
    )
    assert app.success[0].value == plan_memory(spec, hw, sc).reason
    assert app.query_params == {"gpu": "h200", "tp": "2", "len": "4096", "kv": "fp8", "util": "0.85", "in": "2048"}


def test_changing_inputs_rewrites_the_link(app: AppTest) -> None:
    app.run()
    assert app.query_params == {}  # every input at its default: a clean URL
    app.selectbox(key="gpu").set_value("a100-80gb")
    app.slider(key="util").set_value(0.8)
    app.number_input(key="batch").set_value(16).run()
    assert_clean(app)
    assert app.query_params == {"gpu": "a100-80gb", "util": "0.8", "batch": "16"}
    app.selectbox(key="gpu").set_value("h100-sxm").run()  # back to the default: dropped from the URL
    assert app.query_params == {"util": "0.8", "batch": "16"}
    app.switch_page("views/roofline.py").run()  # the link survives a page switch
    assert app.query_params == {"util": "0.8", "batch": "16"}
    assert app.slider(key="util").value == pytest.approx(0.8)


def test_an_empty_max_model_len_is_the_default_and_leaves_the_link(app: AppTest) -> None:
    app.query_params["len"] = "auto"  # an older link's spelling of the model's maximum
    app.run()
    assert app.number_input(key="len").value is None
    spec, hw, _ = core()
    assert app.success[0].value == plan_memory(spec, hw, Scenario()).reason  # the model's 131,072 tokens
    assert app.query_params == {}  # the default: a clean URL
    app.number_input(key="len").set_value(8192).run()
    assert app.success[0].value == plan_memory(spec, hw, Scenario(max_model_len=8192)).reason
    assert app.query_params == {"len": "8192"}
    app.number_input(key="len").set_value(None).run()
    assert app.query_params == {}


def test_bad_link_parameters_are_dropped_with_a_warning(app: AppTest) -> None:
    app.query_params.update({"tp": "abc", "gpu": "tpu-v9", "util": "3", "model": "nobody/nothing", "kv": "fp8"})
    app.run()
    assert_clean(app)
    warned = " ".join(w.value for w in app.sidebar.warning)
    for key in ("tp=abc", "gpu=tpu-v9", "util=3", "model=nobody/nothing"):
        assert key in warned
    assert app.number_input(key="tp").value == 1 and app.selectbox(key="gpu").value == "h100-sxm"
    assert app.query_params == {"kv": "fp8"}
    assert app.success[0].value.startswith("fits: ")


# ------------------------------------------------------------------------------ Roofline


def test_roofline_page_lists_every_op_of_both_stages(app: AppTest) -> None:
    app.run()
    app.switch_page("views/roofline.py").run()
    assert_clean(app)
    spec, hw, sc = core()
    prefill = roofline(spec, hw, sc, "prefill", 1, 1024)
    decode = roofline(spec, hw, sc, "decode", 1, 1024 + 128)
    table = app.dataframe[0].value
    assert len(table) == len(prefill.layers) + len(decode.layers) > 20
    assert set(table["stage"]) == {"prefill", "decode"}
    assert set(table["bound"]) <= {"compute", "memory", "interconnect", "overhead"}
    shown = texts(app)
    assert prefill.verdict in shown and decode.verdict in shown
    assert "compute-bound" in prefill.verdict and "memory-bandwidth-bound" in decode.verdict
    assert [b.label for b in app.download_button] == ["Download the table (CSV)"]
    assert len(app.get("plotly_chart")) == 1


def test_roofline_bound_mode_is_labelled_bound(app: AppTest) -> None:
    app.run()
    app.switch_page("views/roofline.py").run()
    app.button_group(key="roofline_mode").set_value("bound").run()
    assert_clean(app)
    assert set(app.dataframe[0].value["kind"]) == {"bound"}
    assert ":gray-badge[bound]" in [m.value for m in app.markdown]  # the kind badge


# ------------------------------------------------------------------------------ Latency


def test_latency_page_shows_the_core_estimate_and_both_operating_points(app: AppTest) -> None:
    app.run()
    app.number_input(key="batch").set_value(8).run()
    app.switch_page("views/latency.py").run()
    assert_clean(app)
    spec, hw, sc = core(workload=RequestShape(batch_size=8))
    est = estimate_latency(spec, hw, sc)
    metrics = {(m.label, i): m.value for i, m in enumerate(app.metric)}
    assert metrics[("TTFT", 0)] == fmt_seconds(est.ttft_seconds)
    assert metrics[("TPOT", 1)] == fmt_seconds(est.tpot_seconds)
    shown = texts(app)
    online = latency_profile(spec, hw, sc).max_num_seqs  # the Export page's definition, shared
    assert f"latency-optimized** (online serving): batch {online:,} " in shown
    assert "throughput-optimized** (offline serving)" in shown
    assert not app.dataframe  # the tables behind the curves are drawn once their expander is open
    app.session_state["latency_numbers"] = True
    app.run()
    by_batch = app.dataframe[0].value
    assert set(by_batch["kind"]) == {"estimate", "bound"}
    assert list(by_batch[by_batch["kind"] == "estimate"]["batch"]) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert len(app.get("plotly_chart")) == 2


# ------------------------------------------------------------------------------ Compare


def test_compare_puts_four_scenarios_side_by_side_with_cost(app: AppTest) -> None:
    app.run()
    app.switch_page("views/compare.py").run()
    assert_clean(app)
    assert not app.error
    table = app.dataframe[-1].value
    assert list(table["scenario"]) == ["A", "B", "C", "D"]
    spec, hw, sc = core()
    est = estimate_latency(spec, hw, sc)
    a = table.iloc[0]
    assert a["tokens_per_s"] == pytest.approx(est.throughput_tokens_per_s)
    assert a["max_concurrency"] == pytest.approx(plan_memory(spec, hw, sc).max_concurrency)
    assert a["usd_per_million_tokens"] == pytest.approx(
        hw.price_per_hour_usd / 3600 / est.throughput_tokens_per_s * 1e6
    )
    b = table.iloc[1]  # Llama-3.1-70B on 4 x H100
    assert b["gpus"] == 4 and b["tokens_per_s_per_gpu"] == pytest.approx(b["tokens_per_s"] / 4)
    c = table.iloc[2]  # 70B in int4 on 2 x L40S: a quarter of the bf16 weights, about
    assert c["weights_gib_per_gpu"] < b["weights_gib_per_gpu"] * 4 / 2 / 3


def test_compare_row_that_cannot_be_planned_is_an_error_and_the_rest_stay(app: AppTest) -> None:
    app.run()
    app.number_input(key="tp").set_value(3).run()  # A is broken: the page says so and stops
    app.switch_page("views/compare.py").run()
    assert_clean(app)
    assert "--tp 3 does not divide" in app.error[0].value


# ------------------------------------------------------------------------------ Export


def test_export_offers_both_profiles_with_vllm_flags(app: AppTest) -> None:
    app.run()
    app.number_input(key="tp").set_value(2).run()
    app.switch_page("views/export.py").run()
    assert_clean(app)
    labels = [b.label for b in app.download_button]
    for profile in ("latency", "throughput"):
        for name in (
            f"vllm-{profile}.yaml",
            f"vllm-{profile}.sh",
            f"sglang-{profile}.sh",
            f"k8s-{profile}.yaml",
            f"bench-{profile}.sh",
        ):
            assert f"Download {name}" in labels
    assert "Download all files (zip)" in labels
    codes = {c.value.splitlines()[0]: c.value for c in app.code}
    yaml_text = codes["# vLLM serve config: vllm serve --config vllm-latency.yaml"]
    assert "tensor-parallel-size: 2" in yaml_text
    assert "model: meta-llama/Llama-3.1-8B" in yaml_text
    assert "max-model-len: 131072" in yaml_text  # the model's maximum, the default


def test_export_of_a_plan_across_nodes_is_a_leaderworkerset(app: AppTest) -> None:
    app.session_state["sidebar_parallelism"] = True  # the Parallelism expander, open (closed, it draws no input)
    app.run()
    app.selectbox(key="model").set_value("deepseek-ai/DeepSeek-V3")
    app.number_input(key="tp").set_value(8)
    app.number_input(key="pp").set_value(2).run()
    app.switch_page("views/export.py").run()
    assert_clean(app)
    manifests = [c.value for c in app.code if c.value.startswith("# Kubernetes manifest")]
    assert manifests and all("kind: LeaderWorkerSet" in m for m in manifests)
    assert "pipeline parallel across nodes" in app.caption[0].value


def test_the_hf_token_is_in_no_export(app: AppTest) -> None:
    token = "hf_never_in_a_file_456"
    app.run()
    app.text_input(key="hf_token").set_value(token).run()
    app.switch_page("views/export.py").run()
    assert_clean(app)
    assert token not in texts(app)
    assert "HF_TOKEN" in texts(app)
    assert token not in json.dumps(app.query_params)


# ------------------------------------------------------------------------------ the page contract (ui/__init__.py)


def routed_views() -> list[str]:
    """The file names in app.py's PAGES table, in navigation order (read from the source: app.py draws on import)."""
    tree = ast.parse(APP.read_text())
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PAGES" for t in node.targets)
    )
    return [name for name, _title, _icon in ast.literal_eval(table)]


def test_every_view_is_routed_and_none_lives_in_a_pages_folder() -> None:
    assert sorted(routed_views()) == sorted(p.name for p in VIEWS.glob("*.py"))
    assert len(routed_views()) == 8
    assert not (ROOT / "pages").exists()  # Streamlit's reserved folder name: it would run a page without the frame


@pytest.mark.parametrize("view", routed_views())
def test_every_page_draws_its_title_first_and_stops_on_bad_inputs(app: AppTest, view: str) -> None:
    """Title first, then ``current_inputs()``: with inputs that cannot be planned the page is its title and one
    error."""
    app.run()
    app.switch_page(f"views/{view}").run()
    assert_clean(app)
    main = list(app.main.children.values())
    assert main[0].type == "title" and len(app.title) == 1
    app.number_input(key="tp").set_value(3).run()
    assert_clean(app)
    assert [element.type for element in app.main.children.values()] == ["title", "error"]
    assert "--tp 3 does not divide the 32 attention heads" in app.error[0].value


def _session_state_keys(tree: ast.AST) -> list[str]:
    """String keys a module reads or writes in st.session_state: ['x'], .get('x'), .update(x=...), ..."""
    keys = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "session_state"
        ):
            if isinstance(node.slice, ast.Constant):
                keys.append(node.slice.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "session_state"
        ):
            keys += [a.value for a in node.args[:1] if isinstance(a, ast.Constant)]
            keys += [k.arg for k in node.keywords if k.arg]
    return keys


@pytest.mark.parametrize("view", routed_views())
def test_every_page_leaves_caching_charts_and_sidebar_keys_to_ui(view: str) -> None:
    """One caching style (ui.sweeps), figures from ui.charts, sidebar keys only through ui.params."""
    tree = ast.parse((VIEWS / view).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not {m for m in imported if m.split(".")[0] == "plotly"}, "figures belong in ui.charts"
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not attributes & {"cache_data", "cache_resource"}, "cached core calls belong in ui.sweeps"
    shared = set(BY_KEY) | {TOKEN_KEY, UPLOAD_KEY}
    assert not set(_session_state_keys(tree)) & shared, "set sidebar inputs with ui.params.apply_to_sidebar"


def test_no_figure_is_cached_across_sessions() -> None:
    """cache_resource would hand every session the same mutable figure; each call builds a new one."""
    for path in [*VIEWS.glob("*.py"), *(ROOT / "ui").glob("*.py")]:
        attributes = {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}
        assert "cache_resource" not in attributes, path.name
    spec, hw, sc = core()
    plan = plan_memory(spec, hw, sc)
    first, second = charts.memory_bar(plan), charts.memory_bar(plan)
    assert first is not second
    first.update_layout(title="changed by one session")
    assert second.layout.title.text is None


# ------------------------------------------------------------------------------ sidebar keys <-> Scenario fields

SIDEBAR_DEFAULTS = {p.key: p.default for p in PARAMS}
NOT_IN_THE_SIDEBAR = {
    "non_torch_memory_bytes",
    "cuda_graph_memory_bytes",
    "scheduling_policy",
}
"""Scenario fields only the CLI sets (measured overrides; --scheduling-policy, which orders
request classes of a --workload-file, and the app simulates one class). The parallelism fields (--num-nodes, expert
and data parallelism) are in the sidebar's Parallelism expander (tests/test_app_issue11.py)."""
WORKLOAD_NOT_IN_THE_SIDEBAR: set[str] = set()
"""Workload fields only the CLI sets: none since the sidebar took images per request and their size (issue 12)."""
LORA_NOT_IN_THE_SIDEBAR = {"max_cpu_loras", "lora_dtype", "adapter"}
"""LoRA fields only the CLI sets: the host cache (no GPU memory), the adapter dtype and an adapter_config.json."""


def test_the_sidebar_has_an_input_for_every_scenario_field_but_the_cli_only_ones() -> None:
    fields = {p.field for p in PARAMS if p.field}
    top = {f.split(".")[0] for f in fields}  # a nested model's field (workload.input_len) counts for its parent
    structured = {"precision_overrides"}  # the mixed-precision inputs
    assert set(Scenario.model_fields) - top - structured == NOT_IN_THE_SIDEBAR
    nested = {prefix: {f.removeprefix(prefix + ".") for f in fields if f.startswith(prefix + ".")} for prefix in top}
    assert nested["workload"] == set(RequestShape.model_fields) - WORKLOAD_NOT_IN_THE_SIDEBAR
    assert nested["speculative"] == set(SpeculativeDecoding.model_fields)
    assert nested["lora"] == set(LoRA.model_fields) - LORA_NOT_IN_THE_SIDEBAR


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(),
        Scenario(
            gpu="h200",
            num_gpus=8,
            tp=2,
            pp=2,
            weight_dtype="fp8",
            kv_cache_dtype="fp8",
            max_model_len=4096,
            gpu_memory_utilization=0.85,
            block_size=32,
            max_num_seqs=64,
            max_num_batched_tokens=4096,
            engine="eager",
            enable_chunked_prefill=False,
            workload=RequestShape(input_len=2048, output_len=256, batch_size=8),
        ),
        Scenario(precision_overrides={"attention": "fp8", "lm_head": "fp8", "mlp": "nvfp4", "experts": "nvfp4"}),
    ],
    ids=["defaults", "every-field", "mixed-precision"],
)
def test_sidebar_updates_invert_scenario_from(scenario: Scenario) -> None:
    values = {**SIDEBAR_DEFAULTS, **sidebar_updates(scenario.model_dump())}
    assert scenario_from(values) == scenario


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"kv_cache_dtype": "fp8", "tp": 4, "num_gpus": None}, {"kv": "fp8", "tp": 4, "gpus": None}),
        ({"precision_overrides": {}}, {"mixed": False}),
        ({"precision_overrides": {"mlp": "int4"}}, {}),  # not a split the sidebar can show: left alone
        ({"workload": {"batch_size": 16}}, {"batch": 16}),
        ({"scheduling_policy": "priority"}, {}),  # a field without a sidebar input
        ({"engine_version": "sglang@0.5.5"}, {"ev": "sglang@0.5.5"}),
        ({"gpu_memory_utilization": None}, {"util": 0.92}),  # the engine's default: the slider shows vLLM's
    ],
    ids=["fields", "no-overrides", "unshowable-overrides", "workload", "cli-only", "engine-version", "engine-default"],
)
def test_sidebar_updates_table(changes: dict, expected: dict) -> None:
    assert sidebar_updates(changes) == expected
