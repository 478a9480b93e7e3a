"""``slo``: the cheapest deployment that serves a request rate within latency targets, and what it costs."""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text

from planner.commands.common import (
    Number,
    add_chunked_prefill_flags,
    add_model_argument,
    add_price_flag,
    comma_list,
    field_descriptions,
    fmt_seconds,
    heading,
    kind_text,
    load_model,
    prices_from_args,
    render,
    table,
)
from planner.commands.simulate import add_workload_flags, workload_from_args
from planner.efficiency import BOUND
from planner.scenario import Scenario
from planner.serve.disagg import KV_LINK_KINDS
from planner.serve.simulate import LatencyStats
from planner.serve.slo import (
    MAX_DISAGG_PROBES,
    METRICS,
    SLO,
    CandidateSpace,
    SearchSettings,
    SLOPlan,
    SLOTarget,
    missing_price_hint,
    plan_slo,
    search_disaggregated,
)
from planner.serve.workload import MAX_REQUESTS

NAME = "slo"
HELP = (
    "Cheapest deployment (card, TP/PP, precision, replicas) whose simulated P99/P90 TTFT, TPOT and E2E meet "
    "your targets at a request rate; with $/hour, cost and energy per 1M tokens, and the Pareto front."
)
EXAMPLE = (
    "python -m planner slo meta-llama/Llama-3.1-8B --qps 20 --p99-ttft 1.0 --p99-tpot 0.05 "
    "--gpus h100-sxm,l40s --tp 1,2,4 --weight-dtypes auto,fp8"
)

OUTPUT_KEYS = field_descriptions(SLOPlan)

STATISTICS = ("p99", "p90", "p50", "mean")
_S = Scenario.model_fields
#: Longest latency target: a day (86,400 s); a target beyond that is no latency target.
MAX_TARGET_SECONDS = 86_400.0


_MAX_NUM_SEQS = Number.of(int, "--max-num-seqs", Scenario, "max_num_seqs")


def _optional_int(text: str) -> int | None:
    """'auto' (vLLM's default) -> None, else a max_num_seqs within the Scenario field's range."""
    return None if text.lower() in ("auto", "default") else int(_MAX_NUM_SEQS(text))  # an int already: Number.of(int)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_workload_flags(parser, rate_required=True)
    s = parser.add_argument_group("targets (seconds; give at least one, any subset)")
    for metric, m in METRICS.items():
        for stat in STATISTICS:
            s.add_argument(
                f"--{stat}-{metric}",
                dest=f"{stat}_{metric}",
                metavar="S",
                default=None,
                type=Number.of(float, f"--{stat}-{metric}", SLOTarget, "seconds", le=MAX_TARGET_SECONDS),
                help=f"{stat.upper() if stat != 'mean' else 'Mean'} {m.meaning} at most S seconds."
                if stat in ("p99", "p90")
                else argparse.SUPPRESS,
            )
    c = parser.add_argument_group("candidates (comma-separated lists; every combination is tried)")
    c.add_argument(
        "--gpus",
        type=comma_list(str, "a hardware profile id"),
        default=("h100-sxm",),
        metavar="IDS",
        help="Cards to try, e.g. h100-sxm,l40s (python -m planner hardware lists them). Default: h100-sxm.",
    )
    c.add_argument(
        "--tp",
        "--tensor-parallel-size",
        dest="tp",
        default=(1, 2, 4, 8),
        type=comma_list(Number.of(int, "--tp", Scenario, "tp"), "an integer"),
        metavar="LIST",
        help="Tensor-parallel sizes to try. Default: 1,2,4,8.",
    )
    c.add_argument(
        "--pp",
        "--pipeline-parallel-size",
        dest="pp",
        default=(1,),
        type=comma_list(Number.of(int, "--pp", Scenario, "pp"), "an integer"),
        metavar="LIST",
        help="Pipeline-parallel sizes to try. Default: 1.",
    )
    c.add_argument(
        "--data-parallel-size",
        dest="data_parallel_size",
        default=(1,),
        type=comma_list(Number.of(int, "--data-parallel-size", Scenario, "data_parallel_size"), "an integer"),
        metavar="LIST",
        help="Attention data-parallel sizes to try (vLLM --data-parallel-size; > 1 needs --enable-expert-parallel): "
        "a replica of tp x pp x dp GPUs, each DP rank at 1 / dp of its rate. Default: 1.",
    )
    c.add_argument(
        "--enable-expert-parallel",
        action="store_true",
        help="Try every candidate with vLLM --enable-expert-parallel (MoE experts split over tp x dp ranks). "
        "Default: off.",
    )
    c.add_argument(
        "--weight-dtypes",
        type=comma_list(str, "a dtype"),
        default=("auto",),
        metavar="LIST",
        help="Weight precisions to try, e.g. auto,fp8. " + (_S["weight_dtype"].description or ""),
    )
    c.add_argument(
        "--kv-dtypes",
        "--kv-cache-dtypes",
        dest="kv_dtypes",
        type=comma_list(str, "a dtype"),
        default=("auto",),
        metavar="LIST",
        help="KV-cache dtypes to try, e.g. auto,fp8. Default: auto.",
    )
    c.add_argument(
        "--max-num-seqs",
        type=comma_list(_optional_int, "an integer or auto"),
        default=(None,),
        metavar="LIST",
        help="max_num_seqs values to try (auto: vLLM's default), e.g. auto,256.",
    )
    b = parser.add_argument_group("every candidate (flags named as vLLM names them)")
    b.add_argument(
        "--max-model-len",
        metavar="N",
        type=Number.of(int, "--max-model-len", Scenario, "max_model_len"),
        default=None,
        help="Longest request, in tokens. Default: the workload's longest request, rounded up to 256.",
    )
    b.add_argument(
        "--gpu-memory-utilization",
        metavar="F",
        default=None,
        type=Number.of(float, "--gpu-memory-utilization", Scenario, "gpu_memory_utilization"),
        help=_S["gpu_memory_utilization"].description,
    )
    b.add_argument(
        "--max-num-batched-tokens",
        metavar="N",
        default=None,
        type=Number.of(int, "--max-num-batched-tokens", Scenario, "max_num_batched_tokens"),
        help=_S["max_num_batched_tokens"].description,
    )
    b.add_argument(
        "--block-size",
        metavar="N",
        type=Number.of(int, "--block-size", Scenario, "block_size"),
        default=None,
        help=_S["block_size"].description,
    )
    b.add_argument("--enforce-eager", action="store_true", help="Eager mode, no CUDA graphs (vLLM's flag).")
    add_chunked_prefill_flags(b)
    add_price_flag(parser.add_argument_group("cost"), several_cards=True)
    q = parser.add_argument_group("search")
    defaults = SearchSettings()
    q.add_argument(
        "--requests-per-probe",
        metavar="N",
        default=defaults.requests_per_probe,
        type=Number.of(int, "--requests-per-probe", SearchSettings, "requests_per_probe", le=MAX_REQUESTS),
        help=f"{SearchSettings.model_fields['requests_per_probe'].description} At most {MAX_REQUESTS:,}. "
        "Default: %(default)s.",
    )
    q.add_argument(
        "--tolerance",
        metavar="F",
        default=defaults.rate_tolerance,
        type=Number.of(float, "--tolerance", SearchSettings, "rate_tolerance"),
        help=f"{SearchSettings.model_fields['rate_tolerance'].description} Default: %(default)s.",
    )
    q.add_argument("--exhaustive", action="store_true", help=SearchSettings.model_fields["exhaustive"].description)
    q.add_argument(
        "--bound",
        action="store_true",
        help="Time steps with the pure roofline (no overheads): an optimistic bound, not an estimate.",
    )
    q.add_argument(
        "--compare-disaggregated",
        action="store_true",
        help="Also find the fewest-GPU disaggregated prefill/decode split of the recommended card that meets the "
        f"targets (at most {MAX_DISAGG_PROBES} layouts simulated at the whole rate) and set it beside the "
        "aggregated recommendation ('disaggregated' in the JSON).",
    )
    q.add_argument(
        "--kv-transfer-link",
        choices=KV_LINK_KINDS,
        default="rdma",
        help="With --compare-disaggregated: how the KV cache goes between the pools. Default: %(default)s.",
    )


def run(args: argparse.Namespace) -> SLOPlan:
    prices = prices_from_args(args, args.gpus)  # before the model loads: a bad price fails fast
    spec, _ = load_model(args)
    slo = SLO.of(**{f"{stat}_{metric}": getattr(args, f"{stat}_{metric}") for metric in METRICS for stat in STATISTICS})
    base = Scenario(
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        engine="eager" if args.enforce_eager else "cuda-graphs",
        enable_chunked_prefill=args.chunked_prefill,
    )
    space = CandidateSpace(
        gpus=args.gpus,
        tp=args.tp,
        pp=args.pp,
        data_parallel_size=args.data_parallel_size,
        enable_expert_parallel=args.enable_expert_parallel,
        weight_dtypes=args.weight_dtypes,
        kv_cache_dtypes=args.kv_dtypes,
        max_num_seqs=args.max_num_seqs,
        base=base,
    )
    settings = SearchSettings(
        requests_per_probe=args.requests_per_probe, rate_tolerance=args.tolerance, exhaustive=args.exhaustive
    )
    workload = workload_from_args(args)
    efficiency = BOUND if args.bound else None
    plan = plan_slo(spec, slo, workload, space, settings, efficiency=efficiency, prices=prices)
    if not args.compare_disaggregated:
        return plan
    split = search_disaggregated(spec, plan, workload, settings, efficiency, prices, args.kv_transfer_link)
    return plan.model_copy(update={"disaggregated": split})


def _money(value: float | None, digits: int = 2) -> str:
    return "no price" if value is None else f"${value:,.{digits}f}"


def _maybe(value: float | None, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def _p99(stats: LatencyStats | None) -> str:
    return "none measured" if stats is None else fmt_seconds(stats.p99)


def render_table(plan: SLOPlan) -> str:
    parts: list[Any] = []
    head = (
        f"{plan.model_name}: {plan.target_rate_per_s:g} req/s of {plan.mean_input_tokens:,.0f} + "
        f"{plan.mean_output_tokens:,.0f} tokens (mean) within {plan.slo.describe()}"
    )
    parts.append(heading(head))
    best = plan.recommendation
    if plan.overloaded and best is not None:  # overloaded is the recommendation's verdict, None without one
        parts.append(
            Text(
                f"WARNING overloaded: {best.replicas} replica(s) at {plan.target_rate_per_s:g} req/s are above "
                f"their sustainable {best.saturation_requests_per_s:.2f} req/s each.",
                style="bold red",
            )
        )
    if best is None:
        parts.append(heading("No candidate meets the targets; the rows below say which target fails and by how much."))
    else:
        op = best.operating_point
        rows: list[tuple[str, str | Text]] = [
            (
                "deployment",
                f"{best.replicas} replica(s) of {best.gpus_per_replica} GPU(s): {best.label}, "
                f"{best.total_gpus} GPU(s) in all",
            ),
            (
                "cost",
                (
                    f"{_money(best.usd_per_hour)}/hour; {_money(best.usd_per_1m_input_tokens, 3)} per 1M input "
                    f"tokens, {_money(best.usd_per_1m_output_tokens, 3)} per 1M output tokens"
                )
                if best.usd_per_hour is not None
                else missing_price_hint([best.gpu]),
            ),
            (
                "energy (upper bound, TDP)",
                f"{_maybe(best.energy_kwh_per_1m_input_tokens_upper_bound, ',.3f')} kWh per 1M "
                f"input, {_maybe(best.energy_kwh_per_1m_output_tokens_upper_bound, ',.3f')} kWh "
                "per 1M output tokens",
            ),
            ("max rate per replica", f"{best.max_rate_per_replica_per_s:.2f} req/s (limit: {best.limiting_target})"),
            ("sustainable rate per replica (knee)", _maybe(best.saturation_requests_per_s, ".2f") + " req/s"),
        ]
        if op is not None:
            rows.append(
                (
                    "at the operating point",
                    (
                        f"{op.request_rate_per_s:.2f} req/s per replica: P99 TTFT {_p99(op.ttft_seconds)}, "
                        f"P99 TPOT {_p99(op.tpot_seconds)}, P99 E2E {_p99(op.e2e_seconds)}"
                    ),
                )
            )
        rows.append(("numbers are", kind_text(f"simulated with {best.step_time_kind} step times")))
        parts.append(table(["recommended", ""], rows))
    cand_rows = []
    for c in plan.candidates:
        cand_rows.append(
            (
                c.status,
                c.label,
                str(c.gpus_per_replica),
                _maybe(c.saturation_requests_per_s, ".2f"),
                _maybe(c.max_rate_per_replica_per_s, ".2f"),
                "" if c.replicas is None else str(c.replicas),
                "" if c.total_gpus is None else str(c.total_gpus),
                ("no price" if c.status == "meets" else "") if c.usd_per_hour is None else f"{c.usd_per_hour:,.2f}",
                _maybe(c.usd_per_1m_output_tokens, ",.3f"),
                c.reason,
            )
        )
    parts.append(
        table(
            [
                "status",
                "replica",
                "GPUs/replica",
                "knee req/s",
                "max req/s",
                "replicas",
                "GPUs",
                "$/h",
                "$/1M out",
                "why",
            ],
            cand_rows,
            title=f"candidates (ranked by {plan.ranked_by.replace('_', ' ')})",
            right=(2, 3, 4, 5, 6, 7, 8),
        )
    )
    if plan.pareto:
        parts.append(
            table(
                ["candidate", "req/s per replica", "tok/s per GPU", "tok/s per user", "meets SLO"],
                [
                    (
                        p.candidate,
                        f"{p.request_rate_per_s:.2f}",
                        f"{p.output_tokens_per_s_per_gpu:,.0f}",
                        f"{p.output_tokens_per_s_per_user:,.1f}",
                        "yes" if p.meets_slo else "no",
                    )
                    for p in plan.pareto
                ],
                title="Pareto front: output tokens/s per GPU vs per user (1 / mean TPOT)",
                right=(1, 2, 3),
            )
        )
    if plan.disaggregated is not None:
        split = plan.disaggregated
        parts.append(
            table(
                ["layout", "GPUs", "$/hour", "P99 TTFT", "P99 TPOT", "meets SLO"],
                [
                    (
                        c.layout.label,
                        str(c.gpus),
                        _money(c.usd_per_hour),
                        "unknown" if c.ttft_p99_seconds is None else fmt_seconds(c.ttft_p99_seconds),
                        "unknown" if c.tpot_p99_seconds is None else fmt_seconds(c.tpot_p99_seconds),
                        "yes" if c.meets else f"no: {c.failing}",
                    )
                    for c in split.tried
                ],
                title=f"disaggregated prefill/decode against {split.aggregated_label} ({split.aggregated_gpus} GPUs)",
                right=(1, 2, 3, 4),
            )
        )
        parts.append(Text(split.verdict))
    for note in plan.notes:
        parts.append(f"note: {note}")
    parts.append(f"simulated ({plan.step_time_kind or 'no'} step times); search took {plan.search_seconds:.2f} s")
    return render(*parts)
