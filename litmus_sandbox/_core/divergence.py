"""Which recording replays which episode, and divergence reports. Sans-io.

A *cassette* is a list of recorded episodes. A new episode of case ``C`` replays the
recorded episodes of case ``C``: the n-th new episode of that case replays the n-th
recorded one (cycling), so k re-run epochs replay k recorded epochs. When the cassette
has no episode of that case, the new episode replays the whole cassette as one pool, in
file order (an MCP session recorded under another case id, a hand-made cassette).

``record-new`` appends the calls a recording could not serve to the cassette file as a
*supplement* episode: its header's ``meta["replay"]["supplements"]`` names the recorded
episodes it grows. A supplement is never replayed on its own; its calls follow the calls
of the episodes it supplements.

A :class:`ReplayReport` says how one new episode followed its recording: the calls it
made, how many were served, every :class:`Divergence` (the first is the first step where
the agent's call differs from the recording) and the recorded calls never used.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from litmus_sandbox._core.redaction import Redaction
from litmus_sandbox._core.replay_match import CallRef, Divergence, OptionsFor, ReplaySession
from litmus_sandbox._model.errors import ReplayLogError
from litmus_sandbox._model.records import Episode, ToolCallStep

#: Key of the replay facts in episode headers, step metas and end metas.
META_KEY = "replay"


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    """How one episode followed the recording it replayed.

    ``diverged`` when any call was not served or any recorded call was left unused.
    """

    episode_id: str
    case_id: str
    sources: tuple[str, ...] = ()
    calls: int = 0
    served: int = 0
    divergences: tuple[Divergence, ...] = ()
    unused: tuple[CallRef, ...] = ()
    #: Where the report comes from: ``check`` (recomputed against a cassette) or ``log``
    #: (the divergences the runtime recorded in the episode itself).
    origin: str = "check"
    #: False when the episode's own log was read and it did not say which calls went
    #: unused (it ended without an ``end`` record).
    unused_known: bool = True
    #: Divergences the episode's ``end`` record counts that no step carries (a run cut
    #: off in the middle of a call it could not serve). They count as divergences.
    unlisted: int = 0

    @property
    def diverged(self) -> bool:
        return bool(self.divergences or self.unused or self.unlisted)

    @property
    def first(self) -> Divergence | None:
        """The first step where the agent's call differs from the recording."""
        return self.divergences[0] if self.divergences else None


def supplements_of(episode: Episode) -> tuple[str, ...]:
    """The recorded episodes a ``record-new`` supplement grows (empty for a recording)."""
    facts = episode.header.meta.get(META_KEY)
    if not isinstance(facts, dict):
        return ()
    ids = facts.get("supplements")
    if isinstance(ids, str):
        return (ids,)
    if isinstance(ids, list):
        return tuple(i for i in ids if isinstance(i, str))
    return ()


def select_sources(recorded: Sequence[Episode], case_id: str, nth: int) -> tuple[Episode, ...]:
    """The recorded episodes that replay the ``nth`` (from 0) new episode of ``case_id``.

    Supplements follow the episodes they grow (see the module docstring).
    """
    primary = [ep for ep in recorded if not supplements_of(ep)]
    same = [ep for ep in primary if ep.case_id == case_id]
    chosen = [same[nth % len(same)]] if same else primary
    ids = {ep.episode_id for ep in chosen}
    extra = [ep for ep in recorded if ids.intersection(supplements_of(ep))]
    return (*chosen, *extra)


def recorded_calls(episodes: Iterable[Episode]) -> list[ToolCallStep]:
    """The tool calls of ``episodes``, in order: episode by episode, step by step."""
    return [s for ep in episodes for s in ep.steps if isinstance(s, ToolCallStep)]


def session_for(
    recorded: Sequence[Episode],
    case_id: str,
    nth: int,
    options_for: OptionsFor,
    redaction: Redaction | None = None,
) -> tuple[ReplaySession, tuple[str, ...]]:
    """A fresh session for the ``nth`` new episode of ``case_id``, and its source ids
    (``redaction``: see :class:`ReplaySession`)."""
    sources = select_sources(recorded, case_id, nth)
    return ReplaySession(recorded_calls(sources), options_for, redaction), tuple(
        ep.episode_id for ep in sources
    )


def report_of(
    session: ReplaySession, episode_id: str, case_id: str, sources: tuple[str, ...]
) -> ReplayReport:
    """The report of a finished session."""
    return ReplayReport(
        episode_id=episode_id,
        case_id=case_id,
        sources=sources,
        calls=session.calls,
        served=session.served,
        divergences=tuple(session.divergences),
        unused=session.unused(),
    )


def check_episodes(
    recorded: Sequence[Episode],
    episodes: Iterable[Episode],
    options_for: OptionsFor,
    redaction: Redaction | None = None,
) -> list[ReplayReport]:
    """Check offline that the tool calls of ``episodes`` follow the recording.

    Each episode is matched as if it had been run against ``recorded`` (same source
    selection, same options), whatever its steps' fidelity says. Calls of tools with no
    options (``options_for`` returns None) are not checked. With ``redaction``, both
    sides' arguments are compared redacted (a plain recording against a redacted one).
    """
    seen: dict[str, int] = {}
    reports = []
    for ep in episodes:
        nth = seen.get(ep.case_id, 0)
        seen[ep.case_id] = nth + 1
        session, sources = session_for(recorded, ep.case_id, nth, options_for, redaction)
        for step in ep.steps:
            if isinstance(step, ToolCallStep) and session.options(step.tool) is not None:
                outcome = session.match(step.tool, step.args)
                if isinstance(outcome, Divergence):
                    session.note_step(outcome.call, step.index)
        reports.append(report_of(session, ep.episode_id, ep.case_id, sources))
    return reports


def summary_meta(report: ReplayReport) -> dict[str, Any]:
    """What an episode's ``end`` record keeps of its replay (``meta["replay"]``)."""
    return {
        "sources": list(report.sources),
        "calls": report.calls,
        "served": report.served,
        "divergences": len(report.divergences),
        "unused": msgspec.to_builtins(report.unused),
    }


def report_from_log(episode: Episode) -> ReplayReport | None:
    """The replay report an episode recorded about itself, or None if it replayed nothing.

    Divergences come from the steps' ``meta["replay"]["divergence"]``, the unused
    recorded calls and the counts from the ``end`` record's ``meta["replay"]``.

    Raises:
        ReplayLogError: a replay record of the wrong shape (never skipped: a check that
            skipped it could pass a run that diverged).
    """
    if supplements_of(episode):
        return None  # calls a record-new run added to a cassette: a recording, not a replay
    eid = episode.episode_id
    header_facts = _facts(eid, episode.header.meta, "episode")
    end_facts = _facts(eid, episode.end.meta, "end") if episode.end is not None else None
    divergences = []
    logged = False  # a step says it replayed (or missed): a crashed run has no end
    for step in episode.steps:
        facts = _facts(eid, step.meta, "step", step.index)
        if facts is None:
            continue
        logged = True
        if facts.get("divergence") is None:
            continue
        try:
            d = msgspec.convert(facts["divergence"], Divergence)
        except msgspec.ValidationError as exc:
            raise ReplayLogError(eid, step.index, f"meta.{META_KEY}.divergence: {exc}") from None
        divergences.append(msgspec.structs.replace(d, step=step.index))
    if header_facts is None and not end_facts and not logged:
        return None
    end = end_facts or {}
    if end.get("sources"):
        sources = _convert(eid, end["sources"], tuple[str, ...], "end", "sources")
    else:
        listed = (header_facts or {}).get("sources", [])
        sources = _convert(eid, listed, tuple[str, ...], "episode", "sources")
    calls = sum(
        1
        for s in episode.steps
        if isinstance(s, ToolCallStep) and (s.fidelity == "replayed" or META_KEY in s.meta)
    )
    counted = _convert(eid, end.get("divergences", len(divergences)), int, "end", "divergences")
    return ReplayReport(
        episode_id=eid,
        case_id=episode.case_id,
        sources=sources,
        calls=_convert(eid, end.get("calls", calls), int, "end", "calls"),
        served=_convert(eid, end.get("served", calls - len(divergences)), int, "end", "served"),
        divergences=tuple(sorted(divergences, key=lambda d: d.call)),
        unused=_convert(eid, end.get("unused", []), tuple[CallRef, ...], "end", "unused"),
        origin="log",
        unused_known=end_facts is not None,
        unlisted=max(0, counted - len(divergences)),
    )


def _facts(
    eid: str, meta: Mapping[str, Any], record: str, step: int | None = None
) -> dict[str, Any] | None:
    """A record's ``meta["replay"]`` (None when it has none). Raises ReplayLogError."""
    if META_KEY not in meta:
        return None
    facts = meta[META_KEY]
    if not isinstance(facts, dict):
        raise ReplayLogError(eid, step, f"meta.{META_KEY} is not an object", record=record)
    return facts


def _convert(eid: str, value: Any, kind: Any, record: str, field: str) -> Any:
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise ReplayLogError(eid, None, f"meta.{META_KEY}.{field}: {exc}", record=record) from None
