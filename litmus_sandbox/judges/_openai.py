"""The ``openai`` judge: an OpenAI-compatible chat-completions endpoint (vLLM, Ollama, LiteLLM...).

Theory of operation
-------------------
One scoring run opens one :meth:`OpenAIJudge.session`, the session of its
:class:`~litmus_sandbox.judges._chat.ChatEndpoint` (connections, key, retries: see
``_chat.py``). Each step is one ``POST {base_url}/chat/completions`` (body and answer:
``_openai_wire``); its 200 answer must hold the expected JSON, else there is no verdict, at
once (a bad answer, a refusal by the judge model). A verdict carries the answer's
``model`` and ``system_fingerprint`` and the attempts made; when the endpoint fails past
its retries, the step has no verdict
(:class:`~litmus_sandbox.judges._failure.JudgeFailure`, with its failure class and
attempts). An error text that quotes the endpoint has the key scrubbed out before it is
raised.

The fingerprint covers ``kind``, ``base_url``, ``model``, ``temperature``, ``top_p``,
``seed``, ``max_tokens``, the system prompt text, the prompt template text, the response
format and the step renderer's version; never the key, ``timeout``, ``max_concurrency`` or
the retry settings, which cannot change a verdict.
"""

from __future__ import annotations

import functools
import string
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import msgspec

from litmus_sandbox._config.scoring import OpenAIParams
from litmus_sandbox._core.scoring import StepJudgment, fingerprint
from litmus_sandbox._model.records import Step
from litmus_sandbox.judges._chat import Asker, ChatEndpoint
from litmus_sandbox.judges._failure import JudgeFailure
from litmus_sandbox.judges._openai_wire import RESPONSE_FORMAT, parse_answer, request_body
from litmus_sandbox.judges._prompt import (
    DEFAULT_PROMPT_TEMPLATE,
    DEFAULT_SYSTEM_PROMPT,
    RENDERER_VERSION,
    render_prompt,
)
from litmus_sandbox.judges._secrets import scrub
from litmus_sandbox.judges._session import JudgeCall

_encode = msgspec.json.Encoder().encode


class OpenAIJudge:
    """A judge behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        params: the ``[judge.params]`` table.
        label: the judge's version label (default ``openai:MODEL``).
        backoff: overrides of the endpoint's backoff (tests and benchmarks).
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
        self._label = label or f"openai:{params.model}"
        self.endpoint = ChatEndpoint(
            params, who="judge", label=self._label, backoff=backoff, transport=transport
        )
        self.base_url = self.endpoint.base_url
        self.url = self.endpoint.url
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
        return self.endpoint.api_key()

    @asynccontextmanager
    async def session(self) -> AsyncIterator[JudgeCall]:
        """An HTTP client for one scoring run; yields the coroutine function that judges
        a step.

        Raises:
            ConfigError: the key's environment variable is not set.
        """
        async with self.endpoint.session() as asker:
            yield functools.partial(self._judge, asker)

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

    async def _judge(self, asker: Asker, step: Step, context: Sequence[Step]) -> StepJudgment:
        prompt = render_prompt(self._template, step, context)
        content = _encode(request_body(self.params, self.system_prompt, prompt))
        body, attempts = await asker(content)
        try:
            judgment = parse_answer(body, attempts=attempts)
        except JudgeFailure as exc:
            # What the endpoint said is quoted: scrub the key out of it, should it echo it.
            raise asker.scrubbed(exc) from None
        # What the answer says is written (reason, model, system fingerprint): an endpoint
        # that echoes the key in it must not put it in the verdicts or the cache.
        return _scrubbed(judgment, asker.secrets)


def _scrubbed(judgment: StepJudgment, secrets: list[str]) -> StepJudgment:
    fields = {
        name: scrub(value, secrets)
        for name in ("reason", "model", "system_fingerprint")
        if isinstance(value := getattr(judgment, name), str)
    }
    return msgspec.structs.replace(judgment, **fields) if fields else judgment
