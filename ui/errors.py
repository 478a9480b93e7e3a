"""Errors at the page edge: the core raises, the page shows one ``st.error`` and never a traceback.

``PlannerError`` already says what is wrong and what would make it work; a pydantic
``ValidationError`` (an input the Scenario rejects) is turned into one line per field with the
field's description, so the reader learns what the field means as well as what was wrong.

Messages quote what the user typed (a repo id from a link, an upload's file name, a config key),
and Streamlit renders ``st.error``/``st.warning`` bodies as Markdown: ``?repo=[text](http://...)``
would become a link inside the app's own error box. :func:`plain` escapes user text so it shows
as typed; :func:`describe` returns text already escaped, ready for any Markdown body.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
from pydantic import ValidationError

from planner.errors import PlannerError

ShownError = (PlannerError, ValidationError)
"""The exception types a page turns into an ``st.error``."""


_MARKDOWN_SYNTAX = re.compile(r"([\\`*_\[\]<>$|~])")
"""Characters that open Markdown (or Streamlit's ``:color[...]``, ``$math$``) syntax anywhere in a line."""
_BARE_LINK = re.compile(r"(?i)(?<=[a-z0-9])(:)(?=//)|(?<=\bwww)(\.)|(@)")
"""What GitHub-flavoured Markdown turns into a link by itself: 'http://', 'www.', 'name@host'."""
_LINE_START = re.compile(r"(?m)^(\s*)(?:([-+]|#{1,6})(?=\s|$)|(\d{1,9})([.)])(?=\s|$)|([-=])(?=[-=\s]*$))")
"""What opens a list item, heading, ordered item or setext underline / rule at the start of a line."""


def _escape_line_start(match: re.Match[str]) -> str:
    indent, marker, number, delimiter, rule = match.groups()
    if number is not None:
        return f"{indent}{number}\\{delimiter}"  # a backslash before a digit is no escape: escape the '.'
    return f"{indent}\\{marker or rule}"


def plain(text: object, *, max_chars: int = 2000) -> str:
    """``text`` escaped so that Streamlit's Markdown shows it as typed (no link, no emphasis, no code, no math).

    Backslash escapes are CommonMark's own (any ASCII punctuation may be escaped), so what is shown
    is exactly ``text``; cut to ``max_chars`` with a note, so a hostile link cannot fill the page.
    """
    shown = str(text)
    if len(shown) > max_chars:
        shown = f"{shown[:max_chars]}... ({len(shown) - max_chars:,} more characters)"
    shown = re.sub(r"(?m)^[ \t]+", "", shown)  # four spaces would open a code block
    shown = _MARKDOWN_SYNTAX.sub(r"\\\1", shown)
    shown = _BARE_LINK.sub(lambda m: "\\" + m.group(0), shown)
    return _LINE_START.sub(_escape_line_start, shown)


def describe(err: BaseException) -> str:
    """One readable message for an error from the core or from validating the inputs, escaped for Markdown."""
    if isinstance(err, PlannerError):
        return plain(err)
    if isinstance(err, ValidationError):
        lines = []
        for problem in err.errors():
            where = ".".join(str(part) for part in problem["loc"]) or err.title
            lines.append(f"{where}: {problem['msg']} (got {problem.get('input')!r}).")
        return plain("Invalid input: " + " ".join(lines) + " Change it in the sidebar.")
    return plain(f"{type(err).__name__}: {err}")


@contextmanager
def shown_errors(context: str | None = None) -> Iterator[None]:
    """Run a block of core calls; on a planner or validation error show it and stop the page."""
    try:
        yield
    except ShownError as err:
        message = describe(err)
        st.error(f"{context}: {message}" if context else message, icon=":material/error:")
        st.stop()


# ------------------------------------------------------------------------------ the CLI's words, said for a page

TOGGLE = "**Plan with the sidebar's model and GPU**"
"""The Diagnose page's way past a log that names no usable model or card (the CLI's MODEL / --gpu)."""

PAGE_WORDS: tuple[tuple[str, str], ...] = (
    (
        "pass MODEL",
        f"On this page: turn on {TOGGLE} next to the log and pick the log's model in the sidebar (a catalog "
        "model, a Hub repo id, or an uploaded config.json).",
    ),
    (
        "Pass MODEL",
        f"On this page: turn on {TOGGLE} next to the log and pick the log's model in the sidebar (a catalog "
        "model, a Hub repo id, or an uploaded config.json).",
    ),
    ("--gpu", f"On this page: turn on {TOGGLE} and pick the card as the sidebar's **GPU**."),
    ("--weight-dtype", f"set the sidebar's **Weights** to the log's quantization and turn on {TOGGLE}"),
    ("on the command line", f"Turn on {TOGGLE} and set the value in the sidebar."),
)
"""(CLI words in a core hint or note, what to do on the Diagnose page instead). A hint that holds the CLI words is
replaced whole by the page's; the first row that matches wins."""


def on_page(err: BaseException, words: tuple[tuple[str, str], ...] = PAGE_WORDS) -> str:
    """:func:`describe`, with a core hint in the CLI's words (``pass MODEL``, ``--gpu``) replaced by what to do on
    the page; escaped for Markdown except the page's own words (bold control names)."""
    hint = getattr(err, "hint", None)
    if isinstance(err, PlannerError) and hint:
        for cli, page in words:
            if cli in hint:
                return f"{plain(err.message)} {page}"
    return describe(err)


def note_on_page(text: str, words: tuple[tuple[str, str], ...] = PAGE_WORDS) -> str:
    """A core note escaped for Markdown, a parenthesised CLI instruction ('(pass --weight-dtype)') said for the page."""
    shown = plain(text)
    for cli, page in words:
        match = re.search(r"\((?:pass )?" + re.escape(plain(cli)) + r"[^)]*\)", shown)
        if match:
            return shown[: match.start()] + f"({page})" + shown[match.end() :]
    return shown
