"""Record the planner's outputs on a bounded scenario set as a golden file (tests/golden/outputs.json).

What it pins: for every catalog family once (its first catalog model), plus the bench model and a few
quantized and odd-shaped checkpoints, at TP 1, 2 and 8 on an H100 SXM, and a handful of variants
(fp8 KV, eager, PP 2, a small card, no chunked prefill): the memory plan with its suggestions, the
prefill and decode rooflines and ``estimate_latency``, as the JSON of their pydantic models. A
combination the planner refuses is pinned as its error type and message. The simulator is left out
(the serving-model work changes it on its own schedule).

``tests/test_golden_outputs.py`` recomputes the same outputs and compares them (floats to a relative
1e-12, everything else exactly), so a speed change that moves any number fails. After a change that is
*meant* to move numbers (the serving model, an engine profile), re-record in the same commit:

    python tools/record_golden_outputs.py          # or
    PLANNER_RECORD_GOLDEN=1 python -m pytest tests/test_golden_outputs.py
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

GOLDEN_PATH = ROOT / "tests" / "golden" / "outputs.json"
#: Extra models beyond the first of each family: the bench model, quantized checkpoints, OPT's
#: projected embedding, a 405B that does not fit on one card.
EXTRA_MODELS = (
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B",
    "Qwen/Qwen3-30B-A3B-GPTQ-Int4",
    "Qwen/Qwen3-4B-AWQ",
    "facebook/opt-350m",
)
TPS = (1, 2, 8)
#: (label, model, Scenario fields) of the variants run on top of the TP sweep.
VARIANTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("fp8-kv", "meta-llama/Llama-3.1-70B", {"tp": 4, "kv_cache_dtype": "fp8", "max_model_len": 8192}),
    ("eager", "meta-llama/Llama-3.1-70B", {"tp": 4, "engine": "eager", "max_model_len": 8192}),
    ("pp2", "meta-llama/Llama-3.1-70B", {"tp": 2, "pp": 2, "num_gpus": 8}),
    ("no-chunked-prefill", "meta-llama/Llama-3.1-8B", {"enable_chunked_prefill": False, "max_model_len": 8192}),
    ("l4-long", "meta-llama/Llama-3.1-8B", {"gpu": "l4"}),
    ("a100-40gb-int4", "meta-llama/Llama-3.1-70B", {"gpu": "a100-40gb", "tp": 2, "weight_dtype": "int4"}),
    ("gemma2-a10g", "google/gemma-2-9b", {"gpu": "a10g"}),
    ("jamba-h200", "ai21labs/AI21-Jamba-1.5-Mini", {"gpu": "h200", "tp": 2, "max_model_len": 65536}),
    ("deepseek-v3-fp8kv", "deepseek-ai/DeepSeek-V3", {"tp": 8, "kv_cache_dtype": "fp8", "max_model_len": 32768}),
    ("sglang", "Qwen/Qwen3-8B", {"engine_version": "sglang@0.5.4"}),
    ("util-0.8", "Qwen/Qwen3-32B", {"gpu_memory_utilization": 0.8, "tp": 2}),
)


def _hermetic_env() -> None:
    """A developer's calibrated profiles must not change what is recorded (as tests/conftest.py does)."""
    os.environ["PLANNER_CALIBRATION_DIR"] = os.path.join(tempfile.gettempdir(), "planner-golden-no-calibration")


def model_names() -> list[str]:
    """The first catalog model of every family, then ``EXTRA_MODELS``, without repeats."""
    from planner.model.sources import catalog_entries

    first: dict[str, str] = {}
    for entry in catalog_entries():
        first.setdefault(entry.family, entry.repo_id)
    names = list(first.values())
    return names + [m for m in EXTRA_MODELS if m not in names]


def _workload_for(max_len: int) -> dict[str, int]:
    """A batch of 8 prompts that fits in even the shortest context of the catalog (GPT-2's 1,024)."""
    return {"input_len": min(1024, max_len // 2), "output_len": min(128, max_len // 4), "batch_size": 8}


def _attempt(fn: Callable[[], Any]) -> Any:
    """The output as JSON data, or the refusal as {'error': type, 'message': text}."""
    from planner.errors import PlannerError

    try:
        out = fn()
    except PlannerError as err:
        return {"error": type(err).__name__, "message": str(err)}
    return _columns(json.loads(out.model_dump_json()))


def _columns(data: dict[str, Any]) -> dict[str, Any]:
    """A roofline's op rows as one header and one list per row (a third of the size of a dict per row)."""
    rows = data.get("layers")
    if not isinstance(rows, list) or not rows:
        return data
    names = list(rows[0])
    return {**data, "layers": {"columns": names, "rows": [[row[n] for n in names] for row in rows]}}


def scenario_outputs(model, scenario_fields: dict[str, Any]) -> dict[str, Any]:
    """Plan (with suggestions), prefill and decode rooflines and latency of one scenario."""
    from planner.estimate.latency import estimate_latency
    from planner.estimate.memory import plan_memory
    from planner.estimate.roofline import roofline
    from planner.hardware import get_profile
    from planner.scenario import RequestShape, Scenario

    fields = {"workload": RequestShape(**_workload_for(model.max_position_embeddings)), **scenario_fields}
    sc = Scenario(**fields)
    hw = get_profile(sc.gpu)
    wl = sc.workload
    return {
        "plan": _attempt(lambda: plan_memory(model, hw, sc)),
        "roofline_prefill": _attempt(lambda: roofline(model, hw, sc, "prefill", wl.batch_size, wl.input_len)),
        "roofline_decode": _attempt(
            lambda: roofline(model, hw, sc, "decode", wl.batch_size, wl.input_len + wl.output_len)
        ),
        "latency": _attempt(lambda: estimate_latency(model, hw, sc)),
    }


def scenario_set() -> list[tuple[str, str, dict[str, Any]]]:
    """(key, model, Scenario fields) of every recorded scenario, in a fixed order."""
    out = [(f"{name} tp{tp}", name, {"tp": tp}) for name in model_names() for tp in TPS]
    out += [(f"{name} {label}", name, fields) for label, name, fields in VARIANTS]
    return out


def compute_outputs() -> dict[str, Any]:
    """Every scenario's outputs, keyed '<model> <variant>'."""
    from planner.model.families import build_spec
    from planner.model.sources import load_config

    specs: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for key, name, fields in scenario_set():
        if name not in specs:
            specs[name] = build_spec(load_config(name).config, name)
        out[key] = {"scenario": fields, **scenario_outputs(specs[name], fields)}
    return out


def record(path: Path = GOLDEN_PATH) -> int:
    """Write the golden file; returns the number of scenarios."""
    outputs = compute_outputs()
    doc = {
        "source": "tools/record_golden_outputs.py: the planner's own outputs, pinned so that a speed change moves "
        "no number (re-record when the model is meant to change)",
        "scenarios": outputs,
    }
    path.write_text(_one_scenario_per_line(doc), encoding="utf-8")
    return len(outputs)


def _one_scenario_per_line(doc: dict[str, Any]) -> str:
    """Compact JSON with one line per scenario, so a diff names the scenarios that moved."""
    lines = [
        f"{json.dumps(key)}: {json.dumps(value, sort_keys=True, separators=(',', ':'))}"
        for key, value in doc["scenarios"].items()
    ]
    return '{"source": ' + json.dumps(doc["source"]) + ',\n"scenarios": {\n' + ",\n".join(lines) + "\n}}\n"


if __name__ == "__main__":
    _hermetic_env()
    n = record()
    print(f"recorded {n} scenarios to {GOLDEN_PATH.relative_to(ROOT)}")
