"""``roofline``: per-op FLOPs, bytes, arithmetic intensity and the binding ceiling of one step."""

from __future__ import annotations

import argparse
from typing import Any

from planner.commands.common import (
    Number,
    add_efficiency_flag,
    add_model_argument,
    add_scenario_flags,
    efficiency_from_args,
    field_descriptions,
    fmt_bytes,
    fmt_flop_count,
    fmt_seconds,
    hardware_from_args,
    heading,
    kind_text,
    load_model,
    render,
    scenario_from_args,
    table,
    to_jsonable,
)
from planner.estimate import multimodal
from planner.estimate.roofline import OpTime, Roofline, roofline
from planner.scenario import MAX_TOKENS

NAME = "roofline"
HELP = "Per-layer roofline of one prefill or decode step: FLOPs, bytes, intensity, the binding ceiling and time per op."
EXAMPLE = (
    "python -m planner roofline deepseek-ai/DeepSeek-V3 --gpu h200 --tp 8 --stage decode --batch 64 --seq-len 4096"
)

OUTPUT_KEYS = {
    "model": "The model (repo id, catalog name or path).",
    "gpu_id": "Hardware profile id (--gpu).",
    **field_descriptions(Roofline),
    "layers[]": "Each op: " + "; ".join(f"{k}: {v}" for k, v in field_descriptions(OpTime).items()),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument(
        "--stage",
        choices=("prefill", "decode"),
        default="decode",
        help="prefill (batch x seq-len prompt tokens) or decode (one token for each of batch sequences "
        "at context seq-len). Default: %(default)s.",
    )
    parser.add_argument(
        "--seq-len",
        metavar="N",
        type=Number(int, "--seq-len", ge=1, le=MAX_TOKENS),
        default=None,
        help=f"Prompt length (prefill) or context length (decode), tokens (1 to {MAX_TOKENS:,}); with "
        "--images-per-request the images' tokens are added. Default: --input-len.",
    )
    add_scenario_flags(parser)
    add_efficiency_flag(parser)


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec, _ = load_model(args)
    sc = scenario_from_args(args)
    hw = hardware_from_args(args)
    seq_len = args.seq_len if args.seq_len is not None else sc.workload.input_len
    seq_len = multimodal.prompt_tokens(spec, sc, seq_len)  # the text and the images' tokens (unchanged without)
    result = roofline(spec, hw, sc, args.stage, sc.workload.batch_size, seq_len, efficiency_from_args(args, hw))
    return {"model": spec.name, "gpu_id": hw.id, **to_jsonable(result)}


def render_table(r: dict[str, Any]) -> str:
    rf = Roofline.model_validate({k: v for k, v in r.items() if k in Roofline.model_fields})
    rows = [
        (
            op.name,
            op.count,
            fmt_flop_count(op.flops),
            fmt_bytes(op.bytes),
            "-" if op.arithmetic_intensity is None else f"{op.arithmetic_intensity:,.1f}",
            op.bound,
            fmt_seconds(op.seconds),
            fmt_seconds(op.total_seconds),
        )
        for op in rf.layers
    ]
    ops = table(
        ["op (per rank)", "x", "FLOPs", "bytes", "FLOP/B", "bound", "time each", "time x count"],
        rows,
        title=f"{rf.stage} step of {r['model']} on {rf.gpu} (tp {rf.tp}), batch {rf.batch}, {rf.seq_len:,} tokens "
        f"(times: {rf.kind})",
        right=(1, 2, 3, 4, 6, 7),
    )
    summary = table(
        ["step", "value", "kind"],
        [
            ("step time", fmt_seconds(rf.total_seconds), kind_text(rf.kind)),
            (
                "FLOPs / HBM bytes (one rank)",
                f"{fmt_flop_count(rf.total_flops)} / {fmt_bytes(rf.total_bytes)}",
                kind_text("exact"),
            ),
            ("ridge point", f"{rf.ridge_point:,.0f} FLOP/B", kind_text("datasheet")),
            *[(f"time in {b}-bound ops", fmt_seconds(s), kind_text(rf.kind)) for b, s in rf.seconds_by_bound.items()],
        ],
        right=(1,),
    )
    parts: list[Any] = [ops, "", summary]
    if rf.pipeline:
        stages = table(
            ["stage", "layers", "GPU time", "send to next", "link"],
            [
                (
                    str(st.stage),
                    f"{st.layer_start}-{st.layer_stop - 1}",
                    fmt_seconds(st.gpu_seconds),
                    fmt_seconds(st.send_seconds) if st.send_link else "-",
                    st.send_link or "-",
                )
                for st in rf.pipeline
            ],
            title=f"pipeline stages (pp {len(rf.pipeline)}, times: {rf.kind})",
            right=(2, 3),
        )
        parts += ["", stages]
    return render(*parts, "", heading(rf.verdict))
