"""One OpenAI-compatible ``/chat/completions`` endpoint: its connections, retries and key.

Theory of operation
-------------------
Whoever asks an OpenAI-compatible endpoint - the ``openai`` judge (``_openai.py``), the
tool emulator (``_runtime/emulator.py``) - asks it through one :class:`ChatEndpoint`. A
:meth:`ChatEndpoint.session` holds ``max_concurrency`` httpx clients of one keep-alive
connection each (one request at a time each: httpx's pool spends time in proportion to
its connections on every request, which a pool of 32 made the bottleneck), all with the
key (read then, from the environment variable ``api_key_env`` names, and from nowhere
else) as a bearer token. It yields an :class:`Asker`: one ``POST {base_url}/chat/completions``
of the body given, re-sent on:

==========================================  ==============================================
answer                                      what happens
==========================================  ==============================================
200                                         its body, and the attempts made
429 asking to wait <= ``max_retry_after``   wait that long, send the same request again
429 asking to wait longer                   a failure, at once (no sleep)
429 without a wait, 5xx, 408, a timeout,    exponential backoff with jitter, send again
a connection error
another status, a 200 body over             a failure, at once
:data:`MAX_ANSWER_BYTES`
==========================================  ==============================================

Every re-send counts against ``max_retries``; when they are used up the request fails
(:class:`~litmus_sandbox.judges._failure.JudgeFailure`, with its failure class and
attempts). ``timeout`` bounds each request whole. An error text that quotes the endpoint
has the key scrubbed out before it is raised. What the body *says* is the asker's to read
(``_openai_wire.completion_content``, then its own answer format).
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, NamedTuple

import anyio
import httpx
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_base, wait_exponential, wait_random

from litmus_sandbox._config.scoring import ChatParams
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox.judges._failure import JudgeFailure
from litmus_sandbox.judges._openai_wire import MAX_ANSWER_BYTES, quote, retry_delay
from litmus_sandbox.judges._secrets import scrub

#: Backoff before re-sending after a 5xx, a timeout or a connection error: ``initial``
#: doubled per attempt, plus up to ``jitter`` at random, at most ``max`` (seconds).
BACKOFF = {"initial": 0.25, "max": 8.0, "jitter": 0.25}


class Answered(NamedTuple):
    """A 200 answer's body, and how many requests it took."""

    body: bytes
    attempts: int


class _Resend(Exception):
    """An answer worth sending the request again for (tenacity's retry predicate)."""

    def __init__(self, failure: str, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message
        self.delay = delay


class ChatEndpoint:
    """An OpenAI-compatible ``/chat/completions`` endpoint (see the module docstring).

    Args:
        params: the endpoint's ``params`` table.
        who: what asks, for messages (``judge``, ``emulator``).
        label: its label, for messages.
        backoff: overrides of :data:`BACKOFF` (tests and benchmarks).
        transport: an httpx transport to send through (default: the network).
    """

    def __init__(
        self,
        params: ChatParams,
        *,
        who: str,
        label: str,
        backoff: dict[str, float] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.params = params
        self.who = who
        self.label = label
        self.base_url = params.base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        b = {**BACKOFF, **(backoff or {})}
        self._backoff: wait_base = wait_exponential(
            multiplier=b["initial"], max=b["max"]
        ) + wait_random(0, b["jitter"])
        self._transport = transport

    def api_key(self) -> str | None:
        """The key, from the environment variable ``api_key_env`` names (None without one).

        Raises:
            ConfigError: that variable is not set (or empty).
        """
        name = self.params.api_key_env
        if name is None:
            return None
        key = os.environ.get(name)
        if not key:
            raise ConfigError(f"{self.who} {self.label!r}: environment variable {name} is not set")
        return key

    @asynccontextmanager
    async def session(self) -> AsyncIterator[Asker]:
        """The clients of one run; yields the :class:`Asker` that sends a request.

        Raises:
            ConfigError: the key's environment variable is not set.
        """
        key = self.api_key()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        async with AsyncExitStack() as stack:
            idle: list[httpx.AsyncClient] = []
            for _ in range(self.params.max_concurrency):
                client = httpx.AsyncClient(
                    headers=headers,
                    verify=_tls_context(),
                    timeout=self.params.timeout,
                    limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
                    transport=self._transport,
                )
                idle.append(await stack.enter_async_context(client))
            yield Asker(self, _Clients(idle, anyio.Semaphore(len(idle))), key)

    def wait(self, state: Any) -> float:
        """The pause before the next attempt: what a 429 asked for, else the backoff."""
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, _Resend) and exc.delay is not None:
            return exc.delay
        return float(self._backoff(state))

    async def send(self, client: httpx.AsyncClient, content: bytes, attempts: int) -> bytes:
        """One request; its body on 200.

        Raises:
            _Resend: worth sending again (429 within max_retry_after, 5xx, timeouts...).
            JudgeFailure: not worth it.
        """
        timeout = self.params.timeout
        try:
            with anyio.fail_after(timeout):
                async with client.stream("POST", self.url, content=content) as response:
                    body = await _read_capped(response)
        except (TimeoutError, httpx.TimeoutException):
            raise _Resend("timeout", f"no answer within {timeout:g} s") from None
        except httpx.TransportError as exc:
            raise _Resend("connection", f"{type(exc).__name__}: {exc}") from None
        status = response.status_code
        if status == 200:
            if body is None:
                raise JudgeFailure(
                    f"the answer is larger than {MAX_ANSWER_BYTES} bytes",
                    failure="bad_answer",
                    attempts=attempts,
                )
            return body
        said = f"HTTP {status}: {quote(body or b'')}"
        if status == 429:
            delay = retry_delay(response.headers)
            limit = self.params.max_retry_after
            if delay is not None and delay > limit:
                raise JudgeFailure(
                    f"HTTP 429 asking to wait {delay:.3g} s, more than max_retry_after {limit:g} s",
                    failure="rate_limited",
                    attempts=attempts,
                )
            raise _Resend("rate_limited", said, delay)
        if status >= 500 or status == 408:
            raise _Resend("http_status", said)
        raise JudgeFailure(said, failure="http_status", attempts=attempts)


class Asker:
    """Sends requests through one session's clients: ``await asker(body)`` (see
    :meth:`ChatEndpoint.session`)."""

    def __init__(self, endpoint: ChatEndpoint, clients: _Clients, key: str | None) -> None:
        self._endpoint = endpoint
        self._clients = clients
        #: What must never be written: scrub it out of anything the endpoint said.
        self.secrets = [key] if key else []

    def scrubbed(self, failure: JudgeFailure) -> JudgeFailure:
        """``failure`` with the key scrubbed out of its text."""
        return JudgeFailure(
            scrub(str(failure), self.secrets), failure=failure.failure, attempts=failure.attempts
        )

    async def __call__(self, content: bytes) -> Answered:
        """POST ``content`` (a request body), re-sent as the module docstring says.

        Raises:
            JudgeFailure: no 200 answer (its class and the attempts made), key scrubbed.
        """
        endpoint = self._endpoint
        attempts = 0
        retrying = AsyncRetrying(
            stop=stop_after_attempt(1 + endpoint.params.max_retries),
            wait=endpoint.wait,
            retry=retry_if_exception_type(_Resend),
            sleep=anyio.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    async with self._clients.one() as client:
                        body = await endpoint.send(client, content, attempts)
        except (_Resend, JudgeFailure) as exc:
            # What the endpoint said is quoted: scrub the key out of it, should it echo it.
            raise JudgeFailure(
                scrub(str(exc), self.secrets), failure=exc.failure, attempts=attempts
            ) from None
        return Answered(body, attempts)


class _Clients:
    """The session's clients, one lent to each request in flight."""

    def __init__(self, idle: list[httpx.AsyncClient], free: anyio.Semaphore) -> None:
        self._idle = idle
        self._free = free

    @asynccontextmanager
    async def one(self) -> AsyncIterator[httpx.AsyncClient]:
        async with self._free:  # more callers than clients (outside a scoring run) wait
            client = self._idle.pop()
            try:
                yield client
            finally:
                self._idle.append(client)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, made once: making it takes ~0.1 s, per session else."""
    return httpx.create_ssl_context()


async def _read_capped(response: httpx.Response) -> bytes | None:
    """The body, or None past :data:`MAX_ANSWER_BYTES` (the rest is not read)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
