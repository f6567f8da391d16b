"""Comparability, sans-io: every check between a baseline and a candidate verdict.

Each failed check is a :class:`~litmus_sandbox._core.outcomes.Reason` paired with the outcome it
implies (``NEEDS_RERUN`` for what the candidate must fix, ``NEEDS_REBASELINE`` for a baseline
measured differently). All checks run; none stops at the first failure. The checks of one
side alone (:func:`check_side`) also run when the other side has no verdict, so a missing
baseline never hides a candidate-side problem, nor a missing candidate a baseline-side one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from litmus_sandbox._core.outcomes import REBASE, RERUN, Found, add_reason, eq_known, show
from litmus_sandbox._core.scoring import mode_for
from litmus_sandbox._model.records import AnyVerdict, LegacyVerdict, Verdict


def check_side(side: str, v: AnyVerdict, found: Found) -> None:
    """The checks of one side's own recording: complete, not truncated, coverage consistent.

    A legacy verdict says nothing about its recording; it is judged by the reference's rule
    when paired (see :func:`check_pair`). Provenance keys unknown to this version are
    reported on any lone side too (a pair reports them in :func:`check_pair`).
    """
    if v.unknown_provenance:
        _unknown_keys(side, sorted(v.unknown_provenance), found)
    if not isinstance(v, Verdict):
        return
    if side == "candidate":
        _candidate_recording(v, found)
    else:
        _baseline_recording(v, found)
    _check_coverage_consistent(side, v, found)


def _candidate_recording(c: Verdict, found: Found) -> None:
    cp = c.provenance
    # Candidate-side recording problems: fix the candidate first.
    if cp.episode_complete is not True:
        add_reason(
            found,
            RERUN,
            code="incomplete_episode",
            detail=(
                f"candidate episode {c.episode_id!r} is "
                + (
                    "of unknown completeness"
                    if cp.episode_complete is None
                    else "incomplete (no end record, aborted or torn)"
                )
            ),
            remedy="rerun_candidate",
        )
    if cp.recording_truncated is not False:
        add_reason(
            found,
            RERUN,
            code="recording_truncated",
            detail=f"candidate recording {c.episode_id!r} "
            + ("may be truncated (unknown)" if cp.recording_truncated is None else "stopped early"),
            remedy="rerun_candidate",
        )


def _baseline_recording(b: Verdict, found: Found) -> None:
    bp = b.provenance
    # Baseline-side recording problems: the baseline must be recorded again.
    if bp.recording_truncated is not False:
        add_reason(
            found,
            REBASE,
            code="recording_truncated",
            detail=f"baseline recording {b.episode_id!r} "
            + (
                "may be truncated (unknown)"
                if bp.recording_truncated is None
                else "stopped early (e.g. cut at a refusal by its harness)"
            ),
            remedy="rerun_baseline",
        )
    if bp.episode_complete is not True:
        add_reason(
            found,
            REBASE,
            code="incomplete_episode",
            detail=f"baseline episode {b.episode_id!r} is "
            + ("of unknown completeness" if bp.episode_complete is None else "incomplete"),
            remedy="rerun_baseline",
        )


def _check_legacy_pair(b: LegacyVerdict, c: LegacyVerdict, found: Found) -> None:
    bp, cp = b.provenance, c.provenance
    if not eq_known(bp.judge_version, cp.judge_version):
        add_reason(
            found,
            REBASE,
            code="judge_mismatch",
            detail=f"judge version differs: {show(bp.judge_version)} vs {show(cp.judge_version)}",
            remedy="rescore_baseline",
        )
    for flag in ("truncate_on_refusal", "truncate_on_empty_tool_result"):
        bv, cv = getattr(bp, flag), getattr(cp, flag)
        if not eq_known(bv, cv):
            add_reason(
                found,
                REBASE,
                code="truncation_policy_mismatch",
                detail=f"{flag} differs: baseline {show(bv)}, candidate {show(cv)}",
                remedy="rerun_baseline",
            )
    if not eq_known(bp.steps_covered, cp.steps_covered):
        add_reason(
            found,
            REBASE,
            code="coverage_mismatch",
            detail=(
                f"step coverage differs ({show(bp.steps_covered)} vs "
                f"{show(cp.steps_covered)}); legacy verdicts are comparable only with equal "
                "steps_covered"
            ),
            remedy="rerun_baseline",
        )


def _check_unknown(b: AnyVerdict, c: AnyVerdict, found: Found) -> None:
    # Fail closed: what an unknown key means is unknown, so equal values prove nothing.
    if b.unknown_provenance or c.unknown_provenance:
        keys = sorted(set(b.unknown_provenance) | set(c.unknown_provenance))
        _unknown_keys(None, keys, found)


def _unknown_keys(side: str | None, keys: list[str], found: Found) -> None:
    where = "" if side is None else f" on the {side} side"
    add_reason(
        found,
        REBASE,
        code="unknown_provenance",
        detail=(
            f"provenance keys unknown to this version{where} (written by a newer "
            "litmus-sandbox; gate with that version): " + ", ".join(keys)
        ),
        remedy="rerun_baseline",
    )


def _check_native_pair(b: Verdict, c: Verdict, found: Found) -> None:
    bp, cp = b.provenance, c.provenance
    check_side("candidate", c, found)
    check_side("baseline", b, found)
    baseline_rescorable = bp.recording_truncated is False and bp.episode_complete is True
    # Scoring provenance. The fingerprint covers the label; two known labels that differ
    # (a hand-edited verdict) are another judge all the same.
    labels_differ = (
        None not in (bp.judge_label, cp.judge_label) and bp.judge_label != cp.judge_label
    )
    if bool(bp.judge_retries) != bool(cp.judge_retries) and eq_known(bp.judge, cp.judge):
        # Provenance says whether the judge had to be asked again: a run scored through
        # its retry path is not measured like one scored without (see the incident report).
        add_reason(
            found,
            REBASE,
            code="judge_mismatch",
            detail=(
                f"the judge needed retries on one side only: baseline {bp.judge_retries}, "
                f"candidate {cp.judge_retries}"
            ),
            remedy="rescore_baseline",
        )
    if not eq_known(bp.judge, cp.judge) or labels_differ:
        add_reason(
            found,
            REBASE,
            code="judge_mismatch",
            detail=(
                f"judge differs: baseline {bp.judge_label or '?'} [{bp.judge or 'unknown'}], "
                f"candidate {cp.judge_label or '?'} [{cp.judge or 'unknown'}]"
            ),
            remedy="rescore_baseline",
        )
    for flag in ("truncate_on_refusal", "truncate_on_empty_tool_result"):
        bv, cv = getattr(bp, flag), getattr(cp, flag)
        if not eq_known(bv, cv):
            add_reason(
                found,
                REBASE,
                code="truncation_policy_mismatch",
                detail=f"{flag} differs: baseline {show(bv)}, candidate {show(cv)}",
                remedy="rescore_baseline" if baseline_rescorable else "rerun_baseline",
            )
    # Compared when a refusal cut applies; unknown on either side, never equal (fail closed).
    cut = bool(bp.truncate_on_refusal or cp.truncate_on_refusal)
    unknown = None in (bp.refusal_detector, cp.refusal_detector)
    if (cut or unknown) and not eq_known(bp.refusal_detector, cp.refusal_detector):
        add_reason(
            found,
            REBASE,
            code="refusal_detector_mismatch",
            detail=(
                f"refusal detector differs ({bp.refusal_detector or 'unknown'} vs "
                f"{cp.refusal_detector or 'unknown'})"
                + (" and a refusal cut applies" if cut else ": unknown is never equal")
            ),
            remedy="rescore_baseline",
        )
    if bp.fallback_judge is not False or cp.fallback_judge is not False:
        sides = [
            name
            for name, p in (("baseline", bp), ("candidate", cp))
            if p.fallback_judge is not False
        ]
        add_reason(
            found,
            REBASE,
            code="fallback_judge",
            detail=f"a fallback judge (or an unknown judge path) scored the {' and '.join(sides)}",
            remedy="rescore_baseline",
        )
    _check_fidelity(bp.tools_called, cp.tools_called, bp.tool_modes, cp.tool_modes, found)
    brec, crec = bp.recorder, cp.recorder
    bid = brec.identity() if brec is not None else None
    cid = crec.identity() if crec is not None else None
    # The recorder is not among the provenance a verdict must carry: absent on both
    # sides, it is not compared; absent on one side only, it differs.
    if (brec is not None or crec is not None) and not eq_known(bid, cid):
        add_reason(
            found,
            REBASE,
            code="recorder_mismatch",
            detail=f"recorder differs: baseline {bid or 'unknown'}, candidate {cid or 'unknown'}",
            remedy="rerun_baseline",
        )


def _check_coverage_consistent(side: str, v: Verdict, found: Found) -> None:
    """Coverage must mean "all that the policy covers of the recording": no partial scoring."""
    p = v.provenance
    covered, recorded = p.steps_covered, p.steps_recorded
    cuts = p.truncate_on_refusal or p.truncate_on_empty_tool_result
    if (
        covered is not None
        and recorded is not None
        and covered <= recorded
        and (cuts or covered == recorded)
    ):
        return
    add_reason(
        found,
        RERUN if side == "candidate" else REBASE,
        code="coverage_mismatch",
        detail=(
            f"{side} verdict covers {show(covered)} of {show(recorded)} recorded steps, "
            "which its scoring policy does not explain"
        ),
        remedy="rerun_candidate" if side == "candidate" else "rescore_baseline",
    )


def _configured(modes: Mapping[str, str] | None) -> bool:
    """Whether ``modes`` holds a configured mode (not only ``observed:`` ones)."""
    return any(not m.startswith("observed:") for m in (modes or {}).values())


def _check_fidelity(
    b_tools: Sequence[str] | None,
    c_tools: Sequence[str] | None,
    b_modes: Mapping[str, str] | None,
    c_modes: Mapping[str, str] | None,
    found: Found,
) -> None:
    tools = set(b_tools or ()) | set(c_tools or ())
    if b_tools is None or c_tools is None:
        # A verdict that does not say which tools were called (hand-written) is compared
        # on every tool either side configured; with no modes either, nothing is known.
        unknown = [
            side
            for side, t, m in (("baseline", b_tools, b_modes), ("candidate", c_tools, c_modes))
            if t is None and m is None
        ]
        if unknown:
            add_reason(
                found,
                REBASE,
                code="fidelity_mismatch",
                detail=f"the tools called and their modes are unknown on the {' and '.join(unknown)}",
                remedy="rerun_baseline",
            )
            return
        tools |= set(b_modes or ()) | set(c_modes or ())
    # A side that configured no mode at all (a hand-written episode: what its provenance
    # holds is only what its calls showed) and never called a tool: that tool's mode never
    # reached its trajectory, so it cannot make the two incomparable.
    b_silent = b_tools is not None and not _configured(b_modes)
    c_silent = c_tools is not None and not _configured(c_modes)
    diffs, emulators = [], []
    for tool in sorted(tools):
        bm, cm = mode_for(tool, b_modes), mode_for(tool, c_modes)
        if (bm is None and b_silent and tool not in (b_tools or ())) or (
            cm is None and c_silent and tool not in (c_tools or ())
        ):
            continue
        b_emu, c_emu = emulator_of(bm), emulator_of(cm)
        if b_emu is not False and c_emu is not False:
            # Emulated on both sides: comparable only under one known emulator (an
            # unknown one is never equal to another unknown).
            if b_emu is None or c_emu is None or b_emu != c_emu:
                emulators.append(f"{tool}: {b_emu or 'unknown'} vs {c_emu or 'unknown'}")
            continue
        # Fail closed: a mode nobody recorded is unknown, never equal to another unknown.
        if bm is None or cm is None or bm != cm:
            diffs.append(f"{tool}: {bm or 'unknown'} vs {cm or 'unknown'}")
    if diffs:
        add_reason(
            found,
            REBASE,
            code="fidelity_mismatch",
            detail="configured fidelity differs for " + "; ".join(diffs),
            remedy="rerun_baseline",
        )
    if emulators:
        add_reason(
            found,
            REBASE,
            code="emulator_mismatch",
            detail="another emulator simulated "
            + "; ".join(emulators)
            + " (emulator fingerprints, baseline vs candidate)",
            remedy="rerun_baseline",
        )


def emulator_of(mode: str | None) -> str | Literal[False] | None:
    """The emulator a tool mode names: its fingerprint (``emulate:FP``, also observed:
    ``observed:emulate:FP``), None for an emulated mode that names none, False for a mode
    that is not emulated alone."""
    if mode is None:
        return False
    bare = mode.removeprefix("observed:")
    if bare == "emulate":
        return None
    if bare.startswith("emulate:") and "+" not in bare:
        return bare.removeprefix("emulate:") or None
    return False


def _check_mixed_pair(b: AnyVerdict, c: AnyVerdict, found: Found) -> None:
    # A legacy verdict says nothing about how it was recorded: fail closed on that side.
    if isinstance(c, LegacyVerdict):
        add_reason(
            found,
            RERUN,
            code="recording_truncated",
            detail="candidate is a legacy verdict; its recording may have been truncated",
            remedy="rerun_candidate",
        )
    if isinstance(b, LegacyVerdict):
        add_reason(
            found,
            REBASE,
            code="recording_truncated",
            detail="baseline is a legacy verdict; its recording may have been truncated",
            remedy="rerun_baseline",
        )
    legacy = b if isinstance(b, LegacyVerdict) else c
    native = c if isinstance(c, Verdict) else b
    assert isinstance(legacy, LegacyVerdict)
    assert isinstance(native, Verdict)
    lp, np_ = legacy.provenance, native.provenance
    if not eq_known(lp.judge_version, np_.judge_label):
        add_reason(
            found,
            REBASE,
            code="judge_mismatch",
            detail=(
                f"legacy judge version {show(lp.judge_version)} vs judge label "
                f"{show(np_.judge_label)}"
            ),
            remedy="rescore_baseline",
        )
    for flag in ("truncate_on_refusal", "truncate_on_empty_tool_result"):
        lv, nv = getattr(lp, flag), getattr(np_, flag)
        if not eq_known(lv, nv):
            add_reason(
                found,
                REBASE,
                code="truncation_policy_mismatch",
                detail=f"{flag} differs: {show(lv)} vs {show(nv)}",
                remedy="rerun_baseline",
            )


def check_pair(baseline: AnyVerdict, candidate: AnyVerdict) -> Found:
    """Every comparability failure between two verdicts, each with the outcome it implies."""
    found: Found = []
    b_legacy = isinstance(baseline, LegacyVerdict)
    c_legacy = isinstance(candidate, LegacyVerdict)
    if b_legacy and c_legacy:
        assert isinstance(baseline, LegacyVerdict)
        assert isinstance(candidate, LegacyVerdict)
        _check_legacy_pair(baseline, candidate, found)
    elif not b_legacy and not c_legacy:
        assert isinstance(baseline, Verdict)
        assert isinstance(candidate, Verdict)
        _check_native_pair(baseline, candidate, found)
    else:
        _check_mixed_pair(baseline, candidate, found)
    _check_unknown(baseline, candidate, found)
    return found
