"""Hostile inputs to the app: links and text boxes never read the server's files, and user text shows as typed.

The app takes a model name from the shareable link (``?repo=``) and from the Hub-id box; both
accept only catalog names and Hub repo ids (local files come in by upload). Messages that
quote user text are Markdown bodies (``st.error``, ``st.warning``, ``st.caption``), so the text
is escaped: rendered with a CommonMark renderer (markdown-it-py, which rich already brings) it
must come out exactly as typed, with no link, image, emphasis or code.
"""

from __future__ import annotations

import html
import json
import random
import re

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from tests.conftest import TINY_LLAMA_CONFIG
from tests.test_app import app, assert_clean, texts  # noqa: F401 (app is a fixture)
from ui.errors import plain

EVIL_LINK = "[click here](http://evil.example/steal)"
_MARKDOWN = MarkdownIt("commonmark")


def rendered(markdown: str) -> str:
    """HTML CommonMark makes of a Markdown body."""
    return _MARKDOWN.render(markdown)


def shown_text(markdown: str) -> str:
    """The text a reader sees: the HTML without its paragraph tags, entities decoded."""
    return html.unescape(re.sub(r"</?p>", "", rendered(markdown))).strip()


def assert_inert(markdown: str) -> None:
    page = rendered(markdown)
    for tag in ("<a ", "<img", "<em>", "<strong>", "<code>", "<h1", "<ul>", "<ol", "<blockquote>", "<pre>"):
        assert tag not in page, f"{tag} in {page!r}"


# ---- plain(): escaped text renders as typed ----------------------------------------------------

HOSTILE_TEXTS = [
    EVIL_LINK,
    "![x](http://evil.example/pixel.png)",
    "<http://evil.example>",
    "a `code` b *em* c _em_ d ~~gone~~ e $x^2$ f :red[red] g \\[escaped\\]",
    "- a list\n+ another\n12. ordered\n# heading\n> quote\ntext\n===",
    "    indented code",
    "[ref]: http://evil.example\n[ref]",
    "no repo 'acme/does-not-exist' on the Hub",
]


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_plain_text_renders_as_typed(text: str) -> None:
    escaped = plain(text)
    assert_inert(escaped)
    expected = re.sub(r"(?m)^[ \t]+", "", text)  # leading indentation is dropped (it would open a code block)
    assert shown_text(escaped) == expected


def test_plain_text_round_trips_for_random_hostile_strings() -> None:
    alphabet = "[]()<>!*_`~$|#+-=.:/\\@ \nabc1w"
    generator = random.Random(20240509)
    for _ in range(400):
        text = "".join(generator.choice(alphabet) for _ in range(generator.randint(1, 40)))
        escaped = plain(text)
        assert_inert(escaped)
        expected = [re.sub(r"^[ \t]+", "", line).rstrip() for line in text.split("\n")]
        shown = [line.rstrip() for line in shown_text(escaped).split("\n")]
        # a blank line splits paragraphs: compare the lines with text
        assert [line for line in shown if line] == [line for line in expected if line], text


def test_plain_cuts_very_long_text() -> None:
    assert plain("x" * 10_000, max_chars=100) == "x" * 100 + "... (9,900 more characters)"


# ---- the app: no local reads from the link or the text box -------------------------------------


def test_a_link_to_a_server_file_is_ignored_with_a_warning(app: AppTest, hub) -> None:  # noqa: F811
    app.query_params["repo"] = "/etc/passwd"
    app.run()
    assert_clean(app)
    warned = " ".join(w.value for w in app.sidebar.warning)
    assert "Ignored repo=/etc/passwd from the link" in warned and "looks like a file path" in warned
    assert "not valid JSON" not in texts(app) and "root:" not in texts(app)
    assert "repo" not in app.query_params
    assert app.success[0].value.startswith("fits: ")  # the catalog default is planned instead
    assert hub.requests == []


@pytest.mark.parametrize("typed", ["/etc/passwd", "../../etc/passwd", "~/.bashrc", "config.json"])
def test_the_hub_id_box_refuses_paths(app: AppTest, hub, typed: str) -> None:  # noqa: F811
    app.run()
    app.text_input(key="repo").set_value(typed).run()
    assert_clean(app)
    assert "looks like a file path; local files are not read here" in app.error[0].value
    assert "Upload the config.json instead" in app.error[0].value
    assert "not valid JSON" not in texts(app)
    assert hub.requests == []


def test_a_repo_id_that_is_also_a_server_folder_is_asked_of_the_hub(app: AppTest, hub) -> None:  # noqa: F811
    """'planner/model' is a folder of the app's own checkout; the box reads it as a Hub id, never from disk."""
    app.run()
    app.text_input(key="repo").set_value("planner/model").run()
    assert_clean(app)
    assert "no repo 'planner/model' on the Hub" in app.error[0].value
    assert "has no config.json" not in app.error[0].value  # what reading the server's folder would have said
    assert hub.count(path_contains="/planner/model/") >= 1


# ---- the app: user text is shown as text --------------------------------------------------------


def test_a_markdown_link_in_the_link_shows_as_text(app: AppTest) -> None:  # noqa: F811
    app.query_params["repo"] = EVIL_LINK
    app.run()
    assert_clean(app)
    warnings = [w.value for w in app.sidebar.warning]
    assert len(warnings) == 1
    assert_inert(warnings[0])
    assert f"Ignored repo={EVIL_LINK} from the link" in shown_text(warnings[0])


def test_a_markdown_link_in_the_box_shows_as_text(app: AppTest) -> None:  # noqa: F811
    app.run()
    app.text_input(key="repo").set_value(EVIL_LINK).run()
    assert_clean(app)
    assert_inert(app.error[0].value)
    assert f"'{EVIL_LINK}' is not a catalog name or a Hub repo id" in shown_text(app.error[0].value)
    caption = " ".join(c.value for c in app.sidebar.caption)
    assert EVIL_LINK not in caption and "could not be loaded" in caption  # escaped inside :red[...]


def test_an_upload_named_like_a_link_shows_its_name_as_text(app: AppTest) -> None:  # noqa: F811
    name = "[x](http://evil.example).json"
    app.run()
    app.file_uploader(key="upload").upload(name, json.dumps(TINY_LLAMA_CONFIG).encode(), "application/json").run()
    assert_clean(app)
    caption = next(c.value for c in app.sidebar.caption if "params" in c.value)
    assert_inert(caption)
    assert shown_text(caption).startswith(name)


def test_config_text_quoted_in_warnings_and_errors_shows_as_text(app: AppTest) -> None:  # noqa: F811
    """A config's own strings reach the page in spec warnings or validation errors; either way as text."""
    config = {**TINY_LLAMA_CONFIG, "torch_dtype": EVIL_LINK}
    app.run()
    app.file_uploader(key="upload").upload("config.json", json.dumps(config).encode(), "application/json").run()
    assert_clean(app)
    bodies = [m.value for m in (*app.warning, *app.error) if "click here" in m.value]
    assert bodies, texts(app)
    for body in bodies:
        assert_inert(body)
        assert EVIL_LINK in shown_text(body)
