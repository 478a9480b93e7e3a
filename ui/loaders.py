"""Model loading for the app: config.json (catalog, Hub, upload) -> ModelSpec, cached.

Both loaders return a :class:`LoadedModel` or a :class:`LoadFailure`; failures are cached too
(for ``CACHE_TTL``), so a typo in a repo id costs one Hub request, not one per rerun; an
unreachable Hub is raised instead, so the next rerun tries again. The HF
token is part of the cache key (Streamlit keeps only a hash of it) so that a gated config loaded
with one token is never served to a session without it; it is never returned or shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from planner.errors import HubUnavailableError, PlannerError
from planner.model.families import build_spec
from planner.model.sources import LoadedConfig, load_config, load_uploaded
from planner.model.spec import ModelSpec
from planner.units import fmt_count
from ui.errors import plain

CACHE_TTL = 3600
"""Seconds a loaded (or failed) config stays cached. A number, not "1h": Streamlit parses a text TTL with pandas,
which would import it (most of a second) before the first page can draw."""


@dataclass(frozen=True)
class ModelSource:
    """Where a config came from, for the caption under the model picker.

    ``citation`` and ``warnings`` are Markdown-escaped (``ui.errors.plain``): they quote what a
    config or a link said, and pages show them in ``st.warning`` bodies and tooltips.
    """

    name: str
    origin: str
    citation: str
    warnings: tuple[str, ...] = field(default_factory=tuple)
    parameters: str = ""
    """The parameter count as the caption says it ('8.03B', '30.5B (3.3B active)'): counted once, when loaded."""


@dataclass(frozen=True)
class LoadedModel:
    spec: ModelSpec
    source: ModelSource
    loaded: LoadedConfig


@dataclass(frozen=True)
class LoadFailure:
    """A config that could not be loaded or parsed; ``message`` says why and what to do."""

    message: str
    kind: str


def _finish(loaded: LoadedConfig) -> LoadedModel | LoadFailure:
    try:
        spec = build_spec(loaded.config, loaded.name)
    except PlannerError as err:
        return LoadFailure(str(err), type(err).__name__)
    warnings = tuple(plain(w) for w in (*loaded.warnings, *spec.warnings))
    parameters = fmt_count(spec.total_params)
    if spec.active_params != spec.total_params:
        parameters += f" ({fmt_count(spec.active_params)} active)"
    source = ModelSource(loaded.name, loaded.origin, plain(loaded.source), warnings, parameters)
    return LoadedModel(spec, source, loaded)


@st.cache_data(show_spinner="Loading config.json ...", ttl=CACHE_TTL, max_entries=256)
def load_named(name: str, token: str | None = None) -> LoadedModel | LoadFailure:
    """A catalog name or Hub repo id -> spec (the catalog answers offline; the Hub only for others).

    Local paths are refused (``allow_local=False``): the name comes from a link or a text box, and
    the app's users must not read the server's files; a local config.json comes in by upload.
    """
    try:
        loaded = load_config(name, token=token or None, allow_local=False)  # never the server's own files
    except HubUnavailableError:
        raise  # not the user's to fix and may pass: not cached, the next rerun asks again
    except PlannerError as err:
        return LoadFailure(str(err), type(err).__name__)
    return _finish(loaded)


@st.cache_data(show_spinner="Reading the uploaded config.json ...", ttl=CACHE_TTL, max_entries=64)
def load_upload(data: bytes, filename: str) -> LoadedModel | LoadFailure:
    """An uploaded config.json -> spec; an upload that is not one gives a LoadFailure."""
    try:
        loaded = load_uploaded(data, filename)
    except PlannerError as err:
        return LoadFailure(str(err), type(err).__name__)
    return _finish(loaded)
