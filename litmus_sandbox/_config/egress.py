"""The egress policy: per-host rules (allow, deny, stub) and how they are read. Sans-io.

Rules are keyed by host (exact, or a glob) with an optional port; precedence is exact host
with port, exact host, globs in the order written, then the default. The ``[egress]`` table
of the policy file builds one with :meth:`EgressPolicy.from_mapping`; besides ``default``,
its ``redact_query_params`` (a list) replaces the query parameters whose values recorded
egress never keeps (``_config/secrets.py``).
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from litmus_sandbox._config.explain import config_error
from litmus_sandbox._config.secrets import SECRET_QUERY_PARAMS, redact_url
from litmus_sandbox._model.errors import ConfigError


@functools.lru_cache(maxsize=4096)  # tools ask the same few hosts again and again
def normalize_host(host: str) -> str:
    """The one spelling of ``host`` that rules are matched on, so that a rule on an address
    holds however a tool spells it.

    Lower case, without IPv6 brackets or trailing dots; an internationalised name in its
    ASCII (IDNA) form; an IPv4 address in any form the C resolver accepts (``2130706435``,
    ``0x7f000003``, ``127.3``, ``0177.0.0.3``, ``127.0.0.03``) as dotted decimal; an
    IPv6 address compressed, and an IPv4-mapped one (``::ffff:127.0.0.3``) as the IPv4
    address it connects to.
    """
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.rstrip(".")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return host  # not a name the resolver would take either: matched as written
    if ":" in host:
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            return host
        mapped = address.ipv4_mapped
        return str(mapped) if mapped is not None else str(address)
    if host[:1].isdigit():
        ipv4 = _inet_aton(host)
        if ipv4 is not None:
            return ipv4
    return host


def _inet_aton(text: str) -> str | None:
    """``text`` as dotted decimal if the C resolver reads it as an IPv4 address: one to
    four parts, each decimal, octal (leading ``0``) or hex (``0x``), the last filling the
    bits the others left (``inet_aton(3)``); None otherwise."""
    parts = text.split(".")
    if len(parts) > 4:
        return None
    values: list[int] = []
    for part in parts:
        if part[:2] in ("0x", "0X"):
            digits, base = part[2:], 16
        elif len(part) > 1 and part[0] == "0":
            digits, base = part[1:], 8
        else:
            digits, base = part, 10
        if not digits or not digits.isalnum():  # int() would also take "_" and spaces
            return None
        try:
            values.append(int(digits, base))
        except ValueError:
            return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    number = last
    for i, v in enumerate(head):
        number |= v << (8 * (3 - i))
    return str(ipaddress.IPv4Address(number))


EgressMode = Literal["allow", "deny", "stub"]
EGRESS_MODES: tuple[str, ...] = ("allow", "deny", "stub")

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# Characters a host pattern may use: hostname characters, glob syntax, IPv6 colons.
_PATTERN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._*?[]!:")


class EgressRule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What to do with traffic to one host (or glob of hosts).

    ``status``, ``headers`` and ``body`` are the configured response of a ``stub``.
    """

    mode: str = "allow"
    status: int = 200
    headers: dict[str, str] = {}
    body: str = ""

    def __post_init__(self) -> None:
        if self.mode not in EGRESS_MODES:
            raise ConfigError(
                f"unknown egress mode {self.mode!r} (one of {', '.join(EGRESS_MODES)})"
            )
        if not 100 <= self.status <= 599:
            raise ConfigError(f"a stub status must be between 100 and 599, not {self.status}")


_ALLOW = EgressRule(mode="allow")
_DENY = EgressRule(mode="deny")


def _coerce(value: EgressRule | str | Mapping[str, Any], source: str, key: str) -> EgressRule:
    if isinstance(value, EgressRule):
        return value
    if isinstance(value, str):
        value = {"mode": value}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{source}: [egress] {key!r}: expected a mode or a table, not {type(value).__name__}"
        )
    try:
        return msgspec.convert(dict(value), EgressRule)
    except msgspec.ValidationError as exc:
        raise config_error(
            exc, EgressRule, value, source=source, table="egress", key=repr(key)
        ) from None


def split_host_port(key: str) -> tuple[str, int | None]:
    """Split a rule key into (host pattern, port): ``host``, ``host:443``, ``[::1]:8080``.

    Raises:
        ConfigError: a malformed port or bracket.
    """
    if key.startswith("["):
        host, sep, rest = key[1:].partition("]")
        if not sep:
            raise ConfigError(f"egress rule {key!r}: unclosed '['")
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ConfigError(f"egress rule {key!r}: expected ':port' after ']'")
        return host, _port(rest[1:], key)
    if key.count(":") == 1:
        host, _, port = key.partition(":")
        return host, _port(port, key)
    return key, None  # a bare name, or an unbracketed IPv6 address (no port possible)


def _port(text: str, key: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ConfigError(f"egress rule {key!r}: port must be a number from 1 to 65535")
    return int(text)


class EgressPolicy:
    """Host (exact, or glob, optionally ``:port``) -> :class:`EgressRule`, and a default.

    Precedence: an exact host with the request's port, then the exact host without a port,
    then globs in the order written (a glob with a port matches only that port), then the
    default. Globs are shell-style and case-insensitive: ``*.example.com`` matches
    ``api.example.com`` but not ``example.com`` itself.

    Args:
        rules: pattern -> rule (a mode string, a mapping, or an :class:`EgressRule`).
        default: ``allow`` or ``deny`` for hosts no rule names.
        source: where the rules came from, for error messages.

    Raises:
        ConfigError: an unknown mode, an unknown key in a rule, a bad port or pattern.
    """

    def __init__(
        self,
        rules: Mapping[str, EgressRule | str | Mapping[str, Any]] | None = None,
        *,
        default: str = "allow",
        source: str = "policy",
        redact_query_params: Sequence[str] | None = None,
    ) -> None:
        #: Query parameters whose values recorded egress never keeps (``_config/secrets``).
        self.redact_query_params: tuple[str, ...] = (
            SECRET_QUERY_PARAMS if redact_query_params is None else tuple(redact_query_params)
        )
        if any(not isinstance(n, str) or not n for n in self.redact_query_params):
            raise ConfigError(f"{source}: [egress] redact_query_params must be names (strings)")
        if default not in ("allow", "deny"):
            raise ConfigError(
                f"{source}: [egress] default must be 'allow' or 'deny', not {default!r}"
            )
        self.default = _ALLOW if default == "allow" else _DENY
        self.source = source
        self._written: dict[str, EgressRule] = {}
        self._exact: dict[str, dict[int | None, EgressRule]] = {}
        self._globs: list[tuple[str, int | None, EgressRule]] = []
        for key, value in (rules or {}).items():
            where = f"{source}: [egress] {key!r}"
            if key == "default":  # from code, the default is the keyword argument
                raise ConfigError(f"{where}: pass the default as default=, not as a rule")
            rule = _coerce(value, source, key)
            host, port = split_host_port(key)
            # A glob is matched on the spelling of hosts; an exact host is one, however
            # the rule spells it.
            host = host.strip().lower() if any(c in host for c in "*?[") else normalize_host(host)
            if not host or not set(host) <= _PATTERN_CHARS:
                raise ConfigError(f"{where}: not a host name, address or glob")
            self._written[key] = rule
            if any(ch in host for ch in "*?["):
                self._globs.append((host, port, rule))
            else:
                self._exact.setdefault(host, {})[port] = rule

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "policy") -> EgressPolicy:
        """Build from the ``[egress]`` table of a policy file (``default`` is the default).

        Raises:
            ConfigError: as the constructor; also a key that looks like a misspelt
                ``default`` (``defualt = "deny"`` would otherwise be a rule for a host).
        """
        rules = dict(data)
        default = rules.pop("default", "allow")
        if not isinstance(default, str):
            raise ConfigError(f"{source}: [egress] default must be 'allow' or 'deny'")
        # No host is spelt with "_": the key cannot be a rule.
        redacted = rules.pop("redact_query_params", None)
        if redacted is not None and not isinstance(redacted, list | tuple):
            raise ConfigError(f"{source}: [egress] redact_query_params must be a list of names")
        for key in rules:
            if difflib.get_close_matches(key.lower(), ["default"], n=1, cutoff=0.75):
                raise ConfigError(
                    f"{source}: [egress] unknown key {key!r}: did you mean 'default'? "
                    '(host rules look like "*.example.com" = "allow")'
                )
        return cls(rules, default=default, source=source, redact_query_params=redacted)

    def decide(self, host: str, port: int | None = None) -> EgressRule:
        """The rule in force for ``host`` at ``port`` (see the class docstring for precedence)."""
        h = normalize_host(host)
        exact = self._exact.get(h)
        if exact is not None:
            rule = exact.get(port) if port is not None else None
            if rule is not None:
                return rule
            if None in exact:
                return exact[None]
        for pattern, rport, rule in self._globs:
            if (rport is None or rport == port) and fnmatch.fnmatchcase(h, pattern):
                return rule
        return self.default

    def redact_target(self, target: str) -> str:
        """``target`` (a path with its query, or a URL) as recorded egress keeps it: no
        user information, no value of a token-like query parameter."""
        if "?" not in target and "@" not in target:
            return target
        return redact_url(target, self.redact_query_params)

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary for the episode header (what the probe enforced)."""
        out: dict[str, Any] = {
            "default": self.default.mode,
            "rules": {key: _described(rule) for key, rule in self._written.items()},
        }
        if self.redact_query_params != SECRET_QUERY_PARAMS:
            out["redact_query_params"] = list(self.redact_query_params)
        return out


def _described(rule: EgressRule) -> dict[str, Any]:
    """A rule as the header says it: a stub's response only on a stub (a deny answers 403,
    never the 200 a rule's defaults would say)."""
    if rule.mode == "stub":
        return dict(msgspec.to_builtins(rule))
    return {"mode": rule.mode}


def denied_body(host: str, port: int | None) -> bytes:
    """The short body a denied request gets, naming who denied it."""
    where = host if port is None else f"{host}:{port}"
    return f"litmus-sandbox: egress to {where} was denied by the sandbox policy\n".encode()
