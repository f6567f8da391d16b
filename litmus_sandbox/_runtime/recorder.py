"""The recorder of one episode: its steps, their numbering, and its end record.

Theory of operation
-------------------
A :class:`Recording` is made by ``Sandbox.episode`` once the episode's header is written.
Each ``message`` and each finished call becomes a step, numbered in the order it
completed, and written to the episode stream *before* the call returns to the agent. A
call goes through the same stages whatever its tool's mode:

1. its probes' windows open (:class:`~litmus_sandbox._runtime.observers.Watch`);
2. its mode (``MODES[policy.mode]``, ``modes.py``) performs it and builds its step;
3. the windows close: the effects attributed to the call, and their findings, join the
   step; it is numbered; replay facts name its index; the caller's ``finalize`` may
   annotate it; a ``record-new`` miss is appended to the cassette;
4. it is written, shielded from cancellation: a call that ran is recorded, even when its
   caller is cancelled meanwhile.

A call cancelled (or the process told to stop) while performed is recorded as
interrupted, and the stop goes on. A call that fails before it has a step (a
misconfigured one) records nothing, and what its probes saw is unattributed. A call an
adapter runs itself (:meth:`Recording.begin_call`) skips stage 2: the adapter finishes
it through :class:`~litmus_sandbox._runtime.open_call.OpenCall`, which records it through
:meth:`Recording.record_inline`, stages 3 and 4 without awaiting.

:meth:`Recording.end` closes the episode (nothing is recorded after it); its ``end`` record
says how it ended, its steps, the effects no call explains (a tool server's start-up and
shutdown apart: ``phases.py``), and how it followed its recording.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import anyio
import msgspec

from litmus_sandbox._config.policy import Policy
from litmus_sandbox._core.divergence import META_KEY, ReplayReport, report_of, summary_meta
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import (
    SCHEMA_VERSION,
    Actual,
    Effects,
    EndStatus,
    EpisodeEnd,
    EpisodeHeader,
    MessageStep,
    Role,
    Shown,
    ToolCallStep,
)
from litmus_sandbox._runtime.modes import CallEnv, Performed, Runner, mode_for
from litmus_sandbox._runtime.observers import Watch
from litmus_sandbox._runtime.open_call import Finalize, OpenCall
from litmus_sandbox._runtime.phases import Ending
from litmus_sandbox._runtime.processes import Subprocesses
from litmus_sandbox._runtime.replay import Cassette
from litmus_sandbox._runtime.steps import CallSteps
from litmus_sandbox._runtime.stream import EpisodeStream
from litmus_sandbox._runtime.tool_calls import ToolResult, shown_value
from litmus_sandbox.oracles import _audit as audit

_ROLES: dict[str, Role] = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
}


class Wiring(NamedTuple):
    """What a recording is wired to: parts of its sandbox, and the episode's replay.

    Args:
        policy: the tool policy each call is performed under.
        stream: the episode stream the steps and the end go to.
        watch: the probes' watch over the episode's calls (None: no probes).
        env: what the fidelity modes use to perform calls.
        processes: runs the subprocess tools of :meth:`Recording.run`.
        cassette: the cassette a ``record-new`` replay grows (None: not replaying).
        sources: the recorded episodes this one replays.
        inline: whether adapters may run real calls themselves (``begin_call``).
    """

    policy: Policy
    stream: EpisodeStream
    watch: Watch | None
    env: CallEnv
    processes: Subprocesses
    cassette: Cassette | None = None
    sources: tuple[str, ...] = ()
    inline: bool = True


class Recording:
    """Records one episode (the sandbox makes it: ``async with sandbox.episode(...) as ep``).

    Args:
        header: the episode's header, already written.
        wiring: the sandbox's parts it records with.
    """

    def __init__(self, header: EpisodeHeader, wiring: Wiring) -> None:
        self.header = header
        self.episode_id = header.episode_id
        self._policy = wiring.policy
        self._stream = wiring.stream
        self._watch = wiring.watch
        self._env = wiring.env
        self._processes = wiring.processes
        self._cassette = wiring.cassette
        self._sources = wiring.sources
        self._inline = wiring.inline
        self._next_index = 0
        self._calls = 0
        #: Steps written to the stream (a step whose write failed is numbered, not counted).
        self._written = 0
        #: The first failed write of a step (disk full …): the episode then ends aborted.
        self.write_failure: OSError | None = None
        #: Facts learnt during the episode that go in its ``end`` record's ``meta``
        #: (adapters use it for what they learn after the header is written).
        self.end_meta: dict[str, Any] = {}
        #: Set once the episode's ``end`` record is written.
        self.ended = False
        #: Call id -> what the agent is shown of a result its step records capped, while
        #: that step is finished (``finalize`` reads it through :meth:`whole_shown`).
        self._uncapped: dict[str, Shown] = {}

    def replay_report(self) -> ReplayReport | None:
        """How this episode has followed its recording so far (None: nothing replayed).

        Unused recorded calls are final only once the episode has ended; the sandbox
        then keeps the report in ``sandbox.replay_reports[episode_id]``.
        """
        if self._env.replay is None:
            return None
        return report_of(self._env.replay, self.episode_id, self.header.case_id, self._sources)

    def _require_open(self) -> None:
        if self.ended:
            raise ConfigError(f"episode {self.episode_id} has ended: nothing more is recorded")

    def _numbered(self, step: ToolCallStep) -> ToolCallStep:
        index, self._next_index = self._next_index, self._next_index + 1
        return msgspec.structs.replace(step, index=index)

    async def _write(self, step: ToolCallStep) -> ToolCallStep:
        """Write a call's step; returns it as written (arguments capped, or by ``repr``)."""
        if self.ended:
            raise ConfigError(
                f"episode {self.episode_id} ended while this call ran: its step is not recorded"
            )
        try:
            written = await self._stream.write(step)
        except OSError as exc:
            self._failed(exc)
            raise
        self._written += 1
        assert isinstance(written, ToolCallStep)
        if self._env.history is not None:
            self._env.history.add(written)  # the episode so far, as an emulator sees it
        return written

    def _write_now(self, record: msgspec.Struct) -> msgspec.Struct:
        try:
            written = self._stream.write_now(record)
        except OSError as exc:
            self._failed(exc)
            raise
        self._written += 1
        if self._env.history is not None and isinstance(written, MessageStep | ToolCallStep):
            self._env.history.add(written)
        return written

    def _failed(self, exc: OSError) -> None:
        # The writer left the stream as it was before the failed record; the error goes on
        # to the caller, and the episode can no longer end complete.
        if self.write_failure is None:
            self.write_failure = exc

    def message(self, role: str, text: str, *, refusal: bool | None = None) -> None:
        """Record a message. Refusals are recorded like any message, never a stopping point.

        Raises:
            ConfigError: an unknown role, text that is not a string, or an episode that
                has ended (a record after its end would make the stream unreadable).
        """
        self._require_open()
        known = _ROLES.get(role) if isinstance(role, str) else None
        if known is None:
            raise ConfigError(f"unknown role {role!r} (user, assistant, system or tool)")
        if not isinstance(text, str):
            raise ConfigError(f"a message's text is a string, got {type(text).__name__}")
        if refusal is not None and not isinstance(refusal, bool):
            raise ConfigError(f"refusal is True, False or None, got {refusal!r}")
        index, self._next_index = self._next_index, self._next_index + 1
        step = MessageStep(
            v=SCHEMA_VERSION,
            episode_id=self.episode_id,
            index=index,
            role=known,
            text=text,
            refusal=refusal,
            at=time.time(),
        )
        self._write_now(step)

    async def call(self, tool: str, /, **args: Any) -> ToolResult:
        """Call ``tool`` under its policy and record the step before returning.

        Returns what the agent is shown. A real tool that raises gives an ``is_error``
        result (it is not swallowed unless the policy says so). Cancellation records the
        call as interrupted and propagates.
        """
        return await self._call(tool, args, None)

    async def call_with(
        self,
        runner: Runner | None,
        tool: str,
        args: Mapping[str, Any],
        *,
        finalize: Finalize | None = None,
        refuse: str | None = None,
    ) -> ToolResult:
        """Like :meth:`call`, but a call that runs for real runs ``await runner(tool, args)``
        (``runner=None``: the registered tool runs, as in :meth:`call`).

        ``refuse``: the call cannot be made at all (an adapter found its arguments
        unreadable): whatever the tool's mode, nothing runs, is stubbed or emulated; the
        agent is told ``refuse`` as an error and the step is ``denied``, ``not_run``.

        Adapters use this to forward calls to a tool server they front. The runner may
        return a :class:`Shown` to say exactly what the agent sees (content blocks, error
        flag, structured content); any other value is converted like a tool's return value.
        An exception from the runner is recorded and shown as an error, like a tool's.
        ``finalize``, if given, sees the finished step (whatever its outcome, interrupted
        included) just before it is written, and may return it annotated (e.g. with the
        raw upstream envelope in ``meta``).
        """
        return await self._call(tool, dict(args), runner, finalize, refuse)

    async def run(
        self,
        cmd: Sequence[str],
        *,
        name: str = "run",
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ToolResult:
        """Run a subprocess tool in the sandbox root, recorded as a ``name`` tool call.

        The process gets the egress proxy (in strict mode, an empty network namespace
        whose only way out is the proxy; otherwise the proxy variables) and runs under a
        supervisor (``processes.py``). The agent is shown its stdout (and stderr), cut to
        ``max_result_bytes``, ``is_error`` when it exits non-zero; the step records the
        exit code, output sizes and hashes, what it left running or had killed, and the
        effects the probes saw. The call ends when the process exits; what it left
        running is killed when its time limit passes or the episode ends.
        """
        args: dict[str, Any] = {"cmd": list(cmd)}
        if input is not None:
            args["input_sha256"] = hashlib.sha256(input).hexdigest()
        facts: dict[str, Any] = {}  # what it left running, what was killed
        runner = functools.partial(
            self._processes.run,
            cmd=list(cmd),
            input=input,
            env=env,
            episode_id=self.episode_id,
            facts=facts,
        )

        def noted(step: ToolCallStep) -> ToolCallStep:
            if not facts:
                return step
            # Command lines echo the call's arguments: their secrets are redacted too.
            kept, _ = self._policy.redaction.args(dict(facts))
            return msgspec.structs.replace(step, meta={**step.meta, "processes": kept})

        return await self.call_with(runner, name, args, finalize=noted)

    async def _call(
        self,
        tool: str,
        args: dict[str, Any],
        runner: Runner | None,
        finalize: Finalize | None = None,
        refuse: str | None = None,
    ) -> ToolResult:
        self._require_open()
        policy = self._policy.for_tool(tool)
        mode = mode_for(policy.mode if refuse is None else "deny")
        self._calls += 1
        call = CallSteps(self.episode_id, f"{self.episode_id}:{self._calls}", tool, args)
        watch = self._watch
        if watch is not None:
            await watch.before(call.call_id)
            if runner is not None:
                # The call runs where the audit hook does not see (an adapter's server, a
                # subprocess): unless its processes report what they did, only its window
                # can say what it changed outside the root.
                for evidence in audit.collecting():
                    evidence.delegated = True
        try:
            if refuse is None:
                performed = await mode.perform(call, policy, self._env, runner)
            else:
                told = Shown(content=({"type": "text", "text": refuse},), is_error=True)
                performed = Performed(call.step("denied", told, Actual(outcome="not_run")))
        except (anyio.get_cancelled_exc_class(), KeyboardInterrupt, SystemExit) as exc:
            # Cancelled, or the process told to stop (a tool calling sys.exit, Ctrl-C): the
            # call ran, so its step says it was interrupted, and the stop goes on.
            with anyio.CancelScope(shield=True):
                stop = None if isinstance(exc, anyio.get_cancelled_exc_class()) else exc
                interrupted = self._numbered(call.interrupted(mode.fidelity, stop))
                if watch is not None:
                    interrupted = await watch.after(call.call_id, interrupted)
                if finalize is not None:
                    interrupted = finalize(interrupted)
                if not self.ended:  # else the episode is closed: the cancellation stands
                    await self._write(interrupted)
            raise
        except Exception:
            # No step (a misconfigured call): the probes' windows close all the same, and
            # what they saw is unattributed rather than lost or left open.
            if watch is not None:
                with anyio.CancelScope(shield=True):
                    await watch.abandon(call.call_id)
            raise
        # The call ran: its step is recorded even if the caller is cancelled meanwhile
        # (the cancellation then reaches it at its next checkpoint).
        with anyio.CancelScope(shield=True):
            whole = performed.whole
            if whole is not None:
                self._uncapped[call.call_id] = whole
            try:
                step = await self._finish_step(call.call_id, performed.step, finalize)
            finally:
                if whole is not None:
                    self._uncapped.pop(call.call_id, None)
            step = await self._write(step)
        shown = step.shown if whole is None else whole
        return ToolResult(
            value=shown_value(shown),
            content=shown.content,
            is_error=shown.is_error,
            fidelity=step.fidelity,
        )

    async def _finish_step(
        self, call_id: str, step: ToolCallStep, finalize: Finalize | None
    ) -> ToolCallStep:
        """The performed call's step as it is recorded: effects, index, replay facts, the
        caller's annotations, and its place in a growing cassette."""
        if self._watch is not None:
            step = await self._watch.after(call_id, step)
        step = self._numbered(step)
        replay = self._env.replay
        if replay is not None and isinstance(facts := step.meta.get(META_KEY), dict):
            replay.note_step(facts["call"], step.index)
            divergence = facts.get("divergence")
            if isinstance(divergence, dict) and divergence.get("step") is None:
                # The step's index is known only now: the record names it, as the report does.
                facts = {**facts, "divergence": {**divergence, "step": step.index}}
                step = msgspec.structs.replace(step, meta={**step.meta, META_KEY: facts})
        if finalize is not None:
            step = finalize(step)
        return self._grow_cassette(step)

    def whole_shown(self, call_id: str) -> Shown | None:
        """What the agent is shown of call ``call_id`` while its step is finished, when
        that step records the result capped (``max_result_bytes``); None otherwise.

        An adapter that answers a call itself builds its answer from this in
        ``finalize``, which sees the step as recorded (capped).
        """
        return self._uncapped.get(call_id)

    def _grow_cassette(self, step: ToolCallStep) -> ToolCallStep:
        """A ``record-new`` miss: append the finished step to the cassette, as the live
        episode records it (its meta included, so a replay serves what the tool answered);
        the step names where it went."""
        facts = step.meta.get(META_KEY)
        cassette = self._cassette
        if not (isinstance(facts, dict) and facts.get("on_miss") == "record-new") or (
            cassette is None or "recorded_as" in facts
        ):
            return step
        where = cassette.record(self.header, self._sources, step, self._policy.redaction)
        facts = {**facts, "recorded_as": msgspec.to_builtins(where)}
        return msgspec.structs.replace(step, meta={**step.meta, META_KEY: facts})

    def begin_call(self, tool: str, args: Mapping[str, Any]) -> OpenCall | None:
        """Start a real call that the caller runs and finishes itself, or None.

        The hot path of adapters relaying calls to a tool server: no task, event or
        cancel scope per call; the caller sends the request, then finishes the call with
        what came back (:class:`OpenCall`), and the step is the one :meth:`call_with`
        would record for the same outcome, effects included. Only a plain real call
        qualifies: None when the tool's mode is not ``real``, a probe must be awaited
        around the call (one without ``open_window``/``close_window``, such as the
        filesystem probe), or the sandbox fsyncs every record (that would block the
        loop); use :meth:`call_with` then.
        """
        self._require_open()
        policy = self._policy.for_tool(tool)
        if not (self._inline and mode_for(policy.mode).inline):
            return None
        self._calls += 1
        call_id = f"{self.episode_id}:{self._calls}"
        if self._watch is not None:
            self._watch.open_windows(call_id)
        call = CallSteps(self.episode_id, call_id, tool, dict(args))
        return OpenCall(call, self._env.limit(policy), self._env.cap, self)

    def take_index(self) -> int:
        """The index of the step of a call begun with :meth:`begin_call`, as it finishes
        (``OpenCall`` builds the step with it)."""
        index = self._next_index
        self._next_index = index + 1
        return index

    def record_inline(self, step: ToolCallStep, finalize: Finalize | None) -> ToolCallStep:
        """Record the step of a call begun with :meth:`begin_call` (``OpenCall`` does),
        numbered by :meth:`take_index`: with what the windows saw (closed whatever
        comes), annotated by ``finalize``, written; returns it as written.

        Raises:
            ConfigError: the episode has ended.
        """
        if self._watch is not None:
            step = self._watch.close_windows(step.call_id, step)
        self._require_open()
        if finalize is not None:
            step = finalize(step)
        written = self._write_now(step)
        assert isinstance(written, ToolCallStep)
        return written

    async def end(
        self, status: EndStatus, reason: str | None, reports: dict[str, ReplayReport]
    ) -> None:
        """Close the episode and write its ``end`` record; nothing is recorded after it.

        A replayed episode's final :class:`ReplayReport` goes in ``reports``, and its
        summary in the end record's ``meta``.
        """
        self.ended = True
        if self.write_failure is not None:
            lost = self._next_index - self._written
            failure = (
                f"writing the episode stream failed ({_describe_os_error(self.write_failure)}); "
                f"{lost} step{'' if lost == 1 else 's'} not recorded"
            )
            status = "aborted"
            reason = failure if reason is None else f"{reason}; {failure}"
        # What its subprocess tools left running dies first: the last pass sees what it did.
        killed = await self._processes.end_episode(self.episode_id)
        seen = await self._watch.finish() if self._watch is not None else Ending(Effects(), ())
        end_meta: dict[str, Any] = dict(self.end_meta)
        if killed:
            end_meta["processes_killed"] = self._policy.redaction.args(killed)[0]
        session = self._env.replay
        if session is not None and self._cassette is not None:
            report = report_of(session, self.episode_id, self.header.case_id, self._sources)
            reports[self.episode_id] = report
            end_meta[META_KEY] = summary_meta(report)
            self._cassette.finish(self.episode_id)
        await self._stream.write(
            EpisodeEnd(
                v=SCHEMA_VERSION,
                episode_id=self.episode_id,
                status=status,
                steps=self._written,
                reason=reason,
                at=datetime.now(UTC).isoformat(),
                unattributed=seen.unattributed,
                findings=seen.findings,
                startup=seen.startup or msgspec.UNSET,
                shutdown=seen.shutdown or msgspec.UNSET,
                meta=end_meta,
            )
        )


def _describe_os_error(exc: OSError) -> str:
    """``[Errno 28] No space left on device`` as ``No space left on device (ENOSPC)``."""
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text
