"""AgentDojo as a workload: its suites run with every tool call recorded and policed.

Shipped as ``litmus_sandbox.adapters.agentdojo`` (the extra ``agentdojo``):

* ``litmus-sandbox run agentdojo --suite SUITE ... -o EPISODES.jsonl`` (``_cli.py``);
* :func:`run_case`, one (user task, injection task) case in Python (``_run.py``);
  :class:`SyncEmulator` answers the tools the policy emulates, for many cases
  (``_emulation.py``).

A runtime subclass (``_runtime.py``) sees every ``run_function`` call, applies the
policy's tool modes and observes the task environment's state; the episode joins the
pipeline's messages with those calls (``_episode.py``) and ends with AgentDojo's own
verdicts (``utility``, ``attack_success``, ``decided_by``). Names are resolved lazily:
importing this package loads no AgentDojo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from litmus_sandbox import _lazy_exports

if TYPE_CHECKING:
    from litmus_sandbox.adapters.agentdojo._emulation import SyncEmulator as SyncEmulator
    from litmus_sandbox.adapters.agentdojo._run import RECORDER_NAME as RECORDER_NAME
    from litmus_sandbox.adapters.agentdojo._run import CaseResult as CaseResult
    from litmus_sandbox.adapters.agentdojo._run import run_case as run_case
    from litmus_sandbox.adapters.agentdojo._runtime import LitmusRuntime as LitmusRuntime

_EXPORTS = {
    "CaseResult": "litmus_sandbox.adapters.agentdojo._run",
    "LitmusRuntime": "litmus_sandbox.adapters.agentdojo._runtime",
    "RECORDER_NAME": "litmus_sandbox.adapters.agentdojo._run",
    "SyncEmulator": "litmus_sandbox.adapters.agentdojo._emulation",
    "run_case": "litmus_sandbox.adapters.agentdojo._run",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__)
