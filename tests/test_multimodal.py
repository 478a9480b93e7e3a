"""Multimodal models: vision-encoder weights, tokens per image, the memory term, encoder compute in TTFT.

Known values: encoder parameters are transformers 5.24.0's meta-device counts
(tools/encoder_param_oracle.py -> tests/golden/encoder_params.json, which does not import the planner).
Tokens per image and bytes are computed by hand below from the configs' numbers. The Qwen2.5-VL and
LLaVA-1.5 configs are catalog entries (planner/model/catalog/index.yaml gives their sources).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from planner.cli import main
from planner.errors import ScenarioError
from planner.estimate import multimodal
from planner.estimate.latency import estimate_latency
from planner.estimate.memory import plan_memory
from planner.hardware import get_profile
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.scenario import RequestShape, Scenario

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = json.loads((ROOT / "tests" / "golden" / "encoder_params.json").read_text())
SCOUT = "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"
GEMMA = "google/gemma-3-4b-it"
QWEN = "Qwen/Qwen2.5-VL-7B-Instruct"
LLAVA = "llava-hf/llava-1.5-7b-hf"
QWEN3 = "Qwen/Qwen3-VL-8B-Instruct"


def spec_of(name: str):
    return build_spec(load_config(name, prefer="catalog").config, name)


def with_images(n: int, size: tuple[int, int] | None = None, **scenario) -> Scenario:
    shape = RequestShape(input_len=512, output_len=64, images_per_request=n, image_size=size)
    return Scenario(workload=shape, **scenario)


# ----------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("name", sorted(GOLDEN["models"]))
def test_encoder_params_equal_transformers_meta_count(name):
    row = GOLDEN["models"][name]
    spec = spec_of(name)
    assert spec.encoder is not None
    assert spec.encoder.params == row["encoder_params"]
    assert spec.total_params == row["language_model_params"]  # the text model stays transformers' count
    assert not [w for w in spec.warnings if "not counted" in w or "not modelled" in w]


def test_golden_was_written_by_the_pinned_transformers():
    assert GOLDEN["transformers_version"] == "5.24.0"
    assert GOLDEN["models"][GEMMA]["encoder_params"] == 419_816_304


def test_llava_serves_the_tower_up_to_its_feature_layer():
    """vLLM builds 23 of CLIP's 24 layers for vision_feature_layer -2, and no post-norm."""
    enc = spec_of(LLAVA).encoder
    h, ffn = 1024, 4096
    layer = 4 * h * h + 4 * h + 2 * h * ffn + ffn + h + 4 * h
    served = sum(g.total for g in enc.served_param_groups())
    assert enc.served_layers == 23
    assert served == enc.params - layer - 2 * h


def test_a_llava_wrapper_around_pixtral_is_not_read_as_clip():
    """pixtral-12b is model_type llava with a pixtral vision_config: not CLIP's shapes, so not counted as CLIP."""
    raw = json.loads((ROOT / "planner" / "model" / "catalog" / "llava-hf--llava-1.5-7b-hf.json").read_text())
    spec = build_spec({**raw, "vision_config": {"model_type": "pixtral", "hidden_size": 1024}}, "toy-pixtral")
    assert spec.encoder is None and spec.unsupported_encoder == "vision_config (pixtral) of model_type 'llava'"
    assert any("llava with clip_vision_model" in w for w in spec.warnings)


def test_unsupported_encoder_keeps_the_warning_and_refuses_images():
    raw = {
        "model_type": "mistral3",
        "text_config": {
            "model_type": "mistral",
            "hidden_size": 512,
            "intermediate_size": 1024,
            "num_hidden_layers": 2,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "vocab_size": 1000,
        },
        "vision_config": {"model_type": "pixtral", "hidden_size": 1024},
    }
    spec = build_spec(raw, "toy-mistral3")
    assert spec.encoder is None
    assert any("vision_config (pixtral)" in w and "not counted" in w for w in spec.warnings)
    with pytest.raises(ScenarioError, match=r"vision_config \(pixtral\).*is not modelled"):
        plan_memory(spec, get_profile("h100-sxm"), with_images(1))


# ----------------------------------------------------------------------------- tokens per image

TOKENS = [
    (GEMMA, None, 256),  # mm_tokens_per_image: 64 x 64 patches avg-pooled 4 x 4
    (LLAVA, None, 24 * 24),  # (336 / 14)^2 patches, the class token dropped
    (SCOUT, None, 24 * 24 // 4),  # one 336 tile: 576 patches pixel-shuffled by 0.5 -> 144
    (SCOUT, (672, 672), (4 + 1) * 144),  # 2 x 2 tiles and the global thumbnail
    (SCOUT, (6000, 6000), (16 + 1) * 144),  # capped at 16 tiles
    (SCOUT, (1280, 720), (3 * 4 + 1) * 144),  # scale 1.05 on both 3 x 4 and 4 x 4: the smaller canvas
    # no canvas upscales it: 1 x 13 to 1 x 16 all scale by 336 / 400 = 0.84 (the height binds), 1 x 13 is the smallest
    (SCOUT, (5000, 400), (13 + 1) * 144),
    (QWEN, (1280, 720), (round(720 / 28) * 2) * (round(1280 / 28) * 2) // 4),  # 52 x 92 patches -> 1,196
    (QWEN, (10, 10), 4),  # below min_pixels: 56 x 56 -> 4 x 4 patches -> 4 tokens
    (QWEN, (8000, 8000), 16_384),  # above max_pixels: floor(8000 / 2.232 / 28) x 28 = 3,584 per side
    # Qwen3-VL: factor 16 x 2 = 32; 720 / 32 = 22.5 rounds (half to even) to 22: 1280 x 704 -> 80 x 44 patches -> 880
    (QWEN3, (1280, 720), (round(720 / 32) * 2) * (round(1280 / 32) * 2) // 4),
    # above its max_pixels (4096^2): beta = 8000 / 4096, floor(4096 / 32) x 32 = 4,096 per side -> 256^2 patches
    (QWEN3, (8000, 8000), 256 * 256 // 4),
    # below its min_pixels (256^2): 200 x 200 is scaled by 1.28 to 256 x 256 -> 16 x 16 patches -> 64 tokens
    (QWEN3, (200, 200), 64),
]


@pytest.mark.parametrize(("name", "size", "tokens"), TOKENS, ids=[f"{n}-{s}" for n, s, _ in TOKENS])
def test_tokens_per_image_by_hand(name, size, tokens):
    spec = spec_of(name)
    sc = with_images(1, size)
    assert multimodal.images(spec, sc).tokens_per_image == tokens
    assert multimodal.prompt_tokens(spec, sc, 512) == 512 + tokens
    assert multimodal.prompt_tokens(spec, with_images(3, size), 512) == 512 + 3 * tokens


def test_qwen_max_tokens_per_image_is_max_pixels_over_28_squared():
    assert spec_of(QWEN).encoder.max_tokens_per_image == 12_845_056 // 28**2 == 16_384


def test_qwen3_vl_max_tokens_per_image_is_max_pixels_over_32_squared():
    assert spec_of(QWEN3).encoder.max_tokens_per_image == 16_777_216 // 32**2 == 16_384


def test_qwen3_vl_extra_parameters_by_hand():
    """Patch conv (with bias) and the position table, the merger (LayerNorm over h) and three deepstack mergers
    (LayerNorm over 4h): 576,388,336 with the 27 blocks (transformers' count, tests/golden/encoder_params.json)."""
    enc = spec_of(QWEN3).encoder
    h, ffn, m, out = 1152, 4304, 4 * 1152, 4096
    block = 4 * h * h + 4 * h + 2 * h * ffn + ffn + h + 4 * h
    embed = h * 3 * 2 * 16 * 16 + h + 2304 * h
    merger = m * m + m + m * out + out
    assert enc.params == 27 * block + embed + (merger + 2 * h) + 3 * (merger + 2 * m) == 576_388_336


# ----------------------------------------------------------------------------- memory


def test_gemma3_encoder_term_by_hand_and_kv_shrinks_by_exactly_it():
    spec, hw = spec_of(GEMMA), get_profile("l4")
    text = plan_memory(spec, hw, with_images(0), suggest=False)
    plan = plan_memory(spec, hw, with_images(2), suggest=False)
    assert plan.encoder_bytes == 419_816_304 * 2  # bf16, TP 1: every parameter on the one GPU
    assert plan.encoder_cache_bytes == max(2048, 256) * 2560 * 2  # L4 budget 2,048 tokens x h x bf16
    # the profile's ViT forward: 2,048 // 256 = 8 images x 4,096 patches x (2 x 4,304 + 3 x 1,152) x 2 B, above the
    # language model's activations and the cached outputs by the rest
    vit_peak = 8 * 4096 * (2 * 4304 + 3 * 1152) * 2
    assert plan.encoder_activation_bytes == vit_peak - plan.activation_bytes_per_gpu - plan.encoder_cache_bytes
    taken = plan.encoder_bytes + plan.encoder_cache_bytes + plan.encoder_activation_bytes
    assert text.kv_cache_bytes_per_gpu - plan.kv_cache_bytes_per_gpu == taken
    assert plan.activation_bytes_per_gpu == text.activation_bytes_per_gpu  # the language model's own peak unchanged
    assert {t.name: t.bytes for t in plan.terms}["encoder"] == plan.encoder_bytes
    assert sum(t.bytes for t in plan.terms) == hw.memory_bytes


def test_encoder_activations_only_where_the_vit_outgrows_the_language_model():
    """Qwen2.5-VL-7B on an H100 (budget 8,192 tokens): one 16,384-token image, 65,536 patches x (3 x 3,420 +
    3 x 1,280) x 2 B = 1.85 GB of ViT activations; on an L4 (budget 2,048) the same single image is the profile."""
    spec = spec_of(QWEN)
    plan = plan_memory(spec, get_profile("h100-sxm"), with_images(1, (1280, 720)), suggest=False)
    vit_peak = 65_536 * (3 * 3420 + 3 * 1280) * 2
    assert plan.encoder_activation_bytes == max(0, vit_peak - plan.activation_bytes_per_gpu - plan.encoder_cache_bytes)
    assert plan.encoder_cache_bytes == 16_384 * 3584 * 2  # raised to the largest image's 16,384 tokens
    small = plan_memory(spec_of(LLAVA), get_profile("h100-sxm"), with_images(1), suggest=False)
    assert small.encoder_activation_bytes == 0  # 14 x 577 CLIP patches stay below the 8,192-token LM peak


def test_gemma3_encoder_linears_split_over_tp():
    h, ffn, layers = 1152, 4304, 27
    # q, k, v, o, fc1, fc2 and the 64 x 64 position embedding (a VocabParallelEmbedding); the rest whole on each rank
    sharded = layers * (4 * h * h + 2 * h * ffn) + 64 * 64 * h
    plan = plan_memory(spec_of(GEMMA), get_profile("h100-sxm"), with_images(1, tp=2), suggest=False)
    assert plan.encoder_bytes == int((419_816_304 - sharded / 2) * 2)


def test_text_only_requests_plan_byte_identical():
    spec, hw = spec_of(SCOUT), get_profile("h100-sxm")
    before = plan_memory(spec, hw, Scenario(tp=4)).model_dump_json()
    assert (
        plan_memory(spec, hw, Scenario(tp=4, workload=RequestShape(images_per_request=0))).model_dump_json() == before
    )
    assert "encoder" not in before
    lat = estimate_latency(spec, hw, Scenario(tp=4)).model_dump()
    assert "encoder_seconds" not in lat and "image_tokens_per_request" not in lat


# ----------------------------------------------------------------------------- compute


def test_ttft_grows_with_images_and_holds_the_encoder_seconds():
    spec, hw = spec_of(GEMMA), get_profile("l4")
    runs = [estimate_latency(spec, hw, with_images(n, gpu="l4")) for n in (0, 1, 4)]
    ttft = [r.ttft_seconds for r in runs]
    assert ttft[0] < ttft[1] < ttft[2]
    assert runs[0].encoder_seconds is None
    enc1, enc4 = runs[1].encoder_seconds, runs[2].encoder_seconds
    assert 0 < enc1 < enc4 and math.isclose(enc4 / enc1, 4, rel_tol=0.1)  # four images, four ViT passes
    assert ttft[1] - ttft[0] >= enc1  # the encoder plus 256 more prompt tokens to prefill
    assert runs[1].image_tokens_per_request == 256 and runs[1].input_len == 512


def test_encoder_flops_of_one_gemma3_image_by_hand():
    """27 SigLIP layers over 4,096 patches: 2 x T x (4h^2 + 2hI) GEMM FLOPs + 4 x T^2 x h attention."""
    from planner.estimate.roofline import roofline

    spec, hw = spec_of(GEMMA), get_profile("h100-sxm")
    pre = roofline(spec, hw, with_images(1), "prefill", 1, 512 + 256)
    rows = [r for r in pre.layers if r.group.startswith("vision encoder: layers")]
    T, h, ffn = 4096, 1152, 4304
    by_hand = 27 * (2 * T * (4 * h * h + 2 * h * ffn) + 4 * T * T * h)
    gemm_and_attention = sum(r.flops * r.count for r in rows if r.kind in ("gemm", "attention"))
    assert math.isclose(gemm_and_attention, by_hand, rel_tol=0.01)  # softmax adds 5 x T^2 x heads


# ----------------------------------------------------------------------------- bad flags

BAD = [
    (["plan", "gemma-3-4b-it", "--images-per-request", "1", "--image-size", "0x0"], "each side must be 1 to 16,384"),
    (
        ["plan", "gemma-3-4b-it", "--images-per-request", "-1"],
        "--images-per-request must be greater than or equal to 0",
    ),
    (["plan", "llama3.1-8b", "--images-per-request", "1"], "it is a text-only model (no vision_config)"),
    (
        ["simulate", "gemma-3-4b-it", "--qps", "1", "--num-requests", "10", "--images-per-request", "1", "--static"],
        "the static-batching simulation does not model images",
    ),
    (["plan", "gemma-3-4b-it", "--image-size", "896x896"], "--image-size without --images-per-request"),
    (["plan", "gemma-3-4b-it", "--images-per-request", "1", "--image-size", "big"], "expects WIDTHxHEIGHT"),
    (
        ["plan", "qwen2.5-vl-7b", "--images-per-request", "1"],
        "no --image-size was given",
    ),
    (
        [
            "plan",
            "qwen2.5-vl-7b",
            "--images-per-request",
            "1",
            "--image-size",
            "10000x40",
        ],
        "aspect ratio above 200",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a[2:]) for a, _ in BAD])
def test_bad_image_flags_refused_with_messages(capsys, argv, message):
    code = main(argv)
    _, err = capsys.readouterr()
    assert code == 2
    assert message in err, err
    assert "Traceback" not in err


def test_plan_json_carries_encoder_bytes(capsys):
    assert main(["plan", "gemma-3-4b-it", "--gpu", "l4", "--images-per-request", "2", "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["encoder_bytes"] == 419_816_304 * 2
    assert d["encoder_cache_bytes"] == 2048 * 2560 * 2


def test_vllm_export_limits_images_as_planned():
    """The export carries --limit-mm-per-prompt: N images as planned; 0 (and video 0) for a text-only plan, so that
    vLLM, like the plan, loads no encoder (vllm/v1/core/encoder_cache_manager.py: all modalities disabled)."""
    from planner.deploy.export import export_bundle

    cases = [
        (GEMMA, 2, None, '{"image":2}'),
        (GEMMA, 0, None, '{"image":0}'),
        (QWEN, 1, (1280, 720), '{"image":1,"video":0}'),
        (QWEN, 0, None, '{"image":0,"video":0}'),
        ("meta-llama/Llama-3.1-8B", 0, None, None),
    ]
    for name, images, size, want in cases:
        sc = with_images(images, size, max_model_len=8192)
        bundle = export_bundle(spec_of(name), get_profile(sc.gpu), sc)
        command = next(a.text for a in bundle.artefacts if a.target == "vllm-cmd")
        if want is None:
            assert "--limit-mm-per-prompt" not in command
        else:
            assert f"--limit-mm-per-prompt '{want}'" in command, name


def test_latency_table_shows_the_encoder_inside_ttft(capsys):
    assert main(["latency", "gemma-3-4b-it", "--gpu", "l4", "--images-per-request", "2"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the title wraps at the terminal's width
    assert "(+ 512 image tokens per request)" in out and "of which the vision encoder" in out
    assert main(["latency", "gemma-3-4b-it", "--gpu", "l4"]) == 0
    assert "vision encoder" not in capsys.readouterr().out


def test_the_encoder_runs_on_the_first_pipeline_stage_only():
    """vLLM runs _execute_mm_encoder where get_pp_group().is_first_rank: with --pp 2 the images add time to stage 0."""
    from planner.estimate.roofline import roofline

    spec, hw = spec_of(GEMMA), get_profile("h100-sxm")
    text = roofline(spec, hw, with_images(0, pp=2), "prefill", 1, 768)
    mm = roofline(spec, hw, with_images(1, pp=2), "prefill", 1, 768)
    assert mm.pipeline[0].gpu_seconds > text.pipeline[0].gpu_seconds
    assert math.isclose(mm.pipeline[1].gpu_seconds, text.pipeline[1].gpu_seconds, rel_tol=1e-12)


def test_tp_must_divide_the_vision_heads():
    spec = spec_of(LLAVA)  # CLIP-L: 16 heads; the language model's 32 heads allow --tp 32, its ViT does not
    with pytest.raises(ScenarioError, match="does not divide the vision encoder's 16 attention heads"):
        multimodal.images(spec, with_images(1, tp=32))


def test_roofline_command_adds_the_image_tokens_to_the_sequence(capsys):
    argv = ["roofline", "gemma-3-4b-it", "--gpu", "l4", "--seq-len", "512", "--images-per-request", "1"]
    for stage, encoder_rows in (("prefill", True), ("decode", False)):
        assert main([*argv, "--stage", stage, "--format", "json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["seq_len"] == 512 + 256  # the prompt (or the context) holds the image's tokens
        assert any(r["group"].startswith("vision encoder") for r in d["layers"]) is encoder_rows


def test_operating_points_count_the_images_tokens_in_each_requests_kv():
    """The throughput profile sizes max-num-seqs by the requests the KV cache holds: each holds its text, its images'
    tokens and its output (Qwen3-VL-8B, with_images' lengths: 512 + 2 x 880 + 64 = 2,336 tokens)."""
    from planner.estimate.operating_points import throughput_profile

    spec, hw = spec_of(QWEN3), get_profile("h100-sxm")
    pictured = throughput_profile(spec, hw, with_images(2, (1280, 720), max_model_len=8192))
    text_only = throughput_profile(spec, hw, with_images(0, max_model_len=8192))
    assert "requests of 2,336 tokens" in pictured.rule and "requests of 576 tokens" in text_only.rule
    assert pictured.max_num_seqs < text_only.max_num_seqs
