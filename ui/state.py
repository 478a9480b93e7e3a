"""The current inputs: sidebar values in session state -> (ModelSpec, HardwareProfile, Scenario).

Pages call :func:`current_inputs`; see the page contract in ``ui/__init__.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import streamlit as st

from planner.errors import ConfigError, PlannerError, ScenarioError
from planner.estimate.memory import Resolved, resolve
from planner.hardware import HardwareProfile, get_profile
from planner.model.sources import LoadedConfig
from planner.model.spec import ModelSpec
from planner.scenario import Scenario, Workload
from ui.errors import shown_errors
from ui.loaders import LoadedModel, LoadFailure, ModelSource, load_named, load_upload
from ui.params import DEFAULT_MAX_MODEL_LEN, PARAMS

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


def load_named_model(name: str) -> LoadedModel:
    """A catalog name or Hub repo id (with the session's token, if any) -> LoadedModel, or PlannerError."""
    result = load_named(name, st.session_state.get(TOKEN_KEY) or None)
    if isinstance(result, LoadFailure):
        raise PlannerError(result.message)
    return result


def precision_overrides(values: dict[str, Any]) -> dict[str, str]:
    """Mixed precision as the core's per-component overrides (attention and lm_head high, MLP and experts low)."""
    if not values.get("mixed"):
        return {}
    high, low = values["hi"], values["lo"]
    return {"attention": high, "lm_head": high, "mlp": low, "experts": low}


def effective_max_model_len(values: dict[str, Any], model: ModelSpec) -> int | None:
    """max_model_len to plan with: the sidebar's, except that the untouched default (8,192) gives way
    to a model that allows fewer tokens. A length the user typed is kept, and refused with the limit if too long."""
    length = values.get("len")
    if length == DEFAULT_MAX_MODEL_LEN and model.max_position_embeddings < length:
        return model.max_position_embeddings
    return length


def scenario_from(values: dict[str, Any], model: ModelSpec | None = None) -> Scenario:
    """The Scenario the sidebar describes (pydantic validates ranges; ScenarioError for impossible sets)."""
    return Scenario(
        gpu=values["gpu"],
        num_gpus=values.get("gpus"),
        tp=values["tp"],
        pp=values["pp"],
        weight_dtype=values["weights"],
        precision_overrides=precision_overrides(values),
        kv_cache_dtype=values["kv"],
        max_model_len=effective_max_model_len(values, model) if model is not None else values.get("len"),
        gpu_memory_utilization=values["util"],
        block_size=values.get("block"),
        max_num_seqs=values.get("seqs"),
        max_num_batched_tokens=values.get("tokens"),
        engine=values["engine"],
        enable_chunked_prefill=values["chunked"],
        workload=Workload(input_len=values["in"], output_len=values["out"], batch_size=values["batch"]),
    )


def scenario_variant(base: Scenario, changes: dict[str, Any]) -> Scenario:
    """``base`` with some fields changed, validated again (unlike ``model_copy(update=...)``)."""
    return Scenario.model_validate({**base.model_dump(), **changes})


COMPARE_COLUMNS = ("model", "gpu", "tp", "pp", "weights", "kv", "max_model_len")
"""Columns of a Compare row; the rest of the scenario (workload, limits, engine) is the sidebar's."""


def _blank(cell: Any) -> bool:
    """An empty table cell: None, '' or NaN (what st.data_editor gives for a new row)."""
    return cell is None or cell == "" or (isinstance(cell, float) and math.isnan(cell))


def variant_from_row(base: Scenario, row: dict[str, Any], label: str) -> tuple[str, Scenario]:
    """(model name, Scenario) for one Compare row; ScenarioError naming the empty cell if one is blank."""
    missing = [c for c in COMPARE_COLUMNS if c != "max_model_len" and _blank(row.get(c))]
    if missing:
        raise ScenarioError(f"scenario {label} has no {', '.join(missing)}.", hint="Fill the cell in the table, or delete the row.")
    length = row.get("max_model_len")
    changes = {
        "gpu": row["gpu"], "tp": int(row["tp"]), "pp": int(row["pp"]), "num_gpus": None, "weight_dtype": row["weights"],
        "kv_cache_dtype": row["kv"], "precision_overrides": {},
        "max_model_len": None if _blank(length) else int(length),
    }
    return str(row["model"]), scenario_variant(base, changes)


def build_inputs(values: dict[str, Any]) -> Inputs:
    """Load, look up, validate: raises PlannerError or ValidationError with what to change."""
    loaded = load_model(values)
    hardware = get_profile(values["gpu"])
    scenario = scenario_from(values, loaded.spec)
    resolved = resolve(loaded.spec, hardware, scenario)
    return Inputs(loaded.spec, hardware, scenario, resolved, loaded.source, loaded.loaded)


def sidebar_values() -> dict[str, Any]:
    """The raw sidebar values from session state (defaults for any not drawn yet)."""
    values = {p.key: st.session_state.get(p.key, p.default) for p in PARAMS}
    values[UPLOAD_KEY] = st.session_state.get(UPLOAD_KEY)
    values[TOKEN_KEY] = st.session_state.get(TOKEN_KEY)
    return values


def ensure_navigation() -> None:
    """Rerun at once if Streamlit is running this session in its old ``pages/`` folder mode.

    Streamlit keeps a process-wide flag for that mode: set when the first session of a freshly
    started server begins (``pages/`` exists next to ``app.py``), cleared by the first
    ``st.navigation`` call. On that first run Streamlit wraps ``app.py`` (or, for a deep link such
    as ``/roofline?gpu=h200``, the page file alone) in its own navigation, which gives the widgets
    other ids than every later run has, so their values would be lost on the first interaction.
    Clearing the flag and rerunning before any widget is drawn routes the run through ``app.py``
    and ``st.navigation`` as every later run is. Called first thing by ``app.py`` and by
    :func:`current_inputs`; a no-op afterwards.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def current_inputs() -> Inputs:
    """The inputs every page plans with; on a problem: one st.error with the fix, and the page stops."""
    ensure_navigation()
    with shown_errors():
        return build_inputs(sidebar_values())
    raise AssertionError("unreachable: shown_errors stops the page")  # pragma: no cover
