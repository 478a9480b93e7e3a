"""Llama-4, Qwen3-Next, GLM-4.5-MoE, Phi-MoE, Mamba-2 and Yi: exact, and unknown MoE/hybrid types refused.

Known values: total and active parameters are transformers 5.24.0's meta-device counts
(tools/param_oracle.py -> tests/golden/catalog_params.json). KV and state sizes follow vLLM's
spec classes: ``ChunkedLocalAttentionSpec`` (kept whole while the hybrid KV-cache manager is off,
vLLM's default for chunked-attention models), ``mamba2_state_shape`` and
``gated_delta_net_state_shape`` (shared/reference/formulas.md 2.3; vllm mamba_utils.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import UnknownArchitectureError
from planner.model.families import build_spec
from planner.model.kv import ChunkedLocalKV, FullAttentionKV
from planner.model.sources import load_config
from planner.units import cdiv

GOLDEN = json.loads((Path(__file__).parent / "golden" / "catalog_params.json").read_text())["models"]
CATALOG = Path(__file__).parent.parent / "planner" / "model" / "catalog"


def spec_for(repo_id: str):
    return build_spec(load_config(repo_id, prefer="catalog").config, repo_id)


#: (repo, total, active) as transformers 5.24.0 counts them on the meta device.
NEW_MODELS = [
    ("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic", 107_769_861_120, 17_172_894_720),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", 400_711_848_960, 17_184_691_200),
    ("01-ai/Yi-34B", 34_388_917_248, 34_388_917_248),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", 79_674_391_296, 3_874_929_408),
    ("zai-org/GLM-4.5-Air", 106_852_245_504, 13_424_123_904),
    ("zai-org/GLM-4.6", 352_797_814_784, 33_632_251_904),
    ("deepseek-ai/DeepSeek-V3.2", 671_877_929_216, 38_403_807_488),
    ("microsoft/Phi-3.5-MoE-instruct", 41_873_153_344, 6_640_999_744),
    ("mistralai/Mamba-Codestral-7B-v0.1", 7_285_403_648, 7_285_403_648),
]


@pytest.mark.parametrize(("repo", "total", "active"), NEW_MODELS, ids=[m[0] for m in NEW_MODELS])
def test_new_family_counts_equal_transformers(repo, total, active):
    assert (GOLDEN[repo]["total_params"], GOLDEN[repo]["active_params"]) == (total, active)
    spec = spec_for(repo)
    assert (spec.total_params, spec.active_params) == (total, active)
    assert not spec.generic


def test_qwen3_moe_saved_by_transformers_5_reads_num_local_experts():
    raw = json.loads((CATALOG / "Qwen--Qwen3-30B-A3B.json").read_text())
    raw["num_local_experts"] = raw.pop("num_experts")  # Qwen3MoeConfig.attribute_map: num_experts -> num_local_experts
    spec = build_spec(raw, "qwen3-30b-a3b-v5")
    golden = GOLDEN["Qwen/Qwen3-30B-A3B"]
    assert (spec.total_params, spec.active_params) == (golden["total_params"], golden["active_params"])


# ----------------------------------------------------------------------------- Llama 4


def test_llama4_scout_layers_chunked_nope_and_moe():
    spec = spec_for("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic")
    assert spec.model_type == "llama4_text"
    assert spec.layer_kind_counts() == {"chunked_attention(8192)+moe": 36, "full_attention+moe": 12}
    assert spec.layers[3].kind == "full_attention+moe"  # no_rope_layers[3] = 0: a global NoPE layer
    moe = spec.layers[0].ffn
    assert (moe.num_experts, moe.experts_per_token, moe.shared_intermediate_size) == (16, 1, 8192)
    assert spec.quantization is not None and spec.quantization.method == "compressed-tensors"
    assert "experts" in spec.quantization.components


def test_llama4_maverick_interleaves_dense_and_moe():
    spec = spec_for("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    moe_layers = [i for i, layer in enumerate(spec.layers) if layer.kind.endswith("+moe")]
    assert moe_layers == list(range(1, 48, 2))
    assert spec.layers[0].ffn.intermediate_size == 16_384  # dense layers use intermediate_size_mlp
    assert GOLDEN["meta-llama/Llama-4-Maverick-17B-128E-Instruct"]["num_moe_layers"] == 24


def test_llama4_kv_bytes_per_token_and_tp():
    """48 layers x 2 (K, V) x 8 KV heads x 128 head_dim x 2 B = 196,608 B/token; chunked layers count too."""
    spec = spec_for("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic")
    assert spec.kv_bytes_per_token(2.0) == 48 * 2 * 8 * 128 * 2 == 196_608
    assert spec.kv_bytes_per_token(2.0, tp=2) == 98_304
    assert spec.kv_bytes_per_token(1.0) == 98_304


def test_chunked_layers_are_kept_whole_while_vllm_disables_the_hybrid_manager():
    spec = spec_for("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic")
    specs = spec.kv_specs(tp=2, kv_bytes_per_element=2.0)
    chunked = next(s for s in specs if isinstance(s, ChunkedLocalKV))
    full = next(s for s in specs if type(s) is FullAttentionKV)
    assert chunked.group_key == full.group_key  # one KV-cache group, as after unify_hybrid_kv_cache_specs
    assert chunked.blocks_per_request(32_768, 16, 2048) == cdiv(32_768, 16) == 2048
    assert chunked.token_cap is None
    assert spec.kv_bytes_per_sequence(20_000, tp=2) == 20_000 * 98_304
    assert "hybrid KV-cache manager" in chunked.describe(36)[1]


def test_chunked_layers_under_the_hybrid_manager_keep_one_chunk_plus_in_flight_tokens():
    """ChunkedLocalAttentionSpec: cdiv(min(chunk + max_in_flight_tokens, max_model_len), block_size), no +1."""
    chunked = ChunkedLocalKV(
        kv_heads=4, head_dim=128, head_dim_v=128, dtype_bytes=2.0, chunk_tokens=8192, hybrid_manager=True
    )
    assert chunked.blocks_per_request(32_768, 16, 2048) == cdiv(8192 + 2048, 16) == 640
    assert chunked.blocks_per_request(4096, 16, 2048) == 256
    assert chunked.token_cap == 8192 and chunked.sequence_bytes(20_000) == 8192 * 4 * 256 * 2


# ---------------------------------------------------------------- recurrent state kinds


def test_qwen3_next_gated_delta_net_state_and_gated_attention_kv():
    spec = spec_for("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert spec.layer_kind_counts() == {"gated_delta_net+moe": 36, "full_attention+moe": 12}
    # 12 attention layers x 2 x 2 KV heads x 256 head_dim x 2 B
    assert spec.kv_bytes_per_token(2.0) == 12 * 2 * 2 * 256 * 2 == 24_576
    # per layer: conv (2*16*128 + 32*128) x 3 + recurrent 32 x 128 x 128 elements, bf16
    assert spec.state_bytes_per_sequence() == 36 * (8192 * 3 + 32 * 128 * 128) * 2 == 39_518_208
    assert spec.state_bytes_per_sequence(tp=2) == 36 * (4096 * 3 + 16 * 128 * 128) * 2
    attn = spec.layers[3].mixer
    assert attn.output_gate and attn.qk_norm
    assert spec.num_kv_heads == 2 and spec.head_dim == 256  # from the attention layers, not the linear ones


def test_mamba2_state_with_group_replication():
    spec = spec_for("mistralai/Mamba-Codestral-7B-v0.1")
    assert spec.kv_bytes_per_token(2.0) == 0 and spec.num_kv_heads is None
    # conv (8192 + 2 x 8 x 128) x 3 + ssm 128 x 64 x 128 elements per layer, bf16
    assert spec.state_bytes_per_sequence() == 64 * 1_079_296 * 2 == 138_149_888
    # tp 16 > 8 groups: groups replicated to 16 (extra_groups_for_head_shards), so conv (8192 + 2 x 16 x 128) / 16
    assert spec.state_bytes_per_sequence(tp=16) == 64 * ((8192 + 4096) // 16 * 3 + 8 * 64 * 128) * 2


def test_phimoe_lm_head_bias_and_layernorms():
    spec = spec_for("microsoft/Phi-3.5-MoE-instruct")
    vocab, h = 32_064, 4096
    assert spec.params_by_component()["lm_head"] == vocab * h + vocab
    assert spec.layers[0].norm_params == 2 * 2 * h  # two LayerNorms with weight and bias


def test_glm4_moe_first_layer_dense_and_shared_expert():
    spec = spec_for("zai-org/GLM-4.5-Air")
    assert spec.layers[0].kind == "full_attention" and spec.layers[1].kind == "full_attention+moe"
    moe = spec.layers[1].ffn
    assert (moe.num_experts, moe.experts_per_token, moe.shared_intermediate_size) == (128, 8, 1408)
    assert spec.layers[0].mixer.qkv_bias and not spec.layers[0].mixer.o_bias


def test_yi_is_a_llama_with_yis_values():
    spec = spec_for("01-ai/Yi-34B")
    assert spec.family == "decoder" and spec.model_type == "llama"
    assert (spec.num_layers, spec.num_attention_heads, spec.num_kv_heads, spec.vocab_size) == (60, 56, 8, 64_000)
    assert spec.kv_bytes_per_token(2.0) == 60 * 2 * 8 * 128 * 2


# ------------------------------------------------------------------ unknown architectures

LLAMA = json.loads((CATALOG / "meta-llama--Meta-Llama-3-8B.json").read_text())

REFUSED = [
    (
        "experts",
        {**LLAMA, "model_type": "brand_new_moe", "num_local_experts": 8, "num_experts_per_tok": 2},
        "num_local_experts",
    ),
    (
        "routed experts",
        {**LLAMA, "model_type": "brand_new_moe", "n_routed_experts": 64, "moe_intermediate_size": 1408},
        "n_routed_experts",
    ),
    (
        "linear attention",
        {**LLAMA, "model_type": "brand_new_hybrid", "layer_types": ["linear_attention", "full_attention"] * 16},
        "layer_types linear_attention",
    ),
    (
        "hybrid pattern",
        {**LLAMA, "model_type": "nemotron_like", "hybrid_override_pattern": "M-M*-" * 6 + "MM"},
        "hybrid_override_pattern",
    ),
    ("state space", {**LLAMA, "model_type": "brand_new_ssm", "ssm_state_size": 128}, "ssm_state_size"),
]


@pytest.mark.parametrize(("case", "raw", "fragment"), REFUSED, ids=[c[0] for c in REFUSED])
def test_unknown_moe_or_hybrid_configs_are_refused_with_the_known_types(case, raw, fragment):
    with pytest.raises(UnknownArchitectureError) as info:
        build_spec(raw, "new")
    assert fragment in info.value.message and "refused" in info.value.message
    assert "llama4_text" in info.value.hint and "qwen3_next" in info.value.hint and "mamba2" in info.value.hint


def test_unknown_dense_config_still_gets_the_labelled_generic_estimate():
    spec = build_spec(
        {**LLAMA, "model_type": "brand_new_llm", "num_experts": 1, "layer_types": ["full_attention"] * 32}, "new"
    )
    assert spec.generic and spec.total_params == 8_030_261_248


# ----------------------------------------------------------------------------- DeepSeek-V3.2 (sparse attention)

V32 = "deepseek-ai/DeepSeek-V3.2"


def test_deepseek_v32_indexer_params_and_kv_by_hand():
    """Per layer the indexer adds wq_b 1536 x 64 x 128, wk 7168 x 128, weights_proj 7168 x 64 and its LayerNorm
    2 x 128 to V3's MLA; the cache holds the fp8_ds_mla latent (512 + 4 x 4 + 64 x 2 = 656 B, vLLM's default for
    V3.2) and the indexer's keys (128 + 4 = 132 B), on every TP rank."""
    v3, v32 = spec_for("deepseek-ai/DeepSeek-V3"), spec_for(V32)
    indexer = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128
    assert v32.total_params - v3.total_params == 61 * indexer
    assert v32.default_kv_dtype == "fp8" and v3.default_kv_dtype == "bf16"
    for tp in (1, 8):
        assert v32.kv_bytes_per_token(1.0, tp) == 61 * (656 + 132)
        assert v32.kv_bytes_per_token(2.0, tp) == 61 * (576 * 2 + 132)  # --kv-cache-dtype bfloat16
    (mixer,) = {layer.mixer for layer in v32.layers}
    assert (mixer.index_n_heads, mixer.index_head_dim, mixer.index_topk) == (64, 128, 2048)


def test_deepseek_v32_decode_reads_the_top_k_latents_and_the_whole_index():
    """Decode at 32,768 cached tokens: attention reads 2,048 latents per sequence, the indexer every key; below
    2,048 tokens both read the whole context."""
    from planner.model.ops import StepShape

    (mixer,) = {layer.mixer for layer in spec_for(V32).layers}

    def op(ops, prefix):
        (found,) = [o for o in ops if o.name.startswith(prefix)]
        return found

    long = mixer.ops(
        StepShape(num_seqs=4, query_len=1, context_len=32_768, causal=False, tp=8, kv_bytes_per_element=1.0)
    )
    assert op(long, "mla.sparse score").kv_bytes == 4 * 2048 * 656
    assert op(long, "indexer.logits").kv_bytes == 4 * 32_768 * 132
    assert op(long, "indexer.logits").flops == 2.0 * 64 * 128 * 4 * 32_768 + 2.0 * 64 * 4 * 32_768  # every rank
    short = mixer.ops(
        StepShape(num_seqs=4, query_len=1, context_len=1000, causal=False, tp=8, kv_bytes_per_element=1.0)
    )
    assert op(short, "mla.sparse score").kv_bytes == 4 * 1000 * 656


def test_deepseek_v32_sparse_pairs_cap_each_query_at_top_k():
    from planner.model.ops import StepShape

    (mixer,) = {layer.mixer for layer in spec_for(V32).layers}

    def pairs(q, c):
        return mixer.sparse_pairs_per_seq(StepShape(num_seqs=1, query_len=q, context_len=c, causal=True))

    assert pairs(1, 100) == 100 and pairs(1, 10_000) == 2048
    assert pairs(4096, 4096) == sum(min(i + 1, 2048) for i in range(4096))  # a prefill from scratch
    assert pairs(512, 3000) == sum(min(3000 - 512 + i + 1, 2048) for i in range(512))  # a chunk after 2,488 tokens
    # a prefill no longer than top-k runs vLLM's dense MHA mode: plain MLA ops plus the indexer
    dense = mixer.ops(StepShape(num_seqs=1, query_len=2048, context_len=2048, causal=True))
    assert any(o.name == "mla.kv_b_proj" for o in dense) and any(o.name.startswith("indexer.") for o in dense)
