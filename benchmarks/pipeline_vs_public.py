"""Benchmark: pipeline parallelism in the simulator against the published PP runs of one source.

The only pipeline-parallel serving measurements in ``shared/reference/serving_public_modern.json``
are GPUStack's performance-lab pages on H100 SXM (gpustack/gpustack@47277d7,
docs/performance-lab/*/h100.md), where the same page runs the same model with and without PP:

* openai/gpt-oss-120b, vLLM 0.10.2 with --async-scheduling: 1 GPU vs -pp 2 (2 GPUs);
* zai-org/GLM-4.5-Air, SGLang 0.5.4.post2: --tp-size 4 vs --pp-size 4 (4 GPUs).

Both send 1,000 ShareGPT prompts at once (``vllm bench serve`` without --request-rate): the burst regime
the planner models least (docs/calibration.md: TTFT and TPOT far off), so the absolute figures are
printed but the comparison that tests the pipeline model is the *ratio* of output throughput with and
without PP on one page: the engine, card, client and dataset cancel. Each run is simulated as a burst of
1,000 requests of the page's mean prompt and output lengths (``simulate_scenario``), with the engine
profile of that version. Prints predicted vs measured, then one line of JSON.

    python benchmarks/pipeline_vs_public.py          # ~1 s

Recorded 2026-12-02 (before pipeline-in-time, the memory-only PP model gave x1.24 and x0.29):
gpt-oss-120b PP 2 / 1 GPU x1.78 predicted vs x1.81 measured; GLM-4.5-Air PP 4 / TP 4 x0.43 vs x0.37.
The absolute throughputs are ~2x high and the PP runs' TPOT low for both engines (the burst regime;
and vLLM 0.10.2 ran PP without async overlap, supported from ~0.15, engines.md), so this checks the
ratio only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.workload import FixedLength, PoissonArrivals, Workload

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "serving_public_modern.json"

#: (model, engine profile, max_model_len, [(label, tp, pp, the record's engine_flags must contain)]):
#: the baseline first, then the PP run of the same page.
CASES = (
    (
        "openai/gpt-oss-120b",
        "vllm@0.10.2",
        32768,
        [("1 GPU", 1, 1, "--max-model-len 32768 --async-scheduling ;"), ("PP 2", 1, 2, "-pp 2")],
    ),
    (
        "zai-org/GLM-4.5-Air",
        "sglang@0.5.4",
        None,
        [("TP 4", 4, 1, "--model-path zai-org/GLM-4.5-Air --tp-size 4 ;"), ("PP 4", 1, 4, "--pp-size 4")],
    ),
)


def measured(rows: list[dict], model: str, flags: str) -> dict[str, float]:
    """The page's output throughput, mean TPOT and mean lengths for the run whose flags contain ``flags``."""
    hits = [r for r in rows if r["model"] == model and flags in r["engine_flags"] and "gpustack" in r["source"]]
    by_metric = {r["metric"]: r["value"] for r in hits}
    return {
        "output_tok_s": by_metric["output_throughput_tok_s"],
        "tpot_ms": by_metric["mean_tpot_ms"],
        "input_len": hits[0]["input_len"],
        "output_len": hits[0]["output_len"],
    }


def predicted(model_name: str, engine: str, max_len: int | None, tp: int, pp: int, m: dict) -> dict[str, float]:
    spec = build_spec(load_config(model_name, prefer="catalog").config, model_name)
    sc = Scenario(gpu="h100-sxm", tp=tp, pp=pp, max_model_len=max_len, engine_version=engine)
    burst = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=1e5),  # all 1,000 within 10 ms: the page's burst
        num_requests=1000,
        input_tokens=FixedLength(tokens=round(m["input_len"])),
        output_tokens=FixedLength(tokens=round(m["output_len"])),
        seed=0,
    )
    run = simulate_scenario(spec, get_profile("h100-sxm"), sc, burst, saturation=False)
    return {"output_tok_s": run.throughput_tokens_per_s, "tpot_ms": run.tpot_seconds.mean * 1e3}


def main() -> int:
    t0 = time.perf_counter()
    rows = json.loads(REFERENCE.read_text(encoding="utf-8"))
    summary = []
    print("GPUStack H100 pages, 1,000 ShareGPT prompts at once (simulated: estimate; measured: their runs)\n")
    for model_name, engine, max_len, runs in CASES:
        results = []
        for label, tp, pp, flags in runs:
            m = measured(rows, model_name, flags)
            p = predicted(model_name, engine, max_len, tp, pp, m)
            results.append((label, m, p))
            print(
                f"{model_name:22s} {label:6s} output tok/s predicted {p['output_tok_s']:8,.0f}  measured "
                f"{m['output_tok_s']:8,.0f} | mean TPOT predicted {p['tpot_ms']:6.1f} ms  "
                f"measured {m['tpot_ms']:6.1f} ms"
            )
        (base, mb, pb), (pp_label, mp, pq) = results
        ratio_p, ratio_m = pq["output_tok_s"] / pb["output_tok_s"], mp["output_tok_s"] / mb["output_tok_s"]
        print(
            f"{'':22s} {pp_label} / {base}: throughput x{ratio_p:.2f} predicted, x{ratio_m:.2f} measured "
            f"({(ratio_p / ratio_m - 1) * 100:+.0f}%)\n"
        )
        summary.append(
            {"model": model_name, "ratio": f"{pp_label}/{base}", "predicted": round(ratio_p, 3), "measured": ratio_m}
        )
    print(json.dumps({"pipeline_vs_public": summary, "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
