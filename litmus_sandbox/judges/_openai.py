"""The ``openai`` judge: an OpenAI-compatible chat-completions endpoint (vLLM, Ollama, LiteLLM...).

Theory of operation
-------------------
One scoring run opens one :meth:`OpenAIJudge.session`: ``max_concurrency`` httpx clients of
one keep-alive connection each (one request at a time each: httpx's pool spends time in
proportion to its connections on every request, which a pool of 32 made the bottleneck),
all with the key (read then, from the environment variable
``api_key_env`` names, and from nowhere else) as a bearer token. Each step is one
``POST {base_url}/chat/completions`` (body and answer: ``_openai_wire``), re-sent on:

==========================================  ==============================================
answer                                      what happens
==========================================  ==============================================
200, the expected JSON                      the verdict, with the answer's ``model`` and
                                            ``system_fingerprint`` and the attempts made
429 asking to wait <= ``max_retry_after``   wait that long, send the same request again
429 asking to wait longer                   no verdict, at once (no sleep)
429 without a wait, 5xx, 408, a timeout,    exponential backoff with jitter, send again
a connection error
another status, an unexpected answer,       no verdict, at once
a refusal by the judge model
==========================================  ==============================================

Every re-send counts against ``max_retries``; when they are used up the step has no
verdict (:class:`~litmus_sandbox.judges._failure.JudgeFailure`, with its failure class and
attempts). ``timeout`` bounds each request whole. An error text that quotes the endpoint
has the key scrubbed out before it is raised.

The fingerprint covers ``kind``, ``base_url``, ``model``, ``temperature``, ``top_p``,
``seed``, ``max_tokens``, the system prompt text, the prompt template text, the response
format and the step renderer's version; never the key, ``timeout``, ``max_concurrency`` or
the retry settings, which cannot change a verdict.
"""

from __future__ import annotations

import functools
import os
import ssl
import string
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx
import msgspec
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_base, wait_exponential, wait_random

from litmus_sandbox._config.scoring import OpenAIParams
from litmus_sandbox._core.scoring import StepJudgment, fingerprint
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Step
from litmus_sandbox.judges._failure import JudgeFailure
from litmus_sandbox.judges._openai_wire import (
    MAX_ANSWER_BYTES,
    RESPONSE_FORMAT,
    parse_answer,
    quote,
    request_body,
    retry_delay,
)
from litmus_sandbox.judges._prompt import (
    DEFAULT_PROMPT_TEMPLATE,
    DEFAULT_SYSTEM_PROMPT,
    RENDERER_VERSION,
    render_prompt,
)
from litmus_sandbox.judges._secrets import scrub
from litmus_sandbox.judges._session import JudgeCall

#: Backoff before re-sending after a 5xx, a timeout or a connection error: ``initial``
#: doubled per attempt, plus up to ``jitter`` at random, at most ``max`` (seconds).
BACKOFF = {"initial": 0.25, "max": 8.0, "jitter": 0.25}
_encode = msgspec.json.Encoder().encode


class _Resend(Exception):
    """An answer worth sending the request again for (tenacity's retry predicate)."""

    def __init__(self, failure: str, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message
        self.delay = delay


class OpenAIJudge:
    """A judge behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        params: the ``[judge.params]`` table.
        label: the judge's version label (default ``openai:MODEL``).
        backoff: overrides of :data:`BACKOFF` (tests and benchmarks).
        transport: an httpx transport to send through (default: the network).
    """

    kind = "openai"

    def __init__(
        self,
        params: OpenAIParams,
        *,
        label: str | None = None,
        backoff: dict[str, float] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.params = params
        self.system_prompt = params.system_prompt or DEFAULT_SYSTEM_PROMPT
        self.prompt_template = params.prompt_template or DEFAULT_PROMPT_TEMPLATE
        self._template = string.Template(self.prompt_template)
        self.base_url = params.base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self._label = label or f"openai:{params.model}"
        b = {**BACKOFF, **(backoff or {})}
        self._backoff: wait_base = wait_exponential(
            multiplier=b["initial"], max=b["max"]
        ) + wait_random(0, b["jitter"])
        self._transport = transport
        self._fingerprint = fingerprint(
            {
                "kind": self.kind,
                "base_url": self.base_url,
                "model": params.model,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "seed": params.seed,
                "max_tokens": params.max_tokens,
                "system_prompt": self.system_prompt,
                "prompt_template": self.prompt_template,
                "response_format": RESPONSE_FORMAT,
                "renderer": RENDERER_VERSION,
            }
        )

    @property
    def label(self) -> str:
        return self._label

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def max_concurrency(self) -> int:
        return self.params.max_concurrency

    def describe(self) -> dict[str, Any]:
        """The judge as the verdict stream's policy record keeps it: every parameter (the
        prompts as sent), the name of the key's variable, never the key."""
        params = {k: v for k, v in msgspec.to_builtins(self.params).items() if v is not None}
        params["system_prompt"] = self.system_prompt
        params["prompt_template"] = self.prompt_template
        return {"kind": self.kind, "label": self._label, "params": params}

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
            raise ConfigError(f"judge {self._label!r}: environment variable {name} is not set")
        return key

    @asynccontextmanager
    async def session(self) -> AsyncIterator[JudgeCall]:
        """An HTTP client for one scoring run; yields the coroutine function that judges
        a step.

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
            free = anyio.Semaphore(len(idle))
            yield functools.partial(self._judge, _Clients(idle, free), key)

    def judge_step(self, step: Step, context: Sequence[Step]) -> StepJudgment:
        """Judge one step outside a scoring run (a session of its own; not from inside a
        running event loop).

        Raises:
            JudgeFailure: no verdict (see the module docstring).
        """

        async def once() -> StepJudgment:
            async with self.session() as judge:
                return await judge(step, context)

        return anyio.run(once)

    async def _judge(
        self, clients: _Clients, key: str | None, step: Step, context: Sequence[Step]
    ) -> StepJudgment:
        prompt = render_prompt(self._template, step, context)
        content = _encode(request_body(self.params, self.system_prompt, prompt))
        attempts = 0
        retrying = AsyncRetrying(
            stop=stop_after_attempt(1 + self.params.max_retries),
            wait=self._wait,
            retry=retry_if_exception_type(_Resend),
            sleep=anyio.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    async with clients.one() as client:
                        body = await self._send(client, content, attempts)
            judgment = parse_answer(body, attempts=attempts)
        except (_Resend, JudgeFailure) as exc:
            # What the endpoint said is quoted: scrub the key out of it, should it echo it.
            raise JudgeFailure(
                scrub(str(exc), [key] if key else []),
                failure=exc.failure,
                attempts=attempts,
            ) from None
        # What the answer says is written (reason, model, system fingerprint): an endpoint
        # that echoes the key in it must not put it in the verdicts or the cache.
        return _scrubbed(judgment, [key] if key else [])

    def _wait(self, state: Any) -> float:
        """The pause before the next attempt: what a 429 asked for, else the backoff."""
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, _Resend) and exc.delay is not None:
            return exc.delay
        return float(self._backoff(state))

    async def _send(self, client: httpx.AsyncClient, content: bytes, attempts: int) -> bytes:
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


def _scrubbed(judgment: StepJudgment, secrets: list[str]) -> StepJudgment:
    fields = {
        name: scrub(value, secrets)
        for name in ("reason", "model", "system_fingerprint")
        if isinstance(value := getattr(judgment, name), str)
    }
    return msgspec.structs.replace(judgment, **fields) if fields else judgment
