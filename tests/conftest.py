"""Shared pytest fixtures. All tests run offline: nothing here, or in any test, reaches beyond 127.0.0.1.

- ``_hermetic_hub_env`` (autouse): points HF_ENDPOINT at a closed local port, the HF cache at a
  temporary folder, and hides any real token or offline flag, so no test can reach the real Hub
  or depend on the developer's login or cache.
- ``hub``: a running stand-in Hub (``tests/hub_standin.py``) with HF_ENDPOINT pointing at it.
- ``tiny_catalog``: a two-model catalog folder in the layout of ``planner/model/catalog/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub
import pytest
import yaml
from huggingface_hub import constants as hf_constants

from tests.hub_standin import HubStandin

CLOSED_LOCAL_ENDPOINT = "http://127.0.0.1:9"  # discard port: connection refused, never the internet

TINY_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}
SMALL_QWEN_CONFIG = {**TINY_LLAMA_CONFIG, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}


@pytest.fixture(autouse=True)
def _hermetic_hub_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    hf_home = tmp_path_factory.getbasetemp() / "hf_home_shared"
    monkeypatch.setenv("HF_ENDPOINT", CLOSED_LOCAL_ENDPOINT)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_home / "hub"))
    # a developer's calibrated profiles must not change what the tests predict
    monkeypatch.setenv("PLANNER_CALIBRATION_DIR", str(tmp_path_factory.getbasetemp() / "calibration_home"))
    for variable in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_OIDC_RESOURCE",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    ):
        monkeypatch.delenv(variable, raising=False)
    # huggingface_hub read these at import; a developer's saved login must not be sent anywhere.
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(hf_home / "token"))
    monkeypatch.setattr(hf_constants, "HF_STORED_TOKENS_PATH", str(hf_home / "stored_tokens"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HubStandin]:
    """A stand-in Hub on 127.0.0.1 with an empty HF cache of its own; add repos with ``hub.add_repo``."""
    with HubStandin() as standin:
        monkeypatch.setenv("HF_ENDPOINT", standin.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf_home" / "hub"))
        yield standin
    huggingface_hub.close_session()  # drop pooled connections to the stopped server


@pytest.fixture
def tiny_catalog(tmp_path: Path) -> Path:
    """Catalog folder with acme/Tiny-Llama-1B (aliases tiny-llama, tl-1b) and acme/Small-Qwen-2B (small-qwen)."""
    folder = tmp_path / "catalog"
    folder.mkdir()
    entries = [
        ("acme/Tiny-Llama-1B", "llama", ["tiny-llama", "tl-1b"], TINY_LLAMA_CONFIG),
        ("acme/Small-Qwen-2B", "qwen", ["small-qwen"], SMALL_QWEN_CONFIG),
    ]
    index = []
    for repo_id, family, aliases, config in entries:
        file = repo_id.replace("/", "--") + ".json"
        (folder / file).write_text(json.dumps(config, indent=2))
        index.append(
            {
                "repo_id": repo_id,
                "file": file,
                "family": family,
                "source": f"https://huggingface.co/{repo_id}/blob/0123abc/config.json",
                "aliases": aliases,
                "notes": "test fixture",
            }
        )
    (folder / "index.yaml").write_text(yaml.safe_dump(index, sort_keys=False))
    return folder
