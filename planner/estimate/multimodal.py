"""Images in a request: how many prompt tokens they become, what the vision encoder holds and costs.

With ``--images-per-request N`` (``RequestShape.images_per_request``) each request carries N images of
``--image-size WxH`` (default the encoder's native size). Then, for a model whose encoder
``planner.model.encoders`` models:

* prompt tokens = the text tokens + N x tokens per image (``prompt_tokens``): the LLM prefills both;
* memory (per GPU, taken from the KV cache like every other term, ``planner.estimate.memory``):
  the encoder's weights on one rank (``encoder_weight_bytes``: vLLM builds the tower on every pipeline
  rank of the model class) and the encoder cache vLLM profiles (``encoder_cache_bytes``);
* compute: the encoder's forward over the batch's images, rows of the prefill step
  (``encoder_rows``), timed by ``planner.estimate.step`` like any op; their sum is the latency's
  ``encoder_seconds``, inside TTFT.

vLLM's profiling run (``GPUModelRunner.profile_run``) encodes a batch of the largest images that fills the
encoder budget, keeps their outputs in the encoder cache ("Cache the dummy encoder outputs") and then runs
the language model's dummy forward: the peak it measures is the larger of the ViT forward's activations
(``encoder_activation_bytes``) and the cached outputs plus the language model's activations. The memory
plan takes the first from the KV cache where it exceeds the second (``encoder_activations``, an estimate).

Encoder cache (vLLM ``vllm/v1/core/encoder_cache_manager.py`` ``compute_mm_encoder_budget``, commit
003ad86e): ``encoder_cache_size`` defaults to ``max_num_batched_encoder_embeds``, itself
``max_num_batched_tokens``, and is raised to the largest item's tokens (``max_tokens_per_mm_item``);
each cached token is one LLM-width embedding, so it holds ``size x h x act_bytes`` bytes
(Gemma-3-4B at 2,048 tokens: 2,048 x 2,560 x 2 = 10 MiB). With every modality at 0
(``--limit-mm-per-prompt``) vLLM neither builds the tower nor the cache: that is ``images_per_request``
0, where every number is the text-only plan's.
"""

from __future__ import annotations

from typing import NamedTuple

from planner.efficiency import Efficiency
from planner.errors import ScenarioError
from planner.estimate.resolve import Resolved, resolve
from planner.hardware import HardwareProfile
from planner.model.encoders import ENCODERS, VisionEncoder
from planner.model.ops import Op, StepShape
from planner.model.spec import ModelSpec
from planner.scenario import Scenario


class Images(NamedTuple):
    """The images of one request as the encoder sees them."""

    encoder: VisionEncoder
    per_request: int
    width: int
    height: int
    tokens_per_image: int


def images(model: ModelSpec, sc: Scenario) -> Images | None:
    """The request's images (None without any), refused with the reason where the model cannot take them."""
    wl = sc.workload
    if wl.images_per_request == 0:
        return None
    enc = model.encoder
    if enc is None:
        what = (
            f"its {model.unsupported_encoder} is not modelled"
            if model.unsupported_encoder
            else "it is a text-only model (no vision_config)"
        )
        raise ScenarioError(
            f"--images-per-request {wl.images_per_request}: {model.name} cannot be planned with images: {what}.",
            hint=f"Drop --images-per-request, or pick a model whose encoder is modelled (wrappers: "
            f"{', '.join(sorted(ENCODERS))}).",
        )
    if wl.image_size is None and enc.dynamic_resolution:
        raise ScenarioError(
            f"--images-per-request {wl.images_per_request}: {model.name}'s tokens per image follow the image's size "
            "(dynamic resolution), and no --image-size was given.",
            hint="Add --image-size WxH, e.g. --image-size 1280x720.",
        )
    if enc.num_heads % sc.tp:  # vLLM splits the ViT's heads over TP (QKVParallelLinear) as the LM's
        raise ScenarioError(
            f"--tp {sc.tp} does not divide the vision encoder's {enc.num_heads} attention heads of {model.name} "
            "(vLLM shards the ViT over TP with --mm-encoder-tp-mode weights, its default).",
            hint=f"Use a --tp that divides {enc.num_heads}, or drop --images-per-request.",
        )
    width, height = wl.image_size or (enc.image_size, enc.image_size)
    enc.check_image(width, height)
    return Images(enc, wl.images_per_request, width, height, enc.tokens_per_image(width, height))


def prompt_tokens(model: ModelSpec, sc: Scenario, text_tokens: int) -> int:
    """Tokens the LLM prefills per request: the text and every image's tokens."""
    imgs = images(model, sc)
    return text_tokens + (imgs.per_request * imgs.tokens_per_image if imgs else 0)


def encoder_weight_bytes(model: ModelSpec, sc: Scenario, res: Resolved) -> int:
    """The encoder's weights on one rank (``VisionEncoder.bytes_per_rank``); 0 without images."""
    imgs = images(model, sc)
    return imgs.encoder.bytes_per_rank(res.tp, res.act_bytes_per_element) if imgs else 0


def encoder_cache_bytes(model: ModelSpec, sc: Scenario, res: Resolved) -> int:
    """vLLM's encoder cache: max(max_num_batched_tokens, largest image's tokens) x h x act bytes; 0 without images."""
    imgs = images(model, sc)
    if imgs is None:
        return 0
    size = max(res.max_num_batched_tokens, imgs.encoder.max_tokens_per_image)
    return int(size * model.hidden_size * res.act_bytes_per_element)


def profile_items(model: ModelSpec, sc: Scenario, res: Resolved) -> int:
    """Images of the largest size vLLM's profiling run encodes at once: the encoder budget over one item's
    tokens (``GPUModelRunner.profile_run``: "profiled with N image items of the maximum feature size");
    0 without images."""
    imgs = images(model, sc)
    if imgs is None:
        return 0
    per_item = imgs.encoder.max_tokens_per_image
    return max(1, max(res.max_num_batched_tokens, per_item) // per_item)


def encoder_activation_bytes(model: ModelSpec, sc: Scenario, res: Resolved) -> int:
    """Peak transient bytes of the ViT forward in vLLM's profiling run (estimate): ``profile_items`` images
    of the most patches, each patch at ``VisionEncoder.activation_bytes_per_patch``; 0 without images.
    Gemma-3-4B on an L4 (budget 2,048 tokens): 8 images x 4,096 patches x (2 x 4,304 + 3 x 1,152) x 2 B = 0.79 GB."""
    imgs = images(model, sc)
    if imgs is None:
        return 0
    enc = imgs.encoder
    patches = profile_items(model, sc, res) * enc.max_patches_per_image
    return int(patches * enc.activation_bytes_per_patch(res.tp, res.act_bytes_per_element))


def encoder_rows(model: ModelSpec, sc: Scenario, shape: StepShape, batch: int) -> list[tuple[str, int, list[Op]]]:
    """The encoder's forward over ``batch`` requests' images, as (group, count, ops) rows; [] without images."""
    imgs = images(model, sc)
    if imgs is None:
        return []
    return image_rows(model, shape, imgs, batch * imgs.per_request)


def image_rows(model: ModelSpec, shape: StepShape, imgs: Images, count: int) -> list[tuple[str, int, list[Op]]]:
    """The encoder's forward over ``count`` images of ``imgs``'s size in one batch, as (group, count, ops) rows."""
    # the tower stays in the model dtype (quantized checkpoints leave it out), whatever the LLM's GEMMs run in
    vit_shape = shape.model_copy(update={"compute_dtypes": {**shape.compute_dtypes, "vision": model.dtype}})
    return imgs.encoder.ops(vit_shape, count, imgs.width, imgs.height)


def encoder_seconds(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    count: int,
    efficiency: Efficiency | None = None,
) -> float:
    """Seconds of the vision encoder's forward over ``count`` images of ``sc``'s size, in one batch, on one rank:
    the rows a prefill roofline adds for them (``image_rows``, eager), bound by the roofline's own ``Binder``
    (``planner.estimate.step``), summed. The prefill roofline of a batch of one request holds exactly these rows for
    its ``images_per_request`` images, so this is the latency estimate's ``encoder_seconds`` at batch 1 (tested).
    The simulator charges it in the step that schedules the images' first tokens (``planner.serve.simulate``)."""
    from planner.estimate.roofline import Binder, efficiency_for, engine_of, step_shape  # (roofline imports this)

    imgs = images(model, sc)
    if imgs is None or count <= 0:
        return 0.0
    res = resolve(model, hw, sc)
    shape = step_shape(model, res, "prefill", 1, 1)  # only its TP, dtypes and weight bits reach the ViT's ops
    binder = Binder(hw, efficiency or efficiency_for(hw, sc=sc), res.tp, engine_of(sc), shape.num_seqs, res.ep)
    rows = image_rows(model, shape, imgs, count)
    return sum(binder(op, False)[0] * count for _, count, ops in rows for op in ops)
