"""The sandbox: an async proxy between an agent and its tools that records everything.

Theory of operation
-------------------
A :class:`Sandbox` owns the episode stream and the tools. ``sandbox.episode(...)`` opens
an :class:`EpisodeRecorder`; its header (with the tool modes in force) is written first.
Each ``ep.message`` and each finished ``ep.call`` becomes a step, numbered in the order it
completed, flushed to disk *before* the call returns to the agent. The fidelity policy
decides per call whether the real tool runs and what the agent is shown; whenever those
differ, what really happened is recorded beside what was shown. Refusals are recorded
like any message: nothing here ever stops recording early. The episode ends ``complete``
when its block exits normally and ``aborted`` (with the reason) when it exits by an
exception or cancellation, which then propagates.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec

from litmus_sandbox._config.policy import Policy, Stub, ToolPolicy
from litmus_sandbox._core.divergence import META_KEY, ReplayReport, report_of, summary_meta
from litmus_sandbox._core.findings import call_findings, distinct, merge, unattributed_findings
from litmus_sandbox._core.replay_match import Divergence, ReplaySession, Served
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.errors import ConfigError, UpstreamError, leaf_errors
from litmus_sandbox._model.records import (
    SCHEMA_VERSION,
    Actual,
    Effects,
    EpisodeEnd,
    EpisodeHeader,
    Finding,
    MessageStep,
    Recorder,
    ReplaySource,
    Shown,
    ToolCallStep,
)
from litmus_sandbox._runtime.open_call import OpenCall
from litmus_sandbox._runtime.replay import Cassette
from litmus_sandbox._runtime.tool_calls import (
    FIDELITY_OF_MODE,
    UNCAPPED,
    ToolResult,
    cap_text,
    capped_text,
    real_parts,
    run_tool,
    shown_value,
    to_content,
    write_step,
)
from litmus_sandbox._store.streams import JsonlWriter, as_paths
from litmus_sandbox.oracles._probe import Probe
from litmus_sandbox.oracles.egress import (
    EgressPolicy,
    EgressProbe,
    ForwardProxy,
    run_strict,
    strict_available,
)
from litmus_sandbox.oracles.fs import FsProbe

#: Runs a call for real on behalf of an adapter: ``await runner(tool, args)``.
Runner = Callable[[str, dict[str, Any]], Awaitable[Any]]

#: The episode open in the current task, for ``sandbox.run``.
_CURRENT_EPISODE: ContextVar[EpisodeRecorder | None] = ContextVar(
    "litmus_current_episode", default=None
)

RECORDER_NAME = "litmus-sandbox"
#: The episode id of a record as this library writes it (compact JSON).
_EPISODE_ID = re.compile(rb'"episode_id":("(?:[^"\\]|\\.)*")')
#: Bumped only when *what is recorded* changes (the gate's recorder identity).
MEASUREMENT_VERSION = "1"
DEFAULT_MAX_RESULT_BYTES = 256 * 1024


class EpisodeRecorder:
    """Records one episode. Use through ``async with sandbox.episode(...) as ep``."""

    def __init__(self, sandbox: Sandbox, header: EpisodeHeader) -> None:
        self._sandbox = sandbox
        self.header = header
        self.episode_id = header.episode_id
        self._next_index = 0
        self._calls = 0
        # Calls in flight are tracked across the sandbox: its probes watch one world, so
        # calls of concurrent episodes overlap like calls of one episode do.
        self._in_flight: set[str] = sandbox._in_flight
        self._overlapped: set[str] = sandbox._overlapped
        #: Set when each sync tool's thread ends (one abandoned at a timeout runs on).
        self._threads: list[threading.Event] = sandbox._threads
        self._unattributed: list[Effects] = []
        self._replay: ReplaySession | None = None
        self._replay_sources: tuple[str, ...] = ()
        #: Facts learnt during the episode that go in its ``end`` record's ``meta``
        #: (adapters use it for what they learn after the header is written).
        self.end_meta: dict[str, Any] = {}
        #: Set once the episode's ``end`` record is written.
        self.ended = False
        #: Call id -> what the agent is shown of a result its step records capped: the
        #: cap (``max_result_bytes``) applies to the record, never to what the agent gets.
        self._uncapped: dict[str, Shown] = {}

    def replay_report(self) -> ReplayReport | None:
        """How this episode has followed its recording so far (None: nothing replayed).

        Unused recorded calls are final only once the episode has ended; the sandbox
        then keeps the report in ``sandbox.replay_reports[episode_id]``.
        """
        if self._replay is None:
            return None
        return report_of(self._replay, self.episode_id, self.header.case_id, self._replay_sources)

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox this episode records into."""
        return self._sandbox

    def _require_open(self) -> None:
        if self.ended:
            raise ConfigError(f"episode {self.episode_id} has ended: nothing more is recorded")

    def _index(self) -> int:
        i = self._next_index
        self._next_index += 1
        return i

    async def _write(self, record: msgspec.Struct) -> None:
        if self.ended:
            raise ConfigError(
                f"episode {self.episode_id} ended while this call ran: its step is not recorded"
            )
        await self._sandbox._write(record)

    def message(self, role: str, text: str, *, refusal: bool | None = None) -> None:
        """Record a message. Refusals are recorded like any message, never a stopping point.

        Raises:
            ConfigError: an unknown role, text that is not a string, or an episode that
                has ended (a record after its end would make the stream unreadable).
        """
        self._require_open()
        if role not in ("user", "assistant", "system", "tool"):
            raise ConfigError(f"unknown role {role!r} (user, assistant, system or tool)")
        if not isinstance(text, str):
            raise ConfigError(f"a message's text is a string, got {type(text).__name__}")
        if refusal is not None and not isinstance(refusal, bool):
            raise ConfigError(f"refusal is True, False or None, got {refusal!r}")
        step = MessageStep(
            v=SCHEMA_VERSION,
            episode_id=self.episode_id,
            index=self._index(),
            role=role,  # type: ignore[arg-type]
            text=text,
            refusal=refusal,
            at=time.time(),
        )
        self._sandbox._write_now(step)

    async def call(self, tool: str, /, **args: Any) -> ToolResult:
        """Call ``tool`` under its policy and record the step before returning.

        Returns what the agent is shown. A real tool that raises gives an ``is_error``
        result (it is not swallowed unless the policy says so). Cancellation records the
        call as interrupted and propagates.
        """
        return await self._call(tool, args, None)

    async def call_with(
        self,
        runner: Runner,
        tool: str,
        args: Mapping[str, Any],
        *,
        finalize: Callable[[ToolCallStep], ToolCallStep] | None = None,
    ) -> ToolResult:
        """Like :meth:`call`, but a call that runs for real runs ``await runner(tool, args)``.

        Adapters use this to forward calls to a tool server they front. The runner may
        return a :class:`Shown` to say exactly what the agent sees (content blocks, error
        flag, structured content); any other value is converted like a tool's return value.
        An exception from the runner is recorded and shown as an error, like a tool's.
        ``finalize``, if given, sees the finished step (whatever its outcome, interrupted
        included) just before it is written, and may return it annotated (e.g. with the
        raw upstream envelope in ``meta``).
        """
        return await self._call(tool, dict(args), runner, finalize)

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
        whose only way out is the proxy; otherwise the proxy variables). The agent is shown
        its stdout (and stderr), ``is_error`` when it exits non-zero; the step records the
        exit code, output sizes and hashes, and the effects the probes saw.
        """
        args: dict[str, Any] = {"cmd": list(cmd)}
        if input is not None:
            args["input_sha256"] = hashlib.sha256(input).hexdigest()
        return await self.call_with(
            functools.partial(self._sandbox._run_process, cmd=list(cmd), input=input, env=env),
            name,
            args,
        )

    async def _call(
        self,
        tool: str,
        args: dict[str, Any],
        runner: Runner | None,
        finalize: Callable[[ToolCallStep], ToolCallStep] | None = None,
    ) -> ToolResult:
        self._require_open()
        sandbox = self._sandbox
        tp = sandbox.policy.for_tool(tool)
        self._calls += 1
        call_id = f"{self.episode_id}:{self._calls}"
        started = time.time()
        if sandbox.probes:
            await self._probes_before(call_id)
        try:
            step = await sandbox._perform(self, call_id, tool, args, tp, started, runner)
        except (anyio.get_cancelled_exc_class(), KeyboardInterrupt, SystemExit) as exc:
            # Cancelled, or the process told to stop (a tool calling sys.exit, Ctrl-C): the
            # call ran, so its step says it was interrupted, and the stop goes on.
            self._uncapped.pop(call_id, None)
            with anyio.CancelScope(shield=True):
                interrupted = self._interrupted(call_id, tool, args, tp.mode, started)
                if not isinstance(exc, anyio.get_cancelled_exc_class()):
                    interrupted = msgspec.structs.replace(
                        interrupted,
                        actual=Actual(
                            outcome="interrupted",
                            error_type=type(exc).__name__,
                            error_message=str(exc),
                        ),
                    )
                if sandbox.probes:
                    interrupted = await self._probes_after(call_id, interrupted)
                if finalize is not None:
                    interrupted = finalize(interrupted)
                if not self.ended:  # else the episode is closed: the cancellation stands
                    await self._write(interrupted)
            raise
        except Exception:
            self._uncapped.pop(call_id, None)
            # No step (a misconfigured call): the probes' windows close all the same, and
            # what they saw is unattributed rather than lost or left open.
            if sandbox.probes:
                with anyio.CancelScope(shield=True):
                    await self._abandon_windows(call_id)
            raise
        # The call ran: its step is recorded even if the caller is cancelled meanwhile
        # (the cancellation then reaches it at its next checkpoint).
        with anyio.CancelScope(shield=True):
            try:
                step = await self._finish_step(call_id, step, finalize)
                shown = self._uncapped.get(call_id, step.shown)
            finally:
                self._uncapped.pop(call_id, None)
            await self._write(step)
        return ToolResult(
            value=shown_value(shown),
            content=shown.content,
            is_error=shown.is_error,
            fidelity=step.fidelity,
        )

    async def _finish_step(
        self,
        call_id: str,
        step: ToolCallStep,
        finalize: Callable[[ToolCallStep], ToolCallStep] | None,
    ) -> ToolCallStep:
        """The performed call's step as it is recorded: effects, index, replay facts, the
        caller's annotations, and its place in a growing cassette."""
        if self._sandbox.probes:
            step = await self._probes_after(call_id, step)
        step = msgspec.structs.replace(step, index=self._index())
        if self._replay is not None and isinstance(facts := step.meta.get(META_KEY), dict):
            self._replay.note_step(facts["call"], step.index)
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
        cassette = self._sandbox._cassette
        if not (isinstance(facts, dict) and facts.get("on_miss") == "record-new") or (
            cassette is None or "recorded_as" in facts
        ):
            return step
        where = cassette.record(self.header, self._replay_sources, step)
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
        sandbox = self._sandbox
        tp = sandbox.policy.for_tool(tool)
        if tp.mode != "real" or sandbox.fsync or not all(map(_windowed, sandbox.probes)):
            return None
        self._calls += 1
        limit = tp.timeout if tp.timeout is not None else sandbox.timeout
        call_id = f"{self.episode_id}:{self._calls}"
        if sandbox.probes:
            self._entering(call_id)
            for probe in sandbox.probes:
                probe.open_window(call_id)  # type: ignore[attr-defined]
        return OpenCall(self, call_id, tool, dict(args), limit)

    def _close_windows(self, call_id: str, step: ToolCallStep) -> ToolCallStep:
        """The step with the effects the (windowed) probes saw during an open call."""
        if not self._sandbox.probes:
            return step
        observed = [(p, p.close_window(call_id)) for p in self._sandbox.probes]  # type: ignore[attr-defined]
        return self._attributed(call_id, step, observed)

    def _interrupted(
        self, call_id: str, tool: str, args: dict[str, Any], mode: str, started: float
    ) -> ToolCallStep:
        """The step of a call cancelled before it ended (nothing was shown)."""
        return ToolCallStep(
            v=SCHEMA_VERSION,
            episode_id=self.episode_id,
            index=self._index(),
            call_id=call_id,
            tool=tool,
            args=args,
            fidelity=FIDELITY_OF_MODE[mode],  # type: ignore[arg-type]
            shown=Shown(content=(), is_error=True),
            actual=Actual(outcome="interrupted"),
            started_at=started,
            ended_at=time.time(),
        )

    def _entering(self, call_id: str) -> None:
        if self._in_flight:
            # Calls that overlap cannot be told apart by probes that only see the world.
            self._overlapped.update(self._in_flight)
            self._overlapped.add(call_id)
        self._threads[:] = [t for t in self._threads if not t.is_set()]
        if self._threads:
            # A sync tool abandoned at its timeout still runs in its thread: what it does
            # now would land on this call, so this call's effects are unattributed.
            self._overlapped.add(call_id)
        self._in_flight.add(call_id)

    def _leaving(self, call_id: str) -> None:
        # The sets are the sandbox's: a finished call leaves both, or they would only grow.
        self._in_flight.discard(call_id)
        self._overlapped.discard(call_id)

    async def _probes_before(self, call_id: str) -> None:
        self._entering(call_id)
        for probe in self._sandbox.probes:
            await probe.before_call(call_id)

    async def _probes_after(self, call_id: str, step: ToolCallStep) -> ToolCallStep:
        observed = [(p, await p.after_call(call_id)) for p in self._sandbox.probes]
        return self._attributed(call_id, step, observed)

    async def _abandon_windows(self, call_id: str) -> None:
        for probe in self._sandbox.probes:
            if effects := await probe.after_call(call_id):
                self._unattributed.append(effects)
        self._leaving(call_id)

    def _attributed(
        self, call_id: str, step: ToolCallStep, observed: list[tuple[Probe, Effects]]
    ) -> ToolCallStep:
        """The step with the effects its probes saw, and the findings they make."""
        attributed: list[Effects] = []
        for probe, effects in observed:
            exact = getattr(probe, "exact_attribution", False)
            if exact or call_id not in self._overlapped:
                attributed.append(effects)
            elif effects:
                self._unattributed.append(effects)
        self._leaving(call_id)
        step = msgspec.structs.replace(step, effects=merge(attributed))
        return msgspec.structs.replace(step, findings=call_findings(step))

    async def _probes_finish(self) -> tuple[Effects, tuple[Finding, ...]]:
        # Overlapping calls saw each other's changes: each change is reported once (egress
        # carries its call's id and never comes from overlap: every request counts).
        overlap = distinct(merge(self._unattributed)) if self._unattributed else Effects()
        parts = [overlap, *[await p.finish() for p in self._sandbox.probes]]
        effects = merge(parts)
        return effects, unattributed_findings(effects)


_SOCKET_DIR_PREFIX = "litmus-egress-"
#: A socket folder younger than this may belong to a sandbox that is still starting.
_STALE_AFTER_S = 60.0


def _socket_dir() -> str:
    """A fresh folder for the egress proxy's Unix socket, after sweeping stale ones.

    A sandbox removes its folder when it closes; one killed (SIGKILL, a crash) cannot, so
    each start removes the folders whose socket no process listens on any more.
    """
    top = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(top) if n.startswith(_SOCKET_DIR_PREFIX)]
    except OSError:
        names = []
    now = time.time()
    for name in names:
        folder = os.path.join(top, name)
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if st.st_uid != os.getuid() or now - st.st_mtime < _STALE_AFTER_S:
            continue
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(0.2)
            try:
                probe.connect(os.path.join(folder, "proxy.sock"))
                continue  # someone is listening: a live sandbox's folder
            except (ConnectionRefusedError, FileNotFoundError):
                shutil.rmtree(folder, ignore_errors=True)
    return tempfile.mkdtemp(prefix=_SOCKET_DIR_PREFIX)


class Sandbox:
    """The proxy between an agent and its tools.

    Args:
        root: the sandbox directory (created if missing); tools' working area.
        episodes: the episode stream to append to (JSON Lines).
        policy: a :class:`Policy`, a path to a policy file, a mapping (a parsed policy
            document, or its ``[tools]`` table alone), or None (everything real).
        tools: tools to register (name -> callable), sync or async.
        fsync: fsync every record (slower, survives power loss).
        timeout: default per-call timeout in seconds (a tool's policy may override).
        max_result_bytes: results larger than this are capped in the record, with their
            size and sha256.
        replay: recorded episodes (paths or a :class:`Cassette`) that serve the tools whose
            policy mode is ``replay``. Each episode replays the recorded episode of its
            case (see ``Cassette.session``); ``record-new`` misses are appended to the
            first file. ``replay_reports`` keeps each ended episode's
            :class:`ReplayReport`.
        probes: side-effect oracles (filesystem, state...) that observe every call. By
            default (None) the filesystem oracle watches ``root`` (``FsProbe(root)``, with
            its default tripwires); ``()`` attaches none.
        egress: an egress policy (or the ``[egress]`` table as a mapping), or an
            :class:`EgressProbe` (e.g. one that replays or records HTTP responses): adds an
            :class:`EgressProbe`, whose transport ``http_client()`` hands out, and a
            loopback forward proxy for the subprocess tools of ``ep.run``. By default (None)
            the policy's ``[egress]`` table, else allow every host and record every
            request; ``False`` leaves egress unwatched.
        strict_egress: run subprocess tools in their own network namespace whose only way
            out is the proxy: ``True`` requires it, ``False`` uses proxy variables only,
            ``None`` (default) uses it where this machine allows and says which in the
            episode header.
    """

    def __init__(
        self,
        *,
        root: str | os.PathLike[str],
        episodes: str | os.PathLike[str],
        policy: Policy | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        fsync: bool = False,
        timeout: float | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        replay: Cassette | str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
        probes: Sequence[Probe] | None = None,
        egress: EgressPolicy | EgressProbe | Mapping[str, Any] | bool | None = None,
        strict_egress: bool | None = None,
    ) -> None:
        self.root = Path(root)
        self.episodes_path = Path(episodes)
        if probes is None:
            probes = [FsProbe(self.root)]

        if policy is None:
            self.policy = Policy()
        elif isinstance(policy, Policy):
            self.policy = policy
        elif isinstance(policy, Mapping):
            self.policy = Policy.from_any_mapping(policy)
        elif isinstance(policy, str | os.PathLike):
            self.policy = Policy.from_file(policy)
        else:
            raise ConfigError(
                f"policy is a Policy, a mapping or a policy file's path, got {type(policy).__name__}"
            )
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
        ):
            raise ConfigError(f"the timeout is a positive number of seconds, got {timeout!r}")
        if (
            isinstance(max_result_bytes, bool)
            or not isinstance(max_result_bytes, int)
            or max_result_bytes <= 0
        ):
            raise ConfigError(f"max_result_bytes is a positive integer, got {max_result_bytes!r}")
        if egress is None or egress is True:
            # The policy's own [egress] table, else allow and record every host.
            egress = self.policy.egress if self.policy.egress is not None else {}
        self._tools: dict[str, Callable[..., Any]] = {}
        for name, fn in (tools or {}).items():
            self.tool(fn, name=name)
        self.fsync = fsync
        self.timeout = timeout
        self.max_result_bytes = max_result_bytes
        self._writer: JsonlWriter | None = None
        self.egress: EgressProbe | None = None
        if isinstance(egress, EgressProbe):
            self.egress = egress
            probes = [*probes, self.egress]
        elif egress is not False:
            ep_policy = (
                egress
                if isinstance(egress, EgressPolicy)
                else EgressPolicy.from_mapping(egress, source="egress")
            )
            self.egress = EgressProbe(ep_policy)
            probes = [*probes, self.egress]
        self.strict_egress = strict_egress
        self.egress_mode: dict[str, Any] = {}
        self._proxy: ForwardProxy | None = None
        self._stack: AsyncExitStack | None = None
        self.probes: tuple[Probe, ...] = tuple(probes)
        self._ignore_in_probes(self.episodes_path)
        # Said now, not at the first call: a session must not start that cannot serve.
        self.policy.require_recordings(replay is not None)
        self._cassette = (
            None
            if replay is None
            else Cassette.load(
                replay if isinstance(replay, Cassette) else as_paths(replay),
                fsync=fsync,
                stacklevel=2,
            )
        )
        if self._cassette is not None and self._cassette.record_to is not None:
            self._ignore_in_probes(self._cassette.record_to)  # a cassette we grow: ours too
        #: Episode id -> how that episode followed its recording (replayed episodes).
        self.replay_reports: dict[str, ReplayReport] = {}
        self._episode_ids: set[str] = set()
        self._stream_ids: set[str] | None = None  # read from the file when first needed
        #: Episodes open now (several may run at once, interleaved in one stream), and the
        #: lock that starts the probes with the first of them.
        self._active = 0
        self._probes_lock = anyio.Lock()
        self._in_flight: set[str] = set()
        self._overlapped: set[str] = set()
        self._threads: list[threading.Event] = []

    # ------------------------------------------------------------ tools

    def tool(self, fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
        """Register a tool (usable as ``@sandbox.tool`` or ``sandbox.tool(fn, name=...)``)."""
        if fn is None:
            return functools.partial(self.tool, name=name)
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name:
            raise ConfigError("a tool needs a name")
        self._tools[tool_name] = fn
        return fn

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        return dict(self._tools)

    def egress_env(self) -> dict[str, str]:
        """Proxy variables pointing a subprocess at the egress proxy (empty without egress).

        For long-lived subprocesses an adapter starts itself (e.g. an MCP server), which
        cannot be run in strict mode: they are recorded through the proxy variables.
        """
        return self._proxy.env() if self._proxy is not None else {}

    async def run(
        self,
        cmd: Sequence[str],
        *,
        name: str = "run",
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ToolResult:
        """Run a subprocess tool, recorded in the episode open in this task (``ep.run``).

        Raises:
            ConfigError: no episode of this sandbox is open in the calling task.
        """
        ep = _CURRENT_EPISODE.get()
        if ep is None or ep.sandbox is not self:
            raise ConfigError(
                "sandbox.run() records into the open episode: call it inside "
                "'async with sandbox.episode(...)' (or use ep.run)"
            )
        return await ep.run(cmd, name=name, input=input, env=env)

    def transport(self, inner: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncBaseTransport:
        """The recording egress transport, to mount on an httpx client of your own
        (``httpx.AsyncClient(transport=sandbox.transport())``); it sends through ``inner``
        (default: an ``httpx.AsyncHTTPTransport``; give one for TLS or pool options).

        Raises:
            ConfigError: the sandbox's egress is not watched (``Sandbox(egress=False)``).
        """
        return self._watched_egress("transport()").transport(inner)

    def http_client(self, **kwargs: Any) -> httpx.AsyncClient:
        """An httpx client whose every request is recorded and decided by the egress policy.

        Raises:
            ConfigError: the sandbox's egress is not watched (``Sandbox(egress=False)``).
        """
        return self._watched_egress("http_client()").client(**kwargs)

    def _watched_egress(self, what: str) -> EgressProbe:
        if self.egress is None:
            raise ConfigError(
                f"{what} needs an egress policy, and this sandbox was made with egress=False"
            )
        return self.egress

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Sandbox:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"sandbox root {str(self.root)!r}: {exc.strerror or exc}") from None
        if self.episodes_path.is_dir():
            raise ConfigError(f"episodes {str(self.episodes_path)!r} is a directory (give a file)")
        try:
            self._writer = JsonlWriter(self.episodes_path, fsync=False)
        except OSError as exc:
            raise ConfigError(
                f"episodes {str(self.episodes_path)!r}: {exc.strerror or exc}"
            ) from None
        self._stack = AsyncExitStack()
        if self.egress is not None:
            await self._start_proxy(self._stack, self.egress)
        return self

    def _ignore_in_probes(self, path: str | os.PathLike[str]) -> None:
        """Our own files are not the tools' effects: probes that watch paths skip them."""
        for probe in self.probes:
            ignore = getattr(probe, "ignore", None)
            if callable(ignore):
                ignore(path)

    async def _start_proxy(self, stack: AsyncExitStack, probe: EgressProbe) -> None:
        strict_ok, why = (False, "disabled (strict_egress=False)")
        if self.strict_egress is not False:
            strict_ok, why = await anyio.to_thread.run_sync(strict_available)
            if self.strict_egress and not strict_ok:
                raise ConfigError(f"strict egress mode was required but is unavailable: {why}")
        sock_dir = await anyio.to_thread.run_sync(_socket_dir)
        stack.callback(shutil.rmtree, sock_dir, True)
        self._ignore_in_probes(sock_dir)
        self._proxy = await stack.enter_async_context(
            ForwardProxy(probe.policy, probe.sink, unix_path=os.path.join(sock_dir, "proxy.sock"))
        )
        self.egress_mode = (
            {"mode": "strict"} if strict_ok else {"mode": "proxy-env", "strict_unavailable": why}
        )

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            for probe in self.probes:
                await probe.close()
        # Not under the shield: the proxy's task group was entered before it, and cancel
        # scopes must exit in the order they were entered.
        if self._stack is not None:
            stack, self._stack, self._proxy = self._stack, None, None
            await stack.aclose()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._cassette is not None:
            self._cassette.close()

    def _write_now(self, record: msgspec.Struct) -> None:
        if self._writer is None:
            raise ConfigError("the sandbox is not open: use 'async with Sandbox(...)'")
        if isinstance(record, ToolCallStep):
            write_step(self._writer.write, record)  # arguments JSON cannot hold by repr
        else:
            self._writer.write(record)
        if self.fsync:
            self._writer.sync()

    async def _write(self, record: msgspec.Struct) -> None:
        if self.fsync:
            await anyio.to_thread.run_sync(self._write_now, record)
        else:
            self._write_now(record)

    def _in_stream(self, episode_id: str) -> bool:
        """Whether the episode stream held records of ``episode_id`` when first asked
        (written by this library: a second episode of that id would make the stream
        unreadable). The file is read once; later episodes are in ``_episode_ids``."""
        if self._stream_ids is None:
            self._stream_ids = set()
            try:
                with open(self.episodes_path, "rb") as f:
                    for line in f:
                        if (m := _EPISODE_ID.search(line)) is not None:
                            with contextlib.suppress(msgspec.DecodeError):
                                self._stream_ids.add(msgspec.json.decode(m.group(1), type=str))
            except OSError:
                pass
        return episode_id in self._stream_ids

    def _header(
        self,
        episode_id: str,
        case_id: str,
        suite: str | None,
        agent: str | None,
        meta: dict[str, Any],
    ) -> EpisodeHeader:
        """An episode's header: who records, the tools' modes, how each probe watches."""
        return EpisodeHeader(
            v=SCHEMA_VERSION,
            episode_id=episode_id,
            case_id=case_id,
            suite=suite,
            agent=agent,
            started_at=datetime.now(UTC).isoformat(),
            recorder=Recorder(
                name=RECORDER_NAME,
                version=package_version(),
                measurement_version=MEASUREMENT_VERSION,
            ),
            tool_modes=self.policy.modes(list(self._tools)),
            oracles={p.name: _describe(p, self) for p in self.probes},
            meta=meta,
        )

    @asynccontextmanager
    async def episode(
        self,
        case_id: str,
        *,
        agent: str | None = None,
        suite: str | None = None,
        episode_id: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[EpisodeRecorder]:
        """Record one episode of ``case_id``; closed ``complete`` or ``aborted``."""
        if self._writer is None:
            raise ConfigError("the sandbox is not open: use 'async with Sandbox(...)'")
        session: ReplaySession | None = None
        sources: tuple[str, ...] = ()
        header_meta = dict(meta or {})
        if episode_id is not None and (
            episode_id in self._episode_ids or self._in_stream(episode_id)
        ):
            raise ConfigError(
                f"episode id {episode_id!r} is already used in {str(self.episodes_path)!r}"
            )
        if self._cassette is not None:
            session, sources = self._cassette.session(case_id, self.policy.replay_options)
            header_meta.setdefault(META_KEY, {"sources": list(sources)})
        # Taken now, before anything yields: two episodes of one id would make the stream
        # unreadable.
        eid = episode_id or uuid.uuid4().hex
        self._episode_ids.add(eid)
        try:
            async with self._probes_lock:
                if not self._active:
                    # Probes watch one world: they start with the first of concurrent
                    # episodes (before the header, which says how each watches).
                    for probe in self.probes:
                        await probe.start()
                self._active += 1
        except BaseException:
            self._episode_ids.discard(eid)
            raise
        try:
            header = self._header(eid, case_id, suite, agent, header_meta)
            await self._write(header)
        except BaseException:
            self._active -= 1
            self._episode_ids.discard(eid)
            raise
        ep = EpisodeRecorder(self, header)
        ep._replay, ep._replay_sources = session, sources
        status, reason = "complete", None
        token = _CURRENT_EPISODE.set(ep)
        try:
            yield ep
        except BaseException as exc:
            status = "aborted"
            reason = _abort_reason(exc)
            raise
        finally:
            _CURRENT_EPISODE.reset(token)
            ep.ended = True  # nothing is recorded after its end
            with anyio.CancelScope(shield=True):
                unattributed, findings = (
                    await ep._probes_finish() if self.probes else (Effects(), ())
                )
                end_meta: dict[str, Any] = dict(ep.end_meta)
                if session is not None and self._cassette is not None:
                    report = report_of(session, ep.episode_id, case_id, sources)
                    self.replay_reports[ep.episode_id] = report
                    end_meta[META_KEY] = summary_meta(report)
                    self._cassette.finish(ep.episode_id)
                await self._write(
                    EpisodeEnd(
                        v=SCHEMA_VERSION,
                        episode_id=ep.episode_id,
                        status=status,  # type: ignore[arg-type]
                        steps=ep._next_index,
                        reason=reason,
                        at=datetime.now(UTC).isoformat(),
                        unattributed=unattributed,
                        findings=findings,
                        meta=end_meta,
                    )
                )
                self._active -= 1  # after its finish: a new first episode restarts the probes

    # ------------------------------------------------------------ calls

    async def _run_process(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        cmd: list[str],
        input: bytes | None,
        env: Mapping[str, str] | None,
    ) -> Shown:
        del tool, args
        if not cmd:
            raise ConfigError("run() needs a command")
        full_env = dict(os.environ if env is None else env)
        proxy = self._proxy
        if proxy is not None and self.egress_mode.get("mode") == "strict":
            done = await run_strict(cmd, proxy=proxy, cwd=self.root, env=full_env, input=input)
        else:
            if proxy is not None:
                full_env.update(proxy.env())
            done = await anyio.run_process(
                cmd, input=input, cwd=self.root, env=full_env, check=False
            )
        out, err = done.stdout or b"", done.stderr or b""
        content: list[dict[str, Any]] = []
        if out:
            content.append({"type": "text", "text": capped_text(out, self.max_result_bytes)})
        if err:
            content.append(
                {"type": "text", "text": "stderr: " + capped_text(err, self.max_result_bytes)}
            )
        return Shown(
            content=tuple(content),
            is_error=done.returncode != 0,
            structured={
                "exit_code": done.returncode,
                "stdout_bytes": len(out),
                "stderr_bytes": len(err),
                "stdout_sha256": hashlib.sha256(out).hexdigest(),
                "stderr_sha256": hashlib.sha256(err).hexdigest(),
            },
        )

    async def _perform(
        self,
        ep: EpisodeRecorder,
        call_id: str,
        tool: str,
        args: dict[str, Any],
        tp: ToolPolicy,
        started: float,
        runner: Runner | None = None,
    ) -> ToolCallStep:
        cap = self.max_result_bytes

        def step(
            fidelity: str,
            shown: Shown,
            actual: Actual | None = None,
            meta: dict[str, Any] | None = None,
        ) -> ToolCallStep:
            return ToolCallStep(
                v=SCHEMA_VERSION,
                episode_id=ep.episode_id,
                index=-1,
                call_id=call_id,
                tool=tool,
                args=args,
                fidelity=fidelity,  # type: ignore[arg-type]
                shown=shown,
                actual=actual,
                started_at=started,
                ended_at=time.time(),
                meta=meta or {},
            )

        if tp.mode == "deny":
            return step(
                "denied", Shown(content=({"type": "text", "text": tp.message},), is_error=True)
            )
        if tp.mode == "stub":
            try:
                value = tp.result.fn(**args) if isinstance(tp.result, Stub) else tp.result
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                # A computed stub that fails is shown as an error, and recorded: the agent
                # saw something, and the record says what (the tool never ran).
                whole = f"{type(exc).__name__}: {exc}"
                message, capped = cap_text(whole, cap)
                shown = Shown(
                    content=({"type": "text", "text": f"stub failed: {message}"},), is_error=True
                )
                if capped:
                    ep._uncapped[call_id] = Shown(
                        content=({"type": "text", "text": f"stub failed: {whole}"},),
                        is_error=True,
                    )
                actual = Actual(
                    outcome="raised", error_type=type(exc).__name__, error_message=message
                )
                return step("stubbed", shown, actual, {"capped": capped} if capped else {})
            content, structured, meta = to_content(value, cap)
            if "capped" in meta:
                full, full_structured, _ = to_content(value, UNCAPPED)
                ep._uncapped[call_id] = Shown(content=full, structured=full_structured)
            return step("stubbed", Shown(content=content, structured=structured), meta=meta)
        if tp.mode == "replay":
            session = ep._replay
            if session is None or self._cassette is None:
                raise ConfigError(
                    f"tool {tool!r} is in replay mode, but the sandbox has no recorded "
                    "episodes to serve it from (Sandbox(replay=...))"
                )
            outcome = session.match(tool, args)
            if isinstance(outcome, Served):
                recorded = outcome.recorded
                return msgspec.structs.replace(
                    step("replayed", recorded.shown),
                    source=ReplaySource(episode_id=recorded.episode_id, step=recorded.index),
                )
            return await self._replay_miss(ep, outcome, call_id, tool, args, tp, started, runner)
        return await self._execute(ep, call_id, step, tool, args, tp, runner)

    async def _replay_miss(
        self,
        ep: EpisodeRecorder,
        miss: Divergence,
        call_id: str,
        tool: str,
        args: dict[str, Any],
        tp: ToolPolicy,
        started: float,
        runner: Runner | None,
    ) -> ToolCallStep:
        """A call the recording cannot serve: an error the agent sees, or a real call."""
        assert ep._replay is not None
        assert self._cassette is not None
        opts = ep._replay.options(tool)
        on_miss = opts.on_miss if opts is not None else "error"
        # Every miss is a divergence, whatever the agent is shown: it rides on the step.
        facts: dict[str, Any] = {
            "call": miss.call,
            "on_miss": on_miss,
            "divergence": msgspec.to_builtins(miss),
        }
        if on_miss == "error":
            text = f"litmus-sandbox replay: no recorded call of {tool!r} serves this call ({miss.reason})"
            return ToolCallStep(
                v=SCHEMA_VERSION,
                episode_id=ep.episode_id,
                index=-1,
                call_id=call_id,
                tool=tool,
                args=args,
                fidelity="denied",  # refused, and told so: nothing recorded serves it
                shown=Shown(content=({"type": "text", "text": text},), is_error=True),
                actual=Actual(outcome="not_run"),
                started_at=started,
                ended_at=time.time(),
                meta={META_KEY: facts},
            )
        # spy and record-new: the call runs for real, and is recorded as such.
        real = await self._perform(
            ep, call_id, tool, args, ToolPolicy(mode="real", timeout=tp.timeout), started, runner
        )
        # record-new: the step is appended to the cassette once finished (EpisodeRecorder
        # ._grow_cassette), with what an adapter adds to it (the raw upstream answer).
        return msgspec.structs.replace(real, meta={**real.meta, META_KEY: facts})

    async def _execute(
        self,
        ep: EpisodeRecorder,
        call_id: str,
        step: Callable[..., ToolCallStep],
        tool: str,
        args: dict[str, Any],
        tp: ToolPolicy,
        runner: Runner | None,
    ) -> ToolCallStep:
        """Run the tool (``real`` and ``swallow`` modes)."""
        cap = self.max_result_bytes
        swallow = tp.mode == "swallow"
        placeholder = Shown()
        pmeta: dict[str, Any] = {}
        if swallow:  # shown like a stub's result: a table is structured content
            content, structured, pmeta = to_content(tp.shown, cap)
            placeholder = Shown(content=content, structured=structured)
            if "capped" in pmeta:
                full, full_structured, _ = to_content(tp.shown, UNCAPPED)
                ep._uncapped[call_id] = Shown(content=full, structured=full_structured)
        if swallow and not tp.run:
            return step("swallowed", placeholder, Actual(outcome="dropped"), pmeta)
        fn: Callable[..., Any] | None
        if runner is not None:

            async def fn(**a: Any) -> Any:
                return await runner(tool, a)

        else:
            fn = self._tools.get(tool)
        if fn is None:
            raise ConfigError(f"no tool named {tool!r} is registered with the sandbox")
        timeout = tp.timeout if tp.timeout is not None else self.timeout
        outcome = await run_tool(fn, args, timeout, ep._threads if self.probes else None)
        shown, actual, meta = real_parts(outcome, cap, timeout)
        if not swallow:
            if "capped" in meta:
                ep._uncapped[call_id] = real_parts(outcome, UNCAPPED, timeout)[0]
            return step("real", shown, actual, meta)
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
        return step("swallowed", placeholder, actual, {**pmeta, **extra})


def _abort_reason(exc: BaseException) -> str:
    """Why an episode ended by ``exc``: for an exception group (a task group's), the
    errors inside it, not the group's own "unhandled errors" text."""
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "cancelled"
    if isinstance(exc, UpstreamError):
        return str(exc)  # an adapter's own account of what failed upstream
    if isinstance(exc, BaseExceptionGroup):
        inner = [e for e in leaf_errors(exc) if not isinstance(e, anyio.get_cancelled_exc_class())]
        if inner:
            return "; ".join(_abort_reason(e) for e in inner)
    return f"{type(exc).__name__}: {exc}"


def _windowed(probe: Probe) -> bool:
    """Whether the probe observes a call by its time window alone (no awaiting)."""
    return callable(getattr(probe, "open_window", None)) and callable(
        getattr(probe, "close_window", None)
    )


def _describe(probe: Probe, sandbox: Sandbox) -> Any:
    describe = getattr(probe, "describe", None)
    out = describe() if callable(describe) else {}
    if probe is sandbox.egress and isinstance(out, dict):
        out = {**out, **sandbox.egress_mode}
    return out
