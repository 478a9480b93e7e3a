"""ModelSpec against independent counts: transformers on the meta device and vLLM's KV rules.

Golden files (tests/golden/README.md): reference_params_oracle.json is shared/reference/params_oracle.json
(transformers 5.24.0, meta device); catalog_params.json is tools/param_oracle.py over the catalog.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import ConfigError, UnknownArchitectureError
from planner.model.families import FAMILIES, build_spec
from planner.model.sources import catalog_entries, load_config

GOLDEN = Path(__file__).parent / "golden"
ORACLE = json.loads((GOLDEN / "reference_params_oracle.json").read_text())
CATALOG = Path(__file__).parent.parent / "planner" / "model" / "catalog"
#: reference name -> catalog repo id (the same config.json files)
REFERENCE_REPO = {
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
    "mistral-7b-v0.1": "mistralai/Mistral-7B-v0.1",
    "mixtral-8x7b-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "qwen2.5-72b": "Qwen/Qwen2.5-72B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "gemma-2-9b": "google/gemma-2-9b",
    "gemma-2-27b": "google/gemma-2-27b",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "gpt2": "openai-community/gpt2",
    "opt-125m": "facebook/opt-125m",
    "gemma-7b": "google/gemma-7b",
    "gemma-3-1b-pt": "google/gemma-3-1b-pt",
    "mamba-130m": "state-spaces/mamba-130m-hf",
    "gpt-oss-120b": "openai/gpt-oss-120b",
}


def spec_for(repo_id: str):
    return build_spec(load_config(repo_id, prefer="catalog").config, repo_id)


@pytest.mark.parametrize("row", ORACLE, ids=[r["name"] for r in ORACLE])
def test_reference_models_exact(row):
    """Total and active params equal transformers' meta-device count to the parameter; KV per vLLM."""
    spec = spec_for(REFERENCE_REPO[row["name"]])
    assert spec.model_type == row["model_type"]
    assert spec.total_params == row["total_params"]
    assert spec.active_params == row["active_params"]
    assert spec.active_params_excl_embedding == row["active_params_excl_input_embedding"]
    assert spec.kv_bytes_per_token(2.0) == row["kv_bytes_per_token_bf16"]
    assert spec.kv_bytes_per_token(1.0) == row["kv_bytes_per_token_fp8"]
    assert spec.state_bytes_per_sequence() == row["mamba_state_bytes_per_seq_bf16"]
    kinds = spec.layer_kinds()
    assert sum(k.startswith("sliding") for k in kinds) == row["num_sliding_layers"]
    assert sum(k.startswith("full_attention") or k.startswith("mla") for k in kinds) == row["num_full_attention_layers"]
    assert sum(k.startswith("mamba") for k in kinds) == row["num_mamba_layers"]


CATALOG_GOLDEN = json.loads((GOLDEN / "catalog_params.json").read_text())
CATALOG_ROWS = [
    (repo, row)
    for repo, row in sorted(CATALOG_GOLDEN.get("models", CATALOG_GOLDEN).items())
    if isinstance(row, dict) and row.get("total_params") is not None
]


@pytest.mark.parametrize("repo,row", CATALOG_ROWS, ids=[r for r, _ in CATALOG_ROWS])
def test_catalog_models_exact(repo, row):
    """Every catalog model: the planner's counts equal transformers' on the meta device."""
    spec = spec_for(repo)
    assert spec.total_params == row["total_params"], repo
    if row.get("active_params") is not None:
        assert spec.active_params == row["active_params"], repo


def test_every_family_of_the_issue_is_in_the_catalog():
    families = {e.family for e in catalog_entries()}
    wanted = {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "phi3",
        "deepseek_v2",
        "deepseek_v3",
        "gpt_oss",
        "gpt_neox",
        "falcon",
        "gpt2",
        "opt",
        "mamba",
        "jamba",
    }
    assert wanted <= families | {"gemma3"}, wanted - families
    assert len(catalog_entries()) >= 30
    assert wanted - {"gemma3"} <= set(FAMILIES)


def test_seed_worked_example_is_256_mib_not_536_mb():
    """32 layers x 2 x 8 KV heads x 128 head_dim x fp16 x 2048 tokens = 268,435,456 B per sequence."""
    spec = spec_for("meta-llama/Meta-Llama-3-8B")  # 32 layers, 8 KV heads, head_dim 128
    assert spec.kv_bytes_per_sequence(2048, kv_bytes_per_element=2.0) == 268_435_456 == 256 * 2**20


# ------------------------------------------------------------------------ invariants


def test_kv_linear_in_context_below_windows():
    spec = spec_for("google/gemma-2-9b")
    one = spec.kv_bytes_per_sequence(1000)
    assert spec.kv_bytes_per_sequence(2000) == 2 * one
    assert spec.kv_bytes_per_sequence(4000) == 4 * one
    # above the 4096 window only the 21 global layers grow: 21 x 2 x 8 x 256 x 2 B per token
    assert spec.kv_bytes_per_sequence(8192) - spec.kv_bytes_per_sequence(4096) == 4096 * 21 * 8192


def test_gqa_ratio_divides_kv():
    l2 = spec_for("meta-llama/Llama-2-7b-hf")  # MHA, 32 KV heads
    l3 = spec_for("meta-llama/Meta-Llama-3-8B")  # GQA, 8 KV heads, same layers and head_dim
    assert l2.kv_bytes_per_token() == 4 * l3.kv_bytes_per_token()


def test_mla_kv_constant_across_tp_and_gqa_shrinks_until_replication():
    ds = spec_for("deepseek-ai/DeepSeek-V3")
    assert {ds.kv_bytes_per_token(2.0, tp=tp) for tp in (1, 2, 4, 8)} == {70_272}
    l3 = spec_for("meta-llama/Meta-Llama-3-8B")  # K = 8
    per_tp = [l3.kv_bytes_per_token(2.0, tp=tp) for tp in (1, 2, 4, 8, 16)]
    assert per_tp == [131072, 65536, 32768, 16384, 16384]  # max(1, 8 // 16) = 1 head replicated


def test_falcon_7b_multi_query_quirk_and_replication():
    spec = spec_for("tiiuae/falcon-7b-instruct")
    assert spec.num_kv_heads == 1  # HF's config object says 71; vLLM uses 1
    # at tp=8 every rank stores the full single KV head: 2 x 1 x 64 x 2 B x 32 layers
    assert spec.kv_bytes_per_token(2.0, tp=8) == spec.kv_bytes_per_token(2.0, tp=1) == 32 * 256


def test_qwen3_head_dim_is_explicit_not_hidden_over_heads():
    spec = spec_for("Qwen/Qwen3-30B-A3B")
    attn = spec.layers[0].mixer
    assert attn.head_dim == 128 and spec.hidden_size // attn.num_heads == 64


def test_multimodal_wrapper_uses_text_config():
    spec = spec_for("google/gemma-3-4b-it")
    assert spec.model_type == "gemma3_text"
    assert spec.encoder is not None and spec.encoder.kind == "siglip_gemma3"  # counted: no warning left
    assert not any("vision" in w for w in spec.warnings)
    kinds = spec.layer_kind_counts()
    assert sum(kinds.values()) == spec.num_layers


def test_quantized_checkpoints_parse():
    for repo in [e.repo_id for e in catalog_entries()]:
        spec = spec_for(repo)
        if spec.quantization is not None:
            assert spec.quantization.weight_format.bits_per_weight < 16
            assert spec.quantization.components


def test_gpt_oss_mxfp4_quantizes_only_experts():
    spec = spec_for("openai/gpt-oss-20b")
    assert spec.quantization is not None and spec.quantization.method == "mxfp4"
    assert spec.quantization.components == ("experts",)


# ----------------------------------------------------------------------- bad inputs

LLAMA = json.loads((CATALOG / "meta-llama--Meta-Llama-3-8B.json").read_text())

BAD_CONFIGS = [
    ("not an object", [1, 2, 3], ConfigError, "must be a JSON object"),
    ("missing keys", {"model_type": "llama", "hidden_size": 4096}, ConfigError, "num_hidden_layers"),
    (
        "unknown type without keys",
        {"model_type": "frobnicator", "hidden_size": 8},
        UnknownArchitectureError,
        "unknown model_type 'frobnicator'",
    ),
    ("wrong type", {**LLAMA, "num_hidden_layers": "many"}, ConfigError, "should be an integer"),
    ("zero layers", {**LLAMA, "num_hidden_layers": 0}, ConfigError, "at least one layer"),
    ("short layer_types", {**LLAMA, "layer_types": ["full_attention"]}, ConfigError, "layer_types lists 1 layers"),
    ("unknown quant", {**LLAMA, "quantization_config": {"quant_method": "magic"}}, ConfigError, "quant_method 'magic'"),
    ("deepseek without MLA keys", {**LLAMA, "model_type": "deepseek_v3"}, ConfigError, "kv_lora_rank"),
]


@pytest.mark.parametrize("case,raw,error,fragment", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_configs_have_clear_messages(case, raw, error, fragment):
    with pytest.raises(error) as info:
        build_spec(raw, "bad-model")
    assert fragment in str(info.value)


def test_unknown_model_type_with_usual_keys_is_a_labelled_generic_estimate():
    spec = build_spec({**LLAMA, "model_type": "brand_new_llm"}, "new")
    assert spec.generic and spec.family == "generic"
    assert any("generic" in w for w in spec.warnings)
    assert spec.total_params == 8_030_261_248  # llama-shaped keys give the llama count


def test_each_cache_kind_writes_its_own_formula():
    """The KV formula shown on the Plan page comes from the spec classes, one per kind."""
    text, _ = spec_for("meta-llama/Meta-Llama-3-8B").kv_specs(1, 2.0)[0].describe(32)
    assert text == "2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 2 B = 131,072 B/token"
    text, note = spec_for("deepseek-ai/DeepSeek-V3").kv_specs(8, 2.0)[0].describe(61)
    assert "1 latent x 576" in text and text.endswith("= 70,272 B/token") and "not split" in note
    sliding = next(s for s in spec_for("google/gemma-2-9b").kv_specs(1, 2.0) if s.token_cap)
    assert "4,096 tokens" in sliding.describe(21)[1]
    state = spec_for("state-spaces/mamba-130m-hf").kv_specs(1, 2.0)[0]
    assert state.describe(24)[0] == f"24 layers x {1536 * 19 * 2:,} B of recurrent state"
    assert state.sequence_bytes(10_000) == state.fixed_bytes == 1536 * 19 * 2
