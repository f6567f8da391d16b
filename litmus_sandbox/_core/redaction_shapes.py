"""Secret shapes in text, and the redacted form that replaces them. Sans-io.

A *shape* is a credential recognised by its form wherever it sits in a string: the part
that is the secret is found, and only that part is replaced, so the rest of the text (a
DSN's host, a header's name, a command line) stays readable.

==============  =====================================================  ======================
shape           what is found                                          what is replaced
==============  =====================================================  ======================
``pem``         ``-----BEGIN ...-----`` to its ``-----END ...-----``   the whole block (to the
                                                                       end of the text if the
                                                                       block never ends)
``jwt``         ``eyJ....eyJ....sig`` (a JSON Web Token)               the token
``bearer``      ``Bearer <token>`` (any case; 8 characters or more,    the token
                with a digit or punctuation unless 20 or more)
``basic``       ``Basic <base64>`` that decodes to ``user:password``   the base64
``userinfo``    ``scheme://user:PASSWORD@host``                        the password (a user
                                                                       name alone is kept)
``key_prefix``  a key with a well-known prefix: ``sk-``, ``ghp_``,     the key
                ``github_pat_``, ``AKIA``, ``xoxb-``, ``glpat-``,
                ``AIza``, ``sk_live_``, ``hf_`` ...
``setting``     a secret name given a value in text: ``password=x``,   the value
                ``?api_key=x``, ``"token": "x"``, a header line
                ``Authorization: x`` (names as argument keys match)
==============  =====================================================  ======================

A user pattern (``[record] redact_patterns``) replaces its first group when it has
groups, else the whole match.

The redacted form is ``<redacted N chars sha256:PREFIX>``: N is the length of the plain
value (``bytes`` for a bytes value), PREFIX the first :data:`HASH_PREFIX` hex digits of
the SHA-256 of its UTF-8 text. The same plain value always gives the same form, so
recordings still match and compare; a form already in the text is never matched again, a
match that overlaps one is left alone, and text is redacted to a fixed point: redaction
is idempotent.

Every pattern starts where a scan can begin only once per run of characters, so a scan
is linear in the text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Iterator, Sequence

#: Hex digits of the SHA-256 kept in a redacted form (48 bits: equal values stay equal,
#: and unequal ones collide about once in 10^14 pairs).
HASH_PREFIX = 12
#: A redacted form, as :func:`marker` writes it.
MARKER = re.compile(r"<redacted \d+ (?:chars|bytes) sha256:[0-9a-f]{12}>")
#: The shapes recognised by default, in the order the docs list them.
SHAPES: tuple[str, ...] = ("pem", "jwt", "bearer", "basic", "userinfo", "key_prefix", "setting")

#: Whether an argument (or setting) name is a secret's.
KeyTest = Callable[[str], bool]
#: A found secret: start, end, shape.
Span = tuple[int, int, str]


def marker(plain: str | bytes) -> str:
    """The redacted form of ``plain`` (see the module docstring)."""
    if isinstance(plain, bytes):
        data, size, unit = plain, len(plain), "bytes"
    else:
        data, size, unit = plain.encode("utf-8", "surrogatepass"), len(plain), "chars"
    return f"<redacted {size} {unit} sha256:{hashlib.sha256(data).hexdigest()[:HASH_PREFIX]}>"


_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{1,64}-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{1,64}-----")
_JWT = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9_-])bearer[ \t]+([A-Za-z0-9._~+/=-]+)")
_BASIC = re.compile(r"(?i)(?<![A-Za-z0-9_-])basic[ \t]+([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])")
# The password runs to the last "@" of the authority (a password may hold "@" or ":").
_USERINFO = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@:]*:([^/?#\s]*)@")
KEY_PREFIX = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"sk-[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic (sk-ant-...)
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access keys
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r")"
)
_NAME = r"([A-Za-z][A-Za-z0-9_.-]{0,63})"
#: An unquoted value: up to a separator, a quote or a bracket; an auth scheme word
#: (``Bearer``, ``Token`` ...) takes the word after it along.
_BARE = r"((?i:(?:bearer|basic|token|digest|bot)[ \t]+)?[^\s\"'&;,<>(){}\[\]]+)"
_QUOTED = r"(?:\"([^\"\r\n]*)\"|'([^'\r\n]*)')"
#: ``name=value`` anywhere (a query, a connection string, a flag, an assignment).
_ASSIGNED = re.compile(rf"(?<![A-Za-z0-9_]){_NAME}[ \t]*=[ \t]*(?:{_QUOTED}|{_BARE})")
#: ``"name": value`` (JSON or a Python dict written as text).
_QUOTED_KEY = re.compile(rf"[\"']{_NAME}[\"'][ \t]*:[ \t]*(?:{_QUOTED}|{_BARE})")
#: ``Name: value`` at the start of a line or right after a quote (a header as text).
_HEADER = re.compile(rf"(?m)(?:^|(?<=[\"']))[ \t]*{_NAME}[ \t]*:[ \t]*([^\r\n\"']+)")


#: What every default shape needs somewhere in the text: a text with none of these is
#: passed over with one scan (most argument values).
_TRIGGER = re.compile(
    r"[=:]|-----BEGIN |eyJ|(?i:bearer|basic)|sk-|gh[pousr]_|github_pat_|AKIA|ASIA|xox[abprs]-"
    r"|glpat-|AIza|_live_|_test_|hf_"
)


def _pem(text: str) -> Iterator[Span]:
    pos = 0
    while (begin := _PEM_BEGIN.search(text, pos)) is not None:
        end = _PEM_END.search(text, begin.end())
        stop = len(text) if end is None else end.end()
        yield begin.start(), stop, "pem"
        if end is None:
            return
        pos = stop


def _jwt(text: str) -> Iterator[Span]:
    for m in _JWT.finditer(text):
        yield m.start(), m.end(), "jwt"


def _bearer(text: str) -> Iterator[Span]:
    for m in _BEARER.finditer(text):
        token = m.group(1)
        if len(token) >= 20 or (len(token) >= 8 and not token.isalpha()):
            yield m.start(1), m.end(1), "bearer"


def _basic(text: str) -> Iterator[Span]:
    for m in _BASIC.finditer(text):
        try:
            decoded = base64.b64decode(m.group(1), validate=True)
        except (binascii.Error, ValueError):
            continue
        if b":" in decoded:  # user:password
            yield m.start(1), m.end(1), "basic"


def _userinfo(text: str) -> Iterator[Span]:
    if "://" not in text:
        return
    for m in _USERINFO.finditer(text):
        if m.group(1):
            yield m.start(1), m.end(1), "userinfo"


def _key_prefix(text: str) -> Iterator[Span]:
    for m in KEY_PREFIX.finditer(text):
        yield m.start(), m.end(), "key_prefix"


def _settings(text: str, is_secret_key: KeyTest) -> Iterator[Span]:
    for pattern in (_ASSIGNED, _QUOTED_KEY, _HEADER):
        for m in pattern.finditer(text):
            if not is_secret_key(m.group(1)):
                continue
            group = next((i for i in range(2, (m.lastindex or 1) + 1) if m.group(i)), None)
            if group is not None:
                yield m.start(group), m.end(group), "setting"


_DETECTORS: dict[str, Callable[[str], Iterator[Span]]] = {
    "pem": _pem,
    "jwt": _jwt,
    "bearer": _bearer,
    "basic": _basic,
    "userinfo": _userinfo,
    "key_prefix": _key_prefix,
}


def _pattern(text: str, pattern: re.Pattern[str]) -> Iterator[Span]:
    group = 1 if pattern.groups else 0
    for m in pattern.finditer(text):
        start, end = m.span(group)
        if end > start:
            yield start, end, "pattern"


def find_spans(
    text: str,
    shapes: Sequence[str],
    is_secret_key: KeyTest,
    patterns: Sequence[re.Pattern[str]] = (),
) -> list[Span]:
    """The secrets in ``text`` by ``shapes`` (and user ``patterns``), in text order;
    spans that overlap a redacted form already in the text are left out."""
    if not patterns and _TRIGGER.search(text) is None:
        return []
    found: list[Span] = []
    for shape in shapes:
        if shape == "setting":
            found.extend(_settings(text, is_secret_key))
        else:
            found.extend(_DETECTORS[shape](text))
    for pattern in patterns:
        found.extend(_pattern(text, pattern))
    if not found:
        return found
    done = [m.span() for m in MARKER.finditer(text)] if "<redacted " in text else []
    if done:
        found = [s for s in found if not any(s[0] < e and b < s[1] for b, e in done)]
    return sorted(found)


def redact_text(
    text: str,
    shapes: Sequence[str],
    is_secret_key: KeyTest,
    patterns: Sequence[re.Pattern[str]] = (),
) -> tuple[str, list[str]]:
    """``text`` with each secret found (:func:`find_spans`) replaced by its redacted form
    (overlapping finds are merged into one), and the shapes found, each once.

    A redacted form changes what is next to the text around it (a token that followed
    ``-`` now follows ``>``), so the text is looked through again until nothing more is
    found: the result is a fixed point (each pass only shrinks what is not yet redacted).
    """
    found: list[str] = []
    while spans := find_spans(text, shapes, is_secret_key, patterns):
        text = _replaced(text, spans)
        found.extend(shape for _, _, shape in spans)
    return text, list(dict.fromkeys(found))


def _replaced(text: str, spans: list[Span]) -> str:
    out: list[str] = []
    pos = 0
    start, end = spans[0][0], spans[0][1]
    for s, e, _ in spans[1:]:
        if s < end:  # overlapping: one secret
            end = max(end, e)
            continue
        out.append(text[pos:start])
        out.append(marker(text[start:end]))
        pos, start, end = end, s, e
    out.append(text[pos:start])
    out.append(marker(text[start:end]))
    out.append(text[end:])
    return "".join(out)
