"""Benchmark: the serving simulator against published serving and max-throughput measurements.

Which records of ``shared/reference/measured_public.json``:

* the serving sweeps, measured with a request rate or with every prompt sent at once
  (LambdaLabsML/vllm-benchmark on vLLM 0.5/0.6; sgl-project/sglang benchmark_vllm_060 on SGLang 0.3
  and vLLM 0.6): throughput, request rate, median TTFT / TPOT / ITL / E2E;
* the TensorRT-LLM max-throughput tables (``trtllm-bench throughput``, every request queued at
  once, releases 0.12, 0.17, 1.0 and 1.1): output tokens/s, whole TP group or per GPU.

How each becomes a prediction: ``planner.verify.public_records`` maps a record to a scenario
(model from the catalog, card profile, TP, precision, engine limits the source states, ShareGPT-
like log-normal lengths for the serving sweeps) and, for the serving sweeps, simulates it with
``StepTimeModel`` step times; this script reuses that mapping as it is. For the TensorRT-LLM
tables it takes the same scenario (``max_model_len`` = input + output, 95 % of memory) and keeps
one replica full in the simulator (``planner.serve.slo.saturated_run``) with as many requests in
flight as the KV cache holds (at most 4,096, trtllm-bench's largest batch), instead of the
static-batch estimate ``public_records`` uses; both are printed.

Prints every serving record (predicted vs measured), the TensorRT-LLM tables per release with
their worst records, the median |error| and median signed error per metric, then one line of
JSON. Usage: python benchmarks/serving_vs_public.py [--fast] [--rows]
(--fast: every 5th TensorRT-LLM record; --rows: print every TensorRT-LLM record too).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections import defaultdict

import numpy as np

from planner.estimate.defaults import FITTED
from planner.estimate.latency import StepTimeModel
from planner.estimate.memory import plan_memory
from planner.serve.replica import scheduler_config
from planner.serve.slo import saturated_run
from planner.verify.public_records import load_records, source_family
from planner.verify.public_records_express import MAX_THROUGHPUT_BATCH_CAP, Expressed, express
from planner.verify.public_records_predict import ThroughputPrediction
from planner.verify.public_records_report import error_pct

SERVING = ("vllm-0.5/0.6 serving (Lambda)", "sglang-0.3 / vllm-0.6 serving")
TRT_WAVES = 3  # the saturated run sends 3 x in-flight requests; the first wave is not counted


def simulated_max_throughput(e: Expressed, cache: dict) -> tuple[float, str]:
    """Output tokens/s of the record's deployment kept full in the simulator (whole group or per GPU)."""
    pred: ThroughputPrediction = e.prediction
    b = pred.batches[0]  # the largest static batch whose tokens fit the KV cache
    in_flight = min(b.batch, MAX_THROUGHPUT_BATCH_CAP)
    sc = b.sc.model_copy(update={"max_num_seqs": in_flight, "max_num_batched_tokens": max(8192, in_flight)})
    key = (b.model.name, b.hw.id, sc.model_dump_json(), b.input_len, b.output_len)
    if key not in cache:
        plan = plan_memory(b.model, b.hw, sc, suggest=False)
        scheduler = scheduler_config(plan, sc)
        count = TRT_WAVES * in_flight
        inputs = np.full(count, b.input_len, dtype=np.int64)
        outputs = np.full(count, b.output_len, dtype=np.int64)
        rate, _, _ = saturated_run(
            inputs, outputs, scheduler, StepTimeModel(b.model, b.hw, sc, FITTED), in_flight=in_flight, waves=TRT_WAVES
        )
        cache[key] = rate * b.output_len * sc.replicas
    total = cache[key]
    how = f"{in_flight:,} in flight on {sc.tp} x {b.hw.id}, {b.input_len}+{b.output_len} tokens"
    return (total / sc.total_gpus if pred.per_gpu else total), how


def record_row(record, e: Expressed, predicted: float | None, how: str) -> dict:
    """One record's prediction beside its measurement, as the JSON line lists it."""
    return {
        "index": record.index,
        "family": e.family,
        "metric": record.metric,
        "model": record.model,
        "gpu": record.gpu,
        "measured": record.value,
        "predicted": predicted,
        "error_pct": error_pct(predicted, record.value),
        "unit": record.unit,
        "how": how,
    }


def summarize(rows: list[dict]) -> list[dict]:
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        if r["error_pct"] is not None:
            groups[(r["family"], r["metric"])].append(r["error_pct"])
    out = []
    for (family, metric), errs in sorted(groups.items()):
        out.append(
            {
                "family": family,
                "metric": metric,
                "count": len(errs),
                "median_abs_error_pct": round(statistics.median(abs(x) for x in errs), 1),
                "median_error_pct": round(statistics.median(errs), 1),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="Every 5th TensorRT-LLM record only.")
    parser.add_argument("--rows", action="store_true", help="Print every TensorRT-LLM record.")
    args = parser.parse_args()
    started = time.perf_counter()
    records = load_records()
    serving = [r for r in records if source_family(r) in SERVING]
    trt = [r for r in records if "max throughput" in source_family(r)]
    if args.fast:
        trt = trt[::5]

    # ---- serving sweeps: public_records' mapping and simulation -------------------------------------
    rows, skipped = [], defaultdict(int)
    print(f"serving sweeps: {len(serving)} records (simulated, fitted step times)")
    print(
        f"{'#':>5} {'family':<14} {'metric':<24} {'model':<34} {'gpu':<14} {'measured':>10} {'predicted':>10} "
        f"{'error':>7}  unit"
    )
    for record in serving:
        e = express(record)
        if not isinstance(e, Expressed):
            skipped[e.reason_kind] += 1
            continue
        value = e.predict(FITTED)
        predicted = value if math.isfinite(value) else None
        row = record_row(record, e, predicted, e.prediction.how)
        rows.append(row)
        err = row["error_pct"]
        print(
            f"{record.index:>5} {e.family[:14]:<14} {record.metric[:24]:<24} {record.model[-34:]:<34} "
            f"{record.gpu[:14]:<14} {record.value:>10,.2f} {predicted or float('nan'):>10,.2f} "
            f"{'' if err is None else f'{err:+.0f}%':>7}  {record.unit[:30]}"
        )
    serving_skipped = dict(skipped)

    # ---- TensorRT-LLM max throughput: the same scenarios, one replica kept full ------------------------
    skipped, cache, trt_rows, static_rows = defaultdict(int), {}, [], []
    print(f"\nTensorRT-LLM max-throughput tables: {len(trt)} records (simulated replica kept full)")
    for record in trt:
        e = express(record)
        if not isinstance(e, Expressed) or not isinstance(e.prediction, ThroughputPrediction):
            skipped[getattr(e, "reason_kind", "not a max-throughput prediction")] += 1
            continue
        b = e.prediction.batches[0]
        if b.input_len + b.output_len > b.sc.max_model_len:  # capped at the model's context
            skipped["longer than the model's context"] += 1  # vLLM refuses it; TensorRT-LLM ran it
            continue
        predicted, how = simulated_max_throughput(e, cache)
        static = e.predict(FITTED)
        row = record_row(record, e, predicted, how)
        trt_rows.append(row)
        static_rows.append({**row, "predicted": static, "error_pct": error_pct(static, record.value)})
        if args.rows:
            print(
                f"{record.index:>5} {e.family[:14]:<14} {record.model[-30:]:<30} {record.gpu[:14]:<14} "
                f"{record.input_len}+{record.output_len} measured {record.value:>10,.0f} simulated {predicted:>10,.0f} "
                f"({row['error_pct']:+.0f}%) static {static:>10,.0f} ({error_pct(static, record.value):+.0f}%)"
            )
    for family in sorted({r["family"] for r in trt_rows}):
        fam = [r for r in trt_rows if r["family"] == family and r["error_pct"] is not None]
        worst = sorted(fam, key=lambda r: -abs(r["error_pct"]))[:3]
        print(
            f"  {family}: {len(fam)} records; worst: "
            + "; ".join(
                f"#{r['index']} {r['model']} {r['gpu']} measured {r['measured']:,.0f} simulated {r['predicted']:,.0f} "
                f"({r['error_pct']:+.0f}%)"
                for r in worst
            )
        )

    # ---- medians per metric --------------------------------------------------------------------------
    summary = summarize(rows) + summarize(trt_rows)
    pooled = summarize(
        [{**r, "family": "all serving sweeps"} for r in rows]
        + [{**r, "family": "all TensorRT-LLM tables", "metric": "output throughput"} for r in trt_rows]
    )
    static_summary = summarize(static_rows)
    print("\nmedian error per metric (|error| and signed; negative = the planner predicts low):")
    for s in summary:
        print(
            f"  {s['family']:<36} {s['metric']:<26} n={s['count']:>4}  median |error| "
            f"{s['median_abs_error_pct']:>6.1f}%"
            f"  median error {s['median_error_pct']:>+7.1f}%"
        )
    for s in pooled:
        print(
            f"  {s['family']:<36} {s['metric']:<26} n={s['count']:>4}  median |error| "
            f"{s['median_abs_error_pct']:>6.1f}%"
            f"  median error {s['median_error_pct']:>+7.1f}%"
        )
    for s in static_summary:
        print(
            f"  {s['family']:<36} {s['metric']:<26} n={s['count']:>4}  (static-batch estimate of public_records: "
            f"median |error| {s['median_abs_error_pct']:.1f}%, signed {s['median_error_pct']:+.1f}%)"
        )
    if serving_skipped or skipped:
        print(f"not expressed: serving {serving_skipped}; TensorRT-LLM {dict(skipped)}")
    elapsed = time.perf_counter() - started
    print(f"took {elapsed:.1f} s")
    print(
        json.dumps(
            {
                "benchmark": "serving_vs_public",
                "fast": args.fast,
                "serving_records": len(rows),
                "trtllm_records": len(trt_rows),
                "medians": summary,
                "pooled_medians": pooled,
                "trtllm_static_batch_medians": static_summary,
                "not_expressed": {"serving": serving_skipped, "trtllm": dict(skipped)},
                "seconds": round(elapsed, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
