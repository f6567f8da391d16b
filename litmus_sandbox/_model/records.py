"""The record model: every record litmus-sandbox reads or writes.

Pure data (msgspec Structs), no I/O. Records are versioned by ``v``; new fields get
defaults and no field ever changes type, so old readers can read newer files (unknown
fields are ignored on stored records) and hand-written records need only the fields
that identify them.

Episode streams hold three kinds of record, tagged by ``kind``:

* ``episode`` - the header (:class:`EpisodeHeader`),
* ``step`` - one agent action, told apart by ``type``: :class:`MessageStep`
  (``message``) or :class:`ToolCallStep` (``tool_call``),
* ``end`` - :class:`EpisodeEnd`; an episode without one is incomplete.

Verdict streams hold a ``policy`` record (the normalized scoring policy that produced
the verdicts that follow it) and ``verdict`` records. The gate also reads
:class:`LegacyVerdict`, the shape of the reference incident report.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

#: Version of the record schema this library writes (a record that needs a newer
#: schema's vocabulary is written with that version: :data:`EMULATED_VERSION`).
SCHEMA_VERSION = 1
#: Version 2 adds the fidelity ``emulated``: a step holding it is written as ``v = 2``, so
#: a version-1 reader says "written by a newer version" of that line, and every other
#: record (and every file without an emulated call) stays readable by it.
EMULATED_VERSION = 2
#: The newest ``v`` this version reads.
NEWEST_VERSION = EMULATED_VERSION
#: ``v`` of a record this version can read: decoding a newer one (or one below 1) fails
#: validation, so the fast paths fall back to the per-line reader, which names the problem.
ReadableVersion = Annotated[int, msgspec.Meta(ge=1, le=NEWEST_VERSION)]
#: A number of steps or retries: never negative.
Count = Annotated[int, msgspec.Meta(ge=0)]

Fidelity = Literal["real", "stubbed", "replayed", "emulated", "swallowed", "denied"]
FIDELITIES: tuple[str, ...] = ("real", "stubbed", "replayed", "emulated", "swallowed", "denied")

#: Fidelity modes a policy can configure for a tool (``tool_modes`` in headers: an
#: emulated tool's mode names its emulator, ``emulate:FINGERPRINT``).
ToolMode = Literal["real", "stub", "swallow", "deny", "replay", "emulate"]
TOOL_MODES: tuple[str, ...] = ("real", "stub", "swallow", "deny", "replay", "emulate")

# Closed vocabularies of stored records, checked when a record is read (like Fidelity):
# each is written only by this library, and every value it ever wrote is listed, so every
# file written before still reads; a new value is a schema change (a newer ``v``).
#: What really happened behind a call (:class:`Actual`), when it differs from what was shown.
ActualOutcome = Literal["returned", "raised", "timeout", "dropped", "interrupted", "not_run"]
#: One filesystem change (:class:`FsEffect`).
FsOp = Literal["created", "modified", "deleted", "metadata", "symlink"]
#: What the egress policy (or the replay of a cassette) did with a request
#: (:class:`EgressEvent`): the rule's mode, ``blocked`` (a direct connection the namespace
#: refused), or how a replayed request was served.
EgressDecision = Literal["allow", "deny", "stub", "blocked", "replayed", "replay_miss"]
#: How an effect came to be tied to a call (:class:`FsEffect`, :class:`EgressEvent`):
#: ``audit`` - the call's own Python audit events name it (an in-process tool);
#: ``process`` - a process of the call's own process tree made it (a subprocess tool);
#: ``context`` - the request carried the call's id (an in-process HTTP client);
#: ``window`` - it was seen while the call, alone, was in flight, and no evidence says more;
#: ``none`` - nothing ties it to a call (an unattributed effect).
Attribution = Literal["audit", "process", "context", "window", "none"]
ATTRIBUTIONS: tuple[str, ...] = ("audit", "process", "context", "window", "none")
#: What the side-effect oracle concludes (:class:`Finding`).
FindingCode = Literal["stub_leak", "hidden_effect", "unattributed_effect", "escape"]
FINDING_CODES: tuple[str, ...] = ("stub_leak", "hidden_effect", "unattributed_effect", "escape")

Role = Literal["user", "assistant", "system", "tool"]
EndStatus = Literal["complete", "aborted"]
Evidence = Literal["observed", "requested", "claimed"]


def step_version(fidelity: str) -> int:
    """The ``v`` a tool-call step of ``fidelity`` is written with (see
    :data:`EMULATED_VERSION`)."""
    return EMULATED_VERSION if fidelity == "emulated" else SCHEMA_VERSION


class Recorder(msgspec.Struct, frozen=True, kw_only=True):
    """Who made a recording, and whether the recording itself stopped early.

    ``measurement_version`` is bumped only when *what is recorded* changes, not on every
    release; recorders that give none are identified by ``name`` and ``version``.
    """

    name: str = "unknown"
    version: str = ""
    measurement_version: str | None = None
    truncated: bool = False

    def identity(self) -> str:
        """The identity the gate compares: name plus measurement (or release) version."""
        if self.measurement_version is not None:
            return f"{self.name}/m{self.measurement_version}"
        return f"{self.name}@{self.version}"


class EpisodeHeader(msgspec.Struct, frozen=True, kw_only=True, tag="episode", tag_field="kind"):
    """First record of an episode: what case was run, by what agent, recorded how."""

    v: int
    episode_id: str
    case_id: str
    suite: str | None = None
    agent: str | None = None
    started_at: str | None = None
    recorder: Recorder = Recorder()
    tool_modes: dict[str, str] = {}
    #: What each side-effect probe watched and how (e.g. egress "strict" or "proxy-env").
    oracles: dict[str, Any] = {}
    meta: dict[str, Any] = {}


class Shown(msgspec.Struct, frozen=True, kw_only=True):
    """What the agent was shown as a tool result.

    ``content`` is a list of MCP-style content blocks (``{"type": "text", "text": ...}``);
    blocks of other types are kept exactly as they are.
    """

    content: tuple[dict[str, Any], ...] = ()
    is_error: bool = False
    structured: Any = None

    def is_empty(self) -> bool:
        """No content (or only whitespace text), no structured content, and not an error."""
        if self.is_error or self.structured is not None:
            return False
        for block in self.content:
            if block.get("type") != "text":
                return False
            text = block.get("text")  # a text block without text has none: empty
            if text is not None and (not isinstance(text, str) or text.strip()):
                return False
        return True

    def text(self) -> str:
        """The text blocks joined by newlines (other blocks are skipped)."""
        return "\n".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")


class Actual(msgspec.Struct, frozen=True, kw_only=True):
    """What really happened behind a call, recorded when it differs from what was shown.

    ``outcome`` is one of ``returned``, ``raised``, ``timeout``, ``dropped`` (a swallowed
    call that never ran), ``interrupted`` (cancelled mid-call), ``not_run``.
    """

    outcome: ActualOutcome
    value: Any = None
    error_type: str | None = None
    error_message: str | None = None
    repr_only: bool = False
    size: int | None = None
    sha256: str | None = None


class FsEffect(msgspec.Struct, frozen=True, kw_only=True):
    """One filesystem change: ``created``, ``modified``, ``deleted``, ``metadata``, ``symlink``."""

    op: FsOp
    path: str
    entry: str = "file"
    before_sha256: str | None = None
    after_sha256: str | None = None
    before_size: int | None = None
    after_size: int | None = None
    before_mode: int | None = None
    after_mode: int | None = None
    target: str | None = None
    #: Why the entry as it is now could not be read (its content is unknown: no hash).
    error: str | None = None
    # The fields below were added later; UNSET (left out of the record) until set, so that
    # effects written before them keep their content hash (the verdict cache's key).
    #: How the effect was tied to its call (see :data:`Attribution`).
    attribution: Attribution | msgspec.UnsetType = msgspec.UNSET
    #: The call in flight when an effect that nothing ties to it was seen.
    during: str | msgspec.UnsetType = msgspec.UNSET
    #: A ``deleted`` entry that was renamed: where it went (absolute when outside the root).
    moved_to: str | msgspec.UnsetType = msgspec.UNSET
    #: A ``created`` entry that was renamed: where it came from.
    moved_from: str | msgspec.UnsetType = msgspec.UNSET
    #: The modification times (ns) of a ``metadata`` change of times (``utime``, ``touch``).
    before_mtime_ns: int | msgspec.UnsetType = msgspec.UNSET
    after_mtime_ns: int | msgspec.UnsetType = msgspec.UNSET


class EgressEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One attempted network request and what the egress policy decided."""

    method: str = "CONNECT"
    scheme: str = "http"
    host: str
    port: int | None = None
    path: str = ""
    request_bytes: int = 0
    response_bytes: int = 0
    status: int | None = None
    decision: EgressDecision = "allow"
    sni: str | None = None
    #: The whole URL (``scheme://host[:port]path``; a CONNECT tunnel has no path).
    url: str | None = None
    #: How the request was tied to its call (see :data:`Attribution`); UNSET until set, as
    #: on :class:`FsEffect`.
    attribution: Attribution | msgspec.UnsetType = msgspec.UNSET
    #: Why the request got no response (the upstream refused, reset or did not answer in
    #: time): what the tool saw instead.
    error: str | msgspec.UnsetType = msgspec.UNSET


class Effects(msgspec.Struct, frozen=True, kw_only=True):
    """Side effects observed while a call was in flight."""

    fs: tuple[FsEffect, ...] = ()
    egress: tuple[EgressEvent, ...] = ()
    state: tuple[dict[str, Any], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.fs or self.egress or self.state)


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """An oracle conclusion: ``stub_leak``, ``hidden_effect``, ``unattributed_effect``, ``escape``."""

    code: str
    detail: str = ""
    path: str | None = None
    host: str | None = None


class ReplaySource(msgspec.Struct, frozen=True, kw_only=True):
    """Where a replayed result came from."""

    episode_id: str
    step: int


class MessageStep(msgspec.Struct, frozen=True, kw_only=True, tag="step", tag_field="kind"):
    """A message in the conversation. ``refusal`` is an explicit label from the harness."""

    type: Literal["message"] = "message"
    v: int
    episode_id: str
    index: int
    role: Role
    text: str
    refusal: bool | None = None
    at: float | None = None
    meta: dict[str, Any] = {}


class ToolCallStep(msgspec.Struct, frozen=True, kw_only=True, tag="step", tag_field="kind"):
    """A tool call and the result the agent was shown, tagged with its fidelity."""

    type: Literal["tool_call"] = "tool_call"
    v: int
    episode_id: str
    index: int
    call_id: str
    tool: str
    args: dict[str, Any]
    fidelity: Fidelity
    shown: Shown
    actual: Actual | None = None
    effects: Effects = Effects()
    findings: tuple[Finding, ...] = ()
    source: ReplaySource | None = None
    started_at: float | None = None
    ended_at: float | None = None
    meta: dict[str, Any] = {}


Step = MessageStep | ToolCallStep


class EpisodeEnd(msgspec.Struct, frozen=True, kw_only=True, tag="end", tag_field="kind"):
    """Last record of an episode. Its absence means the episode is incomplete."""

    v: int
    episode_id: str
    status: EndStatus
    steps: int | None = None
    reason: str | None = None
    at: str | None = None
    #: Effects that no call explains (seen by the end-of-episode verification pass).
    unattributed: Effects = Effects()
    findings: tuple[Finding, ...] = ()
    # Added later, UNSET (left out of the record) when empty: what a tool server an
    # adapter launched did on its own, before the agent's first message past the handshake
    # (``startup``) and after the client ended the session cleanly (``shutdown``). Listed,
    # never hidden; tied to no call, and no finding is made of them.
    startup: Effects | msgspec.UnsetType = msgspec.UNSET
    shutdown: Effects | msgspec.UnsetType = msgspec.UNSET
    #: Facts known only at the end (e.g. ``replay``: the recorded calls left unused).
    meta: dict[str, Any] = {}


class Episode(msgspec.Struct, frozen=True, kw_only=True):
    """An episode read back from a stream: header, steps in index order, and end (if any)."""

    header: EpisodeHeader
    steps: tuple[Step, ...]
    end: EpisodeEnd | None
    source: str = ""
    torn: bool = False

    @property
    def episode_id(self) -> str:
        return self.header.episode_id

    @property
    def case_id(self) -> str:
        return self.header.case_id

    @property
    def complete(self) -> bool:
        """Ended ``complete`` with every step present (numbered 0, 1, 2... with no gap: a
        missing number is a lost record) and nothing torn."""
        return (
            self.end is not None
            and self.end.status == "complete"
            and not self.torn
            and (self.end.steps is None or self.end.steps == len(self.steps))
            and all(s.index == i for i, s in enumerate(self.steps))
        )


# ---------------------------------------------------------------- verdicts


class StepVerdict(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The judge's verdict on one covered step."""

    index: int
    safe: bool
    content_sha256: str = ""
    evidence: Evidence | None = None
    rules: tuple[str, ...] = ()
    reason: str | None = None
    #: Forbidden findings attributed to this step although the judge called it safe.
    contradictions: tuple[str, ...] = ()
    #: How many times the judge was asked for this verdict (retries included; a verdict
    #: served from the cache keeps the count of when it was judged).
    attempts: int = 1
    retried: bool = False
    #: The fallback judge gave this verdict (the judge kept failing).
    fallback: bool = False
    #: What an HTTP judge's answer said it was: the model that answered, and its
    #: ``system_fingerprint`` (a model changed under the same name shows here).
    model: str | None = None
    system_fingerprint: str | None = None


class RecorderId(msgspec.Struct, frozen=True, kw_only=True, gc=False, forbid_unknown_fields=True):
    """The recorder identity carried in a verdict's provenance."""

    name: str
    version: str = ""
    measurement_version: str | None = None

    def identity(self) -> str:
        if self.measurement_version is not None:
            return f"{self.name}/m{self.measurement_version}"
        return f"{self.name}@{self.version}"


class Provenance(msgspec.Struct, frozen=True, kw_only=True, gc=False, forbid_unknown_fields=True):
    """Everything about a verdict that is measurement rather than behaviour.

    Every field defaults to ``None`` meaning *unknown*; the gate fails closed on unknowns.
    Unknown keys (from a newer writer) do not fail reading: readers keep them aside in
    the verdict's ``unknown_provenance``, and the gate fails closed on them.
    """

    recorder: RecorderId | None = None
    recording_truncated: bool | None = None
    episode_complete: bool | None = None
    truncate_on_refusal: bool | None = None
    truncate_on_empty_tool_result: bool | None = None
    refusal_detector: str | None = None
    judge: str | None = None
    judge_label: str | None = None
    judge_retries: Count = 0
    fallback_judge: bool | None = None
    steps_recorded: Count | None = None
    steps_covered: Count | None = None
    tool_modes: dict[str, str] | None = None
    tools_called: tuple[str, ...] | None = None


class _NoKeys(dict[str, Any]):
    """The empty, read-only dict every verdict shares as its default
    ``unknown_provenance``. msgspec copies an empty ``dict`` default for each record it
    decodes (one allocation, and one object for the cyclic collector to count, per
    record: measurable over a million verdicts); a subclass it leaves shared, so it may
    not change."""

    __slots__ = ()

    def _read_only(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a verdict's unknown_provenance is read-only")

    __setitem__ = __delitem__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]

    def __ior__(self, other: object) -> _NoKeys:  # type: ignore[override,misc]
        raise TypeError("a verdict's unknown_provenance is read-only")


#: Provenance keys no reader left aside (see :class:`_NoKeys`).
NO_UNKNOWN_KEYS: dict[str, Any] = _NoKeys()


class Verdict(msgspec.Struct, frozen=True, kw_only=True, tag="verdict", tag_field="kind", gc=False):
    """A trajectory verdict: ``safe = all(step.safe for step in steps)`` over covered steps."""

    v: ReadableVersion
    case_id: str
    episode_id: str
    safe: bool
    steps: tuple[StepVerdict, ...] = ()
    first_unsafe_step: int | None = None
    provenance: Provenance = Provenance()
    #: Provenance keys this reader does not know (written by a newer version); fail closed.
    unknown_provenance: dict[str, Any] = NO_UNKNOWN_KEYS
    # What the recording's header said, copied when it is scored: not provenance (the
    # gate never compares them), only what reports list of each side's inputs. UNSET
    # (left out of the record) when the header did not say.
    #: The header's ``suite``, ``agent`` and ``started_at``.
    suite: str | msgspec.UnsetType = msgspec.UNSET
    agent: str | msgspec.UnsetType = msgspec.UNSET
    recorded_at: str | msgspec.UnsetType = msgspec.UNSET


class PolicyRecord(msgspec.Struct, frozen=True, kw_only=True, tag="policy", tag_field="kind"):
    """Heads a verdict stream: the normalized scoring policy that produced its verdicts."""

    v: ReadableVersion
    policy: dict[str, Any]
    judge: str
    refusal_detector: str
    episode_id: str = ""


class LegacyProvenance(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, forbid_unknown_fields=True
):
    """Provenance of the reference report's verdict shape. Missing fields are unknown."""

    truncate_on_refusal: bool | None = None
    truncate_on_empty_tool_result: bool | None = None
    steps_covered: Count | None = None
    judge_version: str | None = None


class LegacyVerdict(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The reference report's ``TrajectoryVerdict``: ``run_id``, ``safe``, ``provenance``."""

    run_id: str
    safe: bool
    provenance: LegacyProvenance = LegacyProvenance()
    #: Provenance keys this reader does not know; the gate fails closed on them.
    unknown_provenance: dict[str, Any] = NO_UNKNOWN_KEYS

    @property
    def case_id(self) -> str:
        return self.run_id


AnyVerdict = Verdict | LegacyVerdict
