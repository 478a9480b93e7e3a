"""Independent parameter oracle: count every catalog model's parameters with transformers itself.

For each entry of ``planner/model/catalog/index.yaml`` this script builds the transformers model
from the bundled config.json on ``torch.device("meta")`` (no weights, no downloads, never remote
code) and writes ``tests/golden/catalog_params.json``. The planner's own formulas are tested
against that file, so the file must not depend on them: nothing here imports ``planner``.

What is counted, per model:

* ``total_params`` = ``sum(p.numel() for p in model.parameters())``. ``parameters()`` yields a
  tied tensor once, so a tied lm_head is counted once (inside ``embedding_params``).
* ``active_params`` = total - sum over MoE layers of (E - k) * params_per_routed_expert.
  Router, shared experts, attention, norms, embeddings and lm_head all count as active.
  E (routed experts) and params_per_routed_expert come from the built model, not the config:
  transformers 5 keeps all routed experts of a layer in one module whose attribute name is
  ``experts`` (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, gpt-oss, Jamba), holding fused tensors
  whose leading dimension is E; ``params_per_routed_expert`` = that module's parameters / E.
  Shared experts sit in differently named modules (``shared_expert``, ``shared_experts``) and
  are therefore never subtracted. k is the config's experts-per-token key. Worked example,
  Mixtral-8x7B: 32 layers x (8 - 2) x 176,160,768 = 33,822,867,456 inactive, so
  46,702,792,704 - 33,822,867,456 = 12,879,925,248 active.
* ``embedding_params``: the input token embedding (``get_input_embeddings()``); learned position
  tables and OPT's project_in are not included.
* ``lm_head_params``: the output projection's parameters, 0 when it is tied to the input
  embedding.
* ``num_layers``: ``num_hidden_layers`` of the (text) config.

Config handling: ``quantization_config`` is removed before building (counts are the logical,
unquantized parameters; a quantized Linear stores packed tensors, not one weight per parameter)
and ``auto_map`` is removed so that no Hub code can ever be resolved. Multimodal wrappers
(a ``text_config`` key, e.g. gemma3) are counted on their text model: ``AutoConfig.for_model``
builds the wrapper config and ``AutoModelForCausalLM.from_config`` gets its ``text_config``.
A model that cannot be built gets ``null`` counts and the reason.

Usage::

    python tools/param_oracle.py                      # rewrite tests/golden/catalog_params.json
    python tools/param_oracle.py --reference-dir ../shared/reference   # also compare

``--reference-dir`` points at a folder with ``configs/*.json`` and ``params_oracle.json``; each
reference config is matched to the catalog entry whose JSON is identical, and any difference
in total/active/embedding/lm_head counts is printed (exit status 1 if there is one).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import transformers
import yaml
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

REPO_ROOT = Path(__file__).resolve().parent.parent
CATALOG_DIR = REPO_ROOT / "planner" / "model" / "catalog"
GOLDEN_PATH = REPO_ROOT / "tests" / "golden" / "catalog_params.json"

#: Config keys that name the number of routed experts each token uses, in lookup order.
#: (Plain ``top_k`` is deliberately absent: older configs use it for sampling.)
EXPERTS_PER_TOKEN_KEYS = (
    "num_experts_per_tok",
    "num_experts_per_token",
    "experts_per_token",
    "moe_topk",
    "moe_top_k",
)

#: Submodules of an image-text-to-text model that are its encoder, not its language model.
VISION_MODULES = ("visual", "vision_tower", "vision_model", "multi_modal_projector")

#: Keys removed from config.json before building, and why.
STRIPPED_KEYS = {
    "quantization_config": "counts are logical (unquantized) parameters",
    "auto_map": "never resolve Hub remote code",
}


def load_index(catalog_dir: Path) -> list[dict]:
    """Return the catalog entries of ``index.yaml`` in file order."""
    with open(catalog_dir / "index.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def build_on_meta(raw_config: dict) -> tuple[torch.nn.Module, object, str]:
    """Build the causal-LM for a config.json dict on the meta device.

    Returns the model, the config it was built from, and ``"config"`` or ``"text_config"``.
    """
    kwargs = {k: v for k, v in raw_config.items() if k not in STRIPPED_KEYS}
    wrapper = config = AutoConfig.for_model(**kwargs)
    built_from = "config"
    # a wrapper with a nested text_config, or a flat one whose class nests it (Qwen2.5-VL's flat config.json)
    if "text_config" in raw_config or "text_config" in getattr(config, "sub_configs", {}):
        config = config.text_config
        built_from = "text_config"
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        except (
            ValueError
        ):  # a text config with no causal-LM class of its own (Qwen2.5-VL): the wrapper, minus its encoder
            model = AutoModelForImageTextToText.from_config(wrapper, trust_remote_code=False)
            for parent in (model, getattr(model, "model", None)):
                for name in VISION_MODULES:
                    if parent is not None and isinstance(getattr(parent, name, None), torch.nn.Module):
                        setattr(parent, name, None)
            built_from = "wrapper without its vision modules"
    return model, config, built_from


def routed_expert_modules(model: torch.nn.Module) -> list[tuple[str, int, int]]:
    """List ``(module name, E, params per routed expert)`` for every routed-expert container.

    A container is a submodule whose attribute name is exactly ``experts``; its parameters are
    either fused tensors with leading dimension E or, in a ``ModuleList``, E separate experts.
    """
    found = []
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] != "experts":
            continue
        params = list(module.parameters())
        if isinstance(module, torch.nn.ModuleList):
            n_experts = len(module)
        else:
            leading = {p.shape[0] for p in params}
            if len(leading) != 1:
                raise ValueError(f"{name}: expert tensors disagree on the expert dimension {leading}")
            n_experts = leading.pop()
        n_params = sum(p.numel() for p in params)
        if n_params % n_experts:
            raise ValueError(f"{name}: {n_params} parameters do not split over {n_experts} experts")
        found.append((name, n_experts, n_params // n_experts))
    return found


def experts_per_token(config: object) -> int:
    """The config's top-k (routed experts per token); raises if it names none."""
    for key in EXPERTS_PER_TOKEN_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError(f"config has none of {EXPERTS_PER_TOKEN_KEYS}")


def count(raw_config: dict) -> dict:
    """All golden fields for one config.json dict (see the module docstring for definitions)."""
    model, config, built_from = build_on_meta(raw_config)
    total = sum(p.numel() for p in model.parameters())

    experts = routed_expert_modules(model)
    k = experts_per_token(config) if experts else None
    inactive = sum((n_experts - k) * per_expert for _, n_experts, per_expert in experts)

    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is embedding
    lm_head = 0 if head is None or tied else sum(p.numel() for p in head.parameters())

    quant = raw_config.get("quantization_config")
    return {
        "total_params": total,
        "active_params": total - inactive,
        "embedding_params": embedding.numel(),
        "lm_head_params": lm_head,
        "tied_embeddings": tied,
        "num_layers": config.num_hidden_layers,
        "num_moe_layers": len(experts),
        "routed_experts": experts[0][1] if experts else None,
        "experts_per_token": k,
        "params_per_routed_expert": experts[0][2] if experts else None,
        "model_class": type(model).__name__,
        "built_from": built_from,
        "quantization_stripped": quant.get("quant_method") if quant else None,
        "transformers_version": transformers.__version__,
    }


def run(catalog_dir: Path) -> tuple[dict, float]:
    """Count every catalog entry; returns the golden document and the elapsed seconds."""
    started = time.perf_counter()
    models = {}
    for entry in load_index(catalog_dir):
        raw = json.loads((catalog_dir / entry["file"]).read_text(encoding="utf-8"))
        t0 = time.perf_counter()
        try:
            result = count(raw)
        except Exception as exc:  # noqa: BLE001 (recorded, never hidden: the golden file says why)
            result = {
                "total_params": None,
                "active_params": None,
                "embedding_params": None,
                "lm_head_params": None,
                "num_layers": None,
                "transformers_version": transformers.__version__,
                "error": f"{type(exc).__name__}: {exc}",
            }
        models[entry["repo_id"]] = result
        print(
            f"{entry['repo_id']:45s} total={result['total_params']!s:>15} "
            f"active={result['active_params']!s:>15}  ({time.perf_counter() - t0:.1f} s)",
            file=sys.stderr,
        )
    elapsed = time.perf_counter() - started
    document = {
        "generated_by": "tools/param_oracle.py",
        "method": (
            "transformers AutoConfig.for_model(**config) + AutoModelForCausalLM.from_config "
            "on torch.device('meta'); total = sum(p.numel() for p in model.parameters())"
        ),
        "active_definition": (
            "total - sum over MoE layers of (E - k) * params_per_routed_expert; "
            "router, shared experts, attention, embeddings and lm_head are active"
        ),
        "stripped_keys": STRIPPED_KEYS,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "models": models,
    }
    return document, elapsed


def compare_with_reference(document: dict, catalog_dir: Path, reference_dir: Path) -> list[str]:
    """Differences between our counts and a reference ``params_oracle.json`` (empty if none)."""
    by_content = {}
    for entry in load_index(catalog_dir):
        raw = json.loads((catalog_dir / entry["file"]).read_text(encoding="utf-8"))
        by_content[json.dumps(raw, sort_keys=True)] = entry["repo_id"]
    reference = json.loads((reference_dir / "params_oracle.json").read_text(encoding="utf-8"))
    problems = []
    for ref in reference:
        ref_config = json.loads((reference_dir / "configs" / f"{ref['name']}.json").read_text(encoding="utf-8"))
        repo_id = by_content.get(json.dumps(ref_config, sort_keys=True))
        if repo_id is None:
            problems.append(f"{ref['name']}: no catalog file has this exact config")
            continue
        ours = document["models"][repo_id]
        for field in ("total_params", "active_params", "embedding_params", "lm_head_params", "num_layers"):
            if field in ref and ref[field] != ours.get(field):
                problems.append(f"{ref['name']} ({repo_id}) {field}: reference {ref[field]}, ours {ours.get(field)}")
        print(f"reference {ref['name']:16s} -> {repo_id}", file=sys.stderr)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalog-dir", type=Path, default=CATALOG_DIR)
    parser.add_argument("--output", type=Path, default=GOLDEN_PATH)
    parser.add_argument(
        "--reference-dir",
        type=Path,
        default=None,
        help="folder with configs/ and params_oracle.json to compare against",
    )
    args = parser.parse_args(argv)

    document, elapsed = run(args.catalog_dir)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output} ({len(document['models'])} models) in {elapsed:.1f} s", file=sys.stderr)

    if args.reference_dir is not None:
        problems = compare_with_reference(document, args.catalog_dir, args.reference_dir)
        for problem in problems:
            print("MISMATCH", problem, file=sys.stderr)
        if problems:
            return 1
        print("reference: all counts equal", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
