"""Secrets in a judge's configuration: which names hold one, and the redacted copy.

A judge's parameters are written at the head of every verdict stream and make up its
fingerprint. A value under a secret name (``api_key``, ``db_password``, ``X-Auth-Token``,
``api_key_value``, ``jwt``), the password of a URL (``https://user:PASSWORD@host``), the
values of token-like query parameters, ``password=`` settings and credential headers
written as text are never written and never fingerprinted (secret-shaped values are not
even accepted: ``_config/secrets.py``; secrets come from the environment), so a rotated key keeps the judge, and its cached verdicts, the same. The
rules are narrow on purpose: a name taken for a secret by mistake would hide a setting
that changes verdicts (``max_tokens``, ``token_limit``, ``sort_key``, ``pass_threshold``
are no secrets).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from litmus_sandbox._config.secrets import redact_query

REDACTED = "<redacted>"

#: Names that are secrets whole (separators and case aside: ``API-Key``, ``apiKey``).
_SECRET_NAMES = frozenset(
    {"key", "apikey", "token", "apitoken", "secret", "password", "passwd", "pass", "pwd"}
    | {"passphrase", "auth", "authorization", "credential", "credentials", "bearer", "cookie"}
    | {"session", "sessionid", "jwt", "dsn"}
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
#: Parts that make a name a secret wherever they are in it (``api_key_value``,
#: ``private_key_pem``, ``signing_secret_b64``, ``auth_header``, ``apiKeys``).
_SECRET_PARTS = (
    "apikey",
    "privatekey",
    "accesskey",
    "secretkey",
    "signingkey",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "authtoken",
    "accesstoken",
    "refreshtoken",
    "authheader",
    "authorization",
)
#: Words that make a name a secret (``jwt_value``, ``session_cookie``, ``db_dsn``).
_SECRET_WORDS = frozenset({"jwt", "cookie", "cookies", "dsn"})
#: ``password=VALUE`` in a connection string (``host=db password=... dbname=x``).
_SETTING = re.compile(r"(?i)\b(password|passwd|pwd)=[^\s;&]+")
#: ``Authorization: VALUE`` (and the other credential headers) written as text.
_HEADER = re.compile(
    r"(?i)\b(authorization|proxy-authorization|cookie|set-cookie|x-api-key|x-auth-token)"
    r"\s*:\s*[^\r\n]+"
)


def is_secret_name(name: object) -> bool:
    """Whether a judge parameter called ``name`` holds a secret (see the module docstring)."""
    text = str(name)
    flat = re.sub(r"[^a-z0-9]", "", text.lower())
    if flat in _SECRET_NAMES or flat.endswith(_SECRET_ENDINGS):
        return True
    if any(part in flat for part in _SECRET_PARTS):  # api_key_value, signing_secret_b64
        return True
    words = [w.lower() for w in _WORD.findall(text)]
    if _SECRET_WORDS.intersection(words):  # jwt_token, session_cookie
        return True
    return (
        len(words) > 1
        and words[-1] in ("token", "key", "keys")
        and not _NOT_SECRET_WORDS.intersection(words[:-1])
    )


def redact(obj: Any) -> Any:
    """``obj`` with every value under a secret name redacted, and in every text: a URL's
    password, the values of token-like query parameters, ``password=`` settings (a
    connection string) and the value of a credential header (``Authorization: ...``)."""
    if isinstance(obj, Mapping):
        return {k: (REDACTED if is_secret_name(k) else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        if "://" in obj:
            obj = _URL_PASSWORD.sub(rf"\1:{REDACTED}@", obj)
            obj = redact_query(obj) if "?" in obj else obj
        obj = _SETTING.sub(rf"\1={REDACTED}", obj)
        return _HEADER.sub(rf"\1: {REDACTED}", obj)
    return obj


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret value replaced (an endpoint's error
    message that echoes the key it was sent is shown only this way)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text
