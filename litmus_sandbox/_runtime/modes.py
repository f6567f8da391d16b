"""Fidelity modes: how a call is performed under each tool mode of the policy.

Theory of operation
-------------------
A tool's policy names a mode; :data:`MODES` maps each mode to one small object behind the
:class:`FidelityMode` protocol, which performs a call under it and builds the step it is
recorded as (with the call's :class:`~litmus_sandbox._runtime.steps.CallSteps`). A mode
never numbers, observes or writes a step: the recorder does that, the same for every mode,
so adding a mode is a class registered here and never touches the recorder.

=======  ===============================================  =============================
mode     the real tool                                    recorded as
=======  ===============================================  =============================
real     runs; how it ended is shown, errors included     ``real``
swallow  runs (or is dropped, ``run = false``); a         ``swallowed``, with what
         placeholder is shown                             happened in ``actual``
stub     never runs; a fixed or computed result answers   ``stubbed``
deny     never runs; the agent is told so                 ``denied``
replay   never runs: a recorded call answers; a miss is   ``replayed``; a miss
         an error or (``spy``, ``record-new``) runs it    ``denied``, or ``real``
emulate  never runs: the ``[emulator]`` (a model)         ``emulated``, with the
         answers; a failed emulation is an error          emulator's ``meta.emulator``
=======  ===============================================  =============================

Besides :meth:`FidelityMode.perform`, a mode says what an interrupted call under it is
recorded as (``fidelity``) and whether an adapter may run its calls itself
(``inline``, ``EpisodeRecorder.begin_call``: a plain real call only). A result too big for
the record (``max_result_bytes``) is recorded capped; the mode then also returns what the
agent is shown of it in whole (:attr:`Performed.whole`): the cap applies to the record,
never to what the agent gets.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple, Protocol

import msgspec

from litmus_sandbox._config.policy import Stub, ToolPolicy
from litmus_sandbox._core.divergence import META_KEY
from litmus_sandbox._core.emulation import History, HistoryView
from litmus_sandbox._core.replay_match import Divergence, ReplaySession, Served
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Actual, Fidelity, ReplaySource, Shown, ToolCallStep
from litmus_sandbox._runtime.emulator import Emulator
from litmus_sandbox._runtime.steps import CallSteps
from litmus_sandbox._runtime.tool_calls import (
    UNCAPPED,
    CallOutcome,
    cap_text,
    real_parts,
    run_tool,
    to_content,
)

#: Runs a call for real on behalf of an adapter: ``await runner(tool, args)``.
Runner = Callable[[str, dict[str, Any]], Awaitable[Any]]


class Performed(NamedTuple):
    """A performed call: its step (unnumbered), and what the agent is shown in whole
    when the step records the result capped (None: the step's ``shown`` is all)."""

    step: ToolCallStep
    whole: Shown | None = None


class CallEnv:
    """What the modes may use to perform the calls of one episode.

    Args:
        tools: the registered tools, by name (read at each call).
        cap: ``max_result_bytes``: a result larger than this is recorded capped.
        timeout: the default time limit of a call (a tool's policy may set its own).
        replay: the episode's replay session (None: nothing to replay from).
        on_thread: told of each worker thread a sync tool runs in (the ledger tracks
            threads that may outlive a call).
        emulator: answers for the tools in ``emulate`` mode (None: no emulator).
        history: the episode so far, as the emulator is shown it (the recorder adds each
            step it writes; None without an emulator).
    """

    __slots__ = ("cap", "emulator", "history", "on_thread", "replay", "timeout", "tools")

    def __init__(
        self,
        *,
        tools: Mapping[str, Callable[..., Any]],
        cap: int,
        timeout: float | None = None,
        replay: ReplaySession | None = None,
        on_thread: Callable[[threading.Event], None] | None = None,
        emulator: Emulator | None = None,
    ) -> None:
        self.tools = tools
        self.cap = cap
        self.timeout = timeout
        self.replay = replay
        self.on_thread = on_thread
        self.emulator = emulator
        self.history = History() if emulator is not None else None

    def limit(self, policy: ToolPolicy) -> float | None:
        """The time limit of a call under ``policy`` (None: no limit)."""
        return policy.timeout if policy.timeout is not None else self.timeout


class FidelityMode(Protocol):
    """How calls are performed under one tool mode."""

    @property
    def fidelity(self) -> Fidelity:
        """What a call under this mode that is interrupted is recorded as."""
        ...

    @property
    def inline(self) -> bool:
        """Whether a caller may run the call itself and finish it (``begin_call``)."""
        ...

    async def perform(
        self, call: CallSteps, policy: ToolPolicy, env: CallEnv, runner: Runner | None
    ) -> Performed:
        """Perform ``call`` under ``policy``; ``runner``, if given, runs it for real.

        Raises:
            ConfigError: the call cannot be performed as configured (no such tool, no
                recording to replay from).
        """
        ...


async def _run(
    call: CallSteps, policy: ToolPolicy, env: CallEnv, runner: Runner | None
) -> tuple[CallOutcome, float | None]:
    """Run the real tool (or the runner); its outcome and the time limit it ran under."""
    fn: Callable[..., Any] | None
    if runner is not None:
        tool = call.tool

        async def fn(**a: Any) -> Any:
            return await runner(tool, a)

    else:
        fn = env.tools.get(call.tool)
    if fn is None:
        raise ConfigError(f"no tool named {call.tool!r} is registered with the sandbox")
    limit = env.limit(policy)
    return await run_tool(fn, call.args, limit, env.on_thread), limit


def _shown_like_a_result(value: Any, cap: int) -> tuple[Shown, Shown | None, dict[str, Any]]:
    """``value`` shown as a tool's return value (a table is structured content): what the
    step records, the whole when that is capped, and the step's meta."""
    content, structured, meta = to_content(value, cap)
    whole = None
    if "capped" in meta:
        full, full_structured = to_content(value, UNCAPPED)[:2]
        whole = Shown(content=full, structured=full_structured)
    return Shown(content=content, structured=structured), whole, meta


class RealMode:
    """``real``: the tool runs, and the agent is shown how it ended, errors included."""

    fidelity: Fidelity = "real"
    inline = True

    async def perform(
        self, call: CallSteps, policy: ToolPolicy, env: CallEnv, runner: Runner | None
    ) -> Performed:
        outcome, limit = await _run(call, policy, env, runner)
        shown, actual, meta = real_parts(outcome, env.cap, limit)
        whole = real_parts(outcome, UNCAPPED, limit)[0] if "capped" in meta else None
        return Performed(call.step("real", shown, actual, meta), whole)


class SwallowMode:
    """``swallow``: the tool runs (unless ``run = false``), and whatever happens the agent
    is shown the placeholder ``shown``; what happened is recorded in ``actual``."""

    fidelity: Fidelity = "swallowed"
    inline = False

    async def perform(
        self, call: CallSteps, policy: ToolPolicy, env: CallEnv, runner: Runner | None
    ) -> Performed:
        placeholder, whole, pmeta = _shown_like_a_result(policy.shown, env.cap)
        if not policy.run:
            return Performed(
                call.step("swallowed", placeholder, Actual(outcome="dropped"), pmeta), whole
            )
        outcome, limit = await _run(call, policy, env, runner)
        shown, actual, meta = real_parts(outcome, env.cap, limit)
        if actual is None:  # it returned: what it returned is recorded, not shown
            actual = Actual(
                outcome="returned",
                value=shown.structured
                if shown.structured is not None
                else (shown.content[0]["text"] if shown.content else None),
                repr_only=bool(meta.get("repr_only")),
            )
        # What happened is capped like what is shown: its size and hash say the whole.
        extra = {"actual_capped": meta["capped"]} if "capped" in meta else {}
        return Performed(call.step("swallowed", placeholder, actual, {**pmeta, **extra}), whole)


class StubMode:
    """``stub``: the tool never runs; a fixed ``result``, or one a :class:`Stub` computes
    from the arguments, answers. A computed stub that fails is shown as an error."""

    fidelity: Fidelity = "stubbed"
    inline = False

    async def perform(
        self, call: CallSteps, policy: ToolPolicy, env: CallEnv, runner: Runner | None
    ) -> Performed:
        result = policy.result
        try:
            value = result.fn(**call.args) if isinstance(result, Stub) else result
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            # The agent saw something, and the record says what (the tool never ran).
            whole_text = f"{type(exc).__name__}: {exc}"
            message, capped = cap_text(whole_text, env.cap)
            shown = Shown(
                content=({"type": "text", "text": f"stub failed: {message}"},), is_error=True
            )
            whole = None
            if capped:
                whole = Shown(
                    content=({"type": "text", "text": f"stub failed: {whole_text}"},),
                    is_error=True,
                )
            actual = Actual(outcome="raised", error_type=type(exc).__name__, error_message=message)
            return Performed(
                call.step("stubbed", shown, actual, {"capped": capped} if capped else {}), whole
            )
        shown, whole, meta = _shown_like_a_result(value, env.cap)
        return Performed(call.step("stubbed", shown, meta=meta), whole)


class DenyMode:
    """``deny``: the tool never runs; the agent is told so with the policy's ``message``."""

    fidelity: Fidelity = "denied"
    inline = False

    async def perform(
        self, call: CallSteps, policy: ToolPolicy, env: CallEnv, runner: Runner | None
    ) -> Performed:
        told = Shown(content=({"type": "text", "text": policy.message},), is_error=True)
        return Performed(call.step("denied", told))


class ReplayMode:
    """``replay``: a recorded call serves the call. A call the recording cannot serve (a
    *miss*, always a divergence, named on the step) is an error the agent sees, or, with
    ``on_miss = "spy"`` or ``"record-new"``, is performed by ``on_miss`` (real)."""

    fidelity: Fidelity = "replayed"
    inline = False

    def __init__(self, on_miss: FidelityMode) -> None:
        self._on_miss = on_miss

    async def perform(
        self, call: CallSteps, policy: ToolPolicy, env: CallEnv, runner: Runner | None
    ) -> Performed:
        session = env.replay
        if session is None:
            raise ConfigError(
                f"tool {call.tool!r} is in replay mode, but the sandbox has no recorded "
                "episodes to serve it from (Sandbox(replay=...))"
            )
        outcome = session.match(call.tool, call.args)
        if isinstance(outcome, Served):
            recorded = outcome.recorded
            source = ReplaySource(episode_id=recorded.episode_id, step=recorded.index)
            return Performed(call.step("replayed", recorded.shown, source=source))
        return await self._miss(session, outcome, call, policy, env, runner)

    async def _miss(
        self,
        session: ReplaySession,
        miss: Divergence,
        call: CallSteps,
        policy: ToolPolicy,
        env: CallEnv,
        runner: Runner | None,
    ) -> Performed:
        opts = session.options(call.tool)
        on_miss = opts.on_miss if opts is not None else "error"
        facts: dict[str, Any] = {
            "call": miss.call,
            "on_miss": on_miss,
            "divergence": msgspec.to_builtins(miss),
        }
        if on_miss == "error":
            text = (
                f"litmus-sandbox replay: no recorded call of {call.tool!r} serves this call "
                f"({miss.reason})"
            )
            told = Shown(content=({"type": "text", "text": text},), is_error=True)
            # Refused, and told so: nothing recorded serves it.
            return Performed(
                call.step("denied", told, Actual(outcome="not_run"), {META_KEY: facts})
            )
        # spy and record-new: the call runs for real, and is recorded as such (the policy
        # gives only its timeout). A record-new step is appended to the cassette once
        # finished, with what an adapter adds to it (the recorder does that).
        real = await self._on_miss.perform(call, policy, env, runner)
        step = msgspec.structs.replace(real.step, meta={**real.step.meta, META_KEY: facts})
        return Performed(step, real.whole)


class EmulateMode:
    """``emulate``: the tool never runs; the ``[emulator]`` answers (``emulator.py``). Its
    ``result`` is shown as a tool's return value, its ``error`` as the tool's error; a
    failed emulation is shown as an error saying so, and nothing made up."""

    fidelity: Fidelity = "emulated"
    inline = False

    async def perform(
        self, call: CallSteps, policy: ToolPolicy, env: CallEnv, runner: Runner | None
    ) -> Performed:
        emulator = env.emulator
        if emulator is None:
            raise ConfigError(
                f"tool {call.tool!r} is in emulate mode, but the sandbox has no emulator "
                "(the policy's [emulator] table)"
            )
        history = env.history.view() if env.history is not None else HistoryView()
        asked = await emulator.emulate(call.tool, call.args, history, env.tools.get(call.tool))
        facts = dict(asked.facts)
        meta: dict[str, Any] = {}
        whole = None
        answered = facts.get("answered")
        if isinstance(answered, dict) and isinstance(content := answered.get("content"), str):
            kept, capped = cap_text(content, env.cap)
            if capped is not None:  # the record keeps it capped, with its size and hash
                facts["answered"] = {**answered, "content": kept, "content_capped": capped}
        answer = asked.answer
        if answer is None:
            why = facts.get("failure", {}).get("class", "failed")
            text = f"litmus-sandbox: the emulation of {call.tool!r} failed ({why}); no result"
            shown = Shown(content=({"type": "text", "text": text},), is_error=True)
        elif answer.error is not None:
            message, capped = cap_text(answer.error, env.cap)
            shown = Shown(content=({"type": "text", "text": message},), is_error=True)
            if capped is not None:
                meta["capped"] = capped
                whole = Shown(content=({"type": "text", "text": answer.error},), is_error=True)
        else:
            shown, whole, meta = _shown_like_a_result(answer.result, env.cap)
        return Performed(call.step("emulated", shown, meta={**meta, "emulator": facts}), whole)


REAL = RealMode()

#: The registry: tool mode (``ToolPolicy.mode``) -> how its calls are performed.
MODES: dict[str, FidelityMode] = {
    "real": REAL,
    "stub": StubMode(),
    "swallow": SwallowMode(),
    "deny": DenyMode(),
    "replay": ReplayMode(on_miss=REAL),
    "emulate": EmulateMode(),
}


def mode_for(name: str) -> FidelityMode:
    """How calls under tool mode ``name`` are performed.

    Raises:
        ConfigError: no mode of that name is registered.
    """
    try:
        return MODES[name]
    except KeyError:
        raise ConfigError(f"unknown tool mode {name!r} (one of {', '.join(MODES)})") from None
