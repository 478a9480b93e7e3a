"""Claim: the planner's multi-LoRA cost (adapter slots in memory, punica shrink/expand in every step) against a
published vLLM throughput with and without LoRA (issue 12: "one LoRA throughput figure, predicted vs measured").

Measurement: vllm-project/vllm#11267 (2024-12-17, vLLM 0.6.5, V0 engine, "1xA100"; the 80 GB card assumed,
the thread does not say), ``benchmarks/benchmark_throughput.py`` on meta-llama/Llama-2-7b-hf, 1,000 ShareGPT
prompts at once: 2,693.62 output tokens/s without LoRA; 1,787.78 with ``--enable-lora --max-loras 1
--max-lora-rank 8`` and 1,791.53 with ``--max-loras 4`` (yard1/llama-2-7b-sql-lora-test). Its totals give the
mean lengths: 5,509.93 total / 2,693.62 output tokens/s at 11.45 req/s = 246 prompt and 235 output tokens.

Prediction: the same 1,000 requests as a burst (``ConcurrencyArrivals(1000)``), lognormal lengths with those
means and a ShareGPT-like spread (std 1.1 x mean, as planner.verify.serving_corpus takes for ShareGPT), simulated
with the vllm-v0 profile (vllm@0.6.5), without and with LoRA. Printed: output tokens/s each way, the
LoRA/base ratio predicted and measured, then one JSON line. Usage: ``python benchmarks/lora_accuracy.py``.
"""

from __future__ import annotations

import json
import time

from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import LoRA, Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.workload import ConcurrencyArrivals, LognormalLength, Workload

MODEL = "meta-llama/Llama-2-7b-hf"
SOURCE = "vllm-project/vllm#11267 (vLLM 0.6.5, 1 x A100, benchmark_throughput, 1,000 ShareGPT prompts)"
MEASURED_OUTPUT_TOK_S = {"no LoRA": 2693.62, "max_loras 1, rank 8": 1787.78, "max_loras 4, rank 8": 1791.53}
LORAS = {
    "no LoRA": None,
    "max_loras 1, rank 8": LoRA(max_loras=1, max_lora_rank=8),
    "max_loras 4, rank 8": LoRA(max_loras=4, max_lora_rank=8),
}
PROMPT_TOKENS, OUTPUT_TOKENS, SPREAD = 246.0, 235.0, 1.1


def main() -> None:
    t0 = time.perf_counter()
    model = build_spec(load_config(MODEL).config, MODEL)
    hw = get_profile("a100-80gb")
    workload = Workload(
        arrivals=ConcurrencyArrivals(concurrency=1000),
        num_requests=1000,
        input_tokens=LognormalLength(mean_tokens=PROMPT_TOKENS, std_tokens=SPREAD * PROMPT_TOKENS),
        output_tokens=LognormalLength(mean_tokens=OUTPUT_TOKENS, std_tokens=SPREAD * OUTPUT_TOKENS),
    )
    predicted = {}
    for label, lora in LORAS.items():
        sc = Scenario(gpu="a100-80gb", max_model_len=4096, engine_version="vllm@0.6.5", lora=lora)
        result = simulate_scenario(model, hw, sc, workload, saturation=False)
        predicted[label] = result.throughput_tokens_per_s
    base_pred, base_meas = predicted["no LoRA"], MEASURED_OUTPUT_TOK_S["no LoRA"]
    print(f"{MODEL} on 1 x A100 80GB, {SOURCE}")
    print(f"{'':24s} {'predicted tok/s':>16s} {'measured tok/s':>15s} {'ratio pred':>11s} {'ratio meas':>11s}")
    rows = {}
    for label in LORAS:
        pred, meas = predicted[label], MEASURED_OUTPUT_TOK_S[label]
        rows[label] = {
            "predicted_output_tok_s": round(pred, 1),
            "measured_output_tok_s": meas,
            "predicted_ratio_to_base": round(pred / base_pred, 3),
            "measured_ratio_to_base": round(meas / base_meas, 3),
        }
        print(f"{label:24s} {pred:16,.1f} {meas:15,.1f} {pred / base_pred:11.3f} {meas / base_meas:11.3f}")
    print(
        json.dumps(
            {
                "benchmark": "lora_accuracy",
                "source": SOURCE,
                "rows": rows,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
