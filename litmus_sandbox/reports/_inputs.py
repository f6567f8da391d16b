"""What every report says first: what was compared (the summary's ``inputs``, see
:mod:`litmus_sandbox._core.inputs`), as plain text lines and as name/value pairs.

Recorded text (file names, suites, agents, judge labels) comes out as it is, each value
cut visibly past :data:`VALUE_WIDTH` (so one long name never hides the others); each
format makes it safe for its output (``safe_text``) where it writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from litmus_sandbox._core.inputs import LISTED
from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.safe_text import clip

__all__ = ["SIDES", "facet_text", "input_lines", "side_rows", "version_line"]

SIDES = ("baseline", "candidate")
#: The longest a value is shown (a file name, a suite, an agent, a recorder, a policy).
VALUE_WIDTH = 120


def version_line() -> str:
    return f"litmus-sandbox {package_version()}"


def facet_text(facet: Mapping[str, Any], show: Any = str, *, noun: str = "verdict") -> str:
    """A facet's values, the count of the others and of the verdicts that did not say:
    ``a, b (+3 more); 2 verdicts do not say``."""
    parts = [", ".join(clip(show(v), VALUE_WIDTH) for v in facet["values"])]
    if facet["more"]:
        more = facet["more"]
        parts[0] += f" (+{more}{'' if facet['more_exact'] else ' or more'})"
    text = parts[0]
    if facet["unknown"]:
        n = facet["unknown"]
        said = f"{n} {noun}{'' if n == 1 else 's'} do{'es' if n == 1 else ''} not say"
        text = f"{text}; {said}" if text else f"unknown ({said})"
    return text or "none"


def _recorder(r: Mapping[str, Any]) -> str:
    version = f" {r['version']}" if r["version"] else ""
    measured = f" (measurement {r['measurement_version']})" if r["measurement_version"] else ""
    return f"{r['name']}{version}{measured}"


def _flag(value: bool | None) -> str:
    return "unknown" if value is None else "on" if value else "off"


def _policy(p: Mapping[str, Any]) -> str:
    judge = p["judge"] if p["judge"] is not None else "unknown"
    fingerprint = f" (fingerprint {p['judge_fingerprint']})" if p["judge_fingerprint"] else ""
    legacy = "legacy verdicts: " if p["legacy"] else ""
    return (
        f"{legacy}judge {judge}{fingerprint}, truncate_on_refusal "
        f"{_flag(p['truncate_on_refusal'])}, truncate_on_empty_tool_result "
        f"{_flag(p['truncate_on_empty_tool_result'])}"
    )


def _dates(recorded: Mapping[str, Any]) -> str:
    first, last, undated = recorded["first"], recorded["last"], recorded["undated"]
    span = "no date" if first is None else first if first == last else f"{first} to {last}"
    if undated:
        span += f"; {undated} undated"
    return span


def side_rows(side: Mapping[str, Any]) -> list[tuple[str, str]]:
    """One side's inputs as (name, value) pairs, values in plain words."""
    files = side["files"]
    named = ", ".join(clip(f, VALUE_WIDTH) for f in files[:LISTED]) if files else "none"
    if len(files) > LISTED:
        named += f" (+{len(files) - LISTED})"
    legacy = f" ({side['legacy_verdicts']} legacy)" if side["legacy_verdicts"] else ""
    return [
        ("files", named),
        ("cases", f"{side['cases']} ({side['verdicts']} verdicts{legacy})"),
        ("suites", facet_text(side["suites"])),
        ("agents", facet_text(side["agents"])),
        ("recorders", facet_text(side["recorders"], _recorder)),
        ("scoring", facet_text(side["scoring_policies"], _policy)),
        ("recorded", _dates(side["recorded"])),
    ]


def input_lines(inputs: Mapping[str, Any] | None) -> list[str]:
    """The text reports' first lines: the version, then each side, a line per field
    (recorded text as it is: the caller makes each line safe, a line break included)."""
    lines = [f"compared by {version_line()}"]
    if inputs is None:
        return [*lines, "inputs: not given"]
    for name in SIDES:
        rows = side_rows(inputs[name])
        lines.append(f"{name}: {rows[0][1]}; {rows[1][0]} {rows[1][1]}")
        lines.extend(f"  {key}: {value}" for key, value in rows[2:])
    return lines
