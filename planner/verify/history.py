"""Accuracy history: every scored prediction kept in a local JSON-lines file, and how accuracy moves.

Each scored metric (``planner.verify.scoring``) or reconciled memory term
(``planner.verify.reconcile``) becomes one line::

    {"date": "2025-06-01T12:00:00+00:00", "model": "meta-llama/Llama-3.2-3B-Instruct", "card": "l40s",
     "engine_version": "0.9.0", "source": "score", "label": "poisson@10", "metric": "tpot_seconds",
     "statistic": "p50", "unit": "seconds", "predicted": 0.0141, "measured": 0.0137,
     "error_pct": 2.7, "predicted_by": "simulated (estimate step times)"}

The file is ``$PLANNER_HISTORY_PATH``, else ``~/.cache/llm-planner/accuracy_history.jsonl`` (beside
the calibration folder, ``~/.cache/llm-planner/hardware``). Lines are only ever appended; a line that does
not parse is skipped and counted, never fatal. ``summarize`` gives per metric the count, median
and P90 of |error|, the mean signed error (bias: positive means the planner predicts too much),
and the same per calendar month, so a change in the planner or the engine shows up as a step.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.verify.reconcile import Reconciliation
from planner.verify.scoring import Score

__all__ = [
    "AccuracyRow",
    "AccuracySummary",
    "HistoryEntry",
    "append",
    "entries_from_reconciliation",
    "entries_from_score",
    "history_path",
    "read_history",
    "summarize",
]

_SPEC = ConfigDict(frozen=True, extra="forbid")
HISTORY_ENV = "PLANNER_HISTORY_PATH"
HISTORY_FILE = "accuracy_history.jsonl"
DEFAULT_HISTORY_DIR = "~/.cache/llm-planner"


class HistoryEntry(BaseModel):
    """One prediction beside one measurement, with when and on what."""

    model_config = _SPEC

    date: str = Field(description="When it was recorded, ISO 8601 UTC.")
    model: str = Field(description="Model predicted.")
    card: str = Field(description="Hardware profile id.")
    engine_version: str | None = Field(description="Engine (vLLM) version of the run; None when unknown.")
    source: str = Field(description="'score' (a benchmark run) or 'reconcile' (a startup log).")
    label: str | None = Field(None, description="The run's label or file, free text.")
    metric: str = Field(description="Metric name, e.g. tpot_seconds or num_gpu_blocks.")
    statistic: str = Field(description="mean, p50, p90, p99, or 'value'.")
    unit: str = Field(description="Unit of predicted and measured: seconds, tokens/s, bytes, blocks, ...")
    predicted: float = Field(description="The planner's value, in unit.")
    measured: float = Field(description="The measured (or engine-reported) value, in unit.")
    error_pct: float | None = Field(
        description="(predicted - measured) / measured x 100, percent; None if measured is 0."
    )
    predicted_by: str = Field(description="What produced the prediction (simulator, static estimate, memory plan).")


class AccuracyRow(BaseModel):
    """Accuracy of one group of entries (a metric and statistic, or a month)."""

    model_config = _SPEC

    key: dict[str, str] = Field(
        description="The group: e.g. {'metric': 'tpot_seconds', 'statistic': 'p50'} or {'month': '2025-06'}."
    )
    count: int = Field(description="Entries with an error, a count.")
    median_abs_error_pct: float | None = Field(description="Median |error_pct|, percent.")
    p90_abs_error_pct: float | None = Field(description="90th percentile of |error_pct| (nearest rank), percent.")
    mean_error_pct: float | None = Field(
        description="Mean signed error_pct: bias, positive when the planner predicts too much."
    )
    first_date: str | None = Field(description="Earliest entry, ISO 8601.")
    last_date: str | None = Field(description="Latest entry, ISO 8601.")


class AccuracySummary(BaseModel):
    """Accuracy over the whole history: per metric, and per month."""

    model_config = _SPEC

    path: str | None = Field(description="The history file read; None when entries were passed in.")
    entries: int = Field(description="Entries read, a count.")
    skipped_lines: int = Field(description="Lines that did not parse and were skipped, a count.")
    by_metric: list[AccuracyRow] = Field(description="One row per (metric, statistic).")
    by_month: list[AccuracyRow] = Field(description="One row per calendar month (UTC), oldest first.")
    by_card: list[AccuracyRow] = Field(description="One row per card.")


def history_path() -> Path:
    """``$PLANNER_HISTORY_PATH``, else ``~/.cache/llm-planner/accuracy_history.jsonl``."""
    if os.environ.get(HISTORY_ENV):
        return Path(os.environ[HISTORY_ENV]).expanduser()
    return Path(DEFAULT_HISTORY_DIR).expanduser() / HISTORY_FILE


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def entries_from_score(score: Score, *, date: str | None = None, label: str | None = None) -> list[HistoryEntry]:
    """One entry per scored row with both a prediction and a measurement."""
    when = date or _now()
    return [
        HistoryEntry(
            date=when,
            model=score.model,
            card=score.card,
            engine_version=score.engine_version,
            source="score",
            label=label or score.bench_label,
            metric=row.metric,
            statistic=row.statistic,
            unit=row.unit,
            predicted=row.predicted,
            measured=row.measured,
            error_pct=row.error_pct,
            predicted_by=score.prediction_label,
        )
        for row in score.metrics
        if row.predicted is not None and row.measured is not None
    ]


def entries_from_reconciliation(
    rec: Reconciliation, *, date: str | None = None, label: str | None = None
) -> list[HistoryEntry]:
    """One entry per reconciled memory term that vLLM printed."""
    when = date or _now()
    return [
        HistoryEntry(
            date=when,
            model=rec.model,
            card=rec.card,
            engine_version=rec.engine_version,
            source="reconcile",
            label=label,
            metric=term.name,
            statistic="value",
            unit=term.unit,
            predicted=term.predicted,
            measured=term.reported,
            error_pct=term.difference_pct,
            predicted_by=f"memory plan ({term.predicted_kind})",
        )
        for term in rec.terms
        if term.predicted is not None and term.reported is not None
    ]


def append(entries: Iterable[HistoryEntry], path: str | os.PathLike[str] | None = None) -> Path:
    """Append entries as JSON lines (creating the file and its folder); return the path."""
    target = Path(path).expanduser() if path is not None else history_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = [entry.model_dump_json() + "\n" for entry in entries]
    with target.open("a", encoding="utf-8") as handle:
        handle.writelines(lines)
    return target


def read_history(path: str | os.PathLike[str] | None = None) -> tuple[list[HistoryEntry], int]:
    """(entries, skipped line count) of the history file; ([], 0) when it does not exist."""
    target = Path(path).expanduser() if path is not None else history_path()
    if not target.exists():
        return [], 0
    entries: list[HistoryEntry] = []
    skipped = 0
    for line in target.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            entries.append(HistoryEntry.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError):
            skipped += 1
    return entries, skipped


def _nearest_rank(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def _row(key: dict[str, str], group: list[HistoryEntry]) -> AccuracyRow:
    errors = [e.error_pct for e in group if e.error_pct is not None]
    absolute = [abs(x) for x in errors]
    dates = sorted(e.date for e in group)
    return AccuracyRow(
        key=key,
        count=len(errors),
        median_abs_error_pct=statistics.median(absolute) if absolute else None,
        p90_abs_error_pct=_nearest_rank(absolute, 90) if absolute else None,
        mean_error_pct=statistics.fmean(errors) if errors else None,
        first_date=dates[0] if dates else None,
        last_date=dates[-1] if dates else None,
    )


def _grouped(entries: list[HistoryEntry], key) -> list[AccuracyRow]:
    groups: dict[tuple[tuple[str, str], ...], list[HistoryEntry]] = {}
    for entry in entries:
        groups.setdefault(tuple(key(entry).items()), []).append(entry)
    return [_row(dict(k), v) for k, v in sorted(groups.items())]


def summarize(
    entries: list[HistoryEntry] | None = None, *, path: str | os.PathLike[str] | None = None
) -> AccuracySummary:
    """Accuracy per (metric, statistic), per month and per card, of ``entries`` or of the history file."""
    skipped = 0
    shown_path = None
    if entries is None:
        entries, skipped = read_history(path)
        shown_path = str(Path(path).expanduser() if path is not None else history_path())
    return AccuracySummary(
        path=shown_path,
        entries=len(entries),
        skipped_lines=skipped,
        by_metric=_grouped(entries, lambda e: {"metric": e.metric, "statistic": e.statistic}),
        by_month=_grouped(entries, lambda e: {"month": e.date[:7]}),
        by_card=_grouped(entries, lambda e: {"card": e.card}),
    )
