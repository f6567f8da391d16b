"""Inspect AI: import its logs, record live evals, police and watch its tools.

Shipped as ``litmus_sandbox.adapters.inspect`` (the extra ``inspect``):

* ``litmus-sandbox import inspect LOG... -o EPISODES.jsonl`` (``_logs.py``, ``_cli.py``);
* an ``inspect_ai`` entry point named ``litmus_sandbox`` (``_registry.py``) registering the
  hooks ``litmus_sandbox/recorder`` (``_hooks.py``), the approver ``litmus_sandbox/policy``
  (``_approver.py``) and the sandbox provider ``litmus`` (``_sandbox.py``);
* :func:`litmus_tool`, the one line that puts a host-side tool under a litmus fidelity
  policy (``_tool.py``).

Steps come from a sample's events (``_steps.py``), one episode per sample and epoch
(``_episodes.py``). Names are resolved lazily: importing this package loads no Inspect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from litmus_sandbox import _lazy_exports

if TYPE_CHECKING:
    from litmus_sandbox.adapters.inspect._episodes import RECORDER_NAME as RECORDER_NAME
    from litmus_sandbox.adapters.inspect._episodes import sample_episode as sample_episode
    from litmus_sandbox.adapters.inspect._logs import import_logs as import_logs
    from litmus_sandbox.adapters.inspect._logs import log_samples as log_samples
    from litmus_sandbox.adapters.inspect._steps import INFO_SOURCE as INFO_SOURCE
    from litmus_sandbox.adapters.inspect._tool import litmus_tool as litmus_tool

_EXPORTS = {
    "INFO_SOURCE": "litmus_sandbox.adapters.inspect._steps",
    "RECORDER_NAME": "litmus_sandbox.adapters.inspect._episodes",
    "import_logs": "litmus_sandbox.adapters.inspect._logs",
    "litmus_tool": "litmus_sandbox.adapters.inspect._tool",
    "log_samples": "litmus_sandbox.adapters.inspect._logs",
    "sample_episode": "litmus_sandbox.adapters.inspect._episodes",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__)
