"""planner.verify.reconcile and ``python -m planner reconcile``: real vLLM startup logs re-planned term by term.

The logs are the verbatim public excerpts under tests/data/logs/ (source in each file's ``%%``
header). Known values are what those logs print; the planner's side is checked for the terms that
follow from config.json (weights: exact) and for the arithmetic of the comparison, not for the
estimated overheads, which are what reconciliation exists to measure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.cli import main
from planner.errors import ConfigError, HubUnavailableError, ScenarioError
from planner.estimate.memory import plan_memory
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.units import GiB
from planner.verify.reconcile import (
    adopt_overheads,
    apply_overheads,
    card_from_memory,
    load_overheads,
    overheads_path,
    reconcile,
)
from planner.verify.vllm_log import parse_vllm_log

LOGS = Path(__file__).parent / "data" / "logs"


def load(name: str) -> str:
    """A log excerpt without its %% source header."""
    return "\n".join(
        line for line in (LOGS / name).read_text(encoding="utf-8").splitlines() if not line.startswith("%%")
    )


def gib(value: float) -> object:
    """A printed GiB figure in bytes, to the byte the parser rounds to."""
    return pytest.approx(value * GiB, abs=2)


def terms(rec) -> dict:
    return {t.name: t for t in rec.terms}


def spec(name: str):
    loaded = load_config(name, prefer="catalog")
    return build_spec(loaded.config, loaded.name)


# ---------------------------------------------------------------------------------------------- V0


def test_v0_single_line_format_rtx3090_20k():
    """vllm-project/vllm#10517, 20k: V0 0.6.4 key=value line; Llama-3.1-8B on a 23.58 GiB card."""
    rec = reconcile(parse_vllm_log(load("v0_issue10517_llama8b_rtx3090_20k.log")), model="meta-llama/Llama-3.1-8B")
    t = terms(rec)
    # the card: the rtx-3090 profile's CUDA total is the 23.58 GiB this log printed
    assert rec.card == "rtx-3090" and "23.58 GiB" in rec.card_how
    assert rec.engine == "V0"
    # scenario as read: max_model_len from the concurrency line, utilization from the profiling line
    assert rec.scenario.max_model_len == 20000 and rec.scenario.gpu_memory_utilization == 0.90
    # V0 without chunked prefill below 32K tokens: the profiling run covers the whole max_model_len
    assert rec.resolved.enable_chunked_prefill is False and rec.resolved.max_num_batched_tokens == 20000
    # reported values, as printed (GiB = 2**30 bytes)
    assert t["weights"].reported == gib(14.9888)
    assert t["non_torch"].reported == gib(0.35)
    assert t["kv_cache_memory"].reported == gib(3.81)
    assert t["num_gpu_blocks"].reported == 1952 and t["max_concurrency"].reported == 1.56
    assert t["kv_cache_tokens"].reported is None  # not printed, never derived
    # the activation peak is derived from the absolute torch peak, and says so
    assert t["activation_peak"].reported == pytest.approx((17.06 - 14.9888) * GiB, abs=4)
    assert "derived" in t["activation_peak"].reported_how
    # weights follow from config.json: within 0.5% of what vLLM loaded
    assert t["weights"].predicted_kind == "exact" and abs(t["weights"].difference_pct) < 0.5
    # the difference is (predicted - reported) / reported
    blocks = t["num_gpu_blocks"]
    assert blocks.difference_pct == pytest.approx((blocks.predicted - 1952) / 1952 * 100)
    # the KV gap is fully itemized: the parts sum to the kv_cache_memory difference
    gap = t["kv_cache_memory"].predicted - t["kv_cache_memory"].reported
    assert sum(rec.kv_gap_by_term.values()) == pytest.approx(gap, abs=2)
    # V0 sized the KV cache before capturing CUDA graphs (the vllm-v0 profile's rule): the plan shows its graph
    # pool beyond the fraction, takes none of it from the budget, and the KV figures land within 5% of vLLM's
    assert t["cuda_graphs"].predicted > 0 and not rec.resolved.reserves_cuda_graph_memory
    assert any("graph pool is not taken from the KV budget" in a for a in rec.assumptions)
    assert "cuda_graphs" not in rec.kv_gap_by_term
    assert abs(t["kv_cache_memory"].difference_pct) < 5.0 and abs(t["num_gpu_blocks"].difference_pct) < 5.0


@pytest.mark.parametrize(("version", "engine", "budget"), [("0.6.4", "vllm@0.6.4", 512), ("0.6.6", "vllm@0.6.6", 2048)])
def test_v0_long_context_plans_v0s_own_step_budget(version, engine, budget):
    """A V0 log above 32K tokens without a printed budget: chunked prefill on with V0's budget of that release (512,
    2048 from 0.6.5), not V1's 8,192 by card; planned with that release's engine profile."""
    report = parse_vllm_log(load("v0_issue10517_llama8b_rtx3090_20k.log")).model_copy(
        update={"max_model_len": 65536, "vllm_version": version}
    )
    rec = reconcile(report, {"gpu": "h100-sxm"}, model="meta-llama/Llama-3.1-8B")
    assert rec.scenario.engine_version == engine and rec.resolved.enable_chunked_prefill is True
    assert rec.resolved.max_num_batched_tokens == budget and rec.resolved.max_num_seqs == 256


def test_v0_max_model_len_given_on_the_command_line_decides_chunked_prefill():
    """The log printed 20,000 tokens (chunked prefill off); --max-model-len 65536 on the command line is the context
    planned, and V0 would have chunked above 32K: on, with 0.6.4's 512-token step, said so in the notes."""
    report = parse_vllm_log(load("v0_issue10517_llama8b_rtx3090_20k.log")).model_copy(update={"vllm_version": "0.6.4"})
    logged = reconcile(report, {"gpu": "h100-sxm"}, model="meta-llama/Llama-3.1-8B")
    given = reconcile(report, {"gpu": "h100-sxm", "max_model_len": 65536}, model="meta-llama/Llama-3.1-8B")
    assert not logged.resolved.enable_chunked_prefill and logged.resolved.max_num_batched_tokens == 20000
    assert given.resolved.enable_chunked_prefill and given.resolved.max_num_batched_tokens == 512
    assert any("V0 engine: chunked prefill on" in a for a in given.assumptions)
    assert any("covers 20,000 tokens (max_model_len)" in a for a in logged.assumptions)


def test_v0_long_context_rule_leaves_mla_models_out():
    """V0 kept chunked prefill off for MLA models whatever the context: the whole 65,536-token prompt is profiled."""
    report = parse_vllm_log(load("v0_issue10517_llama8b_rtx3090_20k.log")).model_copy(update={"max_model_len": 65536})
    rec = reconcile(report, model="deepseek-ai/DeepSeek-V2-Lite")
    assert rec.scenario.engine_version == "vllm-v0" and rec.resolved.enable_chunked_prefill is False
    assert rec.resolved.max_num_batched_tokens == 65536
    assert any("chunked prefill off" in a for a in rec.assumptions)


def test_v0_override_wins_and_closes_the_gap():
    """--enforce-eager on the command line removes the graph pool the V0 budget never held: blocks within 5%."""
    report = parse_vllm_log(load("v0_issue10517_llama8b_rtx3090_20k.log"))
    rec = reconcile(report, {"engine": "eager"}, model="meta-llama/Llama-3.1-8B")
    t = terms(rec)
    assert rec.scenario.engine == "eager" and t["cuda_graphs"].predicted == 0
    assert rec.overridden == {"engine": {"log": None, "given": "eager"}}
    assert t["cuda_graphs"].predicted_kind == "given"
    assert abs(t["num_gpu_blocks"].difference_pct) < 5.0


def test_v0_engine_refused_to_start_29k():
    """vllm-project/vllm#10517, 29k: vLLM refused (0.82x); the plan says it does not start either."""
    rec = reconcile(parse_vllm_log(load("v0_issue10517_llama8b_rtx3090_29k.log")), model="meta-llama/Llama-3.1-8B")
    t = terms(rec)
    assert t["kv_cache_tokens"].reported == 23648 and t["max_concurrency"].reported == 0.82
    assert t["max_concurrency"].predicted < 1.0
    assert rec.memory_verdict.startswith("does not start")
    assert any("refused to start" in w for w in rec.warnings)


def test_v0_profiling_table_reads_model_and_card():
    """vllm-project/vllm#10511: the multi-line table; the command line names a catalog model;
    79.22 GiB is an 80 GB card."""
    rec = reconcile(parse_vllm_log(load("v0_pr10511_profiling_table.log")))
    t = terms(rec)
    assert rec.model == "meta-llama/Meta-Llama-3-8B"
    assert rec.card == "h100-sxm" and "a100-80gb" in rec.card_how  # same memory: the alternatives are named
    assert t["activation_peak"].reported == gib(1.26) and "printed" in t["activation_peak"].reported_how
    assert abs(t["weights"].difference_pct) < 0.1
    assert "requested_memory" in rec.kv_gap_by_term  # the table prints total x utilization


def test_instruct_model_falls_back_to_its_base_offline():
    """The log names an -Instruct repo the (closed) Hub cannot serve: the catalog's base model, said so."""
    text = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 20000\n" + load(
        "v0_issue10517_llama8b_rtx3090_20k.log"
    )
    rec = reconcile(parse_vllm_log(text))
    assert rec.model == "meta-llama/Llama-3.1-8B"
    assert any("Llama-3.1-8B-Instruct could not be loaded" in a for a in rec.assumptions)


# ---------------------------------------------------------------------------------------------- V1


def test_v1_tp4_ansi_llama33_70b_fp8():
    """A V1 0.11 log with colour codes, TP=4 per-rank lines: weights, KV tokens and concurrency within 1%."""
    report = parse_vllm_log(load("v1_tp4_ansi_llama33_70b_fp8.log"))
    rec = reconcile(report, {"weight_dtype": "fp8"}, get_profile("h200"), model="meta-llama/Llama-3.3-70B-Instruct")
    t = terms(rec)
    assert rec.scenario.tp == 4 and rec.engine == "V1" and rec.engine_version == "0.11.2rc1+rhai0.cuda"
    assert rec.scenario.max_model_len == 8192
    # gpu_memory_utilization is not in the log: 0.9, the default of releases before 0.33, and said so
    assert rec.scenario.gpu_memory_utilization == 0.9
    assert any("gpu_memory_utilization not in the log" in a for a in rec.assumptions)
    for name in ("weights", "kv_cache_memory", "kv_cache_tokens", "max_concurrency"):
        assert abs(t[name].difference_pct) < 1.0, (name, t[name])
    # "took -0.17 GiB": allocator noise, reported but not compared
    assert t["cuda_graphs"].reported < 0 and t["cuda_graphs"].difference_pct is None
    assert "not compared" in t["cuda_graphs"].reported_how


def test_v1_alpha_command_line_settings():
    """vllm-project/vllm#12569: V1 alpha; max_model_len and utilization come from the pasted command line."""
    report = parse_vllm_log(load("v1_pr12569_llama70b_w8a8.log"))
    rec = reconcile(report, {"weight_dtype": "int8", "gpu": "h100-sxm"}, model="meta-llama/Llama-3.1-70B")
    t = terms(rec)
    assert rec.scenario.max_model_len == 2048 and rec.scenario.gpu_memory_utilization == 0.98
    assert rec.card == "h100-sxm" and rec.card_how == "given on the command line"
    assert abs(t["weights"].difference_pct) < 0.5
    assert t["num_gpu_blocks"].reported == 1381 and t["max_concurrency"].reported == 10.79


def test_tp_per_rank_lines_warn_when_tp_unknown():
    """Two workers printed weights but the log never says TP: assumed 1,
    and the assumption says why that may be wrong."""
    report = parse_vllm_log(load("v1_tp2_snakemake316_per_rank.log"))
    rec = reconcile(report, {"gpu": "h100-sxm"}, model="meta-llama/Llama-3.1-8B")
    assert any("2 worker processes printed weights" in a for a in rec.assumptions)
    rec2 = reconcile(report, {"gpu": "h100-sxm", "tp": 2}, model="meta-llama/Llama-3.1-8B")
    assert rec2.scenario.tp == 2 and rec2.overridden["tp"] == {"log": None, "given": 2}


NOISE = (
    "\x1b[1;36m(EngineCore_DP0 pid=175)\x1b[0;0m INFO 11-14 14:23:45 [cuda.py:366] Using Flash Attention backend.",
    "[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0",
    "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:23<00:23, 23.99s/it]",
    "2024-06-28T06:11:52.685Z WARNING something unrelated about memory pinning",
    "INFO 06-24 20:25:30 [metrics.py:1] Avg prompt throughput: 0.0 tokens/s, GPU KV cache usage: 0.0%",
)


def test_noise_lines_change_nothing():
    """Colour codes, progress bars, Gloo and runtime-stat lines around the startup lines: the same reconciliation."""
    clean = load("v0_issue10517_llama8b_rtx3090_20k.log").splitlines()
    noisy = []
    for i, line in enumerate(clean):
        noisy += [NOISE[i % len(NOISE)], f"\x1b[32mINFO 12-02 10:00:00 worker.py:1]\x1b[0m {line}"]
    a = reconcile(parse_vllm_log("\n".join(clean)), model="meta-llama/Llama-3.1-8B")
    b = reconcile(parse_vllm_log("\n".join(noisy)), model="meta-llama/Llama-3.1-8B")
    assert [t.model_dump() for t in a.terms] == [t.model_dump() for t in b.terms]
    assert a.scenario == b.scenario


# ------------------------------------------------------------------------------------- card, errors


def test_card_from_memory():
    hw, how = card_from_memory(int(79.22 * GiB))
    assert hw.id == "h100-sxm" and hw.memory_bytes == int(79.22 * GiB) and "also within 0.5%" in how
    odd, how = card_from_memory(int(10.0 * GiB))
    assert odd.id.startswith("detected-") and odd.memory_bytes == int(10.0 * GiB) and "no hardware profile" in how


@pytest.mark.parametrize(
    ("log", "kwargs", "error", "message"),
    [
        ("v0_issue10517_llama8b_rtx3090_20k.log", {}, ScenarioError, "does not name the model"),
        ("v0_torchserve_pr3343_config_line.log", {}, ScenarioError, "--gpu"),
        ("v0_issue6636_namespace_args.log", {}, HubUnavailableError, "pass MODEL"),  # 70B-Instruct, no base in catalog
    ],
)
def test_reconcile_errors_say_what_to_pass(log, kwargs, error, message):
    with pytest.raises(error) as info:
        reconcile(parse_vllm_log(load(log)), **kwargs)
    assert message in str(info.value)


def test_garbage_is_not_a_log():
    with pytest.raises(ConfigError, match="no vLLM startup lines"):
        parse_vllm_log("hello\nworld\n")


# ------------------------------------------------------------------------------------- calibration


def rec_10511():
    return reconcile(parse_vllm_log(load("v0_pr10511_profiling_table.log")))


def test_adopt_and_load_overheads(tmp_path: Path):
    path = tmp_path / "cal.yaml"
    rec = rec_10511().model_copy(update={"engine_version": "0.6.5"})
    written = adopt_overheads(rec, path=path, source="test")
    assert written == path
    data = yaml.safe_load(path.read_text())
    assert data["version"] == 1 and len(data["entries"]) == 1
    entry = data["entries"][0]
    assert entry["card"] == "h100-sxm" and entry["tp"] == 1
    assert entry["non_torch_memory_bytes"] == gib(1.79)
    assert entry["activation_peak_bytes"] == gib(1.26)
    assert entry["cuda_graph_memory_bytes"] is None  # not printed in this log
    assert entry["max_num_batched_tokens"] == rec.resolved.max_num_batched_tokens
    # adopting again replaces the entry; another TP is kept beside it
    adopt_overheads(rec, path=path)
    tp2 = rec.model_copy(update={"scenario": rec.scenario.model_copy(update={"tp": 2})})
    adopt_overheads(tp2, path=path)
    assert len(yaml.safe_load(path.read_text())["entries"]) == 2
    # lookup: exact version, then the same major.minor; TP class
    assert load_overheads("h100-sxm", "0.6.5", tp=1, path=path).tp == 1
    assert load_overheads("h100-sxm", "0.6.4", tp=1, path=path) is not None
    assert load_overheads("h100-sxm", "0.6.4", tp=4, path=path).tp == 2
    assert load_overheads("h100-sxm", "0.7.0", tp=1, path=path) is None
    assert load_overheads("l40s", "0.6.5", path=path) is None


def test_apply_overheads_keeps_what_the_user_set(tmp_path: Path):
    path = tmp_path / "cal.yaml"
    adopt_overheads(rec_10511(), path=path)
    cal = load_overheads("h100-sxm", "unknown", path=path)
    sc = apply_overheads(Scenario(), cal)
    assert sc.non_torch_memory_bytes == gib(1.79) and sc.cuda_graph_memory_bytes is None
    mine = apply_overheads(Scenario(non_torch_memory_bytes=123), cal)
    assert mine.non_torch_memory_bytes == 123
    assert apply_overheads(Scenario(), None) == Scenario()
    # the memory plan uses the adopted value instead of its estimate
    model = spec("meta-llama/Meta-Llama-3-8B")
    assert plan_memory(model, get_profile("h100-sxm"), sc).non_torch_bytes_per_gpu == gib(1.79)


def test_reconcile_with_calibration_matches_its_own_log(tmp_path: Path):
    path = tmp_path / "cal.yaml"
    report = parse_vllm_log(load("v0_pr10511_profiling_table.log"))
    adopt_overheads(reconcile(report), path=path)
    rec = reconcile(report, use_calibration=True, calibration_path=path)
    t = terms(rec)
    assert t["non_torch"].predicted_kind == "calibrated" and t["non_torch"].difference_pct == 0.0
    assert rec.calibration_used and "h100-sxm" in rec.calibration_used


def test_nothing_to_adopt(tmp_path: Path):
    rec = reconcile(
        parse_vllm_log(load("v1_pr12569_llama70b_w8a8.log")),
        {"weight_dtype": "int8", "gpu": "h100-sxm"},
        model="meta-llama/Llama-3.1-70B",
    )
    with pytest.raises(ConfigError, match="nothing to adopt"):
        adopt_overheads(rec, path=tmp_path / "cal.yaml")


def test_calibration_location_and_bad_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PLANNER_CALIBRATION_DIR", str(tmp_path / "cal"))
    assert overheads_path() == tmp_path / "cal" / "overheads" / "memory_overheads.yaml"
    overheads_path().parent.mkdir(parents=True)
    overheads_path().write_text("entries: [{card: 1}]\n")
    with pytest.raises(ConfigError, match="not valid"):
        load_overheads("h100-sxm", "0.6.5")


# --------------------------------------------------------------------------------------------- CLI


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_json_keys_and_overrides(capsys, tmp_path: Path):
    log = LOGS / "v0_issue10517_llama8b_rtx3090_20k.log"  # the %% header lines are simply not vLLM lines
    code, out, err = run_cli(
        capsys, "reconcile", str(log), "meta-llama/Llama-3.1-8B", "--max-model-len", "16384", "--format", "json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert {"scenario", "terms", "summary", "assumptions", "adopted_to"} <= set(data)
    assert data["scenario"]["max_model_len"] == 16384  # the flag wins over the log's 20000
    assert data["overridden"]["max_model_len"] == {"log": 20000, "given": 16384}
    names = [t["name"] for t in data["terms"]]
    assert names == [
        "weights",
        "non_torch",
        "activation_peak",
        "cuda_graphs",
        "kv_cache_memory",
        "num_gpu_blocks",
        "kv_cache_tokens",
        "max_concurrency",
    ]
    for term in data["terms"]:
        assert {"name", "predicted", "reported", "difference_pct"} <= set(term)


def test_cli_adopt_writes_the_file(capsys, tmp_path: Path):
    target = tmp_path / "cal.yaml"
    code, out, err = run_cli(
        capsys,
        "reconcile",
        str(LOGS / "v0_pr10511_profiling_table.log"),
        "--adopt",
        "--calibration-file",
        str(target),
        "--engine-version",
        "0.6.5.dev",
        "--format",
        "json",
    )
    assert code == 0, err
    assert json.loads(out)["adopted_to"] == str(target)
    assert yaml.safe_load(target.read_text())["entries"][0]["engine_version"] == "0.6.5.dev"


def test_cli_table(capsys):
    code, out, err = run_cli(capsys, "reconcile", str(LOGS / "v0_pr10511_profiling_table.log"))
    assert code == 0, err
    assert "weights" in out and "14.96 GiB" in out and "vLLM printed" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("this is not a vLLM log\nat all\n", "no vLLM startup lines"),
        (None, "no such file"),
    ],
)
def test_cli_bad_input_exits_2(capsys, tmp_path: Path, content, message):
    path = tmp_path / "server.log"
    if content is not None:
        path.write_text(content)
    code, out, err = run_cli(capsys, "reconcile", str(path))
    assert code == 2 and out == ""
    assert err.startswith("error:") and message in err and "Traceback" not in err


def test_cli_flags_a_log_of_another_model_before_the_terms(capsys):
    """An 8B log reconciled against a 70B plan is flagged before any term is read (issue 10, point 1): this
    log does not print the model's name, so the weights it loaded (15 GB against the plan's 131 GiB) say
    it; the same log against its own model is not flagged."""
    log = LOGS / "v0_issue10517_llama8b_rtx3090_20k.log"
    code, out, err = run_cli(capsys, "reconcile", str(log), "meta-llama/Llama-3.1-70B", "--format", "json")
    assert code == 0, err
    kinds = [m["kind"] for m in json.loads(out)["mismatches"]]
    assert kinds == ["weights"]
    assert "warning: not the same weights" in err
    code, out, err = run_cli(capsys, "reconcile", str(log), "meta-llama/Llama-3.1-8B", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["mismatches"] == [] and "not the same" not in err
