"""The accuracy report over the public records: every expressed record predicted with one set of
efficiency factors and compared with its measurement; per source family and metric the count,
median and P90 absolute % error and the worst cases (``evaluate``).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from planner.efficiency import Efficiency
from planner.estimate.defaults import FITTED
from planner.verify.public_records import PublicRecord, load_records, source_family
from planner.verify.public_records_express import Expressed, Unexpressed, express_all

_SPEC = ConfigDict(frozen=True, extra="forbid")


class RecordResult(BaseModel):
    """One expressed record: what was measured, what the planner predicts, and the error."""

    model_config = _SPEC

    index: int = Field(description="Position in measured_public.json.")
    family: str = Field(description="Source family.")
    metric: str = Field(description="What was measured.")
    model: str = Field(description="Model as published.")
    catalog_model: str | None = Field(description="Catalog repo id the prediction uses (None for collectives).")
    gpu: str = Field(description="Card as published.")
    measured: float = Field(description="Published value, in ``unit``.")
    predicted: float | None = Field(
        description="Planner prediction, in ``unit``; None when the simulation produced none."
    )
    unit: str = Field(description="Unit of both values.")
    error_pct: float | None = Field(
        description="(predicted - measured) / measured x 100; negative means under-predicted."
    )
    how: str = Field(description="The scenario the planner predicted, in words.")


class MetricSummary(BaseModel):
    """Error statistics of one source family and metric."""

    model_config = _SPEC

    family: str = Field(description="Source family.")
    metric: str = Field(description="Metric.")
    count: int = Field(description="Expressed records with a prediction.")
    median_abs_error_pct: float = Field(description="Median of |error|, in %.")
    p90_abs_error_pct: float = Field(description="90th percentile of |error|, in %.")
    median_error_pct: float = Field(description="Median signed error, in % (negative: the planner predicts low).")
    worst: list[RecordResult] = Field(description="The records with the largest |error| (up to 5).")


class AccuracyReport(BaseModel):
    """How close the planner comes to published measurements, and which records it cannot express."""

    model_config = _SPEC

    kind: str = Field(description="Kind of the efficiency factors: bound, estimate (fitted) or calibrated.")
    efficiency_source: str = Field(description="Where the efficiency factors come from.")
    fast: bool = Field(description="True for the deterministic fast subset (CI), False for every record.")
    total_records: int = Field(description="Records considered (expressed + unexpressed).")
    expressed: int = Field(description="Records expressed as predictions.")
    unexpressed_count: int = Field(description="Records the planner cannot express.")
    median_abs_error_pct: float | None = Field(
        description="Median |error| over every expressed record with a prediction, %."
    )
    p90_abs_error_pct: float | None = Field(description="P90 |error| over the same records, %.")
    summaries: list[MetricSummary] = Field(description="Per source family and metric.")
    reasons: dict[str, int] = Field(description="Unexpressed records counted by reason category.")
    missing_models: dict[str, int] = Field(description="Models not in the catalog, by records they would unlock.")
    missing_gpus: dict[str, int] = Field(description="Cards without a profile, by records they would unlock.")
    results: list[RecordResult] = Field(description="Every expressed record.")
    unexpressed: list[Unexpressed] = Field(description="Every record not expressed, with its reason.")


def error_pct(predicted: float | None, measured: float) -> float | None:
    if predicted is None or not math.isfinite(predicted) or measured == 0:
        return None
    return (predicted - measured) / measured * 100.0


def fast_subset(records: list[PublicRecord], stride: int = 5) -> list[PublicRecord]:
    """A deterministic subset for CI: every ``stride``-th record of each source family (and of the
    serving families only the ones at a request rate, whose simulations are short)."""
    seen: dict[str, int] = {}
    out = []
    for record in records:
        family = source_family(record)
        k = seen.get(family, 0)
        seen[family] = k + 1
        if k % stride:
            continue
        if "serving" in family and str(record.qps) == "inf" and "5000" in str(record.batch_or_concurrency):
            continue
        out.append(record)
    return out


def results_for(expressed: list[Expressed], eff: Efficiency) -> list[RecordResult]:
    out = []
    for e in expressed:
        value = e.predict(eff)
        predicted = value if math.isfinite(value) else None
        r = e.record
        out.append(
            RecordResult(
                index=r.index,
                family=e.family,
                metric=r.metric,
                model=r.model,
                catalog_model=e.repo_id,
                gpu=r.gpu,
                measured=r.value,
                predicted=predicted,
                unit=r.unit,
                error_pct=error_pct(predicted, r.value),
                how=e.prediction.how,
            )
        )
    return out


def summarize(results: list[RecordResult], worst: int = 5) -> list[MetricSummary]:
    groups: dict[tuple[str, str], list[RecordResult]] = {}
    for r in results:
        if r.error_pct is not None:
            groups.setdefault((r.family, r.metric), []).append(r)
    out = []
    for (family, metric), rows in sorted(groups.items()):
        errs = np.array([r.error_pct for r in rows])
        abs_errs = np.abs(errs)
        order = np.argsort(-abs_errs)[:worst]
        out.append(
            MetricSummary(
                family=family,
                metric=metric,
                count=len(rows),
                median_abs_error_pct=float(np.median(abs_errs)),
                p90_abs_error_pct=float(np.percentile(abs_errs, 90)),
                median_error_pct=float(np.median(errs)),
                worst=[rows[i] for i in order],
            )
        )
    return out


def _count(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def evaluate(
    records: list[PublicRecord] | None = None, efficiency: Efficiency | None = None, fast: bool = False
) -> AccuracyReport:
    """Express every record (or the fast subset), predict the expressed ones with ``efficiency``
    (default: the fitted factors) and report the errors and the unexpressed records."""
    eff = efficiency or FITTED
    records = load_records() if records is None else records
    if fast:
        records = fast_subset(records)
    expressed, unexpressed = express_all(records)
    results = results_for(expressed, eff)
    errs = np.array([abs(r.error_pct) for r in results if r.error_pct is not None])
    missing_models = _count(
        [u.reason.split(" is not in")[0] for u in unexpressed if u.reason_kind == "model not in catalog"]
    )
    missing_gpus = _count([u.gpu for u in unexpressed if u.reason_kind == "GPU not profiled"])
    return AccuracyReport(
        kind=eff.kind,
        efficiency_source=eff.source,
        fast=fast,
        total_records=len(records),
        expressed=len(expressed),
        unexpressed_count=len(unexpressed),
        median_abs_error_pct=float(np.median(errs)) if errs.size else None,
        p90_abs_error_pct=float(np.percentile(errs, 90)) if errs.size else None,
        summaries=summarize(results),
        reasons=_count([u.reason_kind for u in unexpressed]),
        missing_models=missing_models,
        missing_gpus=missing_gpus,
        results=results,
        unexpressed=unexpressed,
    )
