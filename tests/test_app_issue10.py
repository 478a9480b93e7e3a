"""Issue 10, the app side: what a user sees on each page (AppTest, no browser, no network).

Overload said out loud on Simulate, one P99 TTFT per fact (or labelled), a price for every card and
cost ranking that says when one is missing, Validate asking before it writes a calibration, one
concurrency figure rounded down everywhere, a shortfall instead of a negative memory figure,
tables without 'None', FLOP counts as the CLI prints them, milliseconds on seconds axes, batches
that exceed the KV cache marked, and Diagnose errors that name what to do on the page.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from planner.estimate.memory import plan_memory
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.workload import FixedLength, PoissonArrivals, Workload
from planner.verify.mismatch import card_mismatch, model_key, model_mismatch, weights_mismatch
from tests import app_test
from ui import charts
from ui.derived import (
    CANDIDATE_FORMATS,
    LATENCY_FORMATS,
    ROOFLINE_FORMATS,
    fmt_requests,
    readable,
    roofline_table,
)
from ui.errors import TOGGLE, note_on_page, on_page
from ui.format import fmt_kv_cache, fmt_usd
from ui.prices import PRICES_KEY

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "data" / "logs"
BENCH = ROOT / "tests" / "data" / "bench"
TIMEOUT_S = 240
GiB = 2**30


def spec_of(name: str):
    loaded = load_config(name)
    return build_spec(loaded.config, loaded.name)


def fresh(page: str | None = None, query: dict[str, str] | None = None) -> AppTest:
    return app_test.fresh(page, query, timeout_s=TIMEOUT_S)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def shown(styler) -> str:
    """What a styled table shows in its cells (the display strings, not the values)."""
    return styler.to_string()


# ------------------------------------------------------------------------------ point 3: overload on Simulate


@pytest.fixture(scope="module")
def overloaded() -> AppTest:
    """Simulate at 60 req/s on the default 8B / H100 replica, whose knee is about 24 req/s."""
    at = fresh("views/simulate.py")
    at.number_input(key="simulate_rate").set_value(60.0).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_above_the_knee_a_warning_names_the_knee_and_what_carries_the_load(overloaded):
    at = overloaded
    sc = Scenario(max_model_len=8192)
    workload = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=60.0),
        num_requests=1000,
        input_tokens=FixedLength(tokens=1024),
        output_tokens=FixedLength(tokens=256),
    )
    result = simulate_scenario(spec_of("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm"), sc, workload)
    assert result.overloaded and result.saturation_requests_per_s < 60
    banner = next(w.value for w in at.warning if w.value.startswith("Overloaded:"))
    assert f"this replica sustains about {result.saturation_requests_per_s:,.1f} req/s" in banner
    assert "replicas" in banner and "tensor-parallel" in banner and "fp8" in banner
    labels = [b.label for b in at.button]
    assert "Try TP 2" in labels and "Try an fp8 KV cache" in labels
    assert any("the queue never drains" in c.value for c in at.caption)


def test_the_try_buttons_set_the_sidebar(overloaded):
    at = overloaded
    at.button(key="simulate_try_kv_cache_dtype").click().run()
    assert not at.exception
    assert at.session_state["kv"] == "fp8"
    at.selectbox(key="kv").set_value("auto").run()


def test_below_the_knee_there_is_no_overload_warning():
    at = fresh("views/simulate.py")
    assert not any(w.value.startswith("Overloaded:") for w in at.warning)


def test_two_ttfts_for_one_deployment_are_labelled_with_why_they_differ(overloaded):
    at = fresh("views/simulate.py")
    labels = list(metrics(at))
    assert "P99 TTFT" in labels  # the one-replica run of the requests simulated
    search = [label for label in labels if "TTFT" in label and label != "P99 TTFT"]
    assert search and all("steady state" in label for label in search)
    note = next(c.value for c in at.caption if c.value.startswith("Search figure:"))
    assert (
        "1,000 simulated requests from an empty server" in note
        and " req/s per replica, " in note
        and "differ even for the same deployment" in note
    )


# ------------------------------------------------------------------------------ point 2: prices


def test_simulate_names_an_unpriced_card_and_ranks_by_cost_once_it_is_priced():
    at = fresh("views/simulate.py", {"len": "8192"})
    at.multiselect(key="simulate_gpus").set_value(["h100-sxm", "h20"])
    at.multiselect(key="simulate_tps").set_value([1])
    at.run()
    assert not at.exception
    warning = next(w.value for w in at.warning if "No price for" in w.value)
    assert "h20" in warning and "Prices" in warning and "--price-per-gpu-hour" not in warning
    assert not any("--price-per-gpu-hour" in c.value for c in at.caption)  # the CLI's words stay in the CLI
    assert any("Ranked by cost ($/hour)" in c.value for c in at.caption)
    at.number_input(key="simulate_price_h20").set_value(0.5).run()
    assert not at.exception
    assert at.session_state[PRICES_KEY] == {"h20": 0.5}
    assert not any("No price for" in w.value for w in at.warning)
    table = next(d.value for d in at.dataframe if "replica" in d.value.columns)
    h20 = table[table["replica"].str.startswith("h20")]
    priced = h20[h20["status"] == "meets"]
    assert len(priced) == 1  # the H20 meets the targets, costed at the typed price ...
    row = priced.iloc[0]
    gpus = float(row["GPUs"])
    # A column with an unknown cell is text ('—'); one without keeps numbers and shows them through the same format.
    shown = row["$/hour"] if isinstance(row["$/hour"], str) else CANDIDATE_FORMATS["$/hour"](row["$/hour"])
    assert shown == f"${0.5 * gpus:,.2f}"
    assert table.iloc[0]["replica"].startswith("h20")  # ... and, cheaper per hour than the H100 now, it ranks first
    assert any(m.value.startswith("**") and "of h20 TP1" in m.value for m in at.markdown)


def test_no_price_at_all_says_it_ranks_by_gpu_count():
    at = fresh("views/simulate.py")
    at.multiselect(key="simulate_gpus").set_value(["h20"])
    at.multiselect(key="simulate_tps").set_value([1])
    at.run()
    assert not at.exception
    assert any("ranks by GPU count, not cost" in w.value for w in at.warning)


def test_compare_shows_each_cards_price_and_source_and_a_typed_price_costs_the_tokens():
    at = fresh("views/compare.py")
    hw = get_profile("h100-sxm")
    prices = [m.value for m in at.metric if m.label == "$/GPU-hour"]
    assert len(prices) == 4 and prices[0] == fmt_usd(hw.price_per_hour_usd)
    assert any(c.value.startswith("Price: Lambda on-demand 1x H100 SXM") for c in at.caption)
    at.number_input(key="compare_price_h100-sxm").set_value(2.0).run()
    assert not at.exception
    table = at.dataframe[-1].value
    a = table.iloc[0]
    assert a["usd_per_gpu_hour"] == 2.0 and a["price_source"] == "set by the user"
    assert a["usd_per_million_tokens"] == pytest.approx(2.0 / 3600 / a["tokens_per_s"] * 1e6)
    # the same price reaches Simulate's search: one dict per session
    assert at.session_state[PRICES_KEY] == {"h100-sxm": 2.0}


# ------------------------------------------------------------------------------ point 8: Validate asks first


def test_validate_has_no_write_switch_that_defaults_to_on(monkeypatch, tmp_path):
    """The run is a dry run; writing is a button shown only after a fit that may be written."""
    import ui.validate
    from ui.validate import GpuScan

    monkeypatch.setenv("PLANNER_CALIBRATION_DIR", str(tmp_path / "cal"))
    monkeypatch.setattr(ui.validate, "scan_gpus", lambda: GpuScan((), "NVML", "NVML lists no device"))
    at = fresh("views/validate.py")
    assert not [t for t in at.toggle if t.key == "validate_write"]
    assert not [b for b in at.button if b.key == "validate_write"]  # nothing fitted yet, nothing to write


def test_a_refused_calibration_says_so_and_offers_no_write(monkeypatch, tmp_path):
    import ui.validate
    from planner.bench.report import ValidationReport
    from ui.validate import GpuScan

    monkeypatch.setenv("PLANNER_CALIBRATION_DIR", str(tmp_path / "cal"))
    monkeypatch.setattr(ui.validate, "scan_gpus", lambda: GpuScan((), "NVML", "NVML lists no device"))
    at = fresh("views/validate.py")
    at.selectbox(key="model").set_value("openai-community/gpt2")
    at.radio(key="validate_device").set_value("cpu").run()
    at.button(key="validate_start").click().run()
    assert not at.exception
    report = ValidationReport.model_validate_json(at.session_state["validate_report_json"])
    assert report.calibration.status in ("fitted", "refused")
    assert not list((tmp_path / "cal").glob("*.yaml")) if (tmp_path / "cal").exists() else True
    refused = report.calibration.model_copy(
        update={
            "status": "refused",
            "reason": "the fit leaves 'gemm 4096' 7.0x further off than before.",
            "target_file": None,
            "previous_file": None,
        }
    )
    at.session_state["validate_report_json"] = report.model_copy(update={"calibration": refused}).model_dump_json()
    at.run()
    assert not at.exception
    assert any(w.value.startswith("Calibration refused, nothing can be written: the fit leaves") for w in at.warning)
    assert not [b for b in at.button if b.key == "validate_write"]


def test_a_bound_hit_is_shown_with_both_values():
    from planner.bench.report import BoundHit
    from ui.validate import bound_hit_text

    hit = BoundHit(
        factor="step_overhead_seconds",
        fitted=1.7,
        clipped_to=0.05,
        side="high",
        unit="seconds",
        reason="a GPU's eager step overhead is milliseconds; seconds say the host was measured.",
    )
    text = bound_hit_text(hit)
    assert "**step_overhead_seconds**" in text and "1.7 seconds" in text and "clipped to 0.05" in text


# ------------------------------------------------------------------------------ points 4 and 5: numbers and charts


def test_one_concurrency_figure_rounded_down_everywhere():
    assert fmt_requests(3.947) == "3.9" and fmt_requests(3.96) == "3.9" and fmt_requests(4.0) == "4.0"
    assert fmt_requests(None) == "—"
    at = fresh(query={"gpu": "l4", "len": "8192"})
    plan = plan_memory(spec_of("meta-llama/Llama-3.1-8B"), get_profile("l4"), Scenario(gpu="l4", max_model_len=8192))
    assert metrics(at)["Max concurrency"] == fmt_requests(plan.max_concurrency) == "3.9"
    assert "fits: 3.9 requests" in at.success[0].value
    compare = fresh("views/compare.py")
    d = [s.value for s in compare.success if s.value.startswith("starts:")][-1]  # D: the 8B on one L4
    assert d == "starts: 3.9 requests at once"


def test_a_model_that_does_not_fit_shows_its_shortfall_and_the_bar_shows_the_overflow():
    at = fresh(query={"model": "meta-llama/Llama-3.1-70B"})
    assert at.error and at.error[0].value.startswith("does not start")
    kv = next(m for m in at.metric if m.label == "KV cache per GPU")
    assert kv.value == "none" and kv.delta.startswith("short by ") and kv.delta.endswith(" GiB") and "-" not in kv.delta
    plan = plan_memory(spec_of("meta-llama/Llama-3.1-70B"), get_profile("h100-sxm"), Scenario(max_model_len=8192))
    assert kv.delta == fmt_kv_cache(plan.kv_cache_bytes_per_gpu) == "short by 62.3 GiB"
    assert not any(m.value.startswith("-") for m in at.metric)
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    used = sum(t.bytes for t in plan.terms if t.name != "free") / GiB
    assert fig["layout"]["xaxis"]["range"][1] >= used  # the bar is not cut at the card's size
    overflow = [s for s in fig["layout"]["shapes"] if s.get("type") == "rect"]
    assert overflow and overflow[0]["x1"] == pytest.approx(used)
    assert any("over the budget by" in a["text"] for a in fig["layout"]["annotations"])


def test_tables_show_no_none_and_flops_as_the_cli_prints_them():
    table = pd.DataFrame({"ttft_s": [0.1694, None], "fits_in_kv_cache": [True, None], "kind": ["estimate", None]})
    text = shown(readable(table, LATENCY_FORMATS))
    assert "None" not in text and "nan" not in text and "—" in text and "169.40 ms" in text
    from planner.estimate.roofline import roofline

    spec, hw = spec_of("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm")
    sc = Scenario(max_model_len=8192)
    stages = (roofline(spec, hw, sc, "prefill", 1, 1024), roofline(spec, hw, sc, "decode", 1, 1152))
    text = shown(readable(roofline_table(stages), ROOFLINE_FORMATS))
    assert "FLOP" in text and "e+" not in text and "None" not in text


def test_compare_table_has_friendly_headers():
    at = fresh("views/compare.py")
    frame = at.dataframe[-1]
    config = json.loads(frame.proto.columns)
    assert config["ttft_s"]["label"] == "TTFT" and config["usd_per_gpu_hour"]["label"] == "$/GPU-hour"


def test_seconds_axes_are_in_ms_and_batches_past_the_kv_cache_are_marked():
    at = fresh("views/latency.py", {"gpu": "l4"})
    batch = json.loads(at.get("plotly_chart")[0].proto.spec)  # the "vs batch size" tab comes first
    titles = [a["text"] for a in batch["layout"]["annotations"]]
    assert "TTFT (ms)" in titles and "TPOT (ms)" in titles
    exceeds = [t for t in batch["data"] if t.get("name", "").startswith("exceeds the KV cache")]
    assert exceeds and all(t["marker"]["color"] == charts.EXCEEDS_COLOR for t in exceeds)
    assert "dtick" not in batch["layout"]["yaxis2"]  # a panel inside one decade keeps its ticks
    sim = fresh("views/simulate.py")
    ttft = json.loads(sim.get("plotly_chart")[0].proto.spec)  # the timeline's tab is closed: TTFT vs rate first
    assert ttft["layout"]["yaxis"]["title"]["text"] == "milliseconds"
    assert ttft["layout"]["yaxis"]["tickformat"] == ",~g"


def test_export_says_does_not_start_once():
    at = fresh("views/export.py", {"gpu": "l4", "len": "131072"})  # one 131k-token request does not fit an L4
    errors = [e.value for e in at.error]
    assert len(errors) == 2 and all(
        e.startswith("This profile does not start: one 131,072-token request") for e in errors
    )
    assert not any("does not start: does not start" in e for e in errors)


# ------------------------------------------------------------------------------ point 1: Diagnose


def test_mismatch_checks():
    assert model_key("meta-llama/Llama-3.1-8B-Instruct") == model_key("/models/llama-3.1-8b") == "llama318b"
    assert model_mismatch("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B") is None
    found = model_mismatch("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "meta-llama/Llama-3.1-8B")
    assert found is not None and "Llama-3.3-70B" in found.message and "Llama-3.1-8B" in found.message
    assert model_mismatch(None, "meta-llama/Llama-3.1-8B") is None
    assert weights_mismatch(17 * GiB, 3.7 * GiB).kind == "weights"
    assert weights_mismatch(15.0 * GiB, 14.96 * GiB) is None
    assert card_mismatch(23.6 * GiB, get_profile("h100-sxm").memory_bytes, "H100").kind == "card"


def diagnose_with_log(name: str, toggle: bool, drop=()) -> AppTest:
    at = fresh("views/diagnose.py")
    log = "\n".join(line for line in (LOGS / name).read_text().splitlines() if not any(d in line for d in drop))
    at.text_area(key="diagnose_log_text").set_value(log)
    if toggle:
        at.toggle(key="diagnose_log_sidebar").set_value(True)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_log_without_the_model_names_the_toggle_not_the_cli():
    at = diagnose_with_log(
        "v1_tp4_ansi_llama33_70b_fp8.log", False, drop=("model=", "non-default", "vllm serve", "Llama")
    )
    error = at.error[0].value
    assert TOGGLE in error and "Pass MODEL" not in error and "--" not in error


def test_a_70b_log_against_the_sidebars_8b_is_flagged_before_the_table():
    at = diagnose_with_log("v1_tp4_ansi_llama33_70b_fp8.log", True)
    warnings = [w.value for w in at.warning]
    assert any(
        w.startswith("**Not the same model.**") and "Llama-3.3-70B" in w and "Llama-3.1-8B" in w for w in warnings
    )
    assert any(w.startswith("**Not the same weights.**") for w in warnings)
    assert not any("--weight-dtype" in m.value for m in at.markdown)  # said in the page's words
    assert any("sidebar's **Weights**" in m.value for m in at.markdown)


def test_a_matching_log_raises_no_mismatch_and_a_sibling_model_is_named():
    at = diagnose_with_log("v0_pr10511_profiling_table.log", True)  # Meta-Llama-3-8B's log, the sidebar's Llama-3.1-8B
    warnings = [w.value for w in at.warning if w.value.startswith("**Not the same")]
    assert len(warnings) == 1 and warnings[0].startswith("**Not the same model.**")  # same weights, same card
    at.selectbox(key="model").set_value("meta-llama/Meta-Llama-3-8B").run()
    assert not at.exception
    assert not any(w.value.startswith("**Not the same") for w in at.warning)


def test_page_words_replace_the_cli_hint():
    from planner.errors import ScenarioError

    err = ScenarioError("the log does not name the model.", hint="Pass MODEL: a catalog name.")
    assert on_page(err).endswith("(a catalog model, a Hub repo id, or an uploaded config.json).") and TOGGLE in on_page(
        err
    )
    assert "--weight-dtype" not in note_on_page("planned unquantized (pass --weight-dtype)")


def test_a_bench_file_of_another_model_is_flagged():
    at = fresh("views/diagnose.py")
    at.text_area(key="diagnose_bench_text").set_value((BENCH / "vllm_bench_serve_detailed.json").read_text()).run()
    assert not at.exception
    assert any(w.value.startswith("**Not the same model.**") and "Qwen/Qwen3-8B" in w.value for w in at.warning)


# ------------------------------------------------------------------------------ point 7: Simulate's inputs in the URL


def test_simulate_traffic_and_targets_round_trip_through_the_url():
    at = fresh("views/simulate.py")
    at.number_input(key="simulate_rate").set_value(60.0)
    at.number_input(key="simulate_ttft").set_value(0.5)
    at.checkbox(key="simulate_e2e_on").check()
    at.segmented_control(key="simulate_stat").set_value("p90")
    at.run()
    assert not at.exception
    query = {key: at.query_params[key] for key in at.query_params}
    assert {k: query[k] for k in ("rate", "ttft", "e2e_on", "stat")} == {
        "rate": "60",
        "ttft": "0.5",
        "e2e_on": "1",
        "stat": "p90",
    }
    assert "tpot" not in query and "requests" not in query  # defaults stay out of the link
    link = {k: v for k, v in query.items()}
    again = fresh("views/simulate.py", link)  # the shared link opens the same page
    assert again.number_input(key="simulate_rate").value == 60.0
    assert again.number_input(key="simulate_ttft").value == 0.5
    assert again.checkbox(key="simulate_e2e_on").value is True
    assert again.segmented_control(key="simulate_stat").value == "p90"
    assert any(w.value.startswith("Overloaded: 60.0 req/s") for w in again.warning)


def test_a_bad_simulate_link_value_is_dropped_with_a_warning():
    at = fresh("views/simulate.py", {"rate": "-3", "dist": "zipf"})
    warnings = [w.value for w in at.warning if w.value.startswith("Ignored")]
    assert len(warnings) == 2 and any("rate=-3" in w for w in warnings) and any("dist=zipf" in w for w in warnings)
    assert at.number_input(key="simulate_rate").value == 10.0


# ------------------------------------------------------------------------------ point 6: the default, stated


def test_the_app_and_the_cli_share_vllms_max_model_len_default_and_the_page_says_it():
    from planner.cli import build_parser
    from planner.commands.common import scenario_from_args

    cli = scenario_from_args(build_parser().parse_args(["plan", "meta-llama/Llama-3.1-8B"]))
    at = fresh()
    assert at.number_input(key="len").value is None and cli.max_model_len is None  # one default: the model's maximum
    plan = plan_memory(spec_of("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm"), cli)
    assert at.success[0].value == plan.reason and "131,072 tokens" in plan.reason
    note = "Empty: the model's maximum, **131,072 tokens**, as vLLM and `python -m planner` default."
    assert any(c.value.startswith(note) for c in at.sidebar.caption)
    assert any("max_model_len 131,072 (the model's maximum, vLLM's default)" in c.value for c in at.caption)
    at.number_input(key="len").set_value(8192).run()  # a typed length is planned with, and said to be the user's
    assert not at.exception and "8,192 tokens" in at.success[0].value
    assert any("max_model_len 8,192 (set in the sidebar)" in c.value for c in at.caption)
    assert any("clear the field" in c.value and "131,072" in c.value for c in at.sidebar.caption)


# ---------------------------------------------------------------------- point 7: Compare's rows in the URL, any model

from tests.conftest import TINY_LLAMA_CONFIG  # noqa: E402 (the section's own fixture data)
from ui.params import ROWS_QUERY, dump_rows, parse_rows  # noqa: E402
from ui.state import COMPARE_COLUMNS  # noqa: E402

LINK_ROWS = "meta-llama/Llama-3.1-70B,h200,2,1,fp8,fp8,8192;Qwen/Qwen3-8B,l4,1,1,auto,auto,auto"


def compare_table(at: AppTest) -> pd.DataFrame:
    return at.dataframe[-1].value


def test_the_default_compare_table_keeps_rows_out_of_the_link():
    at = fresh("views/compare.py")
    assert ROWS_QUERY not in at.query_params
    assert list(compare_table(at)["scenario"]) == ["A", "B", "C", "D"]


def test_compare_rows_round_trip_through_the_url():
    at = fresh("views/compare.py", {ROWS_QUERY: LINK_ROWS})
    table = compare_table(at)
    assert list(table["scenario"]) == ["A", "B", "C"]
    b, c = table.iloc[1], table.iloc[2]
    assert (b["model"], b["gpu"], b["tp"], b["weights"], b["kv_cache_dtype"], b["max_model_len"]) == (
        "meta-llama/Llama-3.1-70B",
        get_profile("h200").name,
        2,
        "fp8",
        "fp8",
        8192,
    )
    assert c["model"] == "Qwen/Qwen3-8B"
    assert c["max_model_len"] == spec_of("Qwen/Qwen3-8B").max_position_embeddings  # 'auto': the model's maximum
    assert at.query_params[ROWS_QUERY] == LINK_ROWS  # the page writes back the link it was opened with
    again = fresh("views/compare.py", {ROWS_QUERY: at.query_params[ROWS_QUERY]})
    pd.testing.assert_frame_equal(compare_table(again), table)


def test_the_compare_codec_inverts_itself_and_leaves_incomplete_rows_out():
    rows, warnings = parse_rows(LINK_ROWS, COMPARE_COLUMNS)
    assert not warnings and rows[1]["len"] is None and rows[0]["tp"] == 2
    assert dump_rows(rows, COMPARE_COLUMNS) == LINK_ROWS
    half = {"model": "acme/x", "gpu": None, "tp": 1, "pp": 1, "weights": "auto", "kv": "auto", "len": None}
    floats = {**rows[0], "tp": 2.0, "len": float("nan")}  # what st.data_editor hands back for number cells
    assert dump_rows([half, floats], COMPARE_COLUMNS) == "meta-llama/Llama-3.1-70B,h200,2,1,fp8,fp8,auto"
    assert dump_rows([], COMPARE_COLUMNS) == "none" and parse_rows("none", COMPARE_COLUMNS) == ([], [])


def test_a_bad_compare_link_row_is_dropped_with_a_warning_and_the_rest_stay():
    bad = "acme/x,zz,1,1,auto,auto,auto;../etc/passwd,l4,1,1,auto,auto,auto;acme/y,l4,0,1,auto,auto,auto;a,b"
    at = fresh("views/compare.py", {ROWS_QUERY: f"{bad};{LINK_ROWS}"})
    warnings = [w.value for w in at.warning if w.value.startswith("Ignored row")]
    assert len(warnings) == 4
    assert "gpu 'zz' must be one of" in warnings[0] and "looks like a file path" in warnings[1]
    assert "tp '0' must be between 1 and 1,024" in warnings[2] and "a row has 7 cells" in warnings[3]
    assert list(compare_table(at)["scenario"]) == ["A", "B", "C"]
    assert at.query_params[ROWS_QUERY] == LINK_ROWS  # the bad rows leave the link


def test_a_compare_row_takes_a_hub_id_through_the_sidebars_loader(hub):
    hub.add_repo("acme/tiny-compare", {"config.json": TINY_LLAMA_CONFIG})
    link = "acme/tiny-compare,l4,1,1,auto,auto,auto;acme/not-there,l4,1,1,auto,auto,auto"
    at = fresh("views/compare.py", {ROWS_QUERY: link})
    b = compare_table(at).iloc[1]
    plan = plan_memory(
        build_spec(TINY_LLAMA_CONFIG, "acme/tiny-compare"), get_profile("l4"), Scenario(gpu="l4", max_model_len=None)
    )
    assert b["model"] == "acme/tiny-compare" and b["max_model_len"] == 2048
    assert b["max_concurrency"] == pytest.approx(plan.max_concurrency)
    assert hub.count("GET", "acme/tiny-compare/resolve") >= 1
    error = next(e.value for e in at.error if e.value.startswith("Scenario C:"))
    assert "no repo 'acme/not-there' on the Hub" in error
    assert at.query_params[ROWS_QUERY] == link  # a row that cannot be planned still travels: the link is the table


def test_a_compare_row_takes_an_uploaded_config_by_its_file_name():
    link = "config.json,a10g,1,1,auto,auto,auto;config-2.json,l4,1,1,int4,auto,1024"
    at = fresh("views/compare.py", {ROWS_QUERY: link})
    errors = [e.value for e in at.error if e.value.startswith("Scenario")]
    assert len(errors) == 2 and all(
        "is uploaded on this page" in e and "config.json files for the table" in e for e in errors
    )
    other = {**TINY_LLAMA_CONFIG, "num_hidden_layers": 8}
    at.file_uploader(key="compare_uploads").set_value(
        [
            ("config.json", json.dumps(TINY_LLAMA_CONFIG).encode(), "application/json"),
            ("config.json", json.dumps(other).encode(), "application/json"),  # every model's file has that name
        ]
    ).run()
    assert not at.exception and not [e for e in at.error if e.value.startswith("Scenario")]
    assert any(c.value == "In the model column: `config.json`, `config-2.json`" for c in at.caption)
    table = compare_table(at)
    b, c = table.iloc[1], table.iloc[2]
    assert b["model"] == "config.json" and b["gpu"] == get_profile("a10g").name and b["max_model_len"] == 2048
    assert c["max_model_len"] == 1024 and c["weights"] == "int4"
    assert c["weights_gib_per_gpu"] < b["weights_gib_per_gpu"]  # int4 weights of twice the layers: still smaller
    assert at.query_params[ROWS_QUERY] == link  # uploads travel by name only


def test_compare_rows_outlive_a_visit_to_another_page():
    at = fresh("views/compare.py", {ROWS_QUERY: LINK_ROWS})
    at.switch_page("views/plan.py").run()
    at.switch_page("views/compare.py").run()
    assert not at.exception
    assert list(compare_table(at)["model"])[1:] == ["meta-llama/Llama-3.1-70B", "Qwen/Qwen3-8B"]


# ------------------------------------------------------------------------------ point 7: Plan's downloads


@pytest.fixture
def downloads(monkeypatch) -> dict[str, tuple[bytes, str]]:
    """What each download button of a run would send: file name -> (bytes, mime type)."""
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    seen: dict[str, tuple[bytes, str]] = {}
    original = MemoryMediaFileStorage.load_and_get_id

    def record(self, path_or_data, mimetype, kind, filename=None):
        if filename is not None:
            seen[filename] = (path_or_data if isinstance(path_or_data, bytes) else str(path_or_data).encode(), mimetype)
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", record)
    return seen


def test_plan_downloads_the_plan_as_json_and_its_terms_as_csv(downloads):
    import io

    at = fresh(query={"gpu": "l4", "len": "8192"})
    assert [b.label for b in at.download_button] == ["Download the plan (JSON)", "Download the terms (CSV)"]
    sc = Scenario(gpu="l4", max_model_len=8192)
    plan = plan_memory(spec_of("meta-llama/Llama-3.1-8B"), get_profile("l4"), sc)
    data, mime = downloads["plan.json"]
    document = json.loads(data)
    assert mime == "application/json" and document["model"] == "meta-llama/Llama-3.1-8B" and document["gpu_id"] == "l4"
    assert document["max_concurrency"] == plan.max_concurrency and document["reason"] == plan.reason
    assert Scenario.model_validate(document["scenario"]) == sc  # the plan can be replayed from its own file
    from planner.estimate.memory import MemoryPlan

    cli_keys = set(plan.model_dump(mode="json"))  # what the CLI writes: optional keys (LoRA) only when set
    assert cli_keys <= set(MemoryPlan.model_fields)
    assert set(document) == {"model", "gpu_id", "scenario", "placement", *cli_keys}  # the CLI's keys but 'kinds'
    assert [t["name"] for t in document["terms"]] == [t.name for t in plan.terms]
    data, mime = downloads["plan-terms.csv"]
    terms = pd.read_csv(io.BytesIO(data))
    assert mime.startswith("text/csv") and list(terms["term"]) == [t.name for t in plan.terms]
    assert list(terms["bytes"]) == [t.bytes for t in plan.terms] and set(terms["kind"]) <= {"exact", "estimate"}


# ------------------------------------------------------------------------- point 4: picker, Plan chart, Roofline table

PICKER_CHARS = 26
"""Characters the sidebar's GPU box shows whole at its default width ('NVIDIA H100 SXM5 80GB (79.2 Gi' was cut at
30)."""
MAIN_BLOCK_PX = 940
"""Width of the main block at a 1,400-px window (the README's screenshots), measured in headless Chromium: the
Roofline table's container (980 px at 1,440)."""


def test_the_gpu_picker_labels_fit_and_the_full_name_is_under_it():
    at = fresh()
    picker = at.selectbox(key="gpu")
    assert picker.options and all(len(label) <= PICKER_CHARS for label in picker.options), picker.options
    assert "h100-sxm · 79.2 GiB" in picker.options
    for gpu in ("h100-sxm", "rtx-pro-6000"):  # the longest name of all
        picker.set_value(gpu).run()
        assert not at.exception
        name = get_profile(gpu).name
        assert any(c.value.startswith(f"{name} · ") and c.value.endswith(" TB/s") for c in at.sidebar.caption), name


def test_the_plan_charts_labels_sit_on_their_lines():
    at = fresh(query={"len": "8192"})
    fig = json.loads(at.get("plotly_chart")[1].proto.spec)  # the concurrency-vs-context chart
    assert fig["layout"]["yaxis"]["type"] == "log" and fig["layout"]["xaxis"]["type"] == "log"
    notes = {a["text"]: a for a in fig["layout"]["annotations"]}
    one = notes["1 request: below it vLLM does not start"]
    assert one["yref"] == "y" and one["y"] == 0  # log10(1): on the line (it was drawn at 10, a decade above)
    here = notes["this plan: 8,192"]
    assert here["xref"] == "x" and here["x"] == pytest.approx(np.log10(8192))


@pytest.mark.parametrize("engine,name", [("sglang@0.5.4", "SGLang"), ("trtllm@1.2.0", "TensorRT-LLM")])
def test_the_one_request_line_names_the_engine_of_the_plan(engine, name):
    at = fresh(query={"len": "8192", "ev": engine})
    fig = json.loads(at.get("plotly_chart")[1].proto.spec)
    texts = [a["text"] for a in fig["layout"]["annotations"]]
    assert f"1 request: below it {name} does not start" in texts, texts


def test_the_roofline_table_fits_its_container_and_the_csv_keeps_every_column(downloads):
    import io

    at = fresh("views/roofline.py")
    frame = at.dataframe[0]  # the page's one table
    shown = list(frame.proto.column_order)
    config = json.loads(frame.proto.columns)
    assert shown and len(shown) < len(frame.value.columns)
    widths = [config[column]["width"] for column in shown]
    assert all(isinstance(w, int) for w in widths) and sum(widths) <= MAIN_BLOCK_PX
    csv = pd.read_csv(io.BytesIO(downloads["roofline.csv"][0]))
    assert set(shown) < set(csv.columns) and {"time_us", "count", "group", "kind", "kernel"} <= set(csv.columns)


def test_the_compare_table_fits_its_container_and_the_csv_keeps_every_column(downloads):
    import io

    from ui.derived import COMPARE_LABELS

    at = fresh("views/compare.py")
    frame = next(d for d in at.dataframe if d.proto.column_order)  # the results table (the editor shows all)
    shown = list(frame.proto.column_order)
    config = json.loads(frame.proto.columns)
    widths = [config[column]["width"] for column in shown]
    assert len(shown) < len(frame.value.columns) and all(isinstance(w, int) for w in widths)
    assert sum(widths) <= MAIN_BLOCK_PX, dict(zip(shown, widths))
    assert {"scenario", "model", "gpu", "max_concurrency", "ttft_s", "usd_per_million_tokens"} <= set(shown)
    csv = pd.read_csv(io.BytesIO(downloads["compare.csv"][0]))
    assert list(csv.columns) == list(COMPARE_LABELS) and len(csv) == 4  # A and the three starting rows, every key
    assert any("the CSV has every column" in c.value for c in at.caption)


# ------------------------------------------------------------------------------ point 5: where a PP suggestion runs


def test_a_pp_suggestion_says_across_nodes_only_when_it_leaves_the_node():
    at = fresh(query={"model": "meta-llama/Llama-3.1-70B", "len": "8192"})  # TP 1 x PP 2: 2 of a server's 8 GPUs
    suggestions = "\n".join(m.value for m in at.markdown if m.value.startswith("**What would change it**"))
    assert "--pipeline-parallel-size 2 (within one node)" in suggestions and "across nodes" not in suggestions
    big = plan_memory(spec_of("meta-llama/Llama-3.1-405B"), get_profile("h100-sxm"), Scenario(tp=8, max_model_len=8192))
    assert any("--pipeline-parallel-size 2 (across nodes)" in s for s in big.suggestions)  # 16 GPUs: two servers


def test_log_axes_label_a_readable_1_2_5_sequence_not_every_minor_tick():
    """Point 4: the tokens/s panel over 15.6-900 tok/s had every minor tick labelled (20, 30, ..., 900)."""
    from ui.charts import log_ticks

    assert log_ticks(15.6, 900) == [20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
    assert log_ticks(100, 50_000) == [100.0, 1000.0, 10_000.0]  # 1-2-5 would crowd: decades only
    assert log_ticks(6.0, 6.5) is None  # inside one step plotly's own ticks stay
