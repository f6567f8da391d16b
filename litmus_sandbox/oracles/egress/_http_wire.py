"""What the forward proxy needs beyond h11, sans-io: request targets, TLS SNI, proxy env.

h11 parses and frames HTTP/1.1 (:mod:`._downstream`, :mod:`._upstream`). What it does not
do lives here, as pure functions over strings and bytes, tested on their own: splitting
absolute-form and CONNECT targets, reading the server name from a TLS ClientHello
without decrypting it, the environment variables that point tools at the proxy, and the
decoder of strict mode's blocked-connection reports. Also the proxy's errors, named by
whose fault they are.
"""

from __future__ import annotations

import functools
from typing import NamedTuple
from urllib.parse import urlsplit

import msgspec

from litmus_sandbox._config.egress import normalize_host


class BadMessage(Exception):
    """A message the proxy cannot relay; ``status`` is the response the client gets."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Abort(Exception):
    """Stop relaying and close the client connection (a response is already under way)."""


class Reset(Abort):
    """Stop relaying and reset the client connection, as the upstream reset or refused
    ours: the client sees the failure it would have seen without the proxy, not an HTTP
    error the upstream never sent."""


class UpstreamBad(Exception):
    """The upstream sent something that is not an HTTP response (``reason`` says what)."""

    def __init__(self, reason: str = "malformed upstream response") -> None:
        super().__init__(reason)
        self.reason = reason


class UpstreamClosed(Exception):
    """The upstream closed (or reset) the connection before its response head."""


@functools.lru_cache(maxsize=1024)  # tools ask the same few URLs again and again
def split_target(target: str) -> tuple[str, int, str]:
    """(host, port, origin-form path) of an absolute-form ``http://`` request target.

    Raises:
        BadMessage: not an absolute ``http`` URL (``https`` goes through CONNECT).
    """
    try:
        url = urlsplit(target)
        port = url.port
    except ValueError as exc:
        raise BadMessage(400, f"bad request target: {exc}") from None
    if url.scheme.lower() != "http" or not url.hostname:
        raise BadMessage(
            400,
            "a forward proxy takes absolute http:// targets; use CONNECT for https and other protocols",
        )
    path = url.path or "/"
    if url.query:
        path = f"{path}?{url.query}"
    return normalize_host(url.hostname), port if port is not None else 80, path


def split_authority(target: str) -> tuple[str, int]:
    """(host, port) of a CONNECT target: ``host:port`` or ``[v6]:port``.

    Raises:
        BadMessage: no port, or a malformed one.
    """
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise BadMessage(400, "CONNECT needs host:port")
    return normalize_host(host), int(port)


class TLSHello(NamedTuple):
    """What the first bytes of a tunnel say: whether they can tell yet (``complete``),
    whether they start a TLS handshake (``tls``), and the SNI server name if any."""

    complete: bool
    tls: bool
    server_name: str | None


_NEED_MORE = TLSHello(False, True, None)
_NOT_TLS = TLSHello(True, False, None)
_NO_SNI = TLSHello(True, True, None)


def parse_sni(data: bytes) -> TLSHello:
    """Read the SNI server name from the start of a TLS connection, without decrypting.

    ``data`` is what the client sent first. TLS records of type handshake are reassembled
    until the whole ClientHello is in hand (it may span records); then its
    ``server_name`` extension (type 0, name type ``host_name``) is returned. A prefix
    too short to decide gives ``complete=False``: call again with more bytes. Anything
    malformed after a plausible TLS start gives ``tls=True`` and no name.
    """
    if not data:
        return _NEED_MORE
    if data[0] != 0x16 or (len(data) > 1 and data[1] != 3):
        return _NOT_TLS
    handshake = bytearray()
    pos = 0
    needed: int | None = None
    while needed is None or len(handshake) < needed:
        if len(data) - pos < 5:
            return _NEED_MORE
        if data[pos] != 0x16:
            return _NO_SNI  # the ClientHello was cut short by another record type
        length = int.from_bytes(data[pos + 3 : pos + 5], "big")
        if length == 0 or length > 2**14 + 2048:
            return _NO_SNI
        if len(data) - pos - 5 < length:
            return _NEED_MORE
        handshake += data[pos + 5 : pos + 5 + length]
        pos += 5 + length
        if needed is None and len(handshake) >= 4:
            if handshake[0] != 1:  # not a ClientHello
                return _NO_SNI
            needed = 4 + int.from_bytes(handshake[1:4], "big")
    return TLSHello(True, True, _server_name(bytes(handshake[4:needed])))


def _server_name(hello: bytes) -> str | None:
    """The host_name in a ClientHello body's server_name extension (RFC 6066 3)."""

    def u16(at: int) -> int:
        if at + 2 > len(hello):
            raise IndexError(at)
        return int.from_bytes(hello[at : at + 2], "big")

    try:
        pos = 2 + 32  # legacy_version, random
        pos += 1 + hello[pos]  # legacy_session_id
        pos += 2 + u16(pos)  # cipher_suites
        pos += 1 + hello[pos]  # legacy_compression_methods
        if pos >= len(hello):
            return None  # no extensions at all
        end = min(pos + 2 + u16(pos), len(hello))
        pos += 2
        while pos + 4 <= end:
            kind, size = u16(pos), u16(pos + 2)
            pos += 4
            if kind == 0:
                names_end = min(pos + 2 + u16(pos), pos + size)
                at = pos + 2
                while at + 3 <= names_end:
                    name_type, name_len = hello[at], u16(at + 1)
                    at += 3
                    if name_type == 0:
                        name = hello[at : at + name_len]
                        return name.decode("ascii").lower() if len(name) == name_len else None
                    at += name_len
                return None
            pos += size
    except (IndexError, UnicodeDecodeError):
        return None
    return None


def proxy_env(host: str, port: int, *, no_proxy: str = "") -> dict[str, str]:
    """Environment variables that point subprocess tools at a proxy on ``host:port``.

    The standard variables in both cases (curl reads only the lower-case ``http_proxy``;
    pip, requests, httpx, git and most others read either), an empty ``NO_PROXY`` so
    that nothing (loopback included) bypasses the proxy, and the variants of tools that
    ignore the standard ones: npm, yarn, Node's own ``fetch`` (``NODE_USE_ENV_PROXY``,
    Node 24+), global-agent, cargo.
    """
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    env: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    env.update(
        {
            "npm_config_proxy": url,
            "npm_config_https_proxy": url,
            "npm_config_noproxy": no_proxy,
            "YARN_HTTP_PROXY": url,
            "YARN_HTTPS_PROXY": url,
            "NODE_USE_ENV_PROXY": "1",
            "GLOBAL_AGENT_HTTP_PROXY": url,
            "GLOBAL_AGENT_HTTPS_PROXY": url,
            "GLOBAL_AGENT_NO_PROXY": no_proxy,
            "CARGO_HTTP_PROXY": url,
            "PIP_PROXY": url,
        }
    )
    return env


class BlockedReport(msgspec.Struct, frozen=True):
    """What strict mode's bridge reports of a connection the namespace refused."""

    proto: str
    host: str
    port: int | None = None
    name: str | None = None


report_decoder = msgspec.json.Decoder(BlockedReport)
