"""Known values: the planner's outputs on a bounded scenario set match tests/golden/outputs.json.

The golden file is the planner's own output (``tools/record_golden_outputs.py``), pinned so that a
speed change moves no number: floats match to a relative 1e-12, everything else exactly. When a
change is meant to move numbers (the serving model, an engine profile), re-record in that commit:

    PLANNER_RECORD_GOLDEN=1 python -m pytest tests/test_golden_outputs.py
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest

from tools import record_golden_outputs as golden

REL = 1e-12
RECORD = os.environ.get("PLANNER_RECORD_GOLDEN") == "1"


def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Every place where ``actual`` departs from ``expected`` (floats within REL), as 'path: a != b'."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{path}.{k}: missing" for k in expected if k not in actual]
        out += [f"{path}.{k}: unexpected" for k in actual if k not in expected]
        for key in expected.keys() & actual.keys():
            out += differences(expected[key], actual[key], f"{path}.{key}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(actual)} items != {len(expected)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{path}[{i}]")]
    if type(expected) is float and type(actual) is float:
        if math.isclose(expected, actual, rel_tol=REL, abs_tol=0.0) or expected == actual:
            return []
        return [f"{path}: {actual!r} != {expected!r}"]
    if type(expected) is not type(actual) or expected != actual:
        return [f"{path}: {actual!r} != {expected!r}"]
    return []


def test_differences_finds_a_moved_float_and_a_changed_text() -> None:
    expected = {"a": [1.0, 2, "x"], "b": {"c": 0.1}}
    assert differences(expected, json.loads(json.dumps(expected))) == []
    assert differences(expected, {"a": [1.0 + 1e-9, 2, "y"], "b": {"c": 0.1}}) == [
        ".a[0]: 1.000000001 != 1.0",
        ".a[2]: 'y' != 'x'",
    ]
    assert differences({"n": 3}, {"n": 3.0}) == [".n: 3.0 != 3"]


@pytest.fixture(scope="module")
def outputs() -> dict[str, Any]:
    if RECORD:
        golden.record()
    return golden.compute_outputs()


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(golden.GOLDEN_PATH.read_text(encoding="utf-8"))["scenarios"]


def test_scenario_set_is_the_recorded_one(outputs: dict[str, Any], recorded: dict[str, Any]) -> None:
    """A new catalog family (or a changed scenario list) needs a re-record, not a silent pass."""
    assert sorted(outputs) == sorted(recorded), (
        "re-record: PLANNER_RECORD_GOLDEN=1 python -m pytest tests/test_golden_outputs.py"
    )


def test_every_catalog_family_is_pinned() -> None:
    from planner.model.sources import catalog_entries

    names = set(golden.model_names())
    assert {e.family for e in catalog_entries() if e.repo_id in names} == {e.family for e in catalog_entries()}


def test_set_covers_refusals_misfits_and_fits_if(recorded: dict[str, Any]) -> None:
    """The set exercises every branch of the plan's verdict and suggestions, not only the happy path."""
    plans = [v["plan"] for v in recorded.values()]
    assert any("error" in p for p in plans)
    assert any(p.get("fits") is True for p in plans) and any(p.get("fits") is False for p in plans)
    assert any(s.startswith("fits if --max-model-len") for p in plans for s in p.get("suggestions", []))
    assert any(s.startswith("fits with") for p in plans for s in p.get("suggestions", []))


@pytest.mark.parametrize("part", ["plan", "roofline_prefill", "roofline_decode", "latency"])
def test_outputs_match_golden(part: str, outputs: dict[str, Any], recorded: dict[str, Any]) -> None:
    found = []
    for key in sorted(recorded.keys() & outputs.keys()):
        found += [f"{key}: {d}" for d in differences(recorded[key][part], outputs[key][part], part)]
    assert not found, f"{len(found)} differences, first ones:\n" + "\n".join(found[:20])
