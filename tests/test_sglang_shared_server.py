"""The evidence behind the corpus's SHARED SERVER mark (benchmarks/sglang_context_sweep.py --shared-server).

The llm-benchmaq runs shared one SGLang server per configuration, and sglang.bench_serving's fixed seed gives
request i of every run the same conversation: the benchmark reproduces the client's seeded draws to price the
prefix share an earlier run left cached. The draws must be the client's (their means are the published ones),
and the cached share must explain the runs better than a cold cache does.
"""

from __future__ import annotations

import pytest

from planner.verify import serving_corpus as sc
from tests.scripts import load_script


@pytest.fixture(scope="module")
def sweep():
    return load_script("benchmarks/sglang_context_sweep.py")


def test_the_reproduced_draws_have_the_published_means(sweep):
    records = [r for r in sc.load_records(sc.CORPUS_PATH, file="corpus") if sc.SHARED_SERVER in r.notes]
    means: dict[int, set[float]] = {}
    for r in records:
        (low, top), _ = sc.sglang_random_ranges(r)
        means.setdefault((low, top), set()).add(r.input_len)
    assert {top for _, top in means} == {1024, 2048, 4096, 8192}
    for (low, top), published in means.items():
        drawn = float(sweep.client_input_lengths(low, top, 100).mean())
        assert all(abs(drawn - m) <= 1.0 for m in published), (top, drawn, published)


def test_the_cached_share_explains_the_runs_better_than_a_cold_cache(sweep, capsys):
    result = sweep.shared_server()
    assert result["records"] >= 40
    errors = result["median_abs_error_pct"]
    assert errors["cached"] < errors["cold"] / 2
    assert "cached  46%" in capsys.readouterr().out  # the 2k runs after the 1k ones
