"""Claim: the planner's TTFT for a vision-language model with images (vision encoder in the prefill step, the
images' tokens in the prompt) against published measurements (issue 12: "one multimodal TTFT figure, predicted
vs measured").

Measurements, all Qwen/Qwen3-VL-8B-Instruct (bf16) on one NVIDIA H200 (an 8 x H200 box), from the public benchmark
records of github.com/yhyang201/sgl-bench:

* **SGLang 0.5.10rc0, one request at a time** (``records/20260405/20260405_132418_probe_max_images_tp1_ipc-off_
  Qwen3-VL-8B/probe_report.json`` and ``probe.log``, commit a7141307; server ``--tp-size 1 --enable-multimodal``,
  SGLANG_USE_CUDA_IPC_TRANSPORT=0): a prompt of 256 text tokens and N images, 32 output tokens, each request sent
  alone after a 3-request warm-up on a fresh server; one TTFT sample per (resolution, N), N = 1 to 64.
* **vLLM 0.19.1rc1.dev258 under load** (``records/20260414/20260414_195338_Perf_Qwen3-VL-8B_vLLM/qwen3_vl_8b_vllm_
  x_image_n1_720p_c32/experiment.json`` and ``server.log``, commit 84985463; default server: async scheduling,
  chunked prefill 8,192, prefix caching on with no hits): 128 requests, at most 32 in flight, each one 1280 x 720
  image and ~547 text tokens (69,970 text tokens / 128, the chat template included), 32 output tokens; three runs:
  mean TTFT 1,119.3 / 1,059.1 / 1,044.7 ms, output 533.1 / 544.7 / 548.3 tokens/s.

Prediction: the same requests simulated (``simulate_scenario``) with the engine profile of the version each ran
(sglang@0.5.10, vllm@0.19.1), images of the stated size in every prompt. Printed: per point the predicted and
measured TTFT and their ratio, then one JSON line. Not modelled, so not in the prediction: the host's image decode
and preprocessing (the processor's resize and patchify) and the transfer of the pixels to the GPU.
Usage: ``python benchmarks/multimodal_accuracy.py``.
"""

from __future__ import annotations

import json
import statistics
import time

from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import RequestShape, Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.workload import ConcurrencyArrivals, FixedLength, Workload

MODEL = "Qwen/Qwen3-VL-8B-Instruct"
GPU = "h200"
SGL_SOURCE = "yhyang201/sgl-bench records/20260405 probe_max_images (SGLang 0.5.10rc0, 1 x H200, one request at a time)"
VLLM_SOURCE = "yhyang201/sgl-bench records/20260414 Perf_Qwen3-VL-8B_vLLM image_n1_720p_c32 (vLLM 0.19.1, 1 x H200)"
#: probe_report.json: TTFT in ms of one request with 256 text tokens and N images, by (width, height) and N
SGL_TTFT_MS: dict[tuple[int, int], dict[int, float]] = {
    (1280, 720): {1: 111, 2: 198, 4: 418, 8: 793, 16: 1535, 32: 3221, 64: 7378},
    (1920, 1080): {1: 243, 2: 465, 4: 995, 8: 1977, 16: 4352, 32: 9619, 64: 23472},
    (2560, 1440): {1: 444, 2: 873, 4: 1990, 8: 4171, 16: 9334, 32: 21839},
}
SGL_TEXT_TOKENS, SGL_OUTPUT_TOKENS = 256, 32
#: experiment.json, three runs
VLLM_MEAN_TTFT_MS = (1119.3110585954855, 1059.1479150461964, 1044.7296159909456)
VLLM_OUTPUT_TOK_S = (533.1155058741351, 544.6795351561894, 548.3079247720661)
VLLM_TEXT_TOKENS = round(69970 / 128)  # 547
VLLM_REQUESTS, VLLM_CONCURRENCY, VLLM_OUTPUT_TOKENS = 128, 32, 32


def simulate(
    model, hw, engine: str, text: int, output: int, images: int, size: tuple[int, int], requests: int, conc: int
):
    shape = RequestShape(input_len=text, output_len=output, images_per_request=images, image_size=size)
    sc = Scenario(gpu=GPU, engine_version=engine, max_model_len=131072, workload=shape)
    workload = Workload(
        arrivals=ConcurrencyArrivals(concurrency=conc),
        num_requests=requests,
        input_tokens=FixedLength(tokens=text),
        output_tokens=FixedLength(tokens=output),
    )
    return simulate_scenario(model, hw, sc, workload, saturation=False)


def main() -> None:
    t0 = time.perf_counter()
    model = build_spec(load_config(MODEL).config, MODEL)
    hw = get_profile(GPU)
    print(f"{MODEL} on 1 x H200")
    print(f"\n{SGL_SOURCE}: {SGL_TEXT_TOKENS} text tokens + N images, {SGL_OUTPUT_TOKENS} out")
    print(f"{'image':>10s} {'N':>3s} {'tokens/image':>13s} {'pred ms':>9s} {'meas ms':>9s} {'pred/meas':>10s}")
    single = []
    for (w, h), points in SGL_TTFT_MS.items():
        tokens = model.encoder.tokens_per_image(w, h)
        for n, measured in points.items():
            result = simulate(model, hw, "sglang@0.5.10", SGL_TEXT_TOKENS, SGL_OUTPUT_TOKENS, n, (w, h), 1, 1)
            pred = result.ttft_seconds.mean * 1e3
            single.append({"size": f"{w}x{h}", "images": n, "predicted_ms": pred, "measured_ms": measured})
            print(f"{w:>5d}x{h:<4d} {n:>3d} {tokens:>13,d} {pred:>9.1f} {measured:>9.0f} {pred / measured:>10.2f}")
    ratios = [p["predicted_ms"] / p["measured_ms"] for p in single]
    print(f"median predicted / measured over {len(ratios)} points: {statistics.median(ratios):.2f}")

    result = simulate(
        model,
        hw,
        "vllm@0.19.1",
        VLLM_TEXT_TOKENS,
        VLLM_OUTPUT_TOKENS,
        1,
        (1280, 720),
        VLLM_REQUESTS,
        VLLM_CONCURRENCY,
    )
    pred_ttft, meas_ttft = result.ttft_seconds.mean * 1e3, statistics.mean(VLLM_MEAN_TTFT_MS)
    pred_tok, meas_tok = result.throughput_tokens_per_s, statistics.mean(VLLM_OUTPUT_TOK_S)
    print(
        f"\n{VLLM_SOURCE}: {VLLM_REQUESTS} requests, {VLLM_CONCURRENCY} in flight, 1 x 1280x720 image + "
        f"{VLLM_TEXT_TOKENS} text tokens, {VLLM_OUTPUT_TOKENS} out"
    )
    for what, pred, meas in (("mean TTFT, ms", pred_ttft, meas_ttft), ("output tokens/s", pred_tok, meas_tok)):
        print(f"  {what:16s} predicted {pred:8.1f}   measured {meas:8.1f} (mean of 3 runs)   x{pred / meas:.2f}")
    print(
        json.dumps(
            {
                "benchmark": "multimodal_accuracy",
                "model": MODEL,
                "single_request_points": len(single),
                "single_request_median_ratio": round(statistics.median(ratios), 3),
                "single_request": single,
                "under_load": {
                    "predicted_mean_ttft_ms": round(pred_ttft, 1),
                    "measured_mean_ttft_ms": round(meas_ttft, 1),
                    "predicted_output_tok_s": round(pred_tok, 1),
                    "measured_output_tok_s": round(meas_tok, 1),
                },
                "seconds": round(time.perf_counter() - t0, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
