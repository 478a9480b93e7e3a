"""Benchmark: speculative decoding's TPOT, predicted vs a published vLLM measurement.

Source: vllm-project/vllm#20780 (ekagra-ranjan, 2025-07-10), a table of vLLM V1 EAGLE-1
(yuhuili/EAGLE-LLaMA3.1-Instruct-8B) and EAGLE-3 (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) on
meta-llama/Llama-3.1-8B-Instruct, batch 1, MT-Bench, k = 2..7: the mean acceptance length (AL) and
TPOT of each, and plain decoding's TPOT (7.07 ms). The card is the author's H100 of the same series
(vllm-project/vllm#16937, "Output tokens/s on H100 BS1"; the issue does not restate it). MT-Bench
prompts and answers are short: the planner takes 128 prompt + 256 output tokens (decode context 256).

What is predicted: the planner gets the acceptance rate a that makes (1 - a^(k+1)) / (1 - a) equal the
published AL (the acceptance is an input to the planner, not a prediction), then predicts the TPOT of
plain decoding and of each speculative configuration on h100-sxm (its fitted vLLM estimate), and the
speed-up. Both the TPOTs and the speed-ups are compared; the planner's head is one Llama layer plus the
target's 128k lm_head for both EAGLE versions (EAGLE-3's own 32k draft vocabulary is left out), so it
over-costs EAGLE-3's drafting a little.

Prints the prediction and the measurement per row, the median errors, then one line of JSON.
Usage: python benchmarks/speculative_accuracy.py
"""

from __future__ import annotations

import json
import statistics

from planner.estimate.latency import estimate_latency
from planner.estimate.speculative import acceptance_rate_for_length
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import RequestShape, Scenario, SpeculativeDecoding

SOURCE = "https://github.com/vllm-project/vllm/issues/20780"
MODEL = "meta-llama/Llama-3.1-8B"  # the Instruct model has the same config.json
GPU = "h100-sxm"
PLAIN_TPOT_MS = 7.07
#: (method, k) -> (mean acceptance length, TPOT ms) at batch 1, from the issue's two tables.
MEASURED = {
    ("eagle", 2): (2.10, 4.37),
    ("eagle", 3): (2.29, 4.29),
    ("eagle", 4): (2.39, 4.48),
    ("eagle", 5): (2.43, 4.71),
    ("eagle", 6): (2.45, 4.94),
    ("eagle", 7): (2.47, 5.20),
    ("eagle3", 2): (2.36, 4.32),
    ("eagle3", 3): (2.79, 4.09),
    ("eagle3", 4): (3.08, 4.05),
    ("eagle3", 5): (3.32, 4.13),
    ("eagle3", 6): (3.46, 4.20),
    ("eagle3", 7): (3.54, 4.29),
}
WORKLOAD = RequestShape(input_len=128, output_len=256, batch_size=1)


def main() -> None:
    spec = build_spec(load_config(MODEL).config, MODEL)
    hw = get_profile(GPU)
    plain = estimate_latency(spec, hw, Scenario(workload=WORKLOAD)).tpot_seconds * 1e3
    print(f"{MODEL} on {GPU}, batch 1, {WORKLOAD.input_len} + {WORKLOAD.output_len} tokens; source {SOURCE}")
    print(
        f"plain decoding TPOT: predicted {plain:.2f} ms, measured {PLAIN_TPOT_MS:.2f} ms "
        f"({(plain / PLAIN_TPOT_MS - 1):+.1%})"
    )
    print(
        f"{'method':7} {'k':>2} {'AL':>5} {'a':>6} | {'TPOT pred':>9} {'meas':>6} {'err':>7} | "
        f"{'speed-up pred':>13} {'meas':>5} {'err':>7}"
    )
    rows = []
    for (method, k), (length, measured_ms) in MEASURED.items():
        a = acceptance_rate_for_length(length, k)
        sc = Scenario(
            workload=WORKLOAD,
            speculative=SpeculativeDecoding(method=method, num_speculative_tokens=k, acceptance_rate=a),
        )
        est = estimate_latency(spec, hw, sc).speculative
        predicted_ms = est.tpot_seconds * 1e3
        measured_speedup = PLAIN_TPOT_MS / measured_ms
        rows.append(
            {
                "method": method,
                "k": k,
                "acceptance_length": length,
                "acceptance_rate": round(a, 4),
                "tpot_ms_predicted": round(predicted_ms, 3),
                "tpot_ms_measured": measured_ms,
                "tpot_error": round(predicted_ms / measured_ms - 1, 4),
                "speedup_predicted": round(est.speedup, 3),
                "speedup_measured": round(measured_speedup, 3),
                "speedup_error": round(est.speedup / measured_speedup - 1, 4),
            }
        )
        r = rows[-1]
        print(
            f"{method:7} {k:>2} {length:>5.2f} {a:>6.3f} | {predicted_ms:>7.2f}ms {measured_ms:>6.2f} "
            f"{r['tpot_error']:>+7.1%} | {est.speedup:>13.2f} {measured_speedup:>5.2f} {r['speedup_error']:>+7.1%}"
        )
    median_tpot = statistics.median(abs(r["tpot_error"]) for r in rows)
    median_speedup = statistics.median(abs(r["speedup_error"]) for r in rows)
    best = {
        m: min((r for r in rows if r["method"] == m), key=lambda r: r["tpot_ms_predicted"])["k"]
        for m in ("eagle", "eagle3")
    }
    best_measured = {
        m: min((r for r in rows if r["method"] == m), key=lambda r: r["tpot_ms_measured"])["k"]
        for m in ("eagle", "eagle3")
    }
    print(
        f"median |error|: TPOT {median_tpot:.1%}, speed-up {median_speedup:.1%}; best k predicted {best}, "
        f"measured {best_measured}"
    )
    print(
        json.dumps(
            {
                "benchmark": "speculative_accuracy",
                "source": SOURCE,
                "model": MODEL,
                "gpu": GPU,
                "batch": 1,
                "plain_tpot_ms_predicted": round(plain, 3),
                "plain_tpot_ms_measured": PLAIN_TPOT_MS,
                "median_abs_tpot_error": round(median_tpot, 4),
                "median_abs_speedup_error": round(median_speedup, 4),
                "best_k_predicted": best,
                "best_k_measured": best_measured,
                "rows": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
