"""HTTP egress replay: recorded responses served by (method, URL), and their recorder.

An :class:`~litmus_sandbox.EgressEvent` keeps no bodies, so replaying egress needs an
opt-in *egress cassette*: a JSON Lines file of :class:`HttpExchange` records (``kind:
"http"``), one per response an :class:`~litmus_sandbox.oracles.egress.EgressTransport`
forwarded while it had a recorder (``record=``). Each record holds the method, the URL
(no user information, token-like query values redacted), the status, the response
headers (hop-by-hop ones dropped, credential headers' values redacted) and the body as
the transport passed it on (still content-encoded if the server encoded it, so a client
decodes a replay as it decoded the original): UTF-8 text in ``body``, other bytes in
``body_b64``. A body over ``max_body_bytes``, or one the tool did not read to its end,
is recorded with ``truncated: true`` and is never served. Request bodies are not kept.

An :class:`HttpCassette` serves recorded exchanges by (method, URL), each at most once,
in recorded order; entries of a user-supplied mapping (``from_mapping``) are served every
time. Egress cassettes are not episode streams: keep them in their own files.
"""

from __future__ import annotations

import base64
import os
import threading
import warnings
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx
import msgspec

from litmus_sandbox._config.secrets import redact_headers, redact_url
from litmus_sandbox._model.codec import DecodeProblem, check_unique_keys, cut_short
from litmus_sandbox._model.errors import ConfigError, NewerVersionError, RecordDecodeError
from litmus_sandbox._model.records import SCHEMA_VERSION
from litmus_sandbox._store.files import iter_lines, open_input
from litmus_sandbox._store.streams import JsonlWriter, ReadWarning, RecordingWarning
from litmus_sandbox.oracles.egress._flow import EgressFlow

#: What a replaying transport does with a request its cassette cannot serve.
REPLAY_ON_MISS: tuple[str, ...] = ("error", "forward")

#: Bodies larger than this are recorded truncated (and never served).
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}
)


class HttpExchange(msgspec.Struct, frozen=True, kw_only=True, tag="http", tag_field="kind"):
    """One recorded HTTP response (and the request it answered: method and URL)."""

    v: int = 1
    method: str
    url: str
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: str | None = None
    body_b64: str | None = None
    body_bytes: int = 0
    truncated: bool = False

    def content(self) -> bytes:
        """The response body as bytes."""
        if self.body_b64 is not None:
            return base64.b64decode(self.body_b64)
        return (self.body or "").encode()

    @classmethod
    def of(
        cls,
        method: str,
        url: str,
        status: int,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        *,
        truncated: bool = False,
        size: int | None = None,
    ) -> HttpExchange:
        """An exchange from what a transport saw (hop-by-hop headers dropped)."""
        kept = tuple((k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP)
        text: str | None = None
        b64: str | None = None
        try:
            text = body.decode()
        except UnicodeDecodeError:
            b64 = base64.b64encode(body).decode()
        return cls(
            method=method.upper(),
            url=url,
            status=status,
            headers=kept,
            body=text,
            body_b64=b64,
            body_bytes=len(body) if size is None else size,
            truncated=truncated,
        )

    def response(self, request: httpx.Request) -> httpx.Response:
        """The recorded response, answering ``request``."""
        headers = [(k, v) for k, v in self.headers if k.lower() != "content-length"]
        return httpx.Response(self.status, headers=headers, content=self.content(), request=request)


_decoder = msgspec.json.Decoder(HttpExchange)


def _key(method: str, url: str) -> tuple[str, str]:
    """What a recording is served by: the method, and the URL as recorded (its secrets
    redacted, whether the cassette was written before that was done or after)."""
    return method.upper(), redact_url(url)


def _checked(ex: HttpExchange, path: str, lineno: int) -> HttpExchange:
    if not 1 <= ex.v <= SCHEMA_VERSION:
        cls = NewerVersionError if ex.v > SCHEMA_VERSION else RecordDecodeError
        raise cls(
            path, lineno, f"http record has v={ex.v} (this version reads 1 to {SCHEMA_VERSION})"
        )
    return ex


_TORN = "torn last line (the recorder stopped mid-record); kept every whole line"


class HttpCassette:
    """Recorded HTTP responses, served by (method, URL).

    Recorded exchanges are served at most once each, in recorded order (a repeated
    request gets the next recording of it); ``fixed`` ones are served every time.
    Thread-safe: sync transports call it from worker threads.
    """

    def __init__(
        self, exchanges: Iterable[HttpExchange] = (), *, fixed: Iterable[HttpExchange] = ()
    ) -> None:
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str], deque[HttpExchange]] = defaultdict(deque)
        for ex in exchanges:
            if not ex.truncated:
                self._queues[_key(ex.method, ex.url)].append(ex)
        self._fixed = {_key(ex.method, ex.url): ex for ex in fixed}
        #: What reading the files tolerated (a torn last line), also issued as warnings.
        self.warnings: list[ReadWarning] = []

    @classmethod
    def from_files(cls, paths: Sequence[str | os.PathLike[str]]) -> HttpCassette:
        """Read egress cassette files (JSON Lines of ``http`` records).

        Raises:
            RecordDecodeError: an unreadable file or a bad line (named ``file:line``).
        """
        exchanges: list[HttpExchange] = []
        torn: list[ReadWarning] = []
        for p in paths:
            path = os.fspath(p)
            with open_input(path) as f:  # a regular file only, each line capped
                for lineno, raw, _ in iter_lines(f, path):
                    if not raw.strip():
                        continue
                    line = raw.strip()
                    try:
                        exchange = _decoder.decode(line)
                        check_unique_keys(line, exchange)  # last-wins is never read
                        exchanges.append(_checked(exchange, path, lineno))
                    except DecodeProblem as exc:
                        raise RecordDecodeError(path, lineno, str(exc)) from None
                    except msgspec.DecodeError as exc:
                        if not raw.endswith(b"\n"):  # the last line, cut mid-record
                            torn.append(ReadWarning(path, lineno, _TORN))
                            break
                        # Only the last line may be torn: a cassette is one recorder's
                        # file, and a damaged record before others is never served around.
                        what = (
                            "torn record before the end of the file"
                            if cut_short(line, exc)
                            else "not an egress cassette record"
                        )
                        raise RecordDecodeError(path, lineno, f"{what}: {exc}") from None
        cassette = cls(exchanges)
        cassette.warnings = torn
        for w in torn:
            warnings.warn(str(w), RecordingWarning, stacklevel=2)
        return cassette

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> HttpCassette:
        """Fixed responses: ``{"GET https://api.example/x": {"status": 200, "headers":
        {...}, "body": "..."}}`` (a bare string is a 200 body). Served every time.

        Raises:
            ConfigError: a key that is not ``METHOD URL``, a malformed response.
        """
        fixed = []
        for key, value in mapping.items():
            method, _, url = key.strip().partition(" ")
            if not method or not url.strip():
                raise ConfigError(f"egress replay key {key!r}: expected 'METHOD URL'")
            spec = {"body": value} if isinstance(value, str) else dict(value)
            unknown = set(spec) - {"status", "headers", "body"}
            if unknown:
                raise ConfigError(f"egress replay {key!r}: unknown keys {sorted(unknown)}")
            headers = spec.get("headers", {})
            body = spec.get("body", "")
            if not isinstance(headers, dict) or not isinstance(body, str):
                raise ConfigError(f"egress replay {key!r}: headers must be a table, body text")
            fixed.append(
                HttpExchange.of(
                    method,
                    url.strip(),
                    int(spec.get("status", 200)),
                    headers.items(),
                    body.encode(),
                )
            )
        return cls(fixed=fixed)

    def take(self, method: str, url: str) -> HttpExchange | None:
        """The response for this request, or None (a miss)."""
        key = _key(method, url)
        with self._lock:
            queue = self._queues.get(key)
            if queue:
                return queue.popleft()
        return self._fixed.get(key)

    def unused(self) -> list[HttpExchange]:
        """Recorded exchanges never served."""
        with self._lock:
            return [ex for q in self._queues.values() for ex in q]


class HttpRecorder:
    """Appends the exchanges a transport forwards to an egress cassette file.

    Args:
        path: the JSON Lines file to append to.
        max_body_bytes: bodies over this are recorded truncated (never served).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    ) -> None:
        self.path = path
        self.max_body_bytes = max_body_bytes
        self._writer: JsonlWriter | None = None
        self._lock = threading.Lock()

    def record(self, exchange: HttpExchange) -> None:
        """Append one exchange (from any thread)."""
        with self._lock:
            if self._writer is None:
                self._writer = JsonlWriter(self.path)
            writer = self._writer
        writer.write(exchange)

    def tap(self, request: httpx.Request, response: httpx.Response) -> Tap:
        """A collector for ``response``'s body that records the exchange when done."""
        return Tap(self, request, response)

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


class Tap:
    """Collects a response body as it streams through; records it once, when closed."""

    def __init__(
        self, recorder: HttpRecorder, request: httpx.Request, response: httpx.Response
    ) -> None:
        self._recorder = recorder
        self._method = request.method
        # Recorded without secrets (a cassette is a file like any other): no user
        # information or token values in the URL, no credential header's value.
        self._url = redact_url(str(request.url))
        self._status = response.status_code
        self._headers = list(redact_headers(response.headers.multi_items()))
        self._chunks: list[bytes] = []
        self._size = 0
        self.complete = False
        self._done = False

    def feed(self, chunk: bytes) -> None:
        """A chunk of the body passed through."""
        self._size += len(chunk)
        if self._size <= self._recorder.max_body_bytes:
            self._chunks.append(chunk)

    def finish(self) -> None:
        """The body stream closed: record the exchange (once)."""
        if self._done:
            return
        self._done = True
        over = self._size > self._recorder.max_body_bytes
        self._recorder.record(
            HttpExchange.of(
                self._method,
                self._url,
                self._status,
                self._headers,
                b"" if over else b"".join(self._chunks),
                truncated=over or not self.complete,
                size=self._size,
            )
        )


def replayed_response(
    request: httpx.Request, hit: HttpExchange | None
) -> tuple[httpx.Response, str]:
    """The response a replaying transport gives, and the flow's decision.

    A miss is answered ``502`` with ``x-litmus-sandbox: replay-miss`` (nothing is
    connected), decision ``replay_miss``; a hit is the recorded response, ``replayed``.
    """
    if hit is not None:
        return hit.response(request), "replayed"
    body = f"litmus-sandbox: no recorded response for {request.method} {request.url}\n"
    headers = {"content-type": "text/plain; charset=utf-8", "x-litmus-sandbox": "replay-miss"}
    return httpx.Response(502, headers=headers, content=body.encode(), request=request), (
        "replay_miss"
    )


class Replaying:
    """The replay and recording options shared by the async and sync transports."""

    def __init__(
        self, replay: HttpCassette | None, on_miss: str, record: HttpRecorder | None
    ) -> None:
        if on_miss not in REPLAY_ON_MISS:
            raise ConfigError(
                f"unknown egress replay on_miss {on_miss!r} (one of {', '.join(REPLAY_ON_MISS)})"
            )
        self.replay, self.on_miss, self.record = replay, on_miss, record

    def serve(self, request: httpx.Request, flow: EgressFlow) -> httpx.Response | None:
        """The replayed (or replay-miss) response, or None to forward the request."""
        if self.replay is None:
            return None
        hit = self.replay.take(request.method, str(request.url))
        if hit is None and self.on_miss == "forward":
            return None
        response, flow.decision = replayed_response(request, hit)
        flow.status = response.status_code
        flow.response_bytes = len(response.content)
        return response

    def in_memory(self, request: httpx.Request, response: httpx.Response) -> None:
        """Record a response whose body is already in memory."""
        if self.record is not None:
            tap = self.record.tap(request, response)
            tap.feed(response.content)
            tap.complete = True
            tap.finish()
