"""An AgentDojo ``FunctionsRuntime`` that applies the policy's tool modes and observes state.

Theory of operation
-------------------
AgentDojo runs every tool through ``FunctionsRuntime.run_function`` (its ``ToolsExecutor``,
the ground-truth pipeline, and nested calls inside another call's arguments alike), so a
subclass sees every call that reached the tools. Each call is performed under its tool's
mode in the policy's ``[tools]`` table:

=======  =================================================  ==============
mode     what the pipeline gets                             recorded as
=======  =================================================  ==============
real     the tool's result (or its error)                   ``real``
stub     the policy's ``result`` (a ``Stub`` computes it)   ``stubbed``
swallow  the tool runs; the placeholder ``shown`` is given  ``swallowed``
deny     no result and the policy's ``message`` as error    ``denied``
emulate  the ``[emulator]``'s result, or its error           ``emulated``
=======  =================================================  ==============

An emulated call never reaches the tool: the emulator (``_emulation.py``) answers, shown
the episode so far as this runtime knows it (:attr:`LitmusRuntime.history`: the user
task's prompt, then each call with what the pipeline got back). A failed emulation is an
error saying so; the state probe still watches the call, so an emulated call that changed
the environment is a ``stub_leak``.

The task environment is watched by the state probe
(:class:`~litmus_sandbox.oracles.state.StateProbe` over ``env.model_dump(mode="json")``):
its ``before_call`` / ``after_call`` around each call give the call's
``effects.state`` (hashes before and after, the JSON paths that changed); a nested call
ends before its outer one, so each change lands on the call that made it. Each finished
call is kept as a :class:`Dispatched`, in the order calls ended; the episode is built from
them and the pipeline's messages afterwards (``_episode.py``). The probe's coroutines
never await (the state is in memory), so they are driven here without an event loop.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.functions_runtime import Function, FunctionsRuntime, TaskEnvironment

from litmus_sandbox._config.policy import Policy, Stub
from litmus_sandbox._core.emulation import History, HistoryView
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Actual, Effects, Fidelity
from litmus_sandbox.oracles.state import StateProbe

from ._emulation import SyncEmulator

#: The state probe's name in ``effects.state`` and in the header's ``oracles``.
PROBE_NAME = "agentdojo_env"
#: Tool modes the runtime can perform (replay has no recording to serve AgentDojo from).
MODES = frozenset({"real", "stub", "swallow", "deny", "emulate"})


def drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never awaits (the state probe's), without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the state probe awaited: it cannot be driven without a loop")


class Dispatched:
    """One call that reached the runtime, as it ended."""

    __slots__ = (
        "actual",
        "args",
        "effects",
        "emulator",
        "ended_at",
        "error",
        "fidelity",
        "function",
        "result",
        "started_at",
    )

    def __init__(self, function: str, args: dict[str, Any], fidelity: Fidelity) -> None:
        self.function = function
        self.args = args
        self.fidelity: Fidelity = fidelity
        self.result: Any = None
        self.error: str | None = None
        self.actual: Actual | None = None
        self.effects = Effects()
        #: An emulated call's ``meta.emulator`` (None for every other call).
        self.emulator: dict[str, Any] | None = None
        self.started_at = time.time()
        self.ended_at = self.started_at


class LitmusRuntime(FunctionsRuntime):
    """AgentDojo's runtime, each call performed under ``policy`` and observed.

    Args:
        functions: the suite's tools (``suite.tools``).
        policy: the tool modes (None: everything real).
        watch: observe the task environment's state around each call (:meth:`start`
            names the environment).
        emulator: answers the calls of tools in ``emulate`` mode (open, ``with``).

    Raises:
        ConfigError: the policy gives a suite tool a mode the runtime cannot perform, or
            emulates one with no emulator.
    """

    def __init__(
        self,
        functions: Sequence[Function[..., Any]] = (),
        *,
        policy: Policy | None = None,
        watch: bool = True,
        emulator: SyncEmulator | None = None,
    ) -> None:
        super().__init__(functions)
        self.policy = policy or Policy()
        self.emulator = emulator
        #: The episode so far, as an emulator is shown it (None without an emulator).
        self.history: History | None = None
        self.probe = StateProbe(self._state, name=PROBE_NAME) if watch else None
        self._env: TaskEnvironment | None = None
        #: Every call that reached the runtime, in the order they ended.
        self.dispatched: list[Dispatched] = []
        for name in self.functions:
            mode = self.policy.for_tool(name).mode
            if mode not in MODES:
                raise ConfigError(
                    f"tool {name!r}: mode {mode!r} cannot run under AgentDojo "
                    f"(one of {', '.join(sorted(MODES))})"
                )
            if mode == "emulate" and emulator is None:
                raise ConfigError(f"tool {name!r} is emulated, but the runtime has no emulator")
        if emulator is not None:
            emulator.describe(self.functions)

    def _state(self) -> Any:
        return None if self._env is None else self._env.model_dump(mode="json")

    def start(self, env: TaskEnvironment, prompt: str | None = None) -> None:
        """Watch ``env`` from now on (its state now is every later change's "before");
        an emulator's history starts with the user task's ``prompt``."""
        self._env = env
        if self.probe is not None:
            drive(self.probe.start())
        if self.emulator is not None:
            self.history = History()
            if prompt is not None:
                self.history.add_message("user", prompt)

    def finish(self) -> Effects:
        """Stop watching: the changes no call made (seen between calls, or since the last)."""
        effects: Effects = drive(self.probe.finish()) if self.probe is not None else Effects()
        return effects

    def run_function(
        self,
        env: TaskEnvironment | None,
        function: str,
        kwargs: Mapping[str, Any],
        raise_on_error: bool = False,
    ) -> tuple[Any, str | None]:
        tool_policy = self.policy.for_tool(function)
        mode = tool_policy.mode if function in self.functions else "real"
        call = Dispatched(function, _plain(kwargs), _FIDELITY[mode])
        try:
            if mode == "stub":
                result = tool_policy.result
                if isinstance(result, Stub):
                    value = result.fn(**call.args)
                    result = value if not inspect.isawaitable(value) else None
                call.result = result
                return result, None
            if mode == "deny":
                call.error = tool_policy.message
                return _told(tool_policy.message, raise_on_error)
            if self.probe is not None and env is not None:
                self._env = env
                drive(self.probe.before_call(function))
            try:
                if mode == "emulate":
                    result, error = self._emulate(call)
                else:
                    result, error = super().run_function(env, function, kwargs, raise_on_error)
            finally:
                if self.probe is not None and env is not None:
                    call.effects = drive(self.probe.after_call(function))
            if mode == "swallow":
                call.actual = Actual(outcome="raised" if error else "returned", error_message=error)
                call.result = tool_policy.shown
                return tool_policy.shown, None
            call.result, call.error = result, error
            if error and mode == "emulate":
                return _told(error, raise_on_error)
            return result, error
        except Exception as exc:
            call.error = f"{type(exc).__name__}: {exc}"
            call.actual = Actual(
                outcome="raised", error_type=type(exc).__name__, error_message=str(exc)
            )
            raise
        finally:
            call.ended_at = time.time()
            self.dispatched.append(call)
            if self.history is not None:
                self.history.add_call(function, call.args, _shown(call))

    def _emulate(self, call: Dispatched) -> tuple[Any, str | None]:
        """The emulator's answer to ``call``: its result, its error, or (failed) an error
        saying so."""
        assert self.emulator is not None
        history = self.history.view() if self.history is not None else HistoryView()
        asked = self.emulator.emulate(call.function, call.args, history)
        call.emulator = asked.facts
        answer = asked.answer
        if answer is None:
            why = asked.facts.get("failure", {}).get("class", "failed")
            return (
                "",
                f"litmus-sandbox: the emulation of {call.function!r} failed ({why}); no result",
            )
        if answer.error is not None:
            return "", answer.error
        return answer.result, None


_FIDELITY: dict[str, Fidelity] = {
    "real": "real",
    "stub": "stubbed",
    "swallow": "swallowed",
    "deny": "denied",
    "emulate": "emulated",
}


def _told(error: str, raise_on_error: bool) -> tuple[Any, str]:
    """A call answered with ``error`` (denied, or an emulation that failed or answered an
    error): the error, and as the result too when the caller reads only the result.

    AgentDojo's ground-truth pipelines ask with ``raise_on_error`` and drop the error
    that comes back, showing the result as a success: an empty result would be a
    success made up. They are shown the error's text instead."""
    return (error if raise_on_error else ""), error


def _shown(call: Dispatched) -> dict[str, Any]:
    """What the pipeline got back from ``call``, as an emulator's history shows it."""
    text = call.error if call.error else _as_text(call.result)
    return {"content": [{"type": "text", "text": text}], "is_error": bool(call.error)}


def _as_text(result: Any) -> str:
    try:
        return str(tool_result_to_str(result))
    except (TypeError, ValueError):
        return repr(result)


def _plain(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as JSON data (a nested call is its ``FunctionCall`` dumped)."""
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        dump = getattr(value, "model_dump", None)
        out[key] = dump(mode="json") if callable(dump) else value
    return out
