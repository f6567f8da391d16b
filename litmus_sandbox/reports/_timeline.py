"""An episode as a timeline: what ``litmus-sandbox show`` prints and what the HTML report
draws, as plain data (no terminal, no markup).

Each step becomes a :class:`StepView`: its index, who acted (a role, or the tool called),
the call's fidelity, whether it is a refusal or comes after one, what the agent was
shown and what really happened where the two differ, its effects and findings, and,
when a verdict is given, the judge's verdict on it with its evidence (the rules that
fired or the judge's reason, and whether the harm was observed, requested or claimed).

A *refusal* is what the refusal detector says (an explicit ``refusal`` label wins); the
steps after one that act for the agent (assistant messages that are not refusals
themselves, tool calls) are marked ``after_refusal``: the incident's pattern is a
refusal followed by the work it refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from litmus_sandbox._core.scoring import RefusalDetector
from litmus_sandbox._model import safe_text
from litmus_sandbox._model.records import (
    Actual,
    AnyVerdict,
    Effects,
    EgressEvent,
    Episode,
    Finding,
    FsEffect,
    MessageStep,
    Shown,
    Step,
    StepVerdict,
    ToolCallStep,
    Verdict,
)

__all__ = [
    "EpisodeView",
    "StepView",
    "clip",
    "episode_view",
    "step_evidence",
    "unsafe_steps",
    "why_unsafe",
]

#: The longest text a timeline shows of one field (message, arguments, result).
MAX_TEXT = 400

_encoder = msgspec.json.Encoder()


class StepView(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a timeline (see the module docstring)."""

    index: int
    kind: Literal["message", "tool_call"]
    #: The role of a message, or the tool a call called.
    who: str
    text: str
    fidelity: str | None = None
    refusal: bool = False
    after_refusal: bool = False
    shown: str | None = None
    actual: str | None = None
    effects: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    #: ``safe`` / ``unsafe`` when the verdict covers the step; None when it does not.
    verdict: str | None = None
    evidence: str | None = None
    #: With a verdict given, why it judged no such step (:func:`not_judged_reason`);
    #: None when the step is judged, or when no verdict was given.
    not_judged: str | None = None


class EpisodeView(msgspec.Struct, frozen=True, kw_only=True):
    """An episode's header facts and its steps in order."""

    episode_id: str
    case_id: str
    agent: str | None
    recorder: str
    #: ``complete``, ``aborted``, ``incomplete`` (no end record, or a step missing: its
    #: end says ``complete`` but a step number is absent) or ``torn``.
    status: str
    source: str
    steps: tuple[StepView, ...]
    #: Effects and findings of the end-of-episode pass that no call explains.
    unattributed: tuple[str, ...] = ()
    end_findings: tuple[str, ...] = ()
    #: What the tool server did on its own as it started and as it shut down (no findings).
    startup: tuple[str, ...] = ()
    shutdown: tuple[str, ...] = ()
    truncated: bool = False


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out (``…(+N chars)``)."""
    return safe_text.clip(text, limit)


def episode_view(
    episode: Episode,
    detector: RefusalDetector | None = None,
    verdict: Verdict | None = None,
) -> EpisodeView:
    """``episode`` as a timeline; ``verdict`` (the episode's) adds step verdicts."""
    detector = detector or RefusalDetector()
    judged = {s.index: s for s in verdict.steps} if verdict is not None else {}
    steps: list[StepView] = []
    refused = False
    for step in episode.steps:
        is_refusal = detector.is_refusal(step)
        acts = isinstance(step, ToolCallStep) or step.role == "assistant"
        view = _step_view(step, is_refusal, refused and acts and not is_refusal, judged)
        if verdict is not None and step.index not in judged:
            why = not_judged_reason(step.index, verdict, episode, detector)
            view = msgspec.structs.replace(view, not_judged=why)
        steps.append(view)
        refused = refused or is_refusal
    end = episode.end
    if episode.torn:
        status = "torn"
    elif end is None or (end.status == "complete" and not episode.complete):
        status = "incomplete"
    else:
        status = end.status
    return EpisodeView(
        episode_id=episode.episode_id,
        case_id=episode.case_id,
        agent=episode.header.agent,
        recorder=episode.header.recorder.identity(),
        status=status,
        source=episode.source,
        steps=tuple(steps),
        unattributed=tuple(effect_lines(end.unattributed)) if end is not None else (),
        end_findings=tuple(finding_line(f) for f in end.findings) if end is not None else (),
        startup=_phase_lines(end.startup if end is not None else msgspec.UNSET),
        shutdown=_phase_lines(end.shutdown if end is not None else msgspec.UNSET),
        truncated=episode.header.recorder.truncated,
    )


def _phase_lines(effects: Effects | msgspec.UnsetType) -> tuple[str, ...]:
    return tuple(effect_lines(effects)) if isinstance(effects, Effects) else ()


def not_judged_reason(
    index: int, verdict: Verdict, episode: Episode, detector: RefusalDetector | None = None
) -> str:
    """Why ``verdict`` has no verdict on step ``index`` of ``episode``: where its scoring
    policy cut the recording (``truncate_on_refusal`` at a refusal, or
    ``truncate_on_empty_tool_result`` at an empty result: each named only when the step
    where coverage ends is one), or the step lies outside the recording it scored."""
    p = verdict.provenance
    recorded = p.steps_recorded
    if recorded is not None and index >= recorded:
        return f"outside the recording the verdict scored ({recorded} steps)"
    covered = p.steps_covered
    if covered is not None and index >= covered > 0:
        cut = covered - 1
        last = episode.steps[cut] if cut < len(episode.steps) else None
        empty = isinstance(last, ToolCallStep) and last.shown.is_empty()
        if p.truncate_on_empty_tool_result and empty:
            return f"cut at the empty tool result of step {cut} (truncate_on_empty_tool_result)"
        refused = last is not None and (detector or RefusalDetector()).is_refusal(last)
        if p.truncate_on_refusal and refused:
            return f"cut by truncate_on_refusal at the refusal at step {cut}"
        return f"the verdict covers steps 0-{cut} only"
    return "no step verdict (the judge gave none)"


def not_judged(
    recorded: int | None,
    covered: int | None,
    on_refusal: bool | None,
    on_empty: bool | None,
) -> dict[str, Any] | None:
    """The steps a verdict did not judge, as the JSON report's side summary says them
    (``not_judged``): from which step, how many (None when the recording's length is
    unknown, as for a legacy verdict), the ``cause`` (``truncate_on_refusal``,
    ``truncate_on_empty_tool_result``, ``truncation`` when either policy could have cut
    there, or ``unknown``) and ``why`` in words. None when every recorded step was judged,
    or when coverage is unknown; a legacy verdict scored with no truncation judged all."""
    if covered is None:
        return None
    if recorded is not None and covered >= recorded:
        return None
    if recorded is None and not (on_refusal or on_empty):
        return None
    if recorded is None:
        # The recording's length is unknown (a legacy verdict): whether its policy cut
        # anything, and where, is unknown too; say only what the verdict says.
        on = [
            name
            for name, flag in (
                ("truncate_on_refusal", on_refusal),
                ("truncate_on_empty_tool_result", on_empty),
            )
            if flag
        ]
        return {
            "from_step": covered,
            "steps": None,
            "cause": "unknown",
            "why": f"any step from {covered} on, if the recording had one, not judged: the "
            f"verdict covers {covered} steps under {' and '.join(on)}, and does not say "
            "whether it cut there",
        }
    count = recorded - covered
    span = f"step {covered}" if count == 1 else f"steps {covered}-{recorded - 1}"
    cut = covered - 1
    if covered == 0:
        cause, how = "unknown", "no step was judged"
    elif on_refusal and on_empty:
        cause = "truncation"
        how = (
            f"cut at step {cut} by truncate_on_refusal (a refusal) or "
            "truncate_on_empty_tool_result (an empty tool result)"
        )
    elif on_refusal:
        cause, how = (
            "truncate_on_refusal",
            f"cut by truncate_on_refusal at the refusal at step {cut}",
        )
    elif on_empty:
        cause = "truncate_on_empty_tool_result"
        how = f"cut at the empty tool result of step {cut} (truncate_on_empty_tool_result)"
    else:
        cause, how = "unknown", f"the verdict covers steps 0-{cut} only"
    return {
        "from_step": covered,
        "steps": count,
        "cause": cause,
        "why": f"{span} not judged: {how}",
    }


def _step_view(
    step: Step, refusal: bool, after: bool, judged: Mapping[int, StepVerdict]
) -> StepView:
    sv = judged.get(step.index)
    verdict = None if sv is None else "safe" if sv.safe else "unsafe"
    evidence = step_evidence(sv) if sv is not None and not sv.safe else None
    if isinstance(step, MessageStep):
        return StepView(
            index=step.index,
            kind="message",
            who=step.role,
            text=clip(step.text.rstrip()),
            refusal=refusal,
            after_refusal=after,
            verdict=verdict,
            evidence=evidence,
        )
    fidelity: str = step.fidelity
    if step.source is not None:
        fidelity = f"replayed from {step.source.episode_id}#{step.source.step}"
    elif step.fidelity == "emulated":
        fidelity = emulated_by(step.meta.get("emulator"))
    return StepView(
        index=step.index,
        kind="tool_call",
        who=step.tool,
        text=clip(_args(step.args)),
        fidelity=fidelity,
        after_refusal=after,
        shown=clip(shown_text(step.shown)),
        actual=None if step.actual is None else clip(actual_text(step.actual)),
        effects=tuple(effect_lines(step.effects)),
        findings=tuple(finding_line(f) for f in step.findings),
        verdict=verdict,
        evidence=evidence,
    )


def emulated_by(facts: Any) -> str:
    """``emulated by LABEL [FINGERPRINT]``, ``cached`` when served from the cache and
    ``failed (CLASS)`` when the emulation failed (``meta.emulator``)."""
    if not isinstance(facts, dict):
        return "emulated"
    label, fp = facts.get("label"), facts.get("fingerprint")
    out = "emulated"
    if isinstance(label, str):
        out += f" by {label}"
    if isinstance(fp, str):
        out += f" [{fp}]"
    if facts.get("cached") is True:
        out += " cached"
    failure = facts.get("failure")
    if isinstance(failure, dict):
        out += f" failed ({failure.get('class', '?')})"
    return out


def step_evidence(sv: StepVerdict) -> str:
    """Why a step is unsafe: the rules that fired or the judge's reason, and the kind of
    evidence (``observed``, ``requested``, ``claimed``) when the judge said."""
    return why_unsafe(sv.rules, sv.reason, sv.evidence, sv.contradictions)


def why_unsafe(
    rules: Sequence[str],
    reason: str | None,
    evidence: str | None,
    contradictions: Sequence[str] = (),
) -> str:
    """:func:`step_evidence` from its parts (an ``unsafe_steps`` entry of a report)."""
    parts = []
    if rules:
        parts.append(("rule " if len(rules) == 1 else "rules ") + ", ".join(rules))
    # The rules judge's reason only repeats its rule ids ("matched a, b").
    if reason and reason != f"matched {', '.join(rules)}":
        parts.append(reason)
    if contradictions:
        parts.append("forbidden findings: " + ", ".join(contradictions))
    text = "; ".join(parts) or "the judge gave no reason"
    return f"{text} ({evidence})" if evidence else text


def unsafe_steps(verdicts: Sequence[AnyVerdict]) -> list[dict[str, Any]]:
    """The unsafe steps of a side (its first unsafe epoch), each with its evidence:
    ``{"index", "episode_id", "rules", "reason", "evidence"}`` (``evidence`` is
    ``observed``, ``requested``, ``claimed`` or null when the judge did not say)."""
    for v in verdicts:
        if isinstance(v, Verdict) and not v.safe:
            return [
                {
                    "index": s.index,
                    "episode_id": v.episode_id,
                    "rules": list(s.rules),
                    "reason": s.reason,
                    "evidence": s.evidence,
                }
                for s in v.steps
                if not s.safe
            ]
    return []


def _args(args: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_json(v)}" for k, v in args.items())


def _json(value: Any) -> str:
    try:
        return _encoder.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def shown_text(shown: Shown) -> str:
    """What the agent was shown, as one string (``(empty)`` for an empty result)."""
    if shown.is_empty():
        return "(empty)"
    parts = [
        str(b.get("text", "")) if b.get("type") == "text" else f"[{b.get('type')}]"
        for b in shown.content
    ]
    if shown.structured is not None:
        parts.append(_json(shown.structured))
    text = "\n".join(p for p in parts if p).rstrip()
    return f"error: {text}" if shown.is_error else text


def actual_text(actual: Actual) -> str:
    """What really happened behind a call, as one string."""
    if actual.outcome == "raised":
        what = actual.error_type or "an exception"
        return (
            f"raised {what}: {actual.error_message}" if actual.error_message else f"raised {what}"
        )
    if actual.outcome == "returned":
        return "returned " + (_json(actual.value) if actual.value is not None else "a value")
    return {
        "timeout": "timed out",
        "dropped": "dropped (never ran)",
        "interrupted": "interrupted (cancelled mid-call)",
        "not_run": "not run",
    }.get(actual.outcome, actual.outcome)


def effect_lines(effects: Effects) -> list[str]:
    """One line per effect: filesystem changes, egress requests, state changes."""
    lines = [_fs_line(e) for e in effects.fs]
    lines.extend(_egress_line(e) for e in effects.egress)
    lines.extend(f"state {_json(s)}" for s in effects.state)
    return lines


def _fs_line(e: FsEffect) -> str:
    line = f"{e.op} {e.path}"
    if e.target:
        line += f" -> {e.target}"
    if isinstance(e.moved_to, str):
        line += f" (moved to {e.moved_to})"
    if isinstance(e.attribution, str) and e.attribution != "audit":
        line += f" (attributed by {e.attribution})"
    return line


def _egress_line(e: EgressEvent) -> str:
    where = e.url or f"{e.scheme}://{e.host}" + (f":{e.port}" if e.port else "") + e.path
    line = f"{e.method} {where} {e.decision}"
    return line + (f" {e.status}" if e.status is not None else "")


def finding_line(f: Finding) -> str:
    where = f.path or f.host
    return f"{f.code}: {f.detail}" + (f" ({where})" if where and where not in f.detail else "")


def views(
    episodes: Iterable[Episode],
    detector: RefusalDetector | None = None,
    verdicts: Sequence[Verdict] = (),
) -> list[EpisodeView]:
    """Timelines of ``episodes``, each with its verdict (by episode id) when given."""
    by_id = {v.episode_id: v for v in verdicts}
    return [episode_view(ep, detector, by_id.get(ep.episode_id)) for ep in episodes]
