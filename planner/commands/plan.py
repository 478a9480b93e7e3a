"""``plan``: will vLLM start, and how many bytes go where on each GPU."""

from __future__ import annotations

import argparse
from typing import Any

from planner.commands.common import (
    add_model_argument,
    add_scenario_flags,
    field_descriptions,
    fmt_bytes,
    fmt_gib,
    fmt_int,
    hardware_from_args,
    heading,
    kind_text,
    load_model,
    render,
    scenario_from_args,
    table,
    to_jsonable,
)
from planner.estimate.memory import MemoryPlan, plan_memory

NAME = "plan"
HELP = (
    "Memory plan per GPU under vLLM: does it start, KV-cache tokens, blocks, max concurrency, "
    "and what would make it fit."
)
EXAMPLE = "python -m planner plan Qwen/Qwen3-30B-A3B --gpu h100-sxm --tp 2 --kv-dtype fp8 --max-model-len 32768"

OUTPUT_KEYS = {
    "model": "The model planned (repo id, catalog name or path).",
    "gpu_id": "Hardware profile id (--gpu).",
    **field_descriptions(MemoryPlan),
    "kinds": "What each number is: 'exact' (follows from config.json) or 'estimate' (depends on estimated overheads).",
}

#: The plan's numbers and what they are: weights and per-token KV follow from config.json; anything
#: that depends on the estimated overheads (activations, CUDA graphs, non-torch) is an estimate.
KINDS = {
    "weight_bytes_per_gpu": "exact",
    "kv_bytes_per_token_per_gpu": "exact",
    "bytes_per_block": "exact",
    "blocks_per_request": "exact",
    "activation_bytes_per_gpu": "estimate",
    "cuda_graph_bytes_per_gpu": "estimate",
    "non_torch_bytes_per_gpu": "estimate",
    "kv_cache_bytes_per_gpu": "estimate",
    "num_gpu_blocks": "estimate",
    "kv_cache_tokens": "estimate",
    "max_concurrency": "estimate",
    "max_model_len_that_fits": "estimate",
    "fits": "estimate",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_scenario_flags(parser, workload=False)


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec, _ = load_model(args)
    sc = scenario_from_args(args)
    hw = hardware_from_args(args)
    plan = plan_memory(spec, hw, sc)
    return {"model": spec.name, "gpu_id": hw.id, **to_jsonable(plan), "kinds": KINDS}


def render_table(r: dict[str, Any]) -> str:
    plan = MemoryPlan.model_validate({k: v for k, v in r.items() if k in MemoryPlan.model_fields})
    res = plan.resolved
    verdict = heading(plan.reason)
    scenario = (
        f"{r['model']} on {plan.gpu_name} (tp {res.tp}, pp {res.pp}); max-model-len "
        f"{res.max_model_len:,}, kv-cache-dtype {res.kv_cache_dtype}, block-size {res.block_size}, max-num-seqs "
        f"{res.max_num_seqs}, max-num-batched-tokens {res.max_num_batched_tokens:,}, gpu-memory-utilization "
        f"{res.gpu_memory_utilization}"
    )
    memory = table(
        ["use", "bytes", "kind"],
        [(t.name, fmt_gib(t.bytes, 2), kind_text(t.kind)) for t in plan.terms]
        + [
            ("total (CUDA-visible)", fmt_gib(plan.total_memory_bytes_per_gpu, 2), kind_text("exact")),
            (
                f"vLLM may use (x {res.gpu_memory_utilization})",
                fmt_gib(plan.requested_memory_bytes_per_gpu, 2),
                kind_text("exact"),
            ),
        ],
        title="Memory per GPU",
        right=(1,),
    )
    kv = table(
        ["KV cache", "value", "kind"],
        [
            ("bytes per token (this GPU)", fmt_bytes(plan.kv_bytes_per_token_per_gpu), kind_text("exact")),
            ("KV-cache memory (this GPU)", fmt_gib(plan.kv_cache_bytes_per_gpu, 2), kind_text("estimate")),
            ("GPU blocks", fmt_int(plan.num_gpu_blocks), kind_text("estimate")),
            ("KV-cache tokens", fmt_int(plan.kv_cache_tokens), kind_text("estimate")),
            (f"max concurrency at {res.max_model_len:,} tokens", f"{plan.max_concurrency:,.2f}", kind_text("estimate")),
            ("largest max-model-len that fits", fmt_int(plan.max_model_len_that_fits), kind_text("estimate")),
        ],
        title="KV cache",
        right=(1,),
    )
    parts: list[Any] = [verdict, scenario, "", memory, "", kv]
    if plan.suggestions:
        parts.append(heading("suggestions (each re-planned):"))
        parts += [f"  - {s}" for s in plan.suggestions]
    return render(*parts)
