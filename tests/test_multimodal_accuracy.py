"""benchmarks/multimodal_accuracy.py on its records (Qwen3-VL-8B on one H200, sgl-bench): it runs offline, predicts
every published point, and a request's prompt is its text plus the images' tokens as the processor counts them."""

from __future__ import annotations

import json

import pytest

from tests.scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/multimodal_accuracy.py")


def test_runs_on_the_records_and_reports_every_point(bench, capsys):
    bench.main()
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    published = sum(len(points) for points in bench.SGL_TTFT_MS.values())
    assert summary["single_request_points"] == len(summary["single_request"]) == published == 20
    for point in summary["single_request"]:
        assert (
            point["predicted_ms"] > 0
            and point["measured_ms"]
            == bench.SGL_TTFT_MS[tuple(int(x) for x in point["size"].split("x"))][point["images"]]
        )
    load = summary["under_load"]
    assert load["measured_mean_ttft_ms"] == pytest.approx(1074.4, abs=0.1)  # the mean of the three runs' means
    assert load["predicted_mean_ttft_ms"] > 0 and load["predicted_output_tok_s"] > 0


def test_a_single_request_prefills_its_text_and_image_tokens(bench):
    """One request of 256 text tokens and 2 images of 1280 x 720 (880 tokens each): 2,016 prompt tokens; more images
    take longer to the first token."""
    model = bench.build_spec(bench.load_config(bench.MODEL).config, bench.MODEL)
    hw = bench.get_profile(bench.GPU)
    one = bench.simulate(model, hw, "sglang@0.5.10", 256, 32, 1, (1280, 720), 1, 1)
    two = bench.simulate(model, hw, "sglang@0.5.10", 256, 32, 2, (1280, 720), 1, 1)
    assert two.image_tokens_per_request == 2 * 880 and one.image_tokens_per_request == 880
    assert two.ttft_seconds.mean > one.ttft_seconds.mean
