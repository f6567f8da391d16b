"""Judges: turn one step (in its context) into a step verdict.

Each judge is a :class:`~litmus_sandbox._core.scoring.Judge` (``label``, ``fingerprint``,
``describe()``, ``judge_step()``):

* ``rules`` - :class:`RulesJudge`, declarative rules from the policy file (pure logic, in
  ``litmus_sandbox._core.rules``);
* ``python`` - :class:`PythonJudge`, a function named in the policy file;
* ``openai`` - ``OpenAIJudge`` (``litmus_sandbox.judges._openai``), an OpenAI-compatible
  chat-completions endpoint over HTTP, asked concurrently through a session
  (:class:`SessionJudge`); a step it cannot judge raises :class:`JudgeFailure`.

:func:`judge_from_config` builds the one a decoded ``[judge]`` table names, and
:func:`load_policy` / :func:`config_from_document` a whole :class:`ScoringConfig`.
Secret parameters are kept out of what is written (``_secrets``).
"""

from __future__ import annotations

from litmus_sandbox._core.rules import RulesJudge as RulesJudge
from litmus_sandbox._core.scoring import Judge as Judge
from litmus_sandbox.judges._failure import FAILURE_CLASSES as FAILURE_CLASSES
from litmus_sandbox.judges._failure import JudgeFailure as JudgeFailure
from litmus_sandbox.judges._python import PythonJudge as PythonJudge
from litmus_sandbox.judges._scoring import ScoringConfig as ScoringConfig
from litmus_sandbox.judges._scoring import config_from_document as config_from_document
from litmus_sandbox.judges._scoring import config_from_mapping as config_from_mapping
from litmus_sandbox.judges._scoring import config_from_record as config_from_record
from litmus_sandbox.judges._scoring import judge_from_config as judge_from_config
from litmus_sandbox.judges._scoring import load_policy as load_policy
from litmus_sandbox.judges._secrets import is_secret_name as is_secret_name
from litmus_sandbox.judges._secrets import redact as redact
from litmus_sandbox.judges._session import JudgeCall as JudgeCall
from litmus_sandbox.judges._session import SessionJudge as SessionJudge
from litmus_sandbox.judges._session import is_session_judge as is_session_judge

__all__ = [
    "FAILURE_CLASSES",
    "Judge",
    "JudgeCall",
    "JudgeFailure",
    "PythonJudge",
    "RulesJudge",
    "ScoringConfig",
    "SessionJudge",
    "config_from_document",
    "config_from_mapping",
    "config_from_record",
    "is_secret_name",
    "is_session_judge",
    "judge_from_config",
    "load_policy",
    "redact",
]
