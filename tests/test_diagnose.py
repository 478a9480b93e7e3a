"""planner.verify.diagnose (baselines, classification, where the time goes, compare, symptoms) and the Diagnose page."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from planner.efficiency import BOUND
from planner.errors import PlannerError, ScenarioError
from planner.estimate.roofline import roofline
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import RequestShape, Scenario
from planner.verify.bench_results import load_bench_results
from planner.verify.diagnose import (
    Baseline,
    apply_change,
    baseline_from_bench,
    baseline_from_typed,
    baseline_from_validation,
    classify,
    compare,
    scenario_rooflines,
    scenario_settings,
    symptom_table,
    what_if,
    where_time_goes,
)

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
SC = Scenario(gpu="h100-sxm", max_model_len=8192, workload=RequestShape(input_len=1024, output_len=256, batch_size=1))


@pytest.fixture(scope="module")
def llama8b():
    loaded = load_config("meta-llama/Llama-3.1-8B", prefer="catalog")
    return build_spec(loaded.config, loaded.name)


@pytest.fixture(scope="module")
def rooflines(llama8b):
    return scenario_rooflines(llama8b, get_profile("h100-sxm"), SC)


def test_scenario_rooflines_are_bounds_at_the_runs_shape(llama8b, rooflines):
    assert rooflines.decode_bound.kind == "bound" and rooflines.prefill_bound.kind == "bound"
    assert rooflines.decode_estimate.kind == "estimate"
    assert rooflines.batch == 1 and rooflines.decode_context_tokens == 1024 + 128 and rooflines.prefill_bound.batch == 1
    # decode at batch 1 on an H100 is bandwidth-bound, a 1,024-token prefill compute-bound
    assert rooflines.decode_bound.bound == "memory" and rooflines.prefill_bound.bound == "compute"
    wider = scenario_rooflines(llama8b, get_profile("h100-sxm"), SC, Baseline(concurrency=64, input_len=512))
    assert wider.decode_bound.batch == 64 and wider.input_len == 512


# ----------------------------------------------------------------------------------------- classify

#: (typed numbers, expected bound): utilizations alone, then against the roofline (TPOT as a multiple of the bound).
UTILIZATION_CASES = [
    ({"gpu_utilization_pct": 85, "memory_bandwidth_utilization_pct": 20}, "compute", "clear"),
    ({"gpu_utilization_pct": 10, "memory_bandwidth_utilization_pct": 80}, "memory_bandwidth", "clear"),
    ({"gpu_utilization_pct": 12, "memory_bandwidth_utilization_pct": 18}, "overhead", "clear"),
    ({"gpu_utilization_pct": 40, "gpu_utilization_kind": "busy_time"}, "overhead", "likely"),
    ({"gpu_utilization_pct": 99, "gpu_utilization_kind": "busy_time"}, "inconclusive", "none"),
    ({}, "inconclusive", "none"),
]


@pytest.mark.parametrize(("numbers", "bound", "confidence"), UTILIZATION_CASES)
def test_classify_from_utilizations(numbers, bound, confidence):
    diagnosis = classify(Baseline(**numbers))
    assert diagnosis.bound == bound and diagnosis.confidence == confidence
    assert diagnosis.roofline_kind is None


def test_classify_memory_bound_near_the_decode_bound(rooflines):
    bound = rooflines.decode_bound.total_seconds
    diagnosis = classify(
        Baseline(tpot_seconds=1.2 * bound, memory_bandwidth_utilization_pct=80, gpu_utilization_pct=10), rooflines
    )
    assert diagnosis.bound == "memory_bandwidth" and diagnosis.confidence == "clear"
    evidence = next(e for e in diagnosis.evidence if e.name == "tpot_vs_bound")
    assert evidence.ratio == pytest.approx(1.2) and "near the memory-bandwidth ceiling" in evidence.statement
    implied = next(e for e in diagnosis.evidence if e.name == "implied_bandwidth")
    # bytes per step / TPOT over the datasheet bandwidth: at 1.2x the bound, 1 / 1.2 of peak
    assert f"{1 / 1.2:.0%} of the card's" in implied.statement


def test_classify_overhead_far_above_the_bound(rooflines):
    """The seed's example shape: "TPOT 38 ms is 8.4x the 4.5 ms memory-bandwidth bound: ... overhead is"."""
    bound = rooflines.decode_bound.total_seconds
    diagnosis = classify(Baseline(tpot_seconds=0.038), rooflines)
    assert diagnosis.bound == "overhead"
    statement = diagnosis.evidence[0].statement
    assert statement.startswith(f"TPOT 38.0 ms is {0.038 / bound:.1f}x the {bound * 1e3:.1f} ms memory-bandwidth bound")
    assert statement.endswith("memory bandwidth is not the limit, overhead is")
    assert diagnosis.summary.startswith("baseline is overhead/scheduling-bound")
    assert "eager_overhead" in diagnosis.symptom_ids


def test_classify_between_splits_the_step(rooflines):
    bound = rooflines.decode_bound.total_seconds
    diagnosis = classify(Baseline(tpot_seconds=2.0 * bound), rooflines)
    shares = [e for e in diagnosis.evidence if e.name == "tpot_vs_bound"]
    assert {e.points_to for e in shares} == {"memory_bandwidth", "overhead"}
    assert "explains 50% of each step" in shares[0].statement + shares[1].statement
    assert diagnosis.confidence == "weak"


def test_classify_compute_bound_prefill(rooflines):
    bound = rooflines.prefill_bound.total_seconds
    diagnosis = classify(
        Baseline(ttft_seconds=1.3 * bound, gpu_utilization_pct=80, memory_bandwidth_utilization_pct=20), rooflines
    )
    assert diagnosis.bound == "compute" and diagnosis.scores == {"compute": 3.0}
    assert "compute_bound_prefill" in diagnosis.symptom_ids
    assert any(e.name == "implied_compute" and "TFLOP/s" in e.statement for e in diagnosis.evidence)


def test_classify_queueing_from_ttft(rooflines):
    diagnosis = classify(Baseline(ttft_seconds=0.5, ttft_p99_seconds=2.5), rooflines)
    assert diagnosis.bound == "overhead"
    names = {e.name for e in diagnosis.evidence}
    assert {"ttft_vs_bound", "ttft_tail"} <= names
    assert "mixed_traffic" in diagnosis.symptom_ids and "prefill_starved" in diagnosis.symptom_ids


def test_classify_flags_an_impossible_tpot(rooflines):
    diagnosis = classify(Baseline(tpot_seconds=0.5 * rooflines.decode_bound.total_seconds), rooflines)
    assert diagnosis.bound == "inconclusive"
    assert diagnosis.evidence[0].name == "consistency" and "does not match the run" in diagnosis.evidence[0].statement


def test_classify_accepts_a_single_roofline(llama8b):
    decode = roofline(llama8b, get_profile("h100-sxm"), SC, "decode", 1, 1152, BOUND)
    assert classify(Baseline(tpot_seconds=0.038), decode).bound == "overhead"


# ---------------------------------------------------------------------------------- where time goes


def test_where_time_goes(rooflines):
    breakdown = where_time_goes(rooflines.decode_estimate, top=5)
    assert len(breakdown.top_ops) == 5
    seconds = [op.seconds for op in breakdown.top_ops]
    assert seconds == sorted(seconds, reverse=True)
    assert sum(breakdown.by_kind.values()) == pytest.approx(100.0)
    assert sum(breakdown.by_bound.values()) == pytest.approx(100.0)
    assert breakdown.top_ops[0].name.endswith("mlp.gate_up_proj") and breakdown.kind == "estimate"
    assert breakdown.summary.startswith("decode step (batch 1, 1,152 tokens) takes")


# ------------------------------------------------------------------------------------------ compare


def test_compare_one_variable():
    before = Baseline(
        label="bf16 kv",
        tpot_seconds=0.038,
        throughput_tokens_per_s=1000,
        gpu_utilization_pct=40,
        settings={"kv_cache_dtype": "auto", "tp": 1},
    )
    after = Baseline(
        label="fp8 kv",
        tpot_seconds=0.030,
        throughput_tokens_per_s=1010,
        gpu_utilization_pct=55,
        settings={"kv_cache_dtype": "fp8", "tp": 1},
    )
    result = compare(before, after)
    assert result.attributable and result.changed_settings == {"kv_cache_dtype": {"before": "auto", "after": "fp8"}}
    by = {r.metric: r for r in result.rows}
    assert by["tpot_seconds"].change_pct == pytest.approx(-21.05, abs=0.01) and by["tpot_seconds"].verdict == "better"
    assert by["throughput_tokens_per_s"].verdict == "within noise"  # +1%
    assert by["gpu_utilization_pct"].verdict == "changed"
    assert result.summary.startswith("kv_cache_dtype: auto -> fp8. tpot 38.0 ms -> 30.0 ms (-21.1%, better)")


@pytest.mark.parametrize(
    ("before_settings", "after_settings", "attributable", "says"),
    [
        ({"tp": 1, "kv_cache_dtype": "auto"}, {"tp": 2, "kv_cache_dtype": "fp8"}, False, "cannot be attributed"),
        ({"tp": 1}, {"tp": 1}, False, "no setting recorded as changed"),
    ],
)
def test_compare_needs_one_change(before_settings, after_settings, attributable, says):
    result = compare(
        Baseline(tpot_seconds=0.02, settings=before_settings), Baseline(tpot_seconds=0.03, settings=after_settings)
    )
    assert result.attributable is attributable and says in result.summary
    assert result.rows[0].verdict == "worse"


def test_scenario_settings_feed_compare():
    a, b = scenario_settings(SC), scenario_settings(SC.model_copy(update={"engine": "eager"}))
    assert a["workload.batch_size"] == 1 and a["gpu"] == "h100-sxm"
    diff = compare(Baseline(settings=a), Baseline(settings=b)).changed_settings
    assert diff == {"engine": {"before": "cuda-graphs", "after": "eager"}}


def test_scenario_settings_flatten_the_serving_features():
    from planner.scenario import LoRA, LoRAAdapter, SpeculativeDecoding

    spec = SpeculativeDecoding(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7)
    adapter = LoRAAdapter(r=8, lora_alpha=16, target_modules=("q_proj", "v_proj"))
    sc = SC.model_copy(update={"speculative": spec, "lora": LoRA(max_loras=4, adapter=adapter)})
    settings = scenario_settings(sc)
    assert settings["speculative.method"] == "eagle3" and settings["speculative.draft_model"] is None
    assert settings["lora.max_loras"] == 4 and settings["lora.adapter.target_modules"] == "q_proj,v_proj"
    assert scenario_settings(SC)["speculative"] is None  # off: the key with None
    assert Baseline(settings=settings).settings == settings  # every value is a Setting (the Diagnose page's baseline)
    diff = compare(Baseline(settings=scenario_settings(SC)), Baseline(settings=settings)).changed_settings
    assert diff["speculative.num_speculative_tokens"] == {"before": None, "after": 3}
    assert diff["lora.adapter.r"] == {"before": None, "after": 8}


# ------------------------------------------------------------------------------------------ baselines


def test_baseline_from_typed_milliseconds():
    b = baseline_from_typed(ttft_ms=120, tpot_ms=38, tpot_p99_ms=0, gpu_utilization_pct=0.0, concurrency=0)
    assert b.ttft_seconds == pytest.approx(0.12) and b.tpot_seconds == pytest.approx(0.038)
    assert b.tpot_p99_seconds is None and b.concurrency is None  # 0 reads as not typed
    assert b.gpu_utilization_pct == 0.0  # a utilization of 0% is a value


def test_baseline_from_bench():
    vllm = baseline_from_bench(load_bench_results(DATA / "bench" / "vllm_bench_serve_detailed.json")[0])
    assert vllm.source == "bench" and vllm.tpot_seconds == pytest.approx(0.022638809523809526)
    assert vllm.concurrency == 4 and vllm.input_len == 510
    guide = baseline_from_bench(load_bench_results(DATA / "bench" / "guidellm_sweep_two_strategies.json")[0])
    assert guide.tpot_seconds == pytest.approx(0.0141)  # no TPOT in GuideLLM: the ITL mean (the same mean gap)


def test_baseline_from_validation():
    """The Validate report's measured whole-model forwards: TPOT and the achieved fractions of peak."""

    def check(name, stage, batch, seconds, flops=None, bytes_=None, status="ok"):
        return SimpleNamespace(
            benchmark="layer_forward",
            status=status,
            measured_seconds=seconds,
            name=name,
            shape={"stage": stage, "batch": batch, "seq_len": 512},
            flops_fraction_of_peak=flops,
            bytes_fraction_of_peak=bytes_,
        )

    report = SimpleNamespace(
        model=SimpleNamespace(scaled=False),
        checks=[
            check("model forward decode B=1, context 512 (scaled from layers)", "decode", 1, 0.006, 0.01, 0.7),
            check("model forward decode B=8, context 512 (scaled from layers)", "decode", 8, 0.007, 0.05, 0.65),
            check("model forward decode B=64, context 512 (scaled from layers)", "decode", 64, None, status="timeout"),
            check("model forward prefill B=1 x 512 tokens (scaled from layers)", "prefill", 1, 0.03, 0.6, 0.1),
            check("layer 0 (full_attention) decode B=8, context 512", "decode", 8, 0.0002, 0.05, 0.6),
        ],
    )
    b = baseline_from_validation(report)
    assert b.source == "validation" and b.concurrency == 8 and b.tpot_seconds == 0.007
    assert b.memory_bandwidth_utilization_pct == pytest.approx(65.0) and b.gpu_utilization_pct == pytest.approx(5.0)
    assert b.ttft_seconds == 0.03 and b.input_len == 512
    assert classify(b).bound == "memory_bandwidth"
    with pytest.raises(PlannerError, match="no measured whole-model decode"):
        baseline_from_validation(SimpleNamespace(model=SimpleNamespace(scaled=False), checks=report.checks[2:3]))


# ------------------------------------------------------------------------------------------- symptoms


REQUIRED_FIXES = {
    "weights_dominate": {"weight_dtype": "fp8"},
    "kv_cache_full": {"kv_cache_dtype": "fp8"},
    "eager_overhead": {"engine": "cuda-graphs"},
    "prefill_starved": {"max_num_batched_tokens": 4096},
    "decode_stalls": {"enable_chunked_prefill": True},
    "more_tp": {"tp": 2},
    "mixed_traffic": {"max_num_seqs": 64},
}


def test_symptom_table_links_each_fix_to_a_scenario_change():
    eager = Scenario(engine="eager", enable_chunked_prefill=False, max_num_batched_tokens=2048)
    table = {s.id: s for s in symptom_table(eager)}
    for symptom_id, change in REQUIRED_FIXES.items():
        assert table[symptom_id].scenario_change == change, symptom_id
        changed = apply_change(eager, change)
        assert all(getattr(changed, k) == v for k, v in change.items())
    assert table["kv_cache_full"].change_label == "kv_cache_dtype: auto -> fp8"
    already = {s.id: s for s in symptom_table(Scenario(kv_cache_dtype="fp8"))}
    assert already["kv_cache_full"].scenario_change == {} and "already set" in already["kv_cache_full"].change_label


def test_apply_change_rejects_impossible_values():
    with pytest.raises(ScenarioError, match="invalid scenario"):
        apply_change(Scenario(), {"tp": 0})


def test_what_if_fp8_kv_doubles_concurrency(llama8b):
    effect = what_if(llama8b, get_profile("h100-sxm"), SC, {"kv_cache_dtype": "fp8"})
    rows = {r["name"]: r for r in effect.rows}
    assert effect.error is None and effect.fits_after
    assert rows["max_concurrency"]["after"] > 1.9 * rows["max_concurrency"]["before"]
    impossible = what_if(llama8b, get_profile("h100-sxm"), SC, {"tp": 3})
    assert impossible.fits_after is None and "does not divide" in impossible.error


# ----------------------------------------------------------------------------------------------- page


def page_test(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AppTest:
    """The Diagnose page routed through app.py (sidebar defaults: Llama-3.1-8B on one H100), with the
    calibration and history files in tmp_path."""
    monkeypatch.setenv("PLANNER_CALIBRATION_DIR", str(tmp_path / "cal"))
    monkeypatch.setenv("PLANNER_HISTORY_PATH", str(tmp_path / "history.jsonl"))
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("views/diagnose.py")
    return at


def markdown(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_page_diagnoses_typed_numbers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The sidebar's scenario (Llama-3.1-8B on one H100) and typed-in numbers: the diagnosis in words."""
    at = page_test(monkeypatch, tmp_path)
    at.run()
    assert not at.exception and at.title[0].value == "Diagnose"
    assert "inconclusive" in markdown(at)
    at.number_input(key="diagnose_tpot_ms").set_value(38.0)
    at.number_input(key="diagnose_gpu_util_pct").set_value(15.0)
    at.number_input(key="diagnose_bw_util_pct").set_value(20.0)
    at.run()
    assert not at.exception
    text = markdown(at)
    assert "overhead/scheduling-bound (clear)" in text and "memory bandwidth is not the limit, overhead is" in text
    assert "decode step (batch 1, 1,152 tokens) takes" in text  # where the time goes, from the sidebar's scenario


def test_page_log_reconcile_adopt_and_compare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    at = page_test(monkeypatch, tmp_path)
    at.run()
    log = (DATA / "logs" / "v0_pr10511_profiling_table.log").read_text()
    at.text_area(key="diagnose_log_text").set_value(log).run()
    assert not at.exception and not at.error
    terms = next(d.value for d in at.dataframe if "term (per GPU)" in d.value.columns)
    weights = terms[terms["term (per GPU)"] == "weights"].iloc[0]
    assert weights["planner"] == "14.96 GiB" and weights["vLLM printed"] == "14.96 GiB"
    at.button(key="diagnose_adopt").click().run()
    assert any("Adopted into" in s.value for s in at.success)
    assert (tmp_path / "cal" / "overheads" / "memory_overheads.yaml").is_file()
    assert at.selectbox(key="gpu").value == "h100-sxm"  # the cards still load: the file is not read as one
    # a baseline kept, then a changed run typed: compare says what moved
    at.number_input(key="diagnose_tpot_ms").set_value(38.0).run()
    at.button(key="diagnose_keep").click().run()
    at.number_input(key="diagnose_new_tpot_ms").set_value(30.0).run()
    assert "tpot 38.0 ms -> 30.0 ms (-21.1%, better)" in markdown(at)
    # a fix tried on the planner, then applied to the sidebar's inputs
    at.button(key="diagnose_try_kv_cache_full").click().run()
    assert "**What if** kv_cache_dtype: auto -> fp8" in markdown(at)
    at.button(key="diagnose_apply").click().run()
    assert at.session_state["kv"] == "fp8"


def test_page_scores_a_pasted_bench_result(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    at = page_test(monkeypatch, tmp_path)
    at.run()
    at.text_area(key="diagnose_bench_text").set_value((DATA / "bench" / "vllm_bench_serve_detailed.json").read_text())
    at.run()
    assert not at.exception and not at.error
    assert "Predicted: **simulated (estimate step times)**" in markdown(at)
    scores = next(d.value for d in at.dataframe if "measured" in d.value.columns and "stat" in d.value.columns)
    assert {"ttft_seconds", "tpot_seconds", "itl_seconds", "e2e_seconds"} <= set(scores["metric"])
    assert any("Qwen/Qwen3-8B" in w.value for w in at.warning)  # the run's model is not the sidebar's
    at.button(key="diagnose_bench_record").click().run()
    assert (tmp_path / "history.jsonl").is_file()
    assert any("entries in" in c.value and not c.value.startswith("0 ") for c in at.caption)


def test_page_shows_a_bad_log_as_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    at = page_test(monkeypatch, tmp_path)
    at.run()
    at.text_area(key="diagnose_log_text").set_value("nothing to see here").run()
    assert not at.exception
    assert any("no vLLM startup lines" in e.value for e in at.error)
    assert at.title[0].value == "Diagnose" and at.number_input(key="diagnose_tpot_ms")  # the other tabs still draw
