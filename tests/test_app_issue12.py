"""Issue 12, the app side: speculative decoding and LoRA adapters from the sidebar (AppTest, no browser, no network).

The "Serving features" inputs set ``Scenario.speculative`` and ``Scenario.lora``; each test checks what the page
shows against the core's own answer for the same scenario, bad values against the core's message, and that the
inputs travel in the link like every other sidebar input.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from planner.estimate.latency import estimate_latency
from planner.estimate.memory import plan_memory
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import LoRA, Scenario, SpeculativeDecoding
from tests.app_test import fresh
from ui.format import fmt_bytes, fmt_gib, fmt_int, fmt_seconds
from ui.params import DRAFTED_METHODS, SPECULATIVE_METHODS, sidebar_updates
from ui.state import scenario_from

TIMEOUT_S = 120
MODEL = "meta-llama/Llama-3.1-8B"
GiB = 2**30


def spec_of(name: str = MODEL):
    loaded = load_config(name)
    return build_spec(loaded.config, loaded.name)


def metrics(at: AppTest) -> dict[str, str]:
    """Each metric's label -> its value, the first of a label (the Latency page's estimate comes before its bound)."""
    shown: dict[str, str] = {}
    for m in at.metric:
        shown.setdefault(m.label, m.value)
    return shown


def values(data) -> list:
    """A trace's x or y as a list: plotly writes a numpy column as a typed array ({dtype, bdata: base64})."""
    if isinstance(data, dict):
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=data["dtype"]).tolist()
    return list(data)


def said(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for kind in (at.error, at.warning) for e in kind]
    return "\n".join(str(p) for p in parts)


# ------------------------------------------------------------------------------ the inputs and the Scenario


def test_the_method_picker_is_off_then_the_cores_methods() -> None:
    assert SPECULATIVE_METHODS == ("off", "ngram", "draft", "eagle", "eagle3", "mtp")
    assert DRAFTED_METHODS == ("draft", "eagle", "eagle3")  # the core refuses a draft model for ngram and mtp


def test_serving_features_are_off_by_default_and_the_expander_is_collapsed() -> None:
    at = fresh()
    box = next(e for e in at.sidebar.expander if e.label == "Serving features")
    assert box.proto.expanded is False
    assert at.selectbox(key="spec").value == "off" and at.toggle(key="lora").value is False
    sc = scenario_from({k: at.session_state[k] for k in ("spec", "spec_k", "spec_a", "draft", "lora", "loras")})
    assert sc.speculative is None and sc.lora is None


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(speculative=SpeculativeDecoding(method="eagle3", num_speculative_tokens=5, acceptance_rate=0.8)),
        Scenario(
            speculative=SpeculativeDecoding(
                method="draft", num_speculative_tokens=4, acceptance_rate=0.55, draft_model="meta-llama/Llama-3.2-1B"
            ),
            lora=LoRA(max_loras=8, max_lora_rank=64),
        ),
        Scenario(speculative=SpeculativeDecoding(method="mtp", num_speculative_tokens=1, acceptance_rate=0.0)),
    ],
    ids=["eagle3", "draft-and-lora", "mtp"],
)
def test_sidebar_updates_invert_scenario_from_for_the_serving_features(scenario: Scenario) -> None:
    from tests.test_app import SIDEBAR_DEFAULTS

    values = {**SIDEBAR_DEFAULTS, **sidebar_updates(scenario.model_dump())}
    assert scenario_from(values) == scenario
    assert sidebar_updates({"speculative": None, "lora": None}) == {"spec": "off", "lora": False}


def test_a_lora_the_sidebar_cannot_show_leaves_it_alone() -> None:
    assert sidebar_updates({"lora": LoRA(max_loras=2, max_cpu_loras=8)}) == {}  # --max-cpu-loras: the CLI's only
    assert sidebar_updates({"lora": LoRA(max_loras=2, max_lora_rank=32)}) == {"lora": True, "loras": 2, "lora_rank": 32}


# ------------------------------------------------------------------------------ Latency: speculation on


def test_speculation_on_the_latency_page_shows_the_core_speedup_chart_and_break_even() -> None:
    at = fresh()
    at.selectbox(key="spec").set_value("eagle3").run()
    at.number_input(key="spec_k").set_value(4)
    at.number_input(key="spec_a").set_value(0.3).run()
    at.switch_page("views/latency.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    spec, hw = spec_of(), get_profile("h100-sxm")
    sc = Scenario(speculative=SpeculativeDecoding(method="eagle3", num_speculative_tokens=4, acceptance_rate=0.3))
    est = estimate_latency(spec, hw, sc)
    core = est.speculative
    assert core is not None and core.break_even_batch is not None  # a = 0.3, k = 4 stops paying inside the batches
    shown = metrics(at)
    assert shown["TPOT"] == fmt_seconds(est.tpot_seconds)  # the speculative TPOT, not the plain one
    assert est.tpot_seconds != estimate_latency(spec, hw, Scenario()).tpot_seconds
    assert shown["Speed-up at batch 1"] == f"{core.speedup:.2f}x"
    assert shown["Tokens per step"] == f"{(1 - 0.3**5) / (1 - 0.3):.3f}" == "1.425"  # (1 - a^(k+1)) / (1 - a)
    assert shown["Draft per step"] == fmt_seconds(core.draft_seconds)
    assert f"Speculation stops paying at batch {core.break_even_batch:,}**" in said(at)
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)  # the speed-up chart comes before the tabs
    line = next(trace for trace in fig["data"] if trace["name"] == est.kind)
    batches, speedups = values(line["x"]), values(line["y"])
    assert batches == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]  # powers of two up to max_num_seqs
    for batch, speedup in zip(batches, speedups):
        point = estimate_latency(spec, hw, sc, batch_size=int(batch)).speculative
        assert point is not None and speedup == pytest.approx(point.speedup)
    assert max(speedups) > 1 > min(speedups)  # it pays at small batches and not past the break-even
    marks = [shape for shape in fig["layout"]["shapes"] if shape["type"] == "line" and shape["x0"] == shape["x1"]]
    assert [shape["x0"] for shape in marks] == [core.break_even_batch]
    assert any(f"break-even: batch {core.break_even_batch:,}" in a["text"] for a in fig["layout"]["annotations"])


def test_speculation_that_pays_at_every_batch_says_so() -> None:
    at = fresh("views/latency.py", {"spec": "eagle", "spec_k": "3", "spec_a": "0.7"})
    sc = Scenario(speculative=SpeculativeDecoding(method="eagle", num_speculative_tokens=3, acceptance_rate=0.7))
    core = estimate_latency(spec_of(), get_profile("h100-sxm"), sc).speculative
    assert core is not None and core.break_even_batch is None
    assert f"Speculation pays at every batch up to {core.break_even_searched_up_to:,}**" in said(at)
    assert metrics(at)["Speed-up at batch 1"] == f"{core.speedup:.2f}x"


def test_speculation_off_draws_no_speculative_section() -> None:
    at = fresh("views/latency.py")
    assert "Speed-up at batch 1" not in metrics(at)
    assert "Speculation" not in said(at)
    assert [chart.key for chart in at.get("plotly_chart")] == ["latency_batch", "latency_context"]


def test_a_draft_model_is_loaded_and_costed() -> None:
    at = fresh("views/latency.py", {"spec": "draft", "draft": "meta-llama/Llama-3.2-1B", "spec_a": "0.6"})
    assert not at.error, [e.value for e in at.error]
    sc = Scenario(
        speculative=SpeculativeDecoding(
            method="draft", num_speculative_tokens=3, acceptance_rate=0.6, draft_model="meta-llama/Llama-3.2-1B"
        )
    )
    core = estimate_latency(spec_of(), get_profile("h100-sxm"), sc, draft_model=spec_of("meta-llama/Llama-3.2-1B"))
    assert core.speculative is not None
    assert metrics(at)["Draft per step"] == fmt_seconds(core.speculative.draft_seconds)
    assert metrics(at)["Speed-up at batch 1"] == f"{core.speculative.speedup:.2f}x"


# ------------------------------------------------------------------------------ Plan: LoRA on


def test_lora_on_takes_exactly_the_cores_adapter_bytes_from_the_kv_cache() -> None:
    at = fresh()
    at.toggle(key="lora").set_value(True).run()
    at.number_input(key="loras").set_value(4)
    at.selectbox(key="lora_rank").set_value(64).run()
    assert not at.exception and not at.error
    spec, hw = spec_of(), get_profile("h100-sxm")
    plain = plan_memory(spec, hw, Scenario())
    plan = plan_memory(spec, hw, Scenario(lora=LoRA(max_loras=4, max_lora_rank=64)))
    adapters = plan.lora_bytes_per_gpu
    assert adapters is not None and adapters > 0
    assert plain.kv_cache_bytes_per_gpu - plan.kv_cache_bytes_per_gpu == adapters  # the core's own invariant
    shown = metrics(at)
    assert (
        shown["KV cache per GPU"]
        == fmt_gib(plain.kv_cache_bytes_per_gpu - adapters)
        != fmt_gib(plain.kv_cache_bytes_per_gpu)
    )
    assert shown["KV cache tokens"] == fmt_int(plan.kv_cache_tokens)
    terms = at.dataframe[0].value
    row = terms[terms["term"] == "lora"].iloc[0]
    assert row["GiB"] == pytest.approx(adapters / GiB) and row["kind"] == "exact"
    assert list(terms["term"])[:3] == ["weights", "lora", "kv_cache"]
    assert f"4 adapter slot(s) of rank 64 take **{fmt_bytes(adapters)}** per GPU" in said(at)


def test_lora_off_has_no_lora_term() -> None:
    at = fresh()
    assert "lora" not in list(at.dataframe[0].value["term"])


# ------------------------------------------------------------------------------ Export


def test_the_export_carries_speculative_config_and_enable_lora() -> None:
    query = {
        "spec": "eagle3",
        "draft": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "lora": "1",
        "loras": "4",
        "lora_rank": "64",
    }
    at = fresh("views/export.py", query)
    assert not at.error, [e.value for e in at.error]
    codes = {c.value.splitlines()[0]: c.value for c in at.code}
    yaml_text = codes["# vLLM serve config: vllm serve --config vllm-latency.yaml"]
    head = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert f"speculative-config:\n  method: eagle3\n  num_speculative_tokens: 3\n  model: {head}\n" in yaml_text
    assert "enable-lora: true\nmax-loras: 4\nmax-lora-rank: 64\n" in yaml_text
    from planner.estimate.operating_points import latency_profile

    sc = Scenario(
        speculative=SpeculativeDecoding(
            method="eagle3", num_speculative_tokens=3, acceptance_rate=0.7, draft_model=head
        ),
        lora=LoRA(max_loras=4, max_lora_rank=64),
    )
    core = latency_profile(spec_of(), get_profile("h100-sxm"), sc).latency.speculative
    assert core is not None and core.break_even_batch is None  # the comment says it in words, not 'at none up to'
    assert f"plain decoding; pays at every batch up to {core.break_even_searched_up_to:,} [" in yaml_text


# ------------------------------------------------------------------------------ bad values: the core's message


@pytest.mark.parametrize(
    ("page", "query", "expected"),
    [
        ("views/plan.py", {"spec": "draft"}, "--speculative-method draft needs --draft-model MODEL"),
        ("views/latency.py", {"spec": "eagle", "pp": "2"}, "speculative decoding with --pp 2: vLLM does not run"),
        (
            "views/plan.py",
            {"spec": "mtp", "draft": "org/drafter"},
            "--draft-model names a drafter, and --speculative-method mtp has none",
        ),
        ("views/export.py", {"spec": "eagle"}, "vLLM needs the eagle head's checkpoint for --speculative-config"),
    ],
    ids=["draft-without-model", "with-pp", "mtp-with-draft", "export-eagle-without-head"],
)
def test_bad_serving_features_show_the_cores_message(page: str, query: dict, expected: str) -> None:
    at = fresh(page, query)
    assert at.error and expected in at.error[0].value.replace("\\", "")  # shown escaped for Markdown
    assert not at.exception


def test_the_draft_input_stays_visible_while_it_holds_a_refused_value() -> None:
    at = fresh(query={"spec": "mtp", "draft": "org/drafter"})
    assert at.text_input(key="draft").value == "org/drafter"  # the user can clear what the core refuses
    at.text_input(key="draft").set_value("").run()
    assert not at.error, [e.value for e in at.error]


def test_changing_to_a_method_without_a_drafter_drops_the_draft() -> None:
    at = fresh(query={"spec": "eagle", "draft": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"})
    at.selectbox(key="spec").set_value("ngram").run()
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["draft"] == "" and "draft" not in at.query_params


@pytest.mark.parametrize(
    ("query", "warned"),
    [
        ({"spec": "medusa"}, "spec=medusa"),
        ({"spec": "eagle", "spec_a": "1.5"}, "spec_a=1.5"),
        ({"spec": "eagle", "spec_k": "0"}, "spec_k=0"),
        ({"lora": "1", "lora_rank": "12"}, "lora_rank=12"),
        ({"lora": "1", "loras": "0"}, "loras=0"),
    ],
)
def test_bad_link_values_are_dropped_with_a_warning(query: dict, warned: str) -> None:
    at = fresh(query=query)
    assert warned in " ".join(w.value for w in at.sidebar.warning).replace("\\", "")  # shown escaped for Markdown
    assert warned.split("=")[0] not in at.query_params
    assert not at.error


# ------------------------------------------------------------------------------ the share link


def test_the_share_link_round_trips_the_serving_features() -> None:
    at = fresh()
    at.selectbox(key="spec").set_value("draft").run()
    at.text_input(key="draft").set_value("meta-llama/Llama-3.2-1B")
    at.number_input(key="spec_k").set_value(5)
    at.number_input(key="spec_a").set_value(0.65)
    at.toggle(key="lora").set_value(True).run()
    at.selectbox(key="lora_rank").set_value(32).run()
    assert not at.error, [e.value for e in at.error]
    link = dict(at.query_params)
    assert link == {
        "spec": "draft",
        "draft": "meta-llama/Llama-3.2-1B",
        "spec_k": "5",
        "spec_a": "0.65",
        "lora": "1",
        "lora_rank": "32",
    }
    again = fresh("views/latency.py", link)
    assert again.selectbox(key="spec").value == "draft"
    assert again.text_input(key="draft").value == "meta-llama/Llama-3.2-1B"
    assert again.number_input(key="spec_k").value == 5
    assert again.number_input(key="spec_a").value == pytest.approx(0.65)
    assert again.toggle(key="lora").value is True and again.selectbox(key="lora_rank").value == 32
    sc = Scenario(
        speculative=SpeculativeDecoding(
            method="draft", num_speculative_tokens=5, acceptance_rate=0.65, draft_model="meta-llama/Llama-3.2-1B"
        ),
        lora=LoRA(max_lora_rank=32),
    )
    core = estimate_latency(spec_of(), get_profile("h100-sxm"), sc, draft_model=spec_of("meta-llama/Llama-3.2-1B"))
    assert metrics(again)["TPOT"] == fmt_seconds(core.tpot_seconds)
    assert dict(again.query_params) == link
    again.selectbox(key="spec").set_value("off")
    again.toggle(key="lora").set_value(False).run()
    assert "spec" not in again.query_params and "lora" not in again.query_params


# ------------------------------------------------------------------------------ every page with the features on

PAGES = ("plan", "roofline", "latency", "compare", "export", "validate", "simulate", "diagnose")


@pytest.mark.parametrize("page", PAGES)
def test_every_page_runs_with_a_draft_model_and_lora_on(page: str) -> None:
    query = {"spec": "draft", "draft": "meta-llama/Llama-3.2-1B", "lora": "1", "loras": "2"}
    at = fresh(f"views/{page}.py", query)
    assert not at.error, [e.value for e in at.error]  # the draft's config reaches every core call that costs it


def test_compare_costs_the_draft_model() -> None:
    at = fresh("views/compare.py", {"spec": "draft", "draft": "meta-llama/Llama-3.2-1B"})
    sc = Scenario(
        speculative=SpeculativeDecoding(
            method="draft", num_speculative_tokens=3, acceptance_rate=0.7, draft_model="meta-llama/Llama-3.2-1B"
        )
    )
    core = estimate_latency(spec_of(), get_profile("h100-sxm"), sc, draft_model=spec_of("meta-llama/Llama-3.2-1B"))
    row = at.dataframe[-1].value.iloc[0]
    assert row["tokens_per_s"] == pytest.approx(core.throughput_tokens_per_s)


# ----------------------------------------------------------------------------- images (vision-language models)

VLM = "Qwen/Qwen3-VL-8B-Instruct"


def test_images_from_the_sidebar_match_the_core_on_the_latency_page():
    """2 images of 1280 x 720 with Qwen3-VL-8B: 880 tokens each, the encoder inside TTFT, as estimate_latency says."""
    at = fresh("views/latency.py", {"model": VLM, "images": "2", "image": "1280x720"})
    sc = scenario_from(at.session_state)
    assert (sc.workload.images_per_request, sc.workload.image_size) == (2, (1280, 720))
    core = estimate_latency(spec_of(VLM), get_profile("h100-sxm"), sc)
    assert core.image_tokens_per_request == 2 * 880
    assert metrics(at)["TTFT"] == fmt_seconds(core.ttft_seconds)
    (note,) = [c.value for c in at.caption if c.value.startswith("Images:")]
    assert "2 per request of 1280 x 720, 1,760 prompt tokens per request" in note
    assert fmt_seconds(core.encoder_seconds) in note
    text = estimate_latency(
        spec_of(VLM),
        get_profile("h100-sxm"),
        sc.model_copy(
            update={"workload": sc.workload.model_copy(update={"images_per_request": 0, "image_size": None})}
        ),
    )
    assert core.ttft_seconds > text.ttft_seconds


def test_the_image_size_is_ignored_without_images_and_travels_in_the_link():
    at = fresh(None, {"model": VLM, "image": "896x896"})
    assert not at.exception and not at.error
    assert scenario_from(at.session_state).workload.image_size is None  # no image: the size says nothing
    assert sidebar_updates({"workload": {"images_per_request": 3, "image_size": (640, 480)}}) == {
        "images": 3,
        "image": "640x480",
    }


def test_a_bad_image_size_or_a_text_model_with_images_is_an_error_not_a_traceback():
    at = fresh(None, {"model": VLM, "images": "1"})
    at.text_input(key="image").set_value("wide").run()
    assert not at.exception
    assert any("image\\_size 'wide'" in e.value and "WIDTHxHEIGHT" in e.value for e in at.error)
    at = fresh(None, {"images": "1"})  # Llama-3.1-8B has no vision encoder
    assert not at.exception and any("text-only model" in e.value for e in at.error)
