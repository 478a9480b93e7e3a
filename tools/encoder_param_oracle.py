"""Independent oracle for the vision encoders: count their parameters with transformers itself.

For each multimodal config below, this script builds the transformers ``...ForConditionalGeneration``
model from the config.json on ``torch.device("meta")`` (no weights, no downloads, never remote code:
``auto_map`` and ``quantization_config`` are stripped) and counts ``sum(p.numel())`` of every
parameter outside the language model (``language_model`` / ``lm_head``): the vision tower, any
adapter and the multimodal projector. It also records the language model's count. The result is
``tests/golden/encoder_params.json``; nothing here imports ``planner``, so the planner's formulas in
``planner/model/encoders.py`` are checked against transformers, not against themselves.

Usage::

    python tools/encoder_param_oracle.py          # rewrite tests/golden/encoder_params.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, AutoModelForImageTextToText

REPO_ROOT = Path(__file__).resolve().parent.parent
GOLDEN_PATH = REPO_ROOT / "tests" / "golden" / "encoder_params.json"
#: (name the tests use, config.json path relative to the repository root)
CONFIGS = [
    (
        "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
        "planner/model/catalog/RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json",
    ),
    (
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        "planner/model/catalog/meta-llama--Llama-4-Maverick-17B-128E-Instruct.json",
    ),
    ("google/gemma-3-4b-it", "planner/model/catalog/google--gemma-3-4b-it.json"),
    ("Qwen/Qwen2.5-VL-7B-Instruct", "planner/model/catalog/Qwen--Qwen2.5-VL-7B-Instruct.json"),
    ("Qwen/Qwen3-VL-8B-Instruct", "planner/model/catalog/Qwen--Qwen3-VL-8B-Instruct.json"),
    ("llava-hf/llava-1.5-7b-hf", "planner/model/catalog/llava-hf--llava-1.5-7b-hf.json"),
]
STRIPPED_KEYS = ("quantization_config", "auto_map")
LANGUAGE_PARTS = ("language_model", "lm_head")


def count(path: Path) -> dict[str, object]:
    raw = {k: v for k, v in json.loads(path.read_text()).items() if k not in STRIPPED_KEYS}
    config = AutoConfig.for_model(**raw)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, trust_remote_code=False)
    encoder = language = 0
    modules: set[str] = set()
    for name, p in model.named_parameters():
        if any(part in name for part in LANGUAGE_PARTS):
            language += p.numel()
        else:
            encoder += p.numel()
            modules.add(".".join(name.split(".")[:2]))
    return {
        "architecture": type(model).__name__,
        "encoder_params": encoder,
        "language_model_params": language,
        "encoder_modules": sorted(modules),
    }


def main() -> int:
    started = time.time()
    rows = {name: count(REPO_ROOT / rel) | {"config": rel} for name, rel in CONFIGS}
    out = {
        "source": "tools/encoder_param_oracle.py: transformers models on torch.device('meta'), "
        "sum(p.numel()) outside language_model / lm_head",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "models": rows,
    }
    GOLDEN_PATH.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN_PATH} ({len(rows)} models, {time.time() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
