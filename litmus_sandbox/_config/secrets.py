"""Secrets, never written: the shapes a policy file may not carry, and what recorded egress
drops. Sans-io.

A secret reaches a judge (or a tool) only through the environment: ``api_key_env`` and the
``[judge.secrets]`` table name environment variables, never values. So a policy file that
carries a secret-shaped literal anywhere is refused (:func:`refuse_secret_literals`), with
an error that names the table and the key and never the value:

==========================  ===================================================
shape                       for example
==========================  ===================================================
a PEM block                 ``-----BEGIN PRIVATE KEY-----``
a JSON Web Token            ``eyJhbGciOi....eyJzdWIiOi....sig``
an HTTP credential          ``Bearer 3f9a1c77e2b4...``, ``Basic dXNlcjpwdw==``
URL user information        ``postgresql://app:PASSWORD@db/prod``
a token in a URL's query    ``https://api.example/v1?api_key=...``
a well-known key prefix     ``sk-``, ``ghp_``, ``github_pat_``, ``AKIA``, ``xoxb-``,
                            ``glpat-``, ``AIza``, ``sk_live_``, ``hf_``
==========================  ===================================================

Recorded egress (events, cassettes) keeps no URL user information
(:func:`redact_url`), no value of a credential header (:data:`SECRET_HEADERS`), and no
value of a token-like query parameter (:data:`SECRET_QUERY_PARAMS`, replaced by the
``[egress]`` table's ``redact_query_params`` when it has one).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any

from litmus_sandbox._core.redaction_shapes import KEY_PREFIX
from litmus_sandbox._model.errors import ConfigError

REDACTED = "<redacted>"

#: Query parameters whose values recorded egress never keeps (compared in lower case with
#: separators dropped: ``api_key``, ``apiKey`` and ``api-key`` are one).
SECRET_QUERY_PARAMS: tuple[str, ...] = (
    "api_key",
    "apikey",
    "key",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth",
    "auth_token",
    "authorization",
    "password",
    "passwd",
    "pwd",
    "secret",
    "client_secret",
    "signature",
    "sig",
    "session",
    "sessionid",
    "jwt",
    "code",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
)
#: Headers whose values recorded egress never keeps.
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "x-auth-token"}
)

_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")
_BEARER = re.compile(r"\bBearer\s+([A-Za-z0-9._~+/=-]{12,})")
_BASIC = re.compile(r"\bBasic\s+([A-Za-z0-9+/]{4,}={0,2})")
# Each pattern starts where a scan can only begin once per run of characters (a scheme
# not preceded by a scheme character, a parameter name that holds no "?"), so a search
# is linear in the text: a 300 KB stub result is checked in milliseconds, not minutes.
_USERINFO = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@:]*:[^/?#\s@]+@")
_QUERY_PARAM = re.compile(r"[?&]([^=&#\s?]+)=([^&#\s]+)")
#: Known API-key prefixes (OpenAI, GitHub, AWS, Slack, GitLab, Google, Stripe, Hugging
#: Face): the record-time redaction's own pattern.
_PREFIXES = KEY_PREFIX


#: The prefixes :data:`_PREFIXES` knows, longest first (only these are ever quoted).
_PREFIX_NAMES = (
    "github_pat_",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "rk_test_",
    "pk_live_",
    "pk_test_",
    "glpat-",
    "sk-ant-",
    "xoxa-",
    "xoxb-",
    "xoxp-",
    "xoxr-",
    "xoxs-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "AKIA",
    "ASIA",
    "AIza",
    "sk-",
    "hf_",
)


def _flat(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_SECRET_QUERY_FLAT = frozenset(_flat(n) for n in SECRET_QUERY_PARAMS)


def secret_shape(text: str) -> str | None:
    """What secret ``text`` looks like it holds (``a PEM block``...), or None."""
    if _PEM.search(text):
        return "a PEM block"
    if _JWT.search(text):
        return "a JSON Web Token"
    bearer = _BEARER.search(text)
    if bearer and re.search(r"[0-9._~+/=-]", bearer.group(1)):
        return "a Bearer credential"
    for basic in _BASIC.finditer(text):
        try:
            decoded = base64.b64decode(basic.group(1), validate=True)
        except (binascii.Error, ValueError):
            continue
        if b":" in decoded:  # user:password
            return "a Basic credential"
    if _USERINFO.search(text):
        return "a URL with a password in it"
    if "://" in text:
        for name, _ in _QUERY_PARAM.findall(text):
            if _flat(name) in _SECRET_QUERY_FLAT:
                return f"a URL with a token in its query ({name}=)"
    found = _PREFIXES.search(text)
    if found:
        key = found.group(0)
        prefix = next((p for p in _PREFIX_NAMES if key.startswith(p)), "")
        return f"a key with a well-known prefix ({prefix}...)"
    return None


def refuse_secret_literals(data: Mapping[str, Any], *, source: str) -> None:
    """Refuse a policy document that carries a secret-shaped literal anywhere.

    Raises:
        ConfigError: naming where (``[judge.params] base_url``), what it looks like, and
            how to pass a secret instead; never the value.
    """
    for where, text in _strings(data, ()):
        shape = secret_shape(text)
        if shape is not None:
            at = f"[{'.'.join(where[:-1])}] {where[-1]}" if len(where) > 1 else f"[{where[0]}]"
            raise ConfigError(
                f"{source}: {at} holds what looks like a secret ({shape}): a policy file is "
                "written into every verdict stream; pass secrets through the environment "
                "(name the variable in [judge.secrets], or api_key_env)"
            )


def _strings(obj: Any, where: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], str]]:
    if isinstance(obj, str):
        yield where, obj
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from _strings(key, where)  # a secret written as a key is one too
            yield from _strings(value, (*where, str(key)))
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            last = f"{where[-1]}[{i}]" if where else f"[{i}]"
            yield from _strings(value, (*where[:-1], last))


def redact_url(url: str, params: Iterable[str] = SECRET_QUERY_PARAMS) -> str:
    """``url`` (or an origin-form target, ``/path?query``) without its user information
    (dropped: a URL recorded with a rotated password is the same URL) and with the values
    of the token-like query ``params`` redacted."""
    scheme, sep, rest = url.partition("://")
    if sep:
        end = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
        authority, tail = rest[:end], rest[end:]
        if "@" in authority:
            url = f"{scheme}://{authority.rpartition('@')[2]}{tail}"
    return redact_query(url, params)


def redact_query(target: str, params: Iterable[str] = SECRET_QUERY_PARAMS) -> str:
    """``target`` with the values of the token-like query ``params`` redacted."""
    path, q, rest = target.partition("?")
    if not q:
        return target
    query, hash_, fragment = rest.partition("#")
    names = _SECRET_QUERY_FLAT if params is SECRET_QUERY_PARAMS else {_flat(p) for p in params}
    parts = []
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        parts.append(f"{name}={REDACTED}" if eq and value and _flat(name) in names else part)
    return f"{path}?{'&'.join(parts)}{hash_}{fragment}"


def redact_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``headers`` with the values of :data:`SECRET_HEADERS` redacted."""
    return tuple((k, REDACTED if k.lower() in SECRET_HEADERS else v) for k, v in headers)
