"""Schema guard for reference/serving_corpus.json (cited public serving measurements, see serving_corpus.md)."""

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "reference" / "serving_corpus.json"
#: The text each number was copied from, per source (reference/serving_corpus_evidence.json).
EVIDENCE = CORPUS.with_name("serving_corpus_evidence.json")
#: Threads of the first gathering (2026-12-01), whose blocks were pasted into a builder outside the repository
#: and not kept: their records predate the evidence file. Every other source must have its text in it.
BEFORE_EVIDENCE = (
    "https://github.com/sgl-project/sglang/pull/10404",
    "https://github.com/sgl-project/sglang/pull/10467",
    "https://github.com/sgl-project/sglang/pull/18195",
    "https://github.com/sgl-project/sglang/pull/5877",
    "https://github.com/tenstorrent/tt-inference-server/issues/143",
    "https://github.com/tenstorrent/tt-inference-server/issues/340",
    "https://github.com/vllm-project/recipes/pull/443",
    "https://github.com/vllm-project/vllm/issues/12568",
    "https://github.com/vllm-project/vllm/issues/17788",
    "https://github.com/vllm-project/vllm/pull/23151",
    "https://github.com/vllm-project/vllm/pull/29217",
    "https://github.com/vllm-project/vllm/pull/36795",
)
#: A citation: an issue or PR thread, or a file at a commit (a permalink), then " (" and who, when, which block.
CITATION = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(?:(?:issues|pull)/\d+|blob/[0-9a-f]{40}/\S+) \(")

FIELDS = (
    "source",
    "model",
    "gpu",
    "n_gpus",
    "tp",
    "pp",
    "ep_dp",
    "dtype",
    "quant",
    "kv_cache_dtype",
    "engine",
    "engine_flags",
    "workload",
    "input_len",
    "output_len",
    "request_rate",
    "max_concurrency",
    "num_prompts",
    "metric",
    "value",
    "notes",
)
LATENCY_METRICS = frozenset(
    f"{stat}_{kind}_ms" for stat in ("mean", "median") for kind in ("ttft", "tpot", "itl", "e2el")
)
THROUGHPUT_METRICS = frozenset({"output_throughput_tok_s", "request_throughput_rps"})
ALLOWED_METRICS = LATENCY_METRICS | THROUGHPUT_METRICS
# Sane bounds per unit: a latency in ms, a whole-deployment throughput in tok/s or req/s.
VALUE_BOUNDS = {"ms": (0.1, 1.0e7), "tok_s": (0.1, 1.0e6), "rps": (1.0e-4, 1.0e4)}
MIN_RECORDS = 150
MIN_PUBLISHERS = 3
# Kept aside for independent evaluation: never allowed into this corpus.
FORBIDDEN_SOURCE_PATTERNS = ("inference-sim", "gpustack")
PUBLISHER = re.compile(r"^publisher: (?P<name>[^|]+?) \|")


@pytest.fixture(scope="module")
def records():
    """The corpus as a list of dicts."""
    data = json.loads(CORPUS.read_text(encoding="utf-8"))
    assert isinstance(data, list)
    return data


def _unit(metric):
    """The unit suffix of a metric name ('ms', 'tok_s' or 'rps')."""
    return next(unit for unit in VALUE_BOUNDS if metric.endswith(unit))


def test_enough_records(records):
    assert len(records) >= MIN_RECORDS


def test_every_record_has_exactly_the_schema_fields(records):
    for i, rec in enumerate(records):
        assert tuple(rec) == FIELDS, f"record {i} keys {sorted(rec)}"


def test_metric_names_are_allowed(records):
    bad = sorted({r["metric"] for r in records} - ALLOWED_METRICS)
    assert not bad, bad


def test_values_are_finite_and_within_unit_bounds(records):
    for i, rec in enumerate(records):
        value = rec["value"]
        assert isinstance(value, float) and math.isfinite(value), (i, value)
        low, high = VALUE_BOUNDS[_unit(rec["metric"])]
        assert low <= value <= high, (i, rec["metric"], value)


def test_parallelism_fields_are_consistent(records):
    for i, rec in enumerate(records):
        assert isinstance(rec["n_gpus"], int) and rec["n_gpus"] >= 1, i
        assert isinstance(rec["tp"], int) and 1 <= rec["tp"] <= 8, i
        assert isinstance(rec["pp"], int) and rec["pp"] >= 1, i
        assert rec["tp"] * rec["pp"] <= rec["n_gpus"], i


def test_load_is_stated(records):
    """Every record names its load: a Poisson rate, a concurrency cap, or a burst ('inf')."""
    for i, rec in enumerate(records):
        rate, conc = rec["request_rate"], rec["max_concurrency"]
        assert rate == "inf" or rate is None or (isinstance(rate, float) and rate > 0), (i, rate)
        assert conc is None or (isinstance(conc, int) and conc >= 1), (i, conc)
        assert rate is not None or conc is not None, f"record {i} has neither a rate nor a concurrency"
        assert isinstance(rec["num_prompts"], int) and rec["num_prompts"] >= 1, i


def test_lengths_are_positive_or_unknown(records):
    for i, rec in enumerate(records):
        for key in ("input_len", "output_len"):
            length = rec[key]
            assert length is None or (isinstance(length, float) and length > 0), (i, key, length)
        assert rec["input_len"] is not None, f"record {i} has no input length"


def test_text_fields_are_non_empty(records):
    for i, rec in enumerate(records):
        for key in ("source", "model", "gpu", "engine", "engine_flags", "workload", "notes", "dtype", "quant"):
            assert isinstance(rec[key], str) and rec[key].strip(), (i, key)


def test_every_source_is_a_citation(records):
    for i, rec in enumerate(records):
        assert CITATION.match(rec["source"]), (i, rec["source"])


def _url(source):
    """The thread or file a record cites: its source up to the first ' ('."""
    return source.split(" (")[0]


def _printed(value):
    """Ways a number could have been printed at its source (as it reads: 12.5 from '12.50', 120.0 from '120')."""
    forms = {repr(value), f"{value:g}"}
    if value.is_integer():
        forms.add(str(int(value)))
    return forms


def _in_text(value, text):
    """Whether ``value`` stands in ``text`` as a whole number as printed: trailing zeros allowed ('120.50' for
    120.5, '1200' or '1200.00' for 1200.0), never a piece of another number ('12' inside '120.50' or '1,200')."""
    for form in _printed(value):
        tail = r"0*(?!\d)" if "." in form else r"(?:\.0*)?(?![\d.])"
        if re.search(r"(?<![\d.,])" + re.escape(form) + tail, text):
            return True
    return False


@pytest.fixture(scope="module")
def evidence():
    """Source URL -> the texts its numbers were copied from."""
    out = {}
    for item in json.loads(EVIDENCE.read_text(encoding="utf-8")):
        assert set(item) == {"source_url", "excerpt"}, sorted(item)
        assert item["excerpt"].strip(), item["source_url"]
        out.setdefault(item["source_url"], []).append(item["excerpt"])
    return out


def test_every_later_source_keeps_its_text(records, evidence):
    """A record of a source gathered after the evidence file began must have that source's text in it."""
    missing = sorted({_url(r["source"]) for r in records if _url(r["source"]) not in BEFORE_EVIDENCE} - set(evidence))
    assert not missing, missing


def test_every_value_is_in_its_source_text(records, evidence):
    """Each number of a source with kept text appears in that text digit for digit (nothing retyped or computed)."""
    bad = []
    for i, rec in enumerate(records):
        texts = evidence.get(_url(rec["source"]))
        if texts is None:
            continue
        if not any(_in_text(rec["value"], text) for text in texts):
            bad.append((i, rec["metric"], rec["value"]))
    assert not bad, bad[:5]


@pytest.mark.parametrize(
    ("value", "found"),
    [(120.5, True), (1200.0, True), (0.73, True), (120.51, False), (1.2, False), (12.0, False), (200.0, False)],
)
def test_the_evidence_check_reads_numbers_as_printed(value, found):
    """A value matches its block however the client printed it (trailing zeros, no decimals), and a changed
    digit does not match."""
    text = "Request throughput (req/s):  0.73\nOutput token throughput (tok/s):  1200\nMean TTFT (ms):  120.50\n"
    assert _in_text(value, text) is found


def test_no_forbidden_source(records):
    for i, rec in enumerate(records):
        text = (rec["source"] + " " + rec["notes"]).lower()
        assert not any(p in text for p in FORBIDDEN_SOURCE_PATTERNS), i


def test_at_least_three_publishers(records):
    publishers = Counter()
    for i, rec in enumerate(records):
        match = PUBLISHER.match(rec["notes"])
        assert match, f"record {i} notes do not start with 'publisher: ... |'"
        publishers[match["name"].split(" (")[0]] += 1
    assert len(publishers) >= MIN_PUBLISHERS, publishers


def test_no_duplicate_measurement(records):
    keys = Counter((r["source"], r["metric"]) for r in records)
    dup = [k for k, n in keys.items() if n > 1]
    assert not dup, dup[:3]
