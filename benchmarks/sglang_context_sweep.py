"""SGLang's decode-attention cost, read off the corpus's context sweeps (evidence on record, not the profile's fit).

The corpus holds closed-loop SGLang runs that change one thing only: the same server (model, card, TP, 100
requests at concurrency 100) measured at several requested prompt lengths (llm-benchmaq: SGLang 0.5.9, FA3,
eight H100 SXM, TP8). Their median ITL (a decode step; the prefill stalls go to the tail) grows with the context
by the attention's KV reads, so its growth along a sweep measures the attention term apart from everything the
lengths do not change. The runs' lengths are drawn as SGLang's client draws them (``serving_corpus``).

For a grid of ``attention_fraction`` x ``host_seconds_per_seq`` (every other factor the SGLang profile's), each
sweep run is simulated (``planner.verify.serving_corpus.predict``) and its median ITL compared; printed: per point
the median |error| over the runs and each run's signed error, then the point each architecture's runs are best
predicted by when that architecture is left out (leave one model out), and the profile's own point. One JSON line
at the end. 2026-12-05: best 0.4 / 30 us (11.1%; 17.5% out of sample) against 36.7% at the profile's 0.25 / 50 us,
which the whole corpus's grid still picks (docs/calibration.md).

    python benchmarks/sglang_context_sweep.py    # ~6 s
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections import defaultdict

from planner.engine import resolve_engine
from planner.verify import serving_corpus

#: The SGLang profile's own point (its fitted factors), always on the grid.
PROFILE = resolve_engine("sglang")[0].efficiency
PROFILE_POINT = (PROFILE.attention_fraction, PROFILE.host_seconds_per_seq)
ATTENTION = tuple(sorted({0.25, 0.4, 0.55, 0.7, 0.85, 1.0, PROFILE_POINT[0]}))
HOST_PER_SEQ = tuple(sorted({0.0, 1e-5, 2e-5, 3e-5, 5e-5, PROFILE_POINT[1]}))
METRIC = "median_itl_ms"
#: A sweep: the same server measured at this many prompt lengths or more.
MIN_LENGTHS = 3


def sweep_runs() -> list:
    """SGLang closed-loop runs with a median ITL whose (model, card, load) was measured at >= MIN_LENGTHS lengths."""
    expressed, _ = serving_corpus.express_all(serving_corpus.load_all())
    groups: dict[tuple, list] = defaultdict(list)
    for run in expressed:
        if run.plan.profile.id != "sglang":
            continue
        preds = [p for p in serving_corpus.predict(run) if p.metric == METRIC]
        if preds and preds[0].load == "concurrency":
            groups[(preds[0].model, preds[0].gpu, preds[0].how)].append(run)
    return [run for runs in groups.values() if len(runs) >= MIN_LENGTHS for run in runs]


def main() -> None:
    t0 = time.perf_counter()
    runs = sweep_runs()
    results: dict[tuple[float, float], list[tuple[str, float]]] = {}
    for attention, host in itertools.product(ATTENTION, HOST_PER_SEQ):
        errors = []
        for run in runs:
            eff = run.plan.profile.efficiency.model_copy(
                update={"attention_fraction": attention, "host_seconds_per_seq": host}
            )
            errors += [
                (p.model, p.error)
                for p in serving_corpus.predict(run, eff)
                if p.metric == METRIC and p.error is not None
            ]
        results[(attention, host)] = errors
        print(
            f"attention {attention:4.2f} host/seq {host * 1e6:4.0f} us: median |err| "
            f"{100 * statistics.median(abs(e) for _, e in errors):5.1f}%   "
            + " ".join(f"{m.split('/')[-1][:12]}:{100 * e:+.0f}" for m, e in errors),
            flush=True,
        )
    models = sorted({m for errors in results.values() for m, _ in errors})

    def loss(point, leave_out: str | None = None) -> float:
        """Median |error| of the point's runs, those of ``leave_out`` apart."""
        return statistics.median(abs(e) for m, e in results[point] if m != leave_out)

    best = min(results, key=loss)
    folds = {model: min(results, key=lambda pt, model=model: loss(pt, model)) for model in models}
    held = [abs(e) for model, point in folds.items() for m, e in results[point] if m == model]
    print(f"\n{len(runs)} runs, {len(models)} architectures; best point {best}: median |err| {100 * loss(best):.1f}%")
    for model, point in folds.items():
        print(f"  without {model}: {point}")
    print(
        f"leave one model out: median |err| {100 * statistics.median(held):.1f}%; the profile's point {PROFILE_POINT}: "
        f"{100 * loss(PROFILE_POINT):.1f}%"
    )
    print(
        json.dumps(
            {
                "benchmark": "sglang_context_sweep",
                "runs": len(runs),
                "architectures": len(models),
                "best": {"attention_fraction": best[0], "host_seconds_per_seq": best[1]},
                "best_median_abs_error_pct": round(100 * loss(best), 1),
                "out_of_sample_median_abs_error_pct": round(100 * statistics.median(held), 1),
                "profile_median_abs_error_pct": round(100 * loss(PROFILE_POINT), 1),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
