"""Claim (issue 15): on the same scenario, in the same run, the planner's what-if and its CLI are as fast
as a peer's: llm-analysis (PyPI ``llm-analysis``, its ``infer``: memory and latency of one inference).

Scenario: Llama-2-70B on 4 x H100 SXM, 16 sequences per GPU-replica step, 1,024-token prompts, 256
generated tokens. Three rows, each a median, each printed with the ratio planner / llm-analysis:

* in-process: the planner's full what-if (memory plan with its checked suggestions, prefill and
  decode rooflines, latency; a new Scenario each round) against ``llm_analysis.analysis.infer``
  (which also reads its model and GPU JSON each call), each timed in its own interpreter;
* whole process: ``python -m planner plan ... --format json`` and ``python -m planner latency ...``
  against ``python -m llm_analysis.analysis infer ...``, interleaved round by round.

llm-analysis lives in its own virtual environment (its pins differ from ours), by default
/tmp/llm-analysis-venv; ``--install`` makes it (``pip install llm-analysis==0.2.2`` from PyPI). Where
it is absent or cannot be installed, the script says so, prints the planner's own figures and a JSON
line with ``"skipped"``.
    python benchmarks/bench_vs_peers.py [--install] [--rounds 11] [--venv DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PEER_PACKAGE = "llm-analysis==0.2.2"
DEFAULT_VENV = Path(os.environ.get("LLM_ANALYSIS_VENV", "/tmp/llm-analysis-venv"))
#: The scenario in each tool's words.
PLANNER_MODEL = "meta-llama/Llama-2-70b-hf"
PEER_MODEL = "upstage_Llama-2-70b-instruct-v2"  # llm-analysis's bundled Llama-2-70B config
TP, BATCH, PROMPT, GENERATED = 4, 16, 1024, 256
PEER_ARGS = {
    "model_name": PEER_MODEL,
    "gpu_name": "h100-sxm-80gb",
    "tp_size": TP,
    "batch_size_per_gpu": BATCH,
    "seq_len": PROMPT,
    "num_tokens_to_generate": GENERATED,
    "log_level": "ERROR",
}
#: Times ``infer`` inside llm-analysis's interpreter and prints the median seconds.
PEER_TIMER = """
import json, statistics, sys, time
from llm_analysis.analysis import infer
kw = json.loads(sys.argv[1]); rounds = int(sys.argv[2])
infer(**kw)
times = []
for _ in range(rounds):
    t0 = time.perf_counter(); infer(**kw); times.append(time.perf_counter() - t0)
print(json.dumps({"seconds": statistics.median(times)}))
"""


def peer_python(venv: Path, install: bool) -> tuple[Path | None, str]:
    """llm-analysis's interpreter, made when ``install``; (None, why) when it cannot be had."""
    python = venv / "bin" / "python"
    if not python.exists() and install:
        steps = [[sys.executable, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", "-q", PEER_PACKAGE]]
        for cmd in steps:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                return None, f"'{' '.join(cmd)}' failed: {done.stderr.strip()[-300:]}"
    if not python.exists():
        return None, f"no virtual environment at {venv}; run with --install (pip install {PEER_PACKAGE} from PyPI)"
    check = subprocess.run(
        [str(python), "-c", "import llm_analysis.analysis"], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        return None, f"llm-analysis does not import in {venv}: {check.stderr.strip()[-300:]}"
    return python, ""


def planner_whatif_seconds(rounds: int) -> float:
    """Median seconds of the planner's full what-if in this process (model and card loaded once)."""
    from planner.estimate.latency import estimate_latency
    from planner.estimate.memory import plan_memory
    from planner.estimate.roofline import roofline
    from planner.hardware import get_profile
    from planner.model.families import build_spec
    from planner.model.sources import load_config
    from planner.scenario import RequestShape, Scenario

    model = build_spec(load_config(PLANNER_MODEL).config, PLANNER_MODEL)
    hw = get_profile("h100-sxm")
    workload = RequestShape(input_len=PROMPT, output_len=GENERATED, batch_size=BATCH)
    times = []
    for i in range(rounds + 1):
        sc = Scenario(gpu="h100-sxm", tp=TP, workload=workload)  # new each round: nothing keyed on it is reused
        t0 = time.perf_counter()
        plan_memory(model, hw, sc)
        roofline(model, hw, sc, "prefill", BATCH, PROMPT)
        roofline(model, hw, sc, "decode", BATCH, PROMPT + GENERATED)
        estimate_latency(model, hw, sc)
        if i:  # the first round warms the per-spec caches, as the app's first rerun does
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peer_infer_seconds(python: Path, rounds: int) -> float:
    done = subprocess.run(
        [str(python), "-c", PEER_TIMER, json.dumps(PEER_ARGS), str(rounds)],
        capture_output=True,
        text=True,
        check=True,
        cwd="/tmp",
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def process_commands(python: Path | None) -> dict[str, tuple[list[str], Path]]:
    """Whole-process command lines and the folder each runs in."""
    scenario = ["--gpu", "h100-sxm", "--tp", str(TP)]
    out = {
        "planner plan": ([sys.executable, "-m", "planner", "plan", PLANNER_MODEL, *scenario, "--format", "json"], ROOT),
        "planner latency": (
            [
                sys.executable,
                "-m",
                "planner",
                "latency",
                PLANNER_MODEL,
                *scenario,
                "--batch-size",
                str(BATCH),
                "--input-len",
                str(PROMPT),
                "--output-len",
                str(GENERATED),
                "--format",
                "json",
            ],
            ROOT,
        ),
    }
    if python is not None:
        peer = [str(python), "-m", "llm_analysis.analysis", "infer"]
        peer += [f"--{k}={v}" for k, v in PEER_ARGS.items()]
        out["llm-analysis infer"] = (peer, Path("/tmp"))
    return out


def process_medians(commands: dict[str, tuple[list[str], Path]], rounds: int) -> dict[str, float]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    times: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(rounds + 1):
        for name, (cmd, cwd) in commands.items():
            t0 = time.perf_counter()
            done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
            seconds = time.perf_counter() - t0
            if done.returncode != 0:
                raise SystemExit(f"{name} exited {done.returncode}: {done.stderr.strip()[-300:]}")
            if i:  # the first round byte-compiles and warms the file cache
                times[name].append(seconds)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11, help="Whole-process rounds (in-process rounds are x20).")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="llm-analysis's virtual environment.")
    parser.add_argument(
        "--install", action="store_true", help=f"Make the environment if it is missing ({PEER_PACKAGE})."
    )
    args = parser.parse_args()
    python, why = peer_python(args.venv, args.install)
    if python is None:
        print(f"llm-analysis skipped: {why}")
    whatif = planner_whatif_seconds(20 * args.rounds)
    figures = {"planner what-if (in-process)": whatif}
    if python is not None:
        figures["llm-analysis infer (in-process)"] = peer_infer_seconds(python, 20 * args.rounds)
    figures.update(process_medians(process_commands(python), args.rounds))

    print(f"Llama-2-70B on {TP} x H100 SXM, batch {BATCH}, {PROMPT} in / {GENERATED} out; medians:")
    for name, seconds in figures.items():
        print(f"  {name:34s} {seconds * 1e3:9.3f} ms")
    ratios = {}
    if python is not None:
        peer_cli = figures["llm-analysis infer"]
        ratios = {
            "what-if / infer (in-process)": whatif / figures["llm-analysis infer (in-process)"],
            "plan / infer (whole process)": figures["planner plan"] / peer_cli,
            "latency / infer (whole process)": figures["planner latency"] / peer_cli,
        }
        for name, ratio in ratios.items():
            print(f"  ratio {name:32s} {ratio:6.2f}  (< 1: the planner is faster)")
    line = {
        "benchmark": "vs_peers",
        **{k: round(v, 6) for k, v in figures.items()},
        **{f"ratio {k}": round(v, 3) for k, v in ratios.items()},
    }
    if python is None:
        line["skipped"] = f"llm-analysis: {why}"
    print(json.dumps(line))


if __name__ == "__main__":
    main()
