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
from planner.estimate.placement import Placement, place

NAME = "plan"
HELP = (
    "Memory plan per GPU under the engine's rules (vLLM's, or --engine-version's: SGLang, TensorRT-LLM): does it "
    "start, KV-cache tokens, blocks, max concurrency, and what would make it fit."
)
EXAMPLE = "python -m planner plan Qwen/Qwen3-30B-A3B --gpu h100-sxm --tp 2 --kv-dtype fp8 --max-model-len 32768"

OUTPUT_KEYS = {
    "model": "The model planned (repo id, catalog name or path).",
    "gpu_id": "Hardware profile id (--gpu).",
    **field_descriptions(MemoryPlan),
    "placement": "Every GPU of one replica (planner.estimate.placement): stage, layers, node, weight and KV bytes "
    "per rank, and the link each TP group and stage boundary uses; with --enable-expert-parallel each rank's DP "
    "rank, EP rank and the experts it holds, and the dispatch's link.",
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
    placement = place(spec, hw, sc)
    return {
        "model": spec.name,
        "gpu_id": hw.id,
        **to_jsonable(plan),
        "placement": to_jsonable(placement),
        "kinds": KINDS,
    }


def render_table(r: dict[str, Any]) -> str:
    plan = MemoryPlan.model_validate({k: v for k, v in r.items() if k in MemoryPlan.model_fields})
    res = plan.resolved
    verdict = heading(plan.reason)
    placement = Placement.model_validate(r["placement"]) if "placement" in r else None
    nodes = f", {placement.num_nodes} node(s) of {placement.gpus_per_node}" if placement else ""
    if res.ep > 1:
        nodes += f", expert-parallel {res.ep}" + (f", data-parallel {res.dp}" if res.dp > 1 else "")
    scenario = (
        f"{r['model']} on {plan.gpu_name} (tp {res.tp}, pp {res.pp}{nodes}); max-model-len "
        f"{res.max_model_len:,}, kv-cache-dtype {res.kv_cache_dtype}, block-size {res.block_size}, max-num-seqs "
        f"{res.max_num_seqs}, max-num-batched-tokens {res.max_num_batched_tokens:,}, "
        f"{res.fraction_flag.lstrip('-')} {res.gpu_memory_utilization}"
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
    if placement is not None and (placement.pp > 1 or placement.num_nodes > 1):
        parts += ["", placement_table(placement)]
    if placement is not None and placement.ep is not None:
        parts += ["", expert_table(placement)]
    if plan.suggestions:
        parts.append(heading("suggestions (each re-planned):"))
        parts += [f"  - {s}" for s in plan.suggestions]
    return render(*parts)


def placement_table(p: Placement) -> Any:
    """One row per pipeline stage: its layers, ranks, nodes, bytes per GPU and links."""
    ranks = {r.stage: r for r in p.ranks}
    rows = []
    for st in p.stages:
        r = ranks[st.stage]
        rows.append(
            (
                str(st.stage),
                f"{st.layer_start}-{st.layer_stop - 1}"
                + (" +emb" if r.holds_embedding else "")
                + (" +head" if r.holds_lm_head else ""),
                f"{st.ranks[0]}-{st.ranks[-1]}" if len(st.ranks) > 1 else str(st.ranks[0]),
                ",".join(str(n) for n in st.nodes),
                fmt_gib(r.weight_bytes, 2),
                fmt_gib(r.kv_cache_bytes, 2),
                st.tp_link,
                st.send_link or "-",
            )
        )
    return table(
        ["stage", "layers", "ranks", "node", "weights/GPU", "KV cache/GPU", "TP link", "send to next"],
        rows,
        title=f"Placement: {p.tp * p.pp} GPUs on {p.num_nodes} node(s) (vLLM's get_pp_indices split)",
        right=(4, 5),
    )


def expert_table(p: Placement) -> Any:
    """With expert parallelism: one row per GPU, its DP rank (its own batch and KV cache), EP rank and experts."""
    rows = [
        (
            str(r.rank),
            "-" if r.dp_rank is None else str(r.dp_rank),
            str(r.ep_rank),
            f"{r.experts[0]}-{r.experts[1] - 1}" if r.experts else "-",
            str(r.node),
            fmt_gib(r.weight_bytes, 2),
            fmt_gib(r.kv_cache_bytes, 2),
        )
        for r in p.ranks
    ]
    dp = f" x {p.data_parallel_size} DP ranks" if p.data_parallel_size else ""
    return table(
        ["rank", "DP rank", "EP rank", "experts", "node", "weights/GPU", "KV cache/GPU"],
        rows,
        title=f"Experts: EP {p.ep} ({p.tp} TP{dp}), dispatch over {p.ep_link} (vLLM's linear expert map)",
        right=(5, 6),
    )
