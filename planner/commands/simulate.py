"""``simulate``: P50/P90/P99 TTFT, TPOT, ITL and end-to-end latency of one replica at a request rate.

The workload flags (``--qps`` / ``--concurrency`` / ``--trace``, lengths and their distribution,
prefix-cache hit rate, seed) are shared with the ``slo`` command, which imports them from here.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text

from planner.commands.common import (
    Number,
    add_disagg_flags,
    add_efficiency_flag,
    add_model_argument,
    add_scenario_flags,
    add_speculative_flags,
    comma_list,
    disagg_layout_from_args,
    efficiency_from_args,
    field_descriptions,
    fmt_int,
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
from planner.errors import ScenarioError
from planner.scenario import MAX_TOKENS, Scenario
from planner.serve.disagg import LayoutComparison, compare_layouts
from planner.serve.pools import PoolsComparison, compare_pools
from planner.serve.replica import LENGTH_DISTRIBUTIONS, ServingResult, length_distribution, simulate_scenario
from planner.serve.saturation import overload_warning
from planner.serve.tradeoff import MAX_BUDGETS, BudgetPoint, budget_tradeoff
from planner.serve.workload import (
    MAX_REQUESTS,
    ConcurrencyArrivals,
    PoissonArrivals,
    TraceArrivals,
    Workload,
    load_workload_file,
)
from planner.units import fmt_bytes

NAME = "simulate"
HELP = (
    "Serve a workload on one replica in a discrete-event simulation of vLLM's continuous batching: "
    "P50/P90/P99 TTFT, TPOT, ITL, end-to-end latency, throughput and preemptions at a request rate."
)
EXAMPLE = (
    "python -m planner simulate meta-llama/Llama-3.1-8B --qps 5 --num-requests 2000 --input-len 512 "
    "--output-len 256 --format json"
)

OUTPUT_KEYS = {
    "model": "The model simulated (repo id, catalog name or path).",
    "gpu_id": "Hardware profile id (--gpu).",
    **field_descriptions(ServingResult),
}

_W = Workload.model_fields
_RATE_HINT = "A request rate is requests per second; for saturation use --concurrency N instead of an infinite rate."


def add_workload_flags(parser: argparse.ArgumentParser, *, rate_required: bool = False) -> None:
    """Traffic and request lengths; ``slo`` requires --qps (its target), ``simulate`` takes any one arrival flag."""
    w = parser.add_argument_group("workload (as vllm bench serve)")
    arrivals = w.add_mutually_exclusive_group(required=rate_required)
    arrivals.add_argument(
        "--qps",
        "--request-rate",
        dest="qps",
        metavar="R",
        default=None,
        type=Number.of(float, "--qps", PoissonArrivals, "request_rate_per_s", hint=_RATE_HINT),
        help="Poisson arrivals at R requests per second"
        + (" (the total rate to serve)." if rate_required else f". Default: {PoissonArrivals().request_rate_per_s:g}."),
    )
    if not rate_required:
        w.add_argument(
            "--concurrency",
            "--max-concurrency",
            dest="concurrency",
            metavar="N",
            default=None,
            type=Number.of(int, "--concurrency", ConcurrencyArrivals, "concurrency"),
            help="Closed loop: N requests in flight, a new one as soon as one finishes. "
            + (ConcurrencyArrivals.model_fields["concurrency"].description or "")
            + " With --qps: Poisson arrivals capped at N in flight (vllm bench serve --request-rate R "
            "--max-concurrency N; a request waits at the client for a slot, its latencies count from the send).",
        )
    arrivals.add_argument(
        "--trace",
        metavar="FILE",
        default=None,
        help="Replay a CSV or JSONL trace with arrival_time_s, input_tokens, output_tokens per row"
        + (" (time-scaled to each probed rate)." if rate_required else "."),
    )
    if not rate_required:
        arrivals.add_argument(
            "--workload-file",
            metavar="FILE",
            default=None,
            help="A mixed workload: a YAML or JSON file of request classes, each with its own Poisson rate, "
            "count, lengths, priority and shared system prompt (see docs/cli.md, 'simulate'); the results "
            "add per-class percentiles. The lengths and hit-rate flags do not apply.",
        )
        w.add_argument(
            "--num-requests",
            "--num-prompts",
            dest="num_requests",
            metavar="N",
            type=Number.of(int, "--num-requests", Workload, "num_requests"),
            default=_W["num_requests"].default,
            help=f"Requests to simulate (with --trace: its first N rows), at most {MAX_REQUESTS:,}: each "
            "costs the simulator memory and time. Default: %(default)s.",
        )
    w.add_argument(
        "--input-len",
        metavar="N",
        type=Number(float, "--input-len", gt=0, le=MAX_TOKENS),
        default=1024,
        help=f"Mean prompt length, in tokens (at most {MAX_TOKENS:,}). Default: %(default)s.",
    )
    w.add_argument(
        "--output-len",
        metavar="N",
        type=Number(float, "--output-len", gt=0, le=MAX_TOKENS),
        default=256,
        help=f"Mean output length, in tokens (at most {MAX_TOKENS:,}). Default: %(default)s.",
    )
    w.add_argument(
        "--length-dist",
        choices=LENGTH_DISTRIBUTIONS,
        default="fixed",
        help="Distribution of both lengths: fixed, uniform (mean +- sqrt(3) x std), normal or lognormal "
        "(with the given mean and standard deviation). Default: %(default)s.",
    )
    w.add_argument(
        "--input-len-std",
        metavar="N",
        type=Number(float, "--input-len-std", ge=0, le=MAX_TOKENS),
        default=0.0,
        help="Standard deviation of the prompt length, in tokens (needs --length-dist other than fixed).",
    )
    w.add_argument(
        "--output-len-std",
        metavar="N",
        type=Number(float, "--output-len-std", ge=0, le=MAX_TOKENS),
        default=0.0,
        help="Standard deviation of the output length, in tokens (needs --length-dist other than fixed).",
    )
    w.add_argument(
        "--prefix-cache-hit-rate",
        metavar="F",
        default=0.0,
        type=Number.of(float, "--prefix-cache-hit-rate", Workload, "prefix_cache_hit_rate"),
        help=_W["prefix_cache_hit_rate"].description,
    )
    w.add_argument(
        "--seed", metavar="N", type=Number.of(int, "--seed", Workload, "seed"), default=0, help=_W["seed"].description
    )


def _lengths(args: argparse.Namespace, which: str):
    flag = f"--{which}-len"
    try:
        return length_distribution(
            args.length_dist, getattr(args, f"{which}_len"), getattr(args, f"{which}_len_std"), flag
        )
    except ScenarioError as err:  # name the flags the user typed
        raise ScenarioError(
            err.message.replace(f"{flag} spread", f"{flag}-std").replace(
                "but it is fixed", "but --length-dist is fixed"
            ),
            hint=err.hint,
        ) from None


#: Flags a workload file replaces, with their defaults: one of them set beside --workload-file is refused.
_CLASS_FILE_REPLACES = {
    "input_len": ("--input-len", 1024),
    "output_len": ("--output-len", 256),
    "length_dist": ("--length-dist", "fixed"),
    "input_len_std": ("--input-len-std", 0.0),
    "output_len_std": ("--output-len-std", 0.0),
    "prefix_cache_hit_rate": ("--prefix-cache-hit-rate", 0.0),
    "num_requests": ("--num-requests", _W["num_requests"].default),
    "images_per_request": ("--images-per-request", 0),
    "image_size": ("--image-size", None),
}


def _classed_workload(args: argparse.Namespace) -> Workload:
    """The workload file's classes; a length or count flag beside it is refused (each class has its own)."""
    given = [flag for key, (flag, default) in _CLASS_FILE_REPLACES.items() if getattr(args, key, default) != default]
    if given:
        raise ScenarioError(
            f"--workload-file gives every class its own lengths, count and shared prefix, so {', '.join(given)} "
            "cannot apply.",
            hint="Drop those flags, or put the values in the file's classes.",
        )
    workload = load_workload_file(args.workload_file)
    return workload.model_copy(update={"seed": args.seed}) if args.seed else workload


def workload_from_args(args: argparse.Namespace) -> Workload:
    """The Workload the workload flags describe (pydantic and the core check the values)."""
    concurrency = getattr(args, "concurrency", None)
    source = "--trace" if args.trace else "--workload-file" if getattr(args, "workload_file", None) else None
    if concurrency is not None and source:
        raise ScenarioError(
            f"--concurrency sets a closed loop (or, with --qps, a cap on a Poisson stream); {source} gives the "
            "arrivals itself.",
            hint=f"Drop --concurrency, or drop {source}.",
        )
    if getattr(args, "workload_file", None):
        return _classed_workload(args)
    arrivals: PoissonArrivals | ConcurrencyArrivals | TraceArrivals
    if args.trace:
        arrivals = TraceArrivals(path=args.trace)
    elif concurrency is not None and args.qps is not None:
        arrivals = PoissonArrivals(request_rate_per_s=args.qps, max_concurrency=concurrency)
    elif concurrency is not None:
        arrivals = ConcurrencyArrivals(concurrency=concurrency)
    elif args.qps is not None:  # finite and > 0: the flag's type checks it
        arrivals = PoissonArrivals(request_rate_per_s=args.qps)
    else:
        arrivals = PoissonArrivals()
    num = getattr(args, "num_requests", _W["num_requests"].default)
    if args.trace and num == _W["num_requests"].default:
        num = None  # replay the whole trace unless a count was asked for
    return Workload(
        arrivals=arrivals,
        num_requests=num,
        input_tokens=_lengths(args, "input"),
        output_tokens=_lengths(args, "output"),
        prefix_cache_hit_rate=args.prefix_cache_hit_rate,
        seed=args.seed,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_scenario_flags(parser, workload=False)
    add_workload_flags(parser)
    parser.add_argument(
        "--static",
        action="store_true",
        help="Static batching instead of continuous: up to max_num_seqs requests per batch, "
        "decoded until the longest is done, nothing admitted meanwhile.",
    )
    parser.add_argument(
        "--budget-sweep",
        metavar="LIST",
        default=None,
        type=comma_list(Number.of(int, "--budget-sweep", Scenario, "max_num_batched_tokens"), "a token count"),
        help="Also simulate the workload at each of these step token budgets (--max-num-batched-tokens, "
        f"chunked prefill on), at most {MAX_BUDGETS}: newcomers' TTFT against the running requests' TPOT, as "
        "'budget_tradeoff' in the JSON and a table. Example: 512,1024,2048,4096,8192.",
    )
    parser.add_argument(
        "--compare-pools",
        action="store_true",
        help="With --workload-file: also serve the classes in one shared pool of one replica per class (round "
        "robin) and in a pool per class, on the same GPUs, and give each class's latencies both ways "
        "('pools' in the JSON).",
    )
    add_disagg_flags(parser, "simulate the pools too, against aggregated replicas on the same GPUs")
    add_speculative_flags(parser)
    add_efficiency_flag(parser)


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec, _ = load_model(args)
    workload = workload_from_args(args)
    # The Scenario's own (static-batch) workload takes whole tokens: give it the rounded means.
    whole = {key: max(1, round(getattr(args, key))) for key in ("input_len", "output_len")}
    sc = scenario_from_args(argparse.Namespace(**{**vars(args), **whole}))
    hw = hardware_from_args(args)
    draft = load_draft_model(args)
    result = simulate_scenario(
        spec,
        hw,
        sc,
        workload,
        efficiency_from_args(args, hw),
        mode="static" if args.static else "continuous",
        draft_model=draft,
    )
    out = {"model": spec.name, "gpu_id": hw.id, **to_jsonable(result)}
    layout = disagg_layout_from_args(args)
    if layout is not None:
        comparison = compare_layouts(spec, hw, sc, workload, layout, efficiency_from_args(args, hw), draft)
        out["disaggregated"] = to_jsonable(comparison)
    if args.compare_pools:
        if not workload.classes:
            raise ScenarioError(
                "--compare-pools compares request classes: it needs --workload-file with two or more classes.",
                hint="Give a --workload-file, or drop --compare-pools.",
            )
        out["pools"] = to_jsonable(compare_pools(spec, hw, sc, workload, efficiency_from_args(args, hw)))
    if args.budget_sweep:
        points = budget_tradeoff(spec, hw, sc, workload, args.budget_sweep, efficiency_from_args(args, hw))
        out["budget_tradeoff"] = to_jsonable(list(points))
    return out


def _speculative_rows(res: ServingResult) -> list[tuple[str, str]]:
    """Rows saying what speculation did, beside the estimate at the run's mean decode batch (none when off)."""
    spec = res.speculative
    if spec is None:
        return []
    return [
        (
            f"speculative decoding ({spec.method}, k={spec.num_speculative_tokens}, a={spec.acceptance_rate:g})",
            f"{spec.tokens_per_step:.3f} tokens per request per step",
        ),
        (
            "estimated TPOT at the mean decode batch",
            f"{fmt_seconds(spec.tpot_seconds)} ({spec.speedup:.2f}x plain {fmt_seconds(spec.baseline_tpot_seconds)})",
        ),
    ]


def _disagg_table(cmp: LayoutComparison) -> Any:
    """The xPyD pools against aggregated replicas on the same GPUs, then the verdict in words."""
    dis = cmp.disaggregated
    cell = lambda stats, q: "unknown" if stats is None else fmt_seconds(getattr(stats, q))  # noqa: E731
    rows = [
        (
            f"disaggregated {dis.layout.label}",
            cell(dis.ttft_seconds, "p50"),
            cell(dis.ttft_seconds, "p99"),
            cell(dis.tpot_seconds, "p50"),
            cell(dis.tpot_seconds, "p99"),
        ),
        (
            f"aggregated: {cmp.aggregated_replicas} replicas",
            cell(cmp.aggregated_ttft_seconds, "p50"),
            cell(cmp.aggregated_ttft_seconds, "p99"),
            cell(cmp.aggregated_tpot_seconds, "p50"),
            cell(cmp.aggregated_tpot_seconds, "p99"),
        ),
    ]
    kv = dis.kv_transfer_seconds
    title = (
        f"disaggregated prefill/decode on {dis.gpus} GPUs (KV transfer {cell(kv, 'mean')} mean per request, "
        f"{fmt_bytes(dis.kv_transfer_bytes_per_gpu_mean)} per GPU at {dis.kv_link_bytes_per_s / 1e9:,.1f} GB/s)"
    )
    return table(["", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99"], rows, title=title, right=(1, 2, 3, 4))


def _pools_table(cmp: PoolsComparison) -> Any:
    """Each class in one shared pool and in a pool of its own: P99 TTFT, P99 TPOT and P99 E2E both ways."""
    cell = lambda stats, q: "unknown" if stats is None else fmt_seconds(getattr(stats, q))  # noqa: E731
    rows = []
    for shared, alone in zip(cmp.shared, cmp.separate, strict=True):
        for way, c in (("shared", shared), ("own pool", alone)):
            rows.append(
                (c.name, way, cell(c.ttft_seconds, "p99"), cell(c.tpot_seconds, "p99"), cell(c.e2e_seconds, "p99"))
            )
    title = f"one shared pool or a pool per class ({cmp.replicas} replicas, {cmp.gpus} GPUs either way)"
    return table(["class", "pool", "TTFT P99", "TPOT P99", "E2E P99"], rows, title=title, right=(2, 3, 4))


def _budget_table(points: list[BudgetPoint]) -> Any:
    """The token-budget sweep: TTFT and TPOT at P50 / P99 per --max-num-batched-tokens."""
    ms = lambda v: "unknown" if v is None else fmt_seconds(v)  # noqa: E731
    rows = [
        (
            f"{p.max_num_batched_tokens:,}",
            ms(p.ttft_p50_seconds),
            ms(p.ttft_p99_seconds),
            ms(p.tpot_p50_seconds),
            ms(p.tpot_p99_seconds),
            "unknown" if p.throughput_tokens_per_s is None else f"{p.throughput_tokens_per_s:,.0f} tok/s",
            {None: "unknown", True: "yes", False: "no"}[p.overloaded],
        )
        for p in points
    ]
    headers = ["token budget", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "output", "overloaded"]
    title = "chunked-prefill token budget: a smaller budget keeps TPOT low, a larger one gets first tokens sooner"
    return table(headers, rows, title=title, right=(0, 1, 2, 3, 4, 5))


def _class_table(res: ServingResult) -> Any:
    """Per request class: completed, then TTFT and TPOT at P50 / P99 and E2E at P99."""
    cell = lambda stats, q: "unknown" if stats is None else fmt_seconds(getattr(stats, q))  # noqa: E731
    rows = [
        (
            c.name,
            f"{c.num_completed:,} / {c.num_requests:,}",
            cell(c.ttft_seconds, "p50"),
            cell(c.ttft_seconds, "p99"),
            cell(c.tpot_seconds, "p50"),
            cell(c.tpot_seconds, "p99"),
            cell(c.e2e_seconds, "p99"),
        )
        for c in res.classes
    ]
    headers = ["class", "completed", "TTFT P50", "TTFT P99", "TPOT P50", "TPOT P99", "E2E P99"]
    return table(headers, rows, title="per request class", right=(1, 2, 3, 4, 5, 6))


def _image_rows(res: ServingResult) -> list[tuple[str, str]]:
    """A row saying what the requests' images cost (none without images)."""
    if res.encoder_seconds is None or res.image_tokens_per_request is None:
        return []
    return [
        (
            "images (mean per request)",
            f"{res.image_tokens_per_request:,.0f} prompt tokens, vision encoder {fmt_seconds(res.encoder_seconds)} "
            "(inside TTFT)",
        )
    ]


def render_table(r: dict[str, Any]) -> str:
    res = ServingResult.model_validate({k: v for k, v in r.items() if k in ServingResult.model_fields})
    kind = kind_text(res.step_time_kind)
    rows = []
    for label, stats in (
        ("TTFT (queueing included)", res.ttft_seconds),
        ("TPOT", res.tpot_seconds),
        ("ITL", res.itl_seconds),
        ("end to end", res.e2e_seconds),
    ):
        if stats is None:
            rows.append((label, "unknown", "", "", "", kind))
        else:
            rows.append(
                (
                    label,
                    fmt_seconds(stats.mean),
                    fmt_seconds(stats.p50),
                    fmt_seconds(stats.p90),
                    fmt_seconds(stats.p99),
                    kind,
                )
            )
    sched = res.scheduler
    title = (
        f"{res.model_name} on {res.gpus_per_replica} x {res.gpu_name}, one replica, {res.mode} batching: {res.label}"
    )
    latency = table(["", "mean", "P50", "P90", "P99", "kind"], rows, title=title, right=(1, 2, 3, 4))
    per_s = lambda v, unit: "unknown" if v is None else f"{v:,.1f} {unit}"  # noqa: E731
    verdict = {None: "unknown", True: "yes (see the warning above)", False: "no"}[res.overloaded]
    served = table(
        ["", "value"],
        [
            ("requests completed / offered", f"{res.num_completed:,} / {res.num_requests:,}"),
            ("offered rate", per_s(res.offered_requests_per_s, "req/s")),
            *(
                [("client cap", f"at most {res.max_in_flight:,} in flight; the rest wait at the client (not in TTFT)")]
                if res.max_in_flight is not None
                else []
            ),
            ("sustainable rate (knee)", per_s(res.saturation_requests_per_s, "req/s")),
            ("overloaded", verdict),
            ("output throughput", per_s(res.throughput_tokens_per_s, "tokens/s")),
            ("total throughput (input + output)", per_s(res.total_throughput_tokens_per_s, "tokens/s")),
            ("request throughput", "unknown" if res.requests_per_s is None else f"{res.requests_per_s:,.3f} req/s"),
            ("duration (simulated)", fmt_seconds(res.duration_seconds)),
            (
                "mean requests in the system",
                "unknown" if res.mean_requests_in_system is None else f"{res.mean_requests_in_system:,.1f}",
            ),
            ("preemptions (recompute)", f"{res.preemptions:,} ({fmt_int(res.recomputed_tokens)} tokens recomputed)"),
            ("engine steps", f"{res.num_steps:,}"),
            *_speculative_rows(res),
            *_image_rows(res),
            ("KV cache", f"{sched.num_gpu_blocks:,} blocks of {sched.block_size_tokens} tokens"),
            *(
                [("KV blocks per request of t tokens", sched.kv_block_groups.words())]
                if sched.kv_block_groups is not None
                else []
            ),
            (
                "limits",
                f"max_num_seqs {sched.max_num_seqs:,}, max_num_batched_tokens {sched.max_num_batched_tokens:,}, "
                f"chunked prefill {'on' if sched.enable_chunked_prefill else 'off'}, "
                f"scheduling {sched.scheduling_policy}",
            ),
            *([("admission", sched.output_reserve.words())] if sched.output_reserve is not None else []),
        ],
    )
    parts: list[Any] = [latency, served]
    if res.classes:
        parts.insert(1, _class_table(res))
    if r.get("disaggregated"):
        comparison = LayoutComparison.model_validate(r["disaggregated"])
        parts += [_disagg_table(comparison), Text(comparison.verdict)]
    if r.get("pools"):
        parts.append(_pools_table(PoolsComparison.model_validate(r["pools"])))
    if r.get("budget_tradeoff"):
        parts.append(_budget_table([BudgetPoint.model_validate(p) for p in r["budget_tradeoff"]]))
    if res.overloaded:
        warning = overload_warning(
            res.offered_requests_per_s,
            res.saturation_requests_per_s,
            res.overload_reason,
            res.overload_options,
            res.max_in_flight,
        )
        parts.insert(0, Text("WARNING " + warning, style="bold red"))
    for reason in res.rejection_reasons:
        parts.append(heading(f"refused: {reason}"))
    return render(*parts)
