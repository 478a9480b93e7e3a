"""The log and benchmark-result readers on hostile input: every file is read or refused with a
PlannerError that names the file, key or line and says what is accepted; never another exception,
never a negative or NaN number, and never more than a few seconds.

1. A table of bad files (binary, UTF-16, nested 100,000 deep, null/str in arrays, huge numbers,
   empty) with the message each must give.
2. Linear time: an 8,000-digit line and a 10 MB log parse quickly (measured and printed; asserted
   only against a generous guard, the machine may be loaded).
3. A seeded mini-fuzz: mutations of the real log excerpts and bench files in tests/data. The case
   count is ``PLANNER_FUZZ_CASES`` per corpus (default 200) and ``PLANNER_FUZZ_SEED`` shifts the
   seed, so a longer or another run is one variable away.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import time
from pathlib import Path

import pytest

from planner.errors import PlannerError
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import Scenario
from planner.verify import bench_results as bench_mod
from planner.verify.bench_results import load_bench_results
from planner.verify.reading import MAX_JSON_DEPTH, decode_text, loads_json
from planner.verify.reconcile import reconcile
from planner.verify.scoring import bench_with_overrides, score
from planner.verify.vllm_log import parse_vllm_log

DATA = Path(__file__).parent / "data"
LOGS = sorted((DATA / "logs").glob("*.log"))
BENCHES = sorted((DATA / "bench").glob("*.json"))
FUZZ_CASES = int(os.environ.get("PLANNER_FUZZ_CASES", "200"))
FUZZ_SEED = int(os.environ.get("PLANNER_FUZZ_SEED", "0"))
#: Fields a vLLM log may print below zero, as vLLM computes them as differences (documented on the fields).
SIGNED_LOG_FIELDS = {"cuda_graph_bytes", "kv_cache_memory_bytes", "non_torch_memory_bytes"}

DETAILED = {
    "date": "20250101-000000",
    "backend": "vllm",
    "model_id": "m",
    "num_prompts": 2,
    "completed": 2,
    "duration": 1.0,
    "request_rate": "inf",
    "ttfts": [0.1, 0.2],
    "itls": [[0.01], [0.02]],
    "latencies": [0.5, 0.6],
    "output_lens": [2, 2],
    "input_lens": [10, 10],
    "errors": ["", ""],
}


def _log_text(path: Path) -> str:
    return "\n".join(line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("%%"))


def _numbers(value, path=""):
    """(dotted path, number) for every int/float inside a model_dump()."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{path}[{i}]")


def _assert_sane(dump: dict, signed: set[str] = frozenset()) -> None:
    for where, number in _numbers(dump):
        assert math.isfinite(number), (where, number)
        leaf = re.sub(r"\[\d+\]", "", where).split(".")[-1]
        if leaf not in signed:
            assert number >= 0, (where, number)


@pytest.fixture(scope="module")
def llama():
    loaded = load_config("meta-llama/Llama-3.1-8B", prefer="catalog")
    return build_spec(loaded.config, loaded.name)


# ------------------------------------------------------------------------- bad bench files


def _utf16(text: str) -> bytes:
    return text.encode("utf-16")  # with BOM


BENCH_CASES = [
    ("binary", bytes(range(256)) * 4, "is binary (a NUL byte at offset 0)"),
    ("latin1", '{"model_id": "caf\xe9", "mean_ttft_ms": 1}'.encode("latin-1"), "is not UTF-8 text: byte 0xe9"),
    ("utf16-broken", b"\xff\xfe" + "{}".encode("utf-16-le") + b"\x00\xd8", "does not decode as it"),
    ("nested-100k", ("[" * 100_000 + "]" * 100_000).encode(), f"deeper than {MAX_JSON_DEPTH} levels"),
    ("nested-objects", ('{"a":' * 70 + "1" + "}" * 70).encode(), f"deeper than {MAX_JSON_DEPTH} levels"),
    ("ttfts-null-str", json.dumps({**DETAILED, "ttfts": [None, "a"]}).encode(), "'ttfts'[0] is null"),
    ("ttfts-str", json.dumps({**DETAILED, "ttfts": [0.1, "a"]}).encode(), "'ttfts'[1] is \"a\""),
    ("itls-negative", json.dumps({**DETAILED, "itls": [[0.01], [0.02, -1]]}).encode(), "'itls'[1][1] is -1"),
    ("itls-not-list", json.dumps({**DETAILED, "itls": [[0.01], 5]}).encode(), "'itls'[1] is 5"),
    ("output-lens-str", json.dumps({**DETAILED, "output_lens": ["2", 2]}).encode(), "'output_lens'[0] is \"2\""),
    ("5000-digit-int", ('{"mean_ttft_ms": 1' + "0" * 5000 + "}").encode(), "a number of 5,001 characters"),
    ("negative-mean", b'{"mean_ttft_ms": -5, "completed": 1}', "'ttft' (the *_ttft_ms keys) mean = -0.005 s"),
    ("negative-rate", b'{"mean_ttft_ms": 5, "request_throughput": -1}', "requests_per_s = -1.0 is out of range"),
    ("huge-duration", b'{"mean_ttft_ms": 5, "duration": 1e300}', "duration_seconds = 1e+300 is out of range"),
    ("zero-rate", b'{"mean_ttft_ms": 5, "request_rate": 0}', "request_rate_per_s = 0.0 is out of range"),
    ("empty", b"", "holds no benchmark result"),
    ("blank", b" \n\n \n", "holds no benchmark result"),
    ("empty-list", b"[]", "must hold JSON objects only"),
    ("list-of-numbers", b"[1, 2]", "must hold JSON objects only"),
    ("not-json", b"mean_ttft_ms = 5\n", "neither JSON nor JSON lines"),
    ("unknown-keys", b'{"hello": 1}', "unrecognised benchmark result format"),
]


@pytest.mark.parametrize("name,content,fragment", BENCH_CASES, ids=[c[0] for c in BENCH_CASES])
def test_bad_bench_file_is_refused_with_its_message(tmp_path, name, content, fragment):
    path = tmp_path / f"{name}.json"
    path.write_bytes(content)
    with pytest.raises(PlannerError) as info:
        load_bench_results(str(path))
    assert fragment in str(info.value)
    assert str(path) in str(info.value) or name in ("empty-list", "list-of-numbers")


@pytest.mark.parametrize(
    "encode",
    [
        lambda t: t.encode("utf-16"),
        lambda t: t.encode("utf-16-le"),
        lambda t: t.encode("utf-16-be"),
        lambda t: b"\xef\xbb\xbf" + t.encode(),
    ],
    ids=["utf16-bom", "utf16le-no-bom", "utf16be-no-bom", "utf8-bom"],
)
def test_utf16_and_bom_bench_files_are_read(tmp_path, encode):
    text = (BENCHES[0]).read_text(encoding="utf-8")
    path = tmp_path / "result.json"
    path.write_bytes(encode(text))
    assert load_bench_results(str(path)) == load_bench_results(BENCHES[0])


def test_bench_text_decoded_with_replacement_is_refused():
    utf16_as_utf8 = _utf16('{"mean_ttft_ms": 1}').decode("utf-8", errors="replace")
    with pytest.raises(PlannerError, match="looks like UTF-16 text read as UTF-8"):
        load_bench_results(utf16_as_utf8)
    binary_as_utf8 = "{" + (bytes(range(128, 256)) * 8).decode("utf-8", errors="replace")
    with pytest.raises(PlannerError, match="mostly undecodable bytes"):
        load_bench_results(binary_as_utf8)


def test_bench_file_over_the_cap_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_mod, "MAX_RESULT_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"mean_ttft_ms": 1, "pad": "x" * 2000}))
    with pytest.raises(PlannerError, match=r"big\.json is 1\.98 KiB; a benchmark result of at most 1,000 B is read"):
        load_bench_results(str(path))


def test_odd_but_valid_values_are_unknown_not_errors():
    """Non-finite summary numbers stay None (unknown); names of the wrong type are dropped."""
    runs = load_bench_results(
        '{"mean_ttft_ms": 1e400, "median_ttft_ms": 2, "model_id": {"a": 1}, "label": 7, "p999999999999_ttft_ms": 3}'
    )
    (run,) = runs
    assert run.metrics["ttft_seconds"].mean is None and run.metrics["ttft_seconds"].p50 == 0.002
    assert run.model is None and run.label == "7"
    report = {
        "benchmarks": [
            {
                "metrics": {
                    "time_to_first_token_ms": {"successful": {"mean": 5}},
                    "request_totals": ["not", "a", "mapping"],
                }
            }
        ]
    }
    assert load_bench_results(report)[0].metrics["ttft_seconds"].mean == 0.005


def test_loads_json_bounds():
    assert loads_json('{"a": [1, 2.5, {"b": null}]}', "x") == {"a": [1, 2.5, {"b": None}]}
    with pytest.raises(PlannerError, match="x holds a number of 65 characters"):
        loads_json("[" + "1" * 65 + "]", "x")
    assert decode_text("é".encode("utf-16"), "x") == "é"


def test_score_override_out_of_range_is_refused():
    (run,) = (
        load_bench_results(BENCHES[0])
        if False
        else load_bench_results(DATA / "bench" / "vllm_bench_serve_detailed.json")
    )
    with pytest.raises(PlannerError, match="request_rate_per_s = -1 is out of range"):
        bench_with_overrides(run, request_rate_per_s=-1)
    with pytest.raises(PlannerError, match="mean_input_tokens"):
        bench_with_overrides(run, mean_input_tokens=math.nan)


# ---------------------------------------------------------------------------- bad logs


LOG_CASES = [
    ("binary", bytes(range(256)) * 4, "the log is binary (a NUL byte at offset 0)"),
    (
        "utf16-as-utf8",
        "INFO Loading model weights took 14.99 GB\n".encode("utf-16").decode("utf-8", "replace"),
        "looks like UTF-16 text read as UTF-8",
    ),
    (
        "long-digits",
        "INFO Loading model weights took 1" + "0" * 400 + " GB",
        "line 1 of the log: model_weights_bytes is printed with a number of 401 digits",
    ),
    (
        "20-digit-weights",
        "INFO Loading model weights took 99999999999999999999 GB",
        "line 1 of the log: model_weights_bytes is 99999999999999999999 GiB; per-GPU memory of at most 1,048,576 GiB",
    ),
    (
        "5000-digit-blocks",
        "INFO # GPU blocks: " + "1" * 5000,
        "num_gpu_blocks is printed with a number of 5,000 digits",
    ),
    ("huge-blocks", "INFO # GPU blocks: 99999999999999", "num_gpu_blocks is 99999999999999; counts of at most 1e+12"),
    (
        "huge-concurrency",
        "INFO Maximum concurrency for 4096 tokens per request: 99999999999999x",
        "max_concurrency is 99999999999999x",
    ),
    (
        "utilization-nan",
        "INFO Initializing a V1 LLM engine (v0.9.0) with config: model='m', gpu_memory_utilization=nan",
        "gpu_memory_utilization is nan; a fraction in (0, 1]",
    ),
    (
        "utilization-2",
        "INFO total_gpu_memory=23.58GiB gpu_memory_utilization=2.5",
        "gpu_memory_utilization is 2.5; a fraction in (0, 1]",
    ),
    (
        "args-huge-int",
        "INFO non-default args: {'model': 'm', 'max_model_len': 1" + "0" * 30 + "}",
        "max_model_len is 10000000000000000000... (31 digits); a whole number from 1 to",
    ),
    (
        "args-giant-int",
        "INFO non-default args: {'model': 'm', 'tensor_parallel_size': 1" + "0" * 3000 + "}",
        "tensor_parallel_size is 10000000000000000000... (3,001 digits)",
    ),
    ("cmd-zero-tp", "$ vllm serve m --tensor-parallel-size 0", "tensor_parallel_size is 0; a whole number from 1"),
    ("empty", "", "no vLLM startup lines found"),
    ("junk", "hello\nworld\n", "no vLLM startup lines found"),
]


@pytest.mark.parametrize("name,content,fragment", LOG_CASES, ids=[c[0] for c in LOG_CASES])
def test_bad_log_is_refused_with_its_message(name, content, fragment):
    with pytest.raises(PlannerError) as info:
        parse_vllm_log(content)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "INFO non-default args: {[1]: 2}",
        "INFO non-default args: {" + "[" * 100_000 + "}",
        "INFO non-default args: {'model': {'nested': [1, 2]}, 1: 2, (3,): 4}",
        "INFO args: Namespace(model=" + "x" * 5000,
    ],
    ids=["unhashable-key", "deep-brackets", "odd-keys", "cut-namespace"],
)
def test_odd_args_lines_parse_and_reconcile_refuses_clearly(text):
    report = parse_vllm_log(text)
    with pytest.raises(PlannerError):
        reconcile(report)


def test_utf16_log_bytes_read_like_utf8():
    text = _log_text(LOGS[0])
    assert parse_vllm_log(text.encode("utf-16")) == parse_vllm_log(text)
    assert parse_vllm_log(b"\xef\xbb\xbf" + text.encode()) == parse_vllm_log(text)


def test_negative_kv_budget_is_kept_as_printed():
    """vLLM prints a negative KV budget when the model does not fit; that is a fact, not nonsense."""
    report = parse_vllm_log("INFO Available KV cache memory: -1.50 GiB\nINFO Loading model weights took -3 GB")
    assert report.kv_cache_memory_bytes == round(-1.5 * 2**30)
    assert report.model_weights_bytes is None  # weights are never negative: the line is not read
    assert any("Loading model weights" in line for line in report.unparsed_relevant_lines)


# --------------------------------------------------------------------------------- time


def _timed(fn) -> float:
    t0 = time.perf_counter()
    with contextlib.suppress(PlannerError):
        fn()
    return time.perf_counter() - t0


@pytest.mark.parametrize(
    "line",
    [
        "INFO Loading model weights took " + "1" * 8000 + "x",
        "INFO " + "1" * 8000 + " GiB for weight",
        "INFO Model loading took " + "1." * 4000,
        "INFO # GPU blocks: " + "1," * 4000,
        "(pid=" * 1600 + "INFO x",
        "INFO non-default args: {" * 400,
        "INFO args: Namespace(" + "model=1," * 1000,
        "A=" * 4000 + " vllm serve",
        "\x1b[" * 4000 + "1;" * 4000,
    ],
    ids=["digits-then-x", "digits-gib", "dots", "commas", "pids", "args", "namespace", "env", "ansi"],
)
def test_8000_character_lines_parse_in_linear_time(line):
    seconds = _timed(lambda: parse_vllm_log(line))
    print(f"{len(line):,} characters: {seconds * 1e3:.1f} ms")
    assert seconds < 5.0  # a guard: the measured time is about 10 ms; the old parser took 8.6 s on 8,000 digits


def test_10mb_logs_parse_in_linear_time():
    real = "\n".join(_log_text(path) for path in LOGS) + "\n"
    junk = "INFO 12-02 15:49:35 [core.py:123] a line with nothing for the parser 1234 (pid=7) [1;36m\n"
    for name, unit in (("real excerpts", real), ("unrelated lines", junk)):
        text = (unit * (10_000_000 // len(unit) + 1))[:10_000_000]
        seconds = _timed(lambda text=text: parse_vllm_log(text))
        print(f"10 MB of {name}: {seconds:.2f} s")
        assert seconds < 5.0  # a guard; about 0.5-1.5 s on a loaded 2-core machine


# --------------------------------------------------------------------------------- fuzz


_WEIRD_NUMBERS = [
    "9" * 25,
    "1" + "0" * 400,
    "-1",
    "-0.5",
    "nan",
    "inf",
    "1e400",
    "0",
    "99999999999999999999",
    "1,000,000,000,000,000",
    "0.0000000000000000000001",
    "-99999999999999999999",
]
_WEIRD_VALUES = [None, "a", "", [], {}, -1, -1e308, 1e308, 0, True, [None, "a"], [[[]]], {"a": None}, "1e400", 10**30]


def _mutate_text(rng: random.Random, text: str) -> str | bytes:
    kind = rng.randrange(9)
    numbers = list(re.finditer(r"-?\d+(?:\.\d+)?", text))
    if kind <= 2 and numbers:
        m = rng.choice(numbers)
        return text[: m.start()] + rng.choice(_WEIRD_NUMBERS) + text[m.end() :]
    if kind == 3:
        a = rng.randrange(len(text) + 1)
        return text[:a] + text[a + rng.randrange(1, 200) :]
    if kind == 4:
        lines = text.splitlines()
        i = rng.randrange(len(lines)) if lines else 0
        return "\n".join(lines[:i] + [lines[i] if lines else ""] * rng.randrange(2, 50) + lines[i:])
    if kind == 5:
        a = rng.randrange(len(text) + 1)
        return text.encode()[:a] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16))) + text.encode()[a:]
    if kind == 6:
        return text.encode(rng.choice(["utf-16", "utf-16-le", "utf-8-sig"]))
    if kind == 7:
        return text[: rng.randrange(len(text) + 1)]
    a = rng.randrange(len(text) + 1)
    return (
        text[:a] + rng.choice(["{", "[", "(", "'", '"', "\x00", "\ufffd", "\x1b["]) * rng.randrange(1, 3000) + text[a:]
    )


def _mutate_json(rng: random.Random, value):
    """A copy of ``value`` with one leaf (or container) replaced by an odd value."""
    if isinstance(value, dict) and value:
        key = rng.choice(list(value))
        out = dict(value)
        out[key] = _mutate_json(rng, value[key]) if rng.random() < 0.7 else rng.choice(_WEIRD_VALUES)
        return out
    if isinstance(value, list) and value:
        out = list(value)
        i = rng.randrange(len(out))
        out[i] = _mutate_json(rng, out[i]) if rng.random() < 0.7 else rng.choice(_WEIRD_VALUES)
        return out
    return rng.choice(_WEIRD_VALUES)


def test_fuzz_logs_parse_or_refuse(llama):
    rng = random.Random(20250109 + FUZZ_SEED)
    corpus = [_log_text(path) for path in LOGS]
    outcomes = {"parsed": 0, "refused": 0, "reconciled": 0, "reconcile_refused": 0}
    started = time.perf_counter()
    for case in range(FUZZ_CASES):
        data = _mutate_text(rng, rng.choice(corpus))
        try:
            report = parse_vllm_log(data)
        except PlannerError as err:
            assert str(err), case
            outcomes["refused"] += 1
            continue
        outcomes["parsed"] += 1
        _assert_sane(report.model_dump(), SIGNED_LOG_FIELDS)
        if case % 4:  # reconcile a quarter of them (each plans the model once)
            continue
        try:
            rec = reconcile(report, None, model=llama)
        except PlannerError:
            outcomes["reconcile_refused"] += 1
            continue
        outcomes["reconciled"] += 1
        for term in rec.terms:
            for value in (term.predicted, term.reported, term.difference_pct):
                assert value is None or math.isfinite(value), (case, term)
    print(f"{FUZZ_CASES} log mutations in {time.perf_counter() - started:.1f} s: {outcomes}")
    assert outcomes["parsed"] and outcomes["refused"]


def _json_documents(text: str) -> list:
    """The objects of a JSON file or of a JSON-lines file (vLLM --append-result)."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_fuzz_bench_files_load_or_refuse(tmp_path, llama):
    rng = random.Random(20250110 + FUZZ_SEED)
    texts = [path.read_text(encoding="utf-8") for path in BENCHES]
    parsed_docs = [_json_documents(t) for t in texts]
    outcomes = {"loaded": 0, "refused": 0, "scored": 0, "score_refused": 0}
    hw, sc = get_profile("h100-sxm"), Scenario(gpu="h100-sxm")
    started = time.perf_counter()
    for case in range(FUZZ_CASES):
        if case % 2:
            data = _mutate_text(rng, rng.choice(texts))
        else:
            data = "\n".join(json.dumps(doc, allow_nan=True) for doc in _mutate_json(rng, rng.choice(parsed_docs)))
        path = tmp_path / "case.json"
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
        try:
            runs = load_bench_results(str(path))
        except PlannerError as err:
            assert str(err), case
            outcomes["refused"] += 1
            continue
        outcomes["loaded"] += 1
        for run in runs:
            _assert_sane(run.model_dump())
        if case % 20 == 0 and runs:  # score a few: each simulates the run
            try:
                result = score(runs[0], llama, hw, sc, max_requests=50)
            except PlannerError:
                outcomes["score_refused"] += 1
                continue
            outcomes["scored"] += 1
            for row in result.metrics:
                for value in (row.predicted, row.measured, row.error_pct):
                    assert value is None or math.isfinite(value), (case, row)
    print(f"{FUZZ_CASES} bench-file mutations in {time.perf_counter() - started:.1f} s: {outcomes}")
    assert outcomes["loaded"] and outcomes["refused"]
