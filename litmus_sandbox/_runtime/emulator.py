"""The tool emulator: a model answers for the tools the policy puts in ``emulate`` mode.

Theory of operation
-------------------
A sandbox whose policy has an ``[emulator]`` holds one :class:`Emulator` for its life.
Entered (``async with``), it opens the endpoint's session (``judges/_chat.py``: the key,
``max_concurrency`` connections, retries) and the cache the results are kept in
(``_store/emulation_cache.py``; the step-verdict cache by default). Each call of an
emulated tool (:meth:`Emulator.emulate`):

1. what is known of the tool (:class:`~litmus_sandbox._core.emulation.ToolSpec`): what an
   adapter said (:meth:`Emulator.describe_tools`: an MCP ``tools/list``, OpenAI tool
   definitions), else the registered Python function's signature and docstring, else
   its name alone;
2. the key (emulator fingerprint, tool, arguments, spec and history): a kept answer is
   served, and the step says ``cached``;
3. else the endpoint is asked (``_core/emulation.py``: the prompt; the answer read
   strictly, first as a chat completion, then as ``{"result"}`` or ``{"error"}``), and a
   good answer is kept.

:class:`Asked` is what the mode (``modes.py``) records: the answer (None when the
emulation failed: the endpoint failed past its retries, refused, or answered something
else), and the facts of ``meta.emulator`` - label, fingerprint, what was asked (the
spec, the history's length and hash, the prompt's hash: with the arguments on the step,
they say what the prompt was), what was answered, whether from the cache, and why it
failed. A failure is never kept: a re-run asks again.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import string
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import httpx
import msgspec

from litmus_sandbox._config.emulator import RESPONSE_FORMAT, EmulatorConfig
from litmus_sandbox._core.emulation import (
    BadEmulation,
    Emulated,
    EmulationAnswer,
    HistoryView,
    ToolSpec,
    emulation_key,
    parse_emulation,
    render_prompt,
)
from litmus_sandbox._core.redaction import DEFAULT_REDACTION, Redaction
from litmus_sandbox._model.errors import CacheError, ConfigError
from litmus_sandbox._store.emulation_cache import EmulationCache
from litmus_sandbox._store.step_cache import StepCache, default_location, local_files, open_cache
from litmus_sandbox.judges._chat import Asker, ChatEndpoint
from litmus_sandbox.judges._failure import JudgeFailure
from litmus_sandbox.judges._openai_wire import completion_content, quote
from litmus_sandbox.judges._secrets import scrub

_encode = msgspec.json.Encoder().encode


class Asked(NamedTuple):
    """One emulated call: the answer (None: the emulation failed), and ``meta.emulator``."""

    answer: Emulated | None
    facts: dict[str, Any]


class Emulator:
    """Answers for emulated tools (see the module docstring).

    Args:
        config: the ``[emulator]`` table.
        redaction: the policy's ``[record]``: the emulator sees arguments as recorded.
        cache: where results are kept: an open cache, a path or URL, None for the
            default step-verdict cache (``$LITMUS_CACHE``, else the user's cache folder),
            or False to keep nothing.
        backoff: overrides of the endpoint's backoff (tests).
        transport: an httpx transport to send through (default: the network).
    """

    def __init__(
        self,
        config: EmulatorConfig,
        *,
        redaction: Redaction = DEFAULT_REDACTION,
        cache: EmulationCache | StepCache | str | os.PathLike[str] | bool | None = None,
        backoff: dict[str, float] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.label = config.name
        self.fingerprint = config.fingerprint()
        self.endpoint = ChatEndpoint(
            config.params, who="emulator", label=self.label, backoff=backoff, transport=transport
        )
        self._template = string.Template(config.prompt_template)
        self._redaction = redaction
        self._cache_spec = cache
        self._cache: EmulationCache | None = None
        self._owns_cache = False
        self._asker: Asker | None = None
        self._stack: AsyncExitStack | None = None
        self._specs: dict[str, ToolSpec] = {}

    def own_files(self) -> list[Path]:
        """The local files the cache writes (the probes leave them out).

        Raises:
            ConfigError: a cache named by an unknown scheme.
        """
        spec = self._cache_spec
        if spec is False:
            return []
        if spec is None or spec is True:
            return local_files(default_location())
        if isinstance(spec, str | os.PathLike):
            return local_files(spec)
        files = getattr(spec, "files", None)
        return list(files()) if callable(files) else []

    @property
    def cache(self) -> EmulationCache | None:
        """The open cache results are kept in (None: not entered, or keeping nothing)."""
        return self._cache

    def describe_tools(self, specs: Mapping[str, ToolSpec]) -> None:
        """Say what is known of tools (by name): their descriptions and schemas."""
        self._specs.update(specs)

    def spec(self, tool: str, fn: Callable[..., Any] | None = None) -> ToolSpec:
        """What is known of ``tool``: described, else ``fn``'s signature and docstring."""
        known = self._specs.get(tool)
        if known is not None:
            return known
        if fn is None:
            return ToolSpec(name=tool)
        return _python_spec(tool, fn)

    async def __aenter__(self) -> Emulator:
        stack = AsyncExitStack()
        try:
            self._asker = await stack.enter_async_context(self.endpoint.session())
            spec = self._cache_spec
            if spec is not False:
                cache = spec if spec is not True else None
                self._cache = await anyio.to_thread.run_sync(
                    functools.partial(emulation_cache_of, cache, default=default_location())
                )
                self._owns_cache = cache is None or isinstance(cache, str | os.PathLike)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack, self._asker = self._stack, None, None
        cache, self._cache = self._cache, None
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            if cache is not None and self._owns_cache:
                cache.close()

    async def emulate(
        self,
        tool: str,
        args: Mapping[str, Any],
        history: HistoryView,
        fn: Callable[..., Any] | None = None,
    ) -> Asked:
        """The emulator's answer for one call of ``tool`` (see the module docstring).

        Raises:
            ConfigError: the emulator is not open (``async with``).
        """
        asker = self._asker
        if asker is None:
            raise ConfigError(f"tool {tool!r} is emulated, but its emulator is not open")
        spec = self.spec(tool, fn)
        shown_args, _ = self._redaction.args(dict(args))
        prompt = render_prompt(self._template, spec, shown_args, history)
        facts: dict[str, Any] = {
            "label": self.label,
            "fingerprint": self.fingerprint,
            "asked": {
                "spec": spec.described(),
                "history": {"steps": history.steps, "sha256": history.sha256},
                "prompt_sha256": hashlib.sha256(
                    prompt.encode("utf-8", "surrogatepass")
                ).hexdigest(),
            },
            "cached": False,
        }
        key = emulation_key(self.fingerprint, spec, shown_args, history)
        kept = await self._cached(key, facts)
        if kept is not None:
            answer = _read(kept)
            if answer is not None and _mismatch(answer, spec.output_schema) is None:
                facts.update(cached=True, answered=_answered(kept))
                return Asked(answer, facts)
        body = _encode(self._request(prompt))
        try:
            answered = await asker(body)
            # The content is read by parse_emulation, which keeps what it refuses.
            said = completion_content(
                answered.body, attempts=answered.attempts, who="emulator", check_content=False
            )
        except JudgeFailure as exc:
            failure = asker.scrubbed(exc)
            facts["failure"] = {
                "class": failure.failure,
                "detail": str(failure),
                "attempts": failure.attempts,
            }
            return Asked(None, facts)
        # Shown to the agent and written: an endpoint that echoes the key must not put it
        # in either (nor in the cache).
        secrets = asker.secrets
        kept = EmulationAnswer(
            content=scrub(said.content, secrets),
            model=None if said.model is None else scrub(said.model, secrets),
            system_fingerprint=(
                None if said.system_fingerprint is None else scrub(said.system_fingerprint, secrets)
            ),
            attempts=answered.attempts,
        )
        facts["answered"] = _answered(kept)
        try:
            answer = parse_emulation(kept.content)
        except BadEmulation as exc:
            cut = " (finish_reason length: raise max_tokens)" if said.cut else ""
            detail = f"{exc}{cut}: {quote(kept.content)}"
            facts["failure"] = {"class": "bad_answer", "detail": detail, "attempts": kept.attempts}
            return Asked(None, facts)
        if (mismatch := _mismatch(answer, spec.output_schema)) is not None:
            # A result the tool's client would refuse: failed, never reshaped (nor kept).
            facts["failure"] = {
                "class": "bad_answer",
                "detail": mismatch,
                "attempts": kept.attempts,
            }
            return Asked(None, facts)
        await self._keep(key, kept, facts)
        return Asked(answer, facts)

    def _request(self, prompt: str) -> dict[str, Any]:
        p = self.config.params
        body: dict[str, Any] = {
            "model": p.model,
            "messages": [
                {"role": "system", "content": self.config.system_prompt},
                {"role": "user", "content": prompt},
            ],
            "temperature": p.temperature,
            "top_p": p.top_p,
        }
        if p.seed is not None:
            body["seed"] = p.seed
        body["max_tokens"] = p.max_tokens
        body["response_format"] = dict(RESPONSE_FORMAT)
        return body

    async def _cached(self, key: tuple[str, str, str, str], facts: dict[str, Any]) -> Any:
        cache = self._cache
        if cache is None:
            return None
        try:
            return await anyio.to_thread.run_sync(cache.get_emulation, key)
        except CacheError as exc:  # a miss: the emulator is asked, and the step says why
            facts["cache_error"] = str(exc)
            return None

    async def _keep(
        self, key: tuple[str, str, str, str], kept: EmulationAnswer, facts: dict[str, Any]
    ) -> None:
        cache = self._cache
        if cache is None:
            return
        try:
            await anyio.to_thread.run_sync(cache.put_emulation, key, kept)
        except CacheError as exc:  # shown all the same; a re-run asks again
            facts["cache_error"] = str(exc)


def _read(kept: EmulationAnswer) -> Emulated | None:
    """A kept answer, read again (None: it no longer reads: asked again)."""
    try:
        return parse_emulation(kept.content)
    except BadEmulation:
        return None


def _mismatch(answer: Emulated, schema: Mapping[str, Any] | None) -> str | None:
    """Why ``answer``'s result does not conform to the tool's declared output schema (an
    MCP ``outputSchema``, which clients check), else None; an error answer conforms."""
    if schema is None or answer.error is not None:
        return None
    try:
        # A schema is read only from an MCP listing: the mcp extra brings jsonschema.
        from litmus_sandbox._runtime.output_schema import mismatch
    except ImportError:
        return "the tool declares an outputSchema, and jsonschema (extra mcp) is not installed"
    return mismatch(answer.result, schema)


def _answered(kept: EmulationAnswer) -> dict[str, Any]:
    out: dict[str, Any] = {"content": kept.content, "attempts": kept.attempts}
    if kept.model is not None:
        out["model"] = kept.model
    if kept.system_fingerprint is not None:
        out["system_fingerprint"] = kept.system_fingerprint
    return out


def _python_spec(tool: str, fn: Callable[..., Any]) -> ToolSpec:
    """A registered Python tool's spec: its signature and docstring."""
    signature: str | None = None
    try:
        try:  # annotations as types (a module with postponed annotations has strings)
            signature = f"{tool}{inspect.signature(fn, eval_str=True)}"
        except Exception:  # an annotation that does not evaluate: as written
            signature = f"{tool}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        pass
    return ToolSpec(name=tool, description=inspect.getdoc(fn) or None, signature=signature)


def spec_of(name: str, value: ToolSpec | Mapping[str, Any]) -> ToolSpec:
    """``value`` as the spec of tool ``name`` (a mapping: see :func:`spec_from_mapping`)."""
    return value if isinstance(value, ToolSpec) else spec_from_mapping(name, value)


def spec_from_mapping(name: str, entry: Mapping[str, Any]) -> ToolSpec:
    """A spec from a tool listing's entry: MCP ``tools/list`` (``description``,
    ``inputSchema``, ``outputSchema``) or an OpenAI function definition (``description``,
    ``parameters``); what is not a string or an object is left out."""
    description = entry.get("description")
    schema = entry.get("inputSchema", entry.get("parameters", entry.get("input_schema")))
    output = entry.get("outputSchema")
    return ToolSpec(
        name=name,
        description=description if isinstance(description, str) else None,
        input_schema=dict(schema) if isinstance(schema, Mapping) else None,
        output_schema=dict(output) if isinstance(output, Mapping) else None,
    )


def emulation_cache_of(cache: object, *, default: str | os.PathLike[str]) -> EmulationCache:
    """The emulation cache ``cache`` names: an open cache that keeps emulated results, a
    path or URL (``step_cache.open_cache``), or None for ``default``.

    Raises:
        ConfigError: an open cache that does not keep emulated results, or a bad spec.
        CacheError: the store cannot be opened or reached.
    """
    if cache is None:
        cache = default
    if isinstance(cache, str | os.PathLike):
        opened = open_cache(cache)
        assert isinstance(opened, EmulationCache)  # both stores keep emulated results
        return opened
    if isinstance(cache, EmulationCache):
        return cache
    raise ConfigError(
        f"the cache given ({type(cache).__name__}) cannot keep emulated results: give a "
        "path, sqlite:///PATH or redis://… URL, or a VerdictCache"
    )
