"""Secrets in a judge's configuration: which names hold one, and the redacted copy.

A judge's parameters are written at the head of every verdict stream and make up its
fingerprint. A value under a secret name (``api_key``, ``db_password``, ``X-Auth-Token``)
and the password of a URL (``https://user:PASSWORD@host``) are never written and never
fingerprinted, so a rotated key keeps the judge, and its cached verdicts, the same. The
rules are narrow on purpose: a name taken for a secret by mistake would hide a setting
that changes verdicts (``max_tokens``, ``token_limit``, ``sort_key``, ``pass_threshold``
are no secrets).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"

#: Names that are secrets whole (separators and case aside: ``API-Key``, ``apiKey``).
_SECRET_NAMES = frozenset(
    {"key", "apikey", "token", "apitoken", "secret", "password", "passwd", "pass", "pwd"}
    | {"passphrase", "auth", "authorization", "credential", "credentials", "bearer", "cookie"}
)
#: Endings that make a name a secret (``openai_api_key``, ``db_password``, ``clientSecret``,
#: ``X-Auth-Token``, ``accesstoken``).
_SECRET_ENDINGS = (
    "apikey",
    "apitoken",
    "accesskey",
    "secretkey",
    "privatekey",
    "signingkey",
    "accesstoken",
    "authtoken",
    "refreshtoken",
    "bearertoken",
    "sessiontoken",
    "idtoken",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credentials",
    "authorization",
)
#: A name ending in the word ``token`` or ``key`` is a secret (``github_token``,
#: ``openai_key``) unless another of its words says it counts or looks something up.
_NOT_SECRET_WORDS = frozenset(
    {"max", "min", "num", "n", "count", "limit", "total", "per", "sort", "primary", "foreign"}
    | {"cache", "partition", "group", "dict", "map", "lookup", "index", "id", "join", "hash"}
)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
#: The password of a URL's user information: ``https://user:PASSWORD@host`` (the part
#: between ``://`` and the first ``/``, ``?`` or ``#``).
_URL_PASSWORD = re.compile(r"(?<=://)([^/?#@:\s]*):[^/?#@\s]*@")


def is_secret_name(name: object) -> bool:
    """Whether a judge parameter called ``name`` holds a secret (see the module docstring)."""
    text = str(name)
    flat = re.sub(r"[^a-z0-9]", "", text.lower())
    if flat in _SECRET_NAMES or flat.endswith(_SECRET_ENDINGS):
        return True
    words = [w.lower() for w in _WORD.findall(text)]
    return (
        len(words) > 1
        and words[-1] in ("token", "key")
        and not _NOT_SECRET_WORDS.intersection(words[:-1])
    )


def redact(obj: Any) -> Any:
    """``obj`` with every value under a secret name, and every URL's password, redacted."""
    if isinstance(obj, Mapping):
        return {k: (REDACTED if is_secret_name(k) else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str) and "://" in obj:
        return _URL_PASSWORD.sub(rf"\1:{REDACTED}@", obj)
    return obj


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret value replaced (an endpoint's error
    message that echoes the key it was sent is shown only this way)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text
