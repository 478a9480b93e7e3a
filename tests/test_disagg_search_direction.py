"""Issue 11's direction check for ``slo --compare-disaggregated``: a long-prompt, short-answer workload under a
tight P99 TPOT is served on fewer GPUs split into a prefill and a decode pool (its aggregated replicas carry
8,000-token prefill chunks in the decode steps), and the reverse (short prompts, long answers) is not: there the
decode steps carry almost no prefill and the prefill pool is GPUs the aggregated layout does not need."""

from __future__ import annotations

import json

import pytest

from planner.cli import main

BASE = [
    "slo", "meta-llama/Llama-3.1-8B", "--gpus", "h100-sxm", "--tp", "1", "--qps", "6", "--p99-tpot", "0.020",
    "--p99-ttft", "1.5", "--max-model-len", "16384", "--requests-per-probe", "300", "--compare-disaggregated",
    "--format", "json",
]  # fmt: skip


def _search(capsys, prompt: int, answer: int) -> dict:
    assert main([*BASE, "--input-len", str(prompt), "--output-len", str(answer)]) == 0
    return json.loads(capsys.readouterr().out)


def test_long_prompts_short_answers_split_on_fewer_gpus(capsys):
    plan = _search(capsys, 8000, 200)
    split = plan["disaggregated"]
    assert split["verdict"].startswith("disaggregated wins")
    assert split["best"]["meets"] and split["best"]["gpus"] < plan["recommendation"]["total_gpus"]
    assert split["best"]["tpot_p99_seconds"] <= 0.020 and split["best"]["ttft_p99_seconds"] <= 1.5
    assert "bound by P99 TPOT" in split["verdict"]  # the reason, in the verdict's words


@pytest.mark.parametrize(("prompt", "answer"), [(200, 2000)])
def test_short_prompts_long_answers_stay_aggregated(capsys, prompt, answer):
    plan = _search(capsys, prompt, answer)
    split = plan["disaggregated"]
    assert split["verdict"].startswith("aggregated wins")
    best = split["best"]
    assert best is None or best["gpus"] > plan["recommendation"]["total_gpus"]


def test_with_data_parallel_the_split_stays_within_its_gpu_cap(capsys, monkeypatch):
    """Each instance of an EP + DP 2 recommendation is two engines: the layouts tried count their GPUs that way and
    stop at 1.5 x the aggregated GPUs (DISAGG_GPU_HEADROOM), as the GPUs they report do. Every split is made to
    fail here (a refused request), so the search walks its whole list."""
    from planner.serve import slo

    real = slo.simulate_disaggregated

    def failing(*args, **kwargs):
        return real(*args, **kwargs).model_copy(update={"num_rejected": 1})

    monkeypatch.setattr(slo, "simulate_disaggregated", failing)
    argv = [
        "slo", "Qwen/Qwen3-30B-A3B", "--gpus", "h100-sxm", "--tp", "1", "--enable-expert-parallel",
        "--data-parallel-size", "2", "--qps", "6", "--input-len", "200", "--output-len", "2000", "--p99-tpot", "0.020",
        "--p99-ttft", "1.5", "--max-model-len", "16384", "--requests-per-probe", "100", "--compare-disaggregated",
        "--format", "json",
    ]  # fmt: skip
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    split, cap = plan["disaggregated"], int(plan["recommendation"]["total_gpus"] * slo.DISAGG_GPU_HEADROOM)
    gpus = [c["gpus"] for c in split["tried"]]
    assert split["best"] is None and split["verdict"].startswith("aggregated wins")
    assert len(gpus) > 1 and all(g % 2 == 0 for g in gpus)
    assert max(gpus) <= cap, (gpus, cap)
