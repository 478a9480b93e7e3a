"""Public records: ``shared/reference/measured_public.json`` read into ``PublicRecord`` rows, and the
tables that name each record's model, card and precision the way the planner does.

The file holds 1,471 numbers from TensorRT-LLM's throughput tables, static-batch tables, vLLM and
SGLang serving sweeps, Vidur per-operator timings and vLLM startup logs (schema in
``shared/reference/README.md``). What each becomes as a prediction is
``planner.verify.public_records_express``; the predictions themselves are
``planner.verify.public_records_predict``; the accuracy report over all of them is
``planner.verify.public_records_report``.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import PlannerError
from planner.model.families import build_spec
from planner.model.sources import load_config
from planner.model.spec import ModelSpec

REFERENCE_FILE = "measured_public.json"
_SPEC = ConfigDict(frozen=True, extra="forbid")


class PublicRecord(BaseModel):
    """One published measurement, as ``measured_public.json`` holds it (``index``: its position)."""

    model_config = _SPEC

    index: int = Field(description="Position of the record in measured_public.json (0-based).")
    source: str = Field(description="Where the number was published (repository, file, commit or URL).")
    model: str = Field(description="Model as the source names it.")
    gpu: str = Field(description="Accelerator as the source names it.")
    n_gpus: int = Field(description="GPUs of the measured deployment.")
    tp: int | str = Field(description="Tensor-parallel size (text when the source does not give one).")
    dtype: str = Field(description="Precision label as the source gives it.")
    quant: str = Field(description="Quantization as the source gives it.")
    engine: str = Field(description="Engine, version and mode.")
    batch_or_concurrency: int | str = Field(description="Batch size, concurrency, or a description of the load.")
    qps: int | float | str = Field(description="Request rate in requests/s, 'inf' (all at once) or 'n/a'.")
    input_len: int | str | None = Field(description="Prompt tokens per request, or a description (ShareGPT).")
    output_len: int | str | None = Field(description="Output tokens per request, or a description.")
    metric: str = Field(description="What was measured.")
    value: float = Field(description="The measured number, in ``unit``.")
    unit: str = Field(description="Unit of ``value``, as the source states it.")
    notes: str = Field(description="Conditions, caveats and INCOMPLETE / AMBIGUOUS flags.")


#: A verbatim copy of shared/reference/measured_public.json, for clones without ../shared (see its README).
BUNDLED_REFERENCE_DIR = Path(__file__).resolve().parent / "reference"


def reference_dir() -> Path:
    """The reference folder: ``$PLANNER_REFERENCE_DIR``, else ``<repo>/../shared/reference`` when it
    exists, else the copy bundled in ``planner/verify/reference``."""
    env = os.environ.get("PLANNER_REFERENCE_DIR")
    if env:
        return Path(env)
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "reference"
    return shared if (shared / REFERENCE_FILE).is_file() else BUNDLED_REFERENCE_DIR


def load_records(path: str | os.PathLike[str] | None = None) -> list[PublicRecord]:
    """Read measured_public.json (default: ``reference_dir() / measured_public.json``)."""
    file = Path(path) if path is not None else reference_dir() / REFERENCE_FILE
    if not file.is_file():
        raise PlannerError(
            f"the public measurements file {file} does not exist.",
            hint="Check out the shared reference folder beside the repository (../shared/reference), "
            "or set PLANNER_REFERENCE_DIR to the folder holding measured_public.json.",
        )
    rows = json.loads(file.read_text())
    return [PublicRecord(index=i, **row) for i, row in enumerate(rows)]


#: Source family by a phrase of the ``source`` field, first match wins. The label groups records
#: published together (one table, one engine release), which is how accuracy is reported.
SOURCE_FAMILIES: tuple[tuple[str, str], ...] = (
    ("generated using version 0.12.0", "trtllm-0.12 max throughput"),
    ("generated using version 0.17", "trtllm-0.17 max throughput"),
    ("NEW for v1.0", "trtllm-1.0 max throughput"),
    ("developer-guide/perf-overview.md", "trtllm-1.1 max throughput per GPU"),
    ("docs/source/performance.md", "trtllm-0.5/0.6 static batch"),
    ("release/0.5.0/docs/source/performance.md", "trtllm-0.5/0.6 static batch"),
    ("blogs/", "trtllm blogs static batch"),
    ("LambdaLabsML/vllm-benchmark", "vllm-0.5/0.6 serving (Lambda)"),
    ("benchmark_vllm_060", "sglang-0.3 / vllm-0.6 serving"),
    ("profiling/compute", "vidur linear ops"),
    ("profiling/network", "vidur all-reduce"),
    ("vllm-project/vllm", "vllm startup logs"),
    ("CodeEngine", "vllm startup logs"),
)


def source_family(record: PublicRecord) -> str:
    for phrase, family in SOURCE_FAMILIES:
        if phrase in record.source:
            return family
    return "other"


@dataclass(frozen=True)
class ModelMatch:
    """A pattern of published model names and the catalog repo id it means."""

    pattern: str
    repo_id: str | None
    note: str = ""


#: Published model name (lowercase, searched) -> catalog repo id. Instruct and quantized
#: re-uploads share their base model's architecture; a ``note`` says when the catalog entry is an
#: architecture-identical stand-in. ``repo_id=None``: not in the catalog (the reason says so).
MODEL_TABLE: tuple[ModelMatch, ...] = (
    ModelMatch(
        r"405b",
        "meta-llama/Llama-3.1-405B",
        "stand-in: -Instruct, -FP8 and Hermes-3-Llama-3.1-405B keep Llama-3.1-405B's shapes",
    ),
    ModelMatch(r"llama-3\.1-8b", "meta-llama/Llama-3.1-8B"),
    ModelMatch(r"llama-3\.1-70b", "meta-llama/Llama-3.1-70B"),
    ModelMatch(r"llama-3\.3-70b", "meta-llama/Llama-3.3-70B-Instruct"),
    ModelMatch(r"(^|/)(meta-)?llama-3-8b", "meta-llama/Meta-Llama-3-8B"),
    ModelMatch(
        r"(^|/)(meta-)?llama-3-70b",
        "meta-llama/Llama-3.1-70B",
        "stand-in: Llama-3-70B has Llama-3.1-70B's shapes (80 x 8192, GQA 64/8, FFN 28672, vocab 128256)",
    ),
    ModelMatch(r"llama-2-7b", "meta-llama/Llama-2-7b-hf"),
    ModelMatch(r"llama-2-13b", "meta-llama/Llama-2-13b-hf"),
    ModelMatch(r"llama-2-70b", "meta-llama/Llama-2-70b-hf"),
    ModelMatch(r"llama-4-maverick", "meta-llama/Llama-4-Maverick-17B-128E-Instruct"),
    ModelMatch(r"llama-4-scout.*fp8", "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"),
    ModelMatch(r"llama-4-scout", None, "Llama-4-Scout-17B-16E (bf16)"),
    ModelMatch(r"qwen2\.5-7b", "Qwen/Qwen2.5-7B", "stand-in: Qwen2.5-7B-Instruct keeps the base model's architecture"),
    ModelMatch(r"yi-34b", "01-ai/Yi-34B"),
    ModelMatch(r"mistral-7b-instruct-v0\.3", "mistralai/Mistral-7B-Instruct-v0.3"),
    ModelMatch(r"^mistral-7b$", "mistralai/Mistral-7B-v0.1"),
    ModelMatch(
        r"mistral-nemo",
        "mistralai/Mistral-Nemo-Base-2407",
        "stand-in: Mistral-Nemo-Instruct-2407 is the base model's architecture",
    ),
    ModelMatch(r"mistral-large", None, "Mistral-Large-Instruct-2407"),
    ModelMatch(r"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1"),
    ModelMatch(r"mixtral-8x22b-instruct", "mistralai/Mixtral-8x22B-Instruct-v0.1"),
    ModelMatch(
        r"mixtral-8x22b",
        "mistralai/Mixtral-8x22B-Instruct-v0.1",
        "stand-in: the base Mixtral-8x22B-v0.1 differs only in vocabulary (32000 vs 32768 tokens)",
    ),
    ModelMatch(r"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B"),
    ModelMatch(r"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B"),
    ModelMatch(r"deepseek-r1", "deepseek-ai/DeepSeek-R1", "stand-in: DeepSeek-R1-0528 keeps R1's architecture"),
    ModelMatch(
        r"deepseek-v3(?!\.2)",
        "deepseek-ai/DeepSeek-V3",
        "-0324 and V3.1 keep V3's config (61 layers, MLA, 256 routed experts); V3.2 (sparse attention) does not",
    ),
    ModelMatch(r"gpt-oss-120b", "openai/gpt-oss-120b"),
    ModelMatch(r"gpt-oss-20b", "openai/gpt-oss-20b"),
    ModelMatch(r"gpt-j-6b", None, "GPT-J-6B"),
    ModelMatch(r"falcon-180b", "tiiuae/falcon-180B"),
    ModelMatch(r"granite-4\.0-micro", None, "ibm-granite/granite-4.0-micro"),
    ModelMatch(r"qwen3-vl-", None, "Qwen3-VL (a vision-language checkpoint)"),
    ModelMatch(r"qwen3-coder-next", None, "Qwen3-Coder-Next"),
    ModelMatch(r"qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Instruct"),
    ModelMatch(r"qwen3-0\.6b", "Qwen/Qwen3-0.6B"),
    ModelMatch(r"qwen3-1\.7b", None, "Qwen3-1.7B"),
    ModelMatch(r"qwen3-8b", "Qwen/Qwen3-8B", "-FP8 and -AWQ re-uploads keep Qwen3-8B's shapes"),
    ModelMatch(r"qwen3-14b", "Qwen/Qwen3-14B", "-FP8 and -AWQ re-uploads keep Qwen3-14B's shapes"),
    ModelMatch(r"qwen3-32b", "Qwen/Qwen3-32B", "-FP8 and -AWQ re-uploads keep Qwen3-32B's shapes"),
    ModelMatch(
        r"qwen2\.5-72b", "Qwen/Qwen2.5-72B", "stand-in: Qwen2.5-72B-Instruct keeps the base model's architecture"
    ),
    ModelMatch(r"glm-4\.5-air", "zai-org/GLM-4.5-Air", "-FP8 re-upload keeps GLM-4.5-Air's shapes"),
    ModelMatch(r"glm-4\.6", "zai-org/GLM-4.6", "-FP8 re-upload keeps GLM-4.6's shapes"),
    ModelMatch(r"deepseek-v3\.2", "deepseek-ai/DeepSeek-V3.2", "-Exp keeps V3.2's shapes"),
    ModelMatch(r"ministral-3-8b", None, "Ministral-3-8B"),
)

#: Published card name (lowercase, searched) -> hardware profile id; None: no profile yet.
#: A variant the source prints comes before its family's catch-all (a published "H100 PCIe" is not the SXM card).
GPU_TABLE: tuple[tuple[str, str | None], ...] = (
    (r"^gh200", "gh200"),
    (r"^h200", "h200"),
    (r"^h100 nvl", "h100-nvl"),
    (r"^h100[ -]pcie", "h100-pcie"),
    (r"^h100", "h100-sxm"),
    (r"^h20-3e|^h20\b.*\b141\s?gb", None),  # the 141 GB H20: the h20 profile is the 96 GB card
    (r"^h20\b", "h20"),
    (r"mi300x", "mi300x"),
    (r"^l20\b", None),
    (r"^a100[ -]pcie(?!.*\b40\s?gb)", "a100-pcie-80gb"),  # the 80 GB PCIe card (1.94 TB/s, 300 W, PCIe Gen4)
    (r"^a100[ -]pcie", None),  # the 40 GB PCIe card: no profile
    (r"^(?!.*\b80\s?gb)a100\b.*\b40\s?gb", "a100-40gb"),  # 40 GB named, 80 GB not
    (r"^a100", "a100-80gb"),
    (r"^gb200", "gb200"),
    (r"^b200", "b200"),
    (r"^l40s", "l40s"),
    (r"rtx-pro-6000", "rtx-pro-6000"),
    (r"rtx-3090", "rtx-3090"),
)

#: Quantization label (quant + dtype, lowercase, searched) -> (weight_dtype, kv_cache_dtype).
#: ModelOpt FP8/NVFP4 checkpoints ship an FP8 KV scale that TensorRT-LLM uses (assumed where the
#: table does not say); checkpoints already quantized in their config keep ``auto``.
PRECISION_TABLE: tuple[tuple[str, tuple[str, str]], ...] = (
    (r"nvfp4", ("nvfp4", "fp8")),
    (r"mxfp4|per doc column label fp8", ("auto", "auto")),
    (r"native fp8", ("auto", "fp8")),
    (r"fp8 weights\+fp8 kv|fp8_kv_cache|fp8 weights \(modelopt", ("fp8", "fp8")),
    (r"w8a8 int8|int8 w8a8", ("int8", "auto")),
    (r"fp8", ("fp8", "auto")),
    (r"^none|fp16|bf16", ("auto", "auto")),
)


def match_model(name: str) -> ModelMatch | None:
    low = name.lower()
    for entry in MODEL_TABLE:
        if re.search(entry.pattern, low):
            return entry
    return None


def match_gpu(name: str) -> tuple[bool, str | None]:
    """(known card, profile id or None)."""
    low = name.lower()
    for pattern, profile in GPU_TABLE:
        if re.search(pattern, low):
            return True, profile
    return False, None


def match_precision(record: PublicRecord) -> tuple[str, str] | None:
    text = f"{record.quant} {record.dtype}".lower()
    for pattern, dtypes in PRECISION_TABLE:
        if re.search(pattern, text):
            return dtypes
    return None


@functools.cache
def catalog_model(repo_id: str) -> ModelSpec:
    """The catalog's spec of ``repo_id`` (never the network)."""
    loaded = load_config(repo_id, prefer="catalog")
    return build_spec(loaded.config, repo_id)
