"""LoRA adapters (vLLM ``--enable-lora``): the bytes the adapter slots take on each GPU, and their kernels.

vLLM 0.33.0 preallocates, when the engine starts, ``--max-loras`` slots at ``--max-lora-rank`` for every
LoRA-capable module of the model ("In vLLM, all linear layers support LoRA":
``vllm/lora/utils.py`` ``get_supported_lora_modules``; ``vllm/lora/model_manager.py``
``LoRAModelManager._create_lora_modules`` wraps each and calls ``create_lora_weights(lora_slots, ...)``
with ``lora_slots = max_loras``), in ``--lora-dtype`` (auto: the model dtype,
``LoRAConfig.verify_with_model_config``). Per slot, on one rank:

* a linear: A [r, in] per packed slice and B [out, r], split as the base layer is
  (``planner.model.ops.LoRALinear``: column-parallel A whole and B / tp, row-parallel A / tp and B
  whole, replicated both whole; ``vllm/lora/layers/base_linear.py`` ``create_lora_weights``,
  ``column_parallel_linear.py`` ``MergedColumnParallelLinearWithLoRA.create_lora_weights`` and
  ``MergedQKVParallelLinearWithLoRA``, ``row_parallel_linear.py`` ``RowParallelLinearWithLoRA``);
* routed experts: ``FusedMoEWithLoRA`` (``vllm/lora/layers/fused_moe.py``) holds every expert's w13
  (2 slices) and w2 adapters, the gated MLP's rule per expert (expert parallelism not modelled);
* the embedding and lm_head, for the architectures whose vLLM class lists them in ``embedding_modules``
  (``EMBEDDING_LORA_MODEL_TYPES``): embedding A [V, r] and B [embedding_dim, r]
  (``vocab_parallel_embedding.py`` ``VocabParallelEmbeddingWithLoRA.create_lora_weights``), lm_head
  A [r, h] and B [V, r] (``logits_processor.py`` ``LogitsProcessorWithLoRA.create_lora_weights``, which
  refuses a vocabulary above 258,048), whole on every rank.

The sum is taken out of the KV-cache budget (vLLM allocates it before profiling). Worked case,
Llama-3.1-8B at TP1, --max-loras 4, --max-lora-rank 16, bf16: per layer and slot qkv 196,608 + 98,304,
o 65,536 + 65,536, gate_up 131,072 + 458,752, down 229,376 + 65,536 = 1,310,720 elements; x 32 layers
= 41,943,040; embedding 2,052,096 + 65,536 and lm_head 65,536 + 2,052,096 -> 46,178,304 elements per
slot x 2 B x 4 slots = 369,426,432 B = 352.3 MiB per GPU.

Left out: ``fully_sharded_loras`` (off by default), the punica wrapper's index tensors (a few
``max_num_batched_tokens``-long int vectors, well under 1 MiB), and the host-side cache of
``--max-cpu-loras`` adapters, which takes host memory only (``host_bytes_per_worker``).
"""

from __future__ import annotations

import os
from pathlib import Path

from planner.errors import ConfigError, ScenarioError
from planner.estimate.resolve import Resolved
from planner.model.layers import DecoderLayer
from planner.model.ops import Op, StepShape
from planner.model.sources import loads_bounded
from planner.model.spec import ModelSpec, dtype_bytes
from planner.scenario import LoRA, LoRAAdapter

#: model_types whose vLLM 0.33.0 class declares ``embedding_modules = {"embed_tokens": ..., "lm_head": ...}``
#: (vllm/model_executor/models/<type>.py), so that both get LoRA slots too; other architectures (Qwen2,
#: Mistral, Gemma, DeepSeek, gpt-oss ...) declare none.
EMBEDDING_LORA_MODEL_TYPES = frozenset(
    {
        "apertus",
        "exaone",
        "exaone4",
        "falcon_h1",
        "granite",
        "granitemoe",
        "granitemoehybrid",
        "granitemoeshared",
        "jamba",
        "lfm2",
        "lfm2_moe",
        "llama",
        "minicpm",
        "mixtral",
        "nemotron",
        "nemotron_h",
        "phimoe",
        "qwen3",
        "qwen3_moe",
        "solar",
    }
)
#: vLLM's limit for an lm_head with LoRA (LogitsProcessorWithLoRA.create_lora_weights).
MAX_LORA_VOCAB = 258048
#: Largest adapter_config.json read (real ones are under 2 KB).
MAX_ADAPTER_CONFIG_BYTES = 1 << 20
#: The dtype each --lora-dtype names (auto: the model's).
LORA_DTYPES = {"float16": "fp16", "bfloat16": "bf16"}


def lora_bytes_per_element(model: ModelSpec, lora: LoRA) -> float:
    """Bytes of one adapter weight: --lora-dtype, auto the model dtype (2 for bf16)."""
    return dtype_bytes(LORA_DTYPES.get(lora.lora_dtype, model.dtype))


def layer_slot_elements(layer: DecoderLayer, rank: int, tp: int) -> float:
    """A + B elements of one slot for one layer on one rank (every wrapped linear)."""
    return sum(lin.a_elements(rank, tp) + lin.b_elements(rank, tp) for lin in layer.lora_linears(tp))


def has_embedding_lora(model: ModelSpec) -> bool:
    """Whether vLLM gives the embedding and lm_head LoRA slots for this architecture."""
    return model.model_type in EMBEDDING_LORA_MODEL_TYPES


def embedding_slot_elements(model: ModelSpec, rank: int) -> tuple[int, int]:
    """(embedding, lm_head) A + B elements of one slot, whole on every rank; (0, 0) when not wrapped."""
    if not has_embedding_lora(model):
        return 0, 0
    if model.vocab_size > MAX_LORA_VOCAB:
        raise ScenarioError(
            f"--enable-lora: the vocabulary of {model.vocab_size:,} tokens is above vLLM's LoRA limit "
            f"(vLLM: When using LoRA, vocab size must be <= {MAX_LORA_VOCAB}).",
            hint="Serve this model without --enable-lora.",
        )
    V = model.vocab_size
    return V * rank + model.embedding_dim * rank, rank * model.hidden_size + V * rank


def stage_lora_bytes(model: ModelSpec, res: Resolved, stages: list[range]) -> list[int]:
    """LoRA slot bytes on one rank of each pipeline stage (0 each when LoRA is off).

    Layers of the stage, plus the embedding's on the first stage and the lm_head's on the last.
    Example: Llama-3.1-8B, TP1, PP1, 4 slots at rank 16 in bf16 -> [369,426,432] (module docstring).
    """
    cfg = res.lora
    if cfg is None:
        return [0] * len(stages)
    rank, tp = cfg.max_lora_rank, res.tp
    per_layer: dict[int, float] = {}  # identical layers are one shared object
    embed, head = embedding_slot_elements(model, rank)
    out = []
    for s, layers in enumerate(stages):
        elements = 0.0
        for i in layers:
            layer = model.layers[i]
            if id(layer) not in per_layer:
                per_layer[id(layer)] = layer_slot_elements(layer, rank, tp)
            elements += per_layer[id(layer)]
        elements += (embed if s == 0 else 0) + (head if s == len(stages) - 1 else 0)
        out.append(int(elements * cfg.max_loras * lora_bytes_per_element(model, cfg)))
    return out


def host_bytes_per_worker(model: ModelSpec, res: Resolved) -> int | None:
    """Host memory of the adapter cache in each worker process: --max-cpu-loras whole (unsharded) adapters.

    Each adapter at its own rank (--lora-config's r, else --max-lora-rank) over every LoRA-capable module:
    an upper bound for an adapter of fewer target modules. None when LoRA is off.
    """
    cfg = res.lora
    if cfg is None:
        return None
    rank = cfg.adapter.r if cfg.adapter is not None else cfg.max_lora_rank
    per_layer: dict[int, float] = {}
    for layer in model.layers:
        if id(layer) not in per_layer:
            per_layer[id(layer)] = layer_slot_elements(layer, rank, 1)
    elements = sum(per_layer[id(layer)] for layer in model.layers) + sum(embedding_slot_elements(model, rank))
    return int(elements * cfg.cpu_loras * lora_bytes_per_element(model, cfg))


# ------------------------------------------------------------------------------- step cost


def shape_fields(res: Resolved) -> dict[str, object]:
    """The ``StepShape`` fields of the scenario's LoRA (none when off, so a plain step is unchanged)."""
    cfg = res.lora
    if cfg is None:
        return {}
    act = res.act_bytes_per_element
    return {
        "lora_rank": cfg.max_lora_rank,
        "lora_slots": cfg.max_loras,
        "lora_bytes": dtype_bytes(LORA_DTYPES[cfg.lora_dtype]) if cfg.lora_dtype in LORA_DTYPES else act,
    }


def model_lora_ops(model: ModelSpec, shape: StepShape) -> list[Op]:
    """The lm_head's LoRA kernels over the sampled rows, when vLLM wraps it (``has_embedding_lora``).

    A [r, h] and B [V, r] whole on every rank (the adapter adds into the gathered logits). The embedding's
    LoRA (a row gather of A and a [T, r] x [r, h] expand) moves a few KB a step and is left out.
    """
    if shape.lora_rank is None or not has_embedding_lora(model):
        return []
    r, B, h, V = shape.lora_rank, shape.num_seqs, model.hidden_size, model.vocab_size
    return [
        Op(
            name="lora.lm_head (shrink+expand)",
            kind="gemm",
            flops=2.0 * B * r * (h + V),
            weight_bytes=shape.active_adapters * r * (h + V) * shape.lora_bytes,
            activation_bytes=B * (h + 2 * V) * shape.act_bytes + 2 * B * r * 4.0,
            gemm_m_tokens=B,
            kernels=2,
        )
    ]


# -------------------------------------------------------------------------- adapter_config.json


def read_adapter_config(text: str, where: str = "adapter_config.json") -> LoRAAdapter:
    """A PEFT ``adapter_config.json`` -> ``LoRAAdapter`` (r, lora_alpha, target_modules), bounded.

    vLLM reads the same keys (``vllm/lora/peft_helper.py`` ``PEFTHelper``: ``r``, ``lora_alpha`` and
    ``target_modules`` required; the rank it checks against --max-lora-rank is the largest of ``r`` and
    ``rank_pattern``'s values). ``target_modules`` may be a list or one string (a regex or "all-linear").
    """
    hint = "Pass the adapter's adapter_config.json as PEFT writes it (keys r, lora_alpha, target_modules)."
    data = loads_bounded(text, where, hint=hint)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}.", hint=hint)
    missing = [key for key in ("r", "lora_alpha", "target_modules") if key not in data]
    if missing:
        raise ConfigError(f"{where}: missing key {', '.join(repr(k) for k in missing)}.", hint=hint)
    ranks = [data["r"], *dict(data.get("rank_pattern") or {}).values()]
    for value in ranks:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}: 'r' (and rank_pattern) must be positive integers, got {value!r}.", hint=hint)
    alpha = data["lora_alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise ConfigError(f"{where}: 'lora_alpha' must be a number, got {alpha!r}.", hint=hint)
    targets = data["target_modules"]
    targets = [targets] if isinstance(targets, str) else targets
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise ConfigError(
            f"{where}: 'target_modules' must be a module name or a list of them, got {data['target_modules']!r}.",
            hint=hint,
        )
    rank = max(ranks)
    if rank > 512:
        raise ConfigError(f"{where}: 'r' = {rank} is above vLLM's largest --max-lora-rank, 512.", hint=hint)
    return LoRAAdapter(r=rank, lora_alpha=float(alpha), target_modules=tuple(targets))


def load_adapter_config(path: str | os.PathLike[str]) -> LoRAAdapter:
    """``read_adapter_config`` of a file (or of ``adapter_config.json`` in a folder), at most 1 MiB read."""
    file = Path(path)
    if file.is_dir():
        file = file / "adapter_config.json"
    try:
        with file.open("rb") as fh:
            raw = fh.read(MAX_ADAPTER_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(
            f"--lora-config {path}: cannot read it ({err.strerror or err}).",
            hint="Name an adapter_config.json, or the adapter's folder holding one.",
        ) from None
    if len(raw) > MAX_ADAPTER_CONFIG_BYTES:
        raise ConfigError(
            f"--lora-config {path}: larger than {MAX_ADAPTER_CONFIG_BYTES:,} bytes "
            "(an adapter_config.json is a few KB).",
            hint="Name the adapter's adapter_config.json, not its weights.",
        )
    return read_adapter_config(raw.decode("utf-8", errors="replace"), f"--lora-config {file}")
