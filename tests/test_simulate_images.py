"""Images in the simulator: their tokens join each prompt, the vision encoder runs in the step that reaches them.

The rule (``planner.serve.simulate``, after vLLM V1's ``Scheduler._try_schedule_encoder_inputs``): a request's
images sit at the start of its prompt, image i on tokens [i x t, (i + 1) x t), and an image's encoder seconds are
added to the step whose chunk holds its first token; a preempted request encodes its images again. The encoder's
seconds are the latency estimate's (``multimodal.encoder_seconds``), so at low load a request's simulated TTFT is
the batch-1 latency estimate's.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from planner.cli import main
from planner.errors import ScenarioError
from planner.estimate import multimodal
from planner.estimate.latency import estimate_latency
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import RequestShape, Scenario
from planner.serve.replica import simulate_scenario
from planner.serve.simulate import LinearStepCost, SchedulerConfig, run_engine
from planner.serve.workload import FixedLength, PoissonArrivals, RequestClass, RequestSet, Workload

GEMMA = "google/gemma-3-4b-it"
COST = LinearStepCost(fixed_seconds=5e-3, per_token_seconds=1e-5)


def spec_of(name: str):
    return build_spec(load_config(name, prefer="catalog").config, name)


def scenario(n: int = 0, size: tuple[int, int] | None = None, **kw) -> Scenario:
    shape = RequestShape(input_len=512, output_len=32, images_per_request=n, image_size=size)
    return Scenario(workload=shape, **kw)


def low_load(num: int = 20) -> Workload:
    return Workload(
        arrivals=PoissonArrivals(request_rate_per_s=0.2),
        num_requests=num,
        input_tokens=FixedLength(tokens=512),
        output_tokens=FixedLength(tokens=32),
    )


def image_requests(prompt: list[int], images: list[int], tokens: list[int], seconds: list[float], out: int = 4):
    n = len(prompt)
    return RequestSet(
        arrival_time_s=np.zeros(n),
        input_tokens=np.asarray(prompt, dtype=np.int64),
        output_tokens=np.full(n, out, dtype=np.int64),
        concurrency=None,
        prefix_cache_hit_rate=0.0,
        images=np.asarray(images, dtype=np.int64),
        image_tokens=np.asarray(tokens, dtype=np.int64),
        image_seconds=np.asarray(seconds, dtype=np.float64),
    )


# ----------------------------------------------------------------------------- the encoder's seconds


@pytest.mark.parametrize(("name", "size", "n"), [(GEMMA, None, 1), (GEMMA, None, 3), ("qwen2.5-vl-7b", (1280, 720), 2)])
def test_encoder_seconds_are_the_latency_estimates_at_batch_one(name, size, n):
    spec, hw = spec_of(name), get_profile("h100-sxm")
    sc = scenario(n, size)
    lat = estimate_latency(spec, hw, sc, batch_size=1)
    assert lat.encoder_seconds is not None and lat.encoder_seconds > 0
    assert multimodal.encoder_seconds(spec, hw, sc, n) == pytest.approx(lat.encoder_seconds, rel=1e-12)
    assert multimodal.encoder_seconds(spec, hw, scenario(0), 1) == 0.0


def test_ttft_with_images_exceeds_text_only_by_about_the_encoder_at_low_load():
    spec, hw = spec_of(GEMMA), get_profile("h100-sxm")
    text = simulate_scenario(spec, hw, scenario(0), low_load())
    one = simulate_scenario(spec, hw, scenario(1), low_load())
    four = simulate_scenario(spec, hw, scenario(4), low_load())
    assert text.encoder_seconds is None and text.image_tokens_per_request is None
    lat1 = estimate_latency(spec, hw, scenario(1), batch_size=1)
    assert one.encoder_seconds == pytest.approx(lat1.encoder_seconds)
    assert one.image_tokens_per_request == 256 and four.image_tokens_per_request == 1024
    assert text.ttft_seconds and one.ttft_seconds and four.ttft_seconds
    gain = one.ttft_seconds.p50 - text.ttft_seconds.p50
    # the encoder, plus the prefill of 256 more prompt tokens (a few ms at 512 text tokens)
    assert lat1.encoder_seconds < gain < lat1.encoder_seconds + 0.5 * text.ttft_seconds.p50
    # alone on the replica, a request's TTFT is the batch-1 estimate's (its prefill is one step)
    assert one.ttft_seconds.p50 == pytest.approx(lat1.ttft_seconds, rel=0.02)
    assert four.ttft_seconds.p50 - text.ttft_seconds.p50 > 3.5 * lat1.encoder_seconds
    assert not one.overloaded
    # the knee's full-batch run carries the same images: their tokens and encoder lower it
    assert text.saturation_requests_per_s and one.saturation_requests_per_s and four.saturation_requests_per_s
    assert text.saturation_requests_per_s > one.saturation_requests_per_s > four.saturation_requests_per_s


def test_no_images_leaves_the_text_only_run_as_it_was():
    spec, hw = spec_of(GEMMA), get_profile("h100-sxm")
    a = simulate_scenario(spec, hw, scenario(0), low_load(10), saturation=False)
    b = simulate_scenario(
        spec, hw, Scenario(workload=RequestShape(input_len=512, output_len=32)), low_load(10), saturation=False
    )
    assert a.model_dump_json() == b.model_dump_json()
    assert "encoder_seconds" not in a.model_dump() and "image_tokens_per_request" not in a.model_dump()


# ----------------------------------------------------------------------------- the engine's rule


def test_each_image_is_encoded_in_the_step_that_reaches_its_first_token():
    """350 prompt tokens (3 images of 100 tokens, then 50 of text), chunks of 128: images 0 and 1 start in the first
    chunk [0, 128), image 2 (token 200) in the second [128, 256), none in the third."""
    sched = SchedulerConfig(num_gpu_blocks=1000, max_num_seqs=8, max_num_batched_tokens=128)
    run = run_engine(image_requests([350], [3], [100], [0.5]), sched, COST)
    plain = run_engine(image_requests([350], [0], [1], [0.0]), sched, COST)
    extra = run.step_seconds - plain.step_seconds
    assert np.allclose(extra[:4], [1.0, 0.5, 0.0, 0.0])
    assert math.isclose(float(run.first_token_time_s[0] - plain.first_token_time_s[0]), 1.5)


def test_two_requests_admitted_in_one_step_pay_both_encoders():
    sched = SchedulerConfig(num_gpu_blocks=1000, max_num_seqs=8, max_num_batched_tokens=1024)
    run = run_engine(image_requests([300, 300], [1, 2], [200, 100], [0.25, 0.1]), sched, COST)
    plain = run_engine(image_requests([300, 300], [0, 0], [1, 1], [0.0, 0.0]), sched, COST)
    assert math.isclose(float(run.step_seconds[0] - plain.step_seconds[0]), 0.25 + 2 * 0.1)


def test_image_tokens_hold_kv_blocks():
    """A 100-token text prompt with two images of 256 tokens is a 612-token prompt: 39 blocks of 16 during its
    prefill, and a cache of 30 blocks refuses it, while the 100 text tokens alone (7 blocks) would fit."""
    spec, hw = spec_of(GEMMA), get_profile("h100-sxm")
    wl = Workload(
        arrivals=PoissonArrivals(request_rate_per_s=1.0),
        num_requests=3,
        input_tokens=FixedLength(tokens=100),
        output_tokens=FixedLength(tokens=4),
    )
    res = simulate_scenario(spec, hw, scenario(2), wl, saturation=False)
    assert res.image_tokens_per_request == 512
    sched = SchedulerConfig(num_gpu_blocks=30, block_size_tokens=16, max_num_seqs=8, max_num_batched_tokens=2048)
    text = run_engine(image_requests([100], [0], [1], [0.0]), sched, COST)
    imgs = run_engine(image_requests([612], [2], [256], [0.01]), sched, COST)
    assert not text.rejected[0] and imgs.rejected[0]
    assert "KV blocks" in imgs.rejection_reasons[0]
    roomy = SchedulerConfig(num_gpu_blocks=100, block_size_tokens=16, max_num_seqs=8, max_num_batched_tokens=2048)
    assert int(run_engine(image_requests([612], [2], [256], [0.01]), roomy, COST).used_blocks.max()) >= 39


def test_a_preempted_request_encodes_its_images_again():
    """Two requests that outgrow a small cache: the newest is preempted and re-prefilled from token 0, so its
    images' encoder runs a second time (vLLM frees a preempted request's encoder outputs with its KV)."""
    sched = SchedulerConfig(num_gpu_blocks=24, block_size_tokens=16, max_num_seqs=8, max_num_batched_tokens=512)
    reqs = image_requests([160, 160], [1, 1], [100, 100], [0.05, 0.05], out=120)
    run = run_engine(reqs, sched, COST)
    plain = run_engine(image_requests([160, 160], [0, 0], [1, 1], [0.0, 0.0], out=120), sched, COST)
    assert run.preemptions >= 1
    encoded = float(np.sum(run.step_seconds) - np.sum(plain.step_seconds))
    assert encoded == pytest.approx(0.05 * (2 + run.preemptions))


# ----------------------------------------------------------------------------- workload files


MIX = """\
classes:
  - {name: chat, request_rate_per_s: 1, num_requests: 20,
     input_tokens: {kind: fixed, tokens: 256}, output_tokens: {kind: fixed, tokens: 32}}
  - {name: photos, request_rate_per_s: 0.5, num_requests: 10, images_per_request: 2, image_size: 896x896,
     input_tokens: {kind: fixed, tokens: 256}, output_tokens: {kind: fixed, tokens: 32}}
"""


def _cli(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_class_with_images_in_a_workload_file(capsys, tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text(MIX)
    code, out, err = _cli(
        capsys, ["simulate", "gemma-3-4b-it", "--gpu", "h100-sxm", "--workload-file", str(path), "--format", "json"]
    )
    assert code == 0, err
    data = json.loads(out)
    chat, photos = data["classes"]
    assert photos["ttft_seconds"]["p50"] > chat["ttft_seconds"]["p50"]
    assert data["image_tokens_per_request"] == pytest.approx(512 * 10 / 30)  # a third of the requests, 2 x 256
    assert data.get("saturation_requests_per_s") is None  # a class mix's full-batch run keeps no classes
    spec, hw = spec_of(GEMMA), get_profile("h100-sxm")
    assert data["encoder_seconds"] == pytest.approx(multimodal.encoder_seconds(spec, hw, scenario(2), 2) / 3)
    from planner.estimate.memory import plan_memory

    with_encoder = plan_memory(spec, hw, Scenario(workload=RequestShape(images_per_request=2)), suggest=False)
    text_only = plan_memory(spec, hw, Scenario(), suggest=False)
    assert data["scheduler"]["num_gpu_blocks"] == with_encoder.num_gpu_blocks < text_only.num_gpu_blocks


BAD_FILES = [
    (MIX.replace("896x896", "896x0"), [], "image_size 896x0: each side must be 1 to 16,384 pixels"),
    (MIX.replace("896x896", "0x0"), [], "image_size 0: expected WIDTHxHEIGHT"),
    (MIX.replace("images_per_request: 2", "images_per_request: -1"), [], "images_per_request: Input should be"),
    (MIX.replace("896x896", "big"), [], "expected WIDTHxHEIGHT"),
    (MIX.replace("images_per_request: 2, ", ""), [], "image_size without images_per_request"),
    (
        MIX.replace("images_per_request: 2,", "images_per_request: 2, shared_prefix: {tokens: 64},"),
        [],
        "images with a shared_prefix are not modelled",
    ),
    (MIX, ["--images-per-request", "1"], "--images-per-request cannot apply"),
]


@pytest.mark.parametrize(("text", "extra", "message"), BAD_FILES)
def test_bad_image_classes_are_refused_with_the_reason(capsys, tmp_path, text, extra, message):
    path = tmp_path / "w.yaml"
    path.write_text(text)
    code, _, err = _cli(capsys, ["simulate", "gemma-3-4b-it", "--workload-file", str(path), *extra])
    assert code == 2 and message in err, err
    assert "Traceback" not in err


BAD_FLAGS = [
    (["--images-per-request", "1", "--image-size", "0x0"], "each side must be 1 to 16,384"),
    (["--images-per-request", "-1"], "--images-per-request must be greater than or equal to 0"),
    (["--images-per-request", "1", "--static"], "the static-batching simulation does not model images"),
    (["--images-per-request", "1", "--prefix-cache-hit-rate", "0.5"], "images and prefix-cache hits"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_FLAGS, ids=[" ".join(e) for e, _ in BAD_FLAGS])
def test_bad_image_flags_of_simulate_are_refused(capsys, extra, message):
    code, _, err = _cli(capsys, ["simulate", "gemma-3-4b-it", "--qps", "1", "--num-requests", "5", *extra])
    assert code == 2 and message in err, err
    assert "Traceback" not in err


def test_a_text_only_model_with_images_is_refused(capsys):
    code, _, err = _cli(
        capsys, ["simulate", "llama3.1-8b", "--qps", "1", "--num-requests", "5", "--images-per-request", "1"]
    )
    assert code == 2 and "it is a text-only model (no vision_config)" in err and "Traceback" not in err
    wl = Workload(classes=(RequestClass(name="v", request_rate_per_s=1, num_requests=3, images_per_request=1),))
    with pytest.raises(ScenarioError, match="text-only model"):
        simulate_scenario(spec_of("meta-llama/Llama-3.1-8B"), get_profile("h100-sxm"), Scenario(), wl)


def test_searches_that_draw_text_only_requests_refuse_images():
    from planner.serve.replica import planned_replica

    with pytest.raises(ScenarioError, match="only the one-replica simulation"):
        planned_replica(spec_of(GEMMA), get_profile("h100-sxm"), scenario(1))


def test_the_table_says_what_the_images_cost(capsys):
    code, out, err = _cli(
        capsys,
        [
            "simulate",
            "gemma-3-4b-it",
            "--gpu",
            "h100-sxm",
            "--qps",
            "1",
            "--num-requests",
            "10",
            "--images-per-request",
            "2",
        ],
    )
    assert code == 0, err
    assert "images (mean per request)" in out and "512 prompt tokens, vision encoder" in out
    code, out, _ = _cli(
        capsys, ["simulate", "gemma-3-4b-it", "--gpu", "h100-sxm", "--qps", "1", "--num-requests", "10"]
    )
    assert code == 0 and "images (mean per request)" not in out
