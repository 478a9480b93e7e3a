"""Static-batch latency: published ``benchmark_latency.py`` / ``vllm bench latency`` results
(``reference/static_batch_latency.json``) against the planner's static-batch estimate.

vLLM's latency benchmark sends one batch of ``batch`` prompts of ``input_len`` dummy tokens with
``max_tokens = output_len`` and ``ignore_eos``, and prints the mean wall time of ``llm.generate``
("Avg latency: X seconds"). Its defaults are batch 8, 32 in, 128 out, the nightly "latency tests"
of vLLM's CI. That run is a static batch, which ``planner.estimate.latency.estimate_latency``
already predicts:

    latency = TTFT + (output_len - 1) x TPOT
    TTFT    = prefill of batch x input_len tokens (``first_token_seconds``: the further prefill steps
              pay the host work; an offline run has no API server, and the pre-0.6 profiles'
              ``frontend_seconds_per_request`` is 0)
    TPOT    = one decode step at the mean context input + output / 2 (the decode cost is linear in
              the context, so the mean step times output - 1 is the sum of the growing steps)

Each record becomes a ``Scenario`` with ``engine_version = vllm@<version>`` (the version printed,
or the release a PR's date falls in), the card's profile and the catalog model. The engines these
records ran (vLLM 0.2-0.4, V0) prefill whole prompts, as many as fit ``max_num_batched_tokens``,
which defaults to ``max(max_model_len, 2048)`` with the model's own context length; the scenario
states that budget (``V0_MIN_BATCHED_TOKENS``). A record whose model is not in the catalog, whose
card has no profile, whose engine ran code no release carries (``not_in_release``), or whose
deployment the planner says does not start comes back as ``Unexpressed`` with the reason.

Every prediction also carries the decode step split by the ceiling that binds it (memory,
compute, interconnect, overhead) from the same roofline ``estimate_latency`` calls, so an error
can be traced to a part of the step.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import PlannerError
from planner.estimate.latency import LatencyEstimate, decode_context_len, estimate_latency
from planner.estimate.memory import plan_memory
from planner.estimate.roofline import engine_of, roofline
from planner.hardware import HardwareProfile, get_profile
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from planner.verify.public_records import catalog_model, match_gpu, match_model

_SPEC = ConfigDict(frozen=True, extra="forbid")

#: The project's cited file of static-batch measurements (reference/ at the repository root).
REFERENCE_PATH = Path(__file__).resolve().parents[2] / "reference" / "static_batch_latency.json"
#: vLLM V0's scheduler default: max_num_batched_tokens = max(max_model_len, 2048) without chunked
#: prefill (vllm/config.py SchedulerConfig, v0.2-v0.5). benchmark_latency leaves max_model_len at
#: the model's context length.
V0_MIN_BATCHED_TOKENS = 2048
#: The target of issue 16: static-batch latency within this many percent.
TARGET_ERROR_PCT = 10.0


class StaticBatchRecord(BaseModel):
    """One published static-batch latency, with the conditions it was measured under."""

    model_config = _SPEC

    index: int = Field(description="Position of the record in static_batch_latency.json (0-based).")
    source: str = Field(description="Thread URL, author, date and the block or row the number was copied from.")
    publisher: str = Field(description="Who published the number.")
    date: str = Field(description="Date of the post (ISO), from which the vLLM version is read when not printed.")
    model: str = Field(description="Model as the source names it.")
    checkpoint: str = Field(description="Checkpoint id the record is read as (the source's name, or the one assumed).")
    gpu: str = Field(description="Card as the source names it.")
    n_gpus: int = Field(ge=1, description="GPUs of the run.")
    tp: int = Field(ge=1, description="Tensor-parallel size.")
    dtype: str = Field(description="Weight and activation precision as stated (auto = the checkpoint's dtype).")
    engine: str = Field(description="Engine build the number was measured on, in words.")
    vllm_version: str = Field(description="vLLM release whose engine the run is (printed, or from the post's date).")
    not_in_release: str | None = Field(
        description="Why the measured engine is not a release the planner profiles (a PR's unmerged kernel config, "
        "code a later PR replaced); None: it is."
    )
    custom_all_reduce: bool | None = Field(
        None,
        description="Whether the measured build ran vLLM's custom all-reduce where the version's default does not "
        "say it (a PR branch measured before the change of default reached it); None: the version's default.",
    )
    command: str = Field(description="The benchmark command as printed.")
    batch: int = Field(ge=1, description="Prompts in the batch (--batch-size).")
    input_len: int = Field(ge=1, description="Prompt tokens per request (--input-len).")
    output_len: int = Field(ge=1, description="Generated tokens per request (--output-len, EOS ignored).")
    metric: str = Field(description="What was measured: avg_latency_s, the mean wall time of one generate call.")
    value: float = Field(gt=0, description="The measured number, in seconds.")
    assumed: list[str] = Field(description="Conditions the source does not print and the record assumes.")
    notes: str = Field(description="Publisher, how the version was read, caveats.")

    @property
    def thread(self) -> str:
        """The thread the record was copied from, e.g. 'vllm-project/vllm#4002'."""
        found = re.search(r"github\.com/([^/]+/[^/]+)/(?:pull|issues)/(\d+)", self.source)
        return f"{found.group(1)}#{found.group(2)}" if found else self.source.split(" ")[0]


def load_records(path: str | Path | None = None) -> list[StaticBatchRecord]:
    """The records of ``reference/static_batch_latency.json`` (or ``path``)."""
    file = Path(path) if path is not None else REFERENCE_PATH
    if not file.is_file():
        raise PlannerError(
            f"the static-batch reference file {file} does not exist.",
            hint="Run from a checkout that has reference/static_batch_latency.json, or pass its path.",
        )
    return [StaticBatchRecord(index=i, **row) for i, row in enumerate(json.loads(file.read_text()))]


# ---------------------------------------------------------------------------- expressing


class Unexpressed(BaseModel):
    """A record the planner cannot predict, and why."""

    model_config = _SPEC

    index: int = Field(description="Position in static_batch_latency.json.")
    thread: str = Field(description="Thread the record comes from.")
    model: str = Field(description="Model as published.")
    gpu: str = Field(description="Card as published.")
    tp: int = Field(description="Tensor-parallel size.")
    batch: int = Field(description="Batch size.")
    reason_kind: str = Field(description="Category of the reason, for counting.")
    reason: str = Field(description="Why the record cannot be predicted, with the specifics.")


class Unexpressible(Exception):
    """Raised while expressing a record: the kind of reason and the reason."""

    def __init__(self, kind: str, reason: str):
        self.kind, self.reason = kind, reason
        super().__init__(reason)


def _model(record: StaticBatchRecord) -> tuple[str, ModelSpec]:
    """(catalog repo id, spec) of the record's checkpoint, through the public records' name table."""
    match = match_model(record.checkpoint)
    if match is None or match.repo_id is None:
        raise Unexpressible("model not in catalog", f"{record.checkpoint} is not in the bundled catalog")
    return match.repo_id, catalog_model(match.repo_id)


def _card(record: StaticBatchRecord) -> HardwareProfile:
    _known, profile = match_gpu(record.gpu)
    if profile is None:
        raise Unexpressible("GPU not profiled", f"no hardware profile for '{record.gpu}'")
    return get_profile(profile)


def _release(record: StaticBatchRecord) -> None:
    if record.not_in_release is not None:
        raise Unexpressible("engine not a profiled release", record.not_in_release)


def scenario_for(record: StaticBatchRecord, model: ModelSpec, hw: HardwareProfile) -> Scenario:
    """The record's deployment: its card, TP, the checkpoint's precision, the vLLM version's engine
    profile, and V0's prefill budget ``max(model context, 2048)`` tokens (at most the batch's prompts).

    ``max_model_len`` is the run's own input + output (the KV cache the batch needs), so the memory
    plan checks that the batch fits; the step times do not depend on it.
    """
    budget = max(model.max_position_embeddings, V0_MIN_BATCHED_TOKENS)
    return Scenario(
        gpu=hw.id,
        tp=record.tp,
        num_gpus=record.n_gpus,
        weight_dtype="auto",
        kv_cache_dtype="auto",
        max_model_len=min(record.input_len + record.output_len, model.max_position_embeddings),
        max_num_batched_tokens=min(budget, record.batch * record.input_len),
        max_num_seqs=max(record.batch, 1),
        enable_chunked_prefill=True,
        engine_version=f"vllm@{record.vllm_version}",
        disable_custom_all_reduce=record.custom_all_reduce is False,
    )


@dataclass(frozen=True)
class Expressed:
    """A record the planner can predict: the record, the catalog model, the card and the scenario."""

    record: StaticBatchRecord
    repo_id: str
    model: ModelSpec
    hw: HardwareProfile
    sc: Scenario


def express(record: StaticBatchRecord) -> Expressed | Unexpressed:
    """The record as a planner scenario, or why it cannot be one."""
    try:
        _release(record)
        repo_id, model = _model(record)
        hw = _card(record)
        sc = scenario_for(record, model, hw)
        plan = plan_memory(model, hw, sc, suggest=False)
        if not plan.fits:
            raise Unexpressible("planner refused", f"the planner says it does not start: {plan.reason}")
    except Unexpressible as why:
        return _unexpressed(record, why.kind, why.reason)
    except PlannerError as err:
        return _unexpressed(record, "planner refused", str(err))
    return Expressed(record=record, repo_id=repo_id, model=model, hw=hw, sc=sc)


def _unexpressed(record: StaticBatchRecord, kind: str, reason: str) -> Unexpressed:
    return Unexpressed(
        index=record.index,
        thread=record.thread,
        model=record.model,
        gpu=record.gpu,
        tp=record.tp,
        batch=record.batch,
        reason_kind=kind,
        reason=reason,
    )


# ---------------------------------------------------------------------------- predicting


class StaticBatchPrediction(BaseModel):
    """One record measured vs predicted, with the predicted latency split into its parts."""

    model_config = _SPEC

    index: int = Field(description="Position in static_batch_latency.json.")
    thread: str = Field(description="Thread the record comes from.")
    model: str = Field(description="Model as published.")
    catalog_model: str = Field(description="Catalog repo id the prediction uses.")
    gpu: str = Field(description="Card as published.")
    gpu_profile: str = Field(description="Hardware profile id the prediction uses.")
    tp: int = Field(description="Tensor-parallel size.")
    batch: int = Field(description="Batch size.")
    input_len: int = Field(description="Prompt tokens per request.")
    output_len: int = Field(description="Generated tokens per request.")
    engine_version: str = Field(description="ENGINE@VERSION of the scenario.")
    engine_profile: str = Field(description="Engine profile id the version resolves to.")
    measured_seconds: float = Field(description="Published mean latency of one generate call, seconds.")
    predicted_seconds: float = Field(description="TTFT + (output_len - 1) x TPOT, seconds.")
    error_pct: float = Field(
        description="(predicted - measured) / measured x 100; negative: the planner predicts faster."
    )
    ttft_seconds: float = Field(description="Predicted prefill of the whole batch (first token), seconds.")
    tpot_seconds: float = Field(description="Predicted decode step at the mean context, seconds.")
    prefill_steps: int = Field(description="Prefill steps under the engine's max_num_batched_tokens.")
    decode_seconds_by_bound: dict[str, float] = Field(
        description="The decode step's seconds by binding ceiling (memory, compute, interconnect, overhead); "
        "they sum to TPOT."
    )
    prefill_bound: str = Field(description="Ceiling that binds the prefill.")
    decode_bound: str = Field(description="Ceiling that binds most of the decode step.")
    fits_in_kv_cache: bool | None = Field(
        description="Whether batch x (input + output) tokens fit the planned KV cache."
    )
    kind: str = Field(description="bound, estimate (fitted factors) or calibrated (the card's own factors).")


def predict(e: Expressed) -> StaticBatchPrediction:
    """``estimate_latency`` of the record's static batch, with the decode step split by ceiling."""
    r = e.record
    est: LatencyEstimate = estimate_latency(e.model, e.hw, e.sc, r.batch, r.input_len, r.output_len)
    decode = roofline(e.model, e.hw, e.sc, "decode", r.batch, decode_context_len(r.input_len, r.output_len))
    return StaticBatchPrediction(
        index=r.index,
        thread=r.thread,
        model=r.model,
        catalog_model=e.repo_id,
        gpu=r.gpu,
        gpu_profile=e.hw.id,
        tp=r.tp,
        batch=r.batch,
        input_len=r.input_len,
        output_len=r.output_len,
        engine_version=e.sc.engine_version,
        engine_profile=engine_of(e.sc).id,
        measured_seconds=r.value,
        predicted_seconds=est.e2e_seconds,
        error_pct=(est.e2e_seconds - r.value) / r.value * 100.0,
        ttft_seconds=est.ttft_seconds,
        tpot_seconds=est.tpot_seconds,
        prefill_steps=est.prefill_steps,
        decode_seconds_by_bound=dict(sorted(decode.seconds_by_bound.items())),
        prefill_bound=est.prefill_bound,
        decode_bound=est.decode_bound,
        fits_in_kv_cache=est.fits_in_kv_cache,
        kind=est.kind,
    )


# ------------------------------------------------------------------------------- report


class GroupSummary(BaseModel):
    """Error statistics of one group of predictions (an engine profile, a thread)."""

    model_config = _SPEC

    group: str = Field(description="The group's name.")
    count: int = Field(description="Predictions in the group.")
    median_abs_error_pct: float = Field(description="Median |error|, %.")
    max_abs_error_pct: float = Field(description="Largest |error|, %.")
    median_error_pct: float = Field(description="Median signed error, % (negative: the planner predicts faster).")
    within_target: int = Field(description=f"Predictions within {TARGET_ERROR_PCT:g}% of the measurement.")


class StaticBatchReport(BaseModel):
    """Every record predicted or set aside, with error statistics per engine profile and per thread."""

    model_config = _SPEC

    total_records: int = Field(description="Records in the file.")
    predictions: list[StaticBatchPrediction] = Field(description="Every expressed record, measured vs predicted.")
    unexpressed: list[Unexpressed] = Field(description="Every record not predicted, with its reason.")
    by_engine_profile: list[GroupSummary] = Field(description="Error statistics per engine profile.")
    by_thread: list[GroupSummary] = Field(description="Error statistics per source thread.")
    median_abs_error_pct: float | None = Field(description="Median |error| over every prediction, %; None: none.")


def summarize(
    predictions: list[StaticBatchPrediction], key: Callable[[StaticBatchPrediction], str]
) -> list[GroupSummary]:
    """Median and largest |error| of the predictions grouped by ``key``."""
    groups: dict[str, list[float]] = {}
    for p in predictions:
        groups.setdefault(key(p), []).append(p.error_pct)
    return [
        GroupSummary(
            group=name,
            count=len(errs),
            median_abs_error_pct=statistics.median(abs(x) for x in errs),
            max_abs_error_pct=max(abs(x) for x in errs),
            median_error_pct=statistics.median(errs),
            within_target=sum(abs(x) <= TARGET_ERROR_PCT for x in errs),
        )
        for name, errs in sorted(groups.items())
    ]


def evaluate(records: list[StaticBatchRecord] | None = None) -> StaticBatchReport:
    """Express and predict every record (default: the reference file)."""
    records = load_records() if records is None else records
    predictions: list[StaticBatchPrediction] = []
    unexpressed: list[Unexpressed] = []
    for record in records:
        out = express(record)
        if isinstance(out, Unexpressed):
            unexpressed.append(out)
        else:
            predictions.append(predict(out))
    errs = [abs(p.error_pct) for p in predictions]
    return StaticBatchReport(
        total_records=len(records),
        predictions=predictions,
        unexpressed=unexpressed,
        by_engine_profile=summarize(predictions, lambda p: p.engine_profile),
        by_thread=summarize(predictions, lambda p: p.thread),
        median_abs_error_pct=statistics.median(errs) if errs else None,
    )
