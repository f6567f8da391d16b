"""``safe_text``: recorded text is inert on a terminal and in Markdown, whatever it holds."""

from __future__ import annotations

import html
import unicodedata

from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from litmus_sandbox._model.safe_text import clip, for_html, for_terminal, md_code

#: Any character at all, lone surrogates, controls and unassigned code points included.
ANY_TEXT = st.text(st.characters(codec=None, categories=None), max_size=200)
UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"}


@given(ANY_TEXT)
def test_a_terminal_line_holds_no_character_a_terminal_acts_on(text: str) -> None:
    out = for_terminal(text)
    assert [c for c in out if unicodedata.category(c) in UNSAFE] == []
    assert out.isascii() or all(c in text for c in out if not c.isascii())


@given(ANY_TEXT)
def test_lines_keep_only_the_line_feed(text: str) -> None:
    out = for_terminal(text, lines=True)
    assert [c for c in out if unicodedata.category(c) in UNSAFE and c != "\n"] == []
    assert out.count("\n") == text.count("\n")


@given(ANY_TEXT)
def test_html_text_is_no_markup_and_no_invisible_character(text: str) -> None:
    out = for_html(text)
    assert not set(out) & set("<>\"'")  # neither an element nor the end of an attribute
    assert [c for c in out if unicodedata.category(c) in UNSAFE] == []
    assert html.unescape(out) == for_terminal(text)  # the text, escaped as on a terminal


def test_escapes_are_visible_and_plain_text_is_unchanged() -> None:
    assert for_terminal("\x1b[2J\x9b\x7f\r\t\u202e\u200b\U000e0001") == (
        "\\x1b[2J\\x9b\\x7f\\r\\t\\u202e\\u200b\\U000e0001"
    )
    assert for_terminal("naïve 日本 ✓ emoji 🙂") == "naïve 日本 ✓ emoji 🙂"


@given(ANY_TEXT)
def test_a_markdown_cell_is_one_code_span_whatever_the_text(text: str) -> None:
    cell = md_code(text)
    html = MarkdownIt("commonmark").enable("table").render(f"| h |\n|---|\n| {cell} |\n")
    body = html.split("<tbody>")[1]
    assert body.count("<td>") == 1
    inside = body.split("<td>")[1].split("</td>")[0]
    assert inside.startswith("<code>")
    assert inside.endswith("</code>")
    assert inside.count("<code>") == 1
    assert "<" not in inside.removeprefix("<code>").removesuffix("</code>")


@given(st.text(max_size=50), st.integers(min_value=0, max_value=60))
def test_clip_says_how_much_it_cut(text: str, limit: int) -> None:
    out = clip(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        assert out == f"{text[:limit]}…(+{len(text) - limit} chars)"


def test_a_line_break_in_markdown_is_a_visible_escape() -> None:
    assert md_code("pipe\r\nnewline") == "`pipe\\r\\nnewline`"
    assert md_code("a\nb") != md_code("a b")
