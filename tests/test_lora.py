"""LoRA adapters (vLLM --enable-lora): slot bytes by hand, TP sharding, the KV cache they take, their kernels
in the one step model, the flags and the adapter_config.json they read, and the export vLLM parses.

Hand counts follow vLLM 0.33.0's allocations (planner/estimate/lora.py cites each): per slot and packed
slice A [r, in], B [out, r]; column-parallel B and row-parallel A split over TP.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.cli import main
from planner.deploy.export import export_bundle
from planner.errors import ConfigError, PlannerError, ScenarioError
from planner.estimate import lora
from planner.estimate.latency import StepTimeModel
from planner.estimate.memory import plan_memory
from planner.estimate.resolve import resolve
from planner.estimate.roofline import roofline
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import LoRA, LoRAAdapter, Scenario
from planner.verify.public_records import catalog_model
from planner.verify.public_records_predict import StepOps

#: A two-layer Llama small enough to count by hand: h 64, 4 heads of 16, 2 KV heads, I 128, V 1000.
TINY = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
#: Per layer and slot at rank 8, TP1: qkv A 3*8*64 + B 8*(64+32+32), o A 8*64 + B 8*64,
#: gate_up A 2*8*64 + B 8*(2*128), down A 8*128 + B 8*64.
TINY_LAYER_ELEMENTS = 3 * 8 * 64 + 8 * 128 + 8 * 64 + 8 * 64 + 2 * 8 * 64 + 8 * 256 + 8 * 128 + 8 * 64
#: Embedding A [V, r] + B [h, r] and lm_head A [r, h] + B [V, r] (Llama lists both in embedding_modules).
TINY_EMBEDDING_ELEMENTS = 2 * (1000 * 8 + 64 * 8)


def tiny():
    return build_spec(dict(TINY), "tiny-llama")


def test_slot_bytes_equal_the_hand_count():
    model, hw = tiny(), get_profile("h100-sxm")
    res = resolve(model, hw, Scenario(lora=LoRA(max_loras=2, max_lora_rank=8)))
    assert TINY_LAYER_ELEMENTS == 8192
    expected = (2 * TINY_LAYER_ELEMENTS + TINY_EMBEDDING_ELEMENTS) * 2 * 2  # elements x bf16 x 2 slots
    assert lora.stage_lora_bytes(model, res, [range(2)]) == [expected] == [133_632]
    # pipeline stages: each holds its layer, the first the embedding's, the last the lm_head's
    half = (TINY_LAYER_ELEMENTS + TINY_EMBEDDING_ELEMENTS // 2) * 2 * 2
    assert lora.stage_lora_bytes(model, res, [range(1), range(1, 2)]) == [half, half]


def test_the_worked_example_llama_8b():
    """planner/estimate/lora.py's docstring: Llama-3.1-8B, TP1, 4 slots at rank 16 -> 369,426,432 B (352.3 MiB)."""
    model, hw = catalog_model("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm")
    plan = plan_memory(model, hw, Scenario(max_model_len=8192, lora=LoRA(max_loras=4)), suggest=False)
    assert plan.lora_bytes_per_gpu == 369_426_432
    assert plan.lora_host_bytes_per_worker == 369_426_432  # 4 cached adapters (default max_loras), whole, TP1


def test_an_architecture_without_embedding_lora_has_none():
    """Qwen2's vLLM class declares no embedding_modules: only the layers' linears get slots."""
    model = catalog_model("Qwen/Qwen2.5-7B")
    assert not lora.has_embedding_lora(model) and lora.embedding_slot_elements(model, 16) == (0, 0)


def test_tensor_parallel_halves_b_of_column_layers_and_a_of_row_layers():
    layer = tiny().layers[0]
    one, two = {x.name: x for x in layer.lora_linears(1)}, {x.name: x for x in layer.lora_linears(2)}
    for name in ("qkv_proj", "gate_up_proj"):  # column-parallel: A whole on every rank, B split
        assert two[name].a_elements(8, 2) == one[name].a_elements(8, 1)
        assert two[name].b_elements(8, 2) == one[name].b_elements(8, 1) / 2
    for name in ("o_proj", "down_proj"):  # row-parallel: A split, B whole
        assert two[name].a_elements(8, 2) == one[name].a_elements(8, 1) / 2
        assert two[name].b_elements(8, 2) == one[name].b_elements(8, 1)
    # KV heads replicated past TP = K: at TP4 each rank caches 1 of the 2 KV heads' widths (max(1, K // tp))
    four = {x.name: x for x in layer.lora_linears(4)}
    assert four["qkv_proj"].out_slices == (16.0, 16.0, 16.0)


def test_moe_experts_get_slots_per_expert():
    """FusedMoEWithLoRA: every expert's w13 (2 slices) and w2 adapters, the gated MLP's rule x E."""
    model = catalog_model("mistralai/Mixtral-8x7B-v0.1")
    moe = model.layers[0].ffn
    linears = {x.name: x for x in moe.lora_linears(1)}
    h, I, E, r = moe.hidden_size, moe.expert_intermediate_size, moe.num_experts, 16
    expert = sum(linears[n].a_elements(r, 1) + linears[n].b_elements(r, 1) for n in linears if n.startswith("experts"))
    assert expert == E * (2 * r * h + r * 2 * I + r * I + r * h)
    assert linears["gate"].a_elements(r, 1) + linears["gate"].b_elements(r, 1) == r * h + r * E


def test_kv_capacity_drops_by_the_lora_bytes():
    model, hw = catalog_model("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm")
    base = Scenario(max_model_len=8192)
    off = plan_memory(model, hw, base, suggest=False)
    on = plan_memory(model, hw, base.model_copy(update={"lora": LoRA(max_loras=8, max_lora_rank=64)}), suggest=False)
    assert on.lora_bytes_per_gpu and on.lora_bytes_per_gpu > 0
    assert off.kv_cache_bytes_per_gpu - on.kv_cache_bytes_per_gpu == on.lora_bytes_per_gpu
    lost_blocks = off.num_gpu_blocks - on.num_gpu_blocks
    assert lost_blocks == pytest.approx(on.lora_bytes_per_gpu / on.bytes_per_block, abs=1)
    assert on.kv_cache_tokens < off.kv_cache_tokens
    term = next(t for t in on.terms if t.name == "lora")
    assert (term.bytes, term.kind) == (on.lora_bytes_per_gpu, "exact")
    assert sum(t.bytes for t in on.terms) == hw.memory_bytes


def test_lora_off_changes_nothing_in_the_plan_json():
    """No lora key, term or resolved field without --enable-lora (the golden outputs stay as recorded)."""
    model, hw = tiny(), get_profile("h100-sxm")
    plan = json.loads(plan_memory(model, hw, Scenario(), suggest=False).model_dump_json())
    assert not [k for k in plan if "lora" in k] and "lora" not in plan["resolved"]
    assert all(t["name"] != "lora" for t in plan["terms"])
    assert "lora" not in json.loads(Scenario().model_dump_json())


def test_the_step_gets_slower_by_the_adapter_reads_at_small_batch():
    model, hw = catalog_model("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm")
    base = Scenario(max_model_len=8192)
    on_sc = base.model_copy(update={"lora": LoRA(max_loras=4)})
    off = roofline(model, hw, base, "decode", 1, 1024)
    on = roofline(model, hw, on_sc, "decode", 1, 1024)
    rows = [r for r in on.layers if "/ lora." in r.name]
    assert len(rows) == 5  # qkv, o, gate_up, down per layer group, and the lm_head
    assert all(r.kind == "gemm" for r in rows)
    # one request reads one adapter: every layer's slot at rank 16 and the lm_head's (not the embedding's gather)
    _, head = lora.embedding_slot_elements(model, 16)
    expected = (32 * lora.layer_slot_elements(model.layers[0], 16, 1) + head) * 2
    reads = sum(
        op.weight_bytes * (1 if op.name.startswith("lora.lm_head") else 32) for op in _lora_ops(model, hw, on_sc, 1)
    )
    assert reads == pytest.approx(expected, rel=1e-12)
    assert on.total_bytes - off.total_bytes == pytest.approx(sum(r.bytes * r.count for r in rows), rel=1e-12)
    assert on.total_seconds > off.total_seconds
    # the adapters read grow with the requests up to --max-loras, then stop
    reads = [sum(op.weight_bytes for op in _lora_ops(model, hw, on_sc, b)) for b in (1, 2, 4, 8, 64)]
    assert reads[1] == pytest.approx(2 * reads[0]) and reads[2] == pytest.approx(4 * reads[0])
    assert reads[3] == pytest.approx(reads[2]) and reads[4] == pytest.approx(reads[2])


def _lora_ops(model, hw, sc, batch):
    """The LoRA ops of one decode step at ``batch`` (one per layer group, and the lm_head's)."""
    from planner.estimate.roofline import model_ops, step_shape

    shape = step_shape(model, resolve(model, hw, sc), "decode", batch, 1024)
    ops = [op for op in model.layers[0].ops(shape) + model_ops(model, shape) if op.name.startswith("lora.")]
    return ops


@pytest.mark.parametrize(
    "repo,tp", [("meta-llama/Llama-3.1-8B", 2), ("Qwen/Qwen3-30B-A3B", 2), ("deepseek-ai/DeepSeek-V2-Lite", 1)]
)
def test_every_form_of_the_step_cost_agrees_with_lora_on(repo, tp):
    """Roofline, StepTimeModel (scalar and arrays) and StepOps give the same seconds with LoRA on, past the slots."""
    model, hw = catalog_model(repo), get_profile("h100-sxm")
    sc = Scenario(tp=tp, lora=LoRA(max_loras=3, max_lora_rank=32))
    stm = StepTimeModel(model, hw, sc)
    decodes = [(1, 128), (2, 3000), (13, 3000), (600, 1000)]
    ref = np.asarray([roofline(model, hw, sc, "decode", b, c).total_seconds for b, c in decodes])
    arrays = stm.decode_seconds(np.asarray([b for b, _ in decodes]), np.asarray([c for _, c in decodes]))
    scalar = [
        stm.step_seconds(prefill_tokens=0, prefill_attention_pairs=0, decode_seqs=b, decode_kv_tokens=b * c)
        for b, c in decodes
    ]
    single = [StepOps(model, hw, sc, "decode", b, c).seconds(stm.eff) for b, c in decodes]
    for got in (arrays, np.asarray(scalar), np.asarray(single)):
        np.testing.assert_allclose(got, ref, rtol=1e-9)
    q = 300
    pre = stm.step_seconds(prefill_tokens=q, prefill_attention_pairs=q * (q + 1) / 2, decode_seqs=0, decode_kv_tokens=0)
    assert pre == pytest.approx(roofline(model, hw, sc, "prefill", 1, q).total_seconds, rel=1e-9)


def test_a_block_whose_lora_is_not_modelled_is_refused():
    model, hw = catalog_model("ai21labs/AI21-Jamba-1.5-Mini"), get_profile("h100-sxm")
    with pytest.raises(ScenarioError, match="LoRA buffers of a mamba block"):
        plan_memory(model, hw, Scenario(tp=2, lora=LoRA()), suggest=False)


# ------------------------------------------------------------------------------------ flags


@pytest.mark.parametrize(
    "flags,code,message",
    [
        (["--enable-lora", "--max-lora-rank", "12"], 2, "--max-lora-rank: invalid choice: 12 (choose from 1, 8, 16"),
        (["--enable-lora", "--max-loras", "0"], 2, "--max-loras must be greater than or equal to 1 (got 0)"),
        (
            ["--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"],
            2,
            "--max-cpu-loras 2 is fewer than --max-loras 4",
        ),
        (["--max-loras", "4"], 2, "--max-loras given without --enable-lora"),
        (["--enable-lora", "--lora-dtype", "fp8"], 2, "--lora-dtype: invalid choice: 'fp8'"),
    ],
)
def test_bad_flag_values_are_refused_naming_the_flag(capsys, flags, code, message):
    got = main(["plan", "llama3.1-8b", "--source", "catalog", "--max-model-len", "8192", *flags])
    err = capsys.readouterr().err
    assert got == code, err
    assert message in err


def test_the_plan_json_carries_the_lora_bytes(capsys):
    argv = ["plan", "llama3.1-8b", "--source", "catalog", "--max-model-len", "8192", "--format", "json"]
    assert main([*argv, "--enable-lora", "--max-loras", "4", "--max-cpu-loras", "8"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["lora_bytes_per_gpu"] == 369_426_432
    assert plan["lora_host_bytes_per_worker"] == 2 * 369_426_432  # 8 adapters cached on the host, no GPU memory


def test_a_rank_outside_vllms_choices_is_refused_by_the_core():
    with pytest.raises(ScenarioError, match=r"--max-lora-rank 24 .*1, 8, 16, 32, 64, 128, 256, 320, 512"):
        LoRA(max_lora_rank=24)


# ------------------------------------------------------------------------------ adapter_config.json

PEFT = {"peft_type": "LORA", "r": 64, "lora_alpha": 128, "target_modules": ["q_proj", "v_proj"], "bias": "none"}


def test_an_adapter_above_max_lora_rank_is_refused(tmp_path, capsys):
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps(PEFT))
    adapter = lora.load_adapter_config(tmp_path)  # the folder holding it
    assert adapter == LoRAAdapter(r=64, lora_alpha=128.0, target_modules=("q_proj", "v_proj"))
    with pytest.raises(ScenarioError, match="rank r = 64 exceeds --max-lora-rank 16") as err:
        LoRA(adapter=adapter)
    assert "--max-lora-rank 64" in (err.value.hint or "")
    assert LoRA(max_lora_rank=64, adapter=adapter).adapter == adapter
    code = main(["plan", "llama3.1-8b", "--source", "catalog", "--enable-lora", "--lora-config", str(path)])
    assert code == 2 and "exceeds --max-lora-rank 16" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text,message",
    [
        (json.dumps({"r": 8, "lora_alpha": 16}), "missing key 'target_modules'"),
        (json.dumps({**PEFT, "r": 0}), "'r' (and rank_pattern) must be positive integers, got 0"),
        (json.dumps({**PEFT, "rank_pattern": {"q_proj": 1024}}), "above vLLM's largest --max-lora-rank, 512"),
        (json.dumps({**PEFT, "lora_alpha": "big"}), "'lora_alpha' must be a number"),
        (json.dumps({**PEFT, "target_modules": []}), "'target_modules' must be a module name or a list"),
        (json.dumps([1, 2]), "expected a JSON object"),
        ('{"r": ' + "9" * 5000 + "}", "adapter_config.json"),
    ],
)
def test_a_bad_adapter_config_is_refused_naming_the_key(text, message):
    with pytest.raises(PlannerError) as err:
        lora.read_adapter_config(text)
    assert isinstance(err.value, ConfigError) and message in str(err.value)


def test_rank_pattern_sets_the_rank_checked_and_all_linear_is_accepted():
    adapter = lora.read_adapter_config(
        json.dumps({**PEFT, "r": 8, "rank_pattern": {"o_proj": 32}, "target_modules": "all-linear"})
    )
    assert (adapter.r, adapter.target_modules) == (32, ("all-linear",))


def test_an_oversized_or_missing_lora_config_file_is_refused(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (lora.MAX_ADAPTER_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than 1,048,576 bytes"):
        lora.load_adapter_config(big)
    with pytest.raises(ConfigError, match="cannot read it"):
        lora.load_adapter_config(tmp_path / "nope.json")


# ----------------------------------------------------------------------------------- export


def _export(**lora_fields):
    loaded = load_config("meta-llama/Llama-3.1-8B")
    sc = Scenario(max_model_len=8192, lora=LoRA(**lora_fields))
    return export_bundle(build_spec(loaded.config, loaded.name), get_profile(sc.gpu), sc, loaded=loaded)


def test_the_vllm_export_carries_the_lora_flags():
    bundle = _export(max_loras=4, max_lora_rank=32, max_cpu_loras=8)
    cmd = bundle.artefact("latency", "vllm-cmd").text
    for flag in ("--enable-lora", "--max-loras 4", "--max-lora-rank 32", "--max-cpu-loras 8"):
        assert flag in cmd
    config = bundle.artefact("throughput", "vllm-yaml").text
    assert "enable-lora: true" in config and "max-lora-rank: 32" in config
    sglang = bundle.artefact("latency", "sglang").text
    assert "LoRA serving is written for vLLM only" in sglang and "\n  --enable-lora" not in sglang


def test_vllms_own_parser_accepts_the_lora_export(tmp_path):
    """tools/check_exports.py (vLLM 0.33.0's `vllm serve` parser, every key honoured, create_engine_config)."""
    from tests.test_export_engines import engines_available, run_checker, write

    engines_available()
    bundle = _export(max_loras=4, max_lora_rank=64, max_cpu_loras=8, lora_dtype="bfloat16")
    files = [write(tmp_path, a.filename, a.text) for a in bundle.artefacts if a.target in ("vllm-yaml", "vllm-cmd")]
    rows = run_checker((files, {"meta-llama/Llama-3.1-8B"}))
    failed = [f"{r['file']}: {r['check']}: {r['error']}" for r in rows if not r["ok"]]
    assert not failed, "\n".join(failed)
    assert {"vllm serve --config (every key honoured)", "vllm create_engine_config"} <= {r["check"] for r in rows}
