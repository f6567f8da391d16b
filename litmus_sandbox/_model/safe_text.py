"""Recorded text made safe for each kind of output: the one place every writer uses.

Everything an episode holds came from an agent under adversarial test, or from a tool it
called: case and episode ids, agents, tool and argument names, messages, results, errors,
file paths, judge reasons. It reaches people through a terminal, a pull-request comment
and a browser, and there it must stay data:

- :func:`for_terminal`: C0 and C1 controls, DEL, bidi overrides and isolates, zero-width
  and other format characters, line and paragraph separators, lone surrogates and
  unassigned code points are written as visible escapes (``\\x1b``, ``\\u202e``), never
  emitted. A line break is kept only where the caller shows several lines. Colour comes
  only from our own styling, never from the text.
- :func:`md_code`: a Markdown code span that nothing inside can leave: no image, link,
  autolink, HTML element, mention or emphasis forms, and a ``|`` cannot split a table
  cell. Controls are escaped as for the terminal.
- :func:`json_inert`: JSON text (UTF-8) with the invisible and control characters that
  JSON leaves raw (DEL, C1, bidi, zero-width, separators) written as ``\\uXXXX`` escapes:
  the same values, but nothing acts on a terminal that prints the report.
- :func:`for_html`: text for an HTML text node or attribute written by the server: the
  terminal's escapes, then HTML's (``<``, ``&``, quotes), so nothing becomes markup and
  nothing invisible reorders the page.
- :func:`clip`: a long field cut visibly, ``…(+N chars)``, so what follows it on a line
  (the UNSAFE mark, the arguments, the evidence) stays on screen.

The HTML page writes recorded text through :func:`for_html`, or through text nodes that
its script fills the same way (``reports/_html*``); the JSON formats keep the full
values. Pure functions: no I/O.
"""

from __future__ import annotations

import html
import re
import unicodedata

__all__ = ["clip", "for_html", "for_terminal", "json_inert", "md_code"]

#: Characters a terminal or a renderer may act on, or that hide or reorder text: controls,
#: format characters (bidi, zero-width, tags), separators, surrogates, unassigned.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Cn"})
#: Only these can be unsafe: the printable ASCII range never is (fast path); nor, where
#: the caller shows several lines, a line feed.
_CANDIDATES = re.compile(r"[^\x20-\x7e]")
_CANDIDATES_OR_LINES = re.compile(r"[^\x20-\x7e\n]")
#: Printable ASCII, and with a line feed: text made only of these is returned as it is.
_PRINTABLE = bytes(range(0x20, 0x7F))
_PRINTABLE_LINES = _PRINTABLE + b"\n"
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if unicodedata.category(char) in _UNSAFE_CATEGORIES:
        return _escape(char)
    return char


def for_terminal(text: str, *, lines: bool = False) -> str:
    """``text`` with every character a terminal could act on written as a visible escape.

    With ``lines``, a line feed stays a line break (a carriage return never does: it
    would let a line overwrite the one before it).
    """
    if text.isascii():
        # Printable ASCII (and line feeds) throughout: nothing to escape, found at C speed
        # (a short text by ``isprintable``, several lines by deleting what may stay).
        if lines:
            if not text.encode().translate(None, _PRINTABLE_LINES):
                return text
        elif text.isprintable():
            return text
    return (_CANDIDATES_OR_LINES if lines else _CANDIDATES).sub(_visible, text)


def for_html(text: str) -> str:
    """``text`` for HTML, inert: :func:`for_terminal`'s visible escapes, then ``<``, ``>``,
    ``&`` and both quotes as character references (safe in an attribute too)."""
    return html.escape(for_terminal(text), quote=True)


def clip(text: str, limit: int) -> str:
    """``text``, or its first characters and ``…(+N chars)`` when it is over ``limit``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…(+{len(text) - limit} chars)"


_BACKTICKS = re.compile(r"`+")


def md_code(text: str, *, cell: bool = True, empty: str = "(empty)") -> str:
    """``text`` as one inline Markdown code span; with ``cell``, safe in a GFM table cell.

    In a code span nothing is markup: no image, link, autolink, HTML or emphasis, and
    GitHub links no mention there. The fence is one backtick longer than the longest run
    inside; in a cell a ``|`` is escaped (GFM removes the backslash there). Controls,
    line breaks included, are visible escapes (``\\n``: two values that differ by one
    never look alike); blank text is shown as ``empty`` or as visible spaces (``␣``),
    since a code span cannot hold only spaces.
    """
    plain = text.isascii() and text.isprintable() and text.strip() == text and text
    if plain and "`" not in text and "|" not in text:
        return f"`{text}`"  # what the steps below make of it, at once
    line = for_terminal(text)
    if not line.strip():
        return f"`{empty}`" if not line else f"`{line}`".replace(" ", "\u2423")
    if cell:
        line = line.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(line)), default=0) + 1)
    pad = " " if line[0] in "` " or line[-1] in "` " else ""
    return f"{fence}{pad}{line}{pad}{fence}"


#: The UTF-8 of the characters a JSON encoder leaves raw that a terminal may act on or
#: that hide or reorder text: DEL, C1 controls, soft hyphen, Arabic letter mark, Mongolian
#: vowel separator, zero-width and bidi marks, separators, word joiner and invisible
#: operators, isolates, BOM, interlinear annotations, tags.
_JSON_RAW = re.compile(
    rb"\x7f|\xc2[\x80-\x9f\xad]|\xd8\x9c|\xe1\xa0\x8e|\xe2\x80[\x8b-\x8f\xa8-\xae]"
    rb"|\xe2\x81[\xa0-\xaf]|\xef\xbb\xbf|\xef\xbf[\xb9-\xbb]|\xf3\xa0[\x80\x81][\x80-\xbf]"
)


def _json_escape(match: re.Match[bytes]) -> bytes:
    code = ord(match.group().decode())
    if code > 0xFFFF:  # a surrogate pair, as JSON writes an astral character
        code -= 0x10000
        return b"\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))
    return b"\\u%04x" % code


def json_inert(data: bytes) -> bytes:
    """``data`` (JSON in UTF-8) with :data:`_JSON_RAW`'s characters as ``\\uXXXX``
    escapes. Outside strings JSON is ASCII, so only string contents change, and a JSON
    reader decodes the same values."""
    return _JSON_RAW.sub(_json_escape, data)
