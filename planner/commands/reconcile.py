"""``reconcile``: re-plan the deployment a vLLM startup log describes and compare it term by term.

The scenario comes from the log (model, card by its printed memory, TP, max_model_len,
gpu_memory_utilization, block size, KV dtype, --enforce-eager); any scenario flag given on the
command line wins over the log. ``--adopt`` stores the measured overheads as calibration for the
card and vLLM version (see ``planner.verify.reconcile``). The flag helpers here (scenario flags
that default to "not given") are shared with the ``score`` command.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from planner.commands.common import (
    add_model_argument,
    add_scenario_flags,
    field_descriptions,
    heading,
    hf_token,
    load_model,
    parse_precision,
    render,
    table,
    warn,
)
from planner.errors import ConfigError
from planner.hardware import get_profile
from planner.verify.history import append, entries_from_reconciliation
from planner.verify.mismatch import log_mismatches
from planner.verify.reconcile import Reconciliation, adopt_overheads, format_term_value, reconcile
from planner.verify.vllm_log import parse_vllm_log

NAME = "reconcile"
HELP = (
    "Re-plan the scenario a vLLM startup log describes and compare each memory term (weights, overheads, KV "
    "cache, blocks, tokens, max concurrency) with what vLLM printed; --adopt keeps the measured overheads."
)
EXAMPLE = "python -m planner reconcile server.log --gpu l40s --format json"

OUTPUT_KEYS = {
    **field_descriptions(Reconciliation),
    "mismatches": "Ways the log is not about the plan (kind model/weights/card, run, plan, message); empty when "
    "they agree.",
    "adopted_to": "Calibration file the measured overheads were written to (--adopt); null otherwise.",
    "recorded_to": "History file the compared terms were appended to (--record); null otherwise.",
}

#: Scenario flag dest -> Scenario field, for flags whose value overrides the file when given.
SCENARIO_DESTS = {
    "gpu": "gpu",
    "num_gpus": "num_gpus",
    "tp": "tp",
    "pp": "pp",
    "weight_dtype": "weight_dtype",
    "kv_cache_dtype": "kv_cache_dtype",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "block_size": "block_size",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "engine": "engine",
}
MAX_LOG_BYTES = 64 * 1024 * 1024


def optional_model_argument(parser: argparse.ArgumentParser, default_from: str) -> None:
    """MODEL (with --hf-token, --revision, --source) made optional: without it, the model the file names."""
    add_model_argument(parser)
    for action in parser._actions:  # argparse keeps no public handle on a positional
        if action.dest == "model":
            action.nargs, action.default, action.required = "?", None, False
            action.help = f"{action.help} Default: the model {default_from} names."


def add_override_flags(parser: argparse.ArgumentParser, default_text: str) -> None:
    """The scenario flags, defaulting to 'not given' so that only flags typed override the file.

    ``default_text`` replaces each flag's "Default: ..." in --help, e.g. "what the log says".
    """
    add_scenario_flags(parser, workload=False)
    parser.set_defaults(**{dest: None for dest in SCENARIO_DESTS}, precision=None)
    for action in parser._actions:
        if action.dest in SCENARIO_DESTS and action.help:
            action.help = action.help.replace("Default: %(default)s (vLLM 0.33.0).", f"Default: {default_text}.")
            action.help = action.help.replace("Default: %(default)s.", f"Default: {default_text}.")


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Scenario fields the user typed on the command line (and only those)."""
    out = {field: getattr(args, dest) for dest, field in SCENARIO_DESTS.items() if getattr(args, dest) is not None}
    if args.precision:
        out["precision_overrides"] = parse_precision(args.precision)
    if args.enforce_eager:
        out["engine"] = "eager"
    if args.chunked_prefill is not None:
        out["enable_chunked_prefill"] = args.chunked_prefill
    return out


def read_text(path: str) -> str:
    """A log or result file as text (undecodable bytes replaced); '-' reads standard input."""
    if path == "-":
        return sys.stdin.read()
    file = Path(path).expanduser()
    if not file.exists():  # a path the user named: bad input (exit 2), as for score's and simulate's files
        raise ConfigError(f"no such file: {path}.", hint="Check the path, or pass '-' to read the log from stdin.")
    if file.is_file() and file.stat().st_size > MAX_LOG_BYTES:
        raise ConfigError(
            f"{path} is {file.stat().st_size / 2**20:,.0f} MiB; a startup log is a few MiB at most.",
            hint="Pass the part of the log from the server's start, e.g. `head -c 5M server.log > start.log`.",
        )
    return file.read_text(encoding="utf-8", errors="replace")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "logfile", metavar="LOGFILE", help="vLLM server output (docker logs, journal, a paste); '-' reads stdin."
    )
    optional_model_argument(parser, "the log")
    add_override_flags(parser, "what the log says")
    c = parser.add_argument_group("calibration and history")
    c.add_argument(
        "--calibrated",
        action="store_true",
        help="Plan with the overheads adopted earlier for this card and vLLM version (the adopted terms then "
        "show as 'calibrated').",
    )
    c.add_argument(
        "--adopt",
        action="store_true",
        help="Write the measured non-torch, activation and CUDA-graph memory as calibration for this card "
        "and vLLM version (<calibration folder>/overheads/memory_overheads.yaml; the folder is "
        "$PLANNER_CALIBRATION_DIR, else ~/.cache/llm-planner/hardware).",
    )
    c.add_argument(
        "--calibration-file",
        metavar="PATH",
        default=None,
        help="Calibration file to write (--adopt) or read (--calibrated) instead of the default.",
    )
    c.add_argument(
        "--record",
        action="store_true",
        help="Append the compared terms to the accuracy history ($PLANNER_HISTORY_PATH, else "
        "~/.cache/llm-planner/accuracy_history.jsonl).",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    report = parse_vllm_log(read_text(args.logfile))
    if args.engine_version and not report.vllm_version:  # the shared --engine-version: vllm@V or V
        report = report.model_copy(update={"vllm_version": args.engine_version.split("@")[-1]})
    model = load_model(args)[0] if args.model else None
    rec = reconcile(
        report,
        overrides_from_args(args),
        model=model,
        token=hf_token(args),
        use_calibration=args.calibrated,
        calibration_path=args.calibration_file,
    )
    # flagged before the terms are read: a log of another model or card makes every term off by their ratio
    overrides = overrides_from_args(args)
    card = get_profile(overrides["gpu"]) if "gpu" in overrides else None
    mismatches = log_mismatches(report, rec, plan_model=model.name if model else None, card=card)
    for m in mismatches:
        warn(f"not the same {m.kind}: {m.message}")
    source = "stdin" if args.logfile == "-" else str(Path(args.logfile).expanduser().resolve())
    adopted = str(adopt_overheads(rec, path=args.calibration_file, source=source)) if args.adopt else None
    recorded = str(append(entries_from_reconciliation(rec, label=source))) if args.record else None
    return {
        **rec.model_dump(mode="json"),
        "mismatches": [m.model_dump() for m in mismatches],
        "adopted_to": adopted,
        "recorded_to": recorded,
    }


def render_table(r: dict[str, Any]) -> str:
    rec = Reconciliation.model_validate({k: v for k, v in r.items() if k in Reconciliation.model_fields})
    sc = rec.scenario
    head = heading(
        f"{rec.model} on {rec.card_name} (tp {sc.tp}, pp {sc.pp}), vLLM {rec.engine_version or 'version unknown'}"
        f"{' ' + rec.engine if rec.engine else ''}"
    )
    scenario = (
        f"max-model-len {rec.resolved.max_model_len:,}, gpu-memory-utilization {rec.resolved.gpu_memory_utilization}, "
        f"block-size {rec.resolved.block_size}, kv-cache-dtype {rec.resolved.kv_cache_dtype}, "
        f"max-num-batched-tokens {rec.resolved.max_num_batched_tokens:,}, engine {sc.engine}"
    )
    terms = table(
        ["term (per GPU)", "planner", "vLLM printed", "difference", "planner is", "vLLM line"],
        [
            (
                t.name,
                format_term_value(t.predicted, t.unit),
                format_term_value(t.reported, t.unit),
                "-" if t.difference_pct is None else f"{t.difference_pct:+.1f}%",
                t.predicted_kind,
                t.reported_how,
            )
            for t in rec.terms
        ],
        right=(1, 2, 3),
    )
    parts: list[Any] = [head, scenario, f"card: {rec.card_how}", "", terms, "", heading(rec.summary)]
    if rec.overridden:
        parts.append(
            "overridden: " + ", ".join(f"{k} (log {v['log']}, given {v['given']})" for k, v in rec.overridden.items())
        )
    if rec.assumptions:
        parts.append("assumed:")
        parts += [f"  - {a}" for a in rec.assumptions]
    if rec.warnings:
        parts.append("warnings:")
        parts += [f"  - {w}" for w in rec.warnings]
    if r.get("adopted_to"):
        parts.append(f"adopted the measured overheads into {r['adopted_to']}")
    if r.get("recorded_to"):
        parts.append(f"recorded to {r['recorded_to']}")
    return render(*parts)
