"""config.json validation: every bad value is refused with its key named, every real config passes unchanged.

Three layers: a table of bad configs (issue 9's cases and more) with the fragment each message must
hold; invariants over the bundled catalog (validation changes no value and no parameter count,
tests/golden/catalog_params.json from transformers on the meta device); a seeded mutation run
where every case is a spec with sane counts or a ConfigError, never another exception.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from planner.errors import ConfigError, PlannerError
from planner.model import validation
from planner.model.families import build_spec

CATALOG = Path(__file__).resolve().parent.parent / "planner" / "model" / "catalog"
GOLDEN = json.loads((Path(__file__).parent / "golden" / "catalog_params.json").read_text())["models"]


def catalog(file: str) -> dict:
    return json.loads((CATALOG / file).read_text())


LLAMA = catalog("meta-llama--Meta-Llama-3-8B.json")  # 32 layers, 32 heads, 8 KV heads, h 4096
MIXTRAL = catalog("mistralai--Mixtral-8x7B-v0.1.json")  # 8 experts, top-2
QWEN3_MOE = catalog("Qwen--Qwen3-30B-A3B.json")
QWEN2_MOE = catalog("Qwen--Qwen2-57B-A14B.json")
DEEPSEEK = catalog("deepseek-ai--DeepSeek-V3.json")
GEMMA3 = catalog("google--gemma-3-1b-pt.json")
GEMMA3_MM = catalog("google--gemma-3-4b-it.json")
MAMBA = catalog("state-spaces--mamba-130m-hf.json")
JAMBA = catalog("ai21labs--AI21-Jamba-1.5-Mini.json")
FALCON_180B = catalog("tiiuae--falcon-180B.json")
GPT2 = catalog("openai-community--gpt2.json")
OPT = catalog("facebook--opt-350m.json")
GPT_OSS = catalog("openai--gpt-oss-20b.json")
MAMBA2 = catalog("mistralai--Mamba-Codestral-7B-v0.1.json")  # 128 SSM heads x 64 = 2 x 4096, 8 groups
QWEN3_NEXT = catalog("Qwen--Qwen3-Next-80B-A3B-Instruct.json")  # 16 key heads, 32 value heads
LLAMA4_SCOUT = catalog("RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json")


def in_text(raw: dict, **fields) -> dict:
    """``raw`` with ``fields`` set in its text_config."""
    return {**raw, "text_config": {**raw["text_config"], **fields}}


FP8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128}
CT = {
    "quant_method": "compressed-tensors",
    "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}},
}


def with_quant(**fields) -> dict:
    return {**LLAMA, "quantization_config": fields}


# (case, config, fragment the message must hold: the key, and where useful the range or relation)
BAD_CONFIGS = [
    # issue 9, item 2: silent nonsense
    (
        "negative FFN",
        {**LLAMA, "intermediate_size": -14336},
        "'intermediate_size' should be an integer from 1 to 1,048,576",
    ),
    ("negative heads", {**LLAMA, "num_attention_heads": -32}, "'num_attention_heads'"),
    ("negative KV heads", {**LLAMA, "num_key_value_heads": -8}, "'num_key_value_heads'"),
    ("Mixtral without experts", {**MIXTRAL, "num_local_experts": 0}, "'num_local_experts' should be an integer from 1"),
    ("Mixtral top-0", {**MIXTRAL, "num_experts_per_tok": 0}, "'num_experts_per_tok'"),
    (
        "top-k above experts",
        {**MIXTRAL, "num_experts_per_tok": 9},
        "'num_experts_per_tok' is 9 but 'num_local_experts' is 8",
    ),
    ("Qwen3-MoE without experts", {**QWEN3_MOE, "num_experts": 0}, "'num_experts'"),
    ("DeepSeek without experts", {**DEEPSEEK, "n_routed_experts": 0}, "'n_routed_experts'"),
    (
        "7 KV heads for 32",
        {**LLAMA, "num_key_value_heads": 7},
        "'num_key_value_heads' is 7, which does not divide 'num_attention_heads' (32)",
    ),
    ("5 KV heads for 32", {**LLAMA, "num_key_value_heads": 5}, "e.g. 4 or 8"),
    (
        "more KV heads than heads",
        {**LLAMA, "num_key_value_heads": 64},
        "'num_key_value_heads' is 64, which does not divide",
    ),
    ("Falcon KV heads", {**FALCON_180B, "num_kv_heads": 7}, "'num_kv_heads' is 7"),
    ("text_config a string", {"model_type": "gemma3", "text_config": "oops"}, "'text_config' should be a JSON object"),
    ("text_config a list", {**GEMMA3_MM, "text_config": [1, 2]}, "'text_config' should be a JSON object"),
    (
        "head size not derivable",
        {**LLAMA, "hidden_size": 4100},
        "'hidden_size' (4100) is not a multiple of 'num_attention_heads' (32)",
    ),
    ("head_dim zero", {**LLAMA, "head_dim": 0}, "'head_dim'"),
    ("head_dim negative", {**LLAMA, "head_dim": -128}, "'head_dim'"),
    (
        "layer_types too long",
        {**LLAMA, "layer_types": ["full_attention"] * 33},
        "layer_types lists 33 layers but num_hidden_layers is 32",
    ),
    (
        "layer_types unknown kind",
        {**LLAMA, "layer_types": ["global"] * 32},
        "'layer_types[0]' should be one of full_attention, sliding_attention",
    ),
    ("layer_types a string", {**LLAMA, "layer_types": "full_attention"}, "'layer_types' should be a list"),
    # issue 9, item 4: uncaught exceptions before
    ("infinite width", {**LLAMA, "hidden_size": float("inf")}, "'hidden_size' should be an integer from 1 to 131,072"),
    (
        "JSON Infinity",
        json.loads(json.dumps(LLAMA).replace('"hidden_size": 4096', '"hidden_size": Infinity')),
        "'hidden_size'",
    ),
    ("-Infinity", {**LLAMA, "vocab_size": float("-inf")}, "'vocab_size'"),
    ("NaN", {**LLAMA, "num_hidden_layers": float("nan")}, "'num_hidden_layers'"),
    ("1e300", {**LLAMA, "intermediate_size": 1e300}, "'intermediate_size'"),
    (
        "quantization_config a string",
        {**LLAMA, "quantization_config": "fp8"},
        "'quantization_config' should be a JSON object",
    ),
    (
        "quantization_config a list",
        {**LLAMA, "quantization_config": ["fp8"]},
        "'quantization_config' should be a JSON object",
    ),
    (
        "quantization_config false",
        {**LLAMA, "quantization_config": False},
        "'quantization_config' should be a JSON object",
    ),
    ("compression_config a number", {**LLAMA, "compression_config": 8}, "'compression_config' should be a JSON object"),
    ("FFN zero", {**LLAMA, "intermediate_size": 0}, "'intermediate_size'"),
    (
        "5,000-digit integer",
        {**LLAMA, "hidden_size": 10**5000 - 1},
        "'hidden_size' should be an integer from 1 to 131,072 (the model width), got a 5,000-digit integer",
    ),
    (
        "fp8 block of one",
        with_quant(quant_method="fp8", weight_block_size=[128]),
        "'quantization_config.weight_block_size' should be a pair",
    ),
    (
        "fp8 block zero",
        with_quant(quant_method="fp8", weight_block_size=[128, 0]),
        "'quantization_config.weight_block_size[1]'",
    ),
    (
        "fp8 block text",
        with_quant(quant_method="fp8", weight_block_size="128x128"),
        "'quantization_config.weight_block_size' should be a list",
    ),
    (
        "fp8 block too long",
        with_quant(quant_method="fp8", weight_block_size=[128] * 3),
        "'quantization_config.weight_block_size'",
    ),
    # issue 9, item 5: unbounded work
    (
        "a million layers",
        {**LLAMA, "num_hidden_layers": 1_000_000},
        "'num_hidden_layers' should be an integer from 1 to 1,000",
    ),
    ("ten million layers", {**LLAMA, "num_hidden_layers": 10**7}, "'num_hidden_layers'"),
    ("1,001 layers", {**LLAMA, "num_hidden_layers": 1001}, "'num_hidden_layers'"),
    ("width above the bound", {**LLAMA, "hidden_size": 131_072 * 2, "head_dim": 128}, "'hidden_size'"),
    ("vocab above 4M", {**LLAMA, "vocab_size": 5_000_000}, "'vocab_size' should be an integer from 1 to 4,194,304"),
    ("experts above 4,096", {**MIXTRAL, "num_local_experts": 10_000}, "'num_local_experts'"),
    (
        "context above 100M",
        {**LLAMA, "max_position_embeddings": 10**9},
        "'max_position_embeddings' should be an integer from 1 to 100,000,000",
    ),
    (
        "rope factor to 10^10 tokens",
        {**LLAMA, "max_position_embeddings": 10**7, "rope_scaling": {"rope_type": "linear", "factor": 1000}},
        "'max_position_embeddings x rope_scaling.factor'",
    ),
    (
        "mlp_only_layers of a million",
        {**QWEN2_MOE, "mlp_only_layers": list(range(10**6))},
        "'mlp_only_layers' lists 1,000,000 entries",
    ),
    # missing keys
    ("no vocab_size", {k: v for k, v in LLAMA.items() if k != "vocab_size"}, "lacks 'vocab_size'"),
    ("no hidden_size", {k: v for k, v in LLAMA.items() if k != "hidden_size"}, "hidden_size"),
    ("no MLA rank", {k: v for k, v in DEEPSEEK.items() if k != "kv_lora_rank"}, "kv_lora_rank"),
    ("Mixtral without top-k", {k: v for k, v in MIXTRAL.items() if k != "num_experts_per_tok"}, "num_experts_per_tok"),
    # strings, booleans, lists, objects where numbers go
    (
        "width as a string",
        {**LLAMA, "hidden_size": "4096"},
        "'hidden_size' should be an integer from 1 to 131,072 (the model width), got '4096' (a string)",
    ),
    (
        "layers true",
        {**LLAMA, "num_hidden_layers": True},
        "'num_hidden_layers' should be an integer from 1 to 1,000 (the number of decoder layers; a decoder needs at "
        "least one layer), got True (a boolean)",
    ),
    ("width 4096.5", {**LLAMA, "hidden_size": 4096.5}, "'hidden_size'"),
    ("width as a list", {**LLAMA, "hidden_size": [4096]}, "'hidden_size'"),
    ("width as an object", {**LLAMA, "hidden_size": {"value": 4096}}, "'hidden_size'"),
    ("context as a string", {**LLAMA, "max_position_embeddings": "8k"}, "'max_position_embeddings'"),
    ("context negative", {**LLAMA, "max_position_embeddings": -1}, "'max_position_embeddings'"),
    ("sliding window negative", {**GEMMA3, "sliding_window": -1}, "'sliding_window' should be an integer from 0"),
    ("Gemma 3 pattern zero", {**GEMMA3, "sliding_window_pattern": 0}, "'sliding_window_pattern'"),
    ("Qwen2-MoE step zero", {**QWEN2_MOE, "decoder_sparse_step": 0}, "'decoder_sparse_step'"),
    ("mlp_only_layers a string", {**QWEN2_MOE, "mlp_only_layers": "1,2"}, "'mlp_only_layers' should be a list"),
    ("mlp_only_layers negative", {**QWEN2_MOE, "mlp_only_layers": [-1]}, "'mlp_only_layers[0]'"),
    ("Mamba state zero", {**MAMBA, "state_size": 0}, "'state_size'"),
    ("Mamba expand negative", {**MAMBA, "expand": -2}, "'expand'"),
    ("Mamba time_step_rank word", {**MAMBA, "time_step_rank": "fast"}, "'time_step_rank'"),
    ("Jamba period zero", {**JAMBA, "attn_layer_period": 0}, "'attn_layer_period'"),
    ("MLA rank negative", {**DEEPSEEK, "kv_lora_rank": -1}, "'kv_lora_rank'"),
    ("MLA q rank zero", {**DEEPSEEK, "q_lora_rank": 0}, "'q_lora_rank'"),
    ("GPT-2 n_inner negative", {**GPT2, "n_inner": -1}, "'n_inner'"),
    ("OPT projection zero", {**OPT, "word_embed_proj_dim": 0}, "'word_embed_proj_dim'"),
    ("gpt-oss top-k a string", {**GPT_OSS, "num_experts_per_tok": "4"}, "'num_experts_per_tok'"),
    ("tie as a string", {**LLAMA, "tie_word_embeddings": "false"}, "'tie_word_embeddings' should be true or false"),
    ("bias as a number", {**LLAMA, "attention_bias": 1}, "'attention_bias' should be true or false"),
    ("model_type a number", {**LLAMA, "model_type": 5}, "'model_type' should be a string"),
    ("torch_dtype a number", {**LLAMA, "torch_dtype": 16}, "'torch_dtype' should be a string"),
    ("rope_scaling a string", {**LLAMA, "rope_scaling": "linear"}, "'rope_scaling' should be a JSON object"),
    (
        "rope factor infinite",
        {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": float("inf")}},
        "'rope_scaling.factor'",
    ),
    ("rope factor a string", {**LLAMA, "rope_scaling": {"type": "dynamic", "factor": "8"}}, "'rope_scaling.factor'"),
    # families added with issue 9, item 3: their keys are in the table too
    ("Mamba-2 groups", {**MAMBA2, "n_groups": 3}, "'n_groups' (3) does not divide 'num_heads' (128)"),
    ("Mamba-2 heads x head_dim", {**MAMBA2, "num_heads": 100}, "'num_heads' (100) x 'head_dim' (64) is 6400"),
    ("Mamba-2 heads zero", {**MAMBA2, "num_heads": 0}, "'num_heads'"),
    (
        "Qwen3-Next linear heads",
        {**QWEN3_NEXT, "linear_num_key_heads": 5},
        "'linear_num_key_heads' (5) does not divide 'linear_num_value_heads' (32)",
    ),
    ("Qwen3-Next linear head size", {**QWEN3_NEXT, "linear_key_head_dim": -128}, "'linear_key_head_dim'"),
    (
        "Qwen3-Next interval zero",
        {**QWEN3_NEXT, "full_attention_interval": 0, "layer_types": None},
        "'full_attention_interval'",
    ),
    (
        "Llama 4 MoE step zero",
        in_text(LLAMA4_SCOUT, interleave_moe_layer_step=0, moe_layers=None),
        "'interleave_moe_layer_step'",
    ),
    ("Llama 4 chunk negative", in_text(LLAMA4_SCOUT, attention_chunk_size=-8192), "'attention_chunk_size'"),
    (
        "Llama 4 no_rope_layers short",
        in_text(LLAMA4_SCOUT, no_rope_layers=[1, 1, 0]),
        "no_rope_layers lists 3 layers but num_hidden_layers is 48",
    ),
    ("Llama 4 no_rope_layers of 2", in_text(LLAMA4_SCOUT, no_rope_layers=[2] * 48), "'no_rope_layers[0]'"),
    ("Llama 4 moe_layers out of range", in_text(LLAMA4_SCOUT, moe_layers=[10**6]), "'moe_layers[0]'"),
    (
        "Llama 4 fp8 bits",
        {
            **LLAMA4_SCOUT,
            "quantization_config": {
                **LLAMA4_SCOUT["quantization_config"],
                "config_groups": {
                    "group_0": {
                        **LLAMA4_SCOUT["quantization_config"]["config_groups"]["group_0"],
                        "weights": {"num_bits": 6, "type": "float"},
                    }
                },
            },
        },
        "'quantization_config.config_groups.group_0.weights.num_bits'",
    ),
    # nested garbage
    (
        "garbage inside text_config",
        {**GEMMA3_MM, "text_config": {**GEMMA3_MM["text_config"], "hidden_size": {"a": [1]}}},
        "'hidden_size'",
    ),
    (
        "inherited quantization garbage",
        {**GEMMA3_MM, "quantization_config": "int4"},
        "'quantization_config' should be a JSON object",
    ),
    (
        "text_config's own rope_scaling",
        {**GEMMA3_MM, "text_config": {**GEMMA3_MM["text_config"], "rope_scaling": 8}},
        "'rope_scaling'",
    ),
    # quantization_config fields
    ("GPTQ 5 bits", with_quant(**{**GPTQ, "bits": 5}), "'quantization_config.bits' should be one of 2, 3, 4, 8"),
    ("GPTQ bits a string", with_quant(**{**GPTQ, "bits": "4"}), "'quantization_config.bits'"),
    ("AWQ w_bit zero", with_quant(quant_method="awq", w_bit=0, q_group_size=128), "'quantization_config.w_bit'"),
    ("GPTQ group zero", with_quant(**{**GPTQ, "group_size": 0}), "'quantization_config.group_size'"),
    ("GPTQ group a string", with_quant(**{**GPTQ, "group_size": "128"}), "'quantization_config.group_size'"),
    ("quant_method a list", with_quant(quant_method=["fp8"]), "'quantization_config.quant_method' should be a string"),
    ("producer a string", with_quant(producer="modelopt"), "'quantization_config.producer' should be a JSON object"),
    (
        "ModelOpt algo a number",
        with_quant(quant_method="modelopt", quantization={"quant_algo": 4}),
        "'quantization_config.quantization.quant_algo'",
    ),
    (
        "exclusions a string",
        with_quant(**FP8, modules_to_not_convert="lm_head"),
        "'quantization_config.modules_to_not_convert' should be a list",
    ),
    ("exclusions of numbers", with_quant(**FP8, ignored_layers=[1, 2]), "'quantization_config.ignored_layers[0]'"),
    (
        "kv scheme a string",
        with_quant(**FP8, kv_cache_scheme="fp8"),
        "'quantization_config.kv_cache_scheme' should be a JSON object",
    ),
    (
        "compressed-tensors groups a string",
        with_quant(quant_method="compressed-tensors", config_groups="w4a16"),
        "'quantization_config.config_groups' should be a JSON object",
    ),
    (
        "compressed-tensors group a list",
        with_quant(quant_method="compressed-tensors", config_groups={"g": [1]}),
        "'quantization_config.config_groups.g' should be a JSON object",
    ),
    (
        "compressed-tensors 7 bits",
        with_quant(**{**CT, "config_groups": {"g": {"weights": {"num_bits": 7}}}}),
        "'quantization_config.config_groups.g.weights.num_bits' should be one of 2, 3, 4, 8",
    ),
    (
        "compressed-tensors strategy",
        with_quant(**{**CT, "config_groups": {"g": {"weights": {"strategy": "diagonal"}}}}),
        "'quantization_config.config_groups.g.weights.strategy'",
    ),
    (
        "compressed-tensors group without size",
        with_quant(**{**CT, "config_groups": {"g": {"weights": {"strategy": "group"}}}}),
        "'quantization_config.config_groups.g.weights.group_size'",
    ),
    (
        "compressed-tensors symmetric a string",
        with_quant(**{**CT, "config_groups": {"g": {"weights": {"symmetric": "yes"}}}}),
        "'quantization_config.config_groups.g.weights.symmetric' should be true or false",
    ),
    (
        "bitsandbytes quant type",
        with_quant(quant_method="bitsandbytes", load_in_4bit=True, bnb_4bit_quant_type="int3"),
        "'quantization_config.bnb_4bit_quant_type' should be one of nf4, fp4",
    ),
    (
        "bitsandbytes 8-bit a string",
        with_quant(quant_method="bitsandbytes", load_in_8bit="yes"),
        "'quantization_config.load_in_8bit'",
    ),
]


@pytest.mark.parametrize("case,raw,fragment", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_is_refused_naming_its_key(case, raw, fragment):
    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        build_spec(raw, "bad-model")
    assert fragment in str(info.value), str(info.value)
    assert str(info.value).startswith("bad-model: ")
    assert time.perf_counter() - start < 2.0  # refused before any per-layer work


# ------------------------------------------------------------------------------ invariants

CATALOG_FILES = sorted(p.name for p in CATALOG.glob("*.json"))


def _rule_keys_present(raw: dict) -> list[tuple[str, object]]:
    """(key, value) of every key with a rule, at the top and in a text_config."""
    parts = [raw] + [raw[k] for k in ("text_config", "language_config", "llm_config") if isinstance(raw.get(k), dict)]
    return [(k, v) for part in parts for k, v in part.items() if k in validation.RULES and v is not None]


@pytest.mark.parametrize("file", CATALOG_FILES)
def test_every_catalog_config_passes_unchanged(file):
    """Validation changes no value of a real config, and the counts stay transformers' (golden)."""
    raw = catalog(file)
    for key, value in _rule_keys_present(raw):
        assert validation.check_value(key, value) == value, key
    spec = build_spec(raw, file)
    golden = GOLDEN.get(file.removesuffix(".json").replace("--", "/"))
    if golden and golden.get("total_params") is not None:
        assert spec.total_params == golden["total_params"]
        if golden.get("active_params") is not None:
            assert spec.active_params == golden["active_params"]
    assert 0 < spec.active_params <= spec.total_params
    assert spec.kv_bytes_per_token() >= 0


def test_whole_floats_are_integers_and_give_the_same_counts():
    """4096.0 where 4096 goes (some exporters write floats) is accepted and counts the same."""
    as_floats = {**LLAMA, "hidden_size": 4096.0, "num_hidden_layers": 32.0, "num_key_value_heads": 8.0}
    assert build_spec(as_floats, "f").total_params == build_spec(LLAMA, "i").total_params == 8_030_261_248


def test_the_bounds_themselves_are_accepted():
    """The largest allowed values build (and quickly): the bounds refuse only what no real model has."""
    start = time.perf_counter()
    spec = build_spec(
        {**LLAMA, "num_hidden_layers": validation.MAX_LAYERS, "max_position_embeddings": validation.MAX_CONTEXT_TOKENS},
        "edge",
    )
    assert spec.num_layers == 1_000 and spec.max_position_embeddings == 100_000_000
    assert time.perf_counter() - start < 5.0
    assert (
        build_spec({**MIXTRAL, "num_experts_per_tok": 8}, "all").active_params == build_spec(MIXTRAL, "m").total_params
    )


def test_every_rule_names_its_bound_and_real_models_stay_far_below_it():
    """Each integer rule's maximum is above the largest value any catalog config has for its keys."""
    for file in CATALOG_FILES:
        for key, value in _rule_keys_present(catalog(file)):
            rule = validation.RULES[key]
            if rule.kind == "int" and isinstance(value, int) and not isinstance(value, bool):
                assert rule.minimum <= value <= rule.maximum, (file, key)
    for rule in validation.RULE_TABLE:
        assert rule.minimum <= rule.maximum and rule.keys


def test_every_block_field_reads_validated_keys():
    """Nothing a family read for a real model escaped its rule: every read key is in cfg.read, checked."""
    from planner.model.families import FAMILIES, Cfg, text_config

    raw, _ = text_config(DEEPSEEK)
    family = FAMILIES[raw["model_type"]]
    cfg = Cfg(raw, family.defaults)
    family.ffn(cfg, 5)
    family.attention(cfg, 5, None)
    assert {"n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank", "q_lora_rank"} <= set(
        cfg.read
    )


# ------------------------------------------------------------------------- seeded mutations

HOSTILE = [
    -1,
    0,
    1,
    3,
    7,
    2**31,
    10**7,
    10**40,
    -(10**40),
    1.5,
    4096.0,
    float("inf"),
    float("-inf"),
    float("nan"),
    True,
    False,
    None,
    "",
    "8",
    "auto",
    [],
    [128],
    [1, 2, 3],
    {},
    {"a": 1},
    "x" * 200,
]
MUTATION_CASES = int(os.environ.get("PLANNER_FUZZ_CASES", "600"))


def _mutate(rng: random.Random, raw: dict) -> dict:
    """One to three keys (top level or text_config) set to a hostile value."""
    out = json.loads(json.dumps(raw))
    target = out["text_config"] if isinstance(out.get("text_config"), dict) and rng.random() < 0.7 else out
    keys = sorted(target) + ["quantization_config", "layer_types", "head_dim", "num_key_value_heads"]
    for _ in range(rng.randint(1, 3)):
        target[rng.choice(keys)] = rng.choice(HOSTILE)
    return out


def test_mutated_configs_give_a_sane_spec_or_a_config_error():
    """Seeded: catalog configs x hostile values. Never another exception, a negative count or a slow case.

    PLANNER_FUZZ_CASES sets the number of cases (600 by default).
    """
    rng = random.Random(9)
    configs = [catalog(f) for f in CATALOG_FILES]
    outcomes = {"spec": 0, "refused": 0}
    for _ in range(MUTATION_CASES):
        raw = _mutate(rng, rng.choice(configs))
        start = time.perf_counter()
        try:
            spec = build_spec(raw, "fuzz")
        except PlannerError as err:
            assert str(err).startswith("fuzz: "), str(err)
            outcomes["refused"] += 1
        else:
            assert 0 < spec.active_params <= spec.total_params
            assert spec.kv_bytes_per_token() >= 0 and spec.state_bytes_per_sequence() >= 0
            assert 0 < spec.max_position_embeddings <= validation.MAX_CONTEXT_TOKENS
            assert spec.num_layers <= validation.MAX_LAYERS
            outcomes["spec"] += 1
        assert time.perf_counter() - start < 3.0
    assert outcomes["spec"] and outcomes["refused"]


def test_config_invariants_come_first_and_tp_stays_a_scenario_check():
    """7 KV heads is the config's fault at any TP (ConfigError, no plan); --tp 3 on a valid config is
    the scenario's (planner.estimate.resolve.check_parallelism, unchanged)."""
    from planner.errors import ScenarioError
    from planner.estimate.memory import plan_memory
    from planner.hardware import get_profile
    from planner.scenario import Scenario

    with pytest.raises(ConfigError, match="'num_key_value_heads' is 7"):
        build_spec({**LLAMA, "num_key_value_heads": 7}, "seven")
    spec = build_spec(LLAMA, "llama")
    with pytest.raises(ScenarioError, match="--tp 3 does not divide the 32 attention heads"):
        plan_memory(spec, get_profile("h100-sxm"), Scenario(tp=3))
    assert plan_memory(spec, get_profile("h100-sxm"), Scenario(tp=2)).fits
