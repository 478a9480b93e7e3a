"""The bundled catalog is consistent: index.yaml, the config.json copies and the golden counts.

Files checked: ``planner/model/catalog/index.yaml``, the ``<org>--<name>.json`` beside it, and
``tests/golden/catalog_params.json`` (written by ``tools/param_oracle.py`` with transformers on
the meta device). Known values come from shared/reference/params_oracle.json, pinned below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
CATALOG_DIR = REPO_ROOT / "planner" / "model" / "catalog"
GOLDEN_PATH = REPO_ROOT / "tests" / "golden" / "catalog_params.json"

INDEX = yaml.safe_load((CATALOG_DIR / "index.yaml").read_text(encoding="utf-8"))
GOLDEN = json.loads(GOLDEN_PATH.read_text(encoding="utf-8"))
ENTRY_FIELDS = {"repo_id", "file", "family", "source", "aliases", "notes"}

#: (repo id, total, active) from shared/reference/params_oracle.json (transformers 5.24.0, meta
#: device), an oracle computed separately from tools/param_oracle.py.
REFERENCE_COUNTS = [
    ("meta-llama/Llama-2-7b-hf", 6_738_415_616, 6_738_415_616),
    ("meta-llama/Meta-Llama-3-8B", 8_030_261_248, 8_030_261_248),
    ("meta-llama/Llama-3.1-70B", 70_553_706_496, 70_553_706_496),
    ("mistralai/Mistral-7B-v0.1", 7_241_732_096, 7_241_732_096),
    ("mistralai/Mixtral-8x7B-v0.1", 46_702_792_704, 12_879_925_248),
    ("Qwen/Qwen2.5-7B", 7_615_616_512, 7_615_616_512),
    ("Qwen/Qwen2.5-72B", 72_706_203_648, 72_706_203_648),
    ("Qwen/Qwen3-8B", 8_190_735_360, 8_190_735_360),
    ("Qwen/Qwen3-30B-A3B", 30_532_122_624, 3_353_032_704),
    ("google/gemma-2-9b", 9_241_705_984, 9_241_705_984),
    ("google/gemma-2-27b", 27_227_128_320, 27_227_128_320),
    ("deepseek-ai/DeepSeek-V3", 671_026_404_352, 37_552_282_624),
    ("openai-community/gpt2", 124_439_808, 124_439_808),
    ("facebook/opt-125m", 125_239_296, 125_239_296),
    ("google/gemma-7b", 8_537_680_896, 8_537_680_896),
    ("google/gemma-3-1b-pt", 999_885_952, 999_885_952),
    ("state-spaces/mamba-130m-hf", 129_135_360, 129_135_360),
    ("openai/gpt-oss-120b", 116_829_156_672, 5_711_982_912),
]


def _config(entry: dict) -> dict:
    return json.loads((CATALOG_DIR / entry["file"]).read_text(encoding="utf-8"))


def _model_type(config: dict) -> str | None:
    return config.get("model_type") or config.get("text_config", {}).get("model_type")


@pytest.mark.parametrize("entry", INDEX, ids=lambda e: e["repo_id"])
def test_entry_file_exists_parses_and_names_a_model_type(entry: dict) -> None:
    assert set(entry) == ENTRY_FIELDS
    assert entry["file"] == entry["repo_id"].replace("/", "--") + ".json"
    config = _config(entry)
    assert isinstance(config, dict) and _model_type(config)
    assert entry["family"] == config.get("model_type", _model_type(config))
    assert entry["source"].strip() and entry["aliases"]
    assert all(alias == alias.lower() and alias.strip() == alias for alias in entry["aliases"])


def test_index_is_a_list_and_every_json_in_the_folder_is_indexed() -> None:
    assert isinstance(INDEX, list) and len(INDEX) >= 34
    assert {e["file"] for e in INDEX} == {p.name for p in CATALOG_DIR.glob("*.json")}


def test_repo_ids_and_aliases_select_exactly_one_entry() -> None:
    keys = [e["repo_id"].lower() for e in INDEX] + [a for e in INDEX for a in e["aliases"]]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    assert duplicates == []


def test_golden_and_index_list_the_same_models() -> None:
    assert set(GOLDEN["models"]) == {e["repo_id"] for e in INDEX}


@pytest.mark.parametrize("entry", INDEX, ids=lambda e: e["repo_id"])
def test_golden_entry_is_complete_and_self_consistent(entry: dict) -> None:
    counts = GOLDEN["models"][entry["repo_id"]]
    assert counts["transformers_version"] == GOLDEN["transformers_version"]
    assert "error" not in counts, counts.get("error")
    total, active = counts["total_params"], counts["active_params"]
    assert 0 < active <= total
    assert counts["embedding_params"] > 0 and counts["lm_head_params"] >= 0
    assert (counts["lm_head_params"] == 0) == counts["tied_embeddings"]
    assert counts["num_layers"] == _declared_layers(_config(entry))
    if counts["num_moe_layers"]:
        inactive = counts["num_moe_layers"] * (counts["routed_experts"] - counts["experts_per_token"])
        assert total - active == inactive * counts["params_per_routed_expert"]
    else:
        assert total == active


#: transformers' class default of num_hidden_layers, for a wrapped text_config that leaves it out (llava-1.5's names
#: 7 keys; LlamaConfig's default is 32).
WRAPPED_DEFAULT_LAYERS = {"llama": 32}


def _declared_layers(config: dict) -> int:
    """Layer count as the (text) config.json spells it; GPT-2 uses the legacy ``n_layer``."""
    text = config.get("text_config", config)
    default = WRAPPED_DEFAULT_LAYERS.get(text.get("model_type")) if text is not config else None
    return text.get("num_hidden_layers", text.get("n_layer", default))


def test_quantized_entries_were_counted_without_their_quantization_config() -> None:
    quantized = {
        e["repo_id"]: _config(e)["quantization_config"]["quant_method"]
        for e in INDEX
        if "quantization_config" in _config(e)
    }
    assert {"awq", "gptq", "mxfp4", "fp8"} <= set(quantized.values())
    for repo_id, method in quantized.items():
        assert GOLDEN["models"][repo_id]["quantization_stripped"] == method


@pytest.mark.parametrize(("repo_id", "total", "active"), REFERENCE_COUNTS)
def test_golden_matches_the_reference_oracle(repo_id: str, total: int, active: int) -> None:
    counts = GOLDEN["models"][repo_id]
    assert (counts["total_params"], counts["active_params"]) == (total, active)
