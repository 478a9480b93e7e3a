"""planner.verify.vllm_log: real vLLM startup logs in, the numbers they print out, in bytes.

Every log under tests/data/logs/ is a verbatim excerpt of a public source, named in its ``%%``
header lines (the loader drops those lines). Known values come from the log lines themselves and
from /work/shared/reference/measured_public.json (the vLLM startup-log records of
vllm-project/vllm#10517, vllm-project/vllm#12569, vllm-project/vllm#6746 and IBM/CodeEngine).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from planner.errors import ConfigError
from planner.units import GiB
from planner.verify.public_records import reference_dir
from planner.verify.vllm_log import VllmStartupReport, _process_label, parse_vllm_log

LOGS = Path(__file__).parent / "data" / "logs"
REFERENCE = reference_dir() / "measured_public.json"  # ../shared/reference, else the bundled copy

GIB_TOLERANCE = 0.00005
"""Printed GiB values carry 2-4 decimals; 5e-5 GiB accepts the 4-decimal ones exactly."""


def load(name: str) -> str:
    """A log excerpt without its %% source header."""
    text = (LOGS / name).read_text(encoding="utf-8")
    return "\n".join(line for line in text.splitlines() if not line.startswith("%%"))


def parse(name: str) -> VllmStartupReport:
    return parse_vllm_log(load(name))


def gib(num_bytes: int | None) -> float | None:
    return None if num_bytes is None else num_bytes / GiB


# ---------------------------------------------------------------------------------------------
# Known values: what each excerpt prints (field -> value; *_bytes fields given in GiB)
# ---------------------------------------------------------------------------------------------

KNOWN = [
    (
        "v0_issue10517_llama8b_rtx3090_20k.log",
        {
            "model_weights_bytes": 14.9888,  # "Loading model weights took 14.9888 GB" (GiB)
            "total_gpu_memory_bytes": 23.58,
            "peak_torch_memory_bytes": 17.06,
            "non_torch_memory_bytes": 0.35,
            "kv_cache_memory_bytes": 3.81,
            "gpu_memory_utilization": 0.90,
            "num_gpu_blocks": 1952,  # the line lost its '#': "GPU blocks: 1952, # CPU blocks: 2048"
            "max_concurrency": 1.56,
            "max_concurrency_tokens_per_request": 20000,
            "max_model_len": 20000,
            "kv_cache_tokens": None,  # not printed; never derived
            "activation_peak_bytes": None,  # this format prints the absolute torch peak only
            "block_size": None,
            "engine": None,
            "startup_error": None,
        },
    ),
    (
        "v0_issue10517_llama8b_rtx3090_29k.log",
        {
            "model_weights_bytes": 14.9888,
            "peak_torch_memory_bytes": 17.98,
            "kv_cache_memory_bytes": 2.89,
            "num_gpu_blocks": 1478,
            "max_concurrency": 0.82,
            "kv_cache_tokens": 23648,  # from "can be stored in KV cache (23648)"
            "max_model_len": 29000,
        },
    ),
    (
        "v1_pr12569_llama70b_w8a8.log",
        {
            "engine": "V1",  # VLLM_USE_V1=1 on the pasted command
            "model": "neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8",
            "max_model_len": 2048,
            "gpu_memory_utilization": 0.98,
            "model_weights_bytes": 67.7229,
            "num_gpu_blocks": 1381,
            "max_concurrency": 10.79,
            "max_concurrency_tokens_per_request": 2048,
            "torch_compile_seconds": 54.73,
            "kv_cache_memory_bytes": None,
        },
    ),
    (
        "v1_ibm_codeengine_granite4_micro_l40s.log",
        {
            "engine": "V1",
            "vllm_version": "0.11.0",
            "model": "ibm-granite/granite-4.0-micro",
            "dtype": "bfloat16",
            "quantization": "fp8",
            "kv_cache_dtype": "auto",
            "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1,
            "max_model_len": 131072,
            "enforce_eager": False,
            "model_weights_bytes": 3.4244,
            "kv_cache_memory_bytes": 35.34,
            "kv_cache_tokens": 463136,
            "max_concurrency": 3.53,
            "max_concurrency_tokens_per_request": 131072,
            "cuda_graph_bytes": 0.72,
            "weights_load_seconds": 36.38,
            "model_load_seconds": 41.673988,
            "torch_compile_seconds": 44.45,
            "graph_capture_seconds": 5.0,
            "init_engine_seconds": 113.49,
            "gpu_memory_utilization": None,  # not printed; the default is not presumed
            "num_gpu_blocks": None,
        },
    ),
    (
        "v0_pr10511_profiling_table.log",
        {
            "model": "meta-llama/Meta-Llama-3-8B",
            "memory_profiling_seconds": 0.75,
            "total_gpu_memory_bytes": 79.22,
            "gpu_memory_utilization": 0.90,
            "requested_memory_bytes": 71.29,
            "model_weights_bytes": 14.96,
            "non_torch_memory_bytes": 1.79,
            "activation_peak_bytes": 1.26,
            "kv_cache_memory_bytes": 53.29,
        },
    ),
    (
        "v0_pr12126_cuda_blocks_enforce_eager.log",
        {
            "model": "meta-llama/Llama-3.2-11B-Vision",
            "max_model_len": 65536,
            "enforce_eager": True,
            "total_gpu_memory_bytes": 79.22,
            "gpu_memory_utilization": 0.90,
            "requested_memory_bytes": 71.29,
            "model_weights_bytes": 19.86,
            "non_torch_memory_bytes": 0.16,
            "activation_peak_bytes": 36.63,
            "kv_cache_memory_bytes": 14.65,
            "num_gpu_blocks": 6001,  # "# CUDA blocks: 6001"
        },
    ),
    (
        "v1_tp4_ansi_llama33_70b_fp8.log",
        {
            "engine": "V1",
            "vllm_version": "0.11.2rc1+rhai0.cuda",
            "model": "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
            "quantization": "compressed-tensors",
            "tensor_parallel_size": 4,
            "max_model_len": 8192,
            "model_weights_bytes": 16.9619,
            "model_load_seconds": 33.033432,
            "kv_cache_memory_bytes": 106.17,
            "kv_cache_tokens": 1391552,
            "max_concurrency": 169.87,
            "cuda_graph_bytes": -0.17,
        },
    ),
    (
        "v0_torchserve_pr3343_config_line.log",
        {
            "engine": None,  # "Initializing an LLM engine" names no generation
            "vllm_version": "0.6.1.dev238+ge2c6e0a82",
            "model": "meta-llama/Llama-3.2-3B-Instruct",
            "dtype": "bfloat16",
            "max_model_len": 131072,
            "quantization": None,  # "quantization=None"
            "tensor_parallel_size": 1,
        },
    ),
    (
        "v1_issue20052_non_default_args.log",
        {
            "vllm_version": "0.9.2.dev209+g2dd24ebe1",
            "model": "RedHatAI/Mistral-Nemo-Instruct-2407-FP8",
            "max_model_len": 60000,
            "gpu_memory_utilization": 0.85,
            "max_num_batched_tokens": 2048,
        },
    ),
    ("v0_openrlhf336_docker_timestamps.log", {"num_gpu_blocks": 378}),
    (
        "v0_issue6636_namespace_args.log",
        {
            "vllm_version": "0.5.2",
            "model": "meta-llama/Meta-Llama-3-70B-Instruct",
            "tensor_parallel_size": 4,
            "pipeline_parallel_size": 1,
            "kv_cache_dtype": "auto",
            "dtype": None,  # dtype='auto' is not a dtype yet
            "max_model_len": None,  # max_model_len=None: not set
        },
    ),
]


@pytest.mark.parametrize(("name", "expected"), KNOWN, ids=[k[0] for k in KNOWN])
def test_parsed_values_equal_the_numbers_in_the_log(name, expected):
    report = parse(name)
    for field, want in expected.items():
        got = getattr(report, field)
        if field.endswith("_bytes") and want is not None:
            assert got is not None, field
            assert gib(got) == pytest.approx(want, abs=GIB_TOLERANCE), field
        elif isinstance(want, float):
            assert got == pytest.approx(want), field
        else:
            assert got == want, field


def test_every_excerpt_parses_without_unknown_relevant_lines():
    for path in sorted(LOGS.glob("*.log")):
        report = parse(path.name)
        assert report.unparsed_relevant_lines == (), path.name


def test_gib_is_two_to_the_thirty_bytes():
    report = parse("v0_issue10517_llama8b_rtx3090_20k.log")
    assert report.model_weights_bytes == round(14.9888 * 2**30)


# ---------------------------------------------------------------------------------------------
# The reference file: every vLLM startup-log record must be reproduced from its source lines
# ---------------------------------------------------------------------------------------------

STARTUP_METRICS = {
    "model_weights_gib",
    "available_kv_cache_gib",
    "num_gpu_blocks",
    "kv_cache_tokens",
    "max_concurrency_x",
    "cuda_graph_gib",
    "peak_torch_memory_gib",
}

# The #6746 log excerpt could not be retrieved; the reference record quotes its line
# ("Weights-only fact: 'Loading model weights took 57.7520 GB' on each of 8 TP ranks").
ISSUE_6746_QUOTED_LINE = "Loading model weights took 57.7520 GB"


def _startup_records() -> list[dict]:
    records = json.loads(REFERENCE.read_text())
    return [r for r in records if r["metric"] in STARTUP_METRICS]


def _text_for(record: dict) -> str:
    source = record["source"]
    if "vllm/issues/10517" in source:
        if "max_model_len=20000" in record["notes"]:
            return load("v0_issue10517_llama8b_rtx3090_20k.log")
        if "max_model_len=29000" in record["notes"]:
            return load("v0_issue10517_llama8b_rtx3090_29k.log")
    if "vllm/pull/12569" in source:
        return load("v1_pr12569_llama70b_w8a8.log")
    if "IBM/CodeEngine" in source:
        return load("v1_ibm_codeengine_granite4_micro_l40s.log")
    if "vllm/issues/6746" in source:
        return ISSUE_6746_QUOTED_LINE
    raise AssertionError(f"no log excerpt for reference record from {source}")


def _block_size_from_notes(notes: str) -> int:
    match = re.search(r"block_size=(\d+)", notes)
    assert match, notes
    return int(match.group(1))


@pytest.mark.skipif(not REFERENCE.exists(), reason="shared reference file not mounted")
def test_reference_has_the_startup_records_this_file_covers():
    records = _startup_records()
    assert len(records) == 21
    for record in records:
        _text_for(record)  # raises when a record has no excerpt here


@pytest.mark.skipif(not REFERENCE.exists(), reason="shared reference file not mounted")
@pytest.mark.parametrize("index", range(21))
def test_reference_startup_record_matches_the_parsed_log(index):
    records = _startup_records()
    record = records[index]
    report = parse_vllm_log(_text_for(record))
    metric, value = record["metric"], record["value"]
    if metric == "model_weights_gib":
        assert gib(report.model_weights_bytes) == pytest.approx(value, abs=GIB_TOLERANCE)
    elif metric == "available_kv_cache_gib":
        assert gib(report.kv_cache_memory_bytes) == pytest.approx(value, abs=GIB_TOLERANCE)
    elif metric == "num_gpu_blocks":
        assert report.num_gpu_blocks == value
    elif metric == "kv_cache_tokens":
        if report.kv_cache_tokens is not None:
            assert report.kv_cache_tokens == value
        else:  # the record derives it as blocks x block_size (unit says "=1952*16")
            block_size = _block_size_from_notes(record["notes"])
            assert report.num_gpu_blocks * block_size == value
    elif metric == "max_concurrency_x":
        assert report.max_concurrency == pytest.approx(value)
        tokens = int(re.search(r"at (\d+) tokens", record["unit"]).group(1))
        assert report.max_concurrency_tokens_per_request == tokens
    elif metric == "cuda_graph_gib":
        assert gib(report.cuda_graph_bytes) == pytest.approx(value, abs=GIB_TOLERANCE)
    elif metric == "peak_torch_memory_gib":
        assert gib(report.peak_torch_memory_bytes) == pytest.approx(value, abs=GIB_TOLERANCE)
    else:  # pragma: no cover - STARTUP_METRICS is closed
        raise AssertionError(metric)


# ---------------------------------------------------------------------------------------------
# Invariants that tie the printed numbers together
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["v1_ibm_codeengine_granite4_micro_l40s.log", "v1_tp4_ansi_llama33_70b_fp8.log"])
def test_v1_capacity_is_concurrency_times_max_model_len(name):
    """vLLM prints tokens = int(max_concurrency x max_model_len); concurrency is rounded to 0.01."""
    report = parse(name)
    tokens_per_request = report.max_concurrency_tokens_per_request
    implied = report.kv_cache_tokens / tokens_per_request
    assert implied == pytest.approx(report.max_concurrency, abs=0.005)


def test_granite_kv_bytes_per_token_is_80_kib():
    """Reference notes: 80 KiB/token = 40 layers x 8 KV heads x 64 dim x 2 (K,V) x 2 B (bf16).

    vLLM keeps whole blocks: tokens x 80 KiB <= available < (tokens + 16) x 80 KiB, and the
    available memory is printed rounded to 0.01 GiB.
    """
    report = parse("v1_ibm_codeengine_granite4_micro_l40s.log")
    bytes_per_token = 40 * 8 * 64 * 2 * 2
    rounding = 0.005 * GiB
    tokens = report.kv_cache_tokens
    assert tokens * bytes_per_token <= report.kv_cache_memory_bytes + rounding
    assert report.kv_cache_memory_bytes - rounding < (tokens + 16) * bytes_per_token


def test_v0_error_capacity_equals_blocks_times_block_size():
    report = parse("v0_issue10517_llama8b_rtx3090_29k.log")
    assert report.kv_cache_tokens == report.num_gpu_blocks * 16
    assert report.kv_cache_tokens < report.max_model_len
    assert report.startup_error is not None
    assert any("refused to start" in w for w in report.warnings)


def test_v0_kv_budget_is_utilisation_share_minus_peaks():
    """0.6.4 formula: kv = total x util - peak_torch - non_torch (23.58 x 0.9 - 17.06 - 0.35)."""
    report = parse("v0_issue10517_llama8b_rtx3090_20k.log")
    budget = report.total_gpu_memory_bytes * report.gpu_memory_utilization
    rest = budget - report.peak_torch_memory_bytes - report.non_torch_memory_bytes
    assert gib(rest) == pytest.approx(gib(report.kv_cache_memory_bytes), abs=0.02)


# ---------------------------------------------------------------------------------------------
# Tensor parallelism: one line per rank
# ---------------------------------------------------------------------------------------------


def test_per_rank_lines_are_kept_and_summarised_by_the_minimum():
    report = parse("v0_pr14447_marlin_moe_tp_per_rank.log")
    workers = {w.worker: w for w in report.per_worker}
    assert list(workers) == [
        "VllmWorkerProcess pid=521",
        "VllmWorkerProcess pid=507",
        "VllmWorkerProcess pid=577",
        "VllmWorkerProcess pid=493",
    ]
    for label in ("VllmWorkerProcess pid=521", "VllmWorkerProcess pid=507"):
        assert gib(workers[label].kv_cache_memory_bytes) == pytest.approx(1.57)
        assert gib(workers[label].model_weights_bytes) == pytest.approx(21.21)
    assert workers["VllmWorkerProcess pid=493"].model_weights_bytes is None
    assert workers["VllmWorkerProcess pid=493"].memory_profiling_seconds == 17.57
    assert report.per_worker_min is not None
    assert report.per_worker_min.worker == "min"
    assert report.kv_cache_memory_bytes == report.per_worker_min.kv_cache_memory_bytes
    assert report.memory_profiling_seconds == 17.59  # durations: the slowest worker
    assert report.gpu_memory_utilization == 0.99


def test_v1_ranks_are_told_apart_by_their_prefix():
    report = parse("v1_tp2_snakemake316_per_rank.log")
    assert [w.worker for w in report.per_worker] == [
        "VllmWorker rank=0 pid=3008574",
        "VllmWorker rank=1 pid=3008575",
    ]
    assert [w.model_load_seconds for w in report.per_worker] == [5.338305, 5.6822]
    assert gib(report.model_weights_bytes) == pytest.approx(11.4384, abs=GIB_TOLERANCE)


def test_ray_folded_lines_are_reported():
    report = parse("v0_issue6689_ray_multinode_repeated.log")
    assert len(report.per_worker) == 7
    assert report.per_worker[0].worker == "RayWorkerWrapper pid=728340, ip=10.6.0.55"
    assert gib(report.model_weights_bytes) == pytest.approx(24.4023, abs=GIB_TOLERANCE)
    assert report.num_gpu_blocks == 31360
    assert any("Ray folded 13 repeated" in w for w in report.warnings)


def test_workers_that_disagree_raise_a_warning_with_both_values():
    text = "\n".join(
        [
            "(VllmWorker rank=0 pid=1) INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 10.00 GiB",
            "(VllmWorker rank=1 pid=2) INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: 8.00 GiB",
        ]
    )
    report = parse_vllm_log(text)
    assert gib(report.kv_cache_memory_bytes) == 8.0
    assert any("8.00 to 10.00 GiB" in w for w in report.warnings)


# ---------------------------------------------------------------------------------------------
# Noise: prefixes, colour codes, CRLF, restarts, unknown lines
# ---------------------------------------------------------------------------------------------

PREFIXES = [
    # (real line prefix, source, expected worker label)
    (
        "(VllmWorker rank=1 pid=3008575) INFO 05-29 23:37:00 [loader.py:458] x",
        "snakemake-executor-plugin-slurm#316",
        "VllmWorker rank=1 pid=3008575",
    ),
    (
        "(EngineCore_1 pid=75299) (VllmWorker rank=1 pid=75322) ERROR 05-16 16:35:18 x",
        "vllm-ascend#886",
        "VllmWorker rank=1 pid=75322",
    ),
    (
        "(RayWorkerWrapper pid=700478, ip=10.5.1.82) INFO 08-07 10:46:20 model_runner.py:692] x",
        "vllm#6689",
        "RayWorkerWrapper pid=700478, ip=10.5.1.82",
    ),
    (
        "2024-06-28T06:11:52.685300953Z (LLMRayActor pid=20770) INFO 06-28 06:11:45 x",
        "OpenRLHF#336",
        "LLMRayActor pid=20770",
    ),
    ("(Worker_TP0 pid=510) INFO [gpu_worker.py:701] x", "find_string hit 68935864207", "Worker_TP0 pid=510"),
    ("INFO 01-30 03:19:14 kv_cache_utils.py:395] x", "vllm#12569", "main"),
    ("Loading model weights took 14.9888 GB", "vllm#10517", "main"),
]


@pytest.mark.parametrize(("line", "source", "label"), PREFIXES, ids=[p[1] for p in PREFIXES])
def test_process_prefix_names_the_worker(line, source, label):
    assert _process_label(line) == label


def test_colour_codes_change_nothing():
    coloured = load("v1_tp4_ansi_llama33_70b_fp8.log")
    assert "\x1b[1;36m" in coloured
    plain = re.sub(r"\x1b\[[0-9;]*m", "", coloured)
    assert parse_vllm_log(coloured) == parse_vllm_log(plain)
    bare = coloured.replace("\x1b", "")  # a paste that lost the ESC bytes: "[1;36m(...)[0;0m"
    assert parse_vllm_log(bare) == parse_vllm_log(plain)


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_crlf_line_endings_change_nothing(name):
    text = load(name)
    assert parse_vllm_log(text.replace("\n", "\r\n")) == parse_vllm_log(text)


def test_a_restarted_engine_is_read_from_its_last_start():
    once = load("v1_ibm_codeengine_granite4_micro_l40s.log")
    first = once.replace("KV cache memory: 35.34 GiB", "KV cache memory: 1.00 GiB")
    report = parse_vllm_log(first + "\n" + once)
    assert gib(report.kv_cache_memory_bytes) == pytest.approx(35.34)
    assert any("2 starts" in w for w in report.warnings)
    assert report.model_dump(exclude={"warnings"}) == parse_vllm_log(once).model_dump(exclude={"warnings"})


def test_unknown_phrasing_about_memory_is_kept_for_review():
    # HabanaAI/vllm-fork#809 (Gaudi): a weights line in a wording this parser does not know.
    gaudi = (
        "(VllmWorkerProcess pid=880) INFO 02-07 14:50:41 hpu_model_runner.py:712] Pre-loading "
        "model weights on hpu:0 took 79.41 GiB of device memory (79.41 GiB/94.62 GiB used) and "
        "4.706 GiB of host memory (98.92 GiB/1007 GiB used)"
    )
    report = parse_vllm_log(load("v1_ibm_codeengine_granite4_micro_l40s.log") + "\n" + gaudi)
    assert report.unparsed_relevant_lines == (gaudi,)
    assert gib(report.model_weights_bytes) == pytest.approx(3.4244)


def test_runtime_stats_lines_are_not_flagged():
    # Periodic engine stats (vllm loggers.py), quoted from the olmOCR serve script (index id
    # 16993415206): they mention "GPU KV cache usage" but are not startup facts.
    stats = (
        "(APIServer pid=2411522) INFO 12-11 00:12:34 [loggers.py:236] Engine 000: Avg prompt "
        "throughput: 16.7 tokens/s, Avg generation throughput: 72.8 tokens/s, Running: 1 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%, MM cache hit "
        "rate: 0.0%"
    )
    report = parse_vllm_log(load("v1_pr12569_llama70b_w8a8.log") + "\n" + stats)
    assert report.unparsed_relevant_lines == ()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[Gloo] Rank 0 is connected to 0 peer ranks. Expected number of connected peer ranks is : 0",
        "Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:36<00:00, 18.17s/it]",
    ],
)
def test_text_without_startup_lines_is_a_config_error_naming_the_expected_lines(text):
    with pytest.raises(ConfigError) as err:
        parse_vllm_log(text)
    message = str(err.value)
    assert "no vLLM startup lines" in message
    assert "Available KV cache memory" in message
    assert "Loading model weights took" in message


def test_issue_6746_weights_line_quoted_in_the_reference():
    report = parse_vllm_log(ISSUE_6746_QUOTED_LINE)
    assert gib(report.model_weights_bytes) == pytest.approx(57.752, abs=GIB_TOLERANCE)
    assert report.per_worker[0].worker == "main"


def test_report_is_frozen_and_rejects_unknown_fields():
    report = parse("v0_issue10517_llama8b_rtx3090_20k.log")
    with pytest.raises(ValidationError):
        report.num_gpu_blocks = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        VllmStartupReport(num_gpu_blocks=1, blocks=2)  # type: ignore[call-arg]


def test_every_field_has_a_description():
    from planner.verify.vllm_log import WorkerMemory

    for model in (VllmStartupReport, WorkerMemory):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"


def test_module_imports_neither_torch_nor_streamlit():
    code = (
        "import sys, planner.verify.vllm_log, planner.verify.bench_results; "
        "print(sorted(m for m in ('torch', 'streamlit') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
