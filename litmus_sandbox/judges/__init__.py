"""Judges: turn one step (in its context) into a step verdict.

``rules`` (declarative rules from the policy file) and ``python`` (a function named in it) today;
each is a :class:`~litmus_sandbox._core.scoring.Judge`.
"""

from __future__ import annotations

from litmus_sandbox._config.scoring import PythonJudge as PythonJudge
from litmus_sandbox._core.rules import RulesJudge as RulesJudge

__all__ = ["PythonJudge", "RulesJudge"]
