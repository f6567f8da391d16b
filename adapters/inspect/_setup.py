"""How a sample was measured: the header's ``tool_modes`` and ``oracles``, from its events.

Theory of operation
-------------------
An Inspect run has no ``Sandbox`` to write a header; the parts litmus-sandbox puts in the
run say, in the sample's own transcript, how they measure it, each with an
``InfoEvent(source="litmus-sandbox")``:

- the ``litmus`` sandbox provider, when the sample's sandbox starts: ``{"litmus":
  {"setup": {"oracles": {"fs": ...}, "tool_modes": {"sandbox.exec": ...}}}}``, the
  filesystem probe's own description (as a ``Sandbox`` header has it) and, when it has a
  policy, the modes of the operations it can deny;
- the approver ``litmus_sandbox/policy``, once per sample on its first decision:
  ``{"litmus": {"setup": {"tool_modes": ...}}}``, its policy's modes (names, globs,
  ``default``), as a ``Sandbox`` header gives its policy's;
- ``litmus_tool``, on each call: ``{"litmus": {"mode": ...}}`` inside the tool's span, the
  mode it performed the call in.

The header's ``tool_modes`` merge them, then name each called tool by the mode its calls
were performed in, so the header never claims a mode nothing applied: a wrapped tool's
mode is the wrapper's; an unwrapped tool's is ``deny`` when every call was denied, else
``real``, since an approver only approves or rejects. A configured ``stub``, ``swallow`` or
``replay`` that nothing applied (the tool was not wrapped) is listed in the header's
``meta.inspect.modes_not_applied``. With no approver's policy, ``default`` is ``real``
(what Inspect does with a tool nothing wraps); a wrapped tool the sample never called is
then not known, and a change of its calls shows as ``fidelity_mismatch`` (fail closed).
A sample none of these parts saw keeps empty
``tool_modes`` and ``oracles``; the scorer then takes each tool's mode from its steps.
Nothing here does I/O: events in, facts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from inspect_ai.event import Event, InfoEvent

from litmus_sandbox._core.scoring import mode_for
from litmus_sandbox._model.records import Step, ToolCallStep

from ._steps import INFO_SOURCE

#: Modes an Inspect approver applies itself (it approves or rejects; nothing else).
_APPROVER_MODES = frozenset({"real", "deny"})


class Setup(NamedTuple):
    """What the header says of how the sample was measured."""

    tool_modes: dict[str, str]
    oracles: dict[str, Any]
    #: Called tool -> the configured mode nothing applied to its calls.
    not_applied: dict[str, str]
    #: The emulator's parameters (``EmulatorConfig.describe``), when a tool was emulated.
    emulator: dict[str, Any] | None = None


def _said(event: Event) -> dict[str, Any] | None:
    if not (isinstance(event, InfoEvent) and event.source == INFO_SOURCE):
        return None
    data = event.data.get("litmus") if isinstance(event.data, dict) else None
    return data if isinstance(data, dict) else None


def _modes(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def sample_setup(events: Sequence[Event], steps: Sequence[Step]) -> Setup:
    """The header's ``tool_modes`` and ``oracles`` for a sample's ``events`` and ``steps``."""
    configured: dict[str, str] = {}
    oracles: dict[str, Any] = {}
    wrapped: dict[str, str] = {}
    emulator: dict[str, Any] | None = None
    seen = False
    for event in events:
        said = _said(event)
        if said is None:
            continue
        setup = said.get("setup")
        if isinstance(setup, dict):
            seen = True
            for name, mode in _modes(setup.get("tool_modes")).items():
                configured.setdefault(name, mode)  # the first part to say it wins
            if isinstance(setup.get("oracles"), dict):
                for name, description in setup["oracles"].items():
                    oracles.setdefault(str(name), description)
            if emulator is None and isinstance(setup.get("emulator"), dict):
                emulator = setup["emulator"]
        tool = said.get("tool")
        if isinstance(said.get("mode"), str) and isinstance(tool, str):
            seen = True
            wrapped.setdefault(tool, said["mode"])
    if not seen:
        return Setup({}, {}, {})
    # Inspect runs a tool for real unless an approver rejects it or litmus_tool wraps it.
    configured.setdefault("default", "real")
    modes = dict(configured)
    not_applied: dict[str, str] = {}
    calls: dict[str, list[ToolCallStep]] = {}
    for step in steps:
        if isinstance(step, ToolCallStep):
            calls.setdefault(step.tool, []).append(step)
    for tool, made in sorted(calls.items()):
        if tool in wrapped:
            modes[tool] = wrapped[tool]
            continue
        applied = "deny" if all(s.fidelity == "denied" for s in made) else "real"
        wanted = mode_for(tool, configured)
        if wanted is not None and wanted not in _APPROVER_MODES:
            not_applied[tool] = wanted
        modes[tool] = applied
    return Setup(modes, oracles, not_applied, emulator)
