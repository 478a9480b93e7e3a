"""The app's engine and version input (sidebar "Engine and version", link parameter ``ev``): every page plans and
times with that engine's profile, as ``--engine-version`` does in the CLI (AppTest, no browser, no network).

Checked against the core's own answer for the same scenario: SGLang's memory plan (its static pool at its default
``--mem-fraction-static``), the caption under the memory slider that says which fraction the default stands for, the
SGLang command on the Export page, and a version no profile holds refused with the known ranges."""

from __future__ import annotations

from planner.engine import DEFAULT_ENGINE, resolve_engine
from planner.estimate.memory import plan_memory
from planner.estimate.resolve import resolve
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.units import MiB
from tests.app_test import fresh

MODEL = "meta-llama/Llama-3.1-8B"


def spec():
    loaded = load_config(MODEL)
    return build_spec(loaded.config, loaded.name)


def test_the_default_is_the_export_target_and_says_nothing_more() -> None:
    at = fresh(query={"model": MODEL})
    assert at.text_input(key="ev").value == DEFAULT_ENGINE
    assert not any("--mem-fraction-static" in c.value for c in at.sidebar.caption)


def test_sglang_from_the_link_plans_sglangs_static_pool() -> None:
    at = fresh(query={"model": MODEL, "ev": "sglang@0.5.5", "len": "8192"})
    assert at.text_input(key="ev").value == "sglang@0.5.5"
    sc = Scenario(engine_version="sglang@0.5.5", max_model_len=8192)
    plan = plan_memory(spec(), get_profile(sc.gpu), sc)
    assert at.success[0].value == plan.reason  # the page's verdict is SGLang's plan
    fraction = resolve(spec(), get_profile(sc.gpu), sc).gpu_memory_utilization
    note = " ".join(c.value for c in at.sidebar.caption)
    assert f"--mem-fraction-static {fraction:g}" in note and "stands for that default" in note


def test_a_fraction_set_on_the_slider_is_sglangs_static_fraction() -> None:
    at = fresh(query={"model": MODEL, "ev": "sglang@0.5.5", "len": "8192", "util": "0.8"})
    sc = Scenario(engine_version="sglang@0.5.5", max_model_len=8192, gpu_memory_utilization=0.8)
    assert at.success[0].value == plan_memory(spec(), get_profile(sc.gpu), sc).reason
    assert any("is `--mem-fraction-static 0.8`." in c.value for c in at.sidebar.caption)  # code: no dash


def test_the_export_pages_sglang_commands_carry_sglangs_own_default_for_their_flags() -> None:
    at = fresh("views/export.py", {"model": MODEL, "ev": "sglang@0.5.5", "len": "8192"})
    commands = [c.value for c in at.code if "sglang serve" in c.value]
    assert len(commands) == 2  # the latency and the throughput profile
    static = resolve_engine("sglang@0.5.5")[0].static_memory
    assert static is not None
    memory = get_profile("h100-sxm").memory_bytes / MiB
    for text in commands:
        words = text.split()
        chunk = int(words[words.index("--chunked-prefill-size") + 1])
        fraction = float(words[words.index("--mem-fraction-static") + 1])
        # what SGLang 0.5.5 would pick itself for this command's chunk on this card at TP 1
        assert fraction == static.fraction("0.5.5", memory, 1, 1, chunk, None)
        assert "timed with the sglang@0.5.5 engine profile" in text


def test_an_engine_version_no_profile_holds_is_refused_with_the_known_ranges() -> None:
    at = fresh(query={"model": MODEL, "ev": "sglang@abc"})
    warned = " ".join(w.value for w in at.sidebar.warning).replace("\\@", "@")  # markdown-escaped
    assert "ev=sglang@abc" in warned and "has no number" in warned
    assert at.text_input(key="ev").value == DEFAULT_ENGINE  # dropped, the default kept
    at = fresh(query={"model": MODEL, "ev": "tgi@2.0"})
    warned = " ".join(w.value for w in at.sidebar.warning).replace("\\@", "@")
    assert "ev=tgi@2.0" in warned and "unknown engine" in warned


def test_tensorrt_llm_from_the_link_plans_its_share_of_the_free_memory() -> None:
    at = fresh(query={"model": MODEL, "ev": "trtllm@1.2", "len": "8192"})
    sc = Scenario(engine_version="trtllm@1.2", max_model_len=8192)
    assert at.success[0].value == plan_memory(spec(), get_profile(sc.gpu), sc).reason
    note = " ".join(c.value for c in at.sidebar.caption)
    assert "--kv_cache_free_gpu_memory_fraction 0.9" in note and "stands for that default" in note


def test_a_vllm_release_before_0_33_plans_its_own_default_fraction() -> None:
    """vLLM before 0.33.0 defaults to --gpu-memory-utilization 0.9: the slider's 0.92 stands for it, the caption says
    so, and the plan is the one at 0.9; at 0.33.0 (the default engine) no caption, 0.92."""
    at = fresh(query={"model": MODEL, "ev": "vllm@0.15.1", "len": "8192"})
    sc = Scenario(engine_version="vllm@0.15.1", max_model_len=8192, gpu_memory_utilization=0.9)
    assert at.success[0].value == plan_memory(spec(), get_profile(sc.gpu), sc).reason
    notes = [c.value for c in at.sidebar.caption if "--gpu-memory-utilization" in c.value]
    assert notes == [
        "vllm@0.15.1: vLLM's default at this version is **`--gpu-memory-utilization 0.9`** (0.92 from 0.33.0). The "
        "slider at 0.92 stands for that default; any other value sets it."  # in code: markdown makes -- a dash
    ]
    moved = fresh(query={"model": MODEL, "ev": "vllm@0.15.1", "len": "8192", "util": "0.85"})
    assert not any("--gpu-memory-utilization" in c.value for c in moved.sidebar.caption)
    assert not any("--gpu-memory-utilization" in c.value for c in fresh(query={"model": MODEL}).sidebar.caption)


def test_the_simulate_page_says_which_engine_schedules_it() -> None:
    at = fresh("views/simulate.py", {"model": MODEL, "ev": "sglang@0.5.5", "len": "8192", "requests": "50"})
    said = " ".join(c.value for c in at.caption)
    assert "as sglang\\@0.5.5 schedules it (SGLang" in said or "as sglang@0.5.5 schedules it (SGLang" in said
    at = fresh("views/simulate.py", {"model": MODEL, "len": "8192", "requests": "50"})
    assert "schedules it (vLLM V1" in " ".join(c.value for c in at.caption)


def test_the_latency_pages_batch_sweep_ends_at_sglangs_pool_sized_slots() -> None:
    """The Latency page sweeps the batch up to the engine's own limit: SGLang's request slots from its pool (Qwen3-14B
    on one H100: 3,124, the sweep's last point after 2,048), not the 4,096 cap ``resolve`` gives before the pool."""
    from ui.sweeps import latency_vs_batch

    loaded = load_config("Qwen/Qwen3-14B")
    model, hw = build_spec(loaded.config, loaded.name), get_profile("h100-sxm")
    sc = Scenario(engine_version="sglang@0.5.5")
    slots = plan_memory(model, hw, sc, suggest=False).resolved.max_num_seqs
    assert 2048 < slots < 4096 == resolve(model, hw, sc).max_num_seqs
    assert latency_vs_batch(model, hw, sc)["batch"].max() == slots


def test_the_step_limits_say_what_auto_stands_for_with_each_engine() -> None:
    """Under max_num_seqs / max_num_batched_tokens: the engine's defaults on this card, SGLang's slots the plan's."""
    loaded = load_config("Qwen/Qwen3-14B")
    model = build_spec(loaded.config, loaded.name)
    slots = plan_memory(model, get_profile("h100-sxm"), Scenario(engine_version="sglang@0.5.5")).resolved.max_num_seqs

    def auto_notes(**query):
        at = fresh(query={"model": "Qwen/Qwen3-14B", **query})
        return [c.value for c in at.sidebar.caption if "auto:" in c.value]

    notes = {ev: auto_notes(ev=ev) for ev in ("sglang@0.5.5", "trtllm@1.2", "vllm@0.6.3", DEFAULT_ENGINE)}
    assert notes["sglang@0.5.5"] == [
        f"auto: SGLang runs up to **{slots:,}** sequences (the request slots it sizes from its KV pool) and **8,192** "
        "tokens in one step here, chunked prefill **on**."
    ]
    assert notes["trtllm@1.2"] == [
        "auto: TensorRT-LLM runs up to **2,048** sequences and **8,192** tokens in one step here, chunked prefill "
        "**off**."
    ]
    assert notes["vllm@0.6.3"] == [  # V0: 256 on every card; a 40,960-token context turns chunked prefill on
        "auto: vLLM runs up to **256** sequences and **512** tokens in one step here, chunked prefill **on**."
    ]
    assert notes[DEFAULT_ENGINE] == [
        "auto: vLLM runs up to **1,024** sequences and **8,192** tokens in one step here, chunked prefill **on**."
    ]
    assert auto_notes(ev="vllm@0.6.3", len="8192") == [
        "auto: vLLM runs up to **256** sequences and **8,192** tokens in one step here, chunked prefill **off**."
    ]
    assert auto_notes(seqs="64", tokens="4096") == ["auto: vLLM runs chunked prefill **on** here."]
    assert auto_notes(seqs="64", tokens="4096", chunked="0") == []
    assert auto_notes(chunked="0") == [
        "auto: vLLM runs up to **1,024** sequences and **40,960** tokens in one step here."  # off: a whole prompt
    ]


def test_block_size_shows_auto_until_one_is_picked() -> None:
    """The block_size picker holds "auto" (the engine's own, 16 or 64 for MLA), not an empty selection (a None option
    shows as "Choose an option"); the scenario gets None for it, and a link's size is kept."""
    from ui.state import scenario_from

    at = fresh(query={"model": MODEL})
    assert at.selectbox(key="block").value == "auto"
    assert scenario_from({"block": at.selectbox(key="block").value}).block_size is None
    at = fresh(query={"model": MODEL, "block": "32"})
    assert at.selectbox(key="block").value == 32
    assert scenario_from({"block": at.selectbox(key="block").value}).block_size == 32
