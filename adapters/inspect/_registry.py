"""The ``inspect_ai`` entry point named ``litmus_sandbox``: what it registers.

Inspect loads an entry point whose name equals a registry prefix the first time a name with
that prefix is looked up (``litmus_sandbox/recorder``, ``litmus_sandbox/policy``), and
every entry point when it starts its hooks or looks for a sandbox type it does not know
(``litmus``). Importing this module registers the hooks ``litmus_sandbox/recorder``, the
approver ``litmus_sandbox/policy`` and the sandbox provider ``litmus``; a task module never
imports litmus_sandbox.
"""

from __future__ import annotations

from ._approver import litmus_policy as litmus_policy
from ._hooks import LitmusRecorder as LitmusRecorder
from ._sandbox import LitmusSandboxEnvironment as LitmusSandboxEnvironment

__all__ = ["LitmusRecorder", "LitmusSandboxEnvironment", "litmus_policy"]
