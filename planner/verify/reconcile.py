"""Reconcile: re-plan the deployment a vLLM startup log describes, and compare term by term.

``reconcile(report)`` reads the scenario out of a parsed log (``planner.verify.vllm_log``): the
model (catalog, local file or Hub), the card (the GPU total memory the log printed, matched to a
hardware profile), TP/PP, max_model_len, gpu_memory_utilization, block size, KV dtype and
``--enforce-eager``. Values given as ``overrides`` (the command line) win over the log. The
planner's memory plan of that scenario is then set beside what vLLM printed:

    term              planner                           vLLM printed
    weights           exact, from config.json           "Loading model weights took" / "Model loading took"
    non_torch         estimate (CUDA ctx, NCCL)         "non_torch_memory"
    activation_peak   estimate (profiling forward)      "PyTorch activation peak" / "torch peak increase"
    cuda_graphs       estimate (graph pool)             "Graph capturing finished ..., took X GiB"
    kv_cache_memory   requested - the four above        "Available KV cache memory" / "kv_cache_size"
    num_gpu_blocks    kv_cache_memory // block bytes    "# GPU blocks"
    kv_cache_tokens   blocks x block size (per group)   "GPU KV cache size: N tokens"
    max_concurrency   blocks / blocks per request       "Maximum concurrency for N tokens per request"

``difference_pct = (predicted - reported) / |reported| x 100``: positive means the planner
predicts more than vLLM printed. The KV budget is a difference of large numbers, so a small error
in one overhead moves it; ``kv_gap_by_term`` says how many bytes of the KV gap each term explains.

Calibration. The three overheads cannot be read from a config.json; a log measures them.
``adopt_overheads`` stores them for the card and the vLLM version in a small YAML file under the
user's calibration folder (``planner.hardware.user_dir()``: ``$PLANNER_CALIBRATION_DIR``, else
``~/.cache/llm-planner/hardware``), in its ``overheads/`` subfolder so the hardware-profile loader,
which reads every YAML file of that folder as a card, never sees it:
``<calibration folder>/overheads/memory_overheads.yaml``::

    # planner memory-overhead calibration (python -m planner reconcile LOG --adopt) ...
    version: 1
    entries:
    - card: l40s                       # hardware profile id
      engine_version: 0.11.0           # vLLM version as the log printed it
      tp: 1                            # tensor-parallel size it was measured at
      non_torch_memory_bytes: 375809638
      activation_peak_bytes: 1395864371
      activation_ratio: 1.07           # measured / the planner's formula, same scenario
      cuda_graph_memory_bytes: 773094113
      model: ibm-granite/granite-4.0-micro
      max_num_batched_tokens: 2048
      adopted_at: '2025-11-14T14:30:00+00:00'
      source: server.log

One entry per (card, engine_version, tp); adopting again replaces it. ``load_overheads`` finds
the entry for a card and version (exact version first, then the same major.minor; exact TP first,
then the same single-GPU / multi-GPU class, since NCCL buffers only exist with TP > 1), and
``apply_overheads`` turns it into the Scenario's overrides ``non_torch_memory_bytes`` and
``cuda_graph_memory_bytes``, which the memory plan then uses instead of its estimates. The
activation peak is stored but not applied: the Scenario has no field for it (it scales with
``max_num_batched_tokens`` and the model, so the ratio is what carries over).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.engine import DEFAULT_ENGINE, EngineError, parse_version, resolve_engine
from planner.errors import ConfigError, HubUnavailableError, ModelNotFoundError, ScenarioError
from planner.estimate.memory import MemoryPlan, plan_memory, terms_outside
from planner.estimate.resolve import KV_DTYPES, Resolved
from planner.hardware import (
    CALIBRATED_SUFFIX,
    HardwareProfile,
    get_profile,
    load_profiles,
    profile_from_detected,
    user_dir,
)
from planner.model.families import build_spec
from planner.model.quantization import canonical_dtype
from planner.model.sources import load_config
from planner.model.spec import ModelSpec
from planner.scenario import DEFAULT_GPU_MEMORY_UTILIZATION, Scenario
from planner.units import GiB, fmt_gib
from planner.verify.vllm_log import VllmStartupReport

__all__ = [
    "OverheadCalibration",
    "ReconcileTerm",
    "Reconciliation",
    "adopt_overheads",
    "apply_overheads",
    "card_from_memory",
    "load_overheads",
    "overheads_path",
    "reconcile",
    "scenario_from_report",
]

_SPEC = ConfigDict(frozen=True, extra="forbid")

TermName = Literal[
    "weights",
    "non_torch",
    "activation_peak",
    "cuda_graphs",
    "kv_cache_memory",
    "num_gpu_blocks",
    "kv_cache_tokens",
    "max_concurrency",
]
TERM_UNITS: dict[str, str] = {
    "weights": "bytes",
    "non_torch": "bytes",
    "activation_peak": "bytes",
    "cuda_graphs": "bytes",
    "kv_cache_memory": "bytes",
    "num_gpu_blocks": "blocks",
    "kv_cache_tokens": "tokens",
    "max_concurrency": "requests",
}
CARD_MEMORY_TOLERANCE = 0.005
"""A card matches by memory when its CUDA total is within 0.5% of the printed total (vLLM prints
0.01 GiB steps; the profiles' totals are runtime printouts, so the right card is within ~0.1%)."""
V0_PROFILE = "vllm-v0"
"""The engine profile a V0 log is planned with when its printed version is not one of a V0 profile's (a V0 engine of
0.8-0.10 under VLLM_USE_V1=0, or no version printed): its scheduler defaults (chunked prefill only above 32K tokens of
context, max_num_seqs 256 on every card, the step budget by version: planner/engines/vllm-v0.yaml)."""
V1_DEFAULT_FROM = (0, 8)
"""vLLM 0.8.0 made the V1 engine the default."""
OVERHEADS_SUBDIR = "overheads"
OVERHEADS_FILE = "memory_overheads.yaml"
_MODEL_SUFFIXES = ("-Instruct", "-instruct", "-Chat", "-chat", "-it")


class ReconcileTerm(BaseModel):
    """One memory or capacity figure: the planner's prediction beside what vLLM printed."""

    model_config = _SPEC

    name: TermName = Field(
        description="Which figure: weights, non_torch, activation_peak, cuda_graphs, kv_cache_memory, "
        "num_gpu_blocks, kv_cache_tokens, max_concurrency."
    )
    unit: str = Field(description="Unit of predicted and reported: bytes (per GPU), blocks, tokens or requests.")
    predicted: int | float | None = Field(
        description="The planner's value for the scenario read from the log, in unit."
    )
    reported: int | float | None = Field(description="What vLLM printed, in unit; None when the log does not say.")
    difference_pct: float | None = Field(
        description="(predicted - reported) / |reported| x 100, percent; positive: the planner predicts more. "
        "None when either side is unknown or reported is 0."
    )
    predicted_kind: Literal["exact", "estimate", "calibrated", "given"] = Field(
        description="'exact' (follows from config.json), 'estimate' (planner default), 'calibrated' (from an adopted "
        "calibration) or 'given' (an override on the command line)."
    )
    reported_how: str = Field(description="Which log line the reported value comes from, or why it is unknown.")


class Reconciliation(BaseModel):
    """A vLLM startup log re-planned: the scenario it describes and every term side by side."""

    model_config = _SPEC

    model: str = Field(description="Model the planner used (repo id, catalog name or path).")
    model_source: str = Field(description="Where its config.json came from (catalog entry, Hub URL, file).")
    card: str = Field(description="Hardware profile id used, e.g. 'l40s' or 'detected-gpu-with-23.58-gib'.")
    card_name: str = Field(description="The card's name.")
    card_how: str = Field(
        description="How the card was chosen: given, matched by the printed total memory, or detected."
    )
    engine: Literal["V0", "V1"] | None = Field(
        description="vLLM engine generation the log was read as; None if unknown."
    )
    engine_version: str | None = Field(description="vLLM version the log printed; None when it does not say.")
    scenario: Scenario = Field(description="The scenario as read from the log, with the overrides applied.")
    resolved: Resolved = Field(
        description="That scenario with vLLM's defaults filled in (block size, token budget, ...)."
    )
    terms: list[ReconcileTerm] = Field(description="Predicted vs reported, one row per term.")
    kv_gap_by_term: dict[str, int] = Field(
        description="Bytes each term adds to the KV-budget gap (planner minus vLLM), per GPU: requested memory counts "
        "with +, weights and overheads with -, only terms the log prints; 'not_itemized' is the rest (terms the log "
        "does not print, rounding). Sums to the kv_cache_memory gap when the log prints the KV budget."
    )
    memory_verdict: str = Field(description="The memory plan's one-line verdict for this scenario.")
    summary: str = Field(description="One line: how close the plan is and where the largest gap comes from.")
    read_from_log: dict[str, Any] = Field(description="Scenario fields the log stated, as read (before overrides).")
    overridden: dict[str, Any] = Field(
        description="Scenario fields given as overrides that the log stated differently "
        "or not at all: field -> {'log': value, 'given': value}."
    )
    assumptions: list[str] = Field(description="Fields the log did not state, and the default used instead.")
    warnings: list[str] = Field(description="The log parser's warnings and anything else to know.")
    calibration_used: str | None = Field(
        None, description="The adopted calibration entry the predictions used (card, version, tp), if any."
    )
    workers: int = Field(description="Worker processes whose memory lines were read (the summary is their minimum).")


class OverheadCalibration(BaseModel):
    """Memory overheads measured by vLLM on one card and version, adopted from a startup log."""

    model_config = _SPEC

    card: str = Field(description="Hardware profile id the log was matched to.")
    engine_version: str = Field(description="vLLM version as printed ('unknown' when the log did not say).")
    tp: int = Field(ge=1, description="Tensor-parallel size the overheads were measured at.")
    non_torch_memory_bytes: int | None = Field(
        None, ge=0, description="CUDA context, NCCL, cuBLAS memory per GPU, bytes."
    )
    activation_peak_bytes: int | None = Field(
        None, ge=0, description="Activation peak of vLLM's profiling run per GPU, bytes."
    )
    activation_ratio: float | None = Field(
        None, gt=0, description="Measured activation peak / the planner's formula for the same scenario; unitless."
    )
    cuda_graph_memory_bytes: int | None = Field(
        None, ge=0, description="CUDA-graph pool per GPU, bytes (a printed negative value is stored as 0)."
    )
    model: str = Field(description="Model the log served (the overheads depend on it a little).")
    max_num_batched_tokens: int = Field(
        ge=1, description="Token budget of the profiling run the activation was measured at."
    )
    adopted_at: str = Field(description="When it was adopted, ISO 8601 UTC.")
    source: str = Field(description="Where it came from: the log file, or 'pasted log'.")

    def scenario_updates(self) -> dict[str, int]:
        """The Scenario fields this calibration sets: non_torch_memory_bytes, cuda_graph_memory_bytes."""
        out: dict[str, int] = {}
        if self.non_torch_memory_bytes is not None:
            out["non_torch_memory_bytes"] = self.non_torch_memory_bytes
        if self.cuda_graph_memory_bytes is not None:
            out["cuda_graph_memory_bytes"] = self.cuda_graph_memory_bytes
        return out


# ------------------------------------------------------------------------------- reading


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    """'0.11.2rc1+rhai0.cuda' -> (0, 11, 2); None when no leading number."""
    if not version:
        return None
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not match:
        return None
    return tuple(int(g) for g in match.groups() if g is not None)


def _default_utilization(version: str | None, generation: Literal["V0", "V1"] | None) -> float:
    """vLLM's default --gpu-memory-utilization for a log: that of the engine profile it is planned with
    (``_log_engine``), else of the newest release."""
    profile, at = resolve_engine(_log_engine(version, generation) or DEFAULT_ENGINE)
    return profile.gpu_memory_utilization_at(at) or DEFAULT_GPU_MEMORY_UTILIZATION


def _log_engine(version: str | None, generation: Literal["V0", "V1"] | None) -> str | None:
    """The engine version a log is planned with, so that its release's rules apply (scheduler defaults, memory
    fraction, graph pool): ``vllm@VERSION`` when a profile holds the printed release (for a V0 log, a V0-era profile:
    one that ends by 0.8.0); else ``V0_PROFILE`` for a V0 log, None (the newest release) for any other."""
    numbers = _version_tuple(version)
    if numbers is not None:
        spec = "vllm@" + ".".join(map(str, numbers))
        try:
            profile, _ = resolve_engine(spec)
        except EngineError:  # a release no profile holds
            return V0_PROFILE if generation == "V0" else None
        ends_by_v1 = profile.max_version is not None and parse_version(profile.max_version)[:2] <= V1_DEFAULT_FROM
        if generation != "V0" or ends_by_v1:
            return spec
    return V0_PROFILE if generation == "V0" else None


def engine_generation(report: VllmStartupReport) -> tuple[Literal["V0", "V1"] | None, str | None]:
    """V0 or V1, and how it was decided (None when it had to be assumed)."""
    if report.engine is not None:
        return report.engine, None
    version = _version_tuple(report.vllm_version)
    if version is not None:
        generation: Literal["V0", "V1"] = "V1" if version[:2] >= V1_DEFAULT_FROM else "V0"
        return generation, f"engine read as {generation} from vLLM {report.vllm_version} (V1 is the default from 0.8.0)"
    if report.peak_torch_memory_bytes is not None:
        return "V0", "engine read as V0: the 'Memory profiling results: ... peak_torch_memory=' line is V0 0.6.4-0.6.5"
    return None, None


def card_from_memory(total_memory_bytes: int) -> tuple[HardwareProfile, str]:
    """The card whose CUDA total is closest to the printed total (within 0.5%), else a detected profile.

    The printed total replaces the profile's own, so the plan starts from what vLLM saw. Cards with
    the same memory (an RTX 3090 and 4090 both print about 23.6 GiB) cannot be told apart by memory;
    the bandwidth and FLOP/s of the match do not enter a memory plan.
    """
    candidates = []
    for profile in load_profiles().values():
        if profile.kind != "gpu" or profile.id.endswith(CALIBRATED_SUFFIX):
            continue
        off = abs(profile.memory_bytes - total_memory_bytes) / total_memory_bytes
        if off <= CARD_MEMORY_TOLERANCE:
            candidates.append((off, profile.id, profile))
    printed = f"{total_memory_bytes / GiB:.2f} GiB"
    if candidates:
        candidates.sort(key=lambda c: (c[0], c[1]))
        best = candidates[0][2]
        others = [c[1] for c in candidates[1:]]
        how = (
            f"matched by the printed total memory {printed} to {best.id} ({best.memory_bytes / GiB:.2f} GiB)"
            + (f"; also within 0.5%: {', '.join(others)}" if others else "")
            + "; planned with the printed total. Pass --gpu to name the card."
        )
        return best.model_copy(update={"memory_bytes": total_memory_bytes}), how
    detected = profile_from_detected(f"GPU with {printed}", total_memory_bytes)
    how = (
        f"no hardware profile has {printed} (within 0.5%); a detected profile with that memory is used "
        "(bandwidth and FLOP/s unknown, which a memory plan does not need)"
    )
    return detected, how


def _kv_dtype(raw: str | None) -> tuple[str | None, str | None]:
    """The log's kv_cache_dtype as a planner KV dtype ('fp8_e4m3' -> 'fp8'); a note when unknown."""
    if raw is None:
        return None, None
    name = canonical_dtype(raw)
    if name.startswith("fp8"):
        name = "fp8"
    if name in KV_DTYPES:
        return name, None
    return (
        None,
        f"kv_cache_dtype {raw!r} from the log is not one the planner models ({', '.join(KV_DTYPES)}); auto used",
    )


_MAX_MODEL_NAME_CHARS = 4096
"""Longest model name or path taken from a log (Linux PATH_MAX; a Hub id is under 100 characters)."""
_MAX_NAME_PART_CHARS = 255
"""Longest part between slashes (Linux NAME_MAX: a longer one cannot name a file)."""


def _load_model(name: str, token: str | None = None) -> tuple[ModelSpec, str, list[str]]:
    """The spec of the model the log names; offline, an -Instruct/-Chat name falls back to its base in the catalog."""
    longest = max(len(part) for part in name.split("/"))
    if len(name) > _MAX_MODEL_NAME_CHARS or longest > _MAX_NAME_PART_CHARS or not name.isprintable():
        raise ScenarioError(
            f"the log's model name is {len(name):,} "
            f"characters{'' if name.isprintable() else ' with control characters'} "
            f"({name[:60]!r}...); a name or path of printable characters, at most {_MAX_NAME_PART_CHARS} between two "
            f"slashes and {_MAX_MODEL_NAME_CHARS:,} in all, is read.",
            hint="Pass MODEL: a catalog name, a Hub repo id or a path to its config.json.",
        )
    try:
        loaded = load_config(name, token=token)
    except (ModelNotFoundError, HubUnavailableError) as first:
        for suffix in _MODEL_SUFFIXES:
            if suffix in name:
                base = name.split(suffix)[0]
                try:
                    loaded = load_config(base, prefer="catalog")
                except ModelNotFoundError:
                    continue
                note = (
                    f"the log's model {name} could not be loaded ({first.message}); planned with the catalog's "
                    f"{loaded.name}, whose config.json has the same architecture (an {suffix.lstrip('-')} "
                    "variant is fine-tuned from it). Pass MODEL to choose another."
                )
                spec = build_spec(loaded.config, loaded.name)
                return spec, loaded.source, [note, *loaded.warnings]
        raise type(first)(
            first.message,
            hint=(first.hint or "") + " Or pass MODEL: a catalog name, a Hub repo id or "
            "a path to the config.json of the model the log served.",
        ) from None
    spec = build_spec(loaded.config, loaded.name)
    return spec, loaded.source, list(loaded.warnings)


def scenario_from_report(
    report: VllmStartupReport, model: ModelSpec, hw: HardwareProfile
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Scenario fields the log states, the defaults chosen for what it does not, and the assumptions made.

    Returns (read, defaults, assumptions): ``read`` holds only what the log printed; ``defaults``
    fills the rest the way vLLM of that generation would (V0: its engine profile, with chunked prefill only
    above 32K tokens, max_num_seqs 256).
    """
    read: dict[str, Any] = {"gpu": hw.id}
    defaults: dict[str, Any] = {}
    notes: list[str] = []
    generation, how = engine_generation(report)
    if how:
        notes.append(how)
    if report.tensor_parallel_size is not None:
        read["tp"] = report.tensor_parallel_size
    else:
        workers = len([w for w in report.per_worker if w.model_weights_bytes is not None])
        extra = f"; {workers} worker processes printed weights, so TP may be larger: pass --tp" if workers > 1 else ""
        notes.append("tensor_parallel_size not in the log; 1 assumed" + extra)
    if report.pipeline_parallel_size is not None:
        read["pp"] = report.pipeline_parallel_size
    if report.data_parallel_size is not None and report.data_parallel_size > 1:
        read["data_parallel_size"] = report.data_parallel_size  # the log is one DP rank's engine
    if report.enable_expert_parallel:
        read["enable_expert_parallel"] = True
    if report.max_model_len is not None:
        read["max_model_len"] = report.max_model_len
    else:
        notes.append(f"max_model_len not in the log; the model's maximum {model.max_position_embeddings:,} assumed")
    if report.gpu_memory_utilization is not None:
        read["gpu_memory_utilization"] = report.gpu_memory_utilization
    elif report.requested_memory_bytes and report.total_gpu_memory_bytes:
        ratio = round(report.requested_memory_bytes / report.total_gpu_memory_bytes, 2)
        read["gpu_memory_utilization"] = ratio
        notes.append(f"gpu_memory_utilization {ratio} derived from the printed requested / total memory")
    else:
        default = _default_utilization(report.vllm_version, generation)
        if default != DEFAULT_GPU_MEMORY_UTILIZATION:
            defaults["gpu_memory_utilization"] = default
        notes.append(
            "gpu_memory_utilization not in the log; vLLM's default of that release "
            f"({defaults.get('gpu_memory_utilization', DEFAULT_GPU_MEMORY_UTILIZATION)}) "
            "assumed"
        )
    if report.block_size is not None:
        read["block_size"] = report.block_size
    else:
        notes.append("block size not in the log; vLLM's default (16, or 64 for MLA) assumed")
    kv, kv_note = _kv_dtype(report.kv_cache_dtype)
    if kv is not None:
        read["kv_cache_dtype"] = kv
    elif kv_note:
        notes.append(kv_note)
    if report.enforce_eager is not None:
        read["engine"] = "eager" if report.enforce_eager else "cuda-graphs"
    elif report.cuda_graph_bytes is not None:
        read["engine"] = "cuda-graphs"
    else:
        notes.append("--enforce-eager not stated; CUDA graphs (vLLM's default) assumed")
    if report.max_num_batched_tokens is not None:
        read["max_num_batched_tokens"] = report.max_num_batched_tokens
    # that release's rules (V0: its step budget, max_num_seqs and chunked prefill, on only above 32K tokens of
    # context with its exemptions, at the max_model_len finally planned; every release: the memory fraction and
    # where the graph pool sits)
    planned_engine = _log_engine(report.vllm_version, generation)
    if planned_engine is not None:
        defaults["engine_version"] = planned_engine
    if planned_engine is not None and read.get("engine") != "eager":
        profile, at = resolve_engine(planned_engine)
        if not profile.reserves_graph_memory_at(at):
            notes.append(
                f"vLLM {report.vllm_version or '(V0)'} sized the KV cache before capturing CUDA graphs (releases "
                "before 0.21.0): the graph pool is not taken from the KV budget, it needs memory beyond "
                "gpu_memory_utilization"
            )
    weight_dtype = _weight_dtype(report, model, notes)
    if weight_dtype is not None:
        read["weight_dtype"] = weight_dtype
    return read, defaults, notes


def _v0_chunking_note(generation: Literal["V0", "V1"] | None, sc: Scenario, res: Resolved) -> list[str]:
    """For a V0 log planned without a printed step budget: whether V0 chunked its prefill at the planned context
    (on only above the long-context threshold of its profile), and so what the profiling run covered."""
    if generation != "V0" or sc.max_num_batched_tokens is not None or sc.enable_chunked_prefill is not None:
        return []
    profile, _ = resolve_engine(sc.engine_version or V0_PROFILE)
    rule = profile.chunked_prefill_long_context
    above = f" (V0 enabled it only above {rule.above_tokens:,} tokens)" if rule is not None else ""
    chunked = res.enable_chunked_prefill
    covered = "the default token budget" if chunked else f"{res.max_model_len:,} tokens (max_model_len)"
    return [f"V0 engine: chunked prefill {'on' if chunked else 'off'}{above}, so the profiling run covers {covered}"]


def _weight_dtype(report: VllmStartupReport, model: ModelSpec, notes: list[str]) -> str | None:
    """--quantization fp8 on an unquantized checkpoint is online FP8; a dtype other than the checkpoint's is kept."""
    method = (report.quantization or "").lower()
    if method and model.quantization is None:
        if method == "fp8":
            return "fp8"
        notes.append(
            f"the log says quantization={report.quantization} but {model.name}'s config.json has no "
            "quantization_config; planned unquantized (pass --weight-dtype)"
        )
        return None
    if method or report.dtype is None or model.quantization is not None:
        return None
    served = canonical_dtype(report.dtype)
    if served in ("fp16", "bf16", "fp32") and served != model.dtype:
        return served
    return None


# --------------------------------------------------------------------------- reconciling


def _pct(predicted: float | None, reported: float | None) -> float | None:
    if predicted is None or reported is None or reported == 0:
        return None
    return (predicted - reported) / abs(reported) * 100.0


def reconcile(
    report: VllmStartupReport,
    overrides: dict[str, Any] | None = None,
    hw: HardwareProfile | None = None,
    *,
    model: ModelSpec | str | None = None,
    token: str | None = None,
    use_calibration: bool = False,
    calibration_path: str | os.PathLike[str] | None = None,
) -> Reconciliation:
    """Re-plan the scenario ``report`` describes and compare every memory term with the log.

    ``overrides``: Scenario fields that win over the log (``{"tp": 2, "gpu": "l40s"}``), e.g. from
    the command line. ``hw``: the card, when known (else ``overrides['gpu']``, else matched by the
    printed total memory). ``model``: a spec or a name, when the log does not name the model or
    names one that cannot be loaded; ``token`` is sent to the Hub for a gated one.
    ``use_calibration``: plan with the overheads adopted earlier for this card and vLLM version
    (``adopt_overheads``; ``calibration_path`` names another file than ``overheads_path()``).
    """
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    warnings = list(report.warnings)
    assumptions: list[str] = []

    if isinstance(model, ModelSpec):
        spec, model_source = model, f"given ({model.name})"
    else:
        name = model or report.model
        if not name:
            raise ScenarioError(
                "the log does not name the model (no 'Initializing ... engine with config: model=...', "
                "'non-default args' or 'vllm serve MODEL' line).",
                hint="Pass MODEL: a catalog name, a Hub repo id or a path to its config.json.",
            )
        spec, model_source, notes = _load_model(name, token)
        assumptions += notes

    card_how = "given"
    if hw is None and "gpu" in overrides:
        hw = get_profile(overrides["gpu"])
        card_how = "given on the command line"
    if hw is not None and report.total_gpu_memory_bytes:
        off = abs(hw.memory_bytes - report.total_gpu_memory_bytes) / report.total_gpu_memory_bytes
        if off > CARD_MEMORY_TOLERANCE:
            warnings.append(
                f"{hw.id} has {hw.memory_bytes / GiB:.2f} GiB but the log printed "
                f"{report.total_gpu_memory_bytes / GiB:.2f} "
                "GiB; planned with the card's own total"
            )
    if hw is None:
        if not report.total_gpu_memory_bytes:
            raise ScenarioError(
                "the log does not print the GPU's total memory, so the card is unknown.",
                hint="Pass --gpu ID (python -m planner hardware lists the cards).",
            )
        hw, card_how = card_from_memory(report.total_gpu_memory_bytes)
    overrides.pop("gpu", None)

    read, defaults, notes = scenario_from_report(report, spec, hw)
    assumptions += notes
    fields = {**defaults, **read}
    overridden = {
        key: {"log": read.get(key), "given": value} for key, value in overrides.items() if read.get(key) != value
    }
    fields.update(overrides)
    fields["gpu"] = hw.id
    calibration_used = None
    if use_calibration:
        cal = load_overheads(hw.id, report.vllm_version or "unknown", tp=fields.get("tp", 1), path=calibration_path)
        if cal is not None:
            for key, value in cal.scenario_updates().items():
                if key not in overrides:
                    fields[key] = value
            calibration_used = f"{cal.card} / vLLM {cal.engine_version} / tp {cal.tp} (adopted {cal.adopted_at})"
        else:
            warnings.append(
                f"no adopted calibration for {hw.id} and vLLM {report.vllm_version or 'unknown'}; "
                "planner estimates used"
            )
    try:
        sc = Scenario(**fields)
    except ValidationError as err:
        raise ScenarioError(
            f"the log's settings do not form a valid scenario: {err.errors()[0]['msg']} (fields {sorted(fields)})",
            hint="Override the offending value on the command line.",
        ) from None
    plan = plan_memory(spec, hw, sc, suggest=False)
    assumptions += _v0_chunking_note(engine_generation(report)[0], sc, plan.resolved)
    overhead_kind = "calibrated" if calibration_used else "estimate"
    terms = _terms(report, plan, sc, overrides, overhead_kind)
    gap = _kv_gap(report, plan)
    generation, _ = engine_generation(report)
    return Reconciliation(
        model=spec.name,
        model_source=model_source,
        card=hw.id,
        card_name=hw.name,
        card_how=card_how,
        engine=generation,
        engine_version=report.vllm_version,
        scenario=sc,
        resolved=plan.resolved,
        terms=terms,
        kv_gap_by_term=gap,
        memory_verdict=plan.reason,
        summary=_summary(terms, gap, plan),
        read_from_log=read,
        overridden=overridden,
        assumptions=assumptions,
        warnings=warnings,
        calibration_used=calibration_used,
        workers=max(1, len(report.per_worker)),
    )


def _reported_activation(report: VllmStartupReport) -> tuple[int | None, str]:
    if report.activation_peak_bytes is not None:
        return report.activation_peak_bytes, "printed activation / torch peak increase"
    if report.peak_torch_memory_bytes is not None and report.model_weights_bytes is not None:
        return (
            report.peak_torch_memory_bytes - report.model_weights_bytes,
            "derived: peak_torch_memory - weights (V0 0.6.4 prints the absolute torch peak)",
        )
    return None, "not printed"


def _terms(
    report: VllmStartupReport, plan: MemoryPlan, sc: Scenario, overrides: dict[str, Any], overhead_kind: str
) -> list[ReconcileTerm]:
    activation, activation_how = _reported_activation(report)
    graphs_how = (
        "printed 'Graph capturing finished ..., took X GiB'"
        if report.cuda_graph_bytes is not None
        else ("not printed" if sc.engine != "eager" else "not printed (eager: no graphs)")
    )
    if report.cuda_graph_bytes is not None and report.cuda_graph_bytes <= 0:
        graphs_how += " (zero or negative: allocator noise, not compared)"

    def kind(*fields: str) -> str:
        return "given" if any(f in overrides for f in fields) else overhead_kind

    rows = [
        (
            "weights",
            plan.weight_bytes_per_gpu,
            report.model_weights_bytes,
            "exact",
            "printed model weights / model loading" if report.model_weights_bytes is not None else "not printed",
        ),
        (
            "non_torch",
            plan.non_torch_bytes_per_gpu,
            report.non_torch_memory_bytes,
            kind("non_torch_memory_bytes"),
            "printed non_torch_memory" if report.non_torch_memory_bytes is not None else "not printed",
        ),
        ("activation_peak", plan.activation_bytes_per_gpu, activation, "estimate", activation_how),
        (
            "cuda_graphs",
            plan.cuda_graph_bytes_per_gpu,
            report.cuda_graph_bytes,
            kind("cuda_graph_memory_bytes", "engine"),
            graphs_how,
        ),
        (
            "kv_cache_memory",
            plan.kv_cache_bytes_per_gpu,
            report.kv_cache_memory_bytes,
            overhead_kind,
            "printed available KV cache memory" if report.kv_cache_memory_bytes is not None else "not printed",
        ),
        (
            "num_gpu_blocks",
            plan.num_gpu_blocks,
            report.num_gpu_blocks,
            overhead_kind,
            "printed '# GPU blocks'" if report.num_gpu_blocks is not None else "not printed",
        ),
        (
            "kv_cache_tokens",
            plan.kv_cache_tokens,
            report.kv_cache_tokens,
            overhead_kind,
            "printed KV cache size in tokens" if report.kv_cache_tokens is not None else "not printed (not derived)",
        ),
        (
            "max_concurrency",
            plan.max_concurrency,
            report.max_concurrency,
            overhead_kind,
            f"printed for {report.max_concurrency_tokens_per_request:,} tokens per request"
            if report.max_concurrency is not None and report.max_concurrency_tokens_per_request
            else ("printed" if report.max_concurrency is not None else "not printed"),
        ),
    ]
    out = []
    for name, predicted, reported, predicted_kind, how in rows:
        compared = reported if not (name == "cuda_graphs" and reported is not None and reported <= 0) else None
        out.append(
            ReconcileTerm(
                name=name,
                unit=TERM_UNITS[name],
                predicted=predicted,
                reported=reported,
                difference_pct=_pct(predicted, compared),
                predicted_kind=predicted_kind,
                reported_how=how,
            )
        )
    return out


def _kv_gap(report: VllmStartupReport, plan: MemoryPlan) -> dict[str, int]:
    """Bytes of (planner KV budget - vLLM KV budget) explained by each input, where both sides know it.

    The KV budget is requested - weights - non_torch - activation - graphs (the graph pool only where the release
    reserves it first: ``memory.terms_outside``), so a term the planner over-predicts by X bytes takes X bytes from
    its KV budget (entered as -X). ``not_itemized`` is what the printed terms leave unexplained: terms the log does
    not print and the printed rounding.
    """
    gap: dict[str, int] = {}
    if report.requested_memory_bytes is not None:
        gap["requested_memory"] = plan.requested_memory_bytes_per_gpu - report.requested_memory_bytes
    pairs = (
        ("weights", plan.weight_bytes_per_gpu, report.model_weights_bytes),
        ("non_torch", plan.non_torch_bytes_per_gpu, report.non_torch_memory_bytes),
        ("activation_peak", plan.activation_bytes_per_gpu, _reported_activation(report)[0]),
        (
            "cuda_graphs",
            plan.cuda_graph_bytes_per_gpu,
            None if report.cuda_graph_bytes is None else max(report.cuda_graph_bytes, 0),
        ),
    )
    outside = terms_outside(plan.resolved)
    for name, predicted, reported in pairs:
        if reported is not None and name not in outside:
            gap[name] = -(predicted - reported)
    if report.kv_cache_memory_bytes is not None:
        gap["not_itemized"] = plan.kv_cache_bytes_per_gpu - report.kv_cache_memory_bytes - sum(gap.values())
    return gap


def _summary(terms: list[ReconcileTerm], gap: dict[str, int], plan: MemoryPlan) -> str:
    compared = [t for t in terms if t.difference_pct is not None]
    if not compared:
        return "the log prints no figure the planner predicts; nothing to compare"
    parts = [f"{t.name} {t.difference_pct:+.1f}%" for t in compared]
    worst = max(compared, key=lambda t: abs(t.difference_pct or 0.0))
    line = f"{len(compared)} terms compared ({', '.join(parts)}); largest gap: {worst.name}"
    if gap and "not_itemized" in gap:
        total = sum(gap.values())
        name, value = max(gap.items(), key=lambda kv: abs(kv[1]))
        line += (
            f". The planner's KV budget is {total / GiB:+.2f} GiB off; the largest share, {value / GiB:+.2f} GiB, "
            f"comes from {name.replace('_', ' ')}"
        )
        graphs = plan.cuda_graph_bytes_per_gpu
        if name == "not_itemized" and graphs and abs(-value - graphs) <= 0.3 * graphs:
            line += (
                f", about the planner's CUDA-graph pool ({graphs / GiB:.2f} GiB): this vLLM did not take graph "
                "memory from the KV budget"
            )
    return line


# ---------------------------------------------------------------------------- calibration


def overheads_path() -> Path:
    """The calibration file: ``<planner.hardware.user_dir()>/overheads/memory_overheads.yaml``."""
    return user_dir() / OVERHEADS_SUBDIR / OVERHEADS_FILE


def _read_entries(path: Path) -> list[OverheadCalibration]:
    if not path.exists():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return [OverheadCalibration.model_validate(e) for e in data.get("entries", [])]
    except (yaml.YAMLError, ValidationError, AttributeError, TypeError) as err:
        raise ConfigError(
            f"the calibration file {path} is not valid ({type(err).__name__}: {str(err).splitlines()[0]}).",
            hint="Fix or delete it; `python -m planner reconcile LOG --adopt` writes a new one.",
        ) from None


def measured_overheads(rec: Reconciliation, source: str = "pasted log") -> OverheadCalibration:
    """The overheads a reconciliation measured, as a calibration entry (not written)."""
    by_name = {t.name: t for t in rec.terms}
    non_torch = by_name["non_torch"].reported
    activation = by_name["activation_peak"].reported
    graphs = by_name["cuda_graphs"].reported
    if non_torch is None and activation is None and graphs is None:
        raise ConfigError(
            "the log prints none of the overhead terms (non-torch memory, activation peak, CUDA-graph memory), "
            "so there is nothing to adopt.",
            hint="Use a log with the 'Memory profiling' / 'model weights take ...' lines (vLLM >= 0.6.4) or with "
            "'Graph capturing finished ..., took X GiB'.",
        )
    predicted_activation = by_name["activation_peak"].predicted
    ratio = None
    if activation and predicted_activation:
        ratio = round(activation / predicted_activation, 4)
    return OverheadCalibration(
        card=rec.card,
        engine_version=rec.engine_version or "unknown",
        tp=rec.scenario.tp,
        non_torch_memory_bytes=None if non_torch is None else int(max(non_torch, 0)),
        activation_peak_bytes=None if activation is None else int(max(activation, 0)),
        activation_ratio=ratio,
        cuda_graph_memory_bytes=None if graphs is None else int(max(graphs, 0)),
        model=rec.model,
        max_num_batched_tokens=rec.resolved.max_num_batched_tokens,
        adopted_at=dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        source=source,
    )


def adopt_overheads(
    rec: Reconciliation, *, path: str | os.PathLike[str] | None = None, source: str = "pasted log"
) -> Path:
    """Write the measured non-torch, activation and CUDA-graph memory for (card, version, tp); return the file.

    An existing entry for the same card, version and TP is replaced; others are kept.
    """
    entry = measured_overheads(rec, source)
    target = Path(path).expanduser() if path is not None else overheads_path()
    entries = [
        e
        for e in _read_entries(target)
        if (e.card, e.engine_version, e.tp) != (entry.card, entry.engine_version, entry.tp)
    ]
    entries.append(entry)
    target.parent.mkdir(parents=True, exist_ok=True)
    header = (
        "# planner memory-overhead calibration, written by `python -m planner reconcile LOG --adopt`.\n"
        "# One entry per (card, vLLM version, tp): what vLLM measured at startup, in bytes per GPU.\n"
        "# The memory plan uses non_torch_memory_bytes and cuda_graph_memory_bytes instead of its estimates.\n"
    )
    data = {"version": 1, "entries": [e.model_dump(mode="json") for e in entries]}
    tmp = target.with_suffix(".yaml.tmp")
    tmp.write_text(header + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    tmp.replace(target)
    return target


def load_overheads(
    card: str, engine_version: str, *, tp: int | None = None, path: str | os.PathLike[str] | None = None
) -> OverheadCalibration | None:
    """The adopted overheads for a card and vLLM version, or None.

    Version: the exact string first, then the latest adopted entry of the same major.minor.
    TP: the same TP first, then the same class (1 vs > 1); with ``tp=None`` any TP, single-GPU first.
    """
    entries = [
        e for e in _read_entries(Path(path).expanduser() if path is not None else overheads_path()) if e.card == card
    ]
    if not entries:
        return None
    wanted = _version_tuple(engine_version)
    exact = [e for e in entries if e.engine_version == engine_version]
    same_minor = [
        e for e in entries if wanted is not None and (_version_tuple(e.engine_version) or ())[:2] == wanted[:2]
    ]
    for pool in (exact, same_minor):
        if tp is None:
            ranked = sorted(pool, key=lambda e: (e.tp != 1, _newest_first(e.adopted_at)))
        else:
            ranked = [e for e in pool if e.tp == tp] or [e for e in pool if (e.tp > 1) == (tp > 1)]
            ranked = sorted(ranked, key=lambda e: e.adopted_at, reverse=True)
        if ranked:
            return ranked[0]
    return None


def _newest_first(stamp: str) -> tuple[int, ...]:
    """Sort key putting later ISO timestamps first."""
    return tuple(-ord(ch) for ch in stamp)


def apply_overheads(sc: Scenario, cal: OverheadCalibration | None) -> Scenario:
    """The scenario with the calibration's overheads as overrides (unchanged when ``cal`` is None).

    Overrides the user already set on the scenario are kept.
    """
    if cal is None:
        return sc
    updates = {k: v for k, v in cal.scenario_updates().items() if getattr(sc, k) is None}
    return Scenario.model_validate({**sc.model_dump(), **updates}) if updates else sc


def format_term_value(value: float | None, unit: str) -> str:
    """A term as the CLI table and the Diagnose page print it: GiB for bytes, 'x' for requests, '-' if absent."""
    if value is None:
        return "-"
    if unit == "bytes":
        return fmt_gib(value, 2)
    if unit == "requests":
        return f"{value:,.2f}x"
    return f"{value:,.0f}"
