"""Is this run about the plan's model and card? Checked before a log or bench file is compared with a plan.

A vLLM startup log or a benchmark result names the model it served; a log also prints the card's
memory and the weights it loaded. Compared with a plan of another model (a 70B log against an 8B
plan) every term is off by the ratio of the models, and the comparison says nothing about the
planner. These checks say so first, each with both values:

* model: the names, reduced to a key (the part after the last '/', lower case, without a
  fine-tuning suffix such as '-Instruct' and without punctuation), differ:
  'meta-llama/Llama-3.1-70B-Instruct' -> 'llama3170b' is not 'llama318b';
* weights: the weights the log loaded per GPU and the plan's differ by more than
  ``WEIGHTS_TOLERANCE`` (a different model, or a quantization the plan does not use);
* card: the total memory the log printed and the card's differ by more than ``MEMORY_TOLERANCE``.

Pure functions over names and numbers; the faces decide what to do (warn, refuse).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.hardware import HardwareProfile
from planner.model.sources import normalise_name
from planner.units import GiB, fmt_gib
from planner.verify.bench_results import BenchResult
from planner.verify.reconcile import Reconciliation
from planner.verify.vllm_log import VllmStartupReport

FINE_TUNE_SUFFIXES = ("instruct", "chat", "it", "hf", "base")
"""Name endings that keep the architecture of the base model ('Llama-3.1-8B-Instruct' is 'Llama-3.1-8B')."""
WEIGHTS_TOLERANCE = 0.25
"""Largest |log / plan - 1| of the weights per GPU still read as the same model and precision (a fraction):
vocab padding, a tied lm_head or a few unquantized layers move it by a few percent, another model by far more."""
MEMORY_TOLERANCE = 0.10
"""Largest |log / card - 1| of a GPU's total memory still read as the same card (a fraction): drivers and
ECC reserve a few percent; an 80 GB card against a 24 GB one is off by more than 3x."""


class Mismatch(BaseModel):
    """One way a run is not about the plan it is compared with."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["model", "weights", "card"] = Field(
        description="What differs: the model's name, its weights, or the card."
    )
    run: str = Field(description="The run's value, as read from the log or file; free text.")
    plan: str = Field(description="The plan's value; free text.")
    message: str = Field(description="Both values and what the difference does to the comparison; free text.")


def model_key(name: str) -> str:
    """'meta-llama/Llama-3.1-8B-Instruct' -> 'llama318b': the last path part, lower case, fine-tune suffix and
    punctuation removed, so a local path and a repo id of the same model meet."""
    last = name.strip().rstrip("/").split("/")[-1].lower()
    for suffix in FINE_TUNE_SUFFIXES:
        last = re.sub(rf"[-_.]{suffix}$", "", last)
    return normalise_name(last)


def model_mismatch(run_model: str | None, plan_model: str) -> Mismatch | None:
    """A Mismatch when the run names a model whose key is not the plan's; None when they meet or the run names none."""
    if not run_model or model_key(run_model) == model_key(plan_model):
        return None
    return Mismatch(
        kind="model",
        run=run_model,
        plan=plan_model,
        message=f"the run served {run_model}, the plan is for {plan_model}: every figure compares two "
        "different models.",
    )


def weights_mismatch(
    run_weight_bytes: float | None, plan_weight_bytes: float | None, tolerance: float = WEIGHTS_TOLERANCE
) -> Mismatch | None:
    """A Mismatch when the weights per GPU the run loaded and the plan's differ by more than ``tolerance``."""
    if not run_weight_bytes or not plan_weight_bytes or abs(run_weight_bytes / plan_weight_bytes - 1) <= tolerance:
        return None
    ratio = run_weight_bytes / plan_weight_bytes
    return Mismatch(
        kind="weights",
        run=fmt_gib(run_weight_bytes),
        plan=fmt_gib(plan_weight_bytes),
        message=f"the run loaded {fmt_gib(run_weight_bytes)} of weights per GPU, the plan has "
        f"{fmt_gib(plan_weight_bytes)} ({ratio:.2f}x): another model, tensor-parallel size or "
        "weight precision than the plan's.",
    )


def card_mismatch(
    run_total_memory_bytes: float | None, card_memory_bytes: float, card_name: str, tolerance: float = MEMORY_TOLERANCE
) -> Mismatch | None:
    """A Mismatch when the GPU memory the run printed is not the card's (more than ``tolerance`` apart)."""
    if not run_total_memory_bytes or abs(run_total_memory_bytes / card_memory_bytes - 1) <= tolerance:
        return None
    plan = f"{card_name} ({fmt_gib(card_memory_bytes)})"
    return Mismatch(
        kind="card",
        run=fmt_gib(run_total_memory_bytes),
        plan=plan,
        message=f"the run's GPU has {run_total_memory_bytes / GiB:,.1f} GiB, the plan's {card_name} has "
        f"{card_memory_bytes / GiB:,.1f} GiB: the memory terms compare two different cards.",
    )


def log_mismatches(
    report: VllmStartupReport, rec: Reconciliation, plan_model: str | None = None, card: HardwareProfile | None = None
) -> list[Mismatch]:
    """A startup log against the plan it was reconciled with: the model (``plan_model``, when the plan's model
    was given rather than read from the log), the card (``card``, likewise) and, always, the weights per GPU."""
    weights = next((t for t in rec.terms if t.name == "weights"), None)
    found = [
        model_mismatch(report.model, plan_model) if plan_model else None,
        card_mismatch(report.total_gpu_memory_bytes, card.memory_bytes, card.name) if card else None,
        weights_mismatch(weights.reported, weights.predicted) if weights else None,
    ]
    return [m for m in found if m is not None]


def bench_mismatches(bench: BenchResult, plan_model: str) -> list[Mismatch]:
    """A benchmark result against the plan it is scored with: the model the tool sent requests for."""
    found = model_mismatch(bench.model, plan_model)
    return [] if found is None else [found]
