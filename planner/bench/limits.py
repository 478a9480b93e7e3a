"""The Validate suite's own limits, checked before anything runs: time, memory, scale and threads.

``SuiteLimits.checked(...)`` is the one place the run's knobs are validated, whoever calls
``run_validation`` (the CLI, the app, a script): each value must be finite and in its range, and a
refusal is a ``PlannerError`` that names the flag (``--time-limit``), the keyword
(``time_limit_s``), the value and what is allowed. Without it ``--time-limit nan`` never expires
(every comparison with NaN is false) and ``--cpu-threads -1`` crashes inside torch.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import JsonDict

from planner.errors import PlannerError

#: Longest time limit accepted, seconds (one day: the suite is sized for minutes).
MAX_TIME_LIMIT_S = 86_400.0
#: Most torch CPU threads accepted (more than any host has cores).
MAX_CPU_THREADS = 4096


def _flag(name: str, example: str) -> JsonDict:
    """Field metadata: the command-line flag that sets the field, and a value to suggest."""
    return {"flag": name, "example": example}


class SuiteLimits(BaseModel):
    """Limits and knobs of one Validate run. None means the device's default."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    time_limit_s: float | None = Field(
        None,
        gt=0,
        le=MAX_TIME_LIMIT_S,
        json_schema_extra=_flag("--time-limit", "120"),
        description=(
            "Whole-suite time limit, in seconds (finite, > 0, at most one day); None: 240 on a GPU, 120 on CPU."
        ),
    )
    benchmark_time_limit_s: float | None = Field(
        None,
        gt=0,
        le=MAX_TIME_LIMIT_S,
        json_schema_extra=_flag("--benchmark-time-limit", "40"),
        description=(
            "Time limit of one benchmark group, in seconds (finite, > 0, at most one day); None: 90 on a GPU, "
            "40 on CPU."
        ),
    )
    memory_fraction: float = Field(
        0.5,
        gt=0,
        le=1,
        json_schema_extra=_flag("--memory-fraction", "0.5"),
        description="Largest fraction of the free memory one allocation step may take, in (0, 1]; unitless.",
    )
    models_scale: float = Field(
        1.0,
        gt=0,
        le=1,
        json_schema_extra=_flag("--models-scale", "0.25"),
        description="Factor on widths and head counts, in (0, 1]; 1 is the real model; unitless.",
    )
    cpu_threads: int | None = Field(
        None,
        ge=1,
        le=MAX_CPU_THREADS,
        json_schema_extra=_flag("--cpu-threads", "1"),
        description="torch CPU threads for the run, a count from 1 to 4096; None: torch's own setting.",
    )
    sampler_interval_s: float = Field(
        0.05,
        gt=0,
        le=60,
        json_schema_extra=_flag("sampler_interval_s", "0.05"),
        description="Seconds between two NVML utilization samples, in (0, 60].",
    )

    @classmethod
    def checked(cls, **values: Any) -> SuiteLimits:
        """The limits, or a PlannerError naming the flag, the value and the allowed range."""
        for name, value in values.items():
            _refuse_non_number(name, value)
        try:
            return cls(**values)
        except ValidationError as err:
            first = err.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else "?"
            raise _range_error(name, values.get(name)) from None


def _refuse_non_number(name: str, value: object) -> None:
    """bool is an int to Python and a float '1e999' is inf: both are refused with the range."""
    if isinstance(value, bool):
        raise _range_error(name, value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _range_error(name, value)


def _range_error(name: str, value: object) -> PlannerError:
    field = SuiteLimits.model_fields.get(name)
    if field is None:
        return PlannerError(
            f"unknown validation setting {name}={value!r};", hint=f"use one of {', '.join(SuiteLimits.model_fields)}."
        )
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    flag, example = str(extra.get("flag", name)), str(extra.get("example", ""))
    allowed = field.description or ""
    shown = flag if flag == name else f"{flag} ({name})"
    return PlannerError(f"{shown} is {value!r}, out of range: {allowed}", hint=f"Pass e.g. {flag} {example}.")
