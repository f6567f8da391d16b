"""Step-by-step comparison of two episodes (``litmus-sandbox diff``). Sans-io.

Steps are aligned by index. What is measured about *when* and under *which ids* a run
happened never counts: episode and call ids, timestamps (``at``, ``started_at``,
``ended_at``), and the free-form ``meta`` and ``oracles`` dictionaries (which hold
volatile trace ids, paths and the replay bookkeeping). Everything else is compared and
every difference is a :class:`Change` in one category:

* ``header`` - case id, suite, agent, recorder identity;
* ``step`` - a step only one side has, or a message on one side and a tool call on the other;
* ``message`` - role, text, refusal label;
* ``call`` - tool name, arguments (with the argument paths that differ);
* ``result`` - what the agent was shown: content, error flag, structured content;
* ``fidelity`` - the fidelity tag, the replay source, what really happened (``actual``),
  and the episode's configured tool modes;
* ``effects`` - filesystem, egress and state effects, and the findings drawn from them
  (also the end record's unattributed effects);
* ``end`` - end status, reason and step count (an episode without an end is incomplete).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from litmus_sandbox._model.codec import canonical_json
from litmus_sandbox._model.jsonpath import differing_paths, normalize_args
from litmus_sandbox._model.records import Episode, MessageStep, Step, ToolCallStep

CATEGORIES: tuple[str, ...] = (
    "header",
    "step",
    "message",
    "call",
    "result",
    "fidelity",
    "effects",
    "end",
)


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One difference between episode A and episode B.

    ``step`` is the step index (None for the header and the end); ``paths`` are the
    JSON paths that differ inside ``a`` and ``b`` when both are structured values.
    """

    step: int | None = None
    category: str
    field: str
    a: Any = None
    b: Any = None
    paths: tuple[str, ...] = ()


class EpisodeDiff(msgspec.Struct, frozen=True, kw_only=True):
    """Every difference between two episodes, in step order."""

    a: str
    b: str
    case_id: str
    a_steps: int
    b_steps: int
    changes: tuple[Change, ...] = ()

    @property
    def identical(self) -> bool:
        return not self.changes

    def categories(self) -> set[str]:
        """The categories that have at least one change."""
        return {c.category for c in self.changes}

    def without(self, *categories: str) -> EpisodeDiff:
        """The same diff with the changes of ``categories`` left out."""
        return msgspec.structs.replace(
            self, changes=tuple(c for c in self.changes if c.category not in categories)
        )


def _compare(
    out: list[Change], step: int | None, category: str, field: str, a: Any, b: Any
) -> None:
    # Compared as JSON values: key order never matters, 1 equals 1.0, true is not 1.
    na, nb = normalize_args(a), normalize_args(b)
    if canonical_json(na) == canonical_json(nb):
        return
    paths: tuple[str, ...] = ()
    if isinstance(na, dict | list) and isinstance(nb, dict | list):
        paths = tuple(differing_paths(na, nb))
    out.append(
        Change(
            step=step,
            category=category,
            field=field,
            a=na,
            b=nb,
            paths=paths,
        )
    )


def _summary(step: Step) -> dict[str, Any]:
    if isinstance(step, MessageStep):
        return {"type": "message", "role": step.role, "text": step.text}
    return {"type": "tool_call", "tool": step.tool, "args": step.args, "fidelity": step.fidelity}


def _step_changes(out: list[Change], a: Step, b: Step) -> None:
    i = a.index
    if isinstance(a, MessageStep) and isinstance(b, MessageStep):
        _compare(out, i, "message", "role", a.role, b.role)
        _compare(out, i, "message", "text", a.text, b.text)
        _compare(out, i, "message", "refusal", a.refusal, b.refusal)
        return
    if not (isinstance(a, ToolCallStep) and isinstance(b, ToolCallStep)):
        out.append(Change(step=i, category="step", field="type", a=_summary(a), b=_summary(b)))
        return
    _compare(out, i, "call", "tool", a.tool, b.tool)
    _compare(out, i, "call", "args", a.args, b.args)
    _compare(out, i, "result", "content", a.shown.content, b.shown.content)
    _compare(out, i, "result", "is_error", a.shown.is_error, b.shown.is_error)
    _compare(out, i, "result", "structured", a.shown.structured, b.shown.structured)
    _compare(out, i, "fidelity", "fidelity", a.fidelity, b.fidelity)
    _compare(out, i, "fidelity", "source", a.source, b.source)
    _compare(out, i, "fidelity", "actual", a.actual, b.actual)
    for kind in ("fs", "egress", "state"):
        _compare(out, i, "effects", kind, getattr(a.effects, kind), getattr(b.effects, kind))
    _compare(out, i, "effects", "findings", a.findings, b.findings)


def diff_episodes(a: Episode, b: Episode, *, ignore: Iterable[str] = ()) -> EpisodeDiff:
    """Compare two episodes step by step (see the module docstring for what counts).

    Args:
        a: the first episode (usually the baseline or the recording).
        b: the second episode.
        ignore: categories to leave out (e.g. ``fidelity`` to compare a replay with its
            recording).

    Raises:
        ValueError: an unknown category in ``ignore``.
    """
    skip = set(ignore)
    if unknown := skip - set(CATEGORIES):
        raise ValueError(
            f"unknown diff categories {', '.join(sorted(unknown))} (one of {', '.join(CATEGORIES)})"
        )
    out: list[Change] = []
    ha, hb = a.header, b.header
    for field in ("case_id", "suite", "agent"):
        _compare(out, None, "header", field, getattr(ha, field), getattr(hb, field))
    _compare(out, None, "header", "recorder", ha.recorder.identity(), hb.recorder.identity())
    _compare(out, None, "fidelity", "tool_modes", ha.tool_modes, hb.tool_modes)
    a_steps = {s.index: s for s in a.steps}
    b_steps = {s.index: s for s in b.steps}
    for i in sorted(set(a_steps) | set(b_steps)):
        sa, sb = a_steps.get(i), b_steps.get(i)
        if sa is not None and sb is not None:
            _step_changes(out, sa, sb)
        else:
            out.append(
                Change(
                    step=i,
                    category="step",
                    field="only_in_a" if sb is None else "only_in_b",
                    a=_summary(sa) if sa is not None else None,
                    b=_summary(sb) if sb is not None else None,
                )
            )
    ea, eb = a.end, b.end
    _compare(out, None, "end", "status", _status(a), _status(b))
    if ea is not None and eb is not None:
        _compare(out, None, "end", "reason", ea.reason, eb.reason)
        _compare(out, None, "effects", "unattributed", ea.unattributed, eb.unattributed)
        _compare(out, None, "effects", "end_findings", ea.findings, eb.findings)
    return EpisodeDiff(
        a=a.episode_id,
        b=b.episode_id,
        case_id=a.case_id,
        a_steps=len(a.steps),
        b_steps=len(b.steps),
        changes=tuple(c for c in out if c.category not in skip),
    )


def _status(ep: Episode) -> str:
    if ep.end is None:
        return "incomplete"
    return ep.end.status + (" (torn)" if ep.torn else "")


def pair_by_case(
    a: Sequence[Episode], b: Sequence[Episode]
) -> tuple[list[tuple[Episode, Episode]], list[Episode], list[Episode]]:
    """Pair the episodes of two runs by case id: (pairs, only in A, only in B).

    Raises:
        ValueError: a case with several episodes on one side (pick them by episode id).
    """
    for side, eps in (("A", a), ("B", b)):
        seen: dict[str, str] = {}
        for ep in eps:
            if ep.case_id in seen:
                raise ValueError(
                    f"{side} holds several episodes of case {ep.case_id!r} "
                    f"({seen[ep.case_id]}, {ep.episode_id}); select one with FILE#EPISODE_ID"
                )
            seen[ep.case_id] = ep.episode_id
    by_case = {ep.case_id: ep for ep in b}
    pairs = [(ep, by_case[ep.case_id]) for ep in a if ep.case_id in by_case]
    a_cases = {ep.case_id for ep in a}
    return (
        pairs,
        [ep for ep in a if ep.case_id not in by_case],
        [ep for ep in b if ep.case_id not in a_cases],
    )
