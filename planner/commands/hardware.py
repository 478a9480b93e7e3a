"""``hardware``: the hardware profiles (built-in cards plus any in $PLANNER_HARDWARE_DIR), with sources."""

from __future__ import annotations

import argparse

from planner.commands.common import field_descriptions, fmt_bandwidth, fmt_flops, fmt_gib, render, table
from planner.hardware import HardwareProfile, get_profile, load_profiles

NAME = "hardware"
HELP = "List the hardware profiles (what --gpu takes) with memory, bandwidth, dense FLOP/s, links, price and sources."
EXAMPLE = "python -m planner hardware --format json"

OUTPUT_KEYS = {"(list)": "One object per card, sorted by id.", **field_descriptions(HardwareProfile)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "gpu",
        metavar="ID",
        nargs="?",
        default=None,
        help="Show only this card (an id, alias or device name, e.g. h100 or 'NVIDIA H100 80GB HBM3').",
    )


def run(args: argparse.Namespace) -> list[HardwareProfile]:
    if args.gpu:
        return [get_profile(args.gpu)]
    return [profile for _, profile in sorted(load_profiles().items())]


def render_table(result: list[HardwareProfile]) -> str:
    rows = []
    for p in result:
        flops = p.peak_flops_per_s
        rows.append(
            (
                p.id,
                p.name,
                fmt_gib(p.memory_bytes),
                fmt_bandwidth(p.hbm_bandwidth_bytes_per_s),
                fmt_flops(flops.get("bf16")) if "bf16" in flops else "-",
                fmt_flops(flops.get("fp8")) if "fp8" in flops else "-",
                (
                    f"{p.interconnect_kind or 'unknown'} "
                    + (
                        fmt_bandwidth(p.interconnect_bandwidth_bytes_per_s)
                        if p.interconnect_bandwidth_bytes_per_s
                        else ""
                    )
                ).strip(),
                p.gpus_per_node,
                "-" if p.price_per_hour_usd is None else f"${p.price_per_hour_usd:.2f}",
                p.confidence,
            )
        )
    title = (
        "Hardware profiles (datasheet figures, dense FLOP/s; memory is what CUDA reports; "
        "--format json shows every field and its source)"
    )
    return render(
        table(
            ["id", "name", "memory", "HBM", "bf16", "fp8", "link (bidir.)", "GPUs/node", "$/GPU-h", "conf."],
            rows,
            title=title,
            right=(2, 3, 4, 5, 7, 8),
        )
    )
