"""The sandbox: an async proxy between an agent and its tools that records everything.

Theory of operation
-------------------
A :class:`Sandbox` owns the episode stream, the tools, the probes and the egress proxy.
``sandbox.episode(...)`` opens an :class:`EpisodeRecorder`; its header (with the tool
modes in force and how each probe watches) is written first. The recorder
(``recorder.py``) turns each message and each finished call into a step, numbered in the
order it completed, flushed to disk *before* the call returns to the agent; the fidelity
mode of the tool (``modes.py``) decides whether the real tool runs and what the agent is
shown, and whenever those differ, what really happened is recorded beside what was shown.
Refusals are recorded like any message: nothing here ever stops recording early. The
episode ends ``complete`` when its block exits normally and ``aborted`` (with the reason)
when it exits by an exception or cancellation, which then propagates.

Several episodes may be open at once, interleaved in one stream. Their probes watch one
world, so they start with the first of them and their calls share one ledger of calls in
flight (``observers.py``, ``ledger.py``); an adapter's tool server, from before its start
(``server_phases``: its start-up and shutdown apart from what the agent did).
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx

from litmus_sandbox._config.policy import Policy
from litmus_sandbox._core.divergence import META_KEY, ReplayReport
from litmus_sandbox._core.emulation import ToolSpec
from litmus_sandbox._core.redaction import HEADER_KEY
from litmus_sandbox._core.replay_match import ReplaySession
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.errors import ConfigError, UpstreamError, leaf_errors
from litmus_sandbox._model.records import SCHEMA_VERSION, EndStatus, EpisodeHeader, Recorder
from litmus_sandbox._runtime.emulator import Emulator, spec_of
from litmus_sandbox._runtime.live_scoring import LiveScoring, TappedStream
from litmus_sandbox._runtime.modes import CallEnv
from litmus_sandbox._runtime.observers import Observers, description
from litmus_sandbox._runtime.phases import ServerPhases
from litmus_sandbox._runtime.processes import Subprocesses
from litmus_sandbox._runtime.recorder import Recording, Wiring
from litmus_sandbox._runtime.replay import Cassette
from litmus_sandbox._runtime.stream import EpisodeStream
from litmus_sandbox._runtime.tool_calls import ToolResult
from litmus_sandbox._store.shards import shard_target
from litmus_sandbox._store.step_cache import StepCache
from litmus_sandbox._store.streams import as_paths
from litmus_sandbox.judges import ScoringConfig
from litmus_sandbox.oracles._probe import Probe
from litmus_sandbox.oracles.egress import EgressPolicy, EgressProbe
from litmus_sandbox.oracles.fs import FsProbe

#: The episode open in the current task, for ``sandbox.run``.
_CURRENT_EPISODE: ContextVar[EpisodeRecorder | None] = ContextVar(
    "litmus_current_episode", default=None
)

RECORDER_NAME = "litmus-sandbox"
#: Bumped only when *what is recorded* changes (the gate's recorder identity).
MEASUREMENT_VERSION = "1"
DEFAULT_MAX_RESULT_BYTES = 256 * 1024


class EpisodeRecorder(Recording):
    """Records one episode. Use through ``async with sandbox.episode(...) as ep``.

    The recording itself is :class:`~litmus_sandbox._runtime.recorder.Recording`'s: this
    binds it to the sandbox it records into.
    """

    def __init__(self, sandbox: Sandbox, header: EpisodeHeader, wiring: Wiring) -> None:
        super().__init__(header, wiring)
        self._sandbox = sandbox

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox this episode records into."""
        return self._sandbox


class Sandbox:
    """The proxy between an agent and its tools.

    Args:
        root: the sandbox directory (created if missing); tools' working area.
        episodes: the episode stream to append to (JSON Lines); or a folder, or an object
            store's prefix (``s3://bucket/runs``), to write a shard of its own into, under
            a unique name (an object store's spooled locally and uploaded whole when the
            sandbox closes; see ``_store/shards.py``). :attr:`shard` says where it went.
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
        scoring: score each episode as it ends, in the background, under this scoring
            configuration (or policy file): see ``live_scoring.py``. Needs ``verdicts``.
        verdicts: the verdict stream each episode's verdict is appended to.
        cache: the step-verdict cache ``scoring`` judges through (a path, a
            ``redis://`` URL, or an open cache); give ``score`` the same one to re-score
            for free. Emulated tools' results are kept there too (by default, in the
            cache ``score`` uses: ``$LITMUS_CACHE``, else the user's cache folder).
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
        scoring: ScoringConfig | str | os.PathLike[str] | None = None,
        verdicts: str | os.PathLike[str] | None = None,
        cache: StepCache | str | os.PathLike[str] | None = None,
    ) -> None:
        if (scoring is None) != (verdicts is None):
            raise ConfigError("scoring= and verdicts= go together: a policy and where to write")
        #: The background scoring of ended episodes (``scoring=``), or None.
        self.scoring = None if scoring is None else LiveScoring(scoring, verdicts or "", cache)
        self.root = Path(root)
        #: Where the episodes go: a file, or a shard of a folder or prefix (``shards.py``).
        self._shard = shard_target(episodes)
        self.episodes_path = self._shard.path
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
        self._stack: AsyncExitStack | None = None
        self._observers = Observers(probes)
        # Every step is written through the stream, which redacts its arguments
        # ([record]): nothing of a secret in them reaches the file, or anything read from it.
        redaction = self.policy.redaction
        self._tap = (
            TappedStream(self.episodes_path, fsync=fsync, cap=max_result_bytes, redaction=redaction)
            if self.scoring
            else None
        )
        self._stream = self._tap or EpisodeStream(
            self.episodes_path, fsync=fsync, cap=max_result_bytes, redaction=redaction
        )
        self._processes = Subprocesses(self.root, max_result_bytes)
        self._observers.ignore(self.episodes_path)
        if self.scoring is not None:
            for own in self.scoring.own_files():
                self._observers.ignore(own)
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
            self._observers.ignore(self._cassette.record_to)  # a cassette we grow: ours too
        #: Episode id -> how that episode followed its recording (replayed episodes).
        self.replay_reports: dict[str, ReplayReport] = {}
        #: Answers for the tools in ``emulate`` mode (the policy's ``[emulator]``), if any.
        self.emulator = (
            None
            if self.policy.emulator is None
            else Emulator(self.policy.emulator, redaction=redaction, cache=cache)
        )
        for own in self.emulator.own_files() if self.emulator is not None else ():
            self._observers.ignore(own)  # the cache of emulated results is ours

    def describe_tools(self, specs: Mapping[str, ToolSpec | Mapping[str, Any]]) -> None:
        """Say what is known of tools (name -> a spec, an MCP ``tools/list`` entry or an
        OpenAI function definition): the emulator is shown it (nothing without one)."""
        if self.emulator is not None:
            self.emulator.describe_tools({name: spec_of(name, v) for name, v in specs.items()})

    @property
    def shard(self) -> str:
        """Where this sandbox's episodes are: its file, its shard's path, or (an object
        store's) the URL its shard is uploaded to when the sandbox closes."""
        return self._shard.location

    @property
    def probes(self) -> tuple[Probe, ...]:
        """The side-effect oracles that observe every call (the egress probe last)."""
        return self._observers.probes

    def server_phases(self) -> ServerPhases:
        """The probes held across the life of a tool server an adapter launches, from
        before it starts (``async with``): its start-up and shutdown apart (``phases.py``)."""
        return ServerPhases(self._observers)

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
        return self._processes.env()

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
        # A shard's name (a new one at each opening); a prefix's spool left by recorders
        # that died is uploaded first.
        self.episodes_path = self._stream.path = await anyio.to_thread.run_sync(self._shard.open)
        self._observers.ignore(self.episodes_path)
        self._stream.open()
        self._stack = AsyncExitStack()
        if self.scoring is not None:
            try:
                await self._stack.enter_async_context(self.scoring)
            except BaseException:
                self._stream.close()
                raise
        if self.emulator is not None:
            try:
                await self._stack.enter_async_context(self.emulator)
            except BaseException:
                await self._stack.aclose()
                self._stream.close()
                raise
        if self.egress is not None:
            self.egress_mode = await self._processes.start_proxy(
                self._stack, self.egress, self.strict_egress, self._observers.ignore
            )
        # Subprocess tools' pumps live here; leaving it kills what they left running.
        await self._stack.enter_async_context(self._processes)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await self._observers.close()
        # Not under the shield: the proxy's task group was entered before it, and cancel
        # scopes must exit in the order they were entered.
        if self._stack is not None:
            stack, self._stack, self._processes.proxy = self._stack, None, None
            await stack.aclose()
        self._stream.close()
        with anyio.CancelScope(shield=True):  # a prefix's shard is uploaded whole, now
            unsent = await anyio.to_thread.run_sync(self._shard.finish)
        if self._cassette is not None:
            self._cassette.close()
        failure = self.scoring.failure() if self.scoring is not None else None
        if failure is not None and exc[:1] == (None,):
            raise failure  # closed first: the verdicts of the others are written
        if unsent is not None and exc[:1] == (None,):
            raise unsent  # kept in the spool: the next sandbox for the prefix uploads it

    def _header(
        self,
        episode_id: str,
        case_id: str,
        suite: str | None,
        agent: str | None,
        meta: dict[str, Any],
    ) -> EpisodeHeader:
        """An episode's header: who records, the tools' modes, how each probe watches,
        and what is redacted from the calls' arguments (``meta.redaction``)."""
        oracles: dict[str, Any] = {}
        for probe in self.probes:
            out = description(probe)
            if probe is self.egress and isinstance(out, dict):
                out = {**out, **self.egress_mode}
            oracles[probe.name] = out
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
            oracles=oracles,
            meta={**meta, HEADER_KEY: self.policy.redaction.describe(), **emulator_meta(self)},
        )

    def _recorder(
        self, header: EpisodeHeader, session: ReplaySession | None, sources: tuple[str, ...]
    ) -> EpisodeRecorder:
        """The recorder of an episode whose header is written, wired to this sandbox."""
        observers = self._observers
        env = CallEnv(
            tools=self._tools,
            cap=self.max_result_bytes,
            timeout=self.timeout,
            replay=session,
            on_thread=observers.ledger.track_thread if observers else None,
            emulator=self.emulator,
        )
        wiring = Wiring(
            policy=self.policy,
            stream=self._stream,
            watch=observers.watch() if observers else None,
            env=env,
            processes=self._processes,
            cassette=self._cassette,
            sources=sources,
            inline=observers.windowed and not self.fsync,
        )
        return EpisodeRecorder(self, header, wiring)

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
        if not self._stream.is_open:
            raise ConfigError("the sandbox is not open: use 'async with Sandbox(...)'")
        session: ReplaySession | None = None
        sources: tuple[str, ...] = ()
        header_meta = dict(meta or {})
        if episode_id is not None and self._stream.holds(episode_id):
            raise ConfigError(
                f"episode id {episode_id!r} is already used in {str(self.episodes_path)!r}"
            )
        if self._cassette is not None:
            session, sources = self._cassette.session(
                case_id, self.policy.replay_options, self.policy.redaction
            )
            header_meta.setdefault(META_KEY, {"sources": list(sources)})
        # Taken now, before anything yields: two episodes of one id would make the stream
        # unreadable.
        eid = episode_id or uuid.uuid4().hex
        self._stream.claim(eid)
        try:
            await self._observers.enter()  # the first one starts the probes (before the header)
        except BaseException:
            self._stream.release(eid)
            raise
        try:
            header = self._header(eid, case_id, suite, agent, header_meta)
            await self._stream.write(header)
        except BaseException:
            self._observers.leave()
            self._stream.release(eid)
            raise
        ep = self._recorder(header, session, sources)
        status: EndStatus = "complete"
        reason: str | None = None
        token = _CURRENT_EPISODE.set(ep)
        try:
            yield ep
        except BaseException as exc:
            status = "aborted"
            reason = _abort_reason(exc)
            raise
        finally:
            _CURRENT_EPISODE.reset(token)
            with anyio.CancelScope(shield=True):
                await ep.end(status, reason, self.replay_reports)
                self._observers.leave()  # after its finish: a new first one restarts them
                ended = self._tap.take(eid) if self._tap is not None else None
                if ended is not None and self.scoring is not None:
                    self.scoring.ended(ended)


def emulator_meta(sandbox: Sandbox) -> dict[str, Any]:
    """``meta.emulator`` of a header: the emulator and its parameters (never the key)."""
    emulator = sandbox.emulator
    return {} if emulator is None else {"emulator": emulator.config.describe()}


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
