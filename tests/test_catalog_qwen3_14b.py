"""Qwen/Qwen3-14B and Qwen/Qwen3-14B-FP8 in the bundled catalog, checked against facts from outside the planner.

Sources (planner/model/catalog/index.yaml names them too):

* The FP8 checkpoint manifest at revision 9a283b4a5efbc09ce247e0ae5b02b744739e525a, as pinned by a public oracle
  validator (search-index id 55641231499): config.json is 896 bytes with sha256 ``c5d7d0e8...``.
* A model report of a local Qwen/Qwen3-14B checkpoint (id 62680091503): its safetensors hold 14,768,307,200
  parameters; the model card says 14.8B.
* A vLLM memory write-up (id 32463627421): FP8 KV cache is 2 x 40 layers x 8 KV heads x 128 x 1 byte per token.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from planner.model.families import build_spec
from planner.model.sources import load_config

CATALOG = Path(__file__).resolve().parent.parent / "planner" / "model" / "catalog"
GOLDEN = json.loads((Path(__file__).parent / "golden" / "catalog_params.json").read_text(encoding="utf-8"))

FP8_CONFIG_SHA256 = "c5d7d0e8ee42088bd535101d13c71d38c20b5c2afd46ee8fdfba351956233793"
FP8_CONFIG_BYTES = 896
SAFETENSORS_TOTAL_PARAMS = 14_768_307_200
REPOS = ("Qwen/Qwen3-14B", "Qwen/Qwen3-14B-FP8")


def _raw(repo_id: str) -> bytes:
    return (CATALOG / (repo_id.replace("/", "--") + ".json")).read_bytes()


def test_fp8_config_is_byte_identical_to_the_checkpoint_manifest() -> None:
    raw = _raw("Qwen/Qwen3-14B-FP8")
    assert (len(raw), hashlib.sha256(raw).hexdigest()) == (FP8_CONFIG_BYTES, FP8_CONFIG_SHA256)


def test_fp8_config_is_the_bf16_config_plus_its_block_fp8_quantization() -> None:
    fp8 = json.loads(_raw("Qwen/Qwen3-14B-FP8"))
    quant = fp8.pop("quantization_config")
    assert fp8 == json.loads(_raw("Qwen/Qwen3-14B"))
    assert quant == {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    }


@pytest.mark.parametrize("repo_id", REPOS)
def test_oracle_and_planner_count_the_safetensors_total(repo_id: str) -> None:
    spec = build_spec(load_config(repo_id, prefer="catalog").config, repo_id)
    assert GOLDEN["models"][repo_id]["total_params"] == SAFETENSORS_TOTAL_PARAMS
    assert spec.total_params == spec.active_params == SAFETENSORS_TOTAL_PARAMS
    assert round(spec.total_params / 1e9, 1) == 14.8  # the model card's figure


@pytest.mark.parametrize("repo_id", REPOS)
def test_kv_cache_per_token_matches_the_published_arithmetic(repo_id: str) -> None:
    spec = build_spec(load_config(repo_id, prefer="catalog").config, repo_id)
    assert spec.kv_bytes_per_token(1.0) == 2 * 40 * 8 * 128
    assert spec.kv_bytes_per_token(2.0) == 2 * 40 * 8 * 128 * 2


def test_only_the_fp8_entry_is_quantized() -> None:
    bf16, fp8 = (build_spec(load_config(r, prefer="catalog").config, r) for r in REPOS)
    assert bf16.quantization is None
    assert fp8.quantization is not None and fp8.quantization.method == "fp8"
