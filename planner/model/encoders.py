"""Vision encoders of multimodal wrappers: their parameters, tokens per image and forward ops.

A multimodal config (Llama-4, Gemma-3, Qwen2.5-VL, LLaVA) carries a ``vision_config`` beside its
language model. Each encoder kind is one small frozen class built from that block (``ENCODERS`` maps
the wrapper's ``model_type`` to it), and answers:

* ``param_groups()``: every parameter as transformers 5.24.0 builds the vision tower and projector
  (``params`` equals ``sum(p.numel())`` of those modules on the meta device: tests/golden/encoder_params.json,
  written by tools/encoder_param_oracle.py); ``served_param_groups()``: what vLLM builds (LLaVA stops at
  ``vision_feature_layer``);
* ``tokens_per_image(w, h)``: the LLM tokens one image becomes, and ``patches_per_image(w, h)``: the
  ViT's sequence per image (the work of its layers);
* ``ops(shape, images, w, h)``: the encoder's forward over ``images`` images as ``Op`` rows, timed by
  ``planner.estimate.step`` like any other op.

Sharding: vLLM's default ``--mm-encoder-tp-mode weights`` builds the ViT's q/k/v, output, MLP and
projector linears as column/row-parallel layers (``vllm/model_executor/models/mllama4.py``,
``siglip.py``, ``clip.py``, ``qwen2_5_vl.py``, ``llava.py``), so they split over TP like the language
model's, and so does SigLIP's position embedding (a ``VocabParallelEmbedding``) and Llama-4's unfold
patch linear (a ``ColumnParallelLinear``); conv patch embeddings, CLIP's and Llama-4's position
embeddings (plain parameters), norms, biases and Gemma-3's raw ``mm_input_projection_weight`` are
counted whole on every rank (biases and norms as the text model counts them). Weights are
counted in the activation dtype: quantized checkpoints leave the tower unquantized (the Scout FP8
checkpoint's ignore list names ``vision_model`` and ``multi_modal_projector``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import ConfigError, ScenarioError
from planner.model.layers import ParamGroup
from planner.model.ops import Op, StepShape, allreduce, elementwise, gemm

#: Name of the encoder rows' layer group in a roofline ("vision encoder: ...") and the component of its weights.
ENCODER_GROUP = "vision encoder"
COMPONENT = "vision"


class VisionEncoder(BaseModel):
    """A ViT with a projector into the language model's hidden size (fields shared by every kind)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hidden_size: int = Field(gt=0, description="ViT width, elements (vision_config hidden_size).")
    num_layers: int = Field(gt=0, description="ViT layers as the checkpoint holds them (num_hidden_layers / depth).")
    num_heads: int = Field(gt=0, description="ViT attention heads.")
    intermediate_size: int = Field(gt=0, description="ViT MLP width, elements.")
    patch_size: int = Field(gt=0, description="Side of one square patch, pixels.")
    image_size: int = Field(
        gt=0,
        description="Side of the square image (or tile) the ViT sees, pixels; Qwen2.5-VL has none (dynamic "
        "resolution: its patch size stands in, and --image-size is required).",
    )
    num_channels: int = Field(3, gt=0, description="Input channels (3: RGB).")
    text_hidden_size: int = Field(gt=0, description="Language model width h the projector maps into, elements.")

    #: LayerNorm (weight + bias: 2) or RMSNorm (weight: 1) per norm.
    norm_params_per_h: ClassVar[int] = 2
    #: gate/up/down MLP (SiLU-gated) instead of fc1/fc2.
    gated_mlp: ClassVar[bool] = False
    #: Tokens per image follow the image's own size (Qwen2.5-VL): --image-size is then required.
    dynamic_resolution: ClassVar[bool] = False
    #: Modalities besides images the model's vLLM class accepts (set to 0 in --limit-mm-per-prompt).
    other_modalities: ClassVar[tuple[str, ...]] = ()

    # ------------------------------------------------------------------ parameters

    @property
    def grid(self) -> int:
        """Patches per side of the native image: image_size // patch_size (336 / 14 = 24)."""
        return self.image_size // self.patch_size

    def layer_params(self) -> ParamGroup:
        """One ViT layer: q, k, v, o with biases (4h^2 + 4h), the MLP with biases, two norms."""
        h, ffn = self.hidden_size, self.intermediate_size
        mlp_weights = (3 if self.gated_mlp else 2) * h * ffn
        mlp_biases = (2 * ffn if self.gated_mlp else ffn) + h
        return ParamGroup(
            component=COMPONENT,
            sharded_linear=4 * h * h + mlp_weights,
            other=4 * h + mlp_biases + 2 * self.norm_params_per_h * h,
        )

    def extra_groups(self) -> list[ParamGroup]:
        """Embeddings, outer norms, adapters and projector: the parts that differ by kind."""
        raise NotImplementedError

    @property
    def served_layers(self) -> int:
        """ViT layers vLLM builds and runs (all, unless the kind stops early)."""
        return self.num_layers

    def param_groups(self) -> list[ParamGroup]:
        """Every parameter of the vision tower and projector, as transformers builds them."""
        return [self.layer_params()] * self.num_layers + self.extra_groups()

    def served_param_groups(self) -> list[ParamGroup]:
        """The parameters vLLM holds (``served_layers`` layers; the kind's extra parts)."""
        return [self.layer_params()] * self.served_layers + self.served_extra_groups()

    def served_extra_groups(self) -> list[ParamGroup]:
        return self.extra_groups()

    @property
    def params(self) -> int:
        """Parameters of the tower and projector (transformers' count)."""
        return sum(g.total for g in self.param_groups())

    def bytes_per_rank(self, tp: int, act_bytes: float) -> int:
        """Bytes one TP rank holds: sharded linears / tp, the rest whole, all in the activation dtype."""
        return int(
            sum((g.sharded_linear / tp + g.replicated_linear + g.other) * act_bytes for g in self.served_param_groups())
        )

    # ---------------------------------------------------------------------- tokens

    def check_image(self, width: int, height: int) -> None:
        """Refuse an image the processor refuses (only Qwen2.5-VL has a rule: aspect ratio <= 200)."""

    def patches_per_image(self, width: int, height: int) -> int:
        """ViT sequence length one image costs (all tiles, the class token included where there is one)."""
        raise NotImplementedError

    def tokens_per_image(self, width: int, height: int) -> int:
        """LLM prompt tokens one image becomes (the placeholder tokens the encoder's output fills)."""
        raise NotImplementedError

    def limit_per_prompt(self, images: int) -> dict[str, int]:
        """vLLM's --limit-mm-per-prompt for ``images`` images a request: the other modalities the model takes at 0,
        so that with no images vLLM builds neither the encoder nor its cache (compute_mm_encoder_budget: "All
        non-text modalities ... explicitly disabled ... Encoder cache will not be initialized")."""
        return {"image": images} | {m: 0 for m in self.other_modalities}

    @property
    def max_tokens_per_image(self) -> int:
        """The most LLM tokens one image can become (vLLM's max_tokens_per_mm_item): fixed-size kinds' own."""
        return self.tokens_per_image(self.image_size, self.image_size)

    @property
    def max_patches_per_image(self) -> int:
        """ViT patches of the largest image (the item vLLM's profiling run encodes): fixed-size kinds' own."""
        return self.patches_per_image(self.image_size, self.image_size)

    def activation_bytes_per_patch(self, tp: int, act_bytes: float) -> float:
        """Transient bytes one patch holds at the ViT's widest point, the language model's rule
        (``planner.estimate.memory.activation_peak_bytes``) at the ViT's widths: the MLP's up (and gate)
        output and its activation, (3 if gated else 2) x I / tp, plus 3 hidden-size buffers."""
        return ((3 if self.gated_mlp else 2) * self.intermediate_size / tp + 3 * self.hidden_size) * act_bytes

    # ------------------------------------------------------------------------ ops

    def vit_ops(self, shape: StepShape, span: int | None = None) -> list[Op]:
        """One ViT layer over ``shape`` (num_seqs = images or tiles, query_len = patches each), bidirectional.

        GEMMs q/k/v (3 h x h), o (h x h), the MLP (fc1 + fc2, or gate/up + down); attention
        4 x pairs x h / tp FLOPs (QK^T and PV) with pairs = seq x min(seq, span) per sequence (``span``: a
        window's patches); the all-reduce after o and after the MLP when tp > 1.
        """
        h, ffn = self.hidden_size, self.intermediate_size
        T, seq = shape.tokens, shape.query_len
        pairs = shape.num_seqs * seq * min(seq, span or seq)
        ops = [
            elementwise(shape, "vit.norm1", T * h, 4.0),
            gemm(shape, "vit.qkv_proj", COMPONENT, T, 3 * h, h),
            Op(
                name="vit.attention (QK^T, PV)",
                kind="attention",
                flops=4.0 * pairs * h / shape.tp + 5.0 * pairs * self.num_heads / shape.tp,
                activation_bytes=4 * T * h / shape.tp * shape.act_bytes,
            ),
            gemm(shape, "vit.o_proj", COMPONENT, T, h, h),
            allreduce(shape, "vit.o_proj all-reduce", h),
            elementwise(shape, "vit.norm2", T * h, 4.0),
            gemm(
                shape,
                "vit.fc1" if not self.gated_mlp else "vit.gate_up_proj",
                COMPONENT,
                T,
                (2 if self.gated_mlp else 1) * ffn,
                h,
            ),
            elementwise(shape, "vit.act", T * ffn / shape.tp, 8.0),
            gemm(shape, "vit.fc2", COMPONENT, T, h, ffn),
            allreduce(shape, "vit.fc2 all-reduce", h),
        ]
        return [op for op in ops if op is not None]

    def projector_ops(self, shape: StepShape, images: int, width: int, height: int) -> list[Op]:
        """The projector (and any pooling or merging) from the ViT's output to the LLM's tokens."""
        raise NotImplementedError

    def sequences(self, width: int, height: int) -> tuple[int, int]:
        """(sequences, patches each) the ViT runs for one image: one sequence for single-image kinds."""
        return 1, self.patches_per_image(width, height)

    def layer_plan(self) -> list[tuple[str, int, int | None]]:
        """(label, layers, attention span in patches or None for full) of the layers vLLM runs."""
        return [("layers", self.served_layers, None)]

    def ops(self, shape: StepShape, images: int, width: int, height: int) -> list[tuple[str, int, list[Op]]]:
        """The encoder's forward over ``images`` images of width x height: (group, count, ops) rows.

        ``shape`` gives the rank's TP, dtypes and weight bits; its token counts are replaced by the
        encoder's (sequences x patches).
        """
        seqs, seq = self.sequences(width, height)
        vit = shape.model_copy(
            update={"num_seqs": images * seqs, "query_len": seq, "context_len": seq, "causal": False}
        )
        rows = [
            (f"{ENCODER_GROUP}: {label} ({n})", n, self.vit_ops(vit, span)) for label, n, span in self.layer_plan() if n
        ]
        rows.append((f"{ENCODER_GROUP}: embeddings and projector", 1, self.projector_ops(vit, images, width, height)))
        return rows


def _linear(shape: StepShape, name: str, m: int, n: int, k: int, sharded: bool = True) -> Op:
    return gemm(shape, name, COMPONENT, m, n, k, sharded=sharded)


class Llama4Vision(VisionEncoder):
    """Llama-4's ViT: unfold-linear patch embedding, class token, LayerNorms, pixel-shuffle adapter, linear projector.

    Params (transformers Llama4VisionModel + Llama4MultiModalProjector): patch linear h x C p^2, class
    embedding h, position embedding (grid^2 + 1) x h, layernorm_pre/post 2h each, L layers; vision_adapter
    fc1 intermediate x projector_input_dim and fc2 projector_output_dim^2 (no biases); projector
    vision_output_dim x text h (bias if multi_modal_projector_bias). Scout: 850,960,896 + 20,971,520.

    Tokens: the processor fits an image into a canvas of up to ``max_tiles`` 336 x 336 tiles (``canvas``,
    plus one global thumbnail when there is more than one); each tile's 576 patches are pixel-shuffled by
    0.5 into 144 tokens (the separators and image start/end markers are text tokens, not counted here).
    """

    kind: Literal["llama4"] = "llama4"
    vision_output_dim: int = Field(gt=0, description="Adapter output fed to the projector, elements.")
    projector_input_dim: int = Field(gt=0, description="Adapter fc1 output width, elements.")
    projector_output_dim: int = Field(gt=0, description="Adapter fc2 width, elements.")
    pixel_shuffle_ratio: float = Field(
        gt=0, le=1, description="Pixel-shuffle ratio: tokens per tile = patches x ratio^2."
    )
    projector_bias: bool = Field(False, description="The projector's linear has a bias (multi_modal_projector_bias).")
    max_tiles: int = Field(
        16, gt=0, description="Most tiles per image (Llama4ImageProcessor max_patches default 16), a count."
    )

    def extra_groups(self) -> list[ParamGroup]:
        h, grid = self.hidden_size, self.grid
        embed = ParamGroup(
            component=COMPONENT,
            sharded_linear=h * self.num_channels * self.patch_size**2,  # vLLM: ColumnParallelLinear (gather_output)
            other=h + (grid * grid + 1) * h + 2 * 2 * h,
        )
        adapter = ParamGroup(
            component=COMPONENT,
            sharded_linear=self.intermediate_size * self.projector_input_dim + self.projector_output_dim**2,
        )
        projector = ParamGroup(
            component=COMPONENT,
            sharded_linear=self.vision_output_dim * self.text_hidden_size,
            other=self.text_hidden_size if self.projector_bias else 0,
        )
        return [embed, adapter, projector]

    def canvas(self, width: int, height: int) -> tuple[int, int]:
        """(rows, columns) of tiles the processor resizes the image into (transformers Llama4ImageProcessor:
        ``find_supported_resolutions`` lists every rows x columns <= max_tiles, ``get_best_fit`` scales the image
        by min(rows x 336 / h, columns x 336 / w) and takes the smallest scale >= 1, else the largest below 1,
        then the smallest canvas at that scale). 5000 x 400: (1, 13) (1 x 13 to 1 x 16 all scale 0.84; ceil(w / 336) x
        ceil(h / 336) would be 30). The tile counts equalled transformers 5.24.0's get_best_fit on 512 random sizes
        (run once by hand: that module imports torchvision, which the dev environment lacks)."""
        side = self.image_size
        options = [(r, n // r) for n in range(self.max_tiles, 0, -1) for r in range(1, n + 1) if n % r == 0]
        scales = [min(r * side / height, c * side / width) for r, c in options]
        up = [x for x in scales if x >= 1]
        chosen = min(up) if up else max(scales)
        return min((o for o, x in zip(options, scales, strict=True) if x == chosen), key=lambda o: o[0] * o[1])

    def tiles(self, width: int, height: int) -> int:
        """Tiles the ViT runs for one image: the canvas's, plus a global one when there is more than one."""
        rows, cols = self.canvas(width, height)
        return rows * cols + (1 if rows * cols > 1 else 0)

    @property
    def tokens_per_tile(self) -> int:
        """grid^2 x ratio^2: 24^2 x 0.25 = 144."""
        return int(self.grid * self.grid * self.pixel_shuffle_ratio**2)

    def sequences(self, width: int, height: int) -> tuple[int, int]:
        return self.tiles(width, height), self.grid * self.grid + 1

    def patches_per_image(self, width: int, height: int) -> int:
        seqs, seq = self.sequences(width, height)
        return seqs * seq

    def tokens_per_image(self, width: int, height: int) -> int:
        return self.tiles(width, height) * self.tokens_per_tile

    @property
    def max_tokens_per_image(self) -> int:
        return (self.max_tiles + 1) * self.tokens_per_tile

    @property
    def max_patches_per_image(self) -> int:
        return (self.max_tiles + 1) * (self.grid * self.grid + 1)

    def projector_ops(self, shape: StepShape, images: int, width: int, height: int) -> list[Op]:
        tiles = shape.num_seqs
        patches = tiles * self.grid * self.grid
        tokens = images * self.tokens_per_image(width, height)
        return [
            _linear(
                shape,
                "patch_embedding (unfold linear)",
                patches,
                self.hidden_size,
                self.num_channels * self.patch_size**2,
            ),
            _linear(shape, "adapter.fc1", tokens, self.projector_input_dim, self.intermediate_size),
            _linear(shape, "adapter.fc2", tokens, self.projector_output_dim, self.projector_output_dim),
            _linear(shape, "projector.linear_1", tokens, self.text_hidden_size, self.vision_output_dim),
        ]


class SiglipGemma3(VisionEncoder):
    """Gemma-3's SigLIP ViT (no head) and its projector: average-pool to mm_tokens_per_image, RMSNorm, one matmul.

    Params (transformers SiglipVisionModel + Gemma3MultiModalProjector): patch conv h x C p^2 + h, position
    embedding grid^2 x h (split over TP in vLLM: a VocabParallelEmbedding), L layers, post_layernorm 2h;
    mm_soft_emb_norm h and mm_input_projection_weight h x text h (a raw parameter: whole on every rank in
    vLLM). gemma-3-4b-it: 419,816,304.
    Tokens: the image is resized to image_size^2 (896: 64 x 64 = 4,096 patches), pooled to
    ``mm_tokens_per_image`` (256); pan-and-scan crops (off by default) are not modelled.
    """

    kind: Literal["siglip_gemma3"] = "siglip_gemma3"
    mm_tokens_per_image: int = Field(
        gt=0, description="Tokens per image after pooling (Gemma3Config mm_tokens_per_image)."
    )

    def extra_groups(self) -> list[ParamGroup]:
        h, grid = self.hidden_size, self.grid
        embed = ParamGroup(
            component=COMPONENT,
            sharded_linear=grid * grid * h,  # vLLM siglip.py: position_embedding is a VocabParallelEmbedding
            other=h * self.num_channels * self.patch_size**2 + h + 2 * h,  # patch nn.Conv2d, post_layernorm
        )
        projector = ParamGroup(component=COMPONENT, replicated_linear=h * self.text_hidden_size, other=h)
        return [embed, projector]

    def patches_per_image(self, width: int, height: int) -> int:
        return self.grid * self.grid

    def tokens_per_image(self, width: int, height: int) -> int:
        return self.mm_tokens_per_image

    def projector_ops(self, shape: StepShape, images: int, width: int, height: int) -> list[Op]:
        patches, tokens, h = images * self.grid * self.grid, images * self.mm_tokens_per_image, self.hidden_size
        return [
            _linear(shape, "patch_embedding (conv)", patches, h, self.num_channels * self.patch_size**2, sharded=False),
            elementwise(shape, "avg_pool + soft_emb_norm", patches * h, 2.0),
            _linear(shape, "mm_input_projection", tokens, self.text_hidden_size, h, sharded=False),
        ]


class ClipLlava(VisionEncoder):
    """LLaVA's CLIP ViT and its 2-layer GELU MLP projector.

    Params (transformers CLIPVisionModel + LlavaMultiModalProjector): class embedding h, patch conv
    h x C p^2 (no bias), position embedding (grid^2 + 1) x h, pre/post LayerNorm 2h each, L layers;
    projector linear_1 h x text h and linear_2 text h x text h, with biases. llava-1.5-7b: 303,507,456 +
    20,979,712. vLLM builds the tower only up to ``vision_feature_layer`` (-2: 23 of 24 layers) and
    without the post-norm then (``vllm/model_executor/models/llava.py`` ``_get_num_hidden_layers``).
    Tokens: the image is resized to image_size^2; grid^2 patch tokens (576), the class token dropped
    (vision_feature_select_strategy default).
    """

    kind: Literal["clip_llava"] = "clip_llava"
    feature_layer: int = Field(
        -2, description="vision_feature_layer: the hidden state fed to the projector (-2: the second to last)."
    )
    projector_bias: bool = Field(True, description="The projector's linears carry biases (multimodal_projector_bias).")

    @property
    def served_layers(self) -> int:
        """vLLM's _get_layer_index: L + feature_layer + 1 for a negative index, else the index."""
        return self.num_layers + self.feature_layer + 1 if self.feature_layer < 0 else self.feature_layer

    def _embed(self, post_norm: bool) -> ParamGroup:
        h, grid = self.hidden_size, self.grid
        other = h + h * self.num_channels * self.patch_size**2 + (grid * grid + 1) * h + 2 * h
        return ParamGroup(component=COMPONENT, other=other + (2 * h if post_norm else 0))

    def _projector(self) -> ParamGroup:
        t = self.text_hidden_size
        return ParamGroup(
            component=COMPONENT,
            sharded_linear=self.hidden_size * t + t * t,
            other=2 * t if self.projector_bias else 0,
        )

    def extra_groups(self) -> list[ParamGroup]:
        return [self._embed(post_norm=True), self._projector()]

    def served_extra_groups(self) -> list[ParamGroup]:
        return [self._embed(post_norm=self.served_layers == self.num_layers), self._projector()]

    def patches_per_image(self, width: int, height: int) -> int:
        return self.grid * self.grid + 1

    def tokens_per_image(self, width: int, height: int) -> int:
        return self.grid * self.grid

    def projector_ops(self, shape: StepShape, images: int, width: int, height: int) -> list[Op]:
        patches, tokens, t = (
            images * self.patches_per_image(width, height),
            images * self.grid**2,
            self.text_hidden_size,
        )
        return [
            _linear(
                shape,
                "patch_embedding (conv)",
                patches,
                self.hidden_size,
                self.num_channels * self.patch_size**2,
                sharded=False,
            ),
            _linear(shape, "projector.linear_1", tokens, t, self.hidden_size),
            _linear(shape, "projector.linear_2", tokens, t, t),
        ]


#: Qwen2.5-VL preprocessor_config.json pixel bounds (min_pixels 3,136, max_pixels 12,845,056 in
#: Qwen/Qwen2.5-VL-7B-Instruct's file, as quoted with the config in find_string id 57392243494).
QWEN_MIN_PIXELS = 3136
QWEN_MAX_PIXELS = 12_845_056
#: Qwen3-VL preprocessor_config.json pixel bounds (size.shortest_edge 65,536 = 256^2 and size.longest_edge
#: 16,777,216 = 4096^2, areas in pixels, as quoted in find_string ids 62450773827 and 70263102148).
QWEN3_MIN_PIXELS = 65_536
QWEN3_MAX_PIXELS = 16_777_216


class QwenDynamicVision(VisionEncoder):
    """What Qwen2.5-VL's and Qwen3-VL's ViTs share: a 3-D patch conv over the image at its own resolution
    (transformers ``smart_resize``: each side rounded to a multiple of patch x merge, the area brought inside
    [min_pixels, max_pixels]), patches = (H/p)(W/p), and a merge x merge patch merger into the LLM width
    (tokens = patches / merge^2)."""

    out_hidden_size: int = Field(gt=0, description="Merger output width (= the LLM's hidden size), elements.")
    spatial_merge_size: int = Field(gt=0, description="Patches merged per side into one LLM token (2: 2 x 2 = 4).")
    temporal_patch_size: int = Field(gt=0, description="Frames per 3-D patch (2; an image is repeated to fill it).")
    min_pixels: int = Field(QWEN_MIN_PIXELS, gt=0, description="Smallest image area after resizing, pixels.")
    max_pixels: int = Field(QWEN_MAX_PIXELS, gt=0, description="Largest image area after resizing, pixels.")
    dynamic_resolution: ClassVar[bool] = True
    other_modalities: ClassVar[tuple[str, ...]] = ("video",)

    @property
    def merged_width(self) -> int:
        """The merger's input width: merge^2 patches side by side (4 x h)."""
        return self.hidden_size * self.spatial_merge_size**2

    @property
    def patch_weights(self) -> int:
        """The conv3d patch embedding's weight: h x C x t x p^2."""
        return self.hidden_size * self.num_channels * self.temporal_patch_size * self.patch_size**2

    def check_image(self, width: int, height: int) -> None:
        if max(width, height) / min(width, height) > 200:
            raise ScenarioError(
                f"--image-size {width}x{height}: the Qwen-VL processor refuses an aspect ratio above 200 "
                f"({max(width, height) / min(width, height):.0f}).",
                hint="Use an image whose longer side is at most 200 times its shorter side.",
            )

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """(height, width) after transformers' smart_resize (factor = patch x merge: 28, or 32 for Qwen3-VL)."""
        factor = self.patch_size * self.spatial_merge_size
        h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
        if h_bar * w_bar > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h_bar = max(factor, math.floor(height / beta / factor) * factor)
            w_bar = max(factor, math.floor(width / beta / factor) * factor)
        elif h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
        return h_bar, w_bar

    def patches_per_image(self, width: int, height: int) -> int:
        h_bar, w_bar = self.resized(width, height)
        return (h_bar // self.patch_size) * (w_bar // self.patch_size)

    def tokens_per_image(self, width: int, height: int) -> int:
        return self.patches_per_image(width, height) // self.spatial_merge_size**2

    @property
    def max_tokens_per_image(self) -> int:
        """max_pixels / (patch x merge)^2: 12,845,056 / 784 = 16,384 (Qwen2.5-VL)."""
        return self.max_pixels // (self.patch_size * self.spatial_merge_size) ** 2

    @property
    def max_patches_per_image(self) -> int:
        """max_tokens_per_image x merge^2: 65,536 (Qwen2.5-VL)."""
        return self.max_tokens_per_image * self.spatial_merge_size**2

    def merger_ops(self, shape: StepShape, names: tuple[str, str], tokens: int) -> list[Op]:
        """One patch merger over ``tokens`` merged tokens, its two linears named as the checkpoint's modules:
        the first 4h -> 4h, the second 4h -> the LLM width."""
        merged = self.merged_width
        return [
            _linear(shape, names[0], tokens, merged, merged),
            _linear(shape, names[1], tokens, self.out_hidden_size, merged),
        ]


class Qwen25Vision(QwenDynamicVision):
    """Qwen2.5-VL's ViT: 3-D patch conv, RMSNorm, SiLU-gated MLP, window attention with a few full layers,
    and a 2 x 2 patch merger (RMSNorm + 2-layer MLP) into the LLM width.

    Params (transformers Qwen2_5_VisionTransformerPretrainedModel): patch conv h x C x t x p^2 (no bias),
    ``depth`` blocks (qkv 3h^2 + 3h, proj h^2 + h, gate/up/down 3hI + 2I + h, two RMSNorms), merger ln_q h,
    mlp (h m^2)^2 + h m^2 and h m^2 x out + out. Qwen2.5-VL-7B: 676,550,144.
    Tokens (dynamic resolution, ``QwenDynamicVision``): factor 28; Qwen2.5-VL-7B at 1280 x 720: 52 x 92 patches,
    1,196 tokens. Window layers attend within (window_size / patch)^2 = 64 patches (edge windows
    counted full); ``fullatt_block_indexes`` layers attend over the whole image.
    """

    kind: Literal["qwen2_5_vl"] = "qwen2_5_vl"
    window_size: int = Field(gt=0, description="Window side for window attention, pixels (112: 8 x 8 patches).")
    fullatt_block_indexes: tuple[int, ...] = Field(description="Layers with full attention over the image.")
    norm_params_per_h: ClassVar[int] = 1
    gated_mlp: ClassVar[bool] = True

    def extra_groups(self) -> list[ParamGroup]:
        h, merged = self.hidden_size, self.merged_width
        patch = ParamGroup(component=COMPONENT, other=self.patch_weights)
        merger = ParamGroup(
            component=COMPONENT,
            sharded_linear=merged * merged + merged * self.out_hidden_size,
            other=h + merged + self.out_hidden_size,
        )
        return [patch, merger]

    def layer_plan(self) -> list[tuple[str, int, int | None]]:
        full = len(self.fullatt_block_indexes)
        window = (self.window_size // self.patch_size) ** 2
        return [("window-attention layers", self.num_layers - full, window), ("full-attention layers", full, None)]

    def projector_ops(self, shape: StepShape, images: int, width: int, height: int) -> list[Op]:
        patches = images * self.patches_per_image(width, height)
        tokens = patches // self.spatial_merge_size**2
        k = self.num_channels * self.temporal_patch_size * self.patch_size**2
        return [
            _linear(shape, "patch_embed (conv3d)", patches, self.hidden_size, k, sharded=False),
            *self.merger_ops(shape, ("merger.mlp.0", "merger.mlp.2"), tokens),
        ]


class Qwen3Vision(QwenDynamicVision):
    """Qwen3-VL's ViT: 3-D patch conv with a bias, a learned position table bilinearly interpolated to the
    image's grid, LayerNorm blocks with full attention and a GELU MLP, a 2 x 2 patch merger into the LLM width,
    and "deepstack" mergers that project the hidden states of a few blocks into the LLM's first layers.

    Params (transformers 5.24.0 Qwen3VLVisionModel): patch conv h x C x t x p^2 + h; pos_embed
    num_position_embeddings x h; ``depth`` blocks (qkv 3h^2 + 3h, proj h^2 + h, fc1/fc2 2hI + I + h, two
    LayerNorms 4h); merger: LayerNorm over h (2h), fc1 (4h)^2 + 4h, fc2 4h x out + out; one deepstack merger per
    ``deepstack_visual_indexes`` entry, the same linears with its LayerNorm over 4h (8h). Qwen3-VL-8B:
    576,388,336. vLLM (``qwen3_vl.py``) builds qkv/proj, fc1/fc2 and every merger's linears TP-sharded, the
    position table as a plain embedding (whole on every rank).
    Tokens (``QwenDynamicVision``): factor 32, pixels in [65,536, 16,777,216]; 1280 x 720 -> 1280 x 704 ->
    80 x 44 patches -> 880 tokens. Every block attends over the whole image.
    """

    kind: Literal["qwen3_vl"] = "qwen3_vl"
    num_position_embeddings: int = Field(gt=0, description="Rows of the learned position table (48 x 48 = 2,304).")
    deepstack_visual_indexes: tuple[int, ...] = Field(
        (), description="Blocks whose output a deepstack merger projects into the language model."
    )
    min_pixels: int = Field(QWEN3_MIN_PIXELS, gt=0, description="Smallest image area after resizing, pixels.")
    max_pixels: int = Field(QWEN3_MAX_PIXELS, gt=0, description="Largest image area after resizing, pixels.")

    def _merger(self, norm_width: int) -> ParamGroup:
        merged = self.merged_width
        return ParamGroup(
            component=COMPONENT,
            sharded_linear=merged * merged + merged * self.out_hidden_size,
            other=2 * norm_width + merged + self.out_hidden_size,
        )

    def extra_groups(self) -> list[ParamGroup]:
        h = self.hidden_size
        embed = ParamGroup(component=COMPONENT, other=self.patch_weights + h + self.num_position_embeddings * h)
        deepstack = [self._merger(self.merged_width)] * len(self.deepstack_visual_indexes)
        return [embed, self._merger(h), *deepstack]

    def projector_ops(self, shape: StepShape, images: int, width: int, height: int) -> list[Op]:
        patches = images * self.patches_per_image(width, height)
        tokens = patches // self.spatial_merge_size**2
        h = self.hidden_size
        k = self.num_channels * self.temporal_patch_size * self.patch_size**2
        ops = [
            _linear(shape, "patch_embed (conv3d)", patches, h, k, sharded=False),
            # bilinear interpolation of the position table: 4 rows gathered and weighted per patch
            elementwise(
                shape, "pos_embed (bilinear interpolation: 4 rows read, 1 written)", patches * h, 7.0, passes=5.0
            ),
            *self.merger_ops(shape, ("merger.linear_fc1", "merger.linear_fc2"), tokens),
        ]
        for i in self.deepstack_visual_indexes:
            names = (f"deepstack_merger[{i}].linear_fc1", f"deepstack_merger[{i}].linear_fc2")
            ops += self.merger_ops(shape, names, tokens)
        return ops


VisionEncoderSpec = Annotated[
    Llama4Vision | SiglipGemma3 | ClipLlava | Qwen25Vision | Qwen3Vision, Field(discriminator="kind")
]


# --------------------------------------------------------------------------- from config.json


def _get(vision: dict[str, Any], defaults: dict[str, Any], *keys: str) -> Any:
    for source in (vision, defaults):
        for key in keys:
            if source.get(key) is not None:
                return source[key]
    raise KeyError(keys[0])


class EncoderReader:
    """How one wrapper's ``vision_config`` maps to an encoder class: its keys and its transformers defaults."""

    def __init__(
        self,
        cls: type[VisionEncoder],
        defaults: dict[str, Any],
        extra: dict[str, tuple[str, ...]],
        vision_types: tuple[str | None, ...],
    ):
        self.cls, self.defaults, self.extra = cls, defaults, extra
        #: vision_config model_types this class reads (None: the key absent, the wrapper's default tower)
        self.vision_types = vision_types

    def reads(self, raw: dict[str, Any]) -> bool:
        """Whether the config's vision tower is this class's (a llava wrapper may hold Pixtral or SigLIP instead)."""
        vision = raw.get("vision_config")
        return isinstance(vision, dict) and vision.get("model_type") in self.vision_types and "audio_config" not in raw

    def read(self, raw: dict[str, Any], text_hidden: int) -> VisionEncoder:
        vision = raw.get("vision_config") or {}
        d = self.defaults
        common = {
            "hidden_size": _get(vision, d, "hidden_size", "embed_dim"),
            "num_layers": _get(vision, d, "num_hidden_layers", "depth"),
            "num_heads": _get(vision, d, "num_attention_heads", "num_heads"),
            "intermediate_size": _get(vision, d, "intermediate_size"),
            "patch_size": _get(vision, d, "patch_size"),
            "image_size": _get(vision, d, "image_size"),
            "num_channels": _get(vision, d, "num_channels", "in_channels", "in_chans"),
            "text_hidden_size": text_hidden,
        }
        fields = {name: _get({**raw, **vision}, d, *keys) for name, keys in self.extra.items()}
        return self.cls(**common, **fields)


#: transformers 5.24.0 config-class defaults of each kind, for keys a config.json leaves out.
ENCODERS: dict[str, EncoderReader] = {
    "llama4": EncoderReader(
        Llama4Vision,
        {
            "hidden_size": 768,
            "num_hidden_layers": 34,
            "num_attention_heads": 16,
            "intermediate_size": 5632,
            "patch_size": 14,
            "image_size": 448,
            "num_channels": 3,
            "vision_output_dim": 7680,
            "projector_input_dim": 4096,
            "projector_output_dim": 4096,
            "pixel_shuffle_ratio": 0.5,
            "multi_modal_projector_bias": False,
        },
        {
            "vision_output_dim": ("vision_output_dim",),
            "projector_input_dim": ("projector_input_dim",),
            "projector_output_dim": ("projector_output_dim",),
            "pixel_shuffle_ratio": ("pixel_shuffle_ratio",),
            "projector_bias": ("multi_modal_projector_bias",),
        },
        ("llama4_vision_model", None),
    ),
    "gemma3": EncoderReader(
        SiglipGemma3,
        {
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "patch_size": 16,
            "image_size": 224,
            "num_channels": 3,
            "mm_tokens_per_image": 256,
        },
        {"mm_tokens_per_image": ("mm_tokens_per_image",)},
        ("siglip_vision_model", None),
    ),
    "llava": EncoderReader(
        ClipLlava,
        {
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "patch_size": 32,
            "image_size": 224,
            "num_channels": 3,
            "vision_feature_layer": -2,
            "multimodal_projector_bias": True,
        },
        {"feature_layer": ("vision_feature_layer",), "projector_bias": ("multimodal_projector_bias",)},
        ("clip_vision_model", None),  # LlavaConfig's default tower; a Pixtral (pixtral-12b) or SigLIP one is not CLIP
    ),
    "qwen2_5_vl": EncoderReader(
        Qwen25Vision,
        {
            "hidden_size": 3584,
            "depth": 32,
            "num_heads": 16,
            "intermediate_size": 3420,
            "patch_size": 14,
            "image_size": 14,
            "in_channels": 3,
            "out_hidden_size": 3584,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 112,
            "fullatt_block_indexes": (7, 15, 23, 31),
        },
        {
            "out_hidden_size": ("out_hidden_size",),
            "spatial_merge_size": ("spatial_merge_size",),
            "temporal_patch_size": ("temporal_patch_size",),
            "window_size": ("window_size",),
            "fullatt_block_indexes": ("fullatt_block_indexes",),
        },
        ("qwen2_5_vl", "qwen2_5_vl_vision", None),
    ),
    "qwen3_vl": EncoderReader(
        Qwen3Vision,
        {  # transformers 5.24.0 Qwen3VLVisionConfig
            "hidden_size": 1152,
            "depth": 27,
            "num_heads": 16,
            "intermediate_size": 4304,
            "patch_size": 16,
            "image_size": 16,
            "in_channels": 3,
            "out_hidden_size": 3584,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": (8, 16, 24),
        },
        {
            "out_hidden_size": ("out_hidden_size",),
            "spatial_merge_size": ("spatial_merge_size",),
            "temporal_patch_size": ("temporal_patch_size",),
            "num_position_embeddings": ("num_position_embeddings",),
            "deepstack_visual_indexes": ("deepstack_visual_indexes",),
        },
        ("qwen3_vl", "qwen3_vl_vision", None),  # the checkpoints name it qwen3_vl; the config class qwen3_vl_vision
    ),
}
#: Sub-config keys that hold a non-text encoder (their presence makes a config multimodal).
ENCODER_CONFIG_KEYS = ("vision_config", "audio_config")


def unsupported_encoder(raw: dict[str, Any]) -> str | None:
    """The encoder a config carries that ``ENCODERS`` cannot count ('vision_config (pixtral)'), or None."""
    reader = ENCODERS.get(str(raw.get("model_type")))
    if reader is not None and reader.reads(raw):
        return None
    for key in ENCODER_CONFIG_KEYS:
        sub = raw.get(key)
        if isinstance(sub, dict):
            return f"{key} ({sub.get('model_type', 'no model_type')}) of model_type {raw.get('model_type')!r}"
    return None


def encoder_from_config(raw: dict[str, Any], text_hidden: int) -> VisionEncoder | None:
    """The vision encoder of a multimodal config.json, or None (text-only, or a kind not in ``ENCODERS``)."""
    reader = ENCODERS.get(str(raw.get("model_type")))
    if reader is None or not reader.reads(raw):
        return None
    try:
        return reader.read(raw, text_hidden)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"]) or "vision_config"
        raise ConfigError(
            f"vision_config: {key} is out of range or of the wrong type ({first['msg']}, "
            f"got {first.get('input')!r:.60}).",
            hint="Compare the vision_config block with the model's config.json on the Hub.",
        ) from None
    except (TypeError, ValueError, ArithmeticError) as err:
        raise ConfigError(
            f"vision_config has a value of the wrong type or size ({err}).",
            hint="Compare the vision_config block with the model's config.json on the Hub.",
        ) from None
