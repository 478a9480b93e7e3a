"""Seeded fuzz of the whole pipeline: mutated config.json files -> spec -> memory plan -> roofline -> latency.

Every case ends in a result or a ``PlannerError``-family message; never another exception, never a
negative or non-finite size or time in a result, never more than a few seconds. The default run
is a few hundred cases (CI); ``PLANNER_FUZZ_CASES=10000`` runs more, ``PLANNER_FUZZ_SEED`` picks
the seed. (Per-area fuzz: tests/test_config_validation.py for spec building alone,
tests/test_readers_robust.py for logs and bench files, tests/test_cli_inputs.py for flags.)
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import time
from pathlib import Path

from planner.errors import PlannerError
from planner.estimate.latency import estimate_latency
from planner.estimate.memory import plan_memory
from planner.estimate.roofline import roofline
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.scenario import Scenario

CATALOG = Path(__file__).resolve().parents[1] / "planner" / "model" / "catalog"
CASES = int(os.environ.get("PLANNER_FUZZ_CASES", "300"))
SEED = int(os.environ.get("PLANNER_FUZZ_SEED", "20261201"))
SECONDS_PER_CASE = 10.0
VALUES = (0, -1, 1, 2, 3, 7, 10**6, 10**12, 1.5, 4096.0, -0.5, float("inf"), "64", None, True, [], {}, [1, 2])


def _configs() -> list[dict]:
    out = []
    for path in sorted(CATALOG.glob("*.json")):
        out.append(json.loads(path.read_text()))
    return out


def _mutate(rng: random.Random, cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    target = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) and rng.random() < 0.5 else cfg
    keys = [k for k, v in target.items() if isinstance(v, (int, float, str, list, dict)) and k != "model_type"]
    for _ in range(rng.randint(1, 3)):
        if not keys:
            break
        key = rng.choice(keys)
        old = target[key]
        choice = rng.random()
        if isinstance(old, (int, float)) and not isinstance(old, bool) and choice < 0.5:
            target[key] = type(old)(old * rng.choice((0, -1, 2, 3, 0.5, 1000)))
        elif isinstance(old, list) and old and choice < 0.5:
            target[key] = old[: rng.randint(0, len(old))]
        else:
            target[key] = rng.choice(VALUES)
    return cfg


def _check_numbers(obj, where: str = "") -> None:
    """Sizes and times in a result are finite and not negative (shortfalls are named as such)."""
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump()
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_numbers(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_numbers(v, f"{where}[{i}]")
    elif isinstance(obj, float):
        assert math.isfinite(obj), f"non-finite number at {where}"
        leaf = where.rsplit(".", 1)[-1]
        if leaf.endswith(("_seconds", "_tokens", "_per_s")) or leaf in ("seconds", "flops", "bytes"):
            assert obj >= 0, f"negative {leaf} at {where}: {obj}"


def test_mutated_configs_end_in_a_result_or_a_planner_error():
    rng = random.Random(SEED)
    configs = _configs()
    hw = get_profile("h100-sxm")
    counts = {"result": 0, "refused": 0}
    for case in range(CASES):
        raw = _mutate(rng, rng.choice(configs))
        tp = rng.choice((1, 2, 4))
        t0 = time.perf_counter()
        try:
            spec = build_spec(raw, f"fuzz-{case}")
            sc = Scenario(tp=tp, max_model_len=rng.choice((None, 2048, 8192)))
            plan = plan_memory(spec, hw, sc, suggest=rng.random() < 0.3)
            for stage, batch, seq in (("decode", rng.choice((1, 8)), 1024), ("prefill", 1, 512)):
                _check_numbers(roofline(spec, hw, sc, stage, batch, seq), f"case {case} {stage}")
            _check_numbers(
                estimate_latency(spec, hw, sc, batch_size=2, input_len=256, output_len=32, check_memory=False),
                f"case {case} latency",
            )
            assert plan.weight_bytes_per_gpu >= 0 and plan.kv_cache_tokens >= 0, f"case {case}: negative memory figure"
            counts["result"] += 1
        except PlannerError as err:
            assert str(err).strip(), f"case {case}: empty message"
            counts["refused"] += 1
        elapsed = time.perf_counter() - t0
        assert elapsed < SECONDS_PER_CASE, f"case {case} took {elapsed:.1f} s: {json.dumps(raw)[:300]}"
    print(f"fuzz pipeline: {CASES} cases, seed {SEED}: {counts}")
    assert counts["result"] > 0 and counts["refused"] > 0, counts
