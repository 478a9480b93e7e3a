"""Export: a plan as deployable configs, one tuned for latency and one for throughput.

For each serving profile the same scenario is written five ways, each carrying the planner's
expected metrics as leading ``#`` comments (every figure labelled bound / estimate /
calibrated): a ``vllm serve --config`` YAML, the matching ``vllm serve`` command line, SGLang
launch arguments, a Kubernetes manifest, and the ``vllm bench serve`` command that measures
the deployment (its JSON carries the predictions as ``--metadata`` so a later import can score
them).

The two profiles and how their limits are chosen live in ``planner.estimate.operating_points``
(``latency_profile``, ``throughput_profile``); this module writes them out.
A deployment needing more GPUs than one server holds (``host_gpus``) becomes multi-node: vLLM on Ray
(``distributed-executor-backend: ray``), tensor parallel within a node and pipeline parallel
across nodes, as a LeaderWorkerSet. Data parallelism over nodes with whole DP ranks on each runs without Ray,
as vLLM's multi-node DP launch: node 0 serves the API with ``--data-parallel-size-local`` ranks, every other node
runs ``--headless`` from ``--data-parallel-start-rank``, all naming node 0's ``--data-parallel-address`` (the
LeaderWorkerSet leader's $(LWS_LEADER_ADDRESS)). Every config names the Hugging Face token only as a
Kubernetes Secret or an environment variable, never its value. YAML is written with
``yaml.safe_dump``.

What the engines accept was checked with their own parsers (``tools/check_exports.py`` runs each
file through vLLM 0.33.0's ``vllm serve`` parser and ``EngineArgs.create_engine_config``, SGLang
0.5.23's ``ServerArgs``, kubernetes-validate 1.37 strict and the LeaderWorkerSet schema;
``tests/test_export_engines.py``). A combination an engine refuses is refused here first, with
the engine's reason (``check_engine_accepts``).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NamedTuple, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field

import planner
from planner.efficiency import Efficiency
from planner.errors import ScenarioError
from planner.estimate import placement
from planner.estimate.memory import MemoryPlan, plan_memory
from planner.estimate.operating_points import PROFILES, Profile, ServingProfile, latency_profile, throughput_profile
from planner.estimate.resolve import Resolved
from planner.estimate.speculative import vllm_speculative_config
from planner.hardware import HardwareProfile
from planner.model.quantization import canonical_dtype
from planner.model.sources import LoadedConfig
from planner.model.spec import ModelSpec
from planner.scenario import DEFAULT_GPU_MEMORY_UTILIZATION, Scenario
from planner.units import cdiv, fmt_seconds

Target = Literal["vllm-yaml", "vllm-cmd", "sglang", "k8s", "bench"]
TARGETS: tuple[str, ...] = get_args(Target)

#: vLLM release whose semantics the memory plan follows (planner.scenario); the default image tag.
VLLM_VERSION = "0.33.0"
SGLANG_VERSION = "0.5.23"
#: vLLM's published serving images per accelerator vendor (lower case), tagged with the release:
#: vllm/vllm-openai (NVIDIA, docs/deployment/docker.md), vllm/vllm-openai-rocm (AMD ROCm, Docker Hub),
#: and the x86 CPU release image of docs/getting_started/installation/cpu.x86.inc.md. Intel Gaudi
#: has none (vLLM runs there through the vllm-gaudi plugin): the user passes an image.
VLLM_IMAGES = {
    "nvidia": f"vllm/vllm-openai:v{VLLM_VERSION}",
    "amd": f"vllm/vllm-openai-rocm:v{VLLM_VERSION}",
    "cpu": f"public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v{VLLM_VERSION}",
}
DEFAULT_IMAGE = VLLM_IMAGES["nvidia"]
VLLM_PORT = 8000
SGLANG_PORT = 30000
RAY_PORT = 6379
SGLANG_DIST_PORT = 50000
SGLANG_BOOTSTRAP_PORT = 8998  # sglang 0.5.23 fields/disagg.py: disaggregation_bootstrap_port's default
#: The data-parallel RPC port every node of a multi-node DP deployment names (vLLM docs
#: serving/data_parallel_deployment, "Multi-node": ``--data-parallel-rpc-port 13345``; vllm 0.33.0's help: "All
#: nodes must use the same port").
DP_RPC_PORT = 13345
HF_SECRET_NAME = "hf-token"
HF_SECRET_KEY = "token"

#: The vLLM CLI flags this module writes, long form without the leading "--". A ``vllm serve
#: --config`` YAML takes exactly these names (docs/configuration/serve_args.md: "The argument names
#: must be the long form"). Checked against vllm-project/vllm vllm/engine/arg_utils.py,
#: EngineArgs.add_cli_args, at commit 99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b ("host"/"port": the
#: frontend flags of the serve_args.md config example). A YAML boolean true becomes "--flag" and
#: false "--no-flag" (vllm/utils/argparse_utils.py, FlexibleArgumentParser.load_config_file).
VLLM_FLAGS: tuple[str, ...] = (
    "model",
    "revision",
    "host",
    "port",
    "dtype",
    "quantization",
    "tensor-parallel-size",
    "pipeline-parallel-size",
    "distributed-executor-backend",
    "max-model-len",
    "gpu-memory-utilization",
    "kv-cache-dtype",
    "block-size",
    "max-num-seqs",
    "max-num-batched-tokens",
    "enable-chunked-prefill",
    "enable-prefix-caching",
    "enforce-eager",
    "disable-custom-all-reduce",  # ParallelConfig.disable_custom_all_reduce
    "speculative-config",
    "kv-transfer-config",  # KVTransferConfig: kv_connector, kv_role (docs: features/nixl_connector_usage)
    "scheduling-policy",  # SchedulerConfig.policy: fcfs | priority
    "limit-mm-per-prompt",  # MultiModalConfig.limit_per_prompt: {"image": N}; all 0 skips loading the encoder
    # LoRA: vllm 0.33.0's wheel, vllm/engine/arg_utils.py EngineArgs.add_cli_args (the "LoRAConfig" group)
    "enable-lora",
    "max-loras",
    "max-lora-rank",
    "max-cpu-loras",
    "lora-dtype",
    # Expert / attention data parallelism: vllm 0.33.0's wheel, vllm/engine/arg_utils.py EngineArgs.add_cli_args
    # (ParallelConfig group: --data-parallel-size/-dp, --enable-expert-parallel, --all2all-backend)
    "data-parallel-size",
    # Multi-node DP, the same group (vllm 0.33.0 arg_utils.py: --data-parallel-size-local/-dpl,
    # --data-parallel-start-rank/-dpr, --data-parallel-address/-dpa, --data-parallel-rpc-port/-dpp) and the
    # frontend's --headless (vllm/entrypoints/common/cli_args.py): node 0 serves the API, the others only engines.
    "data-parallel-size-local",
    "data-parallel-start-rank",
    "data-parallel-address",
    "data-parallel-rpc-port",
    "headless",
    "enable-expert-parallel",
    "all2all-backend",
)
VLLM_FLAG_SOURCE = (
    "vllm-project/vllm vllm/engine/arg_utils.py (EngineArgs.add_cli_args) @ 99d7eb5d6a51; "
    "config-file format: docs/configuration/serve_args.md"
)

#: vLLM 0.33.0's --kv-cache-dtype values (vllm/config/cache.py, CacheDType; CacheConfig refuses any
#: other: "Invalid kv_cache_dtype: 'int8'"), and the planner's KV dtypes in vLLM's spelling. A planner
#: KV dtype with no vLLM spelling (int8) is refused by ``check_engine_accepts``.
VLLM_KV_CACHE_DTYPES: tuple[str, ...] = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "octave_k3v4",
    "octave_k3v3",
    "octave_k3v3_compact",
    "ultraquant_4bit",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)
_VLLM_KV_DTYPE = {"fp8": "fp8", "bf16": "bfloat16", "fp16": "float16"}

#: SGLang ``sglang serve`` flags this module writes, checked against the sglang 0.5.23 wheel:
#: sglang/srt/arg_groups/fields/*.py (--tp-size and --pp-size are the aliases of --tensor-parallel-size
#: and --pipeline-parallel-size; --chunked-prefill-size -1 disables chunking; --disable-cuda-graph is
#: deprecated there for --cuda-graph-backend-{decode,prefill} disabled), and sglang/launch_server.py,
#: whose ``python -m sglang.launch_server`` warns that ``sglang serve`` is the recommended entrypoint.
SGLANG_FLAGS: tuple[str, ...] = (
    "model-path",
    "revision",
    "host",
    "port",
    "dtype",
    "quantization",
    "kv-cache-dtype",
    "tp-size",
    "pp-size",
    "context-length",
    "mem-fraction-static",
    "max-running-requests",
    "chunked-prefill-size",
    "page-size",
    "cuda-graph-backend-decode",
    "cuda-graph-backend-prefill",
    "disable-custom-all-reduce",  # sglang/srt/arg_groups/fields: disable_custom_all_reduce (store_true)
    "nnodes",
    "node-rank",
    "dist-init-addr",
    # sglang/srt/arg_groups/fields/parallel.py: ep_size (--ep-size), attn_dp_size (--attn-dp-size, the spelling
    # that replaces the deprecated --dp-size N --enable-dp-attention: parallel_hook.handle_deprecated_dp_attention)
    "ep-size",
    "attn-dp-size",
    # PD disaggregation: sglang/srt/arg_groups/fields/disagg.py (disaggregation_mode null|prefill|decode,
    # disaggregation_transfer_backend in arg_groups/choices.py DISAGG_TRANSFER_BACKEND_CHOICES: mooncake, nixl,
    # ascend, fake, mori, mooncake_tcp; disaggregation_bootstrap_port, default 8998, on the prefill server)
    "disaggregation-mode",
    "disaggregation-transfer-backend",
    "disaggregation-bootstrap-port",
)
SGLANG_FLAG_SOURCE = f"sglang {SGLANG_VERSION} (sglang/srt/arg_groups/fields, sglang serve)"
SGLANG_COMMAND = ("sglang", "serve")

#: ``vllm bench serve`` flags used: vllm-project/vllm vllm/benchmarks/serve.py add_cli_args at commit
#: def9ce85ba1079af970a58ed3d42dd861ae35d58, and the dataset flags of vllm/benchmarks/datasets.py
#: add_dataset_parser (--dataset-name random, --num-prompts, --random-input-len, --random-output-len).
BENCH_FLAG_SOURCE = "vllm-project/vllm vllm/benchmarks/serve.py (add_cli_args) @ def9ce85ba10 and datasets.py"

BENCH_MIN_PROMPTS = 200
BENCH_ROUNDS = 5
"""The bench sends BENCH_ROUNDS x max-num-seqs prompts (at least BENCH_MIN_PROMPTS) so steady state dominates."""
SHM_GIB = 16
SHM_SIZE = f"{SHM_GIB}Gi"
HOST_OVERHEAD_GIB = 8
"""Host memory of vLLM's own processes (API server, engine core, workers) besides the weights."""
MODEL_MOUNT_PATH = "/models/served"
"""Where the Kubernetes manifest mounts a local model's folder (from a PersistentVolumeClaim)."""
RAY_JOIN_TRIES = 60
RAY_RETRY_SECONDS = 10
"""A Ray worker retries joining the head this many times, this many seconds apart (10 min), then fails
the pod (the LeaderWorkerSet then recreates the group); the head waits as long for its workers."""

_VLLM_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: SGLang 0.5.23's --kv-cache-dtype choices (auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4,
#: fp4_mx_block16): the planner's KV dtypes it has. fp16 and int8 it has not (a note says so).
_SGLANG_KV_DTYPE = {"fp8": "fp8_e4m3", "bf16": "bfloat16"}
#: --weight-dtype values an engine can apply to an unquantized checkpoint at load time.
_ONLINE_QUANTIZATION = {"fp8": "fp8", "nf4": "bitsandbytes"}
_GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "intel": "habana.ai/gaudi"}


class Deployment(BaseModel):
    """Where and how the replicas run: what every export target shares."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="What the engine loads: Hub repo id or local folder.")
    model_name: str = Field(description="The model as the planner named it.")
    revision: str | None = Field(description="Hub revision to serve, if pinned.")
    gpu_id: str = Field(description="Hardware profile id.")
    gpu_name: str = Field(description="Card name.")
    tp: int = Field(description="Tensor-parallel size.")
    pp: int = Field(description="Pipeline-parallel size.")
    gpus_per_replica: int = Field(description="tp x pp.")
    replicas: int = Field(description="Engine replicas (num_gpus / (tp x pp)).")
    nodes_per_replica: int = Field(
        description="Nodes one replica spans (planner.estimate.placement: --num-nodes, else the fewest servers that "
        "hold tp x pp in equal pods without cutting a TP group)."
    )
    gpus_per_pod: int = Field(description="Accelerators each pod requests.")
    multi_node: bool = Field(description="True when a replica spans nodes (vLLM on Ray, LeaderWorkerSet).")
    gpu_resource: str | None = Field(
        description="Kubernetes extended resource of the card (nvidia.com/gpu ...); None for CPU."
    )
    image: str = Field(description="Container image of the engine (vLLM's image for the card's vendor unless given).")
    local_model_dir: str | None = Field(
        None,
        description="The folder on the planner's machine the model was read from; None for a Hub model. The "
        "Kubernetes manifest mounts it from a PersistentVolumeClaim at MODEL_MOUNT_PATH instead.",
    )
    cpu_request: int = Field(description="CPU cores each pod requests (Kubernetes resources.requests.cpu).")
    memory_request_gib: int = Field(
        description="Host memory each pod requests, GiB (Kubernetes resources.requests.memory)."
    )
    app_name: str = Field(description="Base name of the Kubernetes objects (DNS-1035 label).")
    data_parallel_size_local: int | None = Field(
        None,
        exclude_if=lambda v: v is None,  # a one-node or Ray deployment's JSON stays what it was
        description="DP ranks (engines) per node when data parallelism spans nodes (vLLM's multi-node DP: node 0 "
        "serves the API, the others run --headless from --data-parallel-start-rank); None otherwise.",
    )
    disaggregation_mode: Literal["prefill", "decode"] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The pool of a disaggregated deployment (pd_bundle): SGLang's --disaggregation-mode; None: "
        "an aggregated deployment.",
    )
    disaggregation_transfer_backend: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="SGLang's --disaggregation-transfer-backend of a disaggregated pool (SGLANG_PD_BACKENDS).",
    )
    kv_transfer_config: dict[str, str] | None = Field(
        None,
        exclude_if=lambda v: v is None,  # an aggregated deployment's JSON stays what it was
        description="vLLM --kv-transfer-config of a disaggregated prefill or decode pool (pd_bundle); None: "
        "an aggregated deployment.",
    )


class Artefact(BaseModel):
    """One exported file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: Profile = Field(description="latency or throughput.")
    target: Target = Field(description="vllm-yaml, vllm-cmd, sglang, k8s or bench.")
    filename: str = Field(description="Suggested file name.")
    description: str = Field(description="What the file is and how to use it.")
    text: str = Field(description="The file's content.")


class ExportBundle(BaseModel):
    """Everything the export produces for one scenario: both profiles, and each target's file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment: Deployment = Field(description="Model, card, parallelism, replicas and nodes.")
    profiles: list[ServingProfile] = Field(description="The latency and throughput operating points.")
    artefacts: list[Artefact] = Field(description="One file per (profile, target).")
    warnings: list[str] = Field(description="What the configs cannot express or the user should check.")
    vllm_flag_source: str = Field(VLLM_FLAG_SOURCE, description="Where the vLLM flag names were checked.")
    sglang_flag_source: str = Field(SGLANG_FLAG_SOURCE, description="Where the SGLang flag names were checked.")

    def artefact(self, profile: str, target: str) -> Artefact:
        for a in self.artefacts:
            if a.profile == profile and a.target == target:
                return a
        raise KeyError((profile, target))

    def profile(self, name: str) -> ServingProfile:
        for p in self.profiles:
            if p.profile == name:
                return p
        raise KeyError(name)


# ----------------------------------------------------------------------------- deployment


def _slug(text: str, limit: int = 40) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return slug or "model"


def _served_model(spec: ModelSpec, loaded: LoadedConfig | None) -> tuple[str, list[str]]:
    """What `vllm serve` should load, and any caveat about it."""
    if loaded is None:
        return spec.name, []
    if loaded.origin == "file":
        folder = str(Path(loaded.source).parent)
        return folder, [
            f"the model was read from a local file; the vLLM and SGLang commands serve the folder {folder}, "
            "which must hold the weights and tokenizer next to config.json (or replace it with the Hub repo "
            f"id). The Kubernetes manifest mounts it read-only at {MODEL_MOUNT_PATH} from a "
            "PersistentVolumeClaim it names: copy the folder into that volume first."
        ]
    if loaded.origin == "upload":
        return spec.name, [
            f"the config was uploaded as '{spec.name}'; replace the model in the configs with the Hub "
            "repo id or the folder holding the weights."
        ]
    return loaded.name, []


def engine_image(hw: HardwareProfile, image: str | None) -> str:
    """The container image: the one given, else vLLM's published image for the card's vendor (VLLM_IMAGES)."""
    if image:
        return image
    key = "cpu" if hw.kind == "cpu" else hw.vendor.lower()
    if key not in VLLM_IMAGES:
        raise ScenarioError(
            f"no published vLLM image for {hw.vendor} {hw.name} (known: {', '.join(sorted(VLLM_IMAGES))}).",
            hint="pass --image with a vLLM image built for this card (for Intel Gaudi: the vllm-gaudi plugin's build).",
        )
    return VLLM_IMAGES[key]


def pod_requests(plan: MemoryPlan, gpus_per_pod: int) -> tuple[int, int]:
    """(CPU cores, host memory GiB) each pod requests.

    CPU: one core per GPU worker process plus two for the API server and the engine core, which
    busy-poll their queues. Memory: the pod's shard of the weights passes through host memory while
    loading (safetensors are memory-mapped), the /dev/shm emptyDir (SHM_SIZE) is memory charged to
    the pod, and a few GiB go to the Python processes themselves (HOST_OVERHEAD_GIB). Worked
    example: Llama-3.1-70B at TP 4 on one pod: 4 x 32.9 GiB of weights + 16 + 8 = 156 GiB.
    """
    weights_gib = plan.weight_bytes_per_gpu * max(1, gpus_per_pod) / 2**30
    return max(1, gpus_per_pod) + 2, cdiv(int(weights_gib * 1024), 1024) + SHM_GIB + HOST_OVERHEAD_GIB


def deployment(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    *,
    loaded: LoadedConfig | None = None,
    revision: str | None = None,
    image: str | None = None,
) -> tuple[Deployment, list[str]]:
    """Replicas, nodes and pods of the scenario, plus warnings about what it implies."""
    ref, warnings = _served_model(model, loaded)
    image = engine_image(hw, image)
    per_replica = sc.gpus_per_replica
    nodes = placement.num_nodes(hw, sc)  # the plan's placement: --num-nodes, else the fewest valid
    per_pod = cdiv(per_replica, nodes)
    if nodes > 1 and sc.tp > hw.gpus_per_node:
        warnings.append(
            f"--tp {sc.tp} spans nodes ({hw.gpus_per_node} {hw.name} per node): tensor-parallel all-reduce over the "
            f"network is slow. Prefer tensor parallel within a node and pipeline parallel across nodes, e.g. "
            f"--tp {hw.gpus_per_node} --pp {cdiv(per_replica, hw.gpus_per_node)} (re-plan it first)."
        )
    dp_local = _dp_ranks_per_node(sc, nodes, per_pod)
    if nodes > 1 and sc.data_parallel_size > 1 and dp_local is None:
        warnings.append(
            f"--data-parallel-size {sc.data_parallel_size} over {nodes} nodes of {per_pod} GPUs: an engine of "
            f"tp x pp = {sc.tp * sc.pp} GPUs does not fit whole DP ranks on each node, so the export runs it on Ray "
            "and does not write vLLM's per-node --data-parallel-size-local / --data-parallel-start-rank launch."
        )
    if nodes > 1 and per_replica % nodes:
        warnings.append(f"{per_replica} GPUs do not split evenly over {nodes} nodes; each pod requests {per_pod}.")
    if sc.num_gpus and sc.num_gpus % per_replica:
        warnings.append(
            f"--num-gpus {sc.num_gpus} is not a multiple of tp x pp = {per_replica}; "
            f"{sc.replicas} replica(s) use {sc.replicas * per_replica} of them."
        )
    resource = None if hw.kind == "cpu" else _GPU_RESOURCES.get(hw.vendor.lower())
    if hw.kind == "cpu":
        warnings.append("the CPU profile: the manifests request no accelerator; use a CPU build of vLLM.")
    elif resource is None:
        warnings.append(f"no known Kubernetes resource name for {hw.vendor} accelerators; the manifests leave it out.")
    app = f"vllm-{_slug(model.name.rsplit('/', 1)[-1])}"
    local = ref if loaded is not None and loaded.origin == "file" else None
    cpu, memory_gib = pod_requests(plan_memory(model, hw, sc, suggest=False), 0 if resource is None else per_pod)
    return Deployment(
        model=ref,
        model_name=model.name,
        revision=revision,
        gpu_id=hw.id,
        gpu_name=hw.name,
        tp=sc.tp,
        pp=sc.pp,
        gpus_per_replica=per_replica,
        replicas=sc.replicas,
        nodes_per_replica=nodes,
        gpus_per_pod=per_pod,
        multi_node=nodes > 1,
        data_parallel_size_local=dp_local,
        gpu_resource=resource,
        image=image,
        app_name=app,
        local_model_dir=local,
        cpu_request=cpu,
        memory_request_gib=memory_gib,
    ), warnings


def _dp_ranks_per_node(sc: Scenario, nodes: int, per_pod: int) -> int | None:
    """DP ranks each node runs when data parallelism spans ``nodes`` with whole engines per node (vLLM's
    multi-node DP launch); None when it does not span nodes or an engine (tp x pp) would straddle two."""
    engine = sc.tp * sc.pp
    if (
        nodes <= 1
        or sc.data_parallel_size <= 1
        or sc.data_parallel_size % nodes
        or per_pod != engine * (sc.data_parallel_size // nodes)
    ):
        return None
    return sc.data_parallel_size // nodes


def dp_node_args(dep: Deployment, node: int | str, address: str) -> dict[str, Any]:
    """The flags one node of a multi-node DP deployment adds (vLLM docs serving/data_parallel_deployment):
    every node names node 0's ``--data-parallel-address``; node 0 serves the API, every other node runs
    ``--headless`` from ``--data-parallel-start-rank`` (node x ranks per node). ``node`` 0 is the leader; any
    other value (a number, or a shell expression for it) is a worker's start rank."""
    args: dict[str, Any] = {"data-parallel-address": address}
    if node != 0:
        args |= {"headless": True, "data-parallel-start-rank": node}
    return args


# ----------------------------------------------------------------------------- engine flags


def _weight_flags(model: ModelSpec, sc: Scenario) -> tuple[str | None, str | None, list[str]]:
    """(dtype override, quantization method, warnings) for --weight-dtype and --precision."""
    notes: list[str] = []
    wd = canonical_dtype(sc.weight_dtype or "auto")
    dtype = quant = None
    if model.quantization is not None:
        notes.append(
            f"the checkpoint is {model.quantization.method}-quantized; vLLM and SGLang read that from its "
            "quantization_config, so no quantization flag is written."
        )
    elif wd in _VLLM_DTYPE:
        dtype = wd
    elif wd in _ONLINE_QUANTIZATION:
        quant = _ONLINE_QUANTIZATION[wd]
    elif wd != "auto":
        notes.append(
            f"--weight-dtype {sc.weight_dtype}: engines cannot quantize to it while loading; serve a "
            f"checkpoint already quantized that way (e.g. an AWQ or GPTQ repo). The configs load "
            f"{model.name} as it is, so its memory use differs from this plan."
        )
    if sc.precision_overrides:
        notes.append(
            "mixed precision (--precision) has no engine flag; it needs a checkpoint quantized that way "
            "(e.g. llm-compressor with an ignore list). The configs do not express it."
        )
    return dtype, quant, notes


def _kv_of(model: ModelSpec, sc: Scenario, resolved: str) -> str:
    """The resolved KV dtype, or 'auto' when it is the model's own dtype."""
    if canonical_dtype(sc.kv_cache_dtype or "auto") == "auto" or resolved == model.dtype:
        return "auto"
    return resolved


def _kv_choice(model: ModelSpec, prof: ServingProfile) -> str:
    return _kv_of(model, prof.scenario, prof.plan.resolved.kv_cache_dtype)


def _planned_kv(model: ModelSpec, hw: HardwareProfile, sc: Scenario) -> str:
    return _kv_of(model, sc, plan_memory(model, hw, sc, suggest=False).resolved.kv_cache_dtype)


def _served_dtype(model: ModelSpec, sc: Scenario) -> str:
    """The 16-bit dtype vLLM runs the model in (the --dtype written, else the checkpoint's)."""
    dtype, _, _ = _weight_flags(model, sc)
    return dtype or model.dtype


def check_engine_accepts(model: ModelSpec, sc: Scenario, kv: str) -> None:
    """Refuse, with vLLM 0.33.0's own reason, a KV-cache dtype its engine config rejects.

    Two rules of vLLM's config validation (reproduced by tools/check_exports.py):
    CacheConfig takes only VLLM_KV_CACHE_DTYPES ("Invalid kv_cache_dtype: 'int8'"), and a 16-bit
    KV cache must be the model's own dtype ('kv_cache_dtype="float16" is incompatible with
    dtype="bfloat16". Please set `--kv-cache-dtype` to `auto` or `bfloat16`').
    """
    if kv == "auto":
        return
    name = _VLLM_KV_DTYPE.get(kv)
    if name is None or name not in VLLM_KV_CACHE_DTYPES:
        raise ScenarioError(
            f"--kv-cache-dtype {sc.kv_cache_dtype}: vLLM {VLLM_VERSION} has no such KV cache (it refuses it: "
            f'"Invalid kv_cache_dtype: {kv!r}"; its 8-bit KV caches are fp8 and int8_per_token_head, with '
            "per-token scales the planner does not model).",
            hint=f"plan with --kv-cache-dtype fp8 or auto; allowed here: auto, {', '.join(sorted(_VLLM_KV_DTYPE))}.",
        )
    served = _served_dtype(model, sc)
    if kv in ("bf16", "fp16") and kv != served:
        served_name = _VLLM_DTYPE.get(served, served)
        raise ScenarioError(
            f"--kv-cache-dtype {sc.kv_cache_dtype} on a {served_name} model: vLLM {VLLM_VERSION} refuses it "
            f'(kv_cache_dtype="{name}" is incompatible with dtype="{served_name}").',
            hint=f"use --kv-cache-dtype auto (the model's {served_name}) or fp8, or serve the weights as {kv} "
            f"(--weight-dtype {kv}).",
        )


def vllm_args(model: ModelSpec, dep: Deployment, prof: ServingProfile) -> dict[str, Any]:
    """The profile as vLLM flags (YAML keys): long names without '--', in a readable order."""
    sc, res = prof.scenario, prof.plan.resolved
    dtype, quant, _ = _weight_flags(model, sc)
    args: dict[str, Any] = {"model": dep.model}
    if dep.revision:
        args["revision"] = dep.revision
    args["host"] = "0.0.0.0"
    args["port"] = VLLM_PORT
    args["dtype"] = _VLLM_DTYPE.get(dtype or model.dtype, "auto")
    if quant:
        args["quantization"] = quant
    args["tensor-parallel-size"] = sc.tp
    args["pipeline-parallel-size"] = sc.pp
    if sc.data_parallel_size > 1:
        args["data-parallel-size"] = sc.data_parallel_size
    if sc.enable_expert_parallel:
        args["enable-expert-parallel"] = True
        if sc.all2all_backend != "allgather_reducescatter":
            args["all2all-backend"] = sc.all2all_backend
    if dep.data_parallel_size_local is not None:  # whole engines per node: vLLM's own multi-node DP, no Ray
        args["data-parallel-size-local"] = dep.data_parallel_size_local
        args["data-parallel-rpc-port"] = DP_RPC_PORT
        if sc.tp * sc.pp > 1:
            args["distributed-executor-backend"] = "mp"
    elif dep.multi_node:
        args["distributed-executor-backend"] = "ray"
    elif dep.gpus_per_replica > 1:
        args["distributed-executor-backend"] = "mp"
    args["max-model-len"] = res.max_model_len
    args["gpu-memory-utilization"] = vllm_memory_fraction(sc, res)
    args["kv-cache-dtype"] = _VLLM_KV_DTYPE.get(_kv_choice(model, prof), "auto")
    if sc.block_size:
        args["block-size"] = res.block_size
    args["max-num-seqs"] = prof.max_num_seqs
    args["max-num-batched-tokens"] = prof.max_num_batched_tokens
    args["enable-chunked-prefill"] = prof.enable_chunked_prefill
    args["enable-prefix-caching"] = True
    if sc.scheduling_policy != "fcfs":
        args["scheduling-policy"] = sc.scheduling_policy
    if model.encoder is not None:  # the plan counts the encoder only with images: vLLM loads it only then too
        args["limit-mm-per-prompt"] = model.encoder.limit_per_prompt(sc.workload.images_per_request)
    if sc.engine == "eager":
        args["enforce-eager"] = True
    if sc.disable_custom_all_reduce:
        args["disable-custom-all-reduce"] = True
    if sc.speculative is not None:  # a mapping in the YAML (vLLM's loader turns it to JSON), JSON on a command line
        args["speculative-config"] = vllm_speculative_config(sc.speculative)
    if dep.kv_transfer_config is not None:  # a mapping too, as --speculative-config
        args["kv-transfer-config"] = dict(dep.kv_transfer_config)
    if sc.lora is not None:  # the adapters themselves are loaded at run time (--lora-modules or the API)
        args |= {"enable-lora": True, "max-loras": sc.lora.max_loras, "max-lora-rank": sc.lora.max_lora_rank}
        args["max-cpu-loras"] = sc.lora.cpu_loras
        if sc.lora.lora_dtype != "auto":
            args["lora-dtype"] = sc.lora.lora_dtype
    unknown = set(args) - set(VLLM_FLAGS)
    assert not unknown, f"unverified vLLM flags {unknown}"  # a programming error, not the user's
    return args


def flag_list(args: dict[str, Any], positional: str | None = None) -> list[str]:
    """{'tensor-parallel-size': 2, 'enforce-eager': True} -> ['--tensor-parallel-size', '2', '--enforce-eager'];
    False -> '--no-<flag>' (as vLLM's config loader does); ``positional`` is left out and returned first."""
    out = [str(args[positional])] if positional else []
    for key, value in args.items():
        if key == positional:
            continue
        if value is True:
            out.append(f"--{key}")
        elif value is False:
            out.append(f"--no-{key}")
        elif isinstance(value, dict):  # vLLM's JSON-valued flags (--speculative-config '{"method": ...}')
            out += [f"--{key}", json.dumps(value, separators=(",", ":"))]
        else:
            out += [f"--{key}", str(value)]
    return out


def _shell(words: list[str], raw: tuple[str, ...] = ()) -> str:
    """A multi-line shell command; words in ``raw`` (e.g. "$NODE_RANK") are written unquoted in double quotes."""
    parts = [f'"{w}"' if w in raw else shlex.quote(w) for w in words]
    lines, current = [], parts[:2]
    for part in parts[2:]:
        if part.startswith("--") and current:
            lines.append(" ".join(current))
            current = []
        current.append(part)
    lines.append(" ".join(current))
    return " \\\n  ".join(lines)


# ---------------------------------------------------------------------------- the comments


def expected_metrics(dep: Deployment, prof: ServingProfile) -> list[str]:
    """The planner's expectations for the profile, one line each, every figure labelled with its kind."""
    p, lat, res = prof.plan, prof.latency, prof.plan.resolved
    nodes = f", {dep.nodes_per_replica} nodes per replica" if dep.multi_node else ""
    lines = [
        f"Planner {planner.__version__}, {prof.profile} profile ({prof.purpose}).",
        f"{dep.model_name} on {dep.gpus_per_replica} x {dep.gpu_name} per replica (tp {dep.tp}, pp {dep.pp}), "
        f"{dep.replicas} replica(s){nodes}.",
        f"Chosen: {prof.rule}.",
        "Expected ([estimate]: fitted to public measurements; [bound]: pure roofline; [calibrated]: measured on "
        "this card; check with the bench command):",
        f"  starts: {'yes' if p.fits else 'NO'} [estimate]: {p.reason}",
        f"  KV cache: {p.kv_cache_tokens:,} tokens per replica, {p.max_concurrency:,.1f} requests of "
        f"{res.max_model_len:,} tokens at once [estimate]",
        f"  workload: {lat.batch_size} requests in flight, {lat.input_len:,} prompt + {lat.output_len:,} output tokens",
        f"  TTFT {fmt_seconds(lat.ttft_seconds)} (all {lat.batch_size} prompts arriving together) [{lat.kind}]; "
        f"TPOT {fmt_seconds(lat.tpot_seconds)} [{lat.kind}]",
        f"  throughput {lat.throughput_tokens_per_s:,.0f} output tokens/s, {lat.requests_per_s:,.2f} requests/s "
        f"(all replicas) [{lat.kind}]",
    ]
    spec = lat.speculative
    if spec is not None:
        searched = spec.break_even_searched_up_to
        even = (
            f"pays at every batch up to {searched:,}"
            if spec.break_even_batch is None
            else f"stops paying at batch {spec.break_even_batch:,} (of {searched:,} searched)"
        )
        lines.append(
            f"  speculative decoding {spec.method}, k={spec.num_speculative_tokens}, acceptance "
            f"{spec.acceptance_rate:g} (assumed): {spec.tokens_per_step:.2f} tokens per step, TPOT "
            f"{spec.speedup:.2f}x plain decoding; {even} [{spec.kind}]"
        )
    if lat.fits_in_kv_cache is False:
        lines.append(
            f"  warning: {lat.batch_size} requests of these lengths do not fit the KV cache; vLLM will "
            "queue or preempt some."
        )
    if not p.fits:
        lines.append(
            "  WARNING: the planner predicts this config does NOT start."
            + (f" Try: {'; '.join(p.suggestions[:3])}." if p.suggestions else "")
        )
    return lines


def _comment(lines: list[str]) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in lines)


# ---------------------------------------------------------------------------- the targets


def config_file_keys(args: dict[str, Any]) -> dict[str, Any]:
    """vLLM flags as ``vllm serve --config`` keys: a false boolean becomes ``no-<flag>: true``.

    vLLM's config loader turns ``flag: false`` into ``--no-flag`` only when the *top-level* ``vllm``
    parser defines ``--no-flag`` (FlexibleArgumentParser.load_config_file checks its own
    ``_option_string_actions``); the ``serve`` flags live on the subcommand's parser, so
    ``enable-chunked-prefill: false`` is dropped without a word and chunked prefill stays on.
    ``no-enable-chunked-prefill: true`` becomes ``--no-enable-chunked-prefill``, which ``serve`` parses.
    """
    return {
        (f"no-{key}" if value is False else key): (True if value is False else value) for key, value in args.items()
    }


def vllm_yaml(model: ModelSpec, dep: Deployment, prof: ServingProfile, warnings: list[str]) -> str:
    header = [
        f"vLLM serve config: vllm serve --config vllm-{prof.profile}.yaml",
        *expected_metrics(dep, prof),
        *[f"note: {w}" for w in warnings],
        f"Keys are vLLM's CLI flags without the leading '--' ({VLLM_FLAG_SOURCE}).",
        "For gated models set HF_TOKEN in the environment (it is not written here).",
        *_dp_yaml_lines(dep, prof),
    ]
    return _comment(header) + yaml.safe_dump(config_file_keys(vllm_args(model, dep, prof)), sort_keys=False)


def _dp_yaml_lines(dep: Deployment, prof: ServingProfile) -> list[str]:
    """How each node of a multi-node DP deployment starts from the shared config file."""
    local = dep.data_parallel_size_local
    if local is None:
        return []
    last = dep.nodes_per_replica - 1
    return [
        f"Multi-node data parallel: {dep.nodes_per_replica} nodes of {local} DP ranks each. Node 0 (the API server): "
        f"vllm serve --config vllm-{prof.profile}.yaml --data-parallel-address <node 0 address>; node k = 1..{last}: "
        f"vllm serve --config vllm-{prof.profile}.yaml --data-parallel-address <node 0 address> --headless "
        f"--data-parallel-start-rank <k x {local}> (command-line flags add to the file's)."
    ]


def vllm_command(model: ModelSpec, dep: Deployment, prof: ServingProfile, warnings: list[str]) -> str:
    args = vllm_args(model, dep, prof)
    if dep.data_parallel_size_local is not None:
        return _dp_vllm_command(model, dep, prof, warnings, args)
    header = [
        f"vllm serve command, {prof.profile} profile (the same flags as vllm-{prof.profile}.yaml).",
        *expected_metrics(dep, prof),
        *[f"note: {w}" for w in warnings],
        "For gated models: export HF_TOKEN=... first (it is not written here).",
    ]
    if dep.multi_node:
        header += [
            f"Multi-node: start Ray first. On the head node: ray start --head --port={RAY_PORT}; on each of the "
            f"other {dep.nodes_per_replica - 1} node(s): ray start --address=<head node address>:{RAY_PORT}. "
            "Then run this on the head node."
        ]
    return "#!/bin/sh\n" + _comment(header) + _shell(["vllm", "serve", *flag_list(args, "model")]) + "\n"


def _dp_vllm_command(
    model: ModelSpec, dep: Deployment, prof: ServingProfile, warnings: list[str], args: dict[str, Any]
) -> str:
    """One script for every node of a multi-node DP deployment: node 0 serves the API and its local ranks, the
    others run their ranks headless (vLLM docs serving/data_parallel_deployment, "Multi-node")."""
    local = dep.data_parallel_size_local
    assert local is not None  # vllm_command sends only multi-node DP here
    header = [
        f"vllm serve commands, {prof.profile} profile (the same flags as vllm-{prof.profile}.yaml).",
        *expected_metrics(dep, prof),
        *[f"note: {w}" for w in warnings],
        "For gated models: export HF_TOKEN=... first (it is not written here).",
        f"Multi-node data parallel, no Ray: run this on each of the {dep.nodes_per_replica} nodes with "
        f"NODE_RANK=0..{dep.nodes_per_replica - 1} and LEADER_ADDR=<address of node 0>; node 0 serves the API "
        f"on port {VLLM_PORT} and DP ranks 0..{local - 1}, node k runs ranks k x {local} onwards headless; every "
        f"node reaches node 0 on port {DP_RPC_PORT}.",
    ]
    start = f"$((NODE_RANK*{local}))"
    raw = ("$LEADER_ADDR", start)
    leader = _shell(["vllm", "serve", *flag_list(args | dp_node_args(dep, 0, "$LEADER_ADDR"), "model")], raw)
    worker = _shell(["vllm", "serve", *flag_list(args | dp_node_args(dep, start, "$LEADER_ADDR"), "model")], raw)
    indent = lambda text: "  " + text.replace("\n", "\n  ")  # noqa: E731
    return (
        "#!/bin/sh\n"
        + _comment(header)
        + f'if [ "$NODE_RANK" = 0 ]; then\n{indent("exec " + leader)}\nelse\n{indent("exec " + worker)}\nfi\n'
    )


def vllm_memory_fraction(sc: Scenario, res: Resolved) -> float:
    """vLLM's --gpu-memory-utilization for the vLLM files: the plan's fraction, except where it is another engine's
    default (SGLang's --mem-fraction-static for its static pool) or means something else (TensorRT-LLM's share of the
    free memory), which say nothing of vLLM's budget: then vLLM's default."""
    if res.memory_rule == "free_fraction" or (res.static_pool and sc.gpu_memory_utilization is None):
        return DEFAULT_GPU_MEMORY_UTILIZATION
    return res.gpu_memory_utilization


def sglang_args(model: ModelSpec, dep: Deployment, prof: ServingProfile) -> tuple[list[tuple[str, Any]], list[str]]:
    """SGLang launch flags for the profile, and what they cannot say."""
    sc, p, res = prof.scenario, prof.plan, prof.plan.resolved
    dtype, quant, _ = _weight_flags(model, sc)
    notes = []
    flags: list[tuple[str, Any]] = [("model-path", dep.model)]
    if dep.revision:
        flags.append(("revision", dep.revision))
    flags += [("host", "0.0.0.0"), ("port", SGLANG_PORT), ("dtype", _VLLM_DTYPE.get(dtype or model.dtype, "auto"))]
    if quant:
        flags.append(("quantization", quant))
    dp = sc.data_parallel_size  # SGLang's TP group spans the attention-DP groups: tp-size tp x dp
    flags += [("tp-size", sc.tp * dp), ("pp-size", sc.pp), ("context-length", res.max_model_len)]
    if sc.enable_expert_parallel:
        flags.append(("ep-size", sc.tp * dp))
    if dp > 1:
        flags.append(("attn-dp-size", dp))
    if res.static_pool:  # planned with SGLang's own accounting: the fraction the plan used
        flags.append(("mem-fraction-static", f"{res.gpu_memory_utilization:.3f}".rstrip("0").rstrip(".")))
    elif p.fits:
        # SGLang's static pool is weights + KV cache; the planner sized both for vLLM.
        static = (p.weight_bytes_per_gpu + p.kv_cache_bytes_per_gpu) / p.total_memory_bytes_per_gpu
        flags.append(("mem-fraction-static", f"{int(static * 100) / 100:.2f}"))
    else:
        flags.append(("mem-fraction-static", f"{res.gpu_memory_utilization:.2f}"))
    kv = _kv_choice(model, prof)
    if kv != "auto":
        if kv in _SGLANG_KV_DTYPE:
            flags.append(("kv-cache-dtype", _SGLANG_KV_DTYPE[kv]))
        else:
            notes.append(f"SGLang has no --kv-cache-dtype for {kv}; its command keeps the model dtype.")
    flags += [
        ("max-running-requests", prof.max_num_seqs),
        ("chunked-prefill-size", prof.max_num_batched_tokens if prof.enable_chunked_prefill else -1),
    ]
    if sc.engine == "eager":
        flags += [("cuda-graph-backend-decode", "disabled"), ("cuda-graph-backend-prefill", "disabled")]
    if sc.disable_custom_all_reduce:
        flags.append(("disable-custom-all-reduce", True))
    if sc.speculative is not None:
        notes.append(
            "speculative decoding is written for vLLM only (--speculative-config); SGLang's --speculative-* "
            "flags are not exported, so this command decodes one token per step."
        )
    if sc.lora is not None:
        notes.append(
            "LoRA serving is written for vLLM only (--enable-lora); this SGLang command serves the base model."
        )
    if dep.disaggregation_mode is not None:
        flags += [
            ("disaggregation-mode", dep.disaggregation_mode),
            ("disaggregation-transfer-backend", dep.disaggregation_transfer_backend),
        ]
        if dep.disaggregation_mode == "prefill":  # the router names it next to each prefill URL
            flags.append(("disaggregation-bootstrap-port", SGLANG_BOOTSTRAP_PORT))
    if dep.multi_node:
        flags += [
            ("nnodes", dep.nodes_per_replica),
            ("node-rank", "$NODE_RANK"),
            ("dist-init-addr", f"$LEADER_ADDR:{SGLANG_DIST_PORT}"),
        ]
    unknown = {k for k, _ in flags} - set(SGLANG_FLAGS)
    assert not unknown, f"unverified SGLang flags {unknown}"
    return flags, notes


def sglang_memory_words(prof: ServingProfile) -> list[str]:
    """What the SGLang command's expectations and --mem-fraction-static are: planned for SGLang (its engine profile,
    its static pool), or the vLLM plan's numbers carried over."""
    res = prof.plan.resolved
    if res.static_pool:
        return [
            f"The expectations are timed with the {prof.scenario.engine_version} engine profile. "
            f"--mem-fraction-static {res.gpu_memory_utilization:g} is the static pool (weights + KV cache) the plan "
            "used: SGLang's own default for these flags on this card unless the scenario set one."
        ]
    return [
        "The expectations are for vLLM; SGLang's scheduler and kernels differ. --mem-fraction-static is the "
        "weights + KV cache share of memory the planner sized (approximate)."
    ]


def sglang_command(model: ModelSpec, dep: Deployment, prof: ServingProfile, warnings: list[str]) -> str:
    flags, notes = sglang_args(model, dep, prof)
    words = list(SGLANG_COMMAND)
    for key, value in flags:
        words += [f"--{key}"] if value is True else [f"--{key}", str(value)]
    header = [
        f"SGLang launch command, {prof.profile} profile ({SGLANG_FLAG_SOURCE}).",
        *expected_metrics(dep, prof),
        *sglang_memory_words(prof),
        *[f"note: {w}" for w in [*warnings, *notes]],
        "For gated models: export HF_TOKEN=... first (it is not written here).",
    ]
    if dep.multi_node:
        header.append(
            f"Multi-node: run on each of the {dep.nodes_per_replica} nodes with "
            f"NODE_RANK=0..{dep.nodes_per_replica - 1} "
            "and LEADER_ADDR=<address of the rank-0 node>."
        )
    raw = ("$NODE_RANK", f"$LEADER_ADDR:{SGLANG_DIST_PORT}")
    return "#!/bin/sh\n" + _comment(header) + _shell(words, raw) + "\n"


def _container_common(dep: Deployment) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": str(dep.cpu_request), "memory": f"{dep.memory_request_gib}Gi"}
    resources: dict[str, Any] = {"requests": requests}
    if dep.gpu_resource:
        resources = {
            "limits": {dep.gpu_resource: dep.gpus_per_pod},
            "requests": {**requests, dep.gpu_resource: dep.gpus_per_pod},
        }
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "hf-cache", "mountPath": "/root/.cache/huggingface"},
    ]
    if dep.local_model_dir:
        mounts.append({"name": "model", "mountPath": MODEL_MOUNT_PATH, "readOnly": True})
    return {
        "image": dep.image,
        "env": [
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": HF_SECRET_NAME, "key": HF_SECRET_KEY, "optional": True}},
            }
        ],
        "resources": resources,
        "volumeMounts": mounts,
    }


def _probes() -> dict[str, Any]:
    """vLLM's /health: startup allows 30 min for downloading and loading weights, then liveness and readiness."""
    get = {"httpGet": {"path": "/health", "port": "http"}}
    return {
        "startupProbe": {**get, "periodSeconds": 10, "failureThreshold": 180},
        "readinessProbe": {**get, "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {**get, "periodSeconds": 20, "failureThreshold": 6},
    }


def model_claim_name(dep: Deployment) -> str:
    """The PersistentVolumeClaim that holds a local model's folder in the cluster."""
    return f"{dep.app_name}-model"


def _volumes(dep: Deployment) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
        {"name": "hf-cache", "emptyDir": {}},
    ]
    if dep.local_model_dir:
        volumes.append(
            {"name": "model", "persistentVolumeClaim": {"claimName": model_claim_name(dep), "readOnly": True}}
        )
    return volumes


def service_name(dep: Deployment, profile: str) -> str:
    """The client-facing Service. Not the workload's own name: the LeaderWorkerSet controller creates a
    headless Service named after the LeaderWorkerSet (the DNS domain through which workers resolve
    $LWS_LEADER_ADDRESS) only if no Service of that name exists (kubernetes-sigs/lws
    pkg/utils/controller, CreateHeadlessServiceIfNotExists), so a Service of that name would leave the
    workers unable to find the leader."""
    return f"{dep.app_name}-{profile}-api"


def ray_worker_script() -> str:
    """Join the Ray head, retrying while it starts (the leader pod may come up after the worker)."""
    return (
        f'i=0; until ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" --block; do i=$((i+1)); '
        f'if [ "$i" -ge {RAY_JOIN_TRIES} ]; then echo "Ray head unreachable after $i tries"; exit 1; fi; '
        f'echo "waiting for the Ray head (try $i of {RAY_JOIN_TRIES})"; sleep {RAY_RETRY_SECONDS}; done'
    )


def ray_leader_script(serve_words: list[str]) -> str:
    """Start the Ray head, wait (bounded) until the whole group has joined, then run vLLM."""
    count = (
        'python3 -c \'import ray; ray.init(address="auto", logging_level="ERROR"); '
        'print(len([n for n in ray.nodes() if n["Alive"]]))\''
    )
    wait = (
        f'i=0; until [ "$({count})" -ge "$LWS_GROUP_SIZE" ]; do i=$((i+1)); '
        f'if [ "$i" -ge {RAY_JOIN_TRIES} ]; then echo "Ray workers missing after $i tries"; exit 1; fi; '
        f'echo "waiting for Ray workers (try $i of {RAY_JOIN_TRIES})"; sleep {RAY_RETRY_SECONDS}; done'
    )
    return f"ray start --head --port={RAY_PORT} && {wait} && exec " + " ".join(shlex.quote(w) for w in serve_words)


def _dp_pod_commands(dep: Deployment, words: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The leader's and the workers' containers of a multi-node DP LeaderWorkerSet: every pod names the leader
    pod's address, which the LWS controller puts in each container's environment (LWS_LEADER_ADDRESS, the
    leader's DNS name in the group's headless Service); Kubernetes expands $(VAR) in args. A worker's start rank
    is its LWS_WORKER_INDEX (1..size-1) x ranks per node, computed by the shell."""
    leader = {"command": ["vllm", "serve"], "args": [*words, *flag_list(dp_node_args(dep, 0, "$(LWS_LEADER_ADDRESS)"))]}
    start = f"$((LWS_WORKER_INDEX*{dep.data_parallel_size_local}))"
    extra = flag_list(dp_node_args(dep, start, "$LWS_LEADER_ADDRESS"))
    script = "exec " + " ".join([*(shlex.quote(w) for w in ["vllm", "serve", *words]), *extra])
    return leader, {"command": ["/bin/sh", "-c"], "args": [script]}


def _k8s_serve_words(model: ModelSpec, dep: Deployment, prof: ServingProfile) -> list[str]:
    """The vLLM flags inside the cluster: a local model is served from its mounted volume."""
    args = vllm_args(model, dep, prof)
    if dep.local_model_dir:
        args["model"] = MODEL_MOUNT_PATH
    return flag_list(args, "model")


def k8s_manifest(model: ModelSpec, dep: Deployment, prof: ServingProfile, warnings: list[str]) -> str:
    """Deployment + Service, or (multi-node) LeaderWorkerSet + Service, running the profile's vLLM flags."""
    name = f"{dep.app_name}-{prof.profile}"
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "vllm", "planner/profile": prof.profile}
    words = _k8s_serve_words(model, dep, prof)
    port = [{"name": "http", "containerPort": VLLM_PORT}]
    if not dep.multi_node:
        container = {
            "name": "vllm",
            **_container_common(dep),
            "command": ["vllm", "serve"],
            "args": words,
            "ports": port,
            **_probes(),
        }
        workload: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": dep.replicas,
                "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [container], "volumes": _volumes(dep)},
                },
            },
        }
        selector = {"app.kubernetes.io/name": name}
        kind_note = "a Deployment (one pod per replica) and a Service"
    else:
        if dep.data_parallel_size_local is None:  # one engine across the pods: Ray
            leader_run = {"command": ["/bin/sh", "-c"], "args": [ray_leader_script(["vllm", "serve", *words])]}
            worker_run = {"command": ["/bin/sh", "-c"], "args": [ray_worker_script()]}
        else:  # whole DP ranks per pod: vLLM's multi-node DP, the leader pod's address from the LWS
            leader_run, worker_run = _dp_pod_commands(dep, words)
        leader = {"name": "vllm-leader", **_container_common(dep), **leader_run, "ports": port, **_probes()}
        worker = {"name": "vllm-worker", **_container_common(dep), **worker_run}
        workload = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": dep.replicas,
                "leaderWorkerTemplate": {
                    "size": dep.nodes_per_replica,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": {
                        "metadata": {"labels": {**labels, "role": "leader"}},
                        "spec": {"containers": [leader], "volumes": _volumes(dep)},
                    },
                    "workerTemplate": {
                        "metadata": {"labels": {**labels, "role": "worker"}},
                        "spec": {"containers": [worker], "volumes": _volumes(dep)},
                    },
                },
            },
        }
        selector = {"app.kubernetes.io/name": name, "role": "leader"}
        group = (
            f"a Ray head running vLLM and {dep.nodes_per_replica - 1} Ray worker(s)"
            if dep.data_parallel_size_local is None
            else f"the leader serving the API and DP ranks 0..{dep.data_parallel_size_local - 1}, "
            f"{dep.nodes_per_replica - 1} headless worker(s) running {dep.data_parallel_size_local} ranks each"
        )
        kind_note = (
            f"a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1; one group of {dep.nodes_per_replica} pods per "
            f"replica: {group}) and a Service"
        )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(dep, prof.profile), "labels": labels},
        "spec": {"selector": selector, "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http"}]},
    }
    header = [
        f"Kubernetes manifest, {prof.profile} profile: {kind_note}.",
        *expected_metrics(dep, prof),
        *[f"note: {w}" for w in warnings],
        f"The token comes from a Secret: kubectl create secret generic {HF_SECRET_NAME} "
        f"--from-literal={HF_SECRET_KEY}=<your token> (this file holds no token).",
        "hf-cache is an emptyDir: replace it with a PersistentVolumeClaim to keep downloaded weights.",
        (
            f"Each pod requests {dep.cpu_request} CPU cores and {dep.memory_request_gib} GiB of host memory "
            f"(its weights, the {SHM_SIZE} /dev/shm and {HOST_OVERHEAD_GIB} GiB for vLLM's processes)."
        ),
        f"Apply: kubectl apply -f k8s-{prof.profile}.yaml",
    ]
    if dep.local_model_dir:
        header.append(
            f"The model folder {dep.local_model_dir} must be copied into the PersistentVolumeClaim "
            f"{model_claim_name(dep)} (ReadOnlyMany or ReadWriteMany), mounted at {MODEL_MOUNT_PATH}."
        )
    if dep.multi_node:
        header.append("Needs the LeaderWorkerSet controller: https://github.com/kubernetes-sigs/lws")
    docs = json.loads(json.dumps([workload, service]))  # fresh objects: no YAML anchors for shared dicts
    return _comment(header) + yaml.safe_dump_all(docs, sort_keys=False, width=100)


def bench_command(model: ModelSpec, dep: Deployment, prof: ServingProfile, warnings: list[str]) -> str:
    """`vllm bench serve` at the profile's concurrency; the predictions ride along as --metadata."""
    lat = prof.latency
    prompts = max(BENCH_MIN_PROMPTS, BENCH_ROUNDS * prof.max_num_seqs)
    metadata = {
        "planner_version": planner.__version__,
        "planner_profile": prof.profile,
        "planner_model": dep.model_name,
        "planner_gpu": dep.gpu_id,
        "planner_tp": dep.tp,
        "planner_pp": dep.pp,
        "planner_replicas": dep.replicas,
        "planner_max_num_seqs": prof.max_num_seqs,
        "planner_max_num_batched_tokens": prof.max_num_batched_tokens,
        "planner_kind": lat.kind,
        "planner_ttft_ms": f"{lat.ttft_seconds * 1e3:.2f}",
        "planner_tpot_ms": f"{lat.tpot_seconds * 1e3:.3f}",
        "planner_output_tokens_per_s": f"{lat.throughput_tokens_per_s:.1f}",
    }
    words = [
        "vllm",
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        f"http://127.0.0.1:{VLLM_PORT}",
        "--model",
        dep.model,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(lat.input_len),
        "--random-output-len",
        str(lat.output_len),
        "--ignore-eos",
        "--num-prompts",
        str(prompts),
        "--max-concurrency",
        str(prof.max_num_seqs),
        "--request-rate",
        "inf",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--save-result",
        "--result-filename",
        f"bench-{prof.profile}-{_slug(dep.model_name)}-{dep.gpu_id}.json",
        "--metadata",
        *[f"{k}={v}" for k, v in metadata.items()],
    ]
    header = [
        f"vllm bench serve for the {prof.profile} profile ({BENCH_FLAG_SOURCE}).",
        *expected_metrics(dep, prof),
        f"Sends {prompts:,} random prompts, {prof.max_num_seqs} at a time, to a server started with "
        f"vllm-{prof.profile}.yaml; the planner's predictions are saved in the result JSON as metadata.",
        (
            f"Against the Kubernetes Service: kubectl port-forward svc/{service_name(dep, prof.profile)} "
            f"{VLLM_PORT}:{VLLM_PORT}"
        ),
        "The static-batch TTFT above is for all prompts arriving at once; the bench keeps the concurrency full, "
        "so compare its steady-state TPOT and throughput first.",
    ]
    return "#!/bin/sh\n" + _comment(header) + _shell(words) + "\n"


class _Writer(NamedTuple):
    """How one export target is written: the function, its file name ({p}: the profile), what the file is."""

    write: Callable[[ModelSpec, Deployment, ServingProfile, list[str]], str]
    file: str
    description: str


#: The export targets, one row each (and its name in ``Target``).
_WRITERS: dict[str, _Writer] = {
    "vllm-yaml": _Writer(vllm_yaml, "vllm-{p}.yaml", "vllm serve --config file"),
    "vllm-cmd": _Writer(vllm_command, "vllm-{p}.sh", "the vllm serve command line with the same flags"),
    "sglang": _Writer(sglang_command, "sglang-{p}.sh", "SGLang launch command"),
    "k8s": _Writer(k8s_manifest, "k8s-{p}.yaml", "Kubernetes manifest (Deployment or LeaderWorkerSet, and a Service)"),
    "bench": _Writer(bench_command, "bench-{p}.sh", "vllm bench serve command that measures this config"),
}
assert set(_WRITERS) == set(TARGETS), "_WRITERS and Target must name the same targets"


def export_bundle(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    *,
    loaded: LoadedConfig | None = None,
    revision: str | None = None,
    image: str | None = None,
    efficiency: Efficiency | None = None,
    profiles: tuple[str, ...] = PROFILES,
    draft_model: ModelSpec | None = None,
) -> ExportBundle:
    """Both serving profiles of ``sc`` and every target's file for each (see the module docstring);
    ``draft_model`` is the draft's spec with ``--speculative-method draft``."""
    unknown = set(profiles) - set(PROFILES)
    if unknown:
        raise ScenarioError(f"unknown export profile {sorted(unknown)}.", hint=f"Use {' or '.join(PROFILES)}.")
    check_engine_accepts(model, sc, _planned_kv(model, hw, sc))
    dep, warnings = deployment(model, hw, sc, loaded=loaded, revision=revision, image=image)
    warnings += _weight_flags(model, sc)[2]
    builders = {"latency": latency_profile, "throughput": throughput_profile}
    if sc.speculative is not None:
        vllm_speculative_config(sc.speculative)  # refuses a head-less eagle before any profile is costed
    chosen = [builders[name](model, hw, sc, efficiency, draft_model) for name in PROFILES if name in profiles]
    artefacts = []
    for prof in chosen:
        for target in TARGETS:
            writer = _WRITERS[target]
            artefacts.append(
                Artefact(
                    profile=prof.profile,
                    target=target,
                    filename=writer.file.format(p=prof.profile),
                    description=writer.description,
                    text=writer.write(model, dep, prof, warnings),
                )
            )
    return ExportBundle(deployment=dep, profiles=chosen, artefacts=artefacts, warnings=warnings)


#: The KV connector both pools of a disaggregated deployment run: vLLM's NixlConnector, one role for both sides
#: (docs.vllm.ai features/nixl_connector_usage: prefiller and decoder each start with
#: --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}').
NIXL_KV_TRANSFER = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
#: The targets a disaggregated export writes per pool (the bench command is not written for it yet); SGLang's
#: adds the router (router-sglang.sh).
PD_TARGETS: tuple[Target, ...] = ("vllm-yaml", "vllm-cmd", "sglang", "k8s")
PD_ROLES = ("prefill", "decode")
#: SGLang's --disaggregation-transfer-backend for each KV link (sglang 0.5.23 arg_groups/choices.py): Mooncake's
#: transfer engine (SGLang's default; RDMA, and NVLink inside a node) and, over TCP, mooncake_tcp (Mooncake with
#: its TCP transport forced: pd_disaggregation_hook.handle_pd_disaggregation sets MC_FORCE_TCP=1).
SGLANG_PD_BACKENDS = {"nvlink": "mooncake", "rdma": "mooncake", "tcp": "mooncake_tcp"}
#: The router of SGLang's PD disaggregation (docs.sglang.io advanced_features/pd_disaggregation; sgl-router):
#: ``python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT ... --decode URL ...``.
#: The sglang-router package is not in the engines' environment, so this command is not parser-checked.
SGLANG_ROUTER_COMMAND = ("python", "-m", "sglang_router.launch_router", "--pd-disaggregation")
SGLANG_ROUTER_PORT = 8000
ROUTER_FILE = "router-sglang.sh"


def sglang_router_command(prefill_instances: int, decode_instances: int, header: list[str]) -> str:
    """The router in front of the pools: each prefill instance's URL with its bootstrap port, each decode
    instance's URL; the instances' addresses come from the environment ($PREFILL_1.., $DECODE_1..)."""
    words = list(SGLANG_ROUTER_COMMAND)
    raw = []
    for i in range(1, prefill_instances + 1):
        words += ["--prefill", f"http://$PREFILL_{i}:{SGLANG_PORT}", str(SGLANG_BOOTSTRAP_PORT)]
        raw.append(f"http://$PREFILL_{i}:{SGLANG_PORT}")
    for i in range(1, decode_instances + 1):
        words += ["--decode", f"http://$DECODE_{i}:{SGLANG_PORT}"]
        raw.append(f"http://$DECODE_{i}:{SGLANG_PORT}")
    words += ["--host", "0.0.0.0", "--port", str(SGLANG_ROUTER_PORT)]
    return "#!/bin/sh\n" + _comment(header) + _shell(words, tuple(raw)) + "\n"


def pd_bundle(
    model: ModelSpec,
    hw: HardwareProfile,
    sc: Scenario,
    *,
    prefill_instances: int,
    prefill_tp: int,
    decode_instances: int,
    decode_tp: int,
    kv_transfer_link: str = "rdma",
    expected: list[str] | None = None,
    loaded: LoadedConfig | None = None,
    revision: str | None = None,
    image: str | None = None,
    efficiency: Efficiency | None = None,
) -> ExportBundle:
    """A disaggregated prefill/decode deployment (xPyD): per pool, vLLM's config and command and a Kubernetes
    manifest of ``instances`` replicas at its TP, each engine with the NIXL KV connector; SGLang's launch command
    per pool (``--disaggregation-mode prefill|decode``, the transfer backend of ``kv_transfer_link``:
    SGLANG_PD_BACKENDS) and its router (router-sglang.sh, not parser-checked: see SGLANG_ROUTER_COMMAND).

    The prefill pool takes the throughput profile (a large step budget: it only prefills), the decode pool the
    latency profile. ``expected``: lines (the disaggregated simulation's figures) written at the top of every
    file as comments. A router that sends each request to a prefill and then a decode instance is not written:
    llm-d's inference scheduler or vLLM's disaggregated proxy example does that part.
    """
    check_engine_accepts(model, sc, _planned_kv(model, hw, sc))
    if kv_transfer_link not in SGLANG_PD_BACKENDS:
        raise ScenarioError(
            f"--kv-transfer-link {kv_transfer_link!r} is not a link the export knows.",
            hint=f"Use one of {', '.join(SGLANG_PD_BACKENDS)}.",
        )
    roles = {
        "prefill": (prefill_instances, prefill_tp, throughput_profile),
        "decode": (decode_instances, decode_tp, latency_profile),
    }
    artefacts, profiles, warnings, deps = [], [], [], []
    for role, (instances, tp, builder) in roles.items():
        sc_role = sc.model_copy(update={"tp": tp, "num_gpus": instances * tp * sc.pp})
        dep, notes = deployment(model, hw, sc_role, loaded=loaded, revision=revision, image=image)
        dep = dep.model_copy(
            update={
                "app_name": f"{dep.app_name}-{role}",
                "kv_transfer_config": NIXL_KV_TRANSFER,
                "disaggregation_mode": role,
                "disaggregation_transfer_backend": SGLANG_PD_BACKENDS[kv_transfer_link],
            }
        )
        prof = builder(model, hw, sc_role, efficiency)
        warnings += [f"{role} pool: {note}" for note in notes + _weight_flags(model, sc_role)[2]]
        header = _comment(
            [
                f"Disaggregated prefill/decode: the {role} pool, {instances} instance(s) at TP {tp}, KV to the "
                f"{'decode' if role == 'prefill' else 'prefill'} pool over NixlConnector (vLLM) or "
                f"{SGLANG_PD_BACKENDS[kv_transfer_link]} (SGLang).",
                "Route each request to a prefill then a decode instance (vLLM: llm-d, or vLLM's disaggregated proxy; "
                f"SGLang: {ROUTER_FILE}).",
                *(expected or []),
                f"The 'Expected' lines below are one such engine serving alone ({prof.profile} profile), not the "
                "pools together.",
            ]
        )
        for target in PD_TARGETS:
            writer = _WRITERS[target]
            text = writer.write(model, dep, prof, warnings)
            for other in PD_TARGETS:  # the files name each other by profile; here they are named by pool
                text = text.replace(_WRITERS[other].file.format(p=prof.profile), _WRITERS[other].file.format(p=role))
            artefacts.append(
                Artefact(
                    profile=prof.profile,
                    target=target,
                    filename=writer.file.format(p=role),
                    description=f"{writer.description}, {role} pool",
                    text=_with_header(text, header),
                )
            )
        profiles.append(prof)
        deps.append(dep)
    router = [
        f"SGLang's PD router in front of the pools ({' '.join(SGLANG_ROUTER_COMMAND[2:])}; docs.sglang.io "
        "advanced_features/pd_disaggregation): pip install sglang-router.",
        f"Set PREFILL_1..{prefill_instances} and DECODE_1..{decode_instances} to the instances' addresses "
        f"(sglang-prefill.sh and sglang-decode.sh); each prefill URL is followed by its bootstrap port "
        f"{SGLANG_BOOTSTRAP_PORT} (--disaggregation-bootstrap-port). Clients send to port {SGLANG_ROUTER_PORT}.",
        "Not checked by a parser: the sglang-router package is not in the planner's engines environment.",
        *(expected or []),
    ]
    artefacts.append(
        Artefact(
            profile=profiles[1].profile,
            target="sglang",
            filename=ROUTER_FILE,
            description="SGLang's PD router (sglang_router) in front of both pools",
            text=sglang_router_command(prefill_instances, decode_instances, router),
        )
    )
    return ExportBundle(deployment=deps[1], profiles=profiles, artefacts=artefacts, warnings=warnings)


def _with_header(text: str, header: str) -> str:
    """``header`` (comment lines) after a shebang line, if the file has one, else at the top."""
    if text.startswith("#!"):
        first, _, rest = text.partition("\n")
        return f"{first}\n{header}{rest}"
    return header + text
