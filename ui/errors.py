"""Errors at the page edge: the core raises, the page shows one ``st.error`` and never a traceback.

``PlannerError`` already says what is wrong and what would make it work; a pydantic
``ValidationError`` (an input the Scenario rejects) is turned into one line per field with the
field's description, so the reader learns what the field means as well as what was wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
from pydantic import ValidationError

from planner.errors import PlannerError

ShownError = (PlannerError, ValidationError)
"""The exception types a page turns into an ``st.error``."""


def describe(err: BaseException) -> str:
    """One readable message for an error from the core or from validating the inputs."""
    if isinstance(err, PlannerError):
        return str(err)
    if isinstance(err, ValidationError):
        lines = []
        for problem in err.errors():
            where = ".".join(str(part) for part in problem["loc"]) or err.title
            lines.append(f"{where}: {problem['msg']} (got {problem.get('input')!r}).")
        return "Invalid input: " + " ".join(lines) + " Change it in the sidebar."
    return f"{type(err).__name__}: {err}"


@contextmanager
def shown_errors(context: str | None = None) -> Iterator[None]:
    """Run a block of core calls; on a planner or validation error show it and stop the page."""
    try:
        yield
    except ShownError as err:
        message = describe(err)
        st.error(f"{context}: {message}" if context else message, icon=":material/error:")
        st.stop()
