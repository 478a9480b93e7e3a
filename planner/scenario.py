"""Scenario: the user's choices (card, parallelism, precision, vLLM limits, engine, workload).

Field names follow vLLM's CLI flags (``--tensor-parallel-size`` is ``tp`` here, the rest match:
``max_model_len``, ``gpu_memory_utilization``, ``block_size``, ``max_num_seqs``,
``max_num_batched_tokens``, ``kv_cache_dtype``). ``None`` means "vLLM's default", resolved against
the model and card by ``resolve_defaults``; the resolved values are what the plan reports.
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


class Workload(BaseModel):
    """What the requests look like, for latency and throughput."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_len: int = Field(1024, ge=1, description="Prompt tokens per request.")
    output_len: int = Field(256, ge=1, description="Generated tokens per request.")
    batch_size: int = Field(1, ge=1, description="Requests processed together (static batch) or kept in flight (concurrency).")


class Scenario(BaseModel):
    """One deployment to plan: which card, how split, what precision, which vLLM limits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str = Field("h100-sxm", description="Hardware profile id (python -m planner hardware lists them).")
    num_gpus: int | None = Field(None, ge=1, description="GPUs in the deployment; default tp x pp (one replica).")
    tp: int = Field(1, ge=1, description="Tensor-parallel size (vLLM --tensor-parallel-size).")
    pp: int = Field(1, ge=1, description="Pipeline-parallel size (vLLM --pipeline-parallel-size).")
    weight_dtype: str = Field("auto", description="Weight precision: auto (the checkpoint's), bf16, fp16, fp8, int8, int4, awq, gptq, mxfp4, nvfp4.")
    precision_overrides: dict[str, str] = Field(
        default_factory=dict,
        description="Mixed precision: component (embedding, attention, mlp, experts, mamba, lm_head) -> dtype.",
    )
    kv_cache_dtype: str = Field("auto", description="KV-cache dtype (vLLM --kv-cache-dtype): auto (the model dtype), bf16, fp16, fp8, int8.")
    max_model_len: int | None = Field(None, ge=1, description="Longest request in tokens (prompt + output); default the model's maximum.")
    gpu_memory_utilization: float = Field(
        DEFAULT_GPU_MEMORY_UTILIZATION, gt=0, le=1, description="Fraction of each GPU's total memory vLLM may use."
    )
    block_size: int | None = Field(None, ge=1, description="Tokens per KV-cache block; default 16 (64 for MLA models).")
    max_num_seqs: int | None = Field(None, ge=1, description="Most sequences in one step; default 1024 on >= 70 GiB cards except A100, else 256.")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="Token budget of one step; default 8192 on >= 70 GiB cards except A100, else 2048 (API server)."
    )
    engine: Literal["eager", "cuda-graphs"] = Field("cuda-graphs", description="eager (--enforce-eager) or CUDA graphs (vLLM's default).")
    enable_chunked_prefill: bool = Field(True, description="Split long prompts over steps (vLLM V1 default: on).")
    non_torch_memory_bytes: int | None = Field(
        None, ge=0, description="CUDA context, NCCL and cuBLAS memory per GPU; default an estimate (see memory.py)."
    )
    cuda_graph_memory_bytes: int | None = Field(
        None, ge=0, description="CUDA-graph pool per GPU; default an estimate, 0 with eager."
    )
    workload: Workload = Field(default_factory=Workload, description="Request shape for latency and throughput.")

    @model_validator(mode="after")
    def _check_gpus(self) -> "Scenario":
        if self.num_gpus is not None and self.num_gpus < self.tp * self.pp:
            raise ScenarioError(
                f"--num-gpus {self.num_gpus} is fewer than --tp {self.tp} x --pp {self.pp} = {self.tp * self.pp}.",
                hint=f"Use --num-gpus {self.tp * self.pp} or more, or lower --tp/--pp.",
            )
        return self

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

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
