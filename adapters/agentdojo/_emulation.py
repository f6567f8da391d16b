"""Emulated AgentDojo tools: the policy's ``[emulator]``, asked from the synchronous runtime.

Theory of operation
-------------------
AgentDojo calls its tools synchronously (``FunctionsRuntime.run_function``), while the
emulator (``litmus_sandbox._runtime.emulator``) is asynchronous: its endpoint session and
cache live in an event loop. A :class:`SyncEmulator` runs that loop in a blocking portal
(``anyio.from_thread``) for as long as it is open - one case, or a whole ``run agentdojo``
- and each emulated call is one :meth:`SyncEmulator.emulate` through it.

The emulator is told each suite tool as AgentDojo describes it to a model: its
``description`` and the JSON schema of its ``parameters`` (:func:`suite_specs`). The
episode so far, as the runtime knows it, is the user task's prompt and every call that
reached the runtime with what the pipeline got back (``LitmusRuntime.history``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from agentdojo.functions_runtime import Function
from anyio.from_thread import BlockingPortal, start_blocking_portal

from litmus_sandbox._config.policy import Policy
from litmus_sandbox._core.emulation import HistoryView, ToolSpec
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._runtime.emulator import Asked, Emulator


def suite_specs(
    functions: Mapping[str, Function[..., Any]] | Sequence[Function[..., Any]],
) -> dict[str, ToolSpec]:
    """Each tool as AgentDojo shows it to a model: description and parameters' schema."""
    found = functions.values() if isinstance(functions, Mapping) else functions
    out: dict[str, ToolSpec] = {}
    for fn in found:
        try:
            schema: dict[str, Any] | None = fn.parameters.model_json_schema()
        except Exception:  # a schema pydantic cannot write: the description alone
            schema = None
        out[fn.name] = ToolSpec(
            name=fn.name, description=fn.description or None, input_schema=schema
        )
    return out


class SyncEmulator:
    """The policy's emulator, open in a loop of its own for synchronous callers.

    Args:
        policy: the policy whose ``[emulator]`` answers (its ``[record]`` redacts what the
            emulator is shown of the arguments).
        cache: where results are kept (a path or URL; None: the step-verdict cache's
            default; False: nowhere).

    Raises:
        ConfigError: the policy has no ``[emulator]``.
    """

    def __init__(
        self, policy: Policy, *, cache: str | os.PathLike[str] | bool | None = None
    ) -> None:
        if policy.emulator is None:
            raise ConfigError("the policy has no [emulator] to answer its emulated tools")
        self.emulator = Emulator(policy.emulator, redaction=policy.redaction, cache=cache)
        self._portal: BlockingPortal | None = None
        self._stack: ExitStack | None = None

    @property
    def fingerprint(self) -> str:
        return self.emulator.fingerprint

    def __enter__(self) -> SyncEmulator:
        stack = ExitStack()
        try:
            portal = stack.enter_context(start_blocking_portal())
            stack.enter_context(portal.wrap_async_context_manager(self.emulator))
        except BaseException:
            stack.close()
            raise
        self._portal, self._stack = portal, stack
        return self

    def __exit__(self, *exc: object) -> None:
        stack, self._stack, self._portal = self._stack, None, None
        if stack is not None:
            stack.close()

    def describe(
        self, functions: Mapping[str, Function[..., Any]] | Sequence[Function[..., Any]]
    ) -> None:
        """Tell the emulator the suite's tools (:func:`suite_specs`)."""
        self.emulator.describe_tools(suite_specs(functions))

    def emulate(self, tool: str, args: Mapping[str, Any], history: HistoryView) -> Asked:
        """The emulator's answer for one call (see ``Emulator.emulate``).

        Raises:
            ConfigError: the emulator is not open (``with``).
        """
        if self._portal is None:
            raise ConfigError(f"tool {tool!r} is emulated, but its emulator is not open")
        asked: Asked = self._portal.call(self.emulator.emulate, tool, args, history)
        return asked


@contextmanager
def opened(
    policy: Policy, given: SyncEmulator | None, cache: str | os.PathLike[str] | None = None
) -> Iterator[SyncEmulator | None]:
    """``given``, else an emulator of the policy's opened for the block (None: the policy
    has no emulator)."""
    if given is not None or policy.emulator is None:
        yield given
        return
    with SyncEmulator(policy, cache=cache) as emulator:
        yield emulator
