"""Scenario: the user's choices (card, parallelism, precision, vLLM limits, engine, workload).

Field names follow vLLM's CLI flags (``--tensor-parallel-size`` is ``tp`` here, the rest match:
``max_model_len``, ``gpu_memory_utilization``, ``block_size``, ``max_num_seqs``,
``max_num_batched_tokens``, ``kv_cache_dtype``). ``None`` means "vLLM's default", resolved against
the model and card by ``planner.estimate.resolve.resolve``; the resolved values are what the plan reports.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.errors import ScenarioError
from planner.units import GiB

#: vLLM 0.33.0's default gpu_memory_utilization (vllm/config/cache.py; 0.9 in releases before it).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
#: vLLM's default block size (CacheConfig.DEFAULT_BLOCK_SIZE); MLA backends require 64 (FlashMLA).
DEFAULT_BLOCK_SIZE = 16
MLA_BLOCK_SIZE = 64

# Upper bounds: what a real model or deployment can have, so that a typo (or a fuzzer) asking for
# 10^9 of something is refused with the reason instead of allocating gigabytes. Each is stated in
# its field's description, and so in --help, the app's tooltips and docs/cli.md.

#: Longest context, in tokens: 2^24 = 16,777,216, above the longest any released model has
#: (Llama 4 Scout, 10,485,760 tokens).
MAX_TOKENS = 2**24
#: Largest block: vLLM 0.16's --block-size choices stop at 256 and hybrid (Mamba) models align the
#: attention block to the Mamba page (e.g. 80 for Jamba); 4,096 leaves room for both.
MAX_BLOCK_SIZE = 4096
#: Most sequences in one step or static batch: 2^16 = 65,536, 64 x vLLM's largest default (1,024).
MAX_SEQS = 2**16
#: Largest tensor- or pipeline-parallel size: 1,024, more than any model's attention heads or layers
#: a split needs (TP divides the heads, PP splits the layers).
MAX_PARALLEL = 1024
#: Most GPUs in one deployment: 65,536.
MAX_GPUS = 2**16
#: Largest per-GPU memory figure in bytes: 1 TiB, above any card's memory (288 GB on B300/MI355X).
MAX_GPU_BYTES = 2**40


#: Most images per request: 64 (vLLM's --limit-mm-per-prompt has no upper bound; its default is 999 per
#: modality, but a prompt of more images than this outgrows any context at a few hundred tokens each).
MAX_IMAGES_PER_REQUEST = 64
#: Largest image side, pixels: 16,384 (Qwen2.5-VL's max_pixels 12,845,056 is 3,584^2).
MAX_IMAGE_SIDE = 16_384


def image_size_text(data: object) -> object:
    """A ``model_validator(mode="before")`` body: ``image_size`` written as 'WxH' (a workload file, the app's text
    input) -> (W, H); anything else passes on for the field's own validation. ScenarioError for text that is not
    WIDTHxHEIGHT, or a bare number (YAML reads an unquoted 0x10 as a hexadecimal one)."""
    if not isinstance(data, dict):
        return data
    size = data.get("image_size")
    if isinstance(size, int) and not isinstance(size, bool):
        raise ScenarioError(
            f"image_size {size}: expected WIDTHxHEIGHT in pixels (YAML reads an unquoted 0x... as a number).",
            hint="For example image_size: 896x896, or quote it: image_size: '0x10'.",
        )
    if not isinstance(size, str):
        return data
    return {**data, "image_size": parse_image_size(size)}


def parse_image_size(text: str) -> tuple[int, int]:
    """'896x896' -> (896, 896): an image's width and height in pixels, as a workload file, the app's text input
    and ``--image-size`` write it (the range is RequestShape's to check). ScenarioError for anything else; text
    longer than 16 characters is refused before it is read."""
    width, sep, height = text.lower().partition("x")
    if len(text) > 16 or not sep or not width.strip().isdigit() or not height.strip().isdigit():
        raise ScenarioError(
            f"image_size {text[:40]!r}: expected WIDTHxHEIGHT in pixels.", hint="For example image_size: 896x896."
        )
    return int(width), int(height)


class RequestShape(BaseModel):
    """What the requests look like, for latency and throughput: prompt and output lengths, and how many run together.

    The simulator's traffic over time (arrivals, length distributions) is ``planner.serve.workload.Workload``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_len: int = Field(1024, ge=1, le=MAX_TOKENS, description=f"Prompt tokens per request, 1 to {MAX_TOKENS:,}.")
    output_len: int = Field(256, ge=1, le=MAX_TOKENS, description=f"Generated tokens per request, 1 to {MAX_TOKENS:,}.")
    batch_size: int = Field(
        1,
        ge=1,
        le=MAX_SEQS,
        description=f"Requests processed together (static batch) or kept in flight (concurrency); 1 to {MAX_SEQS:,}.",
    )
    images_per_request: int = Field(
        0,
        ge=0,
        le=MAX_IMAGES_PER_REQUEST,
        exclude_if=lambda v: v == 0,
        description=f"Images each request carries, 0 to {MAX_IMAGES_PER_REQUEST}: their tokens join the prompt, the "
        "vision encoder runs in the prefill and its weights and cache count in memory. 0: text only, as vLLM with "
        "--limit-mm-per-prompt '{\"image\": 0}' (which does not load the encoder).",
    )
    image_size: tuple[int, int] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description=f"Width and height of each image in pixels, 1 to {MAX_IMAGE_SIDE:,} each (--image-size WxH); "
        "default the encoder's native size (required for Qwen2.5-VL, whose tokens follow the image's size).",
    )

    @model_validator(mode="before")
    @classmethod
    def _image_size_text(cls, data: object) -> object:
        """``image_size`` as 'WxH' (the app's text input, a scenario file) -> (W, H)."""
        return image_size_text(data)

    @model_validator(mode="after")
    def _check_images(self) -> RequestShape:
        if self.image_size is not None and not all(1 <= side <= MAX_IMAGE_SIDE for side in self.image_size):
            w, h = self.image_size
            raise ScenarioError(
                f"--image-size {w}x{h}: each side must be 1 to {MAX_IMAGE_SIDE:,} pixels.",
                hint="Give the images' width and height in pixels, e.g. --image-size 896x896.",
            )
        if self.image_size is not None and self.images_per_request == 0:
            raise ScenarioError(
                "--image-size without --images-per-request: the requests carry no images.",
                hint="Add --images-per-request N (N >= 1), or drop --image-size.",
            )
        return self


#: Most speculative tokens per step: 32. vLLM sets no upper bound (``SpeculativeConfig.num_speculative_tokens``
#: is only ``> 0``); published EAGLE-3 runs stop at 8 and acceptance beyond ~10 positions is negligible.
MAX_SPECULATIVE_TOKENS = 32


class SpeculativeDecoding(BaseModel):
    """Speculative decoding (vLLM ``--speculative-config``): who drafts, how far, how often it is right."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["ngram", "draft", "eagle", "eagle3", "mtp"] = Field(
        description="Who proposes the draft tokens: ngram (prompt lookup on the host), draft (a smaller model, "
        "--draft-model), eagle / eagle3 (an EAGLE head), mtp (the model's multi-token-prediction layer)."
    )
    num_speculative_tokens: int = Field(
        ge=1,
        le=MAX_SPECULATIVE_TOKENS,
        description=f"Draft tokens proposed and verified per step, k: 1 to {MAX_SPECULATIVE_TOKENS}.",
    )
    acceptance_rate: float = Field(
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Probability that each draft token is accepted, given the ones before it were (0 <= a < 1); "
        "vLLM's mean acceptance length is (1 - a^(k+1)) / (1 - a).",
    )
    draft_model: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="The drafter's checkpoint (Hub repo id, config.json path or catalog name): the draft model "
        "(method draft, required; its config sizes the draft's cost) or the EAGLE head (eagle / eagle3: passed to "
        "vLLM; the head is costed as one of the target's layers).",
    )

    @model_validator(mode="after")
    def _draft_model_matches_method(self) -> SpeculativeDecoding:
        if self.method == "draft" and self.draft_model is None:
            raise ScenarioError(
                "--speculative-method draft needs --draft-model MODEL (the model that drafts).",
                hint="Name a smaller model of the same tokenizer, e.g. --draft-model "
                "meta-llama/Llama-3.2-1B, or pick --speculative-method eagle3 / mtp / ngram.",
            )
        if self.method in ("ngram", "mtp") and self.draft_model is not None:
            raise ScenarioError(
                f"--draft-model names a drafter, and --speculative-method {self.method} has none "
                "(n-gram looks up the prompt; MTP uses the model's own layer).",
                hint="Drop --draft-model, or use --speculative-method draft / eagle / eagle3.",
            )
        return self


#: vLLM's --max-lora-rank choices (vllm/config/lora.py ``MaxLoRARanks``, 0.33.0; the argument parser refuses others).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: Most adapter slots or CPU-cached adapters: 1,024 (vLLM sets no upper bound; ``max_loras`` is only >= 1).
MAX_LORAS = 1024


class LoRAAdapter(BaseModel):
    """What a PEFT ``adapter_config.json`` says about one adapter (``planner.estimate.lora.read_adapter_config``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    r: int = Field(ge=1, le=max(LORA_RANKS), description="The adapter's rank r (its largest over rank_pattern).")
    lora_alpha: float = Field(allow_inf_nan=False, description="Scaling numerator: the update is (lora_alpha / r) B A.")
    target_modules: tuple[str, ...] = Field(
        description="Modules the adapter changes (PEFT names: q_proj, down_proj ...)."
    )


class LoRA(BaseModel):
    """Multi-LoRA serving (vLLM ``--enable-lora``): adapter slots on the GPU, their rank, the host cache."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_loras: int = Field(
        1, ge=1, le=MAX_LORAS, description=f"Adapters in one batch (vLLM --max-loras), 1 to {MAX_LORAS:,}; default 1."
    )
    max_lora_rank: int = Field(
        16,
        description="Largest adapter rank served (vLLM --max-lora-rank), one of "
        f"{', '.join(map(str, LORA_RANKS))}; default 16. Every slot is allocated at this rank.",
    )
    max_cpu_loras: int | None = Field(
        None,
        ge=1,
        le=MAX_LORAS,
        description="Adapters cached in host memory (vLLM --max-cpu-loras), >= --max-loras; default --max-loras. "
        "Host memory only: it takes no GPU memory.",
    )
    lora_dtype: Literal["auto", "float16", "bfloat16"] = Field(
        "auto", description="Adapter dtype (vLLM --lora-dtype): auto (the model dtype), float16, bfloat16."
    )
    adapter: LoRAAdapter | None = Field(
        None, description="The adapter's adapter_config.json (--lora-config), checked against --max-lora-rank."
    )

    @model_validator(mode="after")
    def _check(self) -> LoRA:
        if self.max_lora_rank not in LORA_RANKS:
            raise ScenarioError(
                f"--max-lora-rank {self.max_lora_rank} is not one of vLLM's choices.",
                hint=f"Use one of {', '.join(map(str, LORA_RANKS))} (vllm/config/lora.py MaxLoRARanks).",
            )
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ScenarioError(
                f"--max-cpu-loras {self.max_cpu_loras} is fewer than --max-loras {self.max_loras} "
                f"(vLLM: max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras})).",
                hint=f"Use --max-cpu-loras {self.max_loras} or more, or leave it out (default --max-loras).",
            )
        if self.adapter is not None and self.adapter.r > self.max_lora_rank:
            allowed = [r for r in LORA_RANKS if r >= self.adapter.r]
            raise ScenarioError(
                f"--lora-config: the adapter's rank r = {self.adapter.r} exceeds --max-lora-rank "
                f"{self.max_lora_rank} (vLLM: LoRA rank {self.adapter.r} is greater than max_lora_rank "
                f"{self.max_lora_rank}).",
                hint=f"Use --max-lora-rank {allowed[0]} or more.",
            )
        return self

    @property
    def cpu_loras(self) -> int:
        """Adapters the host cache holds: --max-cpu-loras, else --max-loras (vLLM's default)."""
        return self.max_cpu_loras or self.max_loras


class Scenario(BaseModel):
    """One deployment to plan: which card, how split, what precision, which vLLM limits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str = Field("h100-sxm", description="Hardware profile id (python -m planner hardware lists them).")
    num_gpus: int | None = Field(
        None,
        ge=1,
        le=MAX_GPUS,
        description=f"GPUs in the deployment, at most {MAX_GPUS:,}; default tp x pp (one replica).",
    )
    tp: int = Field(
        1,
        ge=1,
        le=MAX_PARALLEL,
        description=f"Tensor-parallel size (vLLM --tensor-parallel-size), 1 to {MAX_PARALLEL:,}.",
    )
    pp: int = Field(
        1,
        ge=1,
        le=MAX_PARALLEL,
        description=f"Pipeline-parallel size (vLLM --pipeline-parallel-size), 1 to {MAX_PARALLEL:,}.",
    )
    num_nodes: int | None = Field(
        None,
        ge=1,
        le=MAX_GPUS,
        exclude_if=lambda v: v is None,
        description="Nodes (servers) one replica's tp x pp GPUs span; vLLM has no such flag (it is the Ray "
        "cluster's or the LeaderWorkerSet's size), each running an equal share. Default: the fewest that hold tp x pp "
        "without cutting a TP group across nodes. A count.",
    )
    enable_expert_parallel: bool = Field(
        False,
        exclude_if=lambda v: not v,
        description="vLLM --enable-expert-parallel: the routed experts are split whole over tp x data_parallel_size "
        "ranks (EP size, FusedMoEParallelConfig.make) instead of each expert over the TP ranks; MoE models only.",
    )
    data_parallel_size: int = Field(
        1,
        ge=1,
        le=MAX_PARALLEL,
        exclude_if=lambda v: v == 1,
        description="vLLM --data-parallel-size: attention data parallelism, one engine (scheduler, KV cache, its own "
        "batch) per DP rank, each of tp x pp GPUs, the MoE layers shared over all of them (needs "
        f"--enable-expert-parallel); 1 to {MAX_PARALLEL:,}. A count.",
    )
    all2all_backend: Literal["allgather_reducescatter", "deepep_low_latency", "deepep_high_throughput"] = Field(
        "allgather_reducescatter",
        exclude_if=lambda v: v == "allgather_reducescatter",
        description="vLLM --all2all-backend, the expert-parallel dispatch/combine with data_parallel_size > 1: "
        "allgather_reducescatter (vLLM 0.33's default: all-gather the ranks' tokens, reduce-scatter the outputs, "
        "bf16) or DeepEP's low-latency / high-throughput kernels (fp8 dispatch, bf16 combine).",
    )
    expert_load_imbalance: float = Field(
        1.3,
        ge=1.0,
        le=8.0,
        allow_inf_nan=False,
        exclude_if=lambda v: v == 1.3,
        description="Planner parameter, not a vLLM flag: routed (token, expert) pairs on the busiest EP rank over the "
        "mean, with --enable-expert-parallel (every MoE layer waits for that rank). Default 1.3, within the 1.2-1.8 "
        "straggler factor reported for real workloads without EPLB (impala-blog.pages.dev/widgets/eplb); 1.0 for "
        "perfectly balanced routing. A ratio, 1 to 8.",
    )
    weight_dtype: str = Field(
        "auto",
        description="Weight precision: auto (the checkpoint's), bf16, fp16, fp8, int8, int4, awq, gptq, mxfp4, nvfp4.",
    )
    precision_overrides: dict[str, str] = Field(
        default_factory=dict,
        description="Mixed precision: component (embedding, attention, mlp, experts, mamba, lm_head) -> dtype.",
    )
    kv_cache_dtype: str = Field(
        "auto", description="KV-cache dtype (vLLM --kv-cache-dtype): auto (the model dtype), bf16, fp16, fp8, int8."
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description=f"Longest request in tokens (prompt + output), at most {MAX_TOKENS:,} (2^24, above any released "
        "model's context); default the model's maximum.",
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Fraction of each GPU's total memory the engine may use (> 0 and <= 1): vLLM "
        f"--gpu-memory-utilization, SGLang --mem-fraction-static (weights + KV cache); default the engine's: vLLM "
        f"{DEFAULT_GPU_MEMORY_UTILIZATION} (0.9 before 0.33.0), SGLang's by version, card and TP size.",
    )
    block_size: int | None = Field(
        None,
        ge=1,
        le=MAX_BLOCK_SIZE,
        description=f"Tokens per KV-cache block, 1 to {MAX_BLOCK_SIZE:,} (vLLM's choices are 1 to 256; hybrid models "
        "align it to the Mamba page); default 16 (64 for MLA models).",
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        le=MAX_SEQS,
        description=f"Most sequences in one step, 1 to {MAX_SEQS:,}; default the engine's: vLLM 1024 on >= 70 GiB "
        "cards except A100, else 256; SGLang the request slots its KV pool sizes (2,048 to 4,096); TensorRT-LLM 2048.",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description=f"Token budget of one step, 1 to {MAX_TOKENS:,}; default the engine's: vLLM 8192 on >= 70 GiB "
        "cards except A100, else 2048 (API server); SGLang its prefill chunk by card; TensorRT-LLM 8192.",
    )
    engine: Literal["eager", "cuda-graphs"] = Field(
        "cuda-graphs", description="eager (--enforce-eager) or CUDA graphs (vLLM's default)."
    )
    disable_custom_all_reduce: bool = Field(
        False,
        exclude_if=lambda v: not v,
        description="Every tensor-parallel all-reduce through NCCL (vLLM --disable-custom-all-reduce); default: the "
        "engine version's own choice.",
    )
    enable_chunked_prefill: bool | None = Field(
        None,
        description="Split long prompts over steps (vLLM --enable-chunked-prefill); None: the engine's default at its "
        "version (vLLM V1 and SGLang on, TensorRT-LLM off, vLLM V0 off but above 32K tokens of context).",
    )
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "fcfs",
        description="Waiting-queue order (vLLM --scheduling-policy): fcfs by arrival, or priority by each "
        "request's priority (lower first), then arrival; the simulator takes priorities from request classes.",
    )
    engine_version: str = Field(
        "vllm@0.33.0",
        max_length=64,
        description="Serving engine and version whose profile sizes the memory, sets the scheduler's defaults and "
        "times each step (ENGINE@VERSION: vllm@0.15.1, sglang@0.5.4, trtllm@1.2, or a profile id from "
        "planner/engines/); default the version the exports target.",
    )
    non_torch_memory_bytes: int | None = Field(
        None,
        ge=0,
        le=MAX_GPU_BYTES,
        description="CUDA context, NCCL and cuBLAS memory per GPU, 0 to 1 TiB; default an estimate (see memory.py).",
    )
    cuda_graph_memory_bytes: int | None = Field(
        None,
        ge=0,
        le=MAX_GPU_BYTES,
        description="CUDA-graph pool per GPU, 0 to 1 TiB; default an estimate, 0 with eager.",
    )
    workload: RequestShape = Field(
        default_factory=RequestShape, description="Request shape for latency and throughput."
    )
    speculative: SpeculativeDecoding | None = Field(
        None, description="Speculative decoding (vLLM --speculative-config); None: off, one token per decode step."
    )
    lora: LoRA | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Multi-LoRA serving (vLLM --enable-lora); None: off.",
    )

    @model_validator(mode="after")
    def _engine_known(self) -> Scenario:
        from planner.engine import resolve_engine  # the profiles are data files beside the code

        resolve_engine(self.engine_version)  # raises EngineError naming the known engines and ranges
        return self

    @model_validator(mode="after")
    def _check_gpus(self) -> Scenario:
        if self.num_gpus is not None and self.num_gpus < self.gpus_per_replica:
            dp = f" x --data-parallel-size {self.data_parallel_size}" if self.data_parallel_size > 1 else ""
            raise ScenarioError(
                f"--num-gpus {self.num_gpus} is fewer than --tp {self.tp} x --pp {self.pp}{dp} = "
                f"{self.gpus_per_replica}.",
                hint=f"Use --num-gpus {self.gpus_per_replica} or more, or lower "
                f"--tp/--pp{'/--data-parallel-size' if dp else ''}.",
            )
        return self

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one deployment unit: tp x pp per engine, x data_parallel_size engines (vLLM's DP ranks)."""
        return self.tp * self.pp * self.data_parallel_size

    @property
    def replicas(self) -> int:
        return max(1, (self.num_gpus or self.gpus_per_replica) // self.gpus_per_replica)

    @property
    def total_gpus(self) -> int:
        return self.num_gpus or self.gpus_per_replica


def default_batch_limits(memory_bytes: int, card_name: str) -> tuple[int, int]:
    """vLLM's API-server defaults (EngineArgs.get_batch_defaults): (max_num_batched_tokens, max_num_seqs).

    8192 tokens / 1024 sequences on cards with >= 70 GiB that are not A100 (H100, H200, MI300X,
    B200), otherwise 2048 / 256.
    """
    if memory_bytes >= 70 * GiB and "a100" not in card_name.lower():
        return 8192, 1024
    return 2048, 256
