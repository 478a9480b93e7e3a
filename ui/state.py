"""The current inputs: sidebar values in session state -> (ModelSpec, HardwareProfile, Scenario).

Pages call :func:`current_inputs`; see the page contract in ``ui/__init__.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from planner.errors import ConfigError, PlannerError, ScenarioError
from planner.estimate.resolve import Resolved, resolve
from planner.hardware import HardwareProfile, get_profile
from planner.model.sources import LoadedConfig
from planner.model.spec import ModelSpec
from planner.scenario import Scenario
from ui.errors import shown_errors
from ui.loaders import LoadedModel, LoadFailure, ModelSource, load_named, load_upload
from ui.params import FIELD_OF_KEY, link_query, scenario_fields, session_values, sidebar_updates

TOKEN_KEY = "hf_token"
UPLOAD_KEY = "upload"


@dataclass(frozen=True)
class Inputs:
    """Everything a page needs to plan: the model, the card, the user's scenario, vLLM's defaults."""

    model: ModelSpec
    hardware: HardwareProfile
    scenario: Scenario
    resolved: Resolved
    source: ModelSource
    loaded: LoadedConfig
    draft: ModelSpec | None = None
    """The draft model's spec with speculative method ``draft`` (the core costs its steps), else None."""


def model_choice(values: dict[str, Any]) -> tuple[str, str]:
    """(kind, name) of the model the sidebar selects: an upload beats a Hub repo id beats the catalog."""
    upload = values.get(UPLOAD_KEY)
    if upload is not None:
        return "upload", upload.name
    repo = (values.get("repo") or "").strip()
    if repo:
        return "hub", repo
    return "catalog", values["model"]


def load_model(values: dict[str, Any]) -> LoadedModel:
    """The chosen model's spec; raises PlannerError (with what to do) when it cannot be had."""
    kind, name = model_choice(values)
    if kind == "upload":
        upload = values[UPLOAD_KEY]
        result = load_upload(upload.getvalue(), upload.name)
    else:
        result = load_named(name, values.get(TOKEN_KEY) or None)
    if isinstance(result, LoadFailure):
        raise (ConfigError if kind == "upload" else PlannerError)(result.message)
    return result


def hub_token() -> str | None:
    """The session's Hugging Face token, for a core call that loads a config by name; None without one. Never shown."""
    return st.session_state.get(TOKEN_KEY) or None


def load_named_model(name: str) -> LoadedModel:
    """A catalog name or Hub repo id (with the session's token, if any) -> LoadedModel, or PlannerError."""
    result = load_named(name, hub_token())
    if isinstance(result, LoadFailure):
        raise PlannerError(result.message)
    return result


def scenario_from(values: dict[str, Any]) -> Scenario:
    """The Scenario the sidebar describes (pydantic validates ranges; ScenarioError for impossible sets).

    Each input sets the Scenario field its ``ui.params.PARAMS`` row names. An empty max_model_len is the
    model's maximum, as in vLLM and ``python -m planner``; a length the user typed is kept, and refused
    (with the model's limit) if it is longer.
    """
    return Scenario(**scenario_fields(values))


def scenario_variant(base: Scenario, changes: dict[str, Any]) -> Scenario:
    """``base`` with some fields changed, validated again (unlike ``model_copy(update=...)``)."""
    return Scenario.model_validate({**base.model_dump(), **changes})


COMPARE_COLUMNS = ("model", "gpu", "tp", "pp", "weights", "kv", "len")
"""Columns of a Compare row, named by their sidebar keys; the rest of the scenario (workload, limits, engine)
is the sidebar's. ``len`` may be empty (the model's maximum)."""


def _blank(cell: Any) -> bool:
    """An empty table cell: None, '' or NaN (what st.data_editor gives for a new row)."""
    return cell is None or cell == "" or (isinstance(cell, float) and math.isnan(cell))


def variant_from_row(base: Scenario, row: dict[str, Any], label: str) -> tuple[str, Scenario]:
    """(model name, Scenario) for one Compare row; ScenarioError naming the empty cell if one is blank."""
    missing = [c for c in COMPARE_COLUMNS if c != "len" and _blank(row.get(c))]
    if missing:
        raise ScenarioError(
            f"scenario {label} has no {', '.join(missing)}.", hint="Fill the cell in the table, or delete the row."
        )
    cells = {key: row[key] for key in COMPARE_COLUMNS if key != "model"}
    cells.update(tp=int(cells["tp"]), pp=int(cells["pp"]), len=None if _blank(cells["len"]) else int(cells["len"]))
    changes = {FIELD_OF_KEY[key]: value for key, value in cells.items()}
    changes.update(num_gpus=None, precision_overrides={})  # one replica of tp x pp, one precision per row
    return str(row["model"]), scenario_variant(base, changes)


def build_inputs(values: dict[str, Any]) -> Inputs:
    """Load, look up, validate: raises PlannerError or ValidationError with what to change."""
    loaded = load_model(values)
    hardware = get_profile(values["gpu"])
    scenario = scenario_from(values)
    resolved = resolve(loaded.spec, hardware, scenario)
    draft = load_draft_model(scenario)
    return Inputs(loaded.spec, hardware, scenario, resolved, loaded.source, loaded.loaded, draft)


def load_draft_model(sc: Scenario) -> ModelSpec | None:
    """The draft model's spec for speculative method ``draft`` (loaded as the model is, the CLI's
    ``load_draft_model``); None for every other method, whose drafter the core sizes from the target."""
    cfg = sc.speculative
    if cfg is None or cfg.method != "draft" or cfg.draft_model is None:
        return None
    try:
        return load_named_model(cfg.draft_model).spec
    except PlannerError as err:
        raise PlannerError(f"Draft model {cfg.draft_model}: {err.message}", hint=err.hint) from None


def sidebar_values() -> dict[str, Any]:
    """The raw sidebar values from session state (defaults for any not drawn yet)."""
    values = session_values()
    values[UPLOAD_KEY] = st.session_state.get(UPLOAD_KEY)
    values[TOKEN_KEY] = st.session_state.get(TOKEN_KEY)
    return values


def link_to(page: str, changes: dict[str, Any]) -> str | None:
    """A relative link to ``page`` (its URL path, e.g. 'export') with the sidebar's inputs and Scenario field
    ``changes`` applied; None when the model is an upload, which cannot travel in a link."""
    values = sidebar_values()
    if model_choice(values)[0] == "upload":
        return None
    return f"./{page}?" + urlencode(link_query({**session_values(), **sidebar_updates(changes)}))


def current_inputs() -> Inputs:
    """The inputs every page plans with; on a problem: one st.error with the fix, and the page stops."""
    with shown_errors():
        return build_inputs(sidebar_values())
    raise AssertionError("unreachable: shown_errors stops the page")  # pragma: no cover
