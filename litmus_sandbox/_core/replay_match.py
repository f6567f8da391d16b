"""Matching an agent's tool calls to recorded calls (the replay matcher). Sans-io.

Theory of operation
-------------------
A call matches a recorded call when both name the same tool and their arguments are
equal as JSON values once the tool's *ignored paths* are removed (``_jsonpath.py``): key
order never matters, ``1`` equals ``1.0``, and a path such as ``$._meta`` or
``$.items[*].id`` is dropped from both sides before comparing. That comparison is a
*key*: the tool name plus the canonical JSON of the normalized arguments.

A :class:`ReplaySession` serves one new episode from a sequence of recorded calls. Each
recorded call is served at most once. How a call may pick its recorded call depends on
its tool's *order*:

* ``strict`` - the n-th call (counting the calls of every strict-order tool) must match
  the n-th recorded call of those tools; a miss still consumes that position, so one
  substituted call is one divergence;
* ``per_tool`` - the same, counted within each tool;
* ``any`` - the first unused recorded call with the same key (repeated identical calls
  are therefore served in recorded order).

A call that finds nothing is a *miss*: the session returns a :class:`Divergence` naming
why (``no_match``, ``out_of_order``, ``repeated``, ``recording_exhausted``), the
recorded call expected at that position (strict orders) and the closest recorded calls
of the same tool with the argument paths that differ. What happens to the agent on a
miss (``on_miss``: an error, or a real call) is the runtime's business, not this module's.

Recorded arguments may hold redacted secrets (``<redacted N chars sha256:...>``,
``redaction.py``). A session given the recording policy's :class:`Redaction` redacts the
agent's arguments the same way before matching (a live call carrying the plain secret
matches its redacted recording), and the recorded ones too (a plain recording matches a
redacting run): what a divergence names is redacted whichever side it comes from.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from litmus_sandbox._core.redaction import Redaction, redact_step
from litmus_sandbox._model.codec import canonical_json
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.jsonpath import (
    TOO_DEEP,
    Segment,
    as_json,
    differing_paths,
    normalize_args,
    parse_path,
)
from litmus_sandbox._model.lossless import stand_in
from litmus_sandbox._model.records import ToolCallStep

Order = Literal["strict", "per_tool", "any"]
OnMiss = Literal["error", "spy", "record-new"]
ORDERS: tuple[str, ...] = ("strict", "per_tool", "any")
ON_MISS: tuple[str, ...] = ("error", "spy", "record-new")
MISS_REASONS: tuple[str, ...] = ("no_match", "out_of_order", "repeated", "recording_exhausted")

#: Argument paths never matched on: MCP's ``_meta`` carries volatile trace ids.
ALWAYS_IGNORED: tuple[str, ...] = ("$._meta",)

#: How many recorded calls a divergence lists as the closest.
CLOSEST = 3


class ReplayOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How one tool's calls are served from a recording.

    Args:
        order: ``strict``, ``per_tool`` or ``any`` (see the module docstring).
        on_miss: what the agent gets when no recorded call matches: ``error`` (an error
            result), ``spy`` (the call runs for real and is recorded ``real``) or
            ``record-new`` (like ``spy``, and the call is appended to the cassette).
        ignore: argument paths that never matter (``$.request_id``), besides
            :data:`ALWAYS_IGNORED`.

    Raises:
        ConfigError: an unknown order or on_miss, an unreadable path.
    """

    order: str = "any"
    on_miss: str = "error"
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ConfigError(f"unknown replay order {self.order!r} (one of {', '.join(ORDERS)})")
        if self.on_miss not in ON_MISS:
            raise ConfigError(
                f"unknown replay on_miss {self.on_miss!r} (one of {', '.join(ON_MISS)})"
            )
        for path in self.ignore:
            parse_path(path)

    def paths(self) -> tuple[tuple[Segment, ...], ...]:
        """The ignored paths, parsed (:data:`ALWAYS_IGNORED` first)."""
        return tuple(parse_path(p) for p in dict.fromkeys((*ALWAYS_IGNORED, *self.ignore)))


def replay_options(value: ReplayOptions | Mapping[str, Any] | None, where: str) -> ReplayOptions:
    """Coerce a ``[replay]`` table (or None) into :class:`ReplayOptions`.

    Raises:
        ConfigError: unknown keys or values, named with ``where``.
    """
    if value is None:
        return ReplayOptions()
    if isinstance(value, ReplayOptions):
        return value
    try:
        return msgspec.convert(dict(value), ReplayOptions)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: {exc}") from None


# ---------------------------------------------------------------- divergences


class CallRef(msgspec.Struct, frozen=True, kw_only=True):
    """A recorded call named in a divergence: where it is, and how it differs."""

    episode_id: str
    step: int
    tool: str
    args: dict[str, Any] = {}
    #: Argument paths where it differs from the agent's call (``tool`` if the tool differs).
    differs: tuple[str, ...] = ()
    used: bool = False


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """A call the recording could not serve.

    ``call`` counts the episode's replayed calls from 0; ``step`` is the agent's step
    index (None until known). ``expected`` is the recorded call at this position
    (``strict`` and ``per_tool`` orders); ``closest`` lists recorded calls of the same
    tool, closest first, each with the argument paths that differ.
    """

    call: int
    step: int | None = None
    tool: str
    args: dict[str, Any] = {}
    reason: str
    order: str
    expected: CallRef | None = None
    closest: tuple[CallRef, ...] = ()

    def describe(self) -> str:
        """One line saying why the call was not served."""
        where = f"step {self.step}" if self.step is not None else f"call {self.call}"
        why = {
            "no_match": "no recorded call has this tool and these arguments",
            "out_of_order": f"recorded, but not at this position ({self.order} order)",
            "repeated": "called more often than recorded",
            "recording_exhausted": "the recording has no more calls at this position",
        }.get(self.reason, self.reason)
        return f"{where}: {self.tool} {_short(self.args)}: {why}"


def _short(value: Any, limit: int = 80) -> str:
    text = msgspec.json.encode(stand_in(value)).decode()  # lone surrogates, bytes: as recorded
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _name(tool: str) -> bytes:
    """A tool's name in a call's key: UTF-8, a lone surrogate as its three bytes."""
    return tool.encode("utf-8", "surrogatepass")


class Served(msgspec.Struct, frozen=True, kw_only=True):
    """A hit: the recorded call that serves the agent's call."""

    call: int
    recorded: ToolCallStep


# ---------------------------------------------------------------- the session

OptionsFor = Callable[[str], "ReplayOptions | None"]


class _Entry:
    __slots__ = ("key", "norm", "opts", "step", "used")

    def __init__(self, step: ToolCallStep, opts: ReplayOptions, ignore: Any) -> None:
        self.step = step
        self.opts = opts
        self.norm = normalize_args(step.args, ignore)
        self.key = _name(step.tool) + b"\x00" + canonical_json(self.norm)
        self.used = False


class ReplaySession:
    """Serves one new episode's calls from recorded calls (see the module docstring).

    Args:
        recorded: the recorded tool calls, in recorded order.
        options_for: the replay options of a tool, or None for a tool that is not
            served from the recording (its recorded calls are skipped, never unused).
        redaction: redact both sides' arguments before comparing (None: as they are).

    Each :meth:`match` returns a :class:`Served` or a :class:`Divergence`; misses are
    kept in :attr:`divergences` (in call order).
    """

    def __init__(
        self,
        recorded: Sequence[ToolCallStep],
        options_for: OptionsFor,
        redaction: Redaction | None = None,
    ) -> None:
        self._options_for = options_for
        self._redaction = redaction if redaction is not None and redaction.enabled else None
        self._opts: dict[str, ReplayOptions | None] = {}
        self._ignore: dict[str, tuple[tuple[Segment, ...], ...]] = {}
        self._entries: list[_Entry] = []
        self._strict: list[_Entry] = []
        self._per_tool: dict[str, list[_Entry]] = defaultdict(list)
        self._any: dict[bytes, deque[_Entry]] = defaultdict(deque)
        self._by_tool: dict[str, list[_Entry]] = defaultdict(list)
        for step in recorded:
            opts = self.options(step.tool)
            if opts is None:
                continue
            if self._redaction is not None:
                _redacted(step.args, self._redaction)  # too deep: refused, as unredacted
                step = redact_step(step, self._redaction)
            entry = _Entry(step, opts, self._ignore[step.tool])
            self._entries.append(entry)
            self._by_tool[step.tool].append(entry)
            if opts.order == "strict":
                self._strict.append(entry)
            elif opts.order == "per_tool":
                self._per_tool[step.tool].append(entry)
            else:
                self._any[entry.key].append(entry)
        self._strict_at = 0
        self._tool_at: dict[str, int] = defaultdict(int)
        self.calls = 0
        self.served = 0
        self.divergences: list[Divergence] = []

    def options(self, tool: str) -> ReplayOptions | None:
        """The replay options of ``tool`` (None: not served from the recording)."""
        if tool not in self._opts:
            opts = self._opts[tool] = self._options_for(tool)
            self._ignore[tool] = opts.paths() if opts is not None else ()
        return self._opts[tool]

    def match(self, tool: str, args: Mapping[str, Any]) -> Served | Divergence:
        """Serve the agent's call from the recording, or say why it cannot be.

        Raises:
            ValueError: ``tool`` is not served from the recording (no options).
        """
        opts = self.options(tool)
        if opts is None:
            raise ValueError(f"tool {tool!r} is not served from the recording")
        call = self.calls
        self.calls += 1
        if self._redaction is not None:
            args = _redacted(args, self._redaction)
        norm = normalize_args(args, self._ignore[tool])
        key = _name(tool) + b"\x00" + canonical_json(norm)
        expected: _Entry | None = None
        hit: _Entry | None = None
        if opts.order == "any":
            queue = self._any.get(key)
            while queue and queue[0].used:
                queue.popleft()
            if queue:
                hit = queue.popleft()
        else:
            if opts.order == "strict":
                seq, at = self._strict, self._strict_at
                self._strict_at += 1
            else:
                seq, at = self._per_tool[tool], self._tool_at[tool]
                self._tool_at[tool] += 1
            # A miss consumes the position too: "the n-th call must match the n-th".
            expected = seq[at] if at < len(seq) else None
            # A skipped recorded call stays unused (it is reported at the end).
            if expected is not None and expected.key == key:
                hit = expected
        if hit is not None:
            hit.used = True
            self.served += 1
            return Served(call=call, recorded=hit.step)
        divergence = self._divergence(call, tool, args, norm, key, opts, expected)
        self.divergences.append(divergence)
        return divergence

    def _divergence(
        self,
        call: int,
        tool: str,
        args: Mapping[str, Any],
        norm: Any,
        key: bytes,
        opts: ReplayOptions,
        expected: _Entry | None,
    ) -> Divergence:
        same = self._by_tool.get(tool, [])
        if any(e.key == key and not e.used for e in same):
            reason = "out_of_order"
        elif any(e.key == key for e in same):
            reason = "repeated"
        elif opts.order != "any" and expected is None:
            reason = "recording_exhausted"
        else:
            reason = "no_match"
        ranked = sorted(
            same,
            key=lambda e: (e.used, len(differing_paths(e.norm, norm)), e.step.index),
        )
        closest = tuple(self._ref(e, tool, norm) for e in ranked[:CLOSEST])
        return Divergence(
            call=call,
            tool=tool,
            args=as_json(dict(args)),
            reason=reason,
            order=opts.order,
            expected=self._ref(expected, tool, norm) if expected is not None else None,
            closest=closest,
        )

    @staticmethod
    def _ref(entry: _Entry, tool: str, norm: Any) -> CallRef:
        if entry.step.tool != tool:
            differs: tuple[str, ...] = ("tool",)
        else:
            differs = tuple(differing_paths(entry.norm, norm))
        return CallRef(
            episode_id=entry.step.episode_id,
            step=entry.step.index,
            tool=entry.step.tool,
            args=entry.step.args,
            differs=differs,
            used=entry.used,
        )

    def note_step(self, call: int, step: int) -> None:
        """Name the agent's step index of the divergence of call number ``call``."""
        for i, d in enumerate(self.divergences):
            if d.call == call:
                self.divergences[i] = msgspec.structs.replace(d, step=step)

    def unused(self) -> tuple[CallRef, ...]:
        """Recorded calls never served, in recorded order."""
        return tuple(
            CallRef(
                episode_id=e.step.episode_id, step=e.step.index, tool=e.step.tool, args=e.step.args
            )
            for e in self._entries
            if not e.used
        )

    @property
    def size(self) -> int:
        """How many recorded calls this session can serve."""
        return len(self._entries)


def _redacted(args: Any, redaction: Redaction) -> Any:
    """``args`` redacted for matching.

    Raises:
        ConfigError: ``args`` too deep to look through (redaction would keep nothing of
            them, and two such calls would compare equal): as :func:`normalize_args`.
    """
    out, found = redaction.args(args)
    if any(f["shape"] == "too_deep" for f in found):
        normalize_args(args)  # raises the same error as a comparison without redaction
        raise ConfigError(TOO_DEEP)
    return out
