"""The state probe: snapshots a JSON-able object that holds a tool's world.

For tools whose world lives in memory (a database, a simulated inbox), pass a function that
returns the state; each call's effect is the state's hash before and after and the JSON
paths that changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from litmus_sandbox._model.codec import canonical_json
from litmus_sandbox._model.records import Effects

_to_builtins = msgspec.to_builtins


def changed_paths(before: Any, after: Any, path: str = "$") -> list[str]:
    """JSON paths (``$.a.b[2]``) where ``after`` differs from ``before``."""
    if type(before) is not type(after):
        return [path]
    if isinstance(before, dict):
        out: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            sub = f"{path}.{key}"
            if key not in before or key not in after:
                out.append(sub)
            else:
                out.extend(changed_paths(before[key], after[key], sub))
        return out
    if isinstance(before, list):
        out = []
        for i in range(max(len(before), len(after))):
            if i >= len(before) or i >= len(after):
                out.append(f"{path}[{i}]")
            else:
                out.extend(changed_paths(before[i], after[i], f"{path}[{i}]"))
        return out
    return [] if before == after else [path]


class StateProbe:
    """Observes a JSON-able state object returned by ``get_state()``."""

    #: In-memory state can be changed by any call in flight: overlapping calls make the
    #: sandbox record changes as unattributed rather than guess.
    exact_attribution = False

    def __init__(self, get_state: Callable[[], Any], *, name: str = "state") -> None:
        self.name = name
        self._get_state = get_state
        self._last: Any = None
        self._last_hash = ""
        self._between: list[dict[str, Any]] = []

    def _observe(self) -> tuple[Any, str]:
        state = _to_builtins(self._get_state())
        return state, hashlib.sha256(canonical_json(state)).hexdigest()

    def describe(self) -> dict[str, Any]:
        return {"kind": "state"}

    def _delta(self) -> Effects:
        state, digest = self._observe()
        if digest == self._last_hash:
            return Effects()
        change = {
            "probe": self.name,
            "before_sha256": self._last_hash,
            "after_sha256": digest,
            "changed": changed_paths(self._last, state),
        }
        self._last, self._last_hash = state, digest
        return Effects(state=(change,))

    async def start(self) -> None:
        self._last, self._last_hash = self._observe()
        self._between = []

    async def before_call(self, call_id: str) -> None:
        del call_id
        # A change made while no call was running belongs to nobody: keep it for finish().
        self._between.extend(self._delta().state)

    async def after_call(self, call_id: str) -> Effects:
        del call_id
        return self._delta()

    async def finish(self) -> Effects:
        between, self._between = self._between, []
        return Effects(state=(*between, *self._delta().state))

    async def close(self) -> None:
        return None
