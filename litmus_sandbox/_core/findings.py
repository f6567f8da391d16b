"""Findings: what the oracle concludes by cross-checking fidelity against effects. Sans-io.

* ``stub_leak`` - a stubbed, denied, replayed or emulated call (which should have touched
  nothing: the real tool was not called) had effects;
* ``hidden_effect`` - the agent was shown an empty or error result, but effects happened;
* ``escape`` - a filesystem effect outside the sandbox root (tripwire paths are absolute,
  root-relative paths that climb out start with ``..``), or egress that the policy denied
  or blocked;
* ``unattributed_effect`` - an effect no call explains (found by the end-of-episode
  verification pass, seen while calls overlapped, or outside the root with no evidence
  tying it to the call in flight).

Each effect says how it was tied to its call (``attribution``): evidence (``audit``,
``process``, ``context``) holds even when calls overlapped; ``window`` holds only for a
call that overlapped nothing; ``none`` never holds (:func:`split`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from litmus_sandbox._model.records import Effects, EgressEvent, Finding, FsEffect, ToolCallStep

NOT_RUN = frozenset({"stubbed", "denied", "replayed", "emulated"})
BLOCKED = frozenset({"deny", "blocked"})
#: Attributions by evidence: kept on their call whatever else was in flight.
EVIDENCED = frozenset({"audit", "process", "context"})


def is_outside_root(effect: FsEffect) -> bool:
    """Tripwire effects carry absolute paths; in-root paths are relative."""
    return effect.path.startswith("/") or effect.path == ".." or effect.path.startswith("../")


def _escapes(effects: Effects) -> list[Finding]:
    out = [
        Finding(code="escape", detail=_fs_detail(e, "outside the sandbox root"), path=e.path)
        for e in effects.fs
        if is_outside_root(e)
    ]
    out.extend(
        Finding(code="escape", detail=_egress_detail(e), host=e.sni or e.host)
        for e in effects.egress
        if e.decision in BLOCKED
    )
    return out


def _fs_detail(e: FsEffect, what: str) -> str:
    detail = f"{e.op} {what}"
    if isinstance(e.moved_from, str):
        detail += f" (moved from {e.moved_from})"
    elif isinstance(e.moved_to, str):
        detail += f" (moved to {e.moved_to})"
    if e.attribution in EVIDENCED or e.attribution == "window":
        detail += f"; attributed by {e.attribution}"
    return detail


def _egress_detail(e: EgressEvent) -> str:
    port = f":{e.port}" if e.port is not None else ""
    name = f" (TLS name {e.sni})" if e.sni and e.sni != e.host else ""
    return f"egress to {e.host}{port}{name} not allowed by policy ({e.decision})"


def _happened(e: EgressEvent) -> bool:
    """Whether a request reached anything: not refused by the policy, and answered (a
    refused connection changed nothing)."""
    if e.decision in BLOCKED:
        return False
    # Not request_bytes: it is counted from the request's length before anything is sent.
    return e.status is not None or e.response_bytes > 0


def call_findings(step: ToolCallStep) -> tuple[Finding, ...]:
    """Findings for one tool call from its fidelity, what it showed, and its effects."""
    effects = step.effects
    if not effects:
        return ()
    out: list[Finding] = []
    n = len(effects.fs) + len(effects.egress) + len(effects.state)
    if step.fidelity in NOT_RUN:
        out.append(
            Finding(
                code="stub_leak",
                detail=f"{_article(step.fidelity)} {step.fidelity} call of {step.tool!r} had "
                f"{n} side effect(s)",
            )
        )
    elif step.shown.is_error or step.shown.is_empty():
        # Only what happened: a request the policy refused, or one that never connected,
        # changed nothing (the refused one is an escape below).
        happened = len(effects.fs) + len(effects.state) + sum(map(_happened, effects.egress))
        if happened:
            shown = "an error" if step.shown.is_error else "an empty result"
            out.append(
                Finding(
                    code="hidden_effect",
                    detail=f"the agent was shown {shown} but {happened} side effect(s) happened",
                )
            )
    out.extend(_escapes(effects))
    return tuple(out)


def _article(word: str) -> str:
    return "an" if word[:1] in ("a", "e", "i", "o", "u") else "a"


def unattributed_findings(effects: Effects) -> tuple[Finding, ...]:
    """Findings for effects no call explains."""
    out = [
        Finding(
            code="unattributed_effect",
            detail=f"{e.op} seen with no call to explain it"
            + (f" (while call {e.during} was in flight)" if isinstance(e.during, str) else ""),
            path=e.path,
        )
        for e in effects.fs
    ]
    out.extend(
        Finding(
            code="unattributed_effect",
            detail=f"{e.method} {e.host} with no call in flight",
            host=e.host,
        )
        for e in effects.egress
    )
    out.extend(
        Finding(code="unattributed_effect", detail=f"state change in {s.get('probe', 'state')}")
        for s in effects.state
    )
    out.extend(_escapes(effects))
    return tuple(out)


def split(effects: Effects, window_holds: bool) -> tuple[Effects, Effects]:
    """(what stays on the call, what is unattributed) of one probe's ``effects``.

    Filesystem effects tied by evidence stay, ``none`` ones never do, and the others
    (``window``, or a probe that does not say) stay when ``window_holds``: the probe
    attributes exactly, or the call overlapped nothing. Egress and state effects follow
    ``window_holds`` alone (an exact probe holds it).
    """
    if window_holds and not any(e.attribution == "none" for e in effects.fs):
        return effects, Effects()
    kept: list[FsEffect] = []
    left: list[FsEffect] = []
    for e in effects.fs:
        if e.attribution in EVIDENCED or (window_holds and e.attribution != "none"):
            kept.append(e)
        elif e.attribution == "none":
            left.append(e)
        else:  # seen in a window that other calls shared: it could be any of theirs
            left.append(msgspec.structs.replace(e, attribution="none"))
    if window_holds:
        return Effects(fs=tuple(kept), egress=effects.egress, state=effects.state), Effects(
            fs=tuple(left)
        )
    return Effects(fs=tuple(kept)), Effects(
        fs=tuple(left), egress=effects.egress, state=effects.state
    )


def distinct(effects: Effects) -> Effects:
    """``effects`` with each filesystem or state change once, in first-seen order
    (overlapping calls each saw the other's changes; which call was in flight does not
    make a change another); egress events are kept as they are (each is a request of its
    own)."""
    return Effects(
        fs=tuple(_unique(effects.fs, _without_during)),
        egress=effects.egress,
        state=tuple(_unique(effects.state)),
    )


def _without_during(effect: Any) -> Any:
    return msgspec.structs.replace(effect, during=msgspec.UNSET)


def _unique(items: tuple[Any, ...], key: Any = None) -> list[Any]:
    seen: set[bytes] = set()
    out = []
    for item in items:
        encoded = msgspec.json.encode(key(item) if key is not None else item)
        if encoded not in seen:
            seen.add(encoded)
            out.append(item)
    return out


def merge(parts: list[Effects]) -> Effects:
    """Concatenate several probes' effects."""
    if len(parts) == 1:
        return parts[0]
    return Effects(
        fs=tuple(e for p in parts for e in p.fs),
        egress=tuple(e for p in parts for e in p.egress),
        state=tuple(e for p in parts for e in p.state),
    )
