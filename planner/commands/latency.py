"""``latency``: TTFT, TPOT and throughput of one static batch."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from planner.commands.common import (
    add_efficiency_flag,
    add_model_argument,
    add_scenario_flags,
    add_speculative_flags,
    efficiency_from_args,
    field_descriptions,
    fmt_seconds,
    hardware_from_args,
    heading,
    kind_text,
    load_draft_model,
    load_model,
    render,
    scenario_from_args,
    table,
    to_jsonable,
)
from planner.estimate.latency import LatencyEstimate, estimate_latency

if TYPE_CHECKING:  # rich is imported by the table views only
    from rich.text import Text

NAME = "latency"
HELP = "TTFT, TPOT and throughput (tokens/s, requests/s) of a static batch, as a roofline bound or an estimate."
EXAMPLE = "python -m planner latency ./my-model/config.json --gpu l40s --batch 16 --input-len 2048 --output-len 256"

OUTPUT_KEYS = {
    "model": "The model (repo id, catalog name or path).",
    "gpu_id": "Hardware profile id (--gpu).",
    **field_descriptions(LatencyEstimate),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_scenario_flags(parser)
    add_speculative_flags(parser)
    add_efficiency_flag(parser)


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec, _ = load_model(args)
    sc = scenario_from_args(args)
    hw = hardware_from_args(args)
    estimate = estimate_latency(
        spec, hw, sc, efficiency=efficiency_from_args(args, hw), draft_model=load_draft_model(args)
    )
    return {"model": spec.name, "gpu_id": hw.id, **to_jsonable(estimate)}


def render_table(r: dict[str, Any]) -> str:
    est = LatencyEstimate.model_validate({k: v for k, v in r.items() if k in LatencyEstimate.model_fields})
    kind = kind_text(est.kind)
    rows: list[tuple[str, str, Text | str, str]] = [
        (
            "TTFT (whole batch prefilled)",
            fmt_seconds(est.ttft_seconds),
            kind,
            f"{est.prefill_steps} step(s), {est.prefill_bound}-bound",
        ),
        ("TPOT (one decode step)", fmt_seconds(est.tpot_seconds), kind, f"{est.decode_bound}-bound"),
        ("end to end per request", fmt_seconds(est.e2e_seconds), kind, ""),
        ("throughput", f"{est.throughput_tokens_per_s:,.1f} output tokens/s", kind, "all replicas"),
        ("throughput per GPU", f"{est.throughput_tokens_per_s_per_gpu:,.1f} output tokens/s", kind, ""),
        ("requests", f"{est.requests_per_s:,.3f} /s", kind, ""),
    ]
    title = (
        f"{r['model']} on {r['gpu_id']}: static batch of {est.batch_size}, {est.input_len:,} prompt + "
        f"{est.output_len:,} output tokens"
    )
    spec = est.speculative
    if spec is not None:
        rows[1] = (
            "TPOT (speculative step / tokens)",
            fmt_seconds(est.tpot_seconds),
            kind,
            f"{spec.speedup:.2f}x plain ({fmt_seconds(spec.baseline_tpot_seconds)})",
        )
        even = (
            "none up to batch " + f"{spec.break_even_searched_up_to:,}"
            if spec.break_even_batch is None
            else f"batch {spec.break_even_batch:,}"
        )
        rows += [
            (
                f"tokens per step ({spec.method}, k={spec.num_speculative_tokens}, a={spec.acceptance_rate:g})",
                f"{spec.tokens_per_step:.3f}",
                "exact",
                "(1 - a^(k+1)) / (1 - a)",
            ),
            ("draft per step (GPU)", fmt_seconds(spec.draft_seconds), kind, spec.draft_cost),
            (
                "verify per step (GPU)",
                fmt_seconds(spec.verify_seconds),
                kind,
                f"k + 1 = {spec.num_speculative_tokens + 1} tokens per sequence",
            ),
            ("speculation stops paying at", even, kind, "TPOT >= plain decoding"),
        ]
    pipe = est.pipeline
    if pipe is not None:
        rows += [
            (
                "decode micro-batches in flight",
                f"{pipe.in_flight_batches} of {pipe.micro_batch_size}",
                kind,
                f"slowest stage {fmt_seconds(max(pipe.decode_stage_seconds))}, "
                f"one pass {fmt_seconds(pipe.decode_latency_seconds)}",
            ),
            (
                "pipeline bubble (decode)",
                f"{est.pipeline_bubble_fraction:.1%}",
                kind,
                "share of the stages' time idle",
            ),
        ]
    if est.encoder_seconds is not None and est.image_tokens_per_request is not None:
        title += f" (+ {est.image_tokens_per_request:,} image tokens per request)"
        encoder = fmt_seconds(est.encoder_seconds)
        rows.insert(1, ("  of which the vision encoder", encoder, kind, "its ViT rows of the prefill"))
    parts: list[Any] = [table(["", "value", "kind", "note"], rows, title=title, right=(1,))]
    if est.does_not_start is not None:
        parts.append(
            heading(
                f"warning: this deployment {est.does_not_start}. The figures above are the steps' times as if it "
                "had started; the plan command says what would make it start."
            )
        )
    elif est.fits_in_kv_cache is False:
        parts.append(
            heading(
                "warning: this batch does not fit the planned KV cache (see the plan command); "
                "vLLM would queue or preempt requests."
            )
        )
    return render(*parts)
