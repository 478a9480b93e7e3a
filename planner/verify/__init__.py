"""Verification inputs: what real runs printed or saved, read into planner units.

``vllm_log`` reads a vLLM server's startup log (weights, activation peak, KV budget, blocks,
capacity per GPU); ``bench_results`` reads serving-benchmark result files (vLLM ``bench serve``,
GuideLLM, genai-perf) into one shape with latencies in seconds. The planner's predictions are
compared against these.
"""
